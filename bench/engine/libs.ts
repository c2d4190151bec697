/**
 * One adapter per library under test. Quiver goes only through the `Engine` interface
 * of bindings/engine.ts; the peers through their npm packages' public APIs.
 */
import * as fs from 'fs';
import * as path from 'path';
import type { Engine, Quantization, SearchOptions, SearchResult, VectorIndex } from '../../bindings/engine';
import { DEFAULT_HNSW, Dataset, HnswParams, K, LibKey, REPO_ROOT, errMsg } from './common';
import { LoopTiming, measureBuild, rss, timeAsyncLoop, timeSyncLoop } from './measure';

export interface QuerySet {
  n: number;
  dim: number;
  flat: Float32Array;
  /** One standalone Float32Array per query. */
  rows: Float32Array[];
  /** Plain JS arrays (hnswlib-node accepts only those); built on first use. */
  arrays(): number[][];
}

export function querySet(ds: Dataset): QuerySet {
  const rows: Float32Array[] = [];
  for (let i = 0; i < ds.nQuery; i++) rows.push(ds.queries.slice(i * ds.dim, (i + 1) * ds.dim));
  let arrays: number[][] | null = null;
  return {
    n: ds.nQuery,
    dim: ds.dim,
    flat: ds.queries,
    rows,
    arrays: () => (arrays ??= rows.map((r) => Array.from(r))),
  };
}

export interface MemoryInfo {
  bytesPerVector: number | null;
  method: string;
  detail: Record<string, number | string>;
}

export interface Series {
  label: string;
  quantization: string;
  oversampling?: number;
  /** How queries are issued, for the report. */
  queryMode: string;
  setEf(ef: number): Promise<void> | void;
  /** All queries one at a time, sequentially, in the calling thread's order. */
  run(q: QuerySet, ef: number, count?: number): Promise<LoopTiming<unknown>>;
  toIds(r: unknown): number[];
  /** Optional: all queries in one call (label says how, e.g. which threads). */
  batch?: {
    label: string;
    /** cpuSeconds: CPU time of the call where it ran in another process (else this process's is measured). */
    run(q: QuerySet, ef: number): Promise<{ seconds: number; ids: number[][]; cpuSeconds?: number }>;
  };
}

export interface Built {
  series: Series[];
  memory(): MemoryInfo;
  close(): void;
}

export interface BuildOutcome {
  built: Built;
  seconds: number;
  cpuSeconds: number;
  maxLagMs: number;
  lagTicks: number;
  p99LagMs: number;
  rssDeltaBytes: number;
  threads: number;
  threadsNote: string;
}

export interface Runner {
  key: LibKey;
  label: string;
  /** Version / kernel info for the report. */
  info: Record<string, string>;
  build(ds: Dataset, threads: number): Promise<BuildOutcome>;
}

function labelsFor(n: number): BigUint64Array {
  const labels = new BigUint64Array(n);
  for (let i = 0; i < n; i++) labels[i] = BigInt(i);
  return labels;
}

function bigToIds(a: BigUint64Array): number[] {
  const out = new Array<number>(a.length);
  for (let i = 0; i < a.length; i++) out[i] = Number(a[i]);
  return out;
}

// ---------------------------------------------------------------- Quiver

interface QuiverVariant {
  label: string;
  options: Partial<SearchOptions>;
  oversampling?: number;
}

export class QuiverRunner implements Runner {
  info: Record<string, string>;
  constructor(
    public key: LibKey,
    public label: string,
    private engine: Engine,
    private quantization: Quantization,
    private variants: QuiverVariant[],
    private hnsw: HnswParams = DEFAULT_HNSW,
  ) {
    this.info = { backend: engine.backend, kernels: engine.kernels, quantization: quantization.kind };
  }

