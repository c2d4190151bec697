/**
 * addVectorName (ts/collection/config.ts): a named vector added must leave a
 * configuration that a snapshot of the collection can be recovered with (recovery parses
 * the stored config.json as a create request, ts/snapshots/archive.ts). A dense name
 * added to a collection whose dense vector is unnamed gave `vectors: {"": ..., name: ...}`,
 * which recovery refuses (invalid vector name ""): every snapshot of the collection was
 * unusable from then on.
 */

import test from 'ava';

import { addVectorName, parseCreateCollection, parseVectorNameConfig, type CollectionConfig } from '../../ts/collection/config';
import { BadInputError } from '../../ts/common/errors';
import { loadConfig } from '../../ts/config';

const config = loadConfig({ env: {} });

/** The create body a snapshot's config.json becomes at recovery (the vector part). */
function recreate(c: CollectionConfig): CollectionConfig {
  return parseCreateCollection({ vectors: c.params.vectors, ...(c.params.sparse_vectors ? { sparse_vectors: c.params.sparse_vectors } : {}) }, config);
}

const dense3 = parseVectorNameConfig({ dense: { size: 3, distance: 'Dot' } });

test('a dense vector cannot take the name of a sparse vector', (t) => {
  const c = parseCreateCollection({ vectors: { d: { size: 2, distance: 'Dot' } }, sparse_vectors: { s: {} } }, config);
  t.throws(() => addVectorName(c, 's', dense3), { instanceOf: BadInputError, message: /already exists/ });
  // A free name is added, and the result is a configuration recovery takes.
  const next = addVectorName(c, 'e', dense3);
  t.deepEqual(Object.keys(recreate(next).params.vectors as object).sort(), ['d', 'e']);
});

test('a collection with the unnamed vector: adding a named one is refused (the result could not be recovered from a snapshot)', (t) => {
  const c = parseCreateCollection({ vectors: { size: 2, distance: 'Dot' } }, config);
  t.throws(() => addVectorName(c, 'x', dense3), { instanceOf: BadInputError, message: /unnamed/ });
  t.notThrows(() => recreate(c));
  // A sparse vector beside the unnamed dense one is a configuration recovery takes.
  const withSparse = addVectorName(c, 'sp', parseVectorNameConfig({ sparse: {} }));
  t.notThrows(() => recreate(withSparse));
});
