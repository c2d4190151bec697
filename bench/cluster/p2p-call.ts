/**
 * `node dist/bench/cluster/p2p-call.js [--calls 20000] [--reps 3] [--tag NAME]`
 *
 * What one call between peers costs, by client: the p2p points service as peers serve it
 * (ts/api/p2p/points.ts on grpc-js), called with `Status` (an empty request; a small JSON
 * answer) by three clients: grpc-js's (ts/api/p2p/grpc.ts's package, one client; what
 * peers used before), PointsClients (ts/api/p2p/h2-unary.ts on node:http2, one
 * connection; what peers use) and the benchmark's bare node:http2 caller (bench/rest/
 * grpc.ts H2Channels, one session; a floor for node:http2), at 1 and 8 calls in flight.
 * Server and clients run in this one process, so the CPU per call is client plus server;
 * the server is the same for every client, so the differences are the clients'. Passes
 * rotate between the clients; the best of `reps` counts.
 *
 * Writes bench/results/p2p-call-<tag>.md.
 */
import * as grpc from '@grpc/grpc-js';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';

import { p2pPackage } from '../../ts/api/p2p/grpc';
import { addPointsService, PointsClients, type PointsBackend } from '../../ts/api/p2p/points';
import { REPO_ROOT } from '../engine/common';
import { H2Channels } from '../rest/grpc';
import { checkFlags, flagValue, numFlag, today } from './common';

const argv = process.argv.slice(2);
checkFlags(argv, ['calls', 'reps', 'tag']);
const CALLS = numFlag(argv, 'calls', 20_000);
const REPS = numFlag(argv, 'reps', 3);
const TAG = flagValue(argv, 'tag') ?? today();

type StatusClient = grpc.Client & { Status(req: object, meta: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null) => void): void };

interface Row {
  client: string;
  inFlight: number;
  callsPerSec: number;
  cpuUsPerCall: number;
}

async function pass(call: (lane: number) => Promise<void>, inFlight: number): Promise<{ callsPerSec: number; cpuUsPerCall: number }> {
  let next = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async (_, lane) => {
      while (next++ < CALLS) await call(lane);
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { callsPerSec: CALLS / seconds, cpuUsPerCall: (cpu.user + cpu.system) / CALLS };
}

async function main(): Promise<void> {
  const backend = { toc: { peek: () => undefined }, peer: '1', settled: async () => undefined, status: () => ({ peer: '1', ok: true }) } as unknown as PointsBackend;
  const server = new grpc.Server();
  addPointsService(server, backend, pino({ level: 'silent' }));
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  const Points = p2pPackage().Points as unknown as new (target: string, creds: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => StatusClient;
  const gc = new Points(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const h2 = new H2Channels(`127.0.0.1:${port}`, 'shared');
  await h2.connect(1);
  const uri = `http://127.0.0.1:${port}`;
  const pc = new PointsClients({ poolSize: 1, callTimeoutMs: 10_000, tls: null });
  const clients: Array<[string, (lane: number) => Promise<void>]> = [
    [
      'grpc-js client (as peers called each other before h2-unary.ts)',
      () =>
        new Promise<void>((resolve, reject) =>
          gc.Status({}, new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (err) => (err ? reject(err) : resolve())),
        ),
    ],
    ['PointsClients (ts/api/p2p/h2-unary.ts on ts/api/h2/client.ts: as peers call each other)', () => pc.call(uri, '1', 'Status', {}, 10_000).then(() => undefined)],
    ['node:http2, gRPC framing by hand (bench/rest/grpc.ts)', (lane) => h2.call('/quiver.p2p.Points/Status', Buffer.alloc(0), lane).then(() => undefined)],
  ];
  const best = new Map<string, Row>();
  try {
    for (const [, call] of clients) for (let i = 0; i < 3000; i++) await call(0);
    for (let rep = 0; rep < REPS; rep++) {
      for (const inFlight of [1, 8]) {
        for (const [name, call] of rep % 2 === 0 ? clients : [...clients].reverse()) {
          const r = await pass(call, inFlight);
          console.log(`rep ${rep + 1} ${name}, ${inFlight} in flight: ${r.callsPerSec.toFixed(0)} calls/s, ${r.cpuUsPerCall.toFixed(1)} µs CPU per call`);
          const key = `${name}|${inFlight}`;
          const prev = best.get(key);
          if (!prev || r.callsPerSec > prev.callsPerSec) best.set(key, { client: name, inFlight, ...r });
        }
      }
    }
  } finally {
    gc.close();
    h2.close();
    pc.close();
    server.forceShutdown();
  }
  const rows = [...best.values()].sort((a, b) => a.inFlight - b.inFlight || a.client.localeCompare(b.client));
  const md = [
    `# One call between peers, by client (${TAG})`,
    '',
    `\`node dist/bench/cluster/p2p-call.js --calls ${CALLS} --reps ${REPS}\``,
    '',
    `The p2p points service as peers serve it (grpc-js server, ts/api/p2p/points.ts), \`Status\` calls; server and client in one process, so CPU per call is both (the server is the same for every client). ${CALLS.toLocaleString('en-US')} calls per pass, best of ${REPS} passes in alternating order after 3,000 warm-up calls each. Machine: ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown'}); load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} at the end.`,
    '',
    '| client | in flight | calls/s | CPU µs per call (client + server) |',
    '|---|---:|---:|---:|',
    ...rows.map((r) => `| ${r.client} | ${r.inFlight} | ${Math.round(r.callsPerSec).toLocaleString('en-US')} | ${r.cpuUsPerCall.toFixed(1)} |`),
    '',
  ].join('\n');
  console.log(md);
  const out = path.join(REPO_ROOT, 'bench', 'results', `p2p-call-${TAG}.md`);
  fs.writeFileSync(out, md);
  console.log(`written ${path.relative(REPO_ROOT, out)}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
