/**
 * One HTTP/2 connection (RFC 9113) from the client side, on a socket (TCP, or TLS after
 * ALPN chose `h2`), carrying unary gRPC calls: the client peers call each other's points
 * service with (ts/api/p2p/h2-unary.ts).
 *
 * Why not node:http2: there each call is a stream object (a Duplex with its events, an
 * async resource, its headers mapped into nghttp2 and back), which was the largest single
 * part of a calling peer's event loop (docs/replication.md, "Limits, known"). Here a call
 * is a small record: its HEADERS and DATA are queued and every frame of one event-loop
 * turn leaves in one write, and a socket read is parsed in one pass, as the public gRPC
 * server's connection does (ts/api/grpc/h2/connection.ts).
 *
 * What it speaks: SETTINGS, HEADERS with CONTINUATION, DATA both ways under flow control,
 * RST_STREAM, PING, GOAWAY, WINDOW_UPDATE; PRIORITY and unknown frame types are ignored,
 * PUSH_PROMISE is a protocol error (push is disabled). Requests are never compressed;
 * compressed answers are refused (no grpc-accept-encoding is sent, so a server does not
 * compress).
 *
 * Owns: one connection's streams, windows and outgoing queue; how each call ends.
 * Must never: encode or decode messages (the caller gives and takes bytes), or reconnect
 * (the pool does).
 */

import type { Socket } from 'node:net';

import { status as Code } from '@grpc/grpc-js';

import { ConnectionError, dataOf, DEFAULT_WINDOW, ERR, FLAG, FRAME, frameHeader, grownConnectionWindow, headerBlockFrames, headerBlockOf, MAX_WINDOW, MIN_MAX_FRAME, PREFACE, readFrames, readSettings, SETTING, settingsPayload, u32, windowIncrement } from './frames';
import { encodeHeaders, firstValues, HpackDecoder, HpackError } from './hpack';

const OUR_HEADER_TABLE = 4096;
/** Receive window per stream and for the connection: an answer up to this size is never held up by flow control. */
const OUR_WINDOW = 4 * 1024 * 1024;
/** Largest header block accepted (an error's message travels in one: grpc-message). */
const MAX_HEADER_BLOCK = 1024 * 1024;
/** Received bytes not yet handed back with WINDOW_UPDATE that make us send one at once. */
const UPDATE_AT = OUR_WINDOW / 4;
/** The last stream id a connection opens; then it takes no new calls (the pool opens another). */
const LAST_STREAM_ID = 2 ** 31 - 1;

/** How a call ended: OK with the answer's message, or another status with its message and trailers. */
export type CallEnd = (code: number, details: string, trailers: Map<string, string> | null, message: Buffer | null) => void;

interface Stream {
  id: number;
  done: CallEnd;
  /** Request bytes (gRPC frame) not yet sent for lack of window, or null once all are. */
  pending: Buffer | null;
  sendWindow: number;
  /** Response headers seen (the first header block). */
  headers: Map<string, string> | null;
  data: Buffer[];
  /** Message bytes of the answer (for the size limit). */
  dataBytes: number;
  /** DATA payload bytes received, padding included (what flow control counts). */
  received: number;
  /** Of those, the bytes already handed back to the server's window. */
  credited: number;
  ended: boolean;
}

/** A request waiting for the server's stream limit. */
interface Queued {
  path: string;
  timeout: string | null;
  frame: Buffer;
  done: CallEnd;
  call: ClientCall;
}

/** A call in flight on a connection: cancel() ends it as CANCELLED at once (RST_STREAM to the server). */
export interface ClientCall {
  cancel(): void;
}

/** The status code of an HTTP status that came without grpc-status (gRPC over HTTP/2's table). */
function codeOfHttpStatus(status: string | undefined): number {
  switch (status) {
    case '400':
      return Code.INTERNAL;
    case '401':
      return Code.UNAUTHENTICATED;
    case '403':
      return Code.PERMISSION_DENIED;
    case '404':
      return Code.UNIMPLEMENTED;
    case '429':
    case '502':
    case '503':
    case '504':
      return Code.UNAVAILABLE;
    default:
      return Code.UNKNOWN;
  }
}

