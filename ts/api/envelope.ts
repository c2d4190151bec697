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
  const text = JSON.stringify({ result, status: 'ok', time: elapsedSeconds(ctx) });
  ctx.status = 200;
  ctx.type = 'application/json';
  ctx.body = text;
}

/** 202 with `{"status": "accepted", "time": seconds}` (work continues after the answer). */
export function accepted(ctx: Context): void {
  ctx.status = 202;
  ctx.body = { status: 'accepted', time: elapsedSeconds(ctx) };
}
