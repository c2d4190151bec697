/**
 * The services of the public gRPC API, built over the node's parts: what the server
 * (server.ts) serves. A service or RPC of the contract absent here answers
 * UNIMPLEMENTED.
 *
 * Owns: that list. Must never: hold handlers.
 */

import type { Logger } from 'pino';

import type { ClusterSnapshots } from '../../snapshots/cluster';
import type { Snapshots } from '../../snapshots/snapshots';
import type { Dispatcher } from '../../storage/dispatcher';
import type { TableOfContent } from '../../storage/toc';
import type { ServiceInfo } from '../info';
import type { GrpcService } from './method';
import type { ServiceName } from './proto';
import { collectionsService } from './collections';
import { pointsService } from './points';
import { qdrantService } from './qdrant';

export interface GrpcServiceDeps {
  logger: Logger;
  info: ServiceInfo;
  toc: TableOfContent;
  /** Metadata changes (local, or through consensus in a cluster). */
  dispatcher: Dispatcher;
  snapshots: Snapshots;
  /** Snapshot recovery through consensus (cluster mode), else null. */
  clusterSnapshots: ClusterSnapshots | null;
}

export function grpcServices(deps: GrpcServiceDeps): Partial<Record<ServiceName, GrpcService>> {
  return {
    'qdrant.Qdrant': qdrantService(deps.info),
    'qdrant.Collections': collectionsService(deps.dispatcher),
    'qdrant.Points': pointsService(deps.toc, deps.dispatcher),
  };
}
