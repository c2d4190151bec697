/**
 * Shared parts of the cluster benchmarks (bench/cluster/run.ts, bench/cluster/faults.ts):
 * flags, statistics, process CPU from /proc, a seeded random source, the views of a
 * collection's replicas a peer gives (states, digests), and the 128-d synthetic data
 * of the REST benchmark as request bodies.
 */

import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

import { Cluster, api } from '../../test/cluster/harness';
import { mulberry32 } from '../engine/common';

// -- flags ----------------------------------------------------------------------------------

/** `--name value` or `--name=value` of argv, or undefined. */
export function flagValue(argv: readonly string[], name: string): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === `--${name}`) {
      const v = argv[i + 1];
      if (v === undefined || v.startsWith('--')) throw new Error(`--${name} needs a value`);
      return v;
    }
    if (a.startsWith(`--${name}=`)) return a.slice(name.length + 3);
  }
  return undefined;
}

export function numFlag(argv: readonly string[], name: string, dflt: number): number {
  const v = flagValue(argv, name);
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name}: expected a non-negative number, got ${JSON.stringify(v)}`);
  return n;
}

export function listFlag(argv: readonly string[], name: string, dflt: readonly string[]): string[] {
  const v = flagValue(argv, name);
  return v === undefined ? [...dflt] : v.split(',').map((s) => s.trim()).filter(Boolean);
}

export function boolFlag(argv: readonly string[], name: string, dflt: boolean): boolean {
  if (argv.includes(`--${name}`)) return true;
  if (argv.includes(`--no-${name}`)) return false;
  return dflt;
}

/** Refuses flags the program does not know (a typo would otherwise run the default silently). */
export function checkFlags(argv: readonly string[], known: readonly string[]): void {
  for (const a of argv) {
    if (!a.startsWith('--')) continue;
    const name = a.slice(2).split('=')[0].replace(/^no-/, '');
    if (!known.includes(name)) throw new Error(`unknown flag ${a} (known: ${known.map((k) => `--${k}`).join(' ')})`);
  }
}

export function today(): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
}

// -- statistics -----------------------------------------------------------------------------

export interface Stats {
  n: number;
  median: number;
  p90: number;
  worst: number;
  best: number;
}

export function stats(xs: readonly number[]): Stats {
  if (xs.length === 0) return { n: 0, median: NaN, p90: NaN, worst: NaN, best: NaN };
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  const median = s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  return { n: s.length, median, p90: q(0.9), worst: s[s.length - 1], best: s[0] };
}

export function median(xs: readonly number[]): number {
  return stats(xs).median;
}

export const round = (x: number, d = 2): number => Math.round(x * 10 ** d) / 10 ** d;

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** A seeded source of uniform numbers in [0, 1), with helpers. */
export class Rng {
  private readonly next: () => number;
  constructor(seed: number) {
    this.next = mulberry32(seed);
  }
  float(): number {
    return this.next();
  }
  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)];
  }
}

/** The commit the measured code is from, and product files changed since (the peers run the compiled tree). */
export function sourceVersion(): { commit: string; changed: string[] } {
  const repo = path.join(__dirname, '..', '..', '..');
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: repo, encoding: 'utf8' }).trim();
    const changed = execFileSync('git', ['status', '--porcelain', '--', 'ts', 'crates', 'bindings', 'bench/cluster'], { cwd: repo, encoding: 'utf8' })
      .split('\n')
      .filter(Boolean)
      .map((l) => l.slice(3));
    return { commit, changed };
  } catch {
    return { commit: 'unknown', changed: [] };
  }
}

// -- processes ------------------------------------------------------------------------------

/** CPU seconds (user + system, all threads) of process `pid` so far, or null when it is gone. */
export function procCpuSec(pid: number): number | null {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) / 100;
  } catch {
    return null;
  }
}

/** Sum of the CPU seconds of these processes. */
export function cpuOf(pids: readonly number[]): number {
  let t = 0;
  for (const p of pids) t += procCpuSec(p) ?? 0;
  return t;
}

// -- cluster views --------------------------------------------------------------------------

/** Per `shard/peer`: the replica state, as peer `url` sees the collection (throws when it does not answer 200). */
export async function replicaStates(url: string, name: string, timeoutMs = 5000): Promise<Record<string, string>> {
  const r = await api(url, 'GET', `/collections/${name}/cluster`, undefined, timeoutMs);
  if (r.status !== 200) throw new Error(`GET /collections/${name}/cluster: ${r.status} ${JSON.stringify(r.body)}`);
  const v = r.body.result;
  const out: Record<string, string> = {};
  for (const s of v.local_shards) out[`${s.shard_id}/${v.peer_id}`] = s.state;
  for (const s of v.remote_shards) out[`${s.shard_id}/${s.peer_id}`] = s.state;
  return out;
}

/** Whether peer `url` sees every replica of the collection Active (false when it does not answer). */
export async function allActiveOn(url: string, name: string): Promise<boolean> {
  const st = await replicaStates(url, name).catch(() => null);
  return st !== null && Object.keys(st).length > 0 && Object.values(st).every((s) => s === 'Active');
}

/** Whether every running peer sees every replica Active. */
export async function allActive(c: Cluster, name: string): Promise<boolean> {
  const running = c.running();
  if (running.length === 0) return false;
  const views = await Promise.all(running.map((p) => allActiveOn(p.url, name)));
  return views.every(Boolean);
}

/** States that are not Active, as `shard/peer=State` (empty when all are Active), from peer `url`. */
export async function notActive(url: string, name: string): Promise<string[]> {
  const st = await replicaStates(url, name).catch(() => null);
  if (st === null) return ['(no answer)'];
  return Object.entries(st)
    .filter(([, s]) => s !== 'Active')
    .map(([k, s]) => `${k}=${s}`);
}

export interface ReplicaDigest {
  peer: string;
  points: number;
  digest: string;
}

/** Per shard: the digest of each replica, asked of every running peer (a peer without a replica of the shard answers an error and is skipped). */
export async function digests(c: Cluster, name: string, shards: number): Promise<Map<number, ReplicaDigest[]>> {
  const out = new Map<number, ReplicaDigest[]>();
  for (let s = 0; s < shards; s++) out.set(s, []);
  for (const p of c.running()) {
    for (let s = 0; s < shards; s++) {
      const r = await api(p.url, 'GET', `/collections/${name}/shards/${s}/digest`, undefined, 60_000).catch(() => null);
      if (r === null || r.status !== 200) continue;
      out.get(s)!.push({ peer: String(r.body.result.peer_id), points: r.body.result.points_count, digest: r.body.result.digest });
    }
  }
  return out;
}

/** Shards whose replicas do not all have the same digest (or that have fewer replicas than `rf`), with what each replica said. */
export function divergent(d: Map<number, ReplicaDigest[]>, rf: number): Array<{ shard: number; replicas: ReplicaDigest[]; why: string }> {
  const out: Array<{ shard: number; replicas: ReplicaDigest[]; why: string }> = [];
  for (const [shard, reps] of d) {
    if (reps.length < rf) out.push({ shard, replicas: reps, why: `${reps.length} of ${rf} replicas answered a digest` });
    else if (new Set(reps.map((r) => `${r.points}:${r.digest}`)).size > 1) out.push({ shard, replicas: reps, why: 'replicas differ' });
  }
  return out;
}

/** Whether every replica of every shard has the same digest (and there are `rf` of them). */
export async function identical(c: Cluster, name: string, shards: number, rf: number): Promise<boolean> {
  return divergent(await digests(c, name, shards), rf).length === 0;
}

// -- data -----------------------------------------------------------------------------------

/** The JSON text of base vector `i` as JSON.stringify writes float32 values (what a JS or numpy client sends; as bench/rest does by default). */
export function vectorText(base: Float32Array, dim: number, i: number): string {
  return JSON.stringify(Array.from(base.subarray(i * dim, (i + 1) * dim)));
}
