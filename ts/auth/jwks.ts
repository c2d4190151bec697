/**
 * The public keys of asymmetric JWTs (RS256/384/512, PS256, ES256/384, EdDSA): a JSON Web
 * Key Set read from a file (`service.jwt_jwks_path`) or fetched from a URL
 * (`service.jwt_jwks_url`). `jose` imports the keys and picks the one of a token's `kid`
 * and `alg`; this module only keeps the set current.
 *
 * - File: read at start (a missing or invalid file fails start-up); its `mtime`, size and
 *   inode are looked at again at most once a second, and at once for a `kid` the set does
 *   not know. A changed file that does not parse is logged and the previous set stays.
 * - URL: fetched at start in the background (a server that is down does not stop start-up;
 *   tokens are refused until a fetch succeeds). The set is kept as long as the answer's
 *   `Cache-Control: max-age` says (no header: 300 s; `no-cache`/`no-store`: 0; at most a
 *   day). A `kid` the set does not know triggers a fetch. Fetches are bounded: at most one
 *   every `MIN_FETCH_INTERVAL_MS`; concurrent misses share one fetch, and a miss inside the
 *   interval waits for the next allowed fetch instead of failing (so a token of a key
 *   published a moment after the last fetch is still accepted). A failed fetch keeps the
 *   previous set (logged); with none, tokens are refused.
 *
 * Owns: loading, caching and refreshing the set. Must never: decide access or know HTTP
 * statuses of the API (a failure is a `KeySetUnavailable`).
 */

import * as fs from 'node:fs';

import { createLocalJWKSet, errors as joseErrors, type JSONWebKeySet, type JWSHeaderParameters, type FlattenedJWSInput, type KeyLike } from 'jose';

/** The asymmetric algorithms a JWKS key may verify. */
export const ASYMMETRIC_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'ES256', 'ES384', 'EdDSA'] as const;

/** At most one fetch of a JWKS URL per this many milliseconds. */
export const MIN_FETCH_INTERVAL_MS = 5_000;
/** Lifetime of a fetched set whose answer has no Cache-Control max-age. */
const DEFAULT_MAX_AGE_S = 300;
const MAX_MAX_AGE_S = 86_400;
const FETCH_TIMEOUT_MS = 5_000;
/** A JWKS file is looked at again at most this often (and at once for an unknown kid). */
const FILE_CHECK_INTERVAL_MS = 1_000;
/** Largest JWKS accepted (a file or an answer). */
const MAX_JWKS_BYTES = 1024 * 1024;

type KeyGetter = (header: JWSHeaderParameters, token: FlattenedJWSInput) => Promise<KeyLike>;

/** No key set could be loaded (the file is unreadable, or the URL never answered with one). */
export class KeySetUnavailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KeySetUnavailable';
  }
}

/** A JWKS file that cannot be used at start. */
export class KeySetFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KeySetFileError';
  }
}

export interface KeySetLog {
  info(obj: Record<string, unknown>, msg: string): void;
  warn(obj: Record<string, unknown>, msg: string): void;
}

export interface KeySource {
  /** The key for a token with this header: throws `KeySetUnavailable`, or jose's `JWKSNoMatchingKey` when no key fits. */
  keyFor(header: JWSHeaderParameters, token: FlattenedJWSInput): Promise<KeyLike>;
  /** Brings the set up to date where that costs no wait (a stale URL set, a file past its look interval). */
  fresh(): Promise<void>;
  /** Changes whenever the set changes: a token verified under another version is verified again. */
  readonly version: number;
  /** Stops background work. */
  close(): void;
}

