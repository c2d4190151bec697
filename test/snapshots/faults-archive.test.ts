/**
 * Snapshot recovery against hostile and broken input, on the real server process:
 *
 *  1. malicious archives uploaded with priority=snapshot (absolute names, `..`,
 *     symlinks, hard links, devices, absurd declared sizes, many junk entries);
 *  2. recover/download/delete requests naming files they must not reach
 *     (file:// outside the snapshots folder, relative file URIs, missing files,
 *     checksum mismatches, names with path separators);
 *  3. recoveries that fail late (truncated archive, incompatible vectors, a newer
 *     format, a corrupt shard state file that only fails when the shard opens).
 *
 * One server and one collection (`target`: two named vectors, two shards, a payload
 * index) serve every case, one case at a time. After each request the test checks
 * the reference's error envelope and that nothing changed: the same config, count,
 * points with vectors and payloads, no snapshot listed, no hidden staging/swap
 * folders in storage/collections, an empty temp folder, nothing written outside.
 * The last case restarts the server and compares again.
 */

import test from 'ava';
import type { ExecutionContext } from 'ava';
import * as fs from 'node:fs/promises';
import * as http from 'node:http';
import * as path from 'node:path';

import {
  api,
  collectionsDirEntries,
  createCollection,
  errorOf,
  exists,
  filesBelow,
  fingerprint,
  fullSnapshotNames,
  header,
  paxData,
  rawTar,
  restartNode,
  run,
  snapshotNames,
  startNode,
  tempDir,
  upload,
  upsert,
  type Fingerprint,
  type Node,
  type RawEntry,
  type Reply,
} from './faults-support';
import { mulberry32 } from '../support/rng';

const C = 'target';

let node: Node;
let dir: string;
/** A folder outside every folder the service uses: escaping entries aim here. */
let outside: string;
/** A real snapshot of `target`, and one of a collection with other vector sizes. */
let goodSnapshot: Buffer;
let otherSnapshot: Buffer;
let baseline: Fingerprint;
let configFileBefore: string;
let storageFilesBefore: string[];

function targetPoints(from: number, count: number): Array<Record<string, unknown>> {
  const rnd = mulberry32(from + 17);
  const v = (n: number) => Array.from({ length: n }, () => Math.round((rnd() * 2 - 1) * 1000) / 1000);
  return Array.from({ length: count }, (_, i) => ({
    id: from + i,
    vector: { a: v(8), b: v(4) },
    payload: { tag: `t${(from + i) % 5}`, n: from + i, list: [i, `s${i}`], obj: { x: i / 2 } },
  }));
}

async function download(url: string, collection: string, name: string): Promise<Buffer> {
  const res = await fetch(`${url}/collections/${collection}/snapshots/${encodeURIComponent(name)}`);
  if (res.status !== 200) throw new Error(`download ${name}: ${res.status}`);
  return Buffer.from(await res.arrayBuffer());
}

/** Creates a snapshot of `collection`, downloads it, deletes it from the server. */
async function takeSnapshot(collection: string): Promise<Buffer> {
  const r = await api(node.url, 'POST', `/collections/${collection}/snapshots`);
  if (r.status !== 200) throw new Error(`snapshot ${collection}: ${r.status} ${r.text}`);
  const name = r.json.result.name as string;
  const data = await download(node.url, collection, name);
  const d = await api(node.url, 'DELETE', `/collections/${collection}/snapshots/${encodeURIComponent(name)}`);
  if (d.status !== 200) throw new Error(`delete snapshot ${name}: ${d.status} ${d.text}`);
  return data;
}

/** Storage files outside the collection folders (peer_id, aliases.json, ...). */
async function storageFiles(): Promise<string[]> {
  return (await filesBelow(node.storage)).filter((f) => !f.startsWith(`collections/${C}/`));
}

/** Everything the failed request must have left as it was. */
async function assertUnchanged(t: ExecutionContext, what: string): Promise<void> {
  const now = await fingerprint(node.url, C);
  t.deepEqual(now.config, baseline.config, `${what}: collection config changed`);
  t.deepEqual(now.payloadSchema, baseline.payloadSchema, `${what}: payload schema changed`);
  t.is(now.count, baseline.count, `${what}: point count changed`);
  t.deepEqual(now.points, baseline.points, `${what}: points (vectors/payloads) changed`);
  t.deepEqual(await snapshotNames(node.url, C), [], `${what}: a snapshot is listed`);
  t.deepEqual(await fullSnapshotNames(node.url), [], `${what}: a full snapshot is listed`);
  t.deepEqual(await collectionsDirEntries(node.storage), [C], `${what}: stray entries in storage/collections`);
  t.deepEqual(await filesBelow(node.temp), [], `${what}: files left in the temp folder`);
  t.deepEqual(await filesBelow(node.snapshots), [], `${what}: files appeared in the snapshots folder`);
  t.deepEqual(await filesBelow(outside), [], `${what}: something was written outside`);
  t.deepEqual(await storageFiles(), storageFilesBefore, `${what}: files appeared in storage`);
  t.is(await fs.readFile(path.join(node.storage, 'collections', C, 'config.json'), 'utf8'), configFileBefore, `${what}: config.json on disk changed`);
  const cols = await api(node.url, 'GET', '/collections');
  t.deepEqual(
    (cols.json.result.collections as Array<{ name: string }>).map((c) => c.name),
    [C],
    `${what}: the collection list changed`,
  );
}

