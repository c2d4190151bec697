/**
 * The points service's Update on a peer whose replica the placement applied there has
 * Dead (ts/api/p2p/points.ts, ReplicaSet.receive), over a real gRPC server, the peers'
 * client and a real local shard: a coordinator whose placement is behind (it has not
 * applied the Dead mark yet) sends a replicated write, which the Dead replica refuses as
 * its own fault (so the coordinator marks it and resends to the placement it then has).
 * Before the fix the replica applied it above the write it had missed, and its clocks'
 * high-water mark passed that write: the wal_delta recovery that brings it back starts
 * from that mark and never sends it.
 *
 * The states that take ordinary writes still do: Active, Partial (a transfer's target,
 * which gets the writes its source forwards after the copy this way), Listener, and a
 * replica the placement no longer lists (a move's source during its forwarding grace).
 */

import * as grpc from '@grpc/grpc-js';
import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import { addPointsService, PointsClients, RemoteReplica, type PointsBackend } from '../../ts/api/p2p/points';
import type { ShardTarget } from '../../ts/collection/cluster-link';
import { LocalReplica } from '../../ts/collection/local-replica';
import { isReplicaFault } from '../../ts/collection/read-consistency';
import type { UpdateOptions } from '../../ts/collection/replica';
import type { ReplicaOperation } from '../../ts/collection/replica-operation';
import { ReplicaSet } from '../../ts/collection/replica-set';
import type { ReplicaState } from '../../ts/collection/replica-state';
import { QuiverError } from '../../ts/common/errors';
import { REPLICATED_CLOCK_BASE } from '../../ts/shard/clocks';
import { normalizePointId } from '../../ts/shard/id-tracker';
import { LocalShard } from '../../ts/shard/local-shard';
import { testSpec } from '../shard/spec';

const logger = pino({ level: 'silent' });
const engine = loadEngine({ logger });
const SHARD: ShardTarget = { collection: 'c', uuid: 'u', shard: 0 };
const WAIT: UpdateOptions = { wait: true, ordering: 'weak', timeout: null };
/** A clock of the coordinator, peer 1. */
const CLOCK = REPLICATED_CLOCK_BASE;

const upsert = (id: number): ReplicaOperation => ({ kind: 'upsert', points: [{ id: normalizePointId(id), vectors: new Map([['', Float32Array.from([1, 2, 3, 4])]]), payload: null }] });

/** Peer 2 serving the points service for its replica of shard 0 of `c`; the coordinator's view of that replica over the peers' client. */
async function peer2(t: ExecutionContext): Promise<{ set: ReplicaSet; shard: LocalShard; remote: RemoteReplica }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-p2p-dead-'));
  const shard = await LocalShard.open({ dir, engine, vectors: [testSpec(4)], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes: {}, logger });
  const set = new ReplicaSet(0, 'c', '2', [new LocalReplica('2', shard)], { '1': 'Active', '2': 'Active' });
  const collection = { meta: { cluster: { uuid: 'u', transfers: [] } }, replicaSets: () => [set] };
  const backend = { toc: { peek: (name: string) => (name === 'c' ? collection : undefined) }, peer: '2', settled: async () => undefined, status: () => ({}) } as unknown as PointsBackend;
  const server = new grpc.Server();
  addPointsService(server, backend, logger);
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  const clients = new PointsClients({ poolSize: 1, callTimeoutMs: 10_000, tls: null });
  t.teardown(async () => {
    clients.close();
    server.forceShutdown();
    await shard.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { set, shard, remote: new RemoteReplica('2', SHARD, clients, () => `http://127.0.0.1:${port}`) };
}

test('a replica the placement applied here has Dead refuses a replicated write as its own fault, and applies nothing', async (t) => {
  const { set, shard, remote } = await peer2(t);
  await remote.update(upsert(1), WAIT, { peer: 1n, clock: CLOCK, tick: 1n });
  t.is(shard.clockTick(1n, CLOCK), 1n);
  // It misses tick 2 (its peer was down), is marked Dead, and is back before the coordinator applied the mark.
  set.setStates({ '1': 'Active', '2': 'Dead' }, '2');
  const err = await t.throwsAsync(remote.update(upsert(3), WAIT, { peer: 1n, clock: CLOCK, tick: 3n }));
  t.true(err instanceof QuiverError && err.kind === 'shard_unavailable', String(err));
  t.true(isReplicaFault(err), 'the coordinator must take the refusal as the replica\'s fault (mark it, resend to its new placement)');
  t.regex(err!.message, /replica of shard 0 of collection `c` on peer 2 is Dead/);
  t.is(shard.clockTick(1n, CLOCK), 1n, 'no tick above the missed one');
  t.is(shard.pointCount, 1);
});

for (const state of ['Active', 'Partial', 'Listener', undefined] as Array<ReplicaState | undefined>) {
  test(`a replica that is ${state ?? 'no longer listed (a move\'s source)'} in the placement applied here takes replicated writes`, async (t) => {
    const { set, shard, remote } = await peer2(t);
    set.setStates(state === undefined ? { '1': 'Active' } : { '1': 'Active', '2': state }, '2', state === 'Partial' ? ['2'] : []);
    await remote.update(upsert(1), WAIT, { peer: 1n, clock: CLOCK, tick: 1n });
    t.is(shard.clockTick(1n, CLOCK), 1n);
    t.is(shard.pointCount, 1);
  });
}
