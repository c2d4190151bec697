/**
 * REST routes of snapshots: collection snapshots, shard snapshots and full-storage
 * snapshots (create, list, download, delete, recover, upload), and whole-cluster
 * backups (ours: `POST /cluster/backup`). In cluster mode recoveries go through
 * consensus (ts/snapshots/cluster.ts).
 *
 * Owns: request and response shapes, `wait` (default true; false answers 202 and the
 * work goes on: creates and recoveries as snapshot jobs, ts/snapshots/jobs.ts, whose id
 * the 202 carries as `job_id` and in `Location`), the job routes (ours), multipart upload parsing (streamed into Snapshots.receive, never
 * held in memory), download headers. Must never: touch snapshot files itself (ts/snapshots).
 */

import busboy from 'busboy';
import type { Context } from 'koa';
import type { Logger } from 'pino';

import type { ClusterBackup } from '../../snapshots/backup';
import type { ClusterSnapshots } from '../../snapshots/cluster';
import type { JobKind, SnapshotJobs } from '../../snapshots/jobs';
import { PRIORITIES, Snapshots, type Priority, type RecoverySource } from '../../snapshots/snapshots';
import type { TableOfContent } from '../../storage/toc';
import { accepted, ok } from '../envelope';
import { BadRequestError, FormatError, StandaloneModeError } from '../../common/errors';
import { QueryFormatError } from '../errors';
import { body, optionalBody, param, queryBool, readTimeout } from '../request/parse';
import { collectionSnapshotDir, listCollectionSnapshots } from '../request/snapshots';
import type { RouteTable } from './route';

function priorityOf(x: unknown, where: string, Err: typeof FormatError | typeof QueryFormatError): Priority {
  if (x === undefined || x === null) return 'replica';
  if (typeof x === 'string' && (PRIORITIES as readonly string[]).includes(x)) return x as Priority;
  throw new Err(`${where}: unknown variant \`${String(x)}\`, expected one of \`replica\`, \`snapshot\`, \`no_sync\``);
}

function checksumOf(x: unknown, where: string, Err: typeof FormatError | typeof QueryFormatError): string | null {
  if (x === undefined || x === null) return null;
  if (typeof x !== 'string') throw new Err(`${where}: expected a SHA-256 hex string`);
  return x;
}

function shardIdOf(ctx: Context): number {
  const raw = param(ctx, 'shard_id');
  if (!/^[0-9]{1,9}$/.test(raw)) throw new QueryFormatError(`shard_id: can not parse \`${raw}\` as a shard id (an unsigned integer)`);
  return Number(raw);
}

/** A snapshot job's kind and target, for the operations that run as jobs with wait=false. */
interface JobSpec {
  jobs: SnapshotJobs | null;
  kind: JobKind;
  collection?: string;
  shardId?: number;
}

/**
 * Runs `work` and answers with its result, or (wait=false) answers 202 at once. With a
 * job spec the work runs as a snapshot job: the 202 is the reference's
 * `{"status": "accepted", "time": ...}` (no `result`, as the reference) plus `job_id`,
 * and `Location: /snapshots/jobs/<id>`. Without one the outcome is only logged.
 */
async function waitOrAccept(ctx: Context, logger: Logger, what: string, work: () => Promise<unknown>, job: JobSpec | null = null): Promise<void> {
  readTimeout(ctx);
  if (queryBool(ctx, 'wait', true)) {
    ok(ctx, await work());
    return;
  }
  if (job !== null && job.jobs !== null) {
    const id = await job.jobs.start(job.kind, { collection: job.collection, shardId: job.shardId }, work);
    accepted(ctx);
    (ctx.body as Record<string, unknown>).job_id = id;
    ctx.set('Location', `/snapshots/jobs/${id}`);
    return;
  }
  work().then(
    () => logger.info({ what }, 'background snapshot operation finished'),
    (err: unknown) => logger.error({ err, what }, 'background snapshot operation failed'),
  );
  accepted(ctx);
}

