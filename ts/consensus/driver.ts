/**
 * The consensus driver of one cluster peer: runs the pure Raft core (raft.ts) on a
 * timer, persists what it asks with fsync before sending its messages, hands committed
 * entries in log order to the replicated state machine it is constructed with
 * (machine.ts), reaches the other peers through the transport it is constructed with
 * (transport.ts), and lets callers propose entries and wait until they are applied here.
 *
 * Owns: the tick timer (`cluster.consensus.tick_period_ms`), the ready loop (persist →
 * send → apply → advance; inputs that arrive meanwhile wait in an inbox), joining a
 * running cluster (`--bootstrap`) and founding one (`--uri`), promoting learners once
 * they caught up, forwarding proposals to the leader, waiting for an applied index
 * (with a timeout), compaction every `compact_wal_entries` applied entries, recovery
 * from the leader's snapshot (POST /cluster/recover), stopping for good on a storage
 * error (no more votes, acknowledgements or proposals), and telling a lost quorum
 * apart from an election under way (when each peer was last heard from): without a
 * majority of voters reachable, calls answer at once that nothing can commit, naming
 * the missing peers, instead of waiting out their timeout.
 * Must never: block the event loop (all file I/O is asynchronous), send a message
 * before what it acknowledges is durable, or apply entries out of log order; know what
 * an entry means (the state machine does) or how a peer is reached (the transport
 * does): it imports no storage, collection or api module and no wire library.
 */

import type { Logger } from 'pino';

import { BadInputError, ClusterUnavailableError, NotFoundError, QuiverError, ServiceError, TimeoutError } from '../common/errors';
import type { ClusterConfig } from '../config/types';
import { confChangeFromJson, decodeMessage, decodeSnapshot, encodeMessage, encodeSnapshot } from './codec';
import { FileRaftStorage } from './file-storage';
import type { ReplicatedStateMachine } from './machine';
import { RaftNode, quorum, type Ready, type Role } from './raft';
import type { RaftStorage } from './storage';
import { PeerCallError, type JoinRequest, type JoinResponse, type PeerHandlers, type PeerTransport, type SendFailures } from './transport';
import type { ConfChange, Entry, HardState, PeerId, Snapshot } from './types';

interface Waiter {
  term: number;
  resolve(value: unknown): void;
  reject(err: Error): void;
}

/** Outcome of an applied entry, kept for a while for callers that learn the index late. */
interface Applied {
  term: number;
  outcome: Promise<unknown>;
}

const RECENT_APPLIED = 4096;
/** How long a proposer waits for the other peers to apply its change (the call answers either way). */
const PEER_SYNC_MS = 1000;
/** Entries kept in the log behind a compaction snapshot. */
const COMPACTION_MARGIN = 32;
/** Election timeout of the core, in ticks (plus a random 0 to the same again). */
const ELECTION_TICKS = 10;
/**
 * A voter counts as unreachable once nothing came from it for this many of the longest
 * election timeouts (2 × ELECTION_TICKS ticks: 5 s at the default tick of 100 ms). A
 * leaderless peer campaigns at least once per election timeout, and every voter answers a
 * pre-vote (granted or not), so a reachable voter is heard from well within it.
 */
const UNREACHABLE_AFTER_TIMEOUTS = 2.5;

export interface DriverOptions {
  /** `cluster.consensus` of the configuration. */
  settings: ClusterConfig['consensus'];
  logger: Logger;
  /** Where the Raft log and hard state live (`storage/raft`). */
  dir: string;
  peerId: PeerId;
  /** This peer's URI for the others (`--uri`); required for the first peer. */
  uri: string | null;
  /** URI of a running peer to join (`--bootstrap`). */
  bootstrap: string | null;
  machine: ReplicatedStateMachine;
  transport: PeerTransport;
}

export type ThreadStatus =
  | { consensus_thread_status: 'working'; last_update: string }
  | { consensus_thread_status: 'stopped' }
  | { consensus_thread_status: 'stopped_with_err'; err: string };

export interface ConsensusStatus {
  peerId: PeerId;
  uri: string | null;
  peers: Record<PeerId, string>;
  role: Role;
  term: number;
  commit: number;
  applied: number;
  leader: PeerId | null;
  isVoter: boolean;
  thread: ThreadStatus;
  sendFailures: Record<string, SendFailures>;
}

