/**
 * Dashboard benchmark: page weight, time to interactive and the time to show the next
 * page, on an empty instance and on loaded ones, in headless Chromium (Debian's
 * /usr/bin/chromium through playwright-core, as the dashboard tests).
 *
 *   npm run bench:dashboard -- [--collections 10000] [--points 1000000] [--rounds 7]
 *
 * Three servers, one after the other:
 *   empty      no collection, plus one collection `small` of 40 points (two pages of 20),
 *              the baseline of the point browser;
 *   many       `--collections` collections (4-dim vectors, no points);
 *   big        one collection `big` of `--points` points (16 dims, a small payload), indexing
 *              off (indexing_threshold 0: the browser scrolls, it does not search).
 *
 * Measured per instance, median of `--rounds` fresh page loads:
 *   tti        from navigation to the view's "loaded" marker, plus one animation frame (the
 *              main thread free again): #/ for the list, #/collections/<c>/points for points;
 *   page       the list: scrollTop moved by one screen, until two frames have been drawn
 *              (the virtual list re-rendered); the points: "Next page" clicked until the
 *              next page is in the page;
 *   longest    the longest main-thread task (PerformanceObserver 'longtask', ≥ 50 ms;
 *              0 when none) during the load and the scrolls.
 * Ratios are to the empty instance. Results: bench/results/dashboard-<date>.{json,md}.
 */

import * as fs from 'fs';
import * as path from 'path';
import { chromium, type Browser, type Page } from 'playwright-core';

import { REPO_ROOT, today } from '../engine/common';
import { QuiverServer } from '../rest/server';

const CHROMIUM = '/usr/bin/chromium';
const FILES = ['index.html', 'app.js', 'style.css'];
const WEIGHT_LIMIT = 200 * 1024;

interface Args {
  collections: number;
  points: number;
  rounds: number;
}

function parseArgs(argv: string[]): Args {
  const out: Args = { collections: 10_000, points: 1_000_000, rounds: 7 };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i]!.replace(/^--/, '');
    const v = Number(argv[++i]);
    if (!(k in out) || !Number.isInteger(v) || v < 1) throw new Error(`usage: --collections N --points N --rounds N (got ${argv[i - 1]} ${argv[i]})`);
    (out as unknown as Record<string, number>)[k] = v;
  }
  return out;
}

async function must(url: string, method: string, route: string, body?: unknown): Promise<unknown> {
  const res = await fetch(url + route, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${method} ${route}: ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

async function pool(n: number, concurrency: number, job: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (;;) {
        const i = next++;
        if (i >= n) return;
        await job(i);
      }
    }),
  );
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

async function loadPoints(url: string, name: string, n: number, dims: number): Promise<void> {
  await must(url, 'PUT', `/collections/${name}`, { vectors: { size: dims, distance: 'Dot' }, optimizers_config: { indexing_threshold: 0 } });
  const batch = 2000;
  const t0 = Date.now();
  await pool(Math.ceil(n / batch), 2, async (b) => {
    const points = [];
    for (let id = b * batch; id < Math.min(n, (b + 1) * batch); id++) {
      const vector = Array.from({ length: dims }, (_, d) => Math.sin(id * 0.37 + d));
      points.push({ id: id + 1, vector, payload: { n: id, city: ['Berlin', 'Paris', 'Rome'][id % 3], tags: ['a', 'b'].slice(0, (id % 2) + 1) } });
    }
    await must(url, 'PUT', `/collections/${name}/points?wait=true`, { points });
    if (b % 50 === 0) process.stderr.write(`  ${name}: ${Math.min(n, (b + 1) * batch)} / ${n} points (${((Date.now() - t0) / 1000).toFixed(0)} s)\n`);
  });
}

interface Figures {
  ttiMs: number;
  pageMs: number;
  longestTaskMs: number;
}

async function newPage(browser: Browser): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addInitScript(() => {
    const w = window as unknown as { __longest: number };
    w.__longest = 0;
    try {
      new PerformanceObserver((list) => {
        for (const e of list.getEntries()) w.__longest = Math.max(w.__longest, e.duration);
      }).observe({ type: 'longtask', buffered: true });
    } catch {
      /* no longtask entries in this browser */
    }
  });
  return context.newPage();
}

