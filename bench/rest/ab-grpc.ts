/**
 * `npm run bench:ab-grpc -- --base <checkout> [--n 20000] [--rounds 6] [--queries 4000] [--h2load-seconds 2]`
 *
 * Two builds' gRPC API side by side, as bench:ab does for REST: the server of another
 * built checkout (`--base`: a copy of an older commit with `npx tsc` run in it, its
 * `node_modules` and native addon in place) and this checkout's, each a single node with
 * its gRPC port on, the same collection of `n` random 128-d points (Cosine, m 16,
 * ef_construct 100; loaded through REST, indexed before the first round). Every round
 * measures, on each server in turn (the order flips each round, so drift on a shared
 * machine falls on both):
 *
 *  - `Points/Query` (limit 10, hnsw_ef 64), `queries` calls at 8 in flight on one HTTP/2
 *    connection, through node:http2 directly (bench/rest/grpc.ts H2Channels, answers
 *    decoded): calls/s and the server's CPU per call, main thread and other threads;
 *  - the same through h2load (C) on one connection with 8 streams, one query, for
 *    `--h2load-seconds` (when h2load is installed);
 *  - `Qdrant/HealthCheck` at 8 in flight (the floor of a call: wrapper, codec, HTTP/2);
 *  - REST `POST /points/query` at 8 in flight (raw HTTP/1.1 client): a reference that the
 *    gRPC changes do not touch.
 *
 * Reports medians and the ratios this/base; writes bench/results/ab-grpc-<tag>.md.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { REPO_ROOT, today } from '../engine/common';
import { makeClient, runConcurrent, type RestClient } from './client';
import { H2Channels, encodeHealth, encodeQuery } from './grpc';
import { findH2load, grpcFrame, runH2load, writeBody } from './h2load';
import { QuiverServer, cpuDelta, freePort, type ServerCpu } from './server';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? undefined : process.argv[i + 1];
}

const BASE = arg('base');
const N = Number(arg('n') ?? 20000);
const ROUNDS = Number(arg('rounds') ?? 6);
const QUERIES = Number(arg('queries') ?? 4000);
const H2LOAD_SECONDS = Number(arg('h2load-seconds') ?? 2);
const TAG = arg('tag') ?? today();
const DIM = 128;
const C = 8;

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

function vectors(n: number, seed: number): Float32Array[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => Float32Array.from({ length: DIM }, () => r()));
}

type Measure = 'grpcQuery' | 'h2loadQuery' | 'health' | 'restQuery';

interface Sample {
  qps: number;
  mainUs: number;
  otherUs: number;
}

interface Side {
  name: 'base' | 'this';
  server: QuiverServer;
  grpcPort: number;
  rest: RestClient;
  grpc: H2Channels;
  samples: Record<Measure, Sample[]>;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function sample(count: number, seconds: number, d: ServerCpu | null): Sample {
  return { qps: count / seconds, mainUs: d ? (d.mainSec / count) * 1e6 : NaN, otherUs: d ? (d.otherSec / count) * 1e6 : NaN };
}

async function main(): Promise<void> {
  if (!BASE) throw new Error('--base <checkout> is required (a built checkout to compare with)');
  const data = vectors(N, 7);
  const queries = vectors(1000, 11);
  const restBodies = queries.map((q) => Buffer.from(JSON.stringify({ query: Array.from(q), limit: 10, params: { hnsw_ef: 64 } })));
  const grpcBodies = queries.map((q) => encodeQuery('q', q, 10, 64));
  const health = encodeHealth();
  const h2 = findH2load();
  const loadStart = os.loadavg().map((x) => x.toFixed(2));
  const sides: Side[] = [];
  for (const [name, root] of [
    ['base', path.resolve(BASE)],
    ['this', REPO_ROOT],
  ] as const) {
    const grpcPort = await freePort();
    const server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: { SERVICE__SERVICE__GRPC_PORT: String(grpcPort) }, root });
    sides.push({
      name,
      server,
      grpcPort,
      rest: makeClient('raw', server.url, C),
      grpc: new H2Channels(`127.0.0.1:${grpcPort}`, 'shared'),
      samples: { grpcQuery: [], h2loadQuery: [], health: [], restQuery: [] },
    });
  }
  const bodyFile = 'bin' in h2 ? writeBody(path.join(sides[1].server.dir, 'h2load'), 'query.grpc', grpcFrame(grpcBodies[0])) : null;
  let answerBytes = 0;
  try {
    for (const s of sides) {
      await s.rest.json('PUT', '/collections/q', { vectors: { size: DIM, distance: 'Cosine' }, hnsw_config: { m: 16, ef_construct: 100 } });
      for (let i = 0; i < N; i += 1000) {
        const points = data.slice(i, i + 1000).map((v, k) => ({ id: i + k, vector: Array.from(v) }));
        await s.rest.json('PUT', '/collections/q/points?wait=true', { points });
      }
      for (;;) {
        if ((await s.rest.json<{ status: string }>('GET', '/collections/q')).status === 'green') break;
        await new Promise((r) => setTimeout(r, 200));
      }
      await s.grpc.connect(1);
      answerBytes = 5 + (await s.grpc.call('/qdrant.Points/Query', grpcBodies[0], 0)).length;
      // Warm-up: V8 optimises both request paths.
      for (let w = 0; w < 3; w++) {
        await runConcurrent(QUERIES, C, (i, lane) => s.grpc.call('/qdrant.Points/Query', grpcBodies[i % 1000], lane).then(() => undefined));
        await runConcurrent(QUERIES, C, (i, lane) => s.grpc.call('/qdrant.Qdrant/HealthCheck', health, lane).then(() => undefined));
        await runConcurrent(QUERIES, C, (i) => s.rest.request('POST', '/collections/q/points/query', restBodies[i % 1000]).then(() => undefined));
      }
    }
    const timed = async (s: Side, count: number, job: (i: number, lane: number) => Promise<unknown>): Promise<Sample> => {
      const c0 = s.server.cpu();
      const t = await runConcurrent(count, C, async (i, lane) => {
        await job(i, lane);
      });
      return sample(count, t.seconds, cpuDelta(c0, s.server.cpu()));
    };
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? sides : [...sides].reverse();
      for (const s of order) {
        s.samples.grpcQuery.push(
          await timed(s, QUERIES, async (i, lane) => {
            const b = await s.grpc.call('/qdrant.Points/Query', grpcBodies[i % 1000], lane);
            if (b.length < 100) throw new Error(`a Query answer of ${b.length} bytes`);
          }),
        );
        if (bodyFile !== null) {
          const c0 = s.server.cpu();
          const h = await runH2load({ url: `http://127.0.0.1:${s.grpcPort}/qdrant.Points/Query`, bodyFile, contentType: 'application/grpc', grpc: true, clients: 1, streams: C, seconds: H2LOAD_SECONDS });
          if (Math.abs(h.bodyBytesPerRequest - answerBytes) > 0.01) throw new Error(`h2load: ${h.bodyBytesPerRequest} answer bytes per call, expected ${answerBytes}`);
          s.samples.h2loadQuery.push(sample(h.requests, h.seconds, cpuDelta(c0, s.server.cpu())));
        }
        s.samples.health.push(await timed(s, QUERIES, (_i, lane) => s.grpc.call('/qdrant.Qdrant/HealthCheck', health, lane)));
        s.samples.restQuery.push(
          await timed(s, QUERIES, async (i) => {
            const r = await s.rest.request('POST', '/collections/q/points/query', restBodies[i % 1000]);
            if (r.status !== 200) throw new Error(`REST query: HTTP ${r.status}`);
          }),
        );
      }
      console.log(
        `round ${round + 1}: ` +
          sides.map((s) => `${s.name} gRPC ${s.samples.grpcQuery[round].qps.toFixed(0)} q/s (main ${s.samples.grpcQuery[round].mainUs.toFixed(0)} µs), REST ${s.samples.restQuery[round].qps.toFixed(0)} q/s`).join('; '),
      );
    }
  } finally {
    for (const s of sides) {
      s.rest.close();
      s.grpc.close();
      await s.server.stop();
    }
  }
  const [base, mine] = sides;
  const names: Record<Measure, string> = {
    grpcQuery: '`Points/Query`, node:http2 client, 1 connection, 8 in flight',
    h2loadQuery: '`Points/Query`, h2load, 1 connection, 8 streams (one query)',
    health: '`Qdrant/HealthCheck`, node:http2 client, 8 in flight',
    restQuery: 'REST `POST /points/query`, 8 in flight (reference)',
  };
  const L = [
    `# gRPC API, two builds side by side (${TAG})`,
    '',
    `\`npm run bench:ab-grpc -- --base ${BASE} --n ${N} --rounds ${ROUNDS} --queries ${QUERIES}\`: ${N.toLocaleString('en-US')} random ${DIM}-d points, single node, one machine (${os.cpus().length} vCPUs, shared: the clients and both servers run on it; load average ${loadStart.join(' ')} at start, ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} at end). ` +
      `Medians of ${ROUNDS} alternating rounds; server CPU per call from /proc (main thread; other threads: engine pool, GC helpers).`,
    '',
    '| measure | base calls/s | this calls/s | this / base | base server CPU µs/call main / other | this server CPU µs/call main / other | this / base (main + other) |',
    '|---|---:|---:|---:|---:|---:|---:|',
  ];
  for (const m of Object.keys(names) as Measure[]) {
    const a = base.samples[m];
    const b = mine.samples[m];
    if (a.length === 0) continue;
    const q = (xs: Sample[]) => median(xs.map((x) => x.qps));
    const main = (xs: Sample[]) => median(xs.map((x) => x.mainUs));
    const other = (xs: Sample[]) => median(xs.map((x) => x.otherUs));
    const total = (xs: Sample[]) => median(xs.map((x) => x.mainUs + x.otherUs));
    L.push(
      `| ${names[m]} | ${q(a).toFixed(0)} | ${q(b).toFixed(0)} | ${(q(b) / q(a)).toFixed(3)} | ${main(a).toFixed(1)} / ${other(a).toFixed(1)} | ${main(b).toFixed(1)} / ${other(b).toFixed(1)} | ${(total(b) / total(a)).toFixed(3)} |`,
    );
  }
  L.push('');
  L.push('Per round, calls/s base / this: ' + base.samples.grpcQuery.map((_, i) => `gRPC ${base.samples.grpcQuery[i].qps.toFixed(0)}/${mine.samples.grpcQuery[i].qps.toFixed(0)}, REST ${base.samples.restQuery[i].qps.toFixed(0)}/${mine.samples.restQuery[i].qps.toFixed(0)}`).join('; '));
  L.push('');
  const md = L.join('\n');
  console.log(md);
  const out = path.join(REPO_ROOT, 'bench', 'results', `ab-grpc-${TAG}.md`);
  fs.writeFileSync(out, md);
  console.log(`written ${path.relative(REPO_ROOT, out)}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
