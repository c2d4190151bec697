/**
 * The table of contents of one node's storage: which collections exist, their
 * aliases, and where they live on disk.
 *
 * Owns: `storage/collections/<name>/` (config.json + one directory per shard) and
 * `storage/aliases.json`; creating, opening, updating and deleting collections; on a
 * single node, creating and dropping shard keys (the key mapping lives in config.json);
 * resolving a name or alias. Metadata changes run one at a time. Must never: parse
 * HTTP, or reach into shards (Collection does).
 *
 * A collection is created in a hidden directory and renamed into place once its
 * config is written, and deleted by renaming it away first, so a crash never leaves a
 * half-made collection that start-up would try to open.
 */

import type { ClusterLink } from '../collection/cluster-link';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import type { Logger } from 'pino';

import type { Engine } from '../../bindings/engine';
import { AlreadyExistsError, BadInputError, NotFoundError, ShardUnavailableError, ValidationError, snapshotLoadError } from '../common/errors';
import { LocalClusterMetadata } from './cluster-metadata';
import { Collection, type ClusterPlacement, type CollectionMeta, type ShardKey, type ShardKeyEntry } from '../collection/collection';
import type { CollectionConfig } from '../collection/config';
import { finishSwaps, readJson, removeTempFiles, swapDirectory, syncDir, writeFileAtomic } from '../common/files';
import type { FieldSchema } from '../shard/field-schema';
import type { ShardPreload } from '../shard/local-shard';

