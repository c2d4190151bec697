/**
 * Long CPU work on the main thread in slices: the work is a generator that yields
 * every little while (a few hundred entries decoded, a few MB checksummed), and
 * `runSliced` gives the event loop a turn whenever a slice has run for `sliceMs`, so
 * loading a shard of a million points never holds requests up for more than that.
 * `runAll` runs the same generator to the end at once, for synchronous callers.
 *
 * Owns: the driving of such generators. Must never: hold state between calls.
 */

import { setImmediate as nextTurn } from 'node:timers/promises';

import { CRC32C_INIT, crc32cFinish, crc32cUpdate } from '../common/crc32c';

/** The work of one call, done in steps: yields between steps, returns the result. */
export type Steps<T> = Generator<void, T, void>;

/** Main-thread time one slice may take before the event loop gets a turn. */
export const SLICE_MS = 5;

export async function runSliced<T>(steps: Steps<T>, sliceMs = SLICE_MS): Promise<T> {
  let deadline = performance.now() + sliceMs;
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    if (performance.now() >= deadline) {
      await nextTurn();
      deadline = performance.now() + sliceMs;
    }
  }
}

export function runAll<T>(steps: Steps<T>): T {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/** CRC32C of `bytes[start, end)`, computed in steps of `stepBytes`. */
export function* crc32cSteps(bytes: Uint8Array, start = 0, end = bytes.length, stepBytes = 1 << 20): Steps<number> {
  let c = CRC32C_INIT;
  for (let at = start; at < end; at += stepBytes) {
    c = crc32cUpdate(c, bytes, at, Math.min(end, at + stepBytes));
    yield;
  }
  return crc32cFinish(c);
}