export class ConsensusDriver {
  private node!: RaftNode;
  private port = 0;
  private timer: NodeJS.Timeout | null = null;
  private busy = false;
  private pendingTicks = 0;
  private readonly inbox: Array<() => void | Promise<void>> = [];
  private readonly waiters = new Map<number, Waiter>();
  private readonly recent = new Map<number, Applied>();
  /**
   * The terms of the entries this driver applied itself (not through a snapshot), as
   * runs: each run's first index and term, oldest first (a term's entries are
   * contiguous in the log, so there is one run per term). Kept whole, unlike `recent`:
   * an entry's term is what tells it from another that took its index in a leader change.
   */
  private appliedTerms: Array<{ from: number; term: number }> = [];
  /** The first index of appliedTerms' first run (Infinity: none applied since the start or the last snapshot installed). */
  private termsFrom = Infinity;
  /** Conditional membership changes the state machine refused, among the entries of appliedTerms. */
  private readonly refusedChanges = new Set<number>();
  /** URIs known before the state machine names them (a joiner's bootstrap answer). */
  private readonly knownUris = new Map<PeerId, string>();
  private appliedSinceSnapshot = 0;
  /** Highest entry applied here (its local effects may still be queued by the state machine). */
  private appliedIndex = 0;
  private appliedListeners: Array<{ index: number; resolve(): void }> = [];
  private fault: Error | null = null;
  private stopped = false;
  private lastUpdate = new Date();
  /** When each other peer's last Raft message to this one arrived (ms since the epoch). */
  private readonly heard = new Map<PeerId, number>();
  /** When this driver started: before a full window has passed, no peer is said to be unreachable. */
  private readonly startedAt = Date.now();
  private ownUri: string | null;
  readonly peerId: PeerId;
  private readonly machine: ReplicatedStateMachine;
  private readonly transport: PeerTransport;
  private readonly log: Logger;

  private constructor(
    private readonly opts: DriverOptions,
    private readonly storage: FileRaftStorage,
  ) {
    this.peerId = opts.peerId;
    this.machine = opts.machine;
    this.transport = opts.transport;
    this.log = opts.logger;
    this.ownUri = opts.uri;
  }

  /**
   * Opens the consensus state in `dir` and starts the peer: founds a cluster (empty
   * state, no --bootstrap), joins one (empty state, --bootstrap), or restarts from the
   * persisted state (--bootstrap is then ignored).
   */
  static async start(opts: DriverOptions): Promise<ConsensusDriver> {
    const { peerId, machine } = opts;
    const storage = await FileRaftStorage.open(opts.dir);
    const c = new ConsensusDriver(opts, storage);
    const fresh = storage.isEmpty();
    if (fresh && opts.bootstrap === null) {
      if (opts.uri === null) {
        await storage.close();
        throw new ConsensusStartError('the first peer of a cluster needs --uri (its own address for the other peers, e.g. http://10.0.0.1:6335); later peers are started with --bootstrap <uri of a running peer>');
      }
      await storage.bootstrap({ voters: [peerId], learners: [] }, machine.founding(peerId, opts.uri));
      c.log.info({ peerId, uri: opts.uri }, 'founded a new cluster');
    } else if (!fresh && opts.bootstrap !== null) {
      c.log.info({ bootstrap: opts.bootstrap }, 'consensus state found on disk: restarting with it, --bootstrap ignored');
    }
    c.node = c.newNode();
    // The state machine takes the snapshot's state; the committed entries after it are
    // replayed into it when the loop starts (its local effects may already reflect them).
    await machine.open(storage.snapshot().data, storage.snapshot().meta.index, storage.initialState().hardState.commit);
    const known = machine.peers()[peerId];
    if (known !== undefined) {
      if (opts.uri !== null && opts.uri !== known) c.log.warn({ uri: opts.uri, known }, '--uri differs from the URI the cluster knows this peer by; the known one stays');
      c.ownUri = known;
    }
    try {
      c.port = await c.transport.serve(c.handlers());
    } catch (err) {
      await storage.close();
      throw new ConsensusStartError((err as Error).message);
    }
    c.timer = setInterval(() => c.onTick(), opts.settings.tick_period_ms);
    c.timer.unref?.();
    c.kick();
    if (fresh && opts.bootstrap !== null) {
      try {
        await c.join(opts.bootstrap);
      } catch (err) {
        await c.close();
        throw err;
      }
    }
    return c;
  }

  private newNode(): RaftNode {
    return new RaftNode({ id: this.peerId, storage: this.storage, random: Math.random, electionTicks: ELECTION_TICKS, heartbeatTicks: 2 });
  }

  // -- joining -----------------------------------------------------------------------------

