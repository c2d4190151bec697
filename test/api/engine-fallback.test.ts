/**
 * The node on the WASM fallback: start-up picks the backend (falls back when the
 * native addon cannot load, and says why once; QUIVER_ENGINE=native forbids that),
 * /telemetry and /metrics show it, and the packed package (`npm pack`) runs from its
 * files alone with no Rust toolchain on PATH. scripts/pack-smoke.sh does the full
 * `npm install` of the tarball; here it is extracted and borrows this checkout's
 * node_modules, which keeps the test quick.
 */

import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { freePort, REPO_ROOT, runQuiver, startQuiver } from './helpers';
import { START_DEADLINE_MS, waitFor } from '../support/wait';

const NO_ADDON = path.join(os.tmpdir(), 'quiver-no-such-addon.node');

async function upsertAndQuery(url: string): Promise<number> {
  const put = (p: string, body: unknown) =>
    fetch(`${url}${p}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if ((await put('/collections/c', { vectors: { size: 3, distance: 'Dot' } })).status !== 200) throw new Error('create failed');
  const up = await put('/collections/c/points?wait=true', {
    points: [
      { id: 1, vector: [1, 0, 0] },
      { id: 2, vector: [0, 1, 0] },
      { id: 3, vector: [0, 0, 1] },
    ],
  });
  if (up.status !== 200) throw new Error(`upsert: ${up.status} ${await up.text()}`);
  const q = await fetch(`${url}/collections/c/points/query`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query: [0, 1, 0.5], limit: 1 }),
  });
  return ((await q.json()) as { result: { points: Array<{ id: number }> } }).result.points[0].id;
}

test('a node whose addon cannot load starts on WASM, logs why once, and shows the backend in /telemetry and /metrics', async (t) => {
  const node = await startQuiver({ QUIVER_ENGINE: '', QUIVER_ADDON_PATH: NO_ADDON });
  t.teardown(() => node.stop());
  t.is(await upsertAndQuery(node.url), 2);
  const loaded = node.logLines().filter((l) => l.msg === 'quiver engine loaded');
  t.is(loaded.length, 1, 'the choice is logged once');
  t.like(loaded[0], { backend: 'wasm', kernels: 'simd128' });
  t.regex(String(loaded[0].reason), /^native addon unavailable: .*quiver-no-such-addon\.node/);
  const tel = (await (await fetch(`${node.url}/telemetry`)).json()) as { result: { app: { engine: unknown } } };
  t.deepEqual(tel.result.app.engine, { backend: 'wasm', kernels: 'simd128' });
  const metrics = await (await fetch(`${node.url}/metrics`)).text();
  t.regex(metrics, /^engine_backend_info\{backend="wasm",kernels="simd128"\} 1$/m);
  // Every WASM call runs on its worker: no per-call path to count.
  t.notRegex(metrics, /engine_searches_total/);
});

test('a native node counts its searches by path in /metrics', async (t) => {
  const node = await startQuiver({ QUIVER_ENGINE: 'native' });
  t.teardown(() => node.stop());
  const counts = async () => {
    const text = await (await fetch(`${node.url}/metrics`)).text();
    const one = (path: string) => {
      const m = new RegExp(`^engine_searches_total\\{path="${path}"\\} (\\d+)$`, 'm').exec(text);
      if (m === null) throw new Error(`no engine_searches_total{path="${path}"} in /metrics`);
      return Number(m[1]);
    };
    return { inline: one('inline'), nextTurn: one('next_turn'), pool: one('pool') };
  };
  const before = await counts();
  // Scrapes read the tallies, they do not add them up: two in a row agree.
  t.deepEqual(await counts(), before);
  t.is(await upsertAndQuery(node.url), 2);
  for (let i = 0; i < 5; i++) {
    const q = await fetch(`${node.url}/collections/c/points/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query: [1, 0, 0], limit: 1 }) });
    t.is(q.status, 200);
  }
  const after = await counts();
  t.deepEqual(await counts(), after);
  // Six queries of one plain search each: each ran once, on the loop or on the pool.
  t.is(after.inline + after.pool - before.inline - before.pool, 6, JSON.stringify({ before, after }));
  // The first search of a new index has no cost estimate yet: it takes the pool.
  t.true(after.pool - before.pool >= 1, JSON.stringify({ before, after }));
});

