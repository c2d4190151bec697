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
import type { UpdateOptions } from '../collection/replica';
import { fromShardOperation, type ReplicaOperation } from '../collection/replica-operation';
import { WriteUnconfirmedError, leaderTrouble } from '../common/errors';
import { isReplicatedClock, type ClockTag } from '../shard/clocks';
import { compareKeys, type PointKey } from '../shard/id-tracker';
import { HistoryGoneError } from '../shard/local-shard';
import type { PointWrite } from '../shard/operations';
import type { MetaOp } from '../storage/cluster-state';
import type { RateLimiter } from './rate';
import { waitUntil } from './wait';

/** The target of a transfer as the source reaches it. */
export interface TransferTarget {
  /** Whether the target applied the start of this transfer from `from` with `method` (for stream_records: its replica emptied). */
  ready(from: string, method: TransferMethod, timeoutMs: number): Promise<boolean>;
  /** The target replica's clock map: the highest tick it applied per (peer, clock). */
  clocks(): Promise<ClockTag[]>;
  /** Part of the copy: a write the target applies as its own (untagged). */
  copy(op: ReplicaOperation, wait: boolean): Promise<void>;
  /** Part of the copy: points, as the target's own write. */
  batch(points: PointWrite[], wait: boolean): Promise<void>;
  /** Part of the copy: operations in order, as the target's own writes; then `adopt` (the copy is complete: the source's replicated clocks), and durable when `wait`. */
  replay(ops: readonly ReplicaOperation[], end: { wait: boolean; adopt: readonly ClockTag[] | null }): Promise<void>;
  /** After the copy: a write the source applied, with its tag, as any replica gets it. */
  deliver(op: ReplicaOperation, opts: UpdateOptions, tag: ClockTag | null): Promise<void>;
  /** The target fetches a snapshot of `from`'s replica of the shard and replaces its own with it; resolves with the archive's size in bytes. */
  pullSnapshot(from: string, signal: AbortSignal): Promise<number>;
  /** Vectors the target has yet to index beyond its indexing threshold. */
  indexBacklog(): Promise<number>;
}

export interface TransferContext {
  /** This peer's id. */
  peer: string;
  /** The target of transfer `id`. */
  remote(target: ShardTarget, peer: string, id: string): TransferTarget;
  propose(op: MetaOp, timeoutMs: number): Promise<unknown>;
  /**
   * Marks `peer`'s replica of the shard Dead through consensus as a replica set marks a
   * replica that failed a write (ClusterLink.deactivate): proposed again while no leader
   * takes it, for a few seconds; `marked` once this peer applied it (or consensus has the
   * replica out already), `deferred` when it could not be committed in time (it goes on
   * being proposed in the background). Rejects when consensus refuses (the shard's last
   * active replica).
   */
  deactivate(target: ShardTarget, peer: string, reason: string): Promise<'marked' | 'deferred'>;
  /** The pace of what this peer sends for its transfers (one budget for all of them). */
  rate: RateLimiter;
  /** How long the source keeps forwarding after the finish (FORWARD_GRACE_MS unless set; tests set it). */
  forwardGraceMs?: number;
  logger: Logger;
}

