/**
 * Multivectors through REST, every answer validated against the v1.18 document: create
 * bodies with `multivector_config` (unnamed with `hnsw_config.m: 0`, named with a graph,
 * each a valid CreateCollection); points carry lists of vectors; a query list scores by
 * MaxSim, checked against a brute force written here (exact with and without a graph,
 * and the graph's recall); `with_vector` returns the lists; retrieve, scroll, update
 * and delete vectors; the refusals (rows of another dimension, a list for a plain
 * vector, an empty row) answer 400 naming the field and change nothing; a restart
 * keeps it all.
 */

import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { startQuiver } from './helpers';
import { ContractClient, spec } from '../support/contract';
import { COLLECTION, POINTS, QUERY, SCROLL, VECTORS, VECTORS_DELETE } from '../support/routes';

const storage = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-mv-api-'));
let api: ContractClient;

async function start(): Promise<ContractClient> {
  const server = await startQuiver({ SERVICE__STORAGE__STORAGE_PATH: storage });
  return new ContractClient(server.url, spec(), server);
}

test.before(async () => {
  api = await start();
});

test.after.always(async () => {
  await api?.stop();
  fs.rmSync(storage, { recursive: true, force: true });
});

const DIM = 8;

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function list(r: () => number, rows: number): number[][] {
  return Array.from({ length: rows }, () => Array.from({ length: DIM }, () => Math.fround(r() * 2 - 1)));
}

const norm = (v: number[]) => {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / n);
};

/** MaxSim, the reference's definition, in f64: sum over query rows of the best dot product with a point row. */
function maxSim(q: number[][], doc: number[][], cosine: boolean): number {
  const d = cosine ? doc.map(norm) : doc;
  return (cosine ? q.map(norm) : q).reduce((s, qv) => s + Math.max(...d.map((dv) => dv.reduce((a, x, i) => a + x * qv[i], 0))), 0);
}

function brute(docs: Map<number, number[][]>, q: number[][], cosine: boolean, k: number): Array<{ id: number; score: number }> {
  return [...docs]
    .map(([id, doc]) => ({ id, score: maxSim(q, doc, cosine) }))
    .sort((a, b) => b.score - a.score || a.id - b.id)
    .slice(0, k);
}

function create(t: ExecutionContext, name: string, body: unknown) {
  t.deepEqual(spec().validateSchema('CreateCollection', body), [], 'the body is a v1.18 CreateCollection');
  return api.ok(t, 'PUT', COLLECTION, { params: { collection_name: name }, body });
}

const FLAT_BODY = { vectors: { size: DIM, distance: 'Dot', multivector_config: { comparator: 'max_sim' }, hnsw_config: { m: 0 } } };
const NAMED_BODY = {
  vectors: {
    colbert: { size: DIM, distance: 'Cosine', multivector_config: { comparator: 'max_sim' }, hnsw_config: { m: 16, ef_construct: 100 } },
    dense: { size: DIM, distance: 'Dot' },
  },
};

function checkTop(t: ExecutionContext, got: Array<{ id: number; score: number }>, want: Array<{ id: number; score: number }>, what: string): void {
  t.deepEqual(
    got.map((p) => p.id),
    want.map((w) => w.id),
    what,
  );
  got.forEach((p, i) => t.true(Math.abs(p.score - want[i].score) < 1e-4 * Math.max(1, Math.abs(want[i].score)), `${what}: ${p.score} vs ${want[i].score}`));
}

