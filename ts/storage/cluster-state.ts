/**
 * The cluster's metadata as a deterministic state machine: the peers and their URIs,
 * every collection (configuration, payload index definitions, shard placement with
 * replica states), and the aliases. Every peer applies the same committed consensus
 * operations in the same order and so holds the same state.
 *
 * Owns: the consensus operations (`MetaOp`) and their validation at apply time (a
 * refused operation changes nothing and yields the same error on every peer), the
 * snapshot encoding of the state, and shard placement (which peers hold which shard,
 * and, with custom sharding, which shard key each shard belongs to; a new key's shards
 * get ids no shard of the collection had before, assigned when the operation applies).
 * Must never: touch disk, shards or the network; read a clock or a random source
 * (placement and uuids are chosen by the proposer and travel in the operation).
 */

import { AlreadyExistsError, BadInputError, BadRequestError, NotFoundError, QuiverError } from '../common/errors';
import { addVectorName, applyCollectionUpdate, removeVectorName, type CollectionConfig, type VectorParams } from '../collection/config';
import type { SparseVectorParams } from '../collection/sparse-config';
import { isActive, type ReplicaState } from '../collection/replica-state';
import { TRANSFER_METHODS, type TransferMethod } from '../collection/cluster-link';
import {
  autoShardingRefusal,
  emptyPlacementError,
  keyExistsError,
  keyId,
  keyMissingError,
  nextShardId,
  unknownPeerError,
  type ShardKey,
  type ShardKeyEntry,
} from '../collection/shard-keys';
import { sameFieldSchema, type FieldSchema } from '../shard/field-schema';
import { validateCollectionName, type AliasAction } from './toc';
import type { ConfChange, PeerId } from '../consensus/types';

export interface ShardPlacement {
  id: number;
  /** Peer id → state of that peer's replica. */
  replicas: Record<PeerId, ReplicaState>;
  /** Custom sharding: the shard key this shard belongs to. */
  shard_key?: ShardKey;
}

/**
 * A shard transfer in progress: `from` (an active replica) streams the shard to `to`
 * (Partial meanwhile) and forwards every write it applies; `to` gets writes from no
 * one else until the transfer ends. `kind`: `recovery` brings a Dead replica back,
 * `replicate` adds a replica, `move` adds one and drops the source's at the end.
 */
export interface TransferInfo {
  shard: number;
  from: PeerId;
  to: PeerId;
  /** How the shard is copied; the source may switch a `wal_delta` transfer to `stream_records` (`switchTransfer`). */
  method: TransferMethod;
  kind: 'recovery' | 'replicate' | 'move';
  /**
   * Chosen by the proposer: tells this transfer from an earlier one of the same shard
   * between the same peers (a restart applied together with the abort before it). Its
   * copy traffic carries it, and the target takes copy traffic of the transfer it has
   * only. Absent in states written before transfers had ids.
   */
  id?: string;
}

export interface ClusterCollection {
  /** Chosen at creation: tells a re-created collection of the same name from the old one. */
  uuid: string;
  config: CollectionConfig;
  payload_schema: Record<string, FieldSchema>;
  shards: ShardPlacement[];
  /** Transfers in progress (absent in states written before transfers existed). */
  transfers?: TransferInfo[];
  /** Custom sharding: the id the next key's first shard gets (ids of dropped keys are never reused). */
  next_shard_id?: number;
}

export interface ClusterStateData {
  peers: Record<PeerId, string>;
  collections: Record<string, ClusterCollection>;
  aliases: Record<string, string>;
  /** The cluster metadata keys (`/cluster/metadata/keys`); absent until one is set. */
  metadata?: Record<string, unknown>;
  /** Scheduled snapshots in cluster mode: schedule key → `collection/shard` → its runs (absent until a run is claimed). */
  scheduled?: Record<string, Record<string, ScheduledShard>>;
}

/** A snapshot a schedule made of a shard: its name in the store of `peer`, and when (ms, the proposer's clock). */
export interface ScheduledSnapshot {
  name: string;
  peer: PeerId;
  at: number;
}

/**
 * The runs of one schedule for one shard (ts/snapshots/cluster-schedule.ts): the latest
 * run's slot (its due time, ms since the epoch: the same on every peer), the peer that
 * claimed it and how it stands, the snapshots kept, and those retention dropped that
 * their peer has still to delete from its store.
 */
export interface ScheduledShard {
  slot: number;
  peer: PeerId;
  state: 'claimed' | 'done' | 'failed';
  made: ScheduledSnapshot[];
  deleting: ScheduledSnapshot[];
}