const nextFrames = (page: Page) => page.evaluate(() => new Promise<void>((r) => requestAnimationFrame(() => requestAnimationFrame(() => r()))));

/** The collection list: load, then `scrolls` screens down. */
async function listFigures(browser: Browser, url: string, scrolls: number): Promise<Figures> {
  const page = await newPage(browser);
  const t0 = Date.now();
  await page.goto(`${url}/dashboard/#/`);
  await page.waitForSelector('#collections-list[data-loaded="true"]', { state: 'attached', timeout: 120_000 });
  await nextFrames(page);
  const ttiMs = Date.now() - t0;
  const times: number[] = [];
  for (let i = 0; i < scrolls; i++) {
    times.push(
      await page.evaluate(
        () =>
          new Promise<number>((resolve) => {
            const s = document.getElementById('collections-scroller')!;
            const start = performance.now();
            s.scrollTop += s.clientHeight;
            requestAnimationFrame(() => requestAnimationFrame(() => resolve(performance.now() - start)));
          }),
      ),
    );
  }
  const longestTaskMs = await page.evaluate(() => (window as unknown as { __longest: number }).__longest);
  await page.context().close();
  return { ttiMs, pageMs: median(times), longestTaskMs };
}

/** The point browser: load the first page, then `pages` next pages. */
async function pointFigures(browser: Browser, url: string, name: string, pages: number): Promise<Figures> {
  const page = await newPage(browser);
  const t0 = Date.now();
  await page.goto(`${url}/dashboard/#/collections/${name}/points`);
  await page.waitForSelector('#points-list[data-loaded="true"][data-page="1"]', { state: 'attached', timeout: 120_000 });
  await nextFrames(page);
  const ttiMs = Date.now() - t0;
  const times: number[] = [];
  for (let i = 0; i < pages; i++) {
    const t = Date.now();
    await page.getByTestId('points-next').click();
    await page.waitForSelector(`#points-list[data-loaded="true"][data-page="${i + 2}"]`, { state: 'attached' });
    await nextFrames(page);
    times.push(Date.now() - t);
    if (i === 0 && pages > 1 && (await page.getByTestId('points-next').isDisabled())) break;
  }
  const longestTaskMs = await page.evaluate(() => (window as unknown as { __longest: number }).__longest);
  await page.context().close();
  return { ttiMs, pageMs: median(times), longestTaskMs };
}

