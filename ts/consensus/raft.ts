/**
 * The Raft core of one peer: a pure, synchronous state machine. Time is a count of
 * tick() calls; messages come in through step(); the application proposes through
 * propose() / proposeConfChange(); everything the core wants done (persist, send,
 * apply) comes out of ready(), and advance() tells it that it was done.
 *
 * Features: pre-vote, leader election with randomized timeouts (jitter from the injected
 * PRNG), log replication with conflict backtracking a term at a time, commit by a
 * majority of voters (learners never count), check quorum (a leader that has not heard
 * from a majority of voters for an election timeout steps down, and a peer that hears
 * from its leader ignores vote requests meanwhile), InstallSnapshot for followers behind
 * the leader's compaction point, membership changes one at a time through conf-change
 * entries that take effect on a peer when that peer applies them.
 *
 * The driver's loop, in this order (advance() asserts that the storage holds steps 1-3):
 *   rd = node.ready()
 *   1. persist rd.snapshot (replacing the log), and install it in the application;
 *   2. persist rd.entries (they may replace a suffix of the persisted log);
 *   3. persist rd.hardState;
 *   4. send rd.messages (every acknowledgement or vote in them assumes 1-3 are durable);
 *   5. apply rd.committedEntries in order (conf changes included: the core applies
 *      those itself in advance());
 *   6. node.advance(rd).
 * Between ready() and advance() the node accepts no tick(), step() or propose(): the
 * driver queues them. Anything not persisted when a peer crashes is simply lost: the
 * peer restarts from storage with a new RaftNode.
 *
 * Owns: roles, terms and votes, election timers, replication progress of each follower,
 * the commit rule, the membership in force (as of the applied index), which peer may
 * propose a membership change and when.
 * Must never: await, read a clock, touch sockets or files, use Math.random, or write
 * storage. A storage failure (StorageError of kind `failure`, or `unavailable` where the
 * log must hold the entry) stops the node: no votes, no campaigns, no acknowledgements,
 * no proposals, until the driver rebuilds it from storage.
 */

import { RaftLog } from './log';
import type { RaftStorage } from './storage';
import {
  AppendRequest,
  AppendResponse,
  ConfChange,
  ConfState,
  Entry,
  HardState,
  HeartbeatRequest,
  HeartbeatResponse,
  InstallSnapshotRequest,
  Message,
  PeerId,
  PreVoteRequest,
  RaftInvariantError,
  Snapshot,
  StorageError,
  VoteRequest,
  VoteResponse,
  PreVoteResponse,
  sameHardState,
} from './types';

export type Role = 'follower' | 'preCandidate' | 'candidate' | 'leader';

export interface RaftNodeOptions {
  id: PeerId;
  /** What the driver persisted; read only. */
  storage: RaftStorage;
  /** Seeded PRNG in [0, 1): the only source of randomness (election jitter). */
  random: () => number;
  /** Ticks without a leader before a follower campaigns (plus jitter in [0, electionTicks)). Default 10. */
  electionTicks?: number;
  /** Ticks between a leader's heartbeats. Default 2. */
  heartbeatTicks?: number;
  /** Most entries in one append message. Default 64. */
  maxEntriesPerAppend?: number;
  /** Most unacknowledged append messages to one replicating follower. Default 16. */
  maxInflightAppends?: number;
  /**
   * Index the application's state already reflects on start (default: the snapshot's
   * index, i.e. the application restores the snapshot and re-applies the rest). The
   * membership changes up to it are taken as applied: none may be a conditional removal
   * the application refused (the driver passes nothing, so every entry after the
   * snapshot goes through advance() again, refusals included).
   */
  applied?: number;
  /** Pre-vote before every campaign. Default true (turned off only to show what it prevents). */
  preVote?: boolean;
}

/** What the driver must do now; see the order in the header comment. */
export interface Ready {
  /** Persist after the entries; null when unchanged since the last advance(). */
  readonly hardState: HardState | null;
  /** A snapshot from the leader: persist (it replaces the log) and install in the application first. */
  readonly snapshot: Snapshot | null;
  /** Persist (appending, or replacing the persisted log from entries[0].index on). */
  readonly entries: readonly Entry[];
  /** Apply in order, after persisting. */
  readonly committedEntries: readonly Entry[];
  /** Send after persisting. */
  readonly messages: readonly Message[];
  /** Informational. */
  readonly leader: PeerId | null;
  readonly role: Role;
  readonly term: number;
}

export type ProposeResult =
  | { readonly ok: true; readonly index: number; readonly term: number }
  | { readonly ok: false; readonly reason: 'notLeader'; readonly leader: PeerId | null; readonly message: string }
  | {
      readonly ok: false;
      readonly reason: 'leaderLeaving' | 'confChangePending' | 'invalidConfChange' | 'storageFault';
      readonly message: string;
    };

export type ProgressState = 'probe' | 'replicate' | 'snapshot';

export interface PeerProgress {
  readonly match: number;
  readonly next: number;
  readonly state: ProgressState;
  readonly recentActive: boolean;
}

export interface RaftStatus {
  readonly id: PeerId;
  readonly role: Role;
  readonly term: number;
  readonly vote: PeerId | null;
  readonly leader: PeerId | null;
  readonly commit: number;
  readonly applied: number;
  readonly firstIndex: number;
  readonly lastIndex: number;
  /** Membership as of the applied index. */
  readonly conf: ConfState;
  readonly isVoter: boolean;
  readonly isLearner: boolean;
  /** The latest commit index heard from the current leader (this peer's own on a leader). */
  readonly leaderCommit: number;
  /**
   * Readiness: this peer heard from its leader within an election timeout (or leads)
   * and has applied everything the leader said it committed.
   */
  readonly caughtUp: boolean;
  /** Set when storage failed: the node no longer votes, campaigns or acknowledges. */
  readonly storageFault: string | null;
  /** Leader only: replication progress of every other member. */
  readonly progress: ReadonlyMap<PeerId, PeerProgress> | null;
}

