/**
 * The cluster link of a peer (ts/collection/cluster-link.ts) over the p2p points
 * service: remote replicas, forwarded ordered writes, Dead marking and transfer ends
 * through metadata consensus, health checks, the writer clocks, and the transfers and
 * supervision of ts/transfer.
 *
 * Owns: wiring those parts to one another and their start and stop. It is built before
 * the table of collections (which opens collections with it) and bound to consensus
 * once that runs. Must never: hold routing or replication logic (ReplicaSet does).
 */

import type * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';

import { ShardUnavailableError } from '../../common/errors';
import type { ClusterLink, HeldClock, ShardTarget, TransferMethod } from '../../collection/cluster-link';
import type { LocalReplica } from '../../collection/local-replica';
import type { ReplicaState } from '../../collection/replica-state';
import type { UpdateOptions } from '../../collection/replica';
import type { ReplicaOperation } from '../../collection/replica-operation';
import type { Config } from '../../config/types';
import type { MetadataConsensus } from '../../storage/metadata-consensus';
import type { TableOfContent } from '../../storage/toc';
import type { WriterClocks } from '../../storage/writer-clocks';
import { PeerHealth, probeIdentity } from '../../transfer/health';
import { RateLimiter } from '../../transfer/rate';
import { OutgoingTransfers, type TransferOutcomes, type TransferProgress } from '../../transfer/outgoing';
import { ReplicaSupervisor } from '../../transfer/supervisor';
import type { PeerDetails, ReplicationView } from '../../transfer/view';
import type { ShardArchiveInfo, ShardFetcher } from '../../snapshots/backup';
import type { Snapshots } from '../../snapshots/snapshots';
import type { PendingMarkings } from '../../storage/pending-markings';
import { DeadMarking } from './dead-marking';
import type { P2PTls } from './grpc';
import { addPointsService, forwardUpdate, PointsClients, RemoteReplica, type PointsBackend } from './points';
import { addShardSnapshotService, fetchShardSnapshot } from './shard-snapshots';
import { RemoteTransferTarget } from './transfer-target';
import type { GrpcTransport } from './transport';

/** Bound of one shard snapshot streamed from another peer (a cluster backup): the whole shard goes through it. */
const SHARD_SNAPSHOT_TIMEOUT_MS = 60 * 60 * 1000;

export class P2PClusterLink implements ClusterLink, ReplicationView, ShardFetcher {
  private consensus: MetadataConsensus | null = null;
  /** This peer's consensus details (set by `serve`). */
  private status: (() => PeerDetails) | null = null;
  /** This peer's collections (set by `serve`). */
  private toc: TableOfContent | null = null;
  /** Resolves once the local changes of the consensus entries applied so far are made (set by `serve`). */
  private settled: () => Promise<void> = () => Promise.resolve();
  private orphanTimer: NodeJS.Timeout | null = null;
  readonly clients: PointsClients;
  readonly health: PeerHealth;
  private readonly supervisor: ReplicaSupervisor;
  private readonly outgoing: OutgoingTransfers;
  /** The pace of everything this peer sends for the transfers it is the source of (`storage.performance.shard_transfer_max_mb_per_sec`). */
  private readonly transferRate: RateLimiter;
  /** Snapshot fetches from each peer in flight (cancelled when the peer stops answering health checks). */
  private readonly fetching = new Map<string, Set<AbortController>>();
  /** Dead markings of replicas that missed a write (failed writes, a transfer's target after a failed forward). */
  private readonly marking: DeadMarking;