/** The `snapshot` part of a multipart upload, received (unpacked as it arrives: Snapshots.receive; hashed when a checksum is to be checked). */
function receiveUpload(ctx: Context, snapshots: Snapshots, hash: boolean): Promise<RecoverySource> {
  const type = ctx.get('content-type');
  if (!type.toLowerCase().startsWith('multipart/form-data')) {
    throw new BadRequestError('the snapshot must be uploaded as multipart/form-data with a part named `snapshot`');
  }
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({ headers: ctx.req.headers, limits: { files: 1, fields: 16, fieldSize: 4096 } });
    } catch (err) {
      reject(new BadRequestError(`malformed multipart upload: ${(err as Error).message}`));
      return;
    }
    let receiving: Promise<RecoverySource> | null = null;
    let failed: Error | null = null;
    bb.on('file', (field, stream) => {
      if (field !== 'snapshot' || receiving !== null) {
        stream.resume();
        return;
      }
      receiving = snapshots.receive(stream, hash);
      receiving.catch(() => undefined);
    });
    bb.on('error', (err: Error) => {
      failed = new BadRequestError(`malformed multipart upload: ${err.message}`);
      ctx.req.unpipe(bb);
      ctx.req.resume();
      if (receiving === null) reject(failed);
      else receiving.then(async (got) => {
        await snapshots.discard(got);
        reject(failed);
      }, () => reject(failed));
    });
    bb.on('close', () => {
      if (failed) return;
      if (receiving === null) {
        reject(new BadRequestError('the multipart upload has no part named `snapshot`'));
        return;
      }
      receiving.then(resolve, reject);
    });
    ctx.req.on('aborted', () => bb.destroy(new Error('the client closed the connection during the upload')));
    ctx.req.pipe(bb);
  });
}

async function download(ctx: Context, snapshots: Snapshots, dir: string, name: string): Promise<void> {
  const { stream, size } = await snapshots.open(dir, name);
  ctx.status = 200;
  ctx.type = 'application/octet-stream';
  ctx.set('Content-Disposition', `attachment; filename="${name.replace(/["\\]/g, '_')}"`);
  ctx.body = stream;
  ctx.length = size;
}

/**
 * `cluster`: in cluster mode, recoveries go through it (consensus registers the
 * recovered shards, the other replicas follow the priority: ts/snapshots/cluster.ts).
 */
