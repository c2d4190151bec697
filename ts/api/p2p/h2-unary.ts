/**
 * Unary gRPC calls to one peer on a pool of HTTP/2 connections (ts/api/h2/client.ts):
 * the client side of the p2p points service (ts/api/p2p/points.ts).
 *
 * Why not grpc-js's client, or node:http2: a call through grpc-js goes through its
 * channel, load-balancing, resolver and interceptor layers, and node:http2 makes a stream
 * object with its events per call; one `Status` call between peers cost 206 µs of CPU
 * (client and server, 8 in flight) with grpc-js's client and 132 µs with node:http2
 * (bench/results/p2p-call-2026-11-27-h2.md); the connection here frames HTTP/2 itself.
 * The protobuf encoding is the service definition's (proto-loader), so the wire is
 * unchanged and peers of older builds answer.
 *
 * Owns: the connections to one peer (created on first use, replaced when they close,
 * one connect attempt per slot at a time, none sooner than RECONNECT_MS after that
 * slot's last failure, given up after CONNECT_TIMEOUT_MS), deadlines (sent as
 * `grpc-timeout` and kept by a timer here), cancelling, and what a failed call reports.
 * Must never: interpret a message or map a status to an error kind (points.ts does).
 */

import * as net from 'node:net';
import * as tls from 'node:tls';

import { status as Code } from '@grpc/grpc-js';

import { Http2ClientConnection, type ClientCall } from '../h2/client';
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
  trailers: ReadonlyMap<string, string> | null;
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

interface Slot {
  conn: Http2ClientConnection | null;
  /** performance.now() of the latest failure of this slot's connection (a monotonic clock: a step of the wall clock must not stretch a backoff). */
  failedAt: number;
  /** Why the latest connection of this slot failed. */
  lastError: string | null;
}

function timeoutHeader(ms: number): string {
  const m = Math.max(1, Math.ceil(ms));
  return m <= 99_999_999 ? `${m}m` : `${Math.min(99_999_999, Math.ceil(m / 1000))}S`;
}

/** The connections to one peer (`host:port`), `size` of them, and the calls made on them. */
export class H2UnaryPool {
  private readonly slots: Slot[];
  private next = 0;
  private readonly inFlight = new Set<UnaryCall>();
  private closed = false;
  private readonly authority: string;

  constructor(
    private readonly host: string,
    private readonly port: number,
    private readonly tlsMaterial: P2PTls | null,
    size: number,
  ) {
    this.slots = Array.from({ length: Math.max(1, size) }, () => ({ conn: null, failedAt: -Infinity, lastError: null }));
    this.authority = `${net.isIPv6(host) ? `[${host}]` : host}:${port}`;
  }

  private connect(slot: Slot): Http2ClientConnection {
    const t = this.tlsMaterial;
    let socket: net.Socket;
    if (t) {
      const s = tls.connect({ host: this.host, port: this.port, ca: t.ca, key: t.key, cert: t.cert, ALPNProtocols: ['h2'], servername: net.isIP(this.host) ? undefined : this.host });
      s.once('secureConnect', () => {
        if (s.alpnProtocol !== 'h2') conn.destroy(`the peer did not agree to HTTP/2 over TLS (ALPN: ${s.alpnProtocol || 'none'})`);
      });
      socket = s;
    } else socket = net.connect({ host: this.host, port: this.port });
    const conn = new Http2ClientConnection(socket, this.authority, t ? 'https' : 'http', MAX_MESSAGE);
    slot.conn = conn;
    const timer = setTimeout(() => conn.destroy(`no connection within ${CONNECT_TIMEOUT_MS / 1000} s`), CONNECT_TIMEOUT_MS);
    timer.unref();
    conn.onReady = () => clearTimeout(timer);
    conn.onClose = (reason) => {
      clearTimeout(timer);
      if (slot.conn !== conn) return;
      slot.conn = null;
      if (reason !== null) {
        slot.failedAt = performance.now();
        slot.lastError = reason;
      }
    };
    return conn;
  }

