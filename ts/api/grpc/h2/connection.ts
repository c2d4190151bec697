/**
 * One HTTP/2 connection (RFC 9113) of the public gRPC API, on a socket (TCP, or TLS after
 * ALPN chose `h2`), carrying unary gRPC calls: the framing, HPACK (hpack.ts), flow
 * control both ways, and the gRPC message framing of one request and one answer per
 * stream.
 *
 * Why not node:http2 or grpc-js: each stream there is a Duplex stream object with its
 * events, and every frame crosses between nghttp2 and JavaScript; a unary call cost the
 * event loop about twice what an HTTP/1.1 request costs (bench/README.md, "gRPC
 * performance"). Here a socket read is parsed in one pass, every frame for every stream
 * it carries, and the answers of one event-loop turn leave in one write.
 *
 * What it serves: a client's streams (odd ids, ascending), HEADERS with CONTINUATION,
 * padding and priority fields, DATA, RST_STREAM, SETTINGS, PING, WINDOW_UPDATE, GOAWAY;
 * PRIORITY frames and unknown frame types are ignored, PUSH_PROMISE from a client is a
 * protocol error. A request message may arrive compressed with `gzip` or `deflate`.
 * Answers are never compressed and carry no dynamic-table entries.
 *
 * Owns: one connection's state. Must never: decode protobuf or decide access (the
 * handler it is given does).
 */

import type { Socket } from 'node:net';
import * as zlib from 'node:zlib';

import { status as Code } from '@grpc/grpc-js';

import { ConnectionError, dataOf, ERR, FLAG, FRAME, frameHeader, grownConnectionWindow, headerBlockFrames, headerBlockOf, MAX_WINDOW, PREFACE, readFrames, readSettings, SETTING, settingsPayload, u32, windowIncrement } from '../../h2/frames';
import { encodeHeaders, firstValues, HpackDecoder, HpackError, type HeaderList } from '../../h2/hpack';

/** What this side announces. */
const OUR_HEADER_TABLE = 4096;
const OUR_MAX_FRAME = 16384;
const OUR_MAX_STREAMS = 1000;
/** Receive window per stream and for the connection: a request up to this size is never held up by flow control. */
const OUR_WINDOW = 4 * 1024 * 1024;
/** Largest header block accepted (all HEADERS and CONTINUATION of one block). */
const MAX_HEADER_BLOCK = 64 * 1024;
/** Received bytes not yet handed back with WINDOW_UPDATE that make us send one at once. */
const UPDATE_AT = OUR_WINDOW / 4;


/** One unary call as the transport received it. */
export interface GrpcRequest {
  /** `:path`, e.g. `/qdrant.Points/Query`. */
  path: string;
  /** Request headers (metadata), by lower-case name, first value of each. */
  headers: Map<string, string>;
  /** The request message, decompressed. */
  message: Buffer;
  /** The client's deadline (ms since the epoch, `Date.now()` clock), or null. */
  deadline: number | null;
  /** The remote address of the connection. */
  peer: string | null;
  /**
   * The connection the call came on, as an identity: the same value for every call
   * multiplexed on one connection, another for each other connection (several
   * connections from one host share `peer`).
   */
  connection: object;
}

/** The transport side of a call the handler answers, once. */
export interface GrpcCall {
  /** True once the client cancelled (RST_STREAM) or the connection ended. */
  readonly cancelled: boolean;
  /** Called once if the client cancels before the answer. */
  onCancel: (() => void) | null;
  /** Answers OK with this message (already serialized). */
  ok(message: Buffer): void;
  /** Answers a status other than OK. */
  fail(code: number, details: string): void;
}

export type CallHandler = (req: GrpcRequest, call: GrpcCall) => void;
/** Answers a call the transport refuses before the handler sees it (size, framing, compression). */
export type Refusal = (path: string, code: number, details: string) => void;

export interface ConnectionOptions {
  /** Largest request message, bytes. */
  maxMessageBytes: number;
  /** Counts (and may log) a call the transport answered itself. */
  refused: Refusal;
  onError: (err: Error) => void;
}

