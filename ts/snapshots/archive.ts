/**
 * The snapshot archive format (docs/snapshots.md): what goes into a collection or
 * shard snapshot, and the checks an unpacked (untrusted) one must pass before it
 * may replace anything.
 *
 * ```
 * snapshot.json          { format, kind: collection | shard, created_by, created_at, collection, shards }
 * config.json            the collection's configuration and payload index schema
 * payload_index.json     the payload index schema alone
 * shard_key_mapping.json custom sharding only: [{ key, shards }], each key and its shard ids
 * <shard_id>/            one folder per shard (a shard snapshot has one; a cluster peer's collection snapshot its replicas)
 *   checkpoint.json      names the files below and the last applied WAL sequence number
 *   state-<seq>.bin      id tracker, payloads, which points carry each vector
 *   vec-*.qvi            engine index files
 *   wal/<seq+1>.wal      an empty WAL that continues the numbering after the checkpoint
 * ```
 *
 * Owns: the manifest, the entry list, validation of unpacked archives. Must never:
 * publish files (store.ts) or decide priorities (snapshots.ts).
 */

import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import { BadInputError } from '../common/errors';
import type { Collection, CollectionMeta } from '../collection/collection';
import { mappingProblem, nextShardId, type ShardKeyEntry } from '../collection/shard-keys';
import { applyCollectionUpdate, parseCreateCollection, vectorEntries, type CollectionConfig } from '../collection/config';
import type { Config } from '../config/types';
import { checkpointFiles, checkpointProblem, walSegmentName, type CheckpointFile, type ShardSnapshotFiles } from '../shard/local-shard';
import { FieldSchemaError, parseFieldSchema, type FieldSchema } from '../shard/field-schema';
import { checkPayloadFiles } from '../shard/payload-disk';
import { PayloadFormatError } from '../shard/payload-store';
import { syncTree } from '../common/files';
import type { TarEntry } from './tar';

/** The newest archive format this version writes and reads. */
export const SNAPSHOT_FORMAT = 1;

/** The file of a custom-sharded collection's key mapping (the reference's name for it). */
const SHARD_KEY_MAPPING = 'shard_key_mapping.json';

export type SnapshotKind = 'collection' | 'shard';

export interface SnapshotManifest {
  format: number;
  kind: SnapshotKind;
  created_by: { name: 'quiver'; version: string };
  created_at: string;
  collection: string;
  shards: number[];
}

/** The tar entries of a snapshot of `shards` (pinned files) of collection `c`. */
export function* snapshotEntries(kind: SnapshotKind, c: Collection, pins: Map<number, ShardSnapshotFiles>, version: string): Iterable<TarEntry> {
  const manifest: SnapshotManifest = {
    format: SNAPSHOT_FORMAT,
    kind,
    created_by: { name: 'quiver', version },
    created_at: new Date().toISOString(),
    collection: c.name,
    shards: [...pins.keys()],
  };
  const meta: CollectionMeta = { config: c.meta.config, payload_schema: c.meta.payload_schema };
  yield { name: 'snapshot.json', type: 'file', data: Buffer.from(JSON.stringify(manifest, null, 2)) };
  yield { name: 'config.json', type: 'file', data: Buffer.from(JSON.stringify(meta, null, 2)) };
  yield { name: 'payload_index.json', type: 'file', data: Buffer.from(JSON.stringify(meta.payload_schema, null, 2)) };
  if (c.config.params.sharding_method === 'custom') {
    yield { name: SHARD_KEY_MAPPING, type: 'file', data: Buffer.from(JSON.stringify(c.meta.shard_keys ?? [], null, 2)) };
  }
  for (const [id, pin] of pins) {
    yield { name: `${id}`, type: 'directory' };
    yield { name: `${id}/checkpoint.json`, type: 'file', data: pin.checkpoint };
    for (const f of pin.files) yield { name: `${id}/${f}`, type: 'file', path: path.join(pin.dir, f), ...(pin.sizes?.[f] !== undefined ? { size: pin.sizes[f] } : {}) };
    yield { name: `${id}/wal`, type: 'directory' };
    yield { name: `${id}/wal/${walSegmentName(pin.appliedSeq + 1n)}`, type: 'file', data: Buffer.alloc(0) };
  }
}

