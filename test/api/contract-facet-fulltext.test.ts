/**
 * Facets and full-text indexes against a real bin/quiver, REST answers validated
 * against the reference's v1.18 OpenAPI schemas:
 *  - `POST /collections/{c}/facet` on keyword, integer, bool and uuid indexes of a
 *    collection with 3 shards, with and without filters and limits, against counting
 *    the points in the test; its errors (no index, bad limit); the gRPC Facet call
 *    gives the same hits;
 *  - a text index through REST: token matching with stopwords and the English stemmer,
 *    phrases, refusal of the stopword languages Quiver has no list for, and the index in
 *    payload_schema;
 *  - the other languages through REST: a table of (language settings, texts, query,
 *    expected points), each citing its source; the settings survive a snapshot and a
 *    restart of the node.
 */

import * as fs from 'fs/promises';
import * as os from 'os';
import * as path from 'path';
import test, { type ExecutionContext } from 'ava';

import { ContractClient } from '../support/contract';
import { freePort } from './helpers';
import { QdrantGrpc } from '../grpc/client';
import { COUNT, INDEX, POINTS } from '../support/routes';
import { mulberry32 } from '../support/rng';

const FACET = '/collections/{collection_name}/facet';

let api: ContractClient;
let grpcClient: QdrantGrpc;
let snapshotsPath: string;

test.before(async () => {
  const port = await freePort();
  snapshotsPath = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-facet-fulltext-'));
  api = await ContractClient.start({ SERVICE__SERVICE__GRPC_PORT: String(port), SERVICE__STORAGE__SNAPSHOTS_PATH: snapshotsPath });
  grpcClient = new QdrantGrpc(`127.0.0.1:${port}`);
});

test.after.always(async () => {
  grpcClient?.close();
  await api?.stop();
  if (snapshotsPath) await fs.rm(snapshotsPath, { recursive: true, force: true });
});

type Payload = Record<string, unknown>;
const UUIDS = ['0b1c7f1e-33a4-4c55-9d1a-0a4b5c6d7e8f', '6f9619ff-8b86-4011-b42d-00c04fc964ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'];

function index(t: ExecutionContext, c: string, field_name: string, field_schema: unknown) {
  return api.ok(t, 'PUT', INDEX, { params: { collection_name: c }, query: { wait: 'true' }, body: { field_name, field_schema } });
}

/** The test's own count: distinct values of the key's top-level value (arrays expanded) of the matching points. */
function countFacet(points: Payload[], key: string, keep: (p: Payload) => boolean, accept: (v: unknown) => boolean): Map<unknown, number> {
  const out = new Map<unknown, number>();
  for (const p of points) {
    if (!keep(p)) continue;
    const raw = p[key];
    const vals = new Set((Array.isArray(raw) ? raw : [raw]).filter(accept));
    for (const v of vals) out.set(v, (out.get(v) ?? 0) + 1);
  }
  return out;
}

function expectedHits(counts: Map<unknown, number>, limit: number): Array<{ value: unknown; count: number }> {
  return [...counts]
    .map(([value, count]) => ({ value, count }))
    .sort((a, b) => b.count - a.count || (typeof a.value === 'number' ? (a.value as number) - (b.value as number) : typeof a.value === 'boolean' ? Number(a.value) - Number(b.value) : Buffer.compare(Buffer.from(String(a.value)), Buffer.from(String(b.value)))))
    .slice(0, limit);
}

