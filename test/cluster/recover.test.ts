/**
 * POST /cluster/recover's write (recoveryWrite): the leader's snapshot replaces the
 * follower's log, but entries the follower holds after the snapshot's last entry stay (it
 * may have acknowledged them, and a leader may have counted them for a commit); a log that
 * diverged at that entry is dropped; a peer that applied or committed past the snapshot is
 * not replaced. Checked through FileRaftStorage reopened from disk.
 */

import test from 'ava';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';

import { recoveryWrite } from '../../ts/consensus/driver';
import { FileRaftStorage } from '../../ts/consensus/file-storage';
import type { Entry, Snapshot } from '../../ts/consensus/types';

const conf = { voters: ['1', '2', '3'], learners: [] };

async function follower(t: { teardown(fn: () => Promise<void>): void }, last: number, commit: number): Promise<{ dir: string; s: FileRaftStorage }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-recover-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const s = await FileRaftStorage.open(dir);
  await s.bootstrap(conf, new Uint8Array(0));
  const entries: Entry[] = [];
  for (let i = 2; i <= last; i++) entries.push({ index: i, term: 1, type: 'normal', data: Buffer.from(`{"i":${i}}`) });
  await s.persist({ snapshot: null, entries, hardState: { term: 1, vote: '1', commit } });
  return { dir, s };
}

const leaderSnapshot = (index: number, term = 1): Snapshot => ({ meta: { index, term, conf }, data: Buffer.from('{"peers":{},"collections":{},"aliases":{}}') });

test('the follower\'s entries after the snapshot (acknowledged, maybe counted for commit) are kept, also after reopening', async (t) => {
  const { dir, s } = await follower(t, 10, 5);
  const snap = leaderSnapshot(7);
  const plan = recoveryWrite(s, 5, 5, snap);
  if ('skip' in plan) return t.fail(plan.skip);
  t.deepEqual(plan.entries.map((e) => e.index), [8, 9, 10]);
  t.deepEqual(plan.hardState, { term: 1, vote: '1', commit: 7 });
  await s.persist({ snapshot: snap, entries: plan.entries, hardState: plan.hardState });
  await s.close();
  const again = await FileRaftStorage.open(dir);
  t.is(again.snapshot().meta.index, 7);
  t.is(again.lastIndex(), 10);
  t.is(again.initialState().hardState.commit, 7);
  await again.close();
});

test('a log that diverged at the snapshot\'s last entry is replaced whole; a newer term drops the vote', async (t) => {
  const { s } = await follower(t, 10, 5);
  const plan = recoveryWrite(s, 5, 5, leaderSnapshot(7, 2));
  if ('skip' in plan) return t.fail(plan.skip);
  t.deepEqual(plan.entries, []);
  t.deepEqual(plan.hardState, { term: 2, vote: null, commit: 7 });
  await s.close();
});

test('a peer that applied or committed past the snapshot is not replaced', async (t) => {
  const { s } = await follower(t, 10, 8);
  t.true('skip' in recoveryWrite(s, 8, 8, leaderSnapshot(7)));
  t.true('skip' in recoveryWrite(s, 5, 8, leaderSnapshot(7)), 'persisted commit past the snapshot');
  t.true('skip' in recoveryWrite(s, 5, 9, leaderSnapshot(8)), 'commit known in memory past the snapshot');
  t.false('skip' in recoveryWrite(s, 8, 8, leaderSnapshot(8)));
  await s.close();
});
