/**
 * Audit log (ts/auth/audit.ts) with a fake clock: file naming (daily, hourly, UTC),
 * rotation and pruning to max_log_files, appending on reopen, ordering of many events
 * recorded in one tick, the line format, a disabled config writing nothing, and files
 * of other names in the folder left alone.
 */

import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import test from 'ava';

import { AuditEvent, AuditLog, NO_AUDIT, auditFileName } from '../../ts/auth/audit';
import type { AuditConfig } from '../../ts/config/types';
import { scratchDirs } from '../support/scratch';

const scratch = scratchDirs('quiver-audit-');
async function tmpDir(): Promise<string> {
  return scratch();
}

function clock(start: string): { now: () => Date; set: (iso: string) => void; addHours: (h: number) => void } {
  let t = new Date(start).getTime();
  return {
    now: () => new Date(t),
    set: (iso) => {
      t = new Date(iso).getTime();
    },
    addHours: (h) => {
      t += h * 3600_000;
    },
  };
}

function cfg(dir: string, over: Partial<AuditConfig> = {}): AuditConfig {
  return { enabled: true, dir, rotation: 'daily', max_log_files: 7, ...over };
}

function ev(i: number, over: Partial<AuditEvent> = {}): AuditEvent {
  return {
    subject: 'api_key',
    address: '127.0.0.1',
    method: 'GET',
    path: `/collections/c${i}`,
    collection: `c${i}`,
    allowed: true,
    reason: null,
    ...over,
  };
}

