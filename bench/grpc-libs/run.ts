/**
 * `npm run bench:grpc-libs [-- --calls 5000 --reps 5 --concurrency 1,8 ...]`
 *
 * Which gRPC server library for Quiver's public API (issue 17): @grpc/grpc-js (what it
 * runs on) or @connectrpc/connect-node (its gRPC protocol), measured on one unary call,
 * `qdrant.Points/Query`, against a tiny server of each that only decodes the request and
 * encodes a fixed 10-hit answer (bench/grpc-libs/server.ts; also grpc-js without
 * channelz, and node:http2 with framing by hand as the floor under both).
 *
 * Every server is its own process, started at once and idle when not measured; one load
 * generator (this process) drives them all the same way: node:http2 directly
 * (bench/rest/grpc.ts H2Channels), the same request bytes (a 128-d query of the synthetic
 * set's kind, hnsw_ef 64, limit 10, encoded once), each answer decoded and checked (10
 * hits). Passes are interleaved (rep -> concurrency -> channels -> library) so drift in
 * machine load hits every library alike; the best of `--reps` passes counts, after
 * `--warmup` passes. Reported: calls/s, latency p50/p99, server CPU µs per call (all its
 * threads, from /proc/<pid>/stat), client CPU µs per call.
 *
 * Results: bench/results/grpc-libs-<tag>.{json,md}.
 */
import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { REPO_ROOT, today } from '../engine/common';
import { coresAvailable, percentile } from '../engine/measure';
import { runConcurrent } from '../rest/client';
import { ChannelMode, H2Channels, encodeQuery } from '../rest/grpc';
import { freePort } from '../rest/server';
import { SERVER_LIBS, type ServerLib } from './server';

interface Options {
  calls: number;
  reps: number;
  warmup: number;
  concurrency: number[];
  channels: ChannelMode[];
  libs: ServerLib[];
  tag: string;
  resultsDir: string;
}

const USAGE = `usage: npm run bench:grpc-libs -- [--calls 5000] [--reps 5] [--warmup 2] [--concurrency 1,8]
         [--channels per-worker,shared] [--libs ${SERVER_LIBS.join(',')}] [--tag NAME]`;

function parse(argv: string[]): Options {
  const o: Options = { calls: 5000, reps: 5, warmup: 2, concurrency: [1, 8], channels: ['per-worker', 'shared'], libs: [...SERVER_LIBS], tag: today(), resultsDir: path.join(REPO_ROOT, 'bench', 'results') };
  const list = (v: string | undefined, flag: string): string[] => {
    if (v === undefined) throw new Error(`${flag} needs a value`);
    return v
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  };
  const ints = (v: string | undefined, flag: string): number[] =>
    list(v, flag).map((s) => {
      const x = Number(s);
      if (!Number.isInteger(x) || x < 1) throw new Error(`${flag}: bad value ${s}`);
      return x;
    });
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => argv[++i];
    switch (a) {
      case '--calls':
        o.calls = ints(val(), a)[0];
        break;
      case '--reps':
        o.reps = ints(val(), a)[0];
        break;
      case '--warmup':
        o.warmup = Number(val());
        if (!Number.isInteger(o.warmup) || o.warmup < 0) throw new Error('--warmup: a count ≥ 0');
        break;
      case '--concurrency':
        o.concurrency = ints(val(), a);
        break;
      case '--channels': {
        const v = list(val(), a);
        if (v.some((x) => x !== 'per-worker' && x !== 'shared')) throw new Error('--channels: per-worker, shared');
        o.channels = v as ChannelMode[];
        break;
      }
      case '--libs': {
        const v = list(val(), a);
        if (v.some((x) => !(SERVER_LIBS as string[]).includes(x))) throw new Error(`--libs: of ${SERVER_LIBS.join(', ')}`);
        o.libs = v as ServerLib[];
        break;
      }
      case '--tag':
        o.tag = String(val());
        break;
      case '--results-dir':
        o.resultsDir = path.resolve(String(val()));
        break;
      case '-h':
      case '--help':
        console.log(USAGE);
        process.exit(0);
        break;
      default:
        throw new Error(`unknown argument ${a}\n${USAGE}`);
    }
  }
  return o;
}

