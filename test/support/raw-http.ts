/**
 * A raw HTTP/1.1 client connection for tests that need the bytes themselves: pipelined
 * requests, heads in pieces, a client that keeps its side open after the server's FIN.
 * It keeps everything received as text and parses answers (heads, then Content-Length
 * or chunked bodies) as they come.
 */

import * as net from 'node:net';

import { DEADLINE_MS, waitFor } from './wait';

/** One request's bytes: no body, or a JSON body with its Content-Length; `extra` is more header lines, each ending in CRLF. */
export function rawRequest(method: string, path: string, body?: string, extra = ''): string {
  if (body === undefined) return `${method} ${path} HTTP/1.1\r\nHost: x\r\n${extra}\r\n`;
  return `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
}

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export class RawClient {
  readonly sock: net.Socket;
  /** Everything received, as latin1 text. */
  text = '';
  readonly answers: RawAnswer[] = [];
  /** The server ended its side (FIN). */
  ended = false;
  closed = false;
  private buf = Buffer.alloc(0);
  private wake: () => void = () => undefined;

  /** `halfOpen` keeps this side open after the server's FIN (node's allowHalfOpen). */
  constructor(port: number, halfOpen = false) {
    this.sock = net.connect({ port, host: '127.0.0.1', allowHalfOpen: halfOpen });
    this.sock.on('data', (c: Buffer) => {
      this.text += c.toString('latin1');
      this.buf = Buffer.concat([this.buf, c]);
      this.parse();
      this.wake();
    });
    this.sock.on('end', () => (this.ended = true));
    this.sock.on('error', () => undefined);
    this.sock.on('close', () => {
      this.closed = true;
      this.wake();
    });
  }

  private parse(): void {
    for (;;) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const lines = this.buf.toString('latin1', 0, end).split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const c = l.indexOf(':');
        headers[l.slice(0, c).toLowerCase()] = l.slice(c + 1).trim();
      }
      let body: Buffer;
      let next: number;
      if (headers['transfer-encoding'] === 'chunked') {
        // node:http's answers without a length (a 417, say): chunks up to the empty one.
        const parts: Buffer[] = [];
        let at = end + 4;
        for (;;) {
          const eol = this.buf.indexOf('\r\n', at);
          if (eol < 0) return;
          const size = parseInt(this.buf.toString('latin1', at, eol), 16);
          if (this.buf.length < eol + 2 + size + 2) return;
          parts.push(this.buf.subarray(eol + 2, eol + 2 + size));
          at = eol + 2 + size + 2;
          if (size === 0) break;
        }
        body = Buffer.concat(parts);
        next = at;
      } else {
        const length = Number(headers['content-length'] ?? 0);
        if (this.buf.length < end + 4 + length) return;
        body = this.buf.subarray(end + 4, end + 4 + length);
        next = end + 4 + length;
      }
      this.answers.push({ status: Number(lines[0].split(' ')[1]), headers, body: body.toString('utf8') });
      this.buf = this.buf.subarray(next);
    }
  }

  write(text: string | Buffer): Promise<void> {
    return new Promise((resolve, reject) => this.sock.write(text, (err) => (err ? reject(err) : resolve())));
  }

  /** Waits until `n` answers have come (or the connection closed). */
  async until(n: number): Promise<RawAnswer[]> {
    const deadline = Date.now() + DEADLINE_MS;
    while (this.answers.length < n && !this.closed) {
      if (Date.now() > deadline) throw new Error(`${this.answers.length} of ${n} answers after ${DEADLINE_MS} ms`);
      await new Promise<void>((r) => {
        this.wake = r;
        setTimeout(r, 1000);
      });
    }
    return this.answers.slice(0, n);
  }

  /** Status codes of the answers received so far, in order, read off the text (also answers not yet whole). */
  statuses(): number[] {
    return [...this.text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
  }

  async untilStatuses(n: number): Promise<number[]> {
    await waitFor(`${n} answers (have ${JSON.stringify(this.text.slice(0, 200))})`, () => this.statuses().length >= n || this.closed);
    return this.statuses();
  }

  /** Waits until the server closed the connection. */
  async untilClosed(): Promise<void> {
    await waitFor('the server to close the connection', () => this.closed);
  }

  /** Everything not yet read as an answer (a 4xx from node:http without a body, say). */
  rest(): string {
    return this.buf.toString('latin1');
  }

  close(): void {
    this.sock.destroy();
  }
}
