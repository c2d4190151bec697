/**
 * Streamed transfers of the snapshot benchmark (node:http, nothing held in memory):
 *
 *  - `downloadToFile`: a GET whose body is piped into a file while its SHA-256 is
 *    computed;
 *  - `uploadMultipart`: a POST of a `multipart/form-data` body with one file part,
 *    built from streams (the part head, the file read in 1 MiB chunks, the closing
 *    boundary) with a Content-Length computed beforehand, so the body is never buffered.
 *
 * Plus a memory sampler of the server process (rss-worker.ts on its own thread).
 */
import { createHash, randomBytes } from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import * as path from 'path';
import { Readable, Transform } from 'stream';
import { pipeline } from 'stream/promises';
import { Worker } from 'worker_threads';
import type { MemSample, MemWindow } from './rss-worker';

export interface DownloadResult {
  status: number;
  bytes: number;
  sha256: string;
  /** Seconds until the response head arrived. */
  firstByteSec: number;
  seconds: number;
  contentLength: number | null;
}

/** GET `url`, the body streamed into `file` (hashed on the way). Throws on a status other than 200. */
export function downloadToFile(url: string, file: string): Promise<DownloadResult> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.get(url, (res) => {
      const firstByteSec = (performance.now() - t0) / 1000;
      if (res.statusCode !== 200) {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => reject(new Error(`GET ${url}: HTTP ${res.statusCode} ${Buffer.concat(chunks).toString('utf8').slice(0, 300)}`)));
        return;
      }
      const hash = createHash('sha256');
      let bytes = 0;
      const meter = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          hash.update(chunk);
          bytes += chunk.length;
          cb(null, chunk);
        },
      });
      const len = res.headers['content-length'];
      pipeline(res, meter, fs.createWriteStream(file)).then(
        () =>
          resolve({
            status: 200,
            bytes,
            sha256: hash.digest('hex'),
            firstByteSec,
            seconds: (performance.now() - t0) / 1000,
            contentLength: len === undefined ? null : Number(len),
          }),
        reject,
      );
    });
    req.on('error', reject);
  });
}

export interface UploadResult {
  status: number;
  body: string;
  /** Bytes of the whole multipart body. */
  bodyBytes: number;
  /** Seconds until the last byte of the body was handed to the socket. */
  sentSec: number;
  /** Seconds until the response arrived (the server answers after recovering, wait=true). */
  seconds: number;
}

/** The multipart body as a stream: part head, the file, closing boundary. */
async function* multipartChunks(head: Buffer, file: string, tail: Buffer): AsyncGenerator<Buffer> {
  yield head;
  for await (const chunk of fs.createReadStream(file, { highWaterMark: 1 << 20 })) yield chunk as Buffer;
  yield tail;
}

/** POST `url` with `file` as the multipart part named `field`, streamed. */
export function uploadMultipart(url: string, field: string, file: string): Promise<UploadResult> {
  const size = fs.statSync(file).size;
  const boundary = `----quiver-bench-${randomBytes(12).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="${field}"; filename="${path.basename(file)}"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const bodyBytes = head.length + size + tail.length;
  const t0 = performance.now();
  let sentSec = NaN;
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request(
      {
        host: u.hostname,
        port: Number(u.port),
        method: 'POST',
        path: u.pathname + u.search,
        headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': bodyBytes, accept: 'application/json' },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            body: Buffer.concat(chunks).toString('utf8'),
            bodyBytes,
            sentSec,
            seconds: (performance.now() - t0) / 1000,
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('finish', () => (sentSec = (performance.now() - t0) / 1000));
    req.on('error', reject);
    pipeline(Readable.from(multipartChunks(head, file, tail)), req).catch(reject);
  });
}

/** Memory sampler of another process, on its own thread (rss-worker.ts). */
export class MemSampler {
  private readonly worker: Worker;
  private waiting: ((m: { kind: string; baseline?: MemSample; window?: MemWindow | null }) => void) | null = null;

  constructor(pid: number, intervalMs = 20) {
    this.worker = new Worker(path.join(__dirname, 'rss-worker.js'), { workerData: { pid, intervalMs } });
    this.worker.on('message', (m) => {
      const w = this.waiting;
      this.waiting = null;
      w?.(m);
    });
    this.worker.on('error', (e) => console.error(`rss sampler: ${e.message}`));
  }

  private ask<T>(cmd: 'begin' | 'end'): Promise<T> {
    return new Promise((resolve) => {
      this.waiting = resolve as never;
      this.worker.postMessage({ cmd });
    });
  }

  /** Starts a window; resolves with the baseline sample taken now. */
  async begin(): Promise<MemSample> {
    const m = await this.ask<{ baseline: MemSample }>('begin');
    return m.baseline;
  }

  /** Ends the window (after a last sample). */
  async end(): Promise<MemWindow> {
    const m = await this.ask<{ window: MemWindow | null }>('end');
    if (!m.window) throw new Error('rss sampler: no window open');
    return m.window;
  }

  async stop(): Promise<void> {
    this.worker.postMessage({ cmd: 'stop' });
    await new Promise((r) => this.worker.once('exit', r));
  }
}
