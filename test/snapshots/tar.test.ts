/** The streaming tar writer and the safe tar reader (ts/snapshots/tar.ts). */

import test from 'ava';
import { execFile } from 'child_process';
import { randomBytes } from 'crypto';
import { createWriteStream, promises as fsp } from 'fs';
import * as os from 'os';
import * as path from 'path';
import { PassThrough, Readable, Writable } from 'stream';
import { promisify } from 'util';

import { FileChunks, TarEntry, TarError, encodeHeader, extractTar, packTar, tarStream } from '../../ts/snapshots/tar';

const run = promisify(execFile);

async function tempDir(t: { teardown(fn: () => Promise<void>): void }): Promise<string> {
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'quiver-tar-'));
  t.teardown(() => fsp.rm(dir, { recursive: true, force: true }));
  return dir;
}

async function collect(entries: TarEntry[]): Promise<Buffer> {
  const parts: Buffer[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      parts.push(chunk);
      cb();
    },
  });
  await packTar(entries, sink);
  return Buffer.concat(parts);
}

/** A deterministic PRNG (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

function chunked(buf: Buffer, maxChunk: number, seed: number): Readable {
  const rand = rng(seed);
  const chunks: Buffer[] = [];
  for (let pos = 0; pos < buf.length; ) {
    const n = 1 + Math.floor(rand() * maxChunk);
    chunks.push(buf.subarray(pos, pos + n));
    pos += n;
  }
  return Readable.from(chunks);
}

const LONG_COMPONENT = 'c'.repeat(150); // one name component over 100 bytes: needs PAX
const SPLITTABLE = `${'d'.repeat(60)}/${'e'.repeat(60)}/f.bin`; // 128 bytes: fits ustar prefix+name
const VERY_LONG = `${'g'.repeat(120)}/${'h'.repeat(120)}/${'i'.repeat(200)}.bin`; // 443 bytes

/** Builds a source tree on disk and its entries; returns the expected file contents. */
async function sourceTree(dir: string): Promise<{ entries: TarEntry[]; files: Map<string, Buffer>; dirs: string[] }> {
  const files = new Map<string, Buffer>([
    ['empty', Buffer.alloc(0)],
    ['one', Buffer.from('x')],
    ['a/511', randomBytes(511)],
    ['a/512', randomBytes(512)],
    ['a/513', randomBytes(513)],
    ['a/b/c/big', randomBytes(3 * 1024 * 1024 + 7)],
    [`a/${LONG_COMPONENT}`, randomBytes(1000)],
    [SPLITTABLE, randomBytes(10)],
    [VERY_LONG, randomBytes(700)],
    ['unicodé/ファイル.txt', Buffer.from('utf8 name')],
  ]);
  const dirs = ['a', 'a/b', 'a/b/c', 'a/empty-dir', 'd'.repeat(60), `${'d'.repeat(60)}/${'e'.repeat(60)}`, 'g'.repeat(120), `${'g'.repeat(120)}/${'h'.repeat(120)}`, 'unicodé'];
  const entries: TarEntry[] = [];
  for (const d of dirs) {
    await fsp.mkdir(path.join(dir, d), { recursive: true });
    entries.push({ name: d, type: 'directory' });
  }
  let i = 0;
  for (const [name, data] of files) {
    await fsp.mkdir(path.dirname(path.join(dir, name)), { recursive: true });
    await fsp.writeFile(path.join(dir, name), data);
    // Half the files stream from disk, half come from memory.
    entries.push(i++ % 2 === 0 ? { name, type: 'file', path: path.join(dir, name) } : { name, type: 'file', data, mode: 0o600 });
  }
  return { entries, files, dirs };
}

async function* asAsync<T>(items: T[]): AsyncGenerator<T> {
  for (const item of items) yield item;
}

async function checkTree(t: { deepEqual(a: unknown, b: unknown, m?: string): void; true(a: boolean, m?: string): void }, root: string, files: Map<string, Buffer>, dirs: string[]): Promise<void> {
  for (const [name, data] of files) {
    const got = await fsp.readFile(path.join(root, name));
    t.true(got.equals(data), `contents of ${name}`);
  }
  for (const d of dirs) t.true((await fsp.stat(path.join(root, d))).isDirectory(), `directory ${d}`);
}

