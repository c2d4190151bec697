/**
 * The reference's undocumented cluster metadata routes: `GET /cluster/metadata/keys`
 * (the keys, sorted), `GET /cluster/metadata/keys/{key}` (its JSON value, null when it
 * has none), `PUT` of a JSON body as a key's value and `DELETE` of a key (both answer
 * `true`; `?wait=` is taken). Through consensus in a cluster, durable on a single node
 * (ts/storage/cluster-metadata.ts).
 *
 * Owns: those routes. Must never: keep the values itself.
 */

import type { Context } from 'koa';

import { FormatError } from '../../common/errors';
import type { Dispatcher } from '../../storage/dispatcher';
import { ok } from '../envelope';
import { param, queryBool, readTimeout } from '../request/parse';
import type { RouteTable } from './route';

export function addClusterMetadataRoutes(routes: RouteTable, dispatcher: Dispatcher): void {
  routes.add('GET', '/cluster/metadata/keys', (ctx: Context) => {
    ok(ctx, dispatcher.clusterMetadataKeys());
  });

  routes.add('GET', '/cluster/metadata/keys/{key}', (ctx: Context) => {
    ok(ctx, dispatcher.clusterMetadataValue(param(ctx, 'key')));
  });

  routes.add('PUT', '/cluster/metadata/keys/{key}', async (ctx: Context) => {
    queryBool(ctx, 'wait', false);
    const value: unknown = ctx.request.body;
    if (value === undefined) throw new FormatError('EOF while parsing a value at line 1 column 0');
    await dispatcher.setClusterMetadata(param(ctx, 'key'), value, readTimeout(ctx));
    ok(ctx, true);
  });

  routes.add('DELETE', '/cluster/metadata/keys/{key}', async (ctx: Context) => {
    queryBool(ctx, 'wait', false);
    await dispatcher.setClusterMetadata(param(ctx, 'key'), null, readTimeout(ctx));
    ok(ctx, true);
  });
}
