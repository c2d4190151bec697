/**
 * The REST server's HTTP/1.1 front: the direct lane's requests read and answered on the
 * socket, every other request handed to node:http (and through it to the lane's node
 * path or Koa) unchanged.
 *
 * Why: with the direct lane, node:http's own work was the largest part left of a
 * query's main-thread time: an IncomingMessage and a ServerResponse per request (two
 * streams with their events), the header objects, the parser's callbacks into
 * JavaScript, the response's header bookkeeping. Side by side at 8 connections
 * (bench/results/ab-query-*-front-*.md) the front took a third of the main thread's
 * time per query away. See docs/rest.md.
 *
 * How a connection is served. The front reads the socket itself and parses each
 * request head with a strict subset of HTTP/1.1:
 *   - a request that the lane serves (DirectLane.match) with a Content-Length body, no
 *     Transfer-Encoding, Expect or Upgrade, a Host header, no repeated header, and no
 *     Origin while CORS is on: the lane's handler runs (DirectLane.serveParsed) and the
 *     front writes the answer with the headers node:http writes for it;
 *   - any other well-formed request delimited by its Content-Length (or without a
 *     body): its bytes go, as they arrive, to node:http through a stand-in stream for
 *     this connection (`Relay`), and the front reads the next request once node:http
 *     has written the answer. Node's own answer (404, Koa's routes, CORS, HTTP/1.0, 413
 *     for a body over the limit) is what the client gets;
 *   - anything else (chunked bodies, upgrades, a head the strict parse refuses, a head
 *     over node's header size limit): the socket itself, with the bytes read so far,
 *     goes to node:http for good, which answers exactly as before (400, 431, ...).
 * Requests are answered in order, one at a time per connection (pipelined requests
 * wait, as node:http makes them wait).
 *
 * Timeouts as node:http keeps them: the server's keepAliveTimeout between requests
 * (then the connection closes), headersTimeout for a request head and requestTimeout for
 * a whole request (then 408 and close). Relayed requests run under node:http's own
 * timers. Shutdown: `closeIdle()` and `closeAll()` do for the front's connections what
 * node's closeIdleConnections/closeAllConnections do for its own.
 *
 * Owns: reading requests off the socket and writing the lane's answers. Must never:
 * answer a request the lane does not serve, or differ from node:http in what it sends
 * (test/api/direct.test.ts compares the front, the lane on node:http and Koa).
 */

import type { IncomingHttpHeaders, Server, ServerResponse } from 'node:http';
import { maxHeaderSize as NODE_MAX_HEADER_SIZE, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';

import { standsFor } from './connection';
import type { DirectAnswer, DirectLane, DirectMatch } from './direct';

const HEAD_END = Buffer.from('\r\n\r\n');
const REQUEST_LINE = /^([A-Z]+) ([\x21-\x7e]+) HTTP\/1\.([01])$/;
const HEADER_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*$/;
const DIGITS = /^[0-9]{1,15}$/;
/**
 * Heads up to this size are read by the front; a longer one (or one still without its end) goes
 * to node:http, whose limit (--max-http-header-size, 16 KiB by default) then decides.
 */
const MAX_HEAD = Math.floor(NODE_MAX_HEADER_SIZE / 2);
/** Bytes of later (pipelined) requests held while one is answered, before the socket is paused. */
const HOLD_BYTES = 64 * 1024;

/** The answer node:http writes for a request that timed out. */
const REQUEST_TIMEOUT = 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n';
/** The answer node:http writes for a request cut short by the client's end (its parser's finish() fails). */
const BAD_REQUEST = 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n';
/** node:http closes an idle keep-alive connection this long after the keepAliveTimeout it advertises (HTTP_SERVER_KEEP_ALIVE_TIMEOUT_BUFFER), so that a client reusing it just before then does not meet a closed socket. */
const KEEP_ALIVE_GRACE_MS = 1000;

let dateText = '';
let dateSecond = -1;
/** The Date header's value, as node:http writes it (cached per second). */
function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateText = new Date(now).toUTCString();
  }
  return dateText;
}

