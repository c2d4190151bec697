/**
 * Builds the one validated `Config` the service runs with.
 *
 * Sources, each overriding the previous key by key:
 *   1. config/config.yaml at the repository root (every default),
 *   2. config/local.yaml under the working directory, when present,
 *   3. the file given by --config-path (it must exist when given),
 *   4. environment variables SERVICE__SECTION__KEY[__SUBKEY...].
 * Every problem from every source is collected and thrown as one ConfigError, each
 * line naming the file or environment variable the bad value came from.
 *
 * Owns: reading those sources, merging them, validating the result. Must never: exit
 * the process or log (the CLI decides what to do with a ConfigError), or hand out a
 * config that failed validation.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';
import YAML from 'yaml';

import { CronExpressionParser } from 'cron-parser';

import { AnyList, AnyRule, AnySection, CONFIG_SCHEMA, LeafRule, ruleAt } from './schema';
import type { Config } from './types';

export type { Config } from './types';

export const ENV_PREFIX = 'SERVICE__';
const ENV_SEPARATOR = '__';

export interface LoadConfigOptions {
  /** File named by --config-path; null or undefined means none. */
  configPath?: string | null;
  /** Defaults to process.env. */
  env?: NodeJS.ProcessEnv;
  /** Where config/local.yaml is looked for, and relative paths are resolved from. Defaults to process.cwd(). */
  cwd?: string;
  /** Defaults to config/config.yaml at the repository root. */
  defaultsPath?: string;
}

export interface LoadedConfig {
  config: Config;
  /** What was applied, in order: file paths, then `env NAME` for each variable. For the start-up log. */
  sources: string[];
}

/** Invalid configuration: every problem found, one per line in `message`. */
export class ConfigError extends Error {
  readonly problems: string[];

