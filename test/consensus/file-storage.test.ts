/**
 * FileRaftStorage (the durable Raft log) and the codec: reopened state equals an
 * in-memory log fed the same operations; a torn tail is cut at every byte offset; a bad
 * record in the middle is refused; a crash between records is a valid state; compaction
 * rewrites the file smaller; a failed write fails the storage for good; the codec
 * round-trips every message and refuses malformed input; and a 3-peer Raft cluster on
 * FileRaftStorage survives a peer's "crash" (reopened from disk).
 */

import test from 'ava';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';

import { CodecError, decodeMessage, decodeSnapshot, encodeMessage, encodeSnapshot } from '../../ts/consensus/codec';
import { mulberry32 } from '../support/rng';
import { FileRaftStorage, REWRITE_RECORDS, crc32 } from '../../ts/consensus/file-storage';
import { RaftNode } from '../../ts/consensus/raft';
import { MemoryRaftStorage, type RaftStorage } from '../../ts/consensus/storage';
import { StorageError, type Entry, type Message } from '../../ts/consensus/types';

async function tmp(t: { teardown(fn: () => Promise<void>): void }): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-raftlog-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}


function dump(s: RaftStorage): unknown {
  const { hardState, snapshotMeta } = s.initialState();
  const first = s.firstIndex();
  const last = s.lastIndex();
  return { hardState, snapshotMeta, first, last, entries: first <= last ? s.entries(first, last + 1) : [], snapshotData: Buffer.from(s.snapshot().data).toString('hex') };
}

const normal = (index: number, term: number, text = `e${index}`): Entry => ({ index, term, type: 'normal', data: new Uint8Array(Buffer.from(text)) });

/** Random valid operations applied to both storages. */
async function randomOps(seed: number, file: FileRaftStorage, mem: MemoryRaftStorage, steps: number): Promise<void> {
  const r = mulberry32(seed);
  let term = 1;
  await file.bootstrap({ voters: ['a', 'b'], learners: [] }, new Uint8Array([1, 2]));
  const boot = MemoryRaftStorage.bootstrap({ voters: ['a', 'b'], learners: [] }, new Uint8Array([1, 2]));
  Object.assign(mem, boot);
  for (let i = 0; i < steps; i++) {
    const x = r();
    const { hardState } = mem.initialState();
    if (x < 0.5) {
      // Append, sometimes replacing an uncommitted suffix.
      const last = mem.lastIndex();
      const from = Math.max(hardState.commit + 1, last + 1 - (r() < 0.3 ? Math.floor(r() * 3) : 0), mem.snapshot().meta.index + 1);
      if (r() < 0.2) term++;
      const ents: Entry[] = [];
      for (let k = 0; k < 1 + Math.floor(r() * 4); k++) {
        const idx = from + k;
        ents.push(r() < 0.1 ? { index: idx, term, type: 'noop' } : r() < 0.1 ? { index: idx, term, type: 'confChange', change: { type: 'addLearner', peer: `p${idx}`, context: 'http://x:1' } } : normal(idx, term, `v${i}`));
      }
      const hs = r() < 0.7 ? { term, vote: r() < 0.5 ? 'a' : null, commit: Math.min(from + ents.length - 1, hardState.commit + Math.floor(r() * 3)) } : null;
      mem.append(ents);
      if (hs) mem.setHardState(hs);
      await file.persist({ snapshot: null, entries: ents, hardState: hs });
    } else if (x < 0.7) {
      const hs = { term, vote: null, commit: Math.min(mem.lastIndex(), hardState.commit + 1) };
      mem.setHardState(hs);
      await file.persist({ snapshot: null, entries: [], hardState: hs });
    } else if (x < 0.85) {
      const idx = hardState.commit;
      if (idx > mem.snapshot().meta.index) {
        const data = new Uint8Array(Buffer.from(`state@${idx}`));
        mem.createSnapshot(idx, { voters: ['a', 'b'], learners: [] }, data);
        await file.createSnapshot(idx, { voters: ['a', 'b'], learners: [] }, data);
        const to = Math.max(mem.firstIndex() - 1, idx - Math.floor(r() * 3));
        mem.compact(to);
        await file.compact(to);
      }
    } else if (x < 0.9) {
      // A snapshot from the leader, ahead of everything.
      const idx = mem.lastIndex() + 1 + Math.floor(r() * 5);
      term++;
      const snap = { meta: { index: idx, term, conf: { voters: ['a', 'b', 'c'], learners: [] } }, data: new Uint8Array([idx & 255]) };
      const hs = { term, vote: null, commit: idx };
      mem.applySnapshot(snap);
      mem.setHardState(hs);
      await file.persist({ snapshot: snap, entries: [], hardState: hs });
    }
  }
}