test('facet: keyword, integer, bool and uuid counts over 3 shards match counting, with filters and limits; gRPC agrees', async (t) => {
  const C = 'facets';
  await api.ok(t, 'PUT', '/collections/{collection_name}', { params: { collection_name: C }, body: { vectors: { size: 2, distance: 'Dot' }, shard_number: 3 } });
  const rnd = mulberry32(1919);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const CITIES = ['Berlin', 'London', 'Paris', 'Rome', 'Zürich', 'athens'];
  const points: Payload[] = [];
  for (let i = 0; i < 400; i++) {
    const p: Payload = {};
    const r = rnd();
    if (r < 0.7) p.city = pick(CITIES);
    else if (r < 0.85) p.city = [pick(CITIES), pick(CITIES), pick(CITIES)];
    else if (r < 0.9) p.city = 5;
    p.n = rnd() < 0.8 ? Math.floor(rnd() * 12) - 3 : rnd() < 0.5 ? [1, 2, 2.5] : 'x';
    if (rnd() < 0.9) p.flag = rnd() < 0.3;
    if (rnd() < 0.6) p.u = pick(UUIDS);
    points.push(p);
  }
  for (let i = 0; i < points.length; i += 100) {
    await api.ok(t, 'PUT', POINTS, {
      params: { collection_name: C },
      query: { wait: 'true' },
      body: { points: points.slice(i, i + 100).map((payload, j) => ({ id: i + j + 1, vector: [1, 0.5], payload })) },
    });
  }
  await index(t, C, 'city', 'keyword');
  await index(t, C, 'n', 'integer');
  await index(t, C, 'flag', 'bool');
  await index(t, C, 'u', 'uuid');

  const isStr = (v: unknown) => typeof v === 'string';
  const cases: Array<{ key: string; accept: (v: unknown) => boolean; filter?: unknown; keep?: (p: Payload) => boolean; limit?: number; exact?: boolean }> = [
    { key: 'city', accept: isStr },
    { key: 'city', accept: isStr, limit: 3, exact: true },
    { key: 'city', accept: isStr, limit: 100, filter: { must: [{ key: 'flag', match: { value: true } }] }, keep: (p) => p.flag === true },
    { key: 'n', accept: (v) => Number.isInteger(v), limit: 20 },
    { key: 'n', accept: (v) => Number.isInteger(v), limit: 5, filter: { must: [{ key: 'n', range: { gte: 0 } }] }, keep: (p) => [p.n].flat().some((v) => typeof v === 'number' && v >= 0) },
    { key: 'flag', accept: (v) => typeof v === 'boolean' },
    { key: 'u', accept: isStr, filter: { must_not: [{ key: 'city', match: { any: ['Rome', 'Paris'] } }] }, keep: (p) => ![p.city].flat().some((v) => v === 'Rome' || v === 'Paris') },
    { key: 'city', accept: isStr, filter: { must: [{ key: 'city', match: { value: 'nowhere' } }] }, keep: () => false },
  ];
  for (const c of cases) {
    const body: Record<string, unknown> = { key: c.key };
    if (c.filter) body.filter = c.filter;
    if (c.limit !== undefined) body.limit = c.limit;
    if (c.exact !== undefined) body.exact = c.exact;
    const res = await api.ok(t, 'POST', FACET, { params: { collection_name: C }, body });
    const want = expectedHits(countFacet(points, c.key, c.keep ?? (() => true), c.accept), c.limit ?? 10);
    t.deepEqual(res.hits, want, JSON.stringify(body));

    const g = await grpcClient.call('Points', 'Facet', {
      collection_name: C,
      key: c.key,
      ...(c.limit !== undefined ? { limit: String(c.limit) } : {}),
      ...(c.exact !== undefined ? { exact: c.exact } : {}),
      ...(c.filter ? { filter: grpcFilter(c.filter) } : {}),
    });
    // an empty repeated field is absent on the wire
    const viaGrpc = ((g.hits ?? []) as Array<{ value: Record<string, unknown>; count: string }>).map((h) => ({
      value: h.value.string_value ?? (h.value.integer_value !== undefined ? Number(h.value.integer_value) : h.value.bool_value),
      count: Number(h.count),
    }));
    t.deepEqual(viaGrpc, want, `gRPC ${JSON.stringify(body)}`);
  }
  t.true(cases.length > 0);
});

/** The few filter shapes the facet cases use, in the proto's form. */
function grpcFilter(f: unknown): unknown {
  const cond = (c: Record<string, any>) => {
    const m = c.match ?? {};
    const field: Record<string, unknown> = { key: c.key };
    if (m.value !== undefined) field.match = typeof m.value === 'boolean' ? { boolean: m.value } : typeof m.value === 'number' ? { integer: String(m.value) } : { keyword: m.value };
    if (m.any !== undefined) field.match = { keywords: { strings: m.any } };
    if (c.range) field.range = c.range;
    return { field };
  };
  const o = f as Record<string, any[]>;
  const out: Record<string, unknown> = {};
  for (const k of ['must', 'must_not', 'should']) if (o[k]) out[k] = o[k].map(cond);
  return out;
}