test('round trip: nested directories, sizes 0/1/511/512/513/3 MB, long and UTF-8 names', async (t) => {
  const dir = await tempDir(t);
  const { entries, files, dirs } = await sourceTree(path.join(dir, 'src'));
  const archive = path.join(dir, 'out.tar');
  await packTar(asAsync(entries), createWriteStream(archive));
  const size = (await fsp.stat(archive)).size;
  t.is(size % 512, 0);
  const out = path.join(dir, 'out');
  const names = await extractTar((await fsp.open(archive)).createReadStream(), out);
  t.deepEqual(names, [...dirs.map((d) => `${d}/`), ...files.keys()]);
  await checkTree(t, out, files, dirs);
  t.is((await fsp.stat(path.join(out, 'a/512'))).mode & 0o777, 0o600);
});

test('reader: a file read by FileChunks into reused buffers unpacks exactly (released buffers are overwritten only once written)', async (t) => {
  const dir = await tempDir(t);
  const { entries, files, dirs } = await sourceTree(path.join(dir, 'src'));
  // Larger than extractTar's 4 MiB write pieces: buffers are released while the file is still being written.
  const big = randomBytes(9 * 1024 * 1024 + 333);
  files.set('a/b/bigger', big);
  entries.push({ name: 'a/b/bigger', type: 'file', data: big });
  const archive = path.join(dir, 'out.tar');
  await packTar(asAsync(entries), createWriteStream(archive));
  const size = (await fsp.stat(archive)).size;
  for (const chunkSize of [4096, 65_537, 1024 * 1024, 3 * 1024 * 1024 + 1]) {
    const out = path.join(dir, `out-${chunkSize}`);
    const buffers = new Set<ArrayBufferLike>();
    let chunks = 0;
    let bytes = 0;
    const reader = new FileChunks(archive, chunkSize, (c) => {
      buffers.add(c.buffer);
      chunks++;
      bytes += c.length;
    });
    const names = await extractTar(reader.stream, out, { release: reader.release });
    t.deepEqual(names, [...dirs.map((d) => `${d}/`), ...files.keys()], `names, chunks of ${chunkSize}`);
    await checkTree(t, out, files, dirs);
    t.is(bytes, size, `every byte seen once, chunks of ${chunkSize}`);
    // A handful of buffers served every read: the pieces in flight, not one per chunk.
    t.true(chunks > buffers.size, `${chunks} chunks in ${buffers.size} buffers (chunks of ${chunkSize})`);
    t.true(buffers.size * chunkSize <= 16 * 1024 * 1024 + 8 * chunkSize, `${buffers.size} buffers of ${chunkSize} bytes`);
  }
});

test('reader: a bad archive read by FileChunks is refused and its file closed', async (t) => {
  const dir = await tempDir(t);
  const archive = path.join(dir, 'bad.tar');
  const good = await collect([{ name: 'f', type: 'file', data: randomBytes(5000) }]);
  // Cut inside the file's data: truncated.
  await fsp.writeFile(archive, good.subarray(0, 3000));
  const reader = new FileChunks(archive, 1024, () => undefined);
  const err = await t.throwsAsync(extractTar(reader.stream, path.join(dir, 'out'), { release: reader.release }));
  t.true(err instanceof TarError, String(err));
  t.regex(err!.message, /truncated/);
  t.true(reader.stream.destroyed);
});

test('reader: archive fed in random small chunks', async (t) => {
  const dir = await tempDir(t);
  const files = new Map<string, Buffer>([
    ['empty', Buffer.alloc(0)],
    ['x/one', Buffer.from('1')],
    ['x/512', randomBytes(512)],
    ['x/513', randomBytes(513)],
    [`x/${LONG_COMPONENT}`, randomBytes(2000)],
    [VERY_LONG, randomBytes(70_000)],
  ]);
  const entries: TarEntry[] = [...files].map(([name, data]) => ({ name, type: 'file', data }));
  const archive = await collect(entries);
  let run = 0;
  for (const maxChunk of [1, 3, 7, 100, 511, 513, 1500, 70_000]) {
    for (let seed = 1; seed <= 3; seed++) {
      const out = path.join(dir, `out-${run++}`);
      const names = await extractTar(chunked(archive, maxChunk, seed * 7919 + maxChunk), out);
      t.deepEqual(names, [...files.keys()]);
      await checkTree(t, out, files, []);
      if (maxChunk === 1) break; // 1-byte chunks are slow-ish; one pass is enough
    }
  }
});

test('tarStream gives the same bytes as packTar when read by a slow consumer', async (t) => {
  const entries: TarEntry[] = [{ name: 'f', type: 'file', data: randomBytes(200_000), mtime: new Date(0) }];
  const viaPack = await collect(entries);
  const parts: Buffer[] = [];
  const slow = new PassThrough({ highWaterMark: 1024 });
  const stream = tarStream(entries).pipe(slow);
  for await (const c of stream) {
    parts.push(c as Buffer);
    await new Promise((r) => setImmediate(r));
  }
  t.true(Buffer.concat(parts).equals(viaPack));
});