/** Points per batch (stream_records), operations per replay call at most. */
const BATCH = 256;
/** Bytes (encoded estimate) per replay call at most. */
const BATCH_BYTES = 16 * 1024 * 1024;
/** WAL records read at a time (wal_delta). */
const HISTORY_PAGE = 64;
/** How long the target may take to apply the transfer's start. */
const READY_TIMEOUT_MS = 30_000;
const PROPOSE_TIMEOUT_MS = 30_000;
/** How long a write whose forward failed waits for the abort of its transfer while no leader takes it (then the target is marked Dead instead); one proposal's bound, the pause between two. */
const ABORT_TIMEOUT_MS = 5_000;
const ABORT_ATTEMPT_MS = 2_000;
const ABORT_RETRY_MS = 250;
/** At most one background attempt this often to take out a target that missed a forward. */
const RECHECK_MS = 1_000;
/** How long the source keeps forwarding after the finish. */
const FORWARD_GRACE_MS = 3_000;
/** Queued writes beyond this many bytes (encoded estimate) fail the transfer: the copy does not keep up with the write rate. */
const QUEUE_LIMIT_BYTES = 512 * 1024 * 1024;
/** Queued writes sent outside the write lock until this few are left (or for this many rounds); the rest go under it. */
const QUEUE_TAIL = 64;
const QUEUE_ROUNDS = 50;
/** The target keeps up with indexing when at most this many vectors, or this share of the shard, wait to be indexed. */
const INDEX_LAG_VECTORS = 10_000;
const INDEX_LAG_SHARE = 0.05;
const INDEX_POLL_MS = 500;
/** A target whose index backlog has not shrunk for this long fails the transfer. */
const INDEX_STALL_MS = 10 * 60_000;

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

/** A rough size of an operation in bytes, to bound the queue and the replay calls. */
export function sizeOf(op: ReplicaOperation): number {
  let n = 64;
  if (op.kind === 'upsert' || op.kind === 'update_vectors') {
    for (const p of op.points) {
      n += 64;
      for (const v of p.vectors.values()) n += v.byteLength;
      if ('payload' in p && p.payload) n += jsonSize(p.payload);
    }
    return n;
  }
  const sel = (op as { select?: { ids: unknown[] | null; filter: unknown } }).select;
  if (sel?.ids) n += sel.ids.length * 48;
  if (sel?.filter) n += jsonSize(sel.filter);
  const payload = (op as { payload?: unknown }).payload;
  if (payload) n += jsonSize(payload);
  const keys = (op as { keys?: unknown[]; names?: unknown[] }).keys ?? (op as { names?: unknown[] }).names;
  if (Array.isArray(keys)) n += keys.length * 32;
  return n;
}

function jsonSize(v: unknown): number {
  return JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? x.toString() : x)).length;
}

class Run {
  private stopped = false;
  private readonly abort = new AbortController();
  /** Finished or aborted in consensus: only the forwarding grace may still run; a new transfer of the same shard to the same peer replaces this run. */
  ended = false;
  /** The finish is proposed: the transfer's end in consensus is this run's own, and forwarding goes on until the run lets go. */
  private finishing = false;
  private failure: unknown = null;
  /** Forwarded writes waiting for the copy to end (null once they go to the target). */
  private queue: ReplicaOperation[] | null = [];
  private queueBytes = 0;
  /** The copy is complete (the target took this replica's clocks): forwarded writes go with their tags, as to any replica. */
  private copied = false;
  /** This run committed the finish: the target is Active (its grace running). */
  private finished = false;
  /** The finish was proposed (committed or not: a proposal that timed out may still commit): from then on a missed forward must take the target out before its write answers. */
  private finishProposed = false;
  /** Taking the target out after a forward it missed, in flight. */
  private demoting: Promise<void> | null = null;
  /** The first attempt to take the target out did not (no leader in time, or refused): later forwards fail at once with it while one attempt at a time runs in the background. */
  private unconfirmed: WriteUnconfirmedError | null = null;
  private rechecking = false;
  /** performance.now() of the last background attempt (at most one a second). */
  private recheckedAt = -Infinity;
  /** The target is out (the transfer aborted, or the target marked Dead and applied here): writes forwarded after a failure answer at once. */
  private targetOut = false;
  private readonly remote: TransferTarget;
  private readonly log: Logger;
  readonly progress: TransferProgress;

  constructor(
    private readonly ctx: TransferContext,
    private readonly target: ShardTarget,
    private readonly to: string,
    private readonly source: LocalReplica,
    method: TransferMethod,
    private readonly id: string,
    private readonly outcomes: TransferOutcomes,
  ) {
    this.progress = { collection: target.collection, shard: target.shard, from: ctx.peer, to, method, stage: 'copying', pointsSent: 0, pointsTotal: source.shard.pointCount, bytesSent: 0, startedAt: Date.now() };
    this.remote = ctx.remote(target, to, id);
    this.log = ctx.logger.child({ collection: target.collection, shard: target.shard, to, transfer: id });
  }

