/**
 * The service routes: `/` (name, version, commit), the health probes, Prometheus
 * metrics and telemetry.
 *
 * Owns: what those routes answer. Must never: need authentication (`/` and the probes
 * are open in the reference; auth arrives with its own issue), or block on storage.
 */

import type { Context } from 'koa';

import { ok } from '../envelope';
import { QDRANT_API_VERSION, SERVICE_TITLE, type ServiceInfo } from '../info';
import type { RouteTable } from './route';
import { accessOf } from './auth';
import { canSee } from '../../auth/access';
import type { RequestStats } from './stats';
import type { TableOfContent } from '../../storage/toc';
import type { MetadataConsensus } from '../../storage/metadata-consensus';

export { QDRANT_API_VERSION, type ServiceInfo } from '../info';

export function addServiceRoutes(routes: RouteTable, info: ServiceInfo, stats: RequestStats, toc: TableOfContent, consensus: MetadataConsensus | null = null): void {
  routes.add('GET', '/', (ctx: Context) => {
    ctx.body = { title: SERVICE_TITLE, version: QDRANT_API_VERSION, quiver_version: info.version, commit: info.commit };
  });

  const text = (body: string) => (ctx: Context) => {
    ctx.type = 'text/plain';
    ctx.body = body;
  };
  routes.add('GET', '/healthz', text('healthz check passed'));
  routes.add('GET', '/livez', text('healthz check passed'));
  // A single node is ready once it listens: its shards are loaded and replayed before.
  // A cluster peer is ready once it applied everything its leader committed.
  routes.add('GET', '/readyz', (ctx: Context) => {
    ctx.type = 'text/plain';
    if (consensus === null || consensus.ready()) {
      ctx.body = 'all shards are ready';
    } else {
      ctx.status = 503;
      ctx.body = 'some shards are not ready: consensus has not caught up with the leader';
    }
  });

  routes.add('GET', '/metrics', async (ctx: Context) => {
    ctx.type = stats.registry.contentType;
    ctx.body = await stats.registry.metrics();
  });

  const visible = (ctx: Context) => {
    const access = accessOf(ctx);
    return toc.all().filter((c) => canSee(access, c.name));
  };
  routes.add('GET', '/telemetry', (ctx: Context) => {
    ok(ctx, {
      id: info.instanceId,
      app: {
        name: 'quiver',
        version: QDRANT_API_VERSION,
        quiver_version: info.version,
        startup: info.startedAt.toISOString(),
        // Which engine backend serves: the native addon, or its WASM fallback.
        engine: { backend: toc.engine.backend, kernels: toc.engine.kernels },
      },
      // A collection-scoped caller sees its collections only.
      collections: {
        number_of_collections: visible(ctx).length,
        collections: visible(ctx).map((c) => ({ id: c.name, points: c.pointsCount(), status: c.status() })),
      },
      // Request figures span every collection: for global callers only.
      ...(accessOf(ctx).kind === 'global' ? { requests: { rest: stats.restFigures() } } : {}),
    });
  });
}
