/**
 * Shared pieces of the snapshot fault tests (faults-archive.test.ts, faults-disk.test.ts):
 * a real server on a directory the test owns, a small REST client, a fingerprint of a
 * collection (config, count, every point with vector and payload), the checks that
 * nothing was left behind, a hand-made ustar writer for hostile archives, and tmpfs
 * mounts for the disk-full cases.
 */

import { execFile } from 'node:child_process';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

import { startServer, type Server } from '../crash/server';
import { mulberry32 } from '../support/rng';

export const run = promisify(execFile);
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// -- servers -----------------------------------------------------------------------------

export interface Node {
  dir: string;
  server: Server;
  url: string;
  storage: string;
  snapshots: string;
  /** The folder the service keeps its temp files in (`<temp_path or snapshots_path>/.quiver-tmp`). */
  temp: string;
  env: Record<string, string>;
}

export interface NodeOptions {
  storage?: string;
  snapshots?: string;
  tempPath?: string;
}

/** The paths a node on `dir` uses (defaults: dir/storage, dir/snapshots, no temp_path). */
export function nodePaths(dir: string, o: NodeOptions = {}) {
  const storage = o.storage ?? path.join(dir, 'storage');
  const snapshots = o.snapshots ?? path.join(dir, 'snapshots');
  const temp = path.join(o.tempPath ?? snapshots, '.quiver-tmp');
  const env: Record<string, string> = {
    SERVICE__STORAGE__STORAGE_PATH: storage,
    SERVICE__STORAGE__SNAPSHOTS_PATH: snapshots,
    SERVICE__LOG_LEVEL: 'INFO',
  };
  if (o.tempPath) env.SERVICE__STORAGE__TEMP_PATH = o.tempPath;
  return { storage, snapshots, temp, env };
}

export async function startNode(dir: string, o: NodeOptions = {}): Promise<Node> {
  const p = nodePaths(dir, o);
  const server = await startServer(dir, p.env, 60_000);
  return { dir, server, url: server.url, ...p };
}

/** Starts the node again on the same folders. */
export async function restartNode(n: Node): Promise<Node> {
  const server = await startServer(n.dir, n.env, 60_000);
  return { ...n, server, url: server.url };
}

export async function tempDir(prefix: string): Promise<string> {
  return fs.mkdtemp(path.join(os.tmpdir(), `quiver-faults-${prefix}-`));
}

// -- REST ----------------------------------------------------------------------------------

export interface Reply {
  status: number;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  text: string;
}

async function reply(res: Response): Promise<Reply> {
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON (a download)
  }
  return { status: res.status, json, text };
}

