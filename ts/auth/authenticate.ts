/**
 * Who is calling: turns a request's credentials into an Access (SPEC 5; reference
 * behaviour in qdrant-notes.md section 2).
 *
 * Credentials come from the `api-key` header, else `Authorization: Bearer <token>`.
 * Order: the api key (manage), the read-only key (global read), then, with
 * `service.jwt_rbac`, a JWT: HS256 signed with the api key (unless
 * `service.jwt_allow_hs256` is false), or, with a JWKS configured (ts/auth/jwks.ts), one
 * of RS256/384/512, PS256, ES256/384, EdDSA signed by a key of that set; 30 s leeway on
 * `exp` and `nbf`. Keys are compared in constant time. With no key and no JWKS configured
 * nobody is asked for one.
 *
 * Failures: no credentials, or something that is neither a key nor a JWT: 401. A JWT
 * with a bad signature, an algorithm not accepted (`none`, HS256 when turned off, an
 * asymmetric one without a JWKS), a `kid` the set does not have, a set that could not be
 * loaded, or past its expiry: 403. A JWT whose claims
 * are invalid (unknown `access`, malformed `value_exists`): 401. A `value_exists` whose
 * collection is gone: 403; whose point is gone or changed: 401.
 *
 * Owns: that decision. Must never: know routes or requirements (policy.ts, access.ts).
 */

import { createHash, timingSafeEqual } from 'node:crypto';

import { decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWTPayload, type ProtectedHeaderParameters } from 'jose';

import { MANAGE, READ_ONLY, parseAccessClaim, type Access } from './access';
import { ASYMMETRIC_ALGORITHMS, KeySetUnavailable, type KeySource } from './jwks';

export interface AuthConfig {
  apiKey: string | null;
  readOnlyKey: string | null;
  jwtRbac: boolean;
  /** Accept HS256 tokens signed with the api key (with jwtRbac). */
  allowHs256?: boolean;
  /** The public keys of asymmetric tokens (with jwtRbac), or null. */
  keys?: KeySource | null;
}

export interface ValueExists {
  collection: string;
  matches: Array<{ key: string; value: unknown }>;
}

/** Looks a `value_exists` claim up: whether its collection exists, and a point matches. */
export type ValueLookup = (claim: ValueExists) => Promise<'found' | 'no-collection' | 'no-match'>;

export interface Caller {
  access: Access;
  /** For the audit log: `api_key`, `read_only_api_key`, `jwt:<sub>`, or `anonymous` (auth off). */
  subject: string;
}

/**
 * An authentication failure: `unauthenticated` (no or unknown credentials) or `forbidden`
 * (a token that is not valid). The API layers decide the status (HTTP 401 / 403).
 */
export class AuthError extends Error {
  constructor(
    readonly reason: 'unauthenticated' | 'forbidden',
    message: string,
  ) {
    super(message);
    this.name = 'AuthError';
  }
}

const LEEWAY_SECONDS = 30;
/** Verified tokens remembered (oldest forgotten first). */
const VERIFIED_CACHE_SIZE = 1024;
const ANONYMOUS: Caller = { access: MANAGE, subject: 'anonymous' };

