/**
 * Shard transfers, the source's side. The source replica forwards every write it applies
 * to the target, in the order it applies them; what comes before those writes depends on
 * the method:
 *
 * - `stream_records`: the target starts empty; the source streams its points in id
 *   order, each batch read and sent between two forwarded writes (under the source's
 *   write lock). Before the finish, the target's indexing must be keeping up.
 * - `wal_delta`: the target keeps its replica; the source sends the operations of its
 *   WAL that the target's clock map says it lacks, then the writes it queued meanwhile.
 *   When the WAL cannot prove it holds the difference (dropped segments, a target ahead
 *   on some clock), the transfer switches to `stream_records` through consensus.
 * - `snapshot`: the target fetches a snapshot of the source's shard (files, indexes and
 *   all) and replaces its replica with it; then the source sends the writes it queued.
 *
 * Owns: one transfer's run (wait until the target has applied the transfer's start, copy,
 * finish or abort through consensus), the forwarding sink with its queue, and the
 * figures of the transfers running here. Must never: choose which transfers run
 * (consensus does, see supervisor.ts) or pick replicas for client requests.
 *
 * Why nothing is lost or reordered: the target gets writes from no one but the source
 * while the transfer runs (ReplicaSet leaves it out of writers). Every write the source
 * applies after `forwardTo` is forwarded, in the source's order. Until the copy is
 * done, forwarded writes wait in a queue (writes go on meanwhile); they are sent after
 * the copy, which covers every operation up to the moment the sink was set (a WAL
 * delta reads history at least that far; a snapshot or a batch is taken later). A write
 * both in the copy and in the queue is skipped by the target the second time (its clock
 * tag was seen). stream_records drops the queue instead: every queued write is already
 * in the points the batches read later.
 */

import type { Logger } from 'pino';

import type { ShardTarget, TransferMethod } from '../collection/cluster-link';
import type { ForwardSink, LocalReplica } from '../collection/local-replica';
import type { Replica, UpdateOptions } from '../collection/replica';
import { fromShardOperation, type ReplicaOperation } from '../collection/replica-operation';
import type { ClockTag } from '../shard/clocks';
import { compareKeys, type PointKey } from '../shard/id-tracker';
import { HistoryGoneError } from '../shard/local-shard';
import type { PointWrite } from '../shard/operations';
import type { MetaOp } from '../storage/cluster-state';
import { waitUntil } from './wait';

/** One operation of a WAL delta or of the queue, with its clock tag. */
export interface TaggedOperation {
  op: ReplicaOperation;
  tag: ClockTag;
}

/** The target of a transfer as the source reaches it. */
export interface TransferTarget extends Replica {
  /** Whether the target applied the start of the transfer from `from` with `method` (for stream_records: its replica emptied). */
  transferReady(from: string, method: TransferMethod, timeoutMs: number): Promise<boolean>;
  /** The target replica's clock map: the highest tick it applied per (peer, clock). */
  clocks(): Promise<ClockTag[]>;
  /** Applies these operations in order (each skipped if its tag was seen); `wait`: durable when it resolves. */
  replay(ops: readonly TaggedOperation[], wait: boolean): Promise<void>;
  /** The target fetches a snapshot of `from`'s replica of the shard and replaces its own with it; resolves with the archive's size in bytes. */
  pullSnapshot(from: string): Promise<number>;
  /** Vectors the target has yet to index beyond its indexing threshold. */
  indexBacklog(): Promise<number>;
}

export interface TransferContext {
  /** This peer's id. */
  peer: string;
  remote(target: ShardTarget, peer: string): TransferTarget;
  propose(op: MetaOp, timeoutMs: number): Promise<unknown>;
  logger: Logger;
}