test('reopened storage equals an in-memory log fed the same random operations (20 seeds)', async (t) => {
  const dir = await tmp(t);
  for (let seed = 1; seed <= 20; seed++) {
    const d = path.join(dir, String(seed));
    const file = await FileRaftStorage.open(d);
    t.true(file.isEmpty());
    const mem = new MemoryRaftStorage();
    await randomOps(seed, file, mem, 300);
    t.deepEqual(dump(file), dump(mem), `seed ${seed} before reopen`);
    await file.close();
    const again = await FileRaftStorage.open(d);
    t.false(again.isEmpty());
    t.deepEqual(dump(again), dump(mem), `seed ${seed} after reopen`);
    await again.close();
  }
});

test('a torn last record is cut at every byte offset; the state is the one before it', async (t) => {
  const dir = await tmp(t);
  const s = await FileRaftStorage.open(dir);
  await s.bootstrap({ voters: ['a'], learners: [] }, new Uint8Array());
  await s.persist({ snapshot: null, entries: [normal(2, 1), normal(3, 1)], hardState: { term: 1, vote: 'a', commit: 2 } });
  const before = dump(s);
  const sizeBefore = (await fs.stat(s.file)).size;
  await s.persist({ snapshot: null, entries: [normal(4, 1, 'x'.repeat(100))], hardState: null });
  await s.close();
  const full = await fs.readFile(path.join(dir, 'raft.log'));
  for (let cut = sizeBefore; cut < full.length; cut++) {
    const d = path.join(dir, `cut-${cut}`);
    await fs.mkdir(d);
    await fs.writeFile(path.join(d, 'raft.log'), full.subarray(0, cut));
    const r = await FileRaftStorage.open(d);
    t.deepEqual(dump(r), before, `cut at ${cut}`);
    // The tail is gone from the file too: appending after it gives a clean log.
    await r.persist({ snapshot: null, entries: [normal(4, 1, 'y')], hardState: null });
    await r.close();
    const r2 = await FileRaftStorage.open(d);
    t.is(r2.lastIndex(), 4);
    await r2.close();
  }
  // The last record complete but with a flipped bit: also torn (cut), not corruption.
  const flipped = Buffer.from(full);
  flipped[full.length - 3] ^= 1;
  const d = path.join(dir, 'flip-last');
  await fs.mkdir(d);
  await fs.writeFile(path.join(d, 'raft.log'), flipped);
  const r = await FileRaftStorage.open(d);
  t.deepEqual(dump(r), before);
  await r.close();
});

test('a bad record followed by more records is corruption: open fails naming the offset, nothing dropped', async (t) => {
  const dir = await tmp(t);
  const s = await FileRaftStorage.open(dir);
  await s.bootstrap({ voters: ['a'], learners: [] }, new Uint8Array());
  await s.persist({ snapshot: null, entries: [normal(2, 1)], hardState: { term: 1, vote: null, commit: 2 } });
  await s.persist({ snapshot: null, entries: [normal(3, 1)], hardState: { term: 1, vote: null, commit: 3 } });
  await s.close();
  const file = path.join(dir, 'raft.log');
  const buf = await fs.readFile(file);
  const bad = Buffer.from(buf);
  bad[20] ^= 0x40; // inside the first record's payload
  await fs.writeFile(file, bad);
  const err = await t.throwsAsync(FileRaftStorage.open(dir));
  t.regex(err!.message, /raft\.log: record at byte 0 is damaged .* a valid record follows at byte \d+/);
  t.deepEqual(await fs.readFile(file), bad, 'the file is left as it was');
});

