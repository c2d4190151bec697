/**
 * The on-disk rule of ts/collection/config.ts (on-disk vectors and memmap_threshold need
 * quantization) is checked where a request changes the configuration, never when a
 * committed entry applies (a peer replaying an entry an older version accepted must
 * agree with one that applied it then), and does not refuse every later change of a
 * collection that already breaks it (older versions accepted memmap_threshold and
 * ignored it).
 */

import test from 'ava';

import { addVectorName, applyCollectionUpdate, parseCreateCollection, type CollectionConfig } from '../../ts/collection/config';
import { BadInputError } from '../../ts/common/errors';
import { loadConfig } from '../../ts/config';

const config = loadConfig({ env: {} });

function plain(): CollectionConfig {
  return parseCreateCollection({ vectors: { size: 4, distance: 'Dot' } }, config);
}

test('a request that puts unquantized vectors on disk is refused; the same change applied from the log is not', (t) => {
  const patch = { vectors: { '': { on_disk: true } } };
  t.throws(() => applyCollectionUpdate(plain(), patch), { instanceOf: BadInputError, message: /on_disk: true needs quantization/ });
  t.true(applyCollectionUpdate(plain(), patch, false).config.params.vectors && true);
  const memmap = { optimizers_config: { memmap_threshold: 1000 } };
  t.throws(() => applyCollectionUpdate(plain(), memmap), { instanceOf: BadInputError, message: /memmap_threshold: 1000 needs quantization/ });
  t.is(applyCollectionUpdate(plain(), memmap, false).config.optimizer_config.memmap_threshold, 1000);
  // With quantization the same change is accepted.
  const quantized = applyCollectionUpdate(plain(), { quantization_config: { scalar: { type: 'int8' } } }).config;
  t.is(applyCollectionUpdate(quantized, memmap).config.optimizer_config.memmap_threshold, 1000);
  // A named vector added on disk without quantization: refused as a request only.
  const named = parseCreateCollection({ vectors: { a: { size: 4, distance: 'Dot' } } }, config);
  const dense = { dense: { size: 4, distance: 'Dot' as const, on_disk: true } };
  t.throws(() => addVectorName(named, 'b', dense), { instanceOf: BadInputError });
  t.truthy(addVectorName(named, 'b', dense, false));
});

test('a collection that already breaks the rule (memmap_threshold kept by an older version) still takes unrelated changes', (t) => {
  const legacy = applyCollectionUpdate(plain(), { optimizers_config: { memmap_threshold: 500 } }, false).config;
  const next = applyCollectionUpdate(legacy, { optimizers_config: { indexing_threshold: 1234 } }).config;
  t.is(next.optimizer_config.indexing_threshold, 1234);
});
