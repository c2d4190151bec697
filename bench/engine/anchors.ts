/**
 * The anchor libraries of the engine benchmark: FAISS IndexHNSWFlat (PyPI faiss-cpu) and
 * hnswlib built from source with -march=native (PyPI hnswlib, `--no-binary`). Both run in
 * a Python child process (bench/engine/anchors.py) on the dataset cache file the other
 * libraries read, one thread, with the same M / ef_construct / ef sweep; the child times
 * the library calls and returns ids, and recall is computed here with the same code as
 * for every other library.
 */
import * as fs from 'fs';
import * as path from 'path';
import * as readline from 'readline';
import { ChildProcessWithoutNullStreams, spawn, spawnSync } from 'child_process';
import { Dataset, K, LibKey, Options, REPO_ROOT, errMsg } from './common';
import type { BuildOutcome, QuerySet, Runner, Series } from './libs';
import { measureBuild } from './measure';

export type AnchorKey = 'faiss' | 'hnswlib-native';
export const ANCHOR_KEYS: readonly AnchorKey[] = ['faiss', 'hnswlib-native'];
/** Curve names in the report and plots. */
export const ANCHOR_SERIES: Record<AnchorKey, string> = { faiss: 'faiss-hnsw', 'hnswlib-native': 'hnswlib-native' };

const SCRIPT = path.join(REPO_ROOT, 'bench', 'engine', 'anchors.py');
const INSTALL = path.join(REPO_ROOT, 'scripts', 'install-bench-anchors.sh');

type Info = Record<string, string>;

/**
 * Versions and SIMD levels of both anchors (anchors.py info). When a module is missing
 * and pip installs are allowed, runs scripts/install-bench-anchors.sh once and asks again.
 * Returns per anchor either its info or a reason to skip it.
 */
export function anchorsInfo(opts: Options): Record<AnchorKey, Info | { skip: string }> {
  const buildLog = path.join(opts.dataDir, 'anchors', 'hnswlib-build.log');
  const ask = () => spawnSync(opts.python, [SCRIPT, 'info', '--build-log', buildLog], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  let r = ask();
  if (r.error) return both(`cannot run ${opts.python}: ${r.error.message}`);
  // A missing module (exit 3) or an hnswlib without this CPU's instructions: (re)install.
  const notNative = /"nativeCheck": "FAILED/.test(r.stdout ?? '');
  if ((r.status === 3 || notNative) && opts.pipInstall) {
    console.log('  anchors: installing faiss-cpu and building hnswlib with -march=native (scripts/install-bench-anchors.sh) ...');
    const p = spawnSync('bash', [INSTALL], { encoding: 'utf8', stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, PYTHON: opts.python } });
    if (p.status !== 0) return both(`scripts/install-bench-anchors.sh exited ${p.status}`);
    r = ask();
  }
  if (r.status !== 0 && r.status !== 3) return both(`anchors.py info exited ${r.status}: ${(r.stderr || '').trim().split('\n').slice(-1)[0]}`);
  let parsed: Record<AnchorKey, Record<string, string>>;
  try {
    parsed = JSON.parse(r.stdout) as Record<AnchorKey, Record<string, string>>;
  } catch (e) {
    return both(`anchors.py info printed no JSON: ${errMsg(e)}`);
  }
  const out = {} as Record<AnchorKey, Info | { skip: string }>;
  for (const k of ANCHOR_KEYS) {
    const i = parsed[k];
    if (!i || i.missing) {
      out[k] = { skip: `${k === 'faiss' ? 'faiss-cpu' : 'hnswlib'} not installed (${i?.missing ?? 'no info'}); run scripts/install-bench-anchors.sh` };
    } else if (k === 'faiss') {
      out[k] = {
        version: `faiss-cpu ${i.version}`,
        index: `IndexHNSWFlat (M=${opts.hnsw.m}, efConstruction=${opts.hnsw.efConstruct}), Python child process, omp_set_num_threads(${opts.scale ? `${opts.buildThreads}) for the build and (1) for searches` : '1)'}`,
        kernels: `get_compile_options(): "${i.compileOptions}"; SIMD level in use: ${i.simdLevel ?? 'unknown'}${i.dynamicDispatch === 'True' ? ' (dynamic dispatch, chosen at import for this CPU)' : ''}`,
      };
    } else {
      out[k] = {
        version: `hnswlib ${i.version} (PyPI source distribution, compiled on this machine)`,
        index: `hnswlib.Index (M=${opts.hnsw.m}, ef_construction=${opts.hnsw.efConstruct}), Python child process, num_threads=${opts.scale ? `${opts.buildThreads} for the build and 1 for searches` : '1'}`,
        kernels: `-march=native: ${i.buildLog}; objdump of the extension: ${i.objdump} (check ${i.nativeCheck}, a build without -march has none of either); distance kernels in use: ${
          i.cpuWidestRegister === 'zmm'
            ? 'AVX-512 (hnswlib.h defines USE_AVX512 from __AVX512F__ and picks the AVX-512 functions at run time when the CPU has them)'
            : i.cpuWidestRegister === 'ymm'
              ? 'AVX (USE_AVX from __AVX__)'
              : 'SSE'
        }`,
      };
      if (i.nativeCheck && i.nativeCheck.startsWith('FAILED')) out[k] = { skip: `hnswlib is not a native build: ${i.nativeCheck}; rerun scripts/install-bench-anchors.sh --force` };
    }
  }
  return out;

  function both(skip: string): Record<AnchorKey, { skip: string }> {
    return { faiss: { skip }, 'hnswlib-native': { skip } };
  }
}

