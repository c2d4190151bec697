/**
 * The replicas of one shard and the fan-out to them.
 *
 * Owns: which replicas a read or a write goes to, by their states (replica-state.ts):
 * a read goes to as many replicas that serve reads as its consistency asks (this
 * peer's first, then the others), and falls over to the next when a replica fails for
 * reasons of its own (unavailable, timed out, broken); a write goes to every replica
 * that accepts writes, with one clock tag, and succeeds on `write_consistency_factor`
 * successes. Replicas that failed a write are marked Dead through the cluster link
 * (consensus) before the write is answered. `ordering` medium and strong send the
 * write through a leader replica, which applies ordered writes one at a time. Must
 * never: route points to shards, merge answers of several shards (the collection
 * does) or change a replica's state itself (consensus does).
 *
 * On a single node (no placement) the one local replica takes every call as it is.
 */

import { ShardUnavailableError } from '../common/errors';
import type { ClockTag } from '../shard/clocks';
import type { Filter } from '../shard/filter';
import type { LocalShard } from '../shard/local-shard';
import type { ClusterLink, ShardTarget } from './cluster-link';
import { LocalReplica } from './local-replica';
import type { CollectionParams } from './config';
import {
  fanOutOf,
  isReplicaFault,
  isUnconfirmedWrite,
  readConsistent,
  resolveAnyMatch,
  resolveCount,
  resolveFacet,
  resolveRetrieve,
  resolveScroll,
  resolveScrollOrdered,
  resolveSearch,
  type ResolveMode,
} from './read-consistency';
import type {
  FacetCounts,
  FacetShardRequest,
  OrderedRecord,
  OrderedScrollRequest,
  PointId,
  PointRecord,
  ReadOptions,
  Replica,
  RetrieveRequest,
  ScoredRecord,
  ScrollRequest,
  SearchRequest,
  UpdateOptions,
} from './replica';
import type { ReplicaOperation } from './replica-operation';
import { acceptsWrites, isActive, servesReads, type ReplicaState } from './replica-state';

/** Defined with the read-consistency executor, which decides when another replica is asked. */
export { isReplicaFault };

/** What a replica set of a cluster collection needs besides its replicas. */
export interface ReplicaSetCluster {
  link: ClusterLink;
  /** The collection's uuid (which collection of this name the peers mean). */
  uuid: string;
  /** The collection's current parameters (write_consistency_factor, read fan-out). */
  params(): CollectionParams;
}

/** The highest of peer ids (decimal u64 strings). */
function highestPeer(peers: readonly string[]): string | null {
  let best: string | null = null;
  for (const p of peers) if (best === null || BigInt(p) > BigInt(best)) best = p;
  return best;
}

export class ReplicaSet {
  /** Replicas this peer can talk to, its own first. */
  private members: Replica[];
  /** Peer id → replica state, from the cluster placement (null on a single node: every member is Active). */
  private states: Record<string, ReplicaState> | null;
  /** Peers whose replica receives a transfer: only the transfer's source sends them writes. */
  private incoming = new Set<string>();
  /** Members that serve reads, its own first (recomputed when members or states change). */
  private readable: Replica[] = [];
  /** Listener replicas: they serve reads only when no other replica can. */
  private listeners: Replica[] = [];
  /** Members that accept writes. */
  private writable: Replica[] = [];
  /**
   * Replicas this peer leaves out of reads and writes because they failed a write and
   * consensus could not mark them Dead yet (the marking goes on in the background); each
   * comes back as soon as consensus gives it another state than the one it had.
   */
  private readonly disabled = new Map<string, ReplicaState | undefined>();
  /** Whether a placement was taken yet (the first one also takes the markings deferred before a restart). */
  private placed = false;
  /** Bumped by every placement change (setStates): a write in flight sees that the replicas it should reach may have changed. */
  private version = 0;
  /** Ordered writes (medium, strong) this peer leads, one at a time. */
  private orderedChain: Promise<unknown> = Promise.resolve();

