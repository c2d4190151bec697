/**
 * Snapshot recovery in cluster mode (SPEC 2.5, 3.3b "No copies of data", 4.1): a
 * collection or shard snapshot recovered on this peer registers the recovered shards
 * through consensus, and this peer's replicas get the snapshot's data; the other
 * replicas follow the priority.
 *
 * A collection snapshot taken on a cluster peer holds that peer's replicas; recovered
 * on any peer, each shard it holds goes through these steps:
 *
 * 1. `startSnapshotRecovery` (consensus) registers this peer's replica when it has none
 *    and decides, when applied: priority `replica` keeps an Active replica here as it is
 *    (`kept`) or, when another replica is Active, marks this peer's Dead so that the
 *    leader's supervisor recovers it from an active one (`sync`: the existing data wins);
 *    otherwise (`snapshot`, `no_sync`, or no active replica anywhere) the replica goes
 *    ManualRecovery (no writes, no reads) for the data to be replaced (`restore`).
 * 2. `restore`: the shard's folder is swapped for the snapshot's (Collection.replaceShard),
 *    after checking that consensus still has this replica in ManualRecovery.
 * 3. `finishSnapshotRecovery` (consensus): the replica becomes Active; with priority
 *    `snapshot` every other replica of the shard is marked Dead (transfers of the shard
 *    are aborted), so the supervisor recovers them from this one; `no_sync` leaves the
 *    others as they are. A swap that failed ends the recovery with `ok: false`: the
 *    replica goes back to its former state (removed when it had none; never Active beside
 *    active replicas that took writes meanwhile).
 *
 * A collection that does not exist is created through consensus with the snapshot's
 * configuration, payload indexes and shard keys (same shard ids). With priority
 * `replica` it stays empty (SPEC 2.5: existing data is preferred, and a new collection
 * has none), as on a single node. With `snapshot` (and `no_sync`, which has no other
 * replica to leave alone) it is created with this peer's replicas of the snapshot's
 * shards in ManualRecovery and their other replicas Dead (placeRecovered), then steps 2
 * and 3 run; if a swap fails the collection is deleted again.
 *
 * Owns: those steps, one recovery per collection at a time on this peer, start-up
 * recovery into a new cluster (`--snapshot`, `--storage-snapshot` on its first peer).
 * Must never: unpack or validate archives (snapshots.ts and archive.ts do), or decide a
 * replica's state itself (the state machine does, when it applies the operations).
 */

import { randomInt, randomUUID } from 'node:crypto';
import * as path from 'node:path';
import type { Logger } from 'pino';

import { AlreadyExistsError, BadInputError, BadRequestError, ClusterUnavailableError, NotFoundError, ShardUnavailableError, leaderTrouble } from '../common/errors';
import type { ReplicaState } from '../collection/replica-state';
import { keyId, showKey, type ShardKey } from '../collection/shard-keys';
import type { Config } from '../config/types';
import { ClusterState, placeRecovered, type ClusterCollection, type MetaOp, type RecoveryPriority, type RecoveryStart } from '../storage/cluster-state';
import type { MetadataConsensus } from '../storage/metadata-consensus';
import { validateCollectionName, type AliasAction, type TableOfContent } from '../storage/toc';
import { incompatibility, type UnpackedSnapshot } from './archive';
import type { Priority, RecoverySource, RestoreTarget, Snapshots } from './snapshots';

/** Bound of one consensus proposal of a recovery. */
const PROPOSE_TIMEOUT_MS = 30_000;
/** How long the end of a recovery is proposed again while consensus has no leader. */
const FINISH_RETRY_MS = 30_000;
const RETRY_PAUSE_MS = 250;

