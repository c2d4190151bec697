/**
 * Snapshots of collections, shards and the whole storage: creating them, recovering
 * from them (by location, by upload, at start-up), and the priority rules.
 *
 * Creation: each shard pins a fresh checkpoint (LocalShard.pinSnapshot), so the
 * archive holds every write acknowledged before the call; the tar is streamed into a
 * temp file while its SHA-256 is computed, then published by the store (local folder
 * or S3). Nothing is listed until it is complete.
 *
 * Recovery: the archive is brought to a local file (file://, http(s)://, s3://) and
 * unpacked into a hidden folder on the storage file system (an upload is unpacked
 * there as it arrives), its checksum checked when one is given (computed on the way,
 * in the same pass), validated, synced, and only then swapped in (TableOfContent.
 * replaceCollection, Collection.replaceShard). A failure at any step leaves the
 * existing collection exactly as it was. For a new collection, each shard's files
 * start loading while the rest is unpacked and synced (ShardPreload): its vector
 * indexes on the engine's threads as soon as they are on disk, its state file once
 * everything is written; the shards then open with them.
 *
 * Priorities on one node (SPEC 2.5): `snapshot` and `no_sync` put the snapshot's
 * data in place; `replica` prefers the data already here: an existing collection is
 * left as it is (after checking the snapshot fits it), and a new collection is
 * created empty with the snapshot's configuration. In cluster mode recoveries run
 * their own last step through consensus (cluster.ts) over the same unpacking.
 *
 * Owns: names, temp files, the steps above, progress logs. Must never: parse HTTP
 * (ts/api/rest/snapshots.ts does) or write archive entries by hand (archive.ts).
 */

import { createHash, randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { PassThrough, Readable, Transform, type TransformOptions } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';

import { BadInputError, BadRequestError, ChecksumMismatchError, ForbiddenError, NotFoundError, ServiceError } from '../common/errors';
import type { Collection } from '../collection/collection';
import { keyId, showKey } from '../collection/shard-keys';
import type { Config } from '../config/types';
import { syncFile } from '../common/files';
import { ShardPreload, type ShardSnapshotFiles } from '../shard/local-shard';
import { validateCollectionName, type TableOfContent } from '../storage/toc';
import { incompatibility, snapshotEntries, validateUnpacked, type SnapshotKind, type UnpackedSnapshot } from './archive';
import { LocalSnapshotStore, checkSnapshotName, type SnapshotDescription, type SnapshotStore } from './store';
import { currentProgress, type JobProgress } from './jobs';
import { FileChunks, TarError, extractTar, tarSize, tarStream, type TarEntry } from './tar';

export type Priority = 'replica' | 'snapshot' | 'no_sync';
export const PRIORITIES: readonly Priority[] = ['replica', 'snapshot', 'no_sync'];

/** An archive never has more entries than this (a shard has a handful of files). */
const MAX_ENTRIES = 100_000;
/** Archives are read in pieces of this size when recovering (into a few reused buffers: FileChunks). */
const READ_CHUNK = 1024 * 1024;
/**
 * Stream options of what feeds the tar reader: chunks are handed over one by one as
 * they came (a byte-mode stream's read() joins whatever is buffered into one new
 * Buffer: a copy of the whole archive), and few are buffered.
 */
const CHUNKWISE = { readableObjectMode: true, readableHighWaterMark: 4 };
/** A file of a shard folder in an archive being unpacked: `<shard id>/<name>`. */
const SHARD_FILE_RE = /^([0-9]{1,9})\/([^/]+)$/;
/** At most this many shards' files are read while an archive unpacks (the others' when their shards open). */
const MAX_PRELOADS = 16;
/** Progress is logged at most this often during long archive work. */
const PROGRESS_EVERY_MS = 5_000;

/**
 * Where an archive to recover from comes from: a recovery `location`, or a local file
 * (its SHA-256 when already known; `owned` files are removed once read).
 */
export type RecoverySource = { location: string } | { file: string; checksum: string | null; owned: boolean } | ReceivedUpload;

/**
 * An upload unpacked as it was received (Snapshots.receive): the staging folder, the
 * names extracted, the archive's SHA-256 (when it was asked for) and size, and what
 * stopped the unpacking if something did (reported by the recovery, after its own
 * checks, as a file's would be).
 */
export interface ReceivedUpload {
  staged: string;
  names: string[];
  checksum: string | null;
  bytes: number;
  failure: unknown;
}

/** Milliseconds of a recovery's steps, for its log line. */
interface PhaseTimes {
  obtain?: number;
  extract?: number;
  validate?: number;
  apply?: number;
}

export interface StartupRestore {
  snapshots: Array<{ path: string; collection: string }>;
  force: boolean;
  storageSnapshot: string | null;
}

/**
 * Where start-up recovery puts collections: this node's storage, or (the first peer of
 * a new cluster) the cluster, through consensus (cluster.ts).
 */
export interface RestoreTarget {
  has(collection: string): boolean;
  /** Recovers `collection` from `source` with priority `snapshot`. */
  recoverCollection(collection: string, source: RecoverySource, priority: Priority, checksum: string | null): Promise<void>;
  /** Creates these aliases (alias → collection) where their collection exists. */
  restoreAliases(aliases: Record<string, string>): Promise<void>;
}

/** `YYYY-MM-DD-HH-MM-SS` in UTC. */
function stamp(d: Date): string {
  return d.toISOString().slice(0, 19).replace('T', '-').replace(/:/g, '-');
}

function diskError(err: unknown, what: string): unknown {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new ServiceError(`No space left on device while ${what}`);
  return err;
}

/**
 * A pass-through stream that counts what flows (and hashes it, unless `hashing` is
 * false), logging progress now and then.
 */
class Meter extends Transform {
  readonly hash = createHash('sha256');
  bytes = 0;
  private lastLog = Date.now();
  private readonly started = Date.now();

  constructor(
    private readonly report: (bytes: number, seconds: number) => void,
    private readonly hashing = true,
    options?: TransformOptions,
    /** A snapshot job's progress, told of every chunk. */
    private readonly progress: JobProgress | null = null,
  ) {
    super(options);
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null, data?: Buffer) => void): void {
    if (this.hashing) this.hash.update(chunk);
    this.bytes += chunk.length;
    this.progress?.add(chunk.length);
    const now = Date.now();
    if (now - this.lastLog >= PROGRESS_EVERY_MS) {
      this.lastLog = now;
      this.report(this.bytes, (now - this.started) / 1000);
    }
    cb(null, chunk);
  }
}

