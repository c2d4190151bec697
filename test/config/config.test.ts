/**
 * Configuration as an operator meets it: the shipped defaults, a config file, local
 * overrides, SERVICE__ environment variables, and the one error that lists every
 * mistake at once.
 *
 * Runs on the compiled JavaScript: `npx tsc -p tsconfig.json && npx ava dist/test/config/`.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { ConfigError, defaultConfigPath, loadConfig, loadConfigWithSources, redactConfig } from '../../ts/config/index';
import type { Config } from '../../ts/config/types';
import { defaultHnsw } from '../../ts/collection/config';

const createdDirs: string[] = [];
test.after.always(() => {
  for (const dir of createdDirs) fs.rmSync(dir, { recursive: true, force: true });
});

/** A fresh working directory, so no developer's config/local.yaml leaks in. */
function workDir(files: Record<string, string> = {}): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-config-'));
  createdDirs.push(dir);
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    fs.writeFileSync(path.join(dir, name), text);
  }
  return dir;
}

function configError(fn: () => unknown): ConfigError {
  const error = (() => {
    try {
      fn();
    } catch (e) {
      return e;
    }
    throw new Error('expected a ConfigError, but the configuration loaded');
  })();
  if (!(error instanceof ConfigError)) throw error;
  return error;
}

const DOCUMENTED_DEFAULTS: Config = {
  log_level: 'INFO',
  storage: {
    storage_path: './storage',
    snapshots_path: './snapshots',
    snapshots_config: { snapshots_storage: 'local', s3_config: null },
    temp_path: null,
    on_disk_payload: true,
    wal: { wal_capacity_mb: 32, wal_segments_ahead: 0 },
    node_type: 'Normal',
    shard_transfer_method: null,
    performance: { max_search_threads: 0, optimizer_cpu_budget: 0, incoming_shard_transfers_limit: 1, outgoing_shard_transfers_limit: 1, shard_transfer_max_mb_per_sec: null },
    optimizers: {
      deleted_threshold: 0.2,
      vacuum_min_vector_number: 1000,
      default_segment_number: 0,
      max_segment_size_kb: null,
      indexing_threshold_kb: 10000,
      flush_interval_sec: 5,
      max_optimization_threads: null,
    },
    hnsw_index: {
      m: 16,
      ef_construct: 100,
      full_scan_threshold_kb: 10000,
      max_indexing_threads: 0,
      on_disk: false,
      payload_m: null,
    },
    collection: { replication_factor: 1, write_consistency_factor: 1 },
    max_collections: null,
  },
  service: {
    host: '0.0.0.0',
    http_port: 6333,
    grpc_port: 6334,
    max_request_size_mb: 32,
    max_workers: 0,
    enable_cors: true,
    enable_tls: false,
    verify_https_client_certificate: false,
    api_key: null,
    read_only_api_key: null,
    jwt_rbac: false,
    jwt_allow_hs256: true,
    jwt_jwks_path: null,
    jwt_jwks_url: null,
    enable_snapshot_url_recovery: true,
    metrics_prefix: null,
    http_keep_alive_timeout_sec: 5,
  },
  cluster: {
    enabled: false,
    peer_id: null,
    p2p: { port: 6335, enable_tls: false, connection_pool_size: 2 },
    consensus: { tick_period_ms: 100, compact_wal_entries: 128, bootstrap_timeout_sec: 15, max_message_queue_size: 100 },
    grpc_timeout_ms: 60000,
    connection_timeout_ms: 2000,
  },
  tls: { cert: './tls/cert.pem', key: './tls/key.pem', ca_cert: './tls/cacert.pem', cert_ttl: 3600 },
  audit: { enabled: false, dir: './storage/audit', rotation: 'daily', max_log_files: 7 },
  telemetry_disabled: false,
  snapshots: { schedule: [] },
};

test('a node started with no configuration runs on the documented defaults', (t) => {
  const config = loadConfig({ env: {}, cwd: workDir() });
  t.deepEqual(config, DOCUMENTED_DEFAULTS);
});

test('the defaults file is found at the repository root from the compiled code', (t) => {
  t.true(fs.existsSync(defaultConfigPath()));
  t.is(path.basename(path.dirname(defaultConfigPath())), 'config');
});

