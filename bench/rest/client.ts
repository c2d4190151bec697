/**
 * HTTP/1.1 clients for the REST benchmark, and a runner that keeps N requests in
 * flight. Request bodies are handed over as ready Buffers.
 *
 *  - `HttpClient`: node:http with a keep-alive agent (one socket per in-flight request,
 *    reused) — what a Node application would use.
 *  - `RawClient` (default): keep-alive TCP connections written to and read from
 *    directly: the request head is a short string, the response is split at the blank
 *    line and read by Content-Length (or chunked). It does the same HTTP exchange at a
 *    fraction of node:http's client CPU, which matters when client and server share
 *    two cores.
 */
import * as http from 'http';
import * as net from 'net';

export interface Reply {
  status: number;
  body: Buffer;
}

export interface RestClient {
  readonly kind: 'http' | 'raw';
  /** `headers`: extra request headers (e.g. `api-key`, `authorization`), lower-case names. */
  request(method: string, path: string, body?: Buffer, headers?: Record<string, string>): Promise<Reply>;
  json<T = unknown>(method: string, path: string, body?: unknown): Promise<T>;
  close(): void;
}

async function jsonCall<T>(c: RestClient, method: string, path: string, body?: unknown): Promise<T> {
  const r = await c.request(method, path, body === undefined ? undefined : Buffer.from(JSON.stringify(body)));
  if (r.status !== 200) throw new Error(`${method} ${path}: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 500)}`);
  return (JSON.parse(r.body.toString('utf8')) as { result: T }).result;
}

export function makeClient(kind: 'http' | 'raw', baseUrl: string, maxSockets: number): RestClient {
  return kind === 'http' ? new HttpClient(baseUrl, maxSockets) : new RawClient(baseUrl);
}

export class HttpClient implements RestClient {
  readonly kind = 'http' as const;
  private readonly agent: http.Agent;
  private readonly host: string;
  private readonly port: number;

  constructor(baseUrl: string, maxSockets: number) {
    const u = new URL(baseUrl);
    this.host = u.hostname;
    this.port = Number(u.port);
    this.agent = new http.Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets, scheduling: 'lifo' });
  }

  request(method: string, path: string, body?: Buffer, extra?: Record<string, string>): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const headers: http.OutgoingHttpHeaders = { accept: 'application/json', ...extra };
      if (body) {
        headers['content-type'] = 'application/json';
        headers['content-length'] = body.length;
      }
      const req = http.request({ host: this.host, port: this.port, method, path, headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      req.on('error', reject);
      if (body) req.end(body);
      else req.end();
    });
  }

  /** Sends a request and returns the parsed `result`; throws on a status other than 200. */
  json<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
    return jsonCall<T>(this, method, path, body);
  }

  close(): void {
    this.agent.destroy();
  }
}

const CRLF2 = Buffer.from('\r\n\r\n');

/** One keep-alive connection that carries one request at a time. */
class RawConnection {
  private buf: Buffer | null = null;
  private pending: { resolve: (r: Reply) => void; reject: (e: Error) => void } | null = null;
  /** Parsed head of the response being read: status, body length (-1 = chunked), where the body starts. */
  private head: { status: number; length: number; bodyAt: number; close: boolean } | null = null;
  dead = false;
  lastUsed = Date.now();

  constructor(private readonly socket: net.Socket) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    const fail = (e: Error) => {
      this.dead = true;
      const p = this.pending;
      this.pending = null;
      p?.reject(e);
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new Error('connection closed by the server')));
  }

  send(head: string, body: Buffer | undefined): Promise<Reply> {
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.buf = null;
      this.head = null;
      this.socket.cork();
      this.socket.write(head, 'latin1');
      if (body) this.socket.write(body);
      this.socket.uncork();
    });
  }

  private onData(chunk: Buffer): void {
    this.buf = this.buf ? Buffer.concat([this.buf, chunk]) : chunk;
    const buf = this.buf;
    if (!this.head) {
      const end = buf.indexOf(CRLF2);
      if (end < 0) return;
      const text = buf.toString('latin1', 0, end);
      const status = Number(text.slice(9, 12));
      let length = 0;
      let close = false;
      for (const line of text.split('\r\n').slice(1)) {
        const colon = line.indexOf(':');
        const name = line.slice(0, colon).trim().toLowerCase();
        const value = line.slice(colon + 1).trim();
        if (name === 'content-length') length = Number(value);
        else if (name === 'transfer-encoding' && value.toLowerCase().includes('chunked')) length = -1;
        else if (name === 'connection' && value.toLowerCase() === 'close') close = true;
      }
      this.head = { status, length, bodyAt: end + 4, close };
    }
    const h = this.head;
    let body: Buffer | null = null;
    if (h.length >= 0) {
      if (buf.length - h.bodyAt < h.length) return;
      body = buf.subarray(h.bodyAt, h.bodyAt + h.length);
    } else {
      body = dechunk(buf, h.bodyAt);
      if (!body) return;
    }
    const p = this.pending;
    this.pending = null;
    this.buf = null;
    this.head = null;
    if (h.close) {
      this.dead = true;
      this.socket.end();
    }
    p?.resolve({ status: h.status, body });
  }

  close(): void {
    this.dead = true;
    this.socket.destroy();
  }
}

