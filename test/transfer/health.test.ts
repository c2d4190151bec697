/**
 * Health checks between peers (ts/transfer/health.ts): a peer is down after three failed
 * checks in a row, and a check passes only when the answer comes from that peer. Another
 * process at its address (a restarted pod given another peer's address) answering as
 * some other peer is a failed check.
 */

import test, { type ExecutionContext } from 'ava';
import pino from 'pino';

import { OtherPeerError, PeerHealth, probeIdentity } from '../../ts/transfer/health';
import { waitFor } from '../support/wait';

/** This peer (1) checking peer 2 at http://b through `whoIs`, started; `downs` records each onDown call. */
function started(t: ExecutionContext, whoIs: (uri: string) => Promise<{ peerId: string }>) {
  const downs: Array<[string, string, string]> = [];
  const health = new PeerHealth({
    peers: () => ({ '1': 'http://a', '2': 'http://b' }),
    self: '1',
    probe: (peer, uri, timeoutMs) => probeIdentity(whoIs, peer, uri, timeoutMs),
    onDown: (peer, uri, why) => downs.push([peer, uri, why]),
    logger: pino({ level: 'silent' }),
  });
  health.start();
  t.teardown(() => health.stop());
  return { health, downs };
}

test('a WhoIs answer naming another peer is a failed check', async (t) => {
  const whoIs = async (uri: string) => ({ peerId: uri === 'http://b' ? '2' : '3', uri });
  await t.notThrowsAsync(probeIdentity(whoIs, '2', 'http://b', 100));
  await t.throwsAsync(probeIdentity(whoIs, '2', 'http://c', 100), { instanceOf: OtherPeerError, message: 'http://c answers as peer 3, not as peer 2' });
  await t.throwsAsync(probeIdentity(async () => Promise.reject(new Error('unavailable')), '2', 'http://b', 100), { message: 'unavailable' });
});

test('a peer whose address answers as another peer goes down; its own answer brings it back', async (t) => {
  // Peer 2's address answers as peer 3 until `back` is set.
  let back = false;
  const whoIs = async (uri: string) => ({ peerId: back ? '2' : '3', uri });
  const { health, downs } = started(t, whoIs);
  await waitFor('peer 2 down', () => !health.alive('2'));
  // Told why: the address answers, as another peer (whose calls there must not be cancelled).
  t.deepEqual(downs[0], ['2', 'http://b', 'other-peer']);
  t.true(health.alive('1'), 'this peer is never checked');
  back = true;
  await waitFor('peer 2 up again', () => health.alive('2'));
  t.is(health.downFor('2'), 0);
});

test('an unreachable peer goes down as unreachable', async (t) => {
  const { health, downs } = started(t, async () => Promise.reject(new Error('connection refused')));
  await waitFor('peer 2 down', () => !health.alive('2'));
  t.deepEqual(downs[0], ['2', 'http://b', 'unreachable']);
});
