/**
 * Consensus over the cluster's metadata, as the storage layer and the REST routes use
 * it: the generic consensus driver (ts/consensus/driver.ts) running the metadata state
 * machine (cluster-machine.ts).
 *
 * Owns: proposing a metadata operation (`MetaOp`) and answering its outcome, the
 * metadata state as applied here, and the metadata's own conditions on a membership
 * change (a peer that holds shards is removed only when forced).
 * Must never: apply an operation itself, or reach another peer except through the driver.
 */

import type { ConsensusDriver, ConsensusStatus } from '../consensus/driver';
import type { PeerId } from '../consensus/types';
import { encodeMetaOp, shardsOnPeerError, type ClusterStateMachine } from './cluster-machine';
import type { ClusterState, MetaOp } from './cluster-state';

export class MetadataConsensus {
  constructor(
    private readonly driver: ConsensusDriver,
    private readonly machine: ClusterStateMachine,
  ) {}

  get peerId(): PeerId {
    return this.driver.peerId;
  }

  /** The metadata as applied on this peer so far. */
  get clusterState(): ClusterState {
    return this.machine.state;
  }

  /**
   * Proposes a metadata operation and waits until this peer applied it, then (briefly)
   * until the other peers did too. Answers the operation's result.
   */
  async propose(op: MetaOp, timeoutMs: number): Promise<unknown> {
    return this.driver.propose(encodeMetaOp(op), timeoutMs);
  }

  /**
   * DELETE /cluster/peer/{id}: refuses while the peer holds replicas (any state), unless
   * forced, with the reference's 400 and words. Forced, the removal drops the peer's
   * replicas from the placement and aborts the transfers it takes part in (ClusterState
   * applyConfChange); a shard whose every replica was on it stays, without replicas,
   * until it is recovered from a snapshot.
   * Unforced, the check is made twice: here, on the state this peer applied (a quick
   * answer), and again when the removal entry is applied, on every peer alike
   * (`ClusterStateMachine.refuseConfChange`): a replica placed on the peer by an entry
   * committed between the two makes the removal a no-op everywhere, and this call
   * rejects with the same 400, instead of the removal dropping that replica.
   */
  async removePeer(peer: PeerId, force: boolean, timeoutMs: number): Promise<boolean> {
    if (!force && this.driver.isMember(peer) && this.machine.state.shardsOn(peer).length > 0) {
      throw shardsOnPeerError(peer);
    }
    return this.driver.removePeer(peer, timeoutMs, !force);
  }

  /** POST /cluster/recover: replaces this follower's consensus state with the leader's snapshot. */
  recover(): Promise<boolean> {
    return this.driver.recover();
  }

  ready(): boolean {
    return this.driver.ready();
  }

  status(): ConsensusStatus {
    return this.driver.status();
  }

  pendingOperations(): number {
    return this.driver.pendingOperations();
  }

  close(): Promise<void> {
    return this.driver.close();
  }
}