export type MetaOp =
  | {
      op: 'createCollection';
      name: string;
      uuid: string;
      config: CollectionConfig;
      shards: ShardPlacement[];
      /** The proposer's `storage.max_collections`: every peer applies the same limit (a local setting would make peers disagree). */
      max_collections?: number | null;
      /** Payload indexes from the start (a collection created by a snapshot recovery); none when absent. */
      payload_schema?: Record<string, FieldSchema>;
      /** Custom sharding, created by a snapshot recovery with its keys' shards in `shards`: the id the next key's first shard gets. */
      next_shard_id?: number;
    }
  | { op: 'updateCollection'; name: string; patch: unknown }
  /** Adds a named vector to a collection (`PUT /collections/{name}/vectors/{vector_name}`), with its parsed params. */
  // A dense vector carries `params`; a sparse one `sparse` (entries written before sparse names have `params`).
  | { op: 'createVectorName'; collection: string; vector: string; params?: VectorParams; sparse?: SparseVectorParams }
  | { op: 'deleteVectorName'; collection: string; vector: string }
  /** Sets a cluster metadata key to a JSON value; null removes it. */
  | { op: 'setClusterMetadata'; key: string; value: unknown }
  /**
   * A peer claims the run of a schedule due at `slot` for a shard (`key`: `collection/shard`).
   * Granted when no run of the shard is at or after `slot`, or the run at `slot` failed, or
   * it is claimed by `takeover_of` (a claimant the proposer found down). Refused otherwise:
   * one peer runs each run.
   */
  | { op: 'claimScheduledRun'; schedule: string; key: string; slot: number; peer: PeerId; takeover_of?: PeerId }
  /**
   * The claimant's run ended: `made` is the snapshot (ok), null when it failed; `drop`
   * (names of `made` snapshots retention no longer keeps, chosen by the proposer) move to
   * `deleting`.
   */
  | { op: 'finishScheduledRun'; schedule: string; key: string; slot: number; peer: PeerId; made: ScheduledSnapshot | null; drop: string[] }
  /** A peer deleted (or found gone) a snapshot retention dropped. */
  | { op: 'forgetScheduledSnapshot'; schedule: string; key: string; name: string; peer: PeerId }
  | { op: 'deleteCollection'; name: string }
  | { op: 'changeAliases'; actions: AliasAction[] }
  | { op: 'createPayloadIndex'; collection: string; field: string; schema: FieldSchema }
  | { op: 'dropPayloadIndex'; collection: string; field: string }
  | { op: 'setReplicaState'; collection: string; shard: number; peer: PeerId; state: ReplicaState; from?: ReplicaState }
  | { op: 'startTransfer'; collection: string; transfer: TransferInfo }
  /**
   * Ends a transfer: `ok` makes the target Active (and, for a move, drops the source's
   * replica); otherwise the target is marked Dead (a replicate's new replica is dropped).
   * `id`: the transfer's own run ends it (finished, aborted, switched): only that transfer,
   * never a later one of the same shard between the same peers (a restart, an abort and a
   * new start) that a late proposal of the old run would otherwise finish. Without it (an
   * operator's abort, the supervisor's), whichever transfer of that shard and peers runs.
   */
  | { op: 'finishTransfer'; collection: string; shard: number; from: PeerId; to: PeerId; ok: boolean; id?: string }
  /** The source changes a running transfer's method (a `wal_delta` whose difference the WAL cannot resolve goes on as `stream_records`: the target empties its replica). */
  | { op: 'switchTransfer'; collection: string; shard: number; from: PeerId; to: PeerId; method: TransferMethod; id?: string }
  /** A shard key of a custom-sharded collection: one shard per entry of `placement`, on those peers (chosen by the proposer). */
  | { op: 'createShardKey'; collection: string; key: ShardKey; placement: PeerId[][] }
  | { op: 'dropShardKey'; collection: string; key: ShardKey }
  /** Removes a peer's replica of a shard (`drop_replica`); never the shard's last active one, nor one in a transfer. */
  | { op: 'dropReplica'; collection: string; shard: number; peer: PeerId }
  /**
   * A snapshot recovery of shard `shard` on `peer` begins (its replica is registered when
   * absent). What it does is decided here, when applied (see `recoveryStart`): the answer
   * is a `RecoveryStart`.
   */
  | { op: 'startSnapshotRecovery'; collection: string; shard: number; peer: PeerId; priority: RecoveryPriority }
  /**
   * The snapshot's data is in place on `peer` (`ok`), or could not be put there: its
   * replica leaves ManualRecovery (see `recoveryFinish`). `previous`: its state before the
   * recovery began (null: it had none). Answers the replica's new state (null: removed).
   */
  | { op: 'finishSnapshotRecovery'; collection: string; shard: number; peer: PeerId; priority: RecoveryPriority; ok: boolean; previous: ReplicaState | null };

/** Which data wins when a snapshot is recovered into a shard that has other replicas (SPEC 2.5). */
export type RecoveryPriority = 'replica' | 'snapshot' | 'no_sync';

