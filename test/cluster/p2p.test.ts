/**
 * A failure between peers keeps its reason across the wire: what a handler throws as a
 * PeerCallError reaches the calling peer as a PeerCallError with the same reason
 * (through the gRPC status code of ts/api/p2p/grpc.ts); anything else a handler throws
 * is internal; a call past its deadline is a timeout and a peer nobody answers for is
 * unavailable.
 */

import test from 'ava';
import pino from 'pino';

import { P2PServer, PeerClients } from '../../ts/api/p2p/grpc';
import { PeerCallError, type PeerCallReason, type PeerHandlers } from '../../ts/consensus/transport';
import { freePort } from '../api/helpers';

const handlers: PeerHandlers = {
  onMessage: () => undefined,
  join: async (req) => {
    throw new PeerCallError('invalid_argument', `peer id ${req.peerId} is not a number`);
  },
  propose: async (operation) => {
    const what = Buffer.from(operation).toString();
    if (what === 'slow') return new Promise(() => undefined);
    throw new PeerCallError(what as PeerCallReason, `refused: ${what}`);
  },
  snapshot: async () => {
    throw new Error('a bug');
  },
  whoIs: () => ({ peerId: '1', uri: 'http://127.0.0.1:1' }),
  waitApplied: async () => true,
};

async function reasonOf(call: Promise<unknown>): Promise<[PeerCallReason, string]> {
  try {
    await call;
  } catch (err) {
    if (err instanceof PeerCallError) return [err.reason, err.message];
    throw err;
  }
  throw new Error('the call succeeded');
}

test('a refusal keeps its reason from one peer to the other; a timeout and an unreachable peer have theirs', async (t) => {
  const server = await P2PServer.start('127.0.0.1', 0, handlers, pino({ level: 'silent' }));
  const clients = new PeerClients({ callTimeoutMs: 2000, connectTimeoutMs: 1000, messageTimeoutMs: 1000, maxInFlight: 4 });
  t.teardown(async () => {
    clients.close();
    await server.close();
  });
  const uri = `http://127.0.0.1:${server.port}`;

  t.deepEqual(await clients.whoIs(uri), { peerId: '1', uri: 'http://127.0.0.1:1' });
  for (const reason of ['invalid_argument', 'unavailable', 'not_leader', 'internal'] as const) {
    const [got, message] = await reasonOf(clients.propose(uri, Buffer.from(reason), false));
    t.is(got, reason);
    t.is(message, `${uri}: refused: ${reason}`);
  }
  t.is((await reasonOf(clients.join(uri, { peerId: 'x', uri: '', port: 0 })))[0], 'invalid_argument');
  t.deepEqual(await reasonOf(clients.snapshot(uri)), ['internal', `${uri}: a bug`]);
  t.is((await reasonOf(clients.propose(uri, Buffer.from('slow'), false, 200)))[0], 'timeout');
  t.is((await reasonOf(clients.whoIs(`http://127.0.0.1:${await freePort()}`, 2000)))[0], 'unavailable');
});
