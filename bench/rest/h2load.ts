/**
 * Query passes driven by h2load (Debian package `nghttp2-client`), nghttp2's load
 * generator, written in C: the gRPC counterpart of the wrk rows (bench/rest/wrk.ts).
 *
 * The JavaScript gRPC clients cost more CPU per call than the REST client (HTTP/2 stream
 * objects, grpc-js's call stack), and client and server share the two cores, so their
 * rows understate what the server answers. h2load speaks HTTP/2 for a fraction of that,
 * and HTTP/1.1 too (`--h1`), so one C load generator drives both APIs: the same query
 * (h2load sends one request body throughout: the first query of the set, as JSON to REST
 * and as a gRPC message to `Points/Query`), c requests in flight, for `seconds`.
 *
 * h2load checks the HTTP status (every answer must be a 2xx) but not gRPC's `grpc-status`
 * trailer: before each gRPC pass the same message is sent once through the JavaScript
 * client, which checks it, and the answers' mean size must be what a 10-hit answer
 * weighs (an error answers no message).
 */
import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

import { runTimedTool } from './tool';

export interface H2loadPass {
  requests: number;
  seconds: number;
  qps: number;
  /** h2load reports the mean and spread of request times, not percentiles. */
  meanUs: number;
  maxUs: number;
  /** Bytes of answer bodies per answer with a 2xx status (DATA frames' payload for HTTP/2). */
  bodyBytesPerRequest: number;
  /** CPU seconds (user + system) of the h2load process over the pass. */
  clientCpuSec: number;
}

export function findH2load(): { bin: string } | { missing: string } {
  const r = spawnSync('h2load', ['--version'], { encoding: 'utf8' });
  if (r.error) return { missing: 'h2load is not installed (apt-get install nghttp2-client)' };
  return { bin: 'h2load' };
}

/** Writes a request body to a file h2load can send (`-d`). */
export function writeBody(dir: string, name: string, body: Buffer): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, name);
  fs.writeFileSync(file, body);
  return file;
}

/** A gRPC message with its 5-byte length prefix (not compressed), as it goes in a DATA frame. */
export function grpcFrame(message: Buffer): Buffer {
  const out = Buffer.alloc(5 + message.length);
  out.writeUInt32BE(message.length, 1);
  message.copy(out, 5);
  return out;
}

function durationUs(text: string): number {
  const m = /^([0-9.]+)(us|ms|s)$/.exec(text.trim());
  if (!m) throw new Error(`h2load: unreadable duration ${JSON.stringify(text)}`);
  const v = Number(m[1]);
  return m[2] === 'us' ? v : m[2] === 'ms' ? v * 1e3 : v * 1e6;
}

/** Parses h2load's report; throws when a request failed, errored or timed out, or an answer was not 2xx. */
export function parseH2load(out: string): Omit<H2loadPass, 'clientCpuSec'> {
  const fin = /finished in ([0-9.]+)(us|ms|s), ([0-9.]+) req\/s/.exec(out);
  const req = /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(out);
  const codes = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(out);
  const traffic = /traffic: \S+ \((\d+)\) total, \S+ \((\d+)\) headers \(space savings [^)]*\), \S+ \((\d+)\) data/.exec(out);
  const time = /time for request:\s+(\S+)\s+(\S+)\s+(\S+)/.exec(out);
  if (!fin || !req || !codes || !traffic || !time) throw new Error(`h2load: unreadable report\n${out}`);
  const [failed, errored, timeout] = [Number(req[5]), Number(req[6]), Number(req[7])];
  if (failed + errored + timeout > 0) throw new Error(`h2load: ${failed} failed, ${errored} errored, ${timeout} timed out\n${out}`);
  const done = Number(req[3]);
  // A timed run stops with requests in flight: an answer may have started (its status and
  // data counted) without being done, so the 2xx count can exceed `done` by those.
  const ok = Number(codes[1]);
  const non2xx = Number(codes[2]) + Number(codes[3]) + Number(codes[4]);
  if (non2xx > 0 || ok < done) throw new Error(`h2load: ${non2xx + Math.max(0, done - ok)} answers were not 2xx\n${out}`);
  const seconds = durationUs(fin[1] + fin[2]) / 1e6;
  return {
    requests: done,
    seconds,
    qps: Number(fin[3]),
    meanUs: durationUs(time[3]),
    maxUs: durationUs(time[2]),
    bodyBytesPerRequest: ok > 0 ? Number(traffic[3]) / ok : 0,
  };
}

/**
 * One pass, one h2load thread, for `seconds`: `clients` connections with `streams`
 * requests in flight on each (HTTP/1.1: one). Runs under bash so `times` reports its CPU.
 */
export async function runH2load(opts: { url: string; bodyFile: string; contentType: string; grpc: boolean; clients: number; streams: number; seconds: number }): Promise<H2loadPass> {
  const args = [
    ...(opts.grpc ? [] : ['--h1']),
    `-c${opts.clients}`,
    `-m${opts.grpc ? opts.streams : 1}`,
    '-t1',
    `-D${opts.seconds}`,
    '-d',
    '"$QUIVER_H2LOAD_BODY"',
    '-H',
    `'content-type: ${opts.contentType}'`,
    ...(opts.grpc ? ['-H', "'te: trailers'"] : []),
    '"$QUIVER_H2LOAD_URL"',
  ];
  const { report, clientCpuSec } = await runTimedTool('h2load', `h2load ${args.join(' ')}`, { QUIVER_H2LOAD_BODY: opts.bodyFile, QUIVER_H2LOAD_URL: opts.url });
  return { ...parseH2load(report), clientCpuSec };
}