  /**
   * A connection for the next call: the first connected one from the round-robin position
   * on, else one still connecting. The slot at that position is (re)connected on the way
   * when it is empty and past its backoff, so every slot fills as the calls go round.
   */
  private pick(): Http2ClientConnection | { error: string } {
    const n = this.slots.length;
    const now = performance.now();
    const head = this.slots[this.next % n];
    if ((head.conn === null || !head.conn.usable) && now - head.failedAt >= RECONNECT_MS) this.connect(head);
    for (let i = 0; i < n; i++) {
      const c = this.slots[(this.next + i) % n].conn;
      if (c !== null && c.ready && c.usable) {
        this.next += i + 1;
        return c;
      }
    }
    this.next++;
    for (const slot of this.slots) if (slot.conn !== null && slot.conn.usable) return slot.conn;
    const idle = this.slots.find((x) => (x.conn === null || !x.conn.usable) && now - x.failedAt >= RECONNECT_MS);
    if (idle) return this.connect(idle);
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
    let inner: ClientCall | null = null;
    let timer: NodeJS.Timeout | null = null;
    const finish = (failure: CallFailure | null, answer?: unknown) => {
      if (settled) return;
      settled = true;
      if (timer !== null) clearTimeout(timer);
      this.inFlight.delete(handle);
      done(failure, answer);
    };
    const handle: UnaryCall = {
      cancel: () => {
        if (settled) return;
        finish({ code: Code.CANCELLED, details: 'call cancelled', trailers: null });
        // The connection ends the stream (RST_STREAM); its report comes after this one and is ignored.
        inner?.cancel();
      },
    };
    if (this.closed) {
      queueMicrotask(() => finish({ code: Code.UNAVAILABLE, details: 'client closed', trailers: null }));
      return handle;
    }
    let message: Buffer;
    try {
      message = method.requestSerialize(request);
    } catch (err) {
      const why = `request could not be encoded: ${(err as Error).message}`;
      queueMicrotask(() => finish({ code: Code.INTERNAL, details: why, trailers: null }));
      return handle;
    }
    if (message.length > MAX_MESSAGE) {
      // Peers take at most this much (grpc.max_receive_message_length of their server).
      const why = `request of ${message.length} bytes is larger than the ${MAX_MESSAGE} a peer takes`;
      queueMicrotask(() => finish({ code: Code.RESOURCE_EXHAUSTED, details: why, trailers: null }));
      return handle;
    }
    let picked: Http2ClientConnection | { error: string };
    try {
      picked = this.pick();
    } catch (err) {
      // A connection that cannot even start (TLS material tls.connect refuses).
      picked = { error: (err as Error).message };
    }
    if (!(picked instanceof Http2ClientConnection)) {
      const why = picked.error;
      queueMicrotask(() => finish({ code: Code.UNAVAILABLE, details: why, trailers: null }));
      return handle;
    }
    this.inFlight.add(handle);
    timer = setTimeout(() => {
      finish({ code: Code.DEADLINE_EXCEEDED, details: 'deadline exceeded', trailers: null });
      inner?.cancel();
    }, Math.min(timeoutMs, MAX_TIMER_MS));
    const answered = (code: number, details: string, trailers: ReadonlyMap<string, string> | null, bytes: Buffer | null) => {
      if (settled) return;
      if (code !== Code.OK || bytes === null) {
        finish({ code: code as Code, details, trailers });
        return;
      }
      let answer: unknown;
      try {
        answer = method.responseDeserialize(bytes);
      } catch (err) {
        finish({ code: Code.INTERNAL, details: `answer could not be decoded: ${(err as Error).message}`, trailers });
        return;
      }
      finish(null, answer);
    };
    try {
      inner = picked.call(method.path, message, timeoutHeader(timeoutMs), answered);
    } catch (err) {
      finish({ code: Code.INTERNAL, details: `the call could not start: ${(err as Error).message}`, trailers: null });
    }
    return handle;
  }

  /** Cancels every call in flight: each fails as CANCELLED at once. */
  cancelAll(): number {
    const calls = [...this.inFlight];
    for (const c of calls) c.cancel();
    return calls.length;
  }

  /** No new calls; each connection closes once the calls in flight on it are answered (or reach their deadlines). */
  close(): void {
    this.closed = true;
    for (const slot of this.slots) {
      slot.conn?.close();
      slot.conn = null;
    }
  }
}
