/**
 * The reference's OpenAPI document (v1.18, the last one that still documents
 * `/points/search`, `/search/batch` and `/recommend*`) as a response validator for the
 * contract tests.
 *
 * The document is read at test time from `../shared/reference/` beside the repository
 * (it is not copied into the repo). Its OpenAPI 3.0 schemas are turned into JSON Schema
 * for ajv: `nullable: true` becomes a `null` type (a bare `{"nullable": true}`, which the
 * reference uses as the "or null" branch of an `anyOf`, becomes `{"type": "null"}`),
 * `#/components/schemas/X` references point into one registered document, and the
 * reference's number formats (uint64, uint, float, double, ...) are checked as numbers.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';

export const SPEC_VERSION = 'v1.18';

/** Where the reference's spec is, given the repository root. */
/**
 * Where the reference document is: $QUIVER_REFERENCE_DIR, else `../shared/reference`
 * beside the checkout, else the workplace's `/work/shared/reference` (a clone made
 * elsewhere, such as CI's clean clone, still finds it). The first candidate is
 * returned when none exists, so the error names the expected place.
 */
export function specPath(repoRoot: string): string {
  const name = `qdrant-openapi-${SPEC_VERSION}.json`;
  const dirs = [
    process.env.QUIVER_REFERENCE_DIR,
    path.resolve(repoRoot, '..', 'shared', 'reference'),
    '/work/shared/reference',
  ].filter((d): d is string => typeof d === 'string' && d !== '');
  const found = dirs.map((d) => path.join(d, name)).find((f) => fs.existsSync(f));
  return found ?? path.join(dirs[0], name);
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type JsonObj = { [k: string]: Json };

const DOC_ID = `qdrant-openapi-${SPEC_VERSION}`;
const REF_PREFIX = '#/components/schemas/';
/** Keys of OpenAPI schemas that JSON Schema does not know and that carry no constraint. */
const DROPPED = new Set(['example', 'deprecated', 'xml', 'externalDocs', 'discriminator', 'readOnly', 'writeOnly']);

function isObj(x: unknown): x is JsonObj {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/**
 * One OpenAPI 3.0 schema (and everything under it) as JSON Schema (draft-07 subset
 * ajv understands). `underProperties` says the object is a `properties` map, whose keys
 * are field names rather than keywords.
 */
export function toJsonSchema(x: Json, underProperties = false): Json {
  if (Array.isArray(x)) return x.map((v) => toJsonSchema(v));
  if (!isObj(x)) return x;
  if (underProperties) {
    const out: JsonObj = {};
    for (const [k, v] of Object.entries(x)) out[k] = toJsonSchema(v);
    return out;
  }
  const out: JsonObj = {};
  for (const [k, v] of Object.entries(x)) {
    if (DROPPED.has(k) || k === 'nullable') continue;
    if (k === '$ref' && typeof v === 'string') {
      if (!v.startsWith(REF_PREFIX)) throw new Error(`unexpected reference ${v} in the OpenAPI document`);
      out.$ref = `${DOC_ID}#/definitions/${v.slice(REF_PREFIX.length)}`;
      continue;
    }
    // Examples and defaults are data, not schemas.
    if (k === 'default' || k === 'enum') {
      out[k] = v;
      continue;
    }
    out[k] = toJsonSchema(v, k === 'properties');
  }
  if (x.nullable === true) {
    if (typeof out.type === 'string') {
      out.type = [out.type, 'null'];
      if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
    } else if (out.type === undefined) {
      const constraining = Object.keys(out).filter((k) => k !== 'description' && k !== 'default' && k !== 'title');
      if (constraining.length === 0) {
        // `{"nullable": true}` alone: the "or null" branch of an anyOf.
        out.type = 'null';
      } else {
        // Anything else that may also be null.
        const inner: JsonObj = { ...out };
        delete inner.description;
        delete inner.default;
        return { ...(out.description !== undefined ? { description: out.description } : {}), anyOf: [inner, { type: 'null' }] };
      }
    }
  }
  return out;
}

const UUID_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const DATE_TIME_RE = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})$/;
const PARTIAL_DATE_TIME_RE = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?$/;

function addFormats(ajv: Ajv): void {
  const unsigned = (max: number) => ({
    type: 'number' as const,
    validate: (n: number) => Number.isInteger(n) && n >= 0 && n <= max,
  });
  ajv.addFormat('uint', unsigned(2 ** 64 - 1));
  ajv.addFormat('uint64', unsigned(2 ** 64 - 1));
  ajv.addFormat('uint32', unsigned(2 ** 32 - 1));
  ajv.addFormat('uint8', unsigned(255));
  ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isInteger(n) });
  ajv.addFormat('float', { type: 'number', validate: (n: number) => Number.isFinite(n) });
  ajv.addFormat('double', { type: 'number', validate: (n: number) => Number.isFinite(n) });
  ajv.addFormat('uuid', UUID_RE);
  ajv.addFormat('date-time', DATE_TIME_RE);
  ajv.addFormat('partial-date-time', PARTIAL_DATE_TIME_RE);
  ajv.addFormat('uri', { type: 'string', validate: (s: string) => /^[A-Za-z][A-Za-z0-9+.-]*:/.test(s) });
  ajv.addFormat('binary', { type: 'string', validate: () => true });
}

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

interface Operation {
  responses: Record<string, { content?: Record<string, { schema?: Json }> }>;
}