interface Progress {
  match: number;
  next: number;
  state: ProgressState;
  /** Probe: an append is in flight; wait for an answer or a heartbeat answer. */
  paused: boolean;
  /** Snapshot state: index of the snapshot sent, and when. */
  pendingSnapshot: number;
  snapshotSentAt: number;
  /** Replicate: tick since which the oldest unacknowledged append has been waiting. */
  waitingSince: number;
  /** Replicate: last index of each unacknowledged append, oldest first. */
  inflight: number[];
  /** Heard from since the last check-quorum round. */
  recentActive: boolean;
}

/** A message as its sender writes it (send() fills in `from`); distributes over unions. */
type WithoutFrom<M> = M extends Message ? Omit<M, 'from'> : never;

const NONE_REFUSED: ReadonlySet<number> = new Set();

export function quorum(voters: number): number {
  return Math.floor(voters / 2) + 1;
}

export class RaftNode {
  readonly id: PeerId;
  private readonly storage: RaftStorage;
  private readonly random: () => number;
  private readonly electionTicks: number;
  private readonly heartbeatTicks: number;
  private readonly maxEntries: number;
  private readonly maxInflight: number;
  private readonly preVote: boolean;
  /** Ticks an unacknowledged append may wait before a replicating follower is probed again. */
  private readonly resendTicks: number;

  private log: RaftLog;
  private term: number;
  private vote: PeerId | null;
  private role: Role = 'follower';
  private leader: PeerId | null = null;
  private leaderCommit = 0;

  private voters = new Set<PeerId>();
  private learners = new Set<PeerId>();

  private progress = new Map<PeerId, Progress>();
  private votes = new Map<PeerId, boolean>();
  /** Index of the latest conf change this leader proposed (or its first entry): the next waits until it is applied. */
  private pendingConfIndex = 0;
  /**
   * This leader's log holds its own removal: it appends nothing more. Every voter that
   * acknowledges the removal then holds the leader's whole log, so once the leader
   * stands down it can vote for any of them, even one that has not learnt that the
   * removal committed and still counts the old membership (in a cluster of two, the
   * survivor needs exactly that vote).
   */
  private leaving = false;

  private ticks = 0;
  private electionElapsed = 0;
  private heartbeatElapsed = 0;
  private randomizedElectionTimeout = 0;

  private msgs: Message[] = [];
  private persistedHardState: HardState;
  private outstanding: Ready | null = null;
  private fault: StorageError | null = null;

  constructor(opts: RaftNodeOptions) {
    this.id = opts.id;
    this.storage = opts.storage;
    this.random = opts.random;
    this.electionTicks = opts.electionTicks ?? 10;
    this.heartbeatTicks = opts.heartbeatTicks ?? 2;
    this.maxEntries = opts.maxEntriesPerAppend ?? 64;
    this.maxInflight = opts.maxInflightAppends ?? 16;
    this.preVote = opts.preVote ?? true;
    if (this.electionTicks < 2 || this.heartbeatTicks < 1 || this.heartbeatTicks >= this.electionTicks) {
      throw new RangeError(`need 1 <= heartbeatTicks (${this.heartbeatTicks}) < electionTicks (${this.electionTicks})`);
    }
    if (this.maxEntries < 1 || this.maxInflight < 1) throw new RangeError('maxEntriesPerAppend and maxInflightAppends must be at least 1');
    this.resendTicks = Math.max(2, Math.floor(this.electionTicks / 2));

    const { hardState, snapshotMeta } = this.storage.initialState();
    // A crash between persisting a snapshot and the hard state leaves the commit behind it.
    const commit = Math.max(hardState.commit, snapshotMeta.index);
    if (commit > this.storage.lastIndex()) {
      throw new StorageError('failure', `persisted commit ${commit} is beyond the persisted log (last index ${this.storage.lastIndex()})`);
    }
    const applied = opts.applied ?? snapshotMeta.index;
    if (applied < snapshotMeta.index || applied > commit) {
      throw new RaftInvariantError(`applied ${applied} outside [snapshot ${snapshotMeta.index}, commit ${commit}]`);
    }
    this.log = new RaftLog(this.storage, commit, applied);
    for (const v of snapshotMeta.conf.voters) this.voters.add(v);
    for (const l of snapshotMeta.conf.learners) this.learners.add(l);
    for (const e of this.log.slice(snapshotMeta.index + 1, applied + 1)) {
      if (e.type === 'confChange') this.changeMembership(e.change);
    }
    this.term = hardState.term;
    this.vote = hardState.vote;
    // Entries persisted without the hard state that followed them (a crash in between):
    // the term must never be behind the log. This peer may have led that term (a sole
    // voter becomes leader before its vote for itself is persisted), so it counts its
    // vote in it as cast for itself: voting for another candidate in that term could
    // make two leaders of one term. No vote of the lost state was sent (votes go out
    // only once the hard state is persisted), so abstaining is always safe.
    const lastTerm = this.log.lastTerm();
    if (lastTerm > this.term) {
      this.term = lastTerm;
      this.vote = this.id;
    }
    this.persistedHardState = hardState;
    this.resetTimers();
  }

  // ---------------------------------------------------------------------------------
  // Public API

  /** One unit of time. */
  tick(): void {
    this.assertNoReady('tick');
    this.guarded(() => this.tickInner());
  }

  /** A message from another peer (messages for another id are ignored). */
  step(m: Message): void {
    this.assertNoReady('step');
    this.guarded(() => this.stepInner(m));
  }

