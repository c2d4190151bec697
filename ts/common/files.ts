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

/**
 * `data` may be given in pieces, written one after another (no concatenated copy); a
 * generator is consumed lazily, one piece per write, so its garbage can go meanwhile.
 */
export async function writeFileAtomic(file: string, data: Uint8Array | string | Iterable<Uint8Array>): Promise<void> {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.${counter++}.tmp`);
  const fh = await fs.open(tmp, 'w');
  try {
    if (typeof data !== 'string' && !(data instanceof Uint8Array)) {
      for (const piece of data) {
        for (let at = 0; at < piece.length; ) at += (await fh.write(piece, at, piece.length - at)).bytesWritten;
      }
    } else {
      await fh.writeFile(data);
    }
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

/** Fsyncs one file's data. */
export async function syncFile(file: string): Promise<void> {
  const fh = await fs.open(file, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
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

/**
 * Fsyncs every file and directory under `root` (an unpacked snapshot, before it
 * replaces anything): the entries of a directory at the same time (the disk gets
 * them all at once), each directory after its entries.
 */
export async function syncTree(root: string): Promise<void> {
  const entries = await fs.readdir(root, { withFileTypes: true });
  await Promise.all(
    entries.map((e) => {
      const p = path.join(root, e.name);
      if (e.isDirectory()) return syncTree(p);
      if (e.isFile()) return syncFile(p);
      return undefined;
    }),
  );
  await syncDir(root);
}

interface SwapJournal {
  /** The directory being replaced, a plain name inside the parent. */
  live: string;
  /** Where the previous `live` was moved (`.replaced-*`), or null when there was none. */
  old: string | null;
  /** Set once the new data has opened: from then on the swap is done. */
  committed: boolean;
}

let swapCounter = 0;

/**
 * Puts the directory `source` (on the same file system) in place of `parent/live`,
 * keeping the previous one until `open()` has accepted the new data. A journal beside
 * them records the swap: `finishSwaps` at start-up completes a committed swap and
 * undoes any other, so a crash at any step leaves either the old data or new data that
 * opened. If `open()` throws, the old directory is back in place when this rejects.
 *
 * It resolves once the swap is committed (durably: the journal says so), with the
 * removal of the previous directory and of the journal still under way: the returned
 * `cleanup` settles when they are gone. A crash before then leaves a committed journal,
 * and start-up (finishSwaps) removes what it names; the caller need not wait.
 */
export async function swapDirectory(parent: string, live: string, source: string, hasOld: boolean, open: () => Promise<void>): Promise<{ cleanup: Promise<void> }> {
  const stamp = `${process.pid}-${Date.now()}-${swapCounter++}`;
  const journalFile = path.join(parent, `.swap-${stamp}.json`);
  const journal: SwapJournal = { live, old: hasOld ? `.replaced-${stamp}` : null, committed: false };
  const livePath = path.join(parent, live);
  await writeFileAtomic(journalFile, JSON.stringify(journal));
  if (journal.old) await fs.rename(livePath, path.join(parent, journal.old));
  let placed = false;
  try {
    await fs.rename(source, livePath);
    placed = true;
    await syncDir(parent);
    await open();
  } catch (err) {
    // Move the refused data aside (never delete in place: a crash midway must leave
    // something start-up can tell apart), put the old data back, then clean up.
    const failed = path.join(parent, `.failed-${stamp}`);
    if (placed) await fs.rename(livePath, failed);
    if (journal.old) await fs.rename(path.join(parent, journal.old), livePath);
    await syncDir(parent);
    await fs.rm(journalFile, { force: true });
    await fs.rm(failed, { recursive: true, force: true });
    throw err;
  }
  await writeFileAtomic(journalFile, JSON.stringify({ ...journal, committed: true }));
  const cleanup = (async () => {
    if (journal.old) await fs.rm(path.join(parent, journal.old), { recursive: true, force: true });
    await fs.rm(journalFile, { force: true });
  })();
  return { cleanup };
}

const exists = (p: string) => fs.access(p).then(() => true, () => false);

/**
 * Completes or undoes the swaps (swapDirectory) a crash interrupted in `parent`, then
 * removes their leftovers and folders renamed away for deletion (`.dropped-*`). Returns
 * what it did, for the log.
 */
export async function finishSwaps(parent: string): Promise<string[]> {
  const done: string[] = [];
  for (const n of await fs.readdir(parent)) {
    if (!n.startsWith('.swap-') || !n.endsWith('.json')) continue;
    const j = await readJson<SwapJournal>(path.join(parent, n)).catch(() => null);
    const valid =
      j !== null &&
      typeof j.live === 'string' &&
      j.live !== '' &&
      !j.live.includes('/') &&
      !j.live.startsWith('.') &&
      (j.old === null || (typeof j.old === 'string' && /^\.replaced-[0-9-]+$/.test(j.old)));
    if (j && valid) {
      const livePath = path.join(parent, j.live);
      const oldPath = j.old ? path.join(parent, j.old) : null;
      if (j.committed) {
        if (oldPath) await fs.rm(oldPath, { recursive: true, force: true });
        done.push(`${j.live}: the new data had opened; kept it`);
      } else if (oldPath && (await exists(oldPath))) {
        if (await exists(livePath)) await fs.rename(livePath, path.join(parent, `.failed-${n.slice(6, -5)}`));
        await fs.rename(oldPath, livePath);
        done.push(`${j.live}: put the data from before the interrupted recovery back`);
      } else if (!oldPath && (await exists(livePath))) {
        await fs.rename(livePath, path.join(parent, `.failed-${n.slice(6, -5)}`));
        done.push(`${j.live}: removed data an interrupted recovery had not finished checking`);
      }
    }
    await fs.rm(path.join(parent, n), { force: true });
  }
  for (const n of await fs.readdir(parent)) {
    // `.dropped-*`: a replica's folder renamed away to be deleted (Collection.dropLocal) when a crash came.
    if (n.startsWith('.replaced-') || n.startsWith('.failed-') || n.startsWith('.dropped-')) await fs.rm(path.join(parent, n), { recursive: true, force: true });
  }
  await syncDir(parent);
  return done;
}
