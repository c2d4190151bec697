/**
 * REST routes of points: writes (upsert, delete, payload and vector operations,
 * batch), reads (retrieve, get, scroll, count) and similarity (query, search,
 * recommend and their batch forms).
 *
 * Owns: the routes; the bodies are parsed by `ts/api/request/points.ts`, completely
 * before anything is written, so a bad request changes nothing. Must never: hold state or touch disk.
 */

import { lookupCollections } from '../guard';
import type { Context } from 'koa';

import type { ReplicaOperation } from '../../collection/collection';
import type { PointKey } from '../../shard/id-tracker';
import type { TableOfContent } from '../../storage/toc';
import { ok } from '../envelope';
import { NotFoundError } from '../../common/errors';
import { body, param, pointId, readParams, shardKeySelector, writeParams, type Obj, type RequestInput } from '../request/parse';
import type { RouteTable } from './route';
import { facetResponse, parseFacet } from '../request/facet';
import { matrixOffsets, matrixPairs, parseMatrix } from '../request/matrix';
import { groupsResult, parseQueryGroups, parseRecommendGroups, parseSearchGroups } from '../request/groups';
import { batchOf, batchOp, deletePayloadOp, deleteVectorsOp, keyed, parseCount, parseDiscover, parseQuery, parseRecommend, parseRetrieve, parseScroll, parseSearch, selector, setPayloadOp, updateVectorsOp, upsertOp } from '../request/points';

/** GET /points/{id}: digits are an integer id, anything else must be a UUID. */
function pathId(raw: string): PointKey {
  return pointId(/^[0-9]+$/.test(raw) ? Number(raw) : raw, 'id');
}

