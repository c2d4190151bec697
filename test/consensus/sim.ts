/**
 * Seeded simulation of a cluster of Raft cores (ts/consensus/raft.ts): an in-memory
 * network that drops, duplicates, delays (hence reorders) and partitions messages;
 * peers that crash (at any point of their driver loop, even between persisting entries
 * and hard state) and restart from exactly what they persisted; random proposals;
 * random membership changes (add learner, promote, remove); log compaction with
 * application snapshots.
 *
 * After every step (a tick, a delivered message or a proposal, and the Ready it causes)
 * the checker verifies:
 *   - election safety: at most one leader per term, over the whole run (a leader counts
 *     from the moment something of its term is durable: one that crashes before that has
 *     sent nothing and persisted nothing);
 *   - log matching: every persisted entry (index, term) has one content and one
 *     predecessor term across all peers (so logs agreeing on an entry agree on the
 *     prefix); at the end of a run, every pair of logs is also compared in full;
 *   - leader completeness: an entry committed by a leader of term T is in the log of
 *     every leader of a later term (checked when a leader appears and when a commit
 *     is recorded);
 *   - state-machine safety: no two peers apply different entries at one index, a peer
 *     never applies a different entry at an index it applied before (across restarts),
 *     entries are applied in order without gaps, and snapshots agree with both.
 * At the end, liveness: the network heals (no loss, links deliver in order), crashed peers
 * restart, and within a bound a leader is elected and one more proposal is applied by
 * every member.
 *
 * Everything random comes from the seed: runSeed(seed) replays exactly.
 */

import { RaftNode, Ready } from '../../ts/consensus/raft';
import { MemoryRaftStorage } from '../../ts/consensus/storage';
import type { ConfChange, Entry, Message, PeerId, Snapshot } from '../../ts/consensus/types';
import { mulberry32 } from '../support/rng';

export interface SimParams {
  foundingVoters: number;
  electionTicks: number;
  heartbeatTicks: number;
  maxEntriesPerAppend: number;
  dropRate: number;
  duplicateRate: number;
  maxDelay: number;
  crashRate: number;
  /** Per tick: crash or isolate a current leader (leader changes are where Raft bugs live). */
  leaderFaultRate: number;
  restartRate: number;
  midReadyCrashRate: number;
  partitionRate: number;
  healRate: number;
  proposeRate: number;
  confChangeRate: number;
  compactEvery: number;
  tickSkipRate: number;
  maxPeers: number;
  ticks: number;
  /**
   * Liveness bound in ticks after healing: this, plus one tick per append message's
   * worth of the longest log (a follower far behind must be sent all of it).
   */
  livenessBound: number;
}

export interface SimReport {
  seed: number;
  params: SimParams;
  ticks: number;
  steps: number;
  leaders: number;
  maxTerm: number;
  committed: number;
  proposalsAccepted: number;
  confChangesApplied: number;
  crashes: number;
  midReadyCrashes: number;
  snapshotsInstalled: number;
  compactions: number;
  messagesSent: number;
  messagesDropped: number;
  livenessTicks: number;
  finalMembers: number;
}

export class SimFailure extends Error {
  constructor(
    readonly seed: number,
    readonly tick: number,
    readonly problem: string,
    readonly trace: readonly string[],
  ) {
    super(`seed ${seed}, tick ${tick}: ${problem}`);
    this.name = 'SimFailure';
  }
}

export interface RunOptions {
  /** Keep a trace of every event (slower); it is attached to a SimFailure. */
  trace?: boolean;
  /** Override the run length (ticks before the liveness phase). */
  ticks?: number;
  /** Override parameters (regression cases pin the ones that mattered). */
  params?: Partial<SimParams>;
  /**
   * Break the driver order on purpose: send a Ready's messages before persisting it.
   * Only to show that the checker notices (a vote or an acknowledgement then outlives
   * a crash that lost what it promised).
   */
  sendBeforePersisting?: boolean;
}

function pick<T>(rng: () => number, xs: readonly T[]): T {
  return xs[Math.floor(rng() * xs.length)];
}

