/**
 * The Raft log as one peer's core sees it: the persisted part (read through RaftStorage)
 * followed by an unstable tail the driver has not persisted yet, and possibly a snapshot
 * received from the leader that is waiting to be persisted; plus the commit and applied
 * indexes.
 *
 * Owns: index arithmetic over storage + unstable tail, conflict detection, the
 * "never replace a committed entry" rule, the up-to-date comparison used in elections.
 * Must never: write storage (the driver persists what Ready hands it, then advance()
 * marks it stable here), or answer a term it does not know (an index outside the log
 * gives `undefined`; a storage failure propagates as StorageError).
 */

import type { RaftStorage } from './storage';
import { Entry, RaftInvariantError, Snapshot, StorageError } from './types';

export class RaftLog {
  /** Highest index known to be committed. */
  committed: number;
  /** Highest index handed to the application and acknowledged by advance(). */
  applied: number;
  /** A snapshot from the leader that replaces the log, not yet persisted. */
  private pendingSnapshot: Snapshot | null = null;
  /** Index of unstable[0]; entries at or after it in storage are stale until persisted. */
  private unstableOffset: number;
  private unstable: Entry[] = [];

  constructor(
    private readonly storage: RaftStorage,
    committed: number,
    applied: number,
  ) {
    this.unstableOffset = storage.lastIndex() + 1;
    this.committed = committed;
    this.applied = applied;
  }

  firstIndex(): number {
    if (this.pendingSnapshot !== null) return this.pendingSnapshot.meta.index + 1;
    return this.storage.firstIndex();
  }

  lastIndex(): number {
    if (this.unstable.length > 0) return this.unstableOffset + this.unstable.length - 1;
    if (this.pendingSnapshot !== null) return this.pendingSnapshot.meta.index;
    return this.storage.lastIndex();
  }

  /** Index of the last persisted entry (entries after it are only in memory). */
  stableLastIndex(): number {
    // Nothing persisted matches the log while a received snapshot is waiting to be persisted.
    if (this.pendingSnapshot !== null) return 0;
    if (this.unstable.length === 0) return this.storage.lastIndex();
    return Math.min(this.storage.lastIndex(), this.unstableOffset - 1);
  }

  /** Term of the entry at `index`, or undefined when the log does not hold it (compacted or beyond the end). */
  term(index: number): number | undefined {
    if (index > this.lastIndex()) return undefined;
    if (this.unstable.length > 0 && index >= this.unstableOffset) return this.unstable[index - this.unstableOffset].term;
    if (this.pendingSnapshot !== null) {
      return index === this.pendingSnapshot.meta.index ? this.pendingSnapshot.meta.term : undefined;
    }
    if (index < this.storage.firstIndex() - 1) return undefined;
    try {
      return this.storage.term(index);
    } catch (e) {
      if (e instanceof StorageError && e.kind === 'compacted') return undefined;
      throw e;
    }
  }

  lastTerm(): number {
    const t = this.term(this.lastIndex());
    if (t === undefined) throw new StorageError('failure', `term of the last entry ${this.lastIndex()} is unknown`);
    return t;
  }

  matchTerm(index: number, term: number): boolean {
    return this.term(index) === term;
  }

  /** True when a log ending at (lastIndex, lastTerm) is at least as up to date as this one. */
  isUpToDate(lastIndex: number, lastTerm: number): boolean {
    const myTerm = this.lastTerm();
    return lastTerm > myTerm || (lastTerm === myTerm && lastIndex >= this.lastIndex());
  }

  /** Entries [lo, hi); lo must be >= firstIndex() (throws StorageError compacted otherwise). */
  slice(lo: number, hi: number): Entry[] {
    if (lo >= hi) return [];
    if (lo < this.firstIndex()) throw new StorageError('compacted', `entry ${lo} is compacted`);
    if (hi > this.lastIndex() + 1) throw new RaftInvariantError(`slice up to ${hi - 1} beyond the last index ${this.lastIndex()}`);
    const out: Entry[] = [];
    const split = this.unstable.length > 0 ? this.unstableOffset : hi;
    if (lo < split) {
      for (const e of this.storage.entries(lo, Math.min(hi, split))) out.push(e);
    }
    for (let i = Math.max(lo, split); i < hi; i++) out.push(this.unstable[i - this.unstableOffset]);
    return out;
  }

