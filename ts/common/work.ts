/**
 * Counting the work of a long step that moves no archive bytes (a snapshot job's
 * `pinning`, `applying`): the caller runs the step under a counter (`runCounting`),
 * and the code deep inside (shards, vector stores: layers that know nothing of jobs)
 * reports its units as it goes (`countWork`); outside a counted step the reports cost a
 * lookup and go nowhere. The context is an AsyncLocalStorage, so it follows the step
 * through its awaits and no signature changes.
 *
 * Owns: the context and two helpers for byte counts (pieces written, a file another
 * thread is writing). Must never: import anything of Quiver.
 */

import { AsyncLocalStorage } from 'node:async_hooks';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';

export type WorkCounter = (units: number) => void;

const context = new AsyncLocalStorage<WorkCounter>();

/** Runs `fn` with `counter` receiving the units `countWork` reports inside it. */
export function runCounting<T>(counter: WorkCounter, fn: () => Promise<T>): Promise<T> {
  return context.run(counter, fn);
}

/** Reports `units` of work done to the counted step this code runs in, if any. */
export function countWork(units: number): void {
  if (units > 0) context.getStore()?.(units);
}

/** Whether this code runs in a counted step (so that a costly measure is taken only then). */
export function counting(): boolean {
  return context.getStore() !== undefined;
}

/** `pieces`, each counted (its bytes) once it was taken: a writer takes the next when it wrote the last. */
export function* countingPieces(pieces: Iterable<Uint8Array>): Generator<Uint8Array> {
  for (const p of pieces) {
    yield p;
    countWork(p.length);
  }
}

/**
 * While another thread writes `file` through a temp file beside it (`.<name>.tmp-*`, the
 * engine's atomic writes), counts the bytes it grows by every `everyMs`; `stop()` counts
 * the rest from the final file's size. A no-op outside a counted step.
 */
export function watchGrowth(file: string, everyMs = 100): { stop(): Promise<void> } {
  const counter = context.getStore();
  if (counter === undefined) return { stop: async () => undefined };
  const dir = path.dirname(file);
  const prefix = `.${path.basename(file)}.tmp-`;
  let counted = 0;
  let busy = false;
  const look = async (): Promise<void> => {
    if (busy) return;
    busy = true;
    try {
      for (const n of await fs.readdir(dir)) {
        if (!n.startsWith(prefix)) continue;
        const size = (await fs.stat(path.join(dir, n)).catch(() => null))?.size ?? 0;
        if (size > counted) {
          counter(size - counted);
          counted = size;
        }
      }
    } catch {
      // The folder being listed while files come and go: the next look counts it.
    } finally {
      busy = false;
    }
  };
  const timer = setInterval(() => void look(), everyMs);
  timer.unref();
  return {
    stop: async () => {
      clearInterval(timer);
      const size = (await fs.stat(file).catch(() => null))?.size ?? counted;
      if (size > counted) counter(size - counted);
    },
  };
}
