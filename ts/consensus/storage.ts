/**
 * Raft storage as the core sees it: a read-only view of what the driver has persisted
 * (hard state, the latest snapshot, the entries after it), with typed errors; and
 * MemoryRaftStorage, an in-memory implementation that the driver writes to.
 *
 * Owns: the persisted log's shape (one snapshot, then contiguous entries), compaction
 * (dropping entries a snapshot covers), the rule that hard state never names a commit
 * beyond the persisted log (so entries must be persisted before hard state).
 * Must never: be written by the core (RaftNode only reads RaftStorage; the driver
 * writes what a Ready tells it to), or guess: an index it does not hold is an error
 * of a named kind, never a made-up term.
 */

import { ConfState, Entry, HardState, EMPTY_HARD_STATE, RaftInvariantError, Snapshot, SnapshotMeta, StorageError } from './types';

export interface RaftStorage {
  /** Persisted hard state, and where the persisted snapshot sits (with its membership). */
  initialState(): { hardState: HardState; snapshotMeta: SnapshotMeta };
  /** Index of the first entry held; snapshot index + 1 when compacted up to the snapshot. */
  firstIndex(): number;
  /** Index of the last entry held, or the index before firstIndex() when no entry is held. */
  lastIndex(): number;
  /** Term of an entry in [firstIndex() - 1, lastIndex()]. Throws StorageError compacted / unavailable outside. */
  term(index: number): number;
  /** Entries [lo, hi) with firstIndex() <= lo <= hi <= lastIndex() + 1. Throws StorageError outside. */
  entries(lo: number, hi: number): Entry[];
  /** The latest snapshot (may throw snapshotTemporarilyUnavailable). */
  snapshot(): Snapshot;
}

const EMPTY_CONF: ConfState = Object.freeze({ voters: Object.freeze([]), learners: Object.freeze([]) });

/**
 * An in-memory Raft storage. The simulation uses one per peer as that peer's disk: it
 * survives the peer's crashes, and holds exactly what the driver persisted.
 */
export class MemoryRaftStorage implements RaftStorage {
  private hardState: HardState = EMPTY_HARD_STATE;
  private snap: Snapshot = { meta: { index: 0, term: 0, conf: EMPTY_CONF }, data: new Uint8Array(0) };
  /** Index and term of the entry just before `ents[0]` (the compaction point). */
  private offsetIndex = 0;
  private offsetTerm = 0;
  private ents: Entry[] = [];

  /**
   * Storage of a founding member: a snapshot at index 1, term 1 holding the founding
   * membership and the application's initial state. Every founding member must start
   * from the same one; a peer that joins later starts empty and receives a snapshot
   * first (the founding membership is never in the log, so it cannot miss it).
   */
  static bootstrap(conf: ConfState, data: Uint8Array = new Uint8Array(0)): MemoryRaftStorage {
    const s = new MemoryRaftStorage();
    s.applySnapshot({ meta: { index: 1, term: 1, conf: copyConf(conf) }, data });
    s.setHardState({ term: 1, vote: null, commit: 1 });
    return s;
  }

  // --- RaftStorage (read side) ---

  initialState(): { hardState: HardState; snapshotMeta: SnapshotMeta } {
    return { hardState: this.hardState, snapshotMeta: this.snap.meta };
  }

  firstIndex(): number {
    return this.offsetIndex + 1;
  }

  lastIndex(): number {
    return this.offsetIndex + this.ents.length;
  }

  term(index: number): number {
    if (index < this.offsetIndex) throw new StorageError('compacted', `entry ${index} is compacted (first index ${this.offsetIndex + 1})`);
    if (index > this.lastIndex()) throw new StorageError('unavailable', `entry ${index} is beyond the last index ${this.lastIndex()}`);
    if (index === this.offsetIndex) return this.offsetTerm;
    return this.ents[index - this.offsetIndex - 1].term;
  }

