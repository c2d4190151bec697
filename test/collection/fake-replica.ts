/**
 * An in-memory Replica for the collection's unit tests: points in a map, brute-force
 * Dot scoring, and a log of every call with the options it carried. Every write it
 * takes goes through the replica-operation encoding first, as it would to another peer.
 * `failWith` makes every later call fail with that error.
 */

import { compileFilter, type Filter } from '../../ts/shard/filter';
import { compareKeys, type PointKey } from '../../ts/shard/id-tracker';
import type { Payload, WithPayload } from '../../ts/shard/payload-store';
import { select } from '../../ts/shard/payload-store';
import {
  keyToJson,
  type FacetCounts,
  type FacetShardRequest,
  type OrderedRecord,
  type OrderedScrollRequest,
  type PointId,
  type PointRecord,
  type ReadOptions,
  type Replica,
  type RetrieveRequest,
  type ScoredRecord,
  type ScrollRequest,
  type SearchRequest,
  type UpdateOptions,
  type WithVector,
} from '../../ts/collection/replica';
import { decodeReplicaOperation, encodeReplicaOperation, resolveOperation, type ReplicaOperation } from '../../ts/collection/replica-operation';

interface FakePoint {
  key: PointKey;
  version: number;
  payload: Payload;
  vector: Float32Array | null;
}

export interface Call {
  method: string;
  opts: UpdateOptions | ReadOptions;
}

export class FakeReplica implements Replica {
  readonly points = new Map<string, FakePoint>();
  /** Operations received, after their trip through the encoding. */
  readonly ops: ReplicaOperation[] = [];
  readonly calls: Call[] = [];
  private failure: Error | null = null;
  private seq = 0;

  constructor(
    readonly peer: string,
    readonly isLocal = true,
    /** Operation ids start above this (tells replicas' ids apart). */
    seqBase = 0,
  ) {
    this.seq = seqBase;
  }

  failWith(err: Error | null): this {
    this.failure = err;
    return this;
  }

  private enter(method: string, opts: UpdateOptions | ReadOptions): void {
    this.calls.push({ method, opts });
    if (this.failure) throw this.failure;
  }

  ids(): PointId[] {
    return [...this.points.values()].map((p) => keyToJson(p.key));
  }

  private matches(filter: Filter | null): (p: FakePoint) => boolean {
    if (filter === null) return () => true;
    const pred = compileFilter(filter);
    return (p) => pred(keyToJson(p.key), p.payload, (name) => name === '' && p.vector !== null);
  }

  async update(op: ReplicaOperation, opts: UpdateOptions): Promise<number> {
    this.enter('update', opts);
    const wire = decodeReplicaOperation(encodeReplicaOperation(op));
    this.ops.push(wire);
    const resolved = resolveOperation(wire, (sel) => {
      const test = this.matches(sel.filter);
      const from = sel.ids === null ? [...this.points.values()].map((p) => p.key) : sel.ids.filter((k) => this.points.has(k.key));
      return from.filter((k) => test(this.points.get(k.key)!));
    });
    const seq = ++this.seq;
    switch (resolved.kind) {
      case 'upsert':
        for (const p of resolved.points) this.points.set(p.id.key, { key: p.id, version: seq, payload: p.payload ?? {}, vector: p.vectors.get('') ?? null });
        break;
      case 'delete':
        for (const k of resolved.ids) this.points.delete(k.key);
        break;
      case 'set_payload':
        for (const k of resolved.ids) Object.assign(this.points.get(k.key)!.payload, resolved.payload);
        break;
      case 'overwrite_payload':
        for (const k of resolved.ids) this.points.get(k.key)!.payload = { ...resolved.payload };
        break;
      case 'clear_payload':
        for (const k of resolved.ids) this.points.get(k.key)!.payload = {};
        break;
      case 'delete_payload':
        for (const k of resolved.ids) for (const key of resolved.keys) delete this.points.get(k.key)!.payload[key];
        break;
      case 'update_vectors':
        for (const p of resolved.points) this.points.get(p.id.key)!.vector = p.vectors.get('') ?? null;
        break;
      case 'delete_vectors':
        for (const k of resolved.ids) this.points.get(k.key)!.vector = null;
        break;
    }
    for (const k of 'ids' in resolved ? resolved.ids : resolved.points.map((p) => p.id)) {
      const p = this.points.get(k.key);
      if (p) p.version = seq;
    }
    return seq;
  }

