/**
 * What a collection needs from the cluster around it, as an interface the layers above
 * implement (ts/api/p2p over gRPC, ts/transfer, consensus through ts/storage): replicas
 * on other peers, marking replicas Dead, forwarding an ordered write to the shard's
 * leader replica, and the clocks that tag replicated writes.
 *
 * Owns: the shape of those calls. Must never: name a transport or a status code.
 */

import type { LocalReplica } from './local-replica';
import type { ReplicaOperation } from './replica-operation';
import type { Replica, UpdateOptions } from './replica';

/** One shard of one collection, as peers name it to each other (the uuid tells a re-created collection from the old one). */
export interface ShardTarget {
  collection: string;
  uuid: string;
  shard: number;
}

/** A clock held by one replicated write: the write carries (this peer, clock, tick). */
export interface HeldClock {
  readonly clock: number;
  readonly tick: bigint;
  /** Lets the clock go; `used`: some replica logged the tick (when none did, the tick is given back). */
  release(used: boolean): void;
}

/**
 * How a transfer copies a shard: `stream_records` sends the points in batches (the
 * target starts empty); `snapshot` sends a snapshot of the shard's files and then the
 * writes applied meanwhile; `wal_delta` sends the operations the target's replica lacks,
 * read from the source's WAL (the target keeps its data).
 */
export type TransferMethod = 'stream_records' | 'snapshot' | 'wal_delta';

export const TRANSFER_METHODS: readonly TransferMethod[] = ['stream_records', 'snapshot', 'wal_delta'];

export interface ClusterLink {
  /** This peer's id (decimal u64). */
  readonly peer: string;
  /** The replica of `target` that `peer` (another peer) holds, reached over the network. */
  remote(target: ShardTarget, peer: string): Replica;
  /**
   * Proposes these peers' replicas of the shard Dead through consensus and resolves once
   * this peer applied it, with the peers whose marking is deferred: consensus could not
   * commit it in time (no leader, no majority), it goes on being proposed in the
   * background, and the caller leaves those replicas out meanwhile. Rejects when
   * consensus refuses (the last active replica).
   */
  deactivate(target: ShardTarget, peers: readonly string[], reason: string): Promise<readonly string[]>;
  /**
   * The peers whose replica of `target` missed a write and whose Dead marking consensus
   * has yet to take (deferred, also by a run of this peer before a restart): a replica set
   * leaves those out while their state is still Active.
   */
  pendingDead(target: ShardTarget): readonly string[];
  /** Sends a write to `leader` (ordering medium or strong), which applies it through its replica set; resolves with the operation id. */
  forward(target: ShardTarget, leader: string, op: ReplicaOperation, opts: UpdateOptions): Promise<number>;
  /** Whether `peer` answered the last health check (peers never checked count as alive). */
  alive(peer: string): boolean;
  /** A clock for one write to `target`'s shard: one no write in flight holds, at its next tick. */
  clock(target: ShardTarget): HeldClock;
  /**
   * This peer's replica `source` is the source of a transfer of its shard to `to` (the
   * placement applied here says so): starts driving it, or does nothing when it runs.
   */
  transferOut(target: ShardTarget, to: string, source: LocalReplica, method: TransferMethod, id: string): void;
  /** The placement applied here no longer has that transfer (finished or aborted): stops driving it. */
  transferGone(target: ShardTarget, to: string, id: string): void;
  /**
   * This peer is the source of a transfer that no run here drives (it started again, or
   * the run failed before it could abort the transfer): aborts it through consensus,
   * unless a run drives it.
   */
  transferLost(target: ShardTarget, to: string, id: string): void;
}
