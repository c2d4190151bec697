/**
 * Whole-cluster backup and restore on real peers (ts/snapshots/backup.ts,
 * bin/quiver-restore): a backup of a 3-peer cluster taken through one peer (shards read
 * from Active replicas on every peer over p2p) restored into a new cluster of 2 peers
 * and into one of 4: every point with its payload and vectors, shard keys with their
 * shard ids, payload indexes, configuration and aliases come back, searches work, and
 * the restore checks every replica's digest against the backup.
 */

import test from 'ava';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

import { createReadStream } from 'node:fs';

import type { BackupManifest } from '../../ts/snapshots/backup';
import { extractTar } from '../../ts/snapshots/tar';
import { REPO_ROOT } from '../crash/server';
import { Cluster, api, change, waitFor } from './harness';

const DIM = 4;
const run = promisify(execFile);

function points(from: number, n: number, tag: string): Array<{ id: number; vector: number[]; payload: { i: number; tag: string; nested: { even: boolean } } }> {
  return Array.from({ length: n }, (_, k) => {
    const i = from + k;
    return { id: i, vector: [Math.sin(i) + 2, Math.cos(i), (i % 5) - 2, 1], payload: { i, tag, nested: { even: i % 2 === 0 } } };
  });
}

/** Every record of `name` through `url` (payload, vectors, shard key), by id. */
async function records(url: string, name: string): Promise<Map<string, unknown>> {
  const out = new Map<string, unknown>();
  let offset: unknown = null;
  for (;;) {
    const r = await api(url, 'POST', `/collections/${name}/points/scroll`, { limit: 250, offset, with_payload: true, with_vector: true });
    if (r.status !== 200) throw new Error(`scroll ${name}: ${r.status} ${JSON.stringify(r.body)}`);
    for (const p of r.body.result.points) out.set(`${p.shard_key ?? ''}/${p.id}`, p);
    offset = r.body.result.next_page_offset;
    if (offset === null) return out;
  }
}

interface Expected {
  a: Map<string, unknown>;
  k: Map<string, unknown>;
  aConfig: unknown;
  kConfig: unknown;
}

/** What a restored cluster must show through every peer. */
async function verify(t: { is: Function; deepEqual: Function; true: Function }, c: Cluster, want: Expected): Promise<void> {
  for (const p of c.running()) {
    t.deepEqual(await records(p.url, 'a'), want.a, `collection a through ${p.url}`);
    t.deepEqual(await records(p.url, 'k'), want.k, `collection k through ${p.url}`);
    const a = (await api(p.url, 'GET', '/collections/a')).body.result;
    t.deepEqual(a.config.params, want.aConfig);
    t.is(a.payload_schema.tag?.data_type, 'keyword');
    t.deepEqual((await api(p.url, 'GET', '/collections/k')).body.result.config.params, want.kConfig);
    t.deepEqual((await api(p.url, 'GET', '/collections/k/shards')).body.result.shard_keys, [{ key: 'x' }, { key: 'y' }]);
    const kInfo = (await api(p.url, 'GET', '/collections/k/cluster')).body.result;
    const kShards = [...new Set([...kInfo.local_shards, ...kInfo.remote_shards].map((s: { shard_id: number }) => s.shard_id))].sort();
    t.deepEqual(kShards, [1, 3, 4], 'the shard ids of the backup, a dropped key\'s id left out');
    t.deepEqual((await api(p.url, 'GET', '/collections/a/aliases')).body.result.aliases, [{ alias_name: 'al', collection_name: 'a' }]);
    // Searches, an indexed filter, a keyed read.
    for (const probe of points(0, 600, 'a').filter((_, i) => i % 150 === 7)) {
      const q = await api(p.url, 'POST', '/collections/al/points/query', { query: probe.vector, limit: 1 });
      t.is(q.body.result.points[0].id, probe.id);
    }
    t.is((await api(p.url, 'POST', '/collections/a/points/count', { exact: true, filter: { must: [{ key: 'tag', match: { value: 'a' } }] } })).body.result.count, 600);
    t.is((await api(p.url, 'POST', '/collections/k/points/count', { exact: true, shard_key: 'y' })).body.result.count, 200);
  }
}