/** Parameters of one run, drawn from the seed. */
export function paramsForSeed(seed: number): SimParams {
  const rng = mulberry32(seed ^ 0x5eed5eed);
  const electionTicks = pick(rng, [4, 6, 10, 10, 16]);
  return {
    foundingVoters: pick(rng, [1, 2, 3, 3, 3, 4, 5, 5]),
    electionTicks,
    heartbeatTicks: Math.min(electionTicks - 1, pick(rng, [1, 2, 3])),
    maxEntriesPerAppend: pick(rng, [1, 2, 4, 64]),
    dropRate: pick(rng, [0, 0.02, 0.1, 0.25]),
    duplicateRate: pick(rng, [0, 0.05, 0.2]),
    maxDelay: pick(rng, [0, 1, 3, 8]),
    crashRate: pick(rng, [0, 0.005, 0.01, 0.03]),
    leaderFaultRate: pick(rng, [0, 0.01, 0.03, 0.08]),
    restartRate: pick(rng, [0.02, 0.1, 0.3]),
    midReadyCrashRate: pick(rng, [0, 0.002, 0.01]),
    partitionRate: pick(rng, [0, 0.01, 0.03]),
    healRate: pick(rng, [0.02, 0.05, 0.2]),
    proposeRate: pick(rng, [0.2, 0.5, 1, 2.5]),
    confChangeRate: pick(rng, [0, 0.02, 0.05, 0.1]),
    compactEvery: pick(rng, [3, 8, 32, Infinity]),
    tickSkipRate: pick(rng, [0, 0.05, 0.2]),
    maxPeers: pick(rng, [5, 7, 9]),
    ticks: 400,
    livenessBound: 60 * electionTicks,
  };
}

// ---------------------------------------------------------------------------------
// Entries and the application

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What an entry is, independent of where it sits: its term and content. */
export function entryKey(e: Entry): string {
  switch (e.type) {
    case 'noop':
      return `${e.term}:noop`;
    case 'normal':
      return `${e.term}:${decoder.decode(e.data)}`;
    case 'confChange':
      return `${e.term}:cc:${e.change.type}:${e.change.peer}`;
  }
}

const BOOTSTRAP_KEY = '1:bootstrap';

/** The replicated state machine: the sequence of entry keys applied, from index 1. */
class App {
  constructor(public keys: string[]) {}

  get appliedIndex(): number {
    return this.keys.length;
  }

  static fromSnapshot(s: Snapshot): App {
    if (s.meta.index === 0) return new App([]);
    const keys = JSON.parse(decoder.decode(s.data)) as string[];
    if (keys.length !== s.meta.index) throw new Error(`snapshot at ${s.meta.index} holds ${keys.length} entries`);
    return new App(keys);
  }

  encode(): Uint8Array {
    return encoder.encode(JSON.stringify(this.keys));
  }
}

// ---------------------------------------------------------------------------------
// Peers and the network

interface SimPeer {
  id: PeerId;
  disk: MemoryRaftStorage;
  node: RaftNode | null;
  app: App | null;
  /** Every entry this peer ever applied, by index, across restarts. */
  everApplied: Map<number, string>;
  /** Commit index in the hard state persisted by this incarnation (or found on restart). */
  persistedCommit: number;
  lastTerm: number;
}

interface InFlight {
  at: number;
  seq: number;
  msg: Message;
}

interface CommitRecord {
  key: string;
  /** Lowest term of a leader that committed it. */
  term: number;
}

export function runSeed(seed: number, opts: RunOptions = {}): SimReport {
  return new Simulation(seed, opts).run();
}

class Simulation {
  private readonly rng: () => number;
  private readonly p: SimParams;
  private readonly tracing: boolean;
  private readonly sendFirst: boolean;
  private readonly trace: string[] = [];
  private now = 0;
  private steps = 0;

  private readonly peers = new Map<PeerId, SimPeer>();
  private nextPeerNumber = 1;
  private inflight: InFlight[] = [];
  private sendSeq = 0;
  /** Healed network: every link delivers in order (as a stream between two peers does). */
  private fifo = false;
  private readonly linkLastAt = new Map<string, number>();
  private groups = new Map<PeerId, number>();
  private proposalCounter = 0;
  private chaos = true;

  // Checker state
  private readonly leaderOfTerm = new Map<number, PeerId>();
  /** (index:term) -> content key and predecessor term, over every persisted entry. */
  private readonly entryRegistry = new Map<string, { key: string; prevTerm: number }>();
  private readonly committed = new Map<number, CommitRecord>();
  private readonly applied = new Map<number, string>();

