/**
 * A small, fully controlled cluster of Raft cores for scenario tests: peers with
 * in-memory storage driven in the documented order (persist snapshot, entries, hard
 * state; send; apply; advance), a message queue delivered on demand, links that can be
 * cut, peers that can be isolated, crashed and restarted from what they persisted.
 * Unlike the simulation, nothing happens unless the test asks for it.
 */

import { RaftNode, RaftNodeOptions, RaftStatus } from '../../ts/consensus/raft';
import { MemoryRaftStorage } from '../../ts/consensus/storage';
import type { ConfState, Entry, Message, PeerId } from '../../ts/consensus/types';
import { mulberry32 } from '../support/rng';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function text(e: Entry): string {
  if (e.type === 'normal') return decoder.decode(e.data);
  if (e.type === 'noop') return `noop@${e.term}`;
  return `${e.change.type}:${e.change.peer}`;
}

export interface ClusterPeer {
  id: PeerId;
  disk: MemoryRaftStorage;
  node: RaftNode | null;
  /** Applied entries, by text, from index 1 (index 1 is the bootstrap snapshot). */
  applied: string[];
}

export interface ClusterOptions {
  voters: PeerId[];
  learners?: PeerId[];
  seed?: number;
  node?: Partial<Omit<RaftNodeOptions, 'id' | 'storage' | 'random'>>;
  /** Per-peer overrides (e.g. pre-vote off). */
  perPeer?: Record<PeerId, Partial<Omit<RaftNodeOptions, 'id' | 'storage' | 'random'>>>;
}

export class Cluster {
  readonly peers = new Map<PeerId, ClusterPeer>();
  queue: Message[] = [];
  /** Every message ever sent, for assertions. */
  readonly sent: Message[] = [];
  private readonly cut = new Set<string>();
  private readonly rng: () => number;

  /** The application's refusal of a committed membership change (every peer's alike); null: none refused. */
  refuseChange: ((e: Entry) => boolean) | null = null;

  constructor(private readonly opts: ClusterOptions) {
    this.rng = mulberry32(opts.seed ?? 1);
    const conf: ConfState = { voters: opts.voters, learners: opts.learners ?? [] };
    const initial = encoder.encode(JSON.stringify(['bootstrap']));
    for (const id of [...conf.voters, ...conf.learners]) this.add(id, MemoryRaftStorage.bootstrap(conf, initial));
  }

  /** Adds a peer with the given storage (an empty one for a peer that joins) and starts it. */
  add(id: PeerId, disk: MemoryRaftStorage = new MemoryRaftStorage()): ClusterPeer {
    const peer: ClusterPeer = { id, disk, node: null, applied: [] };
    this.peers.set(id, peer);
    this.start(id);
    return peer;
  }

  start(id: PeerId): void {
    const peer = this.get(id);
    peer.node = new RaftNode({
      electionTicks: 10,
      heartbeatTicks: 2,
      ...this.opts.node,
      ...(this.opts.perPeer?.[id] ?? {}),
      id,
      storage: peer.disk,
      random: mulberry32(Math.floor(this.rng() * 0x100000000)),
    });
    const snap = peer.disk.snapshot();
    peer.applied = snap.meta.index === 0 ? [] : (JSON.parse(decoder.decode(snap.data)) as string[]);
    this.drain(id);
  }

  /** Loses everything not persisted. */
  crash(id: PeerId): void {
    this.get(id).node = null;
  }

  get(id: PeerId): ClusterPeer {
    const p = this.peers.get(id);
    if (p === undefined) throw new Error(`no peer ${id}`);
    return p;
  }

  node(id: PeerId): RaftNode {
    const n = this.get(id).node;
    if (n === null) throw new Error(`peer ${id} is down`);
    return n;
  }

  status(id: PeerId): RaftStatus {
    return this.node(id).status();
  }

  /** Runs the driver loop of one peer until it has nothing more to do. */
  drain(id: PeerId): void {
    const peer = this.get(id);
    const node = peer.node;
    if (node === null) return;
    while (node.hasReady()) {
      const rd = node.ready();
      if (rd.snapshot !== null) {
        peer.disk.applySnapshot(rd.snapshot);
        peer.applied = JSON.parse(decoder.decode(rd.snapshot.data)) as string[];
      }
      peer.disk.append(rd.entries);
      if (rd.hardState !== null) peer.disk.setHardState(rd.hardState);
      for (const m of rd.messages) {
        this.sent.push(m);
        this.queue.push(m);
      }
      const refused = new Set<number>();
      for (const e of rd.committedEntries) {
        if (this.refuseChange !== null && e.type === 'confChange' && this.refuseChange(e)) {
          refused.add(e.index);
          peer.applied.push(`refused:${text(e)}`);
        } else {
          peer.applied.push(text(e));
        }
      }
      node.advance(rd, refused);
    }
  }

  /** The application snapshots its state at its applied index and compacts the log. */
  compact(id: PeerId): void {
    const peer = this.get(id);
    const st = this.status(id);
    peer.disk.createSnapshot(st.applied, this.node(id).appliedConfState(), encoder.encode(JSON.stringify(peer.applied)));
    peer.disk.compact(st.applied);
  }

  cutLink(a: PeerId, b: PeerId): void {
    this.cut.add(`${a}>${b}`);
    this.cut.add(`${b}>${a}`);
  }

  isolate(id: PeerId): void {
    for (const other of this.peers.keys()) if (other !== id) this.cutLink(id, other);
  }

  /** Cuts every link between the two groups. */
  partition(a: PeerId[], b: PeerId[]): void {
    for (const x of a) for (const y of b) this.cutLink(x, y);
  }

  heal(): void {
    this.cut.clear();
  }

  /** Delivers queued messages (and the ones they cause) until none is left; returns how many were delivered. */
  deliver(filter: (m: Message) => boolean = () => true, limit = 100000): number {
    let n = 0;
    while (this.queue.length > 0) {
      if (++n > limit) throw new Error('message storm');
      const m = this.queue.shift()!;
      if (this.cut.has(`${m.from}>${m.to}`) || !filter(m)) continue;
      const to = this.peers.get(m.to);
      if (to === undefined || to.node === null) continue;
      to.node.step(m);
      this.drain(m.to);
    }
    return n;
  }

  /** Ticks every live peer (or the given ones) `n` times, delivering messages after each tick. */
  tick(n = 1, ids?: PeerId[]): void {
    for (let i = 0; i < n; i++) {
      for (const id of ids ?? [...this.peers.keys()]) {
        const node = this.get(id).node;
        if (node === null) continue;
        node.tick();
        this.drain(id);
      }
      this.deliver();
    }
  }

  /** Makes `id` campaign and delivers until the election is over. */
  elect(id: PeerId): void {
    this.node(id).campaign();
    this.drain(id);
    this.deliver();
  }

  propose(id: PeerId, data: string) {
    const r = this.node(id).propose(encoder.encode(data));
    this.drain(id);
    return r;
  }

  leaders(): PeerId[] {
    const out: PeerId[] = [];
    for (const p of this.peers.values()) if (p.node !== null && p.node.status().role === 'leader') out.push(p.id);
    return out;
  }
}
