/**
 * What `bin/quiver drain` does: moves every replica off a peer through the REST API
 * (`POST /cluster/peer/{id}/drain`, ts/transfer/drain.ts), then follows the drain
 * (`GET /cluster/peer/{id}/drain`) once a second, printing each change of what remains
 * and of the transfers running, until the peer holds no replica. Without `--peer` it
 * drains the peer it talks to (`GET /cluster` gives its id): what the Helm chart's
 * `preStop` hook runs on the pod's own node.
 *
 * `--if-scaled-in` (the chart's hook): drains only when this pod is being removed by a
 * StatefulSet scale-in, i.e. its ordinal (the end of `HOSTNAME`) is not below the
 * StatefulSet's desired `spec.replicas`, read from the Kubernetes API with the pod's
 * service account (`STATEFULSET_NAME`, `POD_NAMESPACE`). A rolling restart keeps the
 * desired count, so its pods stop without moving anything. When the API cannot be read
 * the drain runs (moving replicas needlessly is safe; skipping a needed drain is not);
 * when the StatefulSet is gone (uninstall) or scaled to 0, it does not (every peer goes).
 *
 * `--remove`: once drained, the peer is removed from the cluster (consensus); with
 * `--if-scaled-in`, only when the scale-in is certain (a pod that comes back after a
 * restart must still be a member).
 *
 * Exit codes: 0 drained (or nothing to do), 1 refused or failed or not finished within
 * `--timeout` (the drain goes on in the node; running the command again follows it),
 * 2 usage.
 *
 * Owns: the flags, the output and the scale-in check. Must never: plan a drain (the node does).
 */

import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';

export const DRAIN_USAGE = `Usage: quiver drain [options]

Moves every replica off a peer (shard transfers, one shard at a time) and waits until the
peer holds none. Run it again to follow or resume a drain.

Options:
  --url <URL>          REST URL of a peer of the cluster (default http://localhost:6333)
  --peer <id>          the peer to drain (default: the peer --url answers for)
  --api-key <key>      sent as the api-key header (default: $QUIVER_API_KEY, else
                       $SERVICE__SERVICE__API_KEY)
  --ca-cert <file>     HTTPS: the CA certificate(s) the server's certificate is checked
                       against (default: the system's CAs)
  --tls-server-name <name>
                       HTTPS: the name the server's certificate must hold (default: the
                       --url host), e.g. the pod's DNS name when --url is localhost
  --client-cert <file> HTTPS: a client certificate to present (with --client-key), for
                       a node with service.verify_https_client_certificate
  --client-key <file>  its private key
  --method <method>    transfer method: stream_records, snapshot or wal_delta (default:
                       the node's storage.shard_transfer_method, else stream_records)
  --timeout <seconds>  how long to wait for the drain to end (default 3600)
  --remove             once the peer holds no replica, remove it from the cluster
                       (consensus), as DELETE /cluster/peer/{id} does
  --if-scaled-in       drain only when this pod is removed by a StatefulSet scale-in
                       (Kubernetes; see the Helm chart's README)
  --help               print this text and exit
`;

export class DrainUsageError extends Error {}
export class DrainError extends Error {}

export interface DrainArgs {
  url: string;
  peer: string | null;
  method: string | null;
  apiKey: string | null;
  timeoutS: number;
  ifScaledIn: boolean;
  remove: boolean;
  /** HTTPS: CA file, the name to check the certificate for, a client certificate and key. */
  caCert: string | null;
  serverName: string | null;
  clientCert: string | null;
  clientKey: string | null;
  help: boolean;
}

export function parseDrainArgs(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): DrainArgs {
  const a: DrainArgs = {
    url: 'http://localhost:6333',
    peer: null,
    method: null,
    apiKey: env.QUIVER_API_KEY || env.SERVICE__SERVICE__API_KEY || null,
    timeoutS: 3600,
    ifScaledIn: false,
    remove: false,
    caCert: null,
    serverName: null,
    clientCert: null,
    clientKey: null,
    help: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    if (flag === '--help' || flag === '--if-scaled-in' || flag === '--remove') {
      if (eq !== -1) throw new DrainUsageError(`${flag} takes no value`);
      if (flag === '--help') a.help = true;
      else if (flag === '--remove') a.remove = true;
      else a.ifScaledIn = true;
      continue;
    }
    if (!['--url', '--peer', '--method', '--api-key', '--timeout', '--ca-cert', '--tls-server-name', '--client-cert', '--client-key'].includes(flag)) {
      throw new DrainUsageError(arg.startsWith('-') ? `unknown option ${flag}` : `unexpected argument ${JSON.stringify(arg)}`);
    }
    const value = eq !== -1 ? arg.slice(eq + 1) : argv[++i];
    if (value === undefined || value === '') throw new DrainUsageError(`${flag} needs a value`);
    if (flag === '--url') {
      try {
        const u = new URL(value);
        if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error();
      } catch {
        throw new DrainUsageError(`--url expects a REST URL such as http://10.0.0.1:6333, got ${JSON.stringify(value)}`);
      }
      a.url = value.replace(/\/+$/, '');
    } else if (flag === '--peer') {
      if (!/^[0-9]{1,20}$/.test(value)) throw new DrainUsageError(`--peer expects a peer id (an unsigned integer), got ${JSON.stringify(value)}`);
      a.peer = BigInt(value).toString();
    } else if (flag === '--method') {
      if (!['stream_records', 'snapshot', 'wal_delta'].includes(value)) throw new DrainUsageError(`--method expects stream_records, snapshot or wal_delta, got ${JSON.stringify(value)}`);
      a.method = value;
    } else if (flag === '--api-key') {
      a.apiKey = value;
    } else if (flag === '--ca-cert') {
      a.caCert = value;
    } else if (flag === '--tls-server-name') {
      a.serverName = value;
    } else if (flag === '--client-cert') {
      a.clientCert = value;
    } else if (flag === '--client-key') {
      a.clientKey = value;
    } else {
      if (!/^[0-9]{1,7}$/.test(value) || Number(value) < 1) throw new DrainUsageError(`--timeout expects a number of seconds, got ${JSON.stringify(value)}`);
      a.timeoutS = Number(value);
    }
  }
  if ((a.clientCert === null) !== (a.clientKey === null)) throw new DrainUsageError('--client-cert and --client-key go together');
  if (!a.url.startsWith('https:') && (a.caCert !== null || a.serverName !== null || a.clientCert !== null)) {
    throw new DrainUsageError('--ca-cert, --tls-server-name and --client-cert need an https:// --url');
  }
  return a;
}