export interface FrontOptions {
  bodyLimitBytes: number;
  /** service.enable_cors: a request with an Origin header is relayed (Koa writes CORS headers). */
  cors: boolean;
}

export class HttpFront {
  private readonly connections = new Set<Connection>();
  private closing = false;
  /** Requests the front answered itself (the lane's handler, on the socket). */
  served = 0;

  private constructor(
    readonly server: Server,
    readonly lane: DirectLane,
    readonly opts: FrontOptions,
    /** node:http's connection listener: takes a socket, or the relay stream of one. */
    readonly nodeConnection: (socket: Duplex) => void,
  ) {}

  /** Puts a front before `server` (http or https, not yet listening): it takes the server's connections. */
  static attach(server: Server, lane: DirectLane, opts: FrontOptions): HttpFront {
    // https.Server hands node:http its sockets on 'secureConnection', http.Server on 'connection'.
    const event = typeof (server as unknown as { setSecureContext?: unknown }).setSecureContext === 'function' ? 'secureConnection' : 'connection';
    const listeners = server.listeners(event) as Array<(s: Duplex) => void>;
    if (listeners.length !== 1) throw new Error(`HttpFront.attach: expected node:http's one '${event}' listener, found ${listeners.length}`);
    const nodeListener = listeners[0];
    server.removeListener(event, nodeListener);
    const front = new HttpFront(server, lane, opts, (s) => nodeListener.call(server, s));
    server.on(event, (socket: Socket) => front.accept(socket));
    return front;
  }

  private accept(socket: Socket): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    const c = new Connection(this, socket);
    this.connections.add(c);
    socket.once('close', () => this.connections.delete(c));
  }

  /** Closes the connections that are between requests (and no longer lets idle ones stay open); see node's closeIdleConnections. */
  closeIdle(): void {
    this.closing = true;
    for (const c of this.connections) c.closeIfIdle();
  }

  /** Closes every connection the front holds. */
  closeAll(): void {
    this.closing = true;
    for (const c of this.connections) c.socket.destroy();
  }

  /** The front's connections by what they are doing: between requests, reading one, answering one, waiting for node:http's answer. */
  counts(): { idle: number; reading: number; answering: number; relayed: number } {
    const out = { idle: 0, reading: 0, answering: 0, relayed: 0 };
    for (const c of this.connections) {
      const state = c.state();
      if (state !== 'gone') out[state]++;
    }
    return out;
  }

  get isClosing(): boolean {
    return this.closing;
  }
}

type Mode =
  /** Between requests, or reading one. */
  | 'idle'
  /** The lane is answering a request. */
  | 'answering'
  /** A request was relayed to node:http, whose answer is not written yet. */
  | 'relayed'
  /** The socket went to node:http, or is closing. */
  | 'gone';

class Connection {
  private buf: Buffer | null = null;
  private mode: Mode = 'idle';
  private relay: Relay | null = null;
  /** Body bytes of the relayed request still to pass on. */
  private relayLeft = 0;
  /** The relayed request's answer is written (the connection reads on once its body has been passed on too). */
  private relayAnswered = false;
  /** When the request being read began (its first byte), for headersTimeout and requestTimeout. */
  private requestStart = 0;
  /** The socket's inactivity timeout now (ms): set only when it changes, since each change makes a timer. */
  private armed = -1;
  private pausedForRelay = false;
  private pausedForHold = false;
  /** The lane request whose head was read and whose body has not all arrived. */
  private waiting: { hit: DirectMatch; headers: IncomingHttpHeaders; need: number } | null = null;
  /** Chunks of the waiting request's body not yet joined to `buf` (joined once, when it is whole). */
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(
    private readonly front: HttpFront,
    readonly socket: Socket,
  ) {
    socket.on('data', this.onData);
    socket.on('end', this.onEnd);
    socket.on('error', this.onError);
    socket.on('close', this.onClose);
    socket.on('timeout', this.onTimeout);
    socket.setNoDelay(true);
    this.arm(front.server.headersTimeout);
  }

