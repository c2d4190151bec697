/**
 * Starts a real Quiver server (`node bin/quiver`) for the REST benchmark on a free
 * port with a temporary storage directory, waits for GET /readyz, reads its CPU time
 * (main thread apart from the other threads, from /proc) and stops it with SIGTERM.
 */
import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { REPO_ROOT } from '../engine/common';

export interface ServerOptions {
  /** Extra node flags for the server process (e.g. --cpu-prof). */
  nodeArgs: string[];
  /** Keep the storage directory after the run. */
  keepStorage: boolean;
  /** Extra environment variables (SERVICE__... overrides). */
  env: Record<string, string>;
  /** Start on a copy of this storage directory (a stopped server's `<dir>/storage`) instead of an empty one. */
  storageFrom?: string;
  /** Run the server of another built checkout (default: this one). */
  root?: string;
}

export interface ServerCpu {
  /** CPU seconds of the main (JavaScript) thread. */
  mainSec: number;
  /** CPU seconds of every other thread: libuv pool (engine calls, fs), V8 helpers (GC), engine threads. */
  otherSec: number;
}

/** A free TCP port on 127.0.0.1 (asks the OS for one, then releases it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

const CLK_TCK = 100;

function readTicks(file: string): number {
  // /proc/<pid>/task/<tid>/stat: "tid (comm) state ..." — utime and stime are fields 14 and 15.
  const s = fs.readFileSync(file, 'utf8');
  const rest = s.slice(s.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state), so field n is rest[n - 3].
  return Number(rest[11]) + Number(rest[12]);
}

export class QuiverServer {
  readonly port: number;
  readonly url: string;
  readonly dir: string;
  private child: ChildProcess | null = null;
  private exited: Promise<number | null>;
  private stderrTail: string[] = [];
  /** Threads seen so far and their last tick counts (threads that ended keep their final count). */
  private lastTicks = new Map<number, number>();

  private constructor(port: number, dir: string, child: ChildProcess) {
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.dir = dir;
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
    const keep = (chunk: Buffer) => {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (!line.trim()) continue;
        this.stderrTail.push(line);
        if (this.stderrTail.length > 40) this.stderrTail.shift();
      }
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
  }

  get pid(): number {
    return this.child?.pid ?? -1;
  }

  /** Last lines the server wrote (WARN and above, and anything on stderr). */
  logTail(): string[] {
    return [...this.stderrTail];
  }

  static async start(opts: ServerOptions): Promise<QuiverServer> {
    const root = opts.root ?? REPO_ROOT;
    const entry = path.join(root, 'dist', 'ts', 'api', 'cli', 'main.js');
    if (!fs.existsSync(entry)) throw new Error(`${entry} is missing: build the server first (npm run build:ts or make build)`);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-bench-rest-'));
    if (opts.storageFrom) fs.cpSync(opts.storageFrom, path.join(dir, 'storage'), { recursive: true });
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      SERVICE__SERVICE__HTTP_PORT: String(port),
      // gRPC off unless the options turn it on (opts.env): it would take port 6334.
      SERVICE__SERVICE__GRPC_PORT: 'null',
      SERVICE__SERVICE__HOST: '127.0.0.1',
      SERVICE__STORAGE__STORAGE_PATH: path.join(dir, 'storage'),
      SERVICE__STORAGE__SNAPSHOTS_PATH: path.join(dir, 'snapshots'),
      SERVICE__LOG_LEVEL: 'WARN',
      SERVICE__TELEMETRY_DISABLED: 'true',
      ...opts.env,
    };
    // The working directory is the temp dir, so no config/local.yaml of the checkout is read.
    const child = spawn(process.execPath, [...opts.nodeArgs, path.join(root, 'bin', 'quiver')], {
      cwd: dir,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const server = new QuiverServer(port, dir, child);
    server.keepStorage = opts.keepStorage;
    try {
      await server.waitReady(30_000);
    } catch (e) {
      await server.stop().catch(() => undefined);
      throw e;
    }
    return server;
  }

  keepStorage = false;

  private async waitReady(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let exitCode: number | null | undefined;
    this.exited.then((c) => (exitCode = c));
    while (Date.now() < deadline) {
      if (exitCode !== undefined) throw new Error(`server exited (code ${exitCode}) before it was ready:\n${this.stderrTail.join('\n')}`);
      try {
        const r = await fetch(`${this.url}/readyz`);
        if (r.status === 200) {
          await r.text();
          return;
        }
      } catch {
        /* not listening yet */
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`server not ready after ${timeoutMs} ms:\n${this.stderrTail.join('\n')}`);
  }

  /** Cumulative CPU seconds of the server so far (Linux /proc; null elsewhere). */
  cpu(): ServerCpu | null {
    const pid = this.pid;
    if (pid <= 0) return null;
    try {
      for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
        try {
          this.lastTicks.set(Number(t), readTicks(`/proc/${pid}/task/${t}/stat`));
        } catch {
          /* thread ended meanwhile */
        }
      }
    } catch {
      return null;
    }
    let main = 0;
    let other = 0;
    for (const [tid, ticks] of this.lastTicks) {
      if (tid === pid) main += ticks;
      else other += ticks;
    }
    return { mainSec: main / CLK_TCK, otherSec: other / CLK_TCK };
  }

  /** Resident set size of the server in bytes (Linux /proc; null elsewhere). */
  rss(): number | null {
    try {
      const s = fs.readFileSync(`/proc/${this.pid}/status`, 'utf8');
      const m = /VmRSS:\s+(\d+) kB/.exec(s);
      return m ? Number(m[1]) * 1024 : null;
    } catch {
      return null;
    }
  }

  /** Peak resident set of the server so far (VmHWM) in bytes (Linux /proc; null elsewhere). */
  peakRss(): number | null {
    try {
      const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${this.pid}/status`, 'utf8'));
      return m ? Number(m[1]) * 1024 : null;
    } catch {
      return null;
    }
  }

  /** SIGTERM (graceful: drain, checkpoint, close), SIGKILL after `graceMs`; removes the storage unless kept. */
  async stop(graceMs = 60_000): Promise<{ code: number | null; seconds: number }> {
    const t0 = Date.now();
    let code: number | null = null;
    if (this.child && this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child?.kill('SIGKILL'), graceMs);
      code = await this.exited;
      clearTimeout(timer);
    } else if (this.child) {
      code = this.child.exitCode;
    }
    this.child = null;
    if (!this.keepStorage) fs.rmSync(this.dir, { recursive: true, force: true });
    return { code, seconds: (Date.now() - t0) / 1000 };
  }

  /** Synchronous last-resort kill (process exit handler). */
  killNow(): void {
    if (this.child && this.child.exitCode === null) this.child.kill('SIGKILL');
    if (!this.keepStorage) fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

export function cpuDelta(a: ServerCpu | null, b: ServerCpu | null): ServerCpu | null {
  if (!a || !b) return null;
  return { mainSec: b.mainSec - a.mainSec, otherSec: b.otherSec - a.otherSec };
}

/** Bytes of the files under `dir` (recursively). */
export function dirBytes(dir: string): number {
  let n = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) n += dirBytes(p);
    else if (e.isFile()) n += fs.statSync(p).size;
  }
  return n;
}

/**
 * The server's RSS once it has settled: waits `quietMs` (its idle work, GC and
 * checkpoint run), then until RSS moves less than 8 MiB in a second (at most `tries` seconds).
 */
export async function settledRss(server: QuiverServer, quietMs = 6000, tries = 20): Promise<number | null> {
  await new Promise((r) => setTimeout(r, quietMs));
  let last = server.rss();
  for (let i = 0; i < tries; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    const now = server.rss();
    if (now !== null && last !== null && Math.abs(now - last) < 8 << 20) return now;
    last = now;
  }
  return last;
}