type Say = (line: string) => void;

/** The TLS files, read once (a missing file is a DrainError naming it). */
const tlsFiles = new Map<string, Buffer>();
function tlsFile(file: string | null): Buffer | undefined {
  if (file === null) return undefined;
  let b = tlsFiles.get(file);
  if (b === undefined) {
    try {
      b = fs.readFileSync(file);
    } catch (err) {
      throw new DrainError(`cannot read ${file}: ${(err as Error).message}`);
    }
    tlsFiles.set(file, b);
  }
  return b;
}

/** One request to the node (node:http/https, for the TLS options fetch does not take). */
function request(a: DrainArgs, method: string, route: string): Promise<{ status: number; text: string }> {
  const u = new URL(a.url + route);
  const tls = u.protocol === 'https:';
  const options: https.RequestOptions = {
    method,
    headers: a.apiKey === null ? {} : { 'api-key': a.apiKey },
    timeout: 30_000,
    ...(tls
      ? {
          ca: tlsFile(a.caCert),
          cert: tlsFile(a.clientCert),
          key: tlsFile(a.clientKey),
          ...(a.serverName === null ? {} : { servername: a.serverName, checkServerIdentity: (_host: string, cert: PeerCertificate) => checkServerIdentity(a.serverName as string, cert) }),
        }
      : {}),
  };
  return new Promise((resolve, reject) => {
    const req = (tls ? https : http).request(u, options, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 30 s')));
    req.on('error', reject);
    req.end();
  });
}

async function call(a: DrainArgs, method: string, route: string): Promise<{ status: number; body: any }> {
  let res: { status: number; text: string };
  try {
    res = await request(a, method, route);
  } catch (err) {
    if (err instanceof DrainError) throw err;
    throw new DrainError(`${method} ${a.url}${route}: ${(err as Error).message}`);
  }
  const text = res.text;
  let body: any = null;
  try {
    body = text === '' ? null : JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, body };
}

function errorText(r: { status: number; body: any }): string {
  return `${r.status} ${typeof r.body === 'object' && r.body !== null ? (r.body.status?.error ?? JSON.stringify(r.body)) : String(r.body)}`;
}

const SA = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * Whether this pod is going away by a scale-in: its ordinal is at least the
 * StatefulSet's desired replicas. Null (with the reason) when that cannot be told.
 */
export async function scaledIn(env: NodeJS.ProcessEnv, saDir = SA): Promise<{ scaledIn: boolean; reason: string } | null> {
  const m = /-([0-9]+)$/.exec(env.HOSTNAME ?? '');
  const sts = env.STATEFULSET_NAME;
  const ns = env.POD_NAMESPACE;
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT ?? '443';
  if (m === null || !sts || !ns || !host) return null;
  let token: string;
  let ca: Buffer;
  try {
    token = fs.readFileSync(`${saDir}/token`, 'utf8').trim();
    ca = fs.readFileSync(`${saDir}/ca.crt`);
  } catch {
    return null;
  }
  const ordinal = Number(m[1]);
  const got = await new Promise<{ status: number; data: string } | null>((resolve) => {
    const req = https.get(
      { host, port: Number(port), path: `/apis/apps/v1/namespaces/${encodeURIComponent(ns)}/statefulsets/${encodeURIComponent(sts)}`, ca, headers: { authorization: `Bearer ${token}` }, timeout: 10_000 },
      (res) => {
        let data = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (data += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, data }));
      },
    );
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(null));
  });
  if (got === null) return null;
  // The StatefulSet itself is being deleted (helm uninstall): every pod goes, there is nowhere to drain to.
  if (got.status === 404) return { scaledIn: false, reason: `StatefulSet ${sts} is gone` };
  if (got.status !== 200) return null;
  let replicas: unknown;
  try {
    replicas = JSON.parse(got.data)?.spec?.replicas;
  } catch {
    return null;
  }
  if (typeof replicas !== 'number') return null;
  // Scaled to 0: every peer goes, there is nowhere to drain to.
  if (replicas === 0) return { scaledIn: false, reason: `StatefulSet ${sts} is scaled to 0 replicas` };
  return { scaledIn: ordinal >= replicas, reason: `pod ordinal ${ordinal}, StatefulSet ${sts} wants ${replicas} replicas` };
}

