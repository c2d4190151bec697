/**
 * The cluster metadata state machine alone: every operation, its validation at apply time
 * (a refused operation changes nothing), determinism (two replicas fed the same operations
 * agree, also through a snapshot), membership changes, shard placement, and the shard
 * keys of custom-sharded collections.
 */

import test from 'ava';

import { parseCreateCollection } from '../../ts/collection/config';
import { loadConfig } from '../../ts/config';
import { ClusterState, placeKeyShards, placeRecovered, placeShards, type MetaOp, type RecoveryPriority, type ShardPlacement } from '../../ts/storage/cluster-state';

const config = loadConfig({ configPath: null, env: {}, cwd: process.cwd() });
const cfg = (body: object = {}) => parseCreateCollection({ vectors: { size: 4, distance: 'Dot' }, ...body }, config);

function create(name: string, uuid = `u-${name}`): MetaOp {
  return { op: 'createCollection', name, uuid, config: cfg(), shards: placeShards(['1', '2', '3'], 3, 2, 0) };
}

test('create, alias, index, update and delete; refused operations change nothing', (t) => {
  const s = new ClusterState();
  t.deepEqual(s.apply(create('a'), null), { ok: true, value: true, collections: ['a'], aliases: false });
  const before = Buffer.from(s.encode()).toString();
  const dup = s.apply(create('a', 'other'), null);
  t.false(dup.ok);
  if (!dup.ok) t.is(dup.error.kind, 'already_exists');
  t.is(Buffer.from(s.encode()).toString(), before);

  t.true(s.apply({ op: 'changeAliases', actions: [{ create_alias: { collection_name: 'a', alias_name: 'x' } }] }, null).ok);
  const clash = s.apply(create('x'), null);
  t.false(clash.ok);
  if (!clash.ok) t.is(clash.error.kind, 'bad_input');
  // All or nothing: the second action fails, the first is not kept.
  const partial = s.apply({ op: 'changeAliases', actions: [{ create_alias: { collection_name: 'a', alias_name: 'y' } }, { rename_alias: { old_alias_name: 'nope', new_alias_name: 'z' } }] }, null);
  t.false(partial.ok);
  t.deepEqual({ ...s.aliases }, { x: 'a' });

  t.true(s.apply({ op: 'createPayloadIndex', collection: 'x', field: 'genre', schema: { type: 'keyword' } as never }, null).ok);
  t.deepEqual(Object.keys(s.collection('a')!.payload_schema), ['genre']);
  const upd = s.apply({ op: 'updateCollection', name: 'a', patch: { optimizers_config: { indexing_threshold: 77 } } }, null);
  t.true(upd.ok);
  t.is(s.collection('a')!.config.optimizer_config.indexing_threshold, 77);
  const badUpd = s.apply({ op: 'updateCollection', name: 'a', patch: { optimizers_config: { indexing_threshold: -1 } } }, null);
  t.false(badUpd.ok);
  t.is(s.collection('a')!.config.optimizer_config.indexing_threshold, 77);

  const del = s.apply({ op: 'deleteCollection', name: 'a' }, null);
  t.deepEqual(del, { ok: true, value: true, collections: ['a'], aliases: true });
  t.deepEqual({ ...s.aliases }, {});
  t.deepEqual(s.apply({ op: 'deleteCollection', name: 'a' }, null), { ok: true, value: false, collections: [], aliases: false });
  const missing = s.apply({ op: 'createPayloadIndex', collection: 'a', field: 'f', schema: { type: 'keyword' } as never }, null);
  t.false(missing.ok);
  if (!missing.ok) t.is(missing.error.kind, 'not_found');
});

test('max_collections is enforced when applied', (t) => {
  const s = new ClusterState();
  t.true(s.apply(create('a'), 1).ok);
  const r = s.apply(create('b'), 1);
  t.false(r.ok);
  t.deepEqual(s.collectionNames(), ['a']);
  // The limit in the operation (the proposer's) decides, whatever the applying peer passes.
  const limited = new ClusterState();
  t.true(limited.apply({ ...create('a'), max_collections: 1 } as MetaOp, null).ok);
  t.false(limited.apply({ ...create('b'), max_collections: 1 } as MetaOp, 5).ok);
  t.true(limited.apply({ ...create('c'), max_collections: null } as MetaOp, 1).ok);
  t.deepEqual(limited.collectionNames(), ['a', 'c']);
});

