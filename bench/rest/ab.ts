/**
 * `npm run bench:ab -- --base <checkout> [--n 20000] [--rounds 5] [--queries 2000] [--dim 128]`
 *
 * Two builds side by side on one machine: the server of another built checkout
 * (`--base`, e.g. a `git worktree` of an older commit with `npx tsc` run in it) and this
 * checkout's, each a single node. Alternating between them in every round (the order
 * flips each round, so drift of a shared, noisy machine falls on both):
 *
 *  - upsert: `n` random points (seeded) in batches of 1000, one client, wait=true, into a
 *    fresh collection (Cosine, m=16, ef_construct=100), dropped afterwards;
 *  - query: `queries` POST /points/query (limit 10, hnsw_ef 64) at 8 in flight on a
 *    collection of `n` points built once per server (indexed before the first round).
 *
 * Reports per round points/s and queries/s, the server's CPU per request, and the
 * medians' ratios this/base. Writes bench/results/ab-<date>[-<tag>].md (`--tag`).
 *
 * `--bodies rest`: the upsert bodies are built once, as `bench:rest` builds them (float32
 * values written as JSON.stringify writes them, i.e. as doubles of up to 17 digits; no
 * payload), and sent as ready bytes, so the client's JSON work stays out of the timed
 * window; `--bodies ab` (the default) sends `{"i": n}` payloads and 5-decimal values,
 * serialised per request. `--queries 0` skips the query passes.
 */
import * as fs from 'fs';
import * as path from 'path';

import { REPO_ROOT } from '../engine/common';
import { makeClient, runConcurrent, type RestClient } from './client';
import { QuiverServer, cpuDelta, type ServerCpu } from './server';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? undefined : process.argv[i + 1];
}

const BASE = arg('base');
const N = Number(arg('n') ?? 20000);
const ROUNDS = Number(arg('rounds') ?? 5);
const QUERIES = Number(arg('queries') ?? 2000);
const DIM = Number(arg('dim') ?? 128);
const BODIES = arg('bodies') ?? 'ab';
const TAG = arg('tag');
const BATCH = 1000;
if (BODIES !== 'ab' && BODIES !== 'rest') throw new Error('--bodies: ab or rest');

/** xorshift32: the same vectors for both servers. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x1_0000_0000 - 0.5;
  };
}

function vectors(n: number, seed: number): number[][] {
  const r = rng(seed);
  return Array.from({ length: n }, () => Array.from({ length: DIM }, () => Number(r().toFixed(5))));
}

interface Side {
  name: 'base' | 'this';
  server: QuiverServer;
  client: RestClient;
  upsert: number[];
  query: number[];
  upsertCpuUs: number[];
  queryCpuUs: number[];
}

function cpuSec(d: ServerCpu): number {
  return d.mainSec + d.otherSec;
}

async function createCollection(c: RestClient, name: string): Promise<void> {
  await c.json('PUT', `/collections/${name}`, { vectors: { size: DIM, distance: 'Cosine' }, hnsw_config: { m: 16, ef_construct: 100 } });
}

/** `bench:rest`'s upsert bodies: float32 values as JSON.stringify writes them, no payload (see the header). */
function restBodies(n: number, seed: number): Buffer[] {
  const r = rng(seed);
  const out: Buffer[] = [];
  const v = new Float32Array(DIM);
  for (let at = 0; at < n; at += BATCH) {
    const parts: string[] = [];
    for (let i = at; i < Math.min(n, at + BATCH); i++) {
      for (let j = 0; j < DIM; j++) v[j] = (r() + r() + r()) * 0.3;
      parts.push(`{"id":${i},"vector":${JSON.stringify(Array.from(v))}}`);
    }
    out.push(Buffer.from(`{"points":[${parts.join(',')}]}`));
  }
  return out;
}

let bodies: Buffer[] | null = null;

