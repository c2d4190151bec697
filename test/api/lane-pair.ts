/**
 * In-process REST apps served twice, for the tests that compare the direct lane with
 * Koa (direct.test.ts, direct-review.test.ts): server A runs the lane in front of Koa
 * and counts what it passes on; server B runs Koa alone. All apps share one storage
 * (a temp dir) and one logger whose lines the tests read.
 */

import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';

import pino, { type Logger } from 'pino';

import { loadEngine } from '../../bindings';
import { buildRestApp, type RestApp } from '../../ts/api/rest/app';
import { HttpFront } from '../../ts/api/rest/front';
import type { AuditLog } from '../../ts/auth/audit';
import type { Authenticator } from '../../ts/auth/authenticate';
import { loadConfig } from '../../ts/config';
import type { Config } from '../../ts/config/types';
import { Snapshots } from '../../ts/snapshots/snapshots';
import { TableOfContent } from '../../ts/storage/toc';

export interface LanePair {
  rest: RestApp;
  /** The lane in front of Koa. */
  portA: number;
  /** Koa alone. */
  portB: number;
  /** The HTTP front before the lane before Koa, as a node serves (ts/node.ts). */
  portF: number;
  front: HttpFront;
  /** Requests A or F passed on to Koa. */
  koaHits: number;
}

export class LaneHarness {
  /** Every log line of every app, parsed. */
  readonly logLines: Array<Record<string, unknown>> = [];
  readonly logger: Logger = pino({ level: 'info' }, { write: (line: string) => void this.logLines.push(JSON.parse(line) as Record<string, unknown>) });
  private readonly servers: http.Server[] = [];
  private readonly fronts: HttpFront[] = [];
  private toc: TableOfContent | null = null;
  private snapshots: Snapshots | null = null;

  private constructor(private readonly dir: string) {}

  /** A temp storage with its table of content open; `prefix` names the temp dir. */
  static async open(prefix: string): Promise<LaneHarness> {
    const h = new LaneHarness(fs.mkdtempSync(path.join(os.tmpdir(), prefix)));
    const base = h.config();
    h.toc = await TableOfContent.open(path.resolve(base.storage.storage_path), loadEngine({ logger: h.logger }), h.logger, base.storage.max_collections);
    h.snapshots = await Snapshots.open(base, h.toc, h.logger, '0.0.0-test');
    return h;
  }

  /** The configuration of an app on this storage (1 MB body limit, CORS off), with `env` over it. */
  config(env: Record<string, string> = {}): Config {
    return loadConfig({
      cwd: this.dir,
      env: {
        SERVICE__STORAGE__STORAGE_PATH: path.join(this.dir, 'storage'),
        SERVICE__STORAGE__SNAPSHOTS_PATH: path.join(this.dir, 'snapshots'),
        SERVICE__SERVICE__MAX_REQUEST_SIZE_MB: '1',
        SERVICE__SERVICE__ENABLE_CORS: 'false',
        ...env,
      },
    });
  }

  /** An app built from `cfg`, served by A and B. `setup` runs on the app before either listens. */
  async pair(cfg: Config, deps: { authenticator?: Authenticator; audit?: AuditLog } = {}, setup?: (rest: RestApp) => void): Promise<LanePair> {
    const info = { version: '0.0.0-test', commit: null, instanceId: 'lane-pair', startedAt: new Date() };
    const rest = buildRestApp(cfg, { logger: this.logger, info, toc: this.toc!, snapshots: this.snapshots!, ...deps });
    setup?.(rest);
    const koa = rest.app.callback();
    const p = { rest, portA: 0, portB: 0, portF: 0, koaHits: 0 } as LanePair;
    const counted = rest.lane.listener((req, res) => {
      p.koaHits++;
      void koa(req, res);
    });
    p.portA = await this.listen(counted);
    p.portB = await this.listen(koa);
    p.portF = await this.listen(counted, (server) => {
      p.front = HttpFront.attach(server, rest.lane, { bodyLimitBytes: cfg.service.max_request_size_mb * 1024 * 1024, cors: cfg.service.enable_cors });
      this.fronts.push(p.front);
    });
    return p;
  }

  /** The server of this harness listening on `port`. */
  server(port: number): http.Server {
    const server = this.servers.find((s) => (s.address() as AddressInfo | null)?.port === port);
    if (server === undefined) throw new Error(`no server of this harness listens on ${port}`);
    return server;
  }

  /** Connections the server on `port` still holds open (one the client left is gone once the server has seen it go). */
  openConnections(port: number): Promise<number> {
    const server = this.servers.find((s) => (s.address() as AddressInfo | null)?.port === port);
    if (server === undefined) return Promise.reject(new Error(`no server of this harness listens on ${port}`));
    return new Promise((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
  }

  private listen(listener: http.RequestListener, setup?: (server: http.Server) => void): Promise<number> {
    const server = http.createServer(listener);
    setup?.(server);
    this.servers.push(server);
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
    });
  }

  async close(): Promise<void> {
    for (const f of this.fronts) f.closeAll();
    await Promise.all(
      this.servers.map(
        (s) =>
          new Promise<void>((resolve) => {
            s.closeAllConnections();
            s.close(() => resolve());
          }),
      ),
    );
    await this.toc?.close();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
