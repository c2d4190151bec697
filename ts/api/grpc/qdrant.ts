/**
 * `qdrant.Qdrant`: the health check, the gRPC form of REST `GET /` (open to every
 * caller, as there): the service's title, the Qdrant API version it implements and the
 * commit it was built from.
 *
 * Owns: that translation. Must never: need credentials.
 */

import { QDRANT_API_VERSION, SERVICE_TITLE, type ServiceInfo } from '../info';
import type { GrpcService } from './method';

export function qdrantService(info: ServiceInfo): GrpcService {
  return {
    HealthCheck: {
      access: 'GET /',
      async handle() {
        return { title: SERVICE_TITLE, version: QDRANT_API_VERSION, ...(info.commit === null ? {} : { commit: info.commit }) };
      },
    },
  };
}
