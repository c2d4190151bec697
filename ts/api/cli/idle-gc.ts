/**
 * Gives memory back after a burst of work once the process goes quiet.
 *
 * V8 grows its heap to the high-water mark of a burst (a bulk load's request bodies,
 * parsed points, the write path's temporaries) and, in a server that then idles, keeps
 * it: nothing allocates, so no collection runs and the pages stay resident. Even after
 * a full collection the old space keeps most of its pages: the objects that survive
 * the load (id tables, index entries) are scattered over them, and a regular full
 * collection moves only a few pages' worth. Measured after a 1M-point load with on-disk
 * payloads (docs/storage.md "Memory after a burst"): old space 222 MB holding 76 MB of
 * live objects after a regular full collection.
 *
 * So: once a second, the process's CPU time (all threads) and V8's heap size are read.
 * When the heap has grown by at least GROWTH_BYTES and GROWTH_FRACTION since the last
 * collection this module ran, and the process used under IDLE_CPU of one core for
 * IDLE_TICKS ticks in a row, it runs a full collection. If the old space then holds
 * at least COMPACT_MIN_FREE free bytes and at least COMPACT_FREE_FRACTION of its live
 * bytes, a second full collection compacts every page (V8's
 * `--compact-on-every-full-gc`, set for that collection only): it packs the live
 * objects together and releases the other pages. Compacting copies every live object,
 * so for a moment the process holds them twice; the condition keeps that to heaps
 * where more is given back than copied (after a load of in-memory payloads the old
 * space is mostly live and is left as it is). It never runs while
 * the process is busy, so writes and searches do not pay for it; a request that
 * arrives during the collection waits for it (of the order of 100 ms per 100 MB of
 * live heap; each run is logged at INFO with its duration).
 *
 * `gc` is reached the supported way for code that did not start node with
 * `--expose-gc`: the flag is set at run time and the function is taken from a fresh
 * context, so nothing is added to the server's global object.
 *
 * Owns: the timer and its thresholds. Must never: run a collection while the process is busy.
 */

import * as v8 from 'node:v8';
import * as vm from 'node:vm';

/** Tick period. */
const TICK_MS = 1000;
/** CPU time (all threads) under this fraction of the tick counts as quiet. */
const IDLE_CPU = 0.05;
/** Quiet ticks in a row before a collection. */
const IDLE_TICKS = 2;
/** Heap growth since the last collection this module ran that makes one due: at least this many bytes... */
const GROWTH_BYTES = 32 << 20;
/** ...and at least this fraction of the heap after that collection. */
const GROWTH_FRACTION = 0.25;

/** Old-space free bytes after the full collection from which compaction runs: at least this many... */
const COMPACT_MIN_FREE = 32 << 20;
/** ...and at least this fraction of the old space's live bytes. */
const COMPACT_FREE_FRACTION = 1;

/** V8's full collection, or null when it cannot be reached. */
export function fullGc(): (() => void) | null {
  const own = (globalThis as { gc?: unknown }).gc;
  if (typeof own === 'function') return own as () => void;
  v8.setFlagsFromString('--expose-gc');
  const f = vm.runInNewContext('gc') as unknown;
  return typeof f === 'function' ? (f as () => void) : null;
}

/** A full collection that compacts every old-space page (the flag holds for this call only). */
export function compactingGc(gc: () => void): void {
  v8.setFlagsFromString('--compact-on-every-full-gc');
  try {
    gc();
  } finally {
    v8.setFlagsFromString('--no-compact-on-every-full-gc');
  }
}

export interface IdleGcEvent {
  heapBefore: number;
  heapAfter: number;
  rssBefore: number;
  /** Whether the old space was compacted. */
  compacted: boolean;
  ms: number;
}

export class IdleGc {
  private timer: NodeJS.Timeout | null = null;
  private cpu = process.cpuUsage();
  private quiet = 0;
  /** heapTotal after the last collection this module ran (or at start). */
  private base = v8.getHeapStatistics().total_heap_size;

  constructor(
    private readonly gc: () => void,
    private readonly onCollect: (e: IdleGcEvent) => void = () => undefined,
  ) {}

  start(): void {
    if (this.timer) return;
    this.cpu = process.cpuUsage();
    this.base = v8.getHeapStatistics().total_heap_size;
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private tick(): void {
    const used = process.cpuUsage(this.cpu);
    this.cpu = process.cpuUsage();
    const quiet = (used.user + used.system) / 1000 < IDLE_CPU * TICK_MS;
    this.quiet = quiet ? this.quiet + 1 : 0;
    if (this.quiet < IDLE_TICKS) return;
    const heapBefore = v8.getHeapStatistics().total_heap_size;
    if (heapBefore - this.base < Math.max(GROWTH_BYTES, this.base * GROWTH_FRACTION)) return;
    const rssBefore = process.memoryUsage.rss();
    const t0 = performance.now();
    this.gc();
    const old = v8.getHeapSpaceStatistics().find((sp) => sp.space_name === 'old_space');
    const free = old ? old.space_size - old.space_used_size : 0;
    const compacted = old !== undefined && free >= COMPACT_MIN_FREE && free >= COMPACT_FREE_FRACTION * old.space_used_size;
    if (compacted) compactingGc(this.gc);
    const ms = performance.now() - t0;
    this.base = v8.getHeapStatistics().total_heap_size;
    this.quiet = 0;
    // The collection's own CPU time is not the next tick's load.
    this.cpu = process.cpuUsage();
    this.onCollect({ heapBefore, heapAfter: this.base, rssBefore, compacted, ms });
  }
}
