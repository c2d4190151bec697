/**
 * What `bin/quiver-restore` does: restores a cluster backup (`POST /cluster/backup`,
 * ts/snapshots/backup.ts) into a running cluster of any size, or a single node, through
 * its REST API only:
 *
 * 1. the backup archive (a file, or a URL such as `GET /snapshots/{name}` of the peer
 *    that made it) is unpacked into a temp folder and its manifest read;
 * 2. the target's peers are found (`GET /cluster` on every `--peer`: each REST URL gives
 *    its peer id; every peer of the cluster must be given);
 * 3. per collection: its configuration-only collection snapshot is uploaded with
 *    priority `replica`, which creates the collection empty through consensus with the
 *    same configuration, payload indexes, shard keys and shard ids, placed over the
 *    target's peers; then each shard's snapshot is uploaded (with its SHA-256 checked)
 *    to a peer that holds a replica of that shard, with priority `snapshot`: that
 *    replica takes the data and the shard's other replicas follow it;
 * 4. unless `--no-wait`: once every replica is Active, each replica's content digest
 *    (`GET /collections/{c}/shards/{id}/digest`) must equal the one the backup recorded;
 * 5. the backup's aliases are created.
 *
 * Exit codes: 0 restored (and checked), 1 failed (the message says where), 2 usage.
 *
 * Owns: that procedure and its messages. Must never: write to a peer's storage itself
 * (every change goes through the API, so consensus and the replicas stay in charge).
 */

import { openAsBlob } from 'node:fs';
import * as fs from 'node:fs/promises';
import { createReadStream, createWriteStream } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

import { BACKUP_FORMAT, BACKUP_MANIFEST, type BackupCollection, type BackupManifest } from '../../snapshots/backup';
import { extractTar } from '../../snapshots/tar';

export const RESTORE_USAGE = `Usage: quiver-restore --backup <file|URL> --peer <REST URL> [--peer <REST URL> ...] [options]

Restores a cluster backup (POST /cluster/backup) into a running cluster of any size, or
into a single node. The collections must not exist there yet.

Options:
  --backup <file|URL>   the backup archive: a file, or an http(s) URL (for instance
                        GET /snapshots/{name} of the peer that made it)
  --peer <URL>          REST URL of a peer of the target (http://host:6333); give every
                        peer of the cluster (repeatable)
  --collection <name>   restore only this collection of the backup (repeatable)
  --api-key <key>       sent as the api-key header to the target and the backup URL
  --timeout <seconds>   how long to wait for every replica to be Active and checked
                        (default 600)
  --no-wait             stop once every shard's snapshot is recovered on one replica,
                        without waiting for the other replicas nor checking digests
  --help                print this text and exit
`;

export class RestoreUsageError extends Error {}
export class RestoreError extends Error {}

export interface RestoreArgs {
  backup: string;
  peers: string[];
  collections: string[];
  apiKey: string | null;
  timeoutS: number;
  wait: boolean;
  help: boolean;
}

export function parseRestoreArgs(argv: readonly string[]): RestoreArgs {
  const a: RestoreArgs = { backup: '', peers: [], collections: [], apiKey: null, timeoutS: 600, wait: true, help: false };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--help') {
      a.help = true;
      continue;
    }
    if (flag === '--no-wait') {
      a.wait = false;
      continue;
    }
    if (!['--backup', '--peer', '--collection', '--api-key', '--timeout'].includes(flag)) throw new RestoreUsageError(`unknown option ${JSON.stringify(flag)}`);
    const value = argv[++i];
    if (value === undefined || value === '') throw new RestoreUsageError(`${flag} needs a value`);
    if (flag === '--backup') a.backup = value;
    else if (flag === '--peer') a.peers.push(value.replace(/\/+$/, ''));
    else if (flag === '--collection') a.collections.push(value);
    else if (flag === '--api-key') a.apiKey = value;
    else {
      if (!/^[0-9]{1,7}$/.test(value) || Number(value) < 1) throw new RestoreUsageError(`--timeout expects a number of seconds, got ${JSON.stringify(value)}`);
      a.timeoutS = Number(value);
    }
  }
  if (a.help) return a;
  if (a.backup === '') throw new RestoreUsageError('--backup is required');
  if (a.peers.length === 0) throw new RestoreUsageError('at least one --peer is required');
  for (const p of a.peers) {
    try {
      const u = new URL(p);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error();
    } catch {
      throw new RestoreUsageError(`--peer expects a REST URL such as http://10.0.0.1:6333, got ${JSON.stringify(p)}`);
    }
  }
  return a;
}

type Say = (line: string) => void;

