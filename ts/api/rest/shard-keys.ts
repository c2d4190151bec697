/**
 * REST routes of shard keys (custom sharding): `GET /collections/{name}/shards` (list),
 * `PUT /collections/{name}/shards` (CreateShardingKey) and
 * `POST /collections/{name}/shards/delete` (DropShardingKey).
 *
 * Owns: their request and response shapes (ShardKeysResponse: the keys of a
 * custom-sharded collection, nothing for an auto-sharded one). Must never: decide
 * placement or apply a change (the dispatcher and the layers below do).
 */

import type { Context } from 'koa';

import type { Dispatcher } from '../../storage/dispatcher';
import { ok } from '../envelope';
import { body, param, readTimeout } from '../request/parse';
import { parseCreateShardKey, parseDropShardKey } from '../request/cluster';
import type { RouteTable } from './route';

export function addShardKeyRoutes(routes: RouteTable, dispatcher: Dispatcher): void {
  routes.add('GET', '/collections/{collection_name}/shards', (ctx: Context) => {
    const keys = dispatcher.toc.get(param(ctx, 'collection_name')).shardKeys();
    ok(ctx, keys === null ? {} : { shard_keys: keys.map((key) => ({ key })) });
  });

  routes.add('PUT', '/collections/{collection_name}/shards', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    const req = parseCreateShardKey(body(ctx));
    ok(ctx, await dispatcher.createShardKey(param(ctx, 'collection_name'), req, timeout));
  });

  routes.add('POST', '/collections/{collection_name}/shards/delete', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    ok(ctx, await dispatcher.dropShardKey(param(ctx, 'collection_name'), parseDropShardKey(body(ctx)), timeout));
  });
}
