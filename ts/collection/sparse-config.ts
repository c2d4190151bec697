/**
 * `sparse_vectors` of a collection: parsing the create and update forms (the
 * reference's SparseVectorParams: `index: {full_scan_threshold, on_disk, datatype}`,
 * `modifier: none | idf`) and the specs the shards' sparse indexes are built with.
 *
 * Owns: the fields accepted, their errors (naming the field), and what GET shows (the
 * params as given, without nulls). Must never: touch shards.
 */

import { FormatError, BadInputError, ValidationError } from '../common/errors';
import { DEFAULT_SPARSE_FULL_SCAN_THRESHOLD, type SparseDatatype, type SparseSpec } from '../shard/sparse-store';

export interface SparseIndexParams {
  full_scan_threshold?: number;
  on_disk?: boolean;
  datatype?: SparseDatatype;
}

export interface SparseVectorParams {
  index?: SparseIndexParams;
  modifier?: 'none' | 'idf';
}

type Obj = Record<string, unknown>;

function isObj(x: unknown): x is Obj {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function obj(x: unknown, field: string): Obj {
  if (!isObj(x)) throw new FormatError(`${field}: expected an object`);
  return x;
}

function known(o: Obj, allowed: readonly string[], field: string): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) throw new FormatError(`${field}: unknown field \`${k}\`, expected one of ${allowed.map((a) => `\`${a}\``).join(', ')}`);
  }
}

const DATATYPES: readonly SparseDatatype[] = ['float32', 'float16', 'uint8'];
const NAME_RE = /^[^\0/\\]{1,255}$/;
/** The engine counts in 32 bits. */
const MAX_THRESHOLD = 0xffff_ffff;

function parseIndex(x: unknown, field: string): SparseIndexParams {
  const o = obj(x, field);
  known(o, ['full_scan_threshold', 'on_disk', 'datatype'], field);
  const out: SparseIndexParams = {};
  const t = o.full_scan_threshold;
  if (t !== undefined && t !== null) {
    if (typeof t !== 'number' || !Number.isSafeInteger(t) || t < 0) throw new FormatError(`${field}.full_scan_threshold: expected an unsigned integer, got ${JSON.stringify(t)}`);
    if (t > MAX_THRESHOLD) throw new ValidationError(`${field}.full_scan_threshold: value ${t} invalid, must be ${MAX_THRESHOLD} or smaller`);
    out.full_scan_threshold = t;
  }
  if (o.on_disk !== undefined && o.on_disk !== null) {
    if (typeof o.on_disk !== 'boolean') throw new FormatError(`${field}.on_disk: expected a boolean, got ${JSON.stringify(o.on_disk)}`);
    // Sparse indexes are held in memory (and in checkpoints): an on-disk index is refused rather than ignored.
    if (o.on_disk) throw new BadInputError(`${field}.on_disk: true is not supported: Quiver keeps sparse indexes in memory; omit on_disk or set it to false`);
    out.on_disk = o.on_disk;
  }
  if (o.datatype !== undefined && o.datatype !== null) {
    if (!DATATYPES.includes(o.datatype as SparseDatatype)) {
      throw new FormatError(`${field}.datatype: unknown variant ${JSON.stringify(o.datatype)}, expected one of ${DATATYPES.map((d) => `\`${d}\``).join(', ')}`);
    }
    out.datatype = o.datatype as SparseDatatype;
  }
  return out;
}

function parseModifier(x: unknown, field: string): 'none' | 'idf' {
  if (x !== 'none' && x !== 'idf') throw new FormatError(`${field}: unknown variant ${JSON.stringify(x)}, expected one of \`none\`, \`idf\``);
  return x;
}

function parseParams(x: unknown, field: string): SparseVectorParams {
  const o = obj(x, field);
  known(o, ['index', 'modifier'], field);
  const out: SparseVectorParams = {};
  if (o.index !== undefined && o.index !== null) out.index = parseIndex(o.index, `${field}.index`);
  if (o.modifier !== undefined && o.modifier !== null) out.modifier = parseModifier(o.modifier, `${field}.modifier`);
  return out;
}

/**
 * The `sparse` part of a VectorNameConfig (the reference's SparseVectorConfig:
 * `modifier` and the index `datatype`) as the params of a new sparse vector.
 */
export function parseSparseVectorNameConfig(x: unknown, field: string): SparseVectorParams {
  const o = obj(x, field);
  known(o, ['modifier', 'datatype'], field);
  const out: SparseVectorParams = {};
  if (o.datatype !== undefined && o.datatype !== null) out.index = parseIndex({ datatype: o.datatype }, field);
  if (o.modifier !== undefined && o.modifier !== null) out.modifier = parseModifier(o.modifier, `${field}.modifier`);
  return out;
}

/** The `sparse_vectors` map of a create body. */
export function parseSparseVectors(x: unknown, field: string): Record<string, SparseVectorParams> {
  const o = obj(x, field);
  const out: Record<string, SparseVectorParams> = {};
  for (const [name, v] of Object.entries(o)) {
    if (!NAME_RE.test(name) || name === '.' || name === '..') throw new ValidationError(`${field}: invalid vector name ${JSON.stringify(name)}`);
    out[name] = parseParams(v, `${field}.${name}`);
  }
  return out;
}

/** An update body's `sparse_vectors` applied to a copy of `current`: only existing names, their given fields replaced. */
export function updateSparseVectors(current: Record<string, SparseVectorParams>, x: unknown, field: string): Record<string, SparseVectorParams> {
  const diff = parseSparseVectors(x, field);
  const out: Record<string, SparseVectorParams> = JSON.parse(JSON.stringify(current)) as Record<string, SparseVectorParams>;
  for (const [name, d] of Object.entries(diff)) {
    const cur = out[name];
    if (!cur) throw new BadInputError(`Not existing vector name error: ${name}`);
    if (d.index?.datatype !== undefined && d.index.datatype !== (cur.index?.datatype ?? 'float32')) {
      // Stored values would keep the old type's precision: the reference re-indexes, Quiver does not.
      throw new BadInputError(`${field}.${name}.index.datatype: changing the datatype of an existing sparse vector is not supported by Quiver; recreate the collection`);
    }
    if (d.index !== undefined) cur.index = { ...(cur.index ?? {}), ...d.index };
    if (d.modifier !== undefined) cur.modifier = d.modifier;
  }
  return out;
}

/** The specs of the sparse indexes of a collection with these params. */
export function sparseSpecs(sparse: Record<string, SparseVectorParams> | undefined): SparseSpec[] {
  return Object.entries(sparse ?? {}).map(([name, p]) => ({
    name,
    fullScanThreshold: p.index?.full_scan_threshold ?? DEFAULT_SPARSE_FULL_SCAN_THRESHOLD,
    idf: p.modifier === 'idf',
    datatype: p.index?.datatype ?? 'float32',
  }));
}
