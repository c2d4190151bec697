/**
 * Where finished snapshot files live: a folder on local disk (`storage.snapshots_path`)
 * or an S3 bucket (`storage.snapshots_config.snapshots_storage: s3`, see s3-store.ts).
 *
 * A snapshot is addressed by a folder inside the store and a file name:
 * `''` for full-storage snapshots, `<collection>` for collection snapshots and
 * `<collection>/shards/<shard_id>` for shard snapshots. Each snapshot file has a
 * companion `<name>.checksum` holding its lowercase hex SHA-256.
 *
 * Owns: that layout, publishing a finished temp file atomically (a listed snapshot is
 * always complete), listing, streaming out, deleting. Must never: build or read
 * archives (archive.ts does), or know HTTP.
 */

import { createReadStream, createWriteStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

import { NotFoundError } from '../common/errors';
import { syncDir, syncFile } from '../common/files';

export interface SnapshotDescription {
  name: string;
  /** `YYYY-MM-DDTHH:MM:SS` in UTC, as the reference reports it. */
  creation_time: string | null;
  size: number;
  checksum?: string;
}

export interface SnapshotStore {
  readonly kind: 'local' | 's3';
  /** Snapshots (files ending in `.snapshot`) in `dir`, newest last; [] when the folder does not exist. */
  list(dir: string): Promise<SnapshotDescription[]>;
  /**
   * Publishes the finished local file `file` as `dir/name` with its checksum. The file
   * is consumed (moved or uploaded, then removed). Only a complete snapshot is ever listed.
   */
  put(dir: string, name: string, file: string, checksum: string): Promise<SnapshotDescription>;
  /** The snapshot's bytes as a stream, with its size; NotFoundError when absent. */
  open(dir: string, name: string): Promise<{ stream: Readable; size: number }>;
  /** The description of one snapshot; NotFoundError when absent. */
  describe(dir: string, name: string): Promise<SnapshotDescription>;
  /** Removes the snapshot and its checksum; NotFoundError when absent. */
  delete(dir: string, name: string): Promise<void>;
  /**
   * A local file holding the snapshot: the stored file itself (local store) or a copy
   * downloaded into `tempDir` (S3), with a cleanup to call when done.
   */
  localCopy(dir: string, name: string, tempDir: string): Promise<{ file: string; cleanup(): Promise<void> }>;
}

/** A snapshot name must be a plain file name ending in `.snapshot`, not hidden. */
export function checkSnapshotName(name: string): void {
  // Only names a snapshot can have: temp files, checksums and anything else that
  // shares the folder are out of reach.
  if (!name.endsWith('.snapshot') || name.startsWith('.') || name.includes('/') || name.includes('\\') || name.includes('\0')) {
    throw new NotFoundError(`Snapshot ${name} not found`);
  }
}

export function formatCreationTime(d: Date): string {
  return d.toISOString().slice(0, 19);
}

export class LocalSnapshotStore implements SnapshotStore {
  readonly kind = 'local' as const;

  constructor(readonly root: string) {}

  /** The absolute path of `dir/name` (the name already checked). */
  pathOf(dir: string, name: string): string {
    checkSnapshotName(name);
    const p = path.resolve(this.root, dir, name);
    // Callers pass checked folder names; this is the last line against a crafted one.
    if (!p.startsWith(this.root + path.sep)) throw new NotFoundError(`Snapshot ${name} not found`);
    return p;
  }

  async list(dir: string): Promise<SnapshotDescription[]> {
    let names: string[];
    try {
      names = await fs.readdir(path.join(this.root, dir));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const out: SnapshotDescription[] = [];
    for (const n of names.filter((x) => x.endsWith('.snapshot') && !x.startsWith('.')).sort()) {
      try {
        out.push(await this.describe(dir, n));
      } catch (err) {
        if (!(err instanceof NotFoundError)) throw err; // deleted meanwhile
      }
    }
    return out;
  }

  async describe(dir: string, name: string): Promise<SnapshotDescription> {
    const file = this.pathOf(dir, name);
    let st;
    try {
      st = await fs.stat(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new NotFoundError(`Snapshot ${name} not found`);
      throw err;
    }
    if (!st.isFile()) throw new NotFoundError(`Snapshot ${name} not found`);
    const d: SnapshotDescription = { name, creation_time: formatCreationTime(st.mtime), size: st.size };
    try {
      const sum = (await fs.readFile(`${file}.checksum`, 'utf8')).trim();
      if (/^[0-9a-f]{64}$/.test(sum)) d.checksum = sum;
    } catch {
      // no checksum file: the field is left out, as the reference does
    }
    return d;
  }

  async put(dir: string, name: string, file: string, checksum: string): Promise<SnapshotDescription> {
    const target = this.pathOf(dir, name);
    const folder = path.dirname(target);
    const sumTmp = path.join(folder, `.${name}.checksum.${process.pid}.tmp`);
    const tmp = path.join(folder, `.${name}.${process.pid}.tmp`);
    try {
      await fs.mkdir(folder, { recursive: true });
      // The checksum goes first: a snapshot without one is still valid, but a listed
      // snapshot must never be partial, and the rename of the snapshot is what lists it.
      await fs.writeFile(sumTmp, checksum);
      await fs.rename(sumTmp, `${target}.checksum`);
      await moveFile(file, tmp);
      await fs.rename(tmp, target);
      await syncDir(folder);
    } catch (err) {
      await Promise.all([sumTmp, tmp, `${target}.checksum`, file].map((f) => fs.rm(f, { force: true })));
      throw err;
    }
    return this.describe(dir, name);
  }

  async open(dir: string, name: string): Promise<{ stream: Readable; size: number }> {
    const d = await this.describe(dir, name);
    return { stream: createReadStream(this.pathOf(dir, name), { start: 0, end: Math.max(0, d.size - 1) }), size: d.size };
  }

  async delete(dir: string, name: string): Promise<void> {
    await this.describe(dir, name);
    const file = this.pathOf(dir, name);
    await fs.rm(file, { force: true });
    await fs.rm(`${file}.checksum`, { force: true });
  }

  async localCopy(dir: string, name: string): Promise<{ file: string; cleanup(): Promise<void> }> {
    await this.describe(dir, name);
    return { file: this.pathOf(dir, name), cleanup: async () => undefined };
  }

  /** Removes temp files of publications a crash interrupted (`.<name>.<pid>.tmp`). */
  async removeLeftovers(): Promise<number> {
    let removed = 0;
    const walk = async (dir: string): Promise<void> => {
      let entries;
      try {
        entries = await fs.readdir(dir, { withFileTypes: true });
      } catch {
        return;
      }
      for (const e of entries) {
        const p = path.join(dir, e.name);
        if (e.isDirectory()) await walk(p);
        else if (e.name.startsWith('.') && e.name.endsWith('.tmp')) {
          await fs.rm(p, { force: true });
          removed++;
        } else if (e.name.endsWith('.snapshot.checksum') && !(await exists(p.slice(0, -'.checksum'.length)))) {
          // A checksum whose snapshot was never published (a crash between the two).
          await fs.rm(p, { force: true });
          removed++;
        }
      }
    };
    await walk(this.root);
    return removed;
  }
}

async function exists(p: string): Promise<boolean> {
  try {
    await fs.access(p);
    return true;
  } catch {
    return false;
  }
}

/** Renames `from` to `to`, or copies and fsyncs it when they are on different file systems. */
export async function moveFile(from: string, to: string): Promise<void> {
  try {
    await fs.rename(from, to);
    return;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
  }
  try {
    await pipeline(createReadStream(from), createWriteStream(to));
    await syncFile(to);
  } catch (err) {
    await fs.rm(to, { force: true });
    throw err;
  }
  await fs.rm(from, { force: true });
}
