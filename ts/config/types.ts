/**
 * The shape of Quiver's configuration, after defaults, the config file(s), and
 * SERVICE__SECTION__KEY environment overrides are merged and validated.
 *
 * Owns: the names and types of every setting. Must never: read files or the
 * environment (ts/config/index.ts does that), or hold behaviour.
 *
 * Keys follow the reference server's config (snake_case, same sections) so that an
 * operator's existing config file works. Values that the reference leaves unset are
 * `null` here.
 */

export type LogLevel = 'TRACE' | 'DEBUG' | 'INFO' | 'WARN' | 'ERROR';

export interface S3Config {
  bucket: string;
  region: string | null;
  access_key: string | null;
  secret_key: string | null;
  endpoint_url: string | null;
}

export interface StorageConfig {
  storage_path: string;
  snapshots_path: string;
  snapshots_config: {
    snapshots_storage: 'local' | 's3';
    s3_config: S3Config | null;
  };
  temp_path: string | null;
  on_disk_payload: boolean;
  /**
   * Defaults of new collections' wal_config. wal_capacity_mb is the WAL segment size and
   * also the history a checkpoint keeps (docs/storage.md); wal_segments_ahead is
   * accepted for compatibility and not used.
   */
  wal: { wal_capacity_mb: number; wal_segments_ahead: number };
  node_type: 'Normal' | 'Listener';
  /** Method of automatic recoveries and of transfers asked for without one; null: wal_delta for recoveries, stream_records for the rest. */
  shard_transfer_method: 'stream_records' | 'snapshot' | 'wal_delta' | null;
  performance: { max_search_threads: number; optimizer_cpu_budget: number; incoming_shard_transfers_limit: number; outgoing_shard_transfers_limit: number; shard_transfer_max_mb_per_sec: number | null };
  optimizers: {
    deleted_threshold: number;
    vacuum_min_vector_number: number;
    default_segment_number: number;
    max_segment_size_kb: number | null;
    indexing_threshold_kb: number;
    flush_interval_sec: number;
    max_optimization_threads: number | null;
  };
  hnsw_index: {
    m: number;
    ef_construct: number;
    full_scan_threshold_kb: number;
    max_indexing_threads: number;
    on_disk: boolean;
    payload_m: number | null;
  };
  collection: {
    replication_factor: number;
    write_consistency_factor: number;
  };
  max_collections: number | null;
}

export interface ServiceConfig {
  host: string;
  http_port: number;
  grpc_port: number | null;
  max_request_size_mb: number;
  max_workers: number;
  enable_cors: boolean;
  enable_tls: boolean;
  verify_https_client_certificate: boolean;
  api_key: string | null;
  read_only_api_key: string | null;
  jwt_rbac: boolean;
  /** Accept HS256 tokens signed with api_key (with jwt_rbac); false: the api key mints no token. */
  jwt_allow_hs256: boolean;
  /** A JWKS file of the public keys of asymmetric tokens (with jwt_rbac); re-read when it changes. */
  jwt_jwks_path: string | null;
  /** A JWKS URL (http or https) of the public keys of asymmetric tokens (with jwt_rbac). */
  jwt_jwks_url: string | null;
  enable_snapshot_url_recovery: boolean;
  metrics_prefix: string | null;
  http_keep_alive_timeout_sec: number;
}

export interface ClusterConfig {
  enabled: boolean;
  peer_id: string | null;
  p2p: { port: number; enable_tls: boolean; connection_pool_size: number };
  consensus: {
    tick_period_ms: number;
    compact_wal_entries: number;
    bootstrap_timeout_sec: number;
    max_message_queue_size: number;
  };
  grpc_timeout_ms: number;
  connection_timeout_ms: number;
}

export interface TlsConfig {
  cert: string;
  key: string;
  ca_cert: string;
  cert_ttl: number;
}

export interface AuditConfig {
  enabled: boolean;
  dir: string;
  rotation: 'daily' | 'hourly';
  max_log_files: number;
}

/**
 * One scheduled snapshot (ours): of `collection`, or of the full storage when null;
 * every `interval_sec` seconds or on a `cron` expression (one of the two); keeping the
 * newest `keep_last` snapshots it made and/or those younger than `max_age_sec`.
 */
export interface SnapshotSchedule {
  collection: string | null;
  interval_sec: number | null;
  cron: string | null;
  keep_last: number | null;
  max_age_sec: number | null;
}

export interface SnapshotsConfig {
  schedule: SnapshotSchedule[];
}

export interface Config {
  log_level: LogLevel;
  storage: StorageConfig;
  service: ServiceConfig;
  cluster: ClusterConfig;
  tls: TlsConfig;
  audit: AuditConfig;
  telemetry_disabled: boolean;
  snapshots: SnapshotsConfig;
}
