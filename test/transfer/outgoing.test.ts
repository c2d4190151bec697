/**
 * The source side of a transfer (ts/transfer/outgoing.ts) over a real local shard and a
 * fake target and consensus: the end of a transfer against a write forwarded at that
 * moment.
 */

import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import { LocalReplica } from '../../ts/collection/local-replica';
import { ShardUnavailableError } from '../../ts/common/errors';
import { normalizePointId } from '../../ts/shard/id-tracker';
import { LocalShard } from '../../ts/shard/local-shard';
import type { MetaOp } from '../../ts/storage/cluster-state';
import { OutgoingTransfers, type TransferTarget } from '../../ts/transfer/outgoing';
import { RateLimiter } from '../../ts/transfer/rate';
import { testSpec } from '../shard/spec';
import { waitFor } from '../support/wait';

const logger = pino({ level: 'silent' });
const engine = loadEngine({ logger });
const DIM = 4;

function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

/** The source's replica: a local shard in a temporary folder, closed and removed after the test. */
async function sourceReplica(t: ExecutionContext): Promise<LocalReplica> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-outgoing-'));
  const shard = await LocalShard.open({ dir, engine, vectors: [testSpec(DIM)], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes: {}, logger });
  t.teardown(async () => {
    await shard.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return new LocalReplica('1', shard);
}

test('a write forwarded as the copy ends, whose forward then fails, aborts the transfer: the finish is never proposed over it', async (t) => {
  // Found by bench:faults --mode transfer-kill: the target of a snapshot move was killed
  // while the source proposed the finish; writes the source applied meanwhile were
  // acknowledged though their forward failed, the finish made the target the only
  // replica, and those points were gone.
  const source = await sourceReplica(t);

  const copyEnd = gate(); // the last (durable) replay of the copy has reached the target
  const releaseCopyEnd = gate();
  const forwardSeen = gate();
  const forwardFails = gate();
  const target: TransferTarget = {
    ready: async () => true,
    clocks: async () => [],
    pullSnapshot: async () => 1,
    indexBacklog: async () => 0,
    copy: async () => undefined,
    batch: async () => undefined,
    replay: async (_ops, end) => {
      if (!end.wait) return;
      copyEnd.open();
      await releaseCopyEnd.promise;
    },
    // A write forwarded after the copy: the target died meanwhile.
    deliver: async () => {
      forwardSeen.open();
      await forwardFails.promise;
      throw new ShardUnavailableError('peer 2 cannot be reached: connection refused');
    },
  };
  const proposals: MetaOp[] = [];
  const out = new OutgoingTransfers({ peer: '1', remote: () => target, propose: async (op) => void proposals.push(op), rate: new RateLimiter(null), logger });

  out.start({ collection: 'c', uuid: 'u', shard: 0 }, '2', source, 'snapshot', 't1');
  await copyEnd.promise;
  // A client write on the source as the copy ends: it waits for the copy's last step, then is forwarded.
  const write = source.update(
    { kind: 'upsert', points: [{ id: normalizePointId(7), vectors: new Map([['', Float32Array.from([1, 2, 3, 4])]]), payload: null }] },
    { wait: true, ordering: 'weak', timeout: null },
    { peer: 9n, clock: 0, tick: 1n },
  );
  releaseCopyEnd.open();
  await forwardSeen.promise;
  forwardFails.open();
  await write;
  const end = await waitFor('the transfer ends in consensus', () => proposals.find((p) => p.op === 'finishTransfer'));
  t.like(end, { op: 'finishTransfer', ok: false }, 'the transfer must be aborted, not finished, when a forwarded write failed');
  t.false(
    proposals.some((p) => p.op === 'finishTransfer' && p.ok),
    JSON.stringify(proposals),
  );
  out.stopAll();
});

test('after a finished transfer, a forward that fails takes the target out, and no later write is forwarded to it during the grace', async (t) => {
  // Found by bench:faults --cycles 40 --seed 7 (a regression of 9f1b684): a target
  // restarted within the source's forwarding grace missed a write, was marked Dead, then
  // got the later forwards once it was back; the gap under its clocks' high-water mark
  // made the next wal_delta recovery skip the missed write.
  const source = await sourceReplica(t);
  const delivered: number[] = [];
  let failNext = true;
  const target: TransferTarget = {
    ready: async () => true,
    clocks: async () => [],
    pullSnapshot: async () => 1,
    indexBacklog: async () => 0,
    copy: async () => undefined,
    batch: async () => undefined,
    replay: async () => undefined,
    deliver: async (op) => {
      delivered.push(Number((op as { points: Array<{ id: { value: bigint } }> }).points[0].id.value));
      if (failNext) {
        failNext = false;
        throw new ShardUnavailableError('peer 2 cannot be reached: the connection closed');
      }
    },
  };
  const proposals: MetaOp[] = [];
  const deadCommitted = gate();
  const out = new OutgoingTransfers({
    peer: '1',
    remote: () => target,
    rate: new RateLimiter(null),
    logger,
    propose: async (op) => {
      proposals.push(op);
      if (op.op === 'finishTransfer') return op.ok; // the finish commits; an abort after it does not (already finished)
      if (op.op === 'setReplicaState') {
        deadCommitted.open();
        return true;
      }
      return true;
    },
  });
  t.teardown(() => out.stopAll());
  out.start({ collection: 'c', uuid: 'u', shard: 0 }, '2', source, 'snapshot', 't1');
  await waitFor('the transfer finished (its grace running)', () => proposals.some((p) => p.op === 'finishTransfer' && p.ok));
  const write = (id: number) =>
    source.update(
      { kind: 'upsert', points: [{ id: normalizePointId(id), vectors: new Map([['', Float32Array.from([1, 2, 3, 4])]]), payload: null }] },
      { wait: true, ordering: 'weak', timeout: null },
      { peer: 9n, clock: 0, tick: BigInt(id) },
    );
  await write(1); // its forward fails: the target is taken out before it is answered
  t.true(proposals.some((p) => p.op === 'setReplicaState' && p.state === 'Dead'), JSON.stringify(proposals));
  await deadCommitted.promise;
  await write(2);
  await write(3);
  t.deepEqual(delivered, [1], 'no write is forwarded to the target after a forward to it failed');
});