export async function api(url: string, method: string, p: string, body?: unknown, timeoutMs = 120_000): Promise<Reply> {
  let res: Response;
  try {
    res = await fetch(url + p, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    // fetch says only "fetch failed": name the request and the cause (refused, reset, ...).
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new Error(`${method} ${url}${p}: ${(err as Error).message}${cause ? ` (${cause.code ?? ''} ${cause.message ?? ''})` : ''}`, { cause: err });
  }
  return reply(res);
}

/** Uploads `archive` as the multipart part `snapshot`. */
export async function upload(url: string, collection: string, archive: Buffer, query = 'priority=snapshot'): Promise<Reply> {
  const form = new FormData();
  form.append('snapshot', new Blob([new Uint8Array(archive)]), 'upload.snapshot');
  const res = await fetch(`${url}/collections/${encodeURIComponent(collection)}/snapshots/upload?${query}`, {
    method: 'POST',
    body: form,
    signal: AbortSignal.timeout(120_000),
  });
  return reply(res);
}

/** Asserts the reference's error envelope `{"status":{"error":"..."},"time":<n>}` and returns the message. */
export function errorOf(r: Reply): string {
  const j = r.json;
  if (
    j === null ||
    typeof j !== 'object' ||
    typeof j.status !== 'object' ||
    j.status === null ||
    typeof j.status.error !== 'string' ||
    typeof j.time !== 'number' ||
    'result' in j
  ) {
    throw new Error(`not an error envelope (HTTP ${r.status}): ${r.text.slice(0, 500)}`);
  }
  return j.status.error as string;
}

export async function createCollection(url: string, name: string, body: Record<string, unknown>): Promise<void> {
  const r = await api(url, 'PUT', `/collections/${name}`, body);
  if (r.status !== 200) throw new Error(`create ${name}: ${r.status} ${r.text}`);
}

export function makePoints(seed: number, from: number, count: number, dim: number, payloadBytes = 0): Array<Record<string, unknown>> {
  const rnd = mulberry32(seed);
  const out: Array<Record<string, unknown>> = [];
  for (let i = 0; i < count; i++) {
    const id = from + i;
    const payload: Record<string, unknown> = { n: id, tag: `t${id % 7}`, nested: { even: id % 2 === 0 } };
    if (payloadBytes > 0) payload.blob = Array.from({ length: payloadBytes }, () => String.fromCharCode(97 + Math.floor(rnd() * 26))).join('');
    out.push({ id, vector: Array.from({ length: dim }, () => Math.round((rnd() * 2 - 1) * 1000) / 1000), payload });
  }
  return out;
}

export async function upsert(url: string, name: string, points: Array<Record<string, unknown>>, batch = 1000): Promise<void> {
  for (let i = 0; i < points.length; i += batch) {
    const r = await api(url, 'PUT', `/collections/${name}/points?wait=true`, { points: points.slice(i, i + batch) });
    if (r.status !== 200) throw new Error(`upsert into ${name}: ${r.status} ${r.text.slice(0, 500)}`);
  }
}

export interface Fingerprint {
  config: unknown;
  payloadSchema: unknown;
  count: number;
  points: unknown[];
}

/** Everything a client can see of a collection's data: config, count, all points with vectors and payloads. */
export async function fingerprint(url: string, name: string): Promise<Fingerprint> {
  const info = await api(url, 'GET', `/collections/${name}`);
  if (info.status !== 200) throw new Error(`GET collection ${name}: ${info.status} ${info.text}`);
  const count = await api(url, 'POST', `/collections/${name}/points/count`, { exact: true });
  if (count.status !== 200) throw new Error(`count ${name}: ${count.status} ${count.text}`);
  const points: unknown[] = [];
  let offset: unknown = null;
  for (;;) {
    const body: Record<string, unknown> = { limit: 5000, with_vector: true, with_payload: true };
    if (offset !== null) body.offset = offset;
    const r = await api(url, 'POST', `/collections/${name}/points/scroll`, body);
    if (r.status !== 200) throw new Error(`scroll ${name}: ${r.status} ${r.text.slice(0, 500)}`);
    points.push(...(r.json.result.points as unknown[]));
    offset = r.json.result.next_page_offset;
    if (offset === null || offset === undefined) break;
  }
  return {
    config: info.json.result.config,
    payloadSchema: info.json.result.payload_schema,
    count: count.json.result.count as number,
    points,
  };
}

export async function snapshotNames(url: string, name: string): Promise<string[]> {
  const r = await api(url, 'GET', `/collections/${name}/snapshots`);
  if (r.status !== 200) throw new Error(`list snapshots of ${name}: ${r.status} ${r.text}`);
  return (r.json.result as Array<{ name: string }>).map((s) => s.name).sort();
}

export async function fullSnapshotNames(url: string): Promise<string[]> {
  const r = await api(url, 'GET', '/snapshots');
  if (r.status !== 200) throw new Error(`list full snapshots: ${r.status} ${r.text}`);
  return (r.json.result as Array<{ name: string }>).map((s) => s.name).sort();
}

/** Every file (not directory) below `dir`, relative; [] when it does not exist. */
export async function filesBelow(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string, rel: string): Promise<void> => {
    let entries;
    try {
      entries = await fs.readdir(d, { withFileTypes: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    for (const e of entries) {
      const r = rel === '' ? e.name : `${rel}/${e.name}`;
      if (e.isDirectory()) await walk(path.join(d, e.name), r);
      else out.push(r);
    }
  };
  await walk(dir, '');
  return out.sort();
}

/** Entries of storage/collections (hidden ones are staging, swap or trash leftovers). */
export async function collectionsDirEntries(storage: string): Promise<string[]> {
  return (await fs.readdir(path.join(storage, 'collections'))).sort();
}

export async function exists(p: string): Promise<boolean> {
  return fs.lstat(p).then(
    () => true,
    () => false,
  );
}

// -- hand-made tar -------------------------------------------------------------------------

export interface RawEntry {
  name: string;
  /** ustar typeflag: '0' file, '5' directory, '1' hard link, '2' symlink, '3' char device, 'x' PAX, 'L' GNU long name. */
  type: string;
  data?: Buffer;
  linkname?: string;
  /** The size written in the header (defaults to the data length). */
  declaredSize?: number;
  devmajor?: number;
  devminor?: number;
  /** 'ustar' (POSIX) or 'gnu' ("ustar  \0") magic. */
  magic?: 'ustar' | 'gnu';
}

function octal(block: Buffer, off: number, len: number, v: number): void {
  block.write(v.toString(8).padStart(len - 1, '0'), off, 'ascii');
  block[off + len - 1] = 0;
}

/** One 512-byte header with a correct checksum. */
export function header(e: RawEntry): Buffer {
  const b = Buffer.alloc(512);
  b.write(e.name, 0, 100, 'utf8');
  octal(b, 100, 8, e.type === '5' ? 0o755 : 0o644);
  octal(b, 108, 8, 0);
  octal(b, 116, 8, 0);
  octal(b, 124, 12, e.declaredSize ?? e.data?.length ?? 0);
  octal(b, 136, 12, Math.floor(Date.now() / 1000));
  b.write(e.type, 156, 'ascii');
  if (e.linkname) b.write(e.linkname, 157, 100, 'utf8');
  if (e.magic === 'gnu') b.write('ustar  \0', 257, 'latin1');
  else {
    b.write('ustar\0', 257, 'latin1');
    b.write('00', 263, 'ascii');
  }
  octal(b, 329, 8, e.devmajor ?? 0);
  octal(b, 337, 8, e.devminor ?? 0);
  b.fill(0x20, 148, 156);
  let sum = 0;
  for (const x of b) sum += x;
  b.write(sum.toString(8).padStart(6, '0'), 148, 'ascii');
  b[154] = 0;
  b[155] = 0x20;
  return b;
}

export function paxData(records: Record<string, string>): Buffer {
  let out = '';
  for (const [k, v] of Object.entries(records)) {
    const body = ` ${k}=${v}\n`;
    let len = body.length + 1;
    while (String(len).length + body.length !== len) len = String(len).length + body.length;
    out += `${len}${body}`;
  }
  return Buffer.from(out, 'utf8');
}

/** A tar archive of `entries` (data padded to 512 bytes) and the end-of-archive marker. */
export function rawTar(entries: RawEntry[], endMarker = true): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    parts.push(header(e));
    const d = e.data ?? Buffer.alloc(0);
    if (d.length > 0) {
      parts.push(d);
      const pad = (512 - (d.length % 512)) % 512;
      if (pad) parts.push(Buffer.alloc(pad));
    }
  }
  if (endMarker) parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

// -- tmpfs -----------------------------------------------------------------------------------

/** Mounts a tmpfs of `kb` KiB on `dir` (created). Throws with a clear message when it cannot. */
export async function mountTmpfs(dir: string, kb: number): Promise<void> {
  await fs.mkdir(dir, { recursive: true });
  try {
    await run('mount', ['-t', 'tmpfs', '-o', `size=${kb}k,mode=0755`, 'tmpfs', dir]);
  } catch (err) {
    throw new Error(
      `could not mount a ${kb} KiB tmpfs on ${dir} (the disk-full tests need root and mount(8)): ${(err as Error).message}`,
    );
  }
}

export async function umount(dir: string): Promise<void> {
  for (let i = 0; i < 20; i++) {
    try {
      await run('umount', [dir]);
      return;
    } catch (err) {
      if (!/busy/i.test(String((err as { stderr?: string }).stderr ?? err))) {
        // not mounted (any more), or something else: nothing more to do
        return;
      }
      await sleep(250);
    }
  }
  await run('umount', ['-l', dir]).catch(() => undefined);
}

/** Free bytes on the file system holding `dir`. */
export async function freeBytes(dir: string): Promise<number> {
  const s = await fs.statfs(dir);
  return s.bavail * s.bsize;
}
