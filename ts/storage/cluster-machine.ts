/**
 * The cluster's metadata as the consensus driver's replicated state machine: the
 * metadata state (cluster-state.ts) plus the local changes it implies (cluster-apply.ts),
 * behind the driver's interface (ts/consensus/machine.ts).
 *
 * Owns: the encoding of a metadata operation in a log entry (JSON), which local changes
 * each committed entry queues (the collections it touched, everything on this peer's
 * own admission or a snapshot), and the start-up replay: when committed entries follow
 * the persisted snapshot, local storage may already reflect them (it is as new as
 * anything applied before the restart); bringing it back to the snapshot's older state
 * would delete collections created after it with their points, so those entries are
 * replayed into the state first and local storage is brought in line once, at the
 * persisted commit.
 * Must never: decide an operation's outcome (the state does), make a local change
 * itself (the applier does), or reach another peer.
 */

import type { Logger } from 'pino';

import { BadRequestError, ServiceError } from '../common/errors';
import type { ReplicatedStateMachine } from '../consensus/machine';
import type { ConfChange, PeerId } from '../consensus/types';
import { LocalApplier } from './cluster-apply';
import { ClusterState, type MetaOp } from './cluster-state';
import type { TableOfContent } from './toc';

/** A log entry's payload: a metadata operation (JSON). */
interface EntryData {
  meta: MetaOp;
}

/** The reference's refusal of an unforced removal of a peer that holds replicas. */
export function shardsOnPeerError(peer: PeerId): BadRequestError {
  return new BadRequestError(`Cannot remove peer ${peer} as there are shards on it`);
}

export function encodeMetaOp(op: MetaOp): Uint8Array {
  return Buffer.from(JSON.stringify({ meta: op } satisfies EntryData), 'utf8');
}

export class ClusterStateMachine implements ReplicatedStateMachine {
  private current = new ClusterState();
  private readonly applier: LocalApplier;
  /** Committed index at start-up while the entries up to it are replayed (their local changes are made at once at the end); 0 after. */
  private replayUntil = 0;

  constructor(
    toc: TableOfContent,
    private readonly peerId: PeerId,
    private readonly log: Logger,
  ) {
    this.applier = new LocalApplier(toc, peerId, log, () => this.current);
  }

  /** The metadata as applied on this peer so far. */
  get state(): ClusterState {
    return this.current;
  }

  founding(peer: PeerId, uri: string): Uint8Array {
    const state = new ClusterState();
    state.setPeerUri(peer, uri);
    return state.encode();
  }

  async open(snapshot: Uint8Array, snapshotIndex: number, committed: number): Promise<void> {
    this.current = ClusterState.decode(snapshot);
    if (committed > snapshotIndex) this.replayUntil = committed;
    else await this.applier.enqueueAll();
  }

  installSnapshot(index: number, snapshot: Uint8Array): Promise<void> {
    this.current = ClusterState.decode(snapshot);
    return this.syncLocal(index, [], false, true);
  }

  applyNormal(index: number, data: Uint8Array): Promise<unknown> {
    let parsed: EntryData;
    try {
      parsed = JSON.parse(Buffer.from(data).toString('utf8')) as EntryData;
    } catch (err) {
      this.log.error({ err }, 'committed entry is not valid JSON: skipped');
      return this.syncLocal(index, [], false).then(() => Promise.reject(new ServiceError('committed entry is not valid JSON')));
    }
    // Never this peer's own settings: the limit travels in the operation, so every peer decides alike.
    const result = this.current.apply(parsed.meta, null);
    if (!result.ok) return this.syncLocal(index, [], false).then(() => Promise.reject(result.error));
    return this.syncLocal(index, result.collections, result.aliases).then(() => result.value);
  }

  applyConfChange(index: number, change: ConfChange): Promise<unknown> {
    const touched = this.current.applyConfChange(change);
    // This peer's own admission: collections applied before it (while it was not yet a member) are made now.
    const self = change.type === 'addLearner' && change.peer === this.peerId;
    return this.syncLocal(index, touched, false, self).then(() => true);
  }

  /**
   * An unforced removal (`conditional`) of a peer that holds a replica (any state, a
   * transfer's target included) in the state as applied so far is refused: it would drop
   * that replica. Every peer applies the same entries before it, so every peer refuses
   * alike.
   */
  refuseConfChange(change: ConfChange): Error | null {
    if (change.type === 'removePeer' && change.conditional === true && this.current.shardsOn(change.peer).length > 0) return shardsOnPeerError(change.peer);
    return null;
  }

  applyNoop(index: number): Promise<unknown> {
    return this.syncLocal(index, [], false).then(() => true);
  }

  encode(): Uint8Array {
    return this.current.encode();
  }

  peers(): Readonly<Record<PeerId, string>> {
    return this.current.peers;
  }

  idle(): Promise<void> {
    return this.applier.idle();
  }

  isIdle(): boolean {
    return this.applier.idleNow;
  }

  /** Queues the local changes of the entry at `index`; during the start-up replay, one full sync at its end instead. */
  private syncLocal(index: number, collections: readonly string[], aliases: boolean, all = false): Promise<void> {
    if (this.replayUntil > 0) {
      if (index < this.replayUntil) return Promise.resolve();
      this.replayUntil = 0;
      all = true;
    }
    return all ? this.applier.enqueueAll() : this.applier.enqueue(collections, aliases);
  }
}