test('interop: GNU tar lists and extracts what packTar wrote', async (t) => {
  const dir = await tempDir(t);
  const { entries, files, dirs } = await sourceTree(path.join(dir, 'src'));
  const archive = path.join(dir, 'out.tar');
  await packTar(entries, createWriteStream(archive));
  const { stdout, stderr } = await run('tar', ['-tf', archive], { maxBuffer: 1 << 24 });
  t.is(stderr, '');
  const listed = stdout.split('\n').filter((l) => l !== '');
  t.deepEqual(listed, [...dirs.map((d) => `${d}/`), ...files.keys()]);
  const out = path.join(dir, 'gnu-out');
  await fsp.mkdir(out);
  t.is((await run('tar', ['-xf', archive, '-C', out])).stderr, '');
  await checkTree(t, out, files, dirs);
});

for (const format of ['gnu', 'pax', 'ustar']) {
  test(`interop: extractTar reads what GNU tar -cf --format=${format} wrote`, async (t) => {
    const dir = await tempDir(t);
    const src = path.join(dir, 'src');
    const { files, dirs } = await sourceTree(src);
    if (format === 'ustar') {
      // ustar cannot hold a 150-byte component or a 443-byte path.
      files.delete(`a/${LONG_COMPONENT}`);
      files.delete(VERY_LONG);
      await fsp.rm(path.join(src, 'a', LONG_COMPONENT));
      await fsp.rm(path.join(src, 'g'.repeat(120)), { recursive: true });
      dirs.splice(dirs.indexOf('g'.repeat(120)), 2);
    }
    const archive = path.join(dir, 'gnu.tar');
    await run('tar', [`--format=${format}`, '-cf', archive, '-C', src, '.']);
    const out = path.join(dir, 'out');
    const names = await extractTar((await fsp.open(archive)).createReadStream(), out);
    t.is(names.length, files.size + dirs.length);
    await checkTree(t, out, files, dirs);
  });
}

test('encodeHeader: PAX size record for files of 8 GiB and more, plain octal below', (t) => {
  const big = 9 * 1024 ** 3;
  const header = encodeHeader({ name: 'huge', type: 'file', size: big, mode: 0o644, mtime: new Date(0) });
  t.is(header.length, 3 * 512);
  t.is(header[156], 'x'.charCodeAt(0));
  t.true(header.subarray(512, 1024).toString('latin1').includes(`size=${big}\n`));
  // The ustar size field holds the size in GNU base-256 form (node-tar's encoding).
  t.is(header[1024 + 124], 0x80);
  t.is(header.readUIntBE(1024 + 130, 6), big);
  const limit = 8 * 1024 ** 3 - 1;
  const fits = encodeHeader({ name: 'edge', type: 'file', size: limit, mode: 0o644, mtime: new Date(0) });
  t.is(fits.length, 512);
  t.is(fits.toString('latin1', 124, 135), '77777777777');
});

test('packTar refuses bad names and duplicates', async (t) => {
  for (const name of ['/abs', '../up', 'a/../b', 'a//b', '', 'a\\b']) {
    await t.throwsAsync(collect([{ name, type: 'file', data: Buffer.from('x') }]), { instanceOf: TarError }, name);
  }
  await t.throwsAsync(
    collect([
      { name: 'a', type: 'file' },
      { name: 'a', type: 'directory' },
    ]),
    { instanceOf: TarError, message: /duplicate/ },
  );
});

// ------------------------------------------------------------ crafted archives

interface Craft {
  name: string;
  type?: string;
  size?: number;
  data?: Buffer;
  prefix?: string;
  linkname?: string;
  badChecksum?: boolean;
  magic?: string;
}

function craftHeader(c: Craft): Buffer {
  const b = Buffer.alloc(512);
  b.write(c.name, 0, 100, 'utf8');
  b.write('0000644\0', 100, 'ascii');
  b.write('0000000\0', 108, 'ascii');
  b.write('0000000\0', 116, 'ascii');
  const size = c.size ?? c.data?.length ?? 0;
  b.write(`${size.toString(8).padStart(11, '0')}\0`, 124, 'ascii');
  b.write('00000000000\0', 136, 'ascii');
  b.write(c.type ?? '0', 156, 'ascii');
  if (c.linkname) b.write(c.linkname, 157, 100, 'utf8');
  b.write(c.magic ?? 'ustar\x0000', 257, 'latin1');
  if (c.prefix) b.write(c.prefix, 345, 155, 'utf8');
  b.fill(0x20, 148, 156);
  let sum = 0;
  for (const x of b) sum += x;
  if (c.badChecksum) sum += 1;
  b.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'ascii');
  return b;
}

