/**
 * Draining a peer (ours, `POST /cluster/peer/{peer_id}/drain`): every replica on the
 * peer is moved to another peer with the shard transfers that exist (`move_shard`, or
 * for a replica on it that is not active, `replicate_shard` from an active replica
 * elsewhere and then `drop_replica`), one shard at a time, each waited for until the
 * drained peer no longer holds that shard. Before changing anything, every shard on the
 * peer must have a target (a peer of the cluster that holds no replica of it) and a
 * source (an active replica): otherwise the drain is refused as a whole, so the peer
 * never loses the last copy of a shard and no shard's replica count drops.
 *
 * The drain runs on the peer that was asked; its state lives in memory there. Asking
 * again while it runs joins it; asking after a failure or a restart starts from what the
 * cluster state says is still on the peer, so a drain is resumable and idempotent.
 *
 * Owns: the plan (targets balanced by replica count), the waiting and the drain's
 * status. Must never: copy data itself (transfers do) or change placement except through
 * the dispatcher (consensus checks each change again).
 */

import type { Logger } from 'pino';

import { isActive } from '../collection/replica-state';
import { BadRequestError, NotFoundError } from '../common/errors';
import type { ClusterState } from '../storage/cluster-state';
import type { Dispatcher, ReplicaChange, TransferMethod } from '../storage/dispatcher';
import type { MetadataConsensus } from '../storage/metadata-consensus';

/** A shard of a collection. */
export interface ShardRef {
  collection: string;
  shard: number;
}

export interface DrainShardStatus extends ShardRef {
  /** The state of the drained peer's replica, as consensus has it. */
  state: string;
}

export interface DrainTransfer extends ShardRef {
  from: string;
  to: string;
  method: string;
}

/** The transfer methods a drain may be asked to use (null: the configured default). */
export const DRAIN_METHODS = ['stream_records', 'snapshot', 'wal_delta'] as const;
export type DrainMethod = (typeof DRAIN_METHODS)[number];

export interface DrainStatus {
  peer: string;
  /** The transfer method asked for (null: `storage.shard_transfer_method`, else stream_records). */
  method: DrainMethod | null;
  /** `idle`: no drain of this peer ran here since this peer started; else the last one's outcome so far. */
  state: 'idle' | 'running' | 'done' | 'failed';
  startedAt: number | null;
  finishedAt: number | null;
  error: string | null;
  /** Shards the drain moved off the peer (this run). */
  moved: number;
  /** Replicas still on the peer. */
  remaining: DrainShardStatus[];
  /** Transfers of shards on the peer, running now. */
  transfers: DrainTransfer[];
  /** Whether the drain removes the peer from consensus once it holds no replica (`remove=true`). */
  remove: boolean;
  /** Whether that removal happened (the peer is no longer a member of the cluster). */
  removed: boolean;
}

export interface DrainOptions {
  /** Waiting for one shard's transfer (and its retries) to end. */
  shardTimeoutMs?: number;
  /** Attempts per shard before the drain fails (a transfer aborted by a fault is retried). */
  attempts?: number;
  /** Consensus proposals. */
  proposeTimeoutS?: number;
  /** Whether a peer answers health checks (targets that do are preferred; a drain whose only targets are down is refused). */
  alive?: (peer: string) => boolean;
  /** Removes a peer from consensus (`MetadataConsensus.removePeer` unforced: refused while it holds a replica). */
  removePeer?: (peer: string, timeoutMs: number) => Promise<boolean>;
}

const POLL_MS = 100;

interface Job {
  peer: string;
  method: DrainMethod | null;
  state: 'running' | 'done' | 'failed';
  startedAt: number;
  finishedAt: number | null;
  error: string | null;
  moved: number;
  remove: boolean;
  removed: boolean;
  done: Promise<void>;
}

/** Replicas per peer over every shard of every collection. */
function replicaCounts(state: ClusterState): Map<string, number> {
  const out = new Map<string, number>();
  for (const p of Object.keys(state.peers)) out.set(p, 0);
  for (const name of state.collectionNames()) {
    for (const s of state.collection(name)!.shards) for (const p of Object.keys(s.replicas)) out.set(p, (out.get(p) ?? 0) + 1);
  }
  return out;
}