test('collection metadata travels in the create and update operations, merged as the reference merges it, and through a snapshot', (t) => {
  const s = new ClusterState();
  t.true(s.apply({ ...create('m'), config: cfg({ metadata: { team: 'a', n: 1, gone: true } }) } as MetaOp, null).ok);
  t.true(s.apply({ op: 'updateCollection', name: 'm', patch: { metadata: { n: 2, gone: null, added: [1] } } }, null).ok);
  t.deepEqual(s.collection('m')!.config.metadata, { team: 'a', n: 2, added: [1] });
  // A refused update (a strict-mode limit below its minimum) changes nothing, metadata included.
  const refused = s.apply({ op: 'updateCollection', name: 'm', patch: { metadata: { n: 3 }, strict_mode_config: { enabled: true, max_query_limit: 0 } } }, null);
  t.false(refused.ok);
  if (!refused.ok) t.is(refused.error.kind, 'validation');
  t.deepEqual(ClusterState.decode(s.encode()).collection('m')!.config.metadata, { team: 'a', n: 2, added: [1] });
  t.is(s.collection('m')!.config.strict_mode_config, undefined);
});

test('strict_mode_config travels in the update operation, merged field by field, and through the state snapshot', (t) => {
  const s = new ClusterState();
  t.true(s.apply({ ...create('sm'), config: cfg({ strict_mode_config: { enabled: true, max_query_limit: 5 } }) } as MetaOp, null).ok);
  t.true(s.apply({ op: 'updateCollection', name: 'sm', patch: { strict_mode_config: { max_timeout: 3, max_query_limit: null } } }, null).ok);
  t.deepEqual(s.collection('sm')!.config.strict_mode_config, { enabled: true, max_query_limit: 5, max_timeout: 3 });
  t.true(s.apply({ op: 'updateCollection', name: 'sm', patch: { strict_mode_config: { enabled: false } } }, null).ok);
  t.deepEqual(ClusterState.decode(s.encode()).collection('sm')!.config.strict_mode_config, { enabled: false, max_query_limit: 5, max_timeout: 3 });
});

test('cluster metadata keys: set, replaced, removed by null, through the state snapshot', (t) => {
  const s = new ClusterState();
  t.true(s.apply({ op: 'setClusterMetadata', key: 'b', value: { x: [1, 2] } }, null).ok);
  t.true(s.apply({ op: 'setClusterMetadata', key: 'a', value: 'one' }, null).ok);
  t.true(s.apply({ op: 'setClusterMetadata', key: 'a', value: 2 }, null).ok);
  t.deepEqual(s.metadataKeys(), ['a', 'b']);
  t.is(s.metadataValue('a'), 2);
  t.is(s.metadataValue('missing'), null);
  t.true(s.apply({ op: 'setClusterMetadata', key: 'b', value: null }, null).ok);
  const copy = ClusterState.decode(s.encode());
  t.deepEqual(copy.metadataKeys(), ['a']);
  t.is(copy.metadataValue('a'), 2);
  t.deepEqual(ClusterState.decode(new ClusterState().encode()).metadataKeys(), [], 'a state from before the keys existed has none');
});

test('replica states: the last active replica of a shard cannot be deactivated', (t) => {
  const s = new ClusterState();
  s.apply(create('a'), null);
  const peers = Object.keys(s.collection('a')!.shards[0].replicas);
  t.true(s.apply({ op: 'setReplicaState', collection: 'a', shard: 0, peer: peers[0], state: 'Dead' }, null).ok);
  const last = s.apply({ op: 'setReplicaState', collection: 'a', shard: 0, peer: peers[1], state: 'Dead' }, null);
  t.false(last.ok);
  t.is(s.collection('a')!.shards[0].replicas[peers[1]], 'Active');
  const wrongFrom = s.apply({ op: 'setReplicaState', collection: 'a', shard: 0, peer: peers[0], state: 'Active', from: 'Partial' }, null);
  t.false(wrongFrom.ok);
});