  constructor(
    readonly shardId: number,
    /** The collection's name, for messages. */
    private readonly collection: string,
    /** This peer's id. */
    private localPeer: string,
    members: Replica[],
    states: Record<string, ReplicaState> | null = null,
    private readonly cluster: ReplicaSetCluster | null = null,
  ) {
    // This peer's replica first: reads prefer it.
    this.members = [...members.filter((m) => m.isLocal), ...members.filter((m) => !m.isLocal)];
    this.states = states === null ? null : { ...states };
    this.syncRemotes();
    this.refresh();
  }

  /** Peer id → state of each replica, as the cluster placement says (null on a single node). */
  get replicas(): Record<string, ReplicaState> | null {
    return this.states;
  }

  /** This peer's stored replica, for what only concerns this peer's data (info, configuration, snapshots). */
  get local(): LocalShard | null {
    return this.localReplica?.shard ?? null;
  }

  /** This peer's replica (what other peers' calls for this shard reach), or null. */
  get localReplica(): LocalReplica | null {
    for (const m of this.members) if (m instanceof LocalReplica) return m;
    return null;
  }

  /** Takes new replica states (a placement applied from consensus, naming this peer `peer`) and the peers receiving a transfer. */
  setStates(states: Record<string, ReplicaState> | null, peer: string = this.localPeer, incoming: readonly string[] = []): void {
    this.localPeer = peer;
    this.states = states === null ? null : { ...states };
    this.incoming = new Set(incoming);
    for (const [peer, was] of this.disabled) if (this.states?.[peer] !== was) this.disabled.delete(peer);
    // Markings deferred before this peer restarted (kept on disk): left out from the first
    // placement on, until consensus changes their state or refuses the marking (readmit).
    if (!this.placed && this.cluster !== null && this.states !== null) {
      for (const p of this.cluster.link.pendingDead(this.target)) if (this.states[p] === 'Active' && !this.disabled.has(p)) this.disabled.set(p, 'Active');
    }
    this.placed = true;
    this.version++;
    this.syncRemotes();
    this.refresh();
  }

  /** Puts this peer's replica in (or takes it out, with null). */
  setLocal(replica: Replica | null): void {
    this.members = this.members.filter((m) => !m.isLocal);
    if (replica !== null) this.members.unshift(replica);
    this.refresh();
  }

  remotePeers(): string[] {
    return this.states === null ? [] : Object.keys(this.states).filter((p) => p !== this.localPeer);
  }

  private get target(): ShardTarget {
    return { collection: this.collection, uuid: this.cluster?.uuid ?? '', shard: this.shardId };
  }

  /** One remote member per other peer the placement names (cluster mode). */
  private syncRemotes(): void {
    if (this.cluster === null || this.states === null) return;
    const wanted = new Set(this.remotePeers());
    this.members = this.members.filter((m) => m.isLocal || wanted.has(m.peer));
    const have = new Set(this.members.map((m) => m.peer));
    for (const p of wanted) if (!have.has(p)) this.members.push(this.cluster.link.remote(this.target, p));
  }

  private stateOf(peer: string): ReplicaState | undefined {
    return this.states === null ? 'Active' : this.states[peer];
  }

  /** Takes back a replica left out for a Dead marking that consensus refused while the replica is Active (no placement change would). */
  readmit(peer: string): void {
    if (this.disabled.delete(peer)) this.refresh();
  }

  /** Leaves these peers' replicas out until consensus changes their state. */
  private disable(peers: readonly string[]): void {
    for (const p of peers) this.disabled.set(p, this.states?.[p]);
    this.refresh();
  }

  private refresh(): void {
    const has = (m: Replica, p: (s: ReplicaState) => boolean) => {
      const s = this.stateOf(m.peer);
      return s !== undefined && p(s);
    };
    const on = this.disabled.size === 0 ? this.members : this.members.filter((m) => !this.disabled.has(m.peer));
    this.readable = on.filter((m) => has(m, servesReads));
    this.listeners = on.filter((m) => this.stateOf(m.peer) === 'Listener');
    this.writable = on.filter((m) => has(m, acceptsWrites) && !this.incoming.has(m.peer));
  }

