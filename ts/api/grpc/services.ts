/**
 * The services of the public gRPC API, built over the node's parts: what the server
 * (server.ts) serves. A service or RPC of the contract absent here answers
 * UNIMPLEMENTED.
 *
 * Owns: that list. Must never: hold handlers.
 */

import type { Logger } from 'pino';

import type { Snapshots } from '../../snapshots/snapshots';
import type { Dispatcher } from '../../storage/dispatcher';
import type { MetadataConsensus } from '../../storage/metadata-consensus';
import type { TableOfContent } from '../../storage/toc';
import type { ReplicationView } from '../../transfer/view';
import type { ServiceInfo } from '../info';
import type { GrpcService } from './method';
import type { ServiceName } from './proto';
import { collectionsService } from './collections';
import { pointsService } from './points';
import { qdrantService } from './qdrant';
import { snapshotsService } from './snapshots';

export interface GrpcServiceDeps {
  logger: Logger;
  info: ServiceInfo;
  toc: TableOfContent;
  /** Metadata changes (local, or through consensus in a cluster). */
  dispatcher: Dispatcher;
  snapshots: Snapshots;
  /** Consensus over the metadata (cluster mode), else null. */
  consensus: MetadataConsensus | null;
  /** Replication on this peer (transfers, peer health) in cluster mode, else null. */
  replication: ReplicationView | null;
}

export function grpcServices(deps: GrpcServiceDeps): Partial<Record<ServiceName, GrpcService>> {
  return {
    'qdrant.Qdrant': qdrantService(deps.info),
    'qdrant.Collections': collectionsService(deps),
    'qdrant.Points': pointsService(deps.toc, deps.dispatcher),
    'qdrant.Snapshots': snapshotsService(deps.toc, deps.snapshots),
  };
}
