/**
 * Snapshot recovery checks the on-disk payload files of each shard before anything is
 * replaced, as the shard's open checks them: the payload index file's CRC32C and
 * bounds, and the data file's length against the checkpoint's. A snapshot with a
 * damaged index or a cut data file is refused up front with a 400 naming the file, and
 * the collection it was to replace is untouched. (Before, these were found only when
 * the recovered shard opened: also a 400, after the swap, undone then.)
 */

import test from 'ava';
import { createReadStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import type { ReplicaOperation } from '../../ts/collection/replica-operation';
import { parseCreateCollection } from '../../ts/collection/config';
import { BadInputError } from '../../ts/common/errors';
import { loadConfig } from '../../ts/config';
import type { Filter } from '../../ts/shard/filter';
import { normalizePointId } from '../../ts/shard/id-tracker';
import { validateUnpacked } from '../../ts/snapshots/archive';
import { Snapshots } from '../../ts/snapshots/snapshots';
import { extractTar } from '../../ts/snapshots/tar';
import { TableOfContent } from '../../ts/storage/toc';

const logger = pino({ level: 'silent' });

test('a damaged payload index or a cut payload data file: refused before anything is replaced, the collection as it was', async (t) => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-payload-files-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const config = loadConfig({ cwd: dir, env: { SERVICE__STORAGE__STORAGE_PATH: path.join(dir, 'storage'), SERVICE__STORAGE__SNAPSHOTS_PATH: path.join(dir, 'snapshots') } });
  const toc = await TableOfContent.open(path.join(dir, 'storage'), loadEngine({ logger }), logger);
  t.teardown(() => toc.close());
  await toc.create('c', parseCreateCollection({ vectors: { size: 2, distance: 'Dot' }, shard_number: 1, on_disk_payload: true }, config));
  const points = Array.from({ length: 50 }, (_, i) => ({ id: normalizePointId(i + 1), vectors: new Map([['', Float32Array.from([i, 1])]]), payload: { n: i, text: `point ${i}` } }));
  const upsert: ReplicaOperation = { kind: 'upsert', points };
  await toc.get('c').update(upsert, { wait: true, ordering: 'weak', timeout: null });
  const snapshots = await Snapshots.open(config, toc, logger, '0.0.0-test');
  const made = await snapshots.createCollection('c');
  const archive = path.join(dir, 'snapshots', 'c', made.name);

  const unpack = async (name: string): Promise<string> => {
    const to = path.join(dir, name);
    await fs.mkdir(to);
    await extractTar(createReadStream(archive), to);
    return to;
  };
  const good = await unpack('good');
  const cp = JSON.parse(await fs.readFile(path.join(good, '0', 'checkpoint.json'), 'utf8')) as { payloads?: { data: string; index: string; length: number } };
  if (cp.payloads === undefined) {
    t.fail('the snapshot has no on-disk payloads');
    return;
  }
  const ref = cp.payloads;
  t.true(ref.length > 0);
  await t.notThrowsAsync(validateUnpacked(good, 'collection', config));

  // The index file with a byte flipped in its entries.
  const flipped = await unpack('flipped');
  const idx = await fs.readFile(path.join(flipped, '0', ref.index));
  idx[idx.length - 8] ^= 0xff;
  await fs.writeFile(path.join(flipped, '0', ref.index), idx);
  const e1 = await t.throwsAsync(validateUnpacked(flipped, 'collection', config), { instanceOf: BadInputError });
  t.regex(e1?.message ?? '', /^Wrong input: Invalid snapshot: shard 0: payload index file is corrupt: checksum mismatch/);

  // The data file cut short of the length the checkpoint names.
  const cut = await unpack('cut');
  await fs.truncate(path.join(cut, '0', ref.data), ref.length - 1);
  const e2 = await t.throwsAsync(validateUnpacked(cut, 'collection', config), { instanceOf: BadInputError });
  t.regex(e2?.message ?? '', new RegExp(`^Wrong input: Invalid snapshot: shard 0: payload data file ${ref.data} has ${ref.length - 1} bytes, the checkpoint names ${ref.length}`));

  // Through the recovery: the archive with the index damaged is refused up front, the collection unchanged.
  const before = await toc.get('c').count(null);
  const bytes = await fs.readFile(archive);
  const at = bytes.indexOf(Buffer.from('QPDX', 'latin1'));
  t.true(at > 0, 'the payload index file is in the archive');
  bytes[at + 10] ^= 0xff;
  const damaged = path.join(dir, 'damaged.snapshot');
  await fs.writeFile(damaged, bytes);
  const e3 = await t.throwsAsync(snapshots.recoverCollection('c', { file: damaged, checksum: null, owned: false }, 'snapshot', null), { instanceOf: BadInputError });
  t.regex(e3?.message ?? '', /^Wrong input: Invalid snapshot: shard 0: payload index file is corrupt/);
  t.is(await toc.get('c').count(null), before);
  const seven: Filter = { must: [{ key: 'n', match: { value: 7 } }] };
  const got = await toc.get('c').count(seven);
  t.is(got, 1, 'the payloads are there');
});
