/**
 * A collection's configuration: parsing the create and update bodies of the REST API,
 * filling defaults from the service configuration, and the CollectionConfig shape that
 * `GET /collections/{name}` reports and `config.json` persists.
 *
 * Owns: which create/update fields Quiver accepts, their validation (every problem is
 * an error naming the field; nothing is half-applied), and the per-vector effective
 * index settings. Must never: touch storage or shards.
 *
 * The unnamed (single) vector is stored under the name "" as the reference does.
 */

import type { Datatype, Distance, Quantization } from '../../bindings/engine';
import { BadInputError, FormatError, ValidationError } from '../common/errors';
import { MAX_ENGINE_COUNT } from '../shard/limits';
import type { Config } from '../config/types';
import type { VectorSpec } from '../shard/vector-store';
import { parseSparseVectorNameConfig, parseSparseVectors, updateSparseVectors, type SparseVectorParams } from './sparse-config';
import { mergeStrictMode, parseStrictMode, type StrictModeConfig } from './strict-mode';

export const DISTANCES: readonly Distance[] = ['Cosine', 'Euclid', 'Dot', 'Manhattan'];

export interface HnswConfig {
  m: number;
  ef_construct: number;
  full_scan_threshold: number;
  max_indexing_threads: number;
  on_disk: boolean;
  payload_m: number | null;
}

export interface OptimizerConfig {
  deleted_threshold: number;
  vacuum_min_vector_number: number;
  default_segment_number: number;
  max_segment_size: number | null;
  memmap_threshold: number | null;
  indexing_threshold: number | null;
  flush_interval_sec: number;
  max_optimization_threads: number | null;
}

export interface WalConfig {
  wal_capacity_mb: number;
  wal_segments_ahead: number;
}

export type QuantizationConfig =
  | { scalar: { type: 'int8'; quantile?: number; always_ram?: boolean } }
  | { binary: { always_ram?: boolean } };

export interface VectorParams {
  size: number;
  distance: Distance;
  hnsw_config?: Partial<HnswConfig>;
  quantization_config?: QuantizationConfig | null;
  on_disk?: boolean;
  /** Element type of the stored vectors; absent (float32) unless given, as the reference shows it. */
  datatype?: Datatype;
  /** Points carry lists of vectors, scored by MaxSim; absent unless given. */
  multivector_config?: { comparator: 'max_sim' };
}

export interface CollectionParams {
  /** One VectorParams (the unnamed vector) or a map of named vectors. */
  vectors: VectorParams | Record<string, VectorParams>;
  /** Auto sharding: the number of shards. Custom sharding: the default number of shards of a new shard key. */
  shard_number: number;
  /** `custom`: the collection starts with no shards; each shard key gets shards of its own (ts/collection/shard-keys.ts). */
  sharding_method: 'auto' | 'custom';
  replication_factor: number;
  write_consistency_factor: number;
  /** Replicas asked at once beyond those a read needs (unset: none); absent from `GET` when unset, as in the reference. */
  read_fan_out_factor?: number;
  /** Milliseconds a read waits before asking one more replica (unset or 0: never). */
  read_fan_out_delay_ms?: number;
  on_disk_payload: boolean;
  /** Sparse vectors by name, as the create body gave them (absent: none). */
  sparse_vectors?: Record<string, SparseVectorParams>;
}

export interface CollectionConfig {
  params: CollectionParams;
  hnsw_config: HnswConfig;
  optimizer_config: OptimizerConfig;
  wal_config: WalConfig;
  quantization_config: QuantizationConfig | null;
  /** The caller's own JSON object kept with the collection (the reference's `metadata`); absent when never set. */
  metadata?: Record<string, unknown>;
  /** Strict mode (ts/collection/strict-mode.ts); absent when never set, as in the reference. */
  strict_mode_config?: StrictModeConfig;
}

// ---------------------------------------------------------------------------------
// Small typed readers: each names the field in its error.

type Obj = Record<string, unknown>;

function isObj(x: unknown): x is Obj {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function obj(x: unknown, field: string): Obj {
  if (!isObj(x)) throw new FormatError(`${field}: expected an object`);
  return x;
}

function int(x: unknown, field: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof x !== 'number' || !Number.isInteger(x)) throw new FormatError(`${field}: expected an unsigned integer, got ${JSON.stringify(x)}`);
  if (x < 0) throw new FormatError(`${field}: expected an unsigned integer, got ${x}`);
  if (x < min || x > max) {
    throw new ValidationError(`${field}: value ${x} invalid, must be ${x < min ? `${min} or larger` : `${max} or smaller`}`);
  }
  return x;
}

/** An unsigned integer of a type that holds up to `max`: anything else does not deserialize (a format error, as the reference's). */
function unsigned(x: unknown, field: string, max: number): number {
  if (typeof x !== 'number' || !Number.isInteger(x) || x < 0 || x > max) {
    throw new FormatError(`${field}: expected an unsigned integer of at most ${max}, got ${JSON.stringify(x)}`);
  }
  return x;
}

function num(x: unknown, field: string, min: number, max: number): number {
  if (typeof x !== 'number' || !Number.isFinite(x)) throw new FormatError(`${field}: expected a number, got ${JSON.stringify(x)}`);
  if (x < min || x > max) throw new ValidationError(`${field}: value ${x} invalid, must be from ${min} to ${max}`);
  return x;
}