test('a bit flipped anywhere in a middle record (header included) makes open fail, never drop data', async (t) => {
  const dir = await tmp(t);
  const s = await FileRaftStorage.open(dir);
  await s.bootstrap({ voters: ['a'], learners: [] }, new Uint8Array());
  const start = (await fs.stat(s.file)).size;
  await s.persist({ snapshot: null, entries: [normal(2, 1), normal(3, 1)], hardState: null });
  const end = (await fs.stat(s.file)).size;
  await s.persist({ snapshot: null, entries: [], hardState: { term: 1, vote: 'a', commit: 3 } });
  await s.close();
  const full = await fs.readFile(path.join(dir, 'raft.log'));
  for (let i = start; i < end; i++) {
    for (const bit of [i % 8, 7 - (i % 8)]) {
      const bad = Buffer.from(full);
      bad[i] ^= 1 << bit;
      const d = path.join(dir, `flip-${i}-${bit}`);
      await fs.mkdir(d);
      await fs.writeFile(path.join(d, 'raft.log'), bad);
      const err = await t.throwsAsync(FileRaftStorage.open(d), undefined, `byte ${i} bit ${bit}`);
      t.regex(err!.message, new RegExp(`record at byte ${start} `), `byte ${i} bit ${bit}`);
      t.deepEqual(await fs.readFile(path.join(d, 'raft.log')), bad, 'nothing truncated');
    }
  }
});

test('a tail of zeros or of garbage without a valid record (a crash mid-write) is cut', async (t) => {
  const dir = await tmp(t);
  const s = await FileRaftStorage.open(path.join(dir, 'a', 'b')); // nested directories are created
  await s.bootstrap({ voters: ['a'], learners: [] }, new Uint8Array());
  await s.persist({ snapshot: null, entries: [normal(2, 1)], hardState: { term: 1, vote: 'a', commit: 2 } });
  const before = dump(s);
  await s.close();
  const full = await fs.readFile(path.join(dir, 'a', 'b', 'raft.log'));
  const r = mulberry32(7);
  const garbage = Buffer.from(Array.from({ length: 3000 }, () => Math.floor(r() * 256)));
  for (const [name, tail] of [['zeros', Buffer.alloc(4096)], ['garbage', garbage], ['header only', Buffer.from([5, 0, 0, 0, 1, 2, 3, 4])]] as const) {
    const d = path.join(dir, name.replace(' ', '-'));
    await fs.mkdir(d);
    await fs.writeFile(path.join(d, 'raft.log'), Buffer.concat([full, tail]));
    const o = await FileRaftStorage.open(d);
    t.deepEqual(dump(o), before, name);
    await o.close();
    t.is((await fs.stat(path.join(d, 'raft.log'))).size, full.length, `${name}: truncated`);
  }
});

test('a crash between the entries record and the hard state record of one persist is a valid state', async (t) => {
  const dir = await tmp(t);
  const s = await FileRaftStorage.open(dir);
  await s.bootstrap({ voters: ['a'], learners: [] }, new Uint8Array());
  const size0 = (await fs.stat(s.file)).size;
  await s.persist({ snapshot: null, entries: [normal(2, 2), normal(3, 2)], hardState: { term: 2, vote: 'a', commit: 3 } });
  await s.close();
  const full = await fs.readFile(path.join(dir, 'raft.log'));
  const firstLen = full.readUInt32LE(size0);
  await fs.writeFile(path.join(dir, 'raft.log'), full.subarray(0, size0 + 8 + firstLen));
  const r = await FileRaftStorage.open(dir);
  t.is(r.lastIndex(), 3, 'the entries are there');
  t.deepEqual(r.initialState().hardState, { term: 1, vote: null, commit: 1 }, 'the hard state is the earlier one');
  // The core accepts it (its restart rule covers entries of a later term than the hard state).
  const node = new RaftNode({ id: 'a', storage: r, random: mulberry32(1) });
  t.is(node.status().term, 2);
  await r.close();
});

