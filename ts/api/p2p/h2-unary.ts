/**
 * Unary gRPC calls to one peer over node:http2, on a pool of connections: the client side
 * of the p2p points service (ts/api/p2p/points.ts).
 *
 * Why not grpc-js's client: a call there goes through its channel, load-balancing,
 * resolver and interceptor layers and builds several objects and promises per call; one
 * `Status` call between peers cost 197 µs of CPU (client and server, 8 in flight) against
 * 124 µs with node:http2 and the framing done here (bench/results/p2p-call-2026-11-27.md).
 * The protobuf encoding is still the service definition's (proto-loader), so the wire
 * is unchanged and a peer of an older build answers.
 *
 * Owns: the connections to one peer (created on first use, replaced when they close,
 * one connect attempt per slot at a time, none sooner than RECONNECT_MS after that
 * slot's last failure), the gRPC framing of one request and one answer, deadlines
 * (sent as `grpc-timeout` and kept by a timer here), cancelling, and reading the status
 * and trailers of an answer. Must never: interpret a message or map a status to an
 * error kind (points.ts does).
 */

import * as http2 from 'node:http2';
import * as net from 'node:net';
import * as tls from 'node:tls';

import { status as Code } from '@grpc/grpc-js';

import type { P2PTls } from './grpc';

/** A method of a service as proto-loader describes it. */
export interface UnaryMethod {
  path: string;
  requestSerialize(value: unknown): Buffer;
  responseDeserialize(bytes: Buffer): unknown;
}

/** How a call failed: its gRPC status, the status message, and the trailers the answer carried (null when none came). */
export interface CallFailure {
  code: Code;
  details: string;
  trailers: http2.IncomingHttpHeaders | null;
}

/** A call in flight. */
export interface UnaryCall {
  cancel(): void;
}

/** The largest answer accepted (as grpc.max_receive_message_length between peers). */
export const MAX_MESSAGE = 256 * 1024 * 1024;
/** A slot whose connection failed is not connected again sooner than this. */
const RECONNECT_MS = 100;
/** A connection not established within this long is given up. */
const CONNECT_TIMEOUT_MS = 5000;

/** setTimeout's longest delay (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

const { NGHTTP2_CANCEL } = http2.constants;

interface Slot {
  session: http2.ClientHttp2Session | null;
  /** Whether the session has sent SETTINGS back (the connection is up). */
  ready: boolean;
  /** Date.now() of the latest failure of this slot's connection. */
  failedAt: number;
  /** Why the latest connection of this slot failed. */
  lastError: string | null;
}

function timeoutHeader(ms: number): string {
  const m = Math.max(1, Math.ceil(ms));
  return m <= 99_999_999 ? `${m}m` : `${Math.ceil(m / 1000)}S`;
}

