/**
 * The 1M-point modes of the benchmarks: `bench:engine --scale` (flags, the report's build
 * and memory section) and `bench:rest --points` (flags). Nothing is built or timed here.
 */
import test from 'ava';

import { parseArgs } from '../../bench/engine/common';
import { datasetSizes } from '../../bench/engine/datasets';
import { Results, markdown } from '../../bench/engine/report';
import type { ScaleBuild } from '../../bench/engine/scale';
import { parseRestArgs } from '../../bench/rest/options';

test('--scale runs the scale set with Quiver native, usearch and FAISS, no 1-thread builds or event-loop probe', (t) => {
  const o = parseArgs(['--scale']);
  t.true(o.scale);
  t.deepEqual(o.datasets, ['scale']);
  t.deepEqual(o.libs, ['quiver-native', 'usearch', 'faiss']);
  t.false(o.singleThreadBuilds);
  t.false(o.eventLoop);
  t.is(o.scaleN, 1_000_000);
  t.is(o.buildRounds, 1);
  t.deepEqual(datasetSizes('scale', false, o.scaleN), { nBase: 1_000_000, nQuery: 1000 });
  const o2 = parseArgs(['--scale', '--scale-n', '20000', '--build-rounds', '2', '--libs', 'quiver-native,anchors']);
  t.is(o2.scaleN, 20000);
  t.is(o2.buildRounds, 2);
  t.deepEqual(o2.libs, ['quiver-native', 'faiss', 'hnswlib-native']);
  // The default run is untouched.
  const d = parseArgs([]);
  t.false(d.scale);
  t.true(d.datasets.includes('synthetic'));
  t.false(d.datasets.includes('scale'));
});

test('--scale refuses what it cannot run', (t) => {
  t.throws(() => parseArgs(['--scale', '--quick']), { message: /--scale and --quick/ });
  t.throws(() => parseArgs(['--scale', '--libs', 'quiver-native,hnswlib']), { message: /hnswlib-node is left out/ });
  t.throws(() => parseArgs(['--scale-n', '10']), { message: /--scale-n/ });
  t.throws(() => parseArgs(['--build-rounds', '0']), { message: /--build-rounds/ });
});

function build(lib: string, label: string, round: number, seconds: number, baseline: number, after: number): ScaleBuild {
  return {
    lib, label, round, buildSeconds: seconds, cpuPerWall: 1.5, threads: 2, threadsNote: '', bytesPerVector: 700, bytesMethod: 'm',
    rssProcess: 'p', rssBaselineBytes: baseline, rssAfterBuildBytes: after, rssPeakBytes: after * 2, loadBefore: [1, 2, 3], loadAfter: [4, 5, 6], childWallSeconds: seconds + 1,
  };
}

test('the --scale report lists every build round, RSS per vector and the best-build ratios', (t) => {
  const MiB = 2 ** 20;
  const res: Results = {
    tag: 't', date: '', mode: 'full', args: ['--scale'], machine: { cpuModel: 'cpu', cores: 2, memoryGiB: 1, os: 'x', kernel: 'k', node: 'n', loadAverageAtStart: [0, 0, 0] },
    libraries: {}, parameters: { m: 16, efConstruct: 100, k: 10, efs: [16], buildThreads: 2 },
    datasets: [{ key: 'scale', name: 'Scale', description: 'd', source: 's', dim: 128, distance: 'Cosine', nBase: 1000, nQuery: 10, prepareSeconds: 0, cached: true, groundTruthSeconds: 0, groundTruthCached: true, groundTruthWorkers: 1 }],
    rows: [], eventLoop: null, notes: [], totalSeconds: 1, loadAverageAtEnd: [0, 0, 0],
    scale: {
      groundTruth: { method: 'exact scan', seconds: 1, cached: false },
      uptimeAtStart: 'start-load',
      uptimeAtEnd: 'end-load',
      builds: [
        build('quiver-native', 'quiver-native', 1, 40, 50 * MiB, 51 * MiB),
        build('faiss', 'faiss-hnsw', 1, 50, 40 * MiB, 42 * MiB),
        build('quiver-native', 'quiver-native', 2, 30, 50 * MiB, 51 * MiB),
        build('faiss', 'faiss-hnsw', 2, 60, 40 * MiB, 42 * MiB),
      ],
    },
  };
  const md = markdown(res);
  t.regex(md, /\| quiver-native \| 2 \| 30\.0 \| 2 \|/);
  t.regex(md, /\| faiss-hnsw \| 1 \| 50\.0 \| 2 \|/);
  // RSS Δ/vector: 1 MiB over 1000 vectors, 2 MiB over 1000 vectors.
  t.regex(md, /\| quiver-native \| 1 \| 40\.0 \| 2 \| 1\.50 \| 60\.0 \| 700\.0 \| 50 \| 51 \| 1049 \|/);
  t.regex(md, /\| faiss-hnsw \| 1 \| 50\.0 \| 2 \| 1\.50 \| 75\.0 \| 700\.0 \| 40 \| 42 \| 2097 \|/);
  // Build CPU seconds: 30 × 1.5 against 50 × 1.5.
  t.regex(md, /Build CPU seconds quiver-native \/ faiss-hnsw [^:]*: 45\.0 \/ 75\.0 = 0\.60×/);
  // Best builds: 30 s against 50 s.
  t.regex(md, /Build time quiver-native \/ faiss-hnsw: best 30\.0 s \/ 50\.0 s = \*\*0\.60×\*\* \(round 1: 40\.0 \/ 50\.0 s = 0\.80×; round 2: 30\.0 \/ 60\.0 s = 0\.50×\)/);
  t.true(md.includes('start-load'));
  t.true(md.includes('![QPS vs recall](engine-t.svg)'));
});

test('bench:rest --points takes up to 1M points of the scale set and leaves out the variants and gRPC', (t) => {
  const o = parseRestArgs(['--points', '1000000']);
  t.is(o.points, 1_000_000);
  t.is(o.n, 1_000_000);
  t.false(o.upsertVariants);
  t.false(o.grpc);
  t.false(o.h2load);
  t.true(o.query);
  const d = parseRestArgs([]);
  t.is(d.points, null);
  t.is(d.n, 100_000);
  t.true(d.upsertVariants);
  t.true(d.grpc);
  t.throws(() => parseRestArgs(['--points', '1000001']), { message: /at most 1000000/ });
  t.throws(() => parseRestArgs(['--n', '200000']), { message: /--n: at most 100000/ });
  t.throws(() => parseRestArgs(['--points', '5000', '--n', '5000']), { message: /--points replaces --n/ });
  t.throws(() => parseRestArgs(['--points', '5000', '--grpc-clients', 'grpc-js:shared']), { message: /--grpc-clients does not apply/ });
});
