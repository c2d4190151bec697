/**
 * A Quiver node: the REST service over the storage (TableOfContent), and in cluster mode
 * (`cluster.enabled`) the consensus driver with its internal API on `cluster.p2p.port`.
 *
 * Owns: wiring the parts together (in cluster mode: the consensus driver runs the
 * metadata state machine of ts/storage and reaches the other peers through the gRPC
 * transport of ts/api/p2p), binding the HTTP server to `service.host`:`service.http_port`
 * and the public gRPC API (ts/api/grpc) to `service.grpc_port`, the facts the
 * service reports about itself (version, commit, start time), and the ordered
 * shutdown: stop accepting, let requests in flight finish (bounded), then close.
 * Must never: exit the process or install signal handlers (bin/quiver does), or read
 * configuration sources.
 */

import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import type { Logger } from 'pino';

import { loadEngine, type Engine } from '../bindings';
import { buildRestApp } from './api/rest/app';
import { HttpFront } from './api/rest/front';
import { QDRANT_API_VERSION, type ServiceInfo } from './api/info';
import { makeAuthenticator, openKeySource } from './api/guard';
import { KeySetFileError, type KeySource } from './auth/jwks';
import { GrpcApiServer, GrpcStartError } from './api/grpc/server';
import { grpcServices } from './api/grpc/services';
import { Dispatcher } from './storage/dispatcher';
import { ROLE_NAMES } from './api/rest/cluster';
import type { Config } from './config/types';
import { QuiverError, ShardUnavailableError } from './common/errors';
import { GrpcTransport } from './api/p2p/transport';
import { P2PClusterLink } from './api/p2p/cluster-link';
import { WriterClocks } from './storage/writer-clocks';
import { PendingMarkings } from './storage/pending-markings';
import type { PeerDetails } from './transfer/view';
import { createRestServer, loadRestTls, TlsSetupError, type RestTlsMaterial } from './api/tls';
import { AuditLog } from './auth/audit';
import { ConsensusDriver, ConsensusStartError } from './consensus/driver';
import { ClusterBackup } from './snapshots/backup';
import { ClusterSnapshots } from './snapshots/cluster';
import { SnapshotJobs } from './snapshots/jobs';
import { ClusterSnapshotScheduler } from './snapshots/cluster-schedule';
import { SnapshotScheduler } from './snapshots/schedule';
import { Snapshots, type StartupRestore } from './snapshots/snapshots';
import { ClusterStateMachine } from './storage/cluster-machine';
import { MetadataConsensus } from './storage/metadata-consensus';
import { readPeerId, TableOfContent } from './storage/toc';

/** How long shutdown waits for requests in flight before cutting their connections. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 10_000;

export interface NodeOptions {
  drainTimeoutMs?: number;
  /** Overrides the version and commit read from the checkout (tests). */
  info?: Partial<ServiceInfo>;
  /** The engine to store with (default: loadEngine()). */
  engine?: Engine;
  /** Snapshots to recover before the API serves (`--snapshot`, `--storage-snapshot`). */
  restore?: StartupRestore;
  /** Cluster mode: this peer's URI (`--uri`) and a running peer to join (`--bootstrap`). */
  uri?: string | null;
  bootstrap?: string | null;
}

export interface RunningNode {
  /** The port the REST API listens on (the real one when the config asked for 0). */
  port: number;
  /** The port the public gRPC API listens on; null when `service.grpc_port` is null (gRPC off). */
  grpcPort: number | null;
  host: string;
  toc: TableOfContent;
  /** Consensus over the metadata (cluster mode), else null. */
  consensus: MetadataConsensus | null;
  /** Stops accepting, waits for requests in flight (bounded), closes. Safe to call twice. */
  close(): Promise<void>;
}

/** Raised when the configuration asks for something this version cannot start with. */
export class StartupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StartupError';
  }
}