test('variables without the SERVICE__ prefix are ignored', (t) => {
  const config = loadConfig({ env: { QDRANT__SERVICE__HTTP_PORT: '1', HTTP_PORT: '2', PATH: '/bin' }, cwd: workDir() });
  t.is(config.service.http_port, 6333);
});

test('a --config-path file overrides single keys and keeps the rest of each section', (t) => {
  const dir = workDir({
    'prod.yaml': [
      'log_level: debug',
      'service:',
      '  http_port: 8080',
      '  api_key: "0123"',
      'storage:',
      '  hnsw_index:',
      '    m: 32',
      '  snapshots_config:',
      '    snapshots_storage: s3',
      '    s3_config:',
      '      bucket: backups',
      '      region: eu-west-1',
      'cluster:',
      '  peer_id: 42',
    ].join('\n'),
  });
  const config = loadConfig({ configPath: 'prod.yaml', env: {}, cwd: dir });
  t.is(config.log_level, 'DEBUG');
  t.is(config.service.http_port, 8080);
  t.is(config.service.api_key, '0123');
  t.is(config.service.grpc_port, 6334);
  t.is(config.storage.hnsw_index.m, 32);
  t.is(config.storage.hnsw_index.ef_construct, 100);
  t.deepEqual(config.storage.snapshots_config.s3_config, {
    bucket: 'backups',
    region: 'eu-west-1',
    access_key: null,
    secret_key: null,
    endpoint_url: null,
  });
  t.is(config.cluster.peer_id, '42');
});

test('an explicit null in a file turns a setting off', (t) => {
  const dir = workDir({ 'no-grpc.yaml': 'service:\n  grpc_port: null\n' });
  t.is(loadConfig({ configPath: 'no-grpc.yaml', env: {}, cwd: dir }).service.grpc_port, null);
});

test('config/local.yaml in the working directory sits between the defaults and --config-path', (t) => {
  const dir = workDir({
    'config/local.yaml': 'service:\n  http_port: 7001\n  max_workers: 3\n',
    'given.yaml': 'service:\n  http_port: 7002\n',
  });
  const local = loadConfigWithSources({ env: {}, cwd: dir });
  t.is(local.config.service.http_port, 7001);
  t.deepEqual(local.sources, [defaultConfigPath(), path.join(dir, 'config', 'local.yaml')]);
  const both = loadConfig({ configPath: path.join(dir, 'given.yaml'), env: {}, cwd: dir });
  t.is(both.service.http_port, 7002);
  t.is(both.service.max_workers, 3);
});

test('environment variables override files, nest on double underscores and get their types', (t) => {
  const dir = workDir({ 'given.yaml': 'service:\n  http_port: 7002\n' });
  const { config, sources } = loadConfigWithSources({
    configPath: 'given.yaml',
    cwd: dir,
    env: {
      SERVICE__SERVICE__HTTP_PORT: '7000',
      SERVICE__CLUSTER__ENABLED: 'true',
      SERVICE__SERVICE__GRPC_PORT: 'null',
      SERVICE__STORAGE__OPTIMIZERS__DELETED_THRESHOLD: '0.5',
      SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__ACCESS_KEY: 'x',
      SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__SECRET_KEY: '12345',
      SERVICE__service__api_key: '007',
      SERVICE__LOG_LEVEL: 'warn',
      SERVICE__TELEMETRY_DISABLED: 'true',
    },
  });
  t.is(config.service.http_port, 7000);
  t.is(config.cluster.enabled, true);
  t.is(config.service.grpc_port, null);
  t.is(config.storage.optimizers.deleted_threshold, 0.5);
  t.is(config.storage.snapshots_config.s3_config?.access_key, 'x');
  // Text settings keep the variable verbatim: a numeric-looking key stays a string.
  t.is(config.storage.snapshots_config.s3_config?.secret_key, '12345');
  t.is(config.service.api_key, '007');
  t.is(config.log_level, 'WARN');
  t.is(config.telemetry_disabled, true);
  t.true(sources.includes('env SERVICE__SERVICE__HTTP_PORT'));
});