export class Snapshots {
  /** Temp files of snapshots being written or received (cleared at start-up). */
  readonly tempDir: string;
  private readonly reserved = new Set<string>();

  private constructor(
    private readonly config: Config,
    private readonly toc: TableOfContent,
    readonly store: SnapshotStore,
    private readonly logger: Logger,
    private readonly version: string,
  ) {
    const base = config.storage.temp_path ?? config.storage.snapshots_path;
    this.tempDir = path.join(path.resolve(base), '.quiver-tmp');
  }

  static async open(config: Config, toc: TableOfContent, logger: Logger, version: string): Promise<Snapshots> {
    const sc = config.storage.snapshots_config;
    // The AWS SDK is loaded only when S3 is configured (it takes a while to load).
    const store: SnapshotStore =
      sc.snapshots_storage === 's3' && sc.s3_config
        ? (await import('./s3-store')).S3SnapshotStore.create(sc.s3_config)
        : new LocalSnapshotStore(path.resolve(config.storage.snapshots_path));
    const s = new Snapshots(config, toc, store, logger.child({ component: 'snapshots' }), version);
    // Whatever a killed process left: half-written archives, received uploads.
    await fs.rm(s.tempDir, { recursive: true, force: true });
    if (store instanceof LocalSnapshotStore) {
      const removed = await store.removeLeftovers();
      if (removed > 0) s.logger.info({ files: removed }, 'removed snapshot temp files a crash left behind');
    }
    return s;
  }

  // -- names and folders -------------------------------------------------------------

  static collectionDir(collection: string): string {
    return collection;
  }

  static shardDir(collection: string, shardId: number): string {
    return `${collection}/shards/${shardId}`;
  }

  /** A name not taken in `dir` (a second snapshot in the same second moves on to the next second). */
  private async reserveName(dir: string, make: (ts: string) => string): Promise<string> {
    for (let t = Date.now(); ; t += 1000) {
      const name = make(stamp(new Date(t)));
      const key = `${dir}/${name}`;
      if (this.reserved.has(key)) continue;
      const taken = await this.store.describe(dir, name).then(
        () => true,
        (err: unknown) => {
          if (err instanceof NotFoundError) return false;
          throw err;
        },
      );
      if (!taken && !this.reserved.has(key)) {
        this.reserved.add(key);
        return name;
      }
    }
  }

  // -- creating --------------------------------------------------------------------------

  /**
   * `pin` as a snapshot job's step `name`, counting the checkpoint bytes the shards write
   * for it (their state and index files; the job runs its work under a counter, jobs.ts),
   * so its progress moves while nothing of the archive does.
   */
  private countedPin(name: string, c: Collection, ids: number[]): Promise<Map<number, ShardSnapshotFiles>> {
    const progress = currentProgress();
    if (progress === null) return this.pin(c, ids);
    progress.work(name, 'checkpoint bytes');
    return this.pin(c, ids);
  }

  private async pin(c: Collection, ids: number[], withContent = false): Promise<Map<number, ShardSnapshotFiles>> {
    const pins = new Map<number, ShardSnapshotFiles>();
    try {
      for (const id of ids) pins.set(id, await c.localShard(id).pinSnapshot(withContent));
    } catch (err) {
      await Promise.all([...pins.values()].map((p) => p.release()));
      throw err;
    }
    return pins;
  }