  private readonly report: SimReport;

  constructor(
    readonly seed: number,
    opts: RunOptions,
  ) {
    this.p = { ...paramsForSeed(seed), ...(opts.params ?? {}) };
    if (opts.ticks !== undefined) this.p.ticks = opts.ticks;
    this.rng = mulberry32(seed);
    this.tracing = opts.trace === true;
    this.sendFirst = opts.sendBeforePersisting === true;
    this.report = {
      seed,
      params: { ...this.p },
      ticks: 0,
      steps: 0,
      leaders: 0,
      maxTerm: 0,
      committed: 0,
      proposalsAccepted: 0,
      confChangesApplied: 0,
      crashes: 0,
      midReadyCrashes: 0,
      snapshotsInstalled: 0,
      compactions: 0,
      messagesSent: 0,
      messagesDropped: 0,
      livenessTicks: 0,
      finalMembers: 0,
    };
  }

  run(): SimReport {
    try {
      const founders: PeerId[] = [];
      for (let i = 0; i < this.p.foundingVoters; i++) founders.push(this.newPeerId());
      const initialState = new App([BOOTSTRAP_KEY]).encode();
      for (const id of founders) {
        this.addPeer(id, MemoryRaftStorage.bootstrap({ voters: founders, learners: [] }, initialState));
      }
      for (let t = 0; t < this.p.ticks; t++) this.chaosTick();
      this.fullLogCheck();
      this.liveness();
      this.fullLogCheck();
    } catch (e) {
      if (e instanceof SimFailure) throw e;
      const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      throw new SimFailure(this.seed, this.now, `exception: ${msg}${e instanceof Error && e.stack ? `\n${e.stack}` : ''}`, this.trace);
    }
    this.report.ticks = this.now;
    this.report.steps = this.steps;
    this.report.committed = this.committed.size;
    this.report.leaders = this.leaderOfTerm.size;
    return this.report;
  }

  private fail(problem: string): never {
    throw new SimFailure(this.seed, this.now, problem, this.trace);
  }

  private log(line: string): void {
    if (this.tracing) this.trace.push(`[${this.now}] ${line}`);
  }

  // --- peers ---

  private newPeerId(): PeerId {
    return `n${this.nextPeerNumber++}`;
  }

  private addPeer(id: PeerId, disk: MemoryRaftStorage): SimPeer {
    const peer: SimPeer = { id, disk, node: null, app: null, everApplied: new Map(), persistedCommit: 0, lastTerm: 0 };
    this.peers.set(id, peer);
    this.groups.set(id, 0);
    this.start(peer);
    return peer;
  }

  private start(peer: SimPeer): void {
    peer.node = new RaftNode({
      id: peer.id,
      storage: peer.disk,
      random: mulberry32(Math.floor(this.rng() * 0x100000000)),
      electionTicks: this.p.electionTicks,
      heartbeatTicks: this.p.heartbeatTicks,
      maxEntriesPerAppend: this.p.maxEntriesPerAppend,
    });
    const snap = peer.disk.snapshot();
    peer.app = App.fromSnapshot(snap);
    this.checkRestoredState(peer, peer.app, snap.meta.index, 'restart');
    peer.persistedCommit = peer.disk.initialState().hardState.commit;
    peer.lastTerm = peer.node.status().term;
    this.log(`${peer.id} start: snapshot ${snap.meta.index}, last ${peer.disk.lastIndex()}, hs ${JSON.stringify(peer.disk.initialState().hardState)}`);
    this.drain(peer);
  }

  private crash(peer: SimPeer, why: string): void {
    this.log(`${peer.id} CRASH (${why})`);
    peer.node = null;
    peer.app = null;
    this.report.crashes++;
  }

  private live(): SimPeer[] {
    const out: SimPeer[] = [];
    for (const p of this.peers.values()) if (p.node !== null) out.push(p);
    return out;
  }

  private shuffled<T>(xs: T[]): T[] {
    for (let i = xs.length - 1; i > 0; i--) {
      const j = Math.floor(this.rng() * (i + 1));
      const t = xs[i];
      xs[i] = xs[j];
      xs[j] = t;
    }
    return xs;
  }

  // --- the driver loop of one peer ---