test('every mistake is reported at once, each naming where it came from', (t) => {
  const dir = workDir({
    'bad.yaml': [
      'service:',
      '  http_prot: 6333',
      '  enable_cors: "yes"',
      '  jwt_rbac: true',
      'storage:',
      '  hnsw_index:',
      '    m: 1',
      '  collection:',
      '    write_consistency_factor: 0',
      'audit:',
      '  rotation: weekly',
    ].join('\n'),
  });
  const file = path.join(dir, 'bad.yaml');
  const error = configError(() =>
    loadConfig({
      configPath: file,
      cwd: dir,
      env: { SERVICE__SERVICE__HTTP_PORT: '70000', SERVICE__SERVICE__MAX_REQUEST_SIZE_MB: '0' },
    }),
  );
  const expected = [
    `${file}: service.http_prot: unknown key (did you mean http_port?)`,
    `${file}: service.enable_cors: must be true or false, got "yes"`,
    `${file}: storage.hnsw_index.m: must be an integer of at least 2, got 1`,
    `${file}: storage.collection.write_consistency_factor: must be an integer of at least 1, got 0`,
    `${file}: audit.rotation: must be one of daily, hourly, got "weekly"`,
    'env SERVICE__SERVICE__HTTP_PORT: service.http_port: must be an integer from 1 to 65535, got 70000',
    'env SERVICE__SERVICE__MAX_REQUEST_SIZE_MB: service.max_request_size_mb: must be a number greater than 0, got 0',
    `${file}: service.jwt_rbac: JWT access control needs service.api_key (tokens are signed with it), which is not set`,
  ];
  t.deepEqual([...error.problems].sort(), [...expected].sort());
  for (const problem of expected) t.true(error.message.includes(`\n  - ${problem}`));
  t.true(error.message.startsWith('Invalid configuration (8 problems):'));
});

test('a --config-path that does not exist is an error, reported with the other problems', (t) => {
  const dir = workDir();
  const error = configError(() =>
    loadConfig({ configPath: 'missing.yaml', cwd: dir, env: { SERVICE__SERVICE__NO_SUCH_KEY: '1' } }),
  );
  t.deepEqual(error.problems, [
    `${path.join(dir, 'missing.yaml')}: the file given by --config-path does not exist`,
    'env SERVICE__SERVICE__NO_SUCH_KEY: service.no_such_key: unknown key',
  ]);
});

test('a file that is not valid YAML is reported with its position', (t) => {
  const dir = workDir({ 'broken.yaml': 'service:\n  http_port: 1\n  http_port: 2\n' });
  const error = configError(() => loadConfig({ configPath: 'broken.yaml', cwd: dir, env: {} }));
  t.is(error.problems.length, 1);
  t.regex(error.problems[0], /broken\.yaml: YAML error: .*unique.*line 3/);
});

test('settings that only make sense together are checked together', (t) => {
  const dir = workDir({
    'tls.yaml': [
      'service:',
      '  enable_tls: true',
      '  grpc_port: 6333',
      'tls:',
      '  cert: ""',
      'storage:',
      '  snapshots_config:',
      '    snapshots_storage: s3',
    ].join('\n'),
  });
  const file = path.join(dir, 'tls.yaml');
  const error = configError(() => loadConfig({ configPath: file, cwd: dir, env: {} }));
  t.deepEqual(error.problems, [
    `${file}: storage.snapshots_config.snapshots_storage: s3 snapshot storage needs storage.snapshots_config.s3_config.bucket, which is not set`,
    `${file}: service.enable_tls: HTTPS needs tls.cert, which is empty`,
    `${file}: service.grpc_port: is the same port as service.http_port (6333)`,
  ]);
});

test('jwt_rbac with an api_key from the environment is accepted', (t) => {
  const config = loadConfig({
    cwd: workDir(),
    env: { SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__API_KEY: 'secret' },
  });
  t.true(config.service.jwt_rbac);
});

