/**
 * The Koa application of the REST API, built from the configuration and the services
 * it answers for.
 *
 * The direct lane (direct.ts) serves the hot read routes before Koa sees them.
 * Order of the middleware, outermost first: request clock, log line and counters ->
 * error envelope -> CORS -> path normalisation -> routes -> 404 for anything else.
 *
 * Owns: that order and the wiring of the routers. Must never: listen on a port (the
 * node does), or read configuration sources (it is handed a validated Config).
 */

import type { RequestListener } from 'node:http';
import Koa from 'koa';
import type { Context, Next } from 'koa';
import { Router } from '@koa/router';
import type { Logger } from 'pino';

import type { Config } from '../../config/types';
import { markRequestStart, elapsedSeconds } from '../envelope';
import { errorMiddleware } from '../errors';
import { corsMiddleware } from './cors';
import { DirectLane } from './direct';
import { clientConnection } from './connection';
import type { TableOfContent } from '../../storage/toc';
import { addClusterRoutes, replicaStateCounts } from './cluster';
import { addClusterUpdateRoute } from './cluster-update';
import { addDrainRoutes } from './drain';
import { PeerDrainer } from '../../transfer/drain';
import type { ReplicationView } from '../../transfer/view';
import { addCollectionRoutes } from './collections';
import type { MetadataConsensus } from '../../storage/metadata-consensus';
import { Dispatcher } from '../../storage/dispatcher';
import { addDashboardRoutes } from './dashboard';
import { addNotImplementedRoutes } from './not-implemented';
import { addIssueRoutes } from './issues';
import { addClusterMetadataRoutes } from './cluster-metadata';
import { addPointRoutes } from './points';
import { RouteTable, matchedRoute } from './route';
import { addServiceRoutes, type ServiceInfo } from './service';
import { addShardKeyRoutes } from './shard-keys';
import { addSnapshotRoutes } from './snapshots';
import { routeGuard } from './auth';
import type { Authenticator } from '../../auth/authenticate';
import { makeAuthenticator } from '../guard';
import type { AuditLog } from '../../auth/audit';
import { ClusterBackup } from '../../snapshots/backup';
import { ClusterSnapshots } from '../../snapshots/cluster';
import type { SnapshotJobs } from '../../snapshots/jobs';
import type { Snapshots } from '../../snapshots/snapshots';
import { requestFinished, requestStarted } from '../../../bindings';
import { RequestStats, requestDone } from './stats';
import { addEngineGauge } from './engine-metrics';

export type { ServiceInfo } from './service';

export interface RestDeps {
  logger: Logger;
  info: ServiceInfo;
  toc: TableOfContent;
  snapshots: Snapshots;
  /** Who is calling (keys, JWT); built from the config when absent. */
  authenticator?: Authenticator;
  audit?: AuditLog;
  /** Consensus over the metadata in cluster mode; null or absent on a single node. */
  consensus?: MetadataConsensus | null;
  /** Replication on this peer (transfers, peer health, p2p calls) in cluster mode. */
  replication?: ReplicationView | null;
  /** Snapshot recovery through consensus (cluster mode); built from `consensus` when absent. */
  clusterSnapshots?: ClusterSnapshots | null;
  /** Whole-cluster backups (`POST /cluster/backup`); when absent, one that reads this peer's replicas only. */
  backup?: ClusterBackup;
  /** Snapshot jobs (wait=false creates and recoveries, `/snapshots/jobs`); absent: wait=false only logs the outcome. */
  snapshotJobs?: SnapshotJobs | null;
}

export interface RestApp {
  app: Koa;
  stats: RequestStats;
  /** What the HTTP server runs: the direct lane (direct.ts) in front of `app`. */
  listener: RequestListener;
  lane: DirectLane;
}