  /** The transfer ended in consensus; unless this run finished it, it stops now (calls in flight for it are cancelled). */
  stop(): void {
    // Once the finish was proposed it may have committed even if its proposal failed here
    // (a timeout): the run, not the end in consensus, then decides when forwarding stops.
    if (this.finishing || this.finishProposed) return;
    this.stopped = true;
    this.abort.abort();
  }

  /** Stopped, or failed: the copy goes no further. */
  private get halted(): boolean {
    return this.stopped || this.failure !== null;
  }

  private finishOp(ok: boolean): MetaOp {
    return { op: 'finishTransfer', collection: this.target.collection, shard: this.target.shard, from: this.ctx.peer, to: this.to, ok, id: this.id };
  }

  /**
   * A write this replica applied did not reach the target: the target must not serve it
   * as Active.
   * - Before this run proposed the finish, nothing is waited for: the target stays Partial
   *   (it serves no reads, coordinators send it no writes), this run fails now (see
   *   `rethrow`) and aborts the transfer at its end, and no later write is sent to it.
   * - Once the finish was proposed, before the write is answered: the transfer is aborted
   *   (unless this run saw the finish committed), or, when it finished already or the abort
   *   cannot be committed, the target is marked Dead (a recovery brings it back). Rejects
   *   with WriteUnconfirmedError when neither happened (no leader in time, the marking
   *   deferred to the background; or consensus refused it: the target is the shard's last
   *   active replica, after a move): the write is then not acknowledged as a success,
   *   though this replica holds it (the coordinator does not mark this replica Dead for
   *   it). Later forwards then fail at once the same way, without a new wait under the
   *   write lock, while the target is looked at again in the background, until it is out.
   */
  private demote(err: unknown): Promise<void> {
    this.failure ??= err;
    if (this.targetOut || !this.finishProposed) return Promise.resolve();
    if (this.unconfirmed !== null) {
      this.recheck();
      return Promise.reject(this.unconfirmed);
    }
    this.demoting ??= this.takeOut(err)
      .catch((e: unknown) => {
        if (e instanceof WriteUnconfirmedError) this.unconfirmed = e;
        throw e;
      })
      .finally(() => {
        this.demoting = null;
      });
    return this.demoting;
  }

  /** One background attempt at a time to take out a target the first attempt left in. */
  private recheck(): void {
    if (this.rechecking || performance.now() - this.recheckedAt < RECHECK_MS) return;
    this.rechecking = true;
    this.recheckedAt = performance.now();
    // Once it succeeds `targetOut` is set, which `demote` looks at first.
    this.takeOut(this.failure)
      .catch(() => undefined)
      .finally(() => {
        this.rechecking = false;
      });
  }

  private async takeOut(err: unknown): Promise<void> {
    const reason = `a write forwarded by shard transfer ${this.id} did not reach it: ${err instanceof Error ? err.message : String(err)}`;
    this.log.warn({ err }, 'a write did not reach the target of the transfer: taking the target out');
    if (!this.finished && (await this.abortTransfer())) {
      this.targetOut = true;
      return;
    }
    // The transfer had ended (its finish committed after all), or no leader took the abort: the target is marked Dead instead.
    let outcome: 'marked' | 'deferred';
    try {
      outcome = await this.ctx.deactivate(this.target, this.to, reason);
    } catch (e) {
      this.log.error({ err: e }, 'consensus refused to mark the target of the transfer Dead: it lacks a write this replica applied');
      throw new WriteUnconfirmedError(
        `peer ${this.ctx.peer} applied the write, but the target of its transfer of shard ${this.target.shard} of collection \`${this.target.collection}\` (peer ${this.to}) missed it and could not be marked Dead: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
    if (outcome === 'deferred') {
      this.log.error('the target of the transfer could not be marked Dead yet (proposed again in the background): it lacks a write this replica applied');
      throw new WriteUnconfirmedError(
        `peer ${this.ctx.peer} applied the write, but the target of its transfer of shard ${this.target.shard} of collection \`${this.target.collection}\` (peer ${this.to}) missed it, and consensus could not mark it Dead yet (no leader took the proposal; it is proposed again in the background)`,
      );
    }
    this.targetOut = true;
  }