/** Reads this node's peer id, or makes and keeps a new random one. */
/** This node's peer id (`storage/peer_id`), chosen and saved on first start. */
export async function readPeerId(storagePath: string): Promise<bigint> {
  const file = path.join(storagePath, 'peer_id');
  try {
    const text = (await fs.readFile(file, 'utf8')).trim();
    if (/^[1-9][0-9]{0,19}$/.test(text)) return BigInt(text);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  // Below 2^53 so that JSON clients read it exactly; never 0.
  const id = BigInt(1 + Math.floor(Math.random() * (2 ** 53 - 2)));
  await writeFileAtomic(file, id.toString());
  return id;
}

const NAME_RE = /^[^\0/\\:*?"<>|]{1,255}$/;

export function validateCollectionName(name: string, what = 'collection name'): void {
  if (!NAME_RE.test(name) || name === '.' || name === '..' || name.startsWith('.')) {
    throw new ValidationError(`${what}: ${JSON.stringify(name)} is not allowed (1 to 255 characters, no / \\ : * ? " < > | and not starting with a dot)`);
  }
}

export type AliasAction =
  | { create_alias: { collection_name: string; alias_name: string } }
  | { delete_alias: { alias_name: string } }
  | { rename_alias: { old_alias_name: string; new_alias_name: string } };

export class TableOfContent {
  private readonly collections = new Map<string, Collection>();
  private aliases = new Map<string, string>();
  private meta: Promise<unknown> = Promise.resolve();
  private readonly collectionsDir: string;
  /** Removals of replaced data still under way (swapDirectory's cleanup); close() waits for them. */
  private readonly cleanups = new Set<Promise<void>>();
  /** This node's peer id (random, kept in storage/peer_id): part of snapshot names. */
  peerId = 0n;
  /** The cluster metadata keys of a single node (in a cluster the consensus state holds them: the dispatcher picks). */
  clusterMetadata!: LocalClusterMetadata;

  private constructor(
    readonly storagePath: string,
    readonly engine: Engine,
    private readonly logger: Logger,
    private readonly maxCollections: number | null,
    /** The cluster around this peer (cluster mode): collections with a placement reach their remote replicas through it. */
    private readonly link: ClusterLink | null,
  ) {
    this.collectionsDir = path.join(storagePath, 'collections');
  }

  static async open(storagePath: string, engine: Engine, logger: Logger, maxCollections: number | null = null, link: ClusterLink | null = null): Promise<TableOfContent> {
    const toc = new TableOfContent(storagePath, engine, logger, maxCollections, link);
    await fs.mkdir(toc.collectionsDir, { recursive: true });
    await removeTempFiles(storagePath);
    for (const what of await finishSwaps(toc.collectionsDir)) logger.warn({ what }, 'finished a snapshot recovery a crash interrupted');
    toc.peerId = await readPeerId(storagePath);
    toc.clusterMetadata = await LocalClusterMetadata.open(storagePath);
    const entries = await fs.readdir(toc.collectionsDir, { withFileTypes: true });
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      const dir = path.join(toc.collectionsDir, e.name);
      if (e.name.startsWith('.')) {
        // A creation or deletion that a crash interrupted: finish removing it.
        await fs.rm(dir, { recursive: true, force: true });
        continue;
      }
      await removeTempFiles(dir);
      for (const what of await finishSwaps(dir)) logger.warn({ collection: e.name, shard: what }, 'finished a shard snapshot recovery a crash interrupted');
      const meta = await readJson<CollectionMeta>(path.join(dir, 'config.json'));
      if (!meta) {
        logger.warn({ dir }, 'directory without config.json in collections/: skipped');
        continue;
      }
      meta.payload_schema ??= {};
      toc.collections.set(e.name, await Collection.open(e.name, dir, meta, engine, logger, toc.peerId, meta.cluster ? link : null));
    }
    const aliases = await readJson<Record<string, string>>(path.join(storagePath, 'aliases.json'));
    toc.aliases = new Map(Object.entries(aliases ?? {}).filter(([, c]) => toc.collections.has(c)));
    logger.info({ collections: toc.collections.size, aliases: toc.aliases.size, path: storagePath }, 'storage opened');
    return toc;
  }

  /** Runs metadata changes one at a time. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.meta.then(fn, fn);
    this.meta = run.catch(() => undefined);
    return run;
  }

  names(): string[] {
    return [...this.collections.keys()].sort();
  }

  has(name: string): boolean {
    return this.collections.has(name) || this.aliases.has(name);
  }

  /** The collection name an alias stands for, or `name` itself. */
  resolveName(name: string): string {
    return this.collections.has(name) ? name : (this.aliases.get(name) ?? name);
  }

  /** The collection a name or alias refers to, or a 404. */
  get(nameOrAlias: string): Collection {
    const c = this.collections.get(nameOrAlias) ?? this.collections.get(this.aliases.get(nameOrAlias) ?? '');
    if (!c) throw new NotFoundError(`Collection \`${nameOrAlias}\` doesn't exist!`);
    if (c.unavailable !== null) throw new ShardUnavailableError(`collection \`${c.name}\` is ${c.unavailable}; retry the request`);
    return c;
  }

  /** The collection of exactly this name (no alias), even while it is being replaced. */
  peek(name: string): Collection | undefined {
    return this.collections.get(name);
  }

  all(): Collection[] {
    return [...this.collections.values()];
  }

  private async writeMeta(c: { dir: string; meta: CollectionMeta }): Promise<void> {
    await writeFileAtomic(path.join(c.dir, 'config.json'), JSON.stringify(c.meta, null, 2));
  }

  /**
   * Creates a collection. With `cluster` (applied from consensus, which already checked
   * names, aliases and limits cluster-wide) only this peer's replicas are created.
   * `shardKeys` (custom sharding) are its keys and their shards from the start.
   */
  create(name: string, config: CollectionConfig, payloadSchema: Record<string, FieldSchema> = {}, cluster?: ClusterPlacement, shardKeys?: ShardKeyEntry[]): Promise<void> {
    validateCollectionName(name);
    return this.serial(async () => {
      if (this.collections.has(name)) throw new AlreadyExistsError(`Collection \`${name}\` already exists!`);
      if (cluster === undefined && this.aliases.has(name)) throw new BadInputError(`Can't create collection with name ${name}. Alias with the same name already exists`);
      if (cluster === undefined && this.maxCollections !== null && this.collections.size >= this.maxCollections) {
        throw new BadInputError(`cannot create more than ${this.maxCollections} collections (storage.max_collections)`);
      }
      const dir = path.join(this.collectionsDir, name);
      const tmp = path.join(this.collectionsDir, `.creating-${process.pid}-${Date.now()}`);
      const meta: CollectionMeta = {
        config,
        payload_schema: { ...payloadSchema },
        ...(cluster ? { cluster } : {}),
        ...(shardKeys && shardKeys.length > 0 ? { shard_keys: structuredClone(shardKeys) } : {}),
      };
      await fs.mkdir(tmp, { recursive: true });
      try {
        await this.writeMeta({ dir: tmp, meta });
        await fs.rename(tmp, dir);
        await syncDir(this.collectionsDir);
      } catch (err) {
        await fs.rm(tmp, { recursive: true, force: true });
        throw err;
      }
      this.collections.set(name, await Collection.open(name, dir, meta, this.engine, this.logger, this.peerId, meta.cluster ? this.link : null));
      this.logger.info({ collection: name }, 'collection created');
    });
  }

  /** Deletes a collection; false when it did not exist (the reference answers 200 false). */
  delete(name: string): Promise<boolean> {
    return this.serial(async () => {
      const c = this.collections.get(name);
      if (!c) return false;
      this.collections.delete(name);
      let aliasesChanged = false;
      for (const [a, target] of this.aliases) {
        if (target === name) {
          this.aliases.delete(a);
          aliasesChanged = true;
        }
      }
      if (aliasesChanged) await this.saveAliases();
      await c.drop();
      const trash = path.join(this.collectionsDir, `.deleted-${process.pid}-${Date.now()}`);
      await fs.rename(c.dir, trash);
      await syncDir(this.collectionsDir);
      await fs.rm(trash, { recursive: true, force: true });
      this.logger.info({ collection: name }, 'collection deleted');
      return true;
    });
  }

  /** Persists a collection's changed metadata (config update, payload indexes). */
  updateMeta(name: string, change: (c: Collection) => Promise<void>): Promise<void> {
    return this.serial(async () => {
      const c = this.get(name);
      await change(c);
      await this.writeMeta(c);
    });
  }

  /**
   * Single node: creates the shards of a new shard key of a custom-sharded collection
   * and records the key in its config.json; if that cannot be written, the new shards go.
   */
  createShardKey(nameOrAlias: string, key: ShardKey, shardsNumber: number): Promise<void> {
    return this.serial(async () => {
      const c = this.get(nameOrAlias);
      await c.createShardKey(key, shardsNumber);
      try {
        await this.writeMeta(c);
      } catch (err) {
        const undo = c.detachShardKey(key);
        await undo.drop();
        throw err;
      }
    });
  }

  /**
   * Single node: drops a shard key of a custom-sharded collection with its points: the
   * key leaves config.json first, then its shards' data goes (a crash in between leaves
   * folders that the next start removes).
   */
  dropShardKey(nameOrAlias: string, key: ShardKey): Promise<void> {
    return this.serial(async () => {
      const c = this.get(nameOrAlias);
      const detached = c.detachShardKey(key);
      try {
        await this.writeMeta(c);
      } catch (err) {
        detached.undo();
        throw err;
      }
      await detached.drop();
    });
  }

  /** A hidden directory in collections/ on the storage file system, for unpacking a snapshot (start-up removes leftovers). */
  async stagingDir(): Promise<string> {
    return fs.mkdtemp(path.join(this.collectionsDir, '.recovering-'));
  }

  /**
   * Puts the unpacked collection directory `source` (config.json and one folder per
   * shard, on the storage file system: see stagingDir) in place of collection `name`,
   * creating the collection if it does not exist. The swap is two renames with a
   * journal beside them, so a crash between them is undone at start-up. If the new
   * data does not open, the old collection is put back and reopened, and the error
   * is thrown: the collection is then exactly as it was. `preloaded`: shard state
   * files of `source` already being decoded (by shard id), used as the shards open.
   */
  replaceCollection(name: string, source: string, preloaded: ReadonlyMap<number, ShardPreload> = new Map()): Promise<void> {
    validateCollectionName(name);
    return this.serial(async () => {
      if (!this.collections.has(name) && this.aliases.has(name)) {
        throw new BadInputError(`Can't create collection with name ${name}. Alias with the same name already exists`);
      }
      const meta = await readJson<CollectionMeta>(path.join(source, 'config.json'));
      if (!meta) throw new BadInputError('the snapshot has no config.json');
      meta.payload_schema ??= {};
      const existing = this.collections.get(name);
      const dir = path.join(this.collectionsDir, name);
      if (existing) {
        // It stays listed (it exists before and after); requests get 503 meanwhile.
        existing.unavailable = 'being replaced by a snapshot recovery';
        await existing.close();
      }
      try {
        const { cleanup } = await swapDirectory(this.collectionsDir, name, source, existing !== undefined, async () => {
          this.collections.set(name, await Collection.open(name, dir, meta, this.engine, this.logger, this.peerId, meta.cluster ? this.link : null, preloaded));
        });
        // The replaced data is removed after the answer (start-up finishes it after a crash).
        this.trackCleanup(cleanup.catch((err: unknown) => this.logger.warn({ collection: name, err: String(err) }, 'could not remove the data a snapshot recovery replaced; start-up removes it')));
      } catch (err) {
        if (existing) this.collections.set(name, await Collection.open(name, dir, existing.meta, this.engine, this.logger, this.peerId, existing.meta.cluster ? this.link : null));
        throw snapshotLoadError(err);
      }
      this.logger.info({ collection: name, replaced: existing !== undefined }, 'collection recovered from a snapshot');
    });
  }

  /** Runs `fn` with no other metadata change (create, delete, recover) at the same time. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return this.serial(fn);
  }

  // -- aliases ---------------------------------------------------------------------------

  private async saveAliases(): Promise<void> {
    await writeFileAtomic(path.join(this.storagePath, 'aliases.json'), JSON.stringify(Object.fromEntries(this.aliases), null, 2));
  }

  /** Applies alias actions all or nothing. */
  updateAliases(actions: AliasAction[]): Promise<void> {
    return this.serial(async () => {
      const next = new Map(this.aliases);
      for (const a of actions) {
        if ('create_alias' in a) {
          const { collection_name, alias_name } = a.create_alias;
          validateCollectionName(alias_name, 'alias name');
          if (!this.collections.has(collection_name)) throw new NotFoundError(`Collection \`${collection_name}\` doesn't exist!`);
          if (this.collections.has(alias_name)) throw new AlreadyExistsError(`Collection \`${alias_name}\` already exists!`);
          next.set(alias_name, collection_name);
        } else if ('delete_alias' in a) {
          // The reference answers true for an alias that does not exist.
          next.delete(a.delete_alias.alias_name);
        } else {
          const { old_alias_name, new_alias_name } = a.rename_alias;
          const target = next.get(old_alias_name);
          if (target === undefined) throw new NotFoundError(`Alias ${old_alias_name} does not exists!`);
          validateCollectionName(new_alias_name, 'alias name');
          if (this.collections.has(new_alias_name)) throw new AlreadyExistsError(`Collection \`${new_alias_name}\` already exists!`);
          next.delete(old_alias_name);
          next.set(new_alias_name, target);
        }
      }
      this.aliases = next;
      await this.saveAliases();
    });
  }

  /** Makes the aliases exactly `aliases` (those whose collection exists here): applied from consensus. */
  replaceAliases(aliases: Record<string, string>): Promise<void> {
    return this.serial(async () => {
      const next = new Map(Object.entries(aliases).filter(([alias, target]) => this.collections.has(target) && !this.collections.has(alias)));
      const same = next.size === this.aliases.size && [...next].every(([a, t]) => this.aliases.get(a) === t);
      if (same) return;
      this.aliases = next;
      await this.saveAliases();
    });
  }

  /** Replaces every alias whose collection exists (full-storage snapshot recovery). */
  restoreAliases(aliases: Record<string, string>): Promise<void> {
    return this.serial(async () => {
      for (const [alias, target] of Object.entries(aliases)) {
        if (typeof target !== 'string' || !this.collections.has(target) || this.collections.has(alias)) continue;
        validateCollectionName(alias, 'alias name');
        this.aliases.set(alias, target);
      }
      await this.saveAliases();
    });
  }

  aliasMap(): Record<string, string> {
    return Object.fromEntries(this.aliases);
  }

  listAliases(collection?: string): Array<{ alias_name: string; collection_name: string }> {
    const out: Array<{ alias_name: string; collection_name: string }> = [];
    for (const [alias_name, collection_name] of this.aliases) {
      if (collection === undefined || collection === collection_name) out.push({ alias_name, collection_name });
    }
    out.sort((a, b) => (a.alias_name < b.alias_name ? -1 : a.alias_name > b.alias_name ? 1 : 0));
    return out;
  }

  private trackCleanup(p: Promise<void>): void {
    this.cleanups.add(p);
    void p.finally(() => this.cleanups.delete(p));
  }

  /** Writes a checkpoint of every collection and closes them (once replaced data is removed). */
  async close(): Promise<void> {
    await this.serial(async () => {
      await Promise.all([...this.all().map((c) => c.close()), ...this.cleanups]);
    });
  }
}
