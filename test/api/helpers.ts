/**
 * Runs the real `bin/quiver` process for the API tests: a free port on 127.0.0.1,
 * storage in a temporary folder, and nothing inherited from the caller's SERVICE__*
 * variables; and what the tests against such a server share: JSON calls, waiting for
 * green, the files under a storage folder, answers compared across engines.
 */

import type { ExecutionContext } from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';

import { claimPort } from '../support/ports';
import { IDLE_CONNECTION_SEC, START_DEADLINE_MS, waitFor } from '../support/wait';

export const REPO_ROOT = path.resolve(__dirname, '..', '..', '..');
export const BIN = path.join(REPO_ROOT, 'bin', 'quiver');

/**
 * A port nothing listens on now, never one this process was given before: a test that
 * takes two in a row (HTTP and gRPC) must not get the same one twice (CI saw that), and
 * the kernel may offer a just-closed one again, here or to another test process
 * (claimPort).
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = net.createServer();
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        const { port: p } = server.address() as net.AddressInfo;
        server.close(() => resolve(p));
      });
    });
    if (claimPort(port)) return port;
  }
}

function baseEnv(dir: string, port: number, extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith('SERVICE__')) env[key] = value;
  return {
    ...env,
    SERVICE__SERVICE__HOST: '127.0.0.1',
    SERVICE__SERVICE__HTTP_PORT: String(port),
    // gRPC off unless a test asks for it (SERVICE__SERVICE__GRPC_PORT in `extra`):
    // servers of parallel tests would all take the default port 6334.
    SERVICE__SERVICE__GRPC_PORT: 'null',
    SERVICE__STORAGE__STORAGE_PATH: path.join(dir, 'storage'),
    SERVICE__STORAGE__SNAPSHOTS_PATH: path.join(dir, 'snapshots'),
    SERVICE__SERVICE__HTTP_KEEP_ALIVE_TIMEOUT_SEC: String(IDLE_CONNECTION_SEC),
    ...extra,
  };
}

export interface Exited {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs bin/quiver to its end (for runs expected to stop at once). */
export async function runQuiver(args: string[], extraEnv: Record<string, string> = {}, timeoutMs = START_DEADLINE_MS): Promise<Exited> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-cli-'));
  const child = spawn(process.execPath, [BIN, ...args], { cwd: dir, env: baseEnv(dir, await freePort(), extraEnv) });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  // 'close', not 'exit': at 'exit' the last output may still be in the pipes.
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.once('close', (c, s) => resolve([c, s])),
  );
  clearTimeout(timer);
  fs.rmSync(dir, { recursive: true, force: true });
  return { code, signal, stdout, stderr };
}