function bool(x: unknown, field: string): boolean {
  if (typeof x !== 'boolean') throw new FormatError(`${field}: expected a boolean, got ${JSON.stringify(x)}`);
  return x;
}

function optional<T>(o: Obj, key: string, read: (x: unknown) => T): T | undefined {
  const v = o[key];
  return v === undefined || v === null ? undefined : read(v);
}

function rejectUnknown(o: Obj, allowed: readonly string[], where: string, unsupported: Record<string, string> = {}): void {
  for (const k of Object.keys(o)) {
    if (k in unsupported && o[k] !== null && o[k] !== undefined) throw new BadInputError(`${where}${k}: ${unsupported[k]}`);
    if (!allowed.includes(k) && !(k in unsupported)) throw new FormatError(`${where}unknown field \`${k}\`, expected one of ${allowed.map((a) => `\`${a}\``).join(', ')}`);
  }
}

/** A `metadata` object (any JSON object), copied; null or absent is none. */
function parseMetadata(x: unknown): Record<string, unknown> | undefined {
  if (x === undefined || x === null) return undefined;
  if (!isObj(x)) throw new FormatError(`metadata: expected an object, got ${JSON.stringify(x)}`);
  return structuredClone(x);
}

/**
 * The reference's merge of an update's `metadata` into the stored one: each top-level key
 * of the update replaces the stored value, a null removes the key; with nothing stored the
 * update's object is kept as it is.
 */
function mergeMetadata(current: Record<string, unknown> | undefined, update: Record<string, unknown>): Record<string, unknown> {
  if (current === undefined) return update;
  const out = structuredClone(current);
  for (const [k, v] of Object.entries(update)) {
    if (v === null) delete out[k];
    else Object.defineProperty(out, k, { value: v, writable: true, enumerable: true, configurable: true });
  }
  return out;
}

// ---------------------------------------------------------------------------------

function parseDistance(x: unknown, field: string): Distance {
  if (typeof x !== 'string' || !DISTANCES.includes(x as Distance)) {
    throw new FormatError(`${field}: unknown variant ${JSON.stringify(x)}, expected one of ${DISTANCES.map((d) => `\`${d}\``).join(', ')}`);
  }
  return x as Distance;
}

function parseHnswDiff(x: unknown, field: string): Partial<HnswConfig> {
  const o = obj(x, field);
  rejectUnknown(o, ['m', 'ef_construct', 'full_scan_threshold', 'max_indexing_threads', 'on_disk', 'payload_m', 'inline_storage'], `${field}.`);
  const out: Partial<HnswConfig> = {};
  const m = optional(o, 'm', (v) => int(v, `${field}.m`, 0, 256));
  if (m !== undefined) {
    if (m === 1) throw new ValidationError(`${field}.m: value 1 invalid, use 0 (no graph) or 2..256`);
    out.m = m;
  }
  const ef = optional(o, 'ef_construct', (v) => int(v, `${field}.ef_construct`, 4, 100_000));
  if (ef !== undefined) out.ef_construct = ef;
  // In KB; the engine takes it as a 32-bit count.
  const fst = optional(o, 'full_scan_threshold', (v) => int(v, `${field}.full_scan_threshold`, 10, MAX_ENGINE_COUNT));
  if (fst !== undefined) out.full_scan_threshold = fst;
  const mit = optional(o, 'max_indexing_threads', (v) => int(v, `${field}.max_indexing_threads`, 0, 1024));
  if (mit !== undefined) out.max_indexing_threads = mit;
  // true: the optimizer moves the level-0 links of each built HNSW index to a memory-mapped file (vector-store.ts).
  const od = optional(o, 'on_disk', (v) => bool(v, `${field}.on_disk`));
  if (od !== undefined) out.on_disk = od;
  const pm = optional(o, 'payload_m', (v) => int(v, `${field}.payload_m`, 0, 256));
  // Quiver builds no payload-aware HNSW links: 0 (none) says what it does, a link count would be ignored.
  if (pm !== undefined && pm > 0) throw new BadInputError(`${field}.payload_m: ${pm} is not supported: Quiver builds no payload-aware HNSW links; omit payload_m or set it to 0`);
  if (pm !== undefined) out.payload_m = pm;
  // Vectors stored inside the graph's links (a layout for on-disk graphs): only "off" is served.
  const inline = optional(o, 'inline_storage', (v) => bool(v, `${field}.inline_storage`));
  if (inline === true) throw new BadInputError(`${field}.inline_storage: vectors stored inline in the HNSW graph are not supported by Quiver`);
  return out;
}

function parseOptimizersDiff(x: unknown, field: string): Partial<OptimizerConfig> {
  const o = obj(x, field);
  rejectUnknown(
    o,
    ['deleted_threshold', 'vacuum_min_vector_number', 'default_segment_number', 'max_segment_size', 'memmap_threshold', 'indexing_threshold', 'flush_interval_sec', 'max_optimization_threads', 'prevent_unoptimized'],
    `${field}.`,
  );
  const out: Partial<OptimizerConfig> = {};
  // Blocking updates while large segments wait for optimization: only "off" (the default) is served.
  const pu = optional(o, 'prevent_unoptimized', (v) => bool(v, `${field}.prevent_unoptimized`));
  if (pu === true) throw new BadInputError(`${field}.prevent_unoptimized: blocking updates until segments are optimized is not supported by Quiver`);
  const dt = optional(o, 'deleted_threshold', (v) => num(v, `${field}.deleted_threshold`, 0, 1));
  if (dt !== undefined) out.deleted_threshold = dt;
  const vm = optional(o, 'vacuum_min_vector_number', (v) => int(v, `${field}.vacuum_min_vector_number`, 100));
  if (vm !== undefined) out.vacuum_min_vector_number = vm;
  const ds = optional(o, 'default_segment_number', (v) => int(v, `${field}.default_segment_number`, 0));
  if (ds !== undefined) out.default_segment_number = ds;
  if ('max_segment_size' in o) out.max_segment_size = o.max_segment_size === null ? null : int(o.max_segment_size, `${field}.max_segment_size`, 1);
  if ('memmap_threshold' in o) out.memmap_threshold = o.memmap_threshold === null ? null : int(o.memmap_threshold, `${field}.memmap_threshold`, 0);
  if ('indexing_threshold' in o) out.indexing_threshold = o.indexing_threshold === null ? null : int(o.indexing_threshold, `${field}.indexing_threshold`, 0);
  const fi = optional(o, 'flush_interval_sec', (v) => int(v, `${field}.flush_interval_sec`, 1, 86_400));
  if (fi !== undefined) out.flush_interval_sec = fi;
  if ('max_optimization_threads' in o) {
    // `"auto"` (MaxOptimizationThreadsSetting) is what null means: the node picks the count.
    const t = o.max_optimization_threads;
    out.max_optimization_threads = t === null || t === 'auto' ? null : int(t, `${field}.max_optimization_threads`, 0, 1024);
  }
  return out;
}

function parseWalDiff(x: unknown, field: string): Partial<WalConfig> {
  const o = obj(x, field);
  rejectUnknown(o, ['wal_capacity_mb', 'wal_segments_ahead', 'wal_retain_closed'], `${field}.`);
  const out: Partial<WalConfig> = {};
  const cap = optional(o, 'wal_capacity_mb', (v) => int(v, `${field}.wal_capacity_mb`, 1, 4096));
  if (cap !== undefined) out.wal_capacity_mb = cap;
  const ahead = optional(o, 'wal_segments_ahead', (v) => int(v, `${field}.wal_segments_ahead`, 0, 64));
  if (ahead !== undefined) out.wal_segments_ahead = ahead;
  // Quiver's WAL keeps its history by its own rule (docs/storage.md, "WAL history"), not by a count of closed segments.
  const retain = optional(o, 'wal_retain_closed', (v) => int(v, `${field}.wal_retain_closed`, 0));
  if (retain !== undefined) throw new BadInputError(`${field}.wal_retain_closed: Quiver's WAL keeps its history by its own rule (see docs/storage.md); a count of closed segments to keep is not supported`);
  return out;
}

