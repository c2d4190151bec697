/**
 * The `ShardSnapshots` service of proto/p2p.proto: a peer asks another for a snapshot
 * of that peer's Active replica of a shard, streamed back (cluster backups,
 * ts/snapshots/backup.ts; transfers by snapshot, on their target).
 *
 * Owns: the wire of that call (a first message with the content's point count and
 * digest, then the archive in pieces, with the receiver's flow control), its deadline,
 * and the refusal of a replica that is not Active here. Must never: choose the source
 * replica (the backup does) or build the archive (ts/snapshots does).
 */

import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';

import { QuiverError, ShardUnavailableError } from '../../common/errors';
import type { ShardTarget } from '../../collection/cluster-link';
import { isActive } from '../../collection/replica-state';
import type { Snapshots } from '../../snapshots/snapshots';
import type { TableOfContent } from '../../storage/toc';
import type { RateLimiter } from '../../transfer/rate';
import { CHANNEL_OPTIONS, grpcTarget, p2pPackage, type P2PTls } from './grpc';
import { callError, failureOfServiceError, errorStatus, resolveTarget, targetMsg, type TargetMsg } from './points';

interface Chunk {
  data: Buffer;
  info: string;
}

interface SnapshotRequest {
  target: TargetMsg;
  /** Whether the first message carries the content's point count and digest (backups). */
  content: boolean;
  /** Whether the archive feeds a shard transfer (its target asks): sent at the pace of this peer's transfers. */
  transfer: boolean;
}

export interface ShardSnapshotBackend {
  toc: TableOfContent;
  snapshots: Snapshots;
  /** This peer's id. */
  peer: string;
  /** Resolves once local changes from consensus entries applied so far are made. */
  settled(): Promise<void>;
  /** The pace of what this peer sends for transfers: an archive asked for by a transfer's target pays into it. */
  transferRate: RateLimiter;
}

/** Waits until `call` can take more, or it went away (cancelled, closed). */
function drained(call: grpc.ServerWritableStream<unknown, Chunk>): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      call.off('drain', done);
      call.off('cancelled', done);
      call.off('close', done);
      resolve();
    };
    call.on('drain', done);
    call.on('cancelled', done);
    call.on('close', done);
  });
}

async function serveStream(b: ShardSnapshotBackend, call: grpc.ServerWritableStream<SnapshotRequest, Chunk>, logger: Logger): Promise<void> {
  try {
    const t = call.request.target;
    const { collection, set } = await resolveTarget(b, t);
    const state = set.replicas?.[b.peer];
    if (set.localReplica === null || state === undefined || !isActive(state)) {
      throw new ShardUnavailableError(`peer ${b.peer} has no active replica of shard ${t.shard} of collection \`${t.collection}\` (${state ?? 'none'})`);
    }
    let stream: Readable;
    let info = '{}';
    if (call.request.content) {
      const got = await b.snapshots.streamShardWithContent(collection.name, t.shard);
      stream = got.stream;
      info = JSON.stringify({ points: got.points, digest: got.digest });
    } else {
      stream = await b.snapshots.streamShard(collection.name, t.shard);
    }
    try {
      if (call.cancelled) return;
      call.write({ data: Buffer.alloc(0), info });
      for await (const piece of stream) {
        if (call.cancelled) return;
        if (!call.write({ data: piece as Buffer, info: '' })) await drained(call);
        if (call.request.transfer) await b.transferRate.take((piece as Buffer).length);
      }
    } finally {
      stream.destroy();
    }
    call.end();
  } catch (err) {
    if (!(err instanceof QuiverError)) logger.warn({ err }, 'p2p shard snapshot call failed');
    call.emit('error', errorStatus(err));
  }
}

/** Adds the ShardSnapshots service to a p2p gRPC server. */
export function addShardSnapshotService(server: grpc.Server, backend: ShardSnapshotBackend, logger: Logger): void {
  server.addService(p2pPackage().ShardSnapshots.service, {
    Stream: (call: grpc.ServerWritableStream<SnapshotRequest, Chunk>) => void serveStream(backend, call, logger),
  });
}

interface ShardSnapshotsClient extends grpc.Client {
  Stream(req: SnapshotRequest, meta: grpc.Metadata, opts: grpc.CallOptions): grpc.ClientReadableStream<Chunk>;
}

/**
 * Streams `peer`'s (at `uri`) snapshot of its Active replica of `target` into `file`,
 * within `timeoutMs` (and until `signal` aborts); resolves with the archive's size and
 * SHA-256 as received, and, when `content` is asked for, the content's point count and
 * digest as the source recorded them.
 */
export async function fetchShardSnapshot(
  opts: { uri: string; peer: string; tls: P2PTls | null; timeoutMs: number; content: boolean; transfer: boolean; signal?: AbortSignal },
  target: ShardTarget,
  file: string,
): Promise<{ points: number | null; digest: string | null; size: number; sha256: string }> {
  const { target: address } = grpcTarget(opts.uri);
  const creds = opts.tls ? grpc.credentials.createSsl(opts.tls.ca, opts.tls.key, opts.tls.cert) : grpc.credentials.createInsecure();
  const client = new (p2pPackage().ShardSnapshots)(address, creds, CHANNEL_OPTIONS) as ShardSnapshotsClient;
  let info: { points?: number; digest?: string } | null = null;
  const h = createHash('sha256');
  let size = 0;
  const bytes = new Transform({
    writableObjectMode: true,
    transform(msg: Chunk, _enc, cb) {
      if (info === null) {
        try {
          info = JSON.parse(msg.info) as { points?: number; digest?: string };
        } catch {
          cb(new ShardUnavailableError(`peer ${opts.peer} sent a shard snapshot without its header`));
          return;
        }
        cb();
        return;
      }
      h.update(msg.data);
      size += msg.data.length;
      cb(null, msg.data);
    },
  });
  const onAbort = () => call?.cancel();
  let call: grpc.ClientReadableStream<Chunk> | null = null;
  try {
    call = client.Stream({ target: targetMsg(target), content: opts.content, transfer: opts.transfer }, new grpc.Metadata(), { deadline: Date.now() + opts.timeoutMs });
    if (opts.signal?.aborted) call.cancel();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    await pipeline(call, bytes, createWriteStream(file));
  } catch (err) {
    if (err !== null && typeof err === 'object' && 'code' in err && 'details' in err) throw callError(failureOfServiceError(err as grpc.ServiceError), opts.peer, opts.timeoutMs);
    throw err;
  } finally {
    opts.signal?.removeEventListener('abort', onAbort);
    client.close();
  }
  const got = info as { points?: number; digest?: string } | null;
  if (got === null) throw new ShardUnavailableError(`peer ${opts.peer} sent a shard snapshot without its header`);
  if (opts.content && (typeof got.points !== 'number' || typeof got.digest !== 'string')) throw new ShardUnavailableError(`peer ${opts.peer} sent a shard snapshot without its content figures`);
  return { points: got.points ?? null, digest: got.digest ?? null, size, sha256: h.digest('hex') };
}
