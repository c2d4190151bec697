/**
 * Whole-cluster backups (ours, beyond the reference): one call on any peer snapshots
 * every shard of the chosen collections (all by default), each from one Active replica
 * wherever it lives, and stores one archive in this peer's snapshot store (local folder
 * or S3), beside the full-storage snapshots:
 *
 * ```
 * backup.json                     the manifest (BackupManifest): collections with their
 *                                 configuration, payload indexes, shard keys, and per
 *                                 shard its id, key, archive, size, SHA-256, point count,
 *                                 content digest, source peer and time; the aliases
 * <collection>/collection.snapshot a collection snapshot holding no shard: the
 *                                 configuration, payload indexes and shard keys, which
 *                                 recovered with priority `replica` creates the
 *                                 collection empty with the same shard ids (cluster.ts)
 * <collection>/<shard_id>.snapshot a shard snapshot (the format of shard snapshots)
 * ```
 *
 * Consistency, honestly: **per shard**. Each shard's archive holds every write
 * acknowledged before its snapshot began on its source replica (an Active replica: one
 * that missed an acknowledged write is marked Dead before the write is answered), and
 * its point count and digest are of exactly that content. There is no common point in
 * time across shards: a write acknowledged while the backup runs may be in the archive
 * of a shard snapshotted after it and not in one snapshotted before; each shard's
 * `taken_at` says when its snapshot was taken. Stop writes for a backup that is one point
 * in time.
 *
 * Restoring into a cluster of any size: `bin/quiver-restore` (ts/api/cli/restore.ts,
 * docs/snapshots.md "Cluster backups").
 *
 * Owns: choosing each shard's source (this peer's replica when it is Active, else an
 * Active replica on a peer that answers health checks, the next one when a source fails),
 * the manifest, the archive. Must never: reach a peer except through `ShardFetcher`, or
 * unpack anything (restores go through the snapshot recovery calls).
 */

import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import { Transform } from 'node:stream';
import { buffer } from 'node:stream/consumers';
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';

import { NotFoundError, ShardUnavailableError } from '../common/errors';
import type { ShardTarget } from '../collection/cluster-link';
import type { CollectionConfig } from '../collection/config';
import { isActive, type ReplicaState } from '../collection/replica-state';
import type { ShardKey, ShardKeyEntry } from '../collection/shard-keys';
import type { FieldSchema } from '../shard/field-schema';
import { ClusterState } from '../storage/cluster-state';
import type { MetadataConsensus } from '../storage/metadata-consensus';
import type { TableOfContent } from '../storage/toc';
import { snapshotEntries } from './archive';
import type { Snapshots } from './snapshots';
import type { SnapshotDescription } from './store';
import { tarStream, type TarEntry } from './tar';

/** The newest backup format this version writes and its restore reads. */
export const BACKUP_FORMAT = 1;
export const BACKUP_MANIFEST = 'backup.json';
/** Backups are named `cluster-backup-<YYYY-MM-DD-HH-MM-SS>.snapshot` in the store's top folder. */
export const BACKUP_PREFIX = 'cluster-backup-';

/** What a shard snapshot's source recorded with it, and what its archive is. */
export interface ShardArchiveInfo {
  points: number;
  digest: string;
  size: number;
  sha256: string;
}

/** Reaches another peer's replica of a shard for its snapshot (the p2p ShardSnapshots service). */
export interface ShardFetcher {
  /** Streams `peer`'s Active replica of `target` as a shard snapshot into `file`. */
  fetchShardSnapshot(peer: string, target: ShardTarget, file: string): Promise<ShardArchiveInfo>;
  /** Whether `peer` answered the last health check. */
  alive(peer: string): boolean;
}

export interface BackupShard {
  id: number;
  shard_key?: ShardKey;
  /** The shard snapshot's path in the backup archive. */
  file: string;
  size: number;
  sha256: string;
  /** Points in the snapshot, and their content digest (as `GET /collections/{c}/shards/{id}/digest` computes it). */
  points: number;
  digest: string;
  source_peer: string;
  taken_at: string;
}

export interface BackupCollection {
  name: string;
  config: CollectionConfig;
  payload_schema: Record<string, FieldSchema>;
  shard_keys?: ShardKeyEntry[];
  /** The configuration-only collection snapshot's path in the backup archive. */
  collection_snapshot: string;
  shards: BackupShard[];
}