/**
 * `null` turns quantization off (in an update, so does the reference's `"Disabled"`,
 * which only a diff takes: `diff`); a missing value leaves it alone.
 */
export function parseQuantization(x: unknown, field: string, diff = false): QuantizationConfig | null {
  if (x === null || (diff && x === 'Disabled')) return null;
  const o = obj(x, field);
  const keys = Object.keys(o);
  if (keys.length !== 1) throw new FormatError(`${field}: expected exactly one of \`scalar\`, \`product\`, \`binary\``);
  if ('product' in o) throw new BadInputError(`${field}: product quantization is not supported by Quiver; use scalar or binary`);
  if ('turbo' in o) throw new BadInputError(`${field}: turbo quantization is not supported by Quiver; use scalar or binary`);
  if ('scalar' in o) {
    const s = obj(o.scalar, `${field}.scalar`);
    rejectUnknown(s, ['type', 'quantile', 'always_ram'], `${field}.scalar.`);
    if (s.type !== 'int8') throw new FormatError(`${field}.scalar.type: unknown variant ${JSON.stringify(s.type)}, expected \`int8\``);
    const out: { type: 'int8'; quantile?: number; always_ram?: boolean } = { type: 'int8' };
    const q = optional(s, 'quantile', (v) => num(v, `${field}.scalar.quantile`, 0.5, 1));
    // [0.5, 1] as the reference validates it (the int8 trainer clamps to the same range).
    if (q !== undefined) out.quantile = q;
    const ar = optional(s, 'always_ram', (v) => bool(v, `${field}.scalar.always_ram`));
    if (ar !== undefined) out.always_ram = ar;
    return { scalar: out };
  }
  if ('binary' in o) {
    const b = obj(o.binary, `${field}.binary`);
    rejectUnknown(b, ['always_ram'], `${field}.binary.`, {
      encoding: 'only the default one-bit encoding is supported by Quiver',
      query_encoding: 'only the default query encoding is supported by Quiver',
    });
    const out: { always_ram?: boolean } = {};
    const ar = optional(b, 'always_ram', (v) => bool(v, `${field}.binary.always_ram`));
    if (ar !== undefined) out.always_ram = ar;
    return { binary: out };
  }
  throw new FormatError(`${field}: unknown variant \`${keys[0]}\`, expected one of \`scalar\`, \`product\`, \`binary\``);
}