test.serial('multivectors: create, upsert lists, MaxSim queries against brute force, CRUD, refusals, restart', async (t) => {
  t.is(await create(t, 'mv-flat', FLAT_BODY), true);
  t.is(await create(t, 'mv-named', NAMED_BODY), true);
  const flatInfo = await api.ok(t, 'GET', COLLECTION, { params: { collection_name: 'mv-flat' } });
  t.deepEqual(flatInfo.config.params.vectors.multivector_config, { comparator: 'max_sim' });
  const namedInfo = await api.ok(t, 'GET', COLLECTION, { params: { collection_name: 'mv-named' } });
  t.deepEqual(namedInfo.config.params.vectors.colbert.multivector_config, { comparator: 'max_sim' });

  const r = rng(11);
  const docs = new Map<number, number[][]>();
  for (let id = 1; id <= 300; id++) docs.set(id, list(r, 1 + Math.floor(r() * 5)));
  const points = [...docs].map(([id, v]) => ({ id, vector: v }));
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: 'mv-flat' }, query: { wait: true }, body: { points } });
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: 'mv-named' },
    query: { wait: true },
    body: { points: [...docs].map(([id, v]) => ({ id, vector: { colbert: v, dense: v[0] } })) },
  });

  const queries = Array.from({ length: 8 }, (_, i) => list(r, 1 + (i % 3)));
  const check = async (c: ContractClient, docsNow: Map<number, number[][]>, namedDocs: Map<number, number[][]>) => {
    let found = 0;
    for (const q of queries) {
      const flat = await c.ok(t, 'POST', QUERY, { params: { collection_name: 'mv-flat' }, body: { query: q, limit: 10 } });
      checkTop(t, flat.points, brute(docsNow, q, false, 10), 'no graph (m: 0)');
      const want = brute(namedDocs, q, true, 10);
      const exact = await c.ok(t, 'POST', QUERY, { params: { collection_name: 'mv-named' }, body: { query: q, using: 'colbert', limit: 10, params: { exact: true } } });
      checkTop(t, exact.points, want, 'exact over the graph collection');
      const graph = await c.ok(t, 'POST', QUERY, { params: { collection_name: 'mv-named' }, body: { query: q, using: 'colbert', limit: 10, params: { hnsw_ef: 128 } } });
      found += graph.points.filter((p: { id: number }) => want.some((w) => w.id === p.id)).length;
    }
    t.true(found / (queries.length * 10) >= 0.9, `graph recall ${found / (queries.length * 10)}`);
  };
  const namedDocs = new Map(docs);
  await check(api, docs, namedDocs);

  // with_vector returns the lists (Dot: as given; Cosine: normalised rows).
  const got = await api.ok(t, 'POST', POINTS, { params: { collection_name: 'mv-flat' }, body: { ids: [3], with_vector: true } });
  t.deepEqual(got[0].vector, docs.get(3));
  const named = await api.ok(t, 'POST', POINTS, { params: { collection_name: 'mv-named' }, body: { ids: [3], with_vector: ['colbert'] } });
  named[0].vector.colbert.forEach((row: number[], i: number) => row.forEach((x, j) => t.true(Math.abs(x - norm(docs.get(3)![i])[j]) < 1e-6)));
  const page = await api.ok(t, 'POST', SCROLL, { params: { collection_name: 'mv-flat' }, body: { limit: 2, with_vector: true } });
  t.deepEqual(
    page.points.map((p: { id: number; vector: number[][] }) => p.vector),
    [docs.get(1), docs.get(2)],
  );

  // A query by point id uses that point's list.
  const byId = await api.ok(t, 'POST', QUERY, { params: { collection_name: 'mv-flat' }, body: { query: 5, limit: 3 } });
  checkTop(t, byId.points, brute(new Map([...docs].filter(([id]) => id !== 5)), docs.get(5)!, false, 3), 'query by id');

  // Update vectors replaces a list; delete vectors removes it from the point.
  docs.set(7, list(r, 3));
  await api.ok(t, 'PUT', VECTORS, { params: { collection_name: 'mv-flat' }, query: { wait: true }, body: { points: [{ id: 7, vector: docs.get(7) }] } });
  t.deepEqual((await api.ok(t, 'POST', POINTS, { params: { collection_name: 'mv-flat' }, body: { ids: [7], with_vector: true } }))[0].vector, docs.get(7));
  await api.ok(t, 'POST', VECTORS_DELETE, { params: { collection_name: 'mv-named' }, query: { wait: true }, body: { points: [9], vector: ['colbert'] } });
  const nine = await api.ok(t, 'POST', POINTS, { params: { collection_name: 'mv-named' }, body: { ids: [9], with_vector: true } });
  t.deepEqual(Object.keys(nine[0].vector), ['dense']);
  namedDocs.delete(9);

  // Refusals: 400 naming the field, nothing written.
  const bad = async (body: unknown, re: RegExp) => api.error(t, 400, 'PUT', POINTS, { params: { collection_name: 'mv-named' }, query: { wait: true }, body }, re);
  await bad({ points: [{ id: 1000, vector: { colbert: [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2]], dense: docs.get(1)![0] } }] }, /points\[0\]\.vector\.colbert.*same dimension/);
  await bad({ points: [{ id: 1000, vector: { colbert: [[1, 2, 3]], dense: docs.get(1)![0] } }] }, /Vector dimension error: expected dim: 8, got 3/);
  await bad({ points: [{ id: 1000, vector: { colbert: docs.get(1), dense: docs.get(1) } }] }, /"dense".*not a multivector/);
  await bad({ points: [{ id: 1000, vector: { colbert: [[]], dense: docs.get(1)![0] } }] }, /points\[0\]\.vector\.colbert\[0\]/);
  t.deepEqual(await api.ok(t, 'POST', POINTS, { params: { collection_name: 'mv-named' }, body: { ids: [1000] } }), []);
  await api.error(t, 400, 'POST', QUERY, { params: { collection_name: 'mv-named' }, body: { query: [[1, 2]], using: 'colbert' } }, /expected dim: 8, got 2/);
  // Distances MaxSim does not take here, and a quantized multivector, are refused.
  await api.error(t, 400, 'PUT', COLLECTION, { params: { collection_name: 'mv-euclid' }, body: { vectors: { size: 4, distance: 'Euclid', multivector_config: { comparator: 'max_sim' } } } }, /multivector_config/);
  await api.error(t, 400, 'PUT', COLLECTION, { params: { collection_name: 'mv-q' }, body: { vectors: { size: 4, distance: 'Dot', multivector_config: { comparator: 'max_sim' } }, quantization_config: { scalar: { type: 'int8' } } } }, /quantized multivectors/);

  // A snapshot of the collection, recovered into a new one by upload, answers the same.
  const snap = await api.ok(t, 'POST', '/collections/{collection_name}/snapshots', { params: { collection_name: 'mv-flat' }, query: { wait: true } });
  const bytes = Buffer.from(await (await fetch(`${api.url}/collections/mv-flat/snapshots/${encodeURIComponent(snap.name)}`)).arrayBuffer());
  const form = new FormData();
  form.append('snapshot', new Blob([new Uint8Array(bytes)], { type: 'application/octet-stream' }), 'mv.snapshot');
  const up = await fetch(`${api.url}/collections/mv-copy/snapshots/upload?wait=true&priority=snapshot`, { method: 'POST', body: form });
  t.is(up.status, 200, await up.text());
  for (const q of queries.slice(0, 3)) {
    const copy = await api.ok(t, 'POST', QUERY, { params: { collection_name: 'mv-copy' }, body: { query: q, limit: 10 } });
    checkTop(t, copy.points, brute(docs, q, false, 10), 'recovered from a snapshot');
  }
  t.deepEqual((await api.ok(t, 'POST', POINTS, { params: { collection_name: 'mv-copy' }, body: { ids: [7], with_vector: true } }))[0].vector, docs.get(7));

  // A restart keeps lists, graph and answers: after a clean stop (from the checkpoint),
  // and after a kill (lists of several lengths replayed from the WAL).
  await api.stop();
  api = await start();
  await check(api, docs, namedDocs);
  t.deepEqual((await api.ok(t, 'POST', POINTS, { params: { collection_name: 'mv-flat' }, body: { ids: [7], with_vector: true } }))[0].vector, docs.get(7));
  for (let id = 301; id <= 320; id++) docs.set(id, list(r, 1 + (id % 4)));
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: 'mv-flat' },
    query: { wait: true },
    body: { points: [...docs].filter(([id]) => id > 300).map(([id, vector]) => ({ id, vector })) },
  });
  await api.server!.stop('SIGKILL');
  api = await start();
  await check(api, docs, namedDocs);
  const replayed = await api.ok(t, 'POST', POINTS, { params: { collection_name: 'mv-flat' }, body: { ids: [301, 302, 303], with_vector: true } });
  t.deepEqual(
    replayed.map((p: { vector: number[][] }) => p.vector),
    [docs.get(301), docs.get(302), docs.get(303)],
  );
});