  /** Starts an election now (if this peer may campaign), as if its election timeout had expired. */
  campaign(): void {
    this.assertNoReady('campaign');
    this.guarded(() => this.startElection());
  }

  /** Appends application data to the log (leader only). */
  propose(data: Uint8Array): ProposeResult {
    this.assertNoReady('propose');
    const refused = this.refuseProposal();
    if (refused !== null) return refused;
    return this.guardedResult(() => this.appendAsLeader({ type: 'normal', data }));
  }

  /**
   * Proposes one membership change (leader only). Refused while an earlier change (or,
   * for a new leader, its first entry) is not applied yet, and when it does not fit the
   * applied membership: add an existing member, promote a non-learner, remove a
   * non-member or the last voter.
   */
  proposeConfChange(change: ConfChange): ProposeResult {
    this.assertNoReady('proposeConfChange');
    const refused = this.refuseProposal();
    if (refused !== null) return refused;
    if (this.pendingConfIndex > this.log.applied) {
      return {
        ok: false,
        reason: 'confChangePending',
        message: `a membership change (or the leader's first entry) at index ${this.pendingConfIndex} is not applied yet (applied ${this.log.applied})`,
      };
    }
    const invalid = this.invalidConfChange(change);
    if (invalid !== null) return { ok: false, reason: 'invalidConfChange', message: invalid };
    const result = this.guardedResult(() => this.appendAsLeader({ type: 'confChange', change }));
    if (result.ok) {
      this.pendingConfIndex = result.index;
      if (change.type === 'removePeer' && change.peer === this.id) this.leaving = true;
    }
    return result;
  }

  hasReady(): boolean {
    if (this.fault !== null || this.outstanding !== null) return false;
    try {
      return (
        this.msgs.length > 0 ||
        this.log.hasUnstable() ||
        !sameHardState(this.hardState(), this.persistedHardState) ||
        this.log.hasEntriesToApply()
      );
    } catch (e) {
      if (e instanceof StorageError) {
        this.enterFault(e);
        return false;
      }
      throw e;
    }
  }

  /** Everything to persist, send and apply now. One Ready at a time: call advance(rd) next. */
  ready(): Ready {
    if (this.outstanding !== null) throw new RaftInvariantError('ready() called again before advance()');
    let rd: Ready;
    try {
      rd = this.fault !== null ? this.emptyReady() : this.collectReady();
    } catch (e) {
      if (!(e instanceof StorageError)) throw e;
      this.enterFault(e);
      rd = this.emptyReady();
    }
    this.outstanding = rd;
    return rd;
  }

  /**
   * The driver persisted, sent and applied everything in `rd` (in the documented order).
   * `refused`: indexes of committed conditional membership changes the application
   * refused when it applied them (deterministically: the same on every peer); they
   * change no membership.
   */
  advance(rd: Ready, refused: ReadonlySet<number> = NONE_REFUSED): void {
    if (rd !== this.outstanding) throw new RaftInvariantError('advance() with a Ready that is not the outstanding one');
    this.outstanding = null;
    if (this.fault !== null) return;
    this.guarded(() => this.advanceInner(rd, refused));
  }

  /** Membership as of the applied index: what the application records in its snapshots. */
  appliedConfState(): ConfState {
    return { voters: [...this.voters], learners: [...this.learners] };
  }

  status(): RaftStatus {
    let progress: Map<PeerId, PeerProgress> | null = null;
    if (this.role === 'leader') {
      progress = new Map();
      for (const [id, pr] of this.progress) {
        progress.set(id, { match: pr.match, next: pr.next, state: pr.state, recentActive: pr.recentActive });
      }
    }
    const leaderCommit = this.role === 'leader' ? this.log.committed : this.leaderCommit;
    let firstIndex = 0;
    let lastIndex = 0;
    try {
      firstIndex = this.log.firstIndex();
      lastIndex = this.log.lastIndex();
    } catch (e) {
      if (!(e instanceof StorageError)) throw e;
    }
    return {
      id: this.id,
      role: this.role,
      term: this.term,
      vote: this.vote,
      leader: this.leader,
      commit: this.log.committed,
      applied: this.log.applied,
      firstIndex,
      lastIndex,
      conf: this.appliedConfState(),
      isVoter: this.voters.has(this.id),
      isLearner: this.learners.has(this.id),
      leaderCommit,
      caughtUp: this.fault === null && this.inLease() && this.log.applied >= leaderCommit,
      storageFault: this.fault === null ? null : this.fault.message,
      progress,
    };
  }

  // ---------------------------------------------------------------------------------
  // Ready / advance

  private hardState(): HardState {
    return { term: this.term, vote: this.vote, commit: this.log.committed };
  }

  private collectReady(): Ready {
    const hs = this.hardState();
    const rd: Ready = {
      hardState: sameHardState(hs, this.persistedHardState) ? null : hs,
      snapshot: this.log.unstableSnapshot(),
      entries: this.log.unstableEntries(),
      committedEntries: this.log.entriesToApply(),
      messages: this.msgs,
      leader: this.leader,
      role: this.role,
      term: this.term,
    };
    this.msgs = [];
    return rd;
  }

  private emptyReady(): Ready {
    this.msgs = [];
    return { hardState: null, snapshot: null, entries: [], committedEntries: [], messages: [], leader: null, role: this.role, term: this.term };
  }