  async build(ds: Dataset, threads: number): Promise<BuildOutcome> {
    const labels = labelsFor(ds.nBase);
    // A private copy: a backend may transfer (detach) the buffer it is given.
    let vectors: Float32Array | null = ds.base.slice();
    const rss0 = await rss();
    const idx: VectorIndex = this.engine.createIndex({
      dim: ds.dim,
      distance: ds.distance,
      m: this.hnsw.m,
      efConstruct: this.hnsw.efConstruct,
      quantization: this.quantization,
      seed: this.hnsw.seed,
    });
    let m;
    try {
      m = await measureBuild(() => idx.add(labels, vectors as Float32Array, threads));
    } catch (e) {
      idx.close();
      throw e;
    }
    // Quantized indexes keep their f32 originals (read only for rescoring) in a mapped
    // file, as the reference's on-disk vectors with in-memory quantization do; then the
    // memory figures count codes and graph only.
    let originalsOnDisk = false;
    if (this.quantization.kind !== 'none' && this.engine.durable) {
      const dir = path.join(REPO_ROOT, 'bench', 'data', 'tmp');
      fs.mkdirSync(dir, { recursive: true });
      const file = path.join(dir, `${ds.key}-${this.key}-${process.pid}.f32`);
      await idx.moveOriginalsToDisk(file);
      originalsOnDisk = true;
      process.once('exit', () => fs.rmSync(file, { force: true }));
    }
    const rss1 = await rss();
    vectors = null;
    const stats = idx.stats();
    if (stats.count !== ds.nBase) throw new Error(`index holds ${stats.count} vectors after add, expected ${ds.nBase}`);
    const series: Series[] = this.variants.map((v) => {
      const base = { k: K, ...v.options };
      const optsFor = (ef: number): SearchOptions => ({ ...base, ef });
      return {
        label: v.label,
        quantization: this.quantization.kind,
        oversampling: v.oversampling,
        queryMode: 'await index.search() one query at a time',
        setEf: () => undefined,
        run: (q: QuerySet, ef: number, count = q.n) => {
          const o = optsFor(ef);
          return timeAsyncLoop(count, (i) => idx.search(q.rows[i], o));
        },
        toIds: (r: unknown) => bigToIds((r as SearchResult).labels),
        batch: {
          label: 'index.searchBatch(all queries) — one worker thread',
          run: async (q: QuerySet, ef: number) => {
            const flat = q.flat.slice();
            const t0 = performance.now();
            const res = await idx.searchBatch(flat, optsFor(ef));
            const seconds = (performance.now() - t0) / 1000;
            return { seconds, ids: res.map((r) => bigToIds(r.labels)) };
          },
        },
      };
    });
    return {
      built: {
        series,
        memory: () => {
          const s = idx.stats();
          return {
            bytesPerVector: s.count > 0 ? s.totalBytes / s.count : null,
            method: 'stats().totalBytes / count',
            detail: {
              vectorBytesPerVector: s.vectorBytes / s.count,
              // f32 originals kept for rescoring (quantized indexes); absent in older bindings.
              originalBytesPerVector: ((s as { originalBytes?: number }).originalBytes ?? 0) / s.count,
              graphBytesPerVector: s.graphBytes / s.count,
              originalsOnDisk: originalsOnDisk ? 1 : 0,
              totalBytes: s.totalBytes,
              count: s.count,
            },
          };
        },
        close: () => idx.close(),
      },
      seconds: m.seconds,
      cpuSeconds: m.cpuSeconds,
      maxLagMs: m.maxLagMs,
      lagTicks: m.lagTicks,
      p99LagMs: m.p99LagMs,
      rssDeltaBytes: rss1 - rss0,
      threads,
      threadsNote: `add(labels, vectors, ${threads})`,
    };
  }
}

// ---------------------------------------------------------------- hnswlib-node

type HnswlibModule = typeof import('hnswlib-node');

export class HnswlibRunner implements Runner {
  key: LibKey = 'hnswlib';
  label = 'hnswlib-node';
  info: Record<string, string>;
  private mod: HnswlibModule;
  constructor(private hnsw: HnswParams = DEFAULT_HNSW) {
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    this.mod = require('hnswlib-node') as HnswlibModule;
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    const version = (require('hnswlib-node/package.json') as { version: string }).version;
    this.info = {
      version,
      kernels: 'SSE (built by node-gyp with -O3 and no -march, so hnswlib’s AVX/AVX-512 paths are compiled out)',
    };
  }

