/**
 * REST routes of shard keys (custom sharding): `GET /collections/{name}/shards` (list),
 * `PUT /collections/{name}/shards` (CreateShardingKey) and
 * `POST /collections/{name}/shards/delete` (DropShardingKey).
 *
 * Owns: their request and response shapes (ShardKeysResponse: the keys of a
 * custom-sharded collection, nothing for an auto-sharded one). Must never: decide
 * placement or apply a change (the dispatcher and the layers below do).
 */

import type { Context } from 'koa';

import { BadInputError, BadRequestError, FormatError, ValidationError } from '../../common/errors';
import { REPLICA_STATES, type ReplicaState } from '../../collection/replica-state';
import type { CreateShardKeyRequest, Dispatcher } from '../../storage/dispatcher';
import { ok } from '../envelope';
import { body, param, readTimeout, shardKey, type Obj } from '../request/parse';
import type { RouteTable } from './route';

/** `shards_number` / `replication_factor`: absent, or a u32 of at least 1 (the reference's NonZeroU32). */
function nonZero(x: unknown, field: string): number | null {
  if (x === undefined || x === null) return null;
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x > 0xffff_ffff) {
    throw new FormatError(`${field}: expected an unsigned 32-bit integer, got ${JSON.stringify(x)}`);
  }
  if (x === 0) throw new FormatError(`${field}: invalid value: integer \`0\`, expected a nonzero u32`);
  return x;
}

export function parseCreate(b: Obj): CreateShardKeyRequest {
  if (b.shard_key === undefined || b.shard_key === null) throw new FormatError('missing field `shard_key`');
  const key = shardKey(b.shard_key, 'shard_key');
  const shardsNumber = nonZero(b.shards_number, 'shards_number');
  // As for a collection's shard_number: Quiver opens at most 1024 shards at once.
  if (shardsNumber !== null && shardsNumber > 1024) throw new ValidationError(`shards_number: value ${shardsNumber} invalid, must be 1024 or smaller`);
  const replicationFactor = nonZero(b.replication_factor, 'replication_factor');
  let placement: string[] | null = null;
  if (b.placement !== undefined && b.placement !== null) {
    if (!Array.isArray(b.placement)) throw new FormatError('placement: expected an array of peer ids');
    placement = b.placement.map((p: unknown, i: number) => {
      if (typeof p !== 'number' || !Number.isSafeInteger(p) || p < 0) throw new FormatError(`placement[${i}]: expected a peer id (an unsigned integer), got ${JSON.stringify(p)}`);
      return String(p);
    });
  }
  if (b.initial_state !== undefined && b.initial_state !== null) {
    const s = b.initial_state;
    if (typeof s !== 'string' || !REPLICA_STATES.includes(s as ReplicaState)) {
      throw new FormatError(`initial_state: unknown variant ${JSON.stringify(s)}, expected one of ${REPLICA_STATES.map((x) => `\`${x}\``).join(', ')}`);
    }
    if (s !== 'Active' && s !== 'Partial') throw new BadRequestError(`Initial state cannot be ${s}, only Active or Partial are allowed`);
    // Partial shards wait for a transfer to fill them, and shard transfers are not built yet.
    if (s === 'Partial') throw new BadInputError('initial_state: `Partial` is not supported by Quiver yet (the replicas of a new shard key start Active); leave it out or use `Active`');
  }
  return { key, shardsNumber, replicationFactor, placement };
}

export function addShardKeyRoutes(routes: RouteTable, dispatcher: Dispatcher): void {
  routes.add('GET', '/collections/{collection_name}/shards', (ctx: Context) => {
    const keys = dispatcher.toc.get(param(ctx, 'collection_name')).shardKeys();
    ok(ctx, keys === null ? {} : { shard_keys: keys.map((key) => ({ key })) });
  });

  routes.add('PUT', '/collections/{collection_name}/shards', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    const req = parseCreate(body(ctx));
    ok(ctx, await dispatcher.createShardKey(param(ctx, 'collection_name'), req, timeout));
  });

  routes.add('POST', '/collections/{collection_name}/shards/delete', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    const b = body(ctx);
    if (b.shard_key === undefined || b.shard_key === null) throw new FormatError('missing field `shard_key`');
    ok(ctx, await dispatcher.dropShardKey(param(ctx, 'collection_name'), shardKey(b.shard_key, 'shard_key'), timeout));
  });
}