function parseVectorParams(x: unknown, field: string): VectorParams {
  const o = obj(x, field);
  rejectUnknown(o, ['size', 'distance', 'hnsw_config', 'quantization_config', 'on_disk', 'datatype', 'multivector_config'], `${field}.`);
  if (o.size === undefined) throw new FormatError(`${field}: missing field \`size\``);
  if (o.distance === undefined) throw new FormatError(`${field}: missing field \`distance\``);
  const out: VectorParams = {
    size: int(o.size, `${field}.size`, 1, 65_536),
    distance: parseDistance(o.distance, `${field}.distance`),
  };
  const datatype = optional(o, 'datatype', (v) => parseDatatype(v, `${field}.datatype`));
  if (o.hnsw_config !== undefined && o.hnsw_config !== null) out.hnsw_config = parseHnswDiff(o.hnsw_config, `${field}.hnsw_config`);
  if (o.quantization_config !== undefined && o.quantization_config !== null) {
    out.quantization_config = parseQuantization(o.quantization_config, `${field}.quantization_config`);
  }
  // true: the originals of a quantized vector live in a mapped file (checkOnDisk refuses it without quantization).
  const od = optional(o, 'on_disk', (v) => bool(v, `${field}.on_disk`));
  if (od !== undefined) out.on_disk = od;
  if (datatype !== undefined) out.datatype = datatype;
  if (o.multivector_config !== undefined && o.multivector_config !== null) {
    out.multivector_config = parseMultivectorConfig(o.multivector_config, `${field}.multivector_config`);
    if (out.distance !== 'Cosine' && out.distance !== 'Dot') {
      throw new BadInputError(`${field}.multivector_config: multivectors with ${out.distance} distance are not supported by Quiver (Cosine and Dot are)`);
    }
    if (out.quantization_config) throw new BadInputError(`${field}.quantization_config: quantized multivectors are not supported by Quiver`);
  }
  return out;
}

function parseMultivectorConfig(x: unknown, field: string): { comparator: 'max_sim' } {
  const o = obj(x, field);
  rejectUnknown(o, ['comparator'], `${field}.`);
  if (o.comparator === undefined) throw new FormatError(`${field}: missing field \`comparator\``);
  if (o.comparator !== 'max_sim') throw new FormatError(`${field}.comparator: unknown variant ${JSON.stringify(o.comparator)}, expected \`max_sim\``);
  return { comparator: 'max_sim' };
}

const DATATYPE_NAMES: readonly Datatype[] = ['float32', 'uint8', 'float16'];

