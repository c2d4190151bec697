/**
 * Errors as gRPC answers: the one table from error kinds (ts/common/errors.ts, and the
 * kinds ts/api/errors.ts adds) to gRPC status codes, as the reference's public gRPC API
 * maps its storage errors (`tonic::Status` from `StorageError`).
 *
 * The message (`details`) is the text REST puts in `status.error`: the kind's prefix
 * and the detail ("Not found: Collection `x` doesn't exist!").
 *
 * Owns: the code of every kind, and the answer to anything unknown (INTERNAL with a
 * generic text; the error goes to the log). Must never: put a stack trace, a file path
 * or another internal detail of an unknown error into an answer.
 */

import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';

import { ERROR_PREFIX, QuiverError } from '../../common/errors';
import type { ApiErrorId } from '../errors';

/** The gRPC code of each kind: the one table. */
export const GRPC_STATUS: Readonly<Record<ApiErrorId, grpc.status>> = {
  bad_input: grpc.status.INVALID_ARGUMENT,
  already_exists: grpc.status.ALREADY_EXISTS,
  not_found: grpc.status.NOT_FOUND,
  service_error: grpc.status.INTERNAL,
  bad_request: grpc.status.INVALID_ARGUMENT,
  // A cluster operation on a single node: the system is not in the state it needs.
  standalone_mode: grpc.status.FAILED_PRECONDITION,
  forbidden: grpc.status.PERMISSION_DENIED,
  timeout: grpc.status.DEADLINE_EXCEEDED,
  // The reference answers a snapshot whose checksum does not match with DATA_LOSS.
  checksum_mismatch: grpc.status.DATA_LOSS,
  shard_unavailable: grpc.status.UNAVAILABLE,
  validation: grpc.status.INVALID_ARGUMENT,
  format: grpc.status.INVALID_ARGUMENT,
  query_format: grpc.status.INVALID_ARGUMENT,
  // gRPC's own answer to a message over the size limit.
  payload_too_large: grpc.status.RESOURCE_EXHAUSTED,
  not_implemented: grpc.status.UNIMPLEMENTED,
  cluster_unavailable: grpc.status.UNAVAILABLE,
  client_closed: grpc.status.CANCELLED,
};

/** The gRPC code of a known error (an unknown kind, which cannot happen, is INTERNAL). */
export function grpcCodeOf(err: QuiverError<string>): grpc.status {
  return GRPC_STATUS[err.kind as ApiErrorId] ?? grpc.status.INTERNAL;
}

/** The status name of a code, as metrics and logs label it (`NOT_FOUND`). */
export function codeName(code: grpc.status): string {
  return grpc.status[code] ?? String(code);
}

/**
 * The status an error answers with: a known error's kind decides the code and its
 * message is the text; anything else is logged with its stack and answers INTERNAL
 * with a generic message.
 */
export function grpcErrorAnswer(err: unknown, logger: Logger, path: string): { code: grpc.status; details: string } {
  if (err instanceof QuiverError) return { code: grpcCodeOf(err), details: err.message };
  logger.error({ err, path }, 'unhandled error while serving a gRPC call');
  return { code: grpc.status.INTERNAL, details: `${ERROR_PREFIX.service_error}unexpected error, see the server log` };
}