  /** Aborts the transfer through consensus, proposing again while no leader takes it (up to ABORT_TIMEOUT_MS): true once the abort is committed, false when it was not (the transfer had ended, or no leader took it in time). */
  private async abortTransfer(): Promise<boolean> {
    const deadline = Date.now() + ABORT_TIMEOUT_MS;
    for (;;) {
      try {
        return (await this.ctx.propose(this.finishOp(false), Math.min(ABORT_ATTEMPT_MS, Math.max(500, deadline - Date.now())))) === true;
      } catch (e) {
        if (!leaderTrouble(e) || Date.now() + ABORT_RETRY_MS >= deadline) {
          this.log.warn({ err: e }, 'could not abort the shard transfer through consensus');
          return false;
        }
        await new Promise((r) => setTimeout(r, ABORT_RETRY_MS));
      }
    }
  }

  /** Rejects only with WriteUnconfirmedError (see demote): the write was applied here, the target missed it and is not out. */
  private readonly sink: ForwardSink = {
    forward: async (op: ReplicaOperation, opts: UpdateOptions, tag) => {
      if (this.stopped) return;
      if (this.queue !== null) {
        if (this.failure !== null) return;
        this.queue.push(op);
        this.queueBytes += sizeOf(op);
        if (this.queueBytes > QUEUE_LIMIT_BYTES) this.failure ??= new Error(`writes queued during the copy passed ${QUEUE_LIMIT_BYTES / 1048576} MiB: the copy does not keep up with the write rate`);
        return;
      }
      if (!this.copied) {
        // Before the copy is complete a failure only fails the transfer.
        if (this.failure !== null) return;
        try {
          await this.remote.copy(op, false);
        } catch (err) {
          this.failure ??= err;
        }
        return;
      }
      // After the copy the target counts as a replica: once a forward failed it goes out
      // before the write is answered. Later writes are not sent to it (a write it got
      // after missing an earlier one would leave a hole below the high-water mark of its
      // clocks, and a wal_delta recovery starts above that mark: the missed write would
      // never reach it), and none is answered as a success before it is out.
      if (this.failure === null) {
        try {
          await this.remote.deliver(op, opts, tag);
          return;
        } catch (err) {
          this.failure ??= err;
        }
      }
      await this.demote(this.failure);
    },
  };

