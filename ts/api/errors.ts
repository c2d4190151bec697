/**
 * Errors as HTTP answers: the one table from error kinds (ts/common/errors.ts) to HTTP
 * status, the kinds only HTTP has, and the middleware that turns errors into the
 * reference's error envelope.
 *
 * Owns: the status of every kind, and the mapping of anything unknown to a 500. Must never: put a
 * stack trace, a file path or any other internal detail of an unknown error into a
 * response body (those go to the log).
 *
 * Every error answer is `{"status":{"error":"<prefix><message>"},"time":<seconds>}`.
 */

import type { Context, Next } from 'koa';
import type { Logger } from 'pino';

import { elapsedSeconds } from './envelope';

import { QuiverError, ERROR_PREFIX, RateLimitedError, type ErrorKind } from '../common/errors';

/** Kinds only HTTP has: a body or query string that cannot be read, a body over the limit, a client gone. */
export type HttpErrorKind = 'query_format' | 'payload_too_large' | 'client_closed';

/** Every kind an HTTP answer can carry. */
export type ApiErrorId = ErrorKind | HttpErrorKind;

/** The HTTP status of each kind, as the reference server answers them: the one table. */
export const HTTP_STATUS: Readonly<Record<ApiErrorId, number>> = {
  bad_input: 400,
  // The reference words "already exists" as wrong input, but answers 409.
  already_exists: 409,
  not_found: 404,
  service_error: 500,
  bad_request: 400,
  standalone_mode: 405,
  forbidden: 403,
  timeout: 408,
  checksum_mismatch: 400,
  shard_unavailable: 503,
  validation: 422,
  format: 400,
  query_format: 400,
  // Ours: the reference's body limit answers 413 as well.
  payload_too_large: 413,
  // Ours: parts of the reference API that this version does not serve yet.
  not_implemented: 501,
  cluster_unavailable: 503,
  rate_limited: 429,
  // Ours: as a write whose failed replicas could not be marked Dead (shard_unavailable);
  // a coordinator answers it as such, so it only reaches a client unwrapped by mistake.
  write_unconfirmed: 503,
  // Ours (nginx's 499): the client went away before its request was read. Nobody reads
  // the answer; the status keeps these out of the 5xx counts and the error log.
  client_closed: 499,
};

const HTTP_PREFIX: Readonly<Record<HttpErrorKind, string>> = {
  query_format: 'Deserialize error in query parameters: ',
  payload_too_large: 'Payload too large: ',
  client_closed: 'Client closed request: ',
};

class HttpError extends QuiverError<HttpErrorKind> {
  constructor(kind: HttpErrorKind, detail: string) {
    super(kind, HTTP_PREFIX[kind], detail);
  }
}

export class QueryFormatError extends HttpError {
  constructor(detail: string) {
    super('query_format', detail);
  }
}

export class PayloadTooLargeError extends HttpError {
  constructor(detail: string) {
    super('payload_too_large', detail);
  }
}

export class ClientClosedError extends HttpError {
  constructor(detail: string) {
    super('client_closed', detail);
  }
}

/** The HTTP status of a known error (an unknown kind, which cannot happen, is a 500). */
export function httpStatusOf(err: QuiverError<string>): number {
  return HTTP_STATUS[err.kind as ApiErrorId] ?? 500;
}

/** Writes the error envelope with the given status. */
export function sendError(ctx: Context, status: number, message: string): void {
  ctx.status = status;
  ctx.body = { status: { error: message }, time: elapsedSeconds(ctx) };
}

/**
 * Koa middleware: a known error (QuiverError) becomes its envelope and status; anything else becomes
 * 500 "Service internal error: ..." with a generic message, and is logged with its stack.
 */
export function errorMiddleware(logger: Logger) {
  return async function handleErrors(ctx: Context, next: Next): Promise<void> {
    try {
      await next();
    } catch (err) {
      const { status, message } = errorAnswer(err, logger, ctx.method, ctx.path);
      sendError(ctx, status, message);
      const retryAfter = retryAfterOf(err);
      if (retryAfter !== null) ctx.set('Retry-After', String(retryAfter));
    }
  };
}

/** Seconds of a rate limit's `Retry-After` header (the reference sends it with a 429 that a later retry can pass). */
export function retryAfterOf(err: unknown): number | null {
  return err instanceof RateLimitedError ? err.retryAfter : null;
}

/**
 * The status and message an error answers with: a known error's kind decides the status
 * (HTTP_STATUS) and its message is the text; anything else is
 * logged with its stack and answers 500 with a generic message. The one mapping of
 * errors to answers (the Koa middleware and the direct lane both use it).
 */
export function errorAnswer(err: unknown, logger: Logger, method: string, path: string): { status: number; message: string } {
  if (err instanceof QuiverError) return { status: httpStatusOf(err), message: err.message };
  logger.error({ err, method, path }, 'unhandled error while serving a request');
  return { status: 500, message: `${ERROR_PREFIX.service_error}unexpected error, see the server log` };
}