/** An unpacked snapshot that passed validation. */
export interface UnpackedSnapshot {
  dir: string;
  manifest: SnapshotManifest;
  meta: CollectionMeta;
}

function bad(msg: string): BadInputError {
  return new BadInputError(`Invalid snapshot: ${msg}`);
}

async function readJsonFile(file: string, what: string): Promise<unknown> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw bad(`${what} is missing`);
    throw err;
  }
  try {
    return JSON.parse(text);
  } catch {
    throw bad(`${what} is not valid JSON`);
  }
}

const isObj = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);

/**
 * Checks an unpacked archive in `dir`: the manifest (kind, a format this version
 * reads), the configuration (parsed as strictly as a create request), the shard
 * folders. Leaves `dir` holding exactly a collection directory (config.json and
 * shard folders), ready to be renamed into place.
 */
export async function validateUnpacked(dir: string, kind: SnapshotKind, config: Config): Promise<UnpackedSnapshot> {
  const m = await readJsonFile(path.join(dir, 'snapshot.json'), 'snapshot.json');
  if (!isObj(m) || typeof m.format !== 'number' || !Number.isInteger(m.format) || m.format < 1) throw bad('snapshot.json has no valid `format`');
  if (m.format > SNAPSHOT_FORMAT) {
    throw bad(`format version ${m.format} is newer than this Quiver reads (up to ${SNAPSHOT_FORMAT}); recover it with a newer Quiver`);
  }
  if (m.kind !== 'collection' && m.kind !== 'shard') throw bad('snapshot.json has no valid `kind`');
  if (m.kind !== kind) throw bad(`this is a ${String(m.kind)} snapshot, not a ${kind} snapshot`);
  if (!Array.isArray(m.shards) || !m.shards.every((s) => Number.isInteger(s) && (s as number) >= 0)) throw bad('snapshot.json has no valid `shards`');
  const manifest = m as unknown as SnapshotManifest;

  const rawMeta = await readJsonFile(path.join(dir, 'config.json'), 'config.json');
  if (!isObj(rawMeta) || !isObj(rawMeta.config)) throw bad('config.json holds no collection configuration');
  const meta: CollectionMeta = { config: checkConfig(rawMeta.config, config), payload_schema: checkSchema(rawMeta.payload_schema) };

  // The collection's shards: 0..shard_number-1, or (custom sharding) those of its keys.
  const custom = meta.config.params.sharding_method === 'custom';
  let known: number[];
  let layout: string;
  if (custom) {
    const mapping = await readJsonFile(path.join(dir, SHARD_KEY_MAPPING), SHARD_KEY_MAPPING);
    const problem = mappingProblem(mapping);
    if (problem !== null) throw bad(`${SHARD_KEY_MAPPING}: ${problem}`);
    meta.shard_keys = mapping as ShardKeyEntry[];
    meta.next_shard_id = nextShardId(meta.shard_keys, undefined);
    known = meta.shard_keys.flatMap((e) => e.shards).sort((a, b) => a - b);
    layout = `its shard keys have shards ${JSON.stringify(known)}`;
  } else {
    known = Array.from({ length: meta.config.params.shard_number }, (_, i) => i);
    layout = `the configuration has ${known.length}`;
  }
  // A collection snapshot holds the shards its peer had: all of them on a single node,
  // that peer's replicas in a cluster (each once).
  const expected = manifest.shards;
  if (kind === 'shard' && (expected.length !== 1 || !known.includes(expected[0]))) throw bad('a shard snapshot holds exactly one shard of its collection');
  if (expected.some((s, i) => !known.includes(s) || expected.indexOf(s) !== i)) {
    throw bad(`snapshot.json lists shards ${JSON.stringify(manifest.shards)}, ${layout}`);
  }
  const allowed = new Set(['snapshot.json', 'config.json', 'payload_index.json', ...(custom ? [SHARD_KEY_MAPPING] : []), ...expected.map(String)]);
  for (const e of await fs.readdir(dir)) if (!allowed.has(e)) throw bad(`unexpected entry ${JSON.stringify(e)} at the top of the archive`);
  for (const id of expected) await checkShardFolder(path.join(dir, String(id)), id);
  await fs.rm(path.join(dir, 'snapshot.json'));
  await fs.rm(path.join(dir, 'payload_index.json'), { force: true });
  // The key mapping moves into config.json, where the table of collections keeps it.
  await fs.rm(path.join(dir, SHARD_KEY_MAPPING), { force: true });
  await fs.writeFile(path.join(dir, 'config.json'), JSON.stringify(meta, null, 2));
  // Durable before anything old is removed for it.
  await syncTree(dir);
  return { dir, manifest, meta };
}

