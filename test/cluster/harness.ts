/**
 * Real clusters for tests: several bin/quiver processes on 127.0.0.1, each with its own
 * storage directory and fixed REST and p2p ports (kept across restarts), started with
 * --uri (the first) or --bootstrap (the others), killed with any signal, restarted.
 */

import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';

import * as net from 'node:net';

import { startServer, type Server } from '../crash/server';
import { claimPort } from '../support/ports';
import { DEADLINE_MS, START_DEADLINE_MS, sleep, waitFor } from '../support/wait';

export { sleep, waitFor } from '../support/wait';

export interface ClusterInfo {
  status: string;
  peer_id: number;
  peers: Record<string, { uri: string }>;
  raft_info: { term: number; commit: number; pending_operations: number; leader: number | null; role: string; is_voter: boolean };
  consensus_thread_status: { consensus_thread_status: string };
  message_send_failures: Record<string, { count: number }>;
}

export interface Peer {
  index: number;
  dir: string;
  httpPort: number;
  p2pPort: number;
  uri: string;
  url: string;
  server: Server | null;
}

/**
 * A free port below the kernel's ephemeral range (32768-60999 here), for a peer that is
 * restarted on the same port: a port from the ephemeral range can be taken meanwhile as
 * the local port of some outgoing connection (seen: EADDRINUSE on restart). The port is
 * claimed across test processes (`claimPort`) before it is probed.
 */