async function fill(c: RestClient, name: string, data: number[][]): Promise<number> {
  const t0 = process.hrtime.bigint();
  if (bodies !== null) {
    for (const b of bodies) {
      const r = await c.request('PUT', `/collections/${name}/points?wait=true`, b);
      if (r.status !== 200) throw new Error(`upsert: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
    }
    return Number(process.hrtime.bigint() - t0) / 1e9;
  }
  for (let i = 0; i < data.length; i += BATCH) {
    const points = data.slice(i, i + BATCH).map((vector, k) => ({ id: i + k, vector, payload: { i: i + k } }));
    await c.json('PUT', `/collections/${name}/points?wait=true`, { points });
  }
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

async function waitGreen(c: RestClient, name: string): Promise<void> {
  for (;;) {
    const info = await c.json<{ status: string }>('GET', `/collections/${name}`);
    if (info.status === 'green') return;
    await new Promise((r) => setTimeout(r, 200));
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

async function main(): Promise<void> {
  if (!BASE) throw new Error('--base <checkout> is required (a built checkout to compare with)');
  const data = vectors(N, 7);
  const queries = vectors(QUERIES, 11);
  if (BODIES === 'rest') bodies = restBodies(N, 13);
  const sides: Side[] = [];
  for (const [name, root] of [
    ['base', path.resolve(BASE)],
    ['this', REPO_ROOT],
  ] as const) {
    const server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {}, root });
    sides.push({ name, server, client: makeClient('http', server.url, 16), upsert: [], query: [], upsertCpuUs: [], queryCpuUs: [] });
  }
  try {
    for (const s of sides) {
      await createCollection(s.client, 'q');
      // Also the upsert path's warm-up; the query passes need the index built.
      await fill(s.client, 'q', data);
      if (QUERIES > 0) await waitGreen(s.client, 'q');
      // Warm-up: V8 optimises the request path.
      if (QUERIES > 0) await runConcurrent(QUERIES, 8, (i) => s.client.json('POST', '/collections/q/points/query', { query: queries[i], limit: 10, params: { hnsw_ef: 64 } }).then(() => undefined));
    }
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? sides : [...sides].reverse();
      for (const s of order) {
        const name = `u${round}`;
        await createCollection(s.client, name);
        const c0 = s.server.cpu()!;
        const secs = await fill(s.client, name, data);
        const c1 = s.server.cpu()!;
        s.upsert.push(N / secs);
        s.upsertCpuUs.push((cpuSec(cpuDelta(c0, c1)!) * 1e6) / (N / BATCH));
        await s.client.json('DELETE', `/collections/${name}`);
      }
      for (const s of QUERIES > 0 ? order : []) {
        const c0 = s.server.cpu()!;
        const t = await runConcurrent(QUERIES, 8, (i) => s.client.json('POST', '/collections/q/points/query', { query: queries[i], limit: 10, params: { hnsw_ef: 64 } }).then(() => undefined));
        const c1 = s.server.cpu()!;
        s.query.push(QUERIES / t.seconds);
        s.queryCpuUs.push((cpuSec(cpuDelta(c0, c1)!) * 1e6) / QUERIES);
      }
      console.log(`round ${round + 1}: ` + sides.map((s) => `${s.name} upsert ${s.upsert[round].toFixed(0)} pts/s, query ${(s.query[round] ?? 0).toFixed(0)} q/s`).join('; '));
    }
  } finally {
    for (const s of sides) {
      s.client.close();
      await s.server.stop();
    }
  }
  const [base, mine] = sides;
  const row = (what: string, a: number[], b: number[], unit: string, digits = 0) =>
    `| ${what} | ${median(a).toFixed(digits)} ${unit} | ${median(b).toFixed(digits)} ${unit} | ${(median(b) / median(a)).toFixed(3)} |`;
  const md = [
    `# Two builds side by side (${new Date().toISOString().slice(0, 10)})`,
    '',
    `\`npm run bench:ab -- --base ${BASE} --n ${N} --rounds ${ROUNDS} --queries ${QUERIES} --bodies ${BODIES}${TAG ? ` --tag ${TAG}` : ''}\`; ${DIM}-d random vectors, single node, one machine (2 vCPUs, shared: the client and both servers run on it). Medians of ${ROUNDS} alternating rounds. Upsert bodies: ${BODIES === 'rest' ? "bench:rest's (float32 values as JSON.stringify writes them, no payload), sent as ready bytes" : '`{"i": n}` payloads, 5-decimal values, serialised per request'}.`,
    '',
    '| measure | base | this | this / base |',
    '|---|---|---|---|',
    row('upsert, batches of 1000, wait=true', base.upsert, mine.upsert, 'points/s'),
    row('server CPU per upsert batch', base.upsertCpuUs, mine.upsertCpuUs, 'µs'),
    ...(QUERIES > 0 ? [row('query, 8 in flight', base.query, mine.query, 'queries/s'), row('server CPU per query', base.queryCpuUs, mine.queryCpuUs, 'µs', 1)] : []),
    '',
    `Median of the per-round upsert ratios this/base: ${median(base.upsert.map((b, i) => mine.upsert[i] / b)).toFixed(3)}; this faster in ${base.upsert.filter((b, i) => mine.upsert[i] > b).length} of ${ROUNDS} rounds.`,
    '',
    'Per round (base / this): ' + base.upsert.map((_, i) => `upsert ${base.upsert[i].toFixed(0)}/${mine.upsert[i].toFixed(0)}` + (QUERIES > 0 ? `, query ${base.query[i].toFixed(0)}/${mine.query[i].toFixed(0)}` : '') + `, CPU per batch ${base.upsertCpuUs[i].toFixed(0)}/${mine.upsertCpuUs[i].toFixed(0)} µs`).join('; '),
    '',
  ].join('\n');
  console.log(md);
  const out = path.join(REPO_ROOT, 'bench', 'results', `ab-${new Date().toISOString().slice(0, 10)}${TAG ? `-${TAG}` : ''}.md`);
  fs.writeFileSync(out, md);
  console.log(`written ${path.relative(REPO_ROOT, out)}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
