/**
 * Worker thread of the snapshot benchmark: samples another process's memory from
 * /proc/<pid>/status every `intervalMs` (default 20 ms) on its own event loop, so a
 * busy main thread of the bench process does not delay the samples.
 *
 * Messages from the parent:
 *  - `{ cmd: 'begin' }`: takes a sample now (the baseline), starts a new window whose
 *    peaks start at that sample; answers `{ kind: 'begun', baseline }`.
 *  - `{ cmd: 'end' }`: takes a last sample, closes the window; answers
 *    `{ kind: 'ended', window }` with peaks, sample count, the largest gap between two
 *    samples and a thinned time series.
 *  - `{ cmd: 'stop' }`: exits.
 */
import * as fs from 'fs';
import { parentPort, workerData } from 'worker_threads';

export interface MemSample {
  /** ms since the window began. */
  t: number;
  /** kB, as /proc reports them. */
  vmRss: number;
  rssAnon: number;
  rssFile: number;
  rssShmem: number;
}

export interface MemWindow {
  baseline: MemSample;
  /** Largest value of each field over the window (each on its own; not one sample). */
  peak: MemSample;
  /** The sample holding the VmRSS peak (t = when). */
  atPeak: MemSample;
  last: MemSample;
  samples: number;
  maxGapMs: number;
  /** Every 5th sample (plus the peak one), for the JSON. */
  series: Array<[number, number]>;
}

const pid: number = workerData.pid;
const intervalMs: number = workerData.intervalMs ?? 20;

function field(s: string, name: string): number {
  const m = new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(s);
  return m ? Number(m[1]) : 0;
}

function read(t0: number): MemSample | null {
  let s: string;
  try {
    s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return null;
  }
  return { t: performance.now() - t0, vmRss: field(s, 'VmRSS'), rssAnon: field(s, 'RssAnon'), rssFile: field(s, 'RssFile'), rssShmem: field(s, 'RssShmem') };
}

let win: { t0: number; w: MemWindow; lastAt: number } | null = null;

function sample(): void {
  if (!win) return;
  const now = performance.now();
  const s = read(win.t0);
  if (!s) return;
  const w = win.w;
  w.maxGapMs = Math.max(w.maxGapMs, now - win.lastAt);
  win.lastAt = now;
  w.samples++;
  w.last = s;
  if (s.vmRss > w.peak.vmRss) w.atPeak = s;
  w.peak = {
    t: w.atPeak.t,
    vmRss: Math.max(w.peak.vmRss, s.vmRss),
    rssAnon: Math.max(w.peak.rssAnon, s.rssAnon),
    rssFile: Math.max(w.peak.rssFile, s.rssFile),
    rssShmem: Math.max(w.peak.rssShmem, s.rssShmem),
  };
  if (w.samples % 5 === 0 || w.atPeak === s) w.series.push([Math.round(s.t), s.vmRss]);
}

const timer = setInterval(sample, intervalMs);

parentPort!.on('message', (msg: { cmd: 'begin' | 'end' | 'stop' }) => {
  if (msg.cmd === 'begin') {
    const t0 = performance.now();
    const b = read(t0) ?? { t: 0, vmRss: 0, rssAnon: 0, rssFile: 0, rssShmem: 0 };
    win = { t0, lastAt: t0, w: { baseline: b, peak: { ...b }, atPeak: b, last: b, samples: 1, maxGapMs: 0, series: [[0, b.vmRss]] } };
    parentPort!.postMessage({ kind: 'begun', baseline: b });
  } else if (msg.cmd === 'end') {
    sample();
    const w = win?.w ?? null;
    win = null;
    parentPort!.postMessage({ kind: 'ended', window: w });
  } else if (msg.cmd === 'stop') {
    clearInterval(timer);
    parentPort!.close();
  }
});
