/**
 * Collection configurations between the proto messages of `qdrant.Collections` and the
 * JSON form of the reference's API: CreateCollection and UpdateCollection become the
 * bodies of `PUT` and `PATCH /collections/{name}` (which ts/collection/config.ts
 * parses, through the dispatcher, exactly as for REST), and the CollectionInfo REST
 * answers (ts/api/request/collections.ts) becomes the proto CollectionInfo.
 *
 * Proto3 fields that are not `optional` are absent when they hold their zero value
 * (the loader's `defaults: false`): such a field is read as its zero, an `optional` one
 * as unset. A proto setting Quiver does not serve is passed on in the JSON form, where
 * the parser refuses it with the same message as for REST.
 *
 * Owns: these translations. Must never: validate settings (the JSON-form parser does).
 */

import type { Obj } from '../request/parse';
import { int64Text, num, pascalEnum, snakeEnum } from './convert/common';
import { jsonToMap, mapToJson } from './convert/value';

type Msg = Record<string, any>;

/** Copies the fields of `src` named in `keys` that are set, 64-bit ones (`u64`) as numbers. */
function pick(src: Msg, keys: readonly string[], u64: readonly string[] = []): Obj {
  const out: Obj = {};
  for (const k of keys) {
    const v = src[k];
    if (v === undefined || v === null) continue;
    out[k] = u64.includes(k) ? num(v) : v;
  }
  return out;
}

// -- proto -> JSON form (requests) ---------------------------------------------------------

export function hnswJson(h: Msg): Obj {
  return pick(h, ['m', 'ef_construct', 'full_scan_threshold', 'max_indexing_threads', 'on_disk', 'payload_m', 'inline_storage'], ['m', 'ef_construct', 'full_scan_threshold', 'max_indexing_threads', 'payload_m']);
}

export function walJson(w: Msg): Obj {
  return pick(w, ['wal_capacity_mb', 'wal_segments_ahead', 'wal_retain_closed'], ['wal_capacity_mb', 'wal_segments_ahead', 'wal_retain_closed']);
}

export function optimizersJson(o: Msg): Obj {
  const u64 = ['vacuum_min_vector_number', 'default_segment_number', 'max_segment_size', 'memmap_threshold', 'indexing_threshold', 'flush_interval_sec'];
  const out = pick(o, ['deleted_threshold', ...u64, 'prevent_unoptimized'], u64);
  // MaxOptimizationThreads: a number, or `Auto` (null in the JSON form: no fixed limit).
  const mot = o.max_optimization_threads as Msg | undefined;
  if (mot !== undefined) out.max_optimization_threads = mot.value !== undefined ? num(mot.value) : mot.setting !== undefined ? null : undefined;
  else if (o.deprecated_max_optimization_threads !== undefined) out.max_optimization_threads = num(o.deprecated_max_optimization_threads);
  return out;
}

/** QuantizationConfig (or QuantizationConfigDiff, whose `disabled` is null: turn it off). */
export function quantizationJson(q: Msg): Obj | null {
  if (q.disabled !== undefined) return null;
  if (q.scalar !== undefined) {
    const s = q.scalar as Msg;
    // `type` is not optional: absent is its zero, UnknownQuantization.
    return { scalar: { type: snakeEnum(s.type ?? 'UnknownQuantization'), ...pick(s, ['quantile', 'always_ram']) } };
  }
  if (q.product !== undefined) {
    const p = q.product as Msg;
    return { product: { compression: p.compression ?? 'x4', ...pick(p, ['always_ram']) } };
  }
  if (q.binary !== undefined) {
    const b = q.binary as Msg;
    const out: Obj = pick(b, ['always_ram']);
    if (b.encoding !== undefined) out.encoding = snakeEnum(b.encoding);
    if (b.query_encoding !== undefined) out.query_encoding = snakeEnum((b.query_encoding as Msg).setting ?? 'Default');
    return { binary: out };
  }
  if (q.turboquant !== undefined) return { turboquant: pick(q.turboquant as Msg, ['always_ram', 'bits']) };
  // No member set: the parser names what it expects.
  return {};
}

function vectorParamsJson(v: Msg): Obj {
  const out: Obj = {};
  // `size` and `distance` are not optional: absent means 0 / UnknownDistance.
  out.size = num(v.size ?? '0');
  out.distance = v.distance ?? 'UnknownDistance';
  if (v.hnsw_config !== undefined) out.hnsw_config = hnswJson(v.hnsw_config);
  if (v.quantization_config !== undefined) out.quantization_config = quantizationJson(v.quantization_config);
  if (v.on_disk !== undefined) out.on_disk = v.on_disk;
  if (v.datatype !== undefined && v.datatype !== 'Default') out.datatype = snakeEnum(v.datatype);
  if (v.multivector_config !== undefined) out.multivector_config = { comparator: snakeEnum((v.multivector_config as Msg).comparator ?? 'MaxSim') };
  return out;
}

