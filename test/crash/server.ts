/**
 * Starts the real server process (node running bin/quiver, no wrapper shell, so a
 * SIGKILL hits the server itself) on a storage directory that outlives the process,
 * for the crash tests. The caller owns the directory.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';

import { BIN, freePort } from '../api/helpers';
import { IDLE_CONNECTION_SEC, START_DEADLINE_MS } from '../support/wait';

export { BIN, REPO_ROOT, freePort } from '../api/helpers';

export interface Server {
  url: string;
  pid: number;
  child: ChildProcess;
  /** Every stdout line that parses as JSON (pino), in order. */
  logLines(): Array<Record<string, unknown>>;
  stderr(): string;
  /** Resolves once the process has ended: [exit code, signal]. */
  exited: Promise<[number | null, NodeJS.Signals | null]>;
  /** Sends the signal to the server process and waits until it has ended. */
  stop(signal: NodeJS.Signals): Promise<[number | null, NodeJS.Signals | null]>;
}

/** Starts bin/quiver with `storageDir` and waits for its "REST API listening" line. */
export async function startServer(storageDir: string, extraEnv: Record<string, string> = {}, timeoutMs = START_DEADLINE_MS, args: string[] = []): Promise<Server> {
  const port = extraEnv.SERVICE__SERVICE__HTTP_PORT !== undefined ? Number(extraEnv.SERVICE__SERVICE__HTTP_PORT) : await freePort();
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('SERVICE__')) env[k] = v;
  Object.assign(env, {
    SERVICE__SERVICE__HOST: '127.0.0.1',
    SERVICE__SERVICE__HTTP_PORT: String(port),
    // gRPC off unless asked for: servers of parallel tests would all take port 6334.
    SERVICE__SERVICE__GRPC_PORT: 'null',
    SERVICE__STORAGE__STORAGE_PATH: path.join(storageDir, 'storage'),
    SERVICE__STORAGE__SNAPSHOTS_PATH: path.join(storageDir, 'snapshots'),
    SERVICE__LOG_LEVEL: 'DEBUG',
    // A test client can be busy for longer than the default 5 s idle timeout (comparing
    // tens of thousands of points on a loaded machine) and then send its next request on
    // the connection the server is closing at that moment: 'other side closed'. Idle
    // connections stay open longer than any such pause.
    SERVICE__SERVICE__HTTP_KEEP_ALIVE_TIMEOUT_SEC: String(IDLE_CONNECTION_SEC),
    ...extraEnv,
  });
  const child = spawn(process.execPath, [BIN, ...args], { cwd: storageDir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
  // 'close', not 'exit': at 'exit' the last log lines may still be in the pipes.
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once('close', (code, sig) => resolve([code, sig])));
  const logLines = () => {
    const out: Array<Record<string, unknown>> = [];
    for (const line of stdout.split('\n')) {
      if (!line.startsWith('{')) continue;
      try {
        out.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        // a line cut by the kill
      }
    }
    return out;
  };

  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`quiver did not start within ${timeoutMs} ms; stderr: ${stderr}; stdout tail: ${stdout.slice(-4000)}`));
    }, timeoutMs);
    const onData = () => {
      if (stdout.includes('"REST API listening"')) {
        clearTimeout(timer);
        child.stdout!.off('data', onData);
        resolve();
      }
    };
    child.stdout!.on('data', onData);
    void exited.then(([code, sig]) => {
      clearTimeout(timer);
      reject(new Error(`quiver exited (${code ?? sig}) before listening; stderr: ${stderr}; stdout tail: ${stdout.slice(-4000)}`));
    });
  });

  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    child,
    logLines,
    stderr: () => stderr,
    exited,
    stop(signal: NodeJS.Signals) {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, signal);
      return exited;
    },
  };
}