test('QUIVER_ENGINE=native forbids the fallback: start-up fails and says why', async (t) => {
  const run = await runQuiver([], { QUIVER_ENGINE: 'native', QUIVER_ADDON_PATH: NO_ADDON });
  t.not(run.code, 0);
  t.regex(run.stdout + run.stderr, /cannot load the engine: .*quiver-no-such-addon\.node/);
  t.notRegex(run.stdout, /REST API listening/);
});

test('the packed package runs from its own files with no cargo or rustc on PATH, on WASM when it has no addon for the platform', async (t) => {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-pack-'));
  t.teardown(() => fs.rmSync(work, { recursive: true, force: true }));
  // --ignore-scripts: dist/ is already built for the suite (prepack would run tsc again).
  const pack = spawnSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], { cwd: REPO_ROOT, encoding: 'utf8' });
  t.is(pack.status, 0, pack.stderr);
  const [info] = JSON.parse(pack.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  const files = info.files.map((f) => f.path);
  for (const f of ['bin/quiver', 'dist/ts/api/cli/main.js', 'dist/bindings/wasm-worker.js', 'config/config.yaml', 'proto/p2p.proto', 'web/dashboard/index.html']) {
    t.true(files.includes(f), `${f} is packed`);
  }
  t.true(files.includes('crates/quiver-wasm/target/wasm32-unknown-unknown/release/quiver_wasm.wasm'), 'the prebuilt .wasm is packed');
  t.false(files.some((f) => f.startsWith('dist/test/') || f.startsWith('ts/') || f.startsWith('crates/quiver-core/')), 'no tests or sources');
  const untar = spawnSync('tar', ['xzf', path.join(work, info.filename), '-C', work]);
  t.is(untar.status, 0, String(untar.stderr));
  const pkg = path.join(work, 'package');
  // A platform the addon was not built for: no .node in the package.
  for (const f of fs.readdirSync(path.join(pkg, 'crates', 'quiver-node'), { withFileTypes: true })) {
    if (f.name.endsWith('.node')) fs.rmSync(path.join(pkg, 'crates', 'quiver-node', f.name));
  }
  fs.symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(pkg, 'node_modules'));
  const bin = path.join(work, 'bin');
  fs.mkdirSync(bin);
  fs.symlinkSync(process.execPath, path.join(bin, 'node'));
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    PATH: bin,
    HOME: work,
    SERVICE__SERVICE__HOST: '127.0.0.1',
    SERVICE__SERVICE__HTTP_PORT: String(port),
    SERVICE__SERVICE__GRPC_PORT: 'null',
    SERVICE__STORAGE__STORAGE_PATH: path.join(work, 'storage'),
    SERVICE__STORAGE__SNAPSHOTS_PATH: path.join(work, 'snapshots'),
  };
  t.is(spawnSync('/bin/sh', ['-c', 'command -v cargo || command -v rustc'], { env }).status, 127, 'neither cargo nor rustc is on PATH');
  const child = spawn(process.execPath, [path.join(pkg, 'bin', 'quiver')], { cwd: work, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (out += c.toString()));
  const ended = new Promise((resolve) => child.once('close', resolve));
  t.teardown(async () => {
    child.kill('SIGKILL');
    await ended;
  });
  await waitFor('the packed node to listen', () => out.includes('"REST API listening"'), START_DEADLINE_MS);
  const url = `http://127.0.0.1:${port}`;
  t.is(await upsertAndQuery(url), 2);
  const tel = (await (await fetch(`${url}/telemetry`)).json()) as { result: { app: { engine: { backend: string } } } };
  t.is(tel.result.app.engine.backend, 'wasm');
  t.regex(out, /"reason":"native addon unavailable: native addon not built/);
});
