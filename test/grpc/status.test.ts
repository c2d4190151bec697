/**
 * The one table from error kinds to gRPC status codes (ts/api/grpc/status.ts), over
 * every kind an answer can carry: the code the reference answers with, and the message
 * REST puts in `status.error`. An unknown error answers INTERNAL without its details.
 */

import * as grpc from '@grpc/grpc-js';
import test from 'ava';
import pino from 'pino';

import { ClientClosedError, HTTP_STATUS, PayloadTooLargeError, QueryFormatError, errorAnswer, type ApiErrorId } from '../../ts/api/errors';
import { GRPC_STATUS, grpcErrorAnswer } from '../../ts/api/grpc/status';
import {
  AlreadyExistsError,
  BadInputError,
  BadRequestError,
  ChecksumMismatchError,
  ClusterUnavailableError,
  RateLimitedError,
  FormatError,
  ForbiddenError,
  NotFoundError,
  NotImplementedError,
  ServiceError,
  ShardUnavailableError,
  StandaloneModeError,
  TimeoutError,
  ValidationError,
  WriteUnconfirmedError,
  type QuiverError,
} from '../../ts/common/errors';

const silent = pino({ level: 'silent' });

/** One error of every kind, with the code it must answer with. */
const CASES: Record<ApiErrorId, [QuiverError<string>, grpc.status]> = {
  bad_input: [new BadInputError('bad vector'), grpc.status.INVALID_ARGUMENT],
  already_exists: [new AlreadyExistsError('Collection `a` already exists!'), grpc.status.ALREADY_EXISTS],
  not_found: [new NotFoundError('Collection `a` doesn\'t exist!'), grpc.status.NOT_FOUND],
  service_error: [new ServiceError('disk gone'), grpc.status.INTERNAL],
  bad_request: [new BadRequestError('Distributed mode disabled'), grpc.status.INVALID_ARGUMENT],
  standalone_mode: [new StandaloneModeError(), grpc.status.FAILED_PRECONDITION],
  forbidden: [new ForbiddenError('Global manage access is required'), grpc.status.PERMISSION_DENIED],
  timeout: [new TimeoutError('operation took too long'), grpc.status.DEADLINE_EXCEEDED],
  checksum_mismatch: [new ChecksumMismatchError('aa', 'bb'), grpc.status.DATA_LOSS],
  shard_unavailable: [new ShardUnavailableError('no active replica'), grpc.status.UNAVAILABLE],
  validation: [new ValidationError('limit: value 0 invalid'), grpc.status.INVALID_ARGUMENT],
  format: [new FormatError('missing field `vectors`'), grpc.status.INVALID_ARGUMENT],
  query_format: [new QueryFormatError('timeout: invalid digit found in string'), grpc.status.INVALID_ARGUMENT],
  payload_too_large: [new PayloadTooLargeError('over 32 MB'), grpc.status.RESOURCE_EXHAUSTED],
  not_implemented: [new NotImplementedError('facets'), grpc.status.UNIMPLEMENTED],
  cluster_unavailable: [new ClusterUnavailableError('no leader yet'), grpc.status.UNAVAILABLE],
  rate_limited: [new RateLimitedError('Read rate limit exceeded', 3), grpc.status.RESOURCE_EXHAUSTED],
  client_closed: [new ClientClosedError('gone'), grpc.status.CANCELLED],
  write_unconfirmed: [new WriteUnconfirmedError('the target of a transfer missed the write'), grpc.status.UNAVAILABLE],
};

test('every kind REST knows has a gRPC code, and only those', (t) => {
  t.deepEqual(Object.keys(GRPC_STATUS).sort(), Object.keys(HTTP_STATUS).sort());
  t.deepEqual(Object.keys(CASES).sort(), Object.keys(HTTP_STATUS).sort());
});

for (const [kind, [err, code]] of Object.entries(CASES)) {
  test(`${kind} answers ${grpc.status[code]} with the message REST answers`, (t) => {
    t.is(err.kind, kind);
    const answer = grpcErrorAnswer(err, silent, '/qdrant.Collections/Get');
    t.is(answer.code, code);
    t.is(answer.details, err.message);
    t.is(answer.details, errorAnswer(err, silent, 'GET', '/').message);
  });
}

test('an unknown error answers INTERNAL with a generic message, never its own text', (t) => {
  const answer = grpcErrorAnswer(new Error('/secret/path exploded'), silent, '/qdrant.Collections/Get');
  t.is(answer.code, grpc.status.INTERNAL);
  t.is(answer.details, 'Service internal error: unexpected error, see the server log');
});
