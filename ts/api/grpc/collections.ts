/**
 * `qdrant.Collections`: collections, aliases, cluster setup and shard keys over gRPC.
 * Each method turns its proto request into the JSON form of the same REST request,
 * runs the same parser (ts/api/request) and the same table-of-collections or
 * dispatcher call as the REST route, and turns the answer into the proto response.
 *
 * Owns: those translations. Must never: decide anything the REST route does not.
 */

import { canSee } from '../../auth/access';
import type { Dispatcher } from '../../storage/dispatcher';
import type { GrpcService } from './method';

/** Seconds since `started` (process.hrtime.bigint()), the `time` of a response. */
export function seconds(started: bigint): number {
  return Number(process.hrtime.bigint() - started) / 1e9;
}

export function collectionsService(dispatcher: Dispatcher): GrpcService {
  const toc = dispatcher.toc;
  return {
    List: {
      access: 'GET /collections',
      async handle(_req: object, ctx) {
        const started = process.hrtime.bigint();
        const collections = toc.names().filter((name) => canSee(ctx.access, name)).map((name) => ({ name }));
        return { collections, time: seconds(started) };
      },
    },
  };
}
