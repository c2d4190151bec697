/**
 * What the consensus leader does for replicas, once a second: a replica whose peer has
 * been down for DEAD_AFTER_MS is marked Dead; a Dead replica whose peer answers again is
 * brought back by a recovery transfer from an active replica; a transfer whose source or
 * target is down is aborted. Every change is a consensus operation, so a new leader
 * carries on where the old one stopped.
 *
 * Owns: those decisions and their pacing (one proposal per replica at a time). Must
 * never: move data (stream.ts does) or act on a peer that is not the leader.
 */

import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';

import type { TransferMethod } from '../collection/cluster-link';
import { isActive } from '../collection/replica-state';
import type { ClusterState, MetaOp } from '../storage/cluster-state';

/** A replica's peer down this long is marked Dead. */
export const DEAD_AFTER_MS = 4000;
const INTERVAL_MS = 1000;
const PROPOSE_TIMEOUT_MS = 10_000;

export interface SupervisorContext {
  self: string;
  /** `storage.node_type`: a Listener peer turns its active replicas into listeners. */
  listener: boolean;
  /** `storage.performance.{incoming,outgoing}_shard_transfers_limit`: automatic transfers a peer takes part in at once. */
  incomingLimit: number;
  outgoingLimit: number;
  /** Method of recovery transfers (`storage.shard_transfer_method`, else wal_delta). */
  recoveryMethod: TransferMethod;
  isLeader(): boolean;
  state(): ClusterState;
  alive(peer: string): boolean;
  downFor(peer: string): number;
  propose(op: MetaOp, timeoutMs: number): Promise<unknown>;
  logger: Logger;
}

export class ReplicaSupervisor {
  private timer: NodeJS.Timeout | null = null;
  /** Proposals in flight, by what they are about. */
  private readonly pending = new Set<string>();
  /**
   * When this peer first saw each transfer listed (by collection, shard, peers and id).
   * A transfer is aborted for a peer that is down only once it has itself lived
   * DEAD_AFTER_MS: a peer that was down and has just come back may still count as down
   * here until its next health check answers, and a transfer started to it meanwhile
   * must not be aborted for that.
   */
  private readonly transferSeen = new Map<string, number>();

  constructor(private readonly ctx: SupervisorContext) {}

  start(): void {
    this.timer ??= setInterval(() => this.tick(), INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * On a listener peer (any peer, not only the leader): its Active replicas become
   * Listener replicas, which get every write and serve reads only when nothing else can.
   * Consensus keeps a shard's last active replica Active.
   */
  private listen(): void {
    let state: ClusterState;
    try {
      state = this.ctx.state();
    } catch {
      return;
    }
    for (const name of state.collectionNames()) {
      for (const shard of state.collection(name)!.shards) {
        const mine = shard.replicas[this.ctx.self];
        const others = Object.entries(shard.replicas).some(([p, st]) => p !== this.ctx.self && isActive(st));
        if (mine === 'Active' && others) {
          this.propose(`listen/${name}/${shard.id}`, { op: 'setReplicaState', collection: name, shard: shard.id, peer: this.ctx.self, state: 'Listener', from: 'Active' }, 'this listener peer makes its replica a listener');
        }
      }
    }
  }

  private up(peer: string): boolean {
    return peer === this.ctx.self || this.ctx.alive(peer);
  }

  private down(peer: string): boolean {
    return peer !== this.ctx.self && this.ctx.downFor(peer) >= DEAD_AFTER_MS;
  }

  private propose(key: string, op: MetaOp, what: string): void {
    if (this.pending.has(key)) return;
    this.pending.add(key);
    this.ctx.logger.info({ op }, what);
    this.ctx
      .propose(op, PROPOSE_TIMEOUT_MS)
      .catch((err: unknown) => this.ctx.logger.debug({ err, op }, `${what}: refused or not committed`))
      .finally(() => this.pending.delete(key));
  }

  /** One pass over every shard of every collection. */
  tick(): void {
    if (this.ctx.listener) this.listen();
    if (!this.ctx.isLeader()) return;
    const state = this.ctx.state();
    // Transfers running per peer, as target and as source (every collection's).
    const incoming = new Map<string, number>();
    const outgoing = new Map<string, number>();
    for (const name of state.collectionNames()) {
      for (const t of state.collection(name)!.transfers ?? []) {
        incoming.set(t.to, (incoming.get(t.to) ?? 0) + 1);
        outgoing.set(t.from, (outgoing.get(t.from) ?? 0) + 1);
      }
    }
    const now = Date.now();
    const listed = new Set<string>();
    for (const name of state.collectionNames()) {
      const c = state.collection(name)!;
      const transfers = c.transfers ?? [];
      for (const t of transfers) {
        const key = `${name}/${t.shard}/${t.from}/${t.to}/${t.id ?? ''}`;
        listed.add(key);
        const seen = this.transferSeen.get(key) ?? now;
        this.transferSeen.set(key, seen);
        if (now - seen >= DEAD_AFTER_MS && (this.down(t.from) || this.down(t.to))) {
          this.propose(`abort/${name}/${t.shard}`, { op: 'finishTransfer', collection: name, shard: t.shard, from: t.from, to: t.to, ok: false }, 'aborting a shard transfer: a peer of it is down');
        }
      }
      for (const shard of c.shards) {
        const inTransfer = transfers.some((t) => t.shard === shard.id);
        for (const [peer, st] of Object.entries(shard.replicas)) {
          if (st !== 'Dead' && !inTransfer && this.down(peer)) {
            this.propose(`dead/${name}/${shard.id}/${peer}`, { op: 'setReplicaState', collection: name, shard: shard.id, peer, state: 'Dead' }, 'marking a replica Dead: its peer is down');
          }
        }
        if (inTransfer) continue;
        const dead = Object.entries(shard.replicas).find(([peer, st]) => st === 'Dead' && this.up(peer));
        if (dead === undefined) continue;
        if ((incoming.get(dead[0]) ?? 0) >= this.ctx.incomingLimit) continue;
        const sources = Object.entries(shard.replicas)
          .filter(([peer, st]) => isActive(st) && this.up(peer) && (outgoing.get(peer) ?? 0) < this.ctx.outgoingLimit)
          .map(([peer]) => peer);
        if (sources.length === 0) continue;
        // This peer first when it holds an active replica (no hop to start it), else the lowest id.
        const from = sources.includes(this.ctx.self) ? this.ctx.self : sources.sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1))[0];
        incoming.set(dead[0], (incoming.get(dead[0]) ?? 0) + 1);
        outgoing.set(from, (outgoing.get(from) ?? 0) + 1);
        this.propose(
          `recover/${name}/${shard.id}`,
          { op: 'startTransfer', collection: name, transfer: { shard: shard.id, from, to: dead[0], method: this.ctx.recoveryMethod, kind: 'recovery', id: randomUUID() } },
          'recovering a Dead replica',
        );
      }
    }
    for (const key of this.transferSeen.keys()) if (!listed.has(key)) this.transferSeen.delete(key);
  }
}
