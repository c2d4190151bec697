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

/** Runs of each context that have not ended yet. */
const running = new WeakMap<AsyncLocalStorage<unknown>, number>();

/**
 * `als.run(store, fn)`, and the context switched off again once no run of it is left.
 *
 * Why: on Node 20 the first `run` of an AsyncLocalStorage installs V8's promise hooks for
 * the whole process, and they stay until `disable()`: every promise made afterwards (a
 * REST query makes dozens) pays for them, about twice the cost of a bare promise
 * (measured by hand: 100-170 ns per awaited promise without, 330-630 with). A node that
 * took one snapshot would answer every later request slower. Nothing reads these
 * contexts outside a run, so switching one off when its last run ends loses nothing.
 */
export function runScoped<S, T>(als: AsyncLocalStorage<S>, store: S, fn: () => Promise<T>): Promise<T> {
  const key = als as AsyncLocalStorage<unknown>;
  running.set(key, (running.get(key) ?? 0) + 1);
  const end = () => {
    const left = (running.get(key) ?? 1) - 1;
    running.set(key, left);
    if (left === 0) als.disable();
  };
  let result: Promise<T>;
  try {
    result = als.run(store, fn);
  } catch (err) {
    end();
    throw err;
  }
  return result.finally(end);
}

/** Runs `fn` with `counter` receiving the units `countWork` reports inside it. */
export function runCounting<T>(counter: WorkCounter, fn: () => Promise<T>): Promise<T> {
  return runScoped(context, counter, fn);
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