/** VectorsConfig: one VectorParams (the unnamed vector) or a map of named ones. */
function vectorsJson(v: Msg): Obj | undefined {
  if (v.params !== undefined) return vectorParamsJson(v.params);
  if (v.params_map !== undefined) {
    const out: Obj = {};
    for (const [name, p] of Object.entries((v.params_map as Msg).map ?? {})) out[name] = vectorParamsJson(p as Msg);
    return out;
  }
  return undefined;
}

function vectorParamsDiffJson(d: Msg): Obj {
  const out: Obj = {};
  if (d.hnsw_config !== undefined) out.hnsw_config = hnswJson(d.hnsw_config);
  if (d.quantization_config !== undefined) out.quantization_config = quantizationJson(d.quantization_config);
  if (d.on_disk !== undefined) out.on_disk = d.on_disk;
  return out;
}

/** VectorsConfigDiff: the unnamed vector's diff is keyed "" in the JSON form. */
function vectorsDiffJson(v: Msg): Obj | undefined {
  if (v.params !== undefined) return { '': vectorParamsDiffJson(v.params) };
  if (v.params_map !== undefined) {
    const out: Obj = {};
    for (const [name, p] of Object.entries((v.params_map as Msg).map ?? {})) out[name] = vectorParamsDiffJson(p as Msg);
    return out;
  }
  return undefined;
}

/** A map field that is set and not empty (an empty map is absent on the wire). */
function nonEmpty(m: Msg | undefined): boolean {
  return m !== undefined && Object.keys(m).length > 0;
}

/**
 * A message's fields as the JSON form names them: without the virtual fields the loader
 * adds for each proto3 `optional` field (`_enabled: 'enabled'`), which no JSON form has.
 */
function withoutVirtual(m: Msg): Obj {
  const out: Obj = {};
  for (const [k, v] of Object.entries(m)) if (!k.startsWith('_')) out[k] = v;
  return out;
}

/** SparseVectorParams by name in the JSON form (`Default` datatype: unset; enums as the JSON names them). */
function sparseVectorsJson(map: Msg): Obj {
  const out: Obj = {};
  for (const [name, raw] of Object.entries(map)) {
    const p = (raw ?? {}) as Msg;
    const o: Obj = {};
    if (p.index !== undefined && p.index !== null) {
      const idx = p.index as Msg;
      const i = pick(idx, ['full_scan_threshold', 'on_disk'], ['full_scan_threshold']);
      if (idx.datatype !== undefined && idx.datatype !== null && idx.datatype !== 'Default' && idx.datatype !== 0) i.datatype = snakeEnum(idx.datatype);
      o.index = i;
    }
    if (p.modifier !== undefined && p.modifier !== null) o.modifier = snakeEnum(p.modifier);
    out[name] = o;
  }
  return out;
}

/** The JSON form's sparse vectors as the proto's SparseVectorConfig map. */
function sparseVectorsProto(sv: Obj): Msg {
  const map: Msg = {};
  for (const [name, raw] of Object.entries(sv)) {
    const p = raw as Obj;
    const o: Msg = {};
    if (p.index !== undefined && p.index !== null) {
      const idx = p.index as Obj;
      const i = protoPick(idx, ['full_scan_threshold', 'on_disk'], ['full_scan_threshold']);
      if (typeof idx.datatype === 'string') i.datatype = pascalEnum(idx.datatype);
      o.index = i;
    }
    if (typeof p.modifier === 'string') o.modifier = pascalEnum(p.modifier);
    map[name] = o;
  }
  return { map };
}

/** The settings both CreateCollection and UpdateCollection carry: sparse vectors, strict mode, metadata. */
function commonJson(r: Msg, out: Obj): void {
  if (r.sparse_vectors_config !== undefined && nonEmpty((r.sparse_vectors_config as Msg).map)) out.sparse_vectors = sparseVectorsJson((r.sparse_vectors_config as Msg).map as Msg);
  if (r.strict_mode_config !== undefined) out.strict_mode_config = withoutVirtual(r.strict_mode_config);
  // An empty map is not on the wire: no metadata (the JSON form's absent field).
  if (nonEmpty(r.metadata)) out.metadata = mapToJson(r.metadata, 'metadata');
}

