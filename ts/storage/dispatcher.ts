/**
 * Where a metadata change goes: straight to this node's storage (TableOfContent) on a
 * single node, or through consensus in a cluster (proposed on the leader, answered once
 * applied on this peer, so every peer then shows the same collections).
 *
 * Owns: the choice, the cluster defaults of a new collection (`shard_number` = number
 * of peers, placement of `replication_factor` replicas on distinct peers), the consensus
 * wait timeout (query `timeout`, seconds; default 30). Must never: parse HTTP beyond the
 * body it is handed, or apply a cluster change locally without consensus.
 */

import { randomInt, randomUUID } from 'node:crypto';

import { AlreadyExistsError, BadInputError, NotFoundError } from '../common/errors';
import { applyCollectionUpdate, parseCreateCollection } from '../collection/config';
import type { Config } from '../config/types';
import type { FieldSchema } from '../shard/field-schema';
import { placeShards } from './cluster-state';
import type { MetadataConsensus } from './metadata-consensus';
import { validateCollectionName, type AliasAction, type TableOfContent } from './toc';

export const DEFAULT_CONSENSUS_TIMEOUT_S = 30;

export class Dispatcher {
  constructor(
    readonly toc: TableOfContent,
    readonly consensus: MetadataConsensus | null,
    private readonly config: Config,
  ) {}

  private ms(timeoutS: number | null): number {
    return (timeoutS ?? DEFAULT_CONSENSUS_TIMEOUT_S) * 1000;
  }

  async createCollection(name: string, body: Record<string, unknown> | null, timeoutS: number | null): Promise<boolean> {
    if (this.consensus === null) {
      await this.toc.create(name, parseCreateCollection(body, this.config));
      return true;
    }
    validateCollectionName(name);
    const state = this.consensus.clusterState;
    const peers = Object.keys(state.peers).sort();
    const b = { ...(body ?? {}) };
    if (b.shard_number === undefined || b.shard_number === null) b.shard_number = Math.max(1, peers.length);
    const config = parseCreateCollection(b, this.config);
    // Checked again when applied (another peer may create it meanwhile): these give the clear error early.
    if (state.collection(name)) throw new AlreadyExistsError(`Collection \`${name}\` already exists!`);
    if (Object.prototype.hasOwnProperty.call(state.aliases, name)) throw new BadInputError(`Can't create collection with name ${name}. Alias with the same name already exists`);
    const shards = placeShards(peers, config.params.shard_number, config.params.replication_factor, peers.length > 1 ? randomInt(peers.length) : 0);
    return (await this.consensus.propose({ op: 'createCollection', name, uuid: randomUUID(), config, shards, max_collections: this.config.storage.max_collections }, this.ms(timeoutS))) as boolean;
  }

  async updateCollection(name: string, patch: unknown, timeoutS: number | null): Promise<void> {
    if (this.consensus === null) {
      await this.toc.updateMeta(name, async (c) => {
        c.updateConfig(applyCollectionUpdate(c.config, patch).config);
      });
      return;
    }
    const state = this.consensus.clusterState;
    const target = state.resolve(name);
    if (target === undefined) throw new NotFoundError(`Collection \`${name}\` doesn't exist!`);
    applyCollectionUpdate(state.collection(target)!.config, patch); // a bad body fails here, before consensus
    await this.consensus.propose({ op: 'updateCollection', name, patch }, this.ms(timeoutS));
  }

  async deleteCollection(name: string, timeoutS: number | null): Promise<boolean> {
    if (this.consensus === null) return this.toc.delete(name);
    return (await this.consensus.propose({ op: 'deleteCollection', name }, this.ms(timeoutS))) as boolean;
  }

  async changeAliases(actions: AliasAction[], timeoutS: number | null): Promise<void> {
    if (this.consensus === null) return this.toc.updateAliases(actions);
    await this.consensus.propose({ op: 'changeAliases', actions }, this.ms(timeoutS));
  }

  async createPayloadIndex(collection: string, field: string, schema: FieldSchema, timeoutS: number | null): Promise<void> {
    if (this.consensus === null) return this.toc.updateMeta(collection, (c) => c.createPayloadIndex(field, schema));
    if (this.consensus.clusterState.resolve(collection) === undefined) throw new NotFoundError(`Collection \`${collection}\` doesn't exist!`);
    await this.consensus.propose({ op: 'createPayloadIndex', collection, field, schema }, this.ms(timeoutS));
  }

  async dropPayloadIndex(collection: string, field: string, timeoutS: number | null): Promise<void> {
    if (this.consensus === null) {
      return this.toc.updateMeta(collection, async (c) => {
        await c.dropPayloadIndex(field);
      });
    }
    if (this.consensus.clusterState.resolve(collection) === undefined) throw new NotFoundError(`Collection \`${collection}\` doesn't exist!`);
    await this.consensus.propose({ op: 'dropPayloadIndex', collection, field }, this.ms(timeoutS));
  }
}
