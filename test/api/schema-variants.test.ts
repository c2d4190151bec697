/**
 * Every request body the v1.18 document allows parses: for each operation of the
 * reference's OpenAPI document that takes a JSON body, `test/support/body-variants.ts`
 * generates one valid body per variant of its schema (every anyOf/oneOf branch, every
 * optional property present and null, both booleans, every enum value), with values that
 * fit the data prepared here (vector sizes and names, existing ids, shard keys, an
 * integer-indexed payload key `a`, real snapshot URLs). Each is sent to a real server.
 *
 * A body passes when some prepared collection answers 2xx (a vector shape fits one
 * collection and not another: unnamed, multivector, named). It fails when every answer
 * is a refusal: a parse refusal (400 "Format error in JSON body", an unknown field or
 * variant), a 5xx, a 501, or a 4xx of any other kind — unless the body matches one of
 * the lists below, each entry with its reason:
 *  - UNSUPPORTED: features the README lists as not supported (a clear 400 of their own);
 *  - PENDING: features other helpers are building right now (remove each entry when it
 *    merges: the body must then be accepted);
 *  - SEMANTIC: valid documents that no data can satisfy (the reference refuses them too).
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { BodyGenerator, type Semantic, type Variant } from '../support/body-variants';
import { ContractClient, spec, type Method, type Reply } from '../support/contract';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Obj = { [k: string]: Json };

const V = [0.1, 0.2, 0.3, 0.4];
const MV = [V, [0.4, 0.3, 0.2, 0.1]];
const SV = { indices: [1, 7], values: [0.5, 0.25] };
/** The generator's default UUID and integer: the ids of two prepared points. */
const UUID = '5b7f5b4e-3c0d-4f7c-9b55-0f5f1e2f3a4b';
const DOC = { text: 'a', model: 'm' };
const IMAGE = { image: 'https://example.invalid/x.png', model: 'm' };
const OBJECT = { object: 'x', model: 'm' };

// ---------------------------------------------------------------------------------
// What a refused body may be, and why.

interface Allowed {
  /** `METHOD /pattern` of the operation, as a RegExp over it. */
  op?: RegExp;
  /** The variant's label or the body's JSON. */
  where: RegExp;
  /** The status and error message every refusal of the body must match. */
  message: RegExp;
  reason: string;
}

const INFERENCE = /"(text|image|object)":"[^"]*","model"/;

