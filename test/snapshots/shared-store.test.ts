/**
 * Two peers sharing one snapshot store (S3 in practice; here one local folder): the
 * scheduled shard snapshots of a cluster carry the peer id in their name, so two peers
 * snapshotting the same shard in the same second (a run taken over from a peer still
 * making it) make two snapshots, not one replacing the other, and deleting one (what
 * retention does, by name) leaves the other. Before, both were named
 * `{collection}-shard-{id}-{ts}.snapshot`: the listing held one, and retention deleting
 * "its" snapshot deleted the other peer's. Names in the reference's form (manual shard
 * snapshots, and scheduled ones written before) are listed and deleted alike.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import { parseCreateCollection } from '../../ts/collection/config';
import { loadConfig } from '../../ts/config';
import { Snapshots } from '../../ts/snapshots/snapshots';
import { TableOfContent } from '../../ts/storage/toc';

const logger = pino({ level: 'silent' });

test('two peers snapshot the same shard in the same second into one store: two snapshots, each deleted alone; reference-form names listed and deleted too', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-shared-store-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const shared = path.join(dir, 'snapshots');
  const peers: Array<{ toc: TableOfContent; snapshots: Snapshots }> = [];
  for (const p of ['a', 'b']) {
    const config = loadConfig({ cwd: dir, env: { SERVICE__STORAGE__STORAGE_PATH: path.join(dir, p), SERVICE__STORAGE__SNAPSHOTS_PATH: shared } });
    const toc = await TableOfContent.open(path.join(dir, p), loadEngine({ logger }), logger);
    t.teardown(() => toc.close());
    await toc.create('c', parseCreateCollection({ vectors: { size: 2, distance: 'Dot' }, shard_number: 1 }, config));
    peers.push({ toc, snapshots: await Snapshots.open(config, toc, logger, '0.0.0-test') });
  }
  const shardDir = Snapshots.shardDir('c', 0);
  const [one, two] = await Promise.all([peers[0].snapshots.createShard('c', 0, '11'), peers[1].snapshots.createShard('c', 0, '22')]);
  t.regex(one.name, /^c-shard-0-11-\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d\.snapshot$/);
  t.regex(two.name, /^c-shard-0-22-/);
  t.deepEqual((await peers[0].snapshots.list(shardDir)).map((d) => d.name).sort(), [one.name, two.name].sort(), 'both snapshots are in the store');

  // Retention on peer 11 deletes its own: peer 22's stays.
  await peers[0].snapshots.delete(shardDir, one.name);
  t.deepEqual((await peers[1].snapshots.list(shardDir)).map((d) => d.name), [two.name]);

  // A name in the reference's form (a manual snapshot, or a scheduled one from before): listed, and deleted by its name.
  const plain = await peers[1].snapshots.createShard('c', 0);
  t.regex(plain.name, /^c-shard-0-\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d\.snapshot$/);
  t.deepEqual((await peers[0].snapshots.list(shardDir)).map((d) => d.name).sort(), [two.name, plain.name].sort());
  await peers[0].snapshots.delete(shardDir, plain.name);
  t.deepEqual((await peers[0].snapshots.list(shardDir)).map((d) => d.name), [two.name]);
});
