/**
 * `npm run bench:eventloop [-- --n 100000 --threads 2]`
 *
 * While a Quiver native index build of n synthetic 128-d points runs through the async
 * API (`await index.add(...)`), a setInterval(…, 10) measures the event loop's largest
 * lag. A build that stays off the event loop shows a lag of a few ms at most. The main
 * benchmark (run.ts) records the same probe around every build; this script is the
 * stand-alone version with a fixed 100k points.
 */
import * as fs from 'fs';
import * as path from 'path';
import type { Engine } from '../../bindings/engine';
import { EF_CONSTRUCT, M, REPO_ROOT, errMsg, fmt, parseArgs, today } from './common';
import { loadDataset } from './datasets';
import { measureBuild } from './measure';
import { loadQuiver } from './quiver';

export interface EventLoopResult {
  n: number;
  dim: number;
  threads: number;
  buildSeconds: number;
  cpuSeconds: number;
  maxLagMs: number;
  p99LagMs: number;
  ticksOver20Ms: number;
  ticks: number;
  intervalMs: number;
}

export async function eventLoopProbe(engine: Engine, base: Float32Array, dim: number, threads: number): Promise<EventLoopResult> {
  const n = base.length / dim;
  const labels = new BigUint64Array(n);
  for (let i = 0; i < n; i++) labels[i] = BigInt(i);
  const idx = engine.createIndex({ dim, distance: 'Cosine', m: M, efConstruct: EF_CONSTRUCT, seed: 42 });
  const vectors = base.slice(); // copied before the probe starts: the copy is ours, not the engine's
  try {
    const m = await measureBuild(() => idx.add(labels, vectors, threads));
    return { n, dim, threads, buildSeconds: m.seconds, cpuSeconds: m.cpuSeconds, maxLagMs: m.maxLagMs, p99LagMs: m.p99LagMs, ticksOver20Ms: m.ticksOver20Ms, ticks: m.lagTicks, intervalMs: 10 };
  } finally {
    idx.close();
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  let n = 100_000;
  let threads = 2;
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--n') n = Number(argv[++i]);
    else if (argv[i] === '--threads') threads = Number(argv[++i]);
    else rest.push(argv[i]);
  }
  const opts = parseArgs(rest);
  const engine = await loadQuiver(opts.loader, 'native');
  if (typeof engine === 'string') {
    console.log(`event-loop probe skipped: ${engine}`);
    return;
  }
  const ds = loadDataset('synthetic', { ...opts, quick: false });
  if ('skipped' in ds) throw new Error(ds.skipped);
  if (n > ds.nBase) throw new Error(`--n at most ${ds.nBase}`);
  const r = await eventLoopProbe(engine, ds.base.subarray(0, n * ds.dim), ds.dim, threads);
  console.log(
    `Quiver native (${engine.kernels}) async build of ${r.n} × ${r.dim}-d, ${r.threads} threads: ${fmt(r.buildSeconds, 2)} s (CPU/wall ${fmt(r.cpuSeconds / r.buildSeconds, 2)}); max event-loop lag ${fmt(r.maxLagMs, 1)} ms (p99 ${fmt(r.p99LagMs, 1)} ms, ${r.ticksOver20Ms} ticks > 20 ms) over ${r.ticks} ticks of a 10 ms setInterval`,
  );
  const out = path.join(opts.resultsDir, `eventloop-${today()}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), node: process.version, kernels: engine.kernels, ...r }, null, 2));
  console.log(`wrote ${path.relative(REPO_ROOT, out)}`);
}

if (require.main === module) {
  main().then(
    () => process.exit(0),
    (e) => {
      console.error(errMsg(e));
      process.exit(1);
    },
  );
}