interface Reply {
  ok: boolean;
  error?: string;
  [k: string]: unknown;
}

/** One anchors.py serve process: JSON lines in, one JSON line out per request. */
class AnchorChild {
  private proc: ChildProcessWithoutNullStreams;
  private pending: { resolve: (r: Reply) => void; reject: (e: Error) => void }[] = [];
  private stderr = '';
  private exited: string | null = null;
  private onExit = () => this.proc.kill('SIGKILL');

  constructor(python: string) {
    this.proc = spawn(python, [SCRIPT, 'serve'], { stdio: ['pipe', 'pipe', 'pipe'] });
    const rl = readline.createInterface({ input: this.proc.stdout });
    rl.on('line', (line) => {
      const p = this.pending.shift();
      if (!p) return;
      try {
        p.resolve(JSON.parse(line) as Reply);
      } catch (e) {
        p.reject(new Error(`anchors.py printed ${line.slice(0, 200)}: ${errMsg(e)}`));
      }
    });
    this.proc.stderr.on('data', (d: Buffer) => {
      this.stderr = (this.stderr + d.toString()).slice(-4000);
    });
    const fail = (why: string) => {
      this.exited = why;
      for (const p of this.pending.splice(0)) p.reject(new Error(`anchors.py ${why}: ${this.stderr.trim().split('\n').slice(-3).join(' | ')}`));
    };
    this.proc.on('exit', (code, sig) => fail(`exited (${code ?? sig})`));
    this.proc.on('error', (e) => fail(`failed to start (${e.message})`));
    process.once('exit', this.onExit);
  }

  async request(req: Record<string, unknown>): Promise<Reply> {
    if (this.exited) throw new Error(`anchors.py ${this.exited}`);
    const reply = await new Promise<Reply>((resolve, reject) => {
      this.pending.push({ resolve, reject });
      this.proc.stdin.write(`${JSON.stringify(req)}\n`);
    });
    if (!reply.ok) throw new Error(`anchors.py: ${reply.error}`);
    return reply;
  }

  close(): void {
    process.removeListener('exit', this.onExit);
    if (!this.exited) this.proc.stdin.end(`${JSON.stringify({ cmd: 'quit' })}\n`);
  }
}