test('errors about secrets never repeat the secret', (t) => {
  const dir = workDir({ 'k.yaml': 'service:\n  api_key: 987654321\n' });
  const error = configError(() => loadConfig({ configPath: 'k.yaml', cwd: dir, env: {} }));
  t.is(error.problems.length, 1);
  t.false(error.message.includes('987654321'));
  t.regex(error.problems[0], /service\.api_key: must be text or null, got a number \(quote it/);
});

test('the start-up log copy hides API keys and S3 secrets and leaves the config untouched', (t) => {
  const config = loadConfig({
    cwd: workDir(),
    env: {
      SERVICE__SERVICE__API_KEY: 'manage-key',
      SERVICE__SERVICE__READ_ONLY_API_KEY: 'read-key',
      SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__BUCKET: 'b',
      SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__ACCESS_KEY: 'AKIA',
      SERVICE__STORAGE__SNAPSHOTS_CONFIG__S3_CONFIG__SECRET_KEY: 'shh',
    },
  });
  const shown = redactConfig(config);
  t.is(shown.service.api_key, '***');
  t.is(shown.service.read_only_api_key, '***');
  t.is(shown.storage.snapshots_config.s3_config?.access_key, '***');
  t.is(shown.storage.snapshots_config.s3_config?.secret_key, '***');
  t.is(shown.storage.snapshots_config.s3_config?.bucket, 'b');
  t.is(shown.service.http_port, 6333);
  const text = JSON.stringify(shown);
  for (const secret of ['manage-key', 'read-key', 'AKIA', 'shh']) t.false(text.includes(secret));
  t.is(config.service.api_key, 'manage-key');
  t.is(redactConfig(loadConfig({ cwd: workDir(), env: {} })).service.api_key, null);
});

test('the JWKS settings are checked together with jwt_rbac and the HS256 switch', (t) => {
  const load = (env: Record<string, string>) => loadConfig({ cwd: workDir(), env });
  // A JWKS alone (no api key) is enough for jwt_rbac; HS256 may then be off.
  const ok = load({ SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_URL: 'https://idp.example/jwks.json', SERVICE__SERVICE__JWT_ALLOW_HS256: 'false' });
  t.is(ok.service.jwt_jwks_url, 'https://idp.example/jwks.json');
  t.false(ok.service.jwt_allow_hs256);
  const cases: Array<[Record<string, string>, string[]]> = [
    [
      { SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_URL: 'http://a/j', SERVICE__SERVICE__JWT_JWKS_PATH: '/j.json' },
      ['env SERVICE__SERVICE__JWT_JWKS_URL: service.jwt_jwks_url: give service.jwt_jwks_path or service.jwt_jwks_url, not both'],
    ],
    [
      { SERVICE__SERVICE__JWT_JWKS_PATH: '/j.json' },
      ['env SERVICE__SERVICE__JWT_JWKS_PATH: service.jwt_jwks_path: is only used with service.jwt_rbac: true, which is off'],
    ],
    [
      { SERVICE__SERVICE__JWT_ALLOW_HS256: 'false' },
      ['env SERVICE__SERVICE__JWT_ALLOW_HS256: service.jwt_allow_hs256: is only used with service.jwt_rbac: true, which is off'],
    ],
    [
      { SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__API_KEY: 'k', SERVICE__SERVICE__JWT_ALLOW_HS256: 'false' },
      ['env SERVICE__SERVICE__JWT_ALLOW_HS256: service.jwt_allow_hs256: false leaves no token that could be verified: set service.jwt_jwks_path or service.jwt_jwks_url'],
    ],
    [
      { SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_URL: 'ftp://idp/jwks' },
      ['env SERVICE__SERVICE__JWT_JWKS_URL: service.jwt_jwks_url: must be an http or https URL without credentials, got "ftp://idp/jwks"'],
    ],
  ];
  for (const [env, problems] of cases) t.deepEqual(configError(() => load(env)).problems, problems, JSON.stringify(env));
});

test('storage.hnsw_index.payload_m: null (no payload-aware links, what Quiver builds) loads; a link count is refused', (t) => {
  t.is(loadConfig({ cwd: workDir(), env: {} }).storage.hnsw_index.payload_m, null);
  t.deepEqual(configError(() => loadConfig({ cwd: workDir(), env: { SERVICE__STORAGE__HNSW_INDEX__PAYLOAD_M: '16' } })).problems, [
    'env SERVICE__STORAGE__HNSW_INDEX__PAYLOAD_M: storage.hnsw_index.payload_m: is not supported: Quiver builds no payload-aware HNSW links; leave it null',
  ]);
});

test('storage.hnsw_index.on_disk: true loads and is the default hnsw_config.on_disk of new collections', (t) => {
  t.is(loadConfig({ cwd: workDir(), env: {} }).storage.hnsw_index.on_disk, false);
  const config = loadConfig({ cwd: workDir(), env: { SERVICE__STORAGE__HNSW_INDEX__ON_DISK: 'true' } });
  t.is(config.storage.hnsw_index.on_disk, true);
  t.is(defaultHnsw(config).on_disk, true);
});

test('snapshot schedules: a list from a file or a variable, each item checked; cluster mode refuses a full-storage one', (t) => {
  const dir = workDir({
    's.yaml': ['snapshots:', '  schedule:', '    - collection: docs', '      interval_sec: 10', '      keep_last: 3', '    - collection: null', '      cron: "0 3 * * *"', '      max_age_sec: 86400'].join('\n'),
  });
  const config = loadConfig({ configPath: 's.yaml', cwd: dir, env: {} });
  t.deepEqual(config.snapshots.schedule, [
    { collection: 'docs', interval_sec: 10, cron: null, keep_last: 3, max_age_sec: null },
    { collection: null, interval_sec: null, cron: '0 3 * * *', keep_last: null, max_age_sec: 86400 },
  ]);
  const fromEnv = loadConfig({ cwd: workDir(), env: { SERVICE__SNAPSHOTS__SCHEDULE: '[{collection: a, interval_sec: 60}]' } });
  t.deepEqual(fromEnv.snapshots.schedule, [{ collection: 'a', interval_sec: 60, cron: null, keep_last: null, max_age_sec: null }]);

  const bad = workDir({
    'b.yaml': [
      'snapshots:',
      '  schedule:',
      '    - collection: a',
      '    - collection: b',
      '      interval_sec: 5',
      '      cron: "* * * * *"',
      '    - collection: c',
      '      cron: "61 * * * *"',
      '    - collection: a',
      '      interval_sec: 0',
      '      keep_lst: 2',
      'cluster:',
      '  enabled: true',
    ].join('\n'),
  });
  const file = path.join(bad, 'b.yaml');
  const error = configError(() => loadConfig({ configPath: file, cwd: bad, env: {} }));
  t.deepEqual([...error.problems].sort(), [
    `${file}: snapshots.schedule.3.keep_lst: unknown key (did you mean keep_last?)`,
    `${file}: snapshots.schedule.3.interval_sec: must be an integer of at least 1, got 0`,
    `${file}: snapshots.schedule.0: give interval_sec or cron (one of the two)`,
    `${file}: snapshots.schedule.1: give interval_sec or cron (one of the two)`,
    `${file}: snapshots.schedule.2.cron: is not a cron expression (Constraint error, got value 61 expected range 0-59): "61 * * * *"`,
    `${file}: snapshots.schedule.3: collection a already has a schedule (snapshots.schedule.0): their retention would delete each other's snapshots`,
  ].sort());
  const error2 = configError(() => loadConfig({ configPath: file, cwd: bad, env: { SERVICE__SNAPSHOTS__SCHEDULE: '[{collection: a}, {collection: b, interval_sec: 5, cron: "* * * * *"}, {collection: c, cron: "61 * * * *"}, {collection: a, interval_sec: 9}, {collection: null, interval_sec: 60}]' } }));
  t.deepEqual(error2.problems, [
    'env SERVICE__SNAPSHOTS__SCHEDULE: snapshots.schedule.0: give interval_sec or cron (one of the two)',
    'env SERVICE__SNAPSHOTS__SCHEDULE: snapshots.schedule.1: give interval_sec or cron (one of the two)',
    'env SERVICE__SNAPSHOTS__SCHEDULE: snapshots.schedule.2.cron: is not a cron expression (Constraint error, got value 61 expected range 0-59): "61 * * * *"',
    "env SERVICE__SNAPSHOTS__SCHEDULE: snapshots.schedule.3: collection a already has a schedule (snapshots.schedule.0): their retention would delete each other's snapshots",
    'env SERVICE__SNAPSHOTS__SCHEDULE: snapshots.schedule.4.collection: a schedule of the full storage is not available in cluster mode (each peer holds only some shards): schedule each collection, or use POST /cluster/backup',
  ]);
  t.deepEqual(configError(() => loadConfig({ cwd: workDir(), env: { SERVICE__SNAPSHOTS__SCHEDULE: 'every day' } })).problems, ['env SERVICE__SNAPSHOTS__SCHEDULE: snapshots.schedule: must be a list, got "every day"']);
});
