/**
 * Whether the servers of this process are answering concurrent clients.
 *
 * The API layers report each request they begin (`requestStarted`, with its connection)
 * and end (`requestFinished`). The search fast path (native.ts) asks `concurrent()`:
 * while requests overlap, or requests from different connections follow each other
 * within CONCURRENT_WINDOW_MS, a search does not run inline on the event loop but takes
 * the hop to a pool thread. The event loop is then the scarce thread: reading, parsing
 * and answering the other clients' requests is work only it can do, while the search
 * can run on another core. One client at a time (one connection, each request after
 * the last answer), in-process callers and optimizer jobs keep the inline path.
 *
 * Why connections and not only overlap: node reads one socket per callback, and a
 * search run inline answers its request before the next socket is read, so requests
 * never overlap when they are served one by one, however many clients wait.
 *
 * Owns: the two counts. Must never: decide where a search runs (native.ts does).
 */

/** Requests from two connections this close together (ms) mean concurrent clients. */
export const CONCURRENT_WINDOW_MS = 1;
/** How long (ms) one such sign keeps searches off the event loop. */
export const CONCURRENT_HOLD_MS = 50;

let active = 0;
let lastConnection: unknown = undefined;
let lastStartedAt = -Infinity;
let concurrentUntil = -Infinity;

/** A request began on `connection` (a socket, or any value naming the client's connection); `now` for tests. */
export function requestStarted(connection: unknown, now = performance.now()): void {
  if (active > 0 || (connection !== lastConnection && now - lastStartedAt < CONCURRENT_WINDOW_MS)) concurrentUntil = now + CONCURRENT_HOLD_MS;
  active++;
  lastConnection = connection;
  lastStartedAt = now;
}

/** A request's answer was written (or the request was dropped). */
export function requestFinished(): void {
  if (active > 0) active--;
}

/** Whether the servers are answering concurrent clients now (see above); `now` for tests. */
export function concurrent(now = performance.now()): boolean {
  return active > 1 || now < concurrentUntil;
}