  /**
   * Streams `entries` as a tar into a new temp file; resolves with its path, size and
   * SHA-256. In a snapshot job its bytes are the phase `phase`, whose total is the exact
   * size of the archive (for entries listed ahead; an async listing has no total).
   */
  private async writeArchive(entries: Iterable<TarEntry> | AsyncIterable<TarEntry>, label: Record<string, unknown>, phase = 'writing'): Promise<{ file: string; size: number; checksum: string }> {
    await fs.mkdir(this.tempDir, { recursive: true });
    const file = path.join(this.tempDir, `${randomUUID()}.snapshot.tmp`);
    const progress = currentProgress();
    if (progress !== null) {
      let total: number | null = null;
      if (Symbol.iterator in entries) {
        const listed = [...entries];
        entries = listed;
        total = await tarSize(listed).catch(() => null);
      }
      progress.phase(phase, total);
    }
    const meter = new Meter(
      (bytes, s) => this.logger.info({ ...label, mb: +(bytes / 1048576).toFixed(1), mbPerSec: +(bytes / 1048576 / s).toFixed(1) }, 'writing snapshot'),
      true,
      undefined,
      progress,
    );
    try {
      await pipeline(tarStream(entries), meter, createWriteStream(file));
      await syncFile(file);
    } catch (err) {
      await fs.rm(file, { force: true });
      throw diskError(err, `writing snapshot ${String(label.snapshot)}`);
    }
    return { file, size: meter.bytes, checksum: meter.hash.digest('hex') };
  }

  private async publish(dir: string, name: string, entries: Iterable<TarEntry> | AsyncIterable<TarEntry>, release: () => Promise<void>): Promise<SnapshotDescription> {
    const started = Date.now();
    let archive;
    try {
      archive = await this.writeArchive(entries, { snapshot: name });
    } catch (err) {
      this.reserved.delete(`${dir}/${name}`);
      throw err;
    } finally {
      await release();
    }
    currentProgress()?.step('storing');
    try {
      const d = await this.store.put(dir, name, archive.file, archive.checksum);
      const s = (Date.now() - started) / 1000;
      this.logger.info({ snapshot: name, bytes: d.size, seconds: s, mbPerSec: +(d.size / 1048576 / Math.max(s, 1e-3)).toFixed(1) }, 'snapshot created');
      return d;
    } catch (err) {
      throw diskError(err, `storing snapshot ${name}`);
    } finally {
      this.reserved.delete(`${dir}/${name}`);
    }
  }

  /** The collection a name or alias stands for now (NotFoundError when neither). */
  collectionName(nameOrAlias: string): string {
    return this.toc.get(nameOrAlias).name;
  }

  async createCollection(nameOrAlias: string): Promise<SnapshotDescription> {
    const c = this.toc.get(nameOrAlias);
    return this.create('collection', c, c.localShardIds(), Snapshots.collectionDir(c.name), (ts) => `${c.name}-${this.toc.peerId}-${ts}.snapshot`);
  }

  /**
   * A shard snapshot, named as the reference names it (`{collection}-shard-{id}-{ts}.snapshot`),
   * or with `peer`, `{collection}-shard-{id}-{peer}-{ts}.snapshot`: scheduled snapshots in
   * a cluster (cluster-schedule.ts), which several peers may make of the same shard in the
   * same second (a run taken over from a peer still making it) into one shared store (S3):
   * without the peer in the name one would replace the other, and retention deleting one
   * would delete both. Names are never parsed: listing, recovery and retention (by the
   * names consensus recorded) take either form.
   */
  async createShard(nameOrAlias: string, shardId: number, peer?: string): Promise<SnapshotDescription> {
    const c = this.toc.get(nameOrAlias);
    c.localShard(shardId);
    const who = peer === undefined ? '' : `${peer}-`;
    return this.create('shard', c, [shardId], Snapshots.shardDir(c.name, shardId), (ts) => `${c.name}-shard-${shardId}-${who}${ts}.snapshot`);
  }

  private async create(kind: SnapshotKind, c: Collection, shardIds: number[], dir: string, naming: (ts: string) => string): Promise<SnapshotDescription> {
    const name = await this.reserveName(dir, naming);
    let pins: Map<number, ShardSnapshotFiles>;
    try {
      pins = await this.countedPin('pinning', c, shardIds);
    } catch (err) {
      this.reserved.delete(`${dir}/${name}`);
      throw err;
    }
    return this.publish(dir, name, snapshotEntries(kind, c, pins, this.version), () => releaseAll(pins));
  }

  /** A fresh shard snapshot streamed straight out (nothing stored); the shard's files stay pinned until the stream ends. */
  async streamShard(nameOrAlias: string, shardId: number): Promise<Readable> {
    return (await this.shardArchive(nameOrAlias, shardId, false)).stream;
  }

  /**
   * streamShard, with the point count and content digest of exactly what the archive
   * holds (taken with its checkpoint, under the shard's update lock: writes to the shard
   * wait while the digest is read). A cluster backup records them (backup.ts).
   */
  async streamShardWithContent(nameOrAlias: string, shardId: number): Promise<{ stream: Readable; points: number; digest: string }> {
    const { stream, content } = await this.shardArchive(nameOrAlias, shardId, true);
    return { stream, points: content!.points, digest: content!.digest };
  }