test('facet errors: no suitable index is a 400, limit 0 a 422, a missing key a 400; nothing is created', async (t) => {
  const C = 'facet_err';
  await api.ok(t, 'PUT', '/collections/{collection_name}', { params: { collection_name: C }, body: { vectors: { size: 2, distance: 'Dot' } } });
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: C }, query: { wait: 'true' }, body: { points: [{ id: 1, vector: [1, 0], payload: { a: 'x', f: 1.5, t: 'some text' } }] } });
  await index(t, C, 'f', 'float');
  await index(t, C, 't', 'text');
  for (const key of ['a', 'f', 't']) {
    await api.error(t, 400, 'POST', FACET, { params: { collection_name: C }, body: { key } }, new RegExp(`^Bad request: Index required but not found for "${key}"`));
  }
  await api.error(t, 422, 'POST', FACET, { params: { collection_name: C }, body: { key: 'a', limit: 0 } });
  await api.error(t, 400, 'POST', FACET, { params: { collection_name: C }, body: { limit: 3 } });
  await api.error(t, 404, 'POST', FACET, { params: { collection_name: 'no_such' }, body: { key: 'a' } });
  const err = await grpcClient.fail('Points', 'Facet', { collection_name: C, key: 'a' });
  t.is(err.code, 3, 'INVALID_ARGUMENT');
});

test('text index through REST: tokens, stopwords and the English stemmer, phrases; a language outside the contract refused', async (t) => {
  const C = 'fulltext';
  await api.ok(t, 'PUT', '/collections/{collection_name}', { params: { collection_name: C }, body: { vectors: { size: 2, distance: 'Dot' } } });
  const docs = ['The quick brown fox jumps', 'Quick thinking, brown FOXES!', 'a slow brown dog', 'jumping foxes are quick', 'brown quick fox'];
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: C },
    query: { wait: 'true' },
    body: { points: docs.map((body, i) => ({ id: i + 1, vector: [1, 0], payload: { body } })) },
  });
  const count = async (match: unknown) =>
    (await api.ok(t, 'POST', COUNT, { params: { collection_name: C }, body: { exact: true, filter: { must: [{ key: 'body', match }] } } })).count;
  // without an index: substrings of the whole query
  t.is(await count({ text: 'brown fox' }), 1);
  await api.error(
    t,
    400,
    'PUT',
    INDEX,
    { params: { collection_name: C }, body: { field_name: 'body', field_schema: { type: 'text', stopwords: { languages: ['german', 'klingon'] }, stemmer: { type: 'snowball', language: 'french' } } } },
    /unknown language "klingon"/,
  );
  const info0 = await api.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: C } });
  t.deepEqual(info0.payload_schema, {}, 'a refused index is not created');

  const schema = { type: 'text', tokenizer: 'word', stopwords: 'english', stemmer: { type: 'snowball', language: 'english' }, phrase_matching: true };
  await index(t, C, 'body', schema);
  const info = await api.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: C } });
  t.is(info.payload_schema.body.data_type, 'text');
  t.is(info.payload_schema.body.points, 5);
  t.like(info.payload_schema.body.params, { tokenizer: 'word', stopwords: 'english', phrase_matching: true, stemmer: { type: 'snowball', language: 'english' } });

  t.is(await count({ text: 'brown fox' }), 3, 'fox and foxes share a stem; order and case do not matter');
  t.is(await count({ text: 'the quick fox' }), 4, '"the" is a stopword');
  t.is(await count({ text: 'jump quickly' }), 2, 'jumps / jumping -> jump, quickly -> quick');
  t.is(await count({ text_any: 'dog jump' }), 3);
  t.is(await count({ phrase: 'brown fox' }), 2, 'adjacent, in order');
  t.is(await count({ phrase: 'fox brown' }), 0);

  // A snapshot carries the index: recovered into a fresh collection, the same token answers.
  const snap = await api.ok(t, 'POST', '/collections/{collection_name}/snapshots', { params: { collection_name: C }, query: { wait: 'true' } });
  t.true(await api.ok(t, 'DELETE', '/collections/{collection_name}', { params: { collection_name: C } }));
  const location = `file://${path.join(snapshotsPath, C, snap.name)}`;
  t.true(await api.ok(t, 'PUT', '/collections/{collection_name}/snapshots/recover', { params: { collection_name: C }, body: { location, priority: 'snapshot' } }));
  const after = await api.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: C } });
  t.deepEqual(after.payload_schema.body, info.payload_schema.body);
  t.is(await count({ text: 'brown fox' }), 3);
  t.is(await count({ phrase: 'brown fox' }), 2);
});

// ---------------------------------------------------------------------------------
// other languages