export interface ClusterSnapshotsDeps {
  snapshots: Snapshots;
  toc: TableOfContent;
  consensus: MetadataConsensus;
  config: Config;
  logger: Logger;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class ClusterSnapshots implements RestoreTarget {
  /** Collections with a recovery running on this peer. */
  private readonly busy = new Set<string>();
  private readonly logger: Logger;

  constructor(private readonly deps: ClusterSnapshotsDeps) {
    this.logger = deps.logger.child({ component: 'snapshots' });
  }

  private get state(): ClusterState {
    return this.deps.consensus.clusterState;
  }

  private get self(): string {
    return this.deps.consensus.peerId;
  }

  /** The collection a name or alias stands for in the cluster, or the name itself. */
  private resolve(nameOrAlias: string): string {
    return this.state.resolve(nameOrAlias) ?? nameOrAlias;
  }

  has(collection: string): boolean {
    return this.state.resolve(collection) !== undefined;
  }

  /**
   * Recovers collection `name` (created through consensus when absent) from a collection
   * snapshot: the shards the snapshot holds get a replica on this peer, as the module
   * comment says.
   */
  async recoverCollection(name: string, source: RecoverySource, priority: Priority, checksum: string | null): Promise<void> {
    const target = this.resolve(name);
    await this.exclusively(target, (claim) =>
      this.deps.snapshots.recover('collection', source, checksum, () => { validateCollectionName(target); claim(); }, async (snap) => {
        const existing = this.state.collection(target);
        if (existing === undefined) await this.intoNew(target, snap, priority);
        else await this.intoExisting(target, existing, snap, snap.manifest.shards, priority);
      }),
    );
  }

  /** Recovers shard `shardId` of an existing collection from a shard snapshot of the same shard, on this peer. */
  async recoverShard(name: string, shardId: number, source: RecoverySource, priority: Priority, checksum: string | null): Promise<void> {
    const target = this.checkShard(name, shardId);
    await this.exclusively(target, (claim) =>
      this.deps.snapshots.recover('shard', source, checksum, () => { this.checkShard(name, shardId); claim(); }, async (snap) => {
        if (snap.manifest.shards[0] !== shardId) {
          throw new BadInputError(`Snapshot is not compatible with the shard: it holds shard ${snap.manifest.shards[0]}, not shard ${shardId}`);
        }
        const existing = this.state.collection(target);
        if (existing === undefined) throw new NotFoundError(`Collection \`${name}\` doesn't exist!`);
        await this.intoExisting(target, existing, snap, [shardId], priority);
      }),
    );
  }

  /** The cluster's name of a collection that has shard `shardId`, or the reference's 404s. */
  checkShard(name: string, shardId: number): string {
    const target = this.state.resolve(name);
    if (target === undefined) throw new NotFoundError(`Collection \`${name}\` doesn't exist!`);
    if (!this.state.collection(target)!.shards.some((s) => s.id === shardId)) throw new NotFoundError(`Shard ${shardId} of ${target} does not exist`);
    return target;
  }

  /** Start-up (`--storage-snapshot`): the aliases of a full snapshot, through consensus, where their collection exists. */
  async restoreAliases(aliases: Record<string, string>): Promise<void> {
    const actions: AliasAction[] = [];
    for (const [alias, collection] of Object.entries(aliases)) {
      if (typeof collection !== 'string' || this.state.collection(collection) === undefined || this.state.collection(alias) !== undefined) continue;
      validateCollectionName(alias, 'alias name');
      actions.push({ create_alias: { collection_name: collection, alias_name: alias } });
    }
    if (actions.length > 0) await this.propose({ op: 'changeAliases', actions });
  }

  /** Resolves once this peer knows a consensus leader (start-up: the first peer elects itself), or throws after `timeoutMs`. */
  async leaderKnown(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.deps.consensus.status().leader === null) {
      if (Date.now() > deadline) throw new ClusterUnavailableError(`no consensus leader within ${timeoutMs / 1000} s`);
      await sleep(50);
    }
  }

  // -- steps -----------------------------------------------------------------------------

  /** Runs `work` as the only recovery of `collection` on this peer; `claim` (called by the precheck) takes it. */
  private async exclusively(collection: string, work: (claim: () => void) => Promise<void>): Promise<void> {
    let claimed = false;
    const claim = () => {
      if (this.busy.has(collection)) throw new BadRequestError(`a snapshot recovery of collection \`${collection}\` is already running on this peer; retry when it is done`);
      this.busy.add(collection);
      claimed = true;
    };
    try {
      await work(claim);
    } finally {
      if (claimed) this.busy.delete(collection);
    }
  }

  private propose(op: MetaOp): Promise<unknown> {
    return this.deps.consensus.propose(op, PROPOSE_TIMEOUT_MS);
  }

  /** A new collection from a collection snapshot: created through consensus, then (priority snapshot or no_sync) filled on this peer. */
  private async intoNew(name: string, snap: UnpackedSnapshot, priority: Priority): Promise<void> {
    const { config, payload_schema } = snap.meta;
    const custom = config.params.sharding_method === 'custom';
    const keys = snap.meta.shard_keys ?? [];
    const ids = custom ? keys.flatMap((e) => e.shards).sort((a, b) => a - b) : Array.from({ length: config.params.shard_number }, (_, i) => i);
    const keyOf = (id: number): ShardKey | undefined => keys.find((e) => e.shards.includes(id))?.key;
    const peers = Object.keys(this.state.peers).sort();
    const offset = peers.length > 1 ? randomInt(peers.length) : 0;
    const held = priority === 'replica' ? [] : snap.manifest.shards;
    const shards = placeRecovered(peers, ids, config.params.replication_factor, offset, this.self, held, keyOf);
    if (this.state.collection(name)) throw new AlreadyExistsError(`Collection \`${name}\` already exists!`);
    const uuid = randomUUID();
    await this.propose({
      op: 'createCollection',
      name,
      uuid,
      config,
      shards,
      max_collections: this.deps.config.storage.max_collections,
      payload_schema,
      ...(custom ? { next_shard_id: snap.meta.next_shard_id } : {}),
    });
    if (held.length === 0) {
      this.logger.info({ collection: name, priority }, 'collection created empty from the snapshot configuration through consensus (replica priority)');
      return;
    }
    try {
      await this.restore(name, uuid, snap, held);
    } catch (err) {
      this.logger.error({ err, collection: name }, 'the snapshot data could not be put in place: the collection created for it is deleted');
      await this.propose({ op: 'deleteCollection', name }).catch((e: unknown) => this.logger.error({ err: e, collection: name }, 'could not delete the collection after a failed recovery'));
      throw err;
    }
    for (const id of held) await this.finish(name, id, 'snapshot', true, null);
    this.logger.info({ collection: name, shards: held }, 'collection created through consensus and recovered from the snapshot on this peer');
  }