const has = (o: object, k: string): boolean => Object.prototype.hasOwnProperty.call(o, k);

export class PeerDrainer {
  private readonly jobs = new Map<string, Job>();
  private readonly shardTimeoutMs: number;
  private readonly attempts: number;
  private readonly proposeTimeoutS: number;
  private readonly alive: (peer: string) => boolean;
  private readonly removePeer: (peer: string, timeoutMs: number) => Promise<boolean>;

  constructor(
    private readonly consensus: MetadataConsensus,
    private readonly dispatcher: Dispatcher,
    private readonly logger: Logger,
    options: DrainOptions = {},
  ) {
    this.shardTimeoutMs = options.shardTimeoutMs ?? 3_600_000;
    this.attempts = options.attempts ?? 5;
    this.proposeTimeoutS = options.proposeTimeoutS ?? 30;
    this.alive = options.alive ?? (() => true);
    this.removePeer = options.removePeer ?? ((peer, timeoutMs) => this.consensus.removePeer(peer, false, timeoutMs));
  }

  private get state(): ClusterState {
    return this.consensus.clusterState;
  }

  /** The drain of `peer` as this peer knows it. */
  status(peer: string): DrainStatus {
    const state = this.state;
    const job = this.jobs.get(peer);
    // A peer the drain removed is shown with its drain (nothing remains on it).
    if (!has(state.peers, peer) && job?.removed !== true) throw new NotFoundError(`Peer ${peer} does not exist`);
    const remaining: DrainShardStatus[] = [];
    const transfers: DrainTransfer[] = [];
    for (const { collection, shard } of state.shardsOn(peer)) {
      const s = state.collection(collection)!.shards.find((x) => x.id === shard)!;
      remaining.push({ collection, shard, state: s.replicas[peer] });
      for (const t of state.transfers(collection)) {
        if (t.shard === shard) transfers.push({ collection, shard, from: t.from, to: t.to, method: t.method });
      }
    }
    return {
      peer,
      method: job?.method ?? null,
      state: job?.state ?? 'idle',
      startedAt: job?.startedAt ?? null,
      finishedAt: job?.finishedAt ?? null,
      error: job?.error ?? null,
      moved: job?.moved ?? 0,
      remaining,
      transfers,
      remove: job?.remove ?? false,
      removed: job?.removed ?? false,
    };
  }

  /**
   * Starts draining `peer` with `method` (or joins the drain already running, whatever
   * method it uses), after checking that every shard on it can go somewhere; throws,
   * changing nothing, when one cannot.
   * Resolves with the status once the drain started; `finished` resolves when it ends.
   * `remove`: once the peer holds no replica, it is removed from consensus (the unforced
   * removal, which refuses a peer that still holds a replica); joining a running drain
   * with `remove` adds the removal to it.
   */
  start(peer: string, method: DrainMethod | null = null, remove = false): { status: DrainStatus; finished: Promise<void> } {
    const running = this.jobs.get(peer);
    if (running !== undefined && running.state === 'running') {
      if (remove) running.remove = true;
      return { status: this.status(peer), finished: running.done };
    }
    const earlier = this.jobs.get(peer);
    // Removed already (asked again, say by a retrying client): nothing left to do. Not
    // "unless the state still lists it": a peer that removed itself may never apply its
    // own removal (the others stop sending to it once they applied it), so its state
    // lists it for good; the removal is committed all the same (removePeer answered only
    // once a peer applied that very entry), and a removed peer never comes back, so
    // starting again would only fail (this peer hears from no leader) and hide the
    // drain that did its work.
    if (earlier?.removed === true) return { status: this.status(peer), finished: earlier.done };
    this.check(peer);
    const job: Job = { peer, method, state: 'running', startedAt: Date.now(), finishedAt: null, error: null, moved: 0, remove, removed: false, done: Promise.resolve() };
    job.done = this.run(job).then(
      () => {
        job.state = 'done';
        job.finishedAt = Date.now();
        this.logger.info({ peer, moved: job.moved, removed: job.removed, seconds: (job.finishedAt - job.startedAt) / 1000 }, job.removed ? 'drain: done, the peer held no replica and was removed from the cluster' : 'drain: done, the peer holds no replica');
      },
      (err: unknown) => {
        job.state = 'failed';
        job.finishedAt = Date.now();
        job.error = err instanceof Error ? err.message : String(err);
        this.logger.error({ peer, err }, 'drain: failed (asking again resumes it)');
      },
    );
    this.jobs.set(peer, job);
    return { status: this.status(peer), finished: job.done };
  }

