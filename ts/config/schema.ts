/**
 * The validation table for `Config`: for every key, its kind and allowed range.
 *
 * Owns: per-key rules (type, range, enum values, nullability). Must never: read files
 * or the environment, or hold rules that span several keys (those live in index.ts,
 * `crossChecks`). The mapped types below make the compiler refuse a table that misses
 * or invents a key of `Config`, so the table and types.ts cannot drift apart.
 */

import type { Config } from './types';

export interface StringRule {
  kind: 'string';
  nullable?: boolean;
  /** Reject ''. For nullable keys the hint says to use null instead. */
  nonEmpty?: boolean;
  /** Accept a non-negative integer and store it as its decimal string (peer ids). */
  acceptInteger?: boolean;
  /** Value used when a nullable section is given without this key. */
  fill?: string | null;
}

export interface NumberRule {
  kind: 'number';
  integer: boolean;
  nullable?: boolean;
  min?: number;
  max?: number;
  /** The value must be strictly greater than this. */
  above?: number;
  /** Value used when a section is given without this key. */
  fill?: number | null;
}

export interface BooleanRule {
  kind: 'boolean';
}

export interface EnumRule {
  kind: 'enum';
  values: readonly string[];
  nullable?: boolean;
  /** Accept any letter case and store the spelling from `values`. */
  anyCase?: boolean;
}

export type LeafRule = StringRule | NumberRule | BooleanRule | EnumRule;

export interface SectionRule<T> {
  kind: 'section';
  nullable?: boolean;
  keys: { [K in keyof T]-?: RuleFor<T[K]> };
}

/** A list of sections of one shape (a YAML sequence of mappings). */
export interface ListRule<T> {
  kind: 'list';
  item: SectionRule<T>;
}

export type RuleFor<T> = [NonNullable<T>] extends [string | number | boolean]
  ? LeafRule
  : [NonNullable<T>] extends [Array<infer I>]
    ? ListRule<I>
    : SectionRule<NonNullable<T>>;

/** The same table with the compile-time key checks erased, for the generic walker. */
export interface AnySection {
  kind: 'section';
  nullable?: boolean;
  keys: Record<string, AnyRule>;
}
export interface AnyList {
  kind: 'list';
  item: AnySection;
}
export type AnyRule = LeafRule | AnySection | AnyList;

const int = (min?: number, max?: number): NumberRule => ({ kind: 'number', integer: true, min, max });
const nullableInt = (min?: number): NumberRule => ({ kind: 'number', integer: true, nullable: true, min });
const port: NumberRule = int(1, 65535);
const bool: BooleanRule = { kind: 'boolean' };
const path: StringRule = { kind: 'string', nonEmpty: true };
const optionalPath: StringRule = { kind: 'string', nullable: true, nonEmpty: true };
const secret: StringRule = { kind: 'string', nullable: true, nonEmpty: true };