test('membership: a learner\'s URI is recorded; a removed peer loses its replicas', (t) => {
  const s = new ClusterState();
  s.setPeerUri('1', 'http://a:6335');
  s.applyConfChange({ type: 'addLearner', peer: '2', context: 'http://b:6335' });
  s.applyConfChange({ type: 'addLearner', peer: '3', context: 'http://c:6335' });
  s.apply(create('a'), null);
  t.deepEqual(s.shardsOn('2').length > 0, true);
  t.deepEqual(s.applyConfChange({ type: 'removePeer', peer: '2' }), ['a']);
  t.deepEqual(Object.keys(s.peers).sort(), ['1', '3']);
  t.deepEqual(s.shardsOn('2'), []);
});

test('membership: a removed peer\'s transfers end as aborted, and a shard whose only replica it held stays, without replicas', (t) => {
  const s = new ClusterState();
  s.setPeerUri('1', 'http://a:6335');
  for (const [p, uri] of [['2', 'http://b:6335'], ['3', 'http://c:6335']]) s.applyConfChange({ type: 'addLearner', peer: p, context: uri });
  const placed = (rs: Array<Record<string, 'Active' | 'Dead'>>) => rs.map((replicas, id) => ({ id, replicas }));
  t.true(s.apply({ op: 'createCollection', name: 'solo', uuid: 'u1', config: cfg(), shards: placed([{ '1': 'Active' }, { '2': 'Active' }, { '3': 'Active' }]) }, null).ok);
  t.true(s.apply({ op: 'createCollection', name: 'dup', uuid: 'u2', config: cfg(), shards: placed([{ '2': 'Active', '3': 'Dead' }, { '1': 'Active', '2': 'Active' }]) }, null).ok);
  // To the removed peer (a new replica), and from it (a recovery of a Dead replica).
  t.true(s.apply({ op: 'startTransfer', collection: 'solo', transfer: { shard: 0, from: '1', to: '2', method: 'stream_records', kind: 'replicate' } }, null).ok);
  t.true(s.apply({ op: 'startTransfer', collection: 'dup', transfer: { shard: 0, from: '2', to: '3', method: 'stream_records', kind: 'recovery' } }, null).ok);
  t.deepEqual(s.applyConfChange({ type: 'removePeer', peer: '2' }).sort(), ['dup', 'solo']);
  t.deepEqual(s.transfers('solo'), []);
  t.deepEqual(s.transfers('dup'), []);
  t.deepEqual(s.collection('solo')!.shards, placed([{ '1': 'Active' }, {}, { '3': 'Active' }]));
  t.deepEqual(s.collection('dup')!.shards, placed([{ '3': 'Dead' }, { '1': 'Active' }]));
  // The shard left without replicas keeps its place: nothing can be started from it, and the collection's other operations go on.
  const from = s.apply({ op: 'startTransfer', collection: 'solo', transfer: { shard: 1, from: '1', to: '3', method: 'stream_records', kind: 'replicate' } }, null);
  t.false(from.ok);
  t.true(s.apply({ op: 'updateCollection', name: 'solo', patch: { optimizers_config: { indexing_threshold: 100 } } }, null).ok);
  t.is(ClusterState.decode(s.encode()).collection('solo')!.shards.length, 3);
});

