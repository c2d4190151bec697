/**
 * The replica of a shard that this peer stores: the Replica interface over a LocalShard.
 *
 * Owns: turning the shard's reads (stored points, offsets, search hits) into shaped
 * records, and applying ReplicaOperations through the shard's update lock with their
 * selectors resolved there. Must never: route between shards or replicas, or validate
 * requests against the collection's configuration (the collection did, before calling).
 */

import { BadRequestError } from '../common/errors';
import { splitRows } from '../common/multivector';
import { MAX_ENGINE_COUNT } from '../shard/limits';
import type { Filter } from '../shard/filter';
import { compareKeys } from '../shard/id-tracker';
import type { LocalShard, StoredPoint } from '../shard/local-shard';
import { FacetError, OrderByError } from '../shard/payload-index';
import { select, type Payload, type WithPayload } from '../shard/payload-store';
import { higherIsBetter } from '../shard/vector-store';
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
  type SparseOut,
  type ScrollRequest,
  type SearchRequest,
  type UpdateOptions,
  type VectorOut,
  type WithVector,
} from './replica';
import { fromShardOperation, resolveOperation, type ReplicaOperation } from './replica-operation';
import type { ClockTag } from '../shard/clocks';
import type { ShardOperation } from '../shard/operations';

const NO_NAMES: readonly string[] = [];

/** Where the source of a transfer sends the writes it applies. */
export interface ForwardSink {
  /**
   * `op` over the ids it resolved to here, with the tag it was applied with. A failure to
   * reach the target is the sink's to handle; it rejects only with WriteUnconfirmedError
   * (the target missed the write and could not be taken out of service), which fails this
   * replica's write though it holds it (see ReplicaSet.replicate).
   */
  forward(op: ReplicaOperation, opts: UpdateOptions, tag: ClockTag | null): Promise<void>;
}

export class LocalReplica implements Replica {
  readonly isLocal = true;
  /** Every vector name, in the collection's order (what `with_vector: true` returns); named vectors come and go. */
  private get allNames(): readonly string[] {
    return [...this.shard.vectors.keys(), ...this.shard.sparse.keys()];
  }
  /** Whether the collection has the unnamed vector only: vectors are then bare arrays. */
  private get singleUnnamed(): boolean {
    return this.shard.vectors.size === 1 && this.shard.vectors.has('') && this.shard.sparse.size === 0;
  }

  /** Set while this replica is the source of a transfer. */
  private sink: ForwardSink | null = null;
  /** Writes (and transfer batches) in order while forwarding. */
  private forwarding: Promise<unknown> = Promise.resolve();
  /** Writes applied outside that order (no sink was set when they began), and who waits for them to end. */
  private unchained = 0;
  private unchainedDone: Array<() => void> = [];

  constructor(
    readonly peer: string,
    readonly shard: LocalShard,
  ) {}

  update(op: ReplicaOperation, opts: UpdateOptions, tag?: ClockTag): Promise<number> {
    if (this.sink === null) {
      this.unchained++;
      return this.apply(op, opts, tag, null).finally(() => {
        if (--this.unchained === 0) for (const f of this.unchainedDone.splice(0)) f();
      });
    }
    // The source of a transfer: applies and forwards one write at a time, so the target
    // gets the writes and the batches of points in the order this replica applied them.
    return this.exclusive(async () => {
      let resolved: ShardOperation | null = null;
      const id = await this.apply(op, opts, tag, (r) => (resolved = r));
      if (resolved !== null && this.sink !== null) await this.sink.forward(fromShardOperation(resolved), opts, tag ?? null);
      return id;
    });
  }

  private async apply(op: ReplicaOperation, opts: UpdateOptions, tag: ClockTag | undefined, seen: ((op: ShardOperation) => void) | null): Promise<number> {
    const resolve = (s: LocalShard): ShardOperation => {
      const r = resolveOperation(op, (sel) => s.resolve(sel.ids, sel.filter));
      seen?.(r);
      return r;
    };
    if (tag === undefined) return Number(await this.shard.update(resolve, opts.wait));
    const r = await this.shard.applyTagged(resolve, tag, opts.wait);
    return r.applied ? Number(r.seq) : 0;
  }

  // -- the source side of a transfer ------------------------------------------------------