export interface BackupManifest {
  format: number;
  kind: 'cluster-backup';
  created_by: { name: 'quiver'; version: string };
  created_at: string;
  /** The peer the backup was asked of. */
  peer: string;
  consistency: 'per-shard';
  collections: BackupCollection[];
  /** Aliases (alias → collection) of the collections in the backup. */
  aliases: Record<string, string>;
}

export interface BackupDeps {
  snapshots: Snapshots;
  toc: TableOfContent;
  /** Cluster mode; null on a single node (every shard is local). */
  consensus: MetadataConsensus | null;
  /** Other peers' replicas (cluster mode); null: only this peer's replicas can be read. */
  fetcher: ShardFetcher | null;
  logger: Logger;
  version: string;
}

/** One shard to back up: its id, key, and replicas (peer → state). */
interface PlannedShard {
  id: number;
  key: ShardKey | undefined;
  replicas: Record<string, ReplicaState>;
}

interface PlannedCollection {
  name: string;
  uuid: string;
  config: CollectionConfig;
  payload_schema: Record<string, FieldSchema>;
  shard_keys: ShardKeyEntry[] | undefined;
  shards: PlannedShard[];
}

export class ClusterBackup {
  private readonly logger: Logger;

  constructor(private readonly deps: BackupDeps) {
    this.logger = deps.logger.child({ component: 'backup' });
  }

  private get self(): string {
    return this.deps.consensus?.peerId ?? this.deps.toc.peerId.toString();
  }

  /** The collections to back up (all when `names` is null), as the cluster (or this node) has them; a name that does not exist is a 404. */
  private plan(names: readonly string[] | null): PlannedCollection[] {
    const consensus = this.deps.consensus;
    if (consensus === null) {
      const wanted = names === null ? this.deps.toc.names() : names.map((n) => this.deps.toc.get(n).name);
      return [...new Set(wanted)].map((name) => {
        const c = this.deps.toc.get(name);
        const keys = c.meta.shard_keys;
        return {
          name,
          uuid: '',
          config: c.config,
          payload_schema: c.meta.payload_schema,
          shard_keys: c.config.params.sharding_method === 'custom' ? (keys ?? []) : undefined,
          shards: c.replicaSets().map((r) => ({ id: r.shardId, key: c.shardKeyOf(r.shardId), replicas: { [this.self]: 'Active' as ReplicaState } })),
        };
      });
    }
    const state = consensus.clusterState;
    const wanted = (names ?? state.collectionNames()).map((n) => {
      const name = state.resolve(n);
      if (name === undefined) throw new NotFoundError(`Collection \`${n}\` doesn't exist!`);
      return name;
    });
    return [...new Set(wanted)].map((name) => {
      const c = state.collection(name)!;
      return {
        name,
        uuid: c.uuid,
        config: c.config,
        payload_schema: c.payload_schema,
        shard_keys: c.config.params.sharding_method === 'custom' ? ClusterState.shardKeys(c) : undefined,
        shards: [...c.shards].sort((a, b) => a.id - b.id).map((s) => ({ id: s.id, key: s.shard_key, replicas: { ...s.replicas } })),
      };
    });
  }