/** CreateCollection as the body of `PUT /collections/{name}`. */
export function createCollectionBody(r: Msg): Obj {
  const out: Obj = {};
  if (r.vectors_config !== undefined) out.vectors = vectorsJson(r.vectors_config);
  Object.assign(out, pick(r, ['shard_number', 'replication_factor', 'write_consistency_factor', 'on_disk_payload']));
  if (r.sharding_method !== undefined) out.sharding_method = snakeEnum(r.sharding_method);
  if (r.hnsw_config !== undefined) out.hnsw_config = hnswJson(r.hnsw_config);
  if (r.wal_config !== undefined) out.wal_config = walJson(r.wal_config);
  if (r.optimizers_config !== undefined) out.optimizers_config = optimizersJson(r.optimizers_config);
  if (r.quantization_config !== undefined) out.quantization_config = quantizationJson(r.quantization_config);
  commonJson(r, out);
  return out;
}

/** UpdateCollection as the body of `PATCH /collections/{name}`. */
export function updateCollectionBody(r: Msg): Obj {
  const out: Obj = {};
  if (r.optimizers_config !== undefined) out.optimizers_config = optimizersJson(r.optimizers_config);
  if (r.params !== undefined) {
    out.params = pick(r.params, ['replication_factor', 'write_consistency_factor', 'on_disk_payload', 'read_fan_out_factor', 'read_fan_out_delay_ms'], ['read_fan_out_delay_ms']);
  }
  if (r.hnsw_config !== undefined) out.hnsw_config = hnswJson(r.hnsw_config);
  if (r.vectors_config !== undefined) out.vectors = vectorsDiffJson(r.vectors_config);
  if (r.quantization_config !== undefined) out.quantization_config = quantizationJson(r.quantization_config);
  commonJson(r, out);
  return out;
}

// -- JSON form -> proto (answers) ----------------------------------------------------------

/** Copies the set fields of `src`, 64-bit ones (`u64`) as decimal strings. */
function protoPick(src: Obj, keys: readonly string[], u64: readonly string[] = []): Msg {
  const out: Msg = {};
  for (const k of keys) {
    const v = src[k];
    if (v === undefined || v === null) continue;
    out[k] = u64.includes(k) ? int64Text(v as number) : v;
  }
  return out;
}

const HNSW_KEYS = ['m', 'ef_construct', 'full_scan_threshold', 'max_indexing_threads', 'on_disk', 'payload_m'];
const HNSW_U64 = ['m', 'ef_construct', 'full_scan_threshold', 'max_indexing_threads', 'payload_m'];

function hnswProto(h: Obj): Msg {
  return protoPick(h, HNSW_KEYS, HNSW_U64);
}

function quantizationProto(q: Obj | null | undefined): Msg | undefined {
  if (q === null || q === undefined) return undefined;
  if (q.scalar !== undefined) {
    const s = q.scalar as Obj;
    return { scalar: { type: pascalEnum(String(s.type)), ...protoPick(s, ['quantile', 'always_ram']) } };
  }
  if (q.binary !== undefined) return { binary: protoPick(q.binary as Obj, ['always_ram']) };
  return undefined;
}

function vectorParamsProto(v: Obj): Msg {
  const out: Msg = { size: int64Text(v.size as number), distance: v.distance };
  if (v.hnsw_config !== undefined && v.hnsw_config !== null) out.hnsw_config = hnswProto(v.hnsw_config as Obj);
  const q = quantizationProto(v.quantization_config as Obj | null | undefined);
  if (q !== undefined) out.quantization_config = q;
  if (v.on_disk !== undefined && v.on_disk !== null) out.on_disk = v.on_disk;
  if (typeof v.datatype === 'string') out.datatype = pascalEnum(v.datatype);
  const mv = v.multivector_config as Obj | null | undefined;
  if (mv !== undefined && mv !== null) out.multivector_config = { comparator: pascalEnum(String(mv.comparator)) };
  return out;
}

function vectorsProto(v: Obj): Msg {
  if (typeof v.size === 'number' && typeof v.distance === 'string') return { params: vectorParamsProto(v) };
  const map: Msg = {};
  for (const [name, p] of Object.entries(v)) map[name] = vectorParamsProto(p as Obj);
  return { params_map: { map } };
}

function paramsProto(p: Obj): Msg {
  const out: Msg = {
    shard_number: p.shard_number,
    on_disk_payload: p.on_disk_payload,
    vectors_config: vectorsProto(p.vectors as Obj),
    replication_factor: p.replication_factor,
    write_consistency_factor: p.write_consistency_factor,
    sharding_method: pascalEnum(String(p.sharding_method ?? 'auto')),
  };
  if (p.read_fan_out_factor !== undefined && p.read_fan_out_factor !== null) out.read_fan_out_factor = p.read_fan_out_factor;
  if (p.read_fan_out_delay_ms !== undefined && p.read_fan_out_delay_ms !== null) out.read_fan_out_delay_ms = int64Text(p.read_fan_out_delay_ms as number);
  if (p.sparse_vectors !== undefined && p.sparse_vectors !== null) out.sparse_vectors_config = sparseVectorsProto(p.sparse_vectors as Obj);
  return out;
}

