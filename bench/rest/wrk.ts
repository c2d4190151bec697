/**
 * Query passes driven by wrk (Debian package `wrk`), a load generator written in C.
 *
 * The REST client of run.ts is JavaScript and shares the two cores with the server:
 * at 8 in flight it spends 30-40 µs of CPU per request, a fifth of what the server
 * spends. wrk does the same HTTP exchange (keep-alive connections, one request in
 * flight on each, the same prebuilt bodies in the same order) for a fraction of that,
 * so its rows show what the server answers when the load generator takes less of the
 * machine. Both kinds of row are reported; recall is checked on the JavaScript client's
 * rows (wrk does not read the answers), and every wrk answer must be a 200.
 */
import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

import { runTimedTool } from './tool';

export interface WrkPass {
  requests: number;
  seconds: number;
  qps: number;
  p50Us: number;
  p99Us: number;
  /** CPU seconds (user + system) of the wrk process over the pass. */
  clientCpuSec: number;
}

/** The wrk binary, or null with the reason when it is not installed. */
export function findWrk(): { bin: string } | { missing: string } {
  const r = spawnSync('wrk', ['--version'], { encoding: 'utf8' });
  if (r.error) return { missing: 'wrk is not installed (apt-get install wrk)' };
  return { bin: 'wrk' };
}

const LUA = `-- Quiver bench: POST each body of $QUIVER_WRK_BODIES in turn (one JSON body per line).
-- Each request is formatted once, on its first use (wrk sets the Host header only after
-- the script is loaded), and kept: wrk.format per request cost wrk about 2 µs of CPU per
-- request more, on the cores the server uses. The bytes sent are the same.
local bodies = {}
for line in io.lines(os.getenv("QUIVER_WRK_BODIES")) do bodies[#bodies + 1] = line end
local formatted = {}
local path = os.getenv("QUIVER_WRK_PATH")
local headers = { ["Content-Type"] = "application/json" }
local n = #bodies
local i = 0
request = function()
  i = i % n + 1
  local r = formatted[i]
  if r == nil then
    r = wrk.format("POST", path, headers, bodies[i])
    formatted[i] = r
  end
  return r
end
`;

/** Writes the script and the bodies once; returns what runWrk needs. */
export function prepareWrk(dir: string, name: string, bodies: Buffer[]): { script: string; bodiesFile: string } {
  fs.mkdirSync(dir, { recursive: true });
  const script = path.join(dir, 'query.lua');
  fs.writeFileSync(script, LUA);
  const bodiesFile = path.join(dir, `${name}.bodies`);
  for (const b of bodies) if (b.includes(10)) throw new Error('a query body holds a newline: the wrk script reads one body per line');
  fs.writeFileSync(bodiesFile, Buffer.concat(bodies.flatMap((b) => [b, Buffer.from('\n')])));
  return { script, bodiesFile };
}

/** wrk's "821.00us" / "3.21ms" / "1.02s" in microseconds. */
function durationUs(text: string): number {
  const m = /^([0-9.]+)(us|ms|s|m)$/.exec(text.trim());
  if (!m) throw new Error(`wrk: unreadable duration ${JSON.stringify(text)}`);
  const v = Number(m[1]);
  return m[2] === 'us' ? v : m[2] === 'ms' ? v * 1e3 : m[2] === 's' ? v * 1e6 : v * 60e6;
}

/** Parses wrk's report; throws when any answer was not 2xx/3xx or any socket error happened. */
export function parseWrk(out: string): Omit<WrkPass, 'clientCpuSec'> {
  const non2xx = /Non-2xx or 3xx responses:\s*(\d+)/.exec(out);
  if (non2xx && Number(non2xx[1]) > 0) throw new Error(`wrk: ${non2xx[1]} answers were not 2xx/3xx\n${out}`);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  if (sock && sock.slice(1).some((x) => Number(x) > 0)) throw new Error(`wrk: socket errors\n${out}`);
  const total = /(\d+) requests in ([0-9.]+)(us|ms|s|m),/.exec(out);
  const p50 = /\n\s*50%\s+(\S+)/.exec(out);
  const p99 = /\n\s*99%\s+(\S+)/.exec(out);
  if (!total || !p50 || !p99) throw new Error(`wrk: unreadable report\n${out}`);
  const requests = Number(total[1]);
  const seconds = durationUs(total[2] + total[3]) / 1e6;
  return { requests, seconds, qps: requests / seconds, p50Us: durationUs(p50[1]), p99Us: durationUs(p99[1]) };
}

/**
 * One pass: `connections` keep-alive connections with one request in flight each, for
 * `seconds`, one wrk thread. wrk runs under bash so `times` reports its CPU.
 */
export async function runWrk(opts: { url: string; path: string; script: string; bodiesFile: string; connections: number; seconds: number }): Promise<WrkPass> {
  const cmd = `wrk -t1 -c${opts.connections} -d${opts.seconds}s --latency -s "$QUIVER_WRK_SCRIPT" "$QUIVER_WRK_URL"`;
  const env = { QUIVER_WRK_SCRIPT: opts.script, QUIVER_WRK_URL: opts.url, QUIVER_WRK_BODIES: opts.bodiesFile, QUIVER_WRK_PATH: opts.path };
  const { report, clientCpuSec } = await runTimedTool('wrk', cmd, env);
  return { ...parseWrk(report), clientCpuSec };
}
