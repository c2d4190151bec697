/**
 * Field schemas of payload indexes: what `PUT /collections/{c}/index` accepts in
 * `field_schema` (`parseFieldSchema`), normalised as the reference echoes it in
 * `payload_schema`, and the form persisted (`fieldSchemaToJson`). The rules are in
 * payload-index.ts's header.
 *
 * Owns: the schema types and their parameters. Must never: hold index data.
 */



// ---------------------------------------------------------------------------------
// Field schemas

type PayloadSchemaType = 'keyword' | 'integer' | 'float' | 'geo' | 'text' | 'bool' | 'datetime' | 'uuid';

const PAYLOAD_SCHEMA_TYPES: readonly PayloadSchemaType[] = [
  'keyword',
  'integer',
  'float',
  'geo',
  'text',
  'bool',
  'datetime',
  'uuid',
];

export interface FieldSchema {
  readonly type: PayloadSchemaType;
  /** The object form, normalised (header comment); absent for the bare type name. */
  readonly params?: Readonly<Record<string, unknown>>;
}

/** `PayloadIndexInfo` of the reference: one entry of CollectionInfo.payload_schema. */
export interface PayloadIndexInfo {
  data_type: PayloadSchemaType;
  params?: Record<string, unknown>;
  points: number;
}

export class FieldSchemaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FieldSchemaError';
  }
}


const LANGUAGES: readonly (readonly [string, string])[] = [
  ['arabic', 'ar'],
  ['azerbaijani', 'az'],
  ['basque', 'eu'],
  ['bengali', 'bn'],
  ['catalan', 'ca'],
  ['chinese', 'zh'],
  ['danish', 'da'],
  ['dutch', 'nl'],
  ['english', 'en'],
  ['finnish', 'fi'],
  ['french', 'fr'],
  ['german', 'de'],
  ['greek', 'el'],
  ['hebrew', 'he'],
  ['hinglish', 'hi-en'],
  ['hungarian', 'hu'],
  ['indonesian', 'id'],
  ['italian', 'it'],
  ['japanese', 'jp'],
  ['kazakh', 'kk'],
  ['nepali', 'ne'],
  ['norwegian', 'no'],
  ['portuguese', 'pt'],
  ['romanian', 'ro'],
  ['russian', 'ru'],
  ['slovene', 'sl'],
  ['spanish', 'es'],
  ['swedish', 'sv'],
  ['tajik', 'tg'],
  ['turkish', 'tr'],
];
const SNOWBALL_LANGUAGES: readonly (readonly [string, string])[] = [
  ['arabic', 'ar'],
  ['armenian', 'hy'],
  ['danish', 'da'],
  ['dutch', 'nl'],
  ['english', 'en'],
  ['finnish', 'fi'],
  ['french', 'fr'],
  ['german', 'de'],
  ['greek', 'el'],
  ['hungarian', 'hu'],
  ['italian', 'it'],
  ['norwegian', 'no'],
  ['portuguese', 'pt'],
  ['romanian', 'ro'],
  ['russian', 'ru'],
  ['spanish', 'es'],
  ['swedish', 'sv'],
  ['tamil', 'ta'],
  ['turkish', 'tr'],
];
const TOKENIZERS = ['prefix', 'whitespace', 'word', 'multilingual'];
const MEMORY = ['cold', 'cached', 'pinned'];

type ParamKind = 'bool' | 'uint' | 'memory' | 'tokenizer' | 'stopwords' | 'stemmer';
/** [name, kind, serialized as null when absent] in the reference's struct field order. */
type ParamSpec = readonly [string, ParamKind, boolean?];

const COMMON_TAIL: readonly ParamSpec[] = [
  ['on_disk', 'bool'],
  ['memory', 'memory'],
  ['enable_hnsw', 'bool'],
];
const PARAM_SPECS: Record<PayloadSchemaType, readonly ParamSpec[]> = {
  keyword: [['is_tenant', 'bool'], ...COMMON_TAIL, ['prefix', 'bool']],
  integer: [['lookup', 'bool', true], ['range', 'bool', true], ['is_principal', 'bool', true], ...COMMON_TAIL],
  float: [['is_principal', 'bool', true], ...COMMON_TAIL],
  geo: [...COMMON_TAIL],
  text: [
    ['tokenizer', 'tokenizer'],
    ['min_token_len', 'uint'],
    ['max_token_len', 'uint'],
    ['lowercase', 'bool'],
    ['ascii_folding', 'bool'],
    ['phrase_matching', 'bool'],
    ['stopwords', 'stopwords'],
    ['on_disk', 'bool'],
    ['memory', 'memory'],
    ['stemmer', 'stemmer'],
    ['enable_hnsw', 'bool'],
  ],
  bool: [...COMMON_TAIL],
  datetime: [['is_principal', 'bool', true], ...COMMON_TAIL],
  uuid: [['is_tenant', 'bool'], ...COMMON_TAIL],
};

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'string') return `"${v}"`;
  return typeof v === 'object' ? 'an object' : `${typeof v} ${String(v)}`;
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function language(v: unknown, table: readonly (readonly [string, string])[], path: string): string {
  if (typeof v === 'string') {
    for (const [name, alias] of table) if (v === name || v === alias) return name;
  }
  throw new FieldSchemaError(`${path}: unknown language ${describe(v)} (expected one of: ${table.map((l) => l[0]).join(', ')})`);
}

