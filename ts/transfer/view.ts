/**
 * What the API layers show of replication on this peer: transfers it drives with their
 * progress, the other peers' consensus details, and
 * the counts of calls between peers. The p2p cluster link implements it.
 *
 * Owns: the shape of that view. Must never: change anything.
 */

import type { TransferOutcomes, TransferProgress } from './outgoing';

export type { TransferOutcomes, TransferProgress };

/** A peer's consensus details, as GET /cluster/telemetry shows them. */
export interface PeerDetails {
  version: string;
  role: string | null;
  is_voter: boolean;
  term: number;
  commit: number;
  num_pending_operations: number;
  consensus_thread_status: unknown;
}

export interface ReplicationView {
  /** Transfers this peer is the source of. */
  transfers(): TransferProgress[];
  /** Transfers this peer drove to their end, by method and outcome. */
  transferOutcomes(): TransferOutcomes;
  /** Another peer's consensus details (null when it does not answer within `timeoutMs`). */
  peerDetails(peer: string, timeoutMs: number): Promise<PeerDetails | null>;
  /** Whether `peer` answered its last health check (peers never checked count as alive). */
  alive(peer: string): boolean;
  /** Calls to other peers' points service by method: made and failed. */
  p2pCalls(): Record<string, { calls: number; failures: number }>;
}
