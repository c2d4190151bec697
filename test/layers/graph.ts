/**
 * The layers of Quiver's TypeScript, as data, and the check that the imports keep to
 * them (docs/architecture.md draws the same picture). `npm run check:layers` runs it
 * alone; test/layers/layers.test.ts runs it in `make test`.
 *
 * Owns: the rank of every folder and the rules: an import points to a lower rank, or
 * stays within its own folder; two folders of the same rank never import each other;
 * no two files import each other, directly or around a loop. It is a build-time check over
 * the source files, never part of the server.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';

/** Folders (relative to the repository root) from the top of the stack to the ground. */
export const LAYERS: ReadonlyArray<{ unit: string; rank: number; owns: string }> = [
  { unit: 'ts/api/cli', rank: 0, owns: 'the command line: arguments, start-up, signals' },
  { unit: 'ts/node.ts', rank: 5, owns: 'composition: builds every part and wires them together' },
  { unit: 'ts/api/rest', rank: 10, owns: 'REST (Koa and the direct lane): requests to typed calls, answers to envelopes' },
  { unit: 'ts/api/grpc', rank: 10, owns: 'the public gRPC API (the reference\'s v1.18 contract): proto messages to the JSON-form requests REST parses, answers back, the call wrapper (auth, status codes, metrics)' },
  { unit: 'ts/api/p2p', rank: 10, owns: 'the internal gRPC service between peers and its clients' },
  { unit: 'ts/api/request', rank: 12, owns: 'the requests of the reference\'s API in their JSON form, parsed and validated into typed calls, and the answers built from the same data: shared by REST and gRPC' },
  { unit: 'ts/api', rank: 15, owns: 'what every API shares: error kinds to HTTP status, the envelope, TLS files' },
  { unit: 'ts/snapshots', rank: 20, owns: 'snapshot archives, their stores (disk, S3) and recovery' },
  { unit: 'ts/auth', rank: 20, owns: 'api keys, JWT, the access model, the audit log' },
  { unit: 'ts/transfer', rank: 25, owns: 'shard transfers (the source side), health checks between peers, the leader\'s supervision of replica states' },
  { unit: 'ts/storage', rank: 30, owns: 'the table of collections and aliases, the metadata state machine and how it reaches local storage' },
  { unit: 'ts/consensus', rank: 40, owns: 'Raft: the pure core, its durable log, the driver' },
  { unit: 'ts/collection', rank: 50, owns: 'a collection: shards, replica sets, routing, merging, queries' },
  { unit: 'ts/shard', rank: 60, owns: 'a local shard: WAL, ids, payloads and their indexes, vectors, filters' },
  { unit: 'ts/config', rank: 70, owns: 'the configuration: defaults, files, environment, validation' },
  { unit: 'ts/common', rank: 80, owns: 'error kinds, file helpers, checksums: no Quiver import at all' },
  { unit: 'bindings', rank: 90, owns: 'the Engine interface and its native and WASM backends' },
];

/** The repository root: the nearest folder above this module holding package.json (from test/ or dist/test/). */
export function repoRoot(): string {
  let dir = __dirname;
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error('package.json not found above ' + __dirname);
    dir = up;
  }
  return dir;
}

/** The folders the check reads. */
export const ROOTS = ['ts', 'bindings'];

export interface Violation {
  kind: 'upward' | 'sideways' | 'cycle' | 'unplaced';
  message: string;
}

/** The layer a file belongs to: the longest unit that is the file or a folder holding it. */
export function unitOf(file: string): { unit: string; rank: number } | null {
  let best: { unit: string; rank: number } | null = null;
  for (const l of LAYERS) {
    if (file === l.unit || file.startsWith(l.unit + '/')) {
      if (best === null || l.unit.length > best.unit.length) best = l;
    }
  }
  return best;
}

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'";]*?from\s+'(\.[^']+)'|(?:^|\W)(?:require|import)\(\s*'(\.[^']+)'\s*\)/g;

/** Relative imports of each .ts file under the roots, as repository-relative paths without extension. */
export function importGraph(repoRoot: string): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const walk = (dir: string): void => {
    for (const entry of fs.readdirSync(path.join(repoRoot, dir), { withFileTypes: true })) {
      const rel = path.posix.join(dir, entry.name);
      if (entry.isDirectory()) walk(rel);
      else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) {
        const text = fs.readFileSync(path.join(repoRoot, rel), 'utf8');
        const targets: string[] = [];
        for (const m of text.matchAll(IMPORT)) {
          const spec = m[1] ?? m[2];
          if (spec === undefined) continue;
          const target = path.posix.normalize(path.posix.join(path.posix.dirname(rel), spec));
          targets.push(resolveTs(repoRoot, target));
        }
        graph.set(rel.replace(/\.ts$/, ''), targets);
      }
    }
  };
  for (const r of ROOTS) walk(r);
  return graph;
}

function resolveTs(repoRoot: string, target: string): string {
  if (fs.existsSync(path.join(repoRoot, target + '.ts'))) return target;
  if (fs.existsSync(path.join(repoRoot, target, 'index.ts'))) return target + '/index';
  return target; // a .json or a file outside the roots: kept as written
}

/** Every broken rule in the graph. */
export function checkLayers(graph: Map<string, string[]>): Violation[] {
  const out: Violation[] = [];
  const withTs = (f: string) => (f.startsWith('bindings/') || f.startsWith('ts/') ? f + '.ts' : f);
  for (const [file, targets] of graph) {
    const from = unitOf(withTs(file));
    if (from === null) {
      out.push({ kind: 'unplaced', message: `${file}.ts is in no layer: add its folder to LAYERS in test/layers/graph.ts` });
      continue;
    }
    for (const t of targets) {
      if (!graph.has(t)) continue; // outside the checked roots (package.json, proto files)
      const to = unitOf(withTs(t));
      if (to === null || to.unit === from.unit) continue;
      if (to.rank < from.rank) out.push({ kind: 'upward', message: `${file} (${from.unit}) imports ${t} (${to.unit}), a higher layer` });
      else if (to.rank === from.rank) out.push({ kind: 'sideways', message: `${file} (${from.unit}) imports ${t} (${to.unit}), a layer of the same rank` });
    }
  }
  for (const cycle of cycles(graph)) out.push({ kind: 'cycle', message: `import cycle: ${cycle.join(' -> ')} -> ${cycle[0]}` });
  return out;
}

/** Strongly connected components of more than one file (Tarjan), each as a list of files. */
export function cycles(graph: Map<string, string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      for (;;) {
        const w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
        if (w === v) break;
      }
      if (scc.length > 1) found.push(scc.reverse());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return found;
}

if (require.main === module) {
  const root = repoRoot();
  const violations = checkLayers(importGraph(root));
  for (const v of violations) console.log(`${v.kind}: ${v.message}`);
  console.log(violations.length === 0 ? 'layers: every import points down, no cycles' : `layers: ${violations.length} violation(s)`);
  process.exit(violations.length === 0 ? 0 : 1);
}