/**
 * What the start of a snapshot recovery decided for the recovering peer's replica:
 * `kept` (priority replica, and its replica is Active already: the data there wins, the
 * snapshot changes nothing), `sync` (priority replica, and another replica is Active:
 * the peer's replica is Dead and will be recovered from an active one, so the snapshot's
 * data is not used), `restore` (its replica is ManualRecovery: the snapshot's data goes
 * in, then finishSnapshotRecovery). `previous`: the replica's state before (null: none).
 */
export interface RecoveryStart {
  action: 'kept' | 'sync' | 'restore';
  previous: ReplicaState | null;
}

/** What applying an operation did: its answer, and which local things to bring in line. */
export type ApplyResult =
  | { ok: true; value: unknown; collections: string[]; aliases: boolean }
  | { ok: false; error: QuiverError };

export function emptyState(): ClusterStateData {
  return { peers: {}, collections: {}, aliases: {} };
}

export class ClusterState {
  private data: ClusterStateData;

  constructor(data: ClusterStateData = emptyState()) {
    this.data = data;
  }

  // -- reads -----------------------------------------------------------------------------

  get peers(): Readonly<Record<PeerId, string>> {
    return this.data.peers;
  }

  collection(name: string): ClusterCollection | undefined {
    return Object.prototype.hasOwnProperty.call(this.data.collections, name) ? this.data.collections[name] : undefined;
  }

  collectionNames(): string[] {
    return Object.keys(this.data.collections).sort();
  }

  get aliases(): Readonly<Record<string, string>> {
    return this.data.aliases;
  }

  /** The collection a name or alias stands for. */
  resolve(nameOrAlias: string): string | undefined {
    if (this.collection(nameOrAlias)) return nameOrAlias;
    const target = Object.prototype.hasOwnProperty.call(this.data.aliases, nameOrAlias) ? this.data.aliases[nameOrAlias] : undefined;
    return target !== undefined && this.collection(target) ? target : undefined;
  }

  /** Custom sharding: a collection's keys and their shards, in creation order (shard id order). */
  static shardKeys(c: ClusterCollection): ShardKeyEntry[] {
    const out: ShardKeyEntry[] = [];
    const byKey = new Map<string, ShardKeyEntry>();
    for (const s of [...c.shards].sort((a, b) => a.id - b.id)) {
      if (s.shard_key === undefined) continue;
      let e = byKey.get(keyId(s.shard_key));
      if (e === undefined) {
        e = { key: s.shard_key, shards: [] };
        byKey.set(keyId(s.shard_key), e);
        out.push(e);
      }
      e.shards.push(s.id);
    }
    return out;
  }

  /** Shards (collection, shard id) that have a replica on `peer`. */
  shardsOn(peer: PeerId): Array<{ collection: string; shard: number }> {
    const out: Array<{ collection: string; shard: number }> = [];
    for (const [name, c] of Object.entries(this.data.collections)) {
      for (const s of c.shards) if (Object.prototype.hasOwnProperty.call(s.replicas, peer)) out.push({ collection: name, shard: s.id });
    }
    return out;
  }

  /** A schedule's runs of a shard (`collection/shard`), if any was claimed. */
  scheduledShard(schedule: string, key: string): ScheduledShard | undefined {
    const s = this.data.scheduled?.[schedule];
    return s !== undefined && Object.prototype.hasOwnProperty.call(s, key) ? s[key] : undefined;
  }

  /** Every schedule's runs (schedule key → shard key → runs). */
  scheduledAll(): Readonly<Record<string, Record<string, ScheduledShard>>> {
    return this.data.scheduled ?? {};
  }

  /** The cluster metadata keys, sorted. */
  metadataKeys(): string[] {
    return Object.keys(this.data.metadata ?? {}).sort();
  }

  /** A cluster metadata key's value; null when it has none. */
  metadataValue(key: string): unknown {
    const m = this.data.metadata ?? {};
    return Object.prototype.hasOwnProperty.call(m, key) ? m[key] : null;
  }

  // -- snapshots -------------------------------------------------------------------------

  encode(): Uint8Array {
    return Buffer.from(JSON.stringify(this.data), 'utf8');
  }

  static decode(bytes: Uint8Array): ClusterState {
    if (bytes.length === 0) return new ClusterState();
    const data = JSON.parse(Buffer.from(bytes).toString('utf8')) as ClusterStateData;
    if (typeof data !== 'object' || data === null || typeof data.peers !== 'object' || typeof data.collections !== 'object' || typeof data.aliases !== 'object') {
      throw new Error('consensus snapshot: not a cluster state');
    }
    return new ClusterState(data);
  }

  // -- transitions -----------------------------------------------------------------------