  constructor(
    readonly peer: string,
    config: Config,
    private readonly transport: GrpcTransport,
    private readonly tls: P2PTls | null,
    private readonly clocks: WriterClocks,
    private readonly logger: Logger,
    /** Dead markings deferred by this peer, kept across restarts (null: in memory only). */
    pendingMarkings: PendingMarkings | null = null,
  ) {
    this.transferRate = new RateLimiter(config.storage.performance.shard_transfer_max_mb_per_sec);
    this.clients = new PointsClients({ poolSize: config.cluster.p2p.connection_pool_size, callTimeoutMs: config.cluster.grpc_timeout_ms, tls });
    this.health = new PeerHealth({
      peers: () => ({ ...(this.consensus?.clusterState.peers ?? {}) }),
      self: peer,
      probe: (id, uri, timeoutMs) => probeIdentity((u, t) => this.transport.whoIs(u, t), id, uri, timeoutMs),
      onDown: (p, uri, why) => {
        for (const f of this.fetching.get(p) ?? []) f.abort();
        // Another peer answers at that address (this one joined again under a new id):
        // the calls in flight there are that peer's, alive and well. Not cancelled.
        if (why === 'other-peer') return;
        const n = this.clients.cancelAll(uri);
        if (n > 0) this.logger.warn({ peer: p, calls: n }, 'cancelled the calls in flight to a peer that stopped answering');
      },
      logger,
    });
    this.supervisor = new ReplicaSupervisor({
      self: peer,
      listener: config.storage.node_type === 'Listener',
      incomingLimit: config.storage.performance.incoming_shard_transfers_limit,
      outgoingLimit: config.storage.performance.outgoing_shard_transfers_limit,
      recoveryMethod: config.storage.shard_transfer_method ?? 'wal_delta',
      isLeader: () => this.consensus?.status().role === 'leader',
      state: () => this.requireConsensus().clusterState,
      alive: (p) => this.health.alive(p),
      downFor: (p) => this.health.downFor(p),
      propose: (op, ms) => this.requireConsensus().propose(op, ms),
      logger,
    });
    this.marking = new DeadMarking({
      replicas: (target) => {
        this.requireConsensus();
        return this.replicasOf(target);
      },
      propose: (op, ms) => this.requireConsensus().propose(op, ms),
      settled: () => this.settled(),
      store: pendingMarkings,
      appliedIndex: () => this.consensus?.status().applied ?? 0,
      ended: (target, p) => this.markingEnded(target, p),
      logger,
    });
    this.outgoing = new OutgoingTransfers({
      peer,
      remote: (target, p, id) => new RemoteTransferTarget(p, target, this.clients, (x) => this.uriOf(x), id),
      propose: (op, ms) => this.requireConsensus().propose(op, ms),
      // A transfer's target that missed a forwarded write is marked Dead as a replica that failed a write is.
      deactivate: (target, p, reason) => this.marking.mark(target, p, reason),
      rate: this.transferRate,
      logger,
    });
  }

  /** Serves the points and shard snapshot services for this peer's collections on the p2p server (before it starts). */
  serve(toc: TableOfContent, snapshots: Snapshots, settled: () => Promise<void>, status: () => PeerDetails): void {
    this.status = status;
    this.toc = toc;
    this.settled = settled;
    const backend: PointsBackend = {
      toc,
      peer: this.peer,
      settled,
      status,
      pullShard: (from, target, stillWanted, signal) =>
        snapshots.replaceShardFetched(target.collection, target.shard, (file) => this.fetchSnapshot(from, target, file, 'transfer', signal).then(() => undefined), stillWanted),
    };
    this.transport.addServices((server: grpc.Server) => {
      addPointsService(server, backend, this.logger);
      addShardSnapshotService(server, { toc, snapshots, peer: this.peer, settled, transferRate: this.transferRate }, this.logger);
    });
  }

  /** A cluster backup reads `peer`'s Active replica of a shard: its snapshot, streamed into `file`, with its content figures. */
  async fetchShardSnapshot(peer: string, target: ShardTarget, file: string): Promise<ShardArchiveInfo> {
    const got = await this.fetchSnapshot(peer, target, file, 'backup');
    return { points: got.points!, digest: got.digest!, size: got.size, sha256: got.sha256 };
  }

