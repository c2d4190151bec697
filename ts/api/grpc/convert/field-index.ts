/**
 * `CreateFieldIndexCollection` (points.proto: `field_type` and `field_index_params`,
 * collections.proto: `PayloadIndexParams`) to the body of `PUT /collections/{name}/index`
 * (`{field_name, field_schema}`), which `createIndexBody` of ts/api/request parses for
 * both APIs.
 *
 * Owns: the mapping of field types and index parameters to REST's field schema. Must
 * never: validate a schema (the shared parser does).
 */

import { FormatError } from '../../../common/errors';
import { int64 } from './common';
import { put } from './points';

type Json = Record<string, unknown>;

/** `FieldType` names to REST's schema type names. */
const FIELD_TYPE: Record<string, string> = {
  FieldTypeKeyword: 'keyword',
  FieldTypeInteger: 'integer',
  FieldTypeFloat: 'float',
  FieldTypeGeo: 'geo',
  FieldTypeText: 'text',
  FieldTypeBool: 'bool',
  FieldTypeDatetime: 'datetime',
  FieldTypeUuid: 'uuid',
};

/** The member of the `index_params` oneof to the schema type it is for. */
const PARAMS_TYPE: Record<string, string> = {
  keyword_index_params: 'keyword',
  integer_index_params: 'integer',
  float_index_params: 'float',
  geo_index_params: 'geo',
  text_index_params: 'text',
  bool_index_params: 'bool',
  datetime_index_params: 'datetime',
  uuid_index_params: 'uuid',
};

const TOKENIZER: Record<string, string> = { Prefix: 'prefix', Whitespace: 'whitespace', Word: 'word', Multilingual: 'multilingual' };

interface TextParamsMsg {
  tokenizer?: string | number;
  lowercase?: boolean;
  min_token_len?: string | number;
  max_token_len?: string | number;
  on_disk?: boolean;
  stopwords?: { languages?: string[]; custom?: string[] };
  phrase_matching?: boolean;
  stemmer?: { stemming_params?: string; snowball?: { language?: string } };
  ascii_folding?: boolean;
  enable_hnsw?: boolean;
}

export interface PayloadIndexParamsMsg {
  index_params?: string;
  [member: string]: unknown;
}

export interface CreateFieldIndexMsg {
  field_name?: string;
  field_type?: string | number;
  field_index_params?: PayloadIndexParamsMsg;
}

function textParams(p: TextParamsMsg): Json {
  const out: Json = {};
  // `tokenizer` is not optional in the contract: Unknown (0) is what a client that did not choose one sends, and REST's default applies.
  if (p.tokenizer !== undefined && p.tokenizer !== 'Unknown' && p.tokenizer !== 0) out.tokenizer = TOKENIZER[String(p.tokenizer)] ?? String(p.tokenizer);
  put(out, 'lowercase', p.lowercase ?? undefined);
  if (p.min_token_len !== undefined && p.min_token_len !== null) out.min_token_len = int64(p.min_token_len);
  if (p.max_token_len !== undefined && p.max_token_len !== null) out.max_token_len = int64(p.max_token_len);
  put(out, 'on_disk', p.on_disk ?? undefined);
  if (p.stopwords !== undefined && p.stopwords !== null) out.stopwords = { languages: p.stopwords.languages ?? [], custom: p.stopwords.custom ?? [] };
  put(out, 'phrase_matching', p.phrase_matching ?? undefined);
  if (p.stemmer !== undefined && p.stemmer !== null) {
    if (p.stemmer.stemming_params === 'snowball') out.stemmer = { type: 'snowball', language: p.stemmer.snowball?.language ?? '' };
    else throw new FormatError('field_index_params.text_index_params.stemmer: a StemmingAlgorithm with no algorithm set');
  }
  put(out, 'ascii_folding', p.ascii_folding ?? undefined);
  put(out, 'enable_hnsw', p.enable_hnsw ?? undefined);
  return out;
}

/**
 * The REST `field_schema`: the type name for a bare `field_type`, the object form for
 * `field_index_params` (whose oneof member names the type; a `field_type` beside it must
 * name the same), absent when neither is set (the parser then asks for one).
 */
export function fieldSchemaToJson(r: CreateFieldIndexMsg): unknown {
  const typed = r.field_type === undefined || r.field_type === null ? undefined : FIELD_TYPE[String(r.field_type)];
  if (r.field_type !== undefined && r.field_type !== null && typed === undefined) {
    throw new FormatError(`field_type: unknown field type ${JSON.stringify(r.field_type)}`);
  }
  const p = r.field_index_params;
  if (p === undefined || p === null || p.index_params === undefined) return typed;
  const type = PARAMS_TYPE[p.index_params];
  if (type === undefined) throw new FormatError(`field_index_params: unknown index parameters \`${p.index_params}\``);
  if (typed !== undefined && typed !== type) {
    throw new FormatError(`field_index_params: \`${p.index_params}\` do not fit field_type \`${String(r.field_type)}\``);
  }
  const params = (p[p.index_params] ?? {}) as Json;
  if (type === 'text') return { type, ...textParams(params as TextParamsMsg) };
  const out: Json = { type };
  // The other kinds hold optional booleans only, under the REST names.
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && !k.startsWith('_')) out[k] = v;
  }
  return out;
}