test('the rewrite keeps entries the snapshot covers that compaction kept (for slow followers)', async (t) => {
  const dir = await tmp(t);
  let s = await FileRaftStorage.open(dir);
  const mem = MemoryRaftStorage.bootstrap({ voters: ['a'], learners: [] }, new Uint8Array([9]));
  await s.bootstrap({ voters: ['a'], learners: [] }, new Uint8Array([9]));
  let idx = 2;
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < REWRITE_RECORDS; i++, idx++) {
      const e = [normal(idx, 2 + round)];
      const hs = { term: 2 + round, vote: 'a', commit: idx - 1 };
      mem.append(e);
      mem.setHardState(hs);
      await s.persist({ snapshot: null, entries: e, hardState: hs });
    }
    const at = idx - 10;
    const conf = { voters: ['a'], learners: ['b'] };
    const data = new Uint8Array(Buffer.from(`state@${at}`));
    mem.createSnapshot(at, conf, data);
    await s.createSnapshot(at, conf, data);
    const sizeBefore = (await fs.stat(s.file)).size;
    mem.compact(at - 20);
    await s.compact(at - 20);
    t.true((await fs.stat(s.file)).size < sizeBefore / 5, 'rewritten');
    t.is(s.firstIndex(), at - 19, 'entries behind the snapshot kept');
    t.deepEqual(dump(s), dump(mem));
    await s.close();
    const r = await FileRaftStorage.open(dir);
    t.deepEqual(dump(r), dump(mem), `round ${round} after reopen`);
    s = r; // go on writing to the reopened storage
  }
  await s.close();
});

test('compaction rewrites the file: smaller, same state', async (t) => {
  const dir = await tmp(t);
  const s = await FileRaftStorage.open(dir);
  await s.bootstrap({ voters: ['a'], learners: [] }, new Uint8Array());
  let idx = 2;
  for (let i = 0; i < REWRITE_RECORDS; i++, idx++) {
    await s.persist({ snapshot: null, entries: [normal(idx, 1, 'payload'.repeat(20))], hardState: { term: 1, vote: 'a', commit: idx } });
  }
  const big = (await fs.stat(s.file)).size;
  await s.createSnapshot(idx - 1, { voters: ['a'], learners: [] }, new Uint8Array([7]));
  await s.compact(idx - 5);
  const state = dump(s);
  const small = (await fs.stat(s.file)).size;
  t.true(small < big / 10, `${small} bytes after the rewrite, ${big} before`);
  await s.persist({ snapshot: null, entries: [normal(idx, 1)], hardState: { term: 1, vote: 'a', commit: idx } });
  const after = dump(s);
  await s.close();
  const r = await FileRaftStorage.open(dir);
  t.deepEqual(dump(r), after);
  t.is((state as { snapshotMeta: { index: number } }).snapshotMeta.index, idx - 1);
  await r.close();
});