  entryAt(index: number): Entry | undefined {
    if (index < this.firstIndex() || index > this.lastIndex()) return undefined;
    return this.slice(index, index + 1)[0];
  }

  /**
   * Index of the first entry in `entries` that this log does not hold with the same
   * term (0 when it holds all of them). `entries` must be contiguous.
   */
  findConflict(entries: readonly Entry[]): number {
    for (const e of entries) {
      if (!this.matchTerm(e.index, e.term)) return e.index;
    }
    return 0;
  }

  /** Appends entries after the first one's index - 1, dropping whatever followed. */
  append(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    const after = entries[0].index;
    if (after <= this.committed) {
      throw new RaftInvariantError(`append at ${after} would replace a committed entry (commit ${this.committed})`);
    }
    if (after > this.lastIndex() + 1) throw new RaftInvariantError(`append at ${after} leaves a gap after ${this.lastIndex()}`);
    if (after === this.unstableOffset + this.unstable.length) {
      for (const e of entries) this.unstable.push(e);
    } else if (after <= this.unstableOffset) {
      this.unstableOffset = after;
      this.unstable = [...entries];
    } else {
      this.unstable = this.unstable.slice(0, after - this.unstableOffset);
      for (const e of entries) this.unstable.push(e);
    }
  }

  commitTo(index: number): boolean {
    if (index <= this.committed) return false;
    if (index > this.lastIndex()) throw new RaftInvariantError(`commit ${index} beyond the last index ${this.lastIndex()}`);
    this.committed = index;
    return true;
  }

  /** Replaces the whole log with a snapshot from the leader (persisted by the driver). */
  restore(snapshot: Snapshot): void {
    if (snapshot.meta.index <= this.committed) {
      throw new RaftInvariantError(`restore of snapshot ${snapshot.meta.index} at or below commit ${this.committed}`);
    }
    this.pendingSnapshot = snapshot;
    this.unstableOffset = snapshot.meta.index + 1;
    this.unstable = [];
    this.committed = snapshot.meta.index;
  }

  // --- Ready / advance ---

  unstableEntries(): Entry[] {
    return this.unstable.slice();
  }

  unstableSnapshot(): Snapshot | null {
    return this.pendingSnapshot;
  }

  hasUnstable(): boolean {
    return this.unstable.length > 0 || this.pendingSnapshot !== null;
  }

  /** First index the application has not applied (a pending snapshot is applied first). */
  private applyFrom(): number {
    const base = this.pendingSnapshot !== null ? Math.max(this.applied, this.pendingSnapshot.meta.index) : this.applied;
    return base + 1;
  }

  hasEntriesToApply(): boolean {
    return this.committed >= this.applyFrom();
  }

  entriesToApply(): Entry[] {
    const from = this.applyFrom();
    if (this.committed < from) return [];
    return this.slice(from, this.committed + 1);
  }

  /** The driver persisted the pending snapshot. */
  snapshotPersisted(index: number): void {
    if (this.pendingSnapshot !== null && this.pendingSnapshot.meta.index === index) this.pendingSnapshot = null;
  }

  /** The driver persisted every unstable entry up to `index` with `term`. */
  entriesPersisted(index: number, term: number): void {
    if (this.unstable.length === 0 || index < this.unstableOffset) return;
    const t = this.term(index);
    if (t !== term) return; // replaced meanwhile; the replacement is still unstable
    this.unstable = this.unstable.slice(index + 1 - this.unstableOffset);
    this.unstableOffset = index + 1;
  }

  appliedTo(index: number): void {
    if (index < this.applied) throw new RaftInvariantError(`applied index going back from ${this.applied} to ${index}`);
    if (index > this.committed) throw new RaftInvariantError(`applied ${index} beyond commit ${this.committed}`);
    this.applied = index;
  }
}