const SNOWBALL_DATA = 'https://github.com/snowballstem/snowball-data (voc.txt / output.txt)';
const NLTK = 'NLTK stopwords corpus, the reference\'s lists (https://www.nltk.org/nltk_data/)';
const DOC_INDEXING = 'https://qdrant.tech/documentation/concepts/indexing/#full-text-index';
const AUTHORED = 'the list Quiver wrote for the language (ts/shard/stopwords-authored.ts; not the reference\'s)';

interface LangCase {
  cite: string;
  what: string;
  schema: Record<string, unknown>;
  texts: string[];
  match: Record<string, string>;
  /** Ids (1-based positions in `texts`) that match. */
  expect: number[];
}

const LANG_CASES: LangCase[] = [
  {
    cite: `${SNOWBALL_DATA}; ${NLTK}`,
    what: 'french stemmer and stopwords: "les" dropped, impression / impressions share a stem',
    schema: { type: 'text', stopwords: 'french', stemmer: { type: 'snowball', language: 'french' } },
    texts: ['les impressions', 'une impression', 'contrariétés', 'les'],
    match: { text: 'les impression' },
    expect: [1, 2],
  },
  {
    cite: `${SNOWBALL_DATA}; ${NLTK}`,
    what: 'german: "und" dropped, steuer / steuern share a stem',
    schema: { type: 'text', stopwords: 'german', stemmer: { type: 'snowball', language: 'german' } },
    texts: ['Die Steuern und die Abgaben', 'steuer', 'Abgaben'],
    match: { text: 'und Steuer' },
    expect: [1, 2],
  },
  {
    cite: `${SNOWBALL_DATA}; ${NLTK}`,
    what: 'russian with the multilingual tokenizer: "и" dropped, задатка / задатки share a stem',
    schema: { type: 'text', tokenizer: 'multilingual', stopwords: 'russian', stemmer: { type: 'snowball', language: 'russian' } },
    texts: ['Он объявляет', 'и задатки', 'задатка'],
    match: { text: 'и задатки' },
    expect: [2, 3],
  },
  {
    cite: `${SNOWBALL_DATA}; ${NLTK}; https://qdrant.tech/documentation/concepts/filtering/#phrase-match`,
    what: 'spanish phrase: stems in order, stopwords not counted ("el" between them)',
    schema: { type: 'text', stopwords: 'spanish', stemmer: { type: 'snowball', language: 'spanish' }, phrase_matching: true },
    texts: ['podremos el gancho', 'gancho podremos', 'podría ver el gancho'],
    match: { phrase: 'podría ganchos' },
    expect: [1],
  },
  {
    cite: SNOWBALL_DATA,
    what: 'greek stemmer: βυθισμένα / βυθισμένες share a stem',
    schema: { type: 'text', stemmer: { type: 'snowball', language: 'greek' } },
    texts: ['βυθισμένα', 'καλεσμένο'],
    match: { text: 'βυθισμένες' },
    expect: [1],
  },
  {
    cite: 'the Arabic sample of the reference\'s stemmer crate (qdrant-rust-stemmers 1.2.2, test_data/voc_ar.txt, res_ar.txt)',
    what: 'arabic stemmer: two forms with the stem مساف',
    schema: { type: 'text', stemmer: { type: 'snowball', language: 'arabic' } },
    texts: ['بمسافتنا', 'فلمتربيه'],
    match: { text: 'فمسافتاه' },
    expect: [1],
  },
  {
    cite: 'Snowball Tamil stemmer; stems as the reference\'s crate (qdrant-rust-stemmers 1.2.2) gives them',
    what: 'tamil stemmer with the multilingual tokenizer: பள்ளிக்கு / பள்ளியில் share a stem',
    schema: { type: 'text', tokenizer: 'multilingual', stemmer: { type: 'snowball', language: 'tamil' } },
    texts: ['பள்ளிக்கு', 'வீட்டில்'],
    match: { text: 'பள்ளியில்' },
    expect: [1],
  },
  {
    cite: `${DOC_INDEXING}; stopwords-iso (the reference's source for Japanese)`,
    what: 'japanese stopwords with the multilingual tokenizer: a query of "の" alone matches nothing',
    schema: { type: 'text', tokenizer: 'multilingual', stopwords: 'japanese' },
    texts: ['東京の大学', '大学', 'の'],
    match: { text: 'の' },
    expect: [],
  },
  {
    cite: `${DOC_INDEXING}; ${NLTK}`,
    what: 'chinese stopwords with the multilingual tokenizer: 我们 and 的 dropped',
    schema: { type: 'text', tokenizer: 'multilingual', stopwords: 'chinese' },
    texts: ['我们的图书馆', '图书馆', '我们'],
    match: { text: '我们的图书馆' },
    expect: [1, 2],
  },
  {
    cite: `${DOC_INDEXING}; ${AUTHORED}`,
    what: 'azerbaijani stopwords: "bu" and "üçün" dropped, a query of them alone matches nothing',
    schema: { type: 'text', stopwords: 'azerbaijani' },
    texts: ['Mən bu kitabı sənin üçün aldım', 'kitabı', 'bu üçün'],
    match: { text: 'bu kitabı üçün' },
    expect: [1, 2],
  },
  {
    cite: `${DOC_INDEXING}; ${AUTHORED}`,
    what: 'tajik stopwords with phrase matching: "барои" and "ту" not counted between the words',
    schema: { type: 'text', stopwords: 'tajik', phrase_matching: true },
    texts: ['Ман китобро барои ту харидам', 'китобро харидам', 'харидам китобро'],
    match: { phrase: 'китобро харидам' },
    expect: [1, 2],
  },
  {
    cite: `${DOC_INDEXING}; ${AUTHORED}`,
    what: 'hinglish stopwords: romanized Hindi ("yeh", "nahi", "hai") and English ("the") words dropped',
    schema: { type: 'text', stopwords: { languages: ['hinglish'] } },
    texts: ['yeh movie nahi dekhi', 'the movie hai', 'dekhi'],
    match: { text: 'the movie hai nahi' },
    expect: [1, 2],
  },
  {
    cite: `${DOC_INDEXING} (stopwords: {languages, custom})`,
    what: 'several languages and custom words combine',
    schema: { type: 'text', stopwords: { languages: ['german', 'spanish'], custom: ['Quiver'] } },
    texts: ['der Hund y el gato', 'Hund', 'gato quiver'],
    match: { text: 'QUIVER y gato' },
    expect: [1, 3],
  },
  {
    cite: `${DOC_INDEXING} (lowercase: false)`,
    what: 'lowercase off: "Und" is not the listed "und"',
    schema: { type: 'text', lowercase: false, stopwords: 'german' },
    texts: ['Und so', 'und so'],
    match: { text: 'Und' },
    expect: [1],
  },
];

