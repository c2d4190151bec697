/**
 * Machine facts every engine report starts with.
 */
import * as fs from 'fs';
import * as os from 'os';

export function cpuFlags(): string {
  try {
    const txt = fs.readFileSync('/proc/cpuinfo', 'utf8');
    const line = txt.split('\n').find((l) => l.startsWith('flags'));
    if (!line) return 'unknown';
    const flags = new Set(line.split(':')[1].trim().split(/\s+/));
    return ['sse4_2', 'avx', 'avx2', 'fma', 'avx512f', 'avx512bw', 'avx512vl', 'avx512_vnni', 'avx512_fp16'].filter((f) => flags.has(f)).join(' ');
  } catch {
    return 'unknown';
  }
}

export function machineInfo(): Record<string, unknown> {
  const cpus = os.cpus();
  return {
    cpuModel: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    cpuFlags: cpuFlags(),
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    os: `${os.type()} ${os.arch()}`,
    kernel: os.release(),
    node: process.version,
    v8: process.versions.v8,
    loadAverageAtStart: os.loadavg().map((x) => Math.round(x * 100) / 100),
  };
}