  private async join(bootstrap: string): Promise<void> {
    const deadline = Date.now() + this.opts.settings.bootstrap_timeout_sec * 1000;
    const req: JoinRequest = { peerId: this.peerId, uri: this.ownUri ?? '', port: this.port };
    let last: unknown = null;
    for (;;) {
      try {
        const res = await this.transport.join(bootstrap, req, Math.max(1000, deadline - Date.now()));
        for (const [id, uri] of Object.entries(res.peers)) this.knownUris.set(id, uri);
        this.ownUri = res.uri;
        this.log.info({ bootstrap, uri: res.uri, peers: Object.keys(res.peers).length, leader: res.leaderId }, 'joined the cluster as a learner');
        return;
      } catch (err) {
        last = err;
      }
      if (Date.now() >= deadline) break;
      await new Promise((r) => setTimeout(r, 300));
    }
    throw new ConsensusStartError(
      `could not join the cluster through ${bootstrap} within cluster.consensus.bootstrap_timeout_sec (${this.opts.settings.bootstrap_timeout_sec} s): ${last instanceof Error ? last.message : String(last)}`,
    );
  }

  /** A peer asks to join (through this peer): the leader adds it as a learner. */
  private async onJoin(req: JoinRequest, callerHost: string | null): Promise<JoinResponse> {
    if (!/^[1-9][0-9]{0,19}$/.test(req.peerId)) throw new PeerCallError('invalid_argument', `peer id ${JSON.stringify(req.peerId)} is not an unsigned 64-bit number`);
    const st = this.node.status();
    if (st.role !== 'leader') {
      if (st.leader === null) throw new PeerCallError('unavailable', this.quorumLoss() ?? 'no leader elected yet; retry');
      return this.transport.join(this.uriOf(st.leader), req);
    }
    let uri = req.uri;
    if (uri === '') {
      if (callerHost === null || req.port === 0) throw new PeerCallError('invalid_argument', 'the joiner sent no URI and its address cannot be derived');
      uri = `http://${callerHost.includes(':') ? `[${callerHost}]` : callerHost}:${req.port}`;
    }
    const members = [...st.conf.voters, ...st.conf.learners];
    if (!members.includes(req.peerId)) {
      const timeoutMs = this.opts.settings.bootstrap_timeout_sec * 1000;
      await this.proposeConfChangeLocal({ type: 'addLearner', peer: req.peerId, context: uri }, timeoutMs);
    }
    const peers = this.machine.peers();
    return { peers: { ...peers, [req.peerId]: peers[req.peerId] ?? uri }, leaderId: this.peerId, uri: peers[req.peerId] ?? uri };
  }

  // -- the loop ------------------------------------------------------------------------------

  private onTick(): void {
    if (this.stopped) return;
    this.pendingTicks = Math.min(this.pendingTicks + 1, 5);
    this.kick();
    if (this.waiters.size > 0) this.failWaitersWithoutQuorum();
  }

  private kick(): void {
    if (this.busy || this.stopped) return;
    void this.run();
  }

  private async run(): Promise<void> {
    this.busy = true;
    try {
      for (;;) {
        if (this.stopped) return;
        while (this.pendingTicks > 0) {
          this.pendingTicks--;
          this.node.tick();
        }
        for (let fn = this.inbox.shift(); fn !== undefined; fn = this.inbox.shift()) {
          const pending = fn();
          if (pending) await pending;
        }
        if (this.node.status().role === 'leader') this.promoteLearners();
        if (!this.node.hasReady()) break;
        const rd = this.node.ready();
        const refused = await this.handleReady(rd);
        this.node.advance(rd, refused);
        this.lastUpdate = new Date();
        await this.maybeCompact();
      }
    } catch (err) {
      this.halt(err as Error);
    } finally {
      this.busy = false;
    }
    if (this.pendingTicks > 0 || this.inbox.length > 0) this.kick();
  }

  /** Persists, sends and applies `rd`; answers the conditional membership changes the state machine refused. */
  private async handleReady(rd: Ready): Promise<Set<number>> {
    await this.storage.persist({ snapshot: rd.snapshot, entries: rd.entries, hardState: rd.hardState });
    if (rd.snapshot) this.installSnapshot(rd.snapshot);
    for (const m of rd.messages) this.sendTo(m.to, encodeMessage(m));
    const refused = new Set<number>();
    for (const e of rd.committedEntries) this.applyEntry(e, refused);
    return refused;
  }

