/**
 * Loads a Quiver engine through the project's loader (bindings/index: loadEngine), and
 * explains why not when it cannot, so the harness can print a "skipped" row instead of
 * crashing.
 */
import * as path from 'path';
import type { Backend, Engine } from '../../bindings/engine';
import { REPO_ROOT, errMsg } from './common';

type LoaderLogger = { info(obj: object, msg?: string): void };
type LoaderModule = { loadEngine?: (o: { backend: Backend; logger?: LoaderLogger }) => Engine | Promise<Engine> };

/** What the loader logged (it takes an optional logger; we keep its lines for the report). */
export const loaderLog: string[] = [];

export async function loadQuiver(loaderPath: string, backend: Backend): Promise<Engine | string> {
  let mod: LoaderModule;
  const shown = path.relative(REPO_ROOT, loaderPath) || loaderPath;
  try {
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    mod = require(loaderPath) as LoaderModule;
  } catch (e) {
    const msg = errMsg(e).split('\n')[0];
    return (e as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' && msg.includes(path.basename(loaderPath))
      ? `Quiver loader ${shown}.js not built/present yet (run npm run build:ts once bindings/index.ts exists)`
      : `Quiver loader ${shown} failed to load: ${msg}`;
  }
  if (typeof mod.loadEngine !== 'function') return `${shown} has no loadEngine export`;
  try {
    const logger: LoaderLogger = { info: (obj, msg) => void loaderLog.push(`${msg ?? ''} ${JSON.stringify(obj)}`.trim()) };
    const engine = await mod.loadEngine({ backend, logger });
    if (!engine) return `loadEngine({ backend: '${backend}' }) returned nothing`;
    if (engine.backend !== backend) return `loadEngine({ backend: '${backend}' }) returned a '${engine.backend}' engine (fallback) — not benchmarked under the wrong name`;
    return engine;
  } catch (e) {
    return `loadEngine({ backend: '${backend}' }) failed: ${errMsg(e).split('\n')[0]}`;
  }
}
