/**
 * Shard transfers, the source's side, method `stream_records`: the source replica
 * forwards every write it applies to the target (in the order it applies them), and
 * streams its points to the target in batches between those writes; when the last
 * batch is durable on the target, consensus makes the target Active.
 *
 * Owns: one transfer's run (wait until the target has applied the transfer's start and
 * emptied its replica, stream, finish or abort through consensus), the forwarding sink,
 * and the figures of the transfers running here. Must never: choose which transfers
 * run (consensus does, see supervisor.ts) or pick replicas for client requests.
 *
 * Why this order is safe: the target gets writes from no one but the source while the
 * transfer runs (ReplicaSet leaves it out of writers). The source applies a write and
 * forwards it under one lock, and reads and sends each batch under the same lock, so
 * the target sees writes and batches in the source's order: a batch holds each point as
 * the source has it after every write forwarded before it, and a write forwarded after
 * it finds the point there.
 */

import type { Logger } from 'pino';

import type { ShardTarget } from '../collection/cluster-link';
import type { ForwardSink, LocalReplica } from '../collection/local-replica';
import type { Replica, UpdateOptions } from '../collection/replica';
import type { ReplicaOperation } from '../collection/replica-operation';
import { compareKeys, type PointKey } from '../shard/id-tracker';
import type { PointWrite } from '../shard/operations';
import type { MetaOp } from '../storage/cluster-state';
import { waitUntil } from './wait';

/** The target of a transfer as the source reaches it. */
export interface TransferTarget extends Replica {
  /** Whether the target applied the start of the transfer from `from` (its replica emptied and open). */
  transferReady(from: string, timeoutMs: number): Promise<boolean>;
}

export interface TransferContext {
  /** This peer's id. */
  peer: string;
  remote(target: ShardTarget, peer: string): TransferTarget;
  propose(op: MetaOp, timeoutMs: number): Promise<unknown>;
  logger: Logger;
}

/** Points per batch. */
const BATCH = 256;
/** How long the target may take to apply the transfer's start. */
const READY_TIMEOUT_MS = 30_000;
const PROPOSE_TIMEOUT_MS = 30_000;
/** How long the source keeps forwarding after the finish. */
const FORWARD_GRACE_MS = 3_000;

/** Progress of one transfer, for the API, logs and metrics. */
export interface TransferProgress {
  collection: string;
  shard: number;
  from: string;
  to: string;
  pointsSent: number;
  pointsTotal: number;
  startedAt: number;
}

class Run {
  private stopped = false;
  /** Finished or aborted in consensus: only the forwarding grace may still run; a new transfer of the same shard to the same peer replaces this run. */
  ended = false;
  /** The finish is proposed: the transfer's end in consensus is this run's own, and forwarding goes on until the run lets go. */
  private finishing = false;
  private failure: unknown = null;
  private openGate!: () => void;
  private readonly gate = new Promise<void>((resolve) => (this.openGate = resolve));
  private markQuiet!: () => void;
  /** Resolves once this run sends nothing more to the target but what its forwarding grace forwards. */
  readonly quiet = new Promise<void>((resolve) => (this.markQuiet = resolve));
  readonly progress: TransferProgress;

  constructor(
    private readonly ctx: TransferContext,
    private readonly target: ShardTarget,
    private readonly to: string,
    private readonly source: LocalReplica,
  ) {
    this.progress = { collection: target.collection, shard: target.shard, from: ctx.peer, to, pointsSent: 0, pointsTotal: source.shard.pointCount, startedAt: Date.now() };
  }

  /** The transfer ended in consensus; unless this run finished it, it stops now. */
  stop(): void {
    if (this.finishing) return;
    this.stopped = true;
    // Ended in consensus: a new transfer of the shard to the same peer (restart_transfer,
    // or a recovery started again) gets a new run, which starts once this one is quiet.
    this.ended = true;
    this.openGate();
  }

  async run(): Promise<void> {
    const log = this.ctx.logger.child({ collection: this.target.collection, shard: this.target.shard, to: this.to });
    const remote = this.ctx.remote(this.target, this.to);
    const sink: ForwardSink = {
      forward: async (op: ReplicaOperation, opts: UpdateOptions, tag) => {
        await this.gate;
        if (this.stopped || this.failure !== null) return;
        try {
          await remote.update(op, { ...opts, ordering: 'weak' }, tag ?? undefined);
        } catch (err) {
          this.failure ??= err;
        }
      },
    };
    await this.source.forwardTo(sink);
    let ok = false;
    try {
      log.info({ points: this.progress.pointsTotal }, 'shard transfer started (stream_records)');
      await waitUntil(() => remote.transferReady(this.ctx.peer, 2000).catch(() => false), READY_TIMEOUT_MS, () => this.stopped, 'the target did not apply the start of the transfer');
      this.openGate();
      await this.stream(remote, log);
      if (this.stopped) return;
      if (this.failure !== null) throw this.failure;
      this.finishing = true;
      await this.ctx.propose({ op: 'finishTransfer', collection: this.target.collection, shard: this.target.shard, from: this.ctx.peer, to: this.to, ok: true }, PROPOSE_TIMEOUT_MS);
      ok = true;
      this.ended = true;
      log.info({ points: this.progress.pointsSent, ms: Date.now() - this.progress.startedAt }, 'shard transfer finished');
    } catch (err) {
      this.finishing = false;
      if (!this.stopped) log.warn({ err }, 'shard transfer failed: aborting it');
    } finally {
      this.openGate();
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
      this.markQuiet();
      if (ok) await new Promise((r) => setTimeout(r, FORWARD_GRACE_MS));
      await this.source.stopForwarding(sink);
    }
  }

  /** Sends every point in id order, a batch at a time, each under the source's write lock; the last batch is durable on the target. */
  private async stream(remote: TransferTarget, log: Logger): Promise<void> {
    let cursor: PointKey | null = null;
    let batches = 0;
    for (;;) {
      if (this.stopped || this.failure !== null) return;
      const done = await this.source.exclusive(async () => {
        // The transfer may have ended while this batch waited for the lock: a batch sent
        // now could reach a new replica of the next transfer to the same peer.
        if (this.stopped) return true;
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
}

/** The transfers this peer is the source of. */
export class OutgoingTransfers {
  private readonly runs = new Map<string, Run>();
  /** Aborts of orphaned transfers in flight. */
  private readonly abandoning = new Set<string>();

  constructor(private readonly ctx: TransferContext) {}

  private key(target: ShardTarget, to: string): string {
    return `${target.collection}/${target.uuid}/${target.shard}/${to}`;
  }

  /**
   * Starts the transfer unless it runs already (called again for transfers this peer
   * should be driving, it does nothing for those that run). A run that ended (only its
   * forwarding grace left) is replaced: consensus started a new transfer.
   */
  start(target: ShardTarget, to: string, source: LocalReplica): void {
    const key = this.key(target, to);
    const existing = this.runs.get(key);
    if (existing !== undefined && !existing.ended) return;
    const run = new Run(this.ctx, target, to, source);
    this.runs.set(key, run);
    // A run stopped by the end of the last transfer may still be sending its last batch.
    const previous = existing?.quiet ?? Promise.resolve();
    void previous.then(() => run.run()).finally(() => {
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