  private drain(peer: SimPeer): void {
    let guard = 0;
    while (peer.node !== null && peer.node.hasReady()) {
      if (++guard > 1000) this.fail(`${peer.id}: hasReady() never settles`);
      this.processReady(peer, peer.node);
    }
    if (peer.node !== null) this.checkPeer(peer, peer.node);
  }

  private processReady(peer: SimPeer, node: RaftNode): void {
    const rd = node.ready();
    this.steps++;
    if (rd.term > this.report.maxTerm) this.report.maxTerm = rd.term;
    const crashAt = this.chaos && this.rng() < this.p.midReadyCrashRate ? Math.floor(this.rng() * 5) : -1;
    if (crashAt >= 0) this.report.midReadyCrashes++;
    if (this.sendFirst) for (const m of rd.messages) this.send(m);

    // 1. snapshot (persist, install)
    if (rd.snapshot !== null) {
      peer.disk.applySnapshot(rd.snapshot);
      const app = App.fromSnapshot(rd.snapshot);
      this.checkRestoredState(peer, app, rd.snapshot.meta.index, 'install');
      peer.app = app;
      this.report.snapshotsInstalled++;
      this.log(`${peer.id} installed snapshot ${rd.snapshot.meta.index}/${rd.snapshot.meta.term}`);
    }
    if (crashAt === 0) return this.crash(peer, 'after persisting the snapshot');
    // 2. entries
    if (rd.entries.length > 0) {
      peer.disk.append(rd.entries);
      this.registerEntries(peer, rd.entries);
    }
    // A leader counts from the moment something of its term is durable (its first Ready
    // holds its first entry): one that crashes before that has left no trace anywhere.
    this.observeRole(peer, rd);
    if (crashAt === 1) return this.crash(peer, 'after persisting entries, before the hard state');
    // 3. hard state
    if (rd.hardState !== null) {
      peer.disk.setHardState(rd.hardState);
      this.onCommitPersisted(peer, rd);
    }
    if (crashAt === 2) return this.crash(peer, 'after persisting the hard state, before sending');
    // 4. messages
    const cut = this.sendFirst ? 0 : crashAt === 3 ? Math.floor(this.rng() * (rd.messages.length + 1)) : rd.messages.length;
    for (let i = 0; i < cut; i++) this.send(rd.messages[i]);
    if (crashAt === 3) return this.crash(peer, `after sending ${cut} of ${rd.messages.length} messages`);
    // 5. apply
    for (const e of rd.committedEntries) this.apply(peer, e);
    if (crashAt === 4) return this.crash(peer, 'after applying, before advance');
    // 6. advance
    node.advance(rd);
    this.maybeCompact(peer, node);
  }

  private apply(peer: SimPeer, e: Entry): void {
    const app = peer.app!;
    if (e.index !== app.appliedIndex + 1) this.fail(`${peer.id} applies ${e.index} after ${app.appliedIndex}`);
    const key = entryKey(e);
    app.keys.push(key);
    this.checkApplied(peer, e.index, key, 'apply');
    if (e.type === 'confChange') this.report.confChangesApplied++;
  }

  private maybeCompact(peer: SimPeer, node: RaftNode): void {
    const app = peer.app!;
    const snapIndex = peer.disk.snapshot().meta.index;
    if (app.appliedIndex - snapIndex < this.p.compactEvery) return;
    // The application snapshots its state at its applied index, with the membership in force there.
    peer.disk.createSnapshot(app.appliedIndex, node.appliedConfState(), app.encode());
    const keep = Math.floor(this.rng() * 3);
    peer.disk.compact(Math.max(snapIndex, app.appliedIndex - keep));
    this.report.compactions++;
    this.log(`${peer.id} compacted: snapshot ${app.appliedIndex}, first index ${peer.disk.firstIndex()}`);
  }

  // --- network ---

  private send(m: Message): void {
    this.report.messagesSent++;
    if (this.chaos && this.rng() < this.p.dropRate) {
      this.report.messagesDropped++;
      return;
    }
    const copies = this.chaos && this.rng() < this.p.duplicateRate ? 2 : 1;
    for (let c = 0; c < copies; c++) {
      const delay = this.p.maxDelay === 0 ? 0 : Math.floor(this.rng() * (this.p.maxDelay + 1));
      let at = this.now + delay;
      if (this.fifo) {
        const link = `${m.from}>${m.to}`;
        at = Math.max(at, this.linkLastAt.get(link) ?? 0);
        this.linkLastAt.set(link, at);
      }
      this.inflight.push({ at, seq: this.sendSeq++, msg: m });
    }
  }

