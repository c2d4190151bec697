/**
 * The error kinds of Quiver, free of any transport.
 *
 * Owns: each kind's stable id and the message prefix the reference words it with
 * ("Wrong input: ", "Not found: ", ...), which is part of the text whatever carries it.
 * Must never: know a status code or import a transport. `ts/api/errors.ts` maps kinds
 * to HTTP status in one table; the gRPC API maps them to gRPC codes in its own.
 *
 * Every layer throws these; a layer's own narrower errors (FilterError, PayloadError,
 * EngineError, ...) are turned into one of them where their meaning is known.
 */

/** Stable ids of the error kinds every layer may raise. */
export type ErrorKind =
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
  | 'not_implemented'
  | 'cluster_unavailable'
  | 'rate_limited'
  | 'write_unconfirmed';

/** Message prefix of each kind, as the reference server words them. */
export const ERROR_PREFIX: Readonly<Record<ErrorKind, string>> = {
  bad_input: 'Wrong input: ',
  // The reference words "already exists" as wrong input (its status differs: see api).
  already_exists: 'Wrong input: ',
  not_found: 'Not found: ',
  service_error: 'Service internal error: ',
  bad_request: 'Bad request: ',
  // The whole message is fixed: see StandaloneModeError.
  standalone_mode: '',
  forbidden: 'Forbidden: ',
  timeout: 'Timeout: ',
  // The message is "Checksum mismatch: expected X, actual Y": see ChecksumMismatchError.
  checksum_mismatch: 'Checksum mismatch: ',
  shard_unavailable: 'Shard temporarily unavailable: ',
  validation: 'Validation error in JSON body: ',
  format: 'Format error in JSON body: ',
  // Ours: parts of the reference API that this version does not serve yet.
  not_implemented: 'Not implemented: ',
  // Ours: a cluster peer that cannot take a metadata change now (no leader elected yet,
  // starting up, or its consensus stopped); the caller may retry.
  cluster_unavailable: 'Service unavailable: ',
  // A strict-mode rate limit of a collection (ts/collection/strict-mode.ts).
  rate_limited: 'Rate limiting exceeded: ',
  // Ours: a replica applied a write, but another replica that should hold it missed it
  // and could not be taken out of service (see WriteUnconfirmedError).
  write_unconfirmed: 'Write not confirmed: ',
};

/**
 * An error of a known kind: `message` is `<prefix><detail>`. `K` widens for the kinds an
 * API adds of its own (ts/api/errors.ts), which never appear below it.
 */
export class QuiverError<K extends string = ErrorKind> extends Error {
  readonly kind: K;
  /** The text after the prefix. */
  readonly detail: string;

  constructor(kind: K, prefix: string, detail: string) {
    super(prefix + detail);
    this.name = 'QuiverError';
    this.kind = kind;
    this.detail = detail;
  }
}

/** Base of the ground kinds: the prefix comes from ERROR_PREFIX. */
class KindError extends QuiverError<ErrorKind> {
  constructor(kind: ErrorKind, detail: string) {
    super(kind, ERROR_PREFIX[kind], detail);
  }
}

export class BadInputError extends KindError {
  constructor(detail: string) {
    super('bad_input', detail);
  }
}

export class AlreadyExistsError extends KindError {
  constructor(detail: string) {
    super('already_exists', detail);
  }
}

export class NotFoundError extends KindError {
  constructor(detail: string) {
    super('not_found', detail);
  }
}

export class ServiceError extends KindError {
  constructor(detail: string) {
    super('service_error', detail);
  }
}

export class BadRequestError extends KindError {
  constructor(detail: string) {
    super('bad_request', detail);
  }
}

export class StandaloneModeError extends KindError {
  constructor() {
    super('standalone_mode', 'Quiver is running in standalone mode');
  }
}

export class ForbiddenError extends KindError {
  constructor(detail: string) {
    super('forbidden', detail);
  }
}

export class TimeoutError extends KindError {
  constructor(detail: string) {
    super('timeout', detail);
  }
}

export class ChecksumMismatchError extends KindError {
  constructor(expected: string, actual: string) {
    super('checksum_mismatch', `expected ${expected}, actual ${actual}`);
  }
}

export class ShardUnavailableError extends KindError {
  constructor(detail: string) {
    super('shard_unavailable', detail);
  }
}

export class ValidationError extends KindError {
  constructor(detail: string) {
    super('validation', detail);
  }
}

export class FormatError extends KindError {
  constructor(detail: string) {
    super('format', detail);
  }
}

export class NotImplementedError extends KindError {
  constructor(detail: string) {
    super('not_implemented', detail);
  }
}

export class ClusterUnavailableError extends KindError {
  constructor(detail: string) {
    super('cluster_unavailable', detail);
  }
}

export class RateLimitedError extends KindError {
  /** Whole seconds after which the same request may pass; null when it never will (larger than the limit). */
  readonly retryAfter: number | null;

  constructor(detail: string, retryAfter: number | null) {
    super('rate_limited', detail);
    this.retryAfter = retryAfter;
  }
}

/**
 * A replica applied the write it was sent, but a replica it forwards writes to (the
 * target of a shard transfer it is the source of) missed it and could not be marked Dead
 * (consensus had no leader in time, or refused: the shard's last active replica). The
 * replica that raises it holds the write: it is not at fault, and must not be marked Dead
 * for it; the write must not be acknowledged as a success (see ReplicaSet.replicate).
 */
export class WriteUnconfirmedError extends KindError {
  constructor(detail: string) {
    super('write_unconfirmed', detail);
  }
}

/** A consensus proposal that failed because no leader took it (none elected, unreachable, or it changed): worth proposing again. */
export function leaderTrouble(err: unknown): boolean {
  return err instanceof ClusterUnavailableError || err instanceof TimeoutError;
}

/** Whether `err` is one of the kinds above (as opposed to an unexpected failure). */
export function isKnownError(err: unknown): err is QuiverError<string> {
  return err instanceof QuiverError;
}

/** An error opening recovered snapshot data: the snapshot's fault (bad input) unless it is the disk's or already a known kind. */
export function snapshotLoadError(err: unknown): unknown {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (err instanceof QuiverError || code === 'ENOSPC' || code === 'EDQUOT' || code === 'EIO') return err;
  return new BadInputError(`Invalid snapshot: its data does not load (${(err as Error)?.message ?? String(err)}); nothing was changed`);
}