/** The target's REST API. */
class Api {
  constructor(private readonly apiKey: string | null) {}

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return { ...(this.apiKey !== null ? { 'api-key': this.apiKey } : {}), ...extra };
  }

  async call(url: string, method: string, route: string, body?: unknown): Promise<any> {
    const res = await fetch(url + route, {
      method,
      headers: this.headers(body === undefined ? {} : { 'content-type': 'application/json' }),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(60_000),
    }).catch((err: unknown) => {
      throw new RestoreError(`${method} ${url}${route}: ${(err as Error).message}`);
    });
    return this.answer(res, `${method} ${url}${route}`);
  }

  async upload(url: string, route: string, file: string): Promise<any> {
    const form = new FormData();
    form.append('snapshot', await openAsBlob(file), path.basename(file));
    const res = await fetch(url + route, { method: 'POST', headers: this.headers(), body: form }).catch((err: unknown) => {
      throw new RestoreError(`POST ${url}${route}: ${(err as Error).message}`);
    });
    return this.answer(res, `POST ${url}${route}`);
  }

  private async answer(res: Response, what: string): Promise<any> {
    const text = await res.text();
    let parsed: any = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // plain text
    }
    if (res.status < 200 || res.status > 299) throw new RestoreError(`${what}: ${res.status} ${typeof parsed === 'object' ? (parsed?.status?.error ?? JSON.stringify(parsed)) : text}`);
    return parsed?.result;
  }

  /** Downloads `url` into `file`. */
  async download(url: string, file: string): Promise<void> {
    const res = await fetch(url, { headers: this.headers() }).catch((err: unknown) => {
      throw new RestoreError(`downloading ${url}: ${(err as Error).message}`);
    });
    if (!res.ok || res.body === null) throw new RestoreError(`downloading ${url}: HTTP ${res.status}`);
    await pipeline(Readable.fromWeb(res.body as import('node:stream/web').ReadableStream), createWriteStream(file));
  }
}

/** The backup unpacked in `dir`, its manifest checked. */
async function unpack(api: Api, backup: string, dir: string, say: Say): Promise<BackupManifest> {
  let file = backup;
  if (/^https?:\/\//.test(backup)) {
    file = path.join(dir, 'backup.download');
    say(`downloading ${backup}`);
    await api.download(backup, file);
  }
  const st = await fs.stat(file).catch(() => null);
  if (!st?.isFile()) throw new RestoreError(`--backup ${backup}: no such file`);
  const into = path.join(dir, 'backup');
  await extractTar(createReadStream(file), into, { maxBytes: st.size, maxEntries: 1_000_000 }).catch((err: unknown) => {
    throw new RestoreError(`--backup ${backup}: not a readable archive: ${(err as Error).message}`);
  });
  let m: BackupManifest;
  try {
    m = JSON.parse(await fs.readFile(path.join(into, BACKUP_MANIFEST), 'utf8')) as BackupManifest;
  } catch {
    throw new RestoreError(`--backup ${backup}: not a cluster backup (no readable ${BACKUP_MANIFEST})`);
  }
  if (m.kind !== 'cluster-backup' || typeof m.format !== 'number' || !Array.isArray(m.collections)) throw new RestoreError(`--backup ${backup}: not a cluster backup`);
  if (m.format > BACKUP_FORMAT) throw new RestoreError(`--backup ${backup}: backup format ${m.format} is newer than this Quiver reads (${BACKUP_FORMAT})`);
  return m;
}

/** The target's peers: peer id → REST URL (a single node: one peer, `single`). */
async function discover(api: Api, urls: readonly string[]): Promise<{ single: boolean; urls: Map<string, string> }> {
  const byId = new Map<string, string>();
  let single = false;
  let members: string[] = [];
  for (const url of urls) {
    const c = await api.call(url, 'GET', '/cluster');
    if (c.status !== 'enabled') {
      if (urls.length > 1) throw new RestoreError(`${url} is a single node (cluster mode is off): give it as the only --peer`);
      single = true;
      byId.set('single', url);
      continue;
    }
    byId.set(String(c.peer_id), url);
    members = Object.keys(c.peers);
  }
  if (!single) {
    const missing = members.filter((p) => !byId.has(p));
    if (missing.length > 0) throw new RestoreError(`give --peer for every peer of the target cluster: no REST URL for peer ${missing.join(', ')}`);
  }
  return { single, urls: byId };
}

