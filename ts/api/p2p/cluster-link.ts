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

import { BadInputError, NotFoundError, QuiverError, ShardUnavailableError } from '../../common/errors';
import type { ClusterLink, HeldClock, ShardTarget } from '../../collection/cluster-link';
import type { LocalReplica } from '../../collection/local-replica';
import { isActive } from '../../collection/replica-state';
import type { UpdateOptions } from '../../collection/replica';
import type { ReplicaOperation } from '../../collection/replica-operation';
import type { Config } from '../../config/types';
import type { MetadataConsensus } from '../../storage/metadata-consensus';
import type { TableOfContent } from '../../storage/toc';
import type { WriterClocks } from '../../storage/writer-clocks';
import { PeerHealth } from '../../transfer/health';
import { OutgoingTransfers, type TransferProgress } from '../../transfer/stream';
import { ReplicaSupervisor } from '../../transfer/supervisor';
import type { PeerDetails, ReplicationView } from '../../transfer/view';
import type { P2PTls } from './grpc';
import { addPointsService, forwardUpdate, PointsClients, RemoteReplica } from './points';
import type { GrpcTransport } from './transport';

/** How long a write waits at most for the replicas that failed it to be marked Dead, and one attempt's bound. */
const DEACTIVATE_TIMEOUT_MS = 15_000;
const DEACTIVATE_ATTEMPT_MS = 3_000;

export class P2PClusterLink implements ClusterLink, ReplicationView {
  private consensus: MetadataConsensus | null = null;
  /** This peer's consensus details (set by `serve`). */
  private status: (() => PeerDetails) | null = null;
  readonly clients: PointsClients;
  readonly health: PeerHealth;
  private readonly supervisor: ReplicaSupervisor;
  private readonly outgoing: OutgoingTransfers;
  /** Dead markings in flight, by collection/shard/peer: concurrent failed writes share one proposal. */
  private readonly deactivating = new Map<string, Promise<void>>();

  constructor(
    readonly peer: string,
    config: Config,
    private readonly transport: GrpcTransport,
    tls: P2PTls | null,
    private readonly clocks: WriterClocks,
    private readonly logger: Logger,
  ) {
    this.clients = new PointsClients({ poolSize: config.cluster.p2p.connection_pool_size, callTimeoutMs: config.cluster.grpc_timeout_ms, tls });
    this.health = new PeerHealth({
      peers: () => ({ ...(this.consensus?.clusterState.peers ?? {}) }),
      self: peer,
      probe: (uri, timeoutMs) => this.transport.whoIs(uri, timeoutMs),
      onDown: (p, uri) => {
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
      isLeader: () => this.consensus?.status().role === 'leader',
      state: () => this.requireConsensus().clusterState,
      alive: (p) => this.health.alive(p),
      downFor: (p) => this.health.downFor(p),
      propose: (op, ms) => this.requireConsensus().propose(op, ms),
      logger,
    });
    this.outgoing = new OutgoingTransfers({
      peer,
      remote: (target, p) => this.remote(target, p),
      propose: (op, ms) => this.requireConsensus().propose(op, ms),
      logger,
    });
  }

  /** Serves the points service for this peer's collections on the p2p server (before it starts). */
  serve(toc: TableOfContent, settled: () => Promise<void>, status: () => PeerDetails): void {
    this.status = status;
    this.transport.addServices((server: grpc.Server) => addPointsService(server, { toc, peer: this.peer, settled, status }, this.logger));
  }

  /** Consensus runs: health checks and supervision start. */
  bind(consensus: MetadataConsensus): void {
    this.consensus = consensus;
    this.health.start();
    this.supervisor.start();
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

  deactivate(target: ShardTarget, peers: readonly string[], reason: string): Promise<void> {
    return Promise.all(peers.map((p) => this.deactivateOne(target, p, reason))).then(() => undefined);
  }

  private deactivateOne(target: ShardTarget, peer: string, reason: string): Promise<void> {
    const key = `${target.collection}/${target.uuid}/${target.shard}/${peer}`;
    let p = this.deactivating.get(key);
    if (p) return p;
    p = (async () => {
      const consensus = this.requireConsensus();
      const c = consensus.clusterState.collection(target.collection);
      if (c === undefined || c.uuid !== target.uuid) return;
      const replicas = c.shards.find((s) => s.id === target.shard)?.replicas ?? {};
      const state = replicas[peer];
      if (state === undefined || state === 'Dead') return;
      // The shard's last active replica stays Active (consensus would refuse): no proposal for it.
      if (isActive(state) && !Object.entries(replicas).some(([p, st]) => p !== peer && isActive(st))) {
        throw new ShardUnavailableError(`the replica on peer ${peer} is the last active replica of shard ${target.shard} of collection \`${target.collection}\`: it stays Active`);
      }
      this.logger.warn({ collection: target.collection, shard: target.shard, peer, reason }, 'marking a replica Dead');
      // Retried while consensus cannot commit (a leader change: the failed peer may have
      // led); marking Dead twice is harmless, so a proposal that timed out may be sent again.
      const deadline = Date.now() + DEACTIVATE_TIMEOUT_MS;
      for (;;) {
        try {
          await consensus.propose({ op: 'setReplicaState', collection: target.collection, shard: target.shard, peer, state: 'Dead' }, DEACTIVATE_ATTEMPT_MS);
          return;
        } catch (err) {
          const now = consensus.clusterState.collection(target.collection);
          const st = now?.uuid === target.uuid ? now.shards.find((s) => s.id === target.shard)?.replicas[peer] : undefined;
          // Gone meanwhile (removed, or the collection re-created) or marked by another write: done.
          if (err instanceof NotFoundError || st === undefined || st === 'Dead') return;
          // Refused by the state (the last active replica): final.
          if (err instanceof BadInputError || Date.now() > deadline) throw err instanceof QuiverError ? err : new ShardUnavailableError(String(err));
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    })().finally(() => this.deactivating.delete(key));
    this.deactivating.set(key, p);
    return p;
  }

  forward(target: ShardTarget, leader: string, op: ReplicaOperation, opts: UpdateOptions): Promise<number> {
    return forwardUpdate(this.clients, this.uriOf(leader), leader, target, op, opts);
  }

  alive(peer: string): boolean {
    return this.health.alive(peer);
  }

  clock(target: ShardTarget): HeldClock {
    return this.clocks.take(`${target.uuid}/${target.shard}`);
  }

  transferOut(target: ShardTarget, to: string, source: LocalReplica): void {
    this.outgoing.start(target, to, source);
  }

  transferGone(target: ShardTarget, to: string): void {
    this.outgoing.stop(target, to);
  }

  /** Transfers this peer is the source of, with their progress. */
  transfers(): TransferProgress[] {
    return this.outgoing.progress();
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
    this.supervisor.stop();
    this.health.stop();
    this.outgoing.stopAll();
    this.clients.close();
  }
}