  constructor(problems: string[]) {
    const count = problems.length === 1 ? '1 problem' : `${problems.length} problems`;
    super(`Invalid configuration (${count}):\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
    this.problems = problems;
  }
}

export function loadConfig(options: LoadConfigOptions = {}): Config {
  return loadConfigWithSources(options).config;
}

export function loadConfigWithSources(options: LoadConfigOptions = {}): LoadedConfig {
  const cwd = path.resolve(options.cwd ?? process.cwd());
  const env = options.env ?? process.env;
  const defaultsPath = path.resolve(cwd, options.defaultsPath ?? defaultConfigPath());
  const problems: string[] = [];
  const provenance = new Provenance();
  const sources: string[] = [];

  const defaults = readYamlFile(defaultsPath, problems, 'the built-in defaults file is missing');
  if (defaults === undefined) throw new ConfigError(problems);
  let merged = overlay({}, defaults, [], defaultsPath, provenance);
  sources.push(defaultsPath);

  const localPath = path.join(cwd, 'config', 'local.yaml');
  if (localPath !== defaultsPath && fs.existsSync(localPath)) {
    const local = readYamlFile(localPath, problems, 'is missing');
    if (local !== undefined) {
      merged = overlay(merged, local, [], localPath, provenance);
      sources.push(localPath);
    }
  }

  if (options.configPath !== undefined && options.configPath !== null) {
    const given = path.resolve(cwd, options.configPath);
    const file = readYamlFile(given, problems, 'the file given by --config-path does not exist');
    if (file !== undefined) {
      merged = overlay(merged, file, [], given, provenance);
      sources.push(given);
    }
  }

  for (const variable of environmentOverrides(env, problems)) {
    merged = overlay(merged, nest(variable.keys, variable.value), [], variable.source, provenance);
    sources.push(variable.source);
  }

  const checked = checkSection(CONFIG_SCHEMA as unknown as AnySection, merged, [], provenance, problems);
  crossChecks((checked ?? {}) as Partial<Config>, provenance, problems);
  if (problems.length > 0) throw new ConfigError(problems);
  return { config: checked as unknown as Config, sources };
}

/** A copy safe to log: API keys and S3 credentials become "***" (unset ones stay null). */
export function redactConfig(config: Config): Config {
  const copy = structuredClone(config);
  const hide = (value: string | null): string | null => (value === null ? null : '***');
  copy.service.api_key = hide(copy.service.api_key);
  copy.service.read_only_api_key = hide(copy.service.read_only_api_key);
  const s3 = copy.storage.snapshots_config.s3_config;
  if (s3 !== null) {
    s3.access_key = hide(s3.access_key);
    s3.secret_key = hide(s3.secret_key);
  }
  return copy;
}

/** config/config.yaml in the repository root: the nearest folder above this module with a package.json. */
export function defaultConfigPath(): string {
  return path.join(repoRoot(), 'config', 'config.yaml');
}

function repoRoot(): string {
  // Compiled code runs from dist/ts/config/, sources from ts/config/: walk up either way.
  let dir = __dirname;
  for (;;) {
    if (fs.existsSync(path.join(dir, 'package.json'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`no package.json above ${__dirname}: cannot find config/config.yaml`);
    dir = parent;
  }
}

// ---- reading ----------------------------------------------------------------------

type Tree = Record<string, unknown>;

function isSection(value: unknown): value is Tree {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The file's top-level mapping ({} for an empty file), or undefined after recording why not. */
function readYamlFile(file: string, problems: string[], missingMessage: string): Tree | undefined {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') problems.push(`${file}: ${missingMessage}`);
    else if (code === 'EISDIR') problems.push(`${file}: is a directory, not a config file`);
    else problems.push(`${file}: cannot be read (${(error as Error).message})`);
    return undefined;
  }
  const document = YAML.parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (document.errors.length > 0) {
    // The first line of a pretty error carries the position; the rest is a code frame.
    for (const error of document.errors) {
      problems.push(`${file}: YAML error: ${error.message.split('\n')[0].replace(/:\s*$/, '')}`);
    }
    return undefined;
  }
  let value: unknown;
  try {
    value = document.toJS();
  } catch (error) {
    problems.push(`${file}: YAML error: ${(error as Error).message}`);
    return undefined;
  }
  if (value === null || value === undefined) return {};
  if (!isSection(value)) {
    problems.push(`${file}: the top level must be a mapping of sections, got ${describe(value)}`);
    return undefined;
  }
  return value;
}

interface EnvironmentOverride {
  source: string;
  keys: string[];
  value: unknown;
}

/**
 * SERVICE__A__B=v sets key a.b. Key segments are matched case-insensitively (they are
 * lower-cased). Values for text keys are taken verbatim, so an API key such as 0123
 * stays a string; other values are read as YAML scalars (true, 6333, 0.5, null).
 */
function environmentOverrides(env: NodeJS.ProcessEnv, problems: string[]): EnvironmentOverride[] {
  const overrides: EnvironmentOverride[] = [];
  const setBy = new Map<string, string>();
  const names = Object.keys(env)
    .filter((name) => name.startsWith(ENV_PREFIX))
    .sort();
  for (const name of names) {
    const raw = env[name];
    if (raw === undefined) continue;
    const source = `env ${name}`;
    const keys = name.slice(ENV_PREFIX.length).split(ENV_SEPARATOR).map((key) => key.toLowerCase());
    if (keys.some((key) => key === '')) {
      problems.push(`${source}: cannot be read as a key path (empty segment between double underscores)`);
      continue;
    }
    const dotted = keys.join('.');
    const earlier = setBy.get(dotted);
    if (earlier !== undefined && env[earlier] !== raw) {
      problems.push(`${source}: ${dotted}: also set, differently, by ${earlier}`);
      continue;
    }
    setBy.set(dotted, name);
    overrides.push({ source, keys, value: environmentValue(raw, ruleAt(keys)) });
  }
  return overrides;
}

function environmentValue(raw: string, rule: AnyRule | undefined): unknown {
  if (rule?.kind === 'string') {
    const unset = raw.trim() === '' || ['null', 'Null', 'NULL', '~'].includes(raw.trim());
    return rule.nullable && unset ? null : raw;
  }
  if (rule?.kind === 'enum') return raw;
  try {
    const value: unknown = YAML.parse(raw, { logLevel: 'silent' });
    // A list setting takes a YAML (or JSON) list: SERVICE__SNAPSHOTS__SCHEDULE='[{collection: c, interval_sec: 60}]'.
    if (rule?.kind === 'list') return value;
    // Only scalars: a variable is never read as a whole section or list.
    return typeof value === 'object' && value !== null ? raw : value;
  } catch {
    return raw;
  }
}

function nest(keys: string[], value: unknown): Tree {
  let tree: unknown = value;
  for (let i = keys.length - 1; i >= 0; i--) tree = { [keys[i]]: tree };
  return tree as Tree;
}

// ---- merging, remembering where each value came from --------------------------------

class Provenance {
  private readonly byPath = new Map<string, string>();

  mark(keys: readonly string[], value: unknown, source: string): void {
    this.byPath.set(keys.join('.'), source);
    if (isSection(value)) for (const [key, child] of Object.entries(value)) this.mark([...keys, key], child, source);
  }

  /** The source that set this key, or the nearest enclosing section's source. */
  of(keys: readonly string[]): string {
    for (let n = keys.length; n >= 0; n--) {
      const source = this.byPath.get(keys.slice(0, n).join('.'));
      if (source !== undefined) return source;
    }
    return 'configuration';
  }
}

/** Sections merge key by key; anything else (scalars, null, lists) replaces. */
function overlay(base: unknown, over: unknown, keys: string[], source: string, provenance: Provenance): Tree {
  return overlayValue(base, over, keys, source, provenance) as Tree;
}

function overlayValue(base: unknown, over: unknown, keys: string[], source: string, provenance: Provenance): unknown {
  if (isSection(base) && isSection(over)) {
    const result: Tree = { ...base };
    for (const [key, value] of Object.entries(over)) {
      result[key] = overlayValue(base[key], value, [...keys, key], source, provenance);
    }
    return result;
  }
  provenance.mark(keys, over, source);
  return over;
}

// ---- validation -------------------------------------------------------------------

function checkSection(
  rule: AnySection,
  value: unknown,
  keys: string[],
  provenance: Provenance,
  problems: string[],
): Tree | null | undefined {
  const report = (at: string[], message: string) => problems.push(`${provenance.of(at)}: ${at.join('.')}: ${message}`);
  if (value === null && rule.nullable) return null;
  if (!isSection(value)) {
    report(keys, `must be a section of keys${rule.nullable ? ' or null' : ''}, got ${describe(value)}`);
    return undefined;
  }
  const result: Tree = {};
  for (const key of Object.keys(value)) {
    if (!Object.prototype.hasOwnProperty.call(rule.keys, key)) {
      report([...keys, key], `unknown key${suggestion(key, Object.keys(rule.keys))}`);
    }
  }
  for (const [key, child] of Object.entries(rule.keys)) {
    const at = [...keys, key];
    if (!Object.prototype.hasOwnProperty.call(value, key) || value[key] === undefined) {
      if ((child.kind === 'string' || child.kind === 'number') && child.fill !== undefined) result[key] = child.fill;
      else report(at, 'missing');
      continue;
    }
    result[key] =
      child.kind === 'section'
        ? checkSection(child, value[key], at, provenance, problems)
        : child.kind === 'list'
          ? checkList(child, value[key], at, provenance, problems)
          : checkLeaf(child, value[key], at, (message) => report(at, message));
  }
  return result;
}

function checkList(rule: AnyList, value: unknown, keys: string[], provenance: Provenance, problems: string[]): unknown[] | undefined {
  if (value === null) return [];
  if (!Array.isArray(value)) {
    problems.push(`${provenance.of(keys)}: ${keys.join('.')}: must be a list, got ${describe(value)}`);
    return undefined;
  }
  const items = value.map((item, i) => checkSection(rule.item, item, [...keys, String(i)], provenance, problems));
  return items.some((item) => item === undefined) ? undefined : items;
}

function checkLeaf(rule: LeafRule, value: unknown, keys: string[], report: (message: string) => void): unknown {
  const secret = isSecretKey(keys);
  const got = secret ? describeType(value) : describe(value);
  switch (rule.kind) {
    case 'boolean':
      if (typeof value === 'boolean') return value;
      report(`must be true or false, got ${got}`);
      return undefined;
    case 'enum': {
      if (value === null && rule.nullable) return null;
      if (typeof value === 'string') {
        const match = rule.values.find((v) => (rule.anyCase ? v.toLowerCase() === value.toLowerCase() : v === value));
        if (match !== undefined) return match;
      }
      report(`must be one of ${rule.values.join(', ')}${rule.nullable ? ' or null' : ''}, got ${got}`);
      return undefined;
    }
    case 'string': {
      if (value === null && rule.nullable) return null;
      if (rule.acceptInteger && typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) {
        return String(value);
      }
      if (typeof value !== 'string') {
        const quote = typeof value === 'number' || typeof value === 'boolean' ? ' (quote it in YAML to make it text)' : '';
        report(`must be text${rule.nullable ? ' or null' : ''}, got ${got}${quote}`);
        return undefined;
      }
      if (rule.nonEmpty && value === '') {
        report(rule.nullable ? 'must not be empty (use null to leave it unset)' : 'must not be empty');
        return undefined;
      }
      return value;
    }
    case 'number': {
      if (value === null && rule.nullable) return null;
      const kind = rule.integer ? 'an integer' : 'a number';
      if (typeof value !== 'number' || !Number.isFinite(value) || (rule.integer && !Number.isInteger(value))) {
        report(`must be ${kind}${rule.nullable ? ' or null' : ''}, got ${got}`);
        return undefined;
      }
      const tooLow = (rule.min !== undefined && value < rule.min) || (rule.above !== undefined && value <= rule.above);
      const tooHigh = rule.max !== undefined && value > rule.max;
      if (tooLow || tooHigh) {
        report(`must be ${kind} ${rangeText(rule.min, rule.max, rule.above)}, got ${value}`);
        return undefined;
      }
      return value;
    }
  }
}

function rangeText(min: number | undefined, max: number | undefined, above: number | undefined): string {
  if (above !== undefined) return `greater than ${above}`;
  if (min !== undefined && max !== undefined) return `from ${min} to ${max}`;
  if (min !== undefined) return `of at least ${min}`;
  return `of at most ${max}`;
}

const SECRET_KEYS = new Set([
  'service.api_key',
  'service.read_only_api_key',
  'storage.snapshots_config.s3_config.access_key',
  'storage.snapshots_config.s3_config.secret_key',
]);

function isSecretKey(keys: readonly string[]): boolean {
  return SECRET_KEYS.has(keys.join('.'));
}

type Checked<T> = { [K in keyof T]?: T[K] extends object | null ? Checked<T[K]> | null : T[K] };

/**
 * Rules that span several keys. They run even when single keys failed (a key that
 * failed its own check reads as undefined here and triggers nothing), so one run
 * reports everything.
 */
function crossChecks(config: Checked<Config>, provenance: Provenance, problems: string[]): void {
  const report = (keys: string[], message: string) =>
    problems.push(`${provenance.of(keys)}: ${keys.join('.')}: ${message}`);
  const service = config.service ?? {};
  const cluster = config.cluster ?? {};
  const tls = config.tls ?? {};

  const snapshots = config.storage?.snapshots_config;
  if (snapshots?.snapshots_storage === 's3' && (snapshots.s3_config === null || snapshots.s3_config?.bucket === '')) {
    report(
      ['storage', 'snapshots_config', 'snapshots_storage'],
      's3 snapshot storage needs storage.snapshots_config.s3_config.bucket, which is not set',
    );
  }

  // Quiver builds no payload-aware HNSW links (docs/settings.md): a link count would be ignored.
  const hnswIndex = config.storage?.hnsw_index;
  if (hnswIndex?.payload_m !== null && hnswIndex?.payload_m !== undefined) {
    report(['storage', 'hnsw_index', 'payload_m'], 'is not supported: Quiver builds no payload-aware HNSW links; leave it null');
  }

  const jwks = typeof service.jwt_jwks_path === 'string' || typeof service.jwt_jwks_url === 'string';
  if (service.jwt_rbac === true && service.api_key === null && !jwks) {
    report(['service', 'jwt_rbac'], 'JWT access control needs service.api_key (tokens are signed with it), which is not set');
  }
  if (typeof service.jwt_jwks_path === 'string' && typeof service.jwt_jwks_url === 'string') {
    report(['service', 'jwt_jwks_url'], 'give service.jwt_jwks_path or service.jwt_jwks_url, not both');
  }
  for (const key of ['jwt_jwks_path', 'jwt_jwks_url'] as const) {
    if (typeof service[key] === 'string' && service.jwt_rbac === false) report(['service', key], 'is only used with service.jwt_rbac: true, which is off');
  }
  if (service.jwt_allow_hs256 === false) {
    if (service.jwt_rbac === false) report(['service', 'jwt_allow_hs256'], 'is only used with service.jwt_rbac: true, which is off');
    else if (service.jwt_rbac === true && !jwks) {
      report(['service', 'jwt_allow_hs256'], 'false leaves no token that could be verified: set service.jwt_jwks_path or service.jwt_jwks_url');
    }
  }
  if (typeof service.jwt_jwks_url === 'string') {
    let ok = false;
    try {
      const u = new URL(service.jwt_jwks_url);
      ok = (u.protocol === 'http:' || u.protocol === 'https:') && u.username === '' && u.password === '';
    } catch {
      ok = false;
    }
    if (!ok) report(['service', 'jwt_jwks_url'], `must be an http or https URL without credentials, got ${JSON.stringify(service.jwt_jwks_url)}`);
  }

  const needFiles = (trigger: string[], why: string, files: Array<'cert' | 'key' | 'ca_cert'>) => {
    for (const file of files) {
      if (tls[file] === '') report(trigger, `${why} needs tls.${file}, which is empty`);
    }
  };
  if (service.enable_tls === true) needFiles(['service', 'enable_tls'], 'HTTPS', ['cert', 'key']);
  if (service.verify_https_client_certificate === true) {
    if (service.enable_tls === false) {
      report(
        ['service', 'verify_https_client_certificate'],
        'client certificates can only be checked when service.enable_tls is true',
      );
    }
    needFiles(['service', 'verify_https_client_certificate'], 'checking client certificates', ['ca_cert']);
  }
  if (cluster.p2p?.enable_tls === true) {
    needFiles(['cluster', 'p2p', 'enable_tls'], 'TLS between peers', ['cert', 'key', 'ca_cert']);
  }

  const schedules = config.snapshots?.schedule;
  if (Array.isArray(schedules)) {
    const at = (i: number, key?: string) => ['snapshots', 'schedule', String(i), ...(key ? [key] : [])];
    const targets = new Map<string, number>();
    schedules.forEach((s, i) => {
      if (s === null || s === undefined) return;
      // undefined: the key failed its own check (reported); null: not given.
      const hasCron = typeof s.cron === 'string';
      if (s.interval_sec !== undefined && s.cron !== undefined && (s.interval_sec === null) === (s.cron === null)) {
        report(at(i), 'give interval_sec or cron (one of the two)');
      }
      if (hasCron) {
        try {
          CronExpressionParser.parse(s.cron as string, { tz: 'UTC' });
        } catch (err) {
          report(at(i, 'cron'), `is not a cron expression (${(err as Error).message}): ${JSON.stringify(s.cron)}`);
        }
      }
      const target = s.collection ?? '<full storage>';
      const earlier = targets.get(target);
      if (earlier !== undefined) report(at(i), `${s.collection === null ? 'the full storage' : `collection ${s.collection}`} already has a schedule (snapshots.schedule.${earlier}): their retention would delete each other's snapshots`);
      else targets.set(target, i);
    });
    // In cluster mode each shard of a collection is snapshotted by one peer (ts/snapshots/cluster-schedule.ts); a full-storage snapshot is per peer and has no such owner.
    if (cluster.enabled === true) {
      schedules.forEach((s, i) => {
        if (s?.collection === null) report(at(i, 'collection'), 'a schedule of the full storage is not available in cluster mode (each peer holds only some shards): schedule each collection, or use POST /cluster/backup');
      });
    }
  }

  if (typeof service.grpc_port === 'number' && service.grpc_port === service.http_port) {
    report(['service', 'grpc_port'], `is the same port as service.http_port (${service.http_port})`);
  }
  const p2pPort = cluster.p2p?.port;
  if (cluster.enabled === true && typeof p2pPort === 'number' && [service.http_port, service.grpc_port].includes(p2pPort)) {
    report(['cluster', 'p2p', 'port'], `${p2pPort} is already used by the REST or gRPC server`);
  }
}

// ---- messages ---------------------------------------------------------------------

function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a section';
  return typeof value === 'number' ? 'a number' : typeof value === 'boolean' ? 'a boolean' : 'text';
}

function describe(value: unknown): string {
  if (value === null || typeof value === 'object') return describeType(value);
  const shown = typeof value === 'string' ? JSON.stringify(value) : String(value);
  return shown.length > 60 ? `${shown.slice(0, 57)}...` : shown;
}

/** " (did you mean x?)" when a known key is a near miss of the unknown one. */
function suggestion(unknown: string, known: string[]): string {
  const wanted = unknown.toLowerCase().replace(/-/g, '_');
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const key of known) {
    const distance = editDistance(wanted, key);
    if (distance < bestDistance) {
      best = key;
      bestDistance = distance;
    }
  }
  return best !== undefined && bestDistance <= Math.max(1, Math.floor(best.length / 4)) ? ` (did you mean ${best}?)` : '';
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length];
}