/**
 * A shard folder holds exactly what a snapshot writes: checkpoint.json (names checked
 * as strictly as at load), the regular files it names, and wal/ with empty segments.
 */
async function checkShardFolder(shardDir: string, id: number): Promise<void> {
  const raw = await readJsonFile(path.join(shardDir, 'checkpoint.json'), `shard ${id} checkpoint.json`);
  const problem = checkpointProblem(raw);
  if (problem !== null) throw bad(`shard ${id} checkpoint.json: ${problem}`);
  const named = new Set(checkpointFiles(raw as CheckpointFile));
  for (const f of named) {
    const st = await fs.lstat(path.join(shardDir, f)).catch(() => null);
    if (!st?.isFile()) throw bad(`shard ${id}: ${f}, named by its checkpoint, is missing`);
  }
  // On-disk payloads: the index file's CRC and bounds, and the data file's length, as the
  // shard's open checks them, but before anything is replaced (else the recovery fails
  // only once the shard opens, and is rolled back then).
  const payloads = (raw as CheckpointFile).payloads;
  if (payloads !== undefined) {
    try {
      await checkPayloadFiles(shardDir, payloads);
    } catch (err) {
      if (!(err instanceof PayloadFormatError)) throw err;
      throw bad(`shard ${id}: ${err.message}`);
    }
  }
  for (const e of await fs.readdir(shardDir)) {
    if (e === 'checkpoint.json' || named.has(e)) continue;
    if (e !== 'wal') throw bad(`shard ${id}: unexpected entry ${JSON.stringify(e)}`);
    for (const w of await fs.readdir(path.join(shardDir, 'wal'))) {
      const st = await fs.lstat(path.join(shardDir, 'wal', w));
      if (!/^[0-9]{20}\.wal$/.test(w) || !st.isFile() || st.size !== 0) throw bad(`shard ${id}: unexpected WAL entry ${JSON.stringify(w)} (a snapshot holds one empty segment)`);
    }
  }
}

/**
 * Settings that earlier Quiver builds accepted and ignored, and that a request now refuses
 * (docs/settings.md): a snapshot made by such a build still recovers, as it behaved (these
 * values never changed anything), so they are dropped before the stored configuration is
 * parsed. Changes the object in place.
 */
function dropRetiredSettings(body: Record<string, unknown>): void {
  const hnsw = (h: unknown) => {
    if (!isObj(h)) return;
    if (typeof h.payload_m === 'number' && h.payload_m > 0) delete h.payload_m;
  };
  // hnsw_config.on_disk is served (the graph in a mapped file), except for multivectors,
  // whose graph stays in memory: there it is turned off, as those builds behaved.
  const collectionGraphOnDisk = isObj(body.hnsw_config) && body.hnsw_config.on_disk === true;
  // on_disk vectors are served for quantized vectors; without quantization (the
  // vector's own or the collection's) Quiver refuses them, so a snapshot that has them
  // is recovered with them in memory, as before.
  let unquantized = false;
  const vector = (v: unknown) => {
    if (!isObj(v)) return;
    const quantized = (v.quantization_config ?? body.quantization_config ?? null) !== null && !isObj(v.multivector_config);
    if (!quantized) unquantized = true;
    if (v.on_disk === true && !quantized) delete v.on_disk;
    hnsw(v.hnsw_config);
    if (isObj(v.multivector_config)) {
      const own = isObj(v.hnsw_config) ? v.hnsw_config.on_disk : undefined;
      if (own === true || (own === undefined && collectionGraphOnDisk)) v.hnsw_config = { ...(isObj(v.hnsw_config) ? v.hnsw_config : {}), on_disk: false };
    }
  };
  hnsw(body.hnsw_config);
  const vectors = body.vectors;
  if (isObj(vectors)) {
    if ('size' in vectors) vector(vectors);
    else for (const v of Object.values(vectors)) vector(v);
  }
  if (isObj(body.sparse_vectors)) {
    for (const v of Object.values(body.sparse_vectors)) if (isObj(v) && isObj(v.index) && v.index.on_disk === true) delete v.index.on_disk;
  }
  // A memmap_threshold earlier versions accepted and ignored, where it cannot apply.
  if (unquantized && isObj(body.optimizers_config) && typeof body.optimizers_config.memmap_threshold === 'number') body.optimizers_config.memmap_threshold = null;
}