/** The body of a complete chunked message starting at `at`, or null while incomplete. */
function dechunk(buf: Buffer, at: number): Buffer | null {
  const parts: Buffer[] = [];
  let i = at;
  for (;;) {
    const eol = buf.indexOf('\r\n', i, 'latin1');
    if (eol < 0) return null;
    const size = parseInt(buf.toString('latin1', i, eol), 16);
    if (size === 0) return buf.length >= eol + 4 ? Buffer.concat(parts) : null;
    if (buf.length < eol + 2 + size + 2) return null;
    parts.push(buf.subarray(eol + 2, eol + 2 + size));
    i = eol + 2 + size + 2;
  }
}

export class RawClient implements RestClient {
  readonly kind = 'raw' as const;
  private readonly host: string;
  private readonly port: number;
  private readonly idle: RawConnection[] = [];
  private readonly all = new Set<RawConnection>();

  constructor(baseUrl: string) {
    const u = new URL(baseUrl);
    this.host = u.hostname;
    this.port = Number(u.port);
  }

  private connect(): Promise<RawConnection> {
    return new Promise((resolve, reject) => {
      const s = net.connect({ host: this.host, port: this.port });
      s.once('connect', () => {
        s.off('error', reject);
        const c = new RawConnection(s);
        this.all.add(c);
        resolve(c);
      });
      s.once('error', reject);
    });
  }

  async request(method: string, path: string, body?: Buffer, headers?: Record<string, string>): Promise<Reply> {
    let conn = this.idle.pop();
    // The server closes keep-alive connections idle for 5 s (http_keep_alive_timeout_sec):
    // don't race it, open a new one instead.
    while (conn && (conn.dead || Date.now() - conn.lastUsed > 3000)) {
      conn.close();
      this.all.delete(conn);
      conn = this.idle.pop();
    }
    if (!conn) conn = await this.connect();
    let extra = '';
    if (headers) for (const k in headers) extra += `${k}: ${headers[k]}\r\n`;
    const head =
      `${method} ${path} HTTP/1.1\r\nHost: ${this.host}:${this.port}\r\nAccept: application/json\r\n${extra}` +
      (body ? `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n` : method === 'GET' ? '' : 'Content-Length: 0\r\n') +
      '\r\n';
    try {
      return await conn.send(head, body);
    } finally {
      conn.lastUsed = Date.now();
      if (conn.dead) this.all.delete(conn);
      else this.idle.push(conn);
    }
  }

  json<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
    return jsonCall<T>(this, method, path, body);
  }

  close(): void {
    for (const c of this.all) c.close();
    this.all.clear();
    this.idle.length = 0;
  }
}

export interface RunTiming {
  seconds: number;
  /** Per-request latency in microseconds, by request index. */
  latUs: Float64Array;
  /** Client process CPU seconds (user + system) over the run. */
  clientCpuSec: number;
}

/**
 * Runs `n` jobs with `concurrency` in flight (each in-flight slot takes the next index
 * when its job ends), timing each one.
 */
/** Runs jobs 0..n-1 with `concurrency` in flight; `lane` (0..concurrency-1) says which of the in-flight slots runs a job. */
export async function runConcurrent(n: number, concurrency: number, job: (i: number, lane: number) => Promise<void>): Promise<RunTiming> {
  const latUs = new Float64Array(n);
  let next = 0;
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const lane = async (_: unknown, l: number) => {
    for (;;) {
      const i = next++;
      if (i >= n) return;
      const s = process.hrtime.bigint();
      await job(i, l);
      latUs[i] = Number(process.hrtime.bigint() - s) / 1000;
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, lane));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const c = process.cpuUsage(cpu0);
  return { seconds, latUs, clientCpuSec: (c.user + c.system) / 1e6 };
}