export function addPointRoutes(routes: RouteTable, toc: TableOfContent): void {
  const collection = (r: RequestInput) => toc.get(param(r, 'collection_name'));
  const writeRoute = (method: 'PUT' | 'POST', pattern: string, parse: (b: Obj) => ReplicaOperation, vectors = false) => {
    (vectors ? routes.addPointWrite : routes.add).call(routes, method, pattern, async (ctx: Context) => {
      const opts = writeParams(ctx);
      const c = collection(ctx);
      const b = body(ctx);
      const op = parse(b);
      ok(ctx, await c.update(op, opts, shardKeySelector(b.shard_key)));
    });
  };

  // Upserts and vector updates get their bodies' dense vectors as Float32Arrays (route.ts addPointWrite).
  writeRoute('PUT', '/collections/{collection_name}/points', upsertOp, true);
  writeRoute('POST', '/collections/{collection_name}/points/delete', (b) => ({ kind: 'delete', select: selector(b) }));
  writeRoute('POST', '/collections/{collection_name}/points/payload', (b) => setPayloadOp(b, false));
  writeRoute('PUT', '/collections/{collection_name}/points/payload', (b) => setPayloadOp(b, true));
  writeRoute('POST', '/collections/{collection_name}/points/payload/delete', (b) => deletePayloadOp(b));
  writeRoute('POST', '/collections/{collection_name}/points/payload/clear', (b) => ({ kind: 'clear_payload', select: selector(b) }));
  writeRoute('PUT', '/collections/{collection_name}/points/vectors', updateVectorsOp, true);
  writeRoute('POST', '/collections/{collection_name}/points/vectors/delete', (b) => deleteVectorsOp(b));

  routes.add('POST', '/collections/{collection_name}/points/batch', async (ctx: Context) => {
    const opts = writeParams(ctx);
    const c = collection(ctx);
    const ops = batchOf(body(ctx), 'operations').map((o, i) => batchOp(o, i));
    ok(ctx, await c.updateBatch(ops, opts));
  });

  routes.addDirect('POST', '/collections/{collection_name}/points', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    const { req, shards } = parseRetrieve(body(r));
    return c.retrieve(req.ids, req.withPayload, req.withVector, opts, shards);
  });

  routes.add('GET', '/collections/{collection_name}/points/{id}', async (ctx: Context) => {
    const opts = readParams(ctx);
    const c = collection(ctx);
    const raw = param(ctx, 'id');
    const id = pathId(raw);
    const [rec] = await c.retrieve([id], true, true, opts);
    if (!rec) throw new NotFoundError(`No point with id ${raw} found`);
    ok(ctx, rec);
  });

  routes.addDirect('POST', '/collections/{collection_name}/points/scroll', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    const { req, shards } = parseScroll(body(r));
    return 'ordered' in req ? c.scrollOrdered(req.ordered, opts, shards) : c.scroll(req.plain, opts, shards);
  });

  routes.addDirect('POST', '/collections/{collection_name}/points/count', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    const { req, shards } = parseCount(r.request.body === undefined ? {} : body(r));
    return { count: await c.count(req.filter, opts, shards, req.exact) };
  });

  routes.addDirect('POST', '/collections/{collection_name}/facet', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    const { req, shards } = parseFacet(body(r));
    return facetResponse(await c.facet(req, opts, shards));
  });

  for (const [route, answer] of [['pairs', matrixPairs], ['offsets', matrixOffsets]] as const) {
    routes.addDirect('POST', `/collections/{collection_name}/points/search/matrix/${route}`, async (r) => {
      const opts = readParams(r);
      const c = collection(r);
      const { req, shards } = parseMatrix(body(r));
      return answer(await c.searchMatrix(req, opts, shards));
    });
  }

  routes.addDirect('POST', '/collections/{collection_name}/points/query', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    const q = keyed(parseQuery)(body(r));
    return { points: await c.query(q.req, opts, q.shards, lookupCollections(toc, r.access)) };
  }, 'queries');

  routes.addDirect('POST', '/collections/{collection_name}/points/query/batch', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    const reqs = batchOf(body(r), 'searches').map(keyed(parseQuery));
    return (await c.queryBatch(reqs, opts, lookupCollections(toc, r.access))).map((points) => ({ points }));
  }, 'queries');

  routes.addDirect('POST', '/collections/{collection_name}/points/search', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    const q = keyed(parseSearch)(body(r));
    return c.query(q.req, opts, q.shards);
  }, 'queries');

  routes.addDirect('POST', '/collections/{collection_name}/points/search/batch', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    return c.queryBatch(batchOf(body(r), 'searches').map(keyed(parseSearch)), opts);
  }, 'queries');

  routes.addDirect('POST', '/collections/{collection_name}/points/recommend', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    const q = keyed(parseRecommend)(body(r));
    return c.query(q.req, opts, q.shards, lookupCollections(toc, r.access));
  });

  for (const [pattern, parse] of [
    ['/collections/{collection_name}/points/query/groups', parseQueryGroups],
    ['/collections/{collection_name}/points/search/groups', parseSearchGroups],
    ['/collections/{collection_name}/points/recommend/groups', parseRecommendGroups],
  ] as const) {
    routes.addDirect('POST', pattern, async (r) => {
      const opts = readParams(r);
      const c = collection(r);
      const q = parse(body(r));
      return groupsResult(await c.queryGroups(q.req, opts, q.shards, lookupCollections(toc, r.access)));
    });
  }

  routes.addDirect('POST', '/collections/{collection_name}/points/recommend/batch', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    return c.queryBatch(batchOf(body(r), 'searches').map(keyed(parseRecommend)), opts, lookupCollections(toc, r.access));
  });

  routes.addDirect('POST', '/collections/{collection_name}/points/discover', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    const q = keyed(parseDiscover)(body(r));
    return c.query(q.req, opts, q.shards, lookupCollections(toc, r.access));
  });

  routes.addDirect('POST', '/collections/{collection_name}/points/discover/batch', async (r) => {
    const opts = readParams(r);
    const c = collection(r);
    return c.queryBatch(batchOf(body(r), 'searches').map(keyed(parseDiscover)), opts, lookupCollections(toc, r.access));
  });
}