/** The reference's OpenAPI document with compiled response validators. */
export class OpenApi {
  readonly doc: JsonObj;
  private readonly ajv: Ajv;
  private readonly compiled = new Map<string, ValidateFunction | null>();

  constructor(doc: JsonObj) {
    this.doc = doc;
    this.ajv = new Ajv({ allErrors: true, strict: false, validateFormats: true });
    addFormats(this.ajv);
    const components = doc.components as JsonObj;
    const schemas = components.schemas as JsonObj;
    const definitions: JsonObj = {};
    for (const [name, s] of Object.entries(schemas)) definitions[name] = toJsonSchema(s);
    this.ajv.addSchema({ $id: DOC_ID, definitions }, DOC_ID);
  }

  static load(repoRoot: string): OpenApi {
    const file = specPath(repoRoot);
    if (!fs.existsSync(file)) throw new Error(`the reference OpenAPI document is missing: ${file}`);
    return new OpenApi(JSON.parse(fs.readFileSync(file, 'utf8')) as JsonObj);
  }

  /** Every `METHOD /path` the document has. */
  operations(): string[] {
    const out: string[] = [];
    for (const [p, ops] of Object.entries(this.doc.paths as JsonObj)) {
      for (const [m, op] of Object.entries(ops as JsonObj)) if (isObj(op) && isObj(op.responses)) out.push(`${m.toUpperCase()} ${p}`);
    }
    return out;
  }

  operation(method: Method, pattern: string): Operation {
    const paths = this.doc.paths as JsonObj;
    const item = paths[pattern];
    if (!isObj(item)) throw new Error(`the ${SPEC_VERSION} spec has no path ${pattern}`);
    const op = item[method.toLowerCase()];
    if (!isObj(op)) throw new Error(`the ${SPEC_VERSION} spec has no ${method} ${pattern}`);
    return op as unknown as Operation;
  }

  /** The response key of the operation that documents `status`: the code, its class (`4XX`), or `default`. */
  responseKey(method: Method, pattern: string, status: number): string {
    const responses = this.operation(method, pattern).responses;
    const candidates = [String(status), `${Math.floor(status / 100)}XX`, 'default'];
    const key = candidates.find((k) => responses[k] !== undefined);
    if (key === undefined) throw new Error(`${method} ${pattern} documents no response for ${status}`);
    return key;
  }

  private validator(method: Method, pattern: string, key: string): ValidateFunction | null {
    const id = `${method} ${pattern} ${key}`;
    if (!this.compiled.has(id)) {
      const response = this.operation(method, pattern).responses[key];
      const schema = response.content?.['application/json']?.schema;
      this.compiled.set(id, schema === undefined ? null : this.ajv.compile(toJsonSchema(schema) as object));
    }
    return this.compiled.get(id)!;
  }

  /**
   * Validates a JSON response body against the schema the spec gives for this
   * operation and status. Returns one line per problem, each naming the JSON path of
   * the offending value (`$.result.points[0].id`); empty when the body conforms.
   */
  validate(method: Method, pattern: string, status: number, body: unknown): string[] {
    const key = this.responseKey(method, pattern, status);
    const validate = this.validator(method, pattern, key);
    if (validate === null) return [];
    if (validate(body)) return [];
    return formatErrors(validate.errors ?? [], body);
  }

  /**
   * Validates a value (a request body) against a named schema of the document's
   * components, e.g. `CreateCollection`. Returns one line per problem; empty when it conforms.
   */
  validateSchema(name: string, value: unknown): string[] {
    const id = `schema ${name}`;
    if (!this.compiled.has(id)) {
      const schemas = (this.doc.components as JsonObj).schemas as JsonObj;
      if (!isObj(schemas[name])) throw new Error(`the ${SPEC_VERSION} spec has no schema ${name}`);
      this.compiled.set(id, this.ajv.compile({ $ref: `${DOC_ID}#/definitions/${name}` }));
    }
    const validate = this.compiled.get(id)!;
    if (validate === null || validate(value)) return [];
    return formatErrors(validate.errors ?? [], value);
  }
}

/** `/result/points/0/id` -> `$.result.points[0].id`. */
export function jsonPath(instancePath: string): string {
  if (instancePath === '') return '$';
  return (
    '$' +
    instancePath
      .split('/')
      .slice(1)
      .map((seg) => seg.replace(/~1/g, '/').replace(/~0/g, '~'))
      .map((seg) => (/^[0-9]+$/.test(seg) ? `[${seg}]` : /^[A-Za-z_][A-Za-z0-9_]*$/.test(seg) ? `.${seg}` : `[${JSON.stringify(seg)}]`))
      .join('')
  );
}

function valueAt(body: unknown, instancePath: string): unknown {
  let cur = body;
  for (const seg of instancePath.split('/').slice(1)) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[seg.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return cur;
}

function short(x: unknown): string {
  const s = JSON.stringify(x);
  if (s === undefined) return 'undefined';
  return s.length > 120 ? `${s.slice(0, 117)}...` : s;
}

/**
 * ajv's errors as readable lines. The branches of a failed anyOf/oneOf are reported
 * under the anyOf line, so the reader sees why no branch matched.
 */
export function formatErrors(errors: ErrorObject[], body: unknown): string[] {
  return errors.map((e) => {
    const where = jsonPath(e.instancePath);
    const params = Object.keys(e.params).length > 0 ? ` ${short(e.params)}` : '';
    return `${where}: ${e.message ?? e.keyword}${params} (value ${short(valueAt(body, e.instancePath))}; schema ${e.schemaPath})`;
  });
}