function sortedUnique(xs: string[], order?: readonly (readonly [string, string])[]): string[] {
  const u = [...new Set(xs)];
  if (order) {
    const rank = new Map(order.map(([n], i) => [n, i]));
    return u.sort((a, b) => rank.get(a)! - rank.get(b)!);
  }
  // BTreeSet<String> order: by UTF-8 bytes
  return u.sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));
}

function parseParam(kind: ParamKind, v: unknown, path: string): unknown {
  switch (kind) {
    case 'bool':
      if (v === null || typeof v === 'boolean') return v;
      throw new FieldSchemaError(`${path}: expected a boolean or null, got ${describe(v)}`);
    case 'uint':
      if (v === null || (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0)) return v;
      throw new FieldSchemaError(`${path}: expected an unsigned integer or null, got ${describe(v)}`);
    case 'memory':
      if (v === null || (typeof v === 'string' && MEMORY.includes(v))) return v;
      throw new FieldSchemaError(`${path}: expected one of ${MEMORY.join(', ')} or null, got ${describe(v)}`);
    case 'tokenizer':
      if (typeof v === 'string' && TOKENIZERS.includes(v)) return v;
      throw new FieldSchemaError(`${path}: expected one of ${TOKENIZERS.join(', ')}, got ${describe(v)}`);
    case 'stopwords': {
      if (v === null || typeof v === 'string') return v === null ? null : language(v, LANGUAGES, path);
      if (!isPlainObject(v)) throw new FieldSchemaError(`${path}: expected a language or {languages, custom}, got ${describe(v)}`);
      const out: Record<string, unknown> = {};
      if (v.languages !== undefined && v.languages !== null) {
        if (!Array.isArray(v.languages)) {
          throw new FieldSchemaError(`${path}.languages: expected an array of languages, got ${describe(v.languages)}`);
        }
        out.languages = sortedUnique(
          v.languages.map((l, i) => language(l, LANGUAGES, `${path}.languages[${i}]`)),
          LANGUAGES,
        );
      }
      if (v.custom !== undefined && v.custom !== null) {
        if (!Array.isArray(v.custom)) throw new FieldSchemaError(`${path}.custom: expected an array of strings, got ${describe(v.custom)}`);
        v.custom.forEach((w, i) => {
          if (typeof w !== 'string') throw new FieldSchemaError(`${path}.custom[${i}]: expected a string, got ${describe(w)}`);
        });
        out.custom = sortedUnique(v.custom as string[]);
      }
      return out;
    }
    case 'stemmer': {
      if (v === null) return null;
      if (!isPlainObject(v)) throw new FieldSchemaError(`${path}: expected {type: "snowball", language} or {type: "none"}, got ${describe(v)}`);
      if (v.type === 'snowball') {
        if (v.language === undefined) throw new FieldSchemaError(`${path}.language: missing`);
        return { type: 'snowball', language: language(v.language, SNOWBALL_LANGUAGES, `${path}.language`) };
      }
      if (v.type === 'none') return { type: 'none' };
      throw new FieldSchemaError(`${path}.type: expected "snowball" or "none", got ${describe(v.type)}`);
    }
  }
}

function schemaType(v: unknown, path: string): PayloadSchemaType {
  if (typeof v === 'string' && (PAYLOAD_SCHEMA_TYPES as readonly string[]).includes(v)) return v as PayloadSchemaType;
  throw new FieldSchemaError(`${path}: unknown payload schema type ${describe(v)} (expected one of: ${PAYLOAD_SCHEMA_TYPES.join(', ')})`);
}

/**
 * Parses `field_schema` of a create-index request (header comment). null/undefined is
 * refused with the reference's message (it does not infer a type).
 */
export function parseFieldSchema(x: unknown): FieldSchema {
  if (x === undefined || x === null) {
    throw new FieldSchemaError("Can't auto-detect field type, please specify `field_schema` in the request");
  }
  if (typeof x === 'string') return { type: schemaType(x, 'field_schema') };
  if (!isPlainObject(x)) {
    throw new FieldSchemaError(`field_schema: expected a type name or an object with "type", got ${describe(x)}`);
  }
  if (x.type === undefined) throw new FieldSchemaError('field_schema.type: missing');
  const type = schemaType(x.type, 'field_schema.type');
  const params: Record<string, unknown> = { type };
  for (const [name, kind, nullWhenAbsent] of PARAM_SPECS[type]) {
    const v = x[name];
    if (v === undefined) {
      if (kind === 'tokenizer') params[name] = 'word';
      else if (nullWhenAbsent) params[name] = null;
      continue;
    }
    const p = parseParam(kind, v, `field_schema.${name}`);
    // Option<...> fields skipped when None: a null is dropped like an absent value
    if (p === null && !nullWhenAbsent) continue;
    params[name] = p;
  }
  if (type === 'integer' && params.lookup === false && params.range === false) {
    throw new FieldSchemaError("field_schema: the 'lookup' and 'range' capabilities can't be both disabled");
  }
  return { type, params };
}

/** The JSON to persist or echo: the type name, or the normalised params object. */
export function fieldSchemaToJson(s: FieldSchema): PayloadSchemaType | Record<string, unknown> {
  return s.params ? structuredClone(s.params as Record<string, unknown>) : s.type;
}

/** True when both schemas are the same (after normalisation). */
export function sameFieldSchema(a: FieldSchema, b: FieldSchema): boolean {
  return JSON.stringify(fieldSchemaToJson(a)) === JSON.stringify(fieldSchemaToJson(b));
}