function craftEntry(c: Craft): Buffer {
  const data = c.data ?? Buffer.alloc(0);
  return Buffer.concat([craftHeader(c), data, Buffer.alloc((512 - (data.length % 512)) % 512)]);
}

function paxEntry(records: Record<string, string>): Buffer {
  let body = '';
  for (const [k, v] of Object.entries(records)) {
    const rec = ` ${k}=${v}\n`;
    let len = rec.length + 1;
    while (String(len).length + rec.length !== len) len = String(len).length + rec.length;
    body += `${len}${rec}`;
  }
  return craftEntry({ name: 'PaxHeader/x', type: 'x', data: Buffer.from(body) });
}

const END = Buffer.alloc(1024);

async function rejects(t: any, archive: Buffer, message: RegExp, opts?: { maxBytes?: number; maxEntries?: number }): Promise<string> {
  const dir = await tempDir(t);
  const dest = path.join(dir, 'dest', 'inner');
  const err = await t.throwsAsync(extractTar(chunked(archive, 300, 1), dest, opts), { instanceOf: TarError, message });
  // Nothing may appear outside the destination.
  t.deepEqual((await fsp.readdir(dir)).sort(), ['dest']);
  t.deepEqual(await fsp.readdir(path.join(dir, 'dest')), ['inner']);
  return err.message;
}

const ok = craftEntry({ name: 'fine', data: Buffer.from('fine') });

test('crafted archive: a well-formed one is accepted (control for the rejection cases)', async (t) => {
  const dir = await tempDir(t);
  const names = await extractTar(Readable.from([Buffer.concat([ok, craftEntry({ name: 'sub/', type: '5' }), craftEntry({ name: 'f', prefix: 'sub', data: Buffer.from('z') }), END])]), dir);
  t.deepEqual(names, ['fine', 'sub/', 'sub/f']);
  t.is(await fsp.readFile(path.join(dir, 'sub/f'), 'utf8'), 'z');
});

test('rejects absolute paths', async (t) => {
  const msg = await rejects(t, Buffer.concat([craftEntry({ name: '/etc/passwd-quiver', data: Buffer.from('x') }), END]), /absolute path/);
  t.regex(msg, /\/etc\/passwd-quiver/);
  await rejects(t, Buffer.concat([paxEntry({ path: '/tmp/pax-abs' }), ok, END]), /absolute path/);
});

test('rejects ".." segments, in the name, the prefix, a PAX path and a GNU long name', async (t) => {
  await rejects(t, Buffer.concat([craftEntry({ name: '../escape', data: Buffer.from('x') }), END]), /"\.\." segment/);
  await rejects(t, Buffer.concat([craftEntry({ name: 'a/../../escape', data: Buffer.from('x') }), END]), /"\.\." segment/);
  await rejects(t, Buffer.concat([craftEntry({ name: 'escape', prefix: '..', data: Buffer.from('x') }), END]), /"\.\." segment/);
  await rejects(t, Buffer.concat([ok, paxEntry({ path: 'fine2/../../escape' }), craftEntry({ name: 'benign', data: Buffer.from('x') }), END]), /"\.\." segment/);
  await rejects(t, Buffer.concat([craftEntry({ name: '././@LongLink', type: 'L', data: Buffer.from('../escape\0'), magic: 'ustar  \0' }), craftEntry({ name: 'benign', data: Buffer.from('x'), magic: 'ustar  \0' }), END]), /"\.\." segment/);
});

test('rejects links, devices and FIFOs', async (t) => {
  for (const [type, what] of [
    ['2', /symbolic link not allowed/],
    ['1', /hard link not allowed/],
    ['3', /character device not allowed/],
    ['4', /block device not allowed/],
    ['6', /FIFO not allowed/],
    ['K', /long link/],
    ['Z', /entry type "Z" not allowed/],
  ] as const) {
    const msg = await rejects(t, Buffer.concat([ok, craftEntry({ name: 'link', type, linkname: '/etc/passwd' }), END]), what);
    t.regex(msg, /"link"/);
  }
});

