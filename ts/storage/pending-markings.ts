/**
 * The Dead markings of replicas that missed an acknowledged write while consensus could
 * not take the marking (no leader, no majority: one peer of two down), kept in
 * `storage/pending_dead_markings.json`. A write that goes on without such a replica is
 * answered only once its marking is written here (fsynced, replaced atomically), so a
 * restart of this peer before consensus took the marking still leaves that replica out
 * and proposes the marking again (P2PClusterLink.bind); otherwise both replicas would be
 * Active after the restart, one of them without the write, for good.
 *
 * Owns: the file. Must never: decide which replica to mark (DeadMarking does).
 */

import * as path from 'node:path';

import { readJson, writeFileAtomic } from '../common/files';
import type { ShardTarget } from '../collection/cluster-link';

export interface PendingMarking {
  target: ShardTarget;
  peer: string;
  reason: string;
  /**
   * This peer's applied consensus index when the marking was deferred: replica states
   * applied before it (a restart replays older entries) say nothing about this marking.
   */
  appliedAt: number;
}

interface FileContent {
  markings: PendingMarking[];
}

export class PendingMarkings {
  private readonly byKey = new Map<string, PendingMarking>();
  /** Writes of the file, one after the other (the last one holds the current set). */
  private writing: Promise<void> = Promise.resolve();
  /** Whether the last write of the file failed (the file may lack entries of byKey). */
  private lastFailed = false;

  private constructor(private readonly file: string) {}

  static async open(storagePath: string): Promise<PendingMarkings> {
    const store = new PendingMarkings(path.join(storagePath, 'pending_dead_markings.json'));
    const saved = await readJson<FileContent>(store.file);
    for (const m of saved?.markings ?? []) {
      if (!valid(m)) throw new Error(`${store.file}: an entry is not a marking: ${JSON.stringify(m)}`);
      store.byKey.set(markingKey(m.target, m.peer), m);
    }
    return store;
  }

  entries(): PendingMarking[] {
    return [...this.byKey.values()];
  }

  /** Keeps a marking; resolves once the file holding it is durable (at once when it was kept already). */
  add(m: PendingMarking): Promise<void> {
    const key = markingKey(m.target, m.peer);
    // Proposed again every second while no leader takes it: written once (again after a failed write).
    if (this.byKey.has(key) && !this.lastFailed) return this.writing;
    this.byKey.set(key, m);
    return this.save();
  }

  /** Forgets a marking consensus took (or no longer needs); resolves once the file is written. */
  remove(key: string): Promise<void> {
    if (!this.byKey.delete(key)) return this.writing;
    return this.save();
  }

  private save(): Promise<void> {
    const content: FileContent = { markings: this.entries() };
    const next = this.writing
      .catch(() => undefined)
      .then(() => writeFileAtomic(this.file, JSON.stringify(content)))
      .then(
        () => {
          this.lastFailed = false;
        },
        (err: unknown) => {
          this.lastFailed = true;
          throw err;
        },
      );
    this.writing = next;
    return next;
  }
}

/** How DeadMarking and this store name one replica: `collection/uuid/shard/peer`. */
export function markingKey(target: ShardTarget, peer: string): string {
  return `${target.collection}/${target.uuid}/${target.shard}/${peer}`;
}

function valid(m: unknown): m is PendingMarking {
  if (typeof m !== 'object' || m === null) return false;
  const { target, peer, reason, appliedAt } = m as Partial<PendingMarking>;
  return (
    typeof peer === 'string' &&
    typeof reason === 'string' &&
    Number.isSafeInteger(appliedAt) &&
    typeof target === 'object' &&
    target !== null &&
    typeof target.collection === 'string' &&
    typeof target.uuid === 'string' &&
    Number.isInteger(target.shard)
  );
}
