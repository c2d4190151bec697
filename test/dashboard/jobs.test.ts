/**
 * The dashboard's snapshot jobs and the token page's words on asymmetric tokens, in
 * headless Chromium against the real server:
 *
 * - a collection snapshot made from the page runs as a job (`wait=false`), shown with a
 *   bar that ends full, listed completed with bytes equal to the snapshot's size in
 *   `GET /collections/{c}/snapshots`, in the collection's jobs and in the jobs panel;
 * - a recovery from a URL runs as a job whose bar is seen between empty and full: the
 *   test's file server sends part of the archive and holds the rest until the page has
 *   shown that part (a condition, not a time), then the bar moves on and ends full, with
 *   bytes equal to the snapshot's size; every value the page showed is recorded in the
 *   page (a MutationObserver), so none is missed between two looks;
 * - a job started elsewhere (the API) appears in the open jobs panel by itself;
 * - a recovery whose download fails is a failed job, shown with the server's error;
 * - the token page explains JWKS tokens minted outside and `jwt_allow_hs256: false`.
 *
 * The jobs panel is photographed (a recovery under way) for docs/dashboard.md.
 */

import test from 'ava';
import * as http from 'node:http';
import type { Browser, Page } from 'playwright-core';

import { startQuiver, type RunningQuiver } from '../api/helpers';
import { waitFor } from '../support/wait';
import { ATTACHED, closeSession, confirm, go, launchBrowser, openDashboard, shot } from './support';

const API_KEY = 'dashboard-jobs-key-0123456789abcdef';
const C = 'dash_jobs';
const N = 20_000;
const DIM = 64;

let node: RunningQuiver;
let browser: Browser;

async function must(method: string, url: string, body?: unknown): Promise<any> {
  const headers: Record<string, string> = { 'api-key': API_KEY };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(node.url + url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${method} ${url}: ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text).result;
}

test.before(async () => {
  node = await startQuiver({ SERVICE__SERVICE__API_KEY: API_KEY });
  await must('PUT', `/collections/${C}`, { vectors: { size: DIM, distance: 'Cosine' } });
  let seed = 11;
  const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648 - 0.5;
  for (let from = 0; from < N; from += 4000) {
    const points = [];
    for (let id = from; id < Math.min(N, from + 4000); id++) points.push({ id, vector: Array.from({ length: DIM }, rnd), payload: { n: id } });
    await must('PUT', `/collections/${C}/points?wait=true`, { points });
  }
  browser = await launchBrowser();
});

test.after.always(async () => {
  if (browser !== undefined) await browser.close();
  if (node !== undefined) await node.stop();
});

interface Seen {
  id: string;
  state: string;
  phase: string;
  done: number;
  total: number | null;
  bar: number;
  max: number;
}

/** Records in the page every state a job row takes (rows of every jobs table). */
async function recordJobRows(page: Page): Promise<void> {
  await page.evaluate(() => {
    const w = window as unknown as { seenJobs: unknown[] };
    w.seenJobs = [];
    const look = (tr: Element) => {
      const bar = tr.querySelector('progress') as HTMLProgressElement | null;
      const total = tr.getAttribute('data-total');
      w.seenJobs.push({
        id: tr.getAttribute('data-id'),
        state: tr.getAttribute('data-state'),
        phase: tr.getAttribute('data-phase'),
        done: Number(tr.getAttribute('data-done')),
        total: total ? Number(total) : null,
        bar: bar ? bar.value : -1,
        max: bar ? bar.max : -1,
      });
    };
    new MutationObserver((records) => {
      for (const r of records) {
        const tr = (r.target as Element).closest?.('[data-testid="job"]');
        if (tr) look(tr);
        r.addedNodes.forEach((n) => {
          if (n instanceof Element && n.matches('[data-testid="job"]')) look(n);
        });
      }
    }).observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-done', 'data-state', 'data-phase'] });
  });
}

async function seenJobs(page: Page, id: string): Promise<Seen[]> {
  const all = (await page.evaluate(() => (window as unknown as { seenJobs: Seen[] }).seenJobs)) as Seen[];
  return all.filter((s) => s.id === id);
}

/** The id of the newest job row of `kind` in table `table`. */
async function newestJob(page: Page, table: string, kind: string): Promise<string> {
  const row = page.locator(`#${table} [data-testid="job"][data-kind="${kind}"]`).first();
  await row.waitFor({ state: 'attached' });
  return (await row.getAttribute('data-id'))!;
}

