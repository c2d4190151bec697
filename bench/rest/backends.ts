/**
 * `npm run bench:rest -- --backends native,wasm [other bench:rest options]`
 *
 * The REST benchmark once per engine backend, one after the other in one run (each a
 * child `run.js --backend <b> --tag <tag>-<b>` with the other options passed on), then
 * the figures side by side: upsert points/s (batches of 1000, one client) and query
 * QPS at c=8 for each ef, and each backend's ratio to the first one listed. Writes
 * bench/results/rest-backends-<tag>.{json,md}.
 */
import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { REPO_ROOT, today } from '../engine/common';
import type { RestResults } from './report';

type Backend = 'native' | 'wasm';

function take(argv: string[], flag: string): { value: string | undefined; rest: string[] } {
  const rest: string[] = [];
  let value: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === flag) value = argv[++i];
    else if (a.startsWith(`${flag}=`)) value = a.slice(flag.length + 1);
    else rest.push(a);
  }
  return { value, rest };
}

export async function runBackends(argv: string[]): Promise<void> {
  const b = take(argv, '--backends');
  const backends = (b.value ?? 'native,wasm').split(',').map((s) => s.trim()) as Backend[];
  for (const x of backends) if (x !== 'native' && x !== 'wasm') throw new Error(`--backends: native and/or wasm, got ${x}`);
  const t = take(b.rest, '--tag');
  const tag = t.value ?? today();
  const rd = take(t.rest, '--results-dir');
  const resultsDir = rd.value ? path.resolve(rd.value) : path.join(REPO_ROOT, 'bench', 'results');
  const passOn = rd.value ? [...rd.rest, '--results-dir', resultsDir] : rd.rest;
  const runs: Array<{ backend: Backend; results: RestResults }> = [];
  for (const backend of backends) {
    const runTag = `${tag}-${backend}`;
    console.log(`== bench:rest on the ${backend} backend (tag ${runTag})`);
    const child = spawnSync(process.execPath, [path.join(__dirname, 'run.js'), ...passOn, '--backend', backend, '--tag', runTag], { stdio: 'inherit' });
    if (child.status !== 0) throw new Error(`bench:rest on ${backend} failed (exit ${child.status ?? child.signal})`);
    const results = JSON.parse(fs.readFileSync(path.join(resultsDir, `rest-${runTag}.json`), 'utf8')) as RestResults;
    runs.push({ backend, results });
  }

  const upsert = (r: RestResults) => r.upserts.find((u) => (u.transport ?? 'REST') === 'REST' && u.batch === 1000 && u.clients === 1)?.pointsPerSec ?? null;
  const efs = [...new Set(runs.flatMap((r) => r.results.queries.filter((q) => q.via === 'rest' && q.concurrency === 8).map((q) => q.ef)))].sort((x, y) => x - y);
  const qps = (r: RestResults, ef: number) => r.queries.find((q) => q.via === 'rest' && q.concurrency === 8 && q.ef === ef) ?? null;
  const base = runs[0];
  const ratio = (a: number | null, b0: number | null) => (a === null || b0 === null || b0 === 0 ? 'n/a' : `${(a / b0).toFixed(2)}x`);
  const lines = [
    `# bench:rest, engine backends side by side (${tag})`,
    '',
    `One run: ${runs.map((r) => `\`rest-${tag}-${r.backend}\``).join(', ')} (same data, options and machine, one after the other). Ratios are to ${base.backend}.`,
    '',
    `| backend | upsert points/s (batch 1000, 1 client, wait=true) | ratio | ${efs.map((ef) => `query QPS c=8 ef=${ef} | recall | ratio`).join(' | ')} |`,
    `|---|---:|---:|${efs.map(() => '---:|---:|---:').join('|')}|`,
  ];
  for (const r of runs) {
    const cells = efs.map((ef) => {
      const q = qps(r.results, ef);
      const q0 = qps(base.results, ef);
      return `${q ? Math.round(q.qps) : 'n/a'} | ${q?.recall ?? 'n/a'} | ${ratio(q?.qps ?? null, q0?.qps ?? null)}`;
    });
    const u = upsert(r.results);
    lines.push(`| ${r.backend} | ${u === null ? 'n/a' : Math.round(u)} | ${ratio(u, upsert(base.results))} | ${cells.join(' | ')} |`);
  }
  lines.push('');
  for (const r of runs) {
    const m = r.results.machine;
    lines.push(`${r.backend}: load average ${m.loadAverageAtStart.join(' ')} at the start, cores available ≈ ${m.coresAvailableAtStart} (at the end ${m.coresAvailableAtEnd}).`);
  }
  const md = lines.join('\n') + '\n';
  fs.mkdirSync(resultsDir, { recursive: true });
  const jsonPath = path.join(resultsDir, `rest-backends-${tag}.json`);
  const mdPath = path.join(resultsDir, `rest-backends-${tag}.md`);
  fs.writeFileSync(
    jsonPath,
    JSON.stringify(
      runs.map((r) => ({
        backend: r.backend,
        upsertPointsPerSec: upsert(r.results),
        queryC8: efs.map((ef) => ({ ef, qps: qps(r.results, ef)?.qps ?? null, recall: qps(r.results, ef)?.recall ?? null })),
      })),
      null,
      2,
    ) + '\n',
  );
  fs.writeFileSync(mdPath, md);
  console.log('');
  console.log(md);
  console.log(`wrote ${path.relative(process.cwd(), jsonPath)} and ${path.relative(process.cwd(), mdPath)}`);
}
