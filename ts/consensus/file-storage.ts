/**
 * Durable Raft storage: MemoryRaftStorage's log (one implementation of the log rules)
 * kept in memory for reads, and every change appended to `raft.log` and fsynced before
 * the write's promise resolves.
 *
 * File: `<dir>/raft.log`, a sequence of records `[u32 length][u32 crc32][payload]`
 * (little endian; crc32 of the payload), each payload a JSON object:
 *   {t:'snapshot', snapshot}          a snapshot received from the leader (replaces the log)
 *   {t:'entries', entries}            entries appended (replacing a conflicting suffix)
 *   {t:'hardState', hardState}        term, vote, commit
 *   {t:'appSnapshot', index, conf, data}  the application's own snapshot at an applied index
 *   {t:'compact', index}              entries up to index dropped
 * Replaying the records in order through MemoryRaftStorage rebuilds the state; any
 * prefix of records is a state the Raft rules allow (entries are persisted before the
 * hard state that commits them), so a crash between records is harmless.
 *
 * Torn tail: a record is valid when its length is non-zero, it fits in the file, its
 * payload starts with `{` and its checksum matches. At the first record that is not
 * valid, open looks for any valid record after it (at every byte offset): if there is
 * none, the rest of the file is a write a crash interrupted (cut short, half-written, or
 * zero-filled) and is truncated away; if there is one, the log is corrupt (a damaged
 * record, or a damaged length, with acknowledged records after it) and open fails naming
 * the file and both offsets, leaving the file untouched. A valid record that does not
 * replay (bad JSON, a broken log rule) is corruption too.
 *
 * Compaction rewrite: after `compact()`, once more than REWRITE_RECORDS records were
 * appended since the last rewrite, the live state is written to `raft.log.tmp`, fsynced,
 * renamed over `raft.log`, and the directory fsynced. The rewritten file replays to
 * exactly the state before it (entries the snapshot covers but compaction kept, for slow
 * followers, stay). Counting records, not bytes, bounds the file to about
 * REWRITE_RECORDS records beyond the live state between compactions.
 *
 * Creation: when open creates `raft.log` (or the directory), the directory holding it is
 * fsynced, so the file's existence is durable before anything is acknowledged.
 *
 * Failure: a failed write or fsync makes the storage failed for good: every read throws
 * StorageError('failure') (the core then stops voting and acknowledging) and every write
 * rejects. The driver rebuilds the peer from disk (a restart).
 *
 * Owns: the file format and its fsync discipline. Must never: block the event loop
 * (fs.promises only), or report a write done before it is durable.
 */

import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import { confStateFromJson, entryFromJson, entryToJson, hardStateFromJson, snapshotFromJson, snapshotToJson } from './codec';
import { MemoryRaftStorage, type RaftStorage } from './storage';
import { StorageError, type ConfState, type Entry, type HardState, type Snapshot, type SnapshotMeta } from './types';

const FILE = 'raft.log';
const HEADER = 8;
/** Records appended since the last rewrite before compact() rewrites the file. */
export const REWRITE_RECORDS = 256;

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32(buf: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < buf.length; i++) c = CRC_TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

type RecordPayload =
  | { t: 'snapshot'; snapshot: unknown }
  | { t: 'entries'; entries: unknown[] }
  | { t: 'hardState'; hardState: HardState }
  | { t: 'appSnapshot'; index: number; conf: ConfState; data: string }
  | { t: 'compact'; index: number };

function frame(payload: RecordPayload): Buffer {
  const body = Buffer.from(JSON.stringify(payload), 'utf8');
  const head = Buffer.alloc(HEADER);
  head.writeUInt32LE(body.length, 0);
  head.writeUInt32LE(crc32(body), 4);
  return Buffer.concat([head, body]);
}

/** End of the valid record starting at `off`, or -1 (see "Torn tail" above). */
function validRecordEnd(buf: Buffer, off: number): number {
  if (buf.length - off < HEADER + 1) return -1;
  const len = buf.readUInt32LE(off);
  if (len === 0 || len > buf.length - off - HEADER) return -1;
  if (buf[off + HEADER] !== 0x7b /* '{' */) return -1;
  if (crc32(buf.subarray(off + HEADER, off + HEADER + len)) !== buf.readUInt32LE(off + 4)) return -1;
  return off + HEADER + len;
}

/**
 * The first offset at or after `from` where a valid record starts, or -1. Payloads are
 * JSON text (no zero bytes), so a torn record's payload cannot pass for a record header
 * of a plausible length: this finds only records written as such.
 */
function nextValidRecord(buf: Buffer, from: number): number {
  for (let p = from; p + HEADER < buf.length; p++) if (validRecordEnd(buf, p) >= 0) return p;
  return -1;
}

