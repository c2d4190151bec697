/**
 * The replicas of one shard and the fan-out to them.
 *
 * Owns: which replicas a read or a write goes to, by their states (replica-state.ts):
 * a read goes to one replica that serves reads, this peer's first, and falls over to
 * the next when a replica fails for reasons of its own (unavailable, timed out,
 * broken); a write goes to every replica that accepts writes. Must never: route points
 * to shards, merge answers of several shards (the collection does) or change a
 * replica's state (consensus does).
 *
 * Members are the replicas this peer can talk to: in this version only its own. A
 * replica that the placement names on another peer has no member yet; a read or write
 * that would need one answers 501 naming the shard and its peers (remote replicas over
 * p2p gRPC are the next distributed issue). Read consistency above one replica and
 * write ordering through a leader replica need several members and arrive with them:
 * until then the options are carried to the replica unchanged.
 */

import { NotImplementedError, ServiceError } from '../common/errors';
import type { Filter } from '../shard/filter';
import type { LocalShard } from '../shard/local-shard';
import { LocalReplica } from './local-replica';
import { isReplicaFault } from './read-consistency';
import type {
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
import { acceptsWrites, servesReads, type ReplicaState } from './replica-state';

/** Defined with the read-consistency executor, which decides when another replica is asked. */
export { isReplicaFault };

export class ReplicaSet {
  /** Replicas this peer can talk to, its own first. */
  private members: Replica[];
  /** Peer id → replica state, from the cluster placement (null on a single node: every member is Active). */
  private states: Record<string, ReplicaState> | null;
  /** Members that serve reads, its own first (recomputed when members or states change). */
  private readable: Replica[] = [];
  /** Members that accept writes. */
  private writable: Replica[] = [];
  /** Peers whose replica would take part in a read (or a write) but that this version cannot reach. */
  private unreachableReaders = 0;
  private unreachableWriters = 0;

  constructor(
    readonly shardId: number,
    /** The collection's name, for messages. */
    private readonly collection: string,
    /** This peer's id. */
    private localPeer: string,
    members: Replica[],
    states: Record<string, ReplicaState> | null = null,
  ) {
    // This peer's replica first: reads prefer it.
    this.members = [...members.filter((m) => m.isLocal), ...members.filter((m) => !m.isLocal)];
    this.states = states === null ? null : { ...states };
    this.refresh();
  }

  /** Peer id → state of each replica, as the cluster placement says (null on a single node). */
  get replicas(): Record<string, ReplicaState> | null {
    return this.states;
  }

  /** This peer's stored replica, for what only concerns this peer's data (info, configuration, snapshots). */
  get local(): LocalShard | null {
    for (const m of this.members) if (m instanceof LocalReplica) return m.shard;
    return null;
  }

  /** Takes new replica states (a placement applied from consensus, naming this peer `peer`). */
  setStates(states: Record<string, ReplicaState> | null, peer: string = this.localPeer): void {
    this.localPeer = peer;
    this.states = states === null ? null : { ...states };
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

  private stateOf(peer: string): ReplicaState | undefined {
    return this.states === null ? 'Active' : this.states[peer];
  }

  private refresh(): void {
    const has = (s: ReplicaState | undefined, p: (s: ReplicaState) => boolean) => s !== undefined && p(s);
    this.readable = this.members.filter((m) => has(this.stateOf(m.peer), servesReads));
    this.writable = this.members.filter((m) => has(this.stateOf(m.peer), acceptsWrites));
    const reached = new Set(this.members.map((m) => m.peer));
    const away = this.states === null ? [] : Object.entries(this.states).filter(([p]) => !reached.has(p));
    this.unreachableReaders = away.filter(([, s]) => servesReads(s)).length;
    this.unreachableWriters = away.filter(([, s]) => acceptsWrites(s)).length;
  }

  /** The 501 of a read or write that needs a replica on another peer. */
  private needsRemote(write: boolean): NotImplementedError {
    const remote = this.remotePeers();
    const where = remote.length > 0 ? `peer${remote.length > 1 ? 's' : ''} ${remote.join(', ')}` : 'no peer';
    const here = this.members.some((m) => m.isLocal) ? 'replicas on other peers' : 'no replica on this peer';
    return new NotImplementedError(
      `shard ${this.shardId} of collection \`${this.collection}\` has ${here} (${where}); ` +
        `${write ? 'writing to' : 'reading from'} replicas on other peers is not available in this version (distributed mode part 2)`,
    );
  }

  /** The replicas a read may ask, in order of preference; throws when there is none. */
  readers(): readonly Replica[] {
    if (this.readable.length > 0) return this.readable;
    if (this.unreachableReaders > 0) throw this.needsRemote(false);
    throw new ServiceError(`shard ${this.shardId} of collection \`${this.collection}\` has no replica that serves reads`);
  }

  /** The replicas a write goes to; throws (before anything is sent) when one of them cannot be reached, or there is none. */
  writers(): readonly Replica[] {
    if (this.unreachableWriters > 0) throw this.needsRemote(true);
    if (this.writable.length > 0) return this.writable;
    throw new ServiceError(`shard ${this.shardId} of collection \`${this.collection}\` has no replica that accepts writes`);
  }

  /**
   * This peer's replica for a management call on its data (snapshots): 501 when the
   * shard has no replica here, or (`write`) has replicas elsewhere too.
   */
  localShard(write: boolean): LocalShard {
    const local = this.local;
    if (local !== null && (!write || this.remotePeers().length === 0)) return local;
    throw this.needsRemote(write);
  }

  // -- writes -----------------------------------------------------------------------------

  /**
   * Sends `op` to every replica that accepts writes (`to`: from writers(), called before
   * any shard's write is sent) and resolves with the highest operation id. Fails with the
   * first replica's error when any fails (write_consistency_factor arrives with remote
   * replicas).
   */
  update(op: ReplicaOperation, opts: UpdateOptions, to: readonly Replica[] = this.writers()): Promise<number> {
    if (to.length === 1) return to[0].update(op, opts);
    return Promise.allSettled(to.map((r) => r.update(op, opts))).then((settled) => {
      let max = 0;
      for (const s of settled) {
        if (s.status === 'rejected') throw s.reason;
        if (s.value > max) max = s.value;
      }
      return max;
    });
  }

  // -- reads ------------------------------------------------------------------------------
  // One replica answers (with one, its promise is returned as it is); on a replica's own
  // failure the next readable replica is asked, and the first error is thrown when every
  // one failed.

  /** One readable replica answers; with several, the next is asked on a replica's own failure. */
  private read<T>(fn: (r: Replica) => Promise<T>): Promise<T> {
    const rs = this.readers();
    return rs.length === 1 ? fn(rs[0]) : this.fallback(rs, fn);
  }

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
    return this.read((r) => r.retrieve(req, opts));
  }

  search(req: SearchRequest, opts: ReadOptions): Promise<ScoredRecord[]> {
    return this.read((r) => r.search(req, opts));
  }

  scroll(req: ScrollRequest, opts: ReadOptions): Promise<{ points: PointRecord[]; next: PointId | null }> {
    return this.read((r) => r.scroll(req, opts));
  }

  scrollOrdered(req: OrderedScrollRequest, opts: ReadOptions): Promise<OrderedRecord[]> {
    return this.read((r) => r.scrollOrdered(req, opts));
  }

  count(filter: Filter | null, opts: ReadOptions): Promise<number> {
    return this.read((r) => r.count(filter, opts));
  }

  anyMatch(filter: Filter | null, opts: ReadOptions): Promise<boolean> {
    return this.read((r) => r.anyMatch(filter, opts));
  }
}
