/**
 * The consensus driver runs any replicated state machine over any transport: here a
 * state machine that only keeps a list of strings, and a transport with no other peer.
 * A founding peer elects itself, applies each proposal once and in order, answers the
 * machine's outcome, and after a restart replays the committed entries into a new
 * machine from its log.
 */

import test from 'ava';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';

import { ConsensusDriver } from '../../ts/consensus/driver';
import type { ReplicatedStateMachine } from '../../ts/consensus/machine';
import { PeerCallError, type PeerHandlers, type PeerTransport } from '../../ts/consensus/transport';
import type { ConfChange, PeerId } from '../../ts/consensus/types';
import { waitFor } from '../support/wait';

interface ListState {
  peers: Record<PeerId, string>;
  items: string[];
}

class ListMachine implements ReplicatedStateMachine {
  state: ListState = { peers: {}, items: [] };
  opened: { snapshotIndex: number; committed: number } | null = null;

  founding(peer: PeerId, uri: string): Uint8Array {
    return Buffer.from(JSON.stringify({ peers: { [peer]: uri }, items: [] } satisfies ListState));
  }
  async open(snapshot: Uint8Array, snapshotIndex: number, committed: number): Promise<void> {
    this.state = JSON.parse(Buffer.from(snapshot).toString()) as ListState;
    this.opened = { snapshotIndex, committed };
  }
  async installSnapshot(_index: number, snapshot: Uint8Array): Promise<unknown> {
    this.state = JSON.parse(Buffer.from(snapshot).toString()) as ListState;
    return undefined;
  }
  applyNormal(_index: number, data: Uint8Array): Promise<unknown> {
    this.state.items.push(Buffer.from(data).toString());
    return Promise.resolve(this.state.items.length);
  }
  applyConfChange(_index: number, change: ConfChange): Promise<unknown> {
    if (change.type === 'addLearner' && change.context) this.state.peers[change.peer] = change.context;
    return Promise.resolve(true);
  }
  applyNoop(): Promise<unknown> {
    return Promise.resolve(true);
  }
  encode(): Uint8Array {
    return Buffer.from(JSON.stringify(this.state));
  }
  peers(): Readonly<Record<PeerId, string>> {
    return this.state.peers;
  }
  idle(): Promise<void> {
    return Promise.resolve();
  }
  isIdle(): boolean {
    return true;
  }
}

/** No other peer: every call to one fails as unreachable. */
function alone(): PeerTransport {
  const unreachable = () => Promise.reject(new PeerCallError('unavailable', 'no other peer here'));
  return {
    serve: async () => 0,
    send: () => undefined,
    join: unreachable,
    propose: unreachable,
    snapshot: unreachable,
    whoIs: unreachable,
    waitApplied: async () => false,
    forget: () => undefined,
    sendFailures: () => ({}),
    close: async () => undefined,
  };
}

test('a founding peer applies proposals of a state machine it knows nothing of, once and in order, and replays them after a restart', async (t) => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-driver-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const start = (machine: ListMachine) =>
    ConsensusDriver.start({
      settings: { tick_period_ms: 10, compact_wal_entries: 128, bootstrap_timeout_sec: 1, max_message_queue_size: 16 },
      logger: pino({ level: 'silent' }),
      dir,
      peerId: '7',
      uri: 'http://127.0.0.1:1',
      bootstrap: null,
      machine,
      transport: alone(),
    });

  const first = new ListMachine();
  const driver = await start(first);
  await waitFor('a leader', () => driver.status().role === 'leader', undefined, 10);
  t.is(await driver.propose(Buffer.from('a'), 5000), 1);
  t.is(await driver.propose(Buffer.from('b'), 5000), 2);
  t.deepEqual(first.state.items, ['a', 'b']);
  t.deepEqual(driver.status().peers, { '7': 'http://127.0.0.1:1' });
  await driver.close();

  const second = new ListMachine();
  const again = await start(second);
  t.teardown(() => again.close());
  t.true(second.opened!.committed > second.opened!.snapshotIndex, 'entries after the snapshot are to be replayed');
  await waitFor('the replay', () => second.state.items.length === 2, undefined, 10);
  t.deepEqual(second.state.items, ['a', 'b']);
});

test("another peer's confirmation of an entry by its term (a self-removal's): an entry this peer did not apply itself is not confirmed, whatever term is asked", async (t) => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-driver-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  let handlers: PeerHandlers | null = null;
  const start = (machine: ListMachine) =>
    ConsensusDriver.start({
      settings: { tick_period_ms: 10, compact_wal_entries: 4, bootstrap_timeout_sec: 1, max_message_queue_size: 16 },
      logger: pino({ level: 'silent' }),
      dir,
      peerId: '7',
      uri: 'http://127.0.0.1:1',
      bootstrap: null,
      machine,
      transport: {
        ...alone(),
        serve: async (h) => {
          handlers = h;
          return 0;
        },
      },
    });

  const first = await start(new ListMachine());
  await waitFor('a leader', () => first.status().role === 'leader', undefined, 10);
  for (const item of ['a', 'b', 'c', 'd', 'e', 'f']) await first.propose(Buffer.from(item), 5000);
  const before = first.status();
  t.true(await handlers!.waitApplied(before.applied, 1000, before.term), 'an entry applied here, with its term');
  t.false(await handlers!.waitApplied(before.applied, 1000, before.term + 1), 'another term: another entry');
  await first.close();

  // After a restart the entries up to the persisted snapshot are not applied again: their terms are not known here.
  const again = await start(new ListMachine());
  t.teardown(() => again.close());
  await waitFor('a leader again', () => again.status().role === 'leader', undefined, 10);
  t.false(await handlers!.waitApplied(2, 1000, before.term + 1), 'an entry from before the snapshot, with a term it never had');
  t.false(await handlers!.waitApplied(2, 1000, before.term), 'nor with the term it had: this peer cannot tell');
  t.true(await handlers!.waitApplied(2, 1000, null), 'without a term: applied');
  await again.propose(Buffer.from('z'), 5000);
  const now = again.status();
  t.true(await handlers!.waitApplied(now.applied, 1000, now.term));
  t.false(await handlers!.waitApplied(now.applied, 1000, now.term - 1));
});