function optimizersProto(o: Obj): Msg {
  const u64 = ['vacuum_min_vector_number', 'default_segment_number', 'max_segment_size', 'memmap_threshold', 'indexing_threshold', 'flush_interval_sec'];
  const out = protoPick(o, ['deleted_threshold', ...u64], u64);
  out.max_optimization_threads = o.max_optimization_threads === null || o.max_optimization_threads === undefined ? { setting: 'Auto' } : { value: int64Text(o.max_optimization_threads as number) };
  return out;
}

/** A payload index's parameters (the normalised `field_schema` object) as PayloadIndexParams. */
export function indexParamsProto(type: string, params: Obj | undefined): Msg | undefined {
  if (params === undefined) return undefined;
  switch (type) {
    case 'keyword':
      return { keyword_index_params: protoPick(params, ['is_tenant', 'on_disk', 'enable_hnsw']) };
    case 'integer':
      return { integer_index_params: protoPick(params, ['lookup', 'range', 'is_principal', 'on_disk', 'enable_hnsw']) };
    case 'float':
      return { float_index_params: protoPick(params, ['on_disk', 'is_principal', 'enable_hnsw']) };
    case 'geo':
      return { geo_index_params: protoPick(params, ['on_disk', 'enable_hnsw']) };
    case 'bool':
      return { bool_index_params: protoPick(params, ['on_disk', 'enable_hnsw']) };
    case 'datetime':
      return { datetime_index_params: protoPick(params, ['on_disk', 'is_principal', 'enable_hnsw']) };
    case 'uuid':
      return { uuid_index_params: protoPick(params, ['is_tenant', 'on_disk', 'enable_hnsw']) };
    case 'text': {
      const out = protoPick(params, ['lowercase', 'min_token_len', 'max_token_len', 'on_disk', 'phrase_matching', 'ascii_folding', 'enable_hnsw'], ['min_token_len', 'max_token_len']);
      out.tokenizer = pascalEnum(String(params.tokenizer ?? 'word'));
      const sw = params.stopwords;
      if (typeof sw === 'string') out.stopwords = { languages: [sw] };
      else if (sw !== undefined && sw !== null) out.stopwords = protoPick(sw as Obj, ['languages', 'custom']);
      const st = params.stemmer as Obj | null | undefined;
      if (st !== undefined && st !== null && st.type === 'snowball') out.stemmer = { snowball: { language: st.language } };
      return { text_index_params: out };
    }
    default:
      return undefined;
  }
}

/** CollectionInfo in the JSON form (as REST answers it) as the proto CollectionInfo. */
export function collectionInfoProto(info: Record<string, unknown>): Msg {
  const cfg = info.config as Obj;
  const config: Msg = {
    params: paramsProto(cfg.params as Obj),
    hnsw_config: hnswProto(cfg.hnsw_config as Obj),
    optimizer_config: optimizersProto(cfg.optimizer_config as Obj),
    wal_config: protoPick(cfg.wal_config as Obj, ['wal_capacity_mb', 'wal_segments_ahead', 'wal_retain_closed'], ['wal_capacity_mb', 'wal_segments_ahead', 'wal_retain_closed']),
  };
  const q = quantizationProto(cfg.quantization_config as Obj | null);
  if (q !== undefined) config.quantization_config = q;
  if (cfg.metadata !== undefined && cfg.metadata !== null) config.metadata = jsonToMap(cfg.metadata as Obj, { depth: 3, what: 'the collection\'s metadata' }); // GetCollectionInfoResponse > CollectionInfo > CollectionConfig
  const payload_schema: Msg = {};
  for (const [field, s] of Object.entries((info.payload_schema ?? {}) as Record<string, { data_type: string; params?: Obj; points: number }>)) {
    const entry: Msg = { data_type: pascalEnum(s.data_type), points: int64Text(s.points) };
    const params = indexParamsProto(s.data_type, s.params);
    if (params !== undefined) entry.params = params;
    payload_schema[field] = entry;
  }
  const status = String(info.status);
  const optimizer = info.optimizer_status;
  return {
    status: pascalEnum(status),
    optimizer_status: optimizer === 'ok' ? { ok: true } : { ok: false, error: String((optimizer as Obj | null)?.error ?? optimizer) },
    segments_count: int64Text(info.segments_count as number),
    config,
    payload_schema,
    points_count: int64Text(info.points_count as number),
    indexed_vectors_count: int64Text(info.indexed_vectors_count as number),
  };
}
