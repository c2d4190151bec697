/**
 * `qdrant.Snapshots`: collection and full-storage snapshots over gRPC (create, list,
 * delete), on the same calls as the REST routes (ts/snapshots through
 * ts/api/request/snapshots.ts). The reference's gRPC contract has no download, upload
 * or recovery: those are REST only, here as there.
 *
 * Owns: those translations. Must never: touch snapshot files itself.
 */

import type { Snapshots } from '../../snapshots/snapshots';
import type { SnapshotDescription } from '../../snapshots/store';
import type { TableOfContent } from '../../storage/toc';
import { collectionSnapshotDir, listCollectionSnapshots } from '../request/snapshots';
import { int64Text, seconds, timestampOf } from './convert/common';
import type { GrpcMethod, GrpcService } from './method';

type Msg = Record<string, any>;

/** A SnapshotDescription as the proto message. */
function describe(d: SnapshotDescription): Msg {
  const out: Msg = { name: d.name, size: int64Text(d.size) };
  const t = timestampOf(d.creation_time);
  if (t !== undefined) out.creation_time = t;
  if (d.checksum !== undefined) out.checksum = d.checksum;
  return out;
}

export function snapshotsService(toc: TableOfContent, snapshots: Snapshots): GrpcService {
  const method = <Req extends Msg>(m: GrpcMethod<Req>): GrpcMethod<Req> => m;
  const name = (r: Msg): string => r.collection_name ?? '';
  const snapshot = (r: Msg): string => r.snapshot_name ?? '';
  return {
    Create: method({
      access: 'POST /collections/{collection_name}/snapshots',
      params: (r) => ({ collection_name: name(r) }),
      async handle(r) {
        const started = process.hrtime.bigint();
        toc.get(name(r));
        return { snapshot_description: describe(await snapshots.createCollection(name(r))), time: seconds(started) };
      },
    }),

    List: method({
      access: 'GET /collections/{collection_name}/snapshots',
      params: (r) => ({ collection_name: name(r) }),
      async handle(r) {
        const started = process.hrtime.bigint();
        const list = await listCollectionSnapshots(toc, snapshots, name(r));
        return { snapshot_descriptions: list.map(describe), time: seconds(started) };
      },
    }),

    Delete: method({
      access: 'DELETE /collections/{collection_name}/snapshots/{snapshot_name}',
      params: (r) => ({ collection_name: name(r), snapshot_name: snapshot(r) }),
      async handle(r) {
        const started = process.hrtime.bigint();
        const dir = collectionSnapshotDir(toc, name(r));
        await snapshots.store.describe(dir, snapshot(r));
        await snapshots.delete(dir, snapshot(r));
        return { time: seconds(started) };
      },
    }),

    CreateFull: method({
      access: 'POST /snapshots',
      async handle() {
        const started = process.hrtime.bigint();
        return { snapshot_description: describe(await snapshots.createFull()), time: seconds(started) };
      },
    }),

    ListFull: method({
      access: 'GET /snapshots',
      async handle() {
        const started = process.hrtime.bigint();
        return { snapshot_descriptions: (await snapshots.list('')).map(describe), time: seconds(started) };
      },
    }),

    DeleteFull: method({
      access: 'DELETE /snapshots/{snapshot_name}',
      params: (r) => ({ snapshot_name: snapshot(r) }),
      async handle(r) {
        const started = process.hrtime.bigint();
        await snapshots.store.describe('', snapshot(r));
        await snapshots.delete('', snapshot(r));
        return { time: seconds(started) };
      },
    }),
  };
}