test('a failed write fails the storage for good: reads throw StorageError failure, writes reject', async (t) => {
  const dir = await tmp(t);
  let failWrites = false;
  const realOpen = fs.open;
  const s = await FileRaftStorage.open(dir, {
    fs: {
      ...fs,
      open: (async (...args: Parameters<typeof fs.open>) => {
        const h = await realOpen(...args);
        const write = h.write.bind(h);
        (h as unknown as { write: unknown }).write = (...a: unknown[]) => (failWrites ? Promise.reject(Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' })) : (write as (...x: unknown[]) => unknown)(...a));
        return h;
      }) as typeof fs.open,
    },
  });
  await s.bootstrap({ voters: ['a'], learners: [] }, new Uint8Array());
  failWrites = true;
  await t.throwsAsync(s.persist({ snapshot: null, entries: [normal(2, 1)], hardState: null }), { message: /ENOSPC/ });
  const e = t.throws(() => s.lastIndex());
  t.true(e instanceof StorageError && e.kind === 'failure');
  failWrites = false;
  await t.throwsAsync(s.persist({ snapshot: null, entries: [], hardState: { term: 1, vote: null, commit: 1 } }));
  // No Raft node can be built on it (it never guesses a term it cannot read): the peer stays down.
  const built = t.throws(() => new RaftNode({ id: 'a', storage: s, random: mulberry32(2) }));
  t.true(built instanceof StorageError && built.kind === 'failure');
  await s.close();
});

test('crc32 matches the standard check value', (t) => {
  t.is(crc32(Buffer.from('123456789')), 0xcbf43926);
});

test('codec: every message kind round-trips; malformed input is a CodecError', (t) => {
  const snap = { meta: { index: 9, term: 3, conf: { voters: ['a', 'b'], learners: ['c'] } }, data: new Uint8Array([0, 255, 7]) };
  const msgs: Message[] = [
    { type: 'preVote', from: 'a', to: 'b', term: 4, lastLogIndex: 9, lastLogTerm: 3 },
    { type: 'preVoteResponse', from: 'b', to: 'a', term: 4, granted: true },
    { type: 'vote', from: 'a', to: 'b', term: 4, lastLogIndex: 9, lastLogTerm: 3 },
    { type: 'voteResponse', from: 'b', to: 'a', term: 4, granted: false },
    {
      type: 'append', from: 'a', to: 'b', term: 4, prevLogIndex: 9, prevLogTerm: 3, commit: 9,
      entries: [normal(10, 4), { index: 11, term: 4, type: 'noop' }, { index: 12, term: 4, type: 'confChange', change: { type: 'addLearner', peer: 'd', context: 'http://d:6335' } }, { index: 13, term: 4, type: 'confChange', change: { type: 'removePeer', peer: 'c' } }, { index: 14, term: 4, type: 'confChange', change: { type: 'removePeer', peer: 'b', conditional: true } }],
    },
    { type: 'appendResponse', from: 'b', to: 'a', term: 4, success: true, matchIndex: 13 },
    { type: 'appendResponse', from: 'b', to: 'a', term: 4, success: false, rejectedIndex: 10, hintIndex: 8, hintTerm: 2 },
    { type: 'heartbeat', from: 'a', to: 'b', term: 4, commit: 9, leaderCommit: 13 },
    { type: 'heartbeatResponse', from: 'b', to: 'a', term: 4 },
    { type: 'installSnapshot', from: 'a', to: 'b', term: 4, snapshot: snap },
  ];
  for (const m of msgs) t.deepEqual(decodeMessage(encodeMessage(m)), m, m.type);
  t.deepEqual(decodeSnapshot(encodeSnapshot(snap)), snap);
  const bad = [
    'not json',
    '[]',
    '{"type":"vote","from":"a","to":"b","term":-1,"lastLogIndex":1,"lastLogTerm":1}',
    '{"type":"vote","from":"a","to":"b","term":1.5,"lastLogIndex":1,"lastLogTerm":1}',
    '{"type":"vote","from":1,"to":"b","term":1,"lastLogIndex":1,"lastLogTerm":1}',
    '{"type":"shout","from":"a","to":"b","term":1}',
    '{"type":"append","from":"a","to":"b","term":1,"prevLogIndex":0,"prevLogTerm":0,"commit":0,"entries":[{"index":1,"term":1,"type":"normal","data":"!!"}]}',
    '{"type":"append","from":"a","to":"b","term":1,"prevLogIndex":0,"prevLogTerm":0,"commit":0,"entries":[{"index":1,"term":1,"type":"confChange","change":{"type":"grow","peer":"x"}}]}',
    '{"type":"voteResponse","from":"a","to":"b","term":1,"granted":"yes"}',
    '{"type":"append","from":"a","to":"b","term":1,"prevLogIndex":0,"prevLogTerm":0,"commit":0,"entries":[{"index":1,"term":1,"type":"confChange","change":{"type":"removePeer","peer":"x","conditional":"yes"}}]}',
    '{"type":"installSnapshot","from":"a","to":"b","term":1,"snapshot":{"meta":{"index":1,"term":1,"conf":{"voters":[],"learners":[]}},"data":"QUJDR"}}', // base64 of a wrong length
    '{"type":"heartbeat","from":"a","to":"b","term":1,"commit":1}',
    '{"type":"appendResponse","from":"a","to":"b","term":1,"success":true}',
    '{"type":"installSnapshot","from":"a","to":"b","term":1,"snapshot":{"meta":{"index":1,"term":1,"conf":{"voters":[1],"learners":[]}},"data":""}}',
  ];
  for (const b of bad) t.throws(() => decodeMessage(Buffer.from(b)), { instanceOf: CodecError }, b);
});

test('three Raft peers on FileRaftStorage: 50 entries commit; a peer reopened from disk after a crash rejoins with its log', async (t) => {
  const dir = await tmp(t);
  const ids = ['a', 'b', 'c'];
  const storages = new Map<string, FileRaftStorage>();
  const nodes = new Map<string, RaftNode>();
  for (const id of ids) {
    const s = await FileRaftStorage.open(path.join(dir, id));
    await s.bootstrap({ voters: ids, learners: [] }, new Uint8Array());
    storages.set(id, s);
    nodes.set(id, new RaftNode({ id, storage: s, random: mulberry32(id.charCodeAt(0)) }));
  }
  const applied = new Map<string, string[]>(ids.map((id) => [id, []]));
  let inflight: Message[] = [];
  const down = new Set<string>();
  async function cycle(): Promise<void> {
    for (const [id, n] of nodes) {
      if (down.has(id)) continue;
      n.tick();
      while (n.hasReady()) {
        const rd = n.ready();
        await storages.get(id)!.persist({ snapshot: rd.snapshot, entries: rd.entries, hardState: rd.hardState });
        inflight.push(...rd.messages);
        for (const e of rd.committedEntries) if (e.type === 'normal') applied.get(id)!.push(Buffer.from(e.data).toString());
        n.advance(rd);
      }
    }
    const now = inflight;
    inflight = [];
    for (const m of now) if (!down.has(m.to)) nodes.get(m.to)!.step(decodeMessage(encodeMessage(m)));
  }
  const leader = async () => {
    for (let i = 0; i < 500; i++) {
      await cycle();
      const l = [...nodes].find(([id, n]) => !down.has(id) && n.status().role === 'leader');
      if (l) return l[0];
    }
    throw new Error('no leader');
  };
  let l = await leader();
  for (let i = 0; i < 25; i++) {
    t.true(nodes.get(l)!.propose(new Uint8Array(Buffer.from(`op${i}`))).ok);
    await cycle();
  }
  // Crash a follower: drop its objects, reopen its storage from disk.
  const victim = ids.find((id) => id !== l)!;
  down.add(victim);
  await storages.get(victim)!.close();
  for (let i = 25; i < 50; i++) {
    l = (await leader());
    t.true(nodes.get(l)!.propose(new Uint8Array(Buffer.from(`op${i}`))).ok);
    await cycle();
  }
  const reopened = await FileRaftStorage.open(path.join(dir, victim));
  t.true(reopened.lastIndex() >= 25, 'the crashed peer kept its log');
  storages.set(victim, reopened);
  nodes.set(victim, new RaftNode({ id: victim, storage: reopened, random: mulberry32(99) }));
  applied.set(victim, []); // its application state restarts from the snapshot: entries are applied again
  down.delete(victim);
  for (let i = 0; i < 200; i++) await cycle();
  const want = Array.from({ length: 50 }, (_, i) => `op${i}`);
  for (const id of ids) t.deepEqual(applied.get(id)!.slice(-50), want, `peer ${id}`);
  for (const s of storages.values()) await s.close();
});