function parseDatatype(x: unknown, field: string): Datatype {
  if (typeof x !== 'string' || !DATATYPE_NAMES.includes(x as Datatype)) {
    throw new FormatError(`${field}: unknown variant ${JSON.stringify(x)}, expected one of ${DATATYPE_NAMES.map((d) => `\`${d}\``).join(', ')}`);
  }
  return x as Datatype;
}

const VECTOR_NAME_RE = /^[^\0/\\]{1,255}$/;

function parseVectors(x: unknown): VectorParams | Record<string, VectorParams> {
  const o = obj(x, 'vectors');
  if ('size' in o || 'distance' in o) return parseVectorParams(o, 'vectors');
  const out: Record<string, VectorParams> = {};
  for (const [name, v] of Object.entries(o)) {
    if (!VECTOR_NAME_RE.test(name) || name === '.' || name === '..') throw new ValidationError(`vectors: invalid vector name ${JSON.stringify(name)}`);
    out[name] = parseVectorParams(v, `vectors.${name}`);
  }
  return out;
}

/** The named vectors of a collection as (name, params) pairs; the unnamed vector is "". */
export function vectorEntries(params: CollectionParams): Array<[string, VectorParams]> {
  const v = params.vectors;
  if (typeof (v as VectorParams).size === 'number' && typeof (v as VectorParams).distance === 'string') return [['', v as VectorParams]];
  return Object.entries(v as Record<string, VectorParams>);
}

export function defaultHnsw(config: Config): HnswConfig {
  const h = config.storage.hnsw_index;
  return {
    m: h.m,
    ef_construct: h.ef_construct,
    full_scan_threshold: h.full_scan_threshold_kb,
    max_indexing_threads: h.max_indexing_threads,
    on_disk: h.on_disk,
    payload_m: h.payload_m,
  };
}

export function defaultOptimizers(config: Config): OptimizerConfig {
  const o = config.storage.optimizers;
  return {
    deleted_threshold: o.deleted_threshold,
    vacuum_min_vector_number: o.vacuum_min_vector_number,
    default_segment_number: o.default_segment_number,
    max_segment_size: o.max_segment_size_kb,
    memmap_threshold: null,
    indexing_threshold: o.indexing_threshold_kb,
    flush_interval_sec: o.flush_interval_sec,
    max_optimization_threads: o.max_optimization_threads,
  };
}

/** Parses a `PUT /collections/{name}` body into a full configuration. */
export function parseCreateCollection(body: unknown, config: Config): CollectionConfig {
  const o = body === undefined ? {} : obj(body, 'body');
  rejectUnknown(
    o,
    ['vectors', 'shard_number', 'sharding_method', 'replication_factor', 'write_consistency_factor', 'on_disk_payload', 'hnsw_config', 'wal_config', 'optimizers_config', 'quantization_config', 'init_from', 'metadata', 'strict_mode_config', 'sparse_vectors'],
    '',
    {},
  );
  const sparse_vectors = o.sparse_vectors === undefined || o.sparse_vectors === null ? undefined : parseSparseVectors(o.sparse_vectors, 'sparse_vectors');
  if ((o.vectors === undefined || o.vectors === null) && sparse_vectors === undefined) {
    throw new BadInputError('a collection needs `vectors` or `sparse_vectors`');
  }
  if (o.init_from !== undefined && o.init_from !== null) throw new BadInputError('init_from is not supported by Quiver; use snapshots');
  let sharding_method: CollectionParams['sharding_method'] = 'auto';
  if (o.sharding_method !== undefined && o.sharding_method !== null) {
    if (o.sharding_method !== 'auto' && o.sharding_method !== 'custom') {
      throw new FormatError(`sharding_method: unknown variant ${JSON.stringify(o.sharding_method)}, expected one of \`auto\`, \`custom\``);
    }
    sharding_method = o.sharding_method;
  }
  // Sparse vectors alone: no dense vector at all (`vectors: {}`), as the reference shows it.
  const vectors = o.vectors === undefined || o.vectors === null ? {} : parseVectors(o.vectors);
  if (sparse_vectors !== undefined) {
    const dense = new Set(vectorEntries({ vectors } as CollectionParams).map(([n]) => n));
    for (const name of Object.keys(sparse_vectors)) {
      if (dense.has(name)) throw new BadInputError(`sparse_vectors.${name}: the name is already used by a dense vector; vector names must be unique`);
    }
  }
  const shard_number = optional(o, 'shard_number', (v) => int(v, 'shard_number', 1, 1024)) ?? 1;
  const replication_factor = optional(o, 'replication_factor', (v) => int(v, 'replication_factor', 1, 1024)) ?? config.storage.collection.replication_factor;
  const write_consistency_factor =
    optional(o, 'write_consistency_factor', (v) => int(v, 'write_consistency_factor', 1, 1024)) ?? config.storage.collection.write_consistency_factor;
  if (write_consistency_factor > replication_factor) {
    throw new BadInputError(`write_consistency_factor (${write_consistency_factor}) cannot exceed replication_factor (${replication_factor})`);
  }
  const on_disk_payload = optional(o, 'on_disk_payload', (v) => bool(v, 'on_disk_payload')) ?? config.storage.on_disk_payload;
  const hnswDiff = o.hnsw_config ? parseHnswDiff(o.hnsw_config, 'hnsw_config') : {};
  const hnsw = { ...defaultHnsw(config), ...hnswDiff };
  if (hnsw.on_disk === true && hnswDiff.on_disk === undefined) keepMultivectorGraphsInMemory(vectors);
  const optimizers = { ...defaultOptimizers(config), ...(o.optimizers_config ? parseOptimizersDiff(o.optimizers_config, 'optimizers_config') : {}) };
  const wal = {
    wal_capacity_mb: config.storage.wal.wal_capacity_mb,
    wal_segments_ahead: config.storage.wal.wal_segments_ahead,
    ...(o.wal_config ? parseWalDiff(o.wal_config, 'wal_config') : {}),
  };
  const quantization = o.quantization_config === undefined ? null : parseQuantization(o.quantization_config, 'quantization_config');
  const strict = o.strict_mode_config === undefined || o.strict_mode_config === null ? undefined : parseStrictMode(o.strict_mode_config);
  const metadata = parseMetadata(o.metadata);
  const out: CollectionConfig = {
    params: { vectors, shard_number, sharding_method, replication_factor, write_consistency_factor, on_disk_payload, ...(sparse_vectors !== undefined ? { sparse_vectors } : {}) },
    hnsw_config: hnsw,
    optimizer_config: optimizers,
    wal_config: wal,
    quantization_config: quantization,
  };
  if (metadata !== undefined) out.metadata = metadata;
  checkMultivectorQuantization(out);
  checkOnDisk(out);
  if (strict !== undefined) out.strict_mode_config = strict;
  return out;
}

/**
 * The node's `storage.hnsw_index.on_disk: true` reaches a new collection as a default,
 * not as its request: a multivector of it that states no `hnsw_config.on_disk` of its
 * own keeps its graph in memory (`on_disk: false` on that vector, shown by GET), where
 * an `on_disk: true` the body asks for is refused (checkMultivectorQuantization).
 */
function keepMultivectorGraphsInMemory(vectors: CollectionParams['vectors']): void {
  for (const [, p] of vectorEntries({ vectors } as CollectionParams)) {
    if (p.multivector_config && p.hnsw_config?.on_disk === undefined) p.hnsw_config = { ...(p.hnsw_config ?? {}), on_disk: false };
  }
}