  /** Stops for good: a storage error means this peer's votes and acknowledgements can no longer be trusted. */
  private halt(err: Error): void {
    if (this.fault !== null) return;
    this.fault = err;
    this.log.error({ err }, 'consensus stopped: this peer no longer votes, acknowledges or proposes');
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const [, w] of this.waiters) w.reject(new ServiceError(`consensus stopped on this peer: ${err.message}`));
    this.waiters.clear();
  }

  private sendTo(peer: PeerId, bytes: Uint8Array): void {
    const uri = this.machine.peers()[peer] ?? this.knownUris.get(peer);
    if (uri === undefined) {
      this.log.debug({ peer }, 'message for a peer without a known URI dropped');
      return;
    }
    this.transport.send(uri, bytes);
  }

  private uriOf(peer: PeerId): string {
    const uri = this.machine.peers()[peer] ?? this.knownUris.get(peer);
    if (uri === undefined) throw new ClusterUnavailableError(`the URI of peer ${peer} is not known yet; retry`);
    return uri;
  }

  private promoteLearners(): void {
    const st = this.node.status();
    if (st.conf.learners.length === 0 || st.progress === null) return;
    for (const learner of st.conf.learners) {
      const pr = st.progress.get(learner);
      if (pr === undefined || pr.match < st.commit) continue;
      const r = this.node.proposeConfChange({ type: 'promoteLearner', peer: learner });
      if (r.ok) this.log.info({ peer: learner, index: r.index }, 'learner caught up: promoting it to voter');
      return; // one change at a time
    }
  }

  // -- applying ------------------------------------------------------------------------------

  private installSnapshot(snap: Snapshot): void {
    const outcome = this.machine.installSnapshot(snap.meta.index, snap.data);
    this.appliedSinceSnapshot = 0;
    for (const [index, w] of this.waiters) {
      if (index <= snap.meta.index) {
        w.reject(new ServiceError(`the operation's entry ${index} was replaced by a consensus snapshot at ${snap.meta.index}: its outcome is in the state, check it`));
        this.waiters.delete(index);
      }
    }
    this.log.info({ index: snap.meta.index, term: snap.meta.term }, 'installed a consensus snapshot');
    // The entries the snapshot covers were not applied here one by one: their terms (and refusals) are unknown.
    this.appliedTerms = [];
    this.termsFrom = Infinity;
    this.refusedChanges.clear();
    this.track(snap.meta.index, snap.meta.term, outcome);
  }

  private applyEntry(e: Entry, refused: Set<number>): void {
    let outcome: Promise<unknown>;
    const refusal = e.type === 'confChange' && e.change.type === 'removePeer' && e.change.conditional === true ? (this.machine.refuseConfChange?.(e.change) ?? null) : null;
    if (e.type === 'normal') {
      outcome = this.machine.applyNormal(e.index, e.data);
    } else if (refusal !== null) {
      // Refused on every peer alike: the entry is a no-op and the membership stays.
      refused.add(e.index);
      this.log.warn({ index: e.index, change: e.type === 'confChange' ? e.change : null, reason: refusal.message }, 'membership change refused when applied');
      outcome = this.machine.applyNoop(e.index).then(() => Promise.reject(refusal));
    } else if (e.type === 'confChange') {
      outcome = this.machine.applyConfChange(e.index, e.change);
      if (e.change.type === 'removePeer') {
        const uri = this.knownUris.get(e.change.peer);
        if (uri !== undefined) this.transport.forget(uri);
        if (e.change.peer === this.peerId) this.log.warn('this peer was removed from the cluster: it can be shut down');
      }
    } else {
      outcome = this.machine.applyNoop(e.index);
    }
    this.track(e.index, e.term, outcome, true, refusal !== null);
    this.appliedSinceSnapshot++;
  }

  /** The term of entry `index` if this driver applied it itself, else null. */
  private appliedTermOf(index: number): number | null {
    if (index < this.termsFrom || index > this.appliedIndex) return null;
    let lo = 0;
    let hi = this.appliedTerms.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.appliedTerms[mid].from <= index) lo = mid;
      else hi = mid - 1;
    }
    return this.appliedTerms[lo].term;
  }

  /** `entry`: an entry applied here (not a snapshot); `refused`: a conditional membership change the machine refused. */
  private track(index: number, term: number, outcome: Promise<unknown>, entry = false, refused = false): void {
    outcome.catch(() => undefined); // observed by waiters; never an unhandled rejection
    if (entry && index > this.appliedIndex) {
      if (this.termsFrom === Infinity) this.termsFrom = index;
      const last = this.appliedTerms[this.appliedTerms.length - 1];
      if (last === undefined || last.term !== term) this.appliedTerms.push({ from: index, term });
      if (refused) this.refusedChanges.add(index);
    }
    if (index > this.appliedIndex) {
      this.appliedIndex = index;
      if (this.appliedListeners.length > 0) {
        const due = this.appliedListeners.filter((l) => l.index <= index);
        this.appliedListeners = this.appliedListeners.filter((l) => l.index > index);
        for (const l of due) l.resolve();
      }
    }
    this.recent.set(index, { term, outcome });
    if (this.recent.size > RECENT_APPLIED) {
      const first = this.recent.keys().next().value as number;
      this.recent.delete(first);
    }
    const w = this.waiters.get(index);
    if (w) {
      this.waiters.delete(index);
      if (w.term !== term) w.reject(new ClusterUnavailableError('the operation was lost in a leader change; retry'));
      else outcome.then(w.resolve, w.reject);
    }
    for (const [i, other] of this.waiters) {
      // A later entry applied while an earlier index still waits: that index was already applied (from a snapshot).
      if (i < index) {
        this.waiters.delete(i);
        other.reject(new ServiceError(`entry ${i} was applied before its caller waited; check the state`));
      }
    }
  }

  private async maybeCompact(): Promise<void> {
    const every = this.opts.settings.compact_wal_entries;
    if (this.appliedSinceSnapshot < every) return;
    const st = this.node.status();
    const snapIndex = this.storage.snapshot().meta.index;
    if (st.applied <= snapIndex) return;
    await this.storage.createSnapshot(st.applied, this.node.appliedConfState(), this.machine.encode());
    // Keep a few entries behind the snapshot: a follower a little behind gets entries, not the snapshot.
    const keep = Math.min(COMPACTION_MARGIN, every);
    if (st.applied - keep > this.storage.firstIndex() - 1) await this.storage.compact(st.applied - keep);
    this.appliedSinceSnapshot = 0;
    this.log.debug({ index: st.applied }, 'consensus log compacted into a snapshot');
  }

  // -- proposing -----------------------------------------------------------------------------

  private requireRunning(): void {
    if (this.fault !== null) throw new ServiceError(`consensus stopped on this peer after a storage error: ${this.fault.message}`);
    if (this.stopped) throw new ClusterUnavailableError('consensus is shutting down on this peer');
  }

  /** Runs `fn` on the node between two ready cycles. */
  private onNode<T>(fn: (node: RaftNode) => T): Promise<T> {
    return new Promise((resolve, reject) => {
      this.inbox.push(() => {
        try {
          resolve(fn(this.node));
        } catch (err) {
          reject(err);
        }
      });
      this.kick();
    });
  }

  private async proposeLocal(data: Uint8Array, confChange: ConfChange | null): Promise<{ index: number; term: number }> {
    const r = await this.onNode((n) => (confChange ? n.proposeConfChange(confChange) : n.propose(data)));
    if (r.ok) return { index: r.index, term: r.term };
    if (r.reason === 'notLeader') throw new PeerCallError('not_leader', `not the leader${r.leader ? ` (the leader is ${r.leader})` : ''}`);
    if (r.reason === 'storageFault') throw new PeerCallError('internal', r.message);
    throw new PeerCallError('unavailable', r.message);
  }

  private async proposeConfChangeLocal(change: ConfChange, timeoutMs: number): Promise<unknown> {
    const r = await this.proposeLocal(new Uint8Array(0), change);
    return this.waitApplied(r.index, r.term, timeoutMs);
  }

  /** Proposes on the leader (forwarding when this peer is not it) and answers the index and term given. */
  private async submit(data: Uint8Array, confChange: ConfChange | null, timeoutMs: number): Promise<{ index: number; term: number }> {
    this.requireRunning();
    const st = this.node.status();
    try {
      if (st.role === 'leader') return await this.proposeLocal(data, confChange);
      if (st.leader === null) {
        throw new ClusterUnavailableError(
          this.quorumLoss() ?? 'the cluster has no leader right now (it is starting, or electing one after a failure); metadata changes are refused until one is elected: retry',
        );
      }
      const op = confChange ? Buffer.from(JSON.stringify(confChange)) : data;
      return await this.transport.propose(this.uriOf(st.leader), op, confChange !== null, timeoutMs);
    } catch (err) {
      if (err instanceof PeerCallError) {
        if (err.reason === 'timeout') throw new TimeoutError(`the leader did not answer within ${timeoutMs / 1000} s`);
        throw new ClusterUnavailableError(`the leader refused or could not take the change: ${err.message}`);
      }
      throw err;
    }
  }

  /**
   * Why no metadata change can be made now, when this peer knows it: it is a voter, it
   * has no leader, and fewer voters than a majority (itself included) were heard from
   * within the unreachable window, so no leader can be elected and nothing can commit
   * until enough of them are back. Null otherwise (a leader, a known leader, a learner, a
   * majority reachable: an election is on or about to be; or too soon after start to say).
   */
  private quorumLoss(): string | null {
    if (this.fault !== null || this.stopped) return null;
    const st = this.node.status();
    if (st.role === 'leader' || st.leader !== null || !st.isVoter) return null;
    const now = Date.now();
    const windowMs = UNREACHABLE_AFTER_TIMEOUTS * 2 * ELECTION_TICKS * this.opts.settings.tick_period_ms;
    if (now - this.startedAt < windowMs) return null;
    const voters = st.conf.voters;
    const needed = quorum(voters.length);
    const silent = voters.filter((v) => v !== this.peerId && now - (this.heard.get(v) ?? 0) >= windowMs);
    const reachable = voters.length - silent.length;
    if (reachable >= needed) return null;
    const peers = this.machine.peers();
    const missing = silent
      .map((v) => {
        const at = this.heard.get(v);
        const since = at === undefined ? `not since this peer started ${Math.round((now - this.startedAt) / 1000)} s ago` : `for ${Math.round((now - at) / 1000)} s`;
        return `peer ${v}${peers[v] !== undefined ? ` (${peers[v]})` : ''} not heard from ${since}`;
      })
      .join(', ');
    return (
      `the cluster has no leader and cannot elect one: consensus has no quorum: ${reachable} of ${voters.length} voters reachable from this peer, ${needed} needed (${missing}). ` +
      'Metadata changes (collections, aliases, payload indexes, shard transfers and replicas, adding or removing peers) are refused until a majority of voters is back' +
      (voters.length === 2 ? '; a cluster of 2 voters needs both' : '') +
      ': restart the missing peers with their storage; for a peer lost for good see "Recovering from node loss" in docs/cluster.md'
    );
  }

  /**
   * Calls waiting for an entry that cannot commit (no quorum: see quorumLoss) answer now
   * instead of at their timeout. Their entry stays in this peer's log: a leader elected
   * once enough peers are back may still commit and apply it.
   */
  private failWaitersWithoutQuorum(): void {
    const lost = this.quorumLoss();
    if (lost === null) return;
    const commit = this.node.status().commit;
    for (const [index, w] of this.waiters) {
      if (index <= commit) continue; // committed: it is being applied
      this.waiters.delete(index);
      w.reject(new ClusterUnavailableError(`the change (consensus entry ${index}) was not committed: ${lost}. It may still be applied once enough peers are back`));
    }
  }

  private waitApplied(index: number, term: number, timeoutMs: number): Promise<unknown> {
    const done = this.recent.get(index);
    if (done) {
      if (done.term !== term) return Promise.reject(new ClusterUnavailableError('the operation was lost in a leader change; retry'));
      return done.outcome;
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        if (this.waiters.get(index)?.term === term) this.waiters.delete(index);
        reject(
          new TimeoutError(
            `the change (consensus entry ${index}) was not applied on this peer within ${timeoutMs / 1000} s: a majority of peers may be unreachable; it may still be applied later`,
          ),
        );
      }, timeoutMs);
      this.waiters.set(index, {
        term,
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
    });
  }

  /**
   * Proposes an entry (the state machine's encoding of an operation) and waits until this
   * peer applied it, then (briefly) until the other peers did too, so the change is
   * visible on every reachable peer when the call answers. Answers the entry's outcome.
   */
  async propose(data: Uint8Array, timeoutMs: number): Promise<unknown> {
    const r = await this.submit(data, null, timeoutMs);
    const result = await this.waitApplied(r.index, r.term, timeoutMs);
    await this.awaitPeers(r.index, Math.min(PEER_SYNC_MS, timeoutMs));
    return result;
  }

  /** Waits (at most `timeoutMs`) for every other peer to apply `index`; a peer that is down or slow is not waited for longer. */
  private async awaitPeers(index: number, timeoutMs: number): Promise<void> {
    const others = Object.entries(this.machine.peers()).filter(([id]) => id !== this.peerId);
    await Promise.all(others.map(([, uri]) => this.transport.waitApplied(uri, index, timeoutMs)));
  }

  /**
   * The other peers' side of awaitPeers: resolves true once entry `index` is applied here
   * with its local effects; with `term`, false when the entry applied at `index` has
   * another term (the one waited for was lost in a leader change and another took its
   * place), when it was a conditional membership change this peer's state machine
   * refused, and when this peer cannot tell: it did not apply that entry itself (it came
   * in a snapshot, or before this peer's start). Not `recent`, which keeps only the last
   * entries: an entry that left it was once confirmed whatever its term.
   */
  private async waitLocalApplied(index: number, timeoutMs: number, term: number | null = null): Promise<boolean> {
    if (this.appliedIndex < index) {
      let timer: NodeJS.Timeout | undefined;
      const reached = await new Promise<boolean>((resolve) => {
        const listener = { index, resolve: () => resolve(true) };
        this.appliedListeners.push(listener);
        timer = setTimeout(() => {
          this.appliedListeners = this.appliedListeners.filter((l) => l !== listener);
          resolve(false);
        }, timeoutMs);
      });
      clearTimeout(timer);
      if (!reached) return false;
    }
    if (term !== null && (this.appliedTermOf(index) !== term || this.refusedChanges.has(index))) return false;
    await this.machine.idle();
    return true;
  }

  /** Whether `peer` is a voter or a learner in the applied membership (throws when consensus stopped here). */
  isMember(peer: PeerId): boolean {
    this.requireRunning();
    const conf = this.node.appliedConfState();
    return conf.voters.includes(peer) || conf.learners.includes(peer);
  }

  /**
   * DELETE /cluster/peer/{id}: removes a member. `conditional`: the state machine may
   * refuse the removal when it applies it (refuseConfChange; then this rejects with its
   * error and the peer stays); otherwise whether it may go is the caller's to check first.
   */
  async removePeer(peer: PeerId, timeoutMs: number, conditional = false): Promise<boolean> {
    if (!this.isMember(peer)) throw new NotFoundError(`Peer ${peer} doesn't exist`);
    const r = await this.submit(new Uint8Array(0), conditional ? { type: 'removePeer', peer, conditional: true } : { type: 'removePeer', peer }, timeoutMs);
    if (peer !== this.peerId) {
      await this.waitApplied(r.index, r.term, timeoutMs);
      return true;
    }
    // This peer removes itself (a drain with removal run on the drained peer): once the
    // others applied the removal they stop sending to it, so it may never learn that the
    // entry committed (and, hearing no one, reports lost quorum). Another peer having
    // applied the entry (the same entry: its index and its term, not one that took its
    // index after a leader change) is the answer then, as is this peer applying it. A
    // conditional removal the state machine refused is not: the others answer false for
    // it, and this peer, still a member, applies it and rejects with the refusal (first
    // in the list, so that is the error thrown).
    const local = this.waitApplied(r.index, r.term, timeoutMs);
    local.catch(() => undefined);
    const others = Object.entries(this.machine.peers()).filter(([id]) => id !== this.peerId);
    const remote = others.map(([, uri]) =>
      this.transport.waitApplied(uri, r.index, timeoutMs, r.term).then(
        (applied) => (applied ? true : Promise.reject(new TimeoutError(`peer ${uri} did not apply the removal (consensus entry ${r.index}, term ${r.term}) within ${timeoutMs / 1000} s`))),
      ),
    );
    await Promise.any([local.then(() => true), ...remote]).catch((err: AggregateError) => {
      throw err.errors[0] instanceof Error ? err.errors[0] : new TimeoutError(`the removal (consensus entry ${r.index}) was not seen applied within ${timeoutMs / 1000} s`);
    });
    return true;
  }

  /** POST /cluster/recover: replaces this follower's consensus state with the leader's snapshot. */
  async recover(): Promise<boolean> {
    this.requireRunning();
    // A peer that just started may not have heard from the leader yet: give it two election timeouts.
    const deadline = Date.now() + 2 * 20 * this.opts.settings.tick_period_ms;
    let st = this.node.status();
    while (st.leader === null && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      st = this.node.status();
    }
    if (st.role === 'leader') throw new BadInputError('this peer is the leader: /cluster/recover is called on a peer that lags behind it');
    if (st.leader === null) throw new ClusterUnavailableError(this.quorumLoss() ?? 'the cluster has no leader right now; retry');
    let snap: Snapshot;
    try {
      snap = decodeSnapshot((await this.transport.snapshot(this.uriOf(st.leader))).snapshot);
    } catch (err) {
      if (err instanceof QuiverError) throw err;
      throw new ClusterUnavailableError(`could not get the leader's consensus snapshot: ${(err as Error).message}`);
    }
    await this.exclusive(async () => {
      const now = this.node.status();
      if (now.role === 'leader') throw new BadInputError('this peer became the leader meanwhile: /cluster/recover is called on a peer that lags behind it');
      const plan = recoveryWrite(this.storage, now.applied, now.commit, snap);
      if ('skip' in plan) {
        this.log.info({ snapshot: snap.meta.index, applied: now.applied, commit: now.commit }, `recover: ${plan.skip}: nothing replaced`);
        return;
      }
      await this.storage.persist({ snapshot: snap, entries: plan.entries, hardState: plan.hardState });
      this.node = this.newNode();
      this.installSnapshot(snap);
      this.log.info({ index: snap.meta.index }, 'recover: consensus state replaced by the leader\'s snapshot');
    });
    return true;
  }

  /** Runs `fn` while no ready cycle is in progress (the node is not between ready and advance). */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      // Runs inside run(), which awaits it before the next ready cycle.
      this.inbox.push(() => fn().then(resolve, reject));
      this.kick();
    });
  }

  /** The leader's side of /cluster/recover: a snapshot of its applied state. */
  private async leaderSnapshot(): Promise<{ snapshot: Uint8Array; leaderId: string }> {
    this.requireRunning();
    return this.exclusive(async () => {
      const st = this.node.status();
      if (st.role !== 'leader') throw new PeerCallError('not_leader', 'not the leader');
      let snap = this.storage.snapshot();
      if (st.applied > snap.meta.index) {
        snap = await this.storage.createSnapshot(st.applied, this.node.appliedConfState(), this.machine.encode());
        this.appliedSinceSnapshot = 0;
      }
      return { snapshot: encodeSnapshot(snap), leaderId: this.peerId };
    });
  }

  // -- what the other peers call ----------------------------------------------------------------

  private handlers(): PeerHandlers {
    return {
      onMessage: (bytes: Uint8Array) => {
        if (this.stopped || this.fault !== null) return;
        let m;
        try {
          m = decodeMessage(bytes);
        } catch (err) {
          this.log.warn({ err }, 'malformed consensus message dropped');
          return;
        }
        if (m.to !== this.peerId) return;
        this.heard.set(m.from, Date.now());
        if (this.inbox.length > 10_000) return; // overloaded: Raft retries
        this.inbox.push(() => {
          try {
            this.node.step(m);
          } catch (err) {
            // A message the core refuses (say, from a peer with a broken log) must not stop this peer.
            this.log.warn({ err, from: m.from, type: m.type }, 'consensus message refused');
          }
        });
        this.kick();
      },
      join: (req: JoinRequest, host: string | null) => this.onJoin(req, host),
      propose: async (operation: Uint8Array, confChange: boolean) => {
        this.requireRunning();
        if (confChange) return this.proposeLocal(new Uint8Array(0), confChangeFromJson(JSON.parse(Buffer.from(operation).toString('utf8'))));
        return this.proposeLocal(operation, null);
      },
      snapshot: () => this.leaderSnapshot(),
      whoIs: () => ({ peerId: this.peerId, uri: this.ownUri ?? '' }),
      waitApplied: (index: number, timeoutMs: number, term: number | null) => this.waitLocalApplied(index, timeoutMs, term),
    };
  }

  // -- views -----------------------------------------------------------------------------------

  /** /readyz: this peer applied everything its leader committed, with its local effects (and consensus runs). */
  ready(): boolean {
    return this.fault === null && !this.stopped && this.node.status().caughtUp && this.machine.isIdle();
  }

  status(): ConsensusStatus {
    const st = this.node.status();
    const thread: ThreadStatus =
      this.fault !== null
        ? { consensus_thread_status: 'stopped_with_err', err: this.fault.message }
        : this.stopped
          ? { consensus_thread_status: 'stopped' }
          : { consensus_thread_status: 'working', last_update: this.lastUpdate.toISOString() };
    return {
      peerId: this.peerId,
      uri: this.ownUri,
      peers: { ...this.machine.peers() },
      role: st.role,
      term: st.term,
      commit: st.commit,
      applied: st.applied,
      leader: st.leader,
      isVoter: st.isVoter,
      thread,
      sendFailures: this.transport.sendFailures(),
    };
  }

  /** Entries committed but not applied here, plus calls waiting for theirs. */
  pendingOperations(): number {
    const st = this.node.status();
    return Math.max(0, st.commit - st.applied) + this.waiters.size;
  }

  async close(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const [, w] of this.waiters) w.reject(new ClusterUnavailableError('consensus is shutting down on this peer'));
    this.waiters.clear();
    await this.transport.close();
    // Let a ready cycle in flight finish its writes before the file closes.
    for (let i = 0; i < 500 && this.busy; i++) await new Promise((r) => setTimeout(r, 10));
    await this.machine.idle();
    await this.storage.close();
  }
}

