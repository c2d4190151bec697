/**
 * A real S3-compatible server for tests: `moto_server` (from the machine's Python)
 * on a free 127.0.0.1 port, and a bucket in it.
 *
 *   const s3 = await startMotoServer();
 *   await createBucket(s3.endpoint, 'snapshots');
 *   ...
 *   await s3.stop();
 */

import { spawn } from 'node:child_process';

import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';

import { freePort } from '../api/helpers';

export const S3_ACCESS_KEY = 'test-access';
export const S3_SECRET_KEY = 'test-secret';
export const S3_REGION = 'us-east-1';

export interface MotoServer {
  endpoint: string;
  stop(): Promise<void>;
}

/** Starts moto_server and waits until it answers; fails with its output if it cannot start. */
export async function startMotoServer(timeoutMs = 30_000): Promise<MotoServer> {
  const port = await freePort();
  const child = spawn('moto_server', ['-H', '127.0.0.1', '-p', String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let spawnError: Error | null = null;
  child.once('error', (err) => (spawnError = err));
  const endpoint = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (spawnError) throw new Error(`moto_server could not be started (is python3-moto installed?): ${(spawnError as Error).message}`);
    if (child.exitCode !== null) throw new Error(`moto_server exited with ${child.exitCode}: ${output}`);
    try {
      const res = await fetch(`${endpoint}/moto-api/`);
      if (res.status < 500) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`moto_server did not answer on ${endpoint} within ${timeoutMs} ms: ${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    endpoint,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

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
  await s3Client(endpoint).send(new CreateBucketCommand({ Bucket: bucket }));
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