  private deliverDue(): void {
    const due: InFlight[] = [];
    const rest: InFlight[] = [];
    for (const f of this.inflight) (f.at <= this.now ? due : rest).push(f);
    this.inflight = rest;
    const order = this.fifo ? due.sort((a, b) => a.seq - b.seq) : this.shuffled(due);
    for (const f of order) {
      const m = f.msg;
      const to = this.peers.get(m.to);
      if (to === undefined || to.node === null) continue;
      if (this.groups.get(m.from) !== this.groups.get(m.to)) {
        this.report.messagesDropped++;
        continue;
      }
      if (this.tracing) this.log(`${m.from}->${m.to} ${describe(m)}`);
      to.node.step(m);
      this.drain(to);
    }
  }

  // --- one tick of the run ---

  private chaosTick(): void {
    this.now++;
    for (const peer of this.shuffled(this.live())) {
      if (peer.node === null) continue;
      if (this.rng() < this.p.tickSkipRate) continue;
      peer.node.tick();
      this.drain(peer);
    }
    this.deliverDue();
    this.randomEvents();
  }

  private randomEvents(): void {
    const rng = this.rng;
    // Proposals: at a random live peer (followers must refuse with a leader hint).
    // Proposals: mostly at a leader (as a client that follows leader hints would), some
    // at a random live peer (followers must refuse with the right leader hint).
    let proposals = Math.floor(this.p.proposeRate) + (rng() < this.p.proposeRate % 1 ? 1 : 0);
    while (proposals-- > 0) {
      const live = this.live();
      if (live.length === 0) break;
      let peer = pick(rng, live);
      if (rng() < 0.8) {
        const leaders = live.filter((x) => x.node!.status().role === 'leader');
        if (leaders.length > 0) peer = pick(rng, leaders);
      }
      this.propose(peer, `p${++this.proposalCounter}`);
    }
    if (rng() < this.p.confChangeRate) this.randomConfChange();
    if (rng() < this.p.crashRate) {
      const live = this.live();
      if (live.length > 0) this.crash(pick(rng, live), 'random');
    }
    if (rng() < this.p.leaderFaultRate) {
      const leaders = this.live().filter((x) => x.node!.status().role === 'leader');
      if (leaders.length > 0) {
        const leader = pick(rng, leaders);
        if (rng() < 0.5) this.crash(leader, 'leader fault');
        else {
          for (const id of this.peers.keys()) this.groups.set(id, id === leader.id ? 1 : 0);
          this.log(`isolated leader ${leader.id}`);
        }
      }
    }
    for (const peer of this.peers.values()) {
      if (peer.node === null && rng() < this.p.restartRate) this.start(peer);
    }
    if (rng() < this.p.partitionRate) this.randomPartition();
    else if (rng() < this.p.healRate) this.heal();
  }

  private propose(peer: SimPeer, content: string): boolean {
    const node = peer.node!;
    const st = node.status();
    const r = node.propose(encoder.encode(content));
    if (r.ok) {
      if (st.role !== 'leader') this.fail(`${peer.id} accepted a proposal as ${st.role}`);
      this.report.proposalsAccepted++;
      this.log(`${peer.id} proposed ${content} at ${r.index}/${r.term}`);
      this.drain(peer);
      return true;
    }
    if (r.reason === 'notLeader') {
      if (st.role === 'leader') this.fail(`${peer.id} refused a proposal as leader`);
      if (r.leader !== st.leader) this.fail(`${peer.id} gave leader hint ${r.leader}, status says ${st.leader}`);
    } else if (r.reason === 'leaderLeaving') {
      if (st.role !== 'leader') this.fail(`${peer.id} refused a proposal as a leaving leader while ${st.role}`);
    } else {
      this.fail(`${peer.id} refused a proposal: ${r.reason} ${r.message}`);
    }
    return false;
  }

