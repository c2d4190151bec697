/**
 * The dashboard's views on one node, in headless Chromium against the real server with
 * an API key, a read-only API key and JWT access control on:
 *
 * - a collection created from the form (which refuses what the server would), browsed
 *   page by page with a filter, queried through "find similar", given an alias,
 *   snapshotted, the snapshot downloaded, and the collection recovered from it by upload
 *   (the upload's progress bar filled) and from a URL, shard and full-storage snapshots;
 * - optimizer progress: 30,000 points indexed by one job, seen running with its bar
 *   moving, then listed as done, and the summary read again;
 * - the request console sending requests and showing the answers, with status and history;
 * - access: a read-only JWT sees no write control anywhere, a collection-scoped token sees
 *   its collection only, and with the read-only API key the first refused change is shown
 *   in the server's words and the write controls go.
 *
 * Each view is photographed into docs/dashboard/ for docs/dashboard.md.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as http from 'node:http';
import { SignJWT } from 'jose';
import type { Browser, Page } from 'playwright-core';

import { startQuiver, type RunningQuiver } from '../api/helpers';
import { waitFor } from '../support/wait';
import { ATTACHED, closeSession, confirm, go, launchBrowser, openDashboard, shot, visibleWriteControls } from './support';

const API_KEY = 'dashboard-views-key-0123456789abcdef';
const READ_KEY = 'dashboard-views-read-only-key-0123456789';
const C = 'dash_flow';
const OTHER = 'dash_other';
const N = 25;

let node: RunningQuiver;
let browser: Browser;

async function call(method: string, url: string, body?: unknown, key = API_KEY): Promise<{ status: number; body: any }> {
  const headers: Record<string, string> = { 'api-key': key };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(node.url + url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

async function must(method: string, url: string, body?: unknown): Promise<any> {
  const r = await call(method, url, body);
  if (r.status !== 200) throw new Error(`${method} ${url}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.result;
}

function token(claims: Record<string, unknown>): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(new TextEncoder().encode(API_KEY));
}

const CITIES = ['Berlin', 'Paris', 'Rome', 'Oslo', 'Lima'];

function points(): unknown[] {
  return Array.from({ length: N }, (_, i) => ({
    id: i + 1,
    vector: [Math.cos(i / 4), Math.sin(i / 4), (i % 5) / 5, 1],
    payload: { city: CITIES[i % CITIES.length], n: i + 1, tags: { even: i % 2 === 0 } },
  }));
}

test.before(async () => {
  node = await startQuiver({
    SERVICE__SERVICE__API_KEY: API_KEY,
    SERVICE__SERVICE__READ_ONLY_API_KEY: READ_KEY,
    SERVICE__SERVICE__JWT_RBAC: 'true',
  });
  await must('PUT', `/collections/${OTHER}`, { vectors: { size: 2, distance: 'Dot' } });
  browser = await launchBrowser();
});

test.after.always(async () => {
  if (browser !== undefined) await browser.close();
  if (node !== undefined) await node.stop();
});

async function pointIds(page: Page): Promise<string[]> {
  return page.getByTestId('point').evaluateAll((els) => els.map((e) => e.getAttribute('data-id') ?? ''));
}

async function waitPointsPage(page: Page, n: number): Promise<void> {
  await page.waitForSelector(`#points-list[data-loaded="true"][data-page="${n}"]`, ATTACHED);
}

test.serial('a collection created, browsed, found similar, aliased, snapshotted, downloaded and recovered by upload', async (t) => {
  const s = await openDashboard(browser, node.url, '', API_KEY);
  const { page } = s;
  await page.waitForSelector('#collections-list[data-loaded="true"]', ATTACHED);

  // The form refuses what the server would refuse, before sending anything.
  await page.getByTestId('collection-create-open').click();
  await page.getByTestId('create-name').fill('.hidden');
  await page.getByTestId('create-submit').click();
  t.regex((await page.getByTestId('create-error').textContent()) ?? '', /not starting with a dot/);
  await page.getByTestId('create-name').fill(C);
  await page.getByTestId('create-size').fill('0');
  await page.getByTestId('create-submit').click();
  t.regex((await page.getByTestId('create-error').textContent()) ?? '', /vector size must be a whole number from 1 to 65536/);
  t.is((await call('GET', `/collections/${C}/exists`)).body.result.exists, false, 'nothing was sent');
  // A name the server refuses for being taken: its own words are shown.
  await page.getByTestId('create-name').fill(OTHER);
  await page.getByTestId('create-size').fill('4');
  await page.getByTestId('create-submit').click();
  await page.waitForSelector('#collection-create[data-state="error"]', ATTACHED);
  const taken = (await page.getByTestId('create-error').textContent()) ?? '';
  const server = await call('PUT', `/collections/${OTHER}`, { vectors: { size: 4, distance: 'Cosine' } });
  t.true(taken.endsWith(server.body.status.error), `${taken} ends with the server's "${server.body.status.error}"`);
  t.regex(taken, new RegExp(`^Could not create ${OTHER}: ${server.status} `));

  await page.getByTestId('create-name').fill(C);
  await page.getByTestId('create-distance').selectOption('Cosine');
  await page.getByTestId('create-submit').click();
  await page.waitForSelector('#collection-summary[data-loaded="true"]', ATTACHED);
  t.is(new URL(page.url()).hash, `#/collections/${C}`);
  const info = await must('GET', `/collections/${C}`);
  t.deepEqual(info.config.params.vectors, { size: 4, distance: 'Cosine' });

  await must('PUT', `/collections/${C}/points?wait=true`, { points: points() });
  await must('PUT', `/collections/${C}/index?wait=true`, { field_name: 'city', field_schema: 'keyword' });
  await must('PUT', `/collections/${C}/index?wait=true`, { field_name: 'n', field_schema: 'integer' });
  await page.getByTestId('collection-refresh').click();
  await page.waitForSelector('#collection-summary[data-loaded="true"]', ATTACHED);
  t.is(await page.getByTestId('summary-points').textContent(), String(N));
  const schema = (await must('GET', `/collections/${C}`)).payload_schema as Record<string, { data_type: string; points: number }>;
  const rows = await page.getByTestId('index-row').evaluateAll((els) =>
    els.map((e) => [e.getAttribute('data-field'), e.querySelector('[data-testid="index-type"]')!.textContent, e.querySelector('[data-testid="index-points"]')!.textContent]),
  );
  t.deepEqual(
    rows,
    Object.keys(schema)
      .sort()
      .map((f) => [f, schema[f]!.data_type, String(schema[f]!.points)]),
  );
  t.deepEqual(
    rows.map((r) => r[0]),
    ['city', 'n'],
  );
  t.is(await page.locator('[data-testid="config-row"][data-key="params.vectors.size"] td').textContent(), '4');
  // 25 points stay under the indexing threshold: no job ran, none is queued.
  await page.waitForSelector('#optimizations[data-running="0"]');
  t.regex((await page.getByTestId('optimizations-summary').textContent()) ?? '', /^0 running, 0 queued/);
  await shot(page, 'collection');

  // Aliases: created and deleted, each confirmed first.
  await page.getByTestId('alias-name').fill('dash_alias');
  await page.getByTestId('alias-create').click();
  await confirm(page, /POST \/collections\/aliases[\s\S]*create_alias[\s\S]*dash_alias/);
  await page.locator('[data-testid="alias"][data-alias="dash_alias"]').waitFor();
  t.deepEqual((await must('GET', `/collections/${C}/aliases`)).aliases, [{ alias_name: 'dash_alias', collection_name: C }]);
  await page.locator('[data-testid="alias"][data-alias="dash_alias"] [data-testid="alias-delete"]').click();
  await confirm(page, /delete_alias/);
  await page.locator('[data-testid="alias"]').waitFor({ state: 'detached' });
  t.deepEqual((await must('GET', `/collections/${C}/aliases`)).aliases, []);

  // The point browser: pages of 10, forward and back, then a filter.
  await page.getByTestId('collection-points-link').click();
  await page.getByTestId('view-points').waitFor({ state: 'visible' });
  await page.getByTestId('points-limit').fill('10');
  await page.getByTestId('points-apply').click();
  await waitPointsPage(page, 1);
  t.deepEqual(await pointIds(page), ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10']);
  const first = page.locator('[data-testid="point"][data-id="1"]');
  t.deepEqual(JSON.parse((await first.getByTestId('point-payload').textContent()) ?? ''), { city: 'Berlin', n: 1, tags: { even: true } });
  t.regex((await first.getByTestId('point-vector').textContent()) ?? '', /^4 dims \[/);
  await shot(page, 'points');
  await page.getByTestId('points-next').click();
  await waitPointsPage(page, 2);
  t.deepEqual(await pointIds(page), ['11', '12', '13', '14', '15', '16', '17', '18', '19', '20']);
  await page.getByTestId('points-next').click();
  await waitPointsPage(page, 3);
  t.deepEqual(await pointIds(page), ['21', '22', '23', '24', '25']);
  t.true(await page.getByTestId('points-next').isDisabled(), 'no page after the last');
  await page.getByTestId('points-prev').click();
  await waitPointsPage(page, 2);
  t.is((await pointIds(page))[0], '11');
  await page.getByTestId('points-filter').fill('{"must": [{"key": "city", "match": {"value": "Rome"}}]}');
  await page.getByTestId('points-apply').click();
  await waitPointsPage(page, 1);
  t.deepEqual(await pointIds(page), ['3', '8', '13', '18', '23']);
  // A filter the server refuses: its words.
  await page.getByTestId('points-filter').fill('{"must": [{"key": "city", "match": {"nope": 1}}]}');
  await page.getByTestId('points-apply').click();
  await page.waitForSelector('#points-list[data-loaded="error"]', ATTACHED);
  t.regex((await page.getByTestId('points-error').textContent()) ?? '', /^Could not scroll the points: 400 /);
  await page.getByTestId('points-filter').fill('');
  await page.getByTestId('points-apply').click();
  await waitPointsPage(page, 1);

  // "Find similar" queries by the point's id: the same answer as the API's.
  await page.locator('[data-testid="point"][data-id="5"] [data-testid="find-similar"]').click();
  await page.waitForSelector('#similar[data-state="done"]', ATTACHED);
  const shown = await page.getByTestId('similar-result').evaluateAll((els) => els.map((e) => e.getAttribute('data-id')));
  const expected = (await must('POST', `/collections/${C}/points/query`, { query: 5, limit: 10 })).points.map((p: { id: number }) => String(p.id));
  t.deepEqual(shown, expected);
  t.false(shown.includes('5'), 'a query by id leaves the point itself out');
  await shot(page, 'similar');

  // A snapshot, made and downloaded from the page.
  await page.getByTestId('points-collection').click();
  await page.waitForSelector('#snapshots[data-loaded="true"]', ATTACHED);
  await page.getByTestId('snapshot-create').click();
  await page.getByTestId('snapshot').first().waitFor();
  const listed = (await must('GET', `/collections/${C}/snapshots`)) as Array<{ name: string; size: number }>;
  t.is(listed.length, 1);
  t.is(await page.getByTestId('snapshot').first().getAttribute('data-name'), listed[0]!.name);
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('snapshot-download').first().click()]);
  t.is(download.suggestedFilename(), listed[0]!.name);
  const file = await download.path();
  t.is(fs.statSync(file).size, listed[0]!.size, 'the whole snapshot was downloaded');

  // Changed after the snapshot: the recovery must bring the snapshot's content back.
  await must('POST', `/collections/${C}/points/delete?wait=true`, { points: [1, 2, 3] });
  t.is((await must('POST', `/collections/${C}/points/count`, { exact: true })).count, N - 3);
  await page.getByTestId('recover-file').setInputFiles(file);
  await page.getByTestId('recover-upload-run').click();
  await confirm(page, /POST \/collections\/dash_flow\/snapshots\/upload\?wait=false&priority=snapshot/);
  await page.waitForSelector('#recover-upload[data-state="done"]', ATTACHED);
  const bar = await page.getByTestId('upload-progress').evaluate((e) => ({ value: (e as HTMLProgressElement).value, max: (e as HTMLProgressElement).max }));
  t.true(bar.max >= listed[0]!.size && bar.value === bar.max, `the upload bar is full: ${JSON.stringify(bar)}`);
  t.is((await must('POST', `/collections/${C}/points/count`, { exact: true })).count, N);
  await page.waitForSelector('#collection-summary[data-loaded="true"]', ATTACHED);
  await waitFor('the summary shows the recovered count', async () => (await page.getByTestId('summary-points').textContent()) === String(N));
  await shot(page, 'snapshots');

  // And from a URL: the same file served over http by the test.
  await must('POST', `/collections/${C}/points/delete?wait=true`, { points: [4, 5] });
  const files = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
  try {
    const port = (files.address() as { port: number }).port;
    await page.getByTestId('recover-location').fill(`http://127.0.0.1:${port}/${listed[0]!.name}`);
    await page.getByTestId('recover-url-run').click();
    await confirm(page, /^PUT \/collections\/dash_flow\/snapshots\/recover\?wait=false\n[\s\S]*"location": "http:\/\/127\.0\.0\.1:/);
    await page.waitForSelector('#recover-url[data-state="done"]', ATTACHED);
  } finally {
    files.close();
  }
  t.is((await must('POST', `/collections/${C}/points/count`, { exact: true })).count, N);

  // Shard snapshots: one shard here, created and listed.
  await page.locator('[data-testid="shard-snapshots-0"] summary').click();
  await page.locator('[data-testid="shard-snapshots-0"] [data-testid="shard-snapshot-create"]').click();
  await page.locator('[data-testid="shard-snapshots-0"] [data-testid="shard-snapshot"]').first().waitFor();
  t.is(((await must('GET', `/collections/${C}/shards/0/snapshots`)) as unknown[]).length, 1);

  // Deleted from the page.
  await page.getByTestId('snapshot-delete').first().click();
  await confirm(page, /^DELETE \/collections\/dash_flow\/snapshots\//);
  await waitFor('the snapshot is gone', async () => ((await must('GET', `/collections/${C}/snapshots`)) as unknown[]).length === 0);

  // Full-storage snapshots.
  await go(page, '#/snapshots', 'view-snapshots');
  await page.waitForSelector('#storage-snapshots[data-loaded="true"]', ATTACHED);
  await page.getByTestId('storage-snapshot-create').click();
  await page.getByTestId('storage-snapshot').first().waitFor();
  const storage = (await must('GET', '/snapshots')) as Array<{ name: string }>;
  t.is(storage.length, 1);
  t.is(await page.getByTestId('storage-snapshot').first().getAttribute('data-name'), storage[0]!.name);
  await shot(page, 'storage-snapshots');
  await page.getByTestId('storage-snapshot-delete').first().click();
  await confirm(page, /^DELETE \/snapshots\//);
  await waitFor('the storage snapshot is gone', async () => ((await must('GET', '/snapshots')) as unknown[]).length === 0);

  // The collection list and its filter.
  await go(page, '#/', 'view-collections');
  await page.waitForSelector('#collections-list[data-loaded="true"]', ATTACHED);
  await page.getByTestId('collections-filter').fill('flow');
  await waitFor('the filtered list', async () => (await page.getByTestId('collection-item').count()) === 1);
  t.is(await page.getByTestId('collection-item').getAttribute('data-name'), C);
  await page.getByTestId('collections-filter').fill('');
  await shot(page, 'collections');
  await closeSession(t, s);
});

test.serial('optimizer progress: an indexing job seen running with its bar moving, then completed, the summary read again', async (t) => {
  // 30,000 × 64 dimensions (7.5 MB) stay under the default threshold (10,000 KB), so the
  // upload sets off no job; lowering the threshold then makes one job index them all.
  const OPT = 'dash_opt';
  const DIM = 64;
  const TOTAL = 30_000;
  await must('PUT', `/collections/${OPT}`, { vectors: { size: DIM, distance: 'Dot' } });
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1;
  for (let at = 0; at < TOTAL; at += 5000) {
    const batch = Array.from({ length: 5000 }, (_, i) => ({ id: at + i + 1, vector: Array.from({ length: DIM }, rand) }));
    await must('PUT', `/collections/${OPT}/points?wait=true`, { points: batch });
  }
  t.deepEqual((await must('GET', `/collections/${OPT}/optimizations`)).running, [], 'nothing runs before the threshold is lowered');

  const s = await openDashboard(browser, node.url, `#/collections/${OPT}`, API_KEY);
  const { page } = s;
  await page.waitForSelector('#optimizations[data-running="0"]');
  await must('PATCH', `/collections/${OPT}`, { optimizers_config: { indexing_threshold: 100 } });
  await waitFor('the indexing job to start', async () => (await must('GET', `/collections/${OPT}/optimizations`)).running.length > 0);
  await page.getByTestId('collection-refresh').click();

  // Running: a bar part-filled, then further on (the page polls while the job runs).
  const running = page.locator('[data-testid="optimization"][data-state="running"]');
  const bar = running.getByTestId('optimization-progress');
  const value = async (): Promise<[number, number] | null> => {
    if ((await bar.count()) === 0) return null;
    return [Number(await bar.getAttribute('value')), Number(await bar.getAttribute('max'))];
  };
  const first = await waitFor('a running job with a part-filled bar', async () => {
    const v = await value().catch(() => null);
    return v !== null && v[0] > 0 && v[0] < v[1] ? v : null;
  });
  t.is(first[1], TOTAL, 'the bar counts every point the job moves');
  t.is(await running.getAttribute('data-optimizer'), 'indexing');
  t.regex((await running.getByTestId('optimization-count').textContent()) ?? '', new RegExp(`^ ${first[0]} / ${TOTAL}$`));
  await shot(page, 'optimizations');
  await waitFor('the bar to move on', async () => {
    const v = await value().catch(() => null);
    return v === null || v[0] > first[0];
  });

  // Completed: the job listed as done with all its points, nothing running, and the
  // summary above read again (all points indexed).
  const done = page.locator('[data-testid="optimization"][data-state="done"][data-optimizer="indexing"]');
  await done.waitFor();
  await page.waitForSelector('#optimizations[data-running="0"]');
  t.is(await done.getByTestId('optimization-count').textContent(), `${TOTAL} / ${TOTAL}`);
  const indexed = (await must('GET', `/collections/${OPT}`)).indexed_vectors_count;
  await waitFor('the summary read again', async () => (await page.getByTestId('summary-indexed-vectors').textContent()) === String(indexed));
  t.true(indexed >= TOTAL, `indexed vectors ${indexed}`);
  await closeSession(t, s);
  await must('DELETE', `/collections/${OPT}`);
});

test.serial('the console sends a request and shows the answer, its status and time, and keeps a history', async (t) => {
  const s = await openDashboard(browser, node.url, '#/console', API_KEY);
  const { page } = s;
  await page.getByTestId('console-input').fill(`POST /collections/${OTHER}/points/count\n{"exact": true}`);
  await page.getByTestId('console-send').click();
  await page.waitForSelector('#console-output[data-state="done"]', ATTACHED);
  const answer = JSON.parse((await page.getByTestId('console-output').textContent()) ?? '');
  t.deepEqual(answer.result, { count: 0 });
  t.is(answer.status, 'ok');
  t.regex((await page.getByTestId('console-meta').textContent()) ?? '', /^200 OK · \d+ ms · /);
  t.regex((await page.getByTestId('console-output').textContent()) ?? '', /\n {2}"result": \{\n {4}"count": 0\n/, 'formatted');

  // A refusal comes back as the server wrote it.
  await page.getByTestId('console-input').fill(`PUT /collections/${OTHER}/points?wait=true\n{"points": [{"id": 1, "vector": [1, 2, 3]}]}`);
  await page.getByTestId('console-input').press('Control+Enter');
  await page.waitForSelector('#console-meta[data-status="400"]', ATTACHED);
  const refused = JSON.parse((await page.getByTestId('console-output').textContent()) ?? '');
  const direct = await call('PUT', `/collections/${OTHER}/points?wait=true`, { points: [{ id: 1, vector: [1, 2, 3] }] });
  t.is(refused.status.error, direct.body.status.error);

  // Input the page cannot send.
  await page.getByTestId('console-input').fill('FETCH /collections');
  await page.getByTestId('console-send').click();
  t.regex((await page.getByTestId('console-error').textContent()) ?? '', /Unknown method FETCH/);
  await page.getByTestId('console-input').fill('POST /collections/x/points/count\n{"exact": tru');
  await page.getByTestId('console-send').click();
  t.regex((await page.getByTestId('console-error').textContent()) ?? '', /not valid JSON/);

  const history = await page.getByTestId('console-history-item').allTextContents();
  t.is(history.length, 2);
  t.regex(history[0]!, new RegExp(`^PUT /collections/${OTHER}/points\\?wait=true → 400 in \\d+ ms`));
  t.regex(history[1]!, new RegExp(`^POST /collections/${OTHER}/points/count → 200`));
  // A history item puts its request back in the editor.
  await page.getByTestId('console-history-item').nth(1).locator('a').click();
  t.is(await page.getByTestId('console-input').inputValue(), `POST /collections/${OTHER}/points/count\n{"exact": true}`);
  await page.getByTestId('console-send').click();
  await page.waitForSelector('#console-meta[data-status="200"]', ATTACHED);
  await shot(page, 'console');
  await closeSession(t, s);
});

/** Visits every view with the session's credential and gathers the write controls in sight. */
async function writeControlsEverywhere(page: Page, collection: string): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  await go(page, '#/', 'view-collections');
  await page.waitForSelector('#collections-list[data-loaded="true"]', ATTACHED);
  out.collections = await visibleWriteControls(page);
  await go(page, `#/collections/${collection}`, 'view-collection');
  await page.waitForSelector('#collection-summary[data-loaded="true"]', ATTACHED);
  await page.waitForSelector('#snapshots[data-loaded="true"]', ATTACHED);
  await page.waitForSelector('#aliases[data-loaded="true"]', ATTACHED);
  out.collection = await visibleWriteControls(page);
  await go(page, `#/collections/${collection}/points`, 'view-points');
  await page.waitForSelector('#points-list[data-loaded="true"]', ATTACHED);
  out.points = await visibleWriteControls(page);
  await go(page, '#/cluster', 'view-cluster');
  await page.waitForSelector('#view-cluster[data-updated]', ATTACHED);
  out.cluster = await visibleWriteControls(page);
  await go(page, '#/snapshots', 'view-snapshots');
  await page.waitForSelector('#storage-snapshots[data-loaded]', ATTACHED);
  out.snapshots = await visibleWriteControls(page);
  return out;
}