  private async shardArchive(nameOrAlias: string, shardId: number, withContent: boolean): Promise<{ stream: Readable; content: ShardSnapshotFiles['content'] }> {
    const c = this.toc.get(nameOrAlias);
    c.localShard(shardId);
    const pins = await this.pin(c, [shardId], withContent);
    const content = pins.get(shardId)!.content;
    const stream = tarStream(snapshotEntries('shard', c, pins, this.version));
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      void releaseAll(pins);
    };
    stream.once('close', release);
    stream.once('end', release);
    stream.once('error', release);
    return { stream, content };
  }

  /**
   * Publishes a new archive of `entries` in `dir` of the store, named by `naming` (given
   * the time stamp), as every snapshot is published: complete before it is listed. Files
   * the entries name are read, not moved.
   */
  async publishArchive(dir: string, naming: (ts: string) => string, entries: Iterable<TarEntry> | AsyncIterable<TarEntry>): Promise<SnapshotDescription> {
    const name = await this.reserveName(dir, naming);
    return this.publish(dir, name, entries, async () => undefined);
  }

  /** A new temp file's path in the snapshot temp folder (cleared at start-up); the caller removes it. */
  async tempFile(suffix: string): Promise<string> {
    await fs.mkdir(this.tempDir, { recursive: true });
    return path.join(this.tempDir, `${randomUUID()}.${suffix}.tmp`);
  }

  async createFull(): Promise<SnapshotDescription> {
    const name = await this.reserveName('', (ts) => `full-snapshot-${ts}.snapshot`);
    const parts: Array<{ collection: string; name: string; file: string }> = [];
    try {
      for (const collection of this.toc.names()) {
        // A collection deleted since the listing is simply not in the snapshot.
        if (!this.toc.has(collection)) continue;
        const c = this.toc.get(collection);
        const pins = await this.countedPin(`pinning ${collection}`, c, c.localShardIds());
        let archive;
        try {
          archive = await this.writeArchive(snapshotEntries('collection', c, pins, this.version), { snapshot: name, collection }, `writing ${collection}`);
        } finally {
          await releaseAll(pins);
        }
        parts.push({ collection, name: `${collection}-${this.toc.peerId}-${stamp(new Date())}.snapshot`, file: archive.file });
      }
      const mapping = {
        collections_mapping: Object.fromEntries(parts.map((p) => [p.collection, p.name])),
        collections_aliases: this.toc.aliasMap(),
      };
      const entries: TarEntry[] = [
        { name: 'config.json', type: 'file', data: Buffer.from(JSON.stringify(mapping, null, 2)) },
        ...parts.map((p): TarEntry => ({ name: p.name, type: 'file', path: p.file })),
      ];
      return await this.publish('', name, entries, async () => undefined);
    } finally {
      this.reserved.delete(`/${name}`);
      await Promise.all(parts.map((p) => fs.rm(p.file, { force: true })));
    }
  }

  // -- listing, downloading, deleting ----------------------------------------------------

  list(dir: string): Promise<SnapshotDescription[]> {
    return this.store.list(dir);
  }

  open(dir: string, name: string): Promise<{ stream: Readable; size: number }> {
    checkSnapshotName(name);
    return this.store.open(dir, name);
  }

  async delete(dir: string, name: string): Promise<void> {
    checkSnapshotName(name);
    await this.store.delete(dir, name);
  }

  // -- recovering ------------------------------------------------------------------------

  /** The archive named by a recovery `location`, as a local file. */
  private async obtain(location: string): Promise<{ file: string; cleanup(): Promise<void> }> {
    let url: URL;
    try {
      url = new URL(location);
    } catch {
      throw new BadRequestError(`Invalid snapshot URI ${JSON.stringify(location)}: not a URL (use file:///<absolute path>, http(s)://... or s3://<bucket>/<key>)`);
    }
    if (url.protocol === 'file:') return this.obtainFile(url);
    if (url.protocol === 's3:') {
      const bucket = this.config.storage.snapshots_config.s3_config?.bucket;
      if (this.store.kind !== 's3' || url.hostname !== bucket) {
        throw new BadRequestError(`Snapshot location ${location}: s3:// locations must name the configured snapshot bucket${bucket ? ` (${bucket})` : ''}`);
      }
      return this.fromStore(decodeURIComponent(url.pathname.replace(/^\/+/, '')), location);
    }
    if (url.protocol === 'http:' || url.protocol === 'https:') {
      if (!this.config.service.enable_snapshot_url_recovery) throw new ForbiddenError('Snapshot recovery from remote URLs is disabled');
      return this.download(url);
    }
    throw new BadRequestError(`Invalid snapshot URI ${JSON.stringify(location)}: the scheme must be file, http, https or s3`);
  }

  private async obtainFile(url: URL): Promise<{ file: string; cleanup(): Promise<void> }> {
    if (url.hostname !== '' && url.hostname !== 'localhost') {
      throw new BadRequestError('Invalid snapshot URI, file path must be absolute or on localhost');
    }
    const file = decodeURIComponent(url.pathname);
    const root = path.resolve(this.config.storage.snapshots_path);
    const rel = path.relative(root, path.resolve(file));
    if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) {
      throw new BadRequestError(`Snapshot file ${JSON.stringify(file)} is outside the snapshots directory ${JSON.stringify(root)}: only files inside it can be recovered from`);
    }
    if (this.store.kind === 's3') return this.fromStore(rel.split(path.sep).join('/'), file);
    let real: string;
    try {
      real = await fs.realpath(file);
    } catch {
      throw new BadRequestError(`Snapshot file ${JSON.stringify(file)} does not exist`);
    }
    const realRel = path.relative(await fs.realpath(root), real);
    if (realRel.startsWith('..') || path.isAbsolute(realRel)) {
      throw new BadRequestError(`Snapshot file ${JSON.stringify(file)} leads outside the snapshots directory`);
    }
    const st = await fs.stat(real);
    if (!st.isFile()) throw new BadRequestError(`Snapshot file ${JSON.stringify(file)} does not exist`);
    return { file: real, cleanup: async () => undefined };
  }

  private async fromStore(key: string, shown: string): Promise<{ file: string; cleanup(): Promise<void> }> {
    const dir = key.includes('/') ? key.slice(0, key.lastIndexOf('/')) : '';
    const name = key.slice(key.lastIndexOf('/') + 1);
    try {
      return await this.store.localCopy(dir, name, this.tempDir);
    } catch (err) {
      if (err instanceof NotFoundError) throw new BadRequestError(`Snapshot file ${JSON.stringify(shown)} does not exist`);
      throw diskError(err, `downloading snapshot ${shown}`);
    }
  }

  private async download(url: URL): Promise<{ file: string; cleanup(): Promise<void> }> {
    await fs.mkdir(this.tempDir, { recursive: true });
    const file = path.join(this.tempDir, `${randomUUID()}.download.tmp`);
    const cleanup = () => fs.rm(file, { force: true });
    try {
      const res = await fetch(url, { redirect: 'follow' });
      if (!res.ok || res.body === null) {
        throw new BadRequestError(`Failed to download snapshot from ${url.href}: HTTP ${res.status}`);
      }
      // Counted only: a checksum to check is computed as the archive is unpacked.
      const progress = currentProgress();
      const length = Number(res.headers.get('content-length') ?? NaN);
      progress?.phase('downloading', Number.isSafeInteger(length) && length >= 0 ? length : null);
      const meter = new Meter((bytes, s) => this.logger.info({ url: url.href, mb: +(bytes / 1048576).toFixed(1), mbPerSec: +(bytes / 1048576 / s).toFixed(1) }, 'downloading snapshot'), false, undefined, progress);
      await pipeline(Readable.fromWeb(res.body as import('node:stream/web').ReadableStream), meter, createWriteStream(file));
      return { file, cleanup };
    } catch (err) {
      await cleanup();
      if (err instanceof BadRequestError) throw err;
      const e = diskError(err, `downloading snapshot ${url.href}`);
      if (e !== err) throw e;
      throw new BadRequestError(`Failed to download snapshot from ${url.href}: ${(err as Error).message}`);
    }
  }

  private static async sha256(file: string): Promise<string> {
    const h = createHash('sha256');
    for await (const chunk of createReadStream(file, { highWaterMark: READ_CHUNK })) h.update(chunk as Buffer);
    return h.digest('hex');
  }

  /**
   * Starts reading shard file `rel` (`<shard id>/<name>`) of the archive being unpacked
   * into `dir` (see ShardPreload): a vector index loads on the engine's threads at once.
   */
  private preloadFile(preloaded: Map<number, ShardPreload>, dir: string, rel: string): void {
    const m = SHARD_FILE_RE.exec(rel);
    if (m === null) return;
    const id = Number(m[1]);
    let p = preloaded.get(id);
    if (p === undefined) {
      if (preloaded.size >= MAX_PRELOADS) return;
      preloaded.set(id, (p = new ShardPreload(this.toc.engine, path.join(dir, m[1]))));
    }
    p.fileReady(m[2]);
  }

  /**
   * Unpacks `file` into a new staging folder on the storage file system, hashing it on
   * the way when `hash`. With `preload`, each shard's vector indexes start loading as
   * soon as they are on disk, while the rest is written, and its state file starts
   * decoding once everything is written (while it is synced and checked); the shards
   * then open with them (Collection.open). On failure the folder is removed and what
   * was started is discarded.
   */
  private async unpackFile(file: string, hash: boolean, preload: boolean): Promise<{ dir: string; sha256: string | null; size: number; preloaded: Map<number, ShardPreload> }> {
    const dir = await this.toc.stagingDir();
    const preloaded = new Map<number, ShardPreload>();
    try {
      const size = (await fs.stat(file)).size;
      const hasher = hash ? createHash('sha256') : null;
      const started = Date.now();
      let lastLog = started;
      let bytes = 0;
      const progress = currentProgress();
      progress?.phase('unpacking', size);
      const chunks = new FileChunks(file, READ_CHUNK, (chunk) => {
        hasher?.update(chunk);
        bytes += chunk.length;
        progress?.add(chunk.length);
        const now = Date.now();
        if (now - lastLog >= PROGRESS_EVERY_MS) {
          lastLog = now;
          this.logger.info({ mb: +(bytes / 1048576).toFixed(1), of: +(size / 1048576).toFixed(1), mbPerSec: +(bytes / 1048576 / ((now - started) / 1000)).toFixed(1) }, 'unpacking snapshot');
        }
      });
      const onFile = preload ? (rel: string) => this.preloadFile(preloaded, dir, rel) : undefined;
      // An uncompressed tar cannot hold more content than its own size.
      await extractTar(chunks.stream, dir, { maxBytes: size, maxEntries: MAX_ENTRIES, onFile, release: chunks.release });
      for (const p of preloaded.values()) p.startDecoding();
      return { dir, sha256: hasher?.digest('hex') ?? null, size, preloaded };
    } catch (err) {
      for (const p of preloaded.values()) p.discard();
      await fs.rm(dir, { recursive: true, force: true });
      throw unpackError(err);
    }
  }

  /** The archive of `source` (a location or a file) as a local file, with the checksum it is known to have (an upload's), if any. */
  private async archiveOf(source: Exclude<RecoverySource, ReceivedUpload>): Promise<{ file: string; known: string | null; cleanup(): Promise<void> }> {
    if ('location' in source) return { ...(await this.obtain(source.location)), known: null };
    return { file: source.file, known: source.checksum, cleanup: async () => (source.owned ? fs.rm(source.file, { force: true }) : undefined) };
  }

  /**
   * The steps every recovery shares: `precheck` (an owned upload is removed when it
   * throws); the archive unpacked into a staging folder (a received upload already is)
   * with its checksum checked when one is given (hashed while it is unpacked, unless
   * known); validated; then `apply`. Temp files and the staging folder go whatever
   * happens. A checksum that does not match is reported as such, whatever else is
   * wrong with the archive, and nothing is applied. Cluster recovery (cluster.ts) runs
   * its own `apply` through these steps.
   */
  async recover(
    kind: SnapshotKind,
    source: RecoverySource,
    checksum: string | null,
    precheck: () => void,
    apply: (snap: UnpackedSnapshot, preloaded: ReadonlyMap<number, ShardPreload>) => Promise<void>,
    preload = false,
  ): Promise<void> {
    try {
      precheck();
    } catch (err) {
      await this.discard(source);
      throw err;
    }
    const started = Date.now();
    const times: PhaseTimes = {};
    const expected = checksum?.toLowerCase() ?? null;
    const mismatch = (actual: string) => (expected !== null && actual !== expected ? new ChecksumMismatchError(checksum!, actual) : null);
    let staged: { dir: string; size: number; preloaded: Map<number, ShardPreload> } | null = null;
    let archive: { file: string; known: string | null; cleanup(): Promise<void> } | null = null;
    try {
      if ('staged' in source) {
        staged = { dir: source.staged, size: source.bytes, preloaded: new Map() };
        // An upload: its bytes were received (and unpacked) before the job began.
        currentProgress()?.phase('received', source.bytes);
        currentProgress()?.add(source.bytes);
        if (expected !== null) {
          if (source.checksum === null) throw new Error('the upload was received without its SHA-256, and a checksum is to be checked');
          const wrong = mismatch(source.checksum);
          if (wrong) throw wrong;
        }
        if (source.failure !== null) throw unpackError(source.failure);
        if (preload) {
          for (const rel of source.names) this.preloadFile(staged.preloaded, staged.dir, rel);
          for (const p of staged.preloaded.values()) p.startDecoding();
        }
      } else {
        archive = await this.archiveOf(source);
        times.obtain = Date.now() - started;
        const known = expected === null ? null : archive.known;
        const bad = known !== null ? mismatch(known) : null;
        if (bad) throw bad;
        const extracting = Date.now();
        let got;
        try {
          got = await this.unpackFile(archive.file, expected !== null && known === null, preload);
        } catch (err) {
          // The archive did not unpack: a checksum given with it decides what is reported.
          if (expected !== null && known === null) {
            const wrong = mismatch(await Snapshots.sha256(archive.file).catch(() => ''));
            if (wrong) throw wrong;
          }
          throw err;
        }
        staged = { dir: got.dir, size: got.size, preloaded: got.preloaded };
        times.extract = Date.now() - extracting;
        if (got.sha256 !== null) {
          const wrong = mismatch(got.sha256);
          if (wrong) throw wrong;
        }
        await archive.cleanup();
      }
      const validating = Date.now();
      currentProgress()?.step('validating');
      const unpacked = await validateUnpacked(staged.dir, kind, this.config).catch((err: unknown) => {
        throw unpackError(err);
      });
      times.validate = Date.now() - validating;
      const applying = Date.now();
      // Counted (the job runs its work under a counter, jobs.ts): the points the recovered
      // shards decode and the points and vector labels they reconcile as they load,
      // including what the preloading begun while unpacking has still to do.
      currentProgress()?.work('applying', 'points checked');
      await apply(unpacked, staged.preloaded);
      times.apply = Date.now() - applying;
      const seconds = (Date.now() - started) / 1000;
      this.logger.info({ kind, bytes: staged.size, seconds, mbPerSec: +(staged.size / 1048576 / Math.max(seconds, 1e-3)).toFixed(1), ms: times }, 'snapshot recovered');
    } finally {
      for (const p of staged?.preloaded.values() ?? []) p.discard();
      await archive?.cleanup();
      if (staged) await fs.rm(staged.dir, { recursive: true, force: true });
      else if ('staged' in source) await fs.rm(source.staged, { recursive: true, force: true });
    }
  }

  /** Recovers collection `name` (created when absent) from a collection snapshot. */
  async recoverCollection(name: string, source: RecoverySource, priority: Priority, checksum: string | null): Promise<void> {
    const target = this.toc.resolveName(name);
    // A new collection's shard files are read ahead while the archive unpacks. Not when it
    // replaces one: the old collection is closed first there, so the two are never in
    // memory together.
    const preload = priority !== 'replica' && !this.toc.has(target);
    await this.recover('collection', source, checksum, () => validateCollectionName(target), async (snap, preloaded) => {
      const existing = this.toc.has(target) ? this.toc.get(target) : null;
      if (existing) {
        const why = incompatibility(existing.config, snap.meta.config);
        if (why) throw new BadInputError(`Snapshot is not compatible with existing collection: ${why}`);
      }
      if (priority === 'replica') {
        // The data already here wins. A new collection gets the configuration only.
        if (!existing) await this.toc.create(target, snap.meta.config, snap.meta.payload_schema, undefined, snap.meta.shard_keys);
        this.logger.info({ collection: target, priority }, existing ? 'snapshot checked; replica priority keeps the existing data' : 'collection created empty from the snapshot configuration (replica priority)');
        return;
      }
      await this.toc.replaceCollection(target, snap.dir, preloaded);
    }, preload);
  }

  /** Recovers shard `shardId` of an existing collection from a shard snapshot of the same shard. */
  async recoverShard(name: string, shardId: number, source: RecoverySource, priority: Priority, checksum: string | null): Promise<void> {
    await this.recover('shard', source, checksum, () => this.toc.get(name).localShard(shardId), async (snap) => {
      await this.replaceShardWith(name, shardId, snap, priority === 'replica');
    });
  }

  /**
   * A shard transfer by snapshot, on the target: `fetch` writes a shard snapshot of the
   * source's replica into a temp file, which then replaces this peer's replica of the
   * shard, if `stillWanted()` holds once it is unpacked. Nothing consensus knows changes
   * here (the transfer does that). Resolves with the archive's size.
   */
  async replaceShardFetched(name: string, shardId: number, fetch: (file: string) => Promise<void>, stillWanted: () => void): Promise<number> {
    this.toc.get(name).localShard(shardId);
    await fs.mkdir(this.tempDir, { recursive: true });
    const file = path.join(this.tempDir, `${randomUUID()}.transfer.tmp`);
    let size: number;
    try {
      await fetch(file);
      size = (await fs.stat(file)).size;
    } catch (err) {
      await fs.rm(file, { force: true });
      throw err;
    }
    await this.recover('shard', { file, checksum: null, owned: true }, null, () => undefined, async (snap) => {
      await this.replaceShardWith(name, shardId, snap, false, stillWanted);
    });
    return size;
  }

  /** Checks an unpacked shard snapshot against shard `shardId` of collection `name` and, unless `checkOnly`, replaces the shard's data with it. */
  private async replaceShardWith(name: string, shardId: number, snap: UnpackedSnapshot, checkOnly: boolean, stillWanted: () => void = () => undefined): Promise<void> {
    if (snap.manifest.shards[0] !== shardId) {
      throw new BadInputError(`Snapshot is not compatible with the shard: it holds shard ${snap.manifest.shards[0]}, not shard ${shardId}`);
    }
    await this.toc.exclusive(async () => {
      const c = this.toc.get(name);
      const why = incompatibility(c.config, snap.meta.config);
      if (why) throw new BadInputError(`Snapshot is not compatible with existing collection: ${why}`);
      // Custom sharding: the shard must belong to the same key here and in the snapshot.
      const here = c.shardKeyOf(shardId);
      const there = snap.meta.shard_keys?.find((e) => e.shards.includes(shardId))?.key;
      if (here !== undefined && (there === undefined || keyId(there) !== keyId(here))) {
        const theirs = there === undefined ? 'no shard key' : `shard key ${showKey(there)}`;
        throw new BadInputError(`Snapshot is not compatible with the shard: shard ${shardId} belongs to shard key ${showKey(here)} here, to ${theirs} in the snapshot`);
      }
      if (checkOnly) return;
      // Checked again here, where nothing else changes the collection: the caller may no longer want it (a transfer that ended).
      stillWanted();
      await c.replaceShard(shardId, path.join(snap.dir, String(shardId)));
    });
  }

  /**
   * Receives an uploaded archive, unpacking it into a staging folder on the storage
   * file system as it arrives (no temp copy of the archive is written), and hashing it
   * on the way when `hash` (a checksum is to be checked); the caller then recovers from
   * what this returns. If the unpacking fails (a bad archive, a full disk) the rest of
   * the upload is still read, to know its checksum, and the failure is the recovery's
   * to report, after its own checks.
   */
  async receive(input: Readable, hash = true): Promise<ReceivedUpload> {
    const dir = await this.toc.stagingDir();
    const hasher = hash ? createHash('sha256') : null;
    let bytes = 0;
    const started = Date.now();
    let lastLog = started;
    const feed = new PassThrough({ ...CHUNKWISE, writableObjectMode: true, writableHighWaterMark: 64 });
    let failure: unknown = null;
    const extracting = extractTar(feed, dir, { maxEntries: MAX_ENTRIES }).catch((err: unknown) => {
      failure = err;
      // Nothing reads it any more (extractTar may have failed before it started to).
      feed.destroy();
      return [] as string[];
    });
    try {
      for await (const chunk of input) {
        const b = chunk as Buffer;
        hasher?.update(b);
        bytes += b.length;
        const now = Date.now();
        if (now - lastLog >= PROGRESS_EVERY_MS) {
          lastLog = now;
          this.logger.info({ mb: +(bytes / 1048576).toFixed(1), mbPerSec: +(bytes / 1048576 / ((now - started) / 1000)).toFixed(1) }, 'receiving snapshot upload');
        }
        if (!feed.destroyed && !feed.write(b)) await drainedOrClosed(feed);
      }
      feed.end();
    } catch (err) {
      feed.destroy();
      await extracting;
      await fs.rm(dir, { recursive: true, force: true });
      throw diskError(err, 'receiving the snapshot upload');
    }
    const names = await extracting;
    // What a failed unpacking left takes no room while the recovery gets to report it.
    if (failure !== null) await fs.rm(dir, { recursive: true, force: true });
    return { staged: dir, names, checksum: hasher?.digest('hex') ?? null, bytes, failure };
  }

  /** Removes what `source` holds that nobody will read (an upload whose request failed). */
  async discard(source: RecoverySource): Promise<void> {
    if ('staged' in source) await fs.rm(source.staged, { recursive: true, force: true });
    else if ('file' in source && source.owned) await fs.rm(source.file, { force: true });
  }

  /** `--storage-snapshot` and `--snapshot` at start-up, before the API serves; into this node's storage unless `target` says otherwise. */
  async restoreAtStartup(r: StartupRestore, target: RestoreTarget = this.localTarget()): Promise<void> {
    const refuse = (collection: string, from: string) => {
      if (target.has(collection) && !r.force) {
        throw new BadInputError(`collection ${collection} already exists; --force_snapshot lets ${from} replace it`);
      }
    };
    if (r.storageSnapshot !== null) {
      const file = path.resolve(r.storageSnapshot);
      if (!(await fs.stat(file).catch(() => null))?.isFile()) throw new BadInputError(`--storage-snapshot ${file}: no such file`);
      const dir = await this.toc.stagingDir();
      try {
        await extractTar(createReadStream(file), dir, { maxBytes: (await fs.stat(file)).size, maxEntries: MAX_ENTRIES }).catch((err: unknown) => {
          throw err instanceof TarError ? new BadInputError(`--storage-snapshot ${file}: ${err.message}`) : err;
        });
        const raw = JSON.parse(await fs.readFile(path.join(dir, 'config.json'), 'utf8').catch(() => 'null')) as {
          collections_mapping?: Record<string, string>;
          collections_aliases?: Record<string, string>;
        } | null;
        if (!raw || typeof raw.collections_mapping !== 'object' || raw.collections_mapping === null) {
          throw new BadInputError(`--storage-snapshot ${file}: not a full-storage snapshot (no config.json with collections_mapping)`);
        }
        const mapping = Object.entries(raw.collections_mapping);
        for (const [collection] of mapping) refuse(collection, '--storage-snapshot');
        for (const [collection, inner] of mapping) {
          checkSnapshotName(inner);
          const innerFile = path.join(dir, inner);
          await target.recoverCollection(collection, { file: innerFile, checksum: null, owned: true }, 'snapshot', null);
          this.logger.info({ collection, from: file }, 'collection restored from the full-storage snapshot');
        }
        await target.restoreAliases(raw.collections_aliases ?? {});
      } finally {
        await fs.rm(dir, { recursive: true, force: true });
      }
    }
    for (const s of r.snapshots) {
      const file = path.resolve(s.path);
      if (!(await fs.stat(file).catch(() => null))?.isFile()) throw new BadInputError(`--snapshot ${s.path}: no such file`);
      refuse(s.collection, '--snapshot');
      await target.recoverCollection(s.collection, { file, checksum: null, owned: false }, 'snapshot', null);
      this.logger.info({ collection: s.collection, from: file }, 'collection restored from a snapshot at start-up');
    }
  }

  private localTarget(): RestoreTarget {
    return {
      has: (collection) => this.toc.has(collection),
      recoverCollection: (collection, source, priority, checksum) => this.recoverCollection(collection, source, priority, checksum),
      restoreAliases: (aliases) => this.toc.restoreAliases(aliases),
    };
  }
}

/** What a failed unpacking throws: a bad archive is bad input, a full disk says so. */
function unpackError(err: unknown): unknown {
  if (err instanceof TarError) return new BadInputError(`Invalid snapshot: ${err.message}`);
  return diskError(err, 'unpacking the snapshot');
}

/** Resolves once `s` wants more data, or is closed (its reader gave up). */
function drainedOrClosed(s: PassThrough): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      s.off('drain', done);
      s.off('close', done);
      resolve();
    };
    s.on('drain', done);
    s.on('close', done);
  });
}

async function releaseAll(pins: Map<number, ShardSnapshotFiles>): Promise<void> {
  await Promise.all([...pins.values()].map((p) => p.release()));
}