  /** Shards `held` of an existing collection from an unpacked snapshot, each as the module comment says. */
  private async intoExisting(name: string, c: ClusterCollection, snap: UnpackedSnapshot, held: readonly number[], priority: Priority): Promise<void> {
    const why = incompatibility(c.config, snap.meta.config);
    if (why) throw new BadInputError(`Snapshot is not compatible with existing collection: ${why}`);
    const keys = ClusterState.shardKeys(c);
    for (const id of held) {
      const shard = c.shards.find((s) => s.id === id);
      if (shard === undefined) throw new BadInputError(`Snapshot is not compatible with existing collection: it holds shard ${id}, which the collection does not have`);
      const here = keys.find((e) => e.shards.includes(id))?.key;
      const there = snap.meta.shard_keys?.find((e) => e.shards.includes(id))?.key;
      if (here !== undefined && (there === undefined || keyId(there) !== keyId(here))) {
        const theirs = there === undefined ? 'no shard key' : `shard key ${showKey(there)}`;
        throw new BadInputError(`Snapshot is not compatible with the shard: shard ${id} belongs to shard key ${showKey(here)} here, to ${theirs} in the snapshot`);
      }
    }
    const uuid = c.uuid;
    const restoring: Array<{ id: number; previous: ReplicaState | null }> = [];
    try {
      for (const id of held) {
        const start = (await this.propose({ op: 'startSnapshotRecovery', collection: name, shard: id, peer: this.self, priority })) as RecoveryStart;
        if (start.action === 'restore') restoring.push({ id, previous: start.previous });
        else this.logger.info({ collection: name, shard: id, priority }, start.action === 'kept' ? 'replica priority: the active replica on this peer is kept as it is' : 'replica priority: this peer\'s replica is recovered from an active replica');
      }
    } catch (err) {
      // Shards already set to ManualRecovery go back to what they were.
      for (const r of restoring) await this.finish(name, r.id, priority, false, r.previous).catch(() => undefined);
      throw err;
    }
    let done = 0;
    try {
      for (const r of restoring) {
        await this.restore(name, uuid, snap, [r.id]);
        done++;
        await this.finish(name, r.id, priority, true, r.previous);
      }
    } catch (err) {
      for (const r of restoring.slice(done)) await this.finish(name, r.id, priority, false, r.previous).catch((e: unknown) => this.logger.error({ err: e, collection: name, shard: r.id }, 'could not end a failed snapshot recovery'));
      throw err;
    }
    if (restoring.length > 0) this.logger.info({ collection: name, shards: restoring.map((r) => r.id), priority }, 'shards recovered from a snapshot on this peer');
  }

  /**
   * Swaps this peer's replicas of `ids` for the snapshot's shard folders, once consensus
   * (as applied here) has each in ManualRecovery in this incarnation of the collection.
   * No other local change from consensus runs meanwhile.
   */
  private async restore(name: string, uuid: string, snap: UnpackedSnapshot, ids: readonly number[]): Promise<void> {
    await this.deps.toc.exclusive(async () => {
      for (const id of ids) {
        const desired = this.state.collection(name);
        const st = desired?.uuid === uuid ? desired.shards.find((s) => s.id === id)?.replicas[this.self] : undefined;
        const local = this.deps.toc.peek(name);
        if (st !== 'ManualRecovery' || local === undefined || local.meta.cluster?.uuid !== uuid) {
          throw new ShardUnavailableError(`shard ${id} of collection \`${name}\` changed in the cluster during the snapshot recovery (this peer's replica is ${st ?? 'gone'}); nothing was recovered into it: retry`);
        }
        await local.replaceShard(id, path.join(snap.dir, String(id)), true);
      }
    });
  }

  /** Ends the recovery of one shard (proposed again while consensus has no leader, so a replica is not left in ManualRecovery). */
  private async finish(name: string, shard: number, priority: RecoveryPriority, ok: boolean, previous: ReplicaState | null): Promise<void> {
    const deadline = Date.now() + FINISH_RETRY_MS;
    for (let attempt = 0; ; attempt++) {
      try {
        const now = (await this.propose({ op: 'finishSnapshotRecovery', collection: name, shard, peer: this.self, priority, ok, previous })) as ReplicaState | null;
        if (ok && now === 'Dead') this.logger.info({ collection: name, shard }, 'an active replica appeared during the recovery: this peer\'s replica is recovered from it (replica priority)');
        return;
      } catch (err) {
        // An earlier attempt that timed out may have been applied after all: then this one is refused, and the recovery ended.
        if (attempt > 0 && this.state.collection(name)?.shards.find((s) => s.id === shard)?.replicas[this.self] !== 'ManualRecovery') return;
        if (!leaderTrouble(err) || Date.now() > deadline) throw err;
        await sleep(RETRY_PAUSE_MS);
      }
    }
  }
}
