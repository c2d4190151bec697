/**
 * REST routes of collections, aliases and payload indexes.
 *
 * Owns: the request and response shapes of `/collections`, `/collections/{name}`,
 * `/collections/{name}/exists`, `/collections/aliases`, `/aliases`,
 * `/collections/{name}/aliases`, `/collections/{name}/index`. Must never: touch disk
 * (TableOfContent does) or hold state.
 */

import type { Context } from 'koa';

import type { Collection } from '../../collection/collection';
import type { Config } from '../../config/types';
import type { Dispatcher } from '../../storage/dispatcher';
import type { AliasAction } from '../../storage/toc';
import { ok } from '../envelope';
import { FormatError } from '../../common/errors';
import { body, isObj, optionalBody, param, readTimeout, writeParams, type Obj } from '../request/parse';
import { createIndexBody } from '../request/payload-index';
import type { RouteTable } from './route';
import { accessOf } from './auth';
import { canSee } from '../../auth/access';

export function collectionInfo(c: Collection): Record<string, unknown> {
  const cfg = c.config;
  return {
    status: c.status(),
    optimizer_status: 'ok',
    indexed_vectors_count: c.indexedVectorsCount(),
    points_count: c.pointsCount(),
    segments_count: c.segmentsCount(),
    config: {
      params: cfg.params,
      hnsw_config: cfg.hnsw_config,
      optimizer_config: cfg.optimizer_config,
      wal_config: cfg.wal_config,
      quantization_config: cfg.quantization_config,
    },
    payload_schema: c.payloadSchemaInfo(),
  };
}

function aliasActions(b: Obj): AliasAction[] {
  if (!Array.isArray(b.actions)) throw new FormatError('missing field `actions`');
  return b.actions.map((a: unknown, i: number): AliasAction => {
    const where = `actions[${i}]`;
    if (!isObj(a) || Object.keys(a).length !== 1) throw new FormatError(`${where}: expected one of \`create_alias\`, \`delete_alias\`, \`rename_alias\``);
    const str = (o: unknown, k: string): string => {
      if (!isObj(o) || typeof o[k] !== 'string') throw new FormatError(`${where}: missing field \`${k}\``);
      return o[k] as string;
    };
    if ('create_alias' in a) return { create_alias: { collection_name: str(a.create_alias, 'collection_name'), alias_name: str(a.create_alias, 'alias_name') } };
    if ('delete_alias' in a) return { delete_alias: { alias_name: str(a.delete_alias, 'alias_name') } };
    if ('rename_alias' in a) {
      return { rename_alias: { old_alias_name: str(a.rename_alias, 'old_alias_name'), new_alias_name: str(a.rename_alias, 'new_alias_name') } };
    }
    throw new FormatError(`${where}: unknown variant \`${Object.keys(a)[0]}\`, expected one of \`create_alias\`, \`delete_alias\`, \`rename_alias\``);
  });
}

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
    await dispatcher.changeAliases(aliasActions(body(ctx)), timeout);
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