export interface RunningQuiver {
  url: string;
  port: number;
  child: ChildProcess;
  /** Every stdout line parsed as JSON (pino), in order. */
  logLines(): Array<Record<string, unknown>>;
  /** Resolves with the exit code once the process ends. */
  exited: Promise<number | null>;
  /** Sends the signal (SIGTERM by default) and waits for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts bin/quiver and waits for its "REST API listening" log line. */
export async function startQuiver(extraEnv: Record<string, string> = {}, timeoutMs = START_DEADLINE_MS): Promise<RunningQuiver> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-node-'));
  const port = await freePort();
  const child = spawn(process.execPath, [BIN], { cwd: dir, env: baseEnv(dir, port, extraEnv) });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  let stopping = false;
  // 'close', not 'exit': at 'exit' the last log lines may still be in the pipe.
  const exited = new Promise<number | null>((resolve) =>
    child.once('close', (code, signal) => {
      // A server that ends while a test still uses it leaves only 'fetch failed' in the
      // test's output: say how it ended, with its last words.
      if (!stopping) {
        process.stderr.write(`bin/quiver on port ${port} ended by itself (code ${code}, signal ${signal}); stderr: ${stderr.slice(-4000)}; stdout tail: ${stdout.slice(-4000)}\n`);
      }
      fs.rmSync(dir, { recursive: true, force: true });
      resolve(code);
    }),
  );
  // Complete lines only: the last piece of stdout may be a line still being written.
  const logLines = () =>
    stdout
      .slice(0, stdout.lastIndexOf('\n') + 1)
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);

  const listeningPort = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`quiver did not start within ${timeoutMs} ms; stderr: ${stderr}; stdout: ${stdout}`));
    }, timeoutMs);
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString();
      const line = logLines().find((l) => l.msg === 'REST API listening');
      if (line !== undefined) {
        clearTimeout(timer);
        resolve(Number(line.port));
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`quiver exited with ${code} before listening; stderr: ${stderr}`));
    });
  });

  return {
    url: `http://127.0.0.1:${listeningPort}`,
    port: listeningPort,
    child,
    logLines,
    exited,
    stop(signal: NodeJS.Signals = 'SIGTERM') {
      stopping = true;
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** A running server: whatever has its base URL. */
export interface HasUrl {
  url: string;
}

/** One request with an optional JSON body; the reply's status and parsed body (undefined when empty). */
export async function call(server: HasUrl, method: string, p: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${server.url}${p}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** `call` that must answer 200; its `result`. */
export async function ok(t: ExecutionContext, server: HasUrl, method: string, p: string, body?: unknown): Promise<any> {
  const r = await call(server, method, p, body);
  t.is(r.status, 200, `${method} ${p}: ${JSON.stringify(r.body)}`);
  return r.body.result;
}

/** Waits (up to 2 minutes) for collection `c` to report status green. */
export async function green(server: HasUrl, c: string): Promise<void> {
  await waitFor(`${c} green`, async () => (await call(server, 'GET', `/collections/${c}`)).body?.result?.status === 'green', 120_000);
}

/** The paths of the files under `root`, at any depth, whose name `pattern` matches. */
export function filesUnder(root: string, pattern: RegExp): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(path.join(d, e.name));
      else if (pattern.test(e.name)) out.push(path.join(d, e.name));
    }
  };
  walk(root);
  return out;
}

/**
 * Lists of [id, score] from another engine: the same ids in the same order, each
 * score within 1e-5 of the one in `base` (the last bits differ between kernels).
 */
export function sameIdsCloseScores(t: ExecutionContext, got: unknown[], base: unknown[], message: string): void {
  const g = got as Array<Array<[number, number]>>;
  const b = base as Array<Array<[number, number]>>;
  t.deepEqual(
    g.map((r) => r.map(([id]) => id)),
    b.map((r) => r.map(([id]) => id)),
    message,
  );
  g.forEach((r, i) => r.forEach(([, score], j) => t.true(Math.abs(score - b[i][j][1]) < 1e-5, `${score} vs ${b[i][j][1]}`)));
}

/**
 * Recovers `collection` on `server` (its storage folder `dir`) from `file`, another
 * node's snapshot, copied first: a node recovers only from files in its own snapshots folder.
 */
export async function recoverCopy(t: ExecutionContext, server: HasUrl, dir: string, collection: string, file: string): Promise<void> {
  const copy = path.join(dir, 'snapshots', collection, path.basename(file));
  fs.mkdirSync(path.dirname(copy), { recursive: true });
  fs.copyFileSync(file, copy);
  await ok(t, server, 'PUT', `/collections/${collection}/snapshots/recover?wait=true`, { location: `file://${copy}`, priority: 'snapshot' });
}

/**
 * At the end of test `t`: stops (SIGTERM) the servers `running` returns then (the test
 * may have replaced them; null where none runs), then removes `dirs`.
 */
export function cleanUp(t: ExecutionContext, dirs: string[], running: () => Array<{ stop(signal: NodeJS.Signals): Promise<unknown> } | null>): void {
  t.teardown(async () => {
    for (const s of running()) if (s) await s.stop('SIGTERM');
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  });
}