async function stablePort(): Promise<number> {
  for (;;) {
    const port = 15_000 + Math.floor(Math.random() * 17_000);
    if (!claimPort(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const server = net.createServer();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
    // A port in use by something else stays claimed: it is not tried again.
    if (free) return port;
  }
}

export async function api(url: string, method: string, route: string, body?: unknown, timeoutMs = 10_000): Promise<{ status: number; body: any }> {
  // A connection per request: peers are killed and restarted on the same ports, and a
  // pooled connection to the old process fails its next request ("other side closed").
  const res = await fetch(url + route, {
    method,
    headers: body === undefined ? { connection: 'close' } : { connection: 'close', 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // plain text (health probes)
  }
  return { status: res.status, body: parsed };
}

/**
 * A metadata change (through consensus) as a client makes it: while the answer is 503
 * because no leader is known or the entry was lost in a leader change, it is sent again.
 * An election can start at any moment on a loaded machine (a peer not scheduled for an
 * election timeout); nothing was applied when a peer answers so, so a retry cannot apply
 * a change twice. Tests that expect a change to be refused call `api` instead.
 */
export async function change(url: string, method: string, route: string, body?: unknown, timeoutMs = 10_000): Promise<{ status: number; body: any }> {
  const deadline = Date.now() + DEADLINE_MS;
  for (;;) {
    const r = await api(url, method, route, body, timeoutMs);
    const noLeader = r.status === 503 && /no leader|lost in a leader change/.test(String(r.body?.status?.error ?? r.body));
    if (!noLeader || Date.now() > deadline) return r;
    await sleep(100);
  }
}

export class Cluster {
  readonly peers: Peer[] = [];

  private constructor(
    readonly root: string,
    private readonly env: Record<string, string>,
  ) {}

  /** Prepares `n` peers (ports, directories) without starting them. */
  static async prepare(n: number, env: Record<string, string> = {}): Promise<Cluster> {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-cluster-'));
    const c = new Cluster(root, env);
    for (let i = 0; i < n; i++) await c.addPeerSlot();
    return c;
  }

  /** Starts peer 0 with --uri, then the others with --bootstrap to peer 0, and waits until all are voters. */
  static async start(n: number, env: Record<string, string> = {}): Promise<Cluster> {
    const c = await Cluster.prepare(n, env);
    await c.startPeer(0);
    for (let i = 1; i < n; i++) await c.startPeer(i, 0);
    await c.waitVoters(n);
    return c;
  }

  async addPeerSlot(): Promise<Peer> {
    const index = this.peers.length;
    const dir = path.join(this.root, `peer-${index}`);
    await fs.mkdir(dir, { recursive: true });
    const httpPort = await stablePort();
    const p2pPort = await stablePort();
    const peer: Peer = { index, dir, httpPort, p2pPort, uri: `http://127.0.0.1:${p2pPort}`, url: `http://127.0.0.1:${httpPort}`, server: null };
    this.peers.push(peer);
    return peer;
  }

  /** Starts (or restarts) peer `i`; with `bootstrapFrom` it joins through that peer. `extraArgs` go on its command line. */
  async startPeer(i: number, bootstrapFrom: number | null = null, extraEnv: Record<string, string> = {}, extraArgs: string[] = []): Promise<Peer> {
    const p = this.peers[i];
    const args = ['--uri', p.uri, ...extraArgs];
    if (bootstrapFrom !== null) args.push('--bootstrap', this.peers[bootstrapFrom].uri);
    p.server = await startServer(
      p.dir,
      {
        SERVICE__CLUSTER__ENABLED: 'true',
        SERVICE__CLUSTER__P2P__PORT: String(p.p2pPort),
        SERVICE__SERVICE__HTTP_PORT: String(p.httpPort),
        SERVICE__LOG_LEVEL: 'INFO',
        ...this.env,
        ...extraEnv,
      },
      START_DEADLINE_MS,
      args,
    );
    return p;
  }

  async kill(i: number, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const s = this.peers[i].server;
    if (!s) return;
    await s.stop(signal);
    this.peers[i].server = null;
  }

  signal(i: number, signal: NodeJS.Signals): void {
    const s = this.peers[i].server;
    if (s) process.kill(s.pid, signal);
  }

  running(): Peer[] {
    return this.peers.filter((p) => p.server !== null);
  }

  async info(i: number, timeoutMs = 2000): Promise<ClusterInfo> {
    const r = await api(this.peers[i].url, 'GET', '/cluster', undefined, timeoutMs);
    if (r.status !== 200) throw new Error(`GET /cluster on peer ${i}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body.result as ClusterInfo;
  }

  /** Index of the peer that says it leads (and that the others running agree on), or null. */
  async leader(among: Peer[] = this.running()): Promise<number | null> {
    const infos = await Promise.all(among.map((p) => this.info(p.index, 1000).catch(() => null)));
    const leaders = infos.filter((x): x is ClusterInfo => x !== null && x.raft_info.role === 'Leader');
    if (leaders.length !== 1) return null;
    return among[infos.indexOf(leaders[0])].index;
  }

  async waitLeader(timeoutMs = DEADLINE_MS, among?: Peer[]): Promise<number> {
    return waitFor('a leader', () => this.leader(among), timeoutMs);
  }

  /** Waits until every running peer sees `n` voters and is ready. */
  async waitVoters(n: number, timeoutMs = DEADLINE_MS): Promise<void> {
    await waitFor(
      `${n} voters, every peer ready`,
      async () => {
        for (const p of this.running()) {
          const info = await this.info(p.index);
          if (Object.keys(info.peers).length !== n) return false;
          if (!info.raft_info.is_voter) return false;
          if ((await api(p.url, 'GET', '/readyz')).status !== 200) return false;
        }
        return true;
      },
      timeoutMs,
      100,
    );
  }

  /** Stops every running peer (SIGKILL) and removes the directories. */
  async destroy(): Promise<void> {
    await Promise.all(this.running().map((p) => this.kill(p.index)));
    await fs.rm(this.root, { recursive: true, force: true });
  }
}

/** Records (term → leader peer id) from every /cluster answer seen; a second leader in a term is a problem. */
export class LeaderLog {
  private readonly byTerm = new Map<number, number>();
  readonly problems: string[] = [];
  see(info: ClusterInfo): void {
    if (info.raft_info.role !== 'Leader') return;
    const seen = this.byTerm.get(info.raft_info.term);
    if (seen !== undefined && seen !== info.peer_id) this.problems.push(`term ${info.raft_info.term}: leaders ${seen} and ${info.peer_id}`);
    this.byTerm.set(info.raft_info.term, info.peer_id);
  }
  async sample(c: Cluster): Promise<void> {
    await Promise.all(c.running().map((p) => c.info(p.index, 1000).then((i) => this.see(i), () => undefined)));
  }
}
