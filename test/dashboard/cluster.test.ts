/**
 * The dashboard's cluster view on a real 3-peer cluster (test/cluster/harness.ts), in
 * headless Chromium: peers with the leader marked, the shard × peer grid, a replica moved
 * from the page (confirmed first) with its progress bar seen moving, the final grid the
 * same as GET /collections/{c}/cluster, and a replication aborted from the page.
 *
 * Transfers are paced (storage.performance.shard_transfer_max_mb_per_sec) so that a copy
 * lasts a few seconds: long enough for the page's once-a-second poll to see it move.
 */

import test from 'ava';
import type { Browser, Page } from 'playwright-core';

import { Cluster } from '../cluster/harness';
import { call, createCollection, load, peerIds, range, shardReplicas, waitFor } from '../cluster/transfer-support';
import { ATTACHED, closeSession, confirm, launchBrowser, openDashboard, shot } from './support';

const NAME = 'dash_cluster';
const POINTS = 24_000;

let cluster: Cluster | null = null;
let browser: Browser;
let ids: string[] = [];

test.before(async () => {
  cluster = await Cluster.start(3, { SERVICE__STORAGE__PERFORMANCE__SHARD_TRANSFER_MAX_MB_PER_SEC: '0.25' });
  ids = await peerIds(cluster);
  browser = await launchBrowser();
});

test.after.always(async () => {
  if (browser !== undefined) await browser.close();
  await cluster?.destroy();
});

/** The grid as the page shows it: "shard/peer" → state, for the cells that hold a replica. */
async function gridOf(page: Page): Promise<Record<string, string>> {
  const cells = await page
    .getByTestId('replica-cell')
    .evaluateAll((els) => els.map((e) => [e.getAttribute('data-shard'), e.getAttribute('data-peer'), e.getAttribute('data-state')] as const));
  const out: Record<string, string> = {};
  for (const [s, p, st] of cells) if (st) out[`${s}/${p}`] = st;
  return out;
}

/** The same from GET /collections/{c}/cluster of peer `i`. */
async function apiGrid(i: number): Promise<Record<string, string>> {
  const r = await call(cluster!.peers[i]!.url, 'GET', `/collections/${NAME}/cluster`);
  const info = r.body.result as { peer_id: number; local_shards: Array<{ shard_id: number; state: string }>; remote_shards: Array<{ shard_id: number; peer_id: number; state: string }> };
  const out: Record<string, string> = {};
  for (const s of info.local_shards) out[`${s.shard_id}/${info.peer_id}`] = s.state;
  for (const s of info.remote_shards) out[`${s.shard_id}/${s.peer_id}`] = s.state;
  return out;
}

async function transferRows(page: Page): Promise<number> {
  return page.getByTestId('transfer').count();
}