  private readonly onData = (chunk: Buffer): void => {
    if (this.mode === 'gone') return;
    if (this.buf === null && this.mode === 'idle') this.requestStart = performance.now();
    if (this.mode === 'relayed' && this.relayLeft > 0) {
      const n = Math.min(this.relayLeft, chunk.length);
      this.relayLeft -= n;
      this.pass(n === chunk.length ? chunk : chunk.subarray(0, n));
      if (this.relayLeft === 0 && this.relayAnswered) this.relayDone();
      if (n === chunk.length) return;
      chunk = chunk.subarray(n);
    }
    if (this.mode === 'idle' && this.waiting !== null && this.buf !== null) {
      // A lane request's body: joined once it is whole, not chunk by chunk (quadratic for a large one).
      this.pending.push(chunk);
      this.pendingBytes += chunk.length;
      if (this.buf.length + this.pendingBytes < this.waiting.need) {
        this.checkTimeouts(true);
        return;
      }
      this.joinPending();
      this.next();
      return;
    }
    this.buf = this.buf === null ? chunk : Buffer.concat([this.buf, chunk]);
    if (this.mode === 'idle') this.next();
    else if (this.buf !== null && this.buf.length > HOLD_BYTES && !this.pausedForHold) {
      this.pausedForHold = true;
      this.socket.pause();
    }
  };

  /**
   * The client ended its side. As node:http does (httpAllowHalfOpen off), the request in
   * progress is dropped and the connection closed: the lane then finds the client gone
   * (499 in the log), a relayed request ends inside node:http.
   */
  private readonly onEnd = (): void => {
    if (this.mode === 'relayed' && this.relay !== null) this.relay.push(null);
    else if (this.mode === 'idle' && this.buf !== null && begun(this.buf)) {
      // A request cut short: node:http's parser fails on the end, it answers 400 and closes.
      const waiting = this.waiting;
      this.gone();
      this.socket.write(BAD_REQUEST);
      this.socket.destroySoon();
      if (waiting !== null) this.clientGone(waiting);
    } else this.socket.end();
  };

  private readonly onError = (): void => {
    // ECONNRESET and the like: 'close' follows, which cleans up.
  };

  private readonly onClose = (): void => {
    const waiting = this.mode === 'idle' ? this.waiting : null;
    this.gone();
    if (waiting !== null) this.clientGone(waiting);
    const relay = this.relay;
    this.relay = null;
    relay?.destroy();
  };

  /**
   * The socket was inactive for the armed time. One timer serves every case (socket
   * activity restarts it, and it is set again only when its length changes): between
   * requests it is keepAliveTimeout and node's grace (headersTimeout before the first),
   * and the connection closes; while a request is read, checkTimeouts times it from its
   * first byte; while the lane or node:http answers it is ignored (the answer's write
   * restarts it).
   */
  private readonly onTimeout = (): void => {
    if (this.mode !== 'idle') return;
    if (this.buf === null) this.socket.destroy();
    else this.checkTimeouts(this.waiting !== null);
  };

  /** No request is read on this connection any more. */
  private gone(): void {
    this.mode = 'gone';
    this.buf = null;
    this.waiting = null;
    this.pending = [];
    this.pendingBytes = 0;
  }

  /** A lane request whose body never came whole ends as on the node:http path: a 499 in the log. */
  private clientGone(waiting: { hit: DirectMatch; headers: IncomingHttpHeaders }): void {
    void this.front.lane.serveParsed(waiting.hit, waiting.headers, this.socket, null, () => undefined);
  }

  private joinPending(): void {
    if (this.pendingBytes === 0) return;
    this.buf = this.buf === null ? Buffer.concat(this.pending) : Buffer.concat([this.buf, ...this.pending]);
    this.pending = [];
    this.pendingBytes = 0;
  }