/** Points per batch (stream_records), operations per replay call (wal_delta, the queue). */
const BATCH = 256;
/** How long the target may take to apply the transfer's start. */
const READY_TIMEOUT_MS = 30_000;
const PROPOSE_TIMEOUT_MS = 30_000;
/** How long the source keeps forwarding after the finish. */
const FORWARD_GRACE_MS = 3_000;
/** Queued writes beyond this many bytes (encoded estimate) fail the transfer: the copy is too slow for the write rate. */
const QUEUE_LIMIT_BYTES = 512 * 1024 * 1024;
/** Queued writes sent outside the write lock until this few are left; the rest go under it. */
const QUEUE_TAIL = 64;
/** The target keeps up with indexing when at most this many vectors, or this share of the shard, wait to be indexed. */
const INDEX_LAG_VECTORS = 10_000;
const INDEX_LAG_SHARE = 0.05;
const INDEX_POLL_MS = 500;

/** Progress of one transfer, for the API, logs and metrics. */
export interface TransferProgress {
  collection: string;
  shard: number;
  from: string;
  to: string;
  method: TransferMethod;
  /** What the run does now: `copying`, `queue` (sending writes queued during the copy), `indexing` (waiting for the target's index), `finishing`. */
  stage: 'copying' | 'queue' | 'indexing' | 'finishing';
  /** Units sent of the total: points (stream_records, snapshot), operations (wal_delta). */
  pointsSent: number;
  pointsTotal: number;
  /** Bytes of the snapshot archive (snapshot), else 0. */
  bytesSent: number;
  startedAt: number;
}

/** Transfers this peer drove to their end, by method and outcome (metrics). */
export interface TransferOutcomes {
  finished: Record<string, number>;
  failed: Record<string, number>;
  /** wal_delta transfers that went on as stream_records. */
  switched: number;
}

/** A rough size of an operation, to bound the queue. */
function sizeOf(op: ReplicaOperation): number {
  if (op.kind === 'upsert' || op.kind === 'update_vectors') {
    let n = 64;
    for (const p of op.points) {
      n += 64;
      for (const v of Object.values(p.vectors ?? {})) n += (v as ArrayLike<number>).length * 4;
      if ('payload' in p && p.payload) n += JSON.stringify(p.payload).length;
    }
    return n;
  }
  return 64 + JSON.stringify(op).length;
}

class Run {
  private stopped = false;
  /** Finished or aborted in consensus: only the forwarding grace may still run; a new transfer of the same shard to the same peer replaces this run. */
  ended = false;
  /** The finish is proposed: the transfer's end in consensus is this run's own, and forwarding goes on until the run lets go. */
  private finishing = false;
  private failure: unknown = null;
  /** Forwarded writes waiting for the copy to end (null once they go straight to the target). */
  private queue: TaggedOperation[] | null = [];
  private queueBytes = 0;
  readonly progress: TransferProgress;

  constructor(
    private readonly ctx: TransferContext,
    private readonly target: ShardTarget,
    private readonly to: string,
    private readonly source: LocalReplica,
    method: TransferMethod,
    private readonly outcomes: TransferOutcomes,
  ) {
    this.progress = { collection: target.collection, shard: target.shard, from: ctx.peer, to, method, stage: 'copying', pointsSent: 0, pointsTotal: source.shard.pointCount, bytesSent: 0, startedAt: Date.now() };
  }

  /** The transfer ended in consensus; unless this run finished it, it stops now. */
  stop(): void {
    if (this.finishing) return;
    this.stopped = true;
  }

  private get halted(): boolean {
    return this.stopped || this.failure !== null;
  }