test.serial('snapshot jobs: a create and a recovery followed live with a bar, bytes equal to the snapshot size', async (t) => {
  const s = await openDashboard(browser, node.url, `#/collections/${C}`, API_KEY);
  const { page } = s;
  await page.waitForSelector('#snapshots[data-loaded="true"]', ATTACHED);
  t.true(await page.getByTestId('collection-jobs-box').isHidden(), 'no job yet, no jobs part');
  await recordJobRows(page);

  // A snapshot made from the page: a job, its row in the collection's jobs.
  await page.getByTestId('snapshot-create').click();
  const createId = await newestJob(page, 'collection-jobs', 'create_collection_snapshot');
  const created = page.locator(`#collection-jobs [data-testid="job"][data-id="${createId}"]`);
  await page.waitForSelector(`#collection-jobs [data-testid="job"][data-id="${createId}"][data-state="completed"]`, ATTACHED);
  await page.getByTestId('snapshot').first().waitFor();
  const listed = (await must('GET', `/collections/${C}/snapshots`)) as Array<{ name: string; size: number }>;
  t.is(listed.length, 1);
  const size = listed[0]!.size;
  t.is(await created.getAttribute('data-done'), String(size), 'bytes done = the snapshot size');
  t.is(await created.getAttribute('data-total'), String(size));
  t.deepEqual(await created.getByTestId('job-bar').evaluate((e) => [(e as HTMLProgressElement).value, (e as HTMLProgressElement).max]), [size, size], 'the bar ends full');
  t.is(await created.getByTestId('job-outcome').textContent(), listed[0]!.name);
  t.is(await created.getByTestId('job-state').textContent(), 'completed');
  t.regex((await page.getByTestId('snapshot-busy').textContent()) ?? '', new RegExp(`^Created ${listed[0]!.name.replace(/\./g, '\\.')}\\.$`));
  const createView = await must('GET', `/snapshots/jobs/${createId}`);
  t.is(createView.bytes_done, size);
  const createSeen = await seenJobs(page, createId);
  t.true(createSeen.length >= 1 && createSeen.every((x, i) => i === 0 || x.state !== 'running' || createSeen[i - 1]!.state === 'running'), JSON.stringify(createSeen));
  // The write of a 20k-point archive takes a fraction of a second: whether a poll (twice a
  // second) falls inside it is luck, so the bar seen moving is the recovery's, below.
  t.log(`create job: ${createSeen.length} states shown, ${createSeen.filter((x) => x.state === 'running' && x.total !== null && x.done > 0 && x.done < x.total).length} part-way`);

  // A recovery from a URL: the test's server holds the archive's tail until the page has
  // shown the first part.
  const file = await fetch(`${node.url}/collections/${C}/snapshots/${encodeURIComponent(listed[0]!.name)}`, { headers: { 'api-key': API_KEY } });
  const archive = Buffer.from(await file.arrayBuffer());
  t.is(archive.length, size);
  const head = Math.floor(size / 3);
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  const files = http.createServer((req, res) => {
    if (req.url === '/missing.snapshot') {
      res.writeHead(404).end('no such file');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(size) });
    res.write(archive.subarray(0, head));
    void released.then(() => res.end(archive.subarray(head)));
  });
  await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
  const port = (files.address() as { port: number }).port;
  try {
    // Changed after the snapshot: the recovery brings the snapshot's content back.
    await must('POST', `/collections/${C}/points/delete?wait=true`, { points: [1, 2, 3] });
    await page.getByTestId('recover-location').fill(`http://127.0.0.1:${port}/${listed[0]!.name}`);
    await page.getByTestId('recover-url-run').click();
    await confirm(page, /^PUT \/collections\/dash_jobs\/snapshots\/recover\?wait=false\n/);
    const recoverId = await newestJob(page, 'collection-jobs', 'recover_collection_snapshot');
    const partWay = `[data-testid="job"][data-id="${recoverId}"][data-phase="downloading"][data-total="${size}"]:not([data-done="0"]):not([data-done="${size}"])`;
    await page.waitForSelector(`#collection-jobs ${partWay}`, ATTACHED);
    t.is(await page.locator('#recover-url').getAttribute('data-state'), 'running');

    // The jobs panel shows it too, part-way (photographed so).
    await go(page, '#/snapshots', 'view-snapshots');
    await page.waitForSelector('#jobs[data-loaded="true"]', ATTACHED);
    await page.waitForSelector(`#jobs ${partWay}`, ATTACHED);
    const panelIds = await page.locator('#jobs [data-testid="job"]').evaluateAll((els) => els.map((e) => e.getAttribute('data-id')));
    t.deepEqual(panelIds, [recoverId, createId], 'newest first');
    const listedCreate = page.locator(`#jobs [data-testid="job"][data-id="${createId}"]`);
    t.is(await listedCreate.getAttribute('data-state'), 'completed');
    t.is(await listedCreate.getAttribute('data-done'), String(size), 'listed done with bytes = the snapshot size');
    t.is(await listedCreate.getByTestId('job-kind').textContent(), 'create snapshot');
    t.is(await listedCreate.getByTestId('job-target').textContent(), C);
    t.is(await page.locator(`#jobs [data-id="${recoverId}"] [data-testid="job-state"]`).textContent(), 'running');
    t.regex((await page.locator(`#jobs [data-id="${recoverId}"] [data-testid="job-bytes"]`).textContent()) ?? '', / of .* \(\d+%\)$/);
    await shot(page, 'snapshot-jobs');

    release();
    await page.waitForSelector(`#jobs [data-testid="job"][data-id="${recoverId}"][data-state="completed"]`, ATTACHED);
    const done = page.locator(`#jobs [data-testid="job"][data-id="${recoverId}"]`);
    t.is(await done.getAttribute('data-done'), String(size), 'a recovery reads the whole archive');
    t.deepEqual(await done.getByTestId('job-bar').evaluate((e) => [(e as HTMLProgressElement).value, (e as HTMLProgressElement).max]), [size, size]);
    await page.waitForSelector('#recover-url[data-state="done"]', ATTACHED);
    t.is((await must('POST', `/collections/${C}/points/count`, { exact: true })).count, N);

    // What the page showed of the recovery: part-way at least once, never backwards within
    // a phase, and full at the end.
    const seen = await seenJobs(page, recoverId);
    const downloading = seen.filter((x) => x.phase === 'downloading');
    t.true(downloading.some((x) => x.done > 0 && x.done < size && x.bar === x.done && x.max === size), JSON.stringify(seen));
    for (let i = 1; i < seen.length; i++) {
      if (seen[i]!.phase === seen[i - 1]!.phase && seen[i]!.id === seen[i - 1]!.id) t.true(seen[i]!.done >= seen[i - 1]!.done, JSON.stringify(seen));
    }
    const last = seen[seen.length - 1]!;
    t.like(last, { state: 'completed', done: size, total: size, bar: size, max: size });
    t.like(await must('GET', `/snapshots/jobs/${recoverId}`), { state: 'completed', bytes_done: size, bytes_total: size, error: null });

    // A job started elsewhere (here: the API) shows up in the open panel by itself.
    const other = await fetch(`${node.url}/snapshots?wait=false`, { method: 'POST', headers: { 'api-key': API_KEY } });
    t.is(other.status, 202);
    const otherId = ((await other.json()) as { job_id: string }).job_id;
    const otherRow = page.locator(`#jobs [data-testid="job"][data-id="${otherId}"]`);
    await page.waitForSelector(`#jobs [data-testid="job"][data-id="${otherId}"][data-state="completed"]`, ATTACHED);
    t.is(await otherRow.getByTestId('job-kind').textContent(), 'create full snapshot');
    t.is(await otherRow.getByTestId('job-target').textContent(), 'full storage');
    t.is(await otherRow.getAttribute('data-done'), String((await must('GET', `/snapshots/jobs/${otherId}`)).bytes_done));

    // A download that fails: a failed job, with the server's words, and nothing changed.
    await go(page, `#/collections/${C}`, 'view-collection');
    await page.waitForSelector('#snapshots[data-loaded="true"]', ATTACHED);
    await page.getByTestId('recover-location').fill(`http://127.0.0.1:${port}/missing.snapshot`);
    await page.getByTestId('recover-url-run').click();
    await confirm(page, /recover\?wait=false/);
    await page.waitForSelector('#recover-url[data-state="error"]', ATTACHED);
    const failedId = await newestJob(page, 'collection-jobs', 'recover_collection_snapshot');
    t.not(failedId, recoverId);
    const failed = await must('GET', `/snapshots/jobs/${failedId}`);
    t.is(failed.state, 'failed');
    const row = page.locator(`#collection-jobs [data-testid="job"][data-id="${failedId}"]`);
    await waitFor('the failed job shown', async () => (await row.getAttribute('data-state')) === 'failed');
    t.is(await row.getByTestId('job-outcome').textContent(), failed.error);
    t.regex(failed.error, /HTTP 404/);
    t.is(await page.getByTestId('recover-url-status').textContent(), `Recovery failed: ${failed.error}`);
    t.is((await must('POST', `/collections/${C}/points/count`, { exact: true })).count, N);
  } finally {
    release();
    files.close();
  }

  await closeSession(t, s);
});

test.serial('the token page explains JWKS tokens minted outside and HS256 turned off', async (t) => {
  const s = await openDashboard(browser, node.url, '#/jwt', API_KEY);
  const text = (await s.page.getByTestId('jwt-modes').textContent()) ?? '';
  for (const words of ['service.jwt_jwks_path', 'service.jwt_jwks_url', 'RS256', 'PS256', 'ES256', 'EdDSA', 'docs/security.md', 'Minting a token outside Quiver', 'service.jwt_allow_hs256: false']) {
    t.true(text.includes(words), `the page says ${words}`);
  }
  t.regex(text, /whoever holds the private key/);
  t.regex((await s.page.getByTestId('jwt-outside').textContent()) ?? '', /new SignJWT[\s\S]*setProtectedHeader\(\{ alg: 'ES256', kid/);
  await closeSession(t, s);
});