  /** A committed membership change: peers' URIs follow it; a removed peer's replicas go. */
  applyConfChange(change: ConfChange): string[] {
    const touched: string[] = [];
    if (change.type === 'addLearner' && change.context) {
      this.data.peers[change.peer] = change.context;
    } else if (change.type === 'removePeer') {
      delete this.data.peers[change.peer];
      for (const [name, c] of Object.entries(this.data.collections)) {
        for (const t of c.transfers ?? []) {
          if (t.from === change.peer || t.to === change.peer) {
            c.transfers = (c.transfers ?? []).filter((x) => x !== t);
            const shard = c.shards.find((s) => s.id === t.shard);
            if (shard) this.endTarget(shard, t, false);
            if (!touched.includes(name)) touched.push(name);
          }
        }
        for (const s of c.shards) {
          if (Object.prototype.hasOwnProperty.call(s.replicas, change.peer)) {
            delete s.replicas[change.peer];
            if (!touched.includes(name)) touched.push(name);
          }
        }
      }
    }
    return touched;
  }

  /** Records a peer's URI (the founding peer, which is not added by a membership change). */
  setPeerUri(peer: PeerId, uri: string): void {
    this.data.peers[peer] = uri;
  }

  /** The target's replica as a transfer ends: Active (a move drops the source's), or Dead (a replicate's new replica goes). */
  private endTarget(shard: ShardPlacement, t: TransferInfo, ok: boolean): void {
    if (shard.replicas[t.to] !== 'Partial') return;
    if (ok) {
      shard.replicas[t.to] = 'Active';
      if (t.kind === 'move') delete shard.replicas[t.from];
    } else if (t.kind === 'recovery') {
      shard.replicas[t.to] = 'Dead';
    } else {
      delete shard.replicas[t.to];
    }
  }

  /** Transfers in progress of a collection. */
  transfers(name: string): readonly TransferInfo[] {
    return this.collection(name)?.transfers ?? [];
  }

  apply(op: MetaOp, maxCollections: number | null): ApplyResult {
    try {
      return this.applyOrThrow(op, maxCollections);
    } catch (err) {
      if (err instanceof QuiverError) return { ok: false, error: err };
      throw err;
    }
  }

  private requireCollection(nameOrAlias: string): [string, ClusterCollection] {
    const name = this.resolve(nameOrAlias);
    if (name === undefined) throw new NotFoundError(`Collection \`${nameOrAlias}\` doesn't exist!`);
    return [name, this.data.collections[name]];
  }

