/**
 * The engine loader: the one place that picks a backend.
 *
 * Owns: choosing native or WASM (native unless asked otherwise or the addon cannot
 * load), logging the choice once with its reason, and keeping one engine per
 * backend per process. Must never: be bypassed — nothing above `bindings/` imports a
 * backend module directly.
 *
 * Choice, first match wins:
 *   1. `options.backend` ('native' fails loudly if the addon cannot load);
 *   2. `QUIVER_ENGINE=wasm` / `QUIVER_ENGINE=native` in the environment;
 *   3. native, falling back to WASM when the addon file is missing or fails to load.
 */

import type { Backend, Engine } from './engine';
import { addonPath, wasmPath } from './artifacts';
import { EngineError } from './errors';
import { loadAddon, NativeEngine } from './native';
import { compileWasm, WasmEngine } from './wasm';

export * from './engine';
export { EngineError } from './errors';
export { requestStarted, requestFinished } from './demand';

export interface EngineLogger {
  info(obj: object, msg?: string): void;
}

export interface LoadEngineOptions {
  backend?: Backend;
  logger?: EngineLogger;
}

const engines = new Map<Backend, Engine>();

let defaultLogger: EngineLogger | null = null;
function pinoLogger(): EngineLogger {
  if (!defaultLogger) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const pino = require('pino') as (opts: object) => EngineLogger;
    defaultLogger = pino({ name: 'quiver-engine' });
  }
  return defaultLogger;
}

function loadNative(): NativeEngine {
  const file = addonPath();
  if (!file) throw new Error('native addon not built (no crates/quiver-node/quiver.<platform>.node; run the addon build)');
  return new NativeEngine(loadAddon(file));
}

function loadWasm(): WasmEngine {
  const file = wasmPath();
  if (!file) throw new Error('wasm module not built (no crates/quiver-wasm/target/.../quiver_wasm.wasm; run the wasm build)');
  return new WasmEngine(compileWasm(file));
}

function envBackend(): Backend | undefined {
  const v = process.env.QUIVER_ENGINE;
  if (v === 'wasm' || v === 'native') return v;
  return undefined;
}

function cached(backend: Backend, load: () => Engine): Engine {
  let e = engines.get(backend);
  if (!e) {
    e = load();
    engines.set(backend, e);
  }
  return e;
}

/** Returns the engine, loading it on first use. */
export function loadEngine(options: LoadEngineOptions = {}): Engine {
  const log = options.logger ?? pinoLogger();
  const requested = options.backend ?? envBackend();
  let engine: Engine;
  let reason: string;
  if (requested === 'wasm') {
    engine = cached('wasm', loadWasm);
    reason = options.backend ? 'requested by caller' : 'QUIVER_ENGINE=wasm';
  } else if (requested === 'native') {
    engine = cached('native', loadNative);
    reason = options.backend ? 'requested by caller' : 'QUIVER_ENGINE=native';
  } else {
    try {
      engine = cached('native', loadNative);
      reason = 'default';
    } catch (err) {
      engine = cached('wasm', loadWasm);
      reason = `native addon unavailable: ${(err as Error).message}`;
    }
  }
  log.info({ backend: engine.backend, kernels: engine.kernels, reason }, 'quiver engine loaded');
  return engine;
}

/**
 * For the storage layer: throws unless `engine` can persist (index files, WAL), with
 * a message that says how to get a durable engine.
 */
export function requireDurable(engine: Engine): void {
  if (!engine.durable) {
    throw new EngineError(
      'QUIVER_UNSUPPORTED',
      `the ${engine.backend} engine backend is memory-only and cannot back on-disk storage; ` +
        'build the native addon (crates/quiver-node) and unset QUIVER_ENGINE=wasm',
    );
  }
}