  /**
   * Sends every write this replica applies to `sink` too, in order (it replaces any sink
   * set before). Resolves once the writes that began before the sink was set are done,
   * with the shard's last operation number then: every operation after it is forwarded
   * (operations at or before it may be forwarded too).
   */
  async forwardTo(sink: ForwardSink): Promise<bigint> {
    await this.exclusive(async () => {
      this.sink = sink;
    });
    if (this.unchained > 0) await new Promise<void>((resolve) => this.unchainedDone.push(resolve));
    return this.shard.lastSeq;
  }

  /** Stops forwarding to `sink` (nothing when another sink replaced it); resolves once no write is being forwarded to it. */
  async stopForwarding(sink: ForwardSink): Promise<void> {
    await this.exclusive(async () => {
      if (this.sink === sink) this.sink = null;
    });
  }

  /** Runs `fn` with no write applied or forwarded meanwhile (a transfer reads and sends a batch of points this way). */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.forwarding.then(fn);
    this.forwarding = run.catch(() => undefined);
    return run;
  }

  // -- reads ------------------------------------------------------------------------------

  private names(withVector: WithVector): readonly string[] {
    return withVector === true ? this.allNames : withVector === false ? NO_NAMES : withVector;
  }

  /** Adds the asked-for payload of `p` to `out`. */
  private addPayload<T extends PointRecord | ScoredRecord>(out: T, p: StoredPoint, withPayload: WithPayload): T {
    if (withPayload) {
      const payload = select((this.shard.payloadOf(p.offset) ?? {}) as Payload, withPayload);
      if (payload !== null) out.payload = payload;
    }
    return out;
  }

  /** Adds the asked-for payload and vectors of `p` to `out`. */
  private async fill<T extends PointRecord | ScoredRecord>(out: T, p: StoredPoint, withPayload: WithPayload, names: readonly string[]): Promise<T> {
    if (withPayload && this.shard.payloadsOnDisk) {
      // On-disk payloads (on_disk_payload) are read off the event loop.
      const payload = select(((await this.shard.payloadOfAsync(p.offset)) ?? {}) as Payload, withPayload);
      if (payload !== null) out.payload = payload;
    } else this.addPayload(out, p, withPayload);
    if (names.length > 0) {
      const vs = await this.shard.vectorsOf(p.offset, names as string[]);
      // A multivector is shown as its rows.
      const shape = (n: string, v: Float32Array): VectorOut => {
        const spec = this.shard.vectors.get(n)?.spec;
        return spec?.multivector ? splitRows(v, spec.dim) : Array.from(v);
      };
      if (this.singleUnnamed) {
        if (vs.has('')) out.vector = shape('', vs.get('')!);
      } else {
        const o: Record<string, VectorOut | SparseOut> = {};
        for (const [n, v] of vs) o[n] = shape(n, v);
        if (this.shard.sparse.size > 0) {
          const ss = await this.shard.sparseOf(p.offset, names.filter((n) => this.shard.sparse.has(n)));
          for (const [n, v] of ss) o[n] = { indices: Array.from(v.indices), values: Array.from(v.values) };
        }
        out.vector = o;
      }
    }
    return out;
  }

  private record(p: StoredPoint, withPayload: WithPayload, names: readonly string[]): Promise<PointRecord> {
    return this.fill({ id: keyToJson(p.key), version: Number(p.version) }, p, withPayload, names);
  }

  async retrieve(req: RetrieveRequest, _opts: ReadOptions): Promise<PointRecord[]> {
    const names = this.names(req.withVector);
    const out: PointRecord[] = [];
    for (const id of req.ids) {
      const p = this.shard.entry(id);
      if (p) out.push(await this.record(p, req.withPayload, names));
    }
    return out;
  }

  async search(req: SearchRequest, _opts: ReadOptions): Promise<ScoredRecord[]> {
    const shard = this.shard;
    const excluded = req.exclude !== undefined && req.exclude.length > 0 ? new Set(req.exclude.map((k) => k.key)) : null;
    const want = req.limit + req.offset + (excluded === null ? 0 : excluded.size);
    if (want === 0) return [];
    const hits = req.sparseRule !== undefined ? await shard.searchSparseRule(req.using, req.sparseRule.rule, req.sparseRule.positives, req.sparseRule.examples, Math.min(want, MAX_ENGINE_COUNT), req.filter) : req.sparse !== undefined ? await shard.searchSparse(req.using, req.sparse, Math.min(want, MAX_ENGINE_COUNT), req.filter) : await shard.search(
      req.using,
      {
        vector: req.vector,
        // limit and offset are each at most MAX_ENGINE_COUNT (the API checks); their sum can
        // pass it, but no index holds more points than that, so the clamp changes no answer.
        k: Math.min(want, MAX_ENGINE_COUNT),
        ef: req.hnswEf,
        exact: req.exact,
        oversampling: req.quantization?.oversampling,
        rescore: req.quantization?.rescore,
        ignoreQuantization: req.quantization?.ignore,
        rule: req.rule,
      },
      req.filter,
    );
    const names = this.names(req.withVector);
    const t = req.scoreThreshold;
    const store = req.sparse !== undefined || req.sparseRule !== undefined ? undefined : shard.vectors.get(req.using);
    const higher = store === undefined || req.rule !== undefined || higherIsBetter(store.spec.distance);
    const end = req.offset + req.limit;
    const out: ScoredRecord[] = [];
    const plain = names.length === 0 && !req.withPayload;
    const nums = { id: 0, version: 0 };
    // `rank` counts the hits that pass the threshold and the exclusions: the page is
    // ranks offset .. end. A page hit deleted while the search ran is left out.
    let rank = 0;
    for (let i = 0; i < hits.length && rank < end; i++) {
      const h = hits[i];
      if (t !== null && (higher ? h.score < t : h.score > t)) continue;
      if (excluded !== null) {
        const e = shard.entryAt(h.label);
        if (!e || excluded.has(e.key.key)) continue;
      }
      if (rank++ < req.offset) continue;
      // Neither payload nor vectors asked for, and an integer id (nearly always): the
      // record from the id tracker's numbers, without a StoredPoint, PointKey or bigints.
      if (plain && shard.numbersAt(h.label, nums)) {
        out.push({ id: nums.id, version: nums.version, score: h.score });
        continue;
      }
      const p = shard.entryAt(h.label);
      if (!p) continue;
      const rec: ScoredRecord = { id: keyToJson(p.key), version: Number(p.version), score: h.score };
      out.push(names.length > 0 || (req.withPayload && this.shard.payloadsOnDisk) ? await this.fill(rec, p, req.withPayload, names) : this.addPayload(rec, p, req.withPayload));
    }
    return out;
  }

  async scroll(req: ScrollRequest, _opts: ReadOptions): Promise<{ points: PointRecord[]; next: PointId | null }> {
    const names = this.names(req.withVector);
    const found = this.shard.scroll(req.offset, req.limit, req.filter, compareKeys);
    const page = found.length > req.limit ? found.slice(0, req.limit) : found;
    const points = await Promise.all(page.map((p) => this.record(p, req.withPayload, names)));
    return { points, next: found.length > req.limit ? keyToJson(found[req.limit].key) : null };
  }

  async scrollOrdered(req: OrderedScrollRequest, _opts: ReadOptions): Promise<OrderedRecord[]> {
    const names = this.names(req.withVector);
    let found: Array<StoredPoint & { value: number }>;
    try {
      found = this.shard.ordered(req.orderBy.key, { direction: req.orderBy.direction, startFrom: req.orderBy.start_from }, req.filter, req.limit);
    } catch (err) {
      if (err instanceof OrderByError) throw new BadRequestError(err.message);
      throw err;
    }
    return Promise.all(
      found.map(async (p) => {
        const rec = (await this.record(p, req.withPayload, names)) as OrderedRecord;
        rec.orderValue = p.value;
        return rec;
      }),
    );
  }

  async count(filter: Filter | null, _opts: ReadOptions): Promise<number> {
    return this.shard.count(filter);
  }

  async anyMatch(filter: Filter | null, _opts: ReadOptions): Promise<boolean> {
    return this.shard.anyMatch(filter);
  }

  async facet(req: FacetShardRequest, _opts: ReadOptions): Promise<FacetCounts> {
    try {
      return [...this.shard.facet(req.key, req.filter)];
    } catch (err) {
      if (err instanceof FacetError) throw new BadRequestError(err.message);
      throw err;
    }
  }
}