  private applyOrThrow(op: MetaOp, maxCollections: number | null): ApplyResult {
    const done = (value: unknown, collections: string[], aliases = false): ApplyResult => ({ ok: true, value, collections, aliases });
    switch (op.op) {
      case 'setClusterMetadata': {
        const m = { ...(this.data.metadata ?? {}) };
        if (op.value === null || op.value === undefined) delete m[op.key];
        else Object.defineProperty(m, op.key, { value: op.value, writable: true, enumerable: true, configurable: true });
        this.data.metadata = m;
        return done(true, []);
      }
      case 'claimScheduledRun': {
        if (!Object.prototype.hasOwnProperty.call(this.data.peers, op.peer)) throw unknownPeerError(op.peer);
        const all = (this.data.scheduled ??= {});
        const runs = (all[op.schedule] ??= {});
        const cur = Object.prototype.hasOwnProperty.call(runs, op.key) ? runs[op.key] : undefined;
        if (cur !== undefined) {
          const granted =
            op.slot > cur.slot ||
            (op.slot === cur.slot && cur.state === 'failed') ||
            (op.slot === cur.slot && cur.state === 'claimed' && op.takeover_of !== undefined && op.takeover_of === cur.peer);
          if (!granted) throw new BadInputError(`the run of ${op.schedule} for ${op.key} due ${new Date(cur.slot).toISOString()} is ${cur.state} by peer ${cur.peer}`);
        }
        Object.defineProperty(runs, op.key, {
          value: { slot: op.slot, peer: op.peer, state: 'claimed', made: cur?.made ?? [], deleting: cur?.deleting ?? [] },
          writable: true,
          enumerable: true,
          configurable: true,
        });
        return done(true, []);
      }
      case 'finishScheduledRun': {
        const cur = this.scheduledShard(op.schedule, op.key);
        if (cur === undefined || cur.slot !== op.slot || cur.peer !== op.peer || cur.state !== 'claimed') {
          // Taken over meanwhile (this peer was found down): its snapshot, if any, is still
          // recorded, so retention deletes it in time. Once only: a finish proposed again
          // (its first proposal timed out but was taken) adds nothing.
          const made = op.made;
          const same = (m: ScheduledSnapshot) => made !== null && m.name === made.name && m.peer === made.peer;
          if (cur !== undefined && made !== null && !cur.made.some(same) && !cur.deleting.some(same)) cur.made = [...cur.made, made];
          return done(false, []);
        }
        cur.state = op.made === null ? 'failed' : 'done';
        if (op.made !== null) cur.made = [...cur.made, op.made];
        // A failed run deletes nothing.
        const drop = new Set(op.made === null ? [] : op.drop);
        if (op.made !== null) drop.delete(op.made.name);
        cur.deleting = [...cur.deleting, ...cur.made.filter((m) => drop.has(m.name))];
        cur.made = cur.made.filter((m) => !drop.has(m.name));
        return done(true, []);
      }
      case 'forgetScheduledSnapshot': {
        const cur = this.scheduledShard(op.schedule, op.key);
        if (cur === undefined) return done(false, []);
        const before = cur.deleting.length;
        cur.deleting = cur.deleting.filter((m) => !(m.name === op.name && m.peer === op.peer));
        return done(cur.deleting.length !== before, []);
      }
      case 'createCollection': {
        validateCollectionName(op.name);
        if (this.collection(op.name)) throw new AlreadyExistsError(`Collection \`${op.name}\` already exists!`);
        if (Object.prototype.hasOwnProperty.call(this.data.aliases, op.name)) {
          throw new BadInputError(`Can't create collection with name ${op.name}. Alias with the same name already exists`);
        }
        const limit = op.max_collections !== undefined ? op.max_collections : maxCollections;
        if (limit !== null && Object.keys(this.data.collections).length >= limit) {
          throw new BadInputError(`cannot create more than ${limit} collections (storage.max_collections)`);
        }
        this.data.collections[op.name] = {
          uuid: op.uuid,
          config: op.config,
          payload_schema: { ...(op.payload_schema ?? {}) },
          shards: op.shards.map((s) => ({ id: s.id, replicas: { ...s.replicas }, ...(s.shard_key !== undefined ? { shard_key: s.shard_key } : {}) })),
          ...(op.next_shard_id !== undefined ? { next_shard_id: op.next_shard_id } : {}),
        };
        return done(true, [op.name]);
      }
      case 'updateCollection': {
        const [name, c] = this.requireCollection(op.name);
        c.config = applyCollectionUpdate(c.config, op.patch, false).config;
        return done(true, [name]);
      }
      case 'createVectorName': {
        const [name, c] = this.requireCollection(op.collection);
        c.config = addVectorName(c.config, op.vector, op.sparse !== undefined ? { sparse: op.sparse } : { dense: op.params! }, false);
        return done(true, [name]);
      }
      case 'deleteVectorName': {
        const [name, c] = this.requireCollection(op.collection);
        c.config = removeVectorName(c.config, op.vector);
        return done(true, [name]);
      }
      case 'deleteCollection': {
        if (!this.collection(op.name)) return done(false, []);
        delete this.data.collections[op.name];
        let aliases = false;
        for (const [a, target] of Object.entries(this.data.aliases)) {
          if (target === op.name) {
            delete this.data.aliases[a];
            aliases = true;
          }
        }
        return done(true, [op.name], aliases);
      }
      case 'changeAliases': {
        const next: Record<string, string> = { ...this.data.aliases };
        for (const a of op.actions) {
          if ('create_alias' in a) {
            const { collection_name, alias_name } = a.create_alias;
            validateCollectionName(alias_name, 'alias name');
            if (!this.collection(collection_name)) throw new NotFoundError(`Collection \`${collection_name}\` doesn't exist!`);
            if (this.collection(alias_name)) throw new AlreadyExistsError(`Collection \`${alias_name}\` already exists!`);
            next[alias_name] = collection_name;
          } else if ('delete_alias' in a) {
            delete next[a.delete_alias.alias_name];
          } else {
            const { old_alias_name, new_alias_name } = a.rename_alias;
            if (!Object.prototype.hasOwnProperty.call(next, old_alias_name)) throw new NotFoundError(`Alias ${old_alias_name} does not exists!`);
            validateCollectionName(new_alias_name, 'alias name');
            if (this.collection(new_alias_name)) throw new AlreadyExistsError(`Collection \`${new_alias_name}\` already exists!`);
            const target = next[old_alias_name];
            delete next[old_alias_name];
            next[new_alias_name] = target;
          }
        }
        this.data.aliases = next;
        return done(true, [], true);
      }
      case 'createPayloadIndex': {
        const [name, c] = this.requireCollection(op.collection);
        // As on a single node, a different schema for an indexed field replaces its index.
        c.payload_schema[op.field] = op.schema;
        return done(true, [name]);
      }
      case 'dropPayloadIndex': {
        const [name, c] = this.requireCollection(op.collection);
        const had = Object.prototype.hasOwnProperty.call(c.payload_schema, op.field);
        delete c.payload_schema[op.field];
        return done(had, [name]);
      }
      case 'setReplicaState': {
        const [name, c] = this.requireCollection(op.collection);
        const shard = c.shards.find((s) => s.id === op.shard);
        if (!shard) throw new NotFoundError(`Shard ${op.shard} of ${name} does not exist`);
        const current = shard.replicas[op.peer];
        if (current === undefined) throw new NotFoundError(`Shard ${op.shard} of ${name} has no replica on peer ${op.peer}`);
        if (op.from !== undefined && current !== op.from) {
          throw new BadInputError(`replica of shard ${op.shard} on peer ${op.peer} is ${current}, not ${op.from}`);
        }
        if (current === op.state) return done(false, []);
        if (isActive(current) && !isActive(op.state) && !Object.entries(shard.replicas).some(([p, s]) => p !== op.peer && isActive(s))) {
          throw new BadInputError(`shard ${op.shard} of ${name} must keep at least one active replica`);
        }
        // A replica in a transfer changes state only through the transfer's end.
        const t = (c.transfers ?? []).find((x) => x.shard === op.shard && (x.from === op.peer || x.to === op.peer));
        if (t !== undefined && !isActive(op.state)) {
          // The source failing ends the transfer: its target cannot become Active without it.
          c.transfers = (c.transfers ?? []).filter((x) => x !== t);
          if (t.to !== op.peer) this.endTarget(shard, t, false);
        } else if (t !== undefined) {
          throw new BadInputError(`replica of shard ${op.shard} on peer ${op.peer} is in a transfer (${t.from} → ${t.to})`);
        }
        shard.replicas[op.peer] = op.state;
        return done(true, [name]);
      }
      case 'startTransfer': {
        const [name, c] = this.requireCollection(op.collection);
        const t = op.transfer;
        const shard = c.shards.find((s) => s.id === t.shard);
        // The reference's 400s (checked before consensus too, by the dispatcher).
        if (!shard) throw new BadRequestError(`Shard ${t.shard} of ${name} does not exist`);
        for (const p of [t.to, t.from]) if (!Object.prototype.hasOwnProperty.call(this.data.peers, p)) throw unknownPeerError(p);
        if (t.from === t.to) throw new BadInputError(`a shard transfer needs two different peers (${t.from})`);
        const source = shard.replicas[t.from];
        if (source === undefined || !isActive(source)) throw new BadInputError(`shard ${t.shard} of ${name} has no active replica on peer ${t.from}`);
        if ((c.transfers ?? []).some((x) => x.shard === t.shard)) throw new BadInputError(`shard ${t.shard} of ${name} is already being transferred`);
        const target = shard.replicas[t.to];
        if (t.kind === 'recovery') {
          if (target === undefined || isActive(target)) throw new BadInputError(`replica of shard ${t.shard} on peer ${t.to} is ${target ?? 'absent'}: nothing to recover`);
        } else if (target !== undefined) {
          throw new BadInputError(`shard ${t.shard} of ${name} already has a replica on peer ${t.to}`);
        }
        if (!TRANSFER_METHODS.includes(t.method)) throw new BadInputError(`unknown shard transfer method ${JSON.stringify(t.method)}`);
        if (t.id !== undefined && (typeof t.id !== 'string' || t.id.length === 0 || t.id.length > 64)) throw new BadInputError('a shard transfer id is 1 to 64 characters');
        shard.replicas[t.to] = 'Partial';
        c.transfers = [...(c.transfers ?? []), { ...t }];
        return done(true, [name]);
      }
      case 'finishTransfer': {
        const [name, c] = this.requireCollection(op.collection);
        const t = (c.transfers ?? []).find((x) => x.shard === op.shard && x.from === op.from && x.to === op.to && sameTransfer(x, op.id));
        if (t === undefined) return done(false, []);
        const shard = c.shards.find((s) => s.id === op.shard)!;
        c.transfers = (c.transfers ?? []).filter((x) => x !== t);
        this.endTarget(shard, t, op.ok);
        return done(true, [name]);
      }
      case 'switchTransfer': {
        const [name, c] = this.requireCollection(op.collection);
        const t = (c.transfers ?? []).find((x) => x.shard === op.shard && x.from === op.from && x.to === op.to && sameTransfer(x, op.id));
        if (t === undefined) throw new NotFoundError(`no transfer of shard ${op.shard} of ${name} from peer ${op.from} to peer ${op.to}`);
        if (!TRANSFER_METHODS.includes(op.method)) throw new BadInputError(`unknown shard transfer method ${JSON.stringify(op.method)}`);
        if (t.method === op.method) return done(false, []);
        c.transfers = (c.transfers ?? []).map((x) => (x === t ? { ...t, method: op.method } : x));
        return done(true, [name]);
      }
      case 'createShardKey': {
        const [name, c] = this.requireCollection(op.collection);
        if (c.config.params.sharding_method !== 'custom') throw autoShardingRefusal();
        const keys = ClusterState.shardKeys(c);
        if (keys.some((e) => keyId(e.key) === keyId(op.key))) throw keyExistsError(op.key, op.collection);
        if (op.placement.length === 0 || op.placement.some((peers) => peers.length === 0)) throw emptyPlacementError(op.key);
        for (const peers of op.placement) for (const p of peers) if (!Object.prototype.hasOwnProperty.call(this.data.peers, p)) throw unknownPeerError(p);
        const first = nextShardId(keys, c.next_shard_id);
        op.placement.forEach((peers, i) => {
          const replicas: Record<PeerId, ReplicaState> = {};
          for (const p of peers) replicas[p] = 'Active';
          c.shards.push({ id: first + i, replicas, shard_key: op.key });
        });
        c.next_shard_id = first + op.placement.length;
        return done(true, [name]);
      }
      case 'dropShardKey': {
        const [name, c] = this.requireCollection(op.collection);
        if (c.config.params.sharding_method !== 'custom') throw autoShardingRefusal();
        const mine = (s: ShardPlacement) => s.shard_key !== undefined && keyId(s.shard_key) === keyId(op.key);
        if (!c.shards.some(mine)) throw keyMissingError(op.key, op.collection);
        c.shards = c.shards.filter((s) => !mine(s));
        return done(true, [name]);
      }
      case 'dropReplica': {
        const [name, c] = this.requireCollection(op.collection);
        const shard = c.shards.find((s) => s.id === op.shard);
        // The reference's 400s (checked before consensus too, by the dispatcher).
        if (!shard) throw new BadRequestError(`Shard ${op.shard} of ${name} does not exist`);
        if (!Object.prototype.hasOwnProperty.call(this.data.peers, op.peer)) throw unknownPeerError(op.peer);
        const st = shard.replicas[op.peer];
        if (st === undefined) throw new BadRequestError(`Shard ${op.shard} of ${name} has no replica on peer ${op.peer}`);
        if ((c.transfers ?? []).some((t) => t.shard === op.shard && (t.from === op.peer || t.to === op.peer))) {
          throw new BadInputError(`the replica of shard ${op.shard} on peer ${op.peer} is in a transfer: abort it first`);
        }
        if (isActive(st) && !Object.entries(shard.replicas).some(([p, x]) => p !== op.peer && isActive(x))) {
          throw new BadInputError(`the replica of shard ${op.shard} on peer ${op.peer} is the last active replica of the shard: it cannot be dropped`);
        }
        delete shard.replicas[op.peer];
        return done(true, [name]);
      }
      case 'startSnapshotRecovery': {
        const [name, c] = this.requireCollection(op.collection);
        const shard = c.shards.find((s) => s.id === op.shard);
        if (!shard) throw new NotFoundError(`Shard ${op.shard} of ${name} does not exist`);
        if (!Object.prototype.hasOwnProperty.call(this.data.peers, op.peer)) throw new BadInputError(`Peer ${op.peer} does not exist`);
        if ((c.transfers ?? []).some((t) => t.shard === op.shard && (t.from === op.peer || t.to === op.peer))) {
          throw new BadInputError(`the replica of shard ${op.shard} of ${name} on peer ${op.peer} is in a transfer: abort it before recovering a snapshot there`);
        }
        const current = shard.replicas[op.peer];
        const previous = current ?? null;
        const othersActive = Object.entries(shard.replicas).some(([p, st]) => p !== op.peer && isActive(st));
        let action: RecoveryStart['action'];
        if (op.priority === 'replica' && current !== undefined && isActive(current)) {
          action = 'kept';
        } else if (op.priority === 'replica' && othersActive) {
          action = 'sync';
          shard.replicas[op.peer] = 'Dead';
        } else {
          // Its data is replaced: no writes nor reads meanwhile (it may be the shard's last active replica).
          action = 'restore';
          shard.replicas[op.peer] = 'ManualRecovery';
        }
        const value: RecoveryStart = { action, previous };
        return done(value, current === shard.replicas[op.peer] ? [] : [name]);
      }
      case 'finishSnapshotRecovery': {
        const [name, c] = this.requireCollection(op.collection);
        const shard = c.shards.find((s) => s.id === op.shard);
        if (!shard) throw new NotFoundError(`Shard ${op.shard} of ${name} does not exist`);
        const current = shard.replicas[op.peer];
        if (current !== 'ManualRecovery') {
          throw new BadInputError(`the replica of shard ${op.shard} of ${name} on peer ${op.peer} is ${current ?? 'absent'}: it is not being recovered from a snapshot`);
        }
        const othersActive = Object.entries(shard.replicas).some(([p, st]) => p !== op.peer && isActive(st));
        if (!op.ok) {
          // Its data was left as it was: back to what it was, but never Active beside
          // active replicas that took writes meanwhile (it is recovered from them).
          if (op.previous === null) delete shard.replicas[op.peer];
          else shard.replicas[op.peer] = isActive(op.previous) && !othersActive ? op.previous : 'Dead';
        } else if (op.priority === 'replica' && othersActive) {
          // An active replica appeared meanwhile: the existing data wins after all.
          shard.replicas[op.peer] = 'Dead';
        } else {
          shard.replicas[op.peer] = 'Active';
          if (op.priority === 'snapshot') {
            // The snapshot's data wins: every other replica follows this one.
            for (const t of (c.transfers ?? []).filter((x) => x.shard === op.shard)) {
              c.transfers = (c.transfers ?? []).filter((x) => x !== t);
              this.endTarget(shard, t, false);
            }
            for (const p of Object.keys(shard.replicas)) if (p !== op.peer && shard.replicas[p] !== undefined) shard.replicas[p] = 'Dead';
          }
        }
        return done(shard.replicas[op.peer] ?? null, [name]);
      }
    }
  }
}

