/**
 * A collection's performance advisories, the reference's `GET /issues` records: so far
 * "unindexed field used in filters" (UNINDEXED_FIELD), noted when a read's filter uses a
 * payload field that has no index able to serve the condition.
 *
 * Owns: those records (id, description, solution with the request that fixes it,
 * timestamp, related_collection, and Quiver's `count` of the reads that hit it). Must
 * never: change data or refuse a request.
 */

import type { FieldSchema } from '../shard/field-schema';
import type { Filter } from '../shard/filter';
import { unindexedKeys } from './strict-mode';

export interface IssueRecord {
  id: string;
  description: string;
  solution: Record<string, unknown>;
  timestamp: string;
  related_collection: string | null;
  /** Ours: how many reads hit it since it was first noted (or last cleared). */
  count: number;
}

/** Index types an issue proposes (the reference leaves out uuid, an advanced type). */
const PROPOSED = new Set(['keyword', 'integer', 'float', 'geo', 'text', 'bool', 'datetime']);

/**
 * Most issues a collection keeps: every read may name keys never seen before, so the
 * list is bounded (later keys are not noted until the list is cleared).
 */
export const MAX_ISSUES = 1000;

export class CollectionIssues {
  private readonly byId = new Map<string, IssueRecord>();

  constructor(private readonly collection: string) {}

  /** Notes the keys of `filter` that no index serves. */
  observe(filter: Filter, schema: Readonly<Record<string, FieldSchema>>): void {
    for (const { key, types } of unindexedKeys(filter, schema)) {
      const proposed = types.filter((t) => PROPOSED.has(t));
      if (proposed.length === 0) continue;
      const id = `UNINDEXED_FIELD/${this.collection}/${key}`;
      const seen = this.byId.get(id);
      if (seen) {
        seen.count++;
        continue;
      }
      if (this.byId.size >= MAX_ISSUES) continue;
      this.byId.set(id, {
        id,
        description: `Unindexed field '${key}' might be slowing queries down in collection '${this.collection}'`,
        solution: this.solution(key, proposed),
        timestamp: new Date().toISOString(),
        related_collection: this.collection,
        count: 1,
      });
    }
  }

  private solution(key: string, types: string[]): Record<string, unknown> {
    const choices = types.map((t) => ({
      message: `Create an index on field '${key}' of schema ${JSON.stringify(t)} in collection '${this.collection}'. Check the documentation for more details: https://qdrant.tech/documentation/concepts/indexing/#payload-index`,
      action: {
        method: 'PUT',
        uri: `/collections/${encodeURIComponent(this.collection)}/index`,
        headers: { 'content-type': 'application/json' },
        body: { field_name: key, field_schema: t },
      },
    }));
    return choices.length === 1 ? { immediate: choices[0] } : { immediate_choice: choices };
  }

  all(): IssueRecord[] {
    return [...this.byId.values()].map((r) => structuredClone(r));
  }

  clear(): void {
    this.byId.clear();
  }
}