  private randomConfChange(): void {
    const leaders = this.live().filter((p) => p.node!.status().role === 'leader');
    if (leaders.length === 0) return;
    const leader = pick(this.rng, leaders);
    const node = leader.node!;
    const conf = node.status().conf;
    const choice = this.rng();
    let change: ConfChange | null = null;
    let newId: PeerId | null = null;
    if (choice < 0.4) {
      if (this.peers.size >= this.p.maxPeers) return;
      newId = this.newPeerId();
      change = { type: 'addLearner', peer: newId, context: `sim://${newId}` };
    } else if (choice < 0.75) {
      if (conf.learners.length === 0 || conf.voters.length >= 5) return;
      change = { type: 'promoteLearner', peer: pick(this.rng, [...conf.learners]) };
    } else {
      const members = [...conf.voters, ...conf.learners];
      change = { type: 'removePeer', peer: pick(this.rng, members) };
    }
    const r = node.proposeConfChange(change);
    this.log(`${leader.id} proposeConfChange ${JSON.stringify(change)} -> ${JSON.stringify(r)}`);
    if (r.ok) {
      this.report.proposalsAccepted++;
      if (newId !== null) this.addPeer(newId, new MemoryRaftStorage());
    } else if (r.reason === 'notLeader' || r.reason === 'storageFault') {
      this.fail(`leader ${leader.id} refused a conf change: ${r.reason}`);
    } else if (r.reason === 'confChangePending' || r.reason === 'leaderLeaving') {
      // Expected while the previous change is not applied.
    } else if (change.type === 'removePeer' && conf.voters.length === 1 && conf.voters[0] === change.peer) {
      // The last voter cannot be removed.
    } else {
      this.fail(`leader ${leader.id} refused a valid conf change ${JSON.stringify(change)}: ${r.message}`);
    }
    this.drain(leader);
  }

  private randomPartition(): void {
    const ids = [...this.peers.keys()];
    if (this.rng() < 0.5) {
      // Isolate one peer.
      const lone = pick(this.rng, ids);
      for (const id of ids) this.groups.set(id, id === lone ? 1 : 0);
    } else {
      for (const id of ids) this.groups.set(id, this.rng() < 0.5 ? 1 : 0);
    }
    this.log(`partition ${JSON.stringify([...this.groups])}`);
  }

  private heal(): void {
    for (const id of this.peers.keys()) this.groups.set(id, 0);
  }

  // --- liveness ---

  private liveness(): void {
    this.chaos = false;
    this.fifo = true;
    this.heal();
    this.p.maxDelay = Math.min(this.p.maxDelay, 2);
    for (const peer of this.peers.values()) if (peer.node === null) this.start(peer);
    this.log('--- liveness: network healed, every peer up');
    const start = this.now;
    let longest = 0;
    for (const peer of this.peers.values()) longest = Math.max(longest, peer.disk.lastIndex());
    const bound = this.p.livenessBound + Math.ceil(longest / this.p.maxEntriesPerAppend);
    let final: { index: number; term: number; key: string } | null = null;
    for (;;) {
      if (this.now - start > bound) {
        const st = this.live().map((p) => JSON.stringify({ ...p.node!.status(), progress: undefined }));
        this.fail(`liveness: no committed final proposal on every member within ${bound} ticks after healing; final ${JSON.stringify(final)}\n${st.join('\n')}`);
      }
      this.now++;
      for (const peer of this.shuffled(this.live())) {
        peer.node!.tick();
        this.drain(peer);
      }
      this.deliverDue();
      let leader: SimPeer | undefined;
      let lst: ReturnType<RaftNode['status']> | undefined;
      for (const p of this.live()) {
        const st = p.node!.status();
        if (st.role === 'leader' && (lst === undefined || st.term > lst.term)) {
          leader = p;
          lst = st;
        }
      }
      if (leader === undefined || lst === undefined) continue;
      const lostFinal = final !== null && lst.term > final.term && this.committed.get(final.index)?.key !== final.key;
      if (final === null || lostFinal) {
        const content = `final${this.proposalCounter++}`;
        const r = leader.node!.propose(encoder.encode(content));
        if (!r.ok && r.reason === 'leaderLeaving') continue; // it stands down once its removal applies
        if (!r.ok) this.fail(`liveness: leader ${leader.id} refused the final proposal: ${r.message}`);
        final = { index: r.index, term: r.term, key: `${r.term}:${content}` };
        this.drain(leader);
        continue;
      }
      const members = [...lst.conf.voters, ...lst.conf.learners];
      if (members.every((id) => this.peers.get(id)?.everApplied.get(final!.index) === final!.key)) {
        this.report.livenessTicks = this.now - start;
        this.report.finalMembers = members.length;
        return;
      }
    }
  }