  private advanceInner(rd: Ready, refused: ReadonlySet<number>): void {
    // The driver's order, checked: everything in rd must be durable before advance().
    if (rd.snapshot !== null) {
      const held = this.storage.snapshot().meta;
      if (held.index < rd.snapshot.meta.index) {
        throw new RaftInvariantError(`advance(): snapshot ${rd.snapshot.meta.index} not persisted (storage holds ${held.index})`);
      }
    }
    if (rd.entries.length > 0) {
      const last = rd.entries[rd.entries.length - 1];
      if (this.storage.lastIndex() < last.index || this.storage.term(last.index) !== last.term) {
        throw new RaftInvariantError(`advance(): entries up to ${last.index} (term ${last.term}) not persisted`);
      }
    }
    if (rd.hardState !== null && !sameHardState(this.storage.initialState().hardState, rd.hardState)) {
      throw new RaftInvariantError('advance(): hard state not persisted');
    }

    if (rd.snapshot !== null) {
      this.log.snapshotPersisted(rd.snapshot.meta.index);
      this.log.appliedTo(rd.snapshot.meta.index);
      this.voters = new Set(rd.snapshot.meta.conf.voters);
      this.learners = new Set(rd.snapshot.meta.conf.learners);
      this.afterMembershipChange();
    }
    if (rd.entries.length > 0) {
      const last = rd.entries[rd.entries.length - 1];
      this.log.entriesPersisted(last.index, last.term);
    }
    if (rd.hardState !== null) this.persistedHardState = rd.hardState;
    for (const e of rd.committedEntries) {
      if (e.type === 'confChange') {
        if (refused.has(e.index)) {
          if (!(e.change.type === 'removePeer' && e.change.conditional === true)) throw new RaftInvariantError(`advance(): entry ${e.index} is an unconditional membership change and cannot be refused`);
          // A refused removal of this leader: it stays, and takes proposals again.
          if (e.change.type === 'removePeer' && e.change.peer === this.id) this.leaving = false;
          continue;
        }
        this.changeMembership(e.change);
        this.afterMembershipChange();
      }
    }
    if (rd.committedEntries.length > 0) this.log.appliedTo(rd.committedEntries[rd.committedEntries.length - 1].index);
    if (this.role === 'leader' && this.maybeCommit()) this.broadcastHeartbeat();
  }

  // ---------------------------------------------------------------------------------
  // Time

  private tickInner(): void {
    this.ticks++;
    if (this.role === 'leader') {
      this.heartbeatElapsed++;
      this.electionElapsed++;
      if (this.electionElapsed >= this.electionTicks) {
        this.electionElapsed = 0;
        // Check quorum: a leader cut off from a majority of voters steps down, so that a
        // partitioned minority stops accepting proposals it can never commit.
        if (!this.quorumActive()) {
          this.becomeFollower(this.term, null);
          return;
        }
        for (const pr of this.progress.values()) pr.recentActive = false;
      }
      if (this.heartbeatElapsed >= this.heartbeatTicks) {
        this.heartbeatElapsed = 0;
        this.broadcastHeartbeat();
      }
      return;
    }
    this.electionElapsed++;
    if (this.electionElapsed >= this.randomizedElectionTimeout && this.promotable()) this.startElection();
  }

  private resetTimers(): void {
    this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    this.randomizedElectionTimeout = this.electionTicks + Math.floor(this.random() * this.electionTicks);
  }

  /** Heard from a live leader within an election timeout (or is the leader). */
  private inLease(): boolean {
    return this.role === 'leader' || (this.leader !== null && this.electionElapsed < this.electionTicks);
  }

  // ---------------------------------------------------------------------------------
  // Elections

  /**
   * May this peer campaign? It must be a voter in its applied membership, hold no
   * snapshot it has not installed, and have no committed membership change it has not
   * applied yet (it would count votes against a membership that is no longer in force).
   */
  private promotable(): boolean {
    if (this.fault !== null || !this.voters.has(this.id) || this.log.unstableSnapshot() !== null) return false;
    if (this.log.committed > this.log.applied) {
      for (const e of this.log.slice(this.log.applied + 1, this.log.committed + 1)) if (e.type === 'confChange') return false;
    }
    return true;
  }

  private startElection(): void {
    if (this.role === 'leader' || !this.promotable()) return;
    if (this.preVote) this.becomePreCandidate();
    else this.becomeCandidate();
  }

  private becomePreCandidate(): void {
    // Term and vote stay as they are: a pre-vote that fails leaves no trace.
    this.role = 'preCandidate';
    this.leader = null;
    this.progress.clear();
    this.votes = new Map([[this.id, true]]);
    this.resetTimers();
    if (this.tally() === 'won') {
      this.becomeCandidate();
      return;
    }
    const lastLogIndex = this.log.lastIndex();
    const lastLogTerm = this.log.lastTerm();
    for (const v of this.voters) {
      if (v !== this.id) this.msgs.push({ type: 'preVote', from: this.id, to: v, term: this.term + 1, lastLogIndex, lastLogTerm });
    }
  }

  private becomeCandidate(): void {
    this.term += 1;
    this.vote = this.id;
    this.role = 'candidate';
    this.leader = null;
    this.leaderCommit = 0;
    this.progress.clear();
    this.votes = new Map([[this.id, true]]);
    this.resetTimers();
    if (this.tally() === 'won') {
      this.becomeLeader();
      return;
    }
    const lastLogIndex = this.log.lastIndex();
    const lastLogTerm = this.log.lastTerm();
    for (const v of this.voters) {
      if (v !== this.id) this.msgs.push({ type: 'vote', from: this.id, to: v, term: this.term, lastLogIndex, lastLogTerm });
    }
  }

  private becomeLeader(): void {
    this.role = 'leader';
    this.leader = this.id;
    this.votes.clear();
    this.resetTimers();
    this.progress.clear();
    const next = this.log.lastIndex() + 1;
    for (const peer of this.members()) {
      if (peer !== this.id) this.progress.set(peer, this.newProgress(next));
    }
    // The first entry of the term: committing it commits everything before it, and no
    // membership change may be proposed before it is applied.
    // An earlier leader may have left this peer's removal in the log, not applied yet.
    this.leaving = false;
    for (const e of this.log.slice(this.log.applied + 1, next)) {
      if (e.type === 'confChange' && e.change.type === 'removePeer' && e.change.peer === this.id) this.leaving = true;
    }
    const noop: Entry = { index: next, term: this.term, type: 'noop' };
    this.log.append([noop]);
    this.pendingConfIndex = noop.index;
    this.broadcastAppend();
  }

