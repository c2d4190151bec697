/**
 * Marking a replica Dead through metadata consensus before a write is answered: for a
 * replica that failed a replicated write (ReplicaSet.replicate, through the cluster
 * link's `deactivate`) and for the target of a shard transfer that missed a write its
 * source forwarded (ts/transfer/outgoing.ts).
 *
 * Owns: proposing the marking again while no leader takes it, for a bounded time; one
 * proposal in flight per replica, shared by the writes waiting on it; the markings left
 * to the background (proposed again every second until consensus takes them or changes
 * the replica), kept on disk (PendingMarkings) before the write that waits on one is
 * answered, and taken up again after a restart (`resume`). Must never: decide which
 * replica failed (its callers do) or change a replica's state itself (consensus does).
 */

import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';

import { BadInputError, NotFoundError, QuiverError, ShardUnavailableError, leaderTrouble } from '../../common/errors';
import type { ShardTarget } from '../../collection/cluster-link';
import { isActive, type ReplicaState } from '../../collection/replica-state';
import type { MetaOp } from '../../storage/cluster-state';
import { markingKey, type PendingMarking, type PendingMarkings } from '../../storage/pending-markings';

/**
 * How long a write waits for its failed replicas to be marked Dead across a leader change
 * (an election takes 1-2 s); after that the marking is deferred: proposed again in the
 * background, the replica left out locally meanwhile.
 */
const DEACTIVATE_TIMEOUT_MS = 5_000;
/** One proposal's bound, and the pause between two proposals of one marking that found no leader. */
const DEACTIVATE_ATTEMPT_MS = 2_000;
const DEACTIVATE_RETRY_MS = 250;
/** How often deferred Dead markings are proposed again. */
const DEACTIVATE_BACKGROUND_MS = 1000;

/** A deferred marking that could not be written to disk: the write that waits on it fails (503); the marking is proposed again. */
class MarkingNotKept extends ShardUnavailableError {}

/** The shard's last active replica is not marked Dead (consensus would refuse it too). */
class MarkingRefused extends ShardUnavailableError {}

/**
 * Whether consensus (or the check before it) refused a marking for good: the last active
 * replica, a replica in a transfer. Any other failure (consensus stopped, a proposal lost
 * in a leader change, a file not written) is tried again.
 */
function refused(err: unknown): boolean {
  return err instanceof MarkingRefused || err instanceof BadInputError;
}

export interface DeadMarkingContext {
  /** The replicas of the shard as this peer applied consensus now ({}: no such shard, or the collection was re-created); throws while consensus does not run here. */
  replicas(target: ShardTarget): Record<string, ReplicaState>;
  propose(op: MetaOp, timeoutMs: number): Promise<unknown>;
  /** Resolves once the local changes of the consensus entries applied so far are made. */
  settled(): Promise<void>;
  /** Where deferred markings are kept across restarts (null: in memory only, as in unit tests). */
  store: PendingMarkings | null;
  /** This peer's applied consensus index (0 before consensus runs). */
  appliedIndex(): number;
  /** Consensus refused a marking left to the background while its replica is Active: the replica sets that left that replica out take it back. */
  ended(target: ShardTarget, peer: string): void;
  logger: Logger;
}

export class DeadMarking {
  /** Dead markings in flight, by collection/shard/peer: concurrent failed writes share one proposal. */
  private readonly deactivating = new Map<string, Promise<'marked' | 'deferred'>>();
  /** Dead markings a write gave up waiting for, proposed again every DEACTIVATE_BACKGROUND_MS. */
  private readonly unmarked = new Map<string, PendingMarking>();
  private unmarkedTimer: NodeJS.Timeout | null = null;

  constructor(private readonly ctx: DeadMarkingContext) {
    for (const m of ctx.store?.entries() ?? []) this.unmarked.set(markingKey(m.target, m.peer), m);
  }

  /**
   * Marks `peer`'s replica Dead and resolves `marked` once this peer applied it. While
   * no leader takes the proposal (the leader was the peer that failed and an election
   * runs, or no majority is up: one peer of two) it is proposed again until
   * DEACTIVATE_TIMEOUT_MS; then it resolves `deferred`: the write that waits on it goes
   * on without that replica (its replica set leaves it out locally), and the marking is
   * proposed again in the background until consensus takes it (otherwise a peer back
   * within seconds would keep an Active replica without that write, for good). Rejects
   * when consensus refuses: the shard's last active replica stays Active.
   */
  mark(target: ShardTarget, peer: string, reason: string): Promise<'marked' | 'deferred'> {
    const key = markingKey(target, peer);
    let p = this.deactivating.get(key);
    if (p) return p;
    p = (async () => {
      const deadline = Date.now() + DEACTIVATE_TIMEOUT_MS;
      let logged = false;
      for (;;) {
        const replicas = this.ctx.replicas(target);
        const state = replicas[peer];
        // Consensus has it out already (e.g. a move's source that dropped its replica): the
        // write waiting on this must see the placement that says so (ReplicaSet.replicate
        // sends itself again to the replicas of a changed placement), and this peer's
        // replica sets take it only once the entry's local changes are made.
        if (state === undefined || state === 'Dead') {
          await this.ctx.settled();
          return 'marked';
        }
        // The shard's last active replica stays Active (consensus would refuse): no proposal for it.
        if (isActive(state) && !Object.entries(replicas).some(([p, st]) => p !== peer && isActive(st))) {
          throw new MarkingRefused(`the replica on peer ${peer} is the last active replica of shard ${target.shard} of collection \`${target.collection}\`: it stays Active`);
        }
        if (!logged) this.ctx.logger.warn({ collection: target.collection, shard: target.shard, peer, reason }, 'marking a replica Dead');
        logged = true;
        try {
          await this.ctx.propose({ op: 'setReplicaState', collection: target.collection, shard: target.shard, peer, state: 'Dead' }, Math.min(DEACTIVATE_ATTEMPT_MS, Math.max(500, deadline - Date.now())));
          this.forget(key);
          return 'marked';
        } catch (err) {
          // Gone meanwhile (removed, or the collection re-created): nothing to mark.
          if (err instanceof NotFoundError || (err instanceof BadInputError && this.ctx.replicas(target)[peer] === 'Dead')) {
            await this.ctx.settled();
            return 'marked';
          }
          if (leaderTrouble(err) && Date.now() + DEACTIVATE_RETRY_MS < deadline) {
            await sleep(DEACTIVATE_RETRY_MS);
            continue;
          }
          if (leaderTrouble(err)) {
            // Kept on disk before the write goes on without that replica (a failure to keep it fails the write).
            await this.markLater(key, target, peer, reason);
            return 'deferred';
          }
          throw err instanceof QuiverError ? err : new ShardUnavailableError(String(err));
        }
      }
    })().finally(() => this.deactivating.delete(key));
    this.deactivating.set(key, p);
    return p;
  }