export function buildRestApp(config: Config, deps: RestDeps): RestApp {
  const { logger, info, toc, snapshots } = deps;
  const stats = new RequestStats(config.service.metrics_prefix);
  stats.addStorageGauges({
    collections: () =>
      toc.all().map((c) => ({
        name: c.name,
        points: c.pointsCount(),
        indexedVectors: c.indexedVectorsCount(),
        segments: c.segmentsCount(),
        optimizing: c.status() === 'yellow',
      })),
  });
  addEngineGauge(stats.registry, config.service.metrics_prefix, toc.engine);
  const app = new Koa();
  app.proxy = false;
  // Errors reach this only when writing a response fails (a client gone mid-answer).
  app.silent = true;
  app.on('error', (err: Error) => logger.warn({ err }, 'error while sending a response'));

  app.use(requestLog(logger, stats));
  app.use(errorMiddleware(logger));
  if (config.service.enable_cors) app.use(corsMiddleware());
  app.use(normalisePath);

  const authn = deps.authenticator ?? makeAuthenticator(config, toc);
  const bodyLimitBytes = config.service.max_request_size_mb * 1024 * 1024;
  const lane = new DirectLane({ logger, stats, bodyLimitBytes, authn, audit: deps.audit ?? null, cors: config.service.enable_cors });
  const router = new Router();
  const routes = new RouteTable(router, bodyLimitBytes, (method, pattern) => routeGuard(authn, deps.audit ?? null, method, pattern), lane);
  const consensus = deps.consensus ?? null;
  stats.addClusterGauges(
    consensus === null
      ? null
      : () => {
          const st = consensus.status();
          return { peers: Object.keys(st.peers).length, term: st.term, commit: st.commit, pending: consensus.pendingOperations(), voter: st.isVoter, leader: st.role === 'leader' };
        },
  );
  addServiceRoutes(routes, info, stats, toc, consensus);
  const dispatcher = new Dispatcher(toc, consensus, config);
  addCollectionRoutes(routes, dispatcher);
  addClusterMetadataRoutes(routes, dispatcher);
  addShardKeyRoutes(routes, dispatcher);
  addClusterUpdateRoute(routes, dispatcher);
  const replication = deps.replication ?? null;
  if (consensus !== null && replication !== null) stats.addReplicationMetrics(() => replicaStateCounts(consensus), replication);
  addClusterRoutes(routes, toc, consensus, replication);
  const drainer = consensus === null ? null : new PeerDrainer(consensus, dispatcher, logger.child({ component: 'drain' }), { alive: (p) => replication?.alive(p) ?? true });
  addDrainRoutes(routes, consensus, drainer, replication);
  addPointRoutes(routes, toc);
  addIssueRoutes(routes, toc);
  const clusterSnapshots = deps.clusterSnapshots ?? (consensus === null ? null : new ClusterSnapshots({ snapshots, toc, consensus, config, logger }));
  const backup = deps.backup ?? new ClusterBackup({ snapshots, toc, consensus, fetcher: null, logger, version: info.version });
  const jobs = deps.snapshotJobs ?? null;
  if (jobs !== null) jobs.setMetrics(stats.snapshotJobMetrics());
  addSnapshotRoutes(routes, toc, snapshots, logger, clusterSnapshots, backup, jobs, consensus === null ? null : () => consensus.clusterState.scheduledAll());
  addDashboardRoutes(routes);
  addNotImplementedRoutes(routes);
  app.use(router.routes());

  app.use(unknownRoute);
  return { app, stats, listener: lane.listener(app.callback()), lane };
}

/** One log line and one count per request, with its route pattern, status and duration. */
function requestLog(logger: Logger, stats: RequestStats) {
  return async function logRequest(ctx: Context, next: Next): Promise<void> {
    markRequestStart(ctx);
    requestStarted(clientConnection(ctx.req.socket));
    try {
      await next();
    } finally {
      requestFinished();
      requestDone(logger, stats, ctx.method, ctx.path, matchedRoute(ctx), ctx.status, elapsedSeconds(ctx));
    }
  };
}

/** `/collections/` is `/collections` (the reference trims one trailing slash the same way). */
async function normalisePath(ctx: Context, next: Next): Promise<void> {
  if (ctx.path.length > 1 && ctx.path.endsWith('/')) ctx.path = ctx.path.replace(/\/+$/, '') || '/';
  await next();
}

/** The reference answers an unknown route with 404 and an empty body. */
function unknownRoute(ctx: Context): void {
  // Reached only when no route matched. A null body (set before the status, which it
  // would otherwise turn into 204) is sent as an empty one.
  ctx.body = null;
  ctx.status = 404;
}