test('a transfer\'s run ends only its own transfer: a late finish or switch of an earlier transfer of the same shard between the same peers changes nothing; without an id, the one running is ended', (t) => {
  const s = new ClusterState();
  s.setPeerUri('1', 'http://a:6335');
  s.applyConfChange({ type: 'addLearner', peer: '2', context: 'http://b:6335' });
  t.true(s.apply({ op: 'createCollection', name: 'c', uuid: 'u1', config: cfg(), shards: [{ id: 0, replicas: { '1': 'Active' } }] }, null).ok);
  const startOf = (id: string): MetaOp => ({ op: 'startTransfer', collection: 'c', transfer: { shard: 0, from: '1', to: '2', method: 'wal_delta', kind: 'replicate', id } });
  const finishOf = (ok: boolean, id?: string): MetaOp => ({ op: 'finishTransfer', collection: 'c', shard: 0, from: '1', to: '2', ok, ...(id === undefined ? {} : { id }) });
  // Transfer a is aborted and b started (a restart); a's run then proposes its finish late.
  t.true(s.apply(startOf('a'), null).ok);
  t.true(s.apply(finishOf(false, 'a'), null).ok);
  t.true(s.apply(startOf('b'), null).ok);
  const late = s.apply(finishOf(true, 'a'), null);
  t.true(late.ok && late.value === false, 'a finish of a transfer that is not listed does nothing');
  t.deepEqual(s.transfers('c').map((x) => x.id), ['b']);
  t.is(s.collection('c')!.shards[0].replicas['2'], 'Partial', 'the target of b is not made Active by a\'s finish');
  const switched = s.apply({ op: 'switchTransfer', collection: 'c', shard: 0, from: '1', to: '2', method: 'stream_records', id: 'a' }, null);
  t.false(switched.ok, 'a switch of a is refused');
  t.is(s.transfers('c')[0].method, 'wal_delta');
  // b's own finish ends it; an operator's abort (no id) ends whichever runs.
  t.true(s.apply({ op: 'switchTransfer', collection: 'c', shard: 0, from: '1', to: '2', method: 'stream_records', id: 'b' }, null).ok);
  t.is(s.transfers('c')[0].method, 'stream_records');
  const done = s.apply(finishOf(true, 'b'), null);
  t.true(done.ok && done.value === true);
  t.is(s.collection('c')!.shards[0].replicas['2'], 'Active');
  t.true(s.apply(startOf('d'), null).ok === false, 'peer 2 holds a replica now');
  t.true(s.apply({ op: 'createCollection', name: 'e', uuid: 'u2', config: cfg(), shards: [{ id: 0, replicas: { '1': 'Active' } }] }, null).ok);
  t.true(s.apply({ op: 'startTransfer', collection: 'e', transfer: { shard: 0, from: '1', to: '2', method: 'stream_records', kind: 'replicate', id: 'x' } }, null).ok);
  const abort = s.apply({ op: 'finishTransfer', collection: 'e', shard: 0, from: '1', to: '2', ok: false }, null);
  t.true(abort.ok && abort.value === true);
  t.deepEqual(s.transfers('e'), []);
});

test('two replicas fed the same operations agree, also when one restarts from a snapshot midway', (t) => {
  const ops: MetaOp[] = [];
  for (let i = 0; i < 30; i++) {
    ops.push(create(`c${i % 7}`, `u${i}`));
    if (i % 3 === 0) ops.push({ op: 'deleteCollection', name: `c${(i + 2) % 7}` });
    if (i % 4 === 0) ops.push({ op: 'changeAliases', actions: [{ create_alias: { collection_name: `c${i % 7}`, alias_name: `al${i % 5}` } }] });
  }
  const a = new ClusterState();
  let b = new ClusterState();
  const ra = ops.map((op) => a.apply(structuredClone(op), 5));
  const rb = ops.map((op, i) => {
    if (i === 17) b = ClusterState.decode(b.encode());
    return b.apply(structuredClone(op), 5);
  });
  t.deepEqual(
    ra.map((r) => (r.ok ? ['ok', r.value] : ['err', r.error.message])),
    rb.map((r) => (r.ok ? ['ok', r.value] : ['err', r.error.message])),
  );
  t.is(Buffer.from(a.encode()).toString(), Buffer.from(b.encode()).toString());
});

test('placement: replicas on distinct peers, round robin from the offset, capped by the number of peers', (t) => {
  const p = placeShards(['1', '2', '3'], 4, 2, 1);
  t.deepEqual(p.map((s) => Object.keys(s.replicas).sort()), [['2', '3'], ['1', '3'], ['1', '2'], ['2', '3']]);
  const capped = placeShards(['1', '2'], 1, 5, 0);
  t.deepEqual(Object.keys(capped[0].replicas).sort(), ['1', '2']);
  t.throws(() => placeShards([], 1, 1, 0));
});

/** Three peers and a custom-sharded collection `t` (no shard yet). */
function keyed(): ClusterState {
  const s = new ClusterState();
  for (const p of ['1', '2', '3']) s.setPeerUri(p, `http://p${p}:6335`);
  s.apply({ op: 'createCollection', name: 't', uuid: 'u-t', config: cfg({ sharding_method: 'custom', shard_number: 2 }), shards: [] }, null);
  return s;
}

const errorOf = (r: ReturnType<ClusterState['apply']>) => (r.ok ? null : r.error.message);