  private async markLater(key: string, target: ShardTarget, peer: string, reason: string): Promise<void> {
    const known = this.unmarked.get(key);
    if (known === undefined) this.ctx.logger.warn({ collection: target.collection, shard: target.shard, peer }, 'a replica that missed a write could not be marked Dead yet: proposing it again in the background');
    const m: PendingMarking = known ?? { target, peer, reason, appliedAt: this.ctx.appliedIndex() };
    this.unmarked.set(key, m);
    // Proposed again in the background whatever happens to the file.
    this.startBackground();
    try {
      await this.ctx.store?.add(m);
    } catch (err) {
      throw new MarkingNotKept(`the Dead marking of the replica on peer ${peer} of shard ${target.shard} of collection \`${target.collection}\` could not be written to disk (${String(err)}); it is proposed again in the background`);
    }
  }

  /**
   * Starts proposing again the markings a previous run of this peer left to the
   * background (call once consensus runs here). They are known from construction on, so
   * this peer's replica sets leave those replicas out from their first placement
   * (`pendingFor`); once this peer applied consensus as far as when a marking was
   * deferred, a marking whose replica consensus no longer has Active is dropped.
   */
  resume(): void {
    if (this.unmarked.size > 0) this.startBackground();
  }

  /**
   * Drops a marking from the background set and from disk. `readmit`: consensus refused
   * it while the replica is Active, so no placement will take the replica back: the
   * replica sets that left it out do (otherwise the placement that changed its state,
   * once applied here, does).
   */
  private forget(key: string, readmit = false): void {
    const m = this.unmarked.get(key);
    if (m === undefined) return;
    this.unmarked.delete(key);
    if (readmit) this.ctx.ended(m.target, m.peer);
    this.ctx.store?.remove(key).catch((err: unknown) => this.ctx.logger.warn({ err, marking: key }, 'could not update the file of pending Dead markings (an entry left in it is checked again at start-up)'));
  }

  private startBackground(): void {
    if (this.unmarkedTimer !== null) return;
    this.unmarkedTimer = setInterval(() => {
      for (const [k, u] of this.unmarked) {
        // A restarted peer replays older entries first: their states say nothing of this marking.
        if (this.ctx.appliedIndex() < u.appliedAt) continue;
        // Anything but Active: consensus changed the replica since (Dead, or a recovery
        // under way), and a recovery gives it the whole shard.
        if (this.ctx.replicas(u.target)[u.peer] !== 'Active') {
          this.forget(k);
          continue;
        }
        if (this.deactivating.has(k)) continue;
        this.mark(u.target, u.peer, u.reason).then(
          (outcome) => {
            if (outcome === 'marked') this.forget(k);
          },
          (err: unknown) => {
            if (refused(err)) {
              this.forget(k, true);
              this.ctx.logger.warn({ err, collection: u.target.collection, shard: u.target.shard, peer: u.peer }, 'consensus refused to mark a replica Dead');
            } else if (!leaderTrouble(err)) {
              this.ctx.logger.warn({ err, collection: u.target.collection, shard: u.target.shard, peer: u.peer }, 'could not mark a replica Dead: proposing it again');
            }
          },
        );
      }
      if (this.unmarked.size === 0 && this.unmarkedTimer !== null) {
        clearInterval(this.unmarkedTimer);
        this.unmarkedTimer = null;
      }
    }, DEACTIVATE_BACKGROUND_MS);
    this.unmarkedTimer.unref();
  }

  /** The peers of `target` whose marking is left to the background. */
  pendingFor(target: ShardTarget): string[] {
    const out: string[] = [];
    for (const u of this.unmarked.values()) {
      if (u.target.collection === target.collection && u.target.uuid === target.uuid && u.target.shard === target.shard) out.push(u.peer);
    }
    return out;
  }

  /** Markings left to the background, as `collection/uuid/shard/peer` (for tests and diagnostics). */
  pending(): string[] {
    return [...this.unmarked.keys()];
  }

  close(): void {
    if (this.unmarkedTimer !== null) clearInterval(this.unmarkedTimer);
    this.unmarkedTimer = null;
  }
}