test.serial('a replica moved from the cluster view: confirmed, its progress seen moving, the grid as the API says; a replication aborted', async (t) => {
  t.timeout(180_000);
  const c = cluster!;
  await createCollection(c, NAME, { shard_number: 1, replication_factor: 1 });
  const home = Object.keys(await shardReplicas(c, 0, NAME, 0))[0]!;
  const h = ids.indexOf(home);
  const target = ids.find((p) => p !== home)!;
  await load(c.peers[h]!.url, NAME, range(0, POINTS));

  // The page is served by the source peer: the source is the one that reports progress.
  const s = await openDashboard(browser, c.peers[h]!.url, '#/cluster');
  const { page } = s;
  await page.waitForSelector(`#replica-grid[data-collection="${NAME}"]`, ATTACHED);

  // Peers: the three, the leader marked as /cluster names it, none unreachable.
  const info = (await call(c.peers[h]!.url, 'GET', '/cluster')).body.result;
  await waitFor('the peers with their roles', async () => {
    const rows = await page.getByTestId('peer').evaluateAll((els) => els.map((e) => [e.getAttribute('data-peer'), e.getAttribute('data-leader'), e.getAttribute('data-reachable'), e.querySelector('[data-testid="peer-role"]')!.textContent]));
    return rows.length === 3 && rows.every((r) => r[3] === 'Leader' || r[3] === 'Follower') ? rows : null;
  });
  const leaders = await page.locator('[data-testid="peer"][data-leader="true"]').evaluateAll((els) => els.map((e) => e.getAttribute('data-peer')));
  t.deepEqual(leaders, [String(info.raft_info.leader)]);
  t.is(await page.locator('[data-testid="peer"][data-reachable="false"]').count(), 0);
  t.deepEqual(await gridOf(page), await apiGrid(h));
  t.deepEqual(await gridOf(page), { [`0/${home}`]: 'Active' });

  // The move, from the form, shown before it is sent.
  await page.getByTestId('op-kind').selectOption('move_shard');
  await page.getByTestId('op-shard').selectOption('0');
  await page.getByTestId('op-from').selectOption(home);
  await page.getByTestId('op-to').selectOption(target);
  await page.getByTestId('op-method').selectOption('stream_records');
  await page.getByTestId('op-run').click();
  const sent = await confirm(page, /^POST \/collections\/dash_cluster\/cluster\n/);
  t.deepEqual(JSON.parse(sent.slice(sent.indexOf('\n') + 1)), {
    move_shard: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(target), method: 'stream_records' },
  });

  // The progress bar, seen at two different points between empty and full.
  const seen = new Set<number>();
  let shotTaken = false;
  await waitFor(
    'the progress bar seen moving',
    async () => {
      const bar = await page
        .getByTestId('transfer-progress')
        .evaluateAll((els) => els.map((e) => ({ value: (e as HTMLProgressElement).value, max: (e as HTMLProgressElement).max })));
      if (bar.length === 1 && bar[0]!.value > 0 && bar[0]!.value < bar[0]!.max) {
        seen.add(bar[0]!.value);
        t.is(bar[0]!.max, POINTS);
        const rate = (await page.getByTestId('transfer-rate').textContent()) ?? '';
        const eta = (await page.getByTestId('transfer-eta').textContent()) ?? '';
        if (!shotTaken && /^\d+ points\/s$/.test(rate) && /^[0-9.]+s$/.test(eta)) {
          shotTaken = true;
          await shot(page, 'cluster-transfer');
        }
      }
      return seen.size >= 2 && shotTaken;
    },
    60_000,
    100,
  );
  t.true(seen.size >= 2, `progress values seen: ${[...seen].join(', ')}`);
  t.true(shotTaken, 'a rate and an ETA were shown');

  // The end: no transfer, the replica on the target only, the grid as the API has it.
  await page.getByTestId('transfers-empty').waitFor({ state: 'visible', timeout: 120_000 });
  await waitFor('the grid shows the moved replica', async () => JSON.stringify(await gridOf(page)) === JSON.stringify({ [`0/${target}`]: 'Active' }));
  t.deepEqual(await apiGrid(h), { [`0/${target}`]: 'Active' });
  await waitFor('the page and the API agree', async () => JSON.stringify(await gridOf(page)) === JSON.stringify(await apiGrid(h)));
  await shot(page, 'cluster');

  // A replication back to the old home, aborted from its row.
  await page.getByTestId('op-kind').selectOption('replicate_shard');
  await page.getByTestId('op-shard').selectOption('0');
  await page.getByTestId('op-from').selectOption(target);
  await page.getByTestId('op-to').selectOption(home);
  await page.getByTestId('op-method').selectOption('stream_records');
  await page.getByTestId('op-run').click();
  await confirm(page, /"replicate_shard"/);
  await page.getByTestId('transfer-abort').waitFor();
  t.is(await transferRows(page), 1);
  await page.getByTestId('transfer-abort').click();
  const abort = await confirm(page, /"abort_transfer"/);
  t.deepEqual(JSON.parse(abort.slice(abort.indexOf('\n') + 1)), { abort_transfer: { shard_id: 0, from_peer_id: Number(target), to_peer_id: Number(home) } });
  await page.getByTestId('transfers-empty').waitFor({ state: 'visible' });
  await waitFor('the aborted replica gone', async () => JSON.stringify(await apiGrid(h)) === JSON.stringify({ [`0/${target}`]: 'Active' }));
  await waitFor('the page and the API agree', async () => JSON.stringify(await gridOf(page)) === JSON.stringify(await apiGrid(h)));
  await closeSession(t, s);
});
