/**
 * A small HTTP client for the contract tests: every call names the operation by its
 * method and path pattern as the reference spec spells it, and every answer is checked
 * against that operation's response schema and the reference envelope before the test
 * looks at it.
 *
 *   const c = await ContractClient.start();
 *   const r = await c.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: 'a' } });
 *   const e = await c.error(t, 404, 'GET', '/collections/{collection_name}', { params: { collection_name: 'x' } });
 */

import type { ExecutionContext } from 'ava';

import { REPO_ROOT, startQuiver, type RunningQuiver } from '../api/helpers';
import { OpenApi } from './openapi';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export interface CallOptions {
  /** Values of the `{placeholders}` of the pattern (percent-encoded when sent). */
  params?: Record<string, string | number>;
  query?: Record<string, string | number | boolean>;
  /** Sent as JSON. */
  body?: unknown;
  /** Sent as it is (for malformed JSON); wins over `body`. */
  raw?: string;
}

export interface Reply {
  status: number;
  contentType: string;
  /** The parsed body (undefined when it was empty or not JSON). */
  body: any;
  text: string;
  /** `METHOD /real/path?query` as sent, for assertion messages. */
  request: string;
}

let specSingleton: OpenApi | null = null;

/** The reference spec, read once per test file. */
export function spec(): OpenApi {
  if (specSingleton === null) specSingleton = OpenApi.load(REPO_ROOT);
  return specSingleton;
}

export function fillPattern(pattern: string, params: Record<string, string | number> = {}): string {
  return pattern.replace(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => {
    if (!(name in params)) throw new Error(`no value for {${name}} of ${pattern}`);
    return encodeURIComponent(String(params[name]));
  });
}

/** Problems of the reference envelope: `{"result", "status": "ok", "time"}` or `{"status": {"error"}, "time"}`. */
export function envelopeProblems(status: number, body: unknown): string[] {
  const out: string[] = [];
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return ['$: the body is not a JSON object'];
  const b = body as Record<string, unknown>;
  if (typeof b.time !== 'number' || !Number.isFinite(b.time) || b.time < 0) out.push(`$.time: expected a non-negative number of seconds, got ${JSON.stringify(b.time)}`);
  if (status === 200) {
    if (b.status !== 'ok') out.push(`$.status: expected "ok", got ${JSON.stringify(b.status)}`);
    if (!('result' in b)) out.push('$.result: missing');
    for (const k of Object.keys(b)) if (!['result', 'status', 'time', 'usage'].includes(k)) out.push(`$.${k}: not part of the envelope`);
  } else if (status >= 400) {
    const s = b.status as Record<string, unknown> | undefined;
    if (typeof s !== 'object' || s === null || typeof s.error !== 'string') out.push(`$.status: expected {"error": "<message>"}, got ${JSON.stringify(b.status)}`);
    else if (Object.keys(s).length !== 1) out.push(`$.status: expected only "error", got keys ${Object.keys(s).join(', ')}`);
    if ('result' in b && b.result !== null) out.push(`$.result: an error carries no result, got ${JSON.stringify(b.result)}`);
  }
  return out;
}

export class ContractClient {
  constructor(
    readonly url: string,
    readonly openapi: OpenApi,
    readonly server: RunningQuiver | null = null,
  ) {}

  /** Starts a bin/quiver of its own (storage in a temporary folder). */
  static async start(env: Record<string, string> = {}): Promise<ContractClient> {
    const openapi = spec();
    const server = await startQuiver(env);
    return new ContractClient(server.url, openapi, server);
  }

  async stop(): Promise<void> {
    await this.server?.stop();
  }

  /** Sends one request and returns the answer, unchecked. */
  async send(method: Method, pattern: string, opts: CallOptions = {}): Promise<Reply> {
    let p = fillPattern(pattern, opts.params);
    if (opts.query) {
      const qs = new URLSearchParams(Object.entries(opts.query).map(([k, v]) => [k, String(v)]));
      p += `?${qs.toString()}`;
    }
    const headers: Record<string, string> = {};
    let payload: string | undefined;
    if (opts.raw !== undefined) payload = opts.raw;
    else if (opts.body !== undefined) payload = JSON.stringify(opts.body);
    if (payload !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(this.url + p, { method, headers, body: payload });
    const text = await res.text();
    let body: unknown;
    try {
      body = text.length === 0 ? undefined : JSON.parse(text);
    } catch {
      body = undefined;
    }
    return { status: res.status, contentType: res.headers.get('content-type') ?? '', body, text, request: `${method} ${p}` };
  }

  /**
   * Sends one request and checks the answer against the spec: a JSON body that matches
   * the schema documented for the operation and status, in the reference envelope.
   * Every problem is a failed assertion naming its JSON path.
   */
  async call(t: ExecutionContext, method: Method, pattern: string, opts: CallOptions = {}): Promise<Reply> {
    const r = await this.send(method, pattern, opts);
    const where = `${r.request} -> ${r.status}`;
    if (!/^application\/json\b/.test(r.contentType)) {
      t.fail(`${where}: content-type ${JSON.stringify(r.contentType)}, expected application/json; body ${r.text.slice(0, 200)}`);
      return r;
    }
    if (r.body === undefined) {
      t.fail(`${where}: the body is not JSON: ${r.text.slice(0, 200)}`);
      return r;
    }
    const problems = [...envelopeProblems(r.status, r.body), ...this.openapi.validate(method, pattern, r.status, r.body)];
    t.deepEqual(problems, [], `${where}: the body does not match the reference spec: ${JSON.stringify(r.body).slice(0, 400)}`);
    return r;
  }

  /** A call that must answer 200; returns `result`. */
  async ok(t: ExecutionContext, method: Method, pattern: string, opts: CallOptions = {}): Promise<any> {
    const r = await this.call(t, method, pattern, opts);
    t.is(r.status, 200, `${r.request}: expected 200, got ${r.status}: ${r.text.slice(0, 300)}`);
    return r.body?.result;
  }

  /**
   * A call that must answer with the error `status`; returns the error message. With
   * `message` (a string for an exact match, a RegExp otherwise) the message is checked.
   */
  async error(t: ExecutionContext, status: number, method: Method, pattern: string, opts: CallOptions = {}, message?: string | RegExp): Promise<string> {
    const r = await this.call(t, method, pattern, opts);
    t.is(r.status, status, `${r.request}: expected ${status}, got ${r.status}: ${r.text.slice(0, 300)}`);
    const msg: string = typeof r.body?.status?.error === 'string' ? r.body.status.error : '';
    if (typeof message === 'string') t.is(msg, message, `${r.request}: error message`);
    else if (message instanceof RegExp) t.regex(msg, message, `${r.request}: error message`);
    return msg;
  }
}