/**
 * Multivectors are stored unquantized, with their graph in memory: a quantization or an
 * `hnsw_config.on_disk: true` that would apply to one is refused.
 */
function checkMultivectorQuantization(config: CollectionConfig): void {
  for (const [name, p] of vectorEntries(config.params)) {
    if (!p.multivector_config) continue;
    const field = name === '' ? 'vectors' : `vectors.${name}`;
    const q = p.quantization_config !== undefined ? p.quantization_config : config.quantization_config;
    if (q) throw new BadInputError(`${field}: quantized multivectors are not supported by Quiver (this vector would be quantized by its own or the collection's quantization_config)`);
    const onDisk = p.hnsw_config?.on_disk ?? config.hnsw_config.on_disk;
    if (onDisk === true) {
      throw new BadInputError(
        `${field}: hnsw_config.on_disk: true is not supported for multivectors by Quiver (their graph stays in memory; this vector would get it from its own or the collection's hnsw_config); set ${field}.hnsw_config.on_disk to false`,
      );
    }
  }
}

/**
 * On-disk vectors need quantization in Quiver: the graph walk scores the vectors kept
 * beside each node's links, so only a quantized vector (codes in memory, walked on)
 * can keep its f32 originals in a mapped file. `on_disk: true` and a nonzero
 * `memmap_threshold` that would apply to a vector without quantization (its own or the
 * collection's; multivectors have none) are refused rather than ignored.
 */
function checkOnDisk(config: CollectionConfig): void {
  const memmap = config.optimizer_config.memmap_threshold;
  for (const [name, p] of vectorEntries(config.params)) {
    const q = p.quantization_config !== undefined ? p.quantization_config : config.quantization_config;
    if (q && !p.multivector_config) continue;
    const field = name === '' ? 'vectors' : `vectors.${name}`;
    if (p.on_disk === true) {
      throw new BadInputError(
        `${field}.on_disk: true needs quantization in Quiver: the graph walk scores the f32 vectors stored beside its links, so only a quantized vector's originals can live in a memory-mapped file; set quantization_config (scalar or binary) for this vector or the collection, or omit on_disk`,
      );
    }
    if (typeof memmap === 'number' && memmap > 0) {
      throw new BadInputError(
        `optimizers_config.memmap_threshold: ${memmap} needs quantization in Quiver: it moves a quantized vector's f32 originals to a memory-mapped file, and ${field} has no quantization; set quantization_config, or set memmap_threshold to 0 or null`,
      );
    }
  }
}

/**
 * checkOnDisk for a change of `before` into `next`, at request time only (the
 * dispatcher before it proposes, a single node before it applies), never when a
 * committed entry applies: a rule added in a later version must not make a peer that
 * replays an old entry disagree with one that applied it. A collection that already
 * breaks the rule (its memmap_threshold was accepted and ignored by older versions) is
 * not refused every later change for it.
 */
function checkOnDiskChange(before: CollectionConfig, next: CollectionConfig): void {
  try {
    checkOnDisk(before);
  } catch {
    return;
  }
  checkOnDisk(next);
}

const PARAMS_ORDER: ReadonlyArray<keyof CollectionParams> = [
  'vectors',
  'shard_number',
  'sharding_method',
  'replication_factor',
  'write_consistency_factor',
  'read_fan_out_factor',
  'read_fan_out_delay_ms',
  'on_disk_payload',
  'sparse_vectors',
];

/** The params with their keys in the reference's order (GET shows them as stored); unset ones stay absent. */
function inReferenceOrder(p: CollectionParams): CollectionParams {
  const out: Record<string, unknown> = {};
  for (const k of PARAMS_ORDER) if (p[k] !== undefined) out[k] = p[k];
  return Object.assign(out, p) as CollectionParams;
}

/**
 * Applies a `PATCH /collections/{name}` body to a copy of `current`. Returns the new
 * configuration and whether index settings changed (the vectors must be re-indexed).
 */
