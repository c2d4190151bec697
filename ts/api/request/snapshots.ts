/**
 * The snapshot requests of the reference's API that REST and gRPC share: which store
 * folder a collection's snapshots are in (the name checked so that a crafted one never
 * reaches another folder), and listing them (snapshots of a deleted collection stay
 * listed; a name with neither a collection nor snapshots is the reference's 404).
 *
 * Owns: those checks. Must never: touch snapshot files itself (ts/snapshots).
 */

import { NotFoundError } from '../../common/errors';
import { Snapshots } from '../../snapshots/snapshots';
import type { SnapshotDescription } from '../../snapshots/store';
import { validateCollectionName, type TableOfContent } from '../../storage/toc';

/**
 * The store folder of collection (or alias) `raw`'s snapshots. The name must be a valid
 * collection name (no separators, no leading dot): snapshots of a deleted collection
 * stay reachable, but a crafted name must never reach another folder.
 */
export function collectionSnapshotDir(toc: TableOfContent, raw: string): string {
  const name = toc.resolveName(raw);
  try {
    validateCollectionName(name);
  } catch {
    throw new NotFoundError(`Collection \`${raw}\` doesn't exist!`);
  }
  return Snapshots.collectionDir(name);
}

/** The snapshots of collection `raw`: needs the collection, or at least snapshots of it (kept after the collection was deleted). */
export async function listCollectionSnapshots(toc: TableOfContent, snapshots: Snapshots, raw: string): Promise<SnapshotDescription[]> {
  const list = await snapshots.list(collectionSnapshotDir(toc, raw));
  if (list.length === 0 && !toc.has(raw)) throw new NotFoundError(`Collection \`${raw}\` doesn't exist!`);
  return list;
}