function expectError(t: ExecutionContext, r: Reply, status: number, includes: string | RegExp, what: string): string {
  t.is(r.status, status, `${what}: HTTP ${r.status} ${r.text.slice(0, 300)}`);
  let msg = '';
  try {
    msg = errorOf(r);
  } catch (err) {
    t.fail(`${what}: ${(err as Error).message}`);
    return '';
  }
  if (typeof includes === 'string') t.true(msg.includes(includes), `${what}: message ${JSON.stringify(msg)} lacks ${JSON.stringify(includes)}`);
  else t.regex(msg, includes, what);
  return msg;
}

/** A request with a path sent byte for byte (fetch would normalise `%2E%2E` and `..`). */
function rawRequest(method: string, rawPath: string): Promise<Reply> {
  const u = new URL(node.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method, path: rawPath }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json: unknown = null;
        try {
          json = JSON.parse(text);
        } catch {
          // a file's bytes
        }
        resolve({ status: res.statusCode ?? 0, json, text });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/** The entries of a tar archive: name, header offset, data offset, size. */
function tarIndex(buf: Buffer): Array<{ name: string; headerAt: number; dataAt: number; size: number }> {
  const out = [];
  for (let pos = 0; pos + 512 <= buf.length; ) {
    const h = buf.subarray(pos, pos + 512);
    if (h.every((b) => b === 0)) break;
    const name = h.toString('utf8', 0, 100).replace(/\0.*$/s, '');
    const prefix = h.toString('utf8', 345, 500).replace(/\0.*$/s, '');
    const size = parseInt(h.toString('latin1', 124, 136).replace(/[\0 ]+$/, '') || '0', 8);
    out.push({ name: prefix ? `${prefix}/${name}` : name, headerAt: pos, dataAt: pos + 512, size });
    pos += 512 + Math.ceil(size / 512) * 512;
  }
  return out;
}

/** The entries of the real snapshot (files and directories) as raw entries, to mix hostile ones into. */
function goodEntries(): RawEntry[] {
  return tarIndex(goodSnapshot).map((e) => {
    const type = String.fromCharCode(goodSnapshot[e.headerAt + 156]);
    return type === '5' ? { name: e.name, type: '5' } : { name: e.name, type: '0', data: goodSnapshot.subarray(e.dataAt, e.dataAt + e.size) };
  });
}

test.before(async () => {
  dir = await tempDir('archive');
  outside = path.join(dir, 'outside');
  await fs.mkdir(outside);
  node = await startNode(dir, { tempPath: path.join(dir, 'tmp') });

  await createCollection(node.url, C, {
    vectors: { a: { size: 8, distance: 'Cosine' }, b: { size: 4, distance: 'Dot' } },
    shard_number: 2,
  });
  const idx = await api(node.url, 'PUT', `/collections/${C}/index?wait=true`, { field_name: 'tag', field_schema: 'keyword' });
  if (idx.status !== 200) throw new Error(`index: ${idx.status} ${idx.text}`);
  await upsert(node.url, C, targetPoints(1, 300), 100);
  goodSnapshot = await takeSnapshot(C);

  await createCollection(node.url, 'other', {
    vectors: { a: { size: 16, distance: 'Cosine' }, b: { size: 4, distance: 'Dot' } },
    shard_number: 2,
  });
  const rnd = mulberry32(5);
  await upsert(node.url, 'other', [
    { id: 1, vector: { a: Array.from({ length: 16 }, () => rnd()), b: [1, 2, 3, 4] }, payload: { other: true } },
  ]);
  otherSnapshot = await takeSnapshot('other');
  const del = await api(node.url, 'DELETE', '/collections/other');
  if (del.status !== 200) throw new Error(`delete other: ${del.status}`);
  // The snapshot folders of the two collections (now empty) are not of interest.
  await fs.rm(node.snapshots, { recursive: true, force: true });
  await fs.mkdir(node.snapshots);

  baseline = await fingerprint(node.url, C);
  if (baseline.count !== 300 || baseline.points.length !== 300) throw new Error(`setup: ${baseline.count} points`);
  configFileBefore = await fs.readFile(path.join(node.storage, 'collections', C, 'config.json'), 'utf8');
  storageFilesBefore = await storageFiles();
});

test.after.always(async () => {
  if (node) await node.server.stop('SIGKILL');
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

// -- 1. malicious archives -------------------------------------------------------------------

/** Uploads each archive over `target` with priority=snapshot; each must be a 400 leaving everything as it was. */
async function rejectAll(t: ExecutionContext, cases: Array<[string, Buffer]>, includes: string | RegExp = 'Invalid snapshot'): Promise<void> {
  for (const [what, archive] of cases) {
    const r = await upload(node.url, C, archive);
    t.log(`${what}: ${r.status} ${r.text.slice(0, 200)}`);
    expectError(t, r, 400, includes, what);
    await assertUnchanged(t, what);
  }
}

test.serial('1a. upload: entries with absolute paths are refused, nothing is written there', async (t) => {
  const target = path.join(outside, 'abs-pwned');
  const gnuTar = path.join(dir, 'gnu-abs.tar');
  // GNU tar itself, keeping the leading slash.
  const src = path.join(dir, 'abs-src');
  await fs.mkdir(src);
  await fs.writeFile(path.join(src, 'abs-gnu'), 'pwned by GNU tar');
  await run('tar', ['--absolute-names', '-cf', gnuTar, path.join(src, 'abs-gnu')]);
  const gnu = await fs.readFile(gnuTar);
  await fs.rm(src, { recursive: true });
  await fs.rm(gnuTar);
  await rejectAll(t, [
    ['absolute file name', rawTar([...goodEntries(), { name: target, type: '0', data: Buffer.from('pwned') }])],
    ['absolute name first', rawTar([{ name: target, type: '0', data: Buffer.from('pwned') }, ...goodEntries()])],
    ['absolute directory name', rawTar([{ name: `${outside}/absdir/`, type: '5' }, ...goodEntries()])],
    ['absolute name via PAX path', rawTar([{ name: 'PaxHeader/x', type: 'x', data: paxData({ path: target }) }, { name: 'innocent', type: '0', data: Buffer.from('pwned') }])],
    ['absolute name via GNU long name', rawTar([{ name: '././@LongLink', type: 'L', data: Buffer.from(`${target}\0`), magic: 'gnu' }, { name: 'innocent', type: '0', data: Buffer.from('pwned'), magic: 'gnu' }])],
    ['GNU tar --absolute-names', gnu],
  ]);
  t.false(await exists(target));
  t.false(await exists(path.join(outside, 'absdir')));
  t.false(await exists(path.join(dir, 'abs-src')));
});

test.serial('1b. upload: entries with `..` are refused, nothing is written outside the staging folder', async (t) => {
  const up = '../'.repeat(24); // enough to reach / from any staging folder
  const escape = `${up}${outside.replace(/^\//, '')}/dotdot-pwned`;
  await rejectAll(t, [
    ['../ to an outside file', rawTar([...goodEntries(), { name: escape, type: '0', data: Buffer.from('pwned') }])],
    ['../ into the live collection', rawTar([{ name: `../${C}/0/evil.bin`, type: '0', data: Buffer.from('pwned') }, ...goodEntries()])],
    ['../ over the live config.json', rawTar([{ name: `0/../../${C}/config.json`, type: '0', data: Buffer.from('{}') }, ...goodEntries()])],
    ['.. as a whole name', rawTar([{ name: '..', type: '5' }, ...goodEntries()])],
    ['../ via PAX path', rawTar([{ name: 'PaxHeader/x', type: 'x', data: paxData({ path: escape }) }, { name: 'innocent', type: '0', data: Buffer.from('pwned') }])],
    ['../ via GNU long name', rawTar([{ name: '././@LongLink', type: 'L', data: Buffer.from(`${escape}\0`), magic: 'gnu' }, { name: 'innocent', type: '0', data: Buffer.from('pwned'), magic: 'gnu' }])],
    ['../ in the ustar prefix', (() => {
      const h = header({ name: 'dotdot-prefix', type: '0', data: Buffer.from('pwned') });
      // prefix field at 345: "../../.."; recompute the checksum.
      h.write('../../../../../../../../../../..', 345, 'utf8');
      h.fill(0x20, 148, 156);
      let sum = 0;
      for (const x of h) sum += x;
      h.write(sum.toString(8).padStart(6, '0'), 148, 'ascii');
      h[154] = 0;
      h[155] = 0x20;
      return Buffer.concat([h, Buffer.from('pwned'), Buffer.alloc(512 - 5), Buffer.alloc(1024)]);
    })()],
  ]);
  t.false(await exists(path.join(outside, 'dotdot-pwned')));
  t.false(await exists(path.join(node.storage, 'collections', C, '0', 'evil.bin')));
  t.false(await exists(path.join(node.storage, 'dotdot-prefix')));
  t.false(await exists('/dotdot-prefix'));
});

test.serial('1c. upload: symlink entries are refused, nothing is written through them', async (t) => {
  await rejectAll(t, [
    ['symlink to a folder outside, then a file through it', rawTar([{ name: 'esc', type: '2', linkname: outside }, { name: 'esc/link-pwned', type: '0', data: Buffer.from('pwned') }])],
    ['symlink among real entries', rawTar([...goodEntries(), { name: '0/link', type: '2', linkname: '/etc' }])],
    ['snapshot.json as a symlink to /etc/passwd', rawTar([{ name: 'snapshot.json', type: '2', linkname: '/etc/passwd' }, ...goodEntries().filter((e) => e.name !== 'snapshot.json')])],
    ['symlink to the live collection', rawTar([{ name: '0', type: '2', linkname: `../${C}/0` }, ...goodEntries().filter((e) => !e.name.startsWith('0'))])],
  ]);
  // GNU tar's own symlink entry.
  const src = path.join(dir, 'sym-src');
  await fs.mkdir(src);
  await fs.symlink(outside, path.join(src, 'esc'));
  await run('tar', ['-cf', path.join(dir, 'sym.tar'), '-C', src, 'esc']);
  const gnu = await fs.readFile(path.join(dir, 'sym.tar'));
  await fs.rm(src, { recursive: true });
  await fs.rm(path.join(dir, 'sym.tar'));
  await rejectAll(t, [['GNU tar symlink', gnu]]);
  t.false(await exists(path.join(outside, 'link-pwned')));
});

test.serial('1d. upload: hard link entries are refused, no file is linked or overwritten', async (t) => {
  const liveConfig = path.join(node.storage, 'collections', C, 'config.json');
  await rejectAll(t, [
    ['hard link to /etc/passwd', rawTar([...goodEntries(), { name: '0/passwd', type: '1', linkname: '/etc/passwd' }])],
    ['hard link to the live config.json, then data written to it', rawTar([{ name: 'cfg', type: '1', linkname: liveConfig }, { name: 'cfg', type: '0', data: Buffer.from('{"pwned":true}') }])],
    ['hard link with ../ to the live collection', rawTar([{ name: 'cfg', type: '1', linkname: `../${C}/config.json` }, ...goodEntries()])],
  ]);
  t.is((await fs.stat(liveConfig)).nlink, 1, 'the live config.json got another link');
});

test.serial('1e. upload: character/block device and FIFO entries are refused, no node is created', async (t) => {
  // GNU tar's own device entry (we run as root, so mknod works; if it does not, the hand-made ones still run).
  const cases: Array<[string, Buffer]> = [
    ['character device /dev/null', rawTar([...goodEntries(), { name: '0/null', type: '3', devmajor: 1, devminor: 3 }])],
    ['character device /dev/mem first', rawTar([{ name: 'mem', type: '3', devmajor: 1, devminor: 1 }, ...goodEntries()])],
    ['block device', rawTar([{ name: 'sda', type: '4', devmajor: 8, devminor: 0 }, ...goodEntries()])],
    ['FIFO', rawTar([{ name: 'fifo', type: '6' }, ...goodEntries()])],
  ];
  const src = path.join(dir, 'dev-src');
  await fs.mkdir(src);
  try {
    await run('mknod', [path.join(src, 'null'), 'c', '1', '3']);
    await run('tar', ['-cf', path.join(dir, 'dev.tar'), '-C', src, 'null']);
    cases.push(['GNU tar character device', await fs.readFile(path.join(dir, 'dev.tar'))]);
  } catch (err) {
    t.log(`mknod/tar unavailable, hand-made device headers only: ${(err as Error).message}`);
  } finally {
    await fs.rm(src, { recursive: true, force: true });
    await fs.rm(path.join(dir, 'dev.tar'), { force: true });
  }
  await rejectAll(t, cases);
});

// How long the refusals take is logged, not asserted: speed belongs to the benchmarks
// (bench/), and a time bound fails on a loaded machine, not on a slow server.
test.serial('1f. upload: absurd declared sizes and many junk entries are refused', async (t) => {
  const started = Date.now();
  const paxHuge = rawTar([
    { name: 'PaxHeader/big', type: 'x', data: paxData({ size: '1125899906842624' }) }, // 1 PiB
    { name: 'big.bin', type: '0', data: Buffer.alloc(0) },
  ]);
  await rejectAll(t, [
    // 8 GiB - 1 declared, a few bytes present.
    ['8 GiB declared size', rawTar([{ name: 'big.bin', type: '0', declaredSize: 0o77777777777, data: Buffer.from('tiny') }], false)],
    ['declared size larger than the archive, after real entries', rawTar([...goodEntries(), { name: '0/big.bin', type: '0', declaredSize: 50 * 1024 * 1024 }], false)],
    ['1 PiB via a PAX size record', paxHuge],
  ]);
  // Many tiny entries: extracted into the staging folder, then refused by validation;
  // the staging folder with all of them must be gone.
  const many: RawEntry[] = [...goodEntries(), { name: 'junk', type: '5' }];
  for (let i = 0; i < 3000; i++) many.push({ name: `junk/f${i}`, type: '0', data: Buffer.from([i & 255]) });
  await rejectAll(t, [['3000 junk entries', rawTar(many)]], /unexpected entry/);
  t.log(`refused in ${Date.now() - started} ms`);
});

test.serial('1g. upload: not a tar at all, empty, and a bad header checksum are refused', async (t) => {
  const bad = rawTar(goodEntries());
  bad[148] ^= 0x07; // first header's checksum
  const rnd = mulberry32(99);
  await rejectAll(t, [
    ['random bytes', Buffer.from(Array.from({ length: 4096 }, () => Math.floor(rnd() * 256)))],
    ['empty upload', Buffer.alloc(0)],
    ['bad header checksum', bad],
  ]);
});

// -- 2. requests naming files they must not reach ----------------------------------------------

test.serial('2a. recover: file:// locations outside the snapshots folder are refused', async (t) => {
  const outsideFile = path.join(outside, 'good.snapshot');
  await fs.writeFile(outsideFile, goodSnapshot);
  const link = path.join(node.snapshots, 'link.snapshot');
  await fs.symlink(outsideFile, link);
  try {
    const cases: Array<[string, string, string]> = [
      ['real snapshot outside the folder', `file://${outsideFile}`, 'outside the snapshots directory'],
      ['/etc/passwd', 'file:///etc/passwd', 'outside the snapshots directory'],
      ['the storage peer_id', `file://${node.storage}/peer_id`, 'outside the snapshots directory'],
      ['../ out of the snapshots folder', `file://${node.snapshots}/../outside/good.snapshot`, 'outside the snapshots directory'],
      ['%2E%2E out of the snapshots folder', `file://${node.snapshots}/%2E%2E/outside/good.snapshot`, 'outside the snapshots directory'],
      ['the snapshots folder itself', `file://${node.snapshots}`, 'outside the snapshots directory'],
      ['symlink inside the folder to a file outside', `file://${link}`, 'leads outside the snapshots directory'],
    ];
    for (const [what, location, msg] of cases) {
      for (const priority of ['snapshot', 'no_sync']) {
        const r = await api(node.url, 'PUT', `/collections/${C}/snapshots/recover`, { location, priority });
        expectError(t, r, 400, msg, `${what} (${priority})`);
      }
    }
  } finally {
    await fs.rm(link, { force: true });
    await fs.rm(outsideFile, { force: true });
  }
  await assertUnchanged(t, 'after the refused locations');
});

test.serial('2b. recover: relative, missing, non-file and malformed locations are refused', async (t) => {
  const cases: Array<[string, unknown, number, string]> = [
    ['relative file URI', 'file://rel/x', 400, 'Invalid snapshot URI, file path must be absolute or on localhost'],
    ['relative file URI to a real file', `file://snapshots/x.snapshot`, 400, 'Invalid snapshot URI, file path must be absolute or on localhost'],
    ['missing file inside the folder', `file://${node.snapshots}/${C}/nope.snapshot`, 400, 'does not exist'],
    ['missing file via localhost', `file://localhost${node.snapshots}/nope.snapshot`, 400, 'does not exist'],
    ['a folder inside the snapshots folder', `file://${node.snapshots}/sub`, 400, 'does not exist'],
    ['not a URL', 'not a url', 400, 'Invalid snapshot URI'],
    ['unknown scheme', 'ftp://example.com/x.snapshot', 400, 'Invalid snapshot URI'],
    ['location not a string', 42, 400, 'location'],
  ];
  await fs.mkdir(path.join(node.snapshots, 'sub'));
  try {
    for (const [what, location, status, msg] of cases) {
      const r = await api(node.url, 'PUT', `/collections/${C}/snapshots/recover`, { location, priority: 'snapshot' });
      expectError(t, r, status, msg, what);
    }
  } finally {
    await fs.rm(path.join(node.snapshots, 'sub'), { recursive: true });
  }
  await assertUnchanged(t, 'after the refused locations');
});

test.serial('2c. recover and upload: a checksum mismatch is refused and nothing is applied (what was unpacked on the way is removed)', async (t) => {
  const folder = path.join(node.snapshots, 'manual');
  await fs.mkdir(folder);
  const file = path.join(folder, 'good.snapshot');
  await fs.writeFile(file, goodSnapshot);
  const wrong = 'ab'.repeat(32);
  try {
    for (const priority of ['snapshot', 'replica', 'no_sync']) {
      const r = await api(node.url, 'PUT', `/collections/${C}/snapshots/recover`, { location: `file://${file}`, priority, checksum: wrong });
      const msg = expectError(t, r, 400, 'Checksum mismatch: ', `recover (${priority})`);
      t.true(msg.includes(wrong), msg);
    }
    // A new collection name: the mismatch must not create it either.
    const r = await api(node.url, 'PUT', '/collections/fresh/snapshots/recover', { location: `file://${file}`, checksum: wrong, priority: 'snapshot' });
    expectError(t, r, 400, 'Checksum mismatch: ', 'recover into a new collection');
    t.is((await api(node.url, 'GET', '/collections/fresh')).status, 404);
  } finally {
    await fs.rm(folder, { recursive: true });
  }
  const u = await upload(node.url, C, goodSnapshot, `priority=snapshot&checksum=${wrong}`);
  expectError(t, u, 400, 'Checksum mismatch: ', 'upload');
  const u2 = await upload(node.url, 'fresh', goodSnapshot, `priority=snapshot&checksum=${wrong}`);
  expectError(t, u2, 400, 'Checksum mismatch: ', 'upload into a new collection');
  t.is((await api(node.url, 'GET', '/collections/fresh')).status, 404);
  await assertUnchanged(t, 'after the checksum mismatches');
});

test.serial("2c'. a checksum mismatch is what is reported for an archive that is broken as well (upload and file location)", async (t) => {
  // The checksum is computed while the archive is unpacked: an archive that does not
  // unpack must still be reported as not matching the checksum given with it.
  const wrong = 'cd'.repeat(32);
  const broken: Array<[string, Buffer]> = [
    ['not a tar', Buffer.from('this is not a tar archive at all'.repeat(100))],
    ['cut in half', goodSnapshot.subarray(0, Math.floor(goodSnapshot.length / 2))],
  ];
  const folder = path.join(node.snapshots, 'manual');
  await fs.mkdir(folder);
  try {
    for (const [what, bytes] of broken) {
      const u = await upload(node.url, C, bytes, `priority=snapshot&checksum=${wrong}`);
      expectError(t, u, 400, 'Checksum mismatch: ', `upload, ${what}`);
      await fs.writeFile(path.join(folder, 'broken.snapshot'), bytes);
      const r = await api(node.url, 'PUT', '/collections/fresh/snapshots/recover', { location: `file://${folder}/broken.snapshot`, checksum: wrong, priority: 'snapshot' });
      expectError(t, r, 400, 'Checksum mismatch: ', `recover from a file, ${what}`);
      t.is((await api(node.url, 'GET', '/collections/fresh')).status, 404);
    }
  } finally {
    await fs.rm(folder, { recursive: true });
  }
  await assertUnchanged(t, 'after the broken archives with a wrong checksum');
});

test.serial('2d. download/delete: snapshot names with path separators and missing snapshots are 404', async (t) => {
  // A file the traversal would reach (storage/peer_id), and a snapshot of another collection.
  const peerId = path.join(node.storage, 'peer_id');
  const peerIdBefore = await fs.readFile(peerId, 'utf8');
  const names = [
    '..%2F..%2Fstorage%2Fpeer_id',
    '..%2f..%2fstorage%2fpeer_id',
    '%2E%2E%2F%2E%2E%2Fstorage%2Fpeer_id',
    '..%5C..%5Cstorage%5Cpeer_id',
    '%2E%2E',
    '..',
    '.',
    'nope.snapshot',
    `${C}-1-2020-01-01-00-00-00.snapshot`,
  ];
  for (const name of names) {
    for (const method of ['GET', 'DELETE']) {
      const r = await rawRequest(method, `/collections/${C}/snapshots/${name}`);
      // `..` and `.` as a raw path segment may be resolved by the router before routing; either way: 404 envelope.
      expectError(t, r, 404, /^Not found: /, `${method} ${name}`);
    }
  }
  for (const method of ['GET', 'DELETE']) {
    expectError(t, await rawRequest(method, `/snapshots/..%2Fstorage%2Fpeer_id`), 404, /^Not found: /, `${method} full ..%2F`);
    expectError(t, await rawRequest(method, `/snapshots/nope.snapshot`), 404, /^Not found: /, `${method} full missing`);
    expectError(t, await rawRequest(method, `/collections/${C}/shards/0/snapshots/..%2F..%2F..%2F..%2Fstorage%2Fpeer_id`), 404, /^Not found: /, `${method} shard ..%2F`);
  }
  t.is(await fs.readFile(peerId, 'utf8'), peerIdBefore);
  await assertUnchanged(t, 'after the traversal attempts');
});

// Regression (found by this test, fixed in ts/api/rest/snapshots.ts and
// LocalSnapshotStore.pathOf): the collection-name part of the snapshot routes was used
// as a folder inside snapshots_path unchecked, so `%2E%2E` or `..%2F...` reached any
// file (download, delete, list). It must answer 404 and touch nothing.
test.serial('2e. download/delete: a collection name with path separators cannot reach files outside its snapshot folder', async (t) => {
  const victim = path.join(dir, 'victim');
  await fs.writeFile(victim, 'must survive');
  const peerId = path.join(node.storage, 'peer_id');
  const peerIdBefore = await fs.readFile(peerId, 'utf8');
  const liveConfig = path.join(node.storage, 'collections', C, 'config.json');
  const liveConfigBefore = await fs.readFile(liveConfig, 'utf8');
  await fs.writeFile(path.join(outside, 'leak.snapshot'), 'not a snapshot of any collection');
  // Every way the request went wrong, reported together.
  const problems: string[] = [];
  const gets: Array<[string, string]> = [
    ['..%2Fstorage as the collection', '/collections/..%2Fstorage/snapshots/peer_id'],
    ['%2E%2E as the collection', '/collections/%2E%2E/snapshots/victim'],
    [`${C}%2F..%2F.. as the collection`, `/collections/${C}%2F..%2F..%2Fstorage%2Fcollections%2F${C}/snapshots/config.json`],
  ];
  try {
    for (const [what, p] of gets) {
      const r = await rawRequest('GET', p);
      if (r.status !== 404) problems.push(`GET ${p} (${what}): HTTP ${r.status}, body ${JSON.stringify(r.text.slice(0, 60))}`);
    }
    // Listing: the `.snapshot` files of any folder.
    for (const p of ['/collections/..%2Foutside/snapshots', '/collections/%2E%2E%2Foutside/snapshots']) {
      const r = await rawRequest('GET', p);
      if (r.status !== 404) problems.push(`GET ${p}: HTTP ${r.status}, body ${JSON.stringify(r.text.slice(0, 120))}`);
    }
    for (const [what, p] of gets) {
      const r = await rawRequest('DELETE', p);
      if (r.status !== 404) problems.push(`DELETE ${p} (${what}): HTTP ${r.status}, body ${JSON.stringify(r.text.slice(0, 60))}`);
    }
  } finally {
    if (!(await exists(victim))) problems.push('DELETE removed <dir>/victim, outside the snapshots folder');
    if (!(await exists(peerId))) problems.push('DELETE removed storage/peer_id');
    if (!(await exists(liveConfig))) problems.push(`DELETE removed the live storage/collections/${C}/config.json`);
    // Put back what the bug removed so that the remaining cases still test what they say.
    if (!(await exists(peerId))) await fs.writeFile(peerId, peerIdBefore);
    if (!(await exists(liveConfig))) await fs.writeFile(liveConfig, liveConfigBefore);
    await fs.rm(victim, { force: true });
    await fs.rm(path.join(outside, 'leak.snapshot'), { force: true });
  }
  t.deepEqual(problems, [], problems.join('\n'));
  await assertUnchanged(t, 'after the collection-name traversal attempts');
});

// -- 3. recoveries failing late keep the collection as it was -------------------------------------

test.serial('3a. a truncated snapshot is refused (upload and file location), the collection stays', async (t) => {
  const half = goodSnapshot.subarray(0, Math.floor(goodSnapshot.length / 2));
  // The end marker is 2 x 512 zero bytes, possibly followed by record padding: strip all trailing zero blocks.
  let end = goodSnapshot.length;
  while (end >= 512 && goodSnapshot.subarray(end - 512, end).every((b) => b === 0)) end -= 512;
  const cut: Array<[string, Buffer]> = [
    ['cut in half', half],
    ['cut after the first entry', goodSnapshot.subarray(0, 1024)],
    ['cut inside a header', goodSnapshot.subarray(0, 1024 + 100)],
    ['end-of-archive marker missing', goodSnapshot.subarray(0, end)],
    ['last header cut short', goodSnapshot.subarray(0, end - 1)],
  ];
  await rejectAll(t, cut, /Invalid snapshot: .*truncated/);
  const folder = path.join(node.snapshots, 'manual');
  await fs.mkdir(folder);
  try {
    await fs.writeFile(path.join(folder, 'half.snapshot'), half);
    const r = await api(node.url, 'PUT', `/collections/${C}/snapshots/recover`, { location: `file://${folder}/half.snapshot`, priority: 'snapshot' });
    expectError(t, r, 400, /Invalid snapshot: .*truncated/, 'recover from a file');
    t.true(await exists(path.join(folder, 'half.snapshot')), 'the source file in the snapshots folder must be kept');
  } finally {
    await fs.rm(folder, { recursive: true });
  }
  await assertUnchanged(t, 'after the truncated archives');
});

test.serial('3b. a snapshot of a collection with other vector sizes is refused, for every priority', async (t) => {
  for (const priority of ['snapshot', 'no_sync', 'replica']) {
    const r = await upload(node.url, C, otherSnapshot, `priority=${priority}`);
    expectError(t, r, 400, 'Snapshot is not compatible with existing collection', `upload (${priority})`);
    await assertUnchanged(t, `upload (${priority})`);
  }
  const folder = path.join(node.snapshots, 'manual');
  await fs.mkdir(folder);
  try {
    await fs.writeFile(path.join(folder, 'other.snapshot'), otherSnapshot);
    const r = await api(node.url, 'PUT', `/collections/${C}/snapshots/recover`, { location: `file://${folder}/other.snapshot`, priority: 'snapshot' });
    expectError(t, r, 400, 'Snapshot is not compatible with existing collection', 'recover from a file');
  } finally {
    await fs.rm(folder, { recursive: true });
  }
  await assertUnchanged(t, 'after the incompatible snapshots');
});

test.serial('3c. a snapshot whose snapshot.json says format 99 is refused', async (t) => {
  const work = path.join(dir, 'fmt');
  await fs.mkdir(work);
  try {
    await fs.writeFile(path.join(dir, 'fmt.tar'), goodSnapshot);
    await run('tar', ['-xf', path.join(dir, 'fmt.tar'), '-C', work]);
    const manifest = JSON.parse(await fs.readFile(path.join(work, 'snapshot.json'), 'utf8'));
    t.is(manifest.format, 1);
    manifest.format = 99;
    await fs.writeFile(path.join(work, 'snapshot.json'), JSON.stringify(manifest));
    const entries = (await fs.readdir(work)).sort();
    await run('tar', ['--format=ustar', '-cf', path.join(dir, 'fmt99.tar'), '-C', work, ...entries]);
    const archive = await fs.readFile(path.join(dir, 'fmt99.tar'));
    const r = await upload(node.url, C, archive);
    expectError(t, r, 400, /Invalid snapshot: format version 99 is newer/, 'format 99');
    manifest.format = 'one';
    await fs.writeFile(path.join(work, 'snapshot.json'), JSON.stringify(manifest));
    await run('tar', ['--format=ustar', '-cf', path.join(dir, 'fmtx.tar'), '-C', work, ...entries]);
    expectError(t, await upload(node.url, C, await fs.readFile(path.join(dir, 'fmtx.tar'))), 400, 'Invalid snapshot', 'format "one"');
    await fs.rm(path.join(work, 'snapshot.json'));
    await run('tar', ['--format=ustar', '-cf', path.join(dir, 'fmty.tar'), '-C', work, ...entries.filter((e) => e !== 'snapshot.json')]);
    expectError(t, await upload(node.url, C, await fs.readFile(path.join(dir, 'fmty.tar'))), 400, 'snapshot.json is missing', 'no snapshot.json');
  } finally {
    await fs.rm(work, { recursive: true, force: true });
    for (const f of ['fmt.tar', 'fmt99.tar', 'fmtx.tar', 'fmty.tar']) await fs.rm(path.join(dir, f), { force: true });
  }
  await assertUnchanged(t, 'after the format checks');
});

test.serial('3d. a corrupt shard state file fails the recovery at open; the old collection is back, serving and writable', async (t) => {
  const corrupt = Buffer.from(goodSnapshot);
  const state = tarIndex(corrupt).find((e) => /^0\/state-\d+\.bin$/.test(e.name));
  if (!state) {
    t.fail(`no 0/state-*.bin in the snapshot: ${tarIndex(corrupt).map((e) => e.name).join(', ')}`);
    return;
  }
  t.true(state.size > 40);
  for (let i = Math.floor(state.size / 2); i < Math.min(state.size, Math.floor(state.size / 2) + 16); i++) corrupt[state.dataAt + i] ^= 0xff;
  const r = await upload(node.url, C, corrupt);
  // The corruption is only found when the shard opens: a 400 naming the file that does not
  // load, and the collection restored.
  const msg = expectError(t, r, 400, 'Invalid snapshot: its data does not load', 'upload with a corrupt state file');
  t.regex(msg, /state-\d+\.bin/);
  await assertUnchanged(t, 'after the corrupt state file');

  // Writable: a new point, then an update and a delete bring it back to the baseline.
  const extra = targetPoints(100_000, 1);
  const w = await api(node.url, 'PUT', `/collections/${C}/points?wait=true`, { points: extra });
  t.is(w.status, 200, w.text);
  const got = await api(node.url, 'POST', `/collections/${C}/points`, { ids: [100_000], with_payload: true, with_vector: true });
  t.is(got.status, 200, got.text);
  t.is(got.json.result.length, 1);
  t.deepEqual(got.json.result[0].payload, extra[0].payload);
  const s = await api(node.url, 'POST', `/collections/${C}/points/search`, { vector: { name: 'b', vector: [1, 0, 0, 0] }, limit: 3 });
  t.is(s.status, 200, s.text);
  t.is(s.json.result.length, 3);
  const d = await api(node.url, 'POST', `/collections/${C}/points/delete?wait=true`, { points: [100_000] });
  t.is(d.status, 200, d.text);
  await assertUnchanged(t, 'after writing to the restored collection');
});

test.serial("3d'. a corrupt shard state file or vector index into a new collection (read while the archive unpacks) fails the recovery: 400, nothing created, still serving", async (t) => {
  // A new collection's shard files are read ahead while the archive unpacks and syncs
  // (ShardPreload); a file that does not load must still fail the whole recovery cleanly.
  const entries = tarIndex(goodSnapshot);
  const damaged = (pattern: RegExp): Buffer => {
    const copy = Buffer.from(goodSnapshot);
    const e = entries.find((x) => pattern.test(x.name));
    if (!e) throw new Error(`no entry ${pattern} in ${entries.map((x) => x.name).join(', ')}`);
    for (let i = Math.floor(e.size / 2); i < Math.min(e.size, Math.floor(e.size / 2) + 16); i++) copy[e.dataAt + i] ^= 0xff;
    return copy;
  };
  const cases: Array<[string, Buffer]> = [
    ['state file of shard 1', damaged(/^1\/state-\d+\.bin$/)],
    ['a vector index of shard 0', damaged(/^0\/vec-.*\.qvi$/)],
  ];
  const folder = path.join(node.snapshots, 'manual');
  await fs.mkdir(folder);
  try {
    for (const [what, bytes] of cases) {
      const u = await upload(node.url, 'fresh', bytes);
      expectError(t, u, 400, 'Invalid snapshot', `upload, ${what}`);
      t.is((await api(node.url, 'GET', '/collections/fresh')).status, 404, `upload, ${what}: the collection must not exist`);
      await fs.writeFile(path.join(folder, 'damaged.snapshot'), bytes);
      const r = await api(node.url, 'PUT', '/collections/fresh/snapshots/recover', { location: `file://${folder}/damaged.snapshot`, priority: 'snapshot' });
      expectError(t, r, 400, 'Invalid snapshot', `recover from a file, ${what}`);
      t.is((await api(node.url, 'GET', '/collections/fresh')).status, 404, `recover from a file, ${what}: the collection must not exist`);
    }
  } finally {
    await fs.rm(folder, { recursive: true });
  }
  await assertUnchanged(t, 'after the damaged archives into a new collection');
  // The same archive undamaged goes in, and out again.
  const ok = await upload(node.url, 'fresh', goodSnapshot);
  t.is(ok.status, 200, ok.text);
  const fresh = await fingerprint(node.url, 'fresh');
  t.is(fresh.count, baseline.count);
  t.deepEqual(fresh.points, baseline.points);
  t.is((await api(node.url, 'DELETE', '/collections/fresh')).status, 200);
  await assertUnchanged(t, 'after the good archive into a new collection, deleted again');
});

test.serial('3d2. a snapshot from a build that accepted settings now refused (vector and graph on_disk, payload_m, enable_hnsw) recovers, as it behaved', async (t) => {
  // Earlier builds accepted these and ignored them; requests are refused now (docs/settings.md),
  // except the graph's on_disk, which is served now (the graph in a mapped file).
  const entries = goodEntries().map((e) => {
    if (e.name !== 'config.json' || e.data === undefined) return e;
    const c = JSON.parse(e.data.toString('utf8'));
    for (const v of Object.values(c.config.params.vectors) as Array<Record<string, unknown>>) {
      v.on_disk = true;
      v.hnsw_config = { on_disk: true, payload_m: 16 };
    }
    c.config.hnsw_config = { ...c.config.hnsw_config, on_disk: true, payload_m: 16 };
    const tag = c.payload_schema?.tag;
    if (tag === undefined) throw new Error(`config.json has no payload index "tag": ${e.data.toString('utf8').slice(0, 400)}`);
    c.payload_schema.tag = { ...tag, params: { ...(typeof tag.params === 'object' && tag.params !== null ? tag.params : { type: 'keyword' }), enable_hnsw: true } };
    return { ...e, data: Buffer.from(JSON.stringify(c)) };
  });
  const r = await upload(node.url, 'retired', rawTar(entries));
  t.is(r.status, 200, r.text);
  const info = await api(node.url, 'GET', '/collections/retired');
  t.is(info.status, 200, info.text);
  const cfg = JSON.parse(info.text).result.config;
  t.not(cfg.params.vectors.a.on_disk, true);
  t.is(cfg.hnsw_config.on_disk, true, 'hnsw_config.on_disk is served now');
  t.is(cfg.params.vectors.a.hnsw_config.on_disk, true);
  t.is(JSON.parse(info.text).result.payload_schema.tag.data_type, 'keyword');
  const restored = await fingerprint(node.url, 'retired');
  t.deepEqual(restored.points, (await fingerprint(node.url, C)).points);
  t.is((await api(node.url, 'DELETE', '/collections/retired')).status, 200);
});

test.serial('3e. after all the refused recoveries, a restart opens the same collection and nothing stray', async (t) => {
  await node.server.stop('SIGTERM');
  node = await restartNode(node);
  await assertUnchanged(t, 'after a restart');
});