/**
 * What POST /cluster/recover persists in place of a follower's log: the leader's snapshot,
 * then the follower's own entries after it when its log holds the snapshot's last entry
 * (same index and term). Those entries may have been acknowledged to the leader and
 * counted for a commit: dropping them (as the whole log once was) could lose a committed
 * entry if the leader failed next. A log that does not hold that entry diverged there, and
 * what follows can never commit. `skip` when nothing may be replaced: this peer applied, or
 * knows as committed, more than the snapshot holds (never step back; ask again later).
 */
export function recoveryWrite(
  storage: RaftStorage,
  applied: number,
  committed: number,
  snap: Snapshot,
): { entries: Entry[]; hardState: HardState } | { skip: string } {
  const hs = storage.initialState().hardState;
  const at = snap.meta.index;
  if (at < applied) return { skip: `this peer applied ${applied}, past the leader's snapshot at ${at}` };
  if (at < Math.max(committed, hs.commit)) return { skip: `this peer committed ${Math.max(committed, hs.commit)}, past the leader's snapshot at ${at}` };
  let holds = false;
  try {
    holds = at <= storage.lastIndex() && storage.term(at) === snap.meta.term;
  } catch {
    holds = false;
  }
  const entries = holds && storage.lastIndex() > at ? storage.entries(at + 1, storage.lastIndex() + 1) : [];
  const term = Math.max(hs.term, snap.meta.term);
  return { entries, hardState: { term, vote: term === hs.term ? hs.vote : null, commit: at } };
}

export class ConsensusStartError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConsensusStartError';
  }
}