  /**
   * `peer`'s snapshot of its Active replica of a shard into `file`; stopped when `signal`
   * aborts or the peer stops answering health checks. A backup asks for the content's
   * figures; a transfer's archive is paced by the sender's transfer budget.
   */
  private async fetchSnapshot(peer: string, target: ShardTarget, file: string, purpose: 'backup' | 'transfer', signal?: AbortSignal) {
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) stop.abort();
    const mine = this.fetching.get(peer) ?? new Set<AbortController>();
    this.fetching.set(peer, mine);
    mine.add(stop);
    try {
      return await fetchShardSnapshot({ uri: this.uriOf(peer), peer, tls: this.tls, timeoutMs: SHARD_SNAPSHOT_TIMEOUT_MS, content: purpose === 'backup', transfer: purpose === 'transfer', signal: stop.signal }, target, file);
    } finally {
      signal?.removeEventListener('abort', onAbort);
      mine.delete(stop);
    }
  }

  /** Consensus runs: health checks and supervision start. */
  bind(consensus: MetadataConsensus): void {
    this.consensus = consensus;
    this.marking.resume();
    this.health.start();
    this.supervisor.start();
    this.orphanTimer = setInterval(() => this.checkOrphans(), 1000);
    this.orphanTimer.unref();
  }

  private requireConsensus(): MetadataConsensus {
    if (this.consensus === null) throw new ShardUnavailableError('this peer is still joining the cluster');
    return this.consensus;
  }

  private uriOf(peer: string): string {
    const uri = this.consensus?.clusterState.peers[peer];
    if (uri === undefined) throw new ShardUnavailableError(`peer ${peer} is not a member of the cluster`);
    return uri;
  }

  remote(target: ShardTarget, peer: string): RemoteReplica {
    return new RemoteReplica(peer, target, this.clients, (p) => this.uriOf(p));
  }

  async deactivate(target: ShardTarget, peers: readonly string[], reason: string): Promise<string[]> {
    const outcomes = await Promise.all(peers.map((p) => this.marking.mark(target, p, reason)));
    return peers.filter((_, i) => outcomes[i] === 'deferred');
  }

  pendingDead(target: ShardTarget): readonly string[] {
    return this.marking.pendingFor(target);
  }

  /** Consensus refused a deferred marking: the shard's replica set on this peer (if it is this incarnation's) stops leaving that replica out. */
  private markingEnded(target: ShardTarget, peer: string): void {
    const c = this.toc?.peek(target.collection);
    if (c === undefined || c.meta.cluster?.uuid !== target.uuid) return;
    c.replicaSetIfAny(target.shard)?.readmit(peer);
  }

  /** The replicas of the shard as consensus has them now (none: no such shard, or the collection was re-created). */
  private replicasOf(target: ShardTarget): Record<string, ReplicaState> {
    const c = this.consensus?.clusterState.collection(target.collection);
    if (c === undefined || c.uuid !== target.uuid) return {};
    return c.shards.find((s) => s.id === target.shard)?.replicas ?? {};
  }

  forward(target: ShardTarget, leader: string, op: ReplicaOperation, opts: UpdateOptions): Promise<number> {
    return forwardUpdate(this.clients, this.uriOf(leader), leader, target, op, opts);
  }

  alive(peer: string): boolean {
    return this.health.alive(peer);
  }

  /** How long (ms) `peer` has not answered health checks (0 while it answers). */
  downFor(peer: string): number {
    return this.health.downFor(peer);
  }

  clock(target: ShardTarget): HeldClock {
    return this.clocks.take(`${target.uuid}/${target.shard}`);
  }

  transferOut(target: ShardTarget, to: string, source: LocalReplica, method: TransferMethod, id: string): void {
    this.outgoing.start(target, to, source, method, id);
  }

  transferGone(target: ShardTarget, to: string, id: string): void {
    this.outgoing.stop(target, to, id);
  }

  transferLost(target: ShardTarget, to: string, id: string): void {
    // Consensus may not run yet (this peer is starting): the next pass of checkOrphans tries again.
    if (this.consensus === null) return;
    this.outgoing.abandon(target, to, id);
  }

  /** Every second: transfers this peer is the source of that no run drives are aborted (see transferLost). */
  private checkOrphans(): void {
    const toc = this.toc;
    if (toc === null || this.consensus === null) return;
    for (const c of toc.all()) {
      for (const t of c.outgoingTransfers()) this.outgoing.abandon(c.shardTarget(t.shard), t.to, t.id);
    }
  }

  /** Transfers this peer is the source of, with their progress. */
  transfers(): TransferProgress[] {
    return this.outgoing.progress();
  }

  transferOutcomes(): TransferOutcomes {
    return this.outgoing.outcomes;
  }

  async peerDetails(peer: string, timeoutMs: number): Promise<PeerDetails | null> {
    if (peer === this.peer) return this.status?.() ?? null;
    try {
      const res = await this.clients.call<{ result: Buffer }>(this.uriOf(peer), peer, 'Status', {}, timeoutMs);
      return JSON.parse(res.result.toString('utf8')) as PeerDetails;
    } catch {
      return null;
    }
  }

  p2pCalls(): Record<string, { calls: number; failures: number }> {
    return Object.fromEntries([...this.clients.stats].map(([k, v]) => [k, { ...v }]));
  }

  close(): void {
    if (this.orphanTimer !== null) clearInterval(this.orphanTimer);
    this.marking.close();
    this.supervisor.stop();
    this.health.stop();
    this.outgoing.stopAll();
    this.clients.close();
  }
}
