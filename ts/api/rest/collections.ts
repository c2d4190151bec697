/**
 * REST routes of collections, aliases and payload indexes.
 *
 * Owns: the request and response shapes of `/collections`, `/collections/{name}`,
 * `/collections/{name}/exists`, `/collections/aliases`, `/aliases`,
 * `/collections/{name}/aliases`, `/collections/{name}/index`. Must never: touch disk
 * (TableOfContent does) or hold state.
 */

import type { Context } from 'koa';

import type { Config } from '../../config/types';
import type { Dispatcher } from '../../storage/dispatcher';
import { ok } from '../envelope';
import { body, optionalBody, param, readTimeout, writeParams } from '../request/parse';
import { collectionInfo, parseAliasActions } from '../request/collections';
import { createIndexBody } from '../request/payload-index';
import { parseVectorNameConfig } from '../../collection/config';
import type { RouteTable } from './route';
import { accessOf } from './auth';
import { canSee } from '../../auth/access';

export function addCollectionRoutes(routes: RouteTable, dispatcher: Dispatcher): void {
  const toc = dispatcher.toc;
  routes.add('GET', '/collections', (ctx: Context) => {
    const access = accessOf(ctx);
    ok(ctx, { collections: toc.names().filter((name) => canSee(access, name)).map((name) => ({ name })) });
  });

  routes.add('GET', '/collections/{collection_name}', (ctx: Context) => {
    ok(ctx, collectionInfo(toc.get(param(ctx, 'collection_name'))));
  });

  routes.add('GET', '/collections/{collection_name}/exists', (ctx: Context) => {
    ok(ctx, { exists: toc.has(param(ctx, 'collection_name')) });
  });

  routes.add('PUT', '/collections/{collection_name}', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    ok(ctx, await dispatcher.createCollection(param(ctx, 'collection_name'), optionalBody(ctx), timeout));
  });

  routes.add('PATCH', '/collections/{collection_name}', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    await dispatcher.updateCollection(param(ctx, 'collection_name'), optionalBody(ctx), timeout);
    ok(ctx, true);
  });

  routes.add('DELETE', '/collections/{collection_name}', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    ok(ctx, await dispatcher.deleteCollection(param(ctx, 'collection_name'), timeout));
  });

  // -- aliases --------------------------------------------------------------------------
  routes.add('POST', '/collections/aliases', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    await dispatcher.changeAliases(parseAliasActions(body(ctx)), timeout);
    ok(ctx, true);
  });

  routes.add('GET', '/aliases', (ctx: Context) => {
    const access = accessOf(ctx);
    ok(ctx, { aliases: toc.listAliases().filter((a) => canSee(access, a.collection_name)) });
  });

  routes.add('GET', '/collections/{collection_name}/aliases', (ctx: Context) => {
    const c = toc.get(param(ctx, 'collection_name'));
    ok(ctx, { aliases: toc.listAliases(c.name) });
  });

  // -- named vectors -----------------------------------------------------------------------
  routes.add('PUT', '/collections/{collection_name}/vectors/{vector_name}', async (ctx: Context) => {
    const { wait } = writeParams(ctx);
    const params = parseVectorNameConfig(body(ctx));
    await dispatcher.createVectorName(param(ctx, 'collection_name'), param(ctx, 'vector_name'), params, readTimeout(ctx));
    ok(ctx, { operation_id: null, status: wait ? 'completed' : 'acknowledged' });
  });

  routes.add('DELETE', '/collections/{collection_name}/vectors/{vector_name}', async (ctx: Context) => {
    const { wait } = writeParams(ctx);
    await dispatcher.deleteVectorName(param(ctx, 'collection_name'), param(ctx, 'vector_name'), readTimeout(ctx));
    ok(ctx, { operation_id: null, status: wait ? 'completed' : 'acknowledged' });
  });

  // -- payload indexes ----------------------------------------------------------------------
  routes.add('PUT', '/collections/{collection_name}/index', async (ctx: Context) => {
    const { wait } = writeParams(ctx);
    const { field, schema } = createIndexBody(body(ctx));
    await dispatcher.createPayloadIndex(param(ctx, 'collection_name'), field, schema, readTimeout(ctx));
    ok(ctx, { operation_id: null, status: wait ? 'completed' : 'acknowledged' });
  });

  routes.add('DELETE', '/collections/{collection_name}/index/{field_name}', async (ctx: Context) => {
    const { wait } = writeParams(ctx);
    await dispatcher.dropPayloadIndex(param(ctx, 'collection_name'), param(ctx, 'field_name'), readTimeout(ctx));
    ok(ctx, { operation_id: null, status: wait ? 'completed' : 'acknowledged' });
  });
}
