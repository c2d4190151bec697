/**
 * Waiting in tests: for a condition, never for a fixed time. A test polls the state its
 * assertion reads (an API answer, a log line, a file, a counter) until it holds; the
 * deadline only bounds a broken product and is generous on purpose, because on a loaded
 * machine a condition can take many times what it takes on an idle one. Durations are
 * never asserted here: they belong to the benchmarks (bench/).
 */

/** How long a condition may take before the wait gives up (a bound, not a measure). */
export const DEADLINE_MS = 30_000;

/** How long a process may take to start (node loading the addon, moto's Python) before a test gives up on it. */
export const START_DEADLINE_MS = 60_000;

/**
 * The keep-alive idle timeout (seconds) of the servers tests start: longer than any pause
 * of a test client between two requests, so a client never reuses a connection the
 * server is closing at that very moment (undici's fetch does not retry then).
 */
export const IDLE_CONNECTION_SEC = 600;

/** Lets time pass: only for pacing a loop, never as the wait an assertion depends on. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Resolves with `probe()`'s first value that is not null, undefined or false; a probe
 * that throws counts as not yet (its last error is named if the deadline passes).
 */
export async function waitFor<T>(
  what: string,
  probe: () => T | null | undefined | false | Promise<T | null | undefined | false>,
  timeoutMs = DEADLINE_MS,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown = null;
  for (;;) {
    try {
      const v = await probe();
      if (v !== null && v !== undefined && v !== false) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await sleep(everyMs);
  }
}