  /**
   * node:http's limits for the request being read: headersTimeout for its head (`headDone`
   * false), requestTimeout for the whole of it; 0 turns either off. Past one, answers 408
   * and returns false; else arms the socket's timer for what is left.
   */
  private checkTimeouts(headDone: boolean): boolean {
    const server = this.front.server;
    const since = performance.now() - this.requestStart;
    let left = Infinity;
    if (!headDone && server.headersTimeout > 0) left = server.headersTimeout - since;
    if (server.requestTimeout > 0) left = Math.min(left, server.requestTimeout - since);
    if (left <= 0) {
      this.timedOut();
      return false;
    }
    this.arm(left === Infinity ? 0 : Math.ceil(left));
    return true;
  }

  private arm(ms: number): void {
    if (ms === this.armed) return;
    this.armed = ms;
    this.socket.setTimeout(ms);
  }

  private timedOut(): void {
    this.gone();
    this.socket.write(REQUEST_TIMEOUT);
    this.socket.destroySoon();
  }

  state(): 'idle' | 'reading' | 'answering' | 'relayed' | 'gone' {
    return this.mode === 'idle' && this.buf !== null ? 'reading' : this.mode;
  }

  closeIfIdle(): void {
    if (this.mode === 'idle' && this.buf === null) this.socket.destroy();
  }

  /** Reads the next request from the buffer, while the connection is between requests. */
  private next(): void {
    while (this.mode === 'idle' && this.buf !== null) {
      const buf = this.buf;
      const end = buf.indexOf(HEAD_END);
      if (end < 0) {
        // Too long, or already not the strict form: node:http decides now (400 at once for garbage, as before the front).
        if (buf.length > MAX_HEAD || !mayBeHead(buf)) return this.toNode();
        this.checkTimeouts(false);
        return;
      }
      if (end + 4 > MAX_HEAD) return this.toNode();
      const req = parseHead(buf.toString('latin1', 0, end));
      if (req === null) return this.toNode();
      const { method, url, minor, headers } = req;
      const te = headers['transfer-encoding'];
      const cl = headers['content-length'];
      if (te !== undefined || headers.upgrade !== undefined || method === 'CONNECT' || (cl !== undefined && !DIGITS.test(cl as string))) return this.toNode();
      const length = cl === undefined ? 0 : Number(cl);
      const connection = (headers.connection as string | undefined)?.toLowerCase();
      const direct =
        minor === 1 &&
        headers.host !== undefined &&
        headers.expect === undefined &&
        (connection === undefined || connection === 'keep-alive' || connection === 'close') &&
        length <= this.front.opts.bodyLimitBytes &&
        !(this.front.opts.cors && headers.origin !== undefined)
          ? this.front.lane.match({ headers, url, method })
          : null;
      if (direct === null) {
        this.relayOut(buf, end + 4, length);
        continue;
      }
      const need = end + 4 + length;
      const close = connection === 'close' || this.front.isClosing;
      if (buf.length < need) {
        this.waiting = { hit: direct, headers, need };
        this.checkTimeouts(true);
        return;
      }
      this.waiting = null;
      this.buf = need === buf.length ? null : buf.subarray(need);
      this.mode = 'answering';
      void this.front.lane.serveParsed(direct, headers, this.socket, buf.subarray(end + 4, need), (a) => this.answer(a, close));
    }
  }

  /** Writes the lane's answer as node:http writes it, then reads on. */
  private answer(a: DirectAnswer, close: boolean): void {
    if (this.mode !== 'answering' || this.socket.writableEnded) return; // the client went away meanwhile
    this.front.served++;
    const ka = this.front.server.keepAliveTimeout;
    const length = Buffer.byteLength(a.text);
    let head = `HTTP/1.1 ${a.status} ${STATUS_CODES[a.status] ?? 'unknown'}\r\nContent-Type: ${a.type}\r\nContent-Length: ${length}\r\n`;
    if (a.retryAfter !== null) head += `Retry-After: ${a.retryAfter}\r\n`;
    head += `Date: ${httpDate()}\r\n`;
    if (close) head += 'Connection: close\r\n\r\n';
    else head += ka > 0 ? `Connection: keep-alive\r\nKeep-Alive: timeout=${Math.floor(ka / 1000)}\r\n\r\n` : 'Connection: keep-alive\r\n\r\n';
    if (close) {
      this.mode = 'gone';
      // As node:http: the socket goes once the answer is written, whether or not the client closes its side.
      this.socket.write(head + a.text);
      this.socket.destroySoon();
      return;
    }
    this.socket.write(head + a.text);
    this.between();
  }

