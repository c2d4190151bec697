/**
 * Strict mode: a collection's `strict_mode_config` (the reference's v1.18 list), its
 * parsing and merge, and the checks each request passes before it runs while it is
 * enabled: limits on `limit`, `timeout`, batch sizes, search parameters, filters
 * (unindexed fields, condition counts and sizes), collection size (points, vector and
 * payload bytes), payload index count, and the read and write rate limits.
 *
 * Owns: those checks and their texts (the reference's: a strict-mode refusal is
 * "Bad request: <what>. Help: <what to do>", a size limit "Bad request: Max ... reached!",
 * a rate limit "Rate limiting exceeded: ..."). Must never: know a transport or a status
 * code, or change data.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';

import { BadRequestError, FormatError, RateLimitedError, ValidationError } from '../common/errors';
import type { Condition, FieldCondition, Filter } from '../shard/filter';
import type { FieldSchema } from '../shard/field-schema';
import type { ReplicaOperation } from './replica-operation';

export interface StrictModeConfig {
  enabled?: boolean;
  max_query_limit?: number;
  max_timeout?: number;
  unindexed_filtering_retrieve?: boolean;
  unindexed_filtering_update?: boolean;
  search_max_hnsw_ef?: number;
  search_allow_exact?: boolean;
  search_max_oversampling?: number;
  upsert_max_batchsize?: number;
  search_max_batchsize?: number;
  max_collection_vector_size_bytes?: number;
  read_rate_limit?: number;
  write_rate_limit?: number;
  max_collection_payload_size_bytes?: number;
  max_points_count?: number;
  filter_max_conditions?: number;
  condition_max_size?: number;
  multivector_config?: Record<string, { max_vectors?: number }>;
  sparse_config?: Record<string, { max_length?: number }>;
  max_payload_index_count?: number;
  max_resident_memory_percent?: number;
}

type Obj = Record<string, unknown>;

const isObj = (x: unknown): x is Obj => typeof x === 'object' && x !== null && !Array.isArray(x);

/** The fields in the reference's order (GET shows them so). */
const UINTS: ReadonlyArray<[keyof StrictModeConfig, number]> = [
  ['max_query_limit', 1],
  ['max_timeout', 1],
  ['search_max_hnsw_ef', 0],
  ['upsert_max_batchsize', 0],
  ['search_max_batchsize', 0],
  ['max_collection_vector_size_bytes', 0],
  ['read_rate_limit', 1],
  ['write_rate_limit', 1],
  ['max_collection_payload_size_bytes', 0],
  ['max_points_count', 1],
  ['filter_max_conditions', 0],
  ['condition_max_size', 0],
  ['max_payload_index_count', 0],
];
const BOOLS: ReadonlyArray<keyof StrictModeConfig> = ['enabled', 'unindexed_filtering_retrieve', 'unindexed_filtering_update', 'search_allow_exact'];
const ORDER: ReadonlyArray<keyof StrictModeConfig> = [
  'enabled',
  'max_query_limit',
  'max_timeout',
  'unindexed_filtering_retrieve',
  'unindexed_filtering_update',
  'search_max_hnsw_ef',
  'search_allow_exact',
  'search_max_oversampling',
  'upsert_max_batchsize',
  'search_max_batchsize',
  'max_collection_vector_size_bytes',
  'read_rate_limit',
  'write_rate_limit',
  'max_collection_payload_size_bytes',
  'max_points_count',
  'filter_max_conditions',
  'condition_max_size',
  'multivector_config',
  'sparse_config',
  'max_payload_index_count',
  'max_resident_memory_percent',
];

function uint(x: unknown, field: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  // gRPC's 64-bit fields arrive as decimal text.
  const v = typeof x === 'string' && /^[0-9]+$/.test(x) ? Number(x) : x;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) throw new FormatError(`${field}: expected an unsigned integer, got ${JSON.stringify(x)}`);
  if (v < min) throw new ValidationError(`${field}: value ${v} invalid, must be ${min} or larger`);
  return v;
}

