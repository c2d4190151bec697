/**
 * The engine backend in /metrics: an info-style gauge, 1 for the backend the node
 * runs on (`native` or `wasm`) with its distance kernels as a label.
 *
 * Owns: that gauge. Must never: load or pick an engine (bindings/index.ts does).
 */

import { Gauge, type Registry } from 'prom-client';

export function addEngineGauge(registry: Registry, prefix: string | null, engine: { backend: string; kernels: string }): void {
  const g = new Gauge({
    name: `${prefix ?? ''}engine_backend_info`,
    help: 'The engine backend this node runs on (native addon or its WASM fallback), with its distance kernels',
    labelNames: ['backend', 'kernels'],
    registers: [registry],
  });
  g.set({ backend: engine.backend, kernels: engine.kernels }, 1);
}