  async build(ds: Dataset, threads: number): Promise<BuildOutcome> {
    void threads; // hnswlib-node has no parallel insert.
    const space = ds.distance === 'Cosine' ? 'cosine' : 'l2';
    // hnswlib-node accepts only plain JS arrays; convert before timing.
    let rows: number[][] | null = [];
    for (let i = 0; i < ds.nBase; i++) rows.push(Array.from(ds.base.subarray(i * ds.dim, (i + 1) * ds.dim)));
    const rss0 = await rss();
    const idx = new this.mod.HierarchicalNSW(space, ds.dim);
    idx.initIndex(ds.nBase, this.hnsw.m, this.hnsw.efConstruct, this.hnsw.seed);
    const r = rows;
    const m = await measureBuild(() => {
      for (let i = 0; i < r.length; i++) idx.addPoint(r[i], i);
    });
    const rss1 = await rss();
    rows = null;
    const n = ds.nBase;
    const series: Series[] = [
      {
        label: 'hnswlib-node',
        quantization: 'none',
        queryMode: 'searchKnn(number[], 10) one query at a time (synchronous)',
        setEf: (ef: number) => idx.setEf(ef),
        run: async (q: QuerySet, _ef: number, count = q.n) => {
          const qa = q.arrays();
          return timeSyncLoop(count, (i) => idx.searchKnn(qa[i], K));
        },
        toIds: (r2: unknown) => (r2 as { neighbors: number[] }).neighbors,
      },
    ];
    return {
      built: {
        series,
        memory: () => {
          // hnswlib's documented layout (hnswalg.h): per element, level 0 holds
          // [links: 4 + 2M*4][vector: dim*4][label: 8]; upper levels hold 4 + M*4 per
          // level, and an element has 1/(M-1) upper levels on average (mult = 1/ln M);
          // plus an 8-byte linkLists_ pointer, a 4-byte level, a std::mutex (40 B) and
          // a label-map entry (~32 B) per element.
          const M = this.hnsw.m;
          const level0 = 4 + 2 * M * 4 + ds.dim * 4 + 8;
          const upper = (4 + M * 4) / (M - 1);
          const bookkeeping = 8 + 4 + 40 + 32;
          return {
            bytesPerVector: level0 + upper + bookkeeping,
            method: 'layout formula (hnswalg.h)',
            detail: { level0, upperLinksExpected: upper, bookkeeping, vectorBytesPerVector: ds.dim * 4, count: n },
          };
        },
        close: () => undefined, // freed by GC (no explicit free in hnswlib-node)
      },
      seconds: m.seconds,
      cpuSeconds: m.cpuSeconds,
      maxLagMs: m.maxLagMs,
      lagTicks: m.lagTicks,
      p99LagMs: m.p99LagMs,
      rssDeltaBytes: rss1 - rss0,
      threads: 1,
      threadsNote: 'addPoint() per vector, synchronous, single-threaded (hnswlib-node 3.0.0 has no batch/parallel add)',
    };
  }
}

// ---------------------------------------------------------------- usearch

type UsearchModule = typeof import('usearch');

export class UsearchRunner implements Runner {
  key: LibKey = 'usearch';
  label = 'usearch';
  info: Record<string, string>;
  private mod: UsearchModule;
  constructor(
    private tmpDir: string,
    private hnsw: HnswParams = DEFAULT_HNSW,
  ) {
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    this.mod = require('usearch') as UsearchModule;
    this.info = { version: usearchVersion(), kernels: usearchKernels() };
  }