  private becomeFollower(term: number, leader: PeerId | null): void {
    if (term < this.term) throw new RaftInvariantError(`term going back from ${this.term} to ${term}`);
    if (term > this.term) {
      this.term = term;
      this.vote = null;
    }
    if (leader !== this.leader) this.leaderCommit = 0;
    this.role = 'follower';
    this.leader = leader;
    this.leaving = false;
    this.progress.clear();
    this.votes.clear();
    this.resetTimers();
  }

  private tally(): 'won' | 'lost' | 'pending' {
    let granted = 0;
    let rejected = 0;
    for (const v of this.voters) {
      const g = this.votes.get(v);
      if (g === true) granted++;
      else if (g === false) rejected++;
    }
    const q = quorum(this.voters.size);
    if (granted >= q) return 'won';
    if (this.voters.size - rejected < q) return 'lost';
    return 'pending';
  }

  // ---------------------------------------------------------------------------------
  // Messages

  private stepInner(m: Message): void {
    if (m.to !== this.id || m.from === this.id) return;
    if (m.term > this.term) {
      if (m.type === 'preVote') {
        // A pre-vote asks about a future term and changes nobody's term.
      } else if (m.type === 'preVoteResponse' && m.granted) {
        // A granted pre-vote carries the term we would campaign in.
      } else if (m.type === 'vote' && this.inLease()) {
        // Check quorum: while this peer hears from a live leader, a higher term from a
        // candidate does not depose it.
        return;
      } else {
        const leader = m.type === 'append' || m.type === 'heartbeat' || m.type === 'installSnapshot' ? m.from : null;
        this.becomeFollower(m.term, leader);
      }
    } else if (m.term < this.term) {
      if (m.type === 'append' || m.type === 'heartbeat' || m.type === 'installSnapshot') {
        // A deposed leader: tell it the newer term so it steps down.
        this.send<HeartbeatResponse>({ type: 'heartbeatResponse', to: m.from, term: this.term });
      } else if (m.type === 'preVote') {
        this.send<PreVoteResponse>({ type: 'preVoteResponse', to: m.from, term: this.term, granted: false });
      }
      return;
    }

    switch (m.type) {
      case 'preVote':
        this.handlePreVote(m);
        return;
      case 'vote':
        this.handleVote(m);
        return;
      case 'preVoteResponse':
        this.handlePreVoteResponse(m);
        return;
      case 'voteResponse':
        this.handleVoteResponse(m);
        return;
      case 'append':
      case 'heartbeat':
      case 'installSnapshot':
        this.handleFromLeader(m);
        return;
      case 'appendResponse':
        if (this.role === 'leader') this.handleAppendResponse(m);
        return;
      case 'heartbeatResponse':
        if (this.role === 'leader') this.handleHeartbeatResponse(m);
        return;
    }
  }

  private send<M extends Message>(m: WithoutFrom<M>): void {
    this.msgs.push({ ...m, from: this.id } as unknown as Message);
  }

  private handlePreVote(m: PreVoteRequest): void {
    const granted = m.term > this.term && !this.inLease() && this.log.isUpToDate(m.lastLogIndex, m.lastLogTerm);
    this.send<PreVoteResponse>({ type: 'preVoteResponse', to: m.from, term: granted ? m.term : this.term, granted });
  }

  private handleVote(m: VoteRequest): void {
    // m.term === this.term here. Learners answer too: a learner may have been promoted
    // without having applied it yet, and only the candidate's membership decides
    // whether the answer counts.
    const canVote = this.vote === m.from || (this.vote === null && this.leader === null);
    const granted = canVote && this.log.isUpToDate(m.lastLogIndex, m.lastLogTerm);
    if (granted) {
      this.vote = m.from;
      this.electionElapsed = 0;
    }
    this.send<VoteResponse>({ type: 'voteResponse', to: m.from, term: this.term, granted });
  }

  private handlePreVoteResponse(m: PreVoteResponse): void {
    if (this.role !== 'preCandidate') return;
    if (m.granted ? m.term !== this.term + 1 : m.term !== this.term) return;
    this.votes.set(m.from, m.granted);
    const t = this.tally();
    if (t === 'won') this.becomeCandidate();
    else if (t === 'lost') this.becomeFollower(this.term, null);
  }

  private handleVoteResponse(m: VoteResponse): void {
    if (this.role !== 'candidate') return;
    this.votes.set(m.from, m.granted);
    const t = this.tally();
    if (t === 'won') this.becomeLeader();
    else if (t === 'lost') this.becomeFollower(this.term, null);
  }

  private handleFromLeader(m: AppendRequest | HeartbeatRequest | InstallSnapshotRequest): void {
    if (this.role === 'leader') {
      throw new RaftInvariantError(`two leaders in term ${this.term}: ${this.id} and ${m.from}`);
    }
    if (this.leader !== null && this.leader !== m.from) {
      throw new RaftInvariantError(`two leaders in term ${this.term}: ${this.leader} and ${m.from}`);
    }
    if (this.role !== 'follower' || this.leader !== m.from) this.becomeFollower(this.term, m.from);
    this.electionElapsed = 0;
    if (m.type === 'append') this.handleAppend(m);
    else if (m.type === 'heartbeat') this.handleHeartbeat(m);
    else this.handleInstallSnapshot(m);
  }