/** CPU seconds of a process so far, all its threads (/proc/<pid>/stat utime + stime). */
function processCpuSec(pid: number): number {
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) / 100;
}

interface Running {
  lib: ServerLib;
  port: number;
  child: ChildProcess;
}

async function startServer(lib: ServerLib): Promise<Running> {
  const port = await freePort();
  const child = spawn(process.execPath, [path.join(__dirname, 'server.js'), lib, String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes(`listening ${port}`)) resolve();
    });
    child.once('exit', (code) => reject(new Error(`${lib} server exited (${code}) before listening: ${err}`)));
  });
  return { lib, port, child };
}

interface Row {
  lib: ServerLib;
  concurrency: number;
  /** Client connections at concurrency above 1 (at 1 there is one). */
  channels: ChannelMode | null;
  callsPerSec: number;
  p50Us: number;
  p99Us: number;
  serverCpuUsPerCall: number;
  clientCpuUsPerCall: number;
  /** Calls/s of every timed pass. */
  passes: number[];
  /** Server CPU µs per call of every timed pass. */
  serverCpuPasses: number[];
}

const LIB_TEXT: Record<ServerLib, string> = {
  'grpc-js': '@grpc/grpc-js (as Quiver ran it before its own transport)',
  'grpc-js-nochannelz': '@grpc/grpc-js, `grpc.enable_channelz: 0`',
  connect: '@connectrpc/connect-node (gRPC protocol)',
  h2: 'node:http2 by hand (floor, not a library)',
  quiver: "Quiver's own HTTP/2 transport (ts/api/grpc/h2, what the public API runs on)",
};

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

export function markdown(r: { tag: string; startedAt: string; machine: Record<string, unknown>; options: Options; requestBytes: number; rows: Row[] }): string {
  const L: string[] = [];
  const o = r.options;
  const m = r.machine as { cores: number; cpuModel: string; node: string; loadAverageAtStart: number[]; loadAverageAtEnd: number[]; coresAvailableAtStart: number; coresAvailableAtEnd: number };
  L.push(`# gRPC server libraries: one unary call (${r.tag})`);
  L.push('');
  L.push(
    `\`qdrant.Points/Query\` of the committed contract against a tiny server of each library that decodes the request (${r.requestBytes} B: a 128-d dense query, limit 10, hnsw_ef 64) and encodes a fixed answer of 10 hits (bench/grpc-libs/server.ts). ` +
      `One load generator for all (node:http2, the same bytes, each answer decoded and checked); ${o.calls.toLocaleString('en-US')} calls per pass, best of ${o.reps} interleaved passes after ${o.warmup} warm-up passes. ` +
      'Server CPU is every thread of the server process (/proc/<pid>/stat) over the pass, per call; client CPU is the load generator\'s.',
  );
  L.push('');
  L.push(
    `Machine: ${m.cores} cores (${m.cpuModel}), Node ${m.node}. Load average ${m.loadAverageAtStart.join(' ')} at start, ${m.loadAverageAtEnd.join(' ')} at end; cores this process could get ≈ ${m.coresAvailableAtStart} at start, ${m.coresAvailableAtEnd} at end. ` +
      'The servers and the load generator share these cores: calls/s move with the machine\'s load, CPU per call much less.',
  );
  L.push('');
  L.push('| server | in flight | client connections | calls/s (best) | calls/s median | p50 µs | p99 µs | server CPU µs/call (best pass; median) | client CPU µs/call | calls/s of each pass |');
  L.push('|---|---:|---|---:|---:|---:|---:|---:|---:|---|');
  for (const x of r.rows) {
    L.push(
      `| ${LIB_TEXT[x.lib]} | ${x.concurrency} | ${x.channels === null ? '1' : x.channels === 'shared' ? '1 (shared)' : `${x.concurrency} (one per call in flight)`} | ${x.callsPerSec.toLocaleString('en-US')} | ${Math.round(median(x.passes)).toLocaleString('en-US')} | ` +
        `${x.p50Us} | ${x.p99Us} | ${x.serverCpuUsPerCall} ; ${Math.round(median(x.serverCpuPasses))} | ${x.clientCpuUsPerCall} | ${x.passes.map((p) => p.toLocaleString('en-US')).join(', ')} |`,
    );
  }
  L.push('');
  const base = (c: number, ch: ChannelMode | null) => r.rows.find((x) => x.lib === 'grpc-js' && x.concurrency === c && x.channels === ch);
  const others = r.rows.filter((x) => x.lib !== 'grpc-js');
  if (others.length && r.rows.some((x) => x.lib === 'grpc-js')) {
    L.push('Against @grpc/grpc-js (as Quiver runs it), same concurrency and connections:');
    L.push('');
    L.push('| server | in flight | client connections | calls/s ratio (medians of the passes) | server CPU per call ratio (medians of the passes) |');
    L.push('|---|---:|---|---:|---:|');
    for (const x of others) {
      const b = base(x.concurrency, x.channels);
      if (!b) continue;
      L.push(
        `| ${LIB_TEXT[x.lib]} | ${x.concurrency} | ${x.channels ?? '1'} | ${(median(x.passes) / median(b.passes)).toFixed(2)}× | ${(median(x.serverCpuPasses) / median(b.serverCpuPasses)).toFixed(2)}× |`,
      );
    }
    L.push('');
  }
  return L.join('\n');
}

