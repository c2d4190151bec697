/**
 * The rate limit of the bytes a peer sends for its outgoing shard transfers
 * (`storage.performance.shard_transfer_max_mb_per_sec`): every transfer this peer is the
 * source of draws from one budget, so copies leave room for client traffic.
 *
 * Owns: the pacing, a token bucket. A sender reports what it sent after sending it
 * (`take`), outside any lock it holds, and waits until that amount fits the rate: time
 * spent sending counts, unused budget is kept for at most one second (`BURST_MS`), so
 * over any stretch of time at most the limit plus one second's budget goes out; a piece
 * larger than the budget is never refused, only paid for. Must never: hold a lock while it
 * waits (callers call it after releasing theirs), or pace client writes.
 */

export interface Clock {
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

const realClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener('abort', done, { once: true });
    }),
};

/** How much unused budget is kept: this many milliseconds of it. */
export const BURST_MS = 1000;

export class RateLimiter {
  /** Bytes per millisecond; null: no limit. */
  private readonly perMs: number | null;
  /** When the bytes paid for so far have all gone out at the rate. */
  private freeAt = 0;

  /** `mibPerSec`: the limit in MiB per second, null for none. */
  constructor(mibPerSec: number | null, private readonly clock: Clock = realClock) {
    this.perMs = mibPerSec === null ? null : (mibPerSec * 1024 * 1024) / 1000;
  }

  get limited(): boolean {
    return this.perMs !== null;
  }

  /** Records `bytes` sent and waits until they fit the rate (returns early when `signal` aborts). */
  async take(bytes: number, signal?: AbortSignal): Promise<void> {
    if (this.perMs === null || bytes <= 0) return;
    const now = this.clock.now();
    this.freeAt = Math.max(this.freeAt, now - BURST_MS) + bytes / this.perMs;
    const wait = this.freeAt - now;
    if (wait >= 1) await this.clock.sleep(Math.ceil(wait), signal);
  }
}