interface Stream {
  id: number;
  /** Request headers once their block is complete. */
  headers: HeaderList | null;
  data: Buffer[];
  dataBytes: number;
  /** The client half-closed (END_STREAM received). */
  remoteEnded: boolean;
  /** We sent END_STREAM (the answer is complete, or queued complete). */
  answered: boolean;
  /** The stream is gone (closed both ways, or reset). */
  closed: boolean;
  sendWindow: number;
  /** Answer DATA not yet sent (flow control), and the trailers to send after it. */
  pending: Buffer | null;
  trailers: Buffer | null;
  call: CallState | null;
  /** Request data beyond the limit: the stream is answered and the rest is dropped. */
  discarding: boolean;
  /** DATA payload bytes received, padding included (what flow control counts). */
  received: number;
  /** Of those, the bytes already handed back to the client's window with WINDOW_UPDATE. */
  credited: number;
  /** Counted in `active`: started (a handler runs, or the transport answers), and not yet ended. */
  started: boolean;
  ended: boolean;
}

class CallState implements GrpcCall {
  cancelled = false;
  onCancel: (() => void) | null = null;
  done = false;

  constructor(
    private readonly conn: Http2Connection,
    private readonly stream: Stream,
  ) {}

  ok(message: Buffer): void {
    if (this.done) return;
    this.done = true;
    this.conn.answer(this.stream, Code.OK, '', message);
  }

  fail(code: number, details: string): void {
    if (this.done) return;
    this.done = true;
    this.conn.answer(this.stream, code, details, null);
  }

  cancel(): void {
    if (this.cancelled || this.done) return;
    this.cancelled = true;
    const f = this.onCancel;
    this.onCancel = null;
    f?.();
  }
}

/** `grpc-timeout` (gRPC over HTTP/2: up to 8 digits and a unit) in milliseconds, or null. */
export function parseTimeout(value: string | undefined): number | null {
  if (value === undefined) return null;
  const m = /^(\d{1,8})([HMSmun])$/.exec(value);
  if (m === null) return null;
  const n = Number(m[1]);
  switch (m[2]) {
    case 'H':
      return n * 3_600_000;
    case 'M':
      return n * 60_000;
    case 'S':
      return n * 1000;
    case 'm':
      return n;
    case 'u':
      return n / 1000;
    default:
      return n / 1_000_000;
  }
}

/** `grpc-message`'s percent-encoding: UTF-8, with bytes outside printable ASCII and `%` escaped. */
export function percentEncode(s: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(s)) return s;
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

const EMPTY = Buffer.alloc(0);

const RESPONSE_HEADERS = encodeHeaders([
  [':status', '200'],
  ['content-type', 'application/grpc'],
]);
const OK_TRAILERS = encodeHeaders([['grpc-status', '0']]);

export class Http2Connection {
  private readonly decoder = new HpackDecoder(OUR_HEADER_TABLE, MAX_HEADER_BLOCK);
  private readonly streams = new Map<number, Stream>();
  private input: Buffer = Buffer.alloc(0);
  private prefaceSeen = false;
  private lastStreamId = 0;
  /** Stream of a header block in progress (CONTINUATION expected), its parts and flags. */
  private continuing: { stream: Stream; parts: Buffer[]; bytes: number; endStream: boolean } | null = null;
  private sendWindow = 65535;
  private peerInitialWindow = 65535;
  private peerMaxFrame = 16384;
  /** Bytes received since the last WINDOW_UPDATE for the connection. */
  private consumed = 0;
  private readonly out: Buffer[] = [];
  private flushScheduled = false;
  private goingAway = false;
  private dead = false;
  private drained: (() => void) | null = null;
  /** Calls in flight (answer not yet sent). */
  private active = 0;
  private readonly onFrameBound = (type: number, flags: number, id: number, payload: Buffer) => this.onFrame(type, flags, id, payload);
  private readonly frameBound = (type: number, flags: number, id: number, payload: Buffer) => this.frame(type, flags, id, payload);
  private readonly isDead = () => this.dead;

  constructor(
    private readonly socket: Socket,
    private readonly peer: string | null,
    private readonly handler: CallHandler,
    private readonly opts: ConnectionOptions,
  ) {
    socket.setNoDelay(true);
    // Our SETTINGS, then a connection window as large as a stream's.
    this.frame(FRAME.SETTINGS, 0, 0, settingsPayload([
      [SETTING.HEADER_TABLE_SIZE, OUR_HEADER_TABLE],
      [SETTING.ENABLE_PUSH, 0],
      [SETTING.MAX_CONCURRENT_STREAMS, OUR_MAX_STREAMS],
      [SETTING.INITIAL_WINDOW_SIZE, OUR_WINDOW],
      [SETTING.MAX_FRAME_SIZE, OUR_MAX_FRAME],
      [SETTING.MAX_HEADER_LIST_SIZE, MAX_HEADER_BLOCK],
    ]));
    this.frame(FRAME.WINDOW_UPDATE, 0, 0, u32(OUR_WINDOW - 65535));
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('close', () => this.onClose());
    socket.on('error', (err) => this.opts.onError(err));
  }