test('rejects duplicate names and a file over a directory', async (t) => {
  await rejects(t, Buffer.concat([ok, craftEntry({ name: './fine', data: Buffer.from('again') }), END]), /"\.\/fine": duplicate name/);
  await rejects(t, Buffer.concat([craftEntry({ name: 'd/', type: '5' }), craftEntry({ name: 'd', type: '5' }), END]), /duplicate name/);
  await rejects(t, Buffer.concat([craftEntry({ name: 'd/f', data: Buffer.from('x') }), craftEntry({ name: 'd', data: Buffer.from('x') }), END]), /duplicate name/);
  await rejects(t, Buffer.concat([ok, craftEntry({ name: 'fine/under', data: Buffer.from('x') }), END]), /exists and is not a directory/);
});

test('does not follow a symlink already in the destination', async (t) => {
  const dir = await tempDir(t);
  const dest = path.join(dir, 'dest');
  const outside = path.join(dir, 'outside');
  await fsp.mkdir(dest);
  await fsp.mkdir(outside);
  await fsp.symlink(outside, path.join(dest, 'link'));
  await fsp.symlink(path.join(outside, 'f'), path.join(dest, 'filelink'));
  await t.throwsAsync(extractTar(Readable.from([Buffer.concat([craftEntry({ name: 'link/f', data: Buffer.from('x') }), END])]), dest), { instanceOf: TarError, message: /not a directory/ });
  await t.throwsAsync(extractTar(Readable.from([Buffer.concat([craftEntry({ name: 'filelink', data: Buffer.from('x') }), END])]), dest), { instanceOf: TarError, message: /already exists/ });
  t.deepEqual(await fsp.readdir(outside), []);
});

test('rejects truncated archives', async (t) => {
  const big = craftEntry({ name: 'big', data: randomBytes(5000) });
  await rejects(t, big.subarray(0, 300), /header cut short/);
  await rejects(t, big.subarray(0, 512 + 4000), /"big": truncated archive \(4000 of 5000 bytes/);
  await rejects(t, big.subarray(0, 512 + 5000 + 3), /"big": truncated archive \(padding/);
  await rejects(t, big, /no end-of-archive marker/);
  await rejects(t, Buffer.concat([paxEntry({ path: 'long' }).subarray(0, 520)]), /metadata cut short/);
  await rejects(t, Buffer.alloc(0), /no end-of-archive marker/);
});

test('rejects bad checksums, bad magic and malformed fields', async (t) => {
  await rejects(t, Buffer.concat([ok, craftEntry({ name: 'bad', data: Buffer.from('x'), badChecksum: true }), END]), /"bad": bad header checksum/);
  const flipped = Buffer.concat([craftEntry({ name: 'flip', data: Buffer.from('x') }), END]);
  flipped[5] ^= 0x01; // corrupt the name after the checksum was computed
  await rejects(t, flipped, /bad header checksum/);
  await rejects(t, Buffer.concat([craftEntry({ name: 'nomagic', magic: 'xxxxx\x0000' }), END]), /bad magic/);
  const badSize = craftHeader({ name: 'badsize' });
  badSize.write('0000000009z\0', 124, 'ascii');
  badSize.fill(0x20, 148, 156);
  let sum = 0;
  for (const x of badSize) sum += x;
  badSize.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'ascii');
  await rejects(t, Buffer.concat([badSize, END]), /malformed size field/);
  await rejects(t, Buffer.concat([craftEntry({ name: 'PaxHeader/x', type: 'x', data: Buffer.from('99 path=x\n') }), ok, END]), /malformed PAX record/);
});

test('rejects content beyond maxBytes (including a PAX size of 9 GiB) and more than maxEntries', async (t) => {
  await rejects(t, Buffer.concat([ok, craftEntry({ name: 'second', data: randomBytes(2000) }), END]), /"second": archive content exceeds the limit of 1000 bytes/, { maxBytes: 1000 });
  await rejects(t, Buffer.concat([paxEntry({ size: String(9 * 1024 ** 3) }), craftHeader({ name: 'huge' })]), /"huge": archive content exceeds/, { maxBytes: 1024 ** 3 });
  await rejects(t, Buffer.concat([ok, craftEntry({ name: 'b', data: Buffer.from('b') }), craftEntry({ name: 'c', data: Buffer.from('c') }), END]), /"c": archive has more than 2 entries/, { maxEntries: 2 });
  const dir = await tempDir(t);
  t.deepEqual(await extractTar(Readable.from([Buffer.concat([ok, END])]), dir, { maxBytes: 4, maxEntries: 1 }), ['fine']);
});