export function addSnapshotRoutes(
  routes: RouteTable,
  toc: TableOfContent,
  snapshots: Snapshots,
  logger: Logger,
  cluster: ClusterSnapshots | null = null,
  backup: ClusterBackup | null = null,
  jobs: SnapshotJobs | null = null,
  scheduled: (() => unknown) | null = null,
): void {
  const recoverCollection = (name: string, source: RecoverySource, priority: Priority, checksum: string | null) =>
    cluster === null ? snapshots.recoverCollection(name, source, priority, checksum) : cluster.recoverCollection(name, source, priority, checksum);
  const recoverShard = (name: string, id: number, source: RecoverySource, priority: Priority, checksum: string | null) =>
    cluster === null ? snapshots.recoverShard(name, id, source, priority, checksum) : cluster.recoverShard(name, id, source, priority, checksum);
  /**
   * The collection and shard a shard recovery names: on a single node the local shard
   * must exist; in a cluster the shard (this peer need not hold a replica of it yet).
   */
  const recoveryTarget = (ctx: Context): { name: string; id: number } => {
    if (cluster === null) {
      const { c, id } = shardDir(ctx);
      return { name: c.name, id };
    }
    const id = shardIdOf(ctx);
    return { name: cluster.checkShard(param(ctx, 'collection_name'), id), id };
  };
  const collectionDir = (ctx: Context) => collectionSnapshotDir(toc, param(ctx, 'collection_name'));

  // -- collection snapshots ----------------------------------------------------------------
  routes.add('GET', '/collections/{collection_name}/snapshots', async (ctx: Context) => {
    ok(ctx, await listCollectionSnapshots(toc, snapshots, param(ctx, 'collection_name')));
  });
  routes.add('POST', '/collections/{collection_name}/snapshots', async (ctx: Context) => {
    const name = param(ctx, 'collection_name');
    toc.get(name);
    await waitOrAccept(ctx, logger, `snapshot of ${name}`, () => snapshots.createCollection(name), { jobs, kind: 'create_collection_snapshot', collection: name });
  });
  routes.add('GET', '/collections/{collection_name}/snapshots/{snapshot_name}', async (ctx: Context) => {
    await download(ctx, snapshots, collectionDir(ctx), param(ctx, 'snapshot_name'));
  });
  routes.add('DELETE', '/collections/{collection_name}/snapshots/{snapshot_name}', async (ctx: Context) => {
    const dir = collectionDir(ctx);
    const name = param(ctx, 'snapshot_name');
    await snapshots.store.describe(dir, name);
    await waitOrAccept(ctx, logger, `delete snapshot ${name}`, async () => {
      await snapshots.delete(dir, name);
      return true;
    });
  });
  routes.add('PUT', '/collections/{collection_name}/snapshots/recover', async (ctx: Context) => {
    const b = body(ctx);
    if (typeof b.location !== 'string') throw new FormatError('missing field `location`');
    const priority = priorityOf(b.priority, 'priority', FormatError);
    const checksum = checksumOf(b.checksum, 'checksum', FormatError);
    const name = param(ctx, 'collection_name');
    await waitOrAccept(ctx, logger, `recover ${name}`, async () => {
      await recoverCollection(name, { location: b.location as string }, priority, checksum);
      return true;
    }, { jobs, kind: 'recover_collection_snapshot', collection: name });
  });
  routes.addStreaming('POST', '/collections/{collection_name}/snapshots/upload', async (ctx: Context) => {
    const priority = priorityOf(ctx.query.priority, 'priority', QueryFormatError);
    const checksum = checksumOf(ctx.query.checksum, 'checksum', QueryFormatError);
    // Every query parameter is checked before the upload is read: a bad one must not
    // cost a transfer, nor leave a received file behind.
    queryBool(ctx, 'wait', true);
    readTimeout(ctx);
    const name = param(ctx, 'collection_name');
    const source = await receiveUpload(ctx, snapshots, checksum !== null);
    await waitOrAccept(ctx, logger, `recover ${name} from an upload`, async () => {
      await recoverCollection(name, source, priority, checksum);
      return true;
    }, { jobs, kind: 'recover_collection_snapshot', collection: name });
  });

  // -- shard snapshots -----------------------------------------------------------------------
  const shardDir = (ctx: Context) => {
    const c = toc.get(param(ctx, 'collection_name'));
    const id = shardIdOf(ctx);
    c.localShard(id);
    return { c, id, dir: Snapshots.shardDir(c.name, id) };
  };
  routes.add('GET', '/collections/{collection_name}/shards/{shard_id}/snapshots', async (ctx: Context) => {
    ok(ctx, await snapshots.list(shardDir(ctx).dir));
  });
  routes.add('POST', '/collections/{collection_name}/shards/{shard_id}/snapshots', async (ctx: Context) => {
    const { c, id } = shardDir(ctx);
    await waitOrAccept(ctx, logger, `snapshot of ${c.name} shard ${id}`, () => snapshots.createShard(c.name, id), { jobs, kind: 'create_shard_snapshot', collection: c.name, shardId: id });
  });
  routes.add('GET', '/collections/{collection_name}/shards/{shard_id}/snapshot', async (ctx: Context) => {
    const { c, id } = shardDir(ctx);
    const stream = await snapshots.streamShard(c.name, id);
    ctx.status = 200;
    ctx.type = 'application/octet-stream';
    ctx.body = stream;
  });
  routes.add('GET', '/collections/{collection_name}/shards/{shard_id}/snapshots/{snapshot_name}', async (ctx: Context) => {
    await download(ctx, snapshots, shardDir(ctx).dir, param(ctx, 'snapshot_name'));
  });
  routes.add('DELETE', '/collections/{collection_name}/shards/{shard_id}/snapshots/{snapshot_name}', async (ctx: Context) => {
    const { dir } = shardDir(ctx);
    const name = param(ctx, 'snapshot_name');
    await snapshots.store.describe(dir, name);
    await waitOrAccept(ctx, logger, `delete snapshot ${name}`, async () => {
      await snapshots.delete(dir, name);
      return true;
    });
  });
  routes.add('PUT', '/collections/{collection_name}/shards/{shard_id}/snapshots/recover', async (ctx: Context) => {
    const { name, id } = recoveryTarget(ctx);
    const b = body(ctx);
    if (typeof b.location !== 'string') throw new FormatError('missing field `location`');
    const priority = priorityOf(b.priority, 'priority', FormatError);
    const checksum = checksumOf(b.checksum, 'checksum', FormatError);
    // The reference also takes a bare path here; a path is read as a file location.
    const location = b.location.startsWith('/') ? `file://${b.location}` : b.location;
    await waitOrAccept(ctx, logger, `recover ${name} shard ${id}`, async () => {
      await recoverShard(name, id, { location }, priority, checksum);
      return true;
    }, { jobs, kind: 'recover_shard_snapshot', collection: name, shardId: id });
  });
  routes.addStreaming('POST', '/collections/{collection_name}/shards/{shard_id}/snapshots/upload', async (ctx: Context) => {
    const { name, id } = recoveryTarget(ctx);
    const priority = priorityOf(ctx.query.priority, 'priority', QueryFormatError);
    const checksum = checksumOf(ctx.query.checksum, 'checksum', QueryFormatError);
    queryBool(ctx, 'wait', true);
    readTimeout(ctx);
    const source = await receiveUpload(ctx, snapshots, checksum !== null);
    await waitOrAccept(ctx, logger, `recover ${name} shard ${id} from an upload`, async () => {
      await recoverShard(name, id, source, priority, checksum);
      return true;
    }, { jobs, kind: 'recover_shard_snapshot', collection: name, shardId: id });
  });

  // -- whole-cluster backups (ours) -----------------------------------------------------------
  // One archive of every shard of the collections asked for (all by default), each from an
  // Active replica on whichever peer holds it, in this peer's snapshot store (listed,
  // downloaded and deleted as a full snapshot): ts/snapshots/backup.ts.
  if (backup !== null) {
    routes.add('POST', '/cluster/backup', async (ctx: Context) => {
      const names = optionalBody(ctx).collections;
      if (names !== undefined && names !== null && (!Array.isArray(names) || !names.every((n) => typeof n === 'string'))) {
        throw new FormatError('collections: expected a list of collection names');
      }
      const collections = Array.isArray(names) ? (names as string[]) : null;
      await waitOrAccept(ctx, logger, 'cluster backup', () => backup.create(collections));
    });
  }

  // -- snapshot jobs (ours); registered before /snapshots/{snapshot_name} -------------------
  if (jobs !== null) {
    routes.add('GET', '/snapshots/jobs', async (ctx: Context) => {
      ok(ctx, { jobs: jobs.list() });
    });
    routes.add('GET', '/snapshots/jobs/{job_id}', async (ctx: Context) => {
      ok(ctx, jobs.get(param(ctx, 'job_id')));
    });
  }

  // Ours: the runs of scheduled snapshots in cluster mode, as consensus holds them
  // (ts/snapshots/cluster-schedule.ts): per schedule and shard (`collection/shard`), the
  // latest run's due time, peer and state, the snapshots kept and those being deleted.
  routes.add('GET', '/snapshots/schedules', async (ctx: Context) => {
    if (scheduled === null) throw new StandaloneModeError();
    ok(ctx, { schedules: scheduled() });
  });

  // -- full-storage snapshots --------------------------------------------------------------
  routes.add('GET', '/snapshots', async (ctx: Context) => {
    ok(ctx, await snapshots.list(''));
  });
  routes.add('POST', '/snapshots', async (ctx: Context) => {
    await waitOrAccept(ctx, logger, 'full-storage snapshot', () => snapshots.createFull(), { jobs, kind: 'create_full_snapshot' });
  });
  routes.add('GET', '/snapshots/{snapshot_name}', async (ctx: Context) => {
    await download(ctx, snapshots, '', param(ctx, 'snapshot_name'));
  });
  routes.add('DELETE', '/snapshots/{snapshot_name}', async (ctx: Context) => {
    const name = param(ctx, 'snapshot_name');
    await snapshots.store.describe('', name);
    await waitOrAccept(ctx, logger, `delete snapshot ${name}`, async () => {
      await snapshots.delete('', name);
      return true;
    });
  });
}
