/**
 * `POST /collections/{name}/cluster` (ClusterOperations of the reference): one operation
 * per request: `move_shard`, `replicate_shard`, `abort_transfer`, `restart_transfer`,
 * `drop_replica`, `create_sharding_key`, `drop_sharding_key`. Resharding and
 * `replicate_points` answer 501.
 *
 * Owns: parsing the body into a typed change. Must never: check it against the cluster
 * (the dispatcher and the state machine do).
 */

import type { Context } from 'koa';

import { FormatError, NotImplementedError } from '../../common/errors';
import type { Dispatcher, ReplicaChange, TransferMethod } from '../../storage/dispatcher';
import { ok } from '../envelope';
import { body, param, readTimeout, shardKey, type Obj } from '../request/parse';
import type { RouteTable } from './route';
import { parseCreate } from './shard-keys';

const OPERATIONS = ['move_shard', 'replicate_shard', 'abort_transfer', 'restart_transfer', 'drop_replica', 'create_sharding_key', 'drop_sharding_key', 'start_resharding', 'abort_resharding', 'replicate_points'];
const METHODS: readonly TransferMethod[] = ['stream_records', 'snapshot', 'wal_delta', 'resharding_stream_records'];

function obj(x: unknown, field: string): Obj {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) throw new FormatError(`${field}: expected an object`);
  return x as Obj;
}

function u32(o: Obj, field: string, where: string): number {
  const x = o[field];
  if (x === undefined || x === null) throw new FormatError(`${where}: missing field \`${field}\``);
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x > 0xffff_ffff) throw new FormatError(`${where}.${field}: expected an unsigned 32-bit integer, got ${JSON.stringify(x)}`);
  return x;
}

function peer(o: Obj, field: string, where: string): string {
  const x = o[field];
  if (x === undefined || x === null) throw new FormatError(`${where}: missing field \`${field}\``);
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0) throw new FormatError(`${where}.${field}: expected a peer id (an unsigned integer), got ${JSON.stringify(x)}`);
  return String(x);
}

function method(o: Obj, where: string, required: boolean): TransferMethod | null {
  const m = o.method;
  if (m === undefined || m === null) {
    if (required) throw new FormatError(`${where}: missing field \`method\``);
    return null;
  }
  if (typeof m !== 'string' || !METHODS.includes(m as TransferMethod)) {
    throw new FormatError(`${where}.method: unknown variant ${JSON.stringify(m)}, expected one of ${METHODS.map((x) => `\`${x}\``).join(', ')}`);
  }
  return m as TransferMethod;
}

/** The change a body asks for. */
function parseChange(b: Obj): { replicas: ReplicaChange } | { createKey: Obj } | { dropKey: Obj } {
  const keys = Object.keys(b);
  if (keys.length !== 1 || !OPERATIONS.includes(keys[0])) {
    throw new FormatError(`expected exactly one of ${OPERATIONS.map((x) => `\`${x}\``).join(', ')}`);
  }
  const op = keys[0];
  const o = obj(b[op], op);
  switch (op) {
    case 'move_shard':
    case 'replicate_shard':
      return { replicas: { kind: op === 'move_shard' ? 'move' : 'replicate', shard: u32(o, 'shard_id', op), from: peer(o, 'from_peer_id', op), to: peer(o, 'to_peer_id', op), method: method(o, op, false) } };
    case 'abort_transfer':
      return { replicas: { kind: 'abort', shard: u32(o, 'shard_id', op), from: peer(o, 'from_peer_id', op), to: peer(o, 'to_peer_id', op) } };
    case 'restart_transfer':
      return { replicas: { kind: 'restart', shard: u32(o, 'shard_id', op), from: peer(o, 'from_peer_id', op), to: peer(o, 'to_peer_id', op), method: method(o, op, true)! } };
    case 'drop_replica':
      return { replicas: { kind: 'drop_replica', shard: u32(o, 'shard_id', op), peer: peer(o, 'peer_id', op) } };
    case 'create_sharding_key':
      return { createKey: o };
    case 'drop_sharding_key':
      return { dropKey: o };
    default:
      throw new NotImplementedError(`\`${op}\` is not available in this version of Quiver (resharding is not built)`);
  }
}

export function addClusterUpdateRoute(routes: RouteTable, dispatcher: Dispatcher): void {
  routes.add('POST', '/collections/{collection_name}/cluster', async (ctx: Context) => {
    const timeout = readTimeout(ctx);
    const change = parseChange(body(ctx));
    const name = param(ctx, 'collection_name');
    if ('replicas' in change) {
      ok(ctx, await dispatcher.changeReplicas(name, change.replicas, timeout));
    } else if ('createKey' in change) {
      ok(ctx, await dispatcher.createShardKey(name, parseCreate(change.createKey), timeout));
    } else {
      const k = change.dropKey.shard_key;
      if (k === undefined || k === null) throw new FormatError('drop_sharding_key: missing field `shard_key`');
      ok(ctx, await dispatcher.dropShardKey(name, shardKey(k, 'drop_sharding_key.shard_key'), timeout));
    }
  });
}