  /** A request is answered: read the next one, or wait for it. */
  private between(): void {
    this.mode = 'idle';
    if (this.pausedForHold) {
      this.pausedForHold = false;
      if (!this.pausedForRelay) this.socket.resume();
    }
    if (this.buf !== null) {
      this.requestStart = performance.now();
      this.next();
    } else if (this.front.isClosing) this.socket.destroy();
    else {
      const ka = this.front.server.keepAliveTimeout;
      this.arm(ka > 0 ? ka + KEEP_ALIVE_GRACE_MS : 0);
    }
  }

  /** Relays the request at the start of the buffer (head `headBytes`, body `length`) to node:http. */
  private relayOut(buf: Buffer, headBytes: number, length: number): void {
    if (this.relay === null) {
      this.relay = new Relay(this);
      this.front.nodeConnection(this.relay);
    }
    this.mode = 'relayed';
    this.relayAnswered = false;
    const take = Math.min(buf.length, headBytes + length);
    this.relayLeft = headBytes + length - take;
    this.buf = take === buf.length ? null : buf.subarray(take);
    this.pass(buf.subarray(0, take));
  }

  private pass(bytes: Buffer): void {
    if (this.relay !== null && !this.relay.push(bytes) && !this.pausedForRelay) {
      this.pausedForRelay = true;
      this.socket.pause();
    }
  }

  /** node:http wants more of the relayed request. */
  relayDrained(): void {
    if (!this.pausedForRelay) return;
    this.pausedForRelay = false;
    if (!this.pausedForHold) this.socket.resume();
  }

  /**
   * node:http began answering a request read through the relay: any answer, also the ones
   * it writes without a 'request' event (417 for an Expect it does not know, 400 without
   * Host, 503 over maxRequestsPerSocket).
   */
  relayedRequest(res: ServerResponse): void {
    const done = (): void => {
      if (this.mode !== 'relayed') return;
      // node:http ends the stream after an answer that closes the connection.
      if (this.relay === null || this.relay.writableEnded || !res.writableFinished) return;
      this.relayAnswered = true;
      if (this.relayLeft === 0) this.relayDone();
    };
    // This listener comes before node's own (resOnFinish, which ends the relay after a
    // closing answer): look once that has run.
    res.once('finish', () => process.nextTick(done));
  }

  private relayDone(): void {
    this.relayAnswered = false;
    this.between();
  }

  /** node:http ended the relay (its answer closes the connection). */
  relayEnded(): void {
    this.mode = 'gone';
    this.socket.destroySoon();
  }

  /** node:http destroyed the relay: with a request in it, the connection goes too; an idle one is only dropped. */
  relayDestroyed(relay: Relay): void {
    if (this.relay !== relay) return;
    this.relay = null;
    if (this.mode === 'relayed') {
      this.mode = 'gone';
      this.socket.destroy();
    } else if (this.mode === 'idle' && this.buf === null && this.front.isClosing) this.socket.destroy();
  }

  /** Hands the socket and what was read of it to node:http for good. */
  private toNode(): void {
    this.mode = 'gone';
    this.waiting = null;
    const socket = this.socket;
    const relay = this.relay;
    this.relay = null;
    relay?.destroy();
    socket.pause();
    socket.removeListener('data', this.onData);
    socket.removeListener('end', this.onEnd);
    socket.removeListener('error', this.onError);
    socket.removeListener('close', this.onClose);
    socket.removeListener('timeout', this.onTimeout);
    socket.setTimeout(0);
    this.joinPending();
    if (this.buf !== null) socket.unshift(this.buf);
    this.buf = null;
    this.front.nodeConnection(socket);
    socket.resume();
  }
}