  /** Active replicas of a shard in the order they are asked: this peer's, then peers that answer health checks, then the others (by id). */
  private sources(shard: PlannedShard): string[] {
    const active = Object.keys(shard.replicas).filter((p) => isActive(shard.replicas[p]));
    const byId = (a: string, b: string) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0);
    const alive = (p: string) => p === this.self || (this.deps.fetcher?.alive(p) ?? false);
    return [...active.filter((p) => p === this.self), ...active.filter((p) => p !== this.self && alive(p)).sort(byId), ...active.filter((p) => !alive(p)).sort(byId)];
  }

  /**
   * Backs up `collections` (all when null) into one archive in this peer's snapshot
   * store. All or nothing: a shard that no Active replica can give fails the backup
   * (503), and nothing is stored.
   */
  async create(collections: readonly string[] | null): Promise<SnapshotDescription> {
    const plan = this.plan(collections);
    // Checked before anything is read: every shard needs an Active replica.
    for (const c of plan) {
      for (const s of c.shards) {
        if (this.sources(s).length === 0) {
          throw new ShardUnavailableError(`shard ${s.id} of collection \`${c.name}\` has no active replica to back up (replicas: ${JSON.stringify(s.replicas)}); a backup needs every shard`);
        }
      }
    }
    const temps: string[] = [];
    const started = Date.now();
    try {
      const entries: TarEntry[] = [];
      const out: BackupCollection[] = [];
      for (const c of plan) {
        const local = this.deps.toc.get(c.name);
        const configOnly = await buffer(tarStream(snapshotEntries('collection', local, new Map(), this.deps.version)));
        entries.push({ name: c.name, type: 'directory' });
        entries.push({ name: `${c.name}/collection.snapshot`, type: 'file', data: configOnly });
        const shards: BackupShard[] = [];
        for (const s of c.shards) {
          const file = await this.deps.snapshots.tempFile('backup-shard');
          temps.push(file);
          const takenAt = new Date().toISOString();
          const { info, peer } = await this.fetch(c, s, file);
          const inArchive = `${c.name}/${s.id}.snapshot`;
          entries.push({ name: inArchive, type: 'file', path: file });
          shards.push({ id: s.id, ...(s.key !== undefined ? { shard_key: s.key } : {}), file: inArchive, ...info, source_peer: peer, taken_at: takenAt });
        }
        out.push({
          name: c.name,
          config: c.config,
          payload_schema: c.payload_schema,
          ...(c.shard_keys !== undefined ? { shard_keys: c.shard_keys } : {}),
          collection_snapshot: `${c.name}/collection.snapshot`,
          shards,
        });
      }
      const names = new Set(out.map((c) => c.name));
      const allAliases = this.deps.consensus?.clusterState.aliases ?? this.deps.toc.aliasMap();
      const manifest: BackupManifest = {
        format: BACKUP_FORMAT,
        kind: 'cluster-backup',
        created_by: { name: 'quiver', version: this.deps.version },
        created_at: new Date(started).toISOString(),
        peer: this.self,
        consistency: 'per-shard',
        collections: out,
        aliases: Object.fromEntries(Object.entries(allAliases).filter(([, target]) => names.has(target))),
      };
      entries.unshift({ name: BACKUP_MANIFEST, type: 'file', data: Buffer.from(JSON.stringify(manifest, null, 2)) });
      const d = await this.deps.snapshots.publishArchive('', (ts) => `${BACKUP_PREFIX}${ts}.snapshot`, entries);
      this.logger.info(
        { backup: d.name, collections: out.length, shards: out.reduce((n, c) => n + c.shards.length, 0), points: out.reduce((n, c) => n + c.shards.reduce((m, s) => m + s.points, 0), 0), seconds: (Date.now() - started) / 1000 },
        'cluster backup stored',
      );
      return d;
    } finally {
      await Promise.all(temps.map((f) => fs.rm(f, { force: true })));
    }
  }

  /** One shard's snapshot into `file`, from the first of its Active replicas that gives it. */
  private async fetch(c: PlannedCollection, s: PlannedShard, file: string): Promise<{ info: ShardArchiveInfo; peer: string }> {
    let last: unknown = null;
    for (const peer of this.sources(s)) {
      try {
        const info = peer === this.self ? await this.local(c.name, s.id, file) : await this.remote(peer, { collection: c.name, uuid: c.uuid, shard: s.id }, file);
        return { info, peer };
      } catch (err) {
        last = err;
        this.logger.warn({ err, collection: c.name, shard: s.id, peer }, 'a shard snapshot for the backup failed; trying the next active replica');
      }
    }
    throw new ShardUnavailableError(`shard ${s.id} of collection \`${c.name}\` could not be read from any of its active replicas: ${last instanceof Error ? last.message : String(last)}`);
  }

  private async local(collection: string, shard: number, file: string): Promise<ShardArchiveInfo> {
    const { stream, points, digest } = await this.deps.snapshots.streamShardWithContent(collection, shard);
    const h = createHash('sha256');
    let size = 0;
    const meter = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        h.update(chunk);
        size += chunk.length;
        cb(null, chunk);
      },
    });
    await pipeline(stream, meter, createWriteStream(file));
    return { points, digest, size, sha256: h.digest('hex') };
  }

  private remote(peer: string, target: ShardTarget, file: string): Promise<ShardArchiveInfo> {
    if (this.deps.fetcher === null) throw new ShardUnavailableError(`peer ${peer} cannot be reached for a shard snapshot from here`);
    return this.deps.fetcher.fetchShardSnapshot(peer, target, file);
  }
}