async function rounds(n: number, f: () => Promise<Figures>): Promise<Figures & { runs: Figures[] }> {
  await f(); // warm-up: the server's first answers, Chromium's caches
  const runs: Figures[] = [];
  for (let i = 0; i < n; i++) runs.push(await f());
  return {
    ttiMs: median(runs.map((r) => r.ttiMs)),
    pageMs: median(runs.map((r) => r.pageMs)),
    longestTaskMs: Math.max(...runs.map((r) => r.longestTaskMs)),
    runs,
  };
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing`);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  const result: Record<string, unknown> = { date: new Date().toISOString(), args };
  try {
    // Empty instance (+ the 40-point baseline collection for the point browser).
    let server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {} });
    const weights: Record<string, number> = {};
    for (const f of FILES) {
      const res = await fetch(`${server.url}/dashboard/${f}`);
      const body = Buffer.from(await res.arrayBuffer());
      if (/https?:\/\//.test(body.toString('utf8'))) throw new Error(`${f} names an external URL`);
      weights[f] = body.length;
    }
    const total = Object.values(weights).reduce((a, b) => a + b, 0);
    result.weight = { files: weights, total, limit: WEIGHT_LIMIT, ok: total < WEIGHT_LIMIT };
    process.stderr.write(`page weight ${total} bytes (${(total / 1024).toFixed(1)} KiB)\n`);
    const emptyList = await rounds(args.rounds, () => listFigures(browser, server.url, 10));
    await loadPoints(server.url, 'small', 40, 16);
    const smallPoints = await rounds(args.rounds, () => pointFigures(browser, server.url, 'small', 1));
    await server.stop();

    server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {} });
    const t0 = Date.now();
    await pool(args.collections, 8, async (i) => {
      await must(server.url, 'PUT', `/collections/c${String(i).padStart(6, '0')}`, { vectors: { size: 4, distance: 'Cosine' } });
      if (i % 1000 === 0) process.stderr.write(`  ${i} / ${args.collections} collections (${((Date.now() - t0) / 1000).toFixed(0)} s)\n`);
    });
    const manyList = await rounds(args.rounds, () => listFigures(browser, server.url, 10));
    await server.stop();

    server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {} });
    const tLoad = Date.now();
    await loadPoints(server.url, 'big', args.points, 16);
    const loadSec = (Date.now() - tLoad) / 1000;
    const bigPoints = await rounds(args.rounds, () => pointFigures(browser, server.url, 'big', 5));
    await server.stop();

    const ratio = (a: number, b: number) => Number((a / Math.max(b, 0.001)).toFixed(2));
    result.list = {
      empty: emptyList,
      many: manyList,
      ratio: { tti: ratio(manyList.ttiMs, emptyList.ttiMs), page: ratio(manyList.pageMs, emptyList.pageMs) },
    };
    result.points = {
      small: smallPoints,
      big: bigPoints,
      loadSec,
      ratio: { tti: ratio(bigPoints.ttiMs, smallPoints.ttiMs), page: ratio(bigPoints.pageMs, smallPoints.pageMs) },
    };
  } finally {
    await browser.close();
  }

  const dir = path.join(REPO_ROOT, 'bench', 'results');
  const base = path.join(dir, `dashboard-${today()}`);
  fs.writeFileSync(`${base}.json`, JSON.stringify(result, null, 2) + '\n');
  fs.writeFileSync(`${base}.md`, markdown(result));
  process.stdout.write(markdown(result));
}

function markdown(r: Record<string, any>): string {
  const f = (x: number) => x.toFixed(1);
  const w = r.weight;
  const lines = [
    `# Dashboard benchmark, ${r.date.slice(0, 10)}`,
    '',
    `\`npm run bench:dashboard -- --collections ${r.args.collections} --points ${r.args.points} --rounds ${r.args.rounds}\` (median of ${r.args.rounds} page loads after a warm-up; headless Chromium; this shared 2-core machine).`,
    '',
    `Page weight: ${w.total} bytes = ${(w.total / 1024).toFixed(1)} KiB (${Object.entries(w.files)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}); limit 200 KiB: ${w.ok ? 'met' : 'NOT met'}. No third-party code, no external URL.`,
    '',
    '| view | instance | time to interactive (ms) | next page (ms) | longest task (ms) | TTI ratio | page ratio |',
    '|---|---|---:|---:|---:|---:|---:|',
    `| collection list | empty (0 collections) | ${f(r.list.empty.ttiMs)} | ${f(r.list.empty.pageMs)} | ${f(r.list.empty.longestTaskMs)} | 1 | 1 |`,
    `| collection list | ${r.args.collections} collections | ${f(r.list.many.ttiMs)} | ${f(r.list.many.pageMs)} | ${f(r.list.many.longestTaskMs)} | ${r.list.ratio.tti} | ${r.list.ratio.page} |`,
    `| point browser | 40 points (baseline) | ${f(r.points.small.ttiMs)} | ${f(r.points.small.pageMs)} | ${f(r.points.small.longestTaskMs)} | 1 | 1 |`,
    `| point browser | ${r.args.points} points | ${f(r.points.big.ttiMs)} | ${f(r.points.big.pageMs)} | ${f(r.points.big.longestTaskMs)} | ${r.points.ratio.tti} | ${r.points.ratio.page} |`,
    '',
    `Loading the ${r.args.points} points (16 dims, indexing off, 2000 per request) took ${r.points.loadSec.toFixed(0)} s.`,
    'The list\'s "next page" is one screen of scrolling of the virtual list until two frames are drawn; the point browser\'s is "Next page" clicked until the next 20 points are shown (one POST /points/scroll).',
    '',
  ];
  return lines.join('\n');
}

main().catch((e) => {
  process.stderr.write(`${e instanceof Error ? e.stack : String(e)}\n`);
  process.exit(1);
});