export function applyCollectionUpdate(current: CollectionConfig, body: unknown, checkRequest = true): { config: CollectionConfig; reindex: boolean } {
  const o = body === undefined ? {} : obj(body, 'body');
  rejectUnknown(o, ['vectors', 'optimizers_config', 'params', 'hnsw_config', 'quantization_config', 'metadata', 'strict_mode_config', 'sparse_vectors'], '', {});
  const next: CollectionConfig = JSON.parse(JSON.stringify(current)) as CollectionConfig;
  let reindex = false;
  if (o.strict_mode_config !== undefined && o.strict_mode_config !== null) {
    next.strict_mode_config = mergeStrictMode(next.strict_mode_config, parseStrictMode(o.strict_mode_config));
  }
  const metadata = parseMetadata(o.metadata);
  if (metadata !== undefined) next.metadata = mergeMetadata(next.metadata, metadata);
  if (o.sparse_vectors !== undefined && o.sparse_vectors !== null) {
    next.params.sparse_vectors = updateSparseVectors(next.params.sparse_vectors ?? {}, o.sparse_vectors, 'sparse_vectors');
  }
  if (o.params !== undefined && o.params !== null) {
    const p = obj(o.params, 'params');
    rejectUnknown(p, ['replication_factor', 'write_consistency_factor', 'read_fan_out_factor', 'read_fan_out_delay_ms', 'on_disk_payload'], 'params.');
    const rf = optional(p, 'replication_factor', (v) => int(v, 'params.replication_factor', 1, 1024));
    if (rf !== undefined) next.params.replication_factor = rf;
    const wcf = optional(p, 'write_consistency_factor', (v) => int(v, 'params.write_consistency_factor', 1, 1024));
    if (wcf !== undefined) next.params.write_consistency_factor = wcf;
    // uint32 and uint64 in the reference: a value out of the type's range fails to deserialize (400).
    const rff = optional(p, 'read_fan_out_factor', (v) => unsigned(v, 'params.read_fan_out_factor', 2 ** 32 - 1));
    if (rff !== undefined) next.params.read_fan_out_factor = rff;
    const rfd = optional(p, 'read_fan_out_delay_ms', (v) => unsigned(v, 'params.read_fan_out_delay_ms', Number.MAX_SAFE_INTEGER));
    if (rfd !== undefined) next.params.read_fan_out_delay_ms = rfd;
    const odp = optional(p, 'on_disk_payload', (v) => bool(v, 'params.on_disk_payload'));
    if (odp !== undefined) next.params.on_disk_payload = odp;
    next.params = inReferenceOrder(next.params);
    if (next.params.write_consistency_factor > next.params.replication_factor) {
      throw new BadInputError(
        `write_consistency_factor (${next.params.write_consistency_factor}) cannot exceed replication_factor (${next.params.replication_factor})`,
      );
    }
  }
  if (o.optimizers_config !== undefined && o.optimizers_config !== null) {
    Object.assign(next.optimizer_config, parseOptimizersDiff(o.optimizers_config, 'optimizers_config'));
  }
  if (o.hnsw_config !== undefined && o.hnsw_config !== null) {
    const diff = parseHnswDiff(o.hnsw_config, 'hnsw_config');
    if (diff.m !== undefined || diff.ef_construct !== undefined) reindex = true;
    Object.assign(next.hnsw_config, diff);
  }
  if (o.quantization_config !== undefined) {
    next.quantization_config = parseQuantization(o.quantization_config, 'quantization_config', true);
    reindex = true;
  }
  if (o.vectors !== undefined && o.vectors !== null) {
    const vs = obj(o.vectors, 'vectors');
    const entries = new Map(vectorEntries(next.params));
    for (const [name, diffRaw] of Object.entries(vs)) {
      const params = entries.get(name);
      if (!params) throw new BadInputError(`Not existing vector name error: ${name}`);
      const d = obj(diffRaw, `vectors.${name}`);
      rejectUnknown(d, ['hnsw_config', 'quantization_config', 'on_disk'], `vectors.${name}.`);
      if (d.hnsw_config !== undefined && d.hnsw_config !== null) {
        params.hnsw_config = { ...(params.hnsw_config ?? {}), ...parseHnswDiff(d.hnsw_config, `vectors.${name}.hnsw_config`) };
        reindex = true;
      }
      if (d.quantization_config !== undefined) {
        params.quantization_config = parseQuantization(d.quantization_config, `vectors.${name}.quantization_config`, true);
        reindex = true;
      }
      const od = optional(d, 'on_disk', (v) => bool(v, `vectors.${name}.on_disk`));
      if (od !== undefined) params.on_disk = od;
    }
    next.params.vectors = entries.has('') && entries.size === 1 ? (entries.get('') as VectorParams) : Object.fromEntries(entries);
  }
  checkMultivectorQuantization(next);
  if (checkRequest) checkOnDiskChange(current, next);
  return { config: next, reindex };
}

function engineQuantization(q: QuantizationConfig | null | undefined): Quantization {
  if (!q) return { kind: 'none' };
  if ('scalar' in q) return q.scalar.quantile !== undefined ? { kind: 'scalar', quantile: q.scalar.quantile } : { kind: 'scalar' };
  return { kind: 'binary' };
}

/** The effective index settings of each named vector (vector-level settings override the collection's). */
export function vectorSpecs(config: CollectionConfig): VectorSpec[] {
  return vectorEntries(config.params).map(([name, p]) => {
    const h = { ...config.hnsw_config, ...(p.hnsw_config ?? {}) };
    const q = p.quantization_config !== undefined ? p.quantization_config : config.quantization_config;
    const threshold = config.optimizer_config.indexing_threshold;
    return {
      name,
      dim: p.size,
      distance: p.distance,
      m: h.m,
      efConstruct: h.ef_construct,
      fullScanThresholdKb: h.full_scan_threshold,
      quantization: engineQuantization(q),
      // m = 0 means "no graph" in the reference: keep everything in exact-scan form.
      // A multivector store links points as they come (or, with m = 0, never).
      indexingThresholdKb: h.m === 0 || p.multivector_config ? 0 : threshold === null ? 10_000 : threshold,
      maxIndexingThreads: h.max_indexing_threads,
      deletedThreshold: config.optimizer_config.deleted_threshold,
      vacuumMinVectorNumber: config.optimizer_config.vacuum_min_vector_number,
      datatype: p.datatype ?? 'float32',
      multivector: p.multivector_config ? true : undefined,
      onDisk: p.on_disk === true,
      graphOnDisk: h.on_disk === true,
      memmapThresholdKb: config.optimizer_config.memmap_threshold ?? 0,
    };
  });
}