test('shard keys: created with the placement the proposer chose, on ids never used before; dropped with their shards; refusals change nothing', (t) => {
  const s = keyed();
  t.deepEqual(s.collection('t')!.shards, []);
  t.deepEqual(s.apply({ op: 'createShardKey', collection: 't', key: 'a', placement: [['1'], ['2', '3']] }, null), { ok: true, value: true, collections: ['t'], aliases: false });
  t.true(s.apply({ op: 'createShardKey', collection: 't', key: 5, placement: [['3']] }, null).ok);
  t.deepEqual(s.collection('t')!.shards, [
    { id: 1, replicas: { '1': 'Active' }, shard_key: 'a' },
    { id: 2, replicas: { '2': 'Active', '3': 'Active' }, shard_key: 'a' },
    { id: 3, replicas: { '3': 'Active' }, shard_key: 5 },
  ]);
  t.deepEqual(ClusterState.shardKeys(s.collection('t')!), [
    { key: 'a', shards: [1, 2] },
    { key: 5, shards: [3] },
  ]);
  t.deepEqual(s.shardsOn('3'), [
    { collection: 't', shard: 2 },
    { collection: 't', shard: 3 },
  ]);

  const before = Buffer.from(s.encode()).toString();
  t.is(errorOf(s.apply({ op: 'createShardKey', collection: 't', key: 'a', placement: [['1']] }, null)), 'Bad request: Sharding key "a" already exists for collection t');
  t.is(errorOf(s.apply({ op: 'createShardKey', collection: 't', key: 'b', placement: [['1'], ['9']] }, null)), 'Bad request: Peer 9 does not exist');
  t.is(errorOf(s.apply({ op: 'createShardKey', collection: 't', key: 'b', placement: [] }, null)), 'Bad request: Sharding key "b" placement cannot be empty. If you want to use random placement, do not specify placement');
  t.is(errorOf(s.apply({ op: 'dropShardKey', collection: 't', key: '5' }, null)), 'Bad request: Sharding key "5" does not exist for collection t');
  t.is(errorOf(s.apply({ op: 'createShardKey', collection: 'nope', key: 'a', placement: [['1']] }, null)), 'Not found: Collection `nope` doesn\'t exist!');
  s.apply(create('auto'), null);
  const withAuto = Buffer.from(s.encode()).toString();
  t.is(errorOf(s.apply({ op: 'createShardKey', collection: 'auto', key: 'a', placement: [['1']] }, null)), 'Bad request: Shard Key cannot be created with Auto sharding method');
  t.is(errorOf(s.apply({ op: 'dropShardKey', collection: 'auto', key: 'a' }, null)), 'Bad request: Shard Key cannot be created with Auto sharding method');
  t.is(Buffer.from(s.encode()).toString(), withAuto, 'refused key operations change nothing');
  t.not(before, withAuto);

  // Dropping the key of the highest ids: the next key still gets ids never used before.
  t.deepEqual(s.apply({ op: 'dropShardKey', collection: 't', key: 5 }, null), { ok: true, value: true, collections: ['t'], aliases: false });
  t.deepEqual(ClusterState.shardKeys(s.collection('t')!), [{ key: 'a', shards: [1, 2] }]);
  t.true(s.apply({ op: 'createShardKey', collection: 't', key: 'c', placement: [['2']] }, null).ok);
  t.deepEqual(ClusterState.shardKeys(s.collection('t')!), [
    { key: 'a', shards: [1, 2] },
    { key: 'c', shards: [4] },
  ]);
  // A snapshot of the state keeps the keys and the counter.
  const copy = ClusterState.decode(s.encode());
  t.true(copy.apply({ op: 'createShardKey', collection: 't', key: 'd', placement: [['1']] }, null).ok);
  t.deepEqual(ClusterState.shardKeys(copy.collection('t')!).map((e) => e.shards), [[1, 2], [4], [5]]);
});

test('shard key placement: replicas on distinct peers of the pool, round robin, capped by the pool', (t) => {
  t.deepEqual(placeKeyShards(['1', '2', '3'], 3, 2, 0), [['1', '2'], ['3', '1'], ['2', '3']]);
  t.deepEqual(placeKeyShards(['2', '3'], 2, 1, 1), [['3'], ['2']]);
  t.deepEqual(placeKeyShards(['1', '1'], 2, 3, 0), [['1'], ['1']], 'a peer named twice is one peer');
  t.throws(() => placeKeyShards([], 1, 1, 0));
});