async function lines(file: string): Promise<Record<string, unknown>[]> {
  const text = await fs.readFile(file, 'utf8');
  assertEndsWithNewline(text);
  return text
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

function assertEndsWithNewline(text: string): void {
  if (text.length > 0 && !text.endsWith('\n')) throw new Error('audit file does not end with a newline');
}

async function ls(dir: string): Promise<string[]> {
  return (await fs.readdir(dir)).sort();
}

test('auditFileName: daily and hourly, UTC', (t) => {
  const d = new Date('2026-03-04T23:59:59.999Z');
  t.is(auditFileName(d, 'daily'), 'audit-2026-03-04.log');
  t.is(auditFileName(d, 'hourly'), 'audit-2026-03-04-23.log');
  t.is(auditFileName(new Date('2026-12-31T00:00:00Z'), 'hourly'), 'audit-2026-12-31-00.log');
});

test('lines are JSON with time first and every field', async (t) => {
  const dir = await tmpDir();
  const c = clock('2026-05-06T07:08:09.010Z');
  const log = await AuditLog.open(cfg(dir), { now: c.now });
  t.true(log.enabled);
  log.record(ev(1));
  log.record({
    subject: null,
    address: null,
    method: 'PUT',
    path: '/collections/x',
    collection: 'x',
    allowed: false,
    reason: 'Must provide an API key or an Authorization bearer token',
    status: 401,
  });
  log.record(ev(3, { subject: 'jwt:alice', status: 200 }));
  await log.flush();
  const file = path.join(dir, 'audit-2026-05-06.log');
  const text = await fs.readFile(file, 'utf8');
  t.is(Object.keys(JSON.parse(text.split('\n')[0]))[0], 'time');
  const got = await lines(file);
  t.deepEqual(got, [
    { time: '2026-05-06T07:08:09.010Z', ...ev(1) },
    {
      time: '2026-05-06T07:08:09.010Z',
      subject: null,
      address: null,
      method: 'PUT',
      path: '/collections/x',
      collection: 'x',
      allowed: false,
      reason: 'Must provide an API key or an Authorization bearer token',
      status: 401,
    },
    { time: '2026-05-06T07:08:09.010Z', ...ev(3, { subject: 'jwt:alice', status: 200 }) },
  ]);
  for (const l of got) {
    for (const k of ['time', 'subject', 'address', 'method', 'path', 'collection', 'allowed', 'reason']) {
      t.true(k in l, k);
    }
  }
  await log.close();
});

test('daily rotation: one file per UTC day', async (t) => {
  const dir = await tmpDir();
  const c = clock('2026-01-30T22:00:00Z');
  const log = await AuditLog.open(cfg(dir), { now: c.now });
  log.record(ev(1));
  c.addHours(1); // 23:00, same day
  log.record(ev(2));
  c.addHours(1); // next day 00:00
  log.record(ev(3));
  c.addHours(49); // 2026-02-02T01:00
  log.record(ev(4));
  await log.close();
  t.deepEqual(await ls(dir), ['audit-2026-01-30.log', 'audit-2026-01-31.log', 'audit-2026-02-02.log']);
  t.deepEqual(
    (await lines(path.join(dir, 'audit-2026-01-30.log'))).map((l) => l.path),
    ['/collections/c1', '/collections/c2'],
  );
  t.deepEqual((await lines(path.join(dir, 'audit-2026-01-31.log'))).map((l) => l.path), ['/collections/c3']);
  t.deepEqual((await lines(path.join(dir, 'audit-2026-02-02.log'))).map((l) => l.path), ['/collections/c4']);
});

test('hourly rotation keeps exactly the newest max_log_files files, each with its lines in order', async (t) => {
  const dir = await tmpDir();
  const c = clock('2026-07-01T20:15:00Z');
  const log = await AuditLog.open(cfg(dir, { rotation: 'hourly', max_log_files: 3 }), { now: c.now });
  const expected = new Map<string, string[]>();
  let i = 0;
  // 6 hours across midnight, 4 events per hour, some flushed between, some not.
  for (let h = 0; h < 6; h++) {
    const name = auditFileName(c.now(), 'hourly');
    const paths: string[] = [];
    for (let k = 0; k < 4; k++) {
      log.record(ev(i));
      paths.push(`/collections/c${i}`);
      i++;
    }
    expected.set(name, paths);
    if (h % 2 === 0) await log.flush();
    c.addHours(1);
  }
  await log.close();
  const names = [...expected.keys()];
  t.deepEqual(names, [
    'audit-2026-07-01-20.log',
    'audit-2026-07-01-21.log',
    'audit-2026-07-01-22.log',
    'audit-2026-07-01-23.log',
    'audit-2026-07-02-00.log',
    'audit-2026-07-02-01.log',
  ]);
  t.deepEqual(await ls(dir), names.slice(-3));
  for (const name of names.slice(-3)) {
    t.deepEqual(
      (await lines(path.join(dir, name))).map((l) => l.path),
      expected.get(name),
      name,
    );
  }
});

test('rotation without flushing in between (all hours in one tick) still prunes and orders', async (t) => {
  const dir = await tmpDir();
  const c = clock('2026-07-01T10:00:00Z');
  const log = await AuditLog.open(cfg(dir, { rotation: 'hourly', max_log_files: 2 }), { now: c.now });
  for (let h = 0; h < 5; h++) {
    log.record(ev(2 * h));
    log.record(ev(2 * h + 1));
    c.addHours(1);
  }
  await log.flush();
  t.deepEqual(await ls(dir), ['audit-2026-07-01-13.log', 'audit-2026-07-01-14.log']);
  t.deepEqual((await lines(path.join(dir, 'audit-2026-07-01-13.log'))).map((l) => l.path), [
    '/collections/c6',
    '/collections/c7',
  ]);
  t.deepEqual((await lines(path.join(dir, 'audit-2026-07-01-14.log'))).map((l) => l.path), [
    '/collections/c8',
    '/collections/c9',
  ]);
  await log.close();
});

test('reopening in the same period appends; opening prunes files left from before', async (t) => {
  const dir = await tmpDir();
  const c = clock('2026-02-10T12:00:00Z');
  const a = await AuditLog.open(cfg(dir), { now: c.now });
  a.record(ev(1));
  a.record(ev(2));
  await a.close();
  const b = await AuditLog.open(cfg(dir), { now: c.now });
  b.record(ev(3));
  await b.close();
  t.deepEqual((await lines(path.join(dir, 'audit-2026-02-10.log'))).map((l) => l.path), [
    '/collections/c1',
    '/collections/c2',
    '/collections/c3',
  ]);

  // Old files beyond the limit (including the current period) are removed at open.
  for (const d of ['2026-02-05', '2026-02-06', '2026-02-07', '2026-02-08']) {
    await fs.writeFile(path.join(dir, `audit-${d}.log`), '{}\n');
  }
  const x = await AuditLog.open(cfg(dir, { max_log_files: 3 }), { now: c.now });
  t.deepEqual(await ls(dir), ['audit-2026-02-07.log', 'audit-2026-02-08.log', 'audit-2026-02-10.log']);
  x.record(ev(4));
  await x.close();
  t.is((await lines(path.join(dir, 'audit-2026-02-10.log'))).length, 4);
});

test('a disabled config writes nothing and creates no folder', async (t) => {
  const base = await tmpDir();
  const dir = path.join(base, 'audit');
  const log = await AuditLog.open({ enabled: false, dir, rotation: 'hourly', max_log_files: 1 });
  t.is(log, NO_AUDIT);
  t.false(log.enabled);
  for (let i = 0; i < 100; i++) log.record(ev(i));
  await log.flush();
  await log.close();
  await t.throwsAsync(fs.stat(dir), { code: 'ENOENT' });
  t.deepEqual(await ls(base), []);
});

test('many records in one tick keep their order', async (t) => {
  const dir = await tmpDir();
  const c = clock('2026-09-09T09:09:09Z');
  const log = await AuditLog.open(cfg(dir, { dir: path.join(dir, 'nested', 'audit') }), { now: c.now });
  const n = 20_000;
  for (let i = 0; i < n; i++) log.record(ev(i, { allowed: i % 3 !== 0 }));
  // A flush that starts while the first batch is being written covers everything before it.
  const f1 = log.flush();
  for (let i = n; i < n + 10; i++) log.record(ev(i));
  await f1;
  await log.flush();
  const got = await lines(path.join(dir, 'nested', 'audit', 'audit-2026-09-09.log'));
  t.is(got.length, n + 10);
  t.true(got.every((l, i) => l.path === `/collections/c${i}` && l.allowed === (i >= n || i % 3 !== 0)));
  await log.close();
});

test('flush resolves only once earlier records are on disk', async (t) => {
  const dir = await tmpDir();
  const c = clock('2026-09-09T09:09:09Z');
  const log = await AuditLog.open(cfg(dir), { now: c.now });
  const file = path.join(dir, 'audit-2026-09-09.log');
  for (let round = 0; round < 20; round++) {
    log.record(ev(round));
    await log.flush();
    t.is((await lines(file)).length, round + 1);
  }
  await log.close();
  // After close, record is ignored.
  log.record(ev(99));
  await log.flush();
  t.is((await lines(file)).length, 20);
});

test('files of other names in the folder are never touched', async (t) => {
  const dir = await tmpDir();
  const others: Record<string, string> = {
    'notes.txt': 'keep me',
    'audit-2020-01-01.log.bak': 'backup',
    'audit-old.log': 'x',
    'audit-2020-01-01-1.log': 'bad hour',
    'xaudit-2020-01-01.log': 'prefix',
    'audit-2020-01-01.json': 'other ext',
  };
  for (const [n, body] of Object.entries(others)) await fs.writeFile(path.join(dir, n), body);
  const c = clock('2026-04-01T00:30:00Z');
  const log = await AuditLog.open(cfg(dir, { rotation: 'hourly', max_log_files: 1 }), { now: c.now });
  for (let h = 0; h < 4; h++) {
    log.record(ev(h));
    c.addHours(1);
    await log.flush();
  }
  await log.close();
  t.deepEqual(await ls(dir), [...Object.keys(others), 'audit-2026-04-01-03.log'].sort());
  for (const [n, body] of Object.entries(others)) t.is(await fs.readFile(path.join(dir, n), 'utf8'), body);
});

test('a write error is logged, does not throw, and later records still get written', async (t) => {
  const dir = await tmpDir();
  const c = clock('2026-04-01T00:30:00Z');
  const errors: unknown[] = [];
  const logger = {
    error: (o: unknown) => errors.push(o),
    warn: (o: unknown) => errors.push(o),
  } as unknown as import('pino').Logger;
  const log = await AuditLog.open(cfg(dir, { rotation: 'hourly' }), { now: c.now, logger });
  // Make the next period's file impossible to open: a directory with its name.
  c.addHours(1);
  await fs.mkdir(path.join(dir, auditFileName(c.now(), 'hourly')));
  t.notThrows(() => log.record(ev(1)));
  await log.flush();
  t.true(errors.length > 0);
  c.addHours(1);
  log.record(ev(2));
  await log.close();
  t.deepEqual((await lines(path.join(dir, 'audit-2026-04-01-02.log'))).map((l) => l.path), ['/collections/c2']);
});