function perVector(x: unknown, field: string, inner: string): Record<string, Record<string, number>> {
  if (!isObj(x)) throw new FormatError(`${field}: expected an object`);
  const out: Record<string, Record<string, number>> = {};
  for (const [name, v] of Object.entries(x)) {
    if (!isObj(v)) throw new FormatError(`${field}.${name}: expected an object`);
    for (const k of Object.keys(v)) if (k !== inner) throw new FormatError(`${field}.${name}: unknown field \`${k}\`, expected \`${inner}\``);
    const entry: Record<string, number> = {};
    if (v[inner] !== undefined && v[inner] !== null) entry[inner] = uint(v[inner], `${field}.${name}.${inner}`, 1);
    out[name] = entry;
  }
  return out;
}

/**
 * A `strict_mode_config` body (create or update: the same schema). Null or absent
 * fields are left out: in an update they keep the stored value.
 */
export function parseStrictMode(x: unknown): StrictModeConfig {
  if (!isObj(x)) throw new FormatError(`strict_mode_config: expected an object, got ${JSON.stringify(x)}`);
  for (const k of Object.keys(x)) {
    if (!(ORDER as readonly string[]).includes(k)) throw new FormatError(`strict_mode_config: unknown field \`${k}\`, expected one of ${ORDER.map((o) => `\`${o}\``).join(', ')}`);
  }
  const out: Record<string, unknown> = {};
  for (const k of BOOLS) {
    const v = x[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'boolean') throw new FormatError(`strict_mode_config.${k}: expected a boolean, got ${JSON.stringify(v)}`);
    out[k] = v;
  }
  for (const [k, min] of UINTS) if (x[k] !== undefined && x[k] !== null) out[k] = uint(x[k], `strict_mode_config.${k}`, min);
  const os = x.search_max_oversampling;
  if (os !== undefined && os !== null) {
    if (typeof os !== 'number' || !Number.isFinite(os)) throw new FormatError(`strict_mode_config.search_max_oversampling: expected a number, got ${JSON.stringify(os)}`);
    out.search_max_oversampling = os;
  }
  const rm = x.max_resident_memory_percent;
  if (rm !== undefined && rm !== null) {
    out.max_resident_memory_percent = uint(rm, 'strict_mode_config.max_resident_memory_percent', 1, 255);
    if ((out.max_resident_memory_percent as number) > 100) throw new ValidationError('strict_mode_config.max_resident_memory_percent: value must be from 1 to 100');
  }
  if (x.multivector_config !== undefined && x.multivector_config !== null) out.multivector_config = perVector(x.multivector_config, 'strict_mode_config.multivector_config', 'max_vectors');
  if (x.sparse_config !== undefined && x.sparse_config !== null) out.sparse_config = perVector(x.sparse_config, 'strict_mode_config.sparse_config', 'max_length');
  return ordered(out as StrictModeConfig);
}

function ordered(c: StrictModeConfig): StrictModeConfig {
  const out: Record<string, unknown> = {};
  for (const k of ORDER) if (c[k] !== undefined) out[k] = c[k];
  return out as StrictModeConfig;
}

/** The reference's update: each field the diff sets replaces the stored one; the others stay. */
export function mergeStrictMode(current: StrictModeConfig | undefined, diff: StrictModeConfig): StrictModeConfig {
  return ordered({ ...(current ?? {}), ...diff });
}

/** `<what>. Help: <solution>` as a bad request: the reference's strict-mode refusal. */
function refuse(what: string, solution: string): BadRequestError {
  return new BadRequestError(`${what}. Help: ${solution}`);
}

function checkLimit(value: number | undefined, limit: number | undefined, name: string): void {
  if (value === undefined || limit === undefined) return;
  if (value > limit) throw refuse(`Limit exceeded ${value} > ${limit} for "${name}"`, `Reduce the "${name}" parameter to or below ${limit}.`);
}

// -- filters -------------------------------------------------------------------------------

function isField(c: Condition): c is FieldCondition {
  return typeof (c as FieldCondition).key === 'string';
}

function isFilter(c: Condition): c is Filter {
  return 'must' in c || 'should' in c || 'must_not' in c || 'min_should' in c;
}

function clauses(f: Filter): Condition[][] {
  const out: Condition[][] = [];
  if (f.should) out.push(f.should);
  if (f.min_should) out.push(f.min_should.conditions);
  if (f.must) out.push(f.must);
  if (f.must_not) out.push(f.must_not);
  return out;
}

/** The reference's count: every leaf condition, nested filters counted through. */
export function conditionsCount(f: Filter): number {
  let n = 0;
  for (const list of clauses(f)) {
    for (const c of list) {
      if ('nested' in c) n += conditionsCount(c.nested.filter);
      else if (isFilter(c)) n += conditionsCount(c);
      else n += 1;
    }
  }
  return n;
}

/** The largest input of one condition (items of `any` / `except`, ids of `has_id`). */
export function maxConditionSize(f: Filter): number {
  let max = 0;
  for (const list of clauses(f)) {
    for (const c of list) {
      let size = 0;
      if ('nested' in c) size = maxConditionSize(c.nested.filter);
      else if ('has_id' in c) size = c.has_id.length;
      else if (isField(c) && c.match) {
        if ('any' in c.match) size = c.match.any.length;
        else if ('except' in c.match) size = c.match.except.length;
      } else if (isFilter(c)) size = maxConditionSize(c);
      if (size > max) max = size;
    }
  }
  return max;
}

const ALL_INDEXES = ['keyword', 'integer', 'float', 'geo', 'text', 'bool', 'datetime', 'uuid'];
const UUID_RE = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

function stringTypes(s: string): string[] {
  return UUID_RE.test(s) ? ['keyword', 'uuid'] : ['keyword'];
}

/** The index types that serve one field condition (the reference's inference). */
function neededIndexes(c: FieldCondition): string[] {
  const out: string[] = [];
  const m = c.match;
  if (m) {
    if ('value' in m) out.push(...(typeof m.value === 'string' ? stringTypes(m.value) : typeof m.value === 'boolean' ? ['bool'] : ['integer']));
    else if ('text' in m || 'text_any' in m || 'phrase' in m) out.push('text');
    else {
      const xs = 'any' in m ? m.any : m.except;
      if (xs.length > 0) out.push(...(typeof xs[0] === 'string' ? stringTypes(xs[0] as string) : ['integer']));
      else out.push('keyword', 'integer');
    }
  }
  if (c.range) {
    const r = c.range as Record<string, unknown>;
    const datetime = ['lt', 'gt', 'lte', 'gte'].some((k) => typeof r[k] === 'string');
    out.push(...(datetime ? ['datetime'] : ['float', 'integer']));
  }
  if (c.geo_bounding_box || c.geo_radius || c.geo_polygon) out.push('geo');
  if (c.values_count || (c.is_empty !== undefined && c.is_empty !== null) || (c.is_null !== undefined && c.is_null !== null)) out.push(...ALL_INDEXES);
  return out;
}

/**
 * The first payload key of `filter` that needs an index and has none able to serve it,
 * with the types that would; null when every key is served. Keys under `nested` are
 * named `outer[].inner` as the reference names them.
 */
export function unindexedKey(filter: Filter, schema: Readonly<Record<string, FieldSchema>>): { key: string; types: string[] } | null {
  return unindexedKeys(filter, schema, true)[0] ?? null;
}

/** Every payload key of `filter` without an index able to serve it (the first only when `first`), in filter order. */
export function unindexedKeys(filter: Filter, schema: Readonly<Record<string, FieldSchema>>, first = false, prefix = '', out: Array<{ key: string; types: string[] }> = []): Array<{ key: string; types: string[] }> {
  for (const list of clauses(filter)) {
    for (const c of list) {
      if (first && out.length > 0) return out;
      let found: { key: string; types: string[] } | null = null;
      if ('nested' in c) unindexedKeys(c.nested.filter, schema, first, `${prefix}${c.nested.key}[].`, out);
      else if ('is_empty' in c && !isField(c)) found = need(`${prefix}${c.is_empty.key}`, ALL_INDEXES, schema);
      else if ('is_null' in c && !isField(c)) found = need(`${prefix}${c.is_null.key}`, ALL_INDEXES, schema);
      else if (isField(c)) found = need(`${prefix}${c.key}`, neededIndexes(c), schema);
      else if (isFilter(c)) unindexedKeys(c, schema, first, prefix, out);
      if (found) out.push(found);
    }
  }
  return out;
}

function need(key: string, types: string[], schema: Readonly<Record<string, FieldSchema>>): { key: string; types: string[] } | null {
  if (types.length === 0) return null;
  const have = schema[key];
  if (have && types.includes(have.type)) return null;
  return { key, types: [...new Set(types)].sort() };
}

// -- rate limits -----------------------------------------------------------------------------

/** A token bucket of `perMinute` tokens, refilled evenly over a minute, full at the start. */
export class RateLimiter {
  private tokens: number;
  private last: number;

  constructor(readonly perMinute: number, private readonly now: () => number = () => performance.now()) {
    this.tokens = perMinute;
    this.last = now();
  }

  /** Takes `cost` tokens or throws the reference's 429 text naming `kind` ("Read", "Write"). */
  consume(cost: number, kind: string): void {
    if (cost > this.perMinute) {
      throw new RateLimitedError(`${kind} rate limit exceeded, request larger than rate limiter capacity, please try to split your request`, null);
    }
    const t = this.now();
    this.tokens = Math.min(this.perMinute, this.tokens + ((t - this.last) / 60_000) * this.perMinute);
    this.last = t;
    if (this.tokens >= cost) {
      this.tokens -= cost;
      return;
    }
    const retryAfter = Math.ceil(((cost - this.tokens) * 60) / this.perMinute);
    throw new RateLimitedError(
      `${kind} rate limit exceeded: Operation requires ${cost} tokens but only ${this.tokens.toFixed(1)} were available. Retry after ${retryAfter}s`,
      retryAfter,
    );
  }
}

// -- the checks -------------------------------------------------------------------------------

/** What the checks need to know of the collection, read when a check needs it. */
export interface StrictModeSubject {
  config(): StrictModeConfig | undefined;
  payloadSchema(): Readonly<Record<string, FieldSchema>>;
  /** Points, vector bytes and payload bytes this peer holds (estimates, as the reference's). */
  sizes(): { points: number; vectorBytes: number; payloadBytes: number };
  /** Sees the filter of every read, strict mode or not (the performance advisories of ts/collection/issues.ts). */
  readFilter?(filter: Filter): void;
  /** Resident bytes of the process and the memory it may use (tests give their own; default: the process's). */
  memory?(): { rss: number; total: number };
}

let cgroupLimit: number | null | undefined;

/** This process's resident memory and the machine's memory, or the cgroup's limit when lower. */
export function processMemory(): { rss: number; total: number } {
  if (cgroupLimit === undefined) {
    cgroupLimit = null;
    for (const f of ['/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes']) {
      try {
        const v = Number(fs.readFileSync(f, 'utf8').trim());
        if (Number.isFinite(v) && v > 0) cgroupLimit = v;
        break;
      } catch {
        // not this cgroup version
      }
    }
  }
  const total = cgroupLimit !== null && cgroupLimit < os.totalmem() ? cgroupLimit : os.totalmem();
  return { rss: process.memoryUsage.rss(), total };
}

/** The parts of a read request the checks look at. */
export interface ReadShape {
  limit?: number;
  filter?: Filter | null;
  hnswEf?: number;
  exact?: boolean;
  oversampling?: number;
  /** Rate-limit cost; 1 plus the filter's conditions when absent. */
  cost?: number;
}

/**
 * The strict-mode gate of one collection on this peer. Its rate limiters follow the
 * configuration: a changed limit starts a new full bucket, as the reference's do.
 */
export class StrictMode {
  private readLimiter: RateLimiter | null = null;
  private writeLimiter: RateLimiter | null = null;
  private sizeCache: { at: number; value: { points: number; vectorBytes: number; payloadBytes: number } } | null = null;

  constructor(private readonly subject: StrictModeSubject) {}

  /** The configuration when strict mode is enabled, else null (nothing is checked). */
  private active(): StrictModeConfig | null {
    const c = this.subject.config();
    return c && c.enabled === true ? c : null;
  }

  private limiter(which: 'read' | 'write', perMinute: number | undefined): RateLimiter | null {
    const cur = which === 'read' ? this.readLimiter : this.writeLimiter;
    let next: RateLimiter | null = cur;
    if (perMinute === undefined) next = null;
    else if (cur === null || cur.perMinute !== perMinute) next = new RateLimiter(perMinute);
    if (which === 'read') this.readLimiter = next;
    else this.writeLimiter = next;
    return next;
  }

  timeout(seconds: number | null): void {
    const c = this.active();
    if (c && seconds !== null) checkLimit(seconds, c.max_timeout, 'timeout');
  }

  private filter(c: StrictModeConfig, f: Filter | null | undefined, allowUnindexed: boolean | undefined): void {
    if (!f) return;
    if (allowUnindexed === false) {
      const u = unindexedKey(f, this.subject.payloadSchema());
      if (u) throw refuse(`Index required but not found for "${u.key}" of one of the following types: [${u.types.join(', ')}]`, 'Create an index for this key or use a different filter.');
    }
    if (c.filter_max_conditions !== undefined) {
      const n = conditionsCount(f);
      if (n > c.filter_max_conditions) throw refuse(`Filter condition limit reached (${n} > ${c.filter_max_conditions})`, 'Reduce the amount of conditions of your filter.');
    }
    if (c.condition_max_size !== undefined) {
      const n = maxConditionSize(f);
      if (n > c.condition_max_size) throw refuse(`Condition size limit reached (${n} > ${c.condition_max_size})`, 'Reduce the size of your condition.');
    }
  }

  /** A read (query, search, recommend, scroll, count, retrieve): every limit before anything runs, then its rate cost. */
  read(r: ReadShape, timeoutSeconds: number | null): void {
    if (r.filter) this.subject.readFilter?.(r.filter);
    const c = this.active();
    if (!c) return;
    checkLimit(r.limit, c.max_query_limit, 'limit');
    this.filter(c, r.filter, c.unindexed_filtering_retrieve);
    if (c.search_allow_exact === false && r.exact === true) throw refuse('Exact search disabled!', 'Set exact=false.');
    checkLimit(r.oversampling, c.search_max_oversampling, 'oversampling');
    checkLimit(r.hnswEf, c.search_max_hnsw_ef, 'hnsw_ef');
    checkLimit(timeoutSeconds ?? undefined, c.max_timeout, 'timeout');
    this.limiter('read', c.read_rate_limit)?.consume(r.cost ?? 1 + (r.filter ? conditionsCount(r.filter) : 0), 'Read');
  }

  /**
   * The key of a grouped query: when unindexed filtering is refused, it needs an index
   * that answers `match` (keyword, integer with lookup, uuid, bool), as the reference asks.
   */
  groupBy(key: string): void {
    const c = this.active();
    if (!c || c.unindexed_filtering_retrieve !== false) return;
    const schema = this.subject.payloadSchema()[key];
    const help = 'Create an index supporting `match` for this key.';
    if (schema === undefined) throw refuse(`Index required but not found for "${key}"`, help);
    const match = schema.type === 'keyword' || schema.type === 'uuid' || schema.type === 'bool' || (schema.type === 'integer' && schema.params?.lookup !== false);
    if (!match) throw refuse(`Index of type "${schema.type[0].toUpperCase()}${schema.type.slice(1)}" found for "${key}"`, help);
  }

  /** A batch of searches or queries: its size. */
  searchBatch(size: number): void {
    const c = this.active();
    if (c) checkLimit(size, c.search_max_batchsize, 'search batch size');
  }

  private sizes(): { points: number; vectorBytes: number; payloadBytes: number } {
    const t = performance.now();
    // The reference keeps these as estimates refreshed now and then; a second is ours.
    if (this.sizeCache === null || t - this.sizeCache.at > 1000) this.sizeCache = { at: t, value: this.subject.sizes() };
    return this.sizeCache.value;
  }

  /** A write: batch size, vector counts per name, collection size limits, filters of selecting writes, then its rate cost. */
  write(op: ReplicaOperation, timeoutSeconds: number | null): void {
    const c = this.active();
    if (!c) return;
    checkLimit(timeoutSeconds ?? undefined, c.max_timeout, 'timeout');
    if (c.max_resident_memory_percent !== undefined && op.kind !== 'delete' && op.kind !== 'delete_payload' && op.kind !== 'clear_payload' && op.kind !== 'delete_vectors') {
      const m = (this.subject.memory ?? processMemory)();
      const used = Math.floor((m.rss * 100) / m.total);
      if (used >= c.max_resident_memory_percent) {
        throw refuse(
          `Resident memory usage is at ${used}% of total memory, exceeding the configured limit of ${c.max_resident_memory_percent}%`,
          'Reduce memory usage (e.g. delete points or drop collections), or raise `max_resident_memory_percent` in the strict mode config of this collection.',
        );
      }
    }
    if (op.kind === 'upsert' || op.kind === 'update_vectors') {
      checkLimit(op.points.length, c.upsert_max_batchsize, op.kind === 'upsert' ? 'upsert limit' : 'update limit');
      if (c.max_collection_vector_size_bytes !== undefined || c.max_collection_payload_size_bytes !== undefined || c.max_points_count !== undefined) {
        const s = this.sizes();
        if (c.max_collection_vector_size_bytes !== undefined && s.vectorBytes >= c.max_collection_vector_size_bytes) {
          throw new BadRequestError(`Max vector storage size limit of ${mb(c.max_collection_vector_size_bytes)}MB reached!`);
        }
        if (c.max_collection_payload_size_bytes !== undefined && s.payloadBytes >= c.max_collection_payload_size_bytes) {
          throw new BadRequestError(`Max payload storage size limit of ${mb(c.max_collection_payload_size_bytes)}MB reached!`);
        }
        if (c.max_points_count !== undefined && s.points >= c.max_points_count) throw new BadRequestError(`Max points count limit of ${c.max_points_count} reached!`);
      }
      this.limiter('write', c.write_rate_limit)?.consume(Math.max(1, op.points.length), 'Write');
      return;
    }
    this.filter(c, op.select.filter, c.unindexed_filtering_update);
    this.limiter('write', c.write_rate_limit)?.consume(Math.max(1, op.select.ids?.length ?? 1), 'Write');
  }

  /** A new payload index: the index count limit. */
  payloadIndex(field: string): void {
    const c = this.active();
    if (!c || c.max_payload_index_count === undefined) return;
    const schema = this.subject.payloadSchema();
    if (field in schema) return;
    if (Object.keys(schema).length >= c.max_payload_index_count) {
      throw refuse(`Collection already has the maximum number of payload indices (${c.max_payload_index_count})`, 'Please delete an existing index before creating a new one.');
    }
  }
}

/** Megabytes as the reference prints an f32 (no trailing ".0" for whole numbers). */
function mb(bytes: number): string {
  const f = Math.fround(bytes / (1024 * 1024));
  for (let p = 1; p < 10; p++) {
    const s = Number(f.toPrecision(p));
    if (Math.fround(s) === f) return String(s);
  }
  return String(f);
}
