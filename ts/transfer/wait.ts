/** Polls `check` until it is true; rejects after `timeoutMs` (with `what`) or resolves early when `stop()` is true. */
export async function waitUntil(check: () => Promise<boolean>, timeoutMs: number, stop: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (stop()) return;
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