/** Whether the listed transfer `t` is the one an operation with transfer id `id` means (no id: any; a transfer listed without one: any). */
function sameTransfer(t: TransferInfo, id: string | undefined): boolean {
  return id === undefined || id === '' || t.id === undefined || t.id === id;
}

/**
 * Placement of a new collection: `shardNumber` shards, each with `replicationFactor`
 * replicas on distinct peers (fewer when there are fewer peers), spread round-robin
 * from a starting offset so that successive collections do not all start on the same
 * peer. `peers` in a fixed order (sorted ids) and `offset` come from the proposer.
 */
export function placeShards(peers: readonly PeerId[], shardNumber: number, replicationFactor: number, offset: number): ShardPlacement[] {
  if (peers.length === 0) throw new Error('no peers to place shards on');
  const copies = Math.min(replicationFactor, peers.length);
  const out: ShardPlacement[] = [];
  for (let id = 0; id < shardNumber; id++) {
    const replicas: Record<PeerId, ReplicaState> = {};
    for (let r = 0; r < copies; r++) replicas[peers[(offset + id + r) % peers.length]] = 'Active';
    out.push({ id, replicas });
  }
  return out;
}

/**
 * Placement of a new shard key's shards: `shardNumber` shards, each with
 * `replicationFactor` replicas on distinct peers of `pool` (fewer when the pool is
 * smaller), taken round-robin from `offset` so that keys spread over the pool. `pool`
 * (the request's placement, or every peer in sorted order) and `offset` come from the
 * proposer.
 */