  entries(lo: number, hi: number): Entry[] {
    if (lo <= this.offsetIndex) throw new StorageError('compacted', `entry ${lo} is compacted (first index ${this.offsetIndex + 1})`);
    if (hi > this.lastIndex() + 1) throw new StorageError('unavailable', `entries up to ${hi - 1} requested, last index is ${this.lastIndex()}`);
    if (lo > hi) throw new RaftInvariantError(`entries(${lo}, ${hi}): empty range reversed`);
    return this.ents.slice(lo - this.offsetIndex - 1, hi - this.offsetIndex - 1);
  }

  snapshot(): Snapshot {
    return this.snap;
  }

  // --- Driver (write side) ---

  /**
   * Appends entries, replacing any held entry at or after the first one's index (a
   * follower's conflicting suffix). Entries must follow the held log without a gap and
   * may never replace an entry a snapshot covers.
   */
  append(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    const first = entries[0].index;
    if (first <= this.snap.meta.index || first <= this.offsetIndex) {
      throw new RaftInvariantError(`append at ${first}: the snapshot covers up to ${this.snap.meta.index}`);
    }
    if (first > this.lastIndex() + 1) throw new RaftInvariantError(`append at ${first} leaves a gap after ${this.lastIndex()}`);
    for (let i = 1; i < entries.length; i++) {
      if (entries[i].index !== first + i) throw new RaftInvariantError(`append: entries not contiguous at ${entries[i].index}`);
    }
    const keep = first - this.offsetIndex - 1;
    if (this.hardState.commit >= first) {
      throw new RaftInvariantError(`append at ${first} would replace committed entries (commit ${this.hardState.commit})`);
    }
    this.ents.length = keep;
    for (const e of entries) this.ents.push(e);
  }

  /** Persists hard state. Its commit must lie within the persisted log: entries are persisted first. */
  setHardState(hs: HardState): void {
    if (hs.commit > this.lastIndex()) {
      throw new RaftInvariantError(`hard state commit ${hs.commit} beyond the persisted log (last index ${this.lastIndex()}): persist entries before hard state`);
    }
    this.hardState = { term: hs.term, vote: hs.vote, commit: hs.commit };
  }

  /** Persists a snapshot received from the leader: it replaces the whole log. */
  applySnapshot(snapshot: Snapshot): void {
    if (snapshot.meta.index < this.snap.meta.index) {
      throw new RaftInvariantError(`snapshot at ${snapshot.meta.index} is older than the held one at ${this.snap.meta.index}`);
    }
    this.snap = { meta: { index: snapshot.meta.index, term: snapshot.meta.term, conf: copyConf(snapshot.meta.conf) }, data: snapshot.data };
    this.offsetIndex = snapshot.meta.index;
    this.offsetTerm = snapshot.meta.term;
    this.ents = [];
  }

  /**
   * Records the application's own snapshot of its state at `index` (an index it has
   * applied, so at or below the persisted commit), with the membership in force there.
   */
  createSnapshot(index: number, conf: ConfState, data: Uint8Array): Snapshot {
    if (index <= this.snap.meta.index) {
      throw new RaftInvariantError(`snapshot at ${index} is not newer than the held one at ${this.snap.meta.index}`);
    }
    if (index > this.hardState.commit) throw new RaftInvariantError(`snapshot at ${index} is beyond the persisted commit ${this.hardState.commit}`);
    const term = this.term(index);
    this.snap = { meta: { index, term, conf: copyConf(conf) }, data };
    return this.snap;
  }

  /** Drops entries up to `index` (at most the snapshot's index: what is dropped must be covered). */
  compact(index: number): void {
    if (index <= this.offsetIndex) return;
    if (index > this.snap.meta.index) throw new RaftInvariantError(`compact to ${index} beyond the snapshot at ${this.snap.meta.index}`);
    const term = this.term(index);
    this.ents = this.ents.slice(index - this.offsetIndex);
    this.offsetIndex = index;
    this.offsetTerm = term;
  }
}

export function copyConf(conf: ConfState): ConfState {
  return { voters: [...conf.voters], learners: [...conf.learners] };
}