/**
 * The stream node:http reads a relayed request from and writes its answer to: the
 * connection pushes the request's bytes in; what node:http writes goes to the socket.
 */
class Relay extends Duplex {
  private message: ServerResponse | null = null;

  constructor(readonly connection: Connection) {
    super({ allowHalfOpen: true });
    standsFor(this, connection.socket);
  }

  /** node:http's answer in progress on this stream (ServerResponse.assignSocket/detachSocket set it). */
  get _httpMessage(): ServerResponse | null {
    return this.message;
  }
  set _httpMessage(res: ServerResponse | null) {
    this.message = res;
    if (res != null) this.connection.relayedRequest(res);
  }

  get remoteAddress(): string | undefined {
    return this.connection.socket.remoteAddress;
  }
  get remotePort(): number | undefined {
    return this.connection.socket.remotePort;
  }
  get remoteFamily(): string | undefined {
    return this.connection.socket.remoteFamily;
  }
  get localAddress(): string | undefined {
    return this.connection.socket.localAddress;
  }
  get localPort(): number | undefined {
    return this.connection.socket.localPort;
  }
  /** Koa's ctx.protocol and ctx.secure read it. */
  get encrypted(): boolean | undefined {
    return this.connection.socket instanceof TLSSocket ? true : undefined;
  }

  override _read(): void {
    this.connection.relayDrained();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    const socket = this.connection.socket;
    if (socket.destroyed) cb(new Error('the client connection is closed'));
    else socket.write(chunk, cb);
  }

  override _writev(chunks: Array<{ chunk: Buffer }>, cb: (err?: Error | null) => void): void {
    const socket = this.connection.socket;
    if (socket.destroyed) {
      cb(new Error('the client connection is closed'));
      return;
    }
    socket.cork();
    for (let i = 0; i < chunks.length - 1; i++) socket.write(chunks[i].chunk);
    socket.write(chunks[chunks.length - 1].chunk, cb);
    socket.uncork();
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.connection.relayEnded();
    cb();
  }

  override _destroy(err: Error | null, cb: (err: Error | null) => void): void {
    this.connection.relayDestroyed(this);
    cb(err);
  }
}

/** Whether `buf` holds a byte of a request (not only the empty lines node:http skips before one). */
function begun(buf: Buffer): boolean {
  for (let i = 0; i < buf.length; i++) if (buf[i] !== 0x0d && buf[i] !== 0x0a) return true;
  return false;
}

/**
 * False when `buf`, the start of a head whose end has not come, is already outside the
 * strict form: a first byte no method begins with, a bare LF, a request line that does
 * not parse.
 */
function mayBeHead(buf: Buffer): boolean {
  if (buf[0] < 0x41 || buf[0] > 0x5a) return false;
  let lf = buf.indexOf(0x0a);
  if (lf < 0) return true;
  if (buf[lf - 1] !== 0x0d || !REQUEST_LINE.test(buf.toString('latin1', 0, lf - 1))) return false;
  for (lf = buf.indexOf(0x0a, lf + 1); lf >= 0; lf = buf.indexOf(0x0a, lf + 1)) if (buf[lf - 1] !== 0x0d) return false;
  return true;
}

interface Head {
  method: string;
  url: string;
  minor: number;
  headers: IncomingHttpHeaders;
}

/** A request head (without its blank line) in the strict form the front reads; null for anything else. */
function parseHead(text: string): Head | null {
  const lines = text.split('\r\n');
  const first = REQUEST_LINE.exec(lines[0]);
  if (first === null) return null;
  const headers: IncomingHttpHeaders = {};
  for (let i = 1; i < lines.length; i++) {
    const m = HEADER_LINE.exec(lines[i]);
    if (m === null) return null;
    const name = m[1].toLowerCase();
    if (headers[name] !== undefined || name === '__proto__') return null;
    headers[name] = m[2];
  }
  return { method: first[1], url: first[2], minor: first[3] === '1' ? 1 : 0, headers };
}