test.serial('a backup of a 3-peer cluster restores into a new cluster of 2 peers and into one of 4: points, payloads, vectors, keys, indexes, aliases', async (t) => {
  const keep = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-backup-'));
  t.teardown(() => fs.rm(keep, { recursive: true, force: true }));
  let want: Expected;
  let backupFile: string;
  {
    const src = await Cluster.start(3);
    t.teardown(() => src.destroy());
    const url = src.peers[0].url;
    t.is((await change(url, 'PUT', '/collections/a', { vectors: { size: DIM, distance: 'Cosine' }, shard_number: 3, replication_factor: 2, write_consistency_factor: 1 })).status, 200);
    t.is((await change(url, 'PUT', '/collections/a/index?wait=true', { field_name: 'tag', field_schema: 'keyword' })).status, 200);
    t.is((await change(url, 'PUT', '/collections/k', { vectors: { size: DIM, distance: 'Dot' }, sharding_method: 'custom' })).status, 200);
    for (const [key, n] of [['x', 1], ['gone', 1], ['y', 2]] as const) t.is((await change(url, 'PUT', '/collections/k/shards', { shard_key: key, shards_number: n })).status, 200);
    t.is((await change(url, 'POST', '/collections/k/shards/delete', { shard_key: 'gone' })).status, 200);
    t.is((await change(url, 'POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: 'a', alias_name: 'al' } }] })).status, 200);
    await waitFor('every peer has both collections and the alias', async () => {
      for (const p of src.peers) if ((await api(p.url, 'GET', '/collections/al')).status !== 200 || (await api(p.url, 'GET', '/collections/k/shards')).body?.result?.shard_keys?.length !== 2) return false;
      return true;
    });
    const all = points(0, 600, 'a');
    for (let b = 0; b < all.length; b += 150) t.is((await api(src.peers[(b / 150) % 3].url, 'PUT', '/collections/a/points?wait=true', { points: all.slice(b, b + 150) })).status, 200);
    t.is((await api(url, 'PUT', '/collections/k/points?wait=true', { points: points(1000, 100, 'x'), shard_key: 'x' })).status, 200);
    t.is((await api(url, 'PUT', '/collections/k/points?wait=true', { points: points(2000, 200, 'y'), shard_key: 'y' })).status, 200);
    want = {
      a: await records(url, 'a'),
      k: await records(url, 'k'),
      aConfig: (await api(url, 'GET', '/collections/a')).body.result.config.params,
      kConfig: (await api(url, 'GET', '/collections/k')).body.result.config.params,
    };
    t.is(want.a.size, 600);
    t.is(want.k.size, 300);

    // Refusals change nothing; then the backup, through a peer that holds only some shards.
    t.is((await api(src.peers[1].url, 'POST', '/cluster/backup', { collections: ['nope'] })).status, 404);
    t.is((await api(src.peers[1].url, 'POST', '/cluster/backup', { collections: 'a' })).status, 400);
    t.deepEqual((await api(src.peers[1].url, 'GET', '/snapshots')).body.result, []);
    const made = await api(src.peers[1].url, 'POST', '/cluster/backup', undefined, 60_000);
    t.is(made.status, 200, JSON.stringify(made.body));
    t.regex(made.body.result.name, /^cluster-backup-\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d\.snapshot$/);
    const listed = (await api(src.peers[1].url, 'GET', '/snapshots')).body.result;
    t.deepEqual(listed.map((d: { name: string }) => d.name), [made.body.result.name]);
    backupFile = path.join(keep, made.body.result.name);
    await fs.copyFile(path.join(src.peers[1].dir, 'snapshots', made.body.result.name), backupFile);

    // The manifest: every shard once, read from an Active replica (some on other peers than the one asked), counted.
    const unpacked = path.join(keep, 'unpacked');
    await extractTar(createReadStream(backupFile), unpacked);
    const m = JSON.parse(await fs.readFile(path.join(unpacked, 'backup.json'), 'utf8')) as BackupManifest;
    const called = String((await src.info(1)).peer_id);
    t.is(m.peer, called);
    t.is(m.consistency, 'per-shard');
    t.deepEqual(m.collections.map((c) => [c.name, c.shards.map((s) => s.id)]), [['a', [0, 1, 2]], ['k', [1, 3, 4]]]);
    t.deepEqual(m.collections[1].shards.map((s) => s.shard_key), ['x', 'y', 'y']);
    t.is(m.collections[0].shards.reduce((n, s) => n + s.points, 0), 600);
    t.is(m.collections[1].shards.reduce((n, s) => n + s.points, 0), 300);
    const sources = new Set(m.collections.flatMap((c) => c.shards.map((s) => s.source_peer)));
    t.true(sources.has(called) && sources.size >= 2, `shards read from ${[...sources].join(', ')}`);
    t.deepEqual(m.aliases, { al: 'a' });
    for (const c of m.collections) for (const s of c.shards) t.is((await fs.stat(path.join(unpacked, s.file))).size, s.size);
    await src.destroy();
  }

  for (const size of [2, 4]) {
    const dst = await Cluster.start(size);
    const args = [path.join(REPO_ROOT, 'bin', 'quiver-restore'), '--backup', backupFile, ...dst.peers.flatMap((p) => ['--peer', p.url])];
    const out = await run(process.execPath, args, { timeout: 300_000 });
    t.regex(out.stdout, /a: every replica Active and equal to the backup/);
    t.regex(out.stdout, /k: every replica Active and equal to the backup/);
    t.regex(out.stdout, /aliases: al -> a\nrestored\n$/);
    await verify(t, dst, want!);
    // A placement over this cluster's peers: replication factor 2 of a spread over two peers at least.
    const a = (await api(dst.peers[0].url, 'GET', '/collections/a/cluster')).body.result;
    const holders = new Set([...a.local_shards.map(() => String(a.peer_id)), ...a.remote_shards.map((s: { peer_id: number }) => String(s.peer_id))]);
    t.true(holders.size >= 2);
    t.is(a.local_shards.length + a.remote_shards.length, 6);
    if (size === 2) {
      // Restoring again: the collections exist; refused, exit 1, nothing changed.
      const again = await run(process.execPath, args, { timeout: 60_000 }).then(
        () => null,
        (err: { code: number; stderr: string }) => err,
      );
      t.is(again?.code, 1);
      t.regex(again!.stderr, /collection a exists in the target already/);
      // A restore that names a peer set without every peer is refused before anything.
      const partial = await run(process.execPath, [args[0], '--backup', backupFile, '--peer', dst.peers[0].url], { timeout: 60_000 }).then(
        () => null,
        (err: { code: number; stderr: string }) => err,
      );
      t.is(partial?.code, 1);
      t.regex(partial!.stderr, /give --peer for every peer of the target cluster/);
    }
    await dst.destroy();
  }
});