export async function startNode(config: Config, logger: Logger, options: NodeOptions = {}): Promise<RunningNode> {
  // The HTTPS files are checked before storage opens: a bad certificate fails start-up at once.
  let restTls: RestTlsMaterial | null;
  try {
    restTls = await loadRestTls(config);
  } catch (err) {
    if (err instanceof TlsSetupError) throw new StartupError(err.message);
    throw err;
  }

  const prefix = config.service.metrics_prefix;
  if (prefix !== null && prefix !== '' && !/^[A-Za-z_:][A-Za-z0-9_:]*$/.test(prefix)) {
    throw new StartupError(
      `service.metrics_prefix ${JSON.stringify(prefix)} cannot start a Prometheus metric name: ` +
        'use letters, digits, "_" and ":" only, not starting with a digit',
    );
  }

  // A JWKS file is read before storage opens too: an unusable one fails start-up at once.
  let keySource: KeySource | null;
  try {
    keySource = openKeySource(config, logger.child({ component: 'jwks' }));
  } catch (err) {
    if (err instanceof KeySetFileError) throw new StartupError(err.message);
    throw err;
  }

  const info: ServiceInfo = { ...readServiceInfo(), ...options.info };
  let engine: Engine;
  try {
    engine = options.engine ?? loadEngine({ logger });
  } catch (err) {
    // QUIVER_ENGINE=native with an addon that cannot load (or no engine at all): say why.
    throw new StartupError(`cannot load the engine: ${(err as Error).message}`);
  }
  const storagePath = path.resolve(config.storage.storage_path);
  // Cluster mode: the link to the other peers exists before the table of collections,
  // which opens cluster collections with it; consensus binds it once it runs.
  let cluster: { transport: GrpcTransport; link: P2PClusterLink; peerId: string } | null = null;
  if (config.cluster.enabled) {
    try {
      cluster = await openClusterLink(config, logger, storagePath);
    } catch (err) {
      if (err instanceof TlsSetupError) throw new StartupError(err.message);
      throw err;
    }
  }
  const toc = await TableOfContent.open(storagePath, engine, logger, config.storage.max_collections, cluster?.link ?? null);
  const uri = options.uri ?? null;
  const bootstrap = options.bootstrap ?? null;
  const restoring = options.restore !== undefined && (options.restore.snapshots.length > 0 || options.restore.storageSnapshot !== null);
  if (!config.cluster.enabled && (uri !== null || bootstrap !== null)) {
    await toc.close();
    throw new StartupError('--uri and --bootstrap need cluster mode: set cluster.enabled: true (or SERVICE__CLUSTER__ENABLED=true)');
  }
  if (config.cluster.enabled && restoring && bootstrap !== null) {
    // As the reference: start-up recovery is for a single node or the first peer of a new
    // cluster; a joining peer recovers through the snapshot API once it is a member.
    await toc.close();
    throw new StartupError(
      '--snapshot and --storage-snapshot cannot be used on a peer that joins a cluster (--bootstrap): recover them at start-up on the first peer of a new cluster, or through the snapshot API of a running peer',
    );
  }
  let snapshots: Snapshots;
  let snapshotJobs: SnapshotJobs;
  try {
    snapshots = await Snapshots.open(config, toc, logger, info.version);
    // Jobs a stop cut short are marked failed here, before anything can ask for them.
    snapshotJobs = await SnapshotJobs.open(storagePath, logger);
    if (options.restore && !config.cluster.enabled) await snapshots.restoreAtStartup(options.restore);
  } catch (err) {
    await toc.close();
    if (err instanceof QuiverError) throw new StartupError(`snapshot recovery at start-up failed: ${err.detail}`);
    throw err;
  }
  let consensus: MetadataConsensus | null = null;
  let clusterSnapshots: ClusterSnapshots | null = null;
  if (config.cluster.enabled) {
    try {
      consensus = await startConsensus(config, logger, toc, snapshots, uri, bootstrap, cluster!);
    } catch (err) {
      await toc.close();
      if (err instanceof ConsensusStartError || err instanceof TlsSetupError) throw new StartupError(err.message);
      throw err;
    }
    clusterSnapshots = new ClusterSnapshots({ snapshots, toc, consensus, config, logger });
    if (restoring) {
      // The first peer of a new cluster: the collections are created through consensus
      // (this peer elects itself first), before the API serves.
      try {
        await clusterSnapshots.leaderKnown(config.cluster.consensus.bootstrap_timeout_sec * 1000);
        await snapshots.restoreAtStartup(options.restore!, clusterSnapshots);
      } catch (err) {
        await consensus.close();
        cluster!.link.close();
        await toc.close();
        if (err instanceof QuiverError) throw new StartupError(`snapshot recovery at start-up failed: ${err.detail}`);
        throw err;
      }
    }
  }
  const audit = await AuditLog.open(config.audit, { logger });
  if (config.audit.enabled) logger.info({ dir: config.audit.dir, rotation: config.audit.rotation }, 'audit log on');
  const backup = new ClusterBackup({ snapshots, toc, consensus, fetcher: cluster?.link ?? null, logger, version: info.version });
  const authenticator = makeAuthenticator(config, toc, keySource);
  const { listener, stats, lane } = buildRestApp(config, { logger, info, toc, snapshots, audit, authenticator, consensus, replication: cluster?.link ?? null, clusterSnapshots, backup, snapshotJobs });
  const server = await createRestServer(config, listener, logger, restTls);
  server.keepAliveTimeout = config.service.http_keep_alive_timeout_sec * 1000;
  const front = HttpFront.attach(server, lane, { bodyLimitBytes: config.service.max_request_size_mb * 1024 * 1024, cors: config.service.enable_cors });
  stats.addFrontMetrics(front);

  // The gRPC API binds first: once REST listens (what start-up waits for), both serve.
  let grpcServer: GrpcApiServer | null = null;
  if (config.service.grpc_port !== null) {
    const services = grpcServices({ logger, info, toc, dispatcher: new Dispatcher(toc, consensus, config), snapshots, consensus, replication: cluster?.link ?? null });
    try {
      grpcServer = await GrpcApiServer.start(config, { logger, authn: authenticator, audit, registry: stats.registry, services }, restTls);
    } catch (err) {
      server.close();
      await consensus?.close();
      cluster?.link.close();
      await toc.close();
      await audit.close();
      if (err instanceof GrpcStartError) throw new StartupError(err.message);
      throw err;
    }
  }

  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => {
      Promise.resolve(grpcServer?.close(0))
        .then(() => consensus?.close())
        .then(() => toc.close())
        .finally(() => reject(err));
    };
    server.once('error', onError);
    server.listen(config.service.http_port, config.service.host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  server.on('error', (err) => logger.error({ err }, 'REST server error'));

  // Scheduled snapshots start once the APIs serve (a missed run then runs at once). In
  // cluster mode each shard's run is claimed through consensus (cluster-schedule.ts).
  const scheduler =
    config.snapshots.schedule.length === 0
      ? null
      : consensus === null
        ? await SnapshotScheduler.start(config.snapshots.schedule, storagePath, snapshots, snapshotJobs, logger, stats.snapshotScheduleMetrics())
        : ClusterSnapshotScheduler.start(config.snapshots.schedule, {
            consensus,
            snapshots,
            jobs: snapshotJobs,
            logger,
            metrics: stats.snapshotScheduleMetrics(),
            alive: (p) => cluster?.link.alive(p) ?? true,
            downFor: (p) => cluster?.link.downFor(p) ?? 0,
          });

  const address = server.address() as AddressInfo;
  const drainTimeoutMs = options.drainTimeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS;
  let closing: Promise<void> | null = null;

  return {
    port: address.port,
    grpcPort: grpcServer?.port ?? null,
    host: address.address,
    toc,
    consensus,
    close() {
      closing ??= Promise.all([drain(server, front, drainTimeoutMs, logger), grpcServer?.close(drainTimeoutMs)]).then(async () => {
        // Requests are done: stop consensus (its log is durable at every step), then
        // write a last checkpoint of every shard and close the WALs. Snapshot jobs still
        // running end with the process: recorded as failed first.
        scheduler?.close();
        await snapshotJobs.close();
        await consensus?.close();
        cluster?.link.close();
        await toc.close();
        await audit.close();
        authenticator.close();
        logger.info('storage flushed and closed');
      });
      return closing;
    },
  };
}

/**
 * Cluster mode: the p2p transport (its TLS files are read first), the metadata state
 * machine over this node's storage, and the consensus driver (its log in `storage/raft`)
 * that runs the machine and reaches the other peers through the transport.
 */
async function openClusterLink(config: Config, logger: Logger, storagePath: string): Promise<{ transport: GrpcTransport; link: P2PClusterLink; peerId: string }> {
  const log = logger.child({ component: 'consensus' });
  const transport = await GrpcTransport.open(config, log);
  await fs.promises.mkdir(storagePath, { recursive: true });
  const peerId = config.cluster.peer_id ?? (await readPeerId(storagePath)).toString();
  const clocks = await WriterClocks.open(storagePath);
  const pending = await PendingMarkings.open(storagePath);
  const link = new P2PClusterLink(peerId, config, transport, transport.p2pTls, clocks, logger.child({ component: 'replication' }), pending);
  return { transport, link, peerId };
}

async function startConsensus(
  config: Config,
  logger: Logger,
  toc: TableOfContent,
  snapshots: Snapshots,
  uri: string | null,
  bootstrap: string | null,
  cluster: { transport: GrpcTransport; link: P2PClusterLink; peerId: string },
): Promise<MetadataConsensus> {
  const log = logger.child({ component: 'consensus' });
  const { transport, link, peerId } = cluster;
  const machine = new ClusterStateMachine(toc, peerId, log);
  let consensusRef: MetadataConsensus | null = null;
  link.serve(
    toc,
    snapshots,
    () => machine.idle(),
    () => peerDetails(consensusRef, QDRANT_API_VERSION),
  );
  const driver = await ConsensusDriver.start({
    settings: config.cluster.consensus,
    logger: log,
    dir: path.join(toc.storagePath, 'raft'),
    peerId,
    uri,
    bootstrap,
    machine,
    transport,
  });
  const consensus = new MetadataConsensus(driver, machine);
  consensusRef = consensus;
  link.bind(consensus);
  return consensus;
}

/** This peer's consensus details for another peer's GET /cluster/telemetry. */
function peerDetails(consensus: MetadataConsensus | null, version: string): PeerDetails {
  if (consensus === null) throw new ShardUnavailableError('consensus is starting');
  const s = consensus.status();
  return {
    version,
    role: ROLE_NAMES[s.role] ?? null,
    is_voter: s.isVoter,
    term: s.term,
    commit: s.commit,
    num_pending_operations: consensus.pendingOperations(),
    consensus_thread_status: s.thread,
  };
}

/** Stops accepting; idle keep-alive connections close as soon as they are idle; busy ones get `timeoutMs`. */
function drain(server: http.Server, front: HttpFront, timeoutMs: number, logger: Logger): Promise<void> {
  return new Promise((resolve) => {
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearInterval(sweep);
      clearTimeout(deadline);
      resolve();
    };
    server.close(() => finish());
    const closeIdle = () => {
      server.closeIdleConnections();
      front.closeIdle();
    };
    closeIdle();
    // A connection that finishes its request after close() is idle again: close it then.
    const sweep = setInterval(closeIdle, 50);
    const deadline = setTimeout(() => {
      logger.warn({ timeoutMs }, 'requests still in flight after the shutdown wait: closing their connections');
      server.closeAllConnections();
      front.closeAll();
      finish();
    }, timeoutMs);
  });
}

function readServiceInfo(): ServiceInfo {
  const root = repoRoot();
  return { version: readVersion(root), commit: readCommit(root), instanceId: randomUUID(), startedAt: new Date() };
}

/** The nearest folder above this module that holds package.json (works from ts/ and dist/ts/). */
function repoRoot(): string {
  let dir = __dirname;
  for (;;) {
    if (fs.existsSync(path.join(dir, 'package.json'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) return __dirname;
    dir = parent;
  }
}

function readVersion(root: string): string {
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}

/** QUIVER_COMMIT when set, else the checkout's HEAD, else null (no git, or not a checkout). */
function readCommit(root: string): string | null {
  const fromEnv = process.env.QUIVER_COMMIT?.trim();
  if (fromEnv) return fromEnv;
  try {
    const out = execFileSync('git', ['rev-parse', 'HEAD'], {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 2000,
    }).trim();
    return /^[0-9a-f]{40}$/.test(out) ? out : null;
  } catch {
    return null;
  }
}