  async run(): Promise<void> {
    const log = this.ctx.logger.child({ collection: this.target.collection, shard: this.target.shard, to: this.to });
    const remote = this.ctx.remote(this.target, this.to);
    const sink: ForwardSink = {
      forward: async (op: ReplicaOperation, opts: UpdateOptions, tag) => {
        if (this.halted) return;
        if (this.queue !== null) {
          if (tag === null) {
            this.failure ??= new Error('an untagged write reached the source of a transfer: it cannot be queued');
            return;
          }
          this.queue.push({ op, tag });
          this.queueBytes += sizeOf(op);
          if (this.queueBytes > QUEUE_LIMIT_BYTES) this.failure ??= new Error(`writes queued during the copy passed ${QUEUE_LIMIT_BYTES / 1048576} MiB: the copy does not keep up with the write rate`);
          return;
        }
        try {
          await remote.update(op, { ...opts, ordering: 'weak' }, tag ?? undefined);
        } catch (err) {
          this.failure ??= err;
        }
      },
    };
    // Every operation after `since` is queued (or forwarded) from now on.
    const since = await this.source.forwardTo(sink);
    let ok = false;
    try {
      log.info({ points: this.progress.pointsTotal, method: this.progress.method }, `shard transfer started (${this.progress.method})`);
      await this.ready(remote, this.progress.method);
      if (this.progress.method === 'wal_delta' && !(await this.delta(remote, since, log))) {
        if (this.halted) return this.rethrow();
        log.info('wal_delta cannot resolve the difference from the WAL: switching the transfer to stream_records');
        await this.ctx.propose({ op: 'switchTransfer', collection: this.target.collection, shard: this.target.shard, from: this.ctx.peer, to: this.to, method: 'stream_records' }, PROPOSE_TIMEOUT_MS);
        this.progress.method = 'stream_records';
        this.progress.pointsSent = 0;
        this.outcomes.switched++;
        await this.ready(remote, 'stream_records');
      }
      if (this.progress.method === 'stream_records') {
        await this.source.exclusive(async () => {
          this.queue = null;
          this.queueBytes = 0;
        });
        await this.stream(remote, log);
        this.rethrow();
        await this.keepingUp(remote, log);
      } else if (this.progress.method === 'snapshot') {
        const t0 = Date.now();
        this.progress.bytesSent = await remote.pullSnapshot(this.ctx.peer);
        this.progress.pointsSent = this.progress.pointsTotal;
        log.info({ bytes: this.progress.bytesSent, ms: Date.now() - t0, queued: this.queue?.length ?? 0 }, 'shard snapshot restored on the target');
        this.rethrow();
        await this.drain(remote);
      }
      if (this.stopped) return;
      this.rethrow();
      this.finishing = true;
      this.progress.stage = 'finishing';
      // Under the write lock: a forward that failed while the finish was being committed
      // (the target died meanwhile) would leave an acknowledged write off a target that
      // the finish makes Active, the only replica after a move. No write is applied here
      // until the finish is committed, and one whose forward failed before aborts instead.
      await this.source.exclusive(async () => {
        this.rethrow();
        await this.ctx.propose({ op: 'finishTransfer', collection: this.target.collection, shard: this.target.shard, from: this.ctx.peer, to: this.to, ok: true }, PROPOSE_TIMEOUT_MS);
      });
      ok = true;
      this.ended = true;
      this.outcomes.finished[this.progress.method] = (this.outcomes.finished[this.progress.method] ?? 0) + 1;
      log.info({ method: this.progress.method, sent: this.progress.pointsSent, bytes: this.progress.bytesSent, ms: Date.now() - this.progress.startedAt }, 'shard transfer finished');
    } catch (err) {
      this.finishing = false;
      if (!this.stopped) log.warn({ err }, 'shard transfer failed: aborting it');
      this.outcomes.failed[this.progress.method] = (this.outcomes.failed[this.progress.method] ?? 0) + 1;
    } finally {
      this.queue = null;
      if (!ok && !this.stopped) {
        await this.ctx
          .propose({ op: 'finishTransfer', collection: this.target.collection, shard: this.target.shard, from: this.ctx.peer, to: this.to, ok: false }, PROPOSE_TIMEOUT_MS)
          .catch((err: unknown) => log.warn({ err }, 'could not abort the shard transfer through consensus (the leader aborts it when it sees a peer down)'));
      }
      // Forwarding ends only now, and a while after a finish: until every peer applied the
      // finish, some still send their writes to the source alone (consensus waits up to a
      // second for the other peers; a peer slower than the grace resends a write whose
      // placement changed under it, see ReplicaSet.replicate).
      this.ended = true;
      if (ok) await new Promise((r) => setTimeout(r, FORWARD_GRACE_MS));
      await this.source.stopForwarding(sink);
    }
  }

