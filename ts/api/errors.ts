/**
 * The one error catalogue of the REST API, and the middleware that turns errors into
 * the reference's error envelope.
 *
 * Owns: every error id with its HTTP status and message prefix (as the reference
 * server words them), and the mapping of anything unknown to a 500. Must never: put a
 * stack trace, a file path or any other internal detail of an unknown error into a
 * response body (those go to the log).
 *
 * Every error answer is `{"status":{"error":"<prefix><message>"},"time":<seconds>}`.
 */

import type { Context, Next } from 'koa';
import type { Logger } from 'pino';

import { elapsedSeconds } from './envelope';

/** Stable ids of the errors the API answers with. */
export type ApiErrorId =
  | 'bad_input'
  | 'already_exists'
  | 'not_found'
  | 'service_error'
  | 'bad_request'
  | 'standalone_mode'
  | 'forbidden'
  | 'timeout'
  | 'checksum_mismatch'
  | 'shard_unavailable'
  | 'validation'
  | 'format'
  | 'query_format'
  | 'payload_too_large'
  | 'not_implemented'
  | 'cluster_unavailable'
  | 'client_closed';

interface CatalogueEntry {
  status: number;
  prefix: string;
}

/** Status code and message prefix of each error, as the reference server answers them. */
export const ERROR_CATALOGUE: Readonly<Record<ApiErrorId, CatalogueEntry>> = {
  bad_input: { status: 400, prefix: 'Wrong input: ' },
  // The reference words "already exists" as wrong input, but answers 409.
  already_exists: { status: 409, prefix: 'Wrong input: ' },
  not_found: { status: 404, prefix: 'Not found: ' },
  service_error: { status: 500, prefix: 'Service internal error: ' },
  bad_request: { status: 400, prefix: 'Bad request: ' },
  // The whole message is fixed: see StandaloneModeError.
  standalone_mode: { status: 405, prefix: '' },
  forbidden: { status: 403, prefix: 'Forbidden: ' },
  timeout: { status: 408, prefix: 'Timeout: ' },
  // The message is "Checksum mismatch: expected X, actual Y": see ChecksumMismatchError.
  checksum_mismatch: { status: 400, prefix: 'Checksum mismatch: ' },
  shard_unavailable: { status: 503, prefix: 'Shard temporarily unavailable: ' },
  validation: { status: 422, prefix: 'Validation error in JSON body: ' },
  format: { status: 400, prefix: 'Format error in JSON body: ' },
  query_format: { status: 400, prefix: 'Deserialize error in query parameters: ' },
  // Ours: the reference's body limit answers 413 as well.
  payload_too_large: { status: 413, prefix: 'Payload too large: ' },
  // Ours: routes of the reference API that this version does not serve yet.
  not_implemented: { status: 501, prefix: 'Not implemented: ' },
  // Ours: a cluster peer that cannot take a metadata change now (no leader elected yet,
  // starting up, or its consensus stopped); the caller may retry.
  cluster_unavailable: { status: 503, prefix: 'Service unavailable: ' },
  // Ours (nginx's 499): the client went away before its request was read. Nobody reads
  // the answer; the status keeps these out of the 5xx counts and the error log.
  client_closed: { status: 499, prefix: 'Client closed request: ' },
};

/** An error the API answers with its catalogue status and `<prefix><detail>` as message. */
export class ApiError extends Error {
  readonly id: ApiErrorId;
  readonly status: number;
  /** The text after the prefix. */
  readonly detail: string;

  constructor(id: ApiErrorId, detail: string) {
    const entry = ERROR_CATALOGUE[id];
    super(entry.prefix + detail);
    this.name = 'ApiError';
    this.id = id;
    this.status = entry.status;
    this.detail = detail;
  }
}

export class BadInputError extends ApiError {
  constructor(detail: string) {
    super('bad_input', detail);
  }
}

export class AlreadyExistsError extends ApiError {
  constructor(detail: string) {
    super('already_exists', detail);
  }
}

export class NotFoundError extends ApiError {
  constructor(detail: string) {
    super('not_found', detail);
  }
}

export class ServiceError extends ApiError {
  constructor(detail: string) {
    super('service_error', detail);
  }
}

export class BadRequestError extends ApiError {
  constructor(detail: string) {
    super('bad_request', detail);
  }
}

export class StandaloneModeError extends ApiError {
  constructor() {
    super('standalone_mode', 'Quiver is running in standalone mode');
  }
}

export class ForbiddenError extends ApiError {
  constructor(detail: string) {
    super('forbidden', detail);
  }
}

export class TimeoutError extends ApiError {
  constructor(detail: string) {
    super('timeout', detail);
  }
}

export class ChecksumMismatchError extends ApiError {
  constructor(expected: string, actual: string) {
    super('checksum_mismatch', `expected ${expected}, actual ${actual}`);
  }
}

export class ShardUnavailableError extends ApiError {
  constructor(detail: string) {
    super('shard_unavailable', detail);
  }
}

export class ValidationError extends ApiError {
  constructor(detail: string) {
    super('validation', detail);
  }
}

export class FormatError extends ApiError {
  constructor(detail: string) {
    super('format', detail);
  }
}

export class QueryFormatError extends ApiError {
  constructor(detail: string) {
    super('query_format', detail);
  }
}

export class PayloadTooLargeError extends ApiError {
  constructor(detail: string) {
    super('payload_too_large', detail);
  }
}

export class ClusterUnavailableError extends ApiError {
  constructor(detail: string) {
    super('cluster_unavailable', detail);
  }
}

export class ClientClosedError extends ApiError {
  constructor(detail: string) {
    super('client_closed', detail);
  }
}

export class NotImplementedError extends ApiError {
  constructor(detail: string) {
    super('not_implemented', detail);
  }
}

/** An error opening recovered snapshot data: the snapshot's fault (400) unless it is the disk's or already an API error. */
export function snapshotLoadError(err: unknown): unknown {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (err instanceof ApiError || code === 'ENOSPC' || code === 'EDQUOT' || code === 'EIO') return err;
  return new BadInputError(`Invalid snapshot: its data does not load (${(err as Error)?.message ?? String(err)}); nothing was changed`);
}

/** Writes the error envelope with the given status. */
export function sendError(ctx: Context, status: number, message: string): void {
  ctx.status = status;
  ctx.body = { status: { error: message }, time: elapsedSeconds(ctx) };
}

/**
 * Koa middleware: an ApiError becomes its envelope and status; anything else becomes
 * 500 "Service internal error: ..." with a generic message, and is logged with its stack.
 */
export function errorMiddleware(logger: Logger) {
  return async function handleErrors(ctx: Context, next: Next): Promise<void> {
    try {
      await next();
    } catch (err) {
      const { status, message } = errorAnswer(err, logger, ctx.method, ctx.path);
      sendError(ctx, status, message);
    }
  };
}

/**
 * The status and message an error answers with: an ApiError's own; anything else is
 * logged with its stack and answers 500 with a generic message. The one mapping of
 * errors to answers (the Koa middleware and the direct lane both use it).
 */
export function errorAnswer(err: unknown, logger: Logger, method: string, path: string): { status: number; message: string } {
  if (err instanceof ApiError) return { status: err.status, message: err.message };
  logger.error({ err, method, path }, 'unhandled error while serving a request');
  return { status: 500, message: `${ERROR_CATALOGUE.service_error.prefix}unexpected error, see the server log` };
}
