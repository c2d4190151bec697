/**
 * `npm run bench:rest -- --hybrid [--quick] [--second sparse|dense] [--n N] [--queries N] [--concurrency 8] [--reps 3] [--limit 100] [--tag NAME]`
 *
 * The hybrid-query cost benchmark (issue 18): one collection with a named dense vector
 * `a` (128-d Cosine, Gaussian-mixture data generated here from a fixed seed, HNSW m=16,
 * ef_construct=100) and a second vector `b`: by default a sparse vector (term weights of
 * 40 terms a document drawn from a Zipf law over 30,000 terms; queries of 6 terms), the
 * dense + keyword setup of most hybrid applications; with `--second dense` a 64-d Dot
 * dense vector. Through REST at `concurrency` requests in flight it times
 *
 *  - prefetch A alone: `{query: qa, using: "a", limit: 100}`,
 *  - prefetch B alone: `{query: qb, using: "b", limit: 100}`,
 *  - the hybrid query: `{prefetch: [A, B], query: {fusion: "rrf"}, limit: 10}`,
 *
 * each the best of `reps` passes over the same queries after a warm-up pass, and reports
 * the cost ratio hybrid / (A + B) in wall time per query (the server is saturated at
 * this concurrency, so wall time per query is its cost), which must stay at most 1.5.
 * Results go to bench/results/rest-hybrid-<tag>.{json,md}.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { REPO_ROOT, gaussian, mulberry32, today } from '../engine/common';
import { coresAvailable, percentile } from '../engine/measure';
import { RestClient, makeClient, runConcurrent } from './client';
import { QuiverServer } from './server';

const COLLECTION = 'bench_hybrid';
const DIM_A = 128;
const DIM_B = 64;
const CLUSTERS = 64;
const BOUND = 1.5;

interface HybridOptions {
  n: number;
  queries: number;
  concurrency: number;
  reps: number;
  /** Limit of each prefetch (and of each query run alone). */
  limit: number;
  /** What the second prefetch searches: a sparse vector (default) or a second dense one. */
  second: 'sparse' | 'dense';
  tag: string;
  resultsDir: string;
}

function parse(argv: string[]): HybridOptions {
  const quick = argv.includes('--quick');
  const o: HybridOptions = { n: quick ? 20_000 : 100_000, queries: quick ? 300 : 1000, concurrency: 8, reps: quick ? 2 : 3, limit: 100, second: 'sparse', tag: today(), resultsDir: path.join(REPO_ROOT, 'bench', 'results') };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = () => {
      const x = argv[++i];
      if (x === undefined) throw new Error(`${a} needs a value`);
      return x;
    };
    const int = (name: string) => {
      const x = Number(v());
      if (!Number.isSafeInteger(x) || x < 1) throw new Error(`${name}: expected a positive integer`);
      return x;
    };
    if (a === '--quick') continue;
    else if (a === '--n') o.n = int(a);
    else if (a === '--queries') o.queries = int(a);
    else if (a === '--concurrency') o.concurrency = int(a);
    else if (a === '--reps') o.reps = int(a);
    else if (a === '--limit') o.limit = int(a);
    else if (a === '--tag') o.tag = v();
    else if (a === '--second') {
      const x = v();
      if (x !== 'sparse' && x !== 'dense') throw new Error('--second: sparse or dense');
      o.second = x;
    }
    else throw new Error(`unknown option ${a}; usage: npm run bench:rest -- --hybrid [--quick] [--n N] [--queries N] [--concurrency 8] [--reps 3] [--limit 100] [--tag NAME]`);
  }
  return o;
}

/** `count` vectors of `dim` floats around `CLUSTERS` random centres. */
function mixture(seed: number, count: number, dim: number): number[][] {
  const rand = mulberry32(seed);
  const g = gaussian(rand);
  const centres = Array.from({ length: CLUSTERS }, () => Array.from({ length: dim }, () => g() * 2));
  return Array.from({ length: count }, () => {
    const c = centres[Math.floor(rand() * CLUSTERS)];
    return c.map((x) => Math.fround(x + g() * 0.6));
  });
}

const VOCABULARY = 30_000;
const DOC_TERMS = 40;
const QUERY_TERMS = 6;

