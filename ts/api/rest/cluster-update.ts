/**
 * `POST /collections/{name}/cluster` (ClusterOperations of the reference): one operation
 * per request: `move_shard`, `replicate_shard`, `abort_transfer`, `restart_transfer`,
 * `drop_replica`, `create_sharding_key`, `drop_sharding_key`. Resharding and
 * `replicate_points` answer 501.
 *
 * Owns: the route; the body's parser and the call it makes are ts/api/request/cluster.ts
 * (shared with gRPC's UpdateCollectionClusterSetup). Must never: check the change against
 * the cluster (the dispatcher and the state machine do).
 */

import type { Context } from 'koa';

import type { Dispatcher } from '../../storage/dispatcher';
import { ok } from '../envelope';
import { body, param, readTimeout } from '../request/parse';
import { parseClusterChange, runClusterChange } from '../request/cluster';
import type { RouteTable } from './route';

export function addClusterUpdateRoute(routes: RouteTable, dispatcher: Dispatcher): void {
  routes.add('POST', '/collections/{collection_name}/cluster', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    ok(ctx, await runClusterChange(dispatcher, param(ctx, 'collection_name'), parseClusterChange(body(ctx)), timeout));
  });
}
