/**
 * Where the built engine artefacts live at run time.
 *
 * Owns: finding the repository root from the compiled JavaScript (dist/bindings/ or
 * bindings/ when run from source) and the paths of the native addon and the wasm
 * module under it. Must never: build anything, or load what it finds.
 *
 * Environment overrides: QUIVER_ADDON_PATH (a .node file), QUIVER_WASM_PATH (a .wasm
 * file), for packaged deployments that put the artefacts elsewhere.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';

/** The nearest ancestor of `start` holding both package.json and crates/. */
export function findRepoRoot(start: string = __dirname): string {
  let dir = path.resolve(start);
  for (;;) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'crates'))) {
      return dir;
    }
    const parent = path.dirname(dir);
    if (parent === dir) {
      throw new Error(`cannot find the Quiver repository root above ${start}`);
    }
    dir = parent;
  }
}

/** napi-rs names builds `<binaryName>.<platform>-<arch>[-<abi>].node`. */
function platformPrefix(): string {
  return `quiver.${process.platform}-${process.arch}`;
}

function isMusl(): boolean {
  if (process.platform !== 'linux') return false;
  const report = process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined;
  return !report?.header?.glibcVersionRuntime;
}

export const ADDON_DIR = path.join('crates', 'quiver-node');
export const WASM_FILE = path.join('crates', 'quiver-wasm', 'target', 'wasm32-unknown-unknown', 'release', 'quiver_wasm.wasm');

/**
 * Path of the native addon for this platform, or null when none was built: the napi
 * build's `crates/quiver-node/quiver.<platform>-<arch>[-gnu|-musl].node`, else
 * `crates/quiver-node/quiver.node`.
 */
export function addonPath(): string | null {
  const override = process.env.QUIVER_ADDON_PATH;
  if (override) return path.resolve(override);
  let dir: string;
  try {
    dir = path.join(findRepoRoot(), ADDON_DIR);
  } catch {
    return null;
  }
  if (!fs.existsSync(dir)) return null;
  const prefix = platformPrefix();
  const candidates = fs.readdirSync(dir).filter((f) => f.startsWith(prefix) && f.endsWith('.node'));
  const abi = process.platform === 'linux' ? (isMusl() ? '-musl' : '-gnu') : '';
  const exact = candidates.find((f) => f === `${prefix}${abi}.node`);
  if (exact ?? candidates[0]) return path.join(dir, exact ?? candidates[0]);
  // A platform-neutral copy (some build scripts copy the addon to this name).
  const plain = path.join(dir, 'quiver.node');
  return fs.existsSync(plain) ? plain : null;
}

/** Path of the wasm module, or null when it was not built. */
export function wasmPath(): string | null {
  const override = process.env.QUIVER_WASM_PATH;
  if (override) return path.resolve(override);
  try {
    const p = path.join(findRepoRoot(), WASM_FILE);
    return fs.existsSync(p) ? p : null;
  } catch {
    return null;
  }
}