async function main(): Promise<void> {
  const o = parse(process.argv.slice(2));
  const machine = {
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    node: process.version,
    loadAverageAtStart: os.loadavg().map((x) => Math.round(x * 100) / 100),
    coresAvailableAtStart: Math.round((await coresAvailable()) * 100) / 100,
    loadAverageAtEnd: [] as number[],
    coresAvailableAtEnd: 0,
  };
  console.log(`gRPC libraries: ${o.libs.join(', ')}; ${o.calls} calls per pass, ${o.reps} reps; load ${machine.loadAverageAtStart.join(' ')}, cores available ≈ ${machine.coresAvailableAtStart}`);
  const servers: Running[] = [];
  const kill = () => servers.forEach((s) => s.child.exitCode === null && s.child.kill('SIGKILL'));
  process.once('exit', kill);
  try {
    for (const lib of o.libs) servers.push(await startServer(lib));
    // A 128-d query as the benchmark's synthetic set has them (values of a unit Gaussian, seeded).
    let seed = 7;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1;
    const vector = Float32Array.from({ length: 128 }, rnd);
    const request = encodeQuery('bench_b1000_c1', vector, 10, 64);
    const protoLoader = await import('@grpc/proto-loader');
    const def = protoLoader.loadSync('qdrant.proto', { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true, includeDirs: [path.join(REPO_ROOT, 'proto', 'qdrant')] });
    const method = (def['qdrant.Points'] as import('@grpc/proto-loader').ServiceDefinition).Query;
    const check = (b: Buffer) => {
      const res = method.responseDeserialize(b) as { result?: unknown[] };
      if (res.result?.length !== 10) throw new Error(`an answer with ${res.result?.length} hits, not 10`);
    };

    const configs: Array<{ c: number; ch: ChannelMode | null }> = [];
    for (const c of o.concurrency) {
      if (c === 1) configs.push({ c, ch: null });
      else for (const ch of o.channels) configs.push({ c, ch });
    }
    const clients = new Map<string, H2Channels>();
    const clientOf = (s: Running, ch: ChannelMode | null) => {
      const key = `${s.lib}|${ch ?? 'one'}`;
      let cl = clients.get(key);
      if (!cl) clients.set(key, (cl = new H2Channels(`127.0.0.1:${s.port}`, ch ?? 'shared')));
      return cl;
    };
    const pass = async (s: Running, c: number, ch: ChannelMode | null) => {
      const cl = clientOf(s, ch);
      await cl.connect(c);
      const cpu0 = processCpuSec(s.child.pid!);
      const t = await runConcurrent(o.calls, c, async (_i, lane) => check(await cl.call(method.path, request, lane)));
      const serverSec = processCpuSec(s.child.pid!) - cpu0;
      return { qps: o.calls / t.seconds, t, serverUs: (serverSec / o.calls) * 1e6 };
    };
    for (let w = 0; w < o.warmup; w++) for (const { c, ch } of configs) for (const s of servers) await pass(s, c, ch);
    const best = new Map<string, Row>();
    for (let rep = 0; rep < o.reps; rep++) {
      for (const { c, ch } of configs) {
        for (const s of servers) {
          const p = await pass(s, c, ch);
          const key = `${s.lib}|${c}|${ch}`;
          const cur = best.get(key);
          const row: Row = {
            lib: s.lib,
            concurrency: c,
            channels: ch,
            callsPerSec: Math.round(p.qps),
            p50Us: Math.round(percentile(p.t.latUs, 50)),
            p99Us: Math.round(percentile(p.t.latUs, 99)),
            serverCpuUsPerCall: Math.round(p.serverUs),
            clientCpuUsPerCall: Math.round((p.t.clientCpuSec / o.calls) * 1e6),
            passes: [...(cur?.passes ?? []), Math.round(p.qps)],
            serverCpuPasses: [...(cur?.serverCpuPasses ?? []), Math.round(p.serverUs)],
          };
          if (!cur || row.callsPerSec > cur.callsPerSec) best.set(key, row);
          else {
            cur.passes = row.passes;
            cur.serverCpuPasses = row.serverCpuPasses;
          }
          console.log(`  rep ${rep + 1} c=${c}${ch ? ` ${ch}` : ''} ${s.lib}: ${row.callsPerSec.toLocaleString('en-US')} calls/s, server CPU ${row.serverCpuUsPerCall} µs/call, client ${row.clientCpuUsPerCall} µs/call`);
        }
      }
    }
    for (const cl of clients.values()) cl.close();
    machine.loadAverageAtEnd = os.loadavg().map((x) => Math.round(x * 100) / 100);
    machine.coresAvailableAtEnd = Math.round((await coresAvailable()) * 100) / 100;
    const rows: Row[] = [];
    for (const { c, ch } of configs) for (const lib of o.libs) rows.push(best.get(`${lib}|${c}|${ch}`)!);
    const result = { benchmark: 'grpc-libs', tag: o.tag, startedAt: new Date().toISOString(), machine, options: o, requestBytes: request.length, rows };
    fs.mkdirSync(o.resultsDir, { recursive: true });
    const jsonPath = path.join(o.resultsDir, `grpc-libs-${o.tag}.json`);
    const mdPath = path.join(o.resultsDir, `grpc-libs-${o.tag}.md`);
    fs.writeFileSync(jsonPath, JSON.stringify(result, null, 2) + '\n');
    const md = markdown(result);
    fs.writeFileSync(mdPath, md + '\n');
    console.log('');
    console.log(md);
    console.log(`wrote ${path.relative(process.cwd(), jsonPath)} and ${path.relative(process.cwd(), mdPath)}`);
  } finally {
    for (const s of servers) s.child.kill('SIGTERM');
    process.off('exit', kill);
  }
}

if (require.main === module) {
  const render = process.argv.indexOf('--render');
  if (render >= 0) {
    // Re-renders the Markdown of a results JSON (after a change of the report's layout).
    const file = path.resolve(process.argv[render + 1]);
    fs.writeFileSync(file.replace(/\.json$/, '.md'), markdown(JSON.parse(fs.readFileSync(file, 'utf8'))) + '\n');
  } else {
    main().catch((e) => {
      console.error(`bench:grpc-libs failed: ${e instanceof Error && e.stack ? e.stack : String(e)}`);
      process.exit(1);
    });
  }
}