test.serial('a read-only token sees no write control; a collection-scoped one sees its collection only', async (t) => {
  // A snapshot and an alias exist, so their delete buttons would be offered to a writer.
  await must('POST', `/collections/${C}/snapshots?wait=true`);
  await must('POST', '/snapshots?wait=true');
  await must('POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: C, alias_name: 'dash_ro_alias' } }] });

  const manager = await openDashboard(browser, node.url, '', API_KEY);
  const all = await writeControlsEverywhere(manager.page, C);
  t.true(all.collections!.includes('collection-create-open'), JSON.stringify(all));
  t.true(all.collection!.includes('collection-delete') && all.collection!.includes('snapshot-delete') && all.collection!.includes('alias-delete'), JSON.stringify(all));
  t.true(all.snapshots!.includes('storage-snapshot-delete'), JSON.stringify(all));
  await closeSession(t, manager);

  const reader = await openDashboard(browser, node.url, '', await token({ access: 'r' }));
  t.deepEqual(await writeControlsEverywhere(reader.page, C), { collections: [], collection: [], points: [], cluster: [], snapshots: [] });
  t.is(await reader.page.getByTestId('access-badge').textContent(), 'read-only token');
  // Reading still works: the snapshot is listed with its download button.
  await go(reader.page, `#/collections/${C}`, 'view-collection');
  await reader.page.getByTestId('snapshot').first().waitFor();
  t.is(await reader.page.getByTestId('snapshot-download').count(), 1);
  await shot(reader.page, 'read-only');
  await closeSession(t, reader);

  // rw on C: only C is listed; its points and snapshots may change, the collection itself not.
  const scoped = await openDashboard(browser, node.url, '', await token({ access: [{ collection: C, access: 'rw' }] }));
  await scoped.page.waitForSelector('#collections-list[data-loaded="true"]', ATTACHED);
  t.deepEqual(await scoped.page.getByTestId('collection-item').evaluateAll((els) => els.map((e) => e.getAttribute('data-name'))), [C]);
  await go(scoped.page, `#/collections/${C}`, 'view-collection');
  await scoped.page.waitForSelector('#snapshots[data-loaded="true"]', ATTACHED);
  await scoped.page.getByTestId('snapshot').first().waitFor();
  t.deepEqual((await visibleWriteControls(scoped.page)).sort(), ['shard-snapshot-create', 'snapshot-create', 'snapshot-delete']);
  // Such a token may not read snapshot jobs (global read): its snapshot waits for the answer.
  const before = ((await must('GET', `/collections/${C}/snapshots`)) as unknown[]).length;
  await scoped.page.getByTestId('snapshot-create').click();
  await waitFor('the scoped snapshot made', async () => /^Created /.test((await scoped.page.getByTestId('snapshot-busy').textContent()) ?? ''));
  t.is(((await must('GET', `/collections/${C}/snapshots`)) as unknown[]).length, before + 1);
  t.true(scoped.requests.some((u) => u.endsWith(`/collections/${C}/snapshots?wait=true`)), 'sent with wait=true');
  t.false(scoped.requests.some((u) => u.includes('/snapshots/jobs')), 'no job asked for');
  t.true(await scoped.page.getByTestId('collection-jobs-box').isHidden());
  await closeSession(t, scoped);

  // The read-only API key: the page cannot tell from the key, so the server's first 403
  // is shown in its words, and the write controls go.
  const keyed = await openDashboard(browser, node.url, `#/collections/${C}`, READ_KEY);
  await keyed.page.waitForSelector('#snapshots[data-loaded="true"]', ATTACHED);
  t.true((await visibleWriteControls(keyed.page)).includes('snapshot-create'));
  await keyed.page.getByTestId('snapshot-create').click();
  await keyed.page.getByTestId('snapshots-error').waitFor({ state: 'visible' });
  const direct = await call('POST', `/collections/${C}/snapshots?wait=true`, undefined, READ_KEY);
  t.is(direct.status, 403);
  t.true(((await keyed.page.getByTestId('snapshots-error').textContent()) ?? '').endsWith(direct.body.status.error));
  t.deepEqual(await visibleWriteControls(keyed.page), []);
  t.regex((await keyed.page.getByTestId('access-badge').textContent()) ?? '', /read-only \(the server refused a change\)/);
  await closeSession(t, keyed);
});
