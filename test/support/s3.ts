/**
 * A real S3-compatible server for tests: `moto_server` (from the machine's Python)
 * on a free 127.0.0.1 port, and a bucket in it. Tests that need it must fail (not
 * skip) when it cannot start: startMotoServer rejects with the reason.
 *
 *   const s3 = await startMotoServer();
 *   await createBucket(s3.endpoint, 'snapshots');
 *   ...
 *   await s3.stop();
 */

import { spawn } from 'node:child_process';

import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';

import { freePort } from '../api/helpers';
import { START_DEADLINE_MS } from './wait';

export const S3_ACCESS_KEY = 'test-access';
export const S3_SECRET_KEY = 'test-secret';
export const S3_REGION = 'us-east-1';

export interface MotoServer {
  endpoint: string;
  /** Stops the server (SIGTERM, SIGKILL after 5 s) and waits for it to exit. */
  stop(): Promise<void>;
}

/** Starts moto_server and waits until it answers HTTP; rejects with its output if it cannot start. */
export async function startMotoServer(timeoutMs = START_DEADLINE_MS): Promise<MotoServer> {
  const port = await freePort();
  const child = spawn('moto_server', ['-H', '127.0.0.1', '-p', String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  let spawnError: Error | undefined;
  let gone = false;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', () => {
      gone = true;
      resolve();
    });
    child.once('error', (err) => {
      spawnError = err;
      gone = true;
      resolve();
    });
  });
  const kill = async (): Promise<void> => {
    if (gone) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => {
      if (!gone) child.kill('SIGKILL');
    }, 5_000);
    await exited;
    clearTimeout(timer);
  };

  const endpoint = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (spawnError !== undefined) {
      throw new Error(`moto_server could not be started (pip install 'moto[server]' puts it on PATH): ${spawnError.message}`);
    }
    if (gone) throw new Error(`moto_server exited (code ${child.exitCode}, signal ${child.signalCode}) before answering: ${output}`);
    try {
      const res = await fetch(`${endpoint}/moto-api/`, { signal: AbortSignal.timeout(2_000) });
      await res.arrayBuffer();
      if (res.status < 500) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await kill();
      throw new Error(`moto_server did not answer on ${endpoint} within ${timeoutMs} ms: ${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { endpoint, stop: kill };
}

/** An SDK client for the moto server at `endpoint` (path-style, test credentials). */
export function s3Client(endpoint: string): S3Client {
  return new S3Client({
    region: S3_REGION,
    endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: S3_ACCESS_KEY, secretAccessKey: S3_SECRET_KEY },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}

export async function createBucket(endpoint: string, bucket: string): Promise<void> {
  const client = s3Client(endpoint);
  try {
    await client.send(new CreateBucketCommand({ Bucket: bucket }));
  } finally {
    client.destroy();
  }
}

/** The SERVICE__ variables that point a server's snapshot storage at `bucket` on `endpoint`. */
export function s3Env(endpoint: string, bucket: string): Record<string, string> {
  return {
    SERVICE__STORAGE__SNAPSHOTS_CONFIG__SNAPSHOTS_STORAGE: 's3',
    SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__BUCKET: bucket,
    SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__REGION: S3_REGION,
    SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__ACCESS_KEY: S3_ACCESS_KEY,
    SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__SECRET_KEY: S3_SECRET_KEY,
    SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__ENDPOINT_URL: endpoint,
  };
}
