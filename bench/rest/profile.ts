/**
 * Reads a V8 .cpuprofile written by the server (`--server-cpu-prof DIR` runs it with
 * node --cpu-prof) and sums the main thread's self time per function and per area
 * (file or package) inside time windows of the benchmark's phases.
 *
 * The profile's timestamps are V8 TimeTicks in microseconds, which on Linux come from
 * CLOCK_MONOTONIC, the same clock as process.hrtime in the benchmark process, so a
 * phase's [start, end) from hrtime selects its samples directly.
 */
import * as fs from 'fs';
import * as path from 'path';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface Window {
  name: string;
  startUs: number;
  endUs: number;
}

export interface Entry {
  name: string;
  ms: number;
  share: number;
}

export interface WindowSummary {
  name: string;
  wallMs: number;
  /** Sampled time on the main thread that was not idle. */
  busyMs: number;
  idleMs: number;
  areas: Entry[];
  /** By self time. */
  functions: Entry[];
  /** By total time (self plus callees), each function counted once per sample. */
  inclusive: Entry[];
}

export interface ProfileSummary {
  file: string;
  /** Whether the windows fell inside the profile's time range (the clocks matched). */
  clockMatched: boolean;
  windows: WindowSummary[];
}

function area(cf: CallFrame, repoRoot: string): string {
  const u = cf.url;
  if (!u) {
    if (cf.functionName.startsWith('(')) return cf.functionName; // (garbage collector), (program), (idle)
    return `(V8 builtin) ${cf.functionName || 'anonymous'}`;
  }
  if (u.startsWith('node:')) return u;
  const p = u.startsWith('file://') ? decodeURIComponent(u.slice(7)) : u;
  const nm = p.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = p.slice(nm + '/node_modules/'.length).split('/');
    return `npm ${rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]}`;
  }
  const rel = path.relative(repoRoot, p);
  return rel.startsWith('..') ? p : rel.replace(/^dist\//, '').replace(/\.js$/, '.ts');
}

function fnName(cf: CallFrame, repoRoot: string): string {
  const a = area(cf, repoRoot);
  if (!cf.url) return a;
  return `${cf.functionName || '(anonymous)'} ${a}:${cf.lineNumber + 1}`;
}

export function newestProfile(dir: string): string | null {
  if (!fs.existsSync(dir)) return null;
  const files = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => ({ f: path.join(dir, f), t: fs.statSync(path.join(dir, f)).mtimeMs }))
    .sort((a, b) => b.t - a.t);
  return files.length ? files[0].f : null;
}

export function summarizeProfile(file: string, windows: Window[], repoRoot: string, top = 15): ProfileSummary {
  const prof = JSON.parse(fs.readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of prof.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  // Sample i is taken at startTime + sum(timeDeltas[0..i]); the interval up to the next
  // sample is charged to it.
  const times = new Float64Array(prof.samples.length);
  let t = prof.startTime;
  for (let i = 0; i < prof.samples.length; i++) {
    t += prof.timeDeltas[i];
    times[i] = t;
  }
  const clockMatched = windows.every((w) => w.startUs >= prof.startTime - 1e6 && w.endUs <= prof.endTime + 1e6);
  const out: WindowSummary[] = [];
  for (const w of windows) {
    const perArea = new Map<string, number>();
    const perFn = new Map<string, number>();
    const perFnTotal = new Map<string, number>();
    let idle = 0;
    let busy = 0;
    for (let i = 0; i < times.length; i++) {
      if (times[i] < w.startUs || times[i] >= w.endUs) continue;
      const dt = i + 1 < times.length ? times[i + 1] - times[i] : 0;
      const node = byId.get(prof.samples[i]);
      if (!node) continue;
      const cf = node.callFrame;
      if (cf.functionName === '(idle)') {
        idle += dt;
        continue;
      }
      busy += dt;
      const a = area(cf, repoRoot);
      perArea.set(a, (perArea.get(a) ?? 0) + dt);
      const f = fnName(cf, repoRoot);
      perFn.set(f, (perFn.get(f) ?? 0) + dt);
      const seen = new Set<string>();
      for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
        const pn = byId.get(id)!;
        if (pn.callFrame.functionName === '(root)') continue;
        const name = fnName(pn.callFrame, repoRoot);
        if (seen.has(name)) continue;
        seen.add(name);
        perFnTotal.set(name, (perFnTotal.get(name) ?? 0) + dt);
      }
    }
    const list = (m: Map<string, number>, count = top): Entry[] =>
      [...m]
        .sort((a, b) => b[1] - a[1])
        .slice(0, count)
        .map(([name, us]) => ({ name, ms: us / 1000, share: busy > 0 ? us / busy : 0 }));
    out.push({ name: w.name, wallMs: (w.endUs - w.startUs) / 1000, busyMs: busy / 1000, idleMs: idle / 1000, areas: list(perArea), functions: list(perFn), inclusive: list(perFnTotal, top * 2) });
  }
  return { file, clockMatched, windows: out };
}