  async run(): Promise<void> {
    const log = this.log;
    // Every operation after `since` is queued (or forwarded) from now on.
    const since = await this.source.forwardTo(this.sink);
    let ok = false;
    try {
      log.info({ points: this.progress.pointsTotal, method: this.progress.method }, `shard transfer started (${this.progress.method})`);
      await this.ready(this.progress.method);
      if (this.progress.method === 'wal_delta' && !this.stopped && !(await this.delta(since))) {
        if (this.stopped) return;
        this.rethrow();
        log.info('wal_delta cannot resolve the difference from the WAL: switching the transfer to stream_records');
        await this.ctx.propose({ op: 'switchTransfer', collection: this.target.collection, shard: this.target.shard, from: this.ctx.peer, to: this.to, method: 'stream_records', id: this.id }, PROPOSE_TIMEOUT_MS);
        this.progress.method = 'stream_records';
        this.progress.pointsSent = 0;
        this.outcomes.switched++;
        await this.ready('stream_records');
      }
      if (this.stopped) return;
      if (this.progress.method === 'stream_records') {
        await this.source.exclusive(async () => {
          this.queue = null;
          this.queueBytes = 0;
        });
        await this.stream();
        if (this.stopped) return;
        this.rethrow();
        await this.keepingUp();
      } else if (this.progress.method === 'snapshot') {
        const t0 = Date.now();
        this.progress.bytesSent = await this.remote.pullSnapshot(this.ctx.peer, this.abort.signal);
        this.progress.pointsSent = this.progress.pointsTotal;
        log.info({ bytes: this.progress.bytesSent, ms: Date.now() - t0, queued: this.queue?.length ?? 0 }, 'shard snapshot restored on the target');
        if (this.stopped) return;
        this.rethrow();
        await this.drain();
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
        this.finishProposed = true;
        const finished = await this.ctx.propose(this.finishOp(true), PROPOSE_TIMEOUT_MS);
        if (finished !== true) throw new Error('the transfer was aborted before its finish was committed');
        this.finished = true;
      });
      ok = true;
      this.ended = true;
      this.outcomes.finished[this.progress.method] = (this.outcomes.finished[this.progress.method] ?? 0) + 1;
      log.info({ method: this.progress.method, sent: this.progress.pointsSent, bytes: this.progress.bytesSent, ms: Date.now() - this.progress.startedAt }, 'shard transfer finished');
    } catch (err) {
      this.finishing = false;
      if (!this.stopped) {
        log.warn({ err }, 'shard transfer failed: aborting it');
        this.outcomes.failed[this.progress.method] = (this.outcomes.failed[this.progress.method] ?? 0) + 1;
      }
    } finally {
      this.queue = null;
      // Proposed again while no leader takes it, for a while; after that the leader's checks
      // abort it (a transfer whose source has no run, or whose peer is down).
      if (!ok && !this.stopped) await this.abortTransfer();
      // Forwarding ends only now, and a while after a finish: until every peer applied the
      // finish, some still send their writes to the source alone (consensus waits up to a
      // second for the other peers; a peer slower than the grace resends a write whose
      // placement changed under it, see ReplicaSet.replicate).
      this.ended = true;
      // Unref'd: the grace never holds a process open by itself (a test's worker, a node shutting down).
      if (ok) await new Promise((r) => setTimeout(r, this.ctx.forwardGraceMs ?? FORWARD_GRACE_MS).unref());
      await this.source.stopForwarding(this.sink);
      // A marking left to the background (the write that waited on it failed) goes on there.
      if (this.demoting !== null) await this.demoting.catch(() => undefined);
    }
  }

  private rethrow(): void {
    if (this.failure !== null) throw this.failure;
  }

  private async ready(method: TransferMethod): Promise<void> {
    await waitUntil(() => this.remote.ready(this.ctx.peer, method, 2000).catch(() => false), READY_TIMEOUT_MS, () => this.stopped, 'the target did not apply the start of the transfer');
  }

  /**
   * wal_delta: sends the stretch of this replica's WAL from the first operation the
   * target lacks, then the queue. The target applies it all as its own writes, whatever
   * it saw before (so every point ends as this history leaves it, even where the target
   * saw some of those writes in another order), and takes this replica's clocks at the
   * end. False when the WAL cannot prove it holds the difference.
   */
  private async delta(since: bigint): Promise<boolean> {
    const shard = this.source.shard;
    const theirs = await this.remote.clocks();
    // A target ahead of this replica on a replicated clock holds writes this one lacks: only a full copy makes them equal.
    for (const t of theirs) {
      if (isReplicatedClock(t.clock) && shard.clockTick(t.peer, t.clock) < t.tick) {
        this.log.info({ peer: t.peer.toString(), clock: t.clock, theirs: t.tick.toString() }, 'the target has writes this replica lacks');
        return false;
      }
    }
    const start = await shard.historyStartFor(theirs);
    if (start === null) return false;
    // Operations start .. since come from the WAL; later ones are in the queue.
    this.progress.pointsTotal = Number(since >= start ? since - start + 1n : 0n);
    this.log.info({ from: start.toString(), to: since.toString(), operations: this.progress.pointsTotal }, 'wal_delta: sending the operations the target lacks');
    let batch: ReplicaOperation[] = [];
    let bytes = 0;
    const send = async () => {
      if (batch.length === 0) return;
      await this.remote.replay(batch, { wait: false, adopt: null });
      this.progress.pointsSent += batch.length;
      batch = [];
      const paid = bytes;
      bytes = 0;
      await this.ctx.rate.take(paid, this.abort.signal);
    };
    for (let at = start; at <= since; ) {
      if (this.halted) return true;
      let records;
      try {
        records = await shard.readHistory(at, HISTORY_PAGE);
      } catch (err) {
        if (err instanceof HistoryGoneError) return false;
        throw err;
      }
      if (records.length === 0) break;
      for (const r of records) {
        if (r.seq > since) break;
        // Names deleted since the record was written are left out: the target refuses names it has no store for.
        const op = fromShardOperation(shard.withCurrentNames(r.op));
        batch.push(op);
        bytes += sizeOf(op);
        if (batch.length >= BATCH || bytes >= BATCH_BYTES) await send();
        at = r.seq + 1n;
      }
      if (records[records.length - 1].seq >= since) break;
    }
    await send();
    if (this.halted) return true;
    await this.drain();
    return true;
  }

  /** Sends the queued writes in order, the last ones under the write lock with this replica's clocks; from then on writes go to the target with their tags. */
  private async drain(): Promise<void> {
    this.progress.stage = 'queue';
    const take = async (keep: number) => {
      while (this.queue !== null && this.queue.length > keep) {
        this.rethrow();
        if (this.stopped) return;
        const out: ReplicaOperation[] = [];
        let bytes = 0;
        while (this.queue.length > keep && out.length < BATCH && bytes < BATCH_BYTES) {
          const op = this.queue.shift()!;
          const b = sizeOf(op);
          this.queueBytes -= b;
          bytes += b;
          out.push(op);
        }
        await this.remote.replay(out, { wait: false, adopt: null });
      }
    };
    // Outside the lock while writes keep coming, a bounded number of rounds.
    for (let round = 0; round < QUEUE_ROUNDS && this.queue !== null && this.queue.length > QUEUE_TAIL; round++) await take(QUEUE_TAIL);
    await this.source.exclusive(async () => {
      await take(BATCH);
      if (this.stopped) return;
      this.rethrow();
      const rest = this.queue ?? [];
      // The copy is complete: the target takes this replica's clocks with the last writes, durably.
      await this.remote.replay(rest, { wait: true, adopt: this.source.shard.clocks() });
      this.queue = null;
      this.queueBytes = 0;
      this.copied = true;
    });
  }

  /** Sends every point in id order, a batch at a time, each under the source's write lock; the last batch is durable on the target, with this replica's clocks. */
  private async stream(): Promise<void> {
    let cursor: PointKey | null = null;
    let batches = 0;
    this.progress.pointsTotal = this.source.shard.pointCount;
    for (;;) {
      if (this.halted) return;
      let sent = 0;
      const done = await this.source.exclusive(async () => {
        if (this.halted) return true;
        const shard = this.source.shard;
        const found = shard.scroll(cursor, BATCH + 1, null, compareKeys);
        const page = found.slice(0, BATCH);
        const names = [...shard.vectors.keys()];
        const sparseNames = [...shard.sparse.keys()];
        const points: PointWrite[] = [];
        for (const p of page) {
          const payload = shard.payloadOf(p.offset);
          const point: PointWrite = { id: p.key, vectors: await shard.vectorsOf(p.offset, names), payload: payload === null ? null : (structuredClone(payload) as PointWrite['payload']) };
          if (sparseNames.length > 0) {
            const sparse = await shard.sparseOf(p.offset, sparseNames);
            if (sparse.size > 0) point.sparse = sparse;
          }
          points.push(point);
        }
        const last = found.length <= BATCH;
        await this.remote.batch(points, false);
        if (this.ctx.rate.limited) sent = sizeOf({ kind: 'upsert', points });
        this.progress.pointsSent += points.length;
        this.progress.pointsTotal = Math.max(this.progress.pointsTotal, this.progress.pointsSent);
        cursor = last ? null : found[BATCH].key;
        if (last) {
          this.rethrow();
          await this.remote.replay([], { wait: true, adopt: shard.clocks() });
          this.copied = true;
        }
        return last;
      });
      // Paid for after the write lock is released: client writes never wait for the pace.
      await this.ctx.rate.take(sent, this.abort.signal);
      batches++;
      if (batches % 100 === 0) this.log.info({ sent: this.progress.pointsSent, total: this.progress.pointsTotal }, 'shard transfer progress');
      if (done) return;
    }
  }

  /** stream_records: the target re-indexes what it received; the transfer finishes once its indexing keeps up. */
  private async keepingUp(): Promise<void> {
    this.progress.stage = 'indexing';
    const limit = Math.max(INDEX_LAG_VECTORS, Math.ceil(this.progress.pointsTotal * INDEX_LAG_SHARE));
    let logged = 0;
    let best = Infinity;
    let bestAt = Date.now();
    for (;;) {
      if (this.halted) return;
      const backlog = await this.remote.indexBacklog();
      if (backlog <= limit) return;
      if (backlog < best) {
        best = backlog;
        bestAt = Date.now();
      } else if (Date.now() - bestAt > INDEX_STALL_MS) {
        throw new Error(`the target's index backlog (${backlog} vectors) has not shrunk for ${INDEX_STALL_MS / 60_000} minutes`);
      }
      if (Date.now() - logged > 5000) {
        this.log.info({ backlog, limit }, 'shard transfer: waiting for the target to index what it received');
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

  private key(target: ShardTarget, to: string, id: string): string {
    return `${target.collection}/${target.uuid}/${target.shard}/${to}/${id}`;
  }

  /**
   * Starts the transfer unless it runs already (called again for transfers this peer
   * should be driving, it does nothing for those that run). A run that ended (only its
   * forwarding grace left) is replaced: consensus started a new transfer.
   */
  start(target: ShardTarget, to: string, source: LocalReplica, method: TransferMethod, id: string): void {
    const key = this.key(target, to, id);
    const existing = this.runs.get(key);
    if (existing !== undefined && !existing.ended) return;
    const run = new Run(this.ctx, target, to, source, method, id, this.outcomes);
    this.runs.set(key, run);
    void run.run().finally(() => {
      if (this.runs.get(key) === run) this.runs.delete(key);
    });
  }

  /** Aborts a transfer from this peer that no run drives (retried by the caller's next pass while it stays listed). */
  abandon(target: ShardTarget, to: string, id: string): void {
    const key = this.key(target, to, id);
    const run = this.runs.get(key);
    if ((run !== undefined && !run.ended) || this.abandoning.has(key)) return;
    this.abandoning.add(key);
    this.ctx.logger.warn({ collection: target.collection, shard: target.shard, to }, 'a shard transfer from this peer has no run here (this peer started again, or the run failed): aborting it');
    this.ctx
      .propose({ op: 'finishTransfer', collection: target.collection, shard: target.shard, from: this.ctx.peer, to, ok: false, id }, PROPOSE_TIMEOUT_MS)
      .catch((err: unknown) => this.ctx.logger.debug({ err }, 'aborting a shard transfer: not committed yet'))
      .finally(() => this.abandoning.delete(key));
  }

  /** The transfer ended in consensus: stops it if it still runs here. */
  stop(target: ShardTarget, to: string, id: string): void {
    this.runs.get(this.key(target, to, id))?.stop();
  }

  progress(): TransferProgress[] {
    return [...this.runs.values()].map((r) => ({ ...r.progress }));
  }

  stopAll(): void {
    for (const r of this.runs.values()) r.stop();
  }
}