function decodeMessage(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** The connections to one peer (`host:port`), `size` of them, and the calls made on them. */
export class H2UnaryPool {
  private readonly slots: Slot[];
  private next = 0;
  private readonly inFlight = new Set<UnaryCall>();
  /** Why a session failed, for the calls that were on it. */
  private readonly sessionErrors = new WeakMap<http2.ClientHttp2Session, string>();
  private closed = false;

  constructor(
    private readonly host: string,
    private readonly port: number,
    private readonly tlsMaterial: P2PTls | null,
    size: number,
  ) {
    this.slots = Array.from({ length: Math.max(1, size) }, () => ({ session: null, ready: false, failedAt: 0, lastError: null }));
  }

  private connect(slot: Slot): http2.ClientHttp2Session {
    const t = this.tlsMaterial;
    const authority = `${t ? 'https' : 'http'}://${net.isIPv6(this.host) ? `[${this.host}]` : this.host}:${this.port}`;
    const session = http2.connect(authority, {
      settings: { enablePush: false, initialWindowSize: 4 * 1024 * 1024 },
      maxSessionMemory: Number.MAX_SAFE_INTEGER,
      maxSendHeaderBlockLength: Number.MAX_SAFE_INTEGER,
      createConnection: () =>
        t
          ? tls.connect({ host: this.host, port: this.port, ca: t.ca, key: t.key, cert: t.cert, ALPNProtocols: ['h2'], servername: net.isIP(this.host) ? undefined : this.host })
          : net.connect({ host: this.host, port: this.port, noDelay: true }),
    });
    session.unref();
    slot.session = session;
    slot.ready = false;
    const timer = setTimeout(() => session.destroy(new Error(`no connection within ${CONNECT_TIMEOUT_MS / 1000} s`)), CONNECT_TIMEOUT_MS);
    timer.unref();
    session.once('remoteSettings', () => {
      clearTimeout(timer);
      if (slot.session === session) slot.ready = true;
      try {
        session.setLocalWindowSize(16 * 1024 * 1024);
      } catch {
        // the session closed meanwhile
      }
    });
    const drop = (err?: Error) => {
      clearTimeout(timer);
      if (err) this.sessionErrors.set(session, err.message);
      if (slot.session !== session) return;
      slot.session = null;
      slot.ready = false;
      if (err) {
        slot.failedAt = Date.now();
        slot.lastError = err.message;
      }
    };
    session.on('error', drop);
    // A peer shutting down sends GOAWAY: the calls it took finish, new ones go elsewhere.
    session.once('goaway', () => drop());
    session.once('close', () => drop());
    return session;
  }

  /**
   * A session for the next call: the first connected one from the round-robin position on,
   * else one still connecting. The slot at that position is (re)connected on the way when
   * it is empty and past its backoff, so every slot fills as the calls go round.
   */
  private pick(): { session: http2.ClientHttp2Session; slot: Slot } | { error: string } {
    const n = this.slots.length;
    const now = Date.now();
    const head = this.slots[this.next % n];
    if (head.session === null && now - head.failedAt >= RECONNECT_MS) this.connect(head);
    for (let i = 0; i < n; i++) {
      const slot = this.slots[(this.next + i) % n];
      if (slot.session !== null && slot.ready) {
        this.next += i + 1;
        return { session: slot.session, slot };
      }
    }
    this.next++;
    for (const slot of this.slots) if (slot.session !== null) return { session: slot.session, slot };
    const idle = this.slots.find((x) => now - x.failedAt >= RECONNECT_MS);
    if (idle) return { session: this.connect(idle), slot: idle };
    // Every slot failed within its backoff: the call fails now, as the latest connection did.
    const latest = this.slots.reduce((a, b) => (a.failedAt >= b.failedAt ? a : b));
    return { error: latest.lastError ?? 'no connection' };
  }

  /**
   * One unary call: `done` runs exactly once, with the answer or how the call failed.
   * `timeoutMs` bounds it (sent to the server as the call's deadline too).
   */
  call(method: UnaryMethod, request: unknown, timeoutMs: number, done: (failure: CallFailure | null, answer?: unknown) => void): UnaryCall {
    let settled = false;
    let stream: http2.ClientHttp2Stream | null = null;
    let timer: NodeJS.Timeout | null = null;
    const handle: UnaryCall = {
      cancel: () => finish({ code: Code.CANCELLED, details: 'call cancelled', trailers: null }, undefined, true),
    };
    const finish = (failure: CallFailure | null, answer: unknown, reset: boolean) => {
      if (settled) return;
      settled = true;
      if (timer !== null) clearTimeout(timer);
      this.inFlight.delete(handle);
      if (reset && stream !== null && !stream.closed) stream.close(NGHTTP2_CANCEL);
      done(failure, answer);
    };
    if (this.closed) {
      queueMicrotask(() => done({ code: Code.UNAVAILABLE, details: 'client closed', trailers: null }));
      return handle;
    }
    let frame: Buffer;
    try {
      const message = method.requestSerialize(request);
      frame = Buffer.allocUnsafe(5 + message.length);
      frame[0] = 0;
      frame.writeUInt32BE(message.length, 1);
      message.copy(frame, 5);
    } catch (err) {
      queueMicrotask(() => done({ code: Code.INTERNAL, details: `request could not be encoded: ${(err as Error).message}`, trailers: null }));
      return handle;
    }
    this.inFlight.add(handle);
    timer = setTimeout(() => finish({ code: Code.DEADLINE_EXCEEDED, details: 'deadline exceeded', trailers: null }, undefined, true), Math.min(timeoutMs, MAX_TIMER_MS));
    const headers = { ':method': 'POST', ':path': method.path, 'content-type': 'application/grpc', te: 'trailers', 'grpc-timeout': timeoutHeader(timeoutMs) };
    // A session can turn out closed between pick and request (GOAWAY, a failed connect): the request was not sent, so a second pick is safe.
    let session: http2.ClientHttp2Session | null = null;
    for (let attempt = 0; stream === null; attempt++) {
      const picked = this.pick();
      if ('error' in picked) {
        const why = picked.error;
        queueMicrotask(() => finish({ code: Code.UNAVAILABLE, details: why, trailers: null }, undefined, false));
        return handle;
      }
      try {
        stream = picked.session.request(headers, { endStream: false });
        session = picked.session;
      } catch (err) {
        if (picked.slot.session === picked.session) {
          picked.slot.session = null;
          picked.slot.ready = false;
        }
        if (attempt >= 1) {
          const why = (err as Error).message;
          queueMicrotask(() => finish({ code: Code.UNAVAILABLE, details: why, trailers: null }, undefined, false));
          return handle;
        }
      }
    }
    const s = stream;
    const chunks: Buffer[] = [];
    let length = 0;
    let code: number | null = null;
    let details = '';
    let trailers: http2.IncomingHttpHeaders | null = null;
    let streamError: string | null = null;
    const take = (h: http2.IncomingHttpHeaders) => {
      const st = h['grpc-status'];
      if (st === undefined) return;
      code = Number(st);
      details = decodeMessage(String(h['grpc-message'] ?? ''));
      trailers = h;
    };
    // A trailers-only answer (an error) carries its status in the headers.
    s.on('response', take);
    s.on('trailers', take);
    s.on('data', (c: Buffer) => {
      length += c.length;
      if (length > MAX_MESSAGE + 5) finish({ code: Code.RESOURCE_EXHAUSTED, details: `answer larger than ${MAX_MESSAGE} bytes`, trailers: null }, undefined, true);
      else chunks.push(c);
    });
    s.on('error', (err: Error) => {
      streamError ??= err.message;
    });
    s.on('close', () => {
      if (settled) return;
      if (code === null) {
        // The connection's own failure says most (connect ECONNREFUSED ...); else the stream's.
        const why = (session && this.sessionErrors.get(session)) ?? streamError ?? (s.rstCode ? `stream reset (HTTP/2 error ${s.rstCode})` : 'stream closed without a status');
        finish({ code: Code.UNAVAILABLE, details: why, trailers: null }, undefined, false);
        return;
      }
      if (code !== Code.OK) {
        finish({ code: code as Code, details, trailers }, undefined, false);
        return;
      }
      const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      if (body.length < 5 || body[0] !== 0 || body.readUInt32BE(1) !== body.length - 5) {
        finish({ code: Code.INTERNAL, details: `unexpected answer framing (${body.length} bytes${body[0] ? ', compressed' : ''})`, trailers }, undefined, false);
        return;
      }
      let answer: unknown;
      try {
        answer = method.responseDeserialize(body.subarray(5));
      } catch (err) {
        finish({ code: Code.INTERNAL, details: `answer could not be decoded: ${(err as Error).message}`, trailers }, undefined, false);
        return;
      }
      finish(null, answer, false);
    });
    s.end(frame);
    return handle;
  }

  /** Cancels every call in flight: each fails as CANCELLED at once. */
  cancelAll(): number {
    const calls = [...this.inFlight];
    for (const c of calls) c.cancel();
    return calls.length;
  }

  close(): void {
    this.closed = true;
    this.cancelAll();
    for (const slot of this.slots) {
      slot.session?.destroy();
      slot.session = null;
      slot.ready = false;
    }
  }
}
