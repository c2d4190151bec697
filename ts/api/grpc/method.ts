/**
 * The shape of a gRPC method of the public API: what the server (server.ts) wraps and
 * what each service module (qdrant.ts, collections.ts, snapshots.ts, points.ts) writes.
 *
 * A handler translates the proto request (plain objects as @grpc/proto-loader makes
 * them: snake_case fields, 64-bit integers as decimal strings, enums by name, unset
 * fields absent, a virtual field per oneof naming the member set) into the JSON form of
 * the same REST request, runs the same parser (ts/api/request) and the same collection,
 * storage or dispatcher call as the REST route, and translates the result back. It sets
 * the `time` field of its response (seconds, a double) itself.
 *
 * Owns: the types. Must never: hold logic.
 */

import type { Access } from '../../auth/access';

export interface GrpcCallContext {
  /** What the caller may do (MANAGE when auth is off). */
  access: Access;
  /** Aborted when the client cancels or its deadline passes. */
  signal: AbortSignal;
  /** The client's deadline, as a timeout from now (null: none). */
  timeoutMs: number | null;
}

export interface GrpcMethod<Req = any, Res = any> {
  /** The REST operation whose access rule and audit entry apply: a 'METHOD /pattern' key of the table in ts/auth/policy.ts, e.g. 'PUT /collections/{collection_name}/points'. */
  access: string;
  /** Path parameters of that REST operation, taken from the request (e.g. { collection_name: req.collection_name }). */
  params?: (req: Req) => Record<string, string | undefined>;
  handle(req: Req, ctx: GrpcCallContext): Promise<Res>;
}

/** A service: RPC name as in the .proto (e.g. 'Upsert') to its method. An RPC not present answers UNIMPLEMENTED naming it. */
export type GrpcService = Record<string, GrpcMethod>;
