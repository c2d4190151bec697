/**
 * The vocabulary of the Raft core (ts/consensus): peer ids, log entries, membership
 * changes, hard state, snapshots, the messages peers exchange, and the typed errors a
 * storage may raise.
 *
 * Owns: the shape of everything the core reads from storage, hands to its driver in a
 * Ready, or receives from other peers.
 * Must never: hold behaviour beyond trivial constructors, do I/O, or pick a wire or disk
 * encoding (those belong to the driver and to ts/api/p2p).
 */

/** A peer id: a random unsigned 64-bit number written in decimal (any string in tests). */
export type PeerId = string;

/** What must survive a crash besides the log: the current term, the vote cast in it, and the commit index. */
export interface HardState {
  readonly term: number;
  readonly vote: PeerId | null;
  readonly commit: number;
}

export const EMPTY_HARD_STATE: HardState = Object.freeze({ term: 0, vote: null, commit: 0 });

export function sameHardState(a: HardState, b: HardState): boolean {
  return a.term === b.term && a.vote === b.vote && a.commit === b.commit;
}

/** Membership: voters elect leaders and count for commit; learners only receive the log. */
export interface ConfState {
  readonly voters: readonly PeerId[];
  readonly learners: readonly PeerId[];
}

/**
 * One membership change. Changes are made one at a time: a new peer is added as a
 * learner, later promoted to voter; any member can be removed. `context` travels with
 * the entry (the peer's URI in the cluster).
 */
export type ConfChange =
  | { readonly type: 'addLearner'; readonly peer: PeerId; readonly context?: string }
  | { readonly type: 'promoteLearner'; readonly peer: PeerId }
  /**
   * `conditional`: the application may refuse the removal when it applies it (the
   * driver asks `ReplicatedStateMachine.refuseConfChange`, with the state as of the entry
   * before): a refused removal changes no membership on any peer. Absent: unconditional.
   */
  | { readonly type: 'removePeer'; readonly peer: PeerId; readonly conditional?: boolean };

/**
 * A log entry. `noop` is appended by every new leader (it lets the leader commit
 * entries of earlier terms); `normal` carries application data; `confChange` a
 * membership change that takes effect on a peer when that peer applies it.
 */
export type Entry =
  | { readonly index: number; readonly term: number; readonly type: 'noop' }
  | { readonly index: number; readonly term: number; readonly type: 'normal'; readonly data: Uint8Array }
  | { readonly index: number; readonly term: number; readonly type: 'confChange'; readonly change: ConfChange };

/** Where a snapshot sits in the log, and the membership in force at that index. */
export interface SnapshotMeta {
  readonly index: number;
  readonly term: number;
  readonly conf: ConfState;
}

/** The application's state as of `meta.index` (opaque to the core). */
export interface Snapshot {
  readonly meta: SnapshotMeta;
  readonly data: Uint8Array;
}

// ---------------------------------------------------------------------------------
// Messages. Every message carries the sender's term, except a granted pre-vote
// request/response, which carries the term the candidate would campaign in.

interface MessageBase {
  readonly from: PeerId;
  readonly to: PeerId;
  readonly term: number;
}

/** "Would you vote for me in term `term`?" Changes nobody's term. */
export interface PreVoteRequest extends MessageBase {
  readonly type: 'preVote';
  readonly lastLogIndex: number;
  readonly lastLogTerm: number;
}

export interface PreVoteResponse extends MessageBase {
  readonly type: 'preVoteResponse';
  readonly granted: boolean;
}

export interface VoteRequest extends MessageBase {
  readonly type: 'vote';
  readonly lastLogIndex: number;
  readonly lastLogTerm: number;
}

export interface VoteResponse extends MessageBase {
  readonly type: 'voteResponse';
  readonly granted: boolean;
}

/** Entries after (prevLogIndex, prevLogTerm); `commit` is the leader's commit index. */
export interface AppendRequest extends MessageBase {
  readonly type: 'append';
  readonly prevLogIndex: number;
  readonly prevLogTerm: number;
  readonly entries: readonly Entry[];
  readonly commit: number;
}

/**
 * Answer to an append or a snapshot. Success: the follower's log matches the leader's
 * up to `matchIndex` (and that part is persisted before the answer is sent). Rejection:
 * the entry at `rejectedIndex` did not match; (hintIndex, hintTerm) is the follower's
 * last entry that may still match, so the leader can skip a whole term at a time.
 */
export type AppendResponse =
  | (MessageBase & { readonly type: 'appendResponse'; readonly success: true; readonly matchIndex: number })
  | (MessageBase & {
      readonly type: 'appendResponse';
      readonly success: false;
      readonly rejectedIndex: number;
      readonly hintIndex: number;
      readonly hintTerm: number;
    });

/**
 * Leader liveness and commit. `commit` is what the follower may safely adopt (never
 * beyond what the leader knows the follower holds); `leaderCommit` is the leader's own
 * commit index, which the follower reports for readiness.
 */
export interface HeartbeatRequest extends MessageBase {
  readonly type: 'heartbeat';
  readonly commit: number;
  readonly leaderCommit: number;
}

export interface HeartbeatResponse extends MessageBase {
  readonly type: 'heartbeatResponse';
}

/** The leader's latest snapshot, for a follower that needs entries the leader compacted away. */
export interface InstallSnapshotRequest extends MessageBase {
  readonly type: 'installSnapshot';
  readonly snapshot: Snapshot;
}

export type Message =
  | PreVoteRequest
  | PreVoteResponse
  | VoteRequest
  | VoteResponse
  | AppendRequest
  | AppendResponse
  | HeartbeatRequest
  | HeartbeatResponse
  | InstallSnapshotRequest;

export type MessageType = Message['type'];

// ---------------------------------------------------------------------------------
// Storage errors

/**
 * - `compacted`: the index lies before the first entry kept (the caller may use the snapshot);
 * - `unavailable`: the index lies after the last entry;
 * - `snapshotTemporarilyUnavailable`: no snapshot can be read right now (try again later);
 * - `failure`: the storage itself failed (I/O, corruption). The core stops voting,
 *   campaigning and acknowledging until it is rebuilt from storage.
 */
export type StorageErrorKind = 'compacted' | 'unavailable' | 'snapshotTemporarilyUnavailable' | 'failure';

export class StorageError extends Error {
  constructor(
    readonly kind: StorageErrorKind,
    message: string,
  ) {
    super(message);
    this.name = 'StorageError';
  }
}

/** A broken rule of the protocol or of the Ready contract: a bug, never a network condition. */
export class RaftInvariantError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RaftInvariantError';
  }
}
