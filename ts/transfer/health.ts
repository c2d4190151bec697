/**
 * Health checks between peers: every peer asks every other one who it is, twice a
 * second, with a deadline of 1.5 s.
 *
 * Owns: whether a peer counts as alive (it answered, or failed fewer than three checks
 * in a row: a loaded peer may miss one or two), since when it has been down, and telling
 * the rest at every check that finds a peer down (its calls in flight are cancelled, so
 * a stopped peer does not hold requests until their deadline). Must never: change
 * replica states (the supervisor does, through consensus).
 */

import type { Logger } from 'pino';

const INTERVAL_MS = 500;
const PROBE_TIMEOUT_MS = 1500;
/** Failed checks in a row after which a peer is down. */
const FAILURES_DOWN = 3;

interface PeerEntry {
  failures: number;
  downSince: number | null;
  probing: boolean;
}

/** A health check reached the peer's address, and another peer answered there. */
export class OtherPeerError extends Error {
  constructor(
    readonly uri: string,
    readonly answered: string,
    readonly expected: string,
  ) {
    super(`${uri} answers as peer ${answered}, not as peer ${expected}`);
  }
}

/**
 * A health probe of `peer` at `uri`: its WhoIs answer must name `peer`. Another process
 * at a peer's old address (a pod that joined again under a new id, its storage gone)
 * answers too; only the peer itself counts as that peer being up.
 */
export async function probeIdentity(whoIs: (uri: string, timeoutMs: number) => Promise<{ peerId: string }>, peer: string, uri: string, timeoutMs: number): Promise<void> {
  const who = await whoIs(uri, timeoutMs);
  if (who.peerId !== peer) throw new OtherPeerError(uri, who.peerId, peer);
}

export class PeerHealth {
  private readonly entries = new Map<string, PeerEntry>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly opts: {
      /** The other peers now, by id → URI. */
      peers: () => Record<string, string>;
      self: string;
      /** Checks that `peer` answers at `uri` (and is that peer); rejects otherwise. */
      probe: (peer: string, uri: string, timeoutMs: number) => Promise<unknown>;
      /**
       * Called at each failed check while `peer` is down (the first one after it went
       * down included), with why this check failed: `other-peer` when the address
       * answered as another peer (which may be alive and busy there), else `unreachable`.
       */
      onDown: (peer: string, uri: string, why: 'unreachable' | 'other-peer') => void;
      logger: Logger;
    },
  ) {}

  start(): void {
    this.timer ??= setInterval(() => this.tick(), INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Whether `peer` answers (a peer not checked yet counts as alive). */
  alive(peer: string): boolean {
    const e = this.entries.get(peer);
    return e === undefined || e.downSince === null;
  }

  /** Milliseconds `peer` has been down (0 while alive). */
  downFor(peer: string): number {
    const e = this.entries.get(peer);
    return e?.downSince == null ? 0 : Date.now() - e.downSince;
  }

  private tick(): void {
    const peers = this.opts.peers();
    for (const id of this.entries.keys()) if (!(id in peers)) this.entries.delete(id);
    for (const [id, uri] of Object.entries(peers)) {
      if (id === this.opts.self) continue;
      let e = this.entries.get(id);
      if (!e) this.entries.set(id, (e = { failures: 0, downSince: null, probing: false }));
      if (e.probing) continue;
      const entry = e;
      entry.probing = true;
      this.opts
        .probe(id, uri, PROBE_TIMEOUT_MS)
        .then(
          () => {
            if (entry.downSince !== null) this.opts.logger.info({ peer: id, downMs: Date.now() - entry.downSince }, 'peer answers again');
            entry.failures = 0;
            entry.downSince = null;
          },
          (err: unknown) => {
            entry.failures++;
            if (entry.failures < FAILURES_DOWN) return;
            if (entry.downSince === null) {
              entry.downSince = Date.now();
              this.opts.logger.warn({ peer: id, err: err instanceof Error ? err.message : String(err) }, 'peer does not answer health checks');
            }
            // At every failed check while down, not only the first: calls sent since (to a
            // replica not marked Dead yet) would otherwise wait for their whole deadline.
            this.opts.onDown(id, uri, err instanceof OtherPeerError ? 'other-peer' : 'unreachable');
          },
        )
        .finally(() => {
          entry.probing = false;
        });
    }
  }
}