  /** The refusals, before anything is changed. */
  private check(peer: string): void {
    const state = this.state;
    if (!has(state.peers, peer)) throw new NotFoundError(`Peer ${peer} does not exist`);
    if (Object.keys(state.peers).length < 2) throw new BadRequestError(`cannot drain peer ${peer}: it is the only peer of the cluster, there is no other peer to move its replicas to`);
    const problems: string[] = [];
    for (const { collection, shard } of state.shardsOn(peer)) {
      const s = state.collection(collection)!.shards.find((x) => x.id === shard)!;
      const targets = this.targetsFor(state, peer, s.replicas);
      if (targets.length === 0) {
        problems.push(`shard ${shard} of ${collection} has a replica on every other peer (moving it would lower its replica count; add a peer or drop the replica first)`);
        continue;
      }
      if (!targets.some((p) => this.alive(p))) {
        problems.push(`shard ${shard} of ${collection} could go only to peer${targets.length > 1 ? 's' : ''} ${targets.join(', ')}, which do${targets.length > 1 ? '' : 'es'} not answer health checks`);
        continue;
      }
      if (!Object.values(s.replicas).some((st) => isActive(st))) {
        problems.push(`shard ${shard} of ${collection} has no active replica to copy from`);
      }
    }
    if (problems.length > 0) throw new BadRequestError(`cannot drain peer ${peer}, nothing was changed: ${problems.join('; ')}`);
  }

  /** Peers that may take a replica of a shard with these replicas: those answering health checks first, then fewest replicas first (ties: lowest id). */
  private targetsFor(state: ClusterState, drained: string, replicas: Record<string, unknown>): string[] {
    const counts = replicaCounts(state);
    const up = (p: string) => (this.alive(p) ? 0 : 1);
    return Object.keys(state.peers)
      .filter((p) => p !== drained && !has(replicas, p))
      .sort((a, b) => up(a) - up(b) || counts.get(a)! - counts.get(b)! || (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0));
  }

  private async run(job: Job): Promise<void> {
    const peer = job.peer;
    const total = this.state.shardsOn(peer).length;
    this.logger.info({ peer, shards: total, method: job.method }, 'drain: started');
    for (;;) {
      const left = this.state.shardsOn(peer);
      if (left.length === 0) {
        if (job.remove) await this.removeDrained(job);
        return;
      }
      // Shards not in a transfer first; one whose transfer runs is waited for below.
      const next = left.find((r) => !this.inTransfer(r)) ?? left[0];
      await this.drainShard(peer, next, job.method);
      job.moved += 1;
      this.logger.info({ peer, collection: next.collection, shard: next.shard, moved: job.moved, remaining: this.state.shardsOn(peer).length }, 'drain: shard moved off the peer');
    }
  }

  /**
   * Removes the drained peer from consensus. The removal is the unforced one of
   * `DELETE /cluster/peer/{id}`: it refuses a peer that holds a replica in the state this
   * peer applied, and again, on every peer, in the state as of the removal entry (a
   * conditional removal: one placed on it meanwhile makes the removal a no-op and the
   * drain fails; asking again drains that replica too), so a peer holding a replica, the
   * last of a shard or not, never goes.
   */
  private async removeDrained(job: Job): Promise<void> {
    if (!has(this.state.peers, job.peer)) {
      job.removed = true;
      return;
    }
    this.logger.info({ peer: job.peer }, 'drain: the peer holds no replica, removing it from the cluster');
    await this.removePeer(job.peer, this.proposeTimeoutS * 1000);
    job.removed = true;
  }