export class AnchorRunner implements Runner {
  label: string;
  constructor(
    public key: LibKey & AnchorKey,
    public info: Info,
    private opts: Options,
  ) {
    this.label = ANCHOR_SERIES[key];
  }

  async build(ds: Dataset, threads: number): Promise<BuildOutcome> {
    // The anchors build on one thread in the default run (the brief of the anchor rows);
    // a --scale run builds every library with the run's build threads.
    const buildThreads = this.opts.scale ? threads : 1;
    let file = ds.file;
    let tmp: string | null = null;
    if (!file || !fs.existsSync(file) || fs.statSync(file).size !== (ds.nBase + ds.nQuery) * ds.dim * 4) {
      // No cache file to share: write the same vectors to a private raw f32 file.
      const dir = path.join(this.opts.dataDir, 'tmp');
      fs.mkdirSync(dir, { recursive: true });
      tmp = path.join(dir, `anchors-${ds.key}-${process.pid}.f32`);
      const fd = fs.openSync(tmp, 'w');
      fs.writeSync(fd, new Uint8Array(ds.base.buffer, ds.base.byteOffset, ds.base.byteLength));
      fs.writeSync(fd, new Uint8Array(ds.queries.buffer, ds.queries.byteOffset, ds.queries.byteLength));
      fs.closeSync(fd);
      file = tmp;
    }
    const child = new AnchorChild(this.opts.python);
    const cleanup = () => {
      child.close();
      if (tmp) fs.rmSync(tmp, { force: true });
    };
    let b: Reply;
    let m;
    try {
      m = await measureBuild(() =>
        child.request({ cmd: 'build', lib: this.key, file, nBase: ds.nBase, nQuery: ds.nQuery, dim: ds.dim, distance: ds.distance, m: this.opts.hnsw.m, efConstruct: this.opts.hnsw.efConstruct, seed: this.opts.hnsw.seed, threads: buildThreads }),
      );
      b = m.value;
    } catch (e) {
      cleanup();
      throw e;
    }
    const batchLabel = this.key === 'faiss' ? 'index.search(all queries, 10), omp 1 thread (Python child)' : 'knn_query(all queries, k=10, num_threads=1) (Python child)';
    const series: Series[] = [
      {
        label: this.label,
        quantization: 'none',
        queryMode:
          this.key === 'faiss'
            ? 'index.search(1×d array, 10) one query at a time from a Python loop (SWIG call overhead included)'
            : 'knn_query(1×d array, k=10, num_threads=1) one query at a time from a Python loop (pybind11 call overhead included)',
        setEf: () => undefined,
        run: async (q: QuerySet, ef: number, count = q.n) => {
          const r = await child.request({ cmd: 'search', mode: 'single', ef, k: K, count });
          return { results: r.ids as number[][], seconds: r.seconds as number, latUs: Float64Array.from(r.latUs as number[]) };
        },
        toIds: (r: unknown) => r as number[],
        batch: {
          label: batchLabel,
          run: async (q: QuerySet, ef: number) => {
            const r = await child.request({ cmd: 'search', mode: 'batch', ef, k: K, count: q.n });
            return { seconds: r.seconds as number, ids: r.ids as number[][], cpuSeconds: r.cpuSeconds as number };
          },
        },
      },
    ];
    return {
      built: {
        series,
        memory: () => ({
          bytesPerVector: b.bytesPerVector as number,
          method: b.method as string,
          detail: b.detail as Record<string, number | string>,
        }),
        close: cleanup,
      },
      seconds: b.seconds as number,
      cpuSeconds: b.cpuSeconds as number,
      // The build runs in another process: the parent's event loop only waits on a pipe,
      // so its lag says nothing about the library (shown as '–').
      maxLagMs: NaN,
      lagTicks: m.lagTicks,
      p99LagMs: NaN,
      rssDeltaBytes: b.rssDeltaBytes as number,
      threads: buildThreads,
      threadsNote: `${b.threadsNote as string} (timed in the child)`,
    };
  }
}
