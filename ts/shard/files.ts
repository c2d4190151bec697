/**
 * Atomic file writes for shard and storage metadata: write a temp file, fsync it,
 * rename it over the target, fsync the directory. A crash leaves either the old or
 * the new file, never a torn one.
 *
 * Owns: that sequence. Must never: block the event loop (fs/promises runs on the
 * libuv pool).
 */

import * as fs from 'node:fs/promises';
import * as path from 'node:path';

let counter = 0;

export async function writeFileAtomic(file: string, data: Uint8Array | string): Promise<void> {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.${counter++}.tmp`);
  const fh = await fs.open(tmp, 'w');
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    await fs.rename(tmp, file);
  } catch (err) {
    await fs.rm(tmp, { force: true });
    throw err;
  }
  await syncDir(dir);
}

export async function syncDir(dir: string): Promise<void> {
  const d = await fs.open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

/** Reads and parses a JSON file; null when it does not exist. */
export async function readJson<T>(file: string): Promise<T | null> {
  try {
    return JSON.parse(await fs.readFile(file, 'utf8')) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/**
 * Temp files that a crash left behind in `dir`: writeFileAtomic's `.<name>.<pid>.<n>.tmp`
 * and the engine's `.<name>.tmp-<pid>-<n>` (never the real files, which do not start
 * with a dot).
 */
export async function removeTempFiles(dir: string): Promise<number> {
  let names: string[];
  try {
    names = await fs.readdir(dir);
  } catch {
    return 0;
  }
  const stale = names.filter((n) => n.startsWith('.') && (n.endsWith('.tmp') || /\.tmp-\d+-\d+$/.test(n)));
  await Promise.all(stale.map((n) => fs.rm(path.join(dir, n), { force: true })));
  return stale.length;
}
