/**
 * Errors as answers of the public gRPC API: the code from the one table of error kinds
 * to gRPC status codes (ts/api/grpc-status.ts, shared with the peer-to-peer API).
 *
 * The message (`details`) is the text REST puts in `status.error`: the kind's prefix
 * and the detail ("Not found: Collection `x` doesn't exist!").
 *
 * Owns: the answer to anything unknown (INTERNAL with a
 * generic text; the error goes to the log). Must never: put a stack trace, a file path
 * or another internal detail of an unknown error into an answer.
 */

import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';

import { ERROR_PREFIX, QuiverError } from '../../common/errors';
import { grpcCodeOf } from '../grpc-status';

export { codeName, GRPC_STATUS, grpcCodeOf } from '../grpc-status';

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
