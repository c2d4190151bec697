/**
 * What the consensus driver replicates: the narrow interface of the state machine it is
 * constructed with. The driver hands it every committed entry once, in log order, and
 * snapshots of its state; what an entry means, and what applying it changes outside
 * the state (local storage), is the machine's. ts/storage implements it for the
 * cluster's metadata.
 *
 * Owns: the contract between the driver and the application it replicates.
 * Must never: hold behaviour, or name anything of the application (collections,
 * shards) or of the transport.
 */

import type { ConfChange, PeerId } from './types';

/**
 * Every apply call changes the state at once (a read right after it sees the change)
 * and answers the entry's outcome: a promise that settles once the entry's local
 * effects, and those of every earlier entry, are done; it rejects with the reason an
 * operation was refused. A call that throws is a fault the driver stops on.
 */
export interface ReplicatedStateMachine {
  /** The encoded state of a new cluster whose only member is `peer`, reached at `uri` (its first snapshot). */
  founding(peer: PeerId, uri: string): Uint8Array;
  /**
   * Start-up: takes the state of the persisted snapshot at `snapshotIndex`. The entries
   * after it, up to `committed`, are applied next (again: local effects may already
   * reflect them). Resolves once local effects are in line, or are left for the end of
   * that replay.
   */
  open(snapshot: Uint8Array, snapshotIndex: number, committed: number): Promise<void>;
  /** A snapshot (from the leader) replaces the state at `index`. */
  installSnapshot(index: number, snapshot: Uint8Array): Promise<unknown>;
  /** A committed entry with data (a proposal). */
  applyNormal(index: number, data: Uint8Array): Promise<unknown>;
  /** A committed membership change. */
  applyConfChange(index: number, change: ConfChange): Promise<unknown>;
  /**
   * A committed conditional membership change (`removePeer` with `conditional`), asked
   * right before it would be applied, with the state as of the entry before it: an
   * error refuses it (the driver then applies the entry as a no-op, its outcome rejects
   * with that error, and the membership stays as it is). Must answer from the state
   * alone, so every peer answers alike. A machine without it accepts every change.
   */
  refuseConfChange?(change: ConfChange): Error | null;
  /** A committed entry without data (a new leader's). */
  applyNoop(index: number): Promise<unknown>;
  /** The state, encoded for a snapshot. */
  encode(): Uint8Array;
  /** The URI of every peer the state knows. */
  peers(): Readonly<Record<PeerId, string>>;
  /** Resolves once every local effect queued so far is done. */
  idle(): Promise<void>;
  /** Whether no local effect is queued or running. */
  isIdle(): boolean;
}
