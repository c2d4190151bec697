/**
 * HTTP/2 (RFC 9113) on the wire, what both of Quiver's ends of it share: the server
 * connection of the public gRPC API (ts/api/grpc/h2/connection.ts) and the client
 * connection peers call each other with (client.ts). Frame types, flags, error codes,
 * settings, and the few byte helpers every frame needs.
 *
 * Owns: constants and encodings. Must never: keep connection state.
 */

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export const FRAME = { DATA: 0, HEADERS: 1, PRIORITY: 2, RST_STREAM: 3, SETTINGS: 4, PUSH_PROMISE: 5, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9 } as const;
export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;
export const ERR = { NO_ERROR: 0, PROTOCOL_ERROR: 1, INTERNAL_ERROR: 2, FLOW_CONTROL_ERROR: 3, STREAM_CLOSED: 5, FRAME_SIZE_ERROR: 6, REFUSED_STREAM: 7, CANCEL: 8, COMPRESSION_ERROR: 9, ENHANCE_YOUR_CALM: 11, INADEQUATE_SECURITY: 12 } as const;
export const SETTING = { HEADER_TABLE_SIZE: 1, ENABLE_PUSH: 2, MAX_CONCURRENT_STREAMS: 3, INITIAL_WINDOW_SIZE: 4, MAX_FRAME_SIZE: 5, MAX_HEADER_LIST_SIZE: 6 } as const;

/** The largest flow-control window. */
export const MAX_WINDOW = 2 ** 31 - 1;
/** Every window's size until SETTINGS say otherwise. */
export const DEFAULT_WINDOW = 65535;
/** The smallest (and default) SETTINGS_MAX_FRAME_SIZE. */
export const MIN_MAX_FRAME = 16384;

/** An error that ends the whole connection (GOAWAY with `code`). */
export class ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export function u32(v: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(v >>> 0, 0);
  return b;
}

export function settingsPayload(pairs: Array<[number, number]>): Buffer {
  const b = Buffer.allocUnsafe(pairs.length * 6);
  pairs.forEach(([k, v], i) => {
    b.writeUInt16BE(k, i * 6);
    b.writeUInt32BE(v, i * 6 + 2);
  });
  return b;
}

/** The 9-byte header of a frame. */
export function frameHeader(type: number, flags: number, id: number, length: number): Buffer {
  const h = Buffer.allocUnsafe(9);
  h[0] = (length >> 16) & 0xff;
  h[1] = (length >> 8) & 0xff;
  h[2] = length & 0xff;
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(id, 5);
  return h;
}

/**
 * The header block of a HEADERS frame's payload, without padding and priority fields;
 * throws a ConnectionError when they do not fit.
 */
export function headerBlockOf(flags: number, payload: Buffer): Buffer {
  let start = 0;
  let end = payload.length;
  if (flags & FLAG.PADDED) {
    if (payload.length < 1) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'bad padding');
    end -= payload[0];
    start = 1;
  }
  if (flags & FLAG.PRIORITY) start += 5;
  if (start > end) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'bad padding');
  return payload.subarray(start, end);
}

/** A DATA frame's payload without its padding; throws a ConnectionError when the padding does not fit. */
export function dataOf(flags: number, payload: Buffer): Buffer {
  if (!(flags & FLAG.PADDED)) return payload;
  if (payload.length < 1 || payload[0] >= payload.length) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'bad padding');
  return payload.subarray(1, payload.length - payload[0]);
}

/**
 * Hands each whole frame in `buf` to `onFrame` (type, flags, stream id, payload), until
 * one is still incomplete or `stop()` holds after a frame: returns the offset reading
 * stopped at. A frame longer than `maxFrame` (the SETTINGS_MAX_FRAME_SIZE this side
 * announced) is a connection error.
 */
export function readFrames(buf: Buffer, maxFrame: number, onFrame: (type: number, flags: number, id: number, payload: Buffer) => void, stop: () => boolean): number {
  let at = 0;
  while (buf.length - at >= 9) {
    const length = (buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2];
    if (length > maxFrame) throw new ConnectionError(ERR.FRAME_SIZE_ERROR, `frame of ${length} bytes above SETTINGS_MAX_FRAME_SIZE`);
    if (buf.length - at < 9 + length) break;
    const type = buf[at + 3];
    const flags = buf[at + 4];
    const id = buf.readUInt32BE(at + 5) & 0x7fffffff;
    onFrame(type, flags, id, buf.subarray(at + 9, at + 9 + length));
    at += 9 + length;
    if (stop()) break;
  }
  return at;
}

/** The frames of one header block: HEADERS, then CONTINUATION frames as the peer's `maxFrame` requires. */
export function headerBlockFrames(id: number, block: Buffer, maxFrame: number, endStream: boolean, frame: (type: number, flags: number, id: number, payload: Buffer) => void): void {
  if (block.length <= maxFrame) {
    frame(FRAME.HEADERS, FLAG.END_HEADERS | (endStream ? FLAG.END_STREAM : 0), id, block);
    return;
  }
  frame(FRAME.HEADERS, endStream ? FLAG.END_STREAM : 0, id, block.subarray(0, maxFrame));
  for (let at = maxFrame; at < block.length; at += maxFrame) {
    frame(FRAME.CONTINUATION, at + maxFrame >= block.length ? FLAG.END_HEADERS : 0, id, block.subarray(at, Math.min(block.length, at + maxFrame)));
  }
}

/** The settings a SETTINGS frame (not an ACK) carries, checked: a bad frame or value is a connection error. */
export function readSettings(id: number, payload: Buffer): Array<[number, number]> {
  if (id !== 0) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'SETTINGS on a stream');
  if (payload.length % 6 !== 0) throw new ConnectionError(ERR.FRAME_SIZE_ERROR, 'bad SETTINGS');
  const out: Array<[number, number]> = [];
  for (let at = 0; at < payload.length; at += 6) {
    const key = payload.readUInt16BE(at);
    const value = payload.readUInt32BE(at + 2);
    if (key === SETTING.INITIAL_WINDOW_SIZE && value > MAX_WINDOW) throw new ConnectionError(ERR.FLOW_CONTROL_ERROR, 'SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1');
    if (key === SETTING.MAX_FRAME_SIZE && (value < MIN_MAX_FRAME || value > 16777215)) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'bad SETTINGS_MAX_FRAME_SIZE');
    out.push([key, value]);
  }
  return out;
}

/** A WINDOW_UPDATE's increment; a frame of the wrong size is a connection error. */
export function windowIncrement(payload: Buffer): number {
  if (payload.length !== 4) throw new ConnectionError(ERR.FRAME_SIZE_ERROR, 'bad WINDOW_UPDATE');
  return payload.readUInt32BE(0) & 0x7fffffff;
}

/** The connection's send window after a WINDOW_UPDATE on stream 0 of `inc`: an increment of 0, or a window past 2^31-1, is a connection error. */
export function grownConnectionWindow(window: number, inc: number): number {
  if (inc === 0) throw new ConnectionError(ERR.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
  if (window + inc > MAX_WINDOW) throw new ConnectionError(ERR.FLOW_CONTROL_ERROR, 'connection window above 2^31-1');
  return window + inc;
}