// ---------------------------------------------------------------------------------
// Named vector CRUD: `PUT` and `DELETE /collections/{name}/vectors/{vector_name}`.

/** A new named vector: a dense one (VectorParams) or a sparse one (SparseVectorParams). */
export type NewVectorName = { dense: VectorParams } | { sparse: SparseVectorParams };

/**
 * Parses a VectorNameConfig body (`{"dense": {size, distance, multivector_config?,
 * datatype?}}` or `{"sparse": {modifier?, datatype?}}`) into the params of the new vector.
 */
export function parseVectorNameConfig(body: unknown): NewVectorName {
  const o = obj(body, 'body');
  const keys = Object.keys(o);
  if (keys.length !== 1 || (keys[0] !== 'dense' && keys[0] !== 'sparse')) {
    throw new FormatError(`body: expected exactly one of \`dense\`, \`sparse\`, got ${keys.length === 0 ? 'neither' : keys.map((k) => `\`${k}\``).join(', ')}`);
  }
  if (keys[0] === 'sparse') return { sparse: parseSparseVectorNameConfig(o.sparse, 'sparse') };
  const d = obj(o.dense, 'dense');
  rejectUnknown(d, ['size', 'distance', 'multivector_config', 'datatype'], 'dense.');
  return { dense: parseVectorParams(d, 'dense') };
}

/** `config` with the new vector `name` added (a dense one takes the collection's HNSW and quantization settings). */
export function addVectorName(config: CollectionConfig, name: string, v: NewVectorName, checkRequest = true): CollectionConfig {
  if (!VECTOR_NAME_RE.test(name) || name === '.' || name === '..') throw new ValidationError(`vector_name: invalid vector name ${JSON.stringify(name)}`);
  const entries = vectorEntries(config.params);
  const sparse = config.params.sparse_vectors ?? {};
  if (entries.some(([n]) => n === name) || Object.prototype.hasOwnProperty.call(sparse, name)) {
    throw new BadInputError(`Vector with name ${JSON.stringify(name)} already exists`);
  }
  const next: CollectionConfig = JSON.parse(JSON.stringify(config)) as CollectionConfig;
  if ('sparse' in v) {
    next.params.sparse_vectors = { ...(next.params.sparse_vectors ?? {}), [name]: JSON.parse(JSON.stringify(v.sparse)) as SparseVectorParams };
    return next;
  }
  // The unnamed vector beside named dense ones is a configuration no create request (and
  // so no snapshot recovery, which parses config.json as one) accepts.
  if (entries.some(([n]) => n === '')) {
    throw new BadInputError(`cannot add ${JSON.stringify(name)}: the collection's dense vector is unnamed, and named dense vectors can be added only to a collection of named vectors`);
  }
  next.params.vectors = Object.fromEntries([...entries.map(([n, p]) => [n, JSON.parse(JSON.stringify(p)) as VectorParams] as const), [name, v.dense]]);
  // What checkMultivectorQuantization refuses, said for this request, which carries no
  // hnsw_config of the vector's own (its advice to set one cannot be followed here).
  if (v.dense.multivector_config && v.dense.hnsw_config?.on_disk === undefined && next.hnsw_config.on_disk === true) {
    throw new BadInputError(
      `vectors.${name}: a multivector keeps its HNSW graph in memory in Quiver, and the collection's hnsw_config.on_disk is true, which a new vector takes (this request cannot set the vector's own hnsw_config); set the collection's hnsw_config.on_disk to false (PATCH /collections/{collection_name}), add the vector, then PATCH hnsw_config.on_disk: true together with vectors.${name}.hnsw_config.on_disk: false`,
    );
  }
  checkMultivectorQuantization(next);
  if (checkRequest) checkOnDiskChange(config, next);
  return next;
}

/** `config` without the named vector `name`; a collection keeps at least one vector. */
export function removeVectorName(config: CollectionConfig, name: string): CollectionConfig {
  const sparse = config.params.sparse_vectors;
  if (sparse !== undefined && Object.prototype.hasOwnProperty.call(sparse, name)) {
    const next: CollectionConfig = JSON.parse(JSON.stringify(config)) as CollectionConfig;
    delete next.params.sparse_vectors![name];
    // None left: the config shows no sparse vectors, as when it was created without them.
    if (Object.keys(next.params.sparse_vectors!).length === 0) delete next.params.sparse_vectors;
    return next;
  }
  const entries = vectorEntries(config.params);
  if (!entries.some(([n]) => n === name)) throw new BadInputError(`Not existing vector name error: ${name}`);
  if (entries.length === 1) throw new BadInputError(`cannot delete ${JSON.stringify(name)}, the only vector of the collection: Quiver does not support collections without dense vectors`);
  const next: CollectionConfig = JSON.parse(JSON.stringify(config)) as CollectionConfig;
  const rest = entries.filter(([n]) => n !== name);
  // Only the unnamed vector left: the config shows it bare again, as when it was created so.
  next.params.vectors = rest.length === 1 && rest[0][0] === '' ? rest[0][1] : Object.fromEntries(rest);
  return next;
}