  private shape<T extends PointRecord | ScoredRecord>(out: T, p: FakePoint, withPayload: WithPayload, withVector: WithVector): T {
    if (withPayload) {
      const payload = select(p.payload, withPayload);
      if (payload !== null) out.payload = payload;
    }
    if (withVector !== false && p.vector !== null) out.vector = Array.from(p.vector);
    return out;
  }

  private record(p: FakePoint, withPayload: WithPayload, withVector: WithVector): PointRecord {
    return this.shape({ id: keyToJson(p.key), version: p.version }, p, withPayload, withVector);
  }

  private sorted(): FakePoint[] {
    return [...this.points.values()].sort((a, b) => compareKeys(a.key, b.key));
  }

  async retrieve(req: RetrieveRequest, opts: ReadOptions): Promise<PointRecord[]> {
    this.enter('retrieve', opts);
    const out: PointRecord[] = [];
    for (const k of req.ids) {
      const p = this.points.get(k.key);
      if (p) out.push(this.record(p, req.withPayload, req.withVector));
    }
    return out;
  }

  async search(req: SearchRequest, opts: ReadOptions): Promise<ScoredRecord[]> {
    this.enter('search', opts);
    const excluded = new Set((req.exclude ?? []).map((k) => k.key));
    const test = this.matches(req.filter);
    const scored: Array<{ p: FakePoint; score: number }> = [];
    for (const p of this.points.values()) {
      if (p.vector === null || excluded.has(p.key.key) || !test(p)) continue;
      let dot = 0;
      for (let i = 0; i < p.vector.length; i++) dot += p.vector[i] * req.vector[i];
      const score = Math.fround(dot);
      if (req.scoreThreshold !== null && score < req.scoreThreshold) continue;
      scored.push({ p, score });
    }
    scored.sort((a, b) => b.score - a.score);
    return scored
      .slice(req.offset, req.offset + req.limit)
      .map(({ p, score }) => this.shape({ id: keyToJson(p.key), version: p.version, score }, p, req.withPayload, req.withVector));
  }

  async scroll(req: ScrollRequest, opts: ReadOptions): Promise<{ points: PointRecord[]; next: PointId | null }> {
    this.enter('scroll', opts);
    const test = this.matches(req.filter);
    const from = req.offset;
    const found = this.sorted().filter((p) => (from === null || compareKeys(p.key, from) >= 0) && test(p));
    return {
      points: found.slice(0, req.limit).map((p) => this.record(p, req.withPayload, req.withVector)),
      next: found.length > req.limit ? keyToJson(found[req.limit].key) : null,
    };
  }

  async scrollOrdered(req: OrderedScrollRequest, opts: ReadOptions): Promise<OrderedRecord[]> {
    this.enter('scrollOrdered', opts);
    const test = this.matches(req.filter);
    const { key, direction } = req.orderBy;
    const valued = [...this.points.values()].filter((p) => typeof p.payload[key] === 'number' && test(p));
    valued.sort((a, b) => (direction === 'desc' ? -1 : 1) * ((a.payload[key] as number) - (b.payload[key] as number)));
    return valued.slice(0, req.limit).map((p) => ({ ...this.record(p, req.withPayload, req.withVector), orderValue: p.payload[key] as number }));
  }

  async count(filter: Filter | null, opts: ReadOptions): Promise<number> {
    this.enter('count', opts);
    return [...this.points.values()].filter(this.matches(filter)).length;
  }

  async anyMatch(filter: Filter | null, opts: ReadOptions): Promise<boolean> {
    this.enter('anyMatch', opts);
    return [...this.points.values()].some(this.matches(filter));
  }

  /** Brute force: distinct strings, integers and bools at the top-level key (arrays expanded one level). */
  async facet(req: FacetShardRequest, opts: ReadOptions): Promise<FacetCounts> {
    this.enter('facet', opts);
    const counts = new Map<string | number | boolean, number>();
    for (const p of [...this.points.values()].filter(this.matches(req.filter))) {
      const raw = (p.payload as Record<string, unknown> | null)?.[req.key];
      const vals = new Set((Array.isArray(raw) ? raw : [raw]).filter((v) => typeof v === 'string' || typeof v === 'boolean' || Number.isInteger(v)));
      for (const v of vals) counts.set(v as string | number | boolean, (counts.get(v as string | number | boolean) ?? 0) + 1);
    }
    return [...counts];
  }
}
