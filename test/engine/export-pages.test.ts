/**
 * exportLiveFrom, the paged exportLive, on both backends and both index kinds (plain
 * HNSW, flat and quantized; multivector): pages read one after another concatenate to
 * exactly what exportLive returns, whatever the page size; deleted slots (runs longer
 * than a page too) are skipped; a label deleted between pages before its own page is
 * read does not come; bad arguments are refused with QUIVER_INVALID_ARGUMENT and a
 * closed index with QUIVER_CLOSED.
 */

import test, { type ExecutionContext } from 'ava';

import type { IndexOptions, LivePage, LiveVectors, VectorIndex } from '../../bindings/engine';
import { loadEngine } from '../../bindings/index';
import { labelsFrom, randomVectors, silentLogger } from './helpers';

async function rejectsWith(t: ExecutionContext, p: Promise<unknown>, code: string, what: string): Promise<void> {
  const err = await t.throwsAsync(p, undefined, what);
  t.is((err as { code?: string } | undefined)?.code, code, `${what}: expected ${code}, got ${String(err)}`);
}

/** Every page from slot 0 on, concatenated; checks each page's shape on the way. */
async function allPages(t: ExecutionContext, ix: VectorIndex, page: number, dim: number, what: string): Promise<LiveVectors & { calls: number }> {
  const labels: bigint[] = [];
  const vectors: number[] = [];
  const counts: number[] = [];
  let calls = 0;
  const slots = ix.stats().slots;
  for (let from = 0; ; ) {
    const p: LivePage = await ix.exportLiveFrom(from, page);
    calls++;
    t.true(p.labels instanceof BigUint64Array && p.vectors instanceof Float32Array, what);
    t.true(p.labels.length <= page, `${what}: page of ${p.labels.length} > ${page}`);
    const rows = p.counts ? p.counts.reduce((a, b) => a + b, 0) : p.labels.length;
    t.is(p.vectors.length, rows * dim, what);
    t.true(p.next > from || (p.next === slots && p.labels.length === 0), `${what}: next ${p.next} after ${from}`);
    labels.push(...p.labels);
    vectors.push(...p.vectors);
    if (p.counts) counts.push(...p.counts);
    from = p.next;
    if (p.labels.length < page) {
      t.is(p.next, slots, `${what}: a short page ends at the slot count`);
      break;
    }
  }
  return {
    labels: BigUint64Array.from(labels),
    vectors: Float32Array.from(vectors),
    ...(counts.length > 0 ? { counts: Uint32Array.from(counts) } : {}),
    calls,
  };
}

function same(t: ExecutionContext, got: LiveVectors, want: LiveVectors, what: string): void {
  t.deepEqual(Array.from(got.labels), Array.from(want.labels), what);
  t.deepEqual(Array.from(got.vectors), Array.from(want.vectors), what);
  if (want.counts) t.deepEqual(Array.from(got.counts ?? []), Array.from(want.counts), what);
}

const DIM = 8;

for (const backend of ['native', 'wasm'] as const) {
  const engine = loadEngine({ backend, logger: silentLogger });

  for (const options of [
    { dim: DIM, distance: 'Cosine' },
    { dim: DIM, distance: 'Euclid', flat: true },
    { dim: DIM, distance: 'Dot', quantization: { kind: 'scalar' } },
    { dim: DIM, distance: 'Dot', multivector: true, m: 8, efConstruct: 32 },
  ] as IndexOptions[]) {
    const kind = JSON.stringify(options);
    test(`${backend}: exportLiveFrom pages concatenate to exportLive, skip deleted slots and refuse bad arguments (${kind})`, async (t) => {
      const ix = engine.createIndex(options);
      t.teardown(() => ix.close());
      const multi = options.multivector === true;
      const n = 600;
      const counts = multi ? Uint32Array.from({ length: n }, (_, i) => 1 + (i % 3)) : undefined;
      const rows = counts ? counts.reduce((a, b) => a + b, 0) : n;
      // An empty index: one empty page that ends at slot 0.
      const empty = await ix.exportLiveFrom(0, 10);
      t.deepEqual([empty.labels.length, empty.vectors.length, empty.next], [0, 0, 0]);
      const labels = labelsFrom(10, n);
      await ix.add(labels, randomVectors(rows, DIM, 7), undefined, counts);
      // A run of deleted slots longer than the small pages, and scattered ones.
      const gone = labels.filter((l, i) => (i >= 200 && i < 290) || i % 9 === 0);
      await ix.delete(gone);
      // A rewrite takes a new slot at the end.
      await ix.add(new BigUint64Array([11n]), randomVectors(1, DIM, 8), undefined, multi ? new Uint32Array([1]) : undefined);
      const whole = await ix.exportLive();
      t.is(whole.labels.length, ix.stats().count);
      for (const page of [1, 7, 64, 10_000]) {
        const got = await allPages(t, ix, page, DIM, `${kind} page ${page}`);
        same(t, got, whole, `${kind} page ${page}`);
        t.true(got.calls <= Math.floor(whole.labels.length / page) + 2, `${kind} page ${page}: ${got.calls} calls`);
      }
      t.false(Array.from(whole.labels).some((l) => gone.includes(l) && l !== 11n));

      // Deletes between pages: labels after the first page, deleted before their page is read, do not come.
      const first = await ix.exportLiveFrom(0, 50);
      const later = whole.labels.slice(60, 75);
      await ix.delete(later);
      const rest = await ix.exportLiveFrom(first.next, 100_000);
      t.is(rest.next, ix.stats().slots);
      const laterSet = new Set(later);
      t.deepEqual([...first.labels, ...rest.labels], Array.from(whole.labels).filter((l) => !laterSet.has(l)), kind);

      const slots = ix.stats().slots;
      t.deepEqual((await ix.exportLiveFrom(slots, 5)).labels.length, 0);
      for (const [from, max] of [
        [0, 0],
        [slots + 1, 5],
        [-1, 5],
        [0, -3],
        [1.5, 5],
        [0, Number.NaN],
        [0, 2 ** 33],
        ['0', 5],
      ] as Array<[number, number]>) {
        await rejectsWith(t, ix.exportLiveFrom(from, max), 'QUIVER_INVALID_ARGUMENT', `${kind} from ${String(from)} max ${String(max)}`);
      }
      ix.close();
      await rejectsWith(t, ix.exportLiveFrom(0, 5), 'QUIVER_CLOSED', `${kind} closed`);
    });
  }
}
