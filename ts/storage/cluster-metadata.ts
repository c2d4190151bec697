/**
 * The cluster metadata keys (`/cluster/metadata/keys`): a JSON value per key. In a
 * cluster they live in the consensus state (ts/storage/cluster-state.ts, operation
 * `setClusterMetadata`), so every peer answers the same; on a single node this store
 * keeps them in `<storage>/cluster_metadata.json`, written atomically before a change is
 * acknowledged.
 *
 * Owns: that file. Must never: be used in cluster mode (the consensus state is the truth
 * there).
 */

import * as path from 'node:path';

import { readJson, writeFileAtomic } from '../common/files';

export const CLUSTER_METADATA_FILE = 'cluster_metadata.json';

export class LocalClusterMetadata {
  private writes: Promise<void> = Promise.resolve();

  private constructor(
    private readonly file: string,
    private values: Record<string, unknown>,
  ) {}

  static async open(storagePath: string): Promise<LocalClusterMetadata> {
    const file = path.join(storagePath, CLUSTER_METADATA_FILE);
    const stored = await readJson<Record<string, unknown>>(file);
    if (stored !== null && (typeof stored !== 'object' || Array.isArray(stored))) throw new Error(`${file}: not a JSON object`);
    return new LocalClusterMetadata(file, stored ?? {});
  }

  /** The keys, sorted (the reference's order). */
  keys(): string[] {
    return Object.keys(this.values).sort();
  }

  /** A key's value; null when it has none (the reference's answer for a missing key). */
  get(key: string): unknown {
    return Object.prototype.hasOwnProperty.call(this.values, key) ? this.values[key] : null;
  }

  /** Sets a key (null removes it), durable once this resolves; changes are written in order. */
  set(key: string, value: unknown): Promise<void> {
    const next = { ...this.values };
    if (value === null) delete next[key];
    else Object.defineProperty(next, key, { value, writable: true, enumerable: true, configurable: true });
    const write = this.writes.then(() => writeFileAtomic(this.file, JSON.stringify(next)));
    this.writes = write.catch(() => undefined);
    return write.then(() => {
      this.values = next;
    });
  }
}
