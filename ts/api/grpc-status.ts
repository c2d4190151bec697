/**
 * Error kinds as gRPC status codes: the one table, for the public gRPC API (ts/api/grpc)
 * and the peer-to-peer one (ts/api/p2p), as the reference's public gRPC API maps its
 * storage errors (`tonic::Status` from `StorageError`).
 *
 * Owns: the code of every kind (ts/common/errors.ts, and the kinds ts/api/errors.ts
 * adds). Must never: build an answer (each API does, with its own message rules).
 */

import * as grpc from '@grpc/grpc-js';

import type { QuiverError } from '../common/errors';
import type { ApiErrorId } from './errors';

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
  rate_limited: grpc.status.RESOURCE_EXHAUSTED,
  write_unconfirmed: grpc.status.UNAVAILABLE,
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