  private handleAppend(m: AppendRequest): void {
    this.leaderCommit = Math.max(this.leaderCommit, m.commit);
    if (m.entries.length > 0 && m.entries[0].index !== m.prevLogIndex + 1) return; // malformed
    if (m.prevLogIndex < this.log.committed) {
      // Everything up to our commit matches the leader's log already.
      this.send<AppendResponse>({ type: 'appendResponse', to: m.from, term: this.term, success: true, matchIndex: this.log.committed });
      return;
    }
    if (!this.log.matchTerm(m.prevLogIndex, m.prevLogTerm)) {
      // Walk back over entries of terms the leader cannot hold at those indexes.
      let hint = Math.min(m.prevLogIndex, this.log.lastIndex());
      while (hint > this.log.committed) {
        const t = this.termKnown(hint);
        if (t <= m.prevLogTerm) break;
        hint--;
      }
      this.send<AppendResponse>({
        type: 'appendResponse',
        to: m.from,
        term: this.term,
        success: false,
        rejectedIndex: m.prevLogIndex,
        hintIndex: hint,
        hintTerm: this.termKnown(hint),
      });
      return;
    }
    let lastNew = m.prevLogIndex + m.entries.length;
    const conflict = this.log.findConflict(m.entries);
    if (conflict !== 0) {
      if (conflict <= this.log.committed) {
        throw new RaftInvariantError(`entry ${conflict} conflicts with the committed log (commit ${this.log.committed})`);
      }
      const fresh = m.entries.slice(conflict - m.entries[0].index);
      // At most one membership change beyond the persisted commit: after a crash this
      // peer's membership (rebuilt from the persisted commit) is then at most one change
      // behind its log, which keeps the quorums of any two candidates overlapping.
      let confs = this.countConfChanges(this.persistedHardState.commit + 1, conflict);
      let keep = 0;
      for (; keep < fresh.length; keep++) {
        if (fresh[keep].type === 'confChange') {
          if (confs >= 1) break;
          confs++;
        }
      }
      this.log.append(fresh.slice(0, keep));
      lastNew = conflict - 1 + keep;
    }
    this.log.commitTo(Math.min(m.commit, lastNew));
    this.send<AppendResponse>({ type: 'appendResponse', to: m.from, term: this.term, success: true, matchIndex: lastNew });
  }

  private handleHeartbeat(m: HeartbeatRequest): void {
    // m.commit never exceeds what the leader knows this peer holds.
    this.log.commitTo(Math.min(m.commit, this.log.lastIndex()));
    this.leaderCommit = Math.max(this.leaderCommit, m.leaderCommit);
    this.send<HeartbeatResponse>({ type: 'heartbeatResponse', to: m.from, term: this.term });
  }

  private handleInstallSnapshot(m: InstallSnapshotRequest): void {
    const meta = m.snapshot.meta;
    this.leaderCommit = Math.max(this.leaderCommit, meta.index);
    if (meta.index <= this.log.committed) {
      this.send<AppendResponse>({ type: 'appendResponse', to: m.from, term: this.term, success: true, matchIndex: this.log.committed });
      return;
    }
    if (this.log.matchTerm(meta.index, meta.term)) {
      // Our log already holds the snapshot's last entry: keep the log, advance the commit.
      this.log.commitTo(meta.index);
    } else {
      this.log.restore(m.snapshot);
    }
    this.send<AppendResponse>({ type: 'appendResponse', to: m.from, term: this.term, success: true, matchIndex: meta.index });
  }

  private handleAppendResponse(m: AppendResponse): void {
    const pr = this.progress.get(m.from);
    if (pr === undefined) return;
    pr.recentActive = true;
    if (m.success) {
      const advanced = this.acknowledge(pr, m.matchIndex);
      if (pr.next < pr.match + 1) pr.next = pr.match + 1;
      if (pr.state === 'snapshot') {
        if (pr.match >= pr.pendingSnapshot) this.toReplicate(pr);
      } else if (pr.state === 'probe' && m.matchIndex >= pr.match) {
        this.toReplicate(pr);
      }
      if (advanced && this.maybeCommit()) this.broadcastHeartbeat();
      this.sendAppend(m.from, false);
      return;
    }
    // A rejection still tells how far the follower's log equals ours: up to the hint, when
    // we hold that very entry (same index and term, hence the same log before it).
    const hintMatches = m.hintIndex <= this.log.lastIndex() && this.log.term(m.hintIndex) === m.hintTerm;
    if (hintMatches && this.acknowledge(pr, m.hintIndex)) {
      if (pr.next < pr.match + 1) pr.next = pr.match + 1;
      if (this.maybeCommit()) this.broadcastHeartbeat();
    }
    if (pr.state === 'snapshot') return;
    if (pr.state === 'replicate') {
      if (m.rejectedIndex <= pr.match) return; // stale
      // The follower lacks entries we already sent: they are still on their way (a
      // reordered network), or lost, in which case the heartbeat answers resend them
      // once nothing has progressed for resendTicks.
      if (hintMatches && pr.next - 1 >= m.rejectedIndex) return;
    }
    if (pr.state === 'probe' && m.rejectedIndex !== pr.next - 1) return; // stale
    const k = this.lastIndexWithTermAtMost(m.hintIndex, m.hintTerm);
    pr.next = Math.max(pr.match + 1, Math.min(m.rejectedIndex, k + 1));
    this.toProbe(pr);
    this.sendAppend(m.from, true);
  }

  private handleHeartbeatResponse(m: HeartbeatResponse): void {
    const pr = this.progress.get(m.from);
    if (pr === undefined) return;
    pr.recentActive = true;
    const last = this.log.lastIndex();
    if (pr.state === 'probe') {
      pr.paused = false;
      if (pr.match < last) this.sendAppend(m.from, true);
    } else if (pr.state === 'replicate') {
      // An append (or its answer) was lost: start again from what the follower holds.
      if (pr.match < last && this.ticks - pr.waitingSince >= this.resendTicks) {
        pr.next = pr.match + 1;
        this.toProbe(pr);
        this.sendAppend(m.from, true);
      }
    } else if (this.ticks - pr.snapshotSentAt >= this.electionTicks) {
      // The snapshot (or its answer) was lost: probe again, which resends it if needed.
      pr.next = pr.match + 1;
      this.toProbe(pr);
      this.sendAppend(m.from, true);
    }
  }