/** `count` sparse vectors of `terms` distinct term ids drawn from a Zipf law (s = 1.1) over VOCABULARY, with weights in (0.1, 1]. */
function zipfSparse(seed: number, count: number, terms: number): Array<{ indices: number[]; values: number[] }> {
  const rand = mulberry32(seed);
  const cdf = new Float64Array(VOCABULARY);
  let sum = 0;
  for (let r = 0; r < VOCABULARY; r++) cdf[r] = sum += 1 / Math.pow(r + 1, 1.1);
  const draw = () => {
    const x = rand() * sum;
    let lo = 0;
    let hi = VOCABULARY - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  return Array.from({ length: count }, () => {
    const set = new Set<number>();
    while (set.size < terms) set.add(draw());
    const indices = [...set].sort((x, y) => x - y);
    return { indices, values: indices.map(() => Number((0.1 + 0.9 * rand()).toFixed(4))) };
  });
}

const short = (v: number[]) => `[${v.map((x) => Number(x.toPrecision(6))).join(',')}]`;

interface Row {
  name: string;
  qps: number;
  msPerQuery: number;
  p50Ms: number;
  p99Ms: number;
  meanHits: number;
}

async function pass(client: RestClient, bodies: Buffer[], concurrency: number): Promise<{ seconds: number; lat: Float64Array; hits: number }> {
  let hits = 0;
  const t = await runConcurrent(bodies.length, concurrency, async (i) => {
    const r = await client.request('POST', `/collections/${COLLECTION}/points/query`, bodies[i]);
    if (r.status !== 200) throw new Error(`query: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
    hits += (JSON.parse(r.body.toString('utf8')) as { result: { points: unknown[] } }).result.points.length;
  });
  return { seconds: t.seconds, lat: t.latUs, hits };
}

async function measure(client: RestClient, name: string, bodies: Buffer[], o: HybridOptions): Promise<Row> {
  await pass(client, bodies, o.concurrency); // warm-up
  let best: { seconds: number; lat: Float64Array; hits: number } | null = null;
  for (let r = 0; r < o.reps; r++) {
    const p = await pass(client, bodies, o.concurrency);
    if (best === null || p.seconds < best.seconds) best = p;
  }
  const b = best!;
  const row = {
    name,
    qps: Math.round(bodies.length / b.seconds),
    msPerQuery: (b.seconds * 1000) / bodies.length,
    p50Ms: percentile(b.lat, 50) / 1000,
    p99Ms: percentile(b.lat, 99) / 1000,
    meanHits: b.hits / bodies.length,
  };
  console.log(`  ${name}: ${row.qps} queries/s, ${row.msPerQuery.toFixed(3)} ms/query, p50 ${row.p50Ms.toFixed(2)} ms, p99 ${row.p99Ms.toFixed(2)} ms, ${row.meanHits.toFixed(1)} hits`);
  return row;
}

export async function runHybridBench(argv: string[]): Promise<void> {
  const o = parse(argv);
  const cores = await coresAvailable();
  const sparse = o.second === 'sparse';
  const bText = sparse ? `b: sparse, ${DOC_TERMS} Zipf terms of ${VOCABULARY.toLocaleString('en-US')}` : `b: ${DIM_B}-d Dot`;
  console.log(`REST hybrid benchmark: ${o.n.toLocaleString('en-US')} points (a: ${DIM_A}-d Cosine, ${bText}), ${o.queries} queries, prefetch limit ${o.limit}, concurrency ${o.concurrency}, best of ${o.reps}`);
  const va = mixture(1, o.n + o.queries, DIM_A);
  const vb = sparse ? [] : mixture(2, o.n + o.queries, DIM_B);
  const sb = sparse ? [...zipfSparse(2, o.n, DOC_TERMS), ...zipfSparse(3, o.queries, QUERY_TERMS)] : [];
  const bJson = (i: number) => (sparse ? JSON.stringify(sb[i]) : short(vb[i]));
  const server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {} });
  const client = makeClient('raw', server.url, o.concurrency);
  try {
    await client.json('PUT', `/collections/${COLLECTION}`, {
      vectors: sparse ? { a: { size: DIM_A, distance: 'Cosine' } } : { a: { size: DIM_A, distance: 'Cosine' }, b: { size: DIM_B, distance: 'Dot' } },
      ...(sparse ? { sparse_vectors: { b: {} } } : {}),
      hnsw_config: { m: 16, ef_construct: 100 },
      // 1 KiB: every point of both vectors ends up in an HNSW graph, whatever --n is.
      optimizers_config: { indexing_threshold: 1 },
    });
    const t0 = Date.now();
    for (let from = 0; from < o.n; from += 1000) {
      const parts: string[] = [];
      for (let i = from; i < Math.min(o.n, from + 1000); i++) parts.push(`{"id":${i},"vector":{"a":${short(va[i])},"b":${bJson(i)}}}`);
      const r = await client.request('PUT', `/collections/${COLLECTION}/points?wait=true`, Buffer.from(`{"points":[${parts.join(',')}]}`));
      if (r.status !== 200) throw new Error(`upsert: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
    }
    console.log(`  upserted in ${((Date.now() - t0) / 1000).toFixed(1)} s; waiting for both HNSW indexes`);
    const deadline = Date.now() + 30 * 60_000;
    let last = '';
    for (;;) {
      const ci = await client.json<{ status: string; indexed_vectors_count: number }>('GET', `/collections/${COLLECTION}`);
      if (ci.status === 'green' && ci.indexed_vectors_count >= (sparse ? 1 : 2) * o.n) break;
      const now = `${ci.status} ${ci.indexed_vectors_count}`;
      if (now !== last) console.log(`    ${now}`);
      last = now;
      if (Date.now() > deadline) throw new Error(`collection not indexed in time: ${JSON.stringify(ci)}`);
      await new Promise((r) => setTimeout(r, 1000));
    }
    const greenSec = (Date.now() - t0) / 1000;
    console.log(`  green with every dense vector indexed ${greenSec.toFixed(1)} s after the first upsert`);

    const qa = va.slice(o.n);
    const qb = (i: number) => bJson(o.n + i);
    const A = (i: number) => `{"query":${short(qa[i])},"using":"a","limit":${o.limit}}`;
    const B = (i: number) => `{"query":${qb(i)},"using":"b","limit":${o.limit}}`;
    const idx = Array.from({ length: o.queries }, (_, i) => i);
    const rows = [
      await measure(client, `prefetch A alone (a, limit ${o.limit})`, idx.map((i) => Buffer.from(A(i))), o),
      await measure(client, `prefetch B alone (b ${sparse ? 'sparse' : 'dense'}, limit ${o.limit})`, idx.map((i) => Buffer.from(B(i))), o),
      await measure(client, `hybrid: A ${o.limit} + B ${o.limit} + RRF, limit 10`, idx.map((i) => Buffer.from(`{"prefetch":[${A(i)},${B(i)}],"query":{"fusion":"rrf"},"limit":10}`)), o),
    ];
    const ratio = rows[2].msPerQuery / (rows[0].msPerQuery + rows[1].msPerQuery);
    const holds = ratio <= BOUND;
    console.log(`  hybrid / (A + B) = ${ratio.toFixed(3)} (must be <= ${BOUND}: ${holds ? 'holds' : 'FAILS'})`);

    const result = { date: new Date().toISOString(), host: { cpus: os.cpus().length, coresAvailable: cores, model: os.cpus()[0]?.model ?? 'unknown' }, options: o, greenSeconds: greenSec, rows, ratio, bound: BOUND, holds };
    fs.mkdirSync(o.resultsDir, { recursive: true });
    const base = path.join(o.resultsDir, `rest-hybrid-${o.tag}`);
    fs.writeFileSync(`${base}.json`, JSON.stringify(result, null, 2) + '\n');
    const md = [
      `# REST hybrid query cost (${o.tag})`,
      '',
      `\`npm run bench:rest -- --hybrid${argv.length > 0 ? ' ' + argv.join(' ') : ''}\` on ${os.cpus()[0]?.model ?? 'unknown'} (${cores} cores available).`,
      sparse
        ? `${o.n.toLocaleString('en-US')} points with a named dense vector (a: ${DIM_A}-d Cosine, Gaussian mixture of ${CLUSTERS} clusters, HNSW m=16, ef_construct=100) and a sparse vector (b: ${DOC_TERMS} distinct terms a document drawn from a Zipf law, s = 1.1, over ${VOCABULARY.toLocaleString('en-US')} terms, weights in (0.1, 1]; queries of ${QUERY_TERMS} terms, exact top-k from the inverted index);`
        : `${o.n.toLocaleString('en-US')} points with two named dense vectors (a: ${DIM_A}-d Cosine, b: ${DIM_B}-d Dot, Gaussian mixture of ${CLUSTERS} clusters), HNSW m=16, ef_construct=100 on both;`,
      `${o.queries} queries per pass at ${o.concurrency} in flight, best of ${o.reps} passes after a warm-up pass.`,
      '',
      '| query | queries/s | ms/query | p50 ms | p99 ms | hits |',
      '|---|---:|---:|---:|---:|---:|',
      ...rows.map((r) => `| ${r.name} | ${r.qps} | ${r.msPerQuery.toFixed(3)} | ${r.p50Ms.toFixed(2)} | ${r.p99Ms.toFixed(2)} | ${r.meanHits.toFixed(1)} |`),
      '',
      `**hybrid / (A + B) = ${ratio.toFixed(3)}** (ms per query at concurrency ${o.concurrency}; must be at most ${BOUND}: ${holds ? 'holds' : 'does not hold'}).`,
      '',
    ].join('\n');
    fs.writeFileSync(`${base}.md`, md);
    console.log(`  wrote ${base}.{json,md}`);
    if (!holds) process.exitCode = 1;
  } finally {
    client.close();
    await server.stop();
  }
}