/** The status code of a stream the server reset. */
function codeOfReset(code: number): number {
  if (code === ERR.REFUSED_STREAM) return Code.UNAVAILABLE;
  if (code === ERR.CANCEL) return Code.CANCELLED;
  if (code === ERR.ENHANCE_YOUR_CALM) return Code.RESOURCE_EXHAUSTED;
  if (code === ERR.INADEQUATE_SECURITY) return Code.PERMISSION_DENIED;
  return Code.INTERNAL;
}

function decodeMessage(s: string): string {
  if (!s.includes('%')) return s;
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

export class Http2ClientConnection {
  private readonly decoder = new HpackDecoder(OUR_HEADER_TABLE, MAX_HEADER_BLOCK);
  private readonly streams = new Map<number, Stream>();
  private readonly queued: Queued[] = [];
  private input: Buffer = Buffer.alloc(0);
  private nextId = 1;
  private continuing: { id: number; stream: Stream | null; parts: Buffer[]; bytes: number; endStream: boolean } | null = null;
  private sendWindow = DEFAULT_WINDOW;
  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrame = MIN_MAX_FRAME;
  private peerMaxStreams = Infinity;
  private consumed = 0;
  private readonly out: Buffer[] = [];
  private flushScheduled = false;
  /** The server sent GOAWAY (or we ran out of stream ids): no new calls. */
  private goingAway = false;
  private dead = false;
  /** Why the connection ended (its socket's error), once it has. */
  private failure: string | null = null;
  /** Header blocks of each path, without the deadline (which differs per call). */
  private readonly blocks = new Map<string, Buffer>();
  private readonly flushNow = () => this.flush();
  private readonly onFrameBound = (type: number, flags: number, id: number, payload: Buffer) => this.onFrame(type, flags, id, payload);
  private readonly frameBound = (type: number, flags: number, id: number, payload: Buffer) => this.frame(type, flags, id, payload);
  private readonly isDead = () => this.dead;

  /** The server's SETTINGS arrived: the connection is up. */
  ready = false;
  /** Runs once when the connection ends, with the reason (null for a clean end). */
  onClose: ((reason: string | null) => void) | null = null;
  /** Runs once when the server's first SETTINGS arrive. */
  onReady: (() => void) | null = null;

  constructor(
    private readonly socket: Socket,
    private readonly authority: string,
    private readonly scheme: 'http' | 'https',
    private readonly maxMessageBytes: number,
  ) {
    socket.setNoDelay(true);
    this.out.push(PREFACE);
    this.frame(FRAME.SETTINGS, 0, 0, settingsPayload([
      [SETTING.HEADER_TABLE_SIZE, OUR_HEADER_TABLE],
      [SETTING.ENABLE_PUSH, 0],
      [SETTING.INITIAL_WINDOW_SIZE, OUR_WINDOW],
      [SETTING.MAX_FRAME_SIZE, MIN_MAX_FRAME],
      [SETTING.MAX_HEADER_LIST_SIZE, MAX_HEADER_BLOCK],
    ]));
    this.frame(FRAME.WINDOW_UPDATE, 0, 0, u32(OUR_WINDOW - DEFAULT_WINDOW));
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (err: Error) => {
      this.failure ??= err.message;
    });
    socket.on('close', () => this.onSocketClose());
  }

  /** Whether a new call may start here. */
  get usable(): boolean {
    return !this.dead && !this.goingAway;
  }

  /** Calls in flight (and waiting for the server's stream limit). */
  get inFlight(): number {
    return this.streams.size + this.queued.length;
  }

  /**
   * Starts a unary call of `path` with `message` (serialized); `timeout` is sent as
   * `grpc-timeout` (the caller keeps its own timer). `done` runs exactly once.
   */
  call(path: string, message: Buffer, timeout: string | null, done: CallEnd): ClientCall {
    const frame = Buffer.allocUnsafe(5 + message.length);
    frame[0] = 0;
    frame.writeUInt32BE(message.length, 1);
    message.copy(frame, 5);
    const q: Queued = { path, timeout, frame, done, call: { cancel: () => undefined } };
    if (!this.usable) {
      const why = this.failure ?? 'the connection is closing';
      queueMicrotask(() => done(Code.UNAVAILABLE, why, null, null));
      return q.call;
    }
    if (this.streams.size >= this.peerMaxStreams) {
      this.queued.push(q);
      q.call.cancel = () => {
        const i = this.queued.indexOf(q);
        if (i < 0) return;
        this.queued.splice(i, 1);
        done(Code.CANCELLED, 'call cancelled', null, null);
        this.maybeEnd();
      };
      return q.call;
    }
    this.open(q);
    return q.call;
  }

  private open(q: Queued): void {
    const id = this.nextId;
    this.nextId += 2;
    if (this.nextId > LAST_STREAM_ID) {
      // Stream ids run out: this call is the last; the ones waiting go back as unavailable (not sent).
      this.goingAway = true;
      for (const w of this.queued.splice(0)) queueMicrotask(() => w.done(Code.UNAVAILABLE, 'the connection ran out of stream ids', null, null));
    }
    const s: Stream = { id, done: q.done, pending: null, sendWindow: this.peerInitialWindow, headers: null, data: [], dataBytes: 0, received: 0, credited: 0, ended: false };
    this.streams.set(id, s);
    q.call.cancel = () => {
      if (s.ended) return;
      this.reset(s, ERR.CANCEL, 'call cancelled', Code.CANCELLED);
    };
    let block = this.blocks.get(q.path);
    if (block === undefined) {
      block = encodeHeaders([
        [':method', 'POST'],
        [':scheme', this.scheme],
        [':path', q.path],
        [':authority', this.authority],
        ['content-type', 'application/grpc'],
        ['te', 'trailers'],
      ]);
      if (this.blocks.size < 64) this.blocks.set(q.path, block);
    }
    if (q.timeout !== null) block = Buffer.concat([block, encodeHeaders([['grpc-timeout', q.timeout]])]);
    this.headersFrame(id, block);
    s.pending = q.frame;
    this.pump(s);
  }

  private headersFrame(id: number, block: Buffer): void {
    headerBlockFrames(id, block, this.peerMaxFrame, false, this.frameBound);
  }

  /** Sends what flow control allows of `s`'s request; END_STREAM with its last byte. */
  private pump(s: Stream): void {
    while (this.sendOne(s));
  }

  /** Sends the next DATA frame of `s`'s request, if there is one and the windows allow: whether it did. */
  private sendOne(s: Stream): boolean {
    const p = s.pending;
    if (p === null || s.ended) return false;
    const k = Math.min(p.length, this.peerMaxFrame, s.sendWindow, this.sendWindow);
    if (k <= 0) return false;
    const last = k === p.length;
    this.frame(FRAME.DATA, last ? FLAG.END_STREAM : 0, s.id, p.subarray(0, k));
    s.sendWindow -= k;
    this.sendWindow -= k;
    s.pending = last ? null : p.subarray(k);
    return true;
  }

  /**
   * After the windows grew: every stream with request bytes left gets a frame in turn,
   * round after round, so a small call opened behind large uploads goes out in the first
   * round instead of after them.
   */
  private pumpAll(): void {
    for (let sent = true; sent && this.sendWindow > 0; ) {
      sent = false;
      for (const s of this.streams.values()) if (this.sendOne(s)) sent = true;
    }
  }

  // -- input ----------------------------------------------------------------------------

  private onData(chunk: Buffer): void {
    if (this.dead) return;
    this.input = this.input.length === 0 ? chunk : Buffer.concat([this.input, chunk]);
    try {
      const buf = this.input;
      const at = readFrames(buf, MIN_MAX_FRAME, this.onFrameBound, this.isDead);
      if (this.dead) return;
      this.input = at === buf.length ? Buffer.alloc(0) : buf.subarray(at);
      this.windowUpdates();
    } catch (err) {
      if (err instanceof ConnectionError) this.fatal(err.code, err.message);
      else if (err instanceof HpackError) this.fatal(ERR.COMPRESSION_ERROR, err.message);
      else throw err;
    }
  }

  private onFrame(type: number, flags: number, id: number, payload: Buffer): void {
    if (this.continuing !== null && (type !== FRAME.CONTINUATION || id !== this.continuing.id)) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'a header block was interrupted');
    switch (type) {
      case FRAME.DATA:
        return this.onDataFrame(flags, id, payload);
      case FRAME.HEADERS: {
        if (id === 0) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'HEADERS on stream 0');
        if (id % 2 === 0 || id >= this.nextId) throw new ConnectionError(ERR.PROTOCOL_ERROR, `HEADERS on stream ${id}, which this client did not open`);
        const block = headerBlockOf(flags, payload);
        // A stream we ended (cancelled, or reset) may still be answered: the block is decoded all the same, the table must follow it.
        const s = this.streams.get(id) ?? null;
        const endStream = (flags & FLAG.END_STREAM) !== 0;
        if (flags & FLAG.END_HEADERS) this.headerBlockDone(s, block, endStream);
        else this.continuing = { id, stream: s, parts: [Buffer.from(block)], bytes: block.length, endStream };
        return;
      }
      case FRAME.CONTINUATION: {
        const c = this.continuing;
        if (c === null) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'CONTINUATION without HEADERS');
        c.parts.push(Buffer.from(payload));
        c.bytes += payload.length;
        if (c.bytes > MAX_HEADER_BLOCK) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'header block too large');
        if (flags & FLAG.END_HEADERS) {
          this.continuing = null;
          this.headerBlockDone(c.stream, Buffer.concat(c.parts), c.endStream);
        }
        return;
      }
      case FRAME.RST_STREAM: {
        if (id === 0 || payload.length !== 4) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'bad RST_STREAM');
        const s = this.streams.get(id);
        if (s !== undefined) {
          const code = payload.readUInt32BE(0);
          this.end(s, codeOfReset(code), `stream reset by the server (HTTP/2 error ${code})`, null, null);
        }
        return;
      }
      case FRAME.SETTINGS:
        return this.onSettings(flags, id, payload);
      case FRAME.PING:
        if (id !== 0 || payload.length !== 8) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'bad PING');
        if (!(flags & FLAG.ACK)) this.frame(FRAME.PING, FLAG.ACK, 0, Buffer.from(payload));
        return;
      case FRAME.GOAWAY: {
        if (id !== 0 || payload.length < 8) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'bad GOAWAY');
        this.goingAway = true;
        const last = payload.readUInt32BE(0) & 0x7fffffff;
        const code = payload.readUInt32BE(4);
        // A GOAWAY for an error says why the connection ends (and the pool backs off).
        if (code !== ERR.NO_ERROR) this.failure ??= `the server ended the connection (HTTP/2 error ${code}${payload.length > 8 ? `: ${payload.subarray(8).toString('utf8')}` : ''})`;
        // Streams above the last one the server took were not processed: they fail as unavailable (safe to retry).
        for (const s of [...this.streams.values()]) if (s.id > last) this.end(s, Code.UNAVAILABLE, 'the server is going away (GOAWAY) and did not take the call', null, null);
        for (const q of this.queued.splice(0)) q.done(Code.UNAVAILABLE, 'the server is going away (GOAWAY)', null, null);
        this.maybeEnd();
        return;
      }
      case FRAME.WINDOW_UPDATE: {
        const inc = windowIncrement(payload);
        if (id === 0) {
          this.sendWindow = grownConnectionWindow(this.sendWindow, inc);
          this.pumpAll();
        } else {
          const s = this.streams.get(id);
          if (s === undefined) return;
          s.sendWindow += inc;
          if (inc === 0 || s.sendWindow > MAX_WINDOW) return this.reset(s, inc === 0 ? ERR.PROTOCOL_ERROR : ERR.FLOW_CONTROL_ERROR, 'the server broke flow control');
          this.pump(s);
        }
        return;
      }
      case FRAME.PUSH_PROMISE:
        throw new ConnectionError(ERR.PROTOCOL_ERROR, 'PUSH_PROMISE, though push is disabled');
      default:
        return; // PRIORITY and unknown types
    }
  }

  private onSettings(flags: number, id: number, payload: Buffer): void {
    const settings = readSettings(id, flags & FLAG.ACK ? Buffer.alloc(0) : payload);
    if (flags & FLAG.ACK) return;
    for (const [key, value] of settings) {
      if (key === SETTING.INITIAL_WINDOW_SIZE) {
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const s of this.streams.values()) {
          s.sendWindow += delta;
          if (s.sendWindow > MAX_WINDOW) throw new ConnectionError(ERR.FLOW_CONTROL_ERROR, 'a stream window above 2^31-1');
        }
      } else if (key === SETTING.MAX_FRAME_SIZE) {
        this.peerMaxFrame = value;
      } else if (key === SETTING.MAX_CONCURRENT_STREAMS) {
        this.peerMaxStreams = value;
      }
    }
    this.frame(FRAME.SETTINGS, FLAG.ACK, 0, Buffer.alloc(0));
    this.pumpAll();
    this.startQueued();
    if (!this.ready) {
      this.ready = true;
      const f = this.onReady;
      this.onReady = null;
      f?.();
    }
  }

  private headerBlockDone(s: Stream | null, block: Buffer, endStream: boolean): void {
    const fields = this.decoder.decode(block);
    if (s === null || s.ended) return;
    const h = firstValues(fields);
    if (s.headers === null) {
      s.headers = h;
      // A trailers-only answer: the status is in this one block.
      if (endStream) this.finish(s, h);
      else if (h.get(':status') !== '200') this.reset(s, ERR.CANCEL, `HTTP status ${h.get(':status') ?? '(none)'}`, codeOfHttpStatus(h.get(':status')));
      return;
    }
    if (!endStream) return this.reset(s, ERR.PROTOCOL_ERROR, 'a second header block without END_STREAM');
    this.finish(s, h);
  }

  /** The answer is complete: `trailers` carry its status. */
  private finish(s: Stream, trailers: Map<string, string>): void {
    const st = trailers.get('grpc-status');
    if (st === undefined) {
      const http = s.headers?.get(':status');
      this.end(s, http === '200' ? Code.UNKNOWN : codeOfHttpStatus(http), http === '200' ? 'the answer carried no grpc-status' : `HTTP status ${http ?? '(none)'}`, trailers, null);
      return;
    }
    const code = /^\d{1,3}$/.test(st) ? Number(st) : Code.UNKNOWN;
    const details = decodeMessage(trailers.get('grpc-message') ?? '');
    if (code !== Code.OK) {
      this.end(s, code, details, trailers, null);
      return;
    }
    const body = s.data.length === 1 ? s.data[0] : Buffer.concat(s.data);
    if (body.length < 5 || body[0] !== 0 || body.readUInt32BE(1) !== body.length - 5) {
      this.end(s, Code.INTERNAL, `unexpected answer framing (${body.length} bytes${body[0] ? ', compressed' : ''})`, trailers, null);
      return;
    }
    this.end(s, Code.OK, details, trailers, body.subarray(5));
  }

  private onDataFrame(flags: number, id: number, payload: Buffer): void {
    if (id === 0) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'DATA on stream 0');
    this.consumed += payload.length;
    const s = this.streams.get(id);
    if (s === undefined || s.ended) return; // a stream we ended: its window is all that counts
    if (s.headers === null) return this.reset(s, ERR.PROTOCOL_ERROR, 'DATA before the answer\'s headers');
    s.received += payload.length;
    const data = dataOf(flags, payload);
    if (data.length > 0) {
      s.dataBytes += data.length;
      if (s.dataBytes > this.maxMessageBytes + 5) return this.reset(s, ERR.CANCEL, `answer larger than ${this.maxMessageBytes} bytes`, Code.RESOURCE_EXHAUSTED);
      // A copy: the socket's chunk is kept no longer than this read.
      s.data.push(Buffer.from(data));
    }
    if (flags & FLAG.END_STREAM) this.end(s, Code.INTERNAL, 'the answer ended without trailers', null, null);
  }

  private windowUpdates(): void {
    if (this.consumed >= UPDATE_AT) this.connectionUpdate();
    for (const s of this.streams.values()) {
      if (s.received - s.credited >= UPDATE_AT) {
        this.frame(FRAME.WINDOW_UPDATE, 0, s.id, u32(s.received - s.credited));
        s.credited = s.received;
      }
    }
  }

  private connectionUpdate(): void {
    if (this.consumed === 0) return;
    const n = this.consumed;
    this.consumed = 0;
    this.frame(FRAME.WINDOW_UPDATE, 0, 0, u32(n));
  }

  // -- ending ---------------------------------------------------------------------------

  /** Ends a stream with RST_STREAM `code`, the call with `status` (INTERNAL unless given). */
  private reset(s: Stream, code: number, details: string, status: number = Code.INTERNAL): void {
    if (s.ended) return;
    this.frame(FRAME.RST_STREAM, 0, s.id, u32(code));
    s.pending = null;
    this.end(s, status, details, null, null);
  }

  /** The call of `s` ends: the only place a call's callback runs (for a started stream). */
  private end(s: Stream, code: number, details: string, trailers: Map<string, string> | null, message: Buffer | null): void {
    if (s.ended) return;
    s.ended = true;
    // The answer came before the whole request went out (the server answered early, as
    // when a request is over its size limit): our half of the stream is closed with a
    // reset, or the server would keep it open, counted against its stream limit.
    if (s.pending !== null) this.frame(FRAME.RST_STREAM, 0, s.id, u32(ERR.CANCEL));
    s.pending = null;
    s.data = [];
    this.streams.delete(s.id);
    try {
      s.done(code, details, trailers, message);
    } finally {
      this.startQueued();
      this.maybeEnd();
    }
  }

  private startQueued(): void {
    while (this.queued.length > 0 && this.usable && this.streams.size < this.peerMaxStreams) this.open(this.queued.shift()!);
  }

  /** No new calls; the connection ends once the calls in flight are answered. */
  close(): void {
    this.goingAway = true;
    for (const q of this.queued.splice(0)) q.done(Code.UNAVAILABLE, 'the client closed before the call was sent', null, null);
    this.maybeEnd();
  }

  /** Closes at once: every call in flight ends as UNAVAILABLE with `reason`. */
  destroy(reason: string): void {
    this.failure ??= reason;
    this.socket.destroy();
    this.onSocketClose();
  }

  private fatal(code: number, message: string): void {
    this.frame(FRAME.GOAWAY, 0, 0, Buffer.concat([u32(0), u32(code), Buffer.from(message, 'utf8')]));
    this.flush();
    this.failure ??= `HTTP/2 connection error: ${message}`;
    this.socket.end();
    this.onSocketClose();
  }

  /** After GOAWAY, the connection ends once no call is in flight. */
  private maybeEnd(): void {
    if (!this.goingAway || this.dead || this.streams.size > 0 || this.queued.length > 0) return;
    this.flush();
    this.socket.end();
    this.onSocketClose();
  }

  private onSocketClose(): void {
    if (this.dead) return;
    this.dead = true;
    const reason = this.failure ?? (this.goingAway ? null : 'the connection closed');
    const why = this.failure ?? 'the connection closed';
    for (const s of [...this.streams.values()]) this.end(s, Code.UNAVAILABLE, why, null, null);
    for (const q of this.queued.splice(0)) q.done(Code.UNAVAILABLE, why, null, null);
    this.out.length = 0;
    const f = this.onClose;
    this.onClose = null;
    f?.(reason);
  }

  // -- output ---------------------------------------------------------------------------

  /** Queues a frame; every frame of this turn leaves in one write. */
  private frame(type: number, flags: number, id: number, payload: Buffer): void {
    if (this.dead) return;
    this.out.push(frameHeader(type, flags, id, payload.length), payload);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(this.flushNow);
    }
  }

  private flush(): void {
    if (!this.dead && this.out.length > 0) this.connectionUpdate();
    this.flushScheduled = false;
    if (this.dead || this.out.length === 0) return;
    const chunks = this.out.splice(0);
    this.socket.write(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks));
  }
}