/** Runs the drain and follows it to its end. */
export async function drainPeer(a: DrainArgs, say: Say): Promise<void> {
  let peer = a.peer;
  if (peer === null) {
    const r = await call(a, 'GET', '/cluster');
    if (r.status !== 200) throw new DrainError(`GET /cluster: ${errorText(r)}`);
    if (r.body?.result?.status !== 'enabled') throw new DrainError(`${a.url} is not part of a cluster (distributed mode disabled): there is nothing to drain`);
    peer = String(r.body.result.peer_id);
  }
  const route = `/cluster/peer/${peer}/drain`;
  const query = [...(a.method === null ? [] : [`method=${a.method}`]), ...(a.remove ? ['remove=true'] : [])];
  const start = query.length === 0 ? route : `${route}?${query.join('&')}`;
  const started = await call(a, 'POST', start);
  if (started.status !== 200) throw new DrainError(`drain of peer ${peer} refused: ${errorText(started)}`);
  const t0 = Date.now();
  let last = '';
  let printedAt = 0;
  let status = started.body.result;
  for (;;) {
    const line = `${status.remaining.length} replica(s) left on peer ${peer}` +
      (status.transfers.length === 0 ? '' : `; transfers: ${status.transfers.map((x: any) => `${x.collection} shard ${x.shard_id} ${x.from}->${x.to} (${x.method})${x.comment ? ` ${x.comment}` : ''}`).join('; ')}`);
    // Progress comments change every second; print a line when what moves or its stage changes, else every 10 s.
    const key = line.replace(/\(\d+\/\d+\)|started \d+s ago|ETA: [0-9.]+s|unknown/g, '');
    if (key !== last || Date.now() - printedAt >= 10_000) {
      say(`[${((Date.now() - t0) / 1000).toFixed(0)}s] ${line}`);
      printedAt = Date.now();
    }
    last = key;
    if (status.state === 'done' && status.remaining.length === 0 && (!a.remove || status.removed === true)) {
      say(`peer ${peer} drained: it holds no replica (${status.shards_moved} moved, ${((Date.now() - t0) / 1000).toFixed(1)} s)${a.remove ? '; removed from the cluster' : ''}`);
      return;
    }
    if (status.state === 'failed') throw new DrainError(`drain of peer ${peer} failed: ${status.error} (run the command again to resume it)`);
    if (status.state !== 'running' && (status.remaining.length > 0 || (a.remove && status.removed !== true))) {
      // The node that ran it restarted: start it again (resumes from what is left).
      const again = await call(a, 'POST', start);
      if (again.status !== 200) throw new DrainError(`drain of peer ${peer} refused: ${errorText(again)}`);
    }
    if (Date.now() - t0 > a.timeoutS * 1000) throw new DrainError(`drain of peer ${peer} not finished within ${a.timeoutS} s (it goes on in the node; run the command again to follow it)`);
    await new Promise((r) => setTimeout(r, 1000));
    const r = await call(a, 'GET', route).catch((err: unknown) => ({ status: 0, body: String(err) }));
    if (r.status === 200) status = r.body.result;
    else say(`GET ${route}: ${errorText(r)} (retrying)`);
  }
}

export async function drainMain(argv: readonly string[]): Promise<void> {
  let a: DrainArgs;
  try {
    a = parseDrainArgs(argv);
  } catch (err) {
    if (!(err instanceof DrainUsageError)) throw err;
    process.stderr.write(`quiver drain: ${err.message}\n\n${DRAIN_USAGE}`);
    process.exit(2);
  }
  if (a.help) {
    process.stdout.write(DRAIN_USAGE);
    process.exit(0);
  }
  const say: Say = (line) => process.stdout.write(`quiver drain: ${line}\n`);
  if (a.ifScaledIn) {
    const s = await scaledIn(process.env);
    if (s === null) {
      say(`cannot tell from the Kubernetes API whether this is a scale-in: draining${a.remove ? ', without removing the peer (a pod that comes back must find itself a member)' : ''}`);
      a.remove = false;
    }
    else if (!s.scaledIn) {
      say(`not a scale-in (${s.reason}): nothing to drain`);
      process.exit(0);
    } else say(`scale-in (${s.reason}): draining`);
  }
  try {
    await drainPeer(a, say);
  } catch (err) {
    if (!(err instanceof DrainError)) throw err;
    process.stderr.write(`quiver drain: ${err.message}\n`);
    process.exit(1);
  }
  process.exit(0);
}