/** Three peers and collection `r`: shard 0 on peers 1 and 2, shard 1 on peer 3 only. */
function recovering(): ClusterState {
  const s = new ClusterState();
  for (const p of ['1', '2', '3', '4']) s.setPeerUri(p, `http://p${p}:6335`);
  const shards: ShardPlacement[] = [
    { id: 0, replicas: { '1': 'Active', '2': 'Active' } },
    { id: 1, replicas: { '3': 'Active' } },
  ];
  s.apply({ op: 'createCollection', name: 'r', uuid: 'u-r', config: cfg({ shard_number: 2 }), shards }, null);
  return s;
}

const start = (shard: number, peer: string, priority: RecoveryPriority): MetaOp => ({ op: 'startSnapshotRecovery', collection: 'r', shard, peer, priority });
const finish = (shard: number, peer: string, priority: RecoveryPriority, ok: boolean, previous: string | null): MetaOp =>
  ({ op: 'finishSnapshotRecovery', collection: 'r', shard, peer, priority, ok, previous }) as MetaOp;
const valueOf = (r: ReturnType<ClusterState['apply']>) => (r.ok ? r.value : `error: ${r.error.message}`);
const replicasOf = (s: ClusterState, shard: number) => ({ ...s.collection('r')!.shards.find((x) => x.id === shard)!.replicas });

test('snapshot recovery, priority replica: an active replica here is kept; beside other active replicas this peer\'s is recovered from them; with none, the snapshot\'s data goes in', (t) => {
  const s = recovering();
  t.deepEqual(valueOf(s.apply(start(0, '1', 'replica'), null)), { action: 'kept', previous: 'Active' });
  t.deepEqual(replicasOf(s, 0), { '1': 'Active', '2': 'Active' });
  // A peer without a replica beside active ones: registered Dead, for the supervisor to recover.
  t.deepEqual(valueOf(s.apply(start(0, '4', 'replica'), null)), { action: 'sync', previous: null });
  t.deepEqual(replicasOf(s, 0), { '1': 'Active', '2': 'Active', '4': 'Dead' });
  // The only replica was on a removed peer: the shard has none, and the snapshot's data is all there is.
  s.applyConfChange({ type: 'removePeer', peer: '3' });
  t.deepEqual(replicasOf(s, 1), {});
  t.deepEqual(valueOf(s.apply(start(1, '4', 'replica'), null)), { action: 'restore', previous: null });
  t.deepEqual(replicasOf(s, 1), { '4': 'ManualRecovery' });
  t.is(valueOf(s.apply(finish(1, '4', 'replica', true, null), null)), 'Active');
  t.deepEqual(replicasOf(s, 1), { '4': 'Active' });
  // Replayed, the finish is refused and changes nothing.
  const before = Buffer.from(s.encode()).toString();
  t.regex(String(valueOf(s.apply(finish(1, '4', 'replica', true, null), null))), /is Active: it is not being recovered from a snapshot/);
  t.is(Buffer.from(s.encode()).toString(), before);
});

test('snapshot recovery, priority snapshot: this peer\'s replica takes the data and the others follow it (Dead, transfers aborted); no_sync leaves the others', (t) => {
  const s = recovering();
  t.true(s.apply({ op: 'startTransfer', collection: 'r', transfer: { shard: 0, from: '2', to: '3', method: 'stream_records', kind: 'replicate' } }, null).ok);
  // The last active replica may go ManualRecovery for its data to be replaced.
  t.deepEqual(valueOf(s.apply(start(1, '3', 'snapshot'), null)), { action: 'restore', previous: 'Active' });
  t.deepEqual(replicasOf(s, 1), { '3': 'ManualRecovery' });
  t.is(valueOf(s.apply(finish(1, '3', 'snapshot', true, 'Active'), null)), 'Active');
  t.deepEqual(valueOf(s.apply(start(0, '1', 'snapshot'), null)), { action: 'restore', previous: 'Active' });
  t.deepEqual(replicasOf(s, 0), { '1': 'ManualRecovery', '2': 'Active', '3': 'Partial' });
  t.is(valueOf(s.apply(finish(0, '1', 'snapshot', true, 'Active'), null)), 'Active');
  t.deepEqual(replicasOf(s, 0), { '1': 'Active', '2': 'Dead' }, 'the other replica follows; the replicate transfer is aborted with its new replica');
  t.deepEqual(s.transfers('r'), []);

  const n = recovering();
  t.deepEqual(valueOf(n.apply(start(0, '4', 'no_sync'), null)), { action: 'restore', previous: null });
  t.is(valueOf(n.apply(finish(0, '4', 'no_sync', true, null), null)), 'Active');
  t.deepEqual(replicasOf(n, 0), { '1': 'Active', '2': 'Active', '4': 'Active' });
});

