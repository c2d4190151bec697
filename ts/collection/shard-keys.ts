/**
 * Shard keys of custom-sharded collections (`sharding_method: custom`): the key type,
 * which keys a request names, the key → shard ids mapping a collection keeps, and the
 * reference's wording of the refusals every layer that checks keys shares (the REST
 * dispatcher, the metadata state machine, the table of collections).
 *
 * Owns: key identity (the string "1" and the integer 1 are different keys), how a key
 * is shown in messages (a string in double quotes, an integer bare, as the reference
 * prints them), the mapping's shape and its validation. Must never: parse a request
 * body (ts/api does) or route a point (the collection does).
 */

import { BadRequestError } from '../common/errors';

/** A shard key: a string or an unsigned integer (at most 2^53 - 1, as point ids). */
export type ShardKey = string | number;

/**
 * The keys a request goes to: a list (one key is a list of one), or a target key with a
 * fallback key used when the target does not exist or has no active replica. A request
 * without any (null) goes to the default: every shard for a read; for a write, the one
 * hash ring of an auto-sharded collection (refused on a custom-sharded one).
 */
export type ShardSelector = readonly ShardKey[] | { target: ShardKey; fallback: ShardKey };

/** A request and the shard keys it goes to. */
export interface ForKeys<T> {
  req: T;
  shards: ShardSelector | null;
}

/** One key of a custom-sharded collection and its shards, in the order they were created. */
export interface ShardKeyEntry {
  key: ShardKey;
  shards: number[];
}

/** The first shard id of the first key (the reference numbers a custom collection's shards from 1). */
export const FIRST_KEYED_SHARD_ID = 1;

/** A key's identity as a map key: strings and integers never collide. */
export function keyId(k: ShardKey): string {
  return typeof k === 'number' ? `n${k}` : `s${k}`;
}

/** A key as the reference shows it in messages: `"tenant"` or `12`. */
export function showKey(k: ShardKey): string {
  return typeof k === 'number' ? String(k) : `"${k}"`;
}

export function isShardKey(x: unknown): x is ShardKey {
  return typeof x === 'string' || (typeof x === 'number' && Number.isSafeInteger(x) && x >= 0);
}

/** `keys` without repeats, in first-seen order. */
export function distinctKeys(keys: readonly ShardKey[]): ShardKey[] {
  return firstOfEach(keys, keyId);
}

/** The first item of each identity, in order. */
export function firstOfEach<T>(xs: readonly T[], identity: (x: T) => string): T[] {
  const seen = new Set<string>();
  return xs.filter((x) => {
    const id = identity(x);
    if (seen.has(id)) return false;
    seen.add(id);
    return true;
  });
}

/** The id the next key's first shard gets: never one a key had before, nor one in use. */
export function nextShardId(entries: readonly ShardKeyEntry[], recorded: number | undefined): number {
  let next = Math.max(recorded ?? FIRST_KEYED_SHARD_ID, FIRST_KEYED_SHARD_ID);
  for (const e of entries) for (const id of e.shards) next = Math.max(next, id + 1);
  return next;
}

/**
 * Problems of a stored or received key mapping (a snapshot's, a config file's), or null:
 * a list of {key, shards} with distinct keys, each with at least one shard, every shard
 * id an unsigned integer used once.
 */
export function mappingProblem(x: unknown): string | null {
  if (!Array.isArray(x)) return 'expected a list of {"key", "shards"}';
  const keys = new Set<string>();
  const ids = new Set<number>();
  for (const [i, e] of x.entries()) {
    if (typeof e !== 'object' || e === null || Array.isArray(e)) return `entry ${i} is not an object`;
    const { key, shards } = e as Record<string, unknown>;
    if (!isShardKey(key)) return `entry ${i}: key is not a string or an unsigned integer`;
    if (keys.has(keyId(key))) return `key ${showKey(key)} appears twice`;
    keys.add(keyId(key));
    if (!Array.isArray(shards) || shards.length === 0) return `key ${showKey(key)} has no shards`;
    for (const s of shards) {
      if (!Number.isSafeInteger(s) || (s as number) < 0) return `key ${showKey(key)}: shard id ${JSON.stringify(s)} is not an unsigned integer`;
      if (ids.has(s as number)) return `shard ${String(s)} belongs to two keys`;
      ids.add(s as number);
    }
  }
  return null;
}

// -- the reference's refusals (src/common/collections.rs, do_update_collection_cluster) ------

/** A key created on (or dropped from) an auto-sharded collection. The reference words the drop the same way. */
export function autoShardingRefusal(): BadRequestError {
  return new BadRequestError('Shard Key cannot be created with Auto sharding method');
}

export function keyExistsError(key: ShardKey, collection: string): BadRequestError {
  return new BadRequestError(`Sharding key ${showKey(key)} already exists for collection ${collection}`);
}

export function keyMissingError(key: ShardKey, collection: string): BadRequestError {
  return new BadRequestError(`Sharding key ${showKey(key)} does not exist for collection ${collection}`);
}

export function emptyPlacementError(key: ShardKey): BadRequestError {
  return new BadRequestError(`Sharding key ${showKey(key)} placement cannot be empty. If you want to use random placement, do not specify placement`);
}

export function unknownPeerError(peer: string): BadRequestError {
  return new BadRequestError(`Peer ${peer} does not exist`);
}
