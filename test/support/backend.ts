/**
 * Runs a test file's bodies on a given engine backend.
 *
 * The storage, crash and snapshot suites are written once; each has a twin under
 * test/backends/ that sets QUIVER_ENGINE (which the servers they spawn inherit, and
 * which `loadEngine()` without an explicit backend reads in-process) and then loads
 * the suite's module, so ava registers the very same tests again in the twin's file,
 * titled by it (e.g. "backends › wasm-kill9 › ..."). The suites themselves run on the
 * default backend (native). `env` holds defaults the twin may set for the suite (a
 * shorter cycle count), which the caller's environment overrides.
 */

import type { Backend } from '../../bindings/engine';
import * as path from 'node:path';

export function runOnBackend(backend: Backend, suite: string, env: Record<string, string> = {}): void {
  process.env.QUIVER_ENGINE = backend;
  for (const [k, v] of Object.entries(env)) if (process.env[k] === undefined) process.env[k] = v;
  // dist/test/support/ → dist/test/<suite>.js
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  require(path.join(__dirname, '..', `${suite}.js`));
}