  /**
   * The replicas a read may ask, in order of preference: this peer's, then the others
   * (peers that answered the last health check first); listeners only when nothing else
   * serves reads. Throws when there is none.
   */
  readers(): readonly Replica[] {
    let rs = this.readable.length > 0 ? this.readable : this.listeners;
    if (rs.length === 0) throw new ShardUnavailableError(`shard ${this.shardId} of collection \`${this.collection}\` has no replica that serves reads${this.describe()}`);
    const link = this.cluster?.link;
    if (link !== undefined) {
      const up = rs.filter((r) => r.isLocal || link.alive(r.peer));
      if (up.length < rs.length) rs = [...up, ...rs.filter((r) => !up.includes(r))];
      // Listeners answer when no replica that serves reads answers health checks.
      if (up.length === 0 && rs !== this.listeners) rs = [...rs, ...this.listeners];
    }
    return rs;
  }

  /** The replicas a write goes to; throws (before anything is sent) when there are fewer than the write needs. */
  writers(): readonly Replica[] {
    if (this.writable.length === 0) {
      throw new ShardUnavailableError(`shard ${this.shardId} of collection \`${this.collection}\` has no replica that accepts writes${this.describe()}`);
    }
    const needed = this.writeQuorum();
    const counted = this.writable.filter((m) => this.stateOf(m.peer) !== 'Listener').length;
    if (counted < needed) {
      throw new ShardUnavailableError(
        `shard ${this.shardId} of collection \`${this.collection}\` has ${counted} replica${counted === 1 ? '' : 's'} that accept writes, fewer than write_consistency_factor ${needed}${this.describe()}; nothing was written: retry once replicas are back`,
      );
    }
    return this.writable;
  }

  /** Successes a write needs: write_consistency_factor, at most the replicas the shard has (listeners aside). */
  private writeQuorum(): number {
    if (this.cluster === null || this.states === null) return 1;
    const replicas = Object.values(this.states).filter((s) => s !== 'Listener').length;
    return Math.max(1, Math.min(this.cluster.params().write_consistency_factor, replicas));
  }

  /** ` (replicas: peer 1 Active, peer 2 Dead)` for messages; a shard left without any says so and what to do. */
  private describe(): string {
    if (this.states === null) return '';
    const all = Object.entries(this.states);
    if (all.length === 0) return ' (it has no replica left: its replicas were on peers removed from the cluster, or dropped; recover the shard from a snapshot)';
    return ` (replicas: ${all.map(([p, s]) => `peer ${p} ${s}`).join(', ')})`;
  }

  /** This peer's replica for a management call on its data (snapshots): 503 when the shard has no replica here. */
  localShard(): LocalShard {
    const local = this.local;
    if (local !== null) return local;
    throw new ShardUnavailableError(`shard ${this.shardId} of collection \`${this.collection}\` has no replica on this peer${this.describe()}`);
  }

  // -- writes -----------------------------------------------------------------------------

