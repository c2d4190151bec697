/**
 * The engine backend in /metrics: an info-style gauge, 1 for the backend the node
 * runs on (`native` or `wasm`) with its distance kernels as a label; and, where the
 * backend chooses where a search runs (native), a counter of its plain searches by
 * path (Engine.searchPaths): `inline` (on the event loop), `pool` (the hop to a pool
 * thread; a batch's searches one per query), and `next_turn`, the waits for the loop's
 * next turn (a search that waited is then counted again where it ran). Filtered and
 * exact searches always take the pool and are not counted, nor are multivector and
 * rule (recommend, discover) searches.
 *
 * Owns: those metrics. Must never: load or pick an engine (bindings/index.ts does).
 */

import { Counter, Gauge, type Registry } from 'prom-client';

type SearchPaths = { inline: number; nextTurn: number; pool: number };

export function addEngineGauge(registry: Registry, prefix: string | null, engine: { backend: string; kernels: string; searchPaths?(): SearchPaths }): void {
  const g = new Gauge({
    name: `${prefix ?? ''}engine_backend_info`,
    help: 'The engine backend this node runs on (native addon or its WASM fallback), with its distance kernels',
    labelNames: ['backend', 'kernels'],
    registers: [registry],
  });
  g.set({ backend: engine.backend, kernels: engine.kernels }, 1);
  if (engine.searchPaths === undefined) return;
  const paths = () => engine.searchPaths!();
  new Counter({
    name: `${prefix ?? ''}engine_searches_total`,
    help: 'Plain (unfiltered, approximate, single-vector) searches of this node by where they ran, inline on the event loop or on a pool thread (batched ones there, one per query); next_turn counts the waits for the loop\'s next turn (the search is then counted where it ran)',
    labelNames: ['path'],
    registers: [registry],
    collect() {
      // The engine keeps the tallies; the counter shows them.
      const p = paths();
      this.reset();
      this.inc({ path: 'inline' }, p.inline);
      this.inc({ path: 'next_turn' }, p.nextTurn);
      this.inc({ path: 'pool' }, p.pool);
    },
  });
}