  // ---------------------------------------------------------------------------------
  // Invariants

  private observeRole(peer: SimPeer, rd: Ready): void {
    if (rd.role !== 'leader') return;
    const known = this.leaderOfTerm.get(rd.term);
    if (known === undefined) {
      this.leaderOfTerm.set(rd.term, peer.id);
      this.log(`${peer.id} LEADER of term ${rd.term}`);
      this.checkNewLeader(peer, rd.term);
    } else if (known !== peer.id) {
      this.fail(`election safety: ${known} and ${peer.id} both leaders of term ${rd.term}`);
    }
  }

  /** Per-step checks on one peer after its Readys were processed. */
  private checkPeer(peer: SimPeer, node: RaftNode): void {
    const st = node.status();
    if (st.term < peer.lastTerm) this.fail(`${peer.id}: term went back from ${peer.lastTerm} to ${st.term}`);
    peer.lastTerm = st.term;
    if (st.applied > st.commit) this.fail(`${peer.id}: applied ${st.applied} beyond commit ${st.commit}`);
    if (st.role === 'leader') {
      const known = this.leaderOfTerm.get(st.term);
      if (known !== undefined && known !== peer.id) this.fail(`election safety: ${known} and ${peer.id} both leaders of term ${st.term}`);
      if (known === undefined) {
        this.leaderOfTerm.set(st.term, peer.id);
        this.checkNewLeader(peer, st.term);
      }
      if (!st.isVoter) this.fail(`${peer.id} leads term ${st.term} without being a voter`);
    }
    if (st.role !== 'follower' && st.role !== 'leader' && !st.isVoter) this.fail(`${peer.id} campaigns (${st.role}) without being a voter`);
    if (st.storageFault !== null) this.fail(`${peer.id} storage fault: ${st.storageFault}`);
  }

  /** Log matching, incrementally: each (index, term) has one content and one predecessor term. */
  private registerEntries(peer: SimPeer, entries: readonly Entry[]): void {
    let prevTerm = peer.disk.term(entries[0].index - 1);
    for (const e of entries) {
      const key = entryKey(e);
      const id = `${e.index}:${e.term}`;
      const known = this.entryRegistry.get(id);
      if (known === undefined) this.entryRegistry.set(id, { key, prevTerm });
      else if (known.key !== key || known.prevTerm !== prevTerm) {
        this.fail(`log matching: ${peer.id} holds ${key} (after term ${prevTerm}) at ${id}, another peer ${known.key} (after term ${known.prevTerm})`);
      }
      if (e.term < prevTerm) this.fail(`log matching: ${peer.id} has term ${e.term} at ${e.index} after term ${prevTerm}`);
      prevTerm = e.term;
    }
  }

  private keyAt(peer: SimPeer, index: number): string | undefined {
    const d = peer.disk;
    if (index < d.firstIndex() || index > d.lastIndex()) return undefined;
    return entryKey(d.entries(index, index + 1)[0]);
  }

  /** Does `peer`'s persisted state hold committed entry `index`? (In its log, or under its snapshot.) */
  private holds(peer: SimPeer, index: number, key: string): boolean {
    const snap = peer.disk.snapshot();
    if (index <= snap.meta.index) {
      // Covered by the snapshot; its content was checked against applied entries when taken or installed.
      return true;
    }
    return this.keyAt(peer, index) === key;
  }

  private onCommitPersisted(peer: SimPeer, rd: Ready): void {
    const hs = rd.hardState!;
    const from = peer.persistedCommit;
    peer.persistedCommit = hs.commit;
    if (hs.commit <= from) return;
    const isLeader = rd.role === 'leader';
    for (let i = from + 1; i <= hs.commit; i++) {
      const key = this.keyAt(peer, i);
      if (key === undefined) {
        // Committed by installing a snapshot: the snapshot's own check covers it.
        continue;
      }
      const rec = this.committed.get(i);
      if (rec !== undefined && rec.key !== key) this.fail(`commit: ${peer.id} commits ${key} at ${i}, ${rec.key} was committed there`);
      if (!isLeader) {
        if (rec === undefined) this.fail(`commit: follower ${peer.id} commits ${key} at ${i} before any leader did`);
        continue;
      }
      if (rec === undefined || hs.term < rec.term) {
        this.committed.set(i, { key, term: hs.term });
        if (rec === undefined) this.checkCurrentLeadersHold(i, key, hs.term);
      }
    }
  }