  private rethrow(): void {
    if (this.failure !== null) throw this.failure;
  }

  private async ready(remote: TransferTarget, method: TransferMethod): Promise<void> {
    await waitUntil(() => remote.transferReady(this.ctx.peer, method, 2000).catch(() => false), READY_TIMEOUT_MS, () => this.stopped, 'the target did not apply the start of the transfer');
  }

  /**
   * wal_delta: sends what the target lacks from this replica's WAL, then the queue.
   * False (nothing sent that matters) when the WAL cannot prove it holds the difference.
   */
  private async delta(remote: TransferTarget, since: bigint, log: Logger): Promise<boolean> {
    const shard = this.source.shard;
    const theirs = await remote.clocks();
    // A target ahead of this replica on some clock holds operations this one lacks: only a full copy makes them equal.
    for (const t of theirs) {
      if (shard.clockTick(t.peer, t.clock) < t.tick) {
        log.info({ peer: t.peer.toString(), clock: t.clock, theirs: t.tick.toString() }, 'the target has operations this replica lacks');
        return false;
      }
    }
    const start = await shard.historyStartFor(theirs);
    if (start === null) return false;
    // Operations start .. since are sent from the WAL; later ones are in the queue.
    this.progress.pointsTotal = Number(since >= start ? since - start + 1n : 0n);
    log.info({ from: start.toString(), to: since.toString(), operations: this.progress.pointsTotal }, 'wal_delta: sending the operations the target lacks');
    for (let at = start; at <= since; ) {
      if (this.halted) return true;
      let records;
      try {
        records = await shard.readHistory(at, BATCH);
      } catch (err) {
        if (err instanceof HistoryGoneError) return false;
        throw err;
      }
      const batch: TaggedOperation[] = [];
      for (const r of records) {
        if (r.seq > since) break;
        if (r.tag === null) return false;
        batch.push({ op: fromShardOperation(r.op), tag: r.tag });
      }
      if (batch.length === 0) break;
      await remote.replay(batch, false);
      this.progress.pointsSent += batch.length;
      at = records[batch.length - 1].seq + 1n;
    }
    await this.drain(remote);
    return true;
  }

  /** Sends the queued writes in order; the last few under the write lock, after which writes go straight to the target. */
  private async drain(remote: TransferTarget): Promise<void> {
    this.progress.stage = 'queue';
    const take = async (all: boolean) => {
      while (this.queue !== null && this.queue.length > (all ? 0 : QUEUE_TAIL)) {
        this.rethrow();
        const batch = this.queue.splice(0, BATCH);
        for (const b of batch) this.queueBytes -= sizeOf(b.op);
        await remote.replay(batch, false);
      }
    };
    await take(false);
    await this.source.exclusive(async () => {
      await take(true);
      this.queue = null;
      this.queueBytes = 0;
      // Durable on the target before the transfer can finish.
      await remote.replay([], true);
    });
  }

  /** Sends every point in id order, a batch at a time, each under the source's write lock; the last batch is durable on the target. */
  private async stream(remote: TransferTarget, log: Logger): Promise<void> {
    let cursor: PointKey | null = null;
    let batches = 0;
    this.progress.pointsTotal = this.source.shard.pointCount;
    for (;;) {
      if (this.halted) return;
      const done = await this.source.exclusive(async () => {
        const shard = this.source.shard;
        const found = shard.scroll(cursor, BATCH + 1, null, compareKeys);
        const page = found.slice(0, BATCH);
        const names = [...shard.vectors.keys()];
        const points: PointWrite[] = [];
        for (const p of page) {
          const payload = shard.payloadOf(p.offset);
          points.push({ id: p.key, vectors: await shard.vectorsOf(p.offset, names), payload: payload === null ? null : (structuredClone(payload) as PointWrite['payload']) });
        }
        const last = found.length <= BATCH;
        await remote.update({ kind: 'upsert', points }, { wait: last, ordering: 'weak', timeout: null });
        this.progress.pointsSent += points.length;
        this.progress.pointsTotal = Math.max(this.progress.pointsTotal, this.progress.pointsSent);
        cursor = last ? null : found[BATCH].key;
        return last;
      });
      batches++;
      if (batches % 100 === 0) log.info({ sent: this.progress.pointsSent, total: this.progress.pointsTotal }, 'shard transfer progress');
      if (done) return;
    }
  }