/** The README's "Not supported, each answered with a clear 400". */
const UNSUPPORTED: Allowed[] = [
  { where: INFERENCE, message: /^400 .*(inference|Document|Image|InferenceObject|not supported)/i, reason: 'inference documents (README: not supported)' },
  { where: /"product":\{/, message: /^400 .*product quantization/i, reason: 'product quantization (README: not supported)' },
  { where: /"indexed_only":true/, message: /^400 .*indexed_only/, reason: 'params.indexed_only: true (README: not supported)' },
  { where: /"acorn":\{"enable":true/, message: /^400 .*ACORN/, reason: 'params.acorn.enable: true (README: not supported)' },
  { where: /"inline_storage":true/, message: /^400 .*inline_storage/, reason: 'hnsw_config.inline_storage: true (README: not supported)' },
  { where: /"prevent_unoptimized":true/, message: /^400 .*prevent_unoptimized/, reason: 'optimizers_config.prevent_unoptimized: true (README: not supported)' },
  { where: /"wal_retain_closed"/, message: /^400 .*wal_retain_closed/, reason: 'wal_config.wal_retain_closed (README: Quiver keeps WAL history by its own rule)' },
  { where: /"initial_state":"Partial"/, message: /^400 .*Partial/, reason: 'initial_state: Partial of a new shard key (README: not supported)' },
  { where: /"turbo":\{/, message: /^400 .*turbo quantization is not supported/, reason: 'turbo quantization (README: not supported)' },
  { where: /"(query_)?encoding":/, message: /^400 .*only the default (one-bit|query) encoding is supported/, reason: 'binary quantization encodings other than the default (README: not supported)' },
  { where: /"datatype":/, message: /^400 .*changing the datatype of an existing sparse vector is not supported/, reason: 'changing a sparse vector\'s datatype (README: not supported)' },
  { op: /^PUT \/collections\/\{collection_name\}\/points\/payload$/, where: /"key":/, message: /^400 .*overwrite payload does not take a `key`/, reason: 'overwrite payload with a key (README: not supported)' },
  { where: /"relevance_feedback":/, message: /^400 .*`relevance_feedback` queries are not supported/, reason: 'relevance_feedback queries (README: not supported; no helper builds them)' },
  { where: /"discover":\{|"context":|"strategy":"(best_score|sum_scores)"/, message: /^400 .*queries over the multivector .* are not supported by Quiver/, reason: 'discover / context queries and the best_score / sum_scores strategies over multivectors (README: not supported)' },
  { op: /^PUT \/collections\/\{collection_name\}\/index$/, where: /"enable_hnsw":true/, message: /^400 .*enable_hnsw: true is not supported/, reason: 'payload-aware HNSW links for an indexed field (README: not supported)' },
  { where: /"payload_m":[1-9]/, message: /^400 .*payload_m: \d+ is not supported/, reason: 'hnsw_config.payload_m above 0: payload-aware HNSW links (README: not supported)' },
  { op: /^(PUT|PATCH) \/collections\/\{collection_name\}$/, where: /"on_disk":true/, message: /^400 .*on_disk: true (is not supported: Quiver keeps sparse indexes in memory|needs quantization in Quiver|is not supported for multivectors)/, reason: 'sparse indexes on disk, dense vectors on disk without quantization, and multivector graphs on disk (README: not supported)' },
  { op: /^(PUT|PATCH) \/collections\/\{collection_name\}$/, where: /"memmap_threshold":[1-9]/, message: /^400 .*memmap_threshold: [0-9]+ needs quantization in Quiver/, reason: 'memmap_threshold on a vector without quantization (docs/settings.md)' },
  { op: /^POST \/collections\/\{collection_name\}\/cluster$/, where: /resharding|replicate_points/, message: /^501 .*resharding/, reason: 'resharding operations, replicate_points among them (README: 501)' },
];

/**
 * Features other helpers of this session are building now (groups; discovery and
 * context; the distance matrix; formula, sample and mmr queries; the best_score and
 * sum_scores strategies). Until each merges its bodies answer 501 (routes) or a 400
 * naming the feature; remove the entry when it lands, and the body must parse.
 */
const PENDING: Allowed[] = [];

/** Bodies the document allows that no data satisfies, with the refusal and why. */
const SEMANTIC: Allowed[] = [
  {
    where: /"geo_distance":\{[^}]*\},"to":"a"|"datetime_key":"a"/,
    message: /^400 Wrong input: Expected a (geo point|datetime) in the variable "a" of the formula, but the value 0 is not/,
    reason: 'the prepared payload key `a` holds integers, not geo points or datetimes; the reference refuses the type too',
  },
  {
    where: /"datetime":"a"/,
    message: /^400 Wrong input: .*"a" is not a valid datetime/,
    reason: 'the generator\'s string is not a datetime; the reference refuses it as well',
  },
  {
    op: /\/cluster$|\/shards$/,
    where: /"initial_state":"(?!Active"|Partial")/,
    message: /^400 Bad request: Initial state cannot be \w+, only Active or Partial are allowed/,
    reason: 'a new shard key starts Active or Partial; the reference refuses the other states with this text',
  },
  {
    where: /"positive":null|"recommend":\{"negative"/,
    message: /^400 Wrong input: At least one positive vector ID required/,
    reason: 'average_vector needs a positive example (the reference\'s text)',
  },
  {
    op: /\/index$/,
    where: /^(|field_schema=null) /,
    message: /^400 Wrong input: Can't auto-detect field type, please specify `field_schema` in the request/,
    reason: 'an index without field_schema on a field without values to infer it from (the reference\'s text)',
  },
  {
    op: /^POST \/collections\/\{collection_name\}\/cluster$/,
    where: /move_shard|replicate_shard|abort_transfer|restart_transfer|drop_replica/,
    message: /^400 Bad request: Distributed mode disabled$/,
    reason: 'replica operations need cluster mode; the test runs one node (the reference answers the same)',
  },
];

// ---------------------------------------------------------------------------------
// The data

/** Writes run in this many lanes, each on its own copies of the collections. */
const WRITE_LANES = 4;

/** Collections every read is tried on, in order: unnamed dense, named, unnamed multivector. */
const READ_TARGETS = ['u', 'c', 'm'];

interface CollectionSetup {
  create: Obj;
  vector: (i: number) => Json;
  shardKey?: Json;
}

const PAYLOAD = (i: number): Obj => ({ a: i, kw: 'a', geo: { lat: 0.5, lon: 0.5 }, txt: 'a b', flag: true, dt: '2024-01-02T03:04:05Z' });
const vec = (i: number) => V.map((x) => x + i / 100);
const SETUPS: Record<string, CollectionSetup> = {
  u: { create: { vectors: { size: 4, distance: 'Cosine' }, sparse_vectors: { sparse: {} } }, vector: (i) => ({ '': vec(i), sparse: SV }) },
  m: {
    create: { vectors: { size: 4, distance: 'Cosine', multivector_config: { comparator: 'max_sim' } }, sparse_vectors: { sparse: {} } },
    vector: (i) => ({ '': [vec(i), V], sparse: SV }),
  },
  c: {
    create: {
      vectors: { dense: { size: 4, distance: 'Cosine' }, multi: { size: 4, distance: 'Cosine', multivector_config: { comparator: 'max_sim' } } },
      sparse_vectors: { sparse: {} },
    },
    vector: (i) => ({ dense: vec(i), multi: [vec(i), V], sparse: SV }),
  },
  k: {
    create: { vectors: { size: 4, distance: 'Cosine' }, sparse_vectors: { sparse: {} }, sharding_method: 'custom' },
    vector: (i) => ({ '': vec(i), sparse: SV }),
    shardKey: 'a',
  },
};
const IDS: Json[] = [1, 2, 3, 4, 5, UUID];

function pointsOf(name: string): Obj[] {
  const s = SETUPS[name];
  return IDS.map((id, i) => ({ id, vector: s.vector(i), payload: PAYLOAD(i) }));
}

// ---------------------------------------------------------------------------------
// The operations

interface Target {
  params: Record<string, string | number>;
  body: Json;
  query?: Record<string, string>;
  /** Run after the request, whatever it answered. */
  cleanup?: () => Promise<void>;
}

interface OpSpec {
  /** Collections to try, in order (the first 2xx wins). */
  targets: string[];
  /** A write: the targeted collection's points are restored after each body. */
  write?: boolean;
  /** Adjusts the path and body for one attempt (fresh names, prerequisites). */
  prepare?: (body: Json, collection: string, n: number) => Promise<Target>;
}

let counter = 0;

/** A request object whose vectors are sparse and that names no vector gets `using: "sparse"` (the prepared sparse vector). */
function fixSparse(q: Json): void {
  if (q === null || typeof q !== 'object' || Array.isArray(q)) return;
  const own = JSON.stringify({ query: q.query, positive: q.positive, negative: q.negative, target: q.target, context: q.context });
  if (own.includes('"indices"') && (q.using === undefined || q.using === null)) {
    q.using = 'sparse';
    // Discovery and context take several examples, one of them varied: the others (dense
    // by default) become sparse too, as a request over a sparse vector holds.
    const query = q.query as Obj | null | undefined;
    if (query !== null && typeof query === 'object' && !Array.isArray(query)) for (const k of ['discover', 'context']) if (k in query) query[k] = sparsified(query[k] as Json);
    for (const k of ['target', 'context']) if (q[k] !== undefined && q[k] !== null) q[k] = sparsified(q[k] as Json);
  }
  const prefetch = q.prefetch;
  for (const p of Array.isArray(prefetch) ? prefetch : [prefetch]) fixSparse(p as Json);
}

/** A discover request needs a target or context pairs (the reference refuses neither): a body with neither gets a target. */
function fixDiscover(q: Json): void {
  if (q === null || typeof q !== 'object' || Array.isArray(q)) return;
  const pairs = Array.isArray(q.context) ? q.context.length : 0;
  if ((q.target === undefined || q.target === null) && pairs === 0) q.target = V;
}

/** `x` with every dense vector (a list of numbers) replaced by a sparse one. */
function sparsified(x: Json): Json {
  if (Array.isArray(x)) return x.length > 0 && x.every((v) => typeof v === 'number') ? { indices: [1, 7], values: [0.5, 0.25] } : x.map((v) => sparsified(v as Json));
  if (x !== null && typeof x === 'object') return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, k === 'indices' || k === 'values' ? v : sparsified(v as Json)]));
  return x;
}

function hasShardKey(body: Json): boolean {
  return JSON.stringify(body).includes('"shard_key"') || JSON.stringify(body).includes('"from_shard_key"');
}

/** Query-API objects (a request, a batch item, a prefetch) get the companions their variant needs. */
function fixQuery(q: Json): void {
  if (q === null || typeof q !== 'object' || Array.isArray(q)) return;
  const prefetch = q.prefetch;
  const list = Array.isArray(prefetch) ? prefetch : prefetch === undefined || prefetch === null ? [] : [prefetch];
  for (const p of list) fixQuery(p);
  const query = q.query as Obj | undefined | null;
  const fusion = query !== null && typeof query === 'object' && !Array.isArray(query) && ('fusion' in query || 'rrf' in query);
  if (list.length > 0 && (query === undefined || query === null)) q.query = q.using !== undefined && q.using !== null ? V : { fusion: 'rrf' };
  // A formula rescores prefetched candidates: it needs one prefetch.
  if (list.length === 0 && query !== null && typeof query === 'object' && !Array.isArray(query) && 'formula' in query) q.prefetch = [{ query: V, limit: 5 }];
  if (list.length === 0 && (query === undefined || query === null) && q.score_threshold !== undefined && q.score_threshold !== null) q.query = V;
  if (fusion) {
    const weights = (query as Obj).rrf !== null && typeof (query as Obj).rrf === 'object' ? ((query as any).rrf.weights as Json[] | null | undefined) : null;
    const n = Array.isArray(weights) ? weights.length : Math.max(1, list.length);
    if (list.length !== n) q.prefetch = Array.from({ length: n }, () => ({ query: V }));
    delete q.using;
    if (q.score_threshold !== undefined && q.score_threshold !== null) q.score_threshold = 0;
  }
}

// ---------------------------------------------------------------------------------

test('every body variant of the v1.18 document parses', async (t) => {
  t.timeout(120_000);
  const snapDir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-variants-'));
  const c = await ContractClient.start({ SERVICE__STORAGE__SNAPSHOTS_PATH: snapDir });
  t.teardown(async () => {
    await c.stop();
    fs.rmSync(snapDir, { recursive: true, force: true });
  });
  const must = async (method: Method, pattern: string, opts: Parameters<ContractClient['send']>[2]): Promise<Reply> => {
    const r = await c.send(method, pattern, opts);
    if (r.status !== 200) throw new Error(`${r.request}: ${r.status} ${r.text.slice(0, 300)}`);
    return r;
  };

  // Collections, indexes, points, shard keys.
  const upsert = async (name: string, like = name.replace(/w\d*$/, '')) => {
    const s = SETUPS[like];
    const points = pointsOf(like).map((p) => ({ ...p, vector: Object.fromEntries(Object.entries(p.vector as Obj).map(([k, v]) => [k, v])) }));
    // The unnamed vector goes as `""` inside a map only where the collection is unnamed; write it the plain way.
    const shaped = points.map((p) => {
      const vecs = p.vector as Obj;
      if (!('' in vecs)) return p;
      const { '': unnamed, ...rest } = vecs;
      return { ...p, vector: Object.keys(rest).length === 0 ? unnamed : { ...rest, '': unnamed } };
    });
    const keys = s.shardKey === undefined ? [undefined] : ['a', 1];
    for (const key of keys) {
      await must('PUT', '/collections/{collection_name}/points', { params: { collection_name: name }, query: { wait: true }, body: { points: shaped, ...(key !== undefined ? { shard_key: key } : {}) } });
    }
  };
  const createLike = async (name: string, like: string) => {
    await must('PUT', '/collections/{collection_name}', { params: { collection_name: name }, body: SETUPS[like].create });
  };
  // Reads go to u, c, m, k; writes to their copies uw, cw, mw, kw (so both run at once);
  // cluster operations to kc.
  const prepared = async (name: string, like: string) => {
    await createLike(name, like);
    if (like === 'k') {
      await must('PUT', '/collections/{collection_name}/shards', { params: { collection_name: name }, body: { shard_key: 'a' } });
      await must('PUT', '/collections/{collection_name}/shards', { params: { collection_name: name }, body: { shard_key: 1 } });
    }
    await must('PUT', '/collections/{collection_name}/index', { params: { collection_name: name }, query: { wait: true }, body: { field_name: 'a', field_schema: 'integer' } });
    await upsert(name, like);
  };
  await Promise.all([
    ...Object.keys(SETUPS).flatMap((name) => [prepared(name, name), ...Array.from({ length: WRITE_LANES }, (_, i) => prepared(`${name}w${i}`, name))]),
    prepared('kc', 'k'),
    ...([['pu', 'u'], ['pc', 'c'], ['r', 'u'], ['rs', 'u']] as const).map(([name, like]) => createLike(name, like)),
    prepared('ix', 'u'),
    // The generator's default string is `a`: `with_lookup` and `lookup_from` name this collection.
    prepared('a', 'u'),
  ]);

  const peerId: number = (await must('GET', '/collections/{collection_name}/cluster', { params: { collection_name: 'k' } })).body.result.peer_id;
  t.is(typeof peerId, 'number');
  const snap = (await must('POST', '/collections/{collection_name}/snapshots', { params: { collection_name: 'u' }, query: { wait: true } })).body.result;
  const snapUrl = `${c.url}/collections/u/snapshots/${encodeURIComponent(snap.name)}`;
  const shardSnap = (await must('POST', '/collections/{collection_name}/shards/{shard_id}/snapshots', { params: { collection_name: 'u', shard_id: 0 }, query: { wait: true } })).body.result;
  const shardSnapUrl = `${c.url}/collections/u/shards/0/snapshots/${encodeURIComponent(shardSnap.name)}`;

  // Values the document cannot know.
  const nullable = (v: Json, more: Variant[] = []): Variant[] => [{ label: '', value: v }, ...more, { label: '=null', value: null }];
  const semantic: Semantic = (site) => semanticValues(site) as Variant[] | undefined;
  const semanticValues = (site: Parameters<Semantic>[0]): Array<{ label: string; value: unknown }> | undefined => {
    if (site.prop === undefined) {
      switch (site.schema) {
        case 'Document':
          return [{ label: '', value: DOC }];
        case 'Image':
          return [{ label: '', value: IMAGE }];
        case 'InferenceObject':
          return [{ label: '', value: OBJECT }];
        case 'VectorStruct':
          return [
            { label: '', value: V },
            { label: '<multivector>', value: MV },
            { label: '<named dense>', value: { dense: V } },
            { label: '<named multivector>', value: { multi: MV } },
            { label: '<named sparse>', value: { sparse: SV } },
            { label: '<named Document>', value: { dense: DOC } },
            { label: '<named Image>', value: { dense: IMAGE } },
            { label: '<named InferenceObject>', value: { dense: OBJECT } },
            { label: '<Document>', value: DOC },
            { label: '<Image>', value: IMAGE },
            { label: '<InferenceObject>', value: OBJECT },
          ];
        case 'BatchVectorStruct':
          return [
            { label: '', value: [V] },
            { label: '<multivectors>', value: [MV] },
            { label: '<named dense>', value: { dense: [V] } },
            { label: '<named multivector>', value: { multi: [MV] } },
            { label: '<named sparse>', value: { sparse: [SV] } },
            { label: '<named Document>', value: { dense: [DOC] } },
            { label: '<Documents>', value: [DOC] },
            { label: '<Images>', value: [IMAGE] },
            { label: '<InferenceObjects>', value: [OBJECT] },
          ];
        case 'NamedVectorStruct':
          return [
            { label: '', value: V },
            { label: '<NamedVector>', value: { name: 'dense', vector: V } },
            { label: '<NamedSparseVector>', value: { name: 'sparse', vector: SV } },
          ];
        case 'VectorInput':
          return [
            { label: '', value: V },
            { label: '<sparse>', value: SV },
            { label: '<multivector>', value: MV },
            { label: '<id>', value: 1 },
            { label: '<uuid>', value: UUID },
            { label: '<Document>', value: DOC },
            { label: '<Image>', value: IMAGE },
            { label: '<InferenceObject>', value: OBJECT },
          ];
        case 'RecommendExample':
          return [
            { label: '', value: 1 },
            { label: '<uuid>', value: UUID },
            { label: '<vector>', value: V },
            { label: '<sparse>', value: SV },
          ];
        case 'GeoLineString':
          return [{ label: '', value: { points: [{ lon: 0, lat: 0 }, { lon: 1, lat: 0 }, { lon: 1, lat: 1 }, { lon: 0, lat: 1 }, { lon: 0, lat: 0 }] } }];
        case 'LookupLocation':
          return [
            { label: '', value: { collection: 'u' } },
            { label: '.vector', value: { collection: 'c', vector: 'dense' } },
            { label: '.vector=null', value: { collection: 'u', vector: null } },
            { label: '.shard_key', value: { collection: 'k', shard_key: 'a' } },
            { label: '.shard_key=null', value: { collection: 'u', shard_key: null } },
          ];
        case 'WithVector':
          return [
            { label: '', value: true },
            { label: '=false', value: false },
            { label: '<names>', value: ['sparse'] },
          ];
        case 'HasVectorCondition':
          return [{ label: '', value: { has_vector: 'sparse' } }];
        case 'CreateAlias':
          return [{ label: '', value: { collection_name: 'u', alias_name: 'al_new' } }];
        case 'DeleteAlias':
          return [{ label: '', value: { alias_name: 'al_del' } }];
        case 'RenameAlias':
          return [{ label: '', value: { old_alias_name: 'al_old', new_alias_name: 'al_renamed' } }];
        default:
          return undefined;
      }
    }
    switch (`${site.parent}.${site.prop}`) {
      case 'SnapshotRecover.location':
        return [{ label: '', value: snapUrl }];
      case 'SnapshotRecover.checksum':
        return nullable(snap.checksum);
      case 'ShardSnapshotRecover.location':
        return [{ label: '', value: shardSnapUrl }];
      case 'ShardSnapshotRecover.checksum':
        return nullable(shardSnap.checksum);
      case 'WithLookup.collection':
        return [{ label: '', value: 'u' }];
      case 'InitFrom.collection':
        return [{ label: '', value: 'u' }];
      case 'Rrf.weights':
        return nullable([1]);
      case 'DeleteVectors.vector':
        return [{ label: '', value: ['sparse'] }];
      case 'HnswConfigDiff.m':
        // Quiver refuses m = 1 (422: "use 0 (no graph) or 2..256"); the document allows any uint.
        return nullable(16);
    }
    switch (site.prop) {
      case 'using':
        return nullable('dense');
      case 'to_peer_id':
      case 'from_peer_id':
      case 'peer_id':
        return [{ label: '', value: peerId }];
      case 'placement':
        return nullable([peerId]);
    }
    return undefined;
  };
  const gen = new BodyGenerator(spec().doc as any, {
    semantic,
    late: ['prefetch'],
    extras: {
      FieldCondition: [{ match: { value: 'a' } }, { range: { gte: 0 } }],
      RecommendInput: [{ positive: [1] }],
      RecommendRequest: [{ positive: [1] }],
      RecommendGroupsRequest: [{ positive: [1] }],
      SetPayload: [{ points: [1] }, { filter: {} }],
      DeletePayload: [{ points: [1] }, { filter: {} }],
      DeleteVectors: [{ points: [1] }, { filter: {} }],
      CreateCollection: [{ vectors: { size: 4, distance: 'Cosine' } }, { sparse_vectors: { sparse: {} } }],
    },
    mapKeys: { VectorsConfigDiff: 'dense', SparseVectorsConfig: 'sparse' },
  });

  const fresh = () => ++counter;
  const OPS: Record<string, OpSpec> = {
    'PUT /collections/{collection_name}': {
      targets: ['new'],
      prepare: async (body) => {
        // Left in place (the server's storage goes with it): a delete would cost another metadata operation.
        const name = `new${fresh()}`;
        return { params: { collection_name: name }, body };
      },
    },
    'PATCH /collections/{collection_name}': { targets: ['pu', 'pc'] },
    'POST /collections/aliases': {
      targets: ['-'],
      prepare: async (body) => {
        await c.send('POST', '/collections/aliases', {
          body: { actions: ['al_del', 'al_old', 'al_new', 'al_renamed'].map((a) => ({ delete_alias: { alias_name: a } })) },
        });
        await must('POST', '/collections/aliases', { body: { actions: ['al_del', 'al_old'].map((a) => ({ create_alias: { collection_name: 'u', alias_name: a } })) } });
        return { params: {}, body };
      },
    },
    'PUT /collections/{collection_name}/index': {
      targets: ['ix'],
      prepare: async (body) => {
        const field = `f${fresh()}`;
        return {
          params: { collection_name: 'ix' },
          body: { ...(body as Obj), field_name: field },
          query: { wait: 'true' },
          cleanup: () => c.send('DELETE', '/collections/{collection_name}/index/{field_name}', { params: { collection_name: 'ix', field_name: field }, query: { wait: true } }).then(() => undefined),
        };
      },
    },
    'PUT /collections/{collection_name}/vectors/{vector_name}': {
      targets: ['c'],
      prepare: async (body) => {
        const v = `v${fresh()}`;
        return {
          params: { collection_name: 'c', vector_name: v },
          body,
          cleanup: () => c.send('DELETE', '/collections/{collection_name}/vectors/{vector_name}', { params: { collection_name: 'c', vector_name: v } }).then(() => undefined),
        };
      },
    },
    'PUT /collections/{collection_name}/shards': {
      targets: ['k'],
      prepare: async (body) => ({ params: { collection_name: 'k' }, body: { ...(body as Obj), shard_key: typeof (body as Obj).shard_key === 'number' ? 1000 + fresh() : `sk${fresh()}` } }),
    },
    'POST /collections/{collection_name}/shards/delete': {
      targets: ['k'],
      prepare: async (body) => {
        const key = typeof (body as Obj).shard_key === 'number' ? 1000 + fresh() : `sk${fresh()}`;
        await must('PUT', '/collections/{collection_name}/shards', { params: { collection_name: 'k' }, body: { shard_key: key } });
        return { params: { collection_name: 'k' }, body: { ...(body as Obj), shard_key: key } };
      },
    },
    'POST /collections/{collection_name}/cluster': {
      targets: ['kc'],
      prepare: async (body) => {
        const b = JSON.parse(JSON.stringify(body)) as Obj;
        for (const op of ['create_sharding_key', 'drop_sharding_key']) {
          const inner = b[op] as Obj | undefined;
          if (inner === undefined) continue;
          const key = typeof inner.shard_key === 'number' ? 1000 + fresh() : `sk${fresh()}`;
          inner.shard_key = key;
          if (op === 'drop_sharding_key') await must('PUT', '/collections/{collection_name}/shards', { params: { collection_name: 'kc' }, body: { shard_key: key } });
        }
        return { params: { collection_name: 'kc' }, body: b };
      },
    },
    'PUT /collections/{collection_name}/snapshots/recover': { targets: ['r'], prepare: async (body) => ({ params: { collection_name: 'r' }, body, query: { wait: 'true' } }) },
    'PUT /collections/{collection_name}/shards/{shard_id}/snapshots/recover': {
      // Its own collection: the collection recovery's lane replaces `r` meanwhile (503 for a shard of it).
      targets: ['rs'],
      prepare: async (body) => ({ params: { collection_name: 'rs', shard_id: 0 }, body, query: { wait: 'true' } }),
    },
  };
  const WRITES = new Set([
    'PUT /collections/{collection_name}/points',
    'POST /collections/{collection_name}/points/delete',
    'PUT /collections/{collection_name}/points/vectors',
    'POST /collections/{collection_name}/points/vectors/delete',
    'POST /collections/{collection_name}/points/payload',
    'PUT /collections/{collection_name}/points/payload',
    'POST /collections/{collection_name}/points/payload/delete',
    'POST /collections/{collection_name}/points/payload/clear',
    'POST /collections/{collection_name}/points/batch',
  ]);

  const RESTORE = new Set([
    'POST /collections/{collection_name}/points/delete',
    'POST /collections/{collection_name}/points/vectors/delete',
    'POST /collections/{collection_name}/points/batch',
    'PUT /collections/{collection_name}/points',
    'PUT /collections/{collection_name}/points/vectors',
  ]);

  // Operations with a JSON body.
  const doc = spec().doc as any;
  const ops: Array<{ method: Method; pattern: string; root: string }> = [];
  const skipped: string[] = [];
  for (const [pattern, item] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    for (const [m, op] of Object.entries(item)) {
      const content = op?.requestBody?.content;
      if (content === undefined) continue;
      const ref: string | undefined = content['application/json']?.schema?.$ref;
      if (ref === undefined) {
        skipped.push(`${m.toUpperCase()} ${pattern} (${Object.keys(content).join(', ')}: a file, not a schema)`);
        continue;
      }
      ops.push({ method: m.toUpperCase() as Method, pattern, root: ref.split('/').pop()! });
    }
  }
  t.true(ops.length >= 35, `the document has ${ops.length} operations with a JSON body`);

  const failures: string[] = [];
  const used = new Set<Allowed>();
  let bodies = 0;
  let accepted = 0;
  let excused = 0;

  const classify = (r: Reply): string => `${r.status} ${typeof r.body?.status?.error === 'string' ? r.body.status.error : r.text.slice(0, 200)}`;
  const isParseRefusal = (answer: string) => /^400 Format error in JSON body/.test(answer) || /unknown (field|variant)/.test(answer);
  const excuse = (id: string, v: Variant, body: Json, answers: string[]): Allowed | undefined => {
    const text = `${v.label} ${JSON.stringify(body)}`;
    for (const list of [UNSUPPORTED, PENDING, SEMANTIC]) {
      for (const a of list) {
        if (a.op !== undefined && !a.op.test(id)) continue;
        if (!a.where.test(text)) continue;
        // One collection's answer names the reason (the others may only say the vector does not fit them).
        if (!answers.some((x) => a.message.test(x))) continue;
        // A semantic excuse never covers a parse refusal.
        if (list === SEMANTIC && answers.some(isParseRefusal)) continue;
        return a;
      }
    }
    return undefined;
  };

  const runBody = async (id: string, method: Method, pattern: string, v: Variant, lane = 0): Promise<void> => {
    const spec = OPS[id];
    const suffix = WRITES.has(id) ? `w${lane}` : '';
    let targets = spec?.targets ?? READ_TARGETS.map((x) => `${x}${suffix}`);
    const body0 = JSON.parse(JSON.stringify(v.value)) as Json;
    if (/\/points\/query(\/groups)?$/.test(pattern)) fixQuery(body0);
    if (/\/points\/query\/batch$/.test(pattern)) for (const s of ((body0 as Obj).searches as Json[]) ?? []) fixQuery(s);
    if (/\/points\/discover$/.test(pattern)) fixDiscover(body0);
    if (/\/points\/discover\/batch$/.test(pattern)) for (const s of ((body0 as Obj).searches as Json[]) ?? []) fixDiscover(s);
    if (/\/points\/(query|recommend|discover)(\/groups)?$/.test(pattern)) fixSparse(body0);
    if (/\/points\/(query|recommend|discover)\/batch$/.test(pattern)) for (const s of ((body0 as Obj).searches as Json[]) ?? []) fixSparse(s);
    if (spec === undefined) {
      // The collection the body's vectors most likely fit first (the others stay as fallbacks).
      const text = JSON.stringify(body0);
      const first = hasShardKey(body0) ? 'k' : /"(dense|multi)"/.test(text) ? 'c' : /\[\[\d/.test(text) ? 'm' : null;
      if (first !== null) {
        const name = `${first}${suffix}`;
        targets = [name, ...targets.filter((x) => x !== name)];
      }
    }
    const answers: string[] = [];
    for (const target of targets) {
      let call: Target = { params: { collection_name: target }, body: body0 };
      if (spec?.prepare) call = await spec.prepare(JSON.parse(JSON.stringify(body0)), target, 0);
      const query = { ...(WRITES.has(id) ? { wait: 'true' } : {}), ...(call.query ?? {}) };
      let r: Reply;
      try {
        r = await c.send(method, pattern, { params: call.params, body: call.body, query });
      } finally {
        if (call.cleanup) await call.cleanup();
      }
      if (r.status >= 200 && r.status < 300) {
        // A refused write changed nothing; an accepted one that removed data is undone.
        if (RESTORE.has(id)) await upsert(target);
        accepted++;
        return;
      }
      answers.push(classify(r));
      // A 5xx, a route that is not served, or a feature listed as unsupported or pending is the same on every collection.
      if (r.status >= 500) break;
      const last = answers[answers.length - 1];
      if ([...UNSUPPORTED, ...PENDING].some((a) => a.message.test(last) && (a.op === undefined || a.op.test(id)))) break;
    }
    const a = excuse(id, v, body0, answers);
    if (a !== undefined) {
      used.add(a);
      excused++;
      return;
    }
    failures.push(`${id} [${v.label || 'baseline'}] ${JSON.stringify(body0).slice(0, 300)}\n    -> ${answers.map((x) => x.slice(0, 300)).join('\n    -> ')}`);
  };

  const started = Date.now();
  // Three lanes at once: reads (u, c, m, k), writes (their copies), the other operations.
  const parallel = ['PUT /collections/{collection_name}', 'PATCH /collections/{collection_name}', 'PUT /collections/{collection_name}/index', 'PUT /collections/{collection_name}/vectors/{vector_name}'];
  const pool = async (jobs: Array<() => Promise<void>>, width: number) => {
    let next = 0;
    await Promise.all(Array.from({ length: width }, async () => {
      while (next < jobs.length) await jobs[next++]();
    }));
  };
  const reads: Array<() => Promise<void>> = [];
  const writes: Array<(lane: number) => Promise<void>> = [];
  const others: Array<() => Promise<void>> = [];
  for (const { method, pattern, root } of ops) {
    const id = `${method} ${pattern}`;
    const variants = gen.variants(root);
    bodies += variants.length;
    const jobs = variants.map((v) => () => runBody(id, method, pattern, v));
    if (WRITES.has(id)) writes.push(...variants.map((v) => (lane: number) => runBody(id, method, pattern, v, lane)));
    else if (OPS[id] === undefined) reads.push(...jobs);
    else if (parallel.includes(id)) others.push(() => pool(jobs, id === 'PUT /collections/{collection_name}' ? 12 : 4));
    else others.push(async () => {
      for (const j of jobs) await j();
    });
  }
  const lane = async (name: string, run: Promise<void>) => {
    const t0 = Date.now();
    await run;
    laneTimes.push(`${name} ${Date.now() - t0} ms`);
  };
  const laneTimes: string[] = [];
  await Promise.all([
    lane(`${reads.length} reads`, pool(reads, 6)),
    // Each write lane has its own copies of the collections (uw0, cw0, ...): a write and the restore after it never meet another lane's.
    ...Array.from({ length: WRITE_LANES }, (_, i) => lane(`writes ${i}`, (async () => {
      for (;;) {
        const job = writes.shift();
        if (job === undefined) return;
        await job(i);
      }
    })())),
    ...others.map((j, i) => lane(`other ${i}`, j())),
  ]);
  t.log(`lanes: ${laneTimes.join(', ')}`);
  t.log(`${ops.length} operations, ${bodies} bodies in ${Date.now() - started} ms: ${accepted} accepted, ${excused} refused as listed, ${failures.length} refused otherwise`);
  if (skipped.length > 0) t.log(`not generated: ${skipped.join('; ')}`);
  for (const list of [UNSUPPORTED, PENDING, SEMANTIC]) for (const a of list) if (!used.has(a)) t.log(`unused excuse: ${a.reason}`);
  if (process.env.QUIVER_VARIANTS_OUT) fs.writeFileSync(process.env.QUIVER_VARIANTS_OUT, failures.join('\n'));
  t.deepEqual(failures, [], `${failures.length} bodies refused:\n${failures.join('\n')}`);
});