export const CONFIG_SCHEMA: SectionRule<Config> = {
  kind: 'section',
  keys: {
    log_level: { kind: 'enum', values: ['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR'], anyCase: true },
    storage: {
      kind: 'section',
      keys: {
        storage_path: path,
        snapshots_path: path,
        snapshots_config: {
          kind: 'section',
          keys: {
            snapshots_storage: { kind: 'enum', values: ['local', 's3'] },
            s3_config: {
              kind: 'section',
              nullable: true,
              // Every key is filled in, so secrets alone may come from the environment
              // while the bucket comes from a file; an empty bucket is refused only
              // when s3 is actually selected (see crossChecks).
              keys: {
                bucket: { kind: 'string', fill: '' },
                region: { kind: 'string', nullable: true, fill: null },
                access_key: { ...secret, fill: null },
                secret_key: { ...secret, fill: null },
                endpoint_url: { kind: 'string', nullable: true, nonEmpty: true, fill: null },
              },
            },
          },
        },
        temp_path: optionalPath,
        on_disk_payload: bool,
        wal: { kind: 'section', keys: { wal_capacity_mb: int(1), wal_segments_ahead: int(0) } },
        node_type: { kind: 'enum', values: ['Normal', 'Listener'] },
        shard_transfer_method: { kind: 'enum', values: ['stream_records', 'snapshot', 'wal_delta'], nullable: true },
        performance: {
          kind: 'section',
          // A negative CPU budget is meaningful: "all CPUs but this many".
          keys: { max_search_threads: int(0), optimizer_cpu_budget: int(), incoming_shard_transfers_limit: int(1), outgoing_shard_transfers_limit: int(1), shard_transfer_max_mb_per_sec: { kind: 'number', integer: false, nullable: true, above: 0 } },
        },
        optimizers: {
          kind: 'section',
          keys: {
            deleted_threshold: { kind: 'number', integer: false, min: 0, max: 1 },
            vacuum_min_vector_number: int(0),
            default_segment_number: int(0),
            max_segment_size_kb: nullableInt(1),
            indexing_threshold_kb: int(0),
            flush_interval_sec: int(0),
            max_optimization_threads: nullableInt(0),
          },
        },
        hnsw_index: {
          kind: 'section',
          keys: {
            m: int(2),
            ef_construct: int(4),
            full_scan_threshold_kb: int(0),
            max_indexing_threads: int(0),
            on_disk: bool,
            payload_m: nullableInt(2),
          },
        },
        collection: {
          kind: 'section',
          keys: { replication_factor: int(1), write_consistency_factor: int(1) },
        },
        max_collections: nullableInt(1),
      },
    },
    service: {
      kind: 'section',
      keys: {
        host: path,
        http_port: port,
        grpc_port: { ...port, nullable: true },
        max_request_size_mb: { kind: 'number', integer: false, above: 0 },
        max_workers: int(0),
        enable_cors: bool,
        enable_tls: bool,
        verify_https_client_certificate: bool,
        api_key: secret,
        read_only_api_key: secret,
        jwt_rbac: bool,
        jwt_allow_hs256: bool,
        jwt_jwks_path: optionalPath,
        jwt_jwks_url: optionalPath,
        enable_snapshot_url_recovery: bool,
        metrics_prefix: { kind: 'string', nullable: true },
        http_keep_alive_timeout_sec: int(0),
      },
    },
    cluster: {
      kind: 'section',
      keys: {
        enabled: bool,
        peer_id: { kind: 'string', nullable: true, nonEmpty: true, acceptInteger: true },
        p2p: { kind: 'section', keys: { port, enable_tls: bool, connection_pool_size: int(1, 16) } },
        consensus: {
          kind: 'section',
          keys: {
            tick_period_ms: int(1),
            compact_wal_entries: int(1),
            bootstrap_timeout_sec: int(0),
            max_message_queue_size: int(1),
          },
        },
        grpc_timeout_ms: int(1),
        connection_timeout_ms: int(1),
      },
    },
    tls: {
      kind: 'section',
      // Paths may be empty while TLS is off; crossChecks insists on them when it is on.
      keys: {
        cert: { kind: 'string' },
        key: { kind: 'string' },
        ca_cert: { kind: 'string' },
        cert_ttl: int(1),
      },
    },
    audit: {
      kind: 'section',
      keys: {
        enabled: bool,
        dir: path,
        rotation: { kind: 'enum', values: ['daily', 'hourly'] },
        max_log_files: int(1),
      },
    },
    telemetry_disabled: bool,
    snapshots: {
      kind: 'section',
      keys: {
        schedule: {
          kind: 'list',
          item: {
            kind: 'section',
            keys: {
              collection: { kind: 'string', nullable: true, nonEmpty: true, fill: null },
              interval_sec: { kind: 'number', integer: true, nullable: true, min: 1, fill: null },
              cron: { kind: 'string', nullable: true, nonEmpty: true, fill: null },
              keep_last: { kind: 'number', integer: true, nullable: true, min: 1, fill: null },
              max_age_sec: { kind: 'number', integer: true, nullable: true, min: 1, fill: null },
            },
          },
        },
      },
    },
  },
};

/** The rule at a dotted key path, or undefined when no such key exists. */
export function ruleAt(keys: readonly string[]): AnyRule | undefined {
  let rule: AnyRule = CONFIG_SCHEMA as unknown as AnySection;
  for (const key of keys) {
    if (rule.kind === 'list' && /^[0-9]+$/.test(key)) {
      rule = rule.item;
      continue;
    }
    if (rule.kind !== 'section' || !Object.prototype.hasOwnProperty.call(rule.keys, key)) return undefined;
    rule = rule.keys[key];
  }
  return rule;
}