  /**
   * Sends `op` to the shard's replicas and resolves with the highest operation id.
   * Single node: to the one replica. Cluster: `weak` ordering sends it from here to every
   * replica that accepts writes; `medium` and `strong` send it to the leader replica's
   * peer (or apply it here when this peer leads), which applies ordered writes one at a time.
   */
  update(op: ReplicaOperation, opts: UpdateOptions, to?: readonly Replica[]): Promise<number> {
    if (this.cluster === null || this.states === null) {
      const rs = to ?? this.writers();
      if (rs.length === 1) return rs[0].update(op, opts);
      return this.plainFanOut(op, opts, rs);
    }
    try {
      if (opts.ordering === 'weak') return this.replicate(op, opts, to ?? this.writers());
      const leader = this.leader(opts.ordering);
      if (leader === this.localPeer) return this.lead(op, opts);
      return this.cluster.link.forward(this.target, leader, op, opts);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** An ordered write that another peer sent here as the shard's leader: applied in order, never forwarded again. */
  lead(op: ReplicaOperation, opts: UpdateOptions): Promise<number> {
    const run = this.orderedChain.then(() => this.replicate(op, opts, this.writers()));
    this.orderedChain = run.catch(() => undefined);
    return run;
  }

  /**
   * A write another peer's replica set sent to this peer's replica (the points service's
   * Update, not a transfer's copy: the target of a transfer checks that itself), applied
   * here unless the placement applied here has this peer's replica Dead. A Dead replica
   * missed a write; a later write it applied would sit above that hole, under the
   * high-water mark of its clocks, and the wal_delta recovery that brings it back starts
   * from that mark: the missed write would never reach it. The refusal is the replica's
   * own fault to the sender, whose placement is behind this peer's: it marks the replica
   * Dead (consensus has it so already) and sends the write to the replicas of the
   * placement it then has (see replicate). Every other state takes the write as it did:
   * those that accept writes (Active, Partial, Listener, ...), a transfer's target
   * (Partial), which gets the writes its source forwards this way after the copy, and a
   * replica consensus no longer lists (a move's source, which forwards to the target
   * until it drops its replica).
   */
  receive(op: ReplicaOperation, opts: UpdateOptions, tag?: ClockTag): Promise<number> {
    const local = this.localReplica;
    if (local === null) return Promise.reject(new ShardUnavailableError(`peer ${this.localPeer} holds no replica of shard ${this.shardId} of collection \`${this.collection}\``));
    if (this.states?.[this.localPeer] === 'Dead') {
      return Promise.reject(
        new ShardUnavailableError(
          `the replica of shard ${this.shardId} of collection \`${this.collection}\` on peer ${this.localPeer} is Dead: it takes no write until a recovery brings it back (the sender's placement is behind)`,
        ),
      );
    }
    return local.update(op, opts, tag);
  }

  /**
   * The leader replica's peer: `strong`, the highest peer id among the shard's replicas
   * (writes wait while it cannot take them); `medium`, the highest peer id among active
   * replicas whose peer answers health checks.
   */
  private leader(ordering: 'medium' | 'strong'): string {
    const states = this.states ?? {};
    const link = this.cluster!.link;
    if (ordering === 'strong') {
      const leader = highestPeer(Object.keys(states).filter((p) => states[p] !== 'Listener'));
      if (leader === null) throw new ShardUnavailableError(`shard ${this.shardId} of collection \`${this.collection}\` has no replica to order writes${this.describe()}`);
      if (!isActive(states[leader]) || (leader !== this.localPeer && !link.alive(leader))) {
        throw new ShardUnavailableError(
          `writes with ordering=strong to shard ${this.shardId} of collection \`${this.collection}\` go through the replica on peer ${leader}, which is ${isActive(states[leader]) ? 'unreachable' : states[leader]}; retry later or use ordering=medium`,
        );
      }
      return leader;
    }
    const active = Object.keys(states).filter((p) => isActive(states[p]));
    const up = active.filter((p) => p === this.localPeer || link.alive(p));
    const leader = highestPeer(up.length > 0 ? up : active);
    if (leader === null) throw new ShardUnavailableError(`shard ${this.shardId} of collection \`${this.collection}\` has no active replica to order writes${this.describe()}`);
    return leader;
  }

  /** Single node with several members (tests): every member, failing with the first error. */
  private plainFanOut(op: ReplicaOperation, opts: UpdateOptions, to: readonly Replica[]): Promise<number> {
    return Promise.allSettled(to.map((r) => r.update(op, opts))).then((settled) => {
      let max = 0;
      for (const s of settled) {
        if (s.status === 'rejected') throw s.reason;
        if (s.value > max) max = s.value;
      }
      return max;
    });
  }

  /**
   * One write to every replica in `to`, with one clock tag. Succeeds when at least
   * write_consistency_factor replicas (one of them active) applied it; the replicas that
   * failed are marked Dead through consensus before it answers, so no replica that missed
   * an acknowledged write serves reads. A replica that answers `write_unconfirmed` applied
   * the write but could not take out the transfer target it forwards to, which missed it:
   * it counts as applied and is not marked Dead, and the write fails (its consistency is
   * not guaranteed).
   *
   * When the placement changed while the write was out (a transfer ended: its target took
   * over, the source of a move dropped its replica), the write goes again, with the same
   * tag, to the replicas that accept writes now and do not have it yet: a replica that got
   * it already (forwarded by a transfer's source) skips it. Marking a failed replica Dead
   * waits until this peer applied consensus that far, so a write that failed on a replica
   * that moved away sees the new placement before it answers. The clock stays held until
   * then, so no later write on it overtakes the resent one.
   */
  private async replicate(op: ReplicaOperation, opts: UpdateOptions, first: readonly Replica[]): Promise<number> {
    const cluster = this.cluster!;
    const needed = this.writeQuorum();
    const held = cluster.link.clock(this.target);
    const tag: ClockTag = { peer: BigInt(this.localPeer), clock: held.clock, tick: held.tick };
    let max = 0;
    const applied = new Set<string>();
    const failed = new Set<string>();
    let firstFault: unknown = null;
    let requestFault: unknown = null;
    let marked: unknown = null;
    /** A replica applied it, but the target of a transfer it is the source of missed it and could not be taken out. */
    let unconfirmed: unknown = null;
    let sent = 0;
    try {
      let to = first;
      for (let round = 0; to.length > 0; round++) {
        const version = this.version;
        sent += to.length;
        const settled = await Promise.allSettled(to.map((r) => r.update(op, opts, tag)));
        const failedNow: string[] = [];
        settled.forEach((s, i) => {
          const r = to[i];
          if (s.status === 'fulfilled') {
            applied.add(r.peer);
            if (s.value > max) max = s.value;
          } else if (isUnconfirmedWrite(s.reason)) {
            // That replica holds the write (it is not marked Dead for it), but the write
            // fails below: the replica it forwards to may serve as Active without it.
            applied.add(r.peer);
            unconfirmed ??= s.reason;
          } else if (isReplicaFault(s.reason)) {
            failed.add(r.peer);
            failedNow.push(r.peer);
            firstFault ??= s.reason;
          } else {
            requestFault ??= s.reason;
          }
        });
        if (applied.size === 0 && failed.size === 0 && requestFault !== null) throw requestFault;
        if (failedNow.length > 0) {
          try {
            const deferred = await cluster.link.deactivate(this.target, failedNow, `a write failed: ${errorText(firstFault)}`);
            // Consensus cannot mark them now (no leader, no majority): this peer leaves them
            // out until it can, and the write goes on (SPEC 3.3b: one peer of two down).
            if (deferred.length > 0) this.disable(deferred);
          } catch (err) {
            marked ??= err;
            // A marking still pending (one that could not be written to disk, or deferred
            // beside one that failed): its replica is left out all the same, or later writes
            // would sit above the one it missed.
            const pending = new Set(cluster.link.pendingDead(this.target));
            const out = failedNow.filter((p) => pending.has(p));
            if (out.length > 0) this.disable(out);
          }
        }
        if (this.version === version || round >= 4) break;
        to = this.writable.filter((m) => !applied.has(m.peer) && !failed.has(m.peer));
      }
    } finally {
      // A replica that may have logged the tick keeps it used (a timed-out call may have).
      held.release(applied.size > 0 || failed.size > 0);
    }
    let successes = 0;
    let activeSuccess = false;
    for (const peer of applied) {
      const st = this.stateOf(peer);
      if (st !== 'Listener') successes++;
      if (st !== undefined && isActive(st)) activeSuccess = true;
    }
    const where = `shard ${this.shardId} of collection \`${this.collection}\``;
    if (successes < needed || !activeSuccess) {
      throw new ShardUnavailableError(
        `the write reached ${successes} of ${sent} replicas of ${where}${activeSuccess || successes === 0 ? '' : ' (none of them active)'}, ${successes < needed ? `fewer than write_consistency_factor ${needed}` : 'and a write needs an active one'}; ` +
          `it may be partially applied (retrying it is safe): ${errorText(firstFault ?? requestFault)}`,
      );
    }
    if (marked !== null) {
      throw new ShardUnavailableError(
        `the write was applied on ${successes} replicas of ${where}, but the replicas that failed it (peer ${[...failed].join(', ')}) could not be marked Dead: ` +
          `the consistency of this write is not guaranteed: ${errorText(marked)}`,
      );
    }
    if (unconfirmed !== null) {
      throw new ShardUnavailableError(
        `the write was applied on ${successes} replicas of ${where}, but a shard transfer's target that missed it could not be taken out of service: ` +
          `the consistency of this write is not guaranteed (retrying it is safe): ${errorText(unconfirmed)}`,
      );
    }
    return max;
  }

  // -- reads ------------------------------------------------------------------------------
  // On a single node the one replica answers (its promise is returned as it is). In a
  // cluster, the read's consistency says how many replicas answer (read-consistency.ts),
  // counted over the shard's replicas whatever their state, so a read never answers from
  // fewer than asked; a replica's own failure asks the next.

  private read<T>(opts: ReadOptions, fn: (r: Replica) => Promise<T>, resolve: (answers: T[], mode: ResolveMode) => T): Promise<T> {
    const rs = this.readers();
    if (this.cluster === null || this.states === null) return rs.length === 1 ? fn(rs[0]) : this.fallback(rs, fn);
    const counted = Object.values(this.states).filter((s) => s !== 'Listener').length;
    return readConsistent(
      rs,
      opts.consistency,
      fanOutOf(this.cluster.params()),
      fn,
      resolve,
      `shard ${this.shardId} of collection \`${this.collection}\``,
      Math.max(counted, rs.length),
    );
  }

  /** Several members on a single node (tests): the first that answers. */
  private async fallback<T>(rs: readonly Replica[], read: (r: Replica) => Promise<T>): Promise<T> {
    let first: unknown = null;
    for (const r of rs) {
      try {
        return await read(r);
      } catch (err) {
        if (!isReplicaFault(err)) throw err;
        first ??= err;
      }
    }
    throw first;
  }

  retrieve(req: RetrieveRequest, opts: ReadOptions): Promise<PointRecord[]> {
    return this.read(opts, (r) => r.retrieve(req, opts), resolveRetrieve);
  }

  /** `higherIsBetter`: the direction of the vector's distance (how answers of several replicas are merged). */
  search(req: SearchRequest, opts: ReadOptions, higherIsBetter = true): Promise<ScoredRecord[]> {
    return this.read(opts, (r) => r.search(req, opts), resolveSearch(req.limit, higherIsBetter));
  }

  scroll(req: ScrollRequest, opts: ReadOptions): Promise<{ points: PointRecord[]; next: PointId | null }> {
    return this.read(opts, (r) => r.scroll(req, opts), resolveScroll(req.limit));
  }

  scrollOrdered(req: OrderedScrollRequest, opts: ReadOptions): Promise<OrderedRecord[]> {
    return this.read(opts, (r) => r.scrollOrdered(req, opts), resolveScrollOrdered(req.limit, req.orderBy.direction));
  }

  count(filter: Filter | null, opts: ReadOptions): Promise<number> {
    return this.read(opts, (r) => r.count(filter, opts), resolveCount);
  }

  anyMatch(filter: Filter | null, opts: ReadOptions): Promise<boolean> {
    return this.read(opts, (r) => r.anyMatch(filter, opts), resolveAnyMatch);
  }

  facet(req: FacetShardRequest, opts: ReadOptions): Promise<FacetCounts> {
    return this.read(opts, (r) => r.facet(req, opts), resolveFacet);
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