  /** Leader completeness for a newly recorded commit: every current leader of a later term holds it. */
  private checkCurrentLeadersHold(index: number, key: string, term: number): void {
    for (const p of this.peers.values()) {
      if (p.node === null) continue;
      const st = p.node.status();
      if (st.role === 'leader' && st.term > term && !this.holds(p, index, key)) {
        this.fail(`leader completeness: ${p.id} leads term ${st.term} without ${key} at ${index}, committed in term ${term}`);
      }
    }
  }

  private checkNewLeader(peer: SimPeer, term: number): void {
    for (const [index, rec] of this.committed) {
      if (rec.term < term && !this.holds(peer, index, rec.key)) {
        this.fail(`leader completeness: ${peer.id} leads term ${term} without ${rec.key} at ${index}, committed in term ${rec.term}`);
      }
    }
  }

  private checkApplied(peer: SimPeer, index: number, key: string, how: string): void {
    const global = this.applied.get(index);
    if (global === undefined) this.applied.set(index, key);
    else if (global !== key) this.fail(`state-machine safety (${how}): ${peer.id} applies ${key} at ${index}, another peer applied ${global}`);
    const mine = peer.everApplied.get(index);
    if (mine === undefined) peer.everApplied.set(index, key);
    else if (mine !== key) this.fail(`state-machine safety (${how}): ${peer.id} applies ${key} at ${index} where it applied ${mine} before`);
    const rec = this.committed.get(index);
    if (rec !== undefined && rec.key !== key) this.fail(`state-machine safety (${how}): ${peer.id} applies ${key} at ${index}, ${rec.key} was committed`);
  }

  private checkRestoredState(peer: SimPeer, app: App, index: number, how: string): void {
    for (let i = 1; i <= index; i++) this.checkApplied(peer, i, app.keys[i - 1], how);
  }

  /** The whole-state version of log matching, between every pair of peers' persisted logs. */
  private fullLogCheck(): void {
    const peers = [...this.peers.values()];
    for (let a = 0; a < peers.length; a++) {
      for (let b = a + 1; b < peers.length; b++) {
        const x = peers[a].disk;
        const y = peers[b].disk;
        const lo = Math.max(x.firstIndex(), y.firstIndex());
        const hi = Math.min(x.lastIndex(), y.lastIndex());
        // From the highest index where both hold the same term down, everything must be equal.
        let same = false;
        for (let i = hi; i >= lo; i--) {
          const ex = x.entries(i, i + 1)[0];
          const ey = y.entries(i, i + 1)[0];
          if (!same && ex.term === ey.term) same = true;
          if (same && entryKey(ex) !== entryKey(ey)) {
            this.fail(`log matching (full): ${peers[a].id} and ${peers[b].id} agree on a later entry but differ at ${i}: ${entryKey(ex)} vs ${entryKey(ey)}`);
          }
        }
      }
    }
  }

}

function describe(m: Message): string {
  switch (m.type) {
    case 'append':
      return `append t${m.term} prev ${m.prevLogIndex}/${m.prevLogTerm} [${m.entries.map((e) => `${e.index}/${e.term}`).join(',')}] commit ${m.commit}`;
    case 'appendResponse':
      return m.success ? `appendResponse t${m.term} ok ${m.matchIndex}` : `appendResponse t${m.term} reject ${m.rejectedIndex} hint ${m.hintIndex}/${m.hintTerm}`;
    case 'heartbeat':
      return `heartbeat t${m.term} commit ${m.commit}/${m.leaderCommit}`;
    case 'installSnapshot':
      return `installSnapshot t${m.term} ${m.snapshot.meta.index}/${m.snapshot.meta.term}`;
    case 'preVote':
    case 'vote':
      return `${m.type} t${m.term} last ${m.lastLogIndex}/${m.lastLogTerm}`;
    case 'preVoteResponse':
    case 'voteResponse':
      return `${m.type} t${m.term} ${m.granted ? 'granted' : 'rejected'}`;
    case 'heartbeatResponse':
      return `heartbeatResponse t${m.term}`;
  }
}