  /** Calls in flight on this connection. */
  get inFlight(): number {
    return this.active;
  }

  /** Sends GOAWAY (no new streams); resolves once every call in flight is answered and the socket is closed. */
  shutdown(): Promise<void> {
    if (this.dead) return Promise.resolve();
    if (!this.goingAway) {
      this.goingAway = true;
      this.frame(FRAME.GOAWAY, 0, 0, Buffer.concat([u32(this.lastStreamId), u32(ERR.NO_ERROR)]));
    }
    return new Promise((resolve) => {
      this.drained = resolve;
      this.maybeEnd();
    });
  }

  /** Closes at once, cancelling calls in flight. */
  destroy(): void {
    this.socket.destroy();
  }

  // -- input ----------------------------------------------------------------------------

  private onData(chunk: Buffer): void {
    if (this.dead) return;
    this.input = this.input.length === 0 ? chunk : Buffer.concat([this.input, chunk]);
    try {
      if (!this.prefaceSeen) {
        if (this.input.length < PREFACE.length) {
          if (!PREFACE.subarray(0, this.input.length).equals(this.input)) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'not an HTTP/2 connection preface');
          return;
        }
        if (!this.input.subarray(0, PREFACE.length).equals(PREFACE)) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'not an HTTP/2 connection preface');
        this.prefaceSeen = true;
        this.input = this.input.subarray(PREFACE.length);
      }
      const buf = this.input;
      const at = readFrames(buf, OUR_MAX_FRAME, this.onFrameBound, this.isDead);
      if (this.dead) return;
      this.input = at === buf.length ? Buffer.alloc(0) : buf.subarray(at);
      this.sendWindowUpdates();
    } catch (err) {
      if (err instanceof ConnectionError) this.fatal(err.code, err.message);
      else if (err instanceof HpackError) this.fatal(ERR.COMPRESSION_ERROR, err.message);
      else throw err;
    }
  }

  private onFrame(type: number, flags: number, id: number, payload: Buffer): void {
    if (this.continuing !== null && (type !== FRAME.CONTINUATION || id !== this.continuing.stream.id)) {
      throw new ConnectionError(ERR.PROTOCOL_ERROR, 'a header block was interrupted');
    }
    switch (type) {
      case FRAME.DATA:
        return this.onDataFrame(flags, id, payload);
      case FRAME.HEADERS:
        return this.onHeaders(flags, id, payload);
      case FRAME.CONTINUATION: {
        const c = this.continuing;
        if (c === null) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'CONTINUATION without HEADERS');
        c.parts.push(payload);
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
        if (s !== undefined) this.closeStream(s, true);
        return;
      }
      case FRAME.SETTINGS:
        return this.onSettings(flags, id, payload);
      case FRAME.PING:
        if (id !== 0 || payload.length !== 8) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'bad PING');
        if (!(flags & FLAG.ACK)) this.frame(FRAME.PING, FLAG.ACK, 0, Buffer.from(payload));
        return;
      case FRAME.GOAWAY:
        this.goingAway = true;
        this.maybeEnd();
        return;
      case FRAME.WINDOW_UPDATE: {
        const inc = windowIncrement(payload);
        if (id === 0) {
          this.sendWindow = grownConnectionWindow(this.sendWindow, inc);
          this.pumpAll();
        } else {
          const s = this.streams.get(id);
          if (s === undefined) return;
          s.sendWindow += inc;
          if (inc === 0 || s.sendWindow > MAX_WINDOW) return this.reset(s, inc === 0 ? ERR.PROTOCOL_ERROR : ERR.FLOW_CONTROL_ERROR);
          this.pump(s);
        }
        return;
      }
      case FRAME.PUSH_PROMISE:
        throw new ConnectionError(ERR.PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
      default:
        return; // PRIORITY and unknown types
    }
  }

  private onSettings(flags: number, id: number, payload: Buffer): void {
    const settings = readSettings(id, flags & FLAG.ACK ? EMPTY : payload);
    if (flags & FLAG.ACK) return;
    for (const [key, value] of settings) {
      if (key === SETTING.INITIAL_WINDOW_SIZE) {
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const s of this.streams.values()) s.sendWindow += delta;
      } else if (key === SETTING.MAX_FRAME_SIZE) {
        this.peerMaxFrame = value;
      }
    }
    this.frame(FRAME.SETTINGS, FLAG.ACK, 0, Buffer.alloc(0));
    this.pumpAll();
  }

  private onHeaders(flags: number, id: number, payload: Buffer): void {
    if (id === 0) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'HEADERS on stream 0');
    const block = headerBlockOf(flags, payload);
    let s = this.streams.get(id);
    if (s === undefined) {
      if (id % 2 === 0 || id <= this.lastStreamId) throw new ConnectionError(ERR.PROTOCOL_ERROR, `HEADERS on stream ${id}, not a new client stream`);
      this.lastStreamId = id;
      s = { id, headers: null, data: [], dataBytes: 0, remoteEnded: false, answered: false, closed: false, sendWindow: this.peerInitialWindow, pending: null, trailers: null, call: null, discarding: false, received: 0, credited: 0, started: false, ended: false };
      // After GOAWAY, or beyond the streams we allow, a new stream is refused (the client may retry it).
      if (this.goingAway || this.streams.size >= OUR_MAX_STREAMS) {
        s.closed = true;
        this.frame(FRAME.RST_STREAM, 0, id, u32(ERR.REFUSED_STREAM));
      } else this.streams.set(id, s);
    } else if (s.remoteEnded) {
      throw new ConnectionError(ERR.STREAM_CLOSED, `HEADERS on half-closed stream ${id}`);
    }
    const endStream = (flags & FLAG.END_STREAM) !== 0;
    if (flags & FLAG.END_HEADERS) this.headerBlockDone(s, block, endStream);
    else this.continuing = { stream: s, parts: [Buffer.from(block)], bytes: block.length, endStream };
  }

  private headerBlockDone(s: Stream, block: Buffer, endStream: boolean): void {
    // Decoded even for a refused stream: the decoder's table must follow every block.
    const fields = this.decoder.decode(block);
    if (s.closed) return;
    if (s.headers === null) s.headers = fields;
    // A second block is the client's trailers: only its END_STREAM matters.
    if (endStream) this.remoteEnd(s);
  }

  private onDataFrame(flags: number, id: number, payload: Buffer): void {
    if (id === 0) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'DATA on stream 0');
    this.consumed += payload.length;
    const s = this.streams.get(id);
    if (s === undefined || s.closed) return; // a stream we refused or reset: its window is all that counts
    if (s.headers === null || s.remoteEnded) return this.reset(s, ERR.STREAM_CLOSED);
    s.received += payload.length;
    const data = dataOf(flags, payload);
    if (!s.discarding && data.length > 0) {
      s.dataBytes += data.length;
      // The gRPC frame is 5 bytes of prefix and the message.
      if (s.dataBytes > this.opts.maxMessageBytes + 5) {
        s.discarding = true;
        s.data = [];
        const path = headerOf(s.headers, ':path') ?? '';
        const details = `Received message larger than max (${s.dataBytes - 5} vs. ${this.opts.maxMessageBytes})`;
        this.opts.refused(path, Code.RESOURCE_EXHAUSTED, details);
        this.answer(s, Code.RESOURCE_EXHAUSTED, details, null);
      } else s.data.push(Buffer.from(data));
    }
    if (flags & FLAG.END_STREAM) this.remoteEnd(s);
  }

  /** The client finished sending: start the call (or, for a stream already answered, close it). */
  private remoteEnd(s: Stream): void {
    s.remoteEnded = true;
    if (!s.answered) this.startCall(s);
  }

  private startCall(s: Stream): void {
    this.begin(s);
    const headers = firstValues(s.headers!);
    const path = headers.get(':path') ?? '';
    const refuse = (code: number, details: string) => {
      this.opts.refused(path, code, details);
      this.answer(s, code, details, null);
    };
    const contentType = headers.get('content-type') ?? '';
    if (headers.get(':method') !== 'POST' || !/^application\/grpc($|[+;])/.test(contentType)) {
      // Not a gRPC request: an HTTP error, as gRPC over HTTP/2 asks for an unsupported content type.
      s.answered = true;
      this.finishAnswer(s, encodeHeaders([[':status', headers.get(':method') !== 'POST' ? '405' : '415']]), null, null);
      return;
    }
    const body = s.data.length === 1 ? s.data[0] : Buffer.concat(s.data);
    s.data = [];
    if (body.length < 5) return refuse(Code.INVALID_ARGUMENT, 'Wrong input: the request carries no message');
    const compressed = body[0] === 1;
    const length = body.readUInt32BE(1);
    if (body[0] > 1 || length !== body.length - 5) return refuse(Code.INVALID_ARGUMENT, 'Wrong input: a unary call carries exactly one length-prefixed message');
    const timeout = parseTimeout(headers.get('grpc-timeout'));
    const deadline = timeout === null ? null : Date.now() + timeout;
    const call = new CallState(this, s);
    s.call = call;
    const message = body.subarray(5);
    if (!compressed) {
      this.run({ path, headers, message, deadline, peer: this.peer, connection: this }, call);
      return;
    }
    const encoding = headers.get('grpc-encoding') ?? 'identity';
    const inflate = encoding === 'gzip' ? zlib.gunzip : encoding === 'deflate' ? zlib.inflate : null;
    if (inflate === null) {
      call.done = true;
      this.answer(s, Code.UNIMPLEMENTED, `Compression method ${encoding} is not supported (supported: identity, gzip, deflate)`, null);
      this.opts.refused(path, Code.UNIMPLEMENTED, 'compression');
      return;
    }
    inflate(message, { maxOutputLength: Math.max(1, this.opts.maxMessageBytes) }, (err, plain) => {
      if (call.cancelled || call.done) return;
      if (err !== null) {
        call.done = true;
        const tooLarge = (err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE';
        const code = tooLarge ? Code.RESOURCE_EXHAUSTED : Code.INVALID_ARGUMENT;
        const details = tooLarge ? `Received message larger than max (decompressed, vs. ${this.opts.maxMessageBytes})` : `Wrong input: the request message could not be decompressed: ${err.message}`;
        this.opts.refused(path, code, details);
        this.answer(s, code, details, null);
        return;
      }
      this.run({ path, headers, message: plain, deadline, peer: this.peer, connection: this }, call);
    });
  }

  private run(req: GrpcRequest, call: CallState): void {
    try {
      this.handler(req, call);
    } catch (err) {
      this.opts.onError(err instanceof Error ? err : new Error(String(err)));
      call.fail(Code.INTERNAL, 'Service internal error: the call failed before it was answered');
    }
  }

  private begin(s: Stream): void {
    if (s.started) return;
    s.started = true;
    this.active++;
  }

  private end(s: Stream): void {
    if (!s.started || s.ended) return;
    s.ended = true;
    this.active--;
    this.maybeEnd();
  }

  // -- output ---------------------------------------------------------------------------

  /** Answers stream `s`: OK with a message, or a status alone (a trailers-only answer). */
  answer(s: Stream, code: number, details: string, message: Buffer | null): void {
    if (s.closed || s.answered || this.dead) return;
    this.begin(s);
    s.answered = true;
    const status: Array<[string, string]> = [['grpc-status', String(code)]];
    if (details !== '') status.push(['grpc-message', percentEncode(details)]);
    if (message === null) {
      this.finishAnswer(s, encodeHeaders([[':status', '200'], ['content-type', 'application/grpc'], ...status]), null, null);
      return;
    }
    const prefix = Buffer.allocUnsafe(5);
    prefix[0] = 0;
    prefix.writeUInt32BE(message.length, 1);
    // A small answer goes out as one DATA frame of two parts, without copying the message.
    const framed = 5 + message.length <= Math.min(this.peerMaxFrame, s.sendWindow, this.sendWindow) ? [prefix, message] : Buffer.concat([prefix, message]);
    this.finishAnswer(s, RESPONSE_HEADERS, framed, code === Code.OK && details === '' ? OK_TRAILERS : encodeHeaders(status));
  }

  /** Sends `headers` (END_STREAM when nothing follows), then `data` as flow control allows, then `trailers`. */
  private finishAnswer(s: Stream, headers: Buffer, data: Buffer | Buffer[] | null, trailers: Buffer | null): void {
    const alone = data === null && trailers === null;
    this.headersFrame(s.id, headers, alone);
    if (alone) return this.sent(s);
    if (Array.isArray(data)) {
      // Fits the windows and one frame (checked by the caller).
      const n = data[0].length + data[1].length;
      this.frame(FRAME.DATA, 0, s.id, data[0], data[1]);
      s.sendWindow -= n;
      this.sendWindow -= n;
      data = null;
    }
    s.pending = data;
    s.trailers = trailers;
    this.pump(s);
  }

  private headersFrame(id: number, block: Buffer, endStream: boolean): void {
    headerBlockFrames(id, block, this.peerMaxFrame, endStream, this.frameBound);
  }

  /** Sends what flow control allows of `s`'s pending answer, and its trailers after the last byte. */
  private pump(s: Stream): void {
    if (s.closed) return;
    while (s.pending !== null && s.pending.length > 0) {
      const n = Math.min(s.pending.length, this.peerMaxFrame, s.sendWindow, this.sendWindow);
      if (n <= 0) return;
      this.frame(FRAME.DATA, 0, s.id, s.pending.subarray(0, n));
      s.sendWindow -= n;
      this.sendWindow -= n;
      s.pending = n === s.pending.length ? null : s.pending.subarray(n);
    }
    s.pending = null;
    if (s.trailers !== null) {
      const t = s.trailers;
      s.trailers = null;
      this.headersFrame(s.id, t, true);
      this.sent(s);
    }
  }

  private pumpAll(): void {
    for (const s of this.streams.values()) if (s.pending !== null || s.trailers !== null) this.pump(s);
  }

  /** The answer's last frame is queued. */
  private sent(s: Stream): void {
    // A client still sending (it should not, for a unary call answered early) is told to stop.
    if (!s.remoteEnded) this.frame(FRAME.RST_STREAM, 0, s.id, u32(ERR.NO_ERROR));
    this.closeStream(s, false);
  }

  private closeStream(s: Stream, reset: boolean): void {
    if (s.closed) return;
    s.closed = true;
    this.streams.delete(s.id);
    if (reset && !s.answered) {
      s.answered = true;
      s.call?.cancel();
    }
    s.pending = null;
    s.trailers = null;
    this.end(s);
  }

  private reset(s: Stream, code: number): void {
    this.frame(FRAME.RST_STREAM, 0, s.id, u32(code));
    this.closeStream(s, true);
  }

  private sendWindowUpdates(): void {
    // Bytes received are handed back to the client's windows once a quarter of a window
    // has gathered (so a window never drops below three quarters), and otherwise ride
    // along with the next frames we write (flush): a small call then costs one write,
    // not a second one for its WINDOW_UPDATE.
    if (this.consumed >= UPDATE_AT) this.connectionUpdate();
    for (const s of this.streams.values()) {
      if (!s.remoteEnded && !s.closed && s.received - s.credited >= UPDATE_AT) {
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

  /** Queues a frame; its payload is `payload` followed by `more` when given. */
  private frame(type: number, flags: number, id: number, payload: Buffer, more?: Buffer): void {
    if (this.dead) return;
    const length = payload.length + (more === undefined ? 0 : more.length);
    this.out.push(frameHeader(type, flags, id, length), payload);
    if (more !== undefined) this.out.push(more);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    if (!this.dead && this.out.length > 0) this.connectionUpdate(); // while flushScheduled: queued, not scheduled again
    this.flushScheduled = false;
    if (this.dead || this.out.length === 0) return;
    const chunks = this.out.splice(0);
    this.socket.write(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks));
    this.maybeEnd();
  }

  /** After a GOAWAY (ours or the peer's), the connection ends once no call is in flight and every frame is written. */
  private maybeEnd(): void {
    if (!this.goingAway || this.active > 0 || this.flushScheduled || this.dead) return;
    this.socket.end();
  }

  private fatal(code: number, message: string): void {
    this.frame(FRAME.GOAWAY, 0, 0, Buffer.concat([u32(this.lastStreamId), u32(code), Buffer.from(message, 'utf8')]));
    this.flush();
    this.opts.onError(new Error(`HTTP/2 connection error: ${message}`));
    this.socket.end();
    this.onClose();
  }

  private onClose(): void {
    if (this.dead) return;
    this.dead = true;
    for (const s of [...this.streams.values()]) this.closeStream(s, true);
    this.out.length = 0;
    const d = this.drained;
    this.drained = null;
    d?.();
  }
}

function headerOf(fields: HeaderList, name: string): string | undefined {
  for (const [n, v] of fields) if (n === name) return v;
  return undefined;
}