  private inTransfer(r: ShardRef): boolean {
    return this.state.transfers(r.collection).some((t) => t.shard === r.shard);
  }

  private holds(peer: string, r: ShardRef): boolean {
    const s = this.state.collection(r.collection)?.shards.find((x) => x.id === r.shard);
    return s !== undefined && has(s.replicas, peer);
  }

  /** Waits until the shard has no transfer running (throws past `deadline`). */
  private async waitTransferEnd(r: ShardRef, deadline: number): Promise<void> {
    while (this.inTransfer(r)) {
      if (Date.now() > deadline) throw new Error(`shard ${r.shard} of ${r.collection}: its transfer did not end in time`);
      await new Promise((res) => setTimeout(res, POLL_MS));
    }
  }

  private async change(collection: string, change: ReplicaChange): Promise<void> {
    await this.dispatcher.changeReplicas(collection, change, this.proposeTimeoutS);
  }

  /** Moves one shard's replica off `peer`; returns once the peer no longer holds it. */
  private async drainShard(peer: string, r: ShardRef, method: TransferMethod | null): Promise<void> {
    const deadline = Date.now() + this.shardTimeoutMs;
    let lastError: string | null = null;
    for (let attempt = 1; attempt <= this.attempts; attempt++) {
      // A transfer of the shard that runs already (ours from an earlier call, or a recovery) ends first.
      await this.waitTransferEnd(r, deadline);
      if (!this.holds(peer, r)) return;
      const state = this.state;
      const c = state.collection(r.collection);
      if (c === undefined) return; // dropped meanwhile
      const s = c.shards.find((x) => x.id === r.shard)!;
      const targets = this.targetsFor(state, peer, s.replicas);
      if (targets.length === 0) throw new Error(`shard ${r.shard} of ${r.collection}: no peer without a replica of it is left to move it to`);
      const to = targets[0];
      const own = s.replicas[peer];
      try {
        if (isActive(own)) {
          this.logger.info({ peer, collection: r.collection, shard: r.shard, to, attempt }, 'drain: moving shard');
          await this.change(r.collection, { kind: 'move', shard: r.shard, from: peer, to, method });
          await this.waitTransferEnd(r, deadline);
        } else {
          // Not active here (Dead, say): copy from an active replica elsewhere, then drop this one.
          const from = Object.keys(s.replicas).find((p) => p !== peer && isActive(s.replicas[p]));
          if (from === undefined) throw new Error(`shard ${r.shard} of ${r.collection} has no active replica to copy from`);
          this.logger.info({ peer, collection: r.collection, shard: r.shard, from, to, state: own, attempt }, 'drain: replicating shard, then dropping the replica on the drained peer');
          await this.change(r.collection, { kind: 'replicate', shard: r.shard, from, to, method });
          await this.waitTransferEnd(r, deadline);
          const after = this.state.collection(r.collection)?.shards.find((x) => x.id === r.shard);
          if (after !== undefined && after.replicas[to] !== undefined && isActive(after.replicas[to]) && has(after.replicas, peer)) {
            await this.change(r.collection, { kind: 'drop_replica', shard: r.shard, peer });
          }
        }
      } catch (err) {
        lastError = err instanceof Error ? err.message : String(err);
        this.logger.warn({ peer, collection: r.collection, shard: r.shard, attempt, err: lastError }, 'drain: attempt failed, retrying');
        await new Promise((res) => setTimeout(res, 500 * attempt));
        continue;
      }
      if (!this.holds(peer, r)) return;
      lastError = `the transfer of shard ${r.shard} of ${r.collection} to peer ${to} ended without moving it (aborted)`;
      this.logger.warn({ peer, collection: r.collection, shard: r.shard, to, attempt }, 'drain: transfer ended without moving the shard, retrying');
    }
    throw new Error(`shard ${r.shard} of ${r.collection} could not be moved off peer ${peer} after ${this.attempts} attempts: ${lastError ?? 'unknown'}`);
  }
}