async function scrollIds(t: ExecutionContext, c: string, match: unknown): Promise<number[]> {
  const r = await api.ok(t, 'POST', '/collections/{collection_name}/points/scroll', {
    params: { collection_name: c },
    body: { limit: 100, with_payload: false, filter: { must: [{ key: 'body', match }] } },
  });
  return (r.points as Array<{ id: number }>).map((p) => p.id).sort((a, b) => a - b);
}

test('text index in other languages through REST: a table of settings, texts and queries; every case cited', async (t) => {
  for (const [i, c] of LANG_CASES.entries()) {
    const C = `lang_${i}`;
    await api.ok(t, 'PUT', '/collections/{collection_name}', { params: { collection_name: C }, body: { vectors: { size: 2, distance: 'Dot' } } });
    await api.ok(t, 'PUT', POINTS, {
      params: { collection_name: C },
      query: { wait: 'true' },
      body: { points: c.texts.map((body, j) => ({ id: j + 1, vector: [1, 0], payload: { body } })) },
    });
    await index(t, C, 'body', c.schema);
    t.deepEqual(await scrollIds(t, C, c.match), c.expect, `${c.what} (${c.cite})`);
    const info = await api.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: C } });
    t.like(info.payload_schema.body.params, c.schema, `${c.what}: the settings as given`);
    t.true(await api.ok(t, 'DELETE', '/collections/{collection_name}', { params: { collection_name: C } }));
  }
});

