/**
 * Runs an external load generator (wrk, h2load) under bash so that `times` reports the
 * CPU it used: resolves with its report (stdout) and that CPU in seconds.
 */

import { spawn } from 'node:child_process';
import * as os from 'node:os';

export function runTimedTool(name: string, command: string, env: Record<string, string>): Promise<{ report: string; clientCpuSec: number }> {
  const cmd = `${command}; code=$?; echo "@@times"; times; exit $code`;
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', cmd], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (err += d.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`${name} exited with ${code}: ${err}${out}`));
      const [report, times] = out.split('@@times');
      // `times`: the shell's user/system, then its children's (the tool's).
      const lines = (times ?? '').trim().split(os.EOL);
      const c = /(\d+)m([0-9.]+)s\s+(\d+)m([0-9.]+)s/.exec(lines[lines.length - 1]);
      if (!c) return reject(new Error(`unreadable times output ${JSON.stringify(times)}`));
      resolve({ report, clientCpuSec: Number(c[1]) * 60 + Number(c[2]) + Number(c[3]) * 60 + Number(c[4]) });
    });
  });
}