  // ---------------------------------------------------------------------------------
  // Replication (leader)

  private newProgress(next: number): Progress {
    return { match: 0, next, state: 'probe', paused: false, pendingSnapshot: 0, snapshotSentAt: 0, waitingSince: this.ticks, inflight: [], recentActive: false };
  }

  /** The follower holds our log up to `index` (persisted): returns whether that is news. */
  private acknowledge(pr: Progress, index: number): boolean {
    if (index <= pr.match) return false;
    pr.match = index;
    pr.waitingSince = this.ticks;
    let acked = 0;
    while (acked < pr.inflight.length && pr.inflight[acked] <= pr.match) acked++;
    if (acked > 0) pr.inflight.splice(0, acked);
    return true;
  }

  private toProbe(pr: Progress): void {
    pr.state = 'probe';
    pr.paused = false;
    pr.inflight = [];
  }

  private toReplicate(pr: Progress): void {
    pr.state = 'replicate';
    pr.paused = false;
    // Only one append was in flight (probe) or the snapshot: the answer says exactly where to go on.
    pr.next = pr.match + 1;
    pr.waitingSince = this.ticks;
    pr.inflight = [];
  }

  private appendAsLeader(e: { type: 'normal'; data: Uint8Array } | { type: 'confChange'; change: ConfChange }): ProposeResult {
    const index = this.log.lastIndex() + 1;
    const entry: Entry = e.type === 'normal' ? { index, term: this.term, type: 'normal', data: e.data } : { index, term: this.term, type: 'confChange', change: e.change };
    this.log.append([entry]);
    this.broadcastAppend();
    return { ok: true, index, term: this.term };
  }

  private broadcastAppend(): void {
    for (const peer of this.progress.keys()) this.sendAppend(peer, false);
  }

  private broadcastHeartbeat(): void {
    const commit = this.log.committed;
    for (const [to, pr] of this.progress) {
      this.send<HeartbeatRequest>({ type: 'heartbeat', to, term: this.term, commit: Math.min(pr.match, commit), leaderCommit: commit });
    }
  }

  /**
   * Sends what `to` lacks. Probe: one append, then wait for its answer. Replicate: the
   * entries not sent yet, in batches, without waiting for answers, up to
   * maxInflightAppends unacknowledged messages. Snapshot: nothing until the snapshot is
   * acknowledged.
   */
  private sendAppend(to: PeerId, sendIfEmpty: boolean): void {
    const pr = this.progress.get(to);
    if (pr === undefined || pr.state === 'snapshot' || (pr.state === 'probe' && pr.paused)) return;
    const last = this.log.lastIndex();
    if (pr.next > last + 1) throw new RaftInvariantError(`next ${pr.next} for ${to} beyond the last index ${last}`);
    let first = true;
    while (first || (pr.state === 'replicate' && pr.next <= last && pr.inflight.length < this.maxInflight)) {
      if (pr.state === 'replicate' && pr.inflight.length >= this.maxInflight) return;
      const prevIndex = pr.next - 1;
      const prevTerm = pr.next < this.log.firstIndex() ? undefined : this.log.term(prevIndex);
      if (prevTerm === undefined) {
        this.sendSnapshot(to, pr);
        return;
      }
      const entries = this.log.slice(pr.next, Math.min(last + 1, pr.next + this.maxEntries));
      if (entries.length === 0 && pr.state === 'replicate' && !(first && sendIfEmpty)) return;
      this.send<AppendRequest>({ type: 'append', to, term: this.term, prevLogIndex: prevIndex, prevLogTerm: prevTerm, entries, commit: this.log.committed });
      first = false;
      if (pr.state === 'probe') {
        pr.paused = true;
        return;
      }
      if (entries.length === 0) return;
      if (pr.match === pr.next - 1) pr.waitingSince = this.ticks;
      pr.next = entries[entries.length - 1].index + 1;
      pr.inflight.push(pr.next - 1);
    }
  }

  private sendFinalAppend(to: PeerId, pr: Progress): void {
    const prevTerm = pr.match + 1 < this.log.firstIndex() ? undefined : this.log.term(pr.match);
    if (prevTerm === undefined) return;
    const entries = this.log.slice(pr.match + 1, Math.min(this.log.committed + 1, pr.match + 1 + this.maxEntries));
    this.send<AppendRequest>({ type: 'append', to, term: this.term, prevLogIndex: pr.match, prevLogTerm: prevTerm, entries, commit: this.log.committed });
  }

  private sendSnapshot(to: PeerId, pr: Progress): void {
    let snapshot: Snapshot;
    try {
      snapshot = this.storage.snapshot();
    } catch (e) {
      if (e instanceof StorageError && e.kind === 'snapshotTemporarilyUnavailable') return;
      throw e;
    }
    if (snapshot.meta.index + 1 < this.log.firstIndex()) {
      throw new StorageError('failure', `the snapshot at ${snapshot.meta.index} does not reach the first held entry ${this.log.firstIndex()}`);
    }
    this.send<InstallSnapshotRequest>({ type: 'installSnapshot', to, term: this.term, snapshot });
    pr.state = 'snapshot';
    pr.pendingSnapshot = snapshot.meta.index;
    pr.snapshotSentAt = this.ticks;
    pr.paused = false;
    pr.inflight = [];
  }

