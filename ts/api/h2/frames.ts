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