async function syncDir(fsys: Pick<typeof fs, 'open'>, dir: string): Promise<void> {
  const d = await fsys.open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

function replay(mem: MemoryRaftStorage, p: RecordPayload): void {
  switch (p.t) {
    case 'snapshot':
      mem.applySnapshot(snapshotFromJson(p.snapshot));
      return;
    case 'entries':
      mem.append(p.entries.map((e, i) => entryFromJson(e, `entries[${i}]`)));
      return;
    case 'hardState':
      mem.setHardState(hardStateFromJson(p.hardState));
      return;
    case 'appSnapshot':
      mem.createSnapshot(p.index, confStateFromJson(p.conf), new Uint8Array(Buffer.from(p.data, 'base64')));
      return;
    case 'compact':
      mem.compact(p.index);
      return;
    default:
      throw new Error(`unknown record type ${JSON.stringify((p as { t: unknown }).t)}`);
  }
}

/** Writes the whole buffer (a file write may be short). */
async function writeAll(h: fs.FileHandle, buf: Buffer): Promise<void> {
  let off = 0;
  while (off < buf.length) {
    const { bytesWritten } = await h.write(buf, off, buf.length - off);
    if (bytesWritten <= 0) throw new Error('consensus storage: write made no progress');
    off += bytesWritten;
  }
}

export interface FileRaftStorageOptions {
  /** File system calls (tests inject failures). */
  fs?: Pick<typeof fs, 'open' | 'rename' | 'mkdir' | 'readFile' | 'truncate' | 'rm'>;
}

export class FileRaftStorage implements RaftStorage {
  private mem = new MemoryRaftStorage();
  private handle: fs.FileHandle | null = null;
  private failed: Error | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private recordsSinceRewrite = 0;
  private empty = true;
  private readonly fsys: NonNullable<FileRaftStorageOptions['fs']>;

  private constructor(
    readonly dir: string,
    opts: FileRaftStorageOptions,
  ) {
    this.fsys = opts.fs ?? fs;
  }

  get file(): string {
    return path.join(this.dir, FILE);
  }

  static async open(dir: string, opts: FileRaftStorageOptions = {}): Promise<FileRaftStorage> {
    const s = new FileRaftStorage(dir, opts);
    const made = await s.fsys.mkdir(dir, { recursive: true });
    if (made !== undefined) {
      // New directories: make each one's entry in its parent durable.
      const top = path.resolve(made);
      for (let d = path.resolve(dir); ; d = path.dirname(d)) {
        await syncDir(s.fsys, path.dirname(d));
        if (d === top || d === path.dirname(d)) break;
      }
    }
    await s.fsys.rm(path.join(dir, `${FILE}.tmp`), { force: true });
    let buf: Buffer;
    let existed = true;
    try {
      buf = await s.fsys.readFile(s.file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      buf = Buffer.alloc(0);
      existed = false;
    }
    let off = 0;
    let records = 0;
    while (off < buf.length) {
      const end = validRecordEnd(buf, off);
      if (end < 0) {
        const next = nextValidRecord(buf, off + 1);
        if (next >= 0) {
          throw new Error(
            `${s.file}: record at byte ${off} is damaged (bad length or checksum) but a valid record follows at byte ${next}: ` +
              'the consensus log is corrupt (nothing was truncated)',
          );
        }
        break; // torn tail: a write a crash interrupted
      }
      try {
        replay(s.mem, JSON.parse(buf.subarray(off + HEADER, end).toString('utf8')) as RecordPayload);
      } catch (err) {
        throw new Error(`${s.file}: record at byte ${off} cannot be replayed (the consensus log is corrupt): ${(err as Error).message}`);
      }
      off = end;
      records++;
    }
    if (off < buf.length) await s.fsys.truncate(s.file, off);
    s.empty = records === 0;
    s.recordsSinceRewrite = records;
    s.handle = await s.fsys.open(s.file, 'a');
    if (off < buf.length) await s.handle.sync();
    if (!existed) await syncDir(s.fsys, dir);
    return s;
  }

  /** Nothing was ever persisted: a brand-new peer. */
  isEmpty(): boolean {
    return this.empty;
  }

  // -- reads (RaftStorage) -----------------------------------------------------------------

  private check(): void {
    if (this.failed) throw new StorageError('failure', `consensus storage failed: ${this.failed.message}`);
  }

  initialState(): { hardState: HardState; snapshotMeta: SnapshotMeta } {
    this.check();
    return this.mem.initialState();
  }

  firstIndex(): number {
    this.check();
    return this.mem.firstIndex();
  }

  lastIndex(): number {
    this.check();
    return this.mem.lastIndex();
  }

  term(index: number): number {
    this.check();
    return this.mem.term(index);
  }

  entries(lo: number, hi: number): Entry[] {
    this.check();
    return this.mem.entries(lo, hi);
  }

  snapshot(): Snapshot {
    this.check();
    return this.mem.snapshot();
  }

  // -- writes ------------------------------------------------------------------------------

  /** Runs writes one at a time; a failure fails the storage for good. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(async () => {
      this.check();
      try {
        return await fn();
      } catch (err) {
        if (!(err instanceof StorageError)) this.failed ??= err as Error;
        throw err;
      }
    });
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async write(records: RecordPayload[]): Promise<void> {
    if (records.length === 0) return;
    const h = this.handle;
    if (!h) throw new Error('consensus storage is closed');
    await writeAll(h, Buffer.concat(records.map(frame)));
    await h.sync();
    this.recordsSinceRewrite += records.length;
    this.empty = false;
  }

  /** Founding membership and initial application state (empty storage only). */
  bootstrap(conf: ConfState, data: Uint8Array): Promise<void> {
    return this.serial(async () => {
      if (!this.empty) throw new Error('bootstrap on a storage that already holds consensus state');
      const boot = MemoryRaftStorage.bootstrap(conf, data);
      const { hardState } = boot.initialState();
      this.mem = boot;
      await this.write([
        { t: 'snapshot', snapshot: snapshotToJson(boot.snapshot()) },
        { t: 'hardState', hardState },
      ]);
    });
  }

  /** Persists a Ready's snapshot, entries and hard state, in that order, with one fsync. */
  persist(rd: { snapshot: Snapshot | null; entries: readonly Entry[]; hardState: HardState | null }): Promise<void> {
    return this.serial(async () => {
      const records: RecordPayload[] = [];
      if (rd.snapshot) {
        this.mem.applySnapshot(rd.snapshot);
        records.push({ t: 'snapshot', snapshot: snapshotToJson(rd.snapshot) });
      }
      if (rd.entries.length > 0) {
        this.mem.append(rd.entries);
        records.push({ t: 'entries', entries: rd.entries.map(entryToJson) });
      }
      if (rd.hardState) {
        this.mem.setHardState(rd.hardState);
        records.push({ t: 'hardState', hardState: { term: rd.hardState.term, vote: rd.hardState.vote, commit: rd.hardState.commit } });
      }
      await this.write(records);
    });
  }

  /** Records the application's snapshot at `index` (applied, at most the persisted commit). */
  createSnapshot(index: number, conf: ConfState, data: Uint8Array): Promise<Snapshot> {
    return this.serial(async () => {
      const snap = this.mem.createSnapshot(index, conf, data);
      await this.write([{ t: 'appSnapshot', index, conf: { voters: [...conf.voters], learners: [...conf.learners] }, data: Buffer.from(data).toString('base64') }]);
      return snap;
    });
  }

  /** Drops entries up to `index` (covered by the snapshot); rewrites the file when much of it is dead. */
  compact(index: number): Promise<void> {
    return this.serial(async () => {
      this.mem.compact(index);
      await this.write([{ t: 'compact', index }]);
      if (this.recordsSinceRewrite > REWRITE_RECORDS) await this.rewrite();
    });
  }

  /**
   * The live state alone in a new file, renamed over the old one; it replays to exactly
   * the current state. When compaction kept entries the snapshot covers (the log starts
   * before the snapshot), the file starts with a placeholder snapshot at the compaction
   * point (index and term of the entry before the first kept one, no data), then the
   * entries, a hard state committing up to the snapshot, the real snapshot as an
   * `appSnapshot`, and the real hard state. The file only replaces the old one once
   * complete, so its intermediate states are never seen.
   */
  private async rewrite(): Promise<void> {
    const tmp = `${this.file}.tmp`;
    const first = this.mem.firstIndex();
    const last = this.mem.lastIndex();
    const snap = this.mem.snapshot();
    const hs = this.mem.initialState().hardState;
    const kept = first <= last ? this.mem.entries(first, last + 1) : [];
    const records: RecordPayload[] = [];
    const behind = first - 1 < snap.meta.index;
    if (behind) {
      const placeholder = { meta: { index: first - 1, term: this.mem.term(first - 1), conf: snap.meta.conf }, data: new Uint8Array(0) };
      records.push({ t: 'snapshot', snapshot: snapshotToJson(placeholder) });
    } else {
      records.push({ t: 'snapshot', snapshot: snapshotToJson(snap) });
    }
    if (kept.length > 0) records.push({ t: 'entries', entries: kept.map(entryToJson) });
    if (behind) {
      records.push({ t: 'hardState', hardState: { term: hs.term, vote: hs.vote, commit: Math.max(hs.commit, snap.meta.index) } });
      const conf = { voters: [...snap.meta.conf.voters], learners: [...snap.meta.conf.learners] };
      records.push({ t: 'appSnapshot', index: snap.meta.index, conf, data: Buffer.from(snap.data.buffer, snap.data.byteOffset, snap.data.byteLength).toString('base64') });
    }
    records.push({ t: 'hardState', hardState: { term: hs.term, vote: hs.vote, commit: hs.commit } });
    const h = await this.fsys.open(tmp, 'w');
    try {
      await writeAll(h, Buffer.concat(records.map(frame)));
      await h.sync();
    } finally {
      await h.close();
    }
    await this.fsys.rename(tmp, this.file);
    await syncDir(this.fsys, this.dir);
    await this.handle?.close();
    this.handle = await this.fsys.open(this.file, 'a');
    this.recordsSinceRewrite = records.length;
  }

  async close(): Promise<void> {
    await this.queue;
    await this.handle?.close();
    this.handle = null;
  }
}
