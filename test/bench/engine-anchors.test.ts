/**
 * The anchor rows of bench:engine (FAISS HNSW, hnswlib -march=native): the --libs alias,
 * and the ratios at recall 0.95 in the report and the plot, against an interpolation
 * computed here on hand-made curves. No Python needed: only the report code runs.
 */
import test from 'ava';

import { parseArgs } from '../../bench/engine/common';
import { Results, Row, anchorRatios, markdown, plotFor } from '../../bench/engine/report';

function row(series: string, lib: string, ef: number, recall: number, qps: number, batchQps: number, batchCpuPerWall: number): Row {
  return {
    dataset: 'syn', series, lib, kind: 'query', nBase: 100, nQuery: 10, dim: 4, distance: 'Cosine', k: 10,
    ef, recall, qps, batchQps, batchRecall: recall, batchCpuPerWall, buildSeconds: 1, buildThreads: 1, bytesPerVector: 100, bytesMethod: 'm',
  };
}

/** QPS at recall t on the segment (r0, q0)–(r1, q1), log-linear in QPS. */
function interp(t: number, r0: number, q0: number, r1: number, q1: number): number {
  const f = (t - r0) / (r1 - r0);
  return Math.exp(Math.log(q0) + f * (Math.log(q1) - Math.log(q0)));
}

const rows: Row[] = [
  row('quiver-native', 'quiver-native', 16, 0.9, 9000, 20000, 1),
  row('quiver-native', 'quiver-native', 32, 0.97, 6000, 12000, 0.5),
  row('quiver-native', 'quiver-native', 64, 0.99, 3000, 6000, 1),
  row('faiss-hnsw', 'faiss', 16, 0.93, 5000, 15000, 1),
  row('faiss-hnsw', 'faiss', 32, 0.99, 2500, 8000, 1),
  // never reaches 0.95: its ratios are n/a
  row('hnswlib-native', 'hnswlib-native', 16, 0.8, 7000, 9000, 1),
  row('hnswlib-native', 'hnswlib-native', 32, 0.9, 4000, 5000, 1),
];

test('--libs anchors expands to both anchors; they are known libraries', (t) => {
  t.deepEqual(parseArgs(['--libs', 'quiver-native,anchors']).libs, ['quiver-native', 'faiss', 'hnswlib-native']);
  t.deepEqual(parseArgs(['--libs', 'faiss']).libs, ['faiss']);
  t.throws(() => parseArgs(['--libs', 'faiss-gpu']), { message: /unknown lib faiss-gpu/ });
});

test('ratios at recall 0.95 are interpolated on each curve and n/a when an anchor never gets there', (t) => {
  const [faiss, hnsw] = anchorRatios(rows, 'syn');
  t.is(faiss.anchor, 'faiss-hnsw');
  const qBatch = interp(0.95, 0.9, 20000, 0.97, 12000);
  const aBatch = interp(0.95, 0.93, 15000, 0.99, 8000);
  t.true(Math.abs((faiss.batch.ratio as number) - qBatch / aBatch) < 1e-9);
  const qCall = interp(0.95, 0.9, 9000, 0.97, 6000);
  const aCall = interp(0.95, 0.93, 5000, 0.99, 2500);
  t.true(Math.abs((faiss.perCall.ratio as number) - qCall / aCall) < 1e-9);
  // By CPU time: Quiver's ef=32 pass used half a core, so its CPU-second QPS doubles there.
  const qCpu = interp(0.95, 0.9, 20000, 0.97, 24000);
  t.true(Math.abs((faiss.batchCpu.ratio as number) - qCpu / aBatch) < 1e-9);
  t.is(hnsw.anchor, 'hnswlib-native');
  t.is(hnsw.batch.ratio, null);
  t.is(hnsw.perCall.ratio, null);
});

test('the report table and the plot carry the anchor ratios', (t) => {
  const res: Results = {
    tag: 't', date: '', mode: 'quick', args: [], machine: { cpuModel: 'cpu', cores: 2, memoryGiB: 1, os: 'x', kernel: 'k', node: 'n', loadAverageAtStart: [0, 0, 0] },
    libraries: {}, parameters: { m: 16, efConstruct: 100, k: 10, efs: [16, 32, 64], buildThreads: 1 },
    datasets: [{ key: 'syn', name: 'Syn', description: 'd', source: 's', dim: 4, distance: 'Cosine', nBase: 100, nQuery: 10, prepareSeconds: 0, cached: true, groundTruthSeconds: 0, groundTruthCached: true, groundTruthWorkers: 1 }],
    rows, eventLoop: null, notes: [], totalSeconds: 1, loadAverageAtEnd: [0, 0, 0],
  };
  const md = markdown(res);
  const ratio = (interp(0.95, 0.9, 20000, 0.97, 12000) / interp(0.95, 0.93, 15000, 0.99, 8000)).toFixed(2);
  t.regex(md, new RegExp(`\\| syn \\| faiss-hnsw \\| [0-9,]+ \\| [0-9,]+ \\| \\*\\*${ratio.replace('.', '\\.')}×\\*\\*`));
  t.regex(md, /\| syn \| hnswlib-native \|[^\n]*\| n\/a \|/);
  const svg = plotFor(res, res.datasets[0]);
  t.true(svg.includes('faiss-hnsw batch, 1 thr'));
  t.true(svg.includes(`batch ${ratio}×`));
});