export function placeKeyShards(pool: readonly PeerId[], shardNumber: number, replicationFactor: number, offset: number): PeerId[][] {
  const peers = [...new Set(pool)];
  if (peers.length === 0) throw new Error('no peers to place shards on');
  const copies = Math.min(replicationFactor, peers.length);
  return Array.from({ length: shardNumber }, (_, id) => Array.from({ length: copies }, (_, r) => peers[(offset + id * copies + r) % peers.length]));
}

/**
 * Placement of a collection created by a snapshot recovery on `self` (priority
 * `snapshot`): the shards `ids` placed as placeShards places them, except that every
 * shard the snapshot holds (`held`) has its replica on `self` in state ManualRecovery
 * (in place of the last peer placed when `self` was not among them) and its other
 * replicas Dead, so they follow `self` once its data is in. `keyOf` gives each shard's
 * key (custom sharding).
 */
export function placeRecovered(
  peers: readonly PeerId[],
  ids: readonly number[],
  replicationFactor: number,
  offset: number,
  self: PeerId,
  held: readonly number[],
  keyOf: (id: number) => ShardKey | undefined = () => undefined,
): ShardPlacement[] {
  return placeShards(peers, ids.length, replicationFactor, offset).map((p, i) => {
    const id = ids[i];
    let replicas = p.replicas;
    if (held.includes(id)) {
      const others = Object.keys(replicas).filter((peer) => peer !== self);
      if (others.length === Object.keys(replicas).length) others.pop();
      replicas = { [self]: 'ManualRecovery' };
      for (const peer of others) replicas[peer] = 'Dead';
    }
    const key = keyOf(id);
    return { id, replicas, ...(key !== undefined ? { shard_key: key } : {}) };
  });
}

/** Equal payload schemas (same fields, same definitions). */
export function samePayloadSchema(a: Record<string, FieldSchema>, b: Record<string, FieldSchema>): boolean {
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  return ka.every((k) => b[k] !== undefined && sameFieldSchema(a[k], b[k]));
}