/** Per shard id: the peers holding a replica and their states (a single node: its one replica). */
async function placement(api: Api, url: string, name: string, single: boolean): Promise<Map<number, Map<string, string>>> {
  const info = await api.call(url, 'GET', `/collections/${encodeURIComponent(name)}/cluster`);
  const out = new Map<number, Map<string, string>>();
  const add = (shard: number, peer: string, state: string) => {
    const m = out.get(shard) ?? new Map<string, string>();
    m.set(peer, state);
    out.set(shard, m);
  };
  for (const s of info.local_shards) add(s.shard_id, single ? 'single' : String(info.peer_id), s.state);
  for (const s of info.remote_shards) add(s.shard_id, String(s.peer_id), s.state);
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function restoreCollection(api: Api, c: BackupCollection, dir: string, target: { single: boolean; urls: Map<string, string> }, args: RestoreArgs, say: Say): Promise<void> {
  const first = [...target.urls.values()][0];
  const route = `/collections/${encodeURIComponent(c.name)}`;
  if ((await api.call(first, 'GET', `${route}/exists`)).exists === true) {
    throw new RestoreError(`collection ${c.name} exists in the target already: delete it first, or leave it out (--collection)`);
  }
  await api.upload(first, `${route}/snapshots/upload?priority=replica`, path.join(dir, c.collection_snapshot));
  say(`${c.name}: created (${c.shards.length} shard${c.shards.length === 1 ? '' : 's'}, replication factor ${c.config.params.replication_factor})`);
  // Every peer applies the creation before a shard is recovered on one of them.
  for (const url of target.urls.values()) {
    const deadline = Date.now() + args.timeoutS * 1000;
    while ((await api.call(url, 'GET', `${route}/exists`)).exists !== true) {
      if (Date.now() > deadline) throw new RestoreError(`${c.name} did not appear on ${url} within ${args.timeoutS} s`);
      await sleep(100);
    }
  }
  const placed = await placement(api, first, c.name, target.single);
  for (const s of c.shards) {
    const replicas = placed.get(s.id);
    if (replicas === undefined || replicas.size === 0) throw new RestoreError(`${c.name}: shard ${s.id} of the backup has no replica in the target`);
    const holder = [...replicas].find(([, st]) => st === 'Active')?.[0] ?? [...replicas.keys()][0];
    const url = target.urls.get(holder)!;
    await api.upload(url, `${route}/shards/${s.id}/snapshots/upload?priority=snapshot&checksum=${s.sha256}`, path.join(dir, s.file));
    say(`${c.name}: shard ${s.id} recovered on peer ${holder} (${s.points} points)${replicas.size > 1 ? `; its ${replicas.size - 1} other replica${replicas.size > 2 ? 's follow' : ' follows'} it` : ''}`);
  }
  if (!args.wait) return;
  // Every replica Active, and each one's content the backup's.
  const deadline = Date.now() + args.timeoutS * 1000;
  for (;;) {
    const now = await placement(api, first, c.name, target.single);
    if ([...now.values()].every((m) => [...m.values()].every((st) => st === 'Active'))) break;
    if (Date.now() > deadline) throw new RestoreError(`${c.name}: not every replica is Active within ${args.timeoutS} s`);
    await sleep(200);
  }
  const now = await placement(api, first, c.name, target.single);
  for (const s of c.shards) {
    for (const peer of now.get(s.id)!.keys()) {
      const d = await api.call(target.urls.get(peer)!, 'GET', `${route}/shards/${s.id}/digest`);
      if (d.points_count !== s.points || d.digest !== s.digest) {
        throw new RestoreError(`${c.name}: the replica of shard ${s.id} on peer ${peer} holds ${d.points_count} points (digest ${d.digest}), the backup ${s.points} (digest ${s.digest})`);
      }
    }
  }
  say(`${c.name}: every replica Active and equal to the backup`);
}

/** Runs the procedure of the module comment. */
export async function restoreBackup(args: RestoreArgs, say: Say): Promise<void> {
  const api = new Api(args.apiKey);
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-restore-'));
  try {
    const m = await unpack(api, args.backup, dir, say);
    const known = new Set(m.collections.map((c) => c.name));
    for (const n of args.collections) if (!known.has(n)) throw new RestoreError(`--collection ${n}: not in the backup (it has ${[...known].join(', ') || 'none'})`);
    const chosen = args.collections.length === 0 ? m.collections : m.collections.filter((c) => args.collections.includes(c.name));
    const target = await discover(api, args.peers);
    say(`backup of ${m.created_at} (peer ${m.peer}, consistency ${m.consistency}): ${chosen.length} collection${chosen.length === 1 ? '' : 's'} into ${target.single ? 'a single node' : `a cluster of ${target.urls.size} peers`}`);
    for (const c of chosen) await restoreCollection(api, c, path.join(dir, 'backup'), target, args, say);
    const names = new Set(chosen.map((c) => c.name));
    const actions = Object.entries(m.aliases ?? {})
      .filter(([, collection]) => names.has(collection))
      .map(([alias, collection]) => ({ create_alias: { collection_name: collection, alias_name: alias } }));
    if (actions.length > 0) {
      await api.call([...target.urls.values()][0], 'POST', '/collections/aliases', { actions });
      say(`aliases: ${actions.map((a) => `${a.create_alias.alias_name} -> ${a.create_alias.collection_name}`).join(', ')}`);
    }
    say('restored');
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

export async function main(argv: readonly string[]): Promise<void> {
  let args: RestoreArgs;
  try {
    args = parseRestoreArgs(argv);
  } catch (err) {
    if (!(err instanceof RestoreUsageError)) throw err;
    process.stderr.write(`quiver-restore: ${err.message}\n\n${RESTORE_USAGE}`);
    process.exit(2);
  }
  if (args.help) {
    process.stdout.write(RESTORE_USAGE);
    process.exit(0);
  }
  try {
    await restoreBackup(args, (line) => process.stdout.write(`${line}\n`));
  } catch (err) {
    if (!(err instanceof RestoreError)) throw err;
    process.stderr.write(`quiver-restore: ${err.message}\n`);
    process.exit(1);
  }
}