  async build(ds: Dataset, threads: number): Promise<BuildOutcome> {
    const { Index, MetricKind, ScalarKind } = this.mod;
    const config = (ef: number) => ({
      dimensions: ds.dim,
      metric: ds.distance === 'Cosine' ? MetricKind.Cos : MetricKind.L2sq,
      quantization: ScalarKind.F32,
      connectivity: this.hnsw.m,
      expansion_add: this.hnsw.efConstruct,
      expansion_search: ef,
      multi: false,
    });
    const keys = labelsFor(ds.nBase);
    const rss0 = await rss();
    let idx: InstanceType<UsearchModule['Index']> | null = new Index(config(64));
    const built0 = idx;
    const m = await measureBuild(() => built0.add(keys, ds.base, threads));
    const rss1 = await rss();
    if (idx.size() !== ds.nBase) throw new Error(`usearch holds ${idx.size()} vectors, expected ${ds.nBase}`);
    const capacity = idx.capacity();
    // expansion_search is fixed at construction in the JS binding, so each ef gets a
    // fresh Index with that expansion_search that loads the saved graph.
    fs.mkdirSync(this.tmpDir, { recursive: true });
    const file = path.join(this.tmpDir, `usearch-${ds.key}-${process.pid}.usearch`);
    idx.save(file);
    const fileBytes = fs.statSync(file).size;
    idx = null;
    let cur: InstanceType<UsearchModule['Index']> | null = null;
    const series: Series[] = [
      {
        label: 'usearch',
        quantization: 'none',
        queryMode: 'search(Float32Array, 10, threads=1) one query at a time (synchronous)',
        setEf: (ef: number) => {
          cur = null;
          const next = new Index(config(ef));
          next.load(file);
          cur = next;
        },
        run: async (q: QuerySet, _ef: number, count = q.n) => {
          const c = cur as InstanceType<UsearchModule['Index']>;
          return timeSyncLoop(count, (i) => c.search(q.rows[i], K, 1));
        },
        toIds: (r: unknown) => bigToIds((r as { keys: BigUint64Array }).keys),
        batch: {
          label: `search(all queries as one matrix, 10, threads=${threads})`,
          run: async (q: QuerySet) => {
            const c = cur as InstanceType<UsearchModule['Index']>;
            const t0 = performance.now();
            const res = c.search(q.flat, K, threads) as unknown as { keys: BigUint64Array; counts: BigUint64Array; k: number };
            const seconds = (performance.now() - t0) / 1000;
            const ids: number[][] = [];
            for (let i = 0; i < q.n; i++) {
              const cnt = Number(res.counts[i]);
              ids.push(bigToIds(res.keys.subarray(i * K, i * K + cnt)));
            }
            return { seconds, ids };
          },
        },
      },
    ];
    return {
      built: {
        series,
        memory: () => ({
          bytesPerVector: fileBytes / ds.nBase,
          method: 'save() file size (no memory API in the JS binding)',
          detail: { fileBytes, capacity, count: ds.nBase },
        }),
        close: () => {
          cur = null;
          try {
            fs.unlinkSync(file);
          } catch {
            /* ignore */
          }
        },
      },
      seconds: m.seconds,
      cpuSeconds: m.cpuSeconds,
      maxLagMs: m.maxLagMs,
      lagTicks: m.lagTicks,
      p99LagMs: m.p99LagMs,
      rssDeltaBytes: rss1 - rss0,
      threads,
      threadsNote: `add(keys, vectors, ${threads}) — synchronous call, ${threads} native threads`,
    };
  }
}

export function usearchVersion(): string {
  try {
    const pj = path.join(path.dirname(require.resolve('usearch')), '..', '..', '..', 'package.json');
    return (JSON.parse(fs.readFileSync(pj, 'utf8')) as { version: string }).version;
  } catch (e) {
    return `unknown (${errMsg(e)})`;
  }
}

export function usearchKernels(): string {
  try {
    const root = path.join(path.dirname(require.resolve('usearch')), '..', '..', '..');
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    const compiled = require('node-gyp-build')(root) as { hardwareAccelerationAvailable?: () => string };
    return compiled.hardwareAccelerationAvailable ? `available: ${compiled.hardwareAccelerationAvailable()} (dynamic dispatch)` : 'unknown';
  } catch (e) {
    return `unknown (${errMsg(e)})`;
  }
}

export function hnswlibVersion(): string {
  try {
    return (require('hnswlib-node/package.json') as { version: string }).version;
  } catch {
    return 'unknown';
  }
}
