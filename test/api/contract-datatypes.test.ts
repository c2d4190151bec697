/**
 * Vector datatypes through REST: the create bodies with `datatype` (unnamed and named
 * vectors) are valid CreateCollection bodies of the v1.18 document and are accepted;
 * GET shows the datatype; stored vectors come back converted by the reference's rules
 * (uint8: truncate toward zero, saturate to 0..255; float16: nearest half value); query
 * scores match a brute force over the converted vectors; float16 magnitudes beyond its
 * range are refused (400, nothing written); everything survives a restart.
 */

import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { startQuiver } from './helpers';
import { ContractClient, spec } from '../support/contract';
import { COLLECTION, POINTS, QUERY } from '../support/routes';

const storage = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-dt-api-'));
const env = { SERVICE__STORAGE__STORAGE_PATH: storage };
let api: ContractClient;

async function start(): Promise<ContractClient> {
  const server = await startQuiver(env);
  return new ContractClient(server.url, spec(), server);
}

test.before(async () => {
  api = await start();
});

test.after.always(async () => {
  await api?.stop();
  fs.rmSync(storage, { recursive: true, force: true });
});

function create(t: ExecutionContext, name: string, body: unknown) {
  t.deepEqual(spec().validateSchema('CreateCollection', body), [], 'the body is a v1.18 CreateCollection');
  return api.ok(t, 'PUT', COLLECTION, { params: { collection_name: name }, body });
}

function toU8(x: number): number {
  return !(x > 0) ? 0 : x >= 255 ? 255 : Math.trunc(x);
}

test.serial('uint8 and float16 vectors: create, store converted, score, refuse out of range, survive a restart', async (t) => {
  t.is(await create(t, 'dt-u8', { vectors: { size: 4, distance: 'Dot', datatype: 'uint8' } }), true);
  t.is(
    await create(t, 'dt-named', {
      vectors: {
        half: { size: 3, distance: 'Euclid', datatype: 'float16' },
        full: { size: 3, distance: 'Cosine', datatype: 'float32' },
        bytes: { size: 3, distance: 'Cosine', datatype: 'uint8', hnsw_config: { m: 0 } },
      },
    }),
    true,
  );
  const u8info = await api.ok(t, 'GET', COLLECTION, { params: { collection_name: 'dt-u8' } });
  t.deepEqual(u8info.config.params.vectors, { size: 4, distance: 'Dot', datatype: 'uint8' });
  const named = await api.ok(t, 'GET', COLLECTION, { params: { collection_name: 'dt-named' } });
  t.is(named.config.params.vectors.half.datatype, 'float16');
  t.is(named.config.params.vectors.bytes.datatype, 'uint8');

  const input = [
    [-3, 3.9, 300, 254.999],
    [1, 2, 3, 4],
    [10.5, 0.2, 7, 255],
  ];
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: 'dt-u8' },
    query: { wait: true },
    body: { points: input.map((vector, i) => ({ id: i + 1, vector })) },
  });
  const stored = input.map((v) => v.map(toU8));
  const check = async (c: ContractClient) => {
    const got = await c.ok(t, 'POST', POINTS, { params: { collection_name: 'dt-u8' }, body: { ids: [1, 2, 3], with_vector: true } });
    t.deepEqual(
      got.map((p: { id: number; vector: number[] }) => [p.id, p.vector]),
      stored.map((v, i) => [i + 1, v]),
    );
    // The query is converted as stored vectors are: [2.9, -1, 1.2, 0.5] scores as [2, 0, 1, 0].
    const q = [2.9, -1, 1.2, 0.5];
    const cq = q.map(toU8);
    const r = await c.ok(t, 'POST', QUERY, { params: { collection_name: 'dt-u8' }, body: { query: q, limit: 3 } });
    const want = stored
      .map((v, i) => ({ id: i + 1, score: v.reduce((s, x, j) => s + x * cq[j], 0) }))
      .sort((a, b) => b.score - a.score);
    t.deepEqual(
      r.points.map((p: { id: number; score: number }) => [p.id, p.score]),
      want.map((w) => [w.id, w.score]),
    );
  };
  await check(api);

  // float16: a value beyond its range is refused and nothing is written.
  const msg = await api.error(t, 400, 'PUT', POINTS, {
    params: { collection_name: 'dt-named' },
    query: { wait: true },
    body: { points: [{ id: 1, vector: { half: [1, 70000, 0], full: [1, 0, 0], bytes: [1, 2, 3] } }] },
  });
  t.regex(msg, /^Wrong input: .*float16/);
  const none = await api.ok(t, 'POST', POINTS, { params: { collection_name: 'dt-named' }, body: { ids: [1] } });
  t.deepEqual(none, []);
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: 'dt-named' },
    query: { wait: true },
    body: { points: [{ id: 1, vector: { half: [0.1, -2.5, 1000.3], full: [3, 4, 0], bytes: [3, 4, 0] } }] },
  });
  const half = (await api.ok(t, 'POST', POINTS, { params: { collection_name: 'dt-named' }, body: { ids: [1], with_vector: ['half', 'bytes'] } }))[0].vector;
  // Nearest half-precision values of 0.1 and 1000.3.
  t.deepEqual(half, { half: [0.0999755859375, -2.5, 1000.5], bytes: [3, 4, 0] });

  // An unknown datatype is a format error of the body (400).
  await api.error(t, 400, 'PUT', COLLECTION, { params: { collection_name: 'dt-bad' }, body: { vectors: { size: 2, distance: 'Dot', datatype: 'int8' } } }, /datatype/);

  // Restart on the same storage: vectors, conversion and config are all still there.
  await api.stop();
  api = await start();
  await check(api);
  const again = await api.ok(t, 'GET', COLLECTION, { params: { collection_name: 'dt-u8' } });
  t.deepEqual(again.config.params.vectors, { size: 4, distance: 'Dot', datatype: 'uint8' });
});