/** Parses a JWKS document into jose's key getter, or throws with a reason. */
function parseSet(text: string): { getter: KeyGetter; kids: string[] } {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new Error('not JSON');
  }
  if (typeof doc !== 'object' || doc === null || !Array.isArray((doc as { keys?: unknown }).keys)) throw new Error('expected {"keys": [...]}');
  const keys = (doc as JSONWebKeySet).keys;
  for (const [i, k] of keys.entries()) {
    if (typeof k !== 'object' || k === null || typeof k.kty !== 'string') throw new Error(`keys[${i}]: expected a JWK with "kty"`);
    // A set of public keys: a private member here means a leaked private key.
    if ('d' in k) throw new Error(`keys[${i}]: holds a private key ("d"); publish only public keys`);
  }
  return { getter: createLocalJWKSet(doc as JSONWebKeySet) as KeyGetter, kids: keys.map((k) => String(k.kid ?? '')) };
}

const isNoMatch = (err: unknown) => err instanceof joseErrors.JWKSNoMatchingKey;

/** The set of a file, re-read when the file changes. */
export class FileKeySource implements KeySource {
  version = 1;
  private getter: KeyGetter;
  private stamp: string;
  private checkedAt = Date.now();
  private checking: Promise<void> | null = null;

  constructor(
    private readonly file: string,
    private readonly log: KeySetLog,
  ) {
    let text: string;
    let st: fs.Stats;
    try {
      st = fs.statSync(file);
      if (st.size > MAX_JWKS_BYTES) throw new Error(`larger than ${MAX_JWKS_BYTES} bytes`);
      text = fs.readFileSync(file, 'utf8');
    } catch (err) {
      throw new KeySetFileError(`service.jwt_jwks_path ${file}: cannot be read: ${(err as Error).message}`);
    }
    try {
      const set = parseSet(text);
      this.getter = set.getter;
      this.log.info({ file, kids: set.kids }, 'JWKS loaded');
    } catch (err) {
      throw new KeySetFileError(`service.jwt_jwks_path ${file}: not a usable JWKS: ${(err as Error).message}`);
    }
    this.stamp = stampOf(st);
  }

  async fresh(): Promise<void> {
    if (Date.now() - this.checkedAt >= FILE_CHECK_INTERVAL_MS) await this.check();
  }

  async keyFor(header: JWSHeaderParameters, token: FlattenedJWSInput): Promise<KeyLike> {
    await this.fresh();
    try {
      return await this.getter(header, token);
    } catch (err) {
      if (!isNoMatch(err)) throw err;
      await this.check();
      return this.getter(header, token);
    }
  }

  /** Re-reads the file if it changed (one look at a time). */
  private check(): Promise<void> {
    this.checking ??= (async () => {
      try {
        const st = await fs.promises.stat(this.file);
        const stamp = stampOf(st);
        if (stamp === this.stamp) return;
        if (st.size > MAX_JWKS_BYTES) throw new Error(`larger than ${MAX_JWKS_BYTES} bytes`);
        const set = parseSet(await fs.promises.readFile(this.file, 'utf8'));
        this.getter = set.getter;
        this.stamp = stamp;
        this.version++;
        this.log.info({ file: this.file, kids: set.kids }, 'JWKS file changed: keys reloaded');
      } catch (err) {
        this.log.warn({ file: this.file, err: (err as Error).message }, 'JWKS file unusable: keeping the previous keys');
      } finally {
        this.checkedAt = Date.now();
        this.checking = null;
      }
    })();
    return this.checking;
  }

  close(): void {}
}

function stampOf(st: fs.Stats): string {
  return `${st.ino}:${st.size}:${st.mtimeMs}`;
}

/** Seconds a JWKS answer may be kept, from its Cache-Control header. */
export function maxAgeOf(cacheControl: string | null): number {
  if (cacheControl === null) return DEFAULT_MAX_AGE_S;
  const directives = cacheControl.toLowerCase().split(',').map((d) => d.trim());
  if (directives.includes('no-store') || directives.includes('no-cache')) return 0;
  for (const d of directives) {
    const m = /^max-age\s*=\s*"?(\d+)"?$/.exec(d);
    if (m) return Math.min(Number(m[1]), MAX_MAX_AGE_S);
  }
  return DEFAULT_MAX_AGE_S;
}

