/**
 * What the service says about itself, on every API: the version of the Qdrant API it
 * implements and the facts of the running process.
 *
 * Owns: QDRANT_API_VERSION and ServiceInfo (REST `/` and `/telemetry`, gRPC
 * `qdrant.Qdrant/HealthCheck`). Must never: read files (the node fills ServiceInfo).
 */

/**
 * The version of the Qdrant API this server implements, reported as `version` by `/`,
 * `/telemetry` and the gRPC health check: the official clients compare it with their
 * own (major.minor) and warn when they differ. Quiver's own release is `quiver_version`
 * beside it.
 */
export const QDRANT_API_VERSION = '1.18.0';

/** The `title` of REST `/` and of the gRPC health check. */
export const SERVICE_TITLE = 'quiver - vector search engine';

/** Facts about this running process, fixed at start. */
export interface ServiceInfo {
  /** Quiver's own version (package.json). */
  version: string;
  /** Git commit of the build, null when unknown. */
  commit: string | null;
  /** Random per-process id reported by /telemetry. */
  instanceId: string;
  startedAt: Date;
}