function digest(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

/** Constant-time equality (of digests, so lengths do not leak either). */
function sameSecret(a: Buffer, b: string): boolean {
  return timingSafeEqual(a, digest(b));
}

/** Three base64url segments: a JWT's shape (anything else is just a wrong key). */
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

export class Authenticator {
  readonly enabled: boolean;
  private readonly apiKey: Buffer | null;
  private readonly readOnlyKey: Buffer | null;
  private readonly jwtSecret: Uint8Array | null;
  private readonly keys: KeySource | null;
  private readonly jwtOn: boolean;
  /** The text for a token of an algorithm that is not accepted. */
  private readonly algRefusal: string;

  constructor(
    cfg: AuthConfig,
    private readonly lookup: ValueLookup,
  ) {
    const key = cfg.apiKey || null;
    const ro = cfg.readOnlyKey || null;
    this.keys = cfg.jwtRbac ? (cfg.keys ?? null) : null;
    this.enabled = key !== null || ro !== null || this.keys !== null;
    this.apiKey = key === null ? null : digest(key);
    this.readOnlyKey = ro === null ? null : digest(ro);
    this.jwtSecret = cfg.jwtRbac && key !== null && cfg.allowHs256 !== false ? new TextEncoder().encode(key) : null;
    this.jwtOn = this.jwtSecret !== null || this.keys !== null;
    const accepted = [...(this.jwtSecret !== null ? ['HS256'] : []), ...(this.keys !== null ? ASYMMETRIC_ALGORITHMS : [])];
    this.algRefusal = accepted.length === 1 ? `Invalid JWT: only ${accepted[0]} tokens are accepted` : `Invalid JWT: only ${accepted.join(', ')} tokens are accepted`;
  }

  /** Stops the key set's background work. */
  close(): void {
    this.keys?.close();
  }

  /** The caller of a request with these headers, or an AuthError. */
  async authenticate(headers: Record<string, string | string[] | undefined>): Promise<Caller> {
    if (!this.enabled) return ANONYMOUS;
    const credential = credentialOf(headers);
    if (credential === null) throw new AuthError('unauthenticated', 'Must provide an API key or an Authorization bearer token');
    if (this.apiKey !== null && sameSecret(this.apiKey, credential)) return { access: MANAGE, subject: 'api_key' };
    if (this.readOnlyKey !== null && sameSecret(this.readOnlyKey, credential)) return { access: READ_ONLY, subject: 'read_only_api_key' };
    if (this.jwtOn && JWT_SHAPE.test(credential)) return this.fromJwt(credential);
    throw new AuthError('unauthenticated', 'Invalid API key or JWT');
  }

  /**
   * Tokens whose signature was verified, with their claims: a client sends the same
   * token on every request, and an HMAC check per request costs more than the lookup.
   * Times (`exp`, `nbf`) are checked again on every use; value_exists too.
   */
  private readonly verified = new Map<string, { claims: Record<string, unknown>; keysVersion: number | null }>();

  private async verify(token: string): Promise<Record<string, unknown>> {
    const hit = this.verified.get(token);
    // A token of a JWKS key is verified again once the set changed (its key may be gone).
    if (hit !== undefined && hit.keysVersion !== null && this.keys !== null) await this.keys.fresh();
    if (hit !== undefined && hit.keysVersion !== null && hit.keysVersion !== this.keys?.version) this.verified.delete(token);
    else if (hit !== undefined) {
      const cached = hit.claims;
      const now = Date.now() / 1000;
      if (typeof cached.exp === 'number' && now >= cached.exp + LEEWAY_SECONDS) {
        this.verified.delete(token);
        throw new AuthError('forbidden', 'Invalid JWT: the token has expired');
      }
      if (typeof cached.nbf === 'number' && now < cached.nbf - LEEWAY_SECONDS) throw new AuthError('forbidden', 'Invalid JWT: the token is not valid yet');
      return cached;
    }
    let header: ProtectedHeaderParameters;
    try {
      header = decodeProtectedHeader(token);
    } catch {
      throw new AuthError('unauthenticated', 'Invalid API key or JWT');
    }
    let payload: JWTPayload;
    let keysVersion: number | null = null;
    if (header.alg === 'HS256' && this.jwtSecret !== null) {
      ({ payload } = await jwtVerify(token, this.jwtSecret, { algorithms: ['HS256'], clockTolerance: LEEWAY_SECONDS }));
    } else if (this.keys !== null && (ASYMMETRIC_ALGORITHMS as readonly string[]).includes(String(header.alg))) {
      const keys = this.keys;
      const before = keys.version;
      ({ payload } = await jwtVerify(token, (h, t) => keys.keyFor(h, t), { algorithms: [...ASYMMETRIC_ALGORITHMS], clockTolerance: LEEWAY_SECONDS }));
      // The set changed during the look-up: which version the key came from is unknown,
      // so the next use verifies again (-1 matches no version).
      keysVersion = keys.version === before ? before : -1;
    } else {
      throw new AuthError('forbidden', this.algRefusal);
    }
    if (this.verified.size >= VERIFIED_CACHE_SIZE) this.verified.delete(this.verified.keys().next().value as string);
    this.verified.set(token, { claims: payload, keysVersion });
    return payload;
  }

  private async fromJwt(token: string): Promise<Caller> {
    let claims: Record<string, unknown>;
    try {
      claims = await this.verify(token);
    } catch (err) {
      if (err instanceof AuthError) throw err;
      if (err instanceof joseErrors.JWTExpired) throw new AuthError('forbidden', 'Invalid JWT: the token has expired');
      if (err instanceof joseErrors.JOSEAlgNotAllowed) throw new AuthError('forbidden', this.algRefusal);
      if (err instanceof KeySetUnavailable) throw new AuthError('forbidden', `Invalid JWT: ${err.message}`);
      if (err instanceof joseErrors.JWKSNoMatchingKey) throw new AuthError('forbidden', 'Invalid JWT: no key of the JWKS matches the token (kid and alg)');
      if (err instanceof joseErrors.JWKSMultipleMatchingKeys) throw new AuthError('forbidden', 'Invalid JWT: several keys of the JWKS match a token without kid');
      if (err instanceof joseErrors.JWSSignatureVerificationFailed) throw new AuthError('forbidden', 'Invalid JWT: the signature does not match');
      if (err instanceof joseErrors.JWTClaimValidationFailed) throw new AuthError('forbidden', `Invalid JWT: ${err.message}`);
      if (err instanceof joseErrors.JWTInvalid) throw new AuthError('unauthenticated', `Invalid JWT claims: ${err.message}`);
      // Not a decodable JWS at all: as good as a wrong key.
      throw new AuthError('unauthenticated', 'Invalid API key or JWT');
    }
    const access = parseAccessClaim(claims.access);
    if (typeof access === 'string') throw new AuthError('unauthenticated', `Invalid JWT claims: ${access}`);
    if (claims.value_exists !== undefined) {
      const claim = parseValueExists(claims.value_exists);
      if (typeof claim === 'string') throw new AuthError('unauthenticated', `Invalid JWT claims: ${claim}`);
      let found: 'found' | 'no-collection' | 'no-match';
      try {
        found = await this.lookup(claim);
      } catch (err) {
        // A key the filter language refuses (e.g. "a[" or ""): the claim is invalid.
        throw new AuthError('unauthenticated', `Invalid JWT claims: value_exists: ${(err as Error).message}`);
      }
      if (found === 'no-collection') throw new AuthError('forbidden', 'Invalid JWT, stateful validation failed');
      if (found === 'no-match') throw new AuthError('unauthenticated', 'Invalid JWT, stateful validation failed');
    }
    const sub = typeof claims.sub === 'string' ? claims.sub : '';
    return { access, subject: `jwt:${sub}` };
  }
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | null {
  const v = headers[name];
  if (v === undefined) return null;
  return Array.isArray(v) ? (v[0] ?? null) : v;
}

function credentialOf(headers: Record<string, string | string[] | undefined>): string | null {
  const key = header(headers, 'api-key');
  if (key !== null && key !== '') return key;
  const auth = header(headers, 'authorization');
  if (auth !== null) {
    const m = /^Bearer\s+(.+)$/i.exec(auth.trim());
    if (m) return m[1].trim();
  }
  return null;
}

function parseValueExists(x: unknown): ValueExists | string {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) return 'value_exists: expected {collection, matches}';
  const { collection, matches } = x as Record<string, unknown>;
  if (typeof collection !== 'string' || collection === '') return 'value_exists.collection: expected a collection name';
  if (!Array.isArray(matches) || matches.length === 0) return 'value_exists.matches: expected a non-empty list of {key, value}';
  const out: ValueExists = { collection, matches: [] };
  for (const [i, m] of matches.entries()) {
    if (typeof m !== 'object' || m === null || typeof (m as { key?: unknown }).key !== 'string' || !('value' in m)) {
      return `value_exists.matches[${i}]: expected {key, value}`;
    }
    const { key, value } = m as { key: string; value: unknown };
    if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') {
      return `value_exists.matches[${i}].value: expected a string, number or boolean`;
    }
    out.matches.push({ key, value });
  }
  return out;
}