/** The set of a URL, cached per Cache-Control and fetched again for an unknown kid. */
export class UrlKeySource implements KeySource {
  version = 0;
  private getter: KeyGetter | null = null;
  private expiresAt = 0;
  private lastFetchAt = -Infinity;
  private fetching: Promise<void> | null = null;
  private lastError = 'not fetched yet';
  private closed = false;
  private wake: { timer: NodeJS.Timeout; resolve: () => void } | null = null;
  /** Fetches started (for tests and the log). */
  fetches = 0;

  constructor(
    private readonly url: string,
    private readonly log: KeySetLog,
    private readonly minIntervalMs = MIN_FETCH_INTERVAL_MS,
  ) {
    // Start the first fetch now; its failure is logged, not fatal.
    void this.refresh();
  }

  async fresh(): Promise<void> {
    // Stale: fetch again when allowed; if that fails the previous keys stay in use.
    if (this.getter !== null && Date.now() >= this.expiresAt && (this.fetching !== null || this.mayFetchNow())) await this.refresh();
  }

  async keyFor(header: JWSHeaderParameters, token: FlattenedJWSInput): Promise<KeyLike> {
    if (this.getter === null) await this.refresh();
    else await this.fresh();
    const getter = this.getter as KeyGetter | null;
    if (getter === null) throw new KeySetUnavailable(`the signing keys could not be fetched (${this.lastError})`);
    try {
      return await getter(header, token);
    } catch (err) {
      if (!isNoMatch(err)) throw err;
      await this.refresh();
      const fresh = this.getter as KeyGetter | null;
      if (fresh === null) throw new KeySetUnavailable(`the signing keys could not be fetched (${this.lastError})`);
      return fresh(header, token);
    }
  }

  private mayFetchNow(): boolean {
    return Date.now() - this.lastFetchAt >= this.minIntervalMs;
  }

  /**
   * One fetch, shared by every caller that asks while it is pending; inside the minimum
   * interval it waits for the interval's end first.
   */
  private refresh(): Promise<void> {
    this.fetching ??= (async () => {
      try {
        const waitMs = this.lastFetchAt + this.minIntervalMs - Date.now();
        if (waitMs > 0) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, waitMs);
            timer.unref();
            this.wake = { timer, resolve };
          });
          this.wake = null;
        }
        if (this.closed) return;
        this.lastFetchAt = Date.now();
        this.fetches++;
        await this.fetchOnce();
      } finally {
        this.fetching = null;
      }
    })();
    return this.fetching;
  }

  private async fetchOnce(): Promise<void> {
    try {
      const res = await fetch(this.url, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(FETCH_TIMEOUT_MS), redirect: 'error' });
      if (res.status !== 200) {
        await res.body?.cancel();
        throw new Error(`HTTP ${res.status}`);
      }
      const declared = Number(res.headers.get('content-length') ?? '0');
      if (declared > MAX_JWKS_BYTES) {
        await res.body?.cancel();
        throw new Error(`answer larger than ${MAX_JWKS_BYTES} bytes`);
      }
      const text = await res.text();
      if (text.length > MAX_JWKS_BYTES) throw new Error(`answer larger than ${MAX_JWKS_BYTES} bytes`);
      const set = parseSet(text);
      const maxAge = maxAgeOf(res.headers.get('cache-control'));
      this.getter = set.getter;
      this.expiresAt = Date.now() + maxAge * 1000;
      this.version++;
      this.lastError = '';
      this.log.info({ url: this.url, kids: set.kids, maxAgeSec: maxAge }, 'JWKS fetched');
    } catch (err) {
      const e = err as Error;
      this.lastError = e.name === 'TimeoutError' ? `no answer within ${FETCH_TIMEOUT_MS} ms` : e.message;
      if (e.cause instanceof Error) this.lastError += `: ${e.cause.message}`;
      this.log.warn({ url: this.url, err: this.lastError, keptPrevious: this.getter !== null }, 'JWKS fetch failed');
    }
  }

  close(): void {
    this.closed = true;
    if (this.wake !== null) {
      clearTimeout(this.wake.timer);
      this.wake.resolve();
    }
  }
}