  /** Largest index <= `index` whose term is <= `term` in this log (stops at the compaction point). */
  private lastIndexWithTermAtMost(index: number, term: number): number {
    let k = Math.min(index, this.log.lastIndex());
    while (k > 0) {
      const t = this.log.term(k);
      if (t === undefined || t <= term) break;
      k--;
    }
    return k;
  }

  /** Commits the highest index held by a majority of voters, if it is from this term. */
  private maybeCommit(): boolean {
    if (this.voters.size === 0) return false;
    const matches: number[] = [];
    for (const v of this.voters) {
      matches.push(v === this.id ? this.log.stableLastIndex() : this.progress.get(v)?.match ?? 0);
    }
    matches.sort((a, b) => b - a);
    const candidate = matches[quorum(this.voters.size) - 1];
    if (candidate > this.log.committed && this.log.term(candidate) === this.term) {
      this.log.commitTo(candidate);
      return true;
    }
    return false;
  }

  private quorumActive(): boolean {
    let active = 0;
    for (const v of this.voters) {
      if (v === this.id || this.progress.get(v)?.recentActive === true) active++;
    }
    return active >= quorum(this.voters.size);
  }

  // ---------------------------------------------------------------------------------
  // Membership

  private members(): PeerId[] {
    return [...this.voters, ...this.learners];
  }

  private invalidConfChange(change: ConfChange): string | null {
    const isVoter = this.voters.has(change.peer);
    const isLearner = this.learners.has(change.peer);
    switch (change.type) {
      case 'addLearner':
        return isVoter || isLearner ? `peer ${change.peer} is already a member` : null;
      case 'promoteLearner':
        return isLearner ? null : `peer ${change.peer} is not a learner`;
      case 'removePeer':
        if (!isVoter && !isLearner) return `peer ${change.peer} is not a member`;
        return isVoter && this.voters.size === 1 ? `peer ${change.peer} is the last voter` : null;
    }
  }

  /** Applies a committed membership change to the sets (deterministic; a change that no longer fits is a no-op). */
  private changeMembership(change: ConfChange): void {
    switch (change.type) {
      case 'addLearner':
        if (!this.voters.has(change.peer)) this.learners.add(change.peer);
        return;
      case 'promoteLearner':
        if (this.learners.delete(change.peer)) this.voters.add(change.peer);
        return;
      case 'removePeer':
        this.voters.delete(change.peer);
        this.learners.delete(change.peer);
        return;
    }
  }

  private afterMembershipChange(): void {
    if (this.role === 'leader') {
      const next = this.log.lastIndex() + 1;
      for (const peer of this.members()) {
        if (peer !== this.id && !this.progress.has(peer)) this.progress.set(peer, this.newProgress(next));
      }
      for (const [peer, pr] of [...this.progress]) {
        if (this.voters.has(peer) || this.learners.has(peer)) continue;
        // A removed peer is sent the log up to the commit one last time, so that it can
        // apply its own removal and know it is out (it is not contacted afterwards).
        this.sendFinalAppend(peer, pr);
        this.progress.delete(peer);
      }
      if (!this.voters.has(this.id)) {
        // Removed: tell the others how far the log is committed, then stand down.
        this.broadcastHeartbeat();
        this.becomeFollower(this.term, null);
        return;
      }
      for (const peer of this.progress.keys()) this.sendAppend(peer, false);
    } else if (this.role !== 'follower' && !this.voters.has(this.id)) {
      this.becomeFollower(this.term, null);
    }
  }

  private countConfChanges(lo: number, hi: number): number {
    const from = Math.max(lo, this.log.firstIndex());
    let n = 0;
    for (const e of this.log.slice(from, Math.min(hi, this.log.lastIndex() + 1))) if (e.type === 'confChange') n++;
    return n;
  }

  // ---------------------------------------------------------------------------------
  // Proposals and faults

  private refuseProposal(): ProposeResult | null {
    if (this.fault !== null) return { ok: false, reason: 'storageFault', message: `storage failed: ${this.fault.message}` };
    if (this.role !== 'leader') {
      return {
        ok: false,
        reason: 'notLeader',
        leader: this.leader,
        message: this.leader === null ? `peer ${this.id} is not the leader and knows no leader` : `peer ${this.id} is not the leader; the leader is ${this.leader}`,
      };
    }
    if (this.leaving) {
      return { ok: false, reason: 'leaderLeaving', message: `leader ${this.id} is being removed from the cluster and accepts no more proposals` };
    }
    return null;
  }

  /** A term the log must hold (between the commit and the last index). */
  private termKnown(index: number): number {
    const t = this.log.term(index);
    if (t === undefined) throw new StorageError('failure', `term of entry ${index} unknown (log ${this.log.firstIndex()}..${this.log.lastIndex()})`);
    return t;
  }

  private assertNoReady(what: string): void {
    if (this.outstanding !== null) throw new RaftInvariantError(`${what}() while a Ready is outstanding: call advance() first`);
  }

  private guarded(fn: () => void): void {
    if (this.fault !== null) return;
    try {
      fn();
    } catch (e) {
      if (e instanceof StorageError) this.enterFault(e);
      else throw e;
    }
  }

  private guardedResult(fn: () => ProposeResult): ProposeResult {
    try {
      return fn();
    } catch (e) {
      if (!(e instanceof StorageError)) throw e;
      this.enterFault(e);
      return { ok: false, reason: 'storageFault', message: `storage failed: ${e.message}` };
    }
  }

  /**
   * Storage failed: this peer cannot know its own log any more, so it stops taking part
   * (a crash, as far as the others can tell). Unsent messages and unpersisted state
   * are dropped, as a crash would drop them.
   */
  private enterFault(e: StorageError): void {
    this.fault = e;
    this.msgs = [];
    this.role = 'follower';
    this.leader = null;
    this.progress.clear();
    this.votes.clear();
  }
}