test('text index in other languages: the settings survive a snapshot recovery and a restart, and answer the same', async (t) => {
  const storage = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-lang-storage-'));
  const snaps = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-lang-snaps-'));
  const env = { SERVICE__STORAGE__STORAGE_PATH: storage, SERVICE__STORAGE__SNAPSHOTS_PATH: snaps };
  let node = await ContractClient.start(env);
  const C = 'lang_persist';
  const schema = { type: 'text', tokenizer: 'multilingual', stopwords: { languages: ['french', 'russian'], custom: ['quiver'] }, stemmer: { type: 'snowball', language: 'russian' }, phrase_matching: true };
  const texts = ['Он объявляет и объявляется', 'задатки quiver', 'les задатка'];
  const queries: Array<[unknown, number[]]> = [
    [{ text: 'и задатки' }, [2, 3]],
    [{ text: 'quiver объявляет' }, [1]],
    [{ phrase: 'объявляет объявляется' }, [1]],
    [{ text: 'и les quiver' }, []],
  ];
  try {
    await node.ok(t, 'PUT', '/collections/{collection_name}', { params: { collection_name: C }, body: { vectors: { size: 2, distance: 'Dot' } } });
    await node.ok(t, 'PUT', POINTS, {
      params: { collection_name: C },
      query: { wait: 'true' },
      body: { points: texts.map((body, j) => ({ id: j + 1, vector: [1, 0], payload: { body } })) },
    });
    await node.ok(t, 'PUT', INDEX, { params: { collection_name: C }, query: { wait: 'true' }, body: { field_name: 'body', field_schema: schema } });
    const ids = async (match: unknown) =>
      ((await node.ok(t, 'POST', '/collections/{collection_name}/points/scroll', { params: { collection_name: C }, body: { limit: 10, with_payload: false, filter: { must: [{ key: 'body', match }] } } })).points as Array<{ id: number }>)
        .map((p) => p.id)
        .sort((a, b) => a - b);
    const check = async (when: string) => {
      const info = await node.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: C } });
      t.like(info.payload_schema.body, { data_type: 'text', points: 3, params: schema }, when);
      for (const [m, want] of queries) t.deepEqual(await ids(m), want, `${when}: ${JSON.stringify(m)}`);
    };
    await check('as created');
    const snap = await node.ok(t, 'POST', '/collections/{collection_name}/snapshots', { params: { collection_name: C }, query: { wait: 'true' } });
    t.true(await node.ok(t, 'DELETE', '/collections/{collection_name}', { params: { collection_name: C } }));
    const location = `file://${path.join(snaps, C, snap.name)}`;
    t.true(await node.ok(t, 'PUT', '/collections/{collection_name}/snapshots/recover', { params: { collection_name: C }, body: { location, priority: 'snapshot' } }));
    await check('recovered from a snapshot');
    await node.stop();
    node = await ContractClient.start(env);
    await check('after a restart');
  } finally {
    await node.stop();
    await fs.rm(storage, { recursive: true, force: true });
    await fs.rm(snaps, { recursive: true, force: true });
  }
});

test('text index in other languages through gRPC CreateFieldIndex: the same settings and matches as over REST; a language outside the contract is INVALID_ARGUMENT', async (t) => {
  const C = 'lang_grpc';
  await api.ok(t, 'PUT', '/collections/{collection_name}', { params: { collection_name: C }, body: { vectors: { size: 2, distance: 'Dot' } } });
  const texts = ['Die Steuern und die Abgaben', 'steuer', 'Abgaben'];
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: C }, query: { wait: 'true' }, body: { points: texts.map((body, j) => ({ id: j + 1, vector: [1, 0], payload: { body } })) } });
  const err = await grpcClient.fail('Points', 'CreateFieldIndex', {
    collection_name: C,
    field_name: 'body',
    wait: true,
    field_type: 'FieldTypeText',
    field_index_params: { text_index_params: { tokenizer: 'Word', stopwords: { languages: ['klingon'] } } },
  });
  t.is(err.code, 3, 'INVALID_ARGUMENT');
  t.regex(err.details, /unknown language "klingon"/);
  await grpcClient.call('Points', 'CreateFieldIndex', {
    collection_name: C,
    field_name: 'body',
    wait: true,
    field_type: 'FieldTypeText',
    field_index_params: { text_index_params: { tokenizer: 'Word', stopwords: { languages: ['tg', 'german', 'azerbaijani', 'hi-en'], custom: ['abgaben'] }, stemmer: { snowball: { language: 'german' } } } },
  });
  const info = await api.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: C } });
  t.like(info.payload_schema.body.params, { stopwords: { languages: ['azerbaijani', 'german', 'hinglish', 'tajik'], custom: ['abgaben'] }, stemmer: { type: 'snowball', language: 'german' } });
  // cited as the REST table's german case (snowball-data, NLTK)
  t.deepEqual(await scrollIds(t, C, { text: 'und Steuer' }), [1, 2]);
  // the lists Quiver wrote (ts/shard/stopwords-authored.ts), by code and by name
  t.deepEqual(await scrollIds(t, C, { text: 'Steuer və ва hai' }), [1, 2], 'azerbaijani "və", tajik "ва", hinglish "hai" dropped');
  t.deepEqual(await scrollIds(t, C, { text: 'Abgaben' }), [], 'a custom stopword: the query has no token left');
});
