/**
 * The success envelope of the REST API and the request clock its `time` comes from.
 *
 * Owns: `{"result": ..., "status": "ok", "time": <seconds>}` and the 202
 * `{"status": "accepted", "time": ...}` answer. Must never: decide status codes for
 * errors (errors.ts does).
 */

import type { Context } from 'koa';

const STARTED_AT = Symbol('quiver.requestStartedAt');

type Timed = { [STARTED_AT]?: bigint };

/** Marks the start of a request; call before anything else handles it. */
export function markRequestStart(ctx: Context): void {
  (ctx as unknown as Timed)[STARTED_AT] = process.hrtime.bigint();
}

/** Seconds since markRequestStart (0 when it was never called). */
export function elapsedSeconds(ctx: Context): number {
  const start = (ctx as unknown as Timed)[STARTED_AT];
  if (start === undefined) return 0;
  return Number(process.hrtime.bigint() - start) / 1e9;
}

/** 200 with `{"result": result, "status": "ok", "time": seconds}`. */
export function ok(ctx: Context, result: unknown): void {
  // Encoded here rather than by Koa after the middleware returned: a result that does
  // not encode (over V8's string limit) then fails inside the request, and the error
  // envelope and the request log say 500, as the direct lane does.
  const text = okText(result, elapsedSeconds(ctx));
  ctx.status = 200;
  ctx.type = 'application/json';
  ctx.body = text;
}

/** 202 with `{"status": "accepted", "time": seconds}` (work continues after the answer). */
export function accepted(ctx: Context): void {
  ctx.status = 202;
  ctx.body = { status: 'accepted', time: elapsedSeconds(ctx) };
}

/**
 * The text of the 200 envelope, exactly as `JSON.stringify({ result, status: 'ok', time })`
 * writes it. The answer of a plain similarity query (points with an id, a version and a
 * score, nothing else) is written by hand: JSON.stringify took about 2.7 µs of the event
 * loop for ten such points and the hand-written text under 1 µs (bench/README.md, "What
 * bounds REST"). Anything else, or any value the hand-written path does not write the
 * same way (a number that is not finite, a key order or set it does not know), goes to
 * JSON.stringify. test/api/envelope.test.ts compares the two.
 */
export function okText(result: unknown, time: number): string {
  if (Number.isFinite(time)) {
    let points: string | null = null;
    if (Array.isArray(result)) {
      if (!hasToJson(result)) points = plainPoints(result);
      if (points !== null) return `{"result":${points},"status":"ok","time":${time}}`;
    } else if (result !== null && typeof result === 'object' && onlyKey(result, 'points') && !hasToJson(result)) {
      const list = (result as { points: unknown }).points;
      if (Array.isArray(list) && !hasToJson(list)) points = plainPoints(list);
      if (points !== null) return `{"result":{"points":${points}},"status":"ok","time":${time}}`;
    }
  }
  return JSON.stringify({ result, status: 'ok', time });
}

/** Whether JSON.stringify would call a toJSON of `o` (a class's method is not enumerable: for-in does not see it). */
function hasToJson(o: object): boolean {
  return typeof (o as { toJSON?: unknown }).toJSON === 'function';
}

const own = Object.prototype.hasOwnProperty;

/** Whether `o`'s only enumerable key is `key`, its own (JSON.stringify writes own keys only; for-in also lists inherited ones). */
function onlyKey(o: object, key: string): boolean {
  let n = 0;
  for (const k in o) {
    if (k !== key || ++n > 1 || !own.call(o, k)) return false;
  }
  return n === 1;
}

/** `[{"id":..,"version":..,"score":..},...]` for records with exactly those keys in that order, or null. */
function plainPoints(list: unknown[]): string | null {
  let s = '[';
  for (let i = 0; i < list.length; i++) {
    const p = list[i] as { id?: unknown; version?: unknown; score?: unknown } | null;
    if (p === null || typeof p !== 'object' || Array.isArray(p) || hasToJson(p)) return null;
    let at = 0;
    for (const k in p) {
      if (k !== (at === 0 ? 'id' : at === 1 ? 'version' : at === 2 ? 'score' : '') || !own.call(p, k)) return null;
      at++;
    }
    const { id, version, score } = p;
    if (at !== 3 || typeof version !== 'number' || typeof score !== 'number' || !Number.isFinite(version) || !Number.isFinite(score)) return null;
    let idText: string;
    if (typeof id === 'number' && Number.isFinite(id)) idText = `${id}`;
    else if (typeof id === 'string') idText = JSON.stringify(id);
    else return null;
    s += `${i === 0 ? '' : ','}{"id":${idText},"version":${version},"score":${score}}`;
  }
  return `${s}]`;
}