  /** stream_records: the target re-indexes what it received; the transfer finishes once its indexing keeps up. */
  private async keepingUp(remote: TransferTarget, log: Logger): Promise<void> {
    this.progress.stage = 'indexing';
    const limit = Math.max(INDEX_LAG_VECTORS, Math.ceil(this.progress.pointsTotal * INDEX_LAG_SHARE));
    let logged = 0;
    for (;;) {
      if (this.halted) return;
      const backlog = await remote.indexBacklog();
      if (backlog <= limit) return;
      if (Date.now() - logged > 5000) {
        log.info({ backlog, limit }, 'shard transfer: waiting for the target to index what it received');
        logged = Date.now();
      }
      await new Promise((r) => setTimeout(r, INDEX_POLL_MS));
    }
  }
}

/** The transfers this peer is the source of. */
export class OutgoingTransfers {
  private readonly runs = new Map<string, Run>();
  /** Aborts of orphaned transfers in flight. */
  private readonly abandoning = new Set<string>();
  readonly outcomes: TransferOutcomes = { finished: {}, failed: {}, switched: 0 };

  constructor(private readonly ctx: TransferContext) {}

  private key(target: ShardTarget, to: string): string {
    return `${target.collection}/${target.uuid}/${target.shard}/${to}`;
  }

  /**
   * Starts the transfer unless it runs already (called again for transfers this peer
   * should be driving, it does nothing for those that run). A run that ended (only its
   * forwarding grace left) is replaced: consensus started a new transfer.
   */
  start(target: ShardTarget, to: string, source: LocalReplica, method: TransferMethod): void {
    const key = this.key(target, to);
    const existing = this.runs.get(key);
    if (existing !== undefined && !existing.ended) return;
    const run = new Run(this.ctx, target, to, source, method, this.outcomes);
    this.runs.set(key, run);
    void run.run().finally(() => {
      if (this.runs.get(key) === run) this.runs.delete(key);
    });
  }

  /** Aborts a transfer from this peer that no run drives (retried by the caller's next pass while it stays listed). */
  abandon(target: ShardTarget, to: string): void {
    const key = this.key(target, to);
    const run = this.runs.get(key);
    if ((run !== undefined && !run.ended) || this.abandoning.has(key)) return;
    this.abandoning.add(key);
    this.ctx.logger.warn({ collection: target.collection, shard: target.shard, to }, 'a shard transfer from this peer has no run here (this peer started again, or the run failed): aborting it');
    this.ctx
      .propose({ op: 'finishTransfer', collection: target.collection, shard: target.shard, from: this.ctx.peer, to, ok: false }, PROPOSE_TIMEOUT_MS)
      .catch((err: unknown) => this.ctx.logger.debug({ err }, 'aborting a shard transfer: not committed yet'))
      .finally(() => this.abandoning.delete(key));
  }

  /** The transfer ended in consensus: stops it if it still runs here. */
  stop(target: ShardTarget, to: string): void {
    this.runs.get(this.key(target, to))?.stop();
  }

  progress(): TransferProgress[] {
    return [...this.runs.values()].map((r) => ({ ...r.progress }));
  }

  stopAll(): void {
    for (const r of this.runs.values()) r.stop();
  }
}