test('snapshot recovery that failed: the replica goes back (removed when new, never Active beside active replicas); refusals change nothing', (t) => {
  const s = recovering();
  s.apply(start(0, '4', 'snapshot'), null);
  t.is(valueOf(s.apply(finish(0, '4', 'snapshot', false, null), null)), null);
  t.deepEqual(replicasOf(s, 0), { '1': 'Active', '2': 'Active' });
  s.apply(start(0, '1', 'snapshot'), null);
  t.is(valueOf(s.apply(finish(0, '1', 'snapshot', false, 'Active'), null)), 'Dead', 'others took writes meanwhile');
  s.apply(start(1, '3', 'snapshot'), null);
  t.is(valueOf(s.apply(finish(1, '3', 'snapshot', false, 'Active'), null)), 'Active', 'nothing could be written meanwhile');

  const before = Buffer.from(s.encode()).toString();
  t.regex(String(valueOf(s.apply(start(9, '1', 'snapshot'), null))), /Not found: Shard 9 of r does not exist/);
  t.regex(String(valueOf(s.apply(start(0, '7', 'snapshot'), null))), /Peer 7 does not exist/);
  t.regex(String(valueOf(s.apply({ ...start(0, '1', 'snapshot'), collection: 'nope' } as MetaOp, null))), /Collection `nope` doesn't exist/);
  t.true(s.apply({ op: 'startTransfer', collection: 'r', transfer: { shard: 0, from: '2', to: '1', method: 'stream_records', kind: 'recovery' } }, null).ok);
  const inTransfer = Buffer.from(s.encode()).toString();
  t.regex(String(valueOf(s.apply(start(0, '1', 'snapshot'), null))), /is in a transfer/);
  t.is(Buffer.from(s.encode()).toString(), inTransfer);
  t.not(before, inTransfer);
});

test('a collection created by a snapshot recovery: its payload indexes, shard keys and next shard id; the held shards on the recovering peer, their other replicas Dead', (t) => {
  const p = placeRecovered(['1', '2', '3'], [0, 1, 2], 2, 0, '3', [0, 2]);
  t.deepEqual(p, [
    { id: 0, replicas: { '3': 'ManualRecovery', '1': 'Dead' } },
    { id: 1, replicas: { '2': 'Active', '3': 'Active' } },
    { id: 2, replicas: { '3': 'ManualRecovery', '1': 'Dead' } },
  ]);
  const keyedP = placeRecovered(['1', '2'], [2, 5], 1, 0, '2', [5], (id) => (id === 2 ? 'a' : 7));
  t.deepEqual(keyedP, [
    { id: 2, replicas: { '1': 'Active' }, shard_key: 'a' },
    { id: 5, replicas: { '2': 'ManualRecovery' }, shard_key: 7 },
  ]);
  const s = new ClusterState();
  for (const peer of ['1', '2']) s.setPeerUri(peer, `http://p${peer}:6335`);
  const r = s.apply(
    { op: 'createCollection', name: 'k', uuid: 'u-k', config: cfg({ sharding_method: 'custom' }), shards: keyedP, payload_schema: { genre: { type: 'keyword' } as never }, next_shard_id: 6 },
    null,
  );
  t.true(r.ok);
  t.deepEqual(ClusterState.shardKeys(s.collection('k')!), [
    { key: 'a', shards: [2] },
    { key: 7, shards: [5] },
  ]);
  t.deepEqual(Object.keys(s.collection('k')!.payload_schema), ['genre']);
  t.true(s.apply({ op: 'createShardKey', collection: 'k', key: 'b', placement: [['1']] }, null).ok);
  t.deepEqual(ClusterState.shardKeys(s.collection('k')!).map((e) => e.shards), [[2], [5], [6]]);
});