/** Payload index parameters of the same kind (see dropRetiredSettings). */
function dropRetiredIndexParams(params: unknown): void {
  if (!isObj(params)) return;
  if (params.enable_hnsw === true) delete params.enable_hnsw;
  if (params.memory === 'cold' || params.memory === 'cached') delete params.memory;
}

/** Parses a stored configuration the way a create request is parsed, so a crafted one cannot slip past. */
function checkConfig(c: Record<string, unknown>, config: Config): CollectionConfig {
  const params = isObj(c.params) ? c.params : {};
  const body: Record<string, unknown> = {
    vectors: params.vectors,
    shard_number: params.shard_number,
    sharding_method: params.sharding_method,
    replication_factor: params.replication_factor,
    write_consistency_factor: params.write_consistency_factor,
    on_disk_payload: params.on_disk_payload,
    sparse_vectors: params.sparse_vectors ?? undefined,
    hnsw_config: c.hnsw_config ?? undefined,
    optimizers_config: c.optimizer_config ?? undefined,
    wal_config: c.wal_config ?? undefined,
    quantization_config: c.quantization_config ?? undefined,
    metadata: c.metadata ?? undefined,
    strict_mode_config: c.strict_mode_config ?? undefined,
  };
  for (const k of Object.keys(body)) if (body[k] === undefined || body[k] === null) delete body[k];
  dropRetiredSettings(body);
  try {
    const created = parseCreateCollection(body, config);
    // Settings a create body does not take, only an update.
    const later = { read_fan_out_factor: params.read_fan_out_factor, read_fan_out_delay_ms: params.read_fan_out_delay_ms };
    return applyCollectionUpdate(created, { params: later }).config;
  } catch (err) {
    throw bad(`config.json: ${(err as Error).message}`);
  }
}

function checkSchema(s: unknown): Record<string, FieldSchema> {
  if (s === undefined || s === null) return {};
  if (!isObj(s)) throw bad('config.json: payload_schema is not an object');
  const out: Record<string, FieldSchema> = {};
  for (const [field, schema] of Object.entries(s)) {
    try {
      // Stored as { type, params? }, where params is the normalised object form.
      if (isObj(schema)) dropRetiredIndexParams(schema.params);
      out[field] = parseFieldSchema(isObj(schema) ? (schema.params ?? schema.type) : schema);
    } catch (err) {
      if (err instanceof FieldSchemaError) throw bad(`config.json: payload index ${JSON.stringify(field)}: ${err.message}`);
      throw err;
    }
  }
  return out;
}

/**
 * Why a snapshot's data cannot go into an existing collection, or null when it can:
 * the same vectors (names, sizes, distances), the same sharding method, and (auto
 * sharding) the same number of shards.
 */
export function incompatibility(existing: CollectionConfig, snapshot: CollectionConfig): string | null {
  const describe = (c: CollectionConfig) =>
    JSON.stringify(
      vectorEntries(c.params)
        .map(([n, v]) => [n, v.size, v.distance])
        .sort(),
    );
  if (describe(existing) !== describe(snapshot)) {
    return `the snapshot's vectors ${describe(snapshot)} differ from the collection's ${describe(existing)}`;
  }
  if (existing.params.sharding_method !== snapshot.params.sharding_method) {
    return `the snapshot's sharding method is ${snapshot.params.sharding_method}, the collection's ${existing.params.sharding_method}`;
  }
  if (existing.params.sharding_method === 'auto' && existing.params.shard_number !== snapshot.params.shard_number) {
    return `the snapshot has ${snapshot.params.shard_number} shards, the collection ${existing.params.shard_number}`;
  }
  return null;
}
