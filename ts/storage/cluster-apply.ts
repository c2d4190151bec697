/**
 * Brings this peer's local storage (TableOfContent) in line with the cluster metadata:
 * collections created, re-created or deleted, configuration and payload indexes
 * updated, shard keys added or dropped (custom sharding), local replicas opened or
 * dropped as the placement says, aliases replaced.
 *
 * Owns: the order of local changes (one queue: a change is made only after every
 * earlier one), and making each change idempotent by comparing the desired state with
 * what is on disk, so re-applying entries after a restart is harmless. A collection is
 * identified by its uuid: one deleted and created again under the same name is a new
 * collection, and the old data goes.
 * Must never: decide anything (the state machine did), or delete a collection that was
 * not created through consensus (a standalone collection from before cluster mode stays
 * and is reported), or act while this peer is not a member (a removed peer keeps its data).
 */

import type { Logger } from 'pino';

import type { ClusterPlacement } from '../collection/collection';
import type { TableOfContent } from './toc';
import { ClusterState, samePayloadSchema } from './cluster-state';

export class LocalApplier {
  private queue: Promise<void> = Promise.resolve();
  /** Changes queued and not finished. */
  private queued = 0;
  private readonly warned = new Set<string>();

  constructor(
    private readonly toc: TableOfContent,
    private readonly peerId: string,
    private readonly log: Logger,
    private readonly state: () => ClusterState,
  ) {}

  /** Queues bringing these collections (and the aliases) in line; resolves when done. */
  enqueue(collections: readonly string[], aliases: boolean): Promise<void> {
    if (collections.length === 0 && !aliases) return this.queue;
    const names = [...collections];
    return this.chain(async () => {
      for (const name of names) await this.syncCollection(name);
      if (aliases) await this.syncAliases();
    });
  }

  /** Queues bringing everything in line (start-up, a consensus snapshot installed). */
  enqueueAll(): Promise<void> {
    return this.chain(async () => {
      const names = new Set([...this.state().collectionNames(), ...this.toc.names()]);
      for (const name of names) await this.syncCollection(name);
      await this.syncAliases();
    });
  }

  /** Resolves once every queued change is done. */
  idle(): Promise<void> {
    return this.queue;
  }

  /** Whether every queued local change is done (part of readiness). */
  get idleNow(): boolean {
    return this.queued === 0;
  }

  private chain(fn: () => Promise<void>): Promise<void> {
    this.queued++;
    const run = this.queue.then(fn).finally(() => this.queued--);
    this.queue = run.catch((err: unknown) => {
      this.log.error({ err }, 'a local change from consensus failed; it is retried at the next start');
    });
    return run;
  }

  private member(): boolean {
    return Object.prototype.hasOwnProperty.call(this.state().peers, this.peerId);
  }

  private async syncCollection(name: string): Promise<void> {
    if (!this.member()) return;
    const desired = this.state().collection(name);
    let local = this.toc.peek(name);
    if (local && local.meta.cluster === undefined) {
      if (!this.warned.has(name)) {
        this.warned.add(name);
        this.log.error(
          { collection: name },
          desired
            ? 'a standalone collection (from before cluster mode) has the name of a cluster collection: it is kept, the cluster collection is not created on this peer'
            : 'a standalone collection (from before cluster mode) is kept on this peer only',
        );
      }
      return;
    }
    if (!desired) {
      if (local) await this.toc.delete(name);
      return;
    }
    const placement: ClusterPlacement = {
      uuid: desired.uuid,
      peer: this.peerId,
      shards: desired.shards.map((s) => ({ id: s.id, replicas: { ...s.replicas } })),
      transfers: (desired.transfers ?? []).map((t) => ({ shard: t.shard, from: t.from, to: t.to, method: t.method, id: t.id })),
    };
    const shardKeys = desired.config.params.sharding_method === 'custom' ? ClusterState.shardKeys(desired) : undefined;
    if (local && local.meta.cluster?.uuid !== desired.uuid) {
      this.log.info({ collection: name }, 'collection re-created in the cluster: the old local one goes');
      await this.toc.delete(name);
      local = undefined;
    }
    if (!local) {
      await this.toc.create(name, structuredClone(desired.config), structuredClone(desired.payload_schema), placement, shardKeys);
      return;
    }
    await this.toc.updateMeta(name, async (c) => {
      if (JSON.stringify(c.config) !== JSON.stringify(desired.config)) await c.updateConfig(structuredClone(desired.config));
      if (!samePayloadSchema(c.meta.payload_schema, desired.payload_schema)) {
        for (const field of Object.keys(c.meta.payload_schema)) {
          if (desired.payload_schema[field] === undefined) await c.dropPayloadIndex(field);
        }
        for (const [field, schema] of Object.entries(desired.payload_schema)) await c.createPayloadIndex(field, structuredClone(schema));
      }
      // A new key's shards first get their replica sets, then applyPlacement opens this peer's replicas of them.
      if (shardKeys !== undefined && JSON.stringify(c.meta.shard_keys ?? []) !== JSON.stringify(shardKeys)) await c.applyShardKeys(shardKeys, placement);
      if (JSON.stringify(c.meta.cluster) !== JSON.stringify(placement)) await c.applyPlacement(placement);
    });
  }

  private async syncAliases(): Promise<void> {
    if (!this.member()) return;
    await this.toc.replaceAliases({ ...this.state().aliases });
  }
}
