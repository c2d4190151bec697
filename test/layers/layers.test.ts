/**
 * The import graph keeps to the layers of test/layers/graph.ts: every import points
 * down or stays in its folder, and no files import each other around a loop. The
 * checker itself is tested on small made-up graphs, so that a pass means something.
 */

import test from 'ava';

import { checkLayers, cycles, importGraph, repoRoot } from './graph';

test('every import of ts/ and bindings/ points down, and no files form a cycle', (t) => {
  const graph = importGraph(repoRoot());
  t.true(graph.size > 50, `read ${graph.size} files`);
  t.deepEqual(
    checkLayers(graph).map((v) => `${v.kind}: ${v.message}`),
    [],
  );
});

test('the checker finds an upward import, a sideways one, an unplaced file and a cycle', (t) => {
  const graph = new Map<string, string[]>([
    ['ts/shard/a', ['ts/collection/b', 'ts/common/c']],
    ['ts/collection/b', ['ts/shard/a']],
    ['ts/common/c', []],
    ['ts/auth/d', ['ts/snapshots/e']],
    ['ts/snapshots/e', []],
    ['ts/elsewhere', []],
  ]);
  const kinds = checkLayers(graph).map((v) => v.kind).sort();
  t.deepEqual(kinds, ['cycle', 'sideways', 'unplaced', 'upward']);
  t.deepEqual(cycles(graph), [['ts/shard/a', 'ts/collection/b']]);
});
