/**
 * The points service between peers (`Points` in proto/p2p.proto): the server side that
 * answers calls for this peer's replicas, the clients that make them, and RemoteReplica,
 * the Replica interface over those calls.
 *
 * Owns: the wire form of replica reads and writes (writes in the replica operation
 * encoding, reads and answers as JSON with vectors as f32 bytes), the table between
 * error kinds and gRPC codes for these calls (the kind travels in a trailer, so the
 * caller rethrows the same kind), connection pools per peer (`cluster.p2p.
 * connection_pool_size` connections each), deadlines, and cancelling the calls in
 * flight to a peer that stopped answering health checks. Must never: decide which
 * replica a call goes to (ReplicaSet does) or apply anything itself (the local replica does).
 */

import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';

import { requestFinished, requestStarted } from '../../../bindings';
import { ERROR_PREFIX, QuiverError, ShardUnavailableError, TimeoutError, type ErrorKind } from '../../common/errors';
import { grpcCodeOf } from '../grpc-status';
import type { ShardTarget, TransferMethod } from '../../collection/cluster-link';
import { methodOf, type Collection } from '../../collection/collection';
import type { LocalReplica } from '../../collection/local-replica';
import {
  DEFAULT_READ,
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
  type SearchRule,
  type UpdateOptions,
} from '../../collection/replica';
import { decodeReplicaOperation, encodeReplicaOperation, type ReplicaOperation } from '../../collection/replica-operation';
import type { ReplicaSet } from '../../collection/replica-set';
import type { ClockTag } from '../../shard/clocks';
import type { Filter } from '../../shard/filter';
import { normalizePointId } from '../../shard/id-tracker';
import type { TableOfContent } from '../../storage/toc';
import { grpcTarget, p2pPackage, type P2PTls } from './grpc';
import { H2UnaryPool, type CallFailure, type UnaryMethod } from './h2-unary';

// -- wire -----------------------------------------------------------------------------------

export interface TargetMsg {
  collection: string;
  uuid: string;
  shard: number;
}

export interface UpdateMsg {
  target: TargetMsg;
  operation: Buffer;
  wait: boolean;
  ordering: string;
  tagged: boolean;
  tag_peer: string;
  tag_clock: number;
  tag_tick: string;
  /** A transfer's copy: the transfer's id (empty otherwise). */
  transfer?: string;
}

interface ReadMsg {
  target: TargetMsg;
  kind: ReadKind;
  request: Buffer;
}

export type ReadKind = 'retrieve' | 'search' | 'scroll' | 'scroll_ordered' | 'count' | 'any_match' | 'facet' | 'transfer_ready' | 'clocks' | 'index_backlog';

export interface ClockMsg {
  peer: string;
  clock: number;
  tick: string;
}

export interface ReplayMsg {
  target: TargetMsg;
  operations: Buffer[];
  wait: boolean;
  transfer: string;
  adopt: boolean;
  clocks: ClockMsg[];
}

export interface PullSnapshotMsg {
  target: TargetMsg;
  from: string;
  transfer: string;
}

export function clockMsg(t: ClockTag): ClockMsg {
  return { peer: t.peer.toString(), clock: t.clock, tick: t.tick.toString() };
}

export function clockOf(m: ClockMsg): ClockTag {
  return { peer: BigInt(m.peer), clock: m.clock, tick: BigInt(m.tick) };
}

const KIND_TRAILER = 'quiver-error-kind';


export function targetMsg(t: ShardTarget): TargetMsg {
  return { collection: t.collection, uuid: t.uuid, shard: t.shard };
}

function idsOut(keys: ReadonlyArray<{ kind: 'num' | 'uuid'; value: bigint | string }>): PointId[] {
  return keys.map((k) => keyToJson(k as never));
}

/** Every field of T, each named (a field added to T must be added where this type is used). */
type EachField<T> = { [K in keyof Required<T>]: unknown };

/** A rule of a search (dense or sparse examples) with its examples in another form. */
function ruleOut(r: { rule: SearchRule['rule']; positives: number }, examples: unknown): EachField<SearchRule> {
  return { rule: r.rule, positives: r.positives, examples };
}

function base64OfF32(v: Float32Array): string {
  return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
}

/**
 * A read request as bytes: JSON, with a search's vector as little-endian f32 (base64) and
 * point ids as the API writes them. A search's fields are named one by one (no object
 * rest or spread: those cost 6 of the 9 µs an encode took).
 */
export function encodeRead(kind: ReadKind, req: unknown): Buffer {
  let body: unknown = req;
  if (kind === 'search') {
    // A search made from a query carries the query's own fields too (its kind, with
    // example ids, prefetches, lookup_from): the replica needs none of them, and example
    // ids hold bigints JSON cannot write. Only SearchRequest's fields travel.
    const r = req as SearchRequest;
    const out: EachField<SearchRequest> = {
      using: r.using,
      vector: base64OfF32(r.vector),
      filter: r.filter,
      limit: r.limit,
      offset: r.offset,
      scoreThreshold: r.scoreThreshold,
      hnswEf: r.hnswEf,
      exact: r.exact,
      quantization: r.quantization,
      withPayload: r.withPayload,
      withVector: r.withVector,
      exclude: r.exclude ? idsOut(r.exclude) : undefined,
      sparse: r.sparse ? { indices: Array.from(r.sparse.indices), values: Array.from(r.sparse.values) } : undefined,
      rule: r.rule ? ruleOut(r.rule, base64OfF32(r.rule.examples)) : undefined,
      sparseRule: r.sparseRule ? ruleOut(r.sparseRule, r.sparseRule.examples.map((e) => ({ indices: Array.from(e.indices), values: Array.from(e.values) }))) : undefined,
    };
    body = out;
  } else if (kind === 'retrieve') {
    const r = req as RetrieveRequest;
    body = { ...r, ids: idsOut(r.ids) };
  } else if (kind === 'scroll') {
    const r = req as ScrollRequest;
    body = { ...r, offset: r.offset === null ? null : keyToJson(r.offset) };
  }
  return Buffer.from(JSON.stringify(body ?? null), 'utf8');
}

/** Little-endian f32 values from base64 (a rule's examples). */
function f32FromBase64(text: string): Float32Array {
  const raw = Buffer.from(text, 'base64');
  const out = new Float32Array(raw.length / 4);
  Buffer.from(out.buffer).set(raw);
  return out;
}

export function decodeRead(kind: ReadKind, buf: Buffer): unknown {
  const body = JSON.parse(buf.toString('utf8')) as Record<string, unknown>;
  if (kind === 'search') {
    const sp = body.sparse as { indices: number[]; values: number[] } | undefined;
    const ru = body.rule as (Omit<SearchRule, 'examples'> & { examples: string }) | undefined;
    const sr = body.sparseRule as { rule: SearchRule['rule']; positives: number; examples: Array<{ indices: number[]; values: number[] }> } | undefined;
    const out: EachField<SearchRequest> = {
      using: body.using,
      vector: f32FromBase64(body.vector as string),
      filter: body.filter,
      limit: body.limit,
      offset: body.offset,
      scoreThreshold: body.scoreThreshold,
      hnswEf: body.hnswEf,
      exact: body.exact,
      quantization: body.quantization,
      withPayload: body.withPayload,
      withVector: body.withVector,
      exclude: Array.isArray(body.exclude) ? (body.exclude as PointId[]).map((id) => normalizePointId(id)) : undefined,
      sparse: sp ? { indices: Uint32Array.from(sp.indices), values: Float32Array.from(sp.values) } : undefined,
      rule: ru ? ruleOut(ru, f32FromBase64(ru.examples)) : undefined,
      sparseRule: sr ? ruleOut(sr, sr.examples.map((e) => ({ indices: Uint32Array.from(e.indices), values: Float32Array.from(e.values) }))) : undefined,
    };
    return out;
  }
  if (kind === 'retrieve') return { ...body, ids: (body.ids as PointId[]).map((id) => normalizePointId(id)) };
  if (kind === 'scroll') return { ...body, offset: body.offset === null ? null : normalizePointId(body.offset) };
  return body;
}

// -- server ---------------------------------------------------------------------------------

/** What the points service answers calls with: this peer's collections. */
export interface PointsBackend {
  toc: TableOfContent;
  /** This peer's id. */
  peer: string;
  /** Resolves once local changes from consensus entries applied so far are made. */
  settled(): Promise<void>;
  /** This peer's consensus details (GET /cluster/telemetry of another peer asks them). */
  status(): unknown;
  /**
   * A transfer by snapshot, on its target: fetches `from`'s snapshot of its replica of the
   * shard and replaces this peer's replica with it, if `stillWanted()` holds once it is
   * unpacked; resolves with the archive's size in bytes.
   */
  pullShard(from: string, target: ShardTarget, stillWanted: () => void, signal: AbortSignal): Promise<number>;
}

export function errorStatus(err: unknown): Partial<grpc.StatusObject> {
  const metadata = new grpc.Metadata();
  if (err instanceof QuiverError && (err.kind as string) in ERROR_PREFIX) {
    metadata.set(KIND_TRAILER, err.kind);
    return { code: grpcCodeOf(err), details: err.message, metadata };
  }
  return { code: grpc.status.INTERNAL, details: err instanceof Error ? err.message : String(err) };
}

/** The collection and replica set a call names; waits once for pending local changes when this peer does not have them yet. */
export async function resolveTarget(b: Pick<PointsBackend, 'toc' | 'peer' | 'settled'>, t: TargetMsg): Promise<{ collection: Collection; set: ReplicaSet }> {
  for (let attempt = 0; ; attempt++) {
    const c = b.toc.peek(t.collection);
    if (c !== undefined && c.meta.cluster?.uuid === t.uuid) {
      const set = c.replicaSets().find((r) => r.shardId === t.shard);
      if (set !== undefined) return { collection: c, set };
    }
    if (attempt > 0) throw new ShardUnavailableError(`peer ${b.peer} has no shard ${t.shard} of collection \`${t.collection}\` (uuid ${t.uuid})`);
    await b.settled();
  }
}

function localOf(b: PointsBackend, set: ReplicaSet, t: TargetMsg): LocalReplica {
  const r = set.localReplica;
  if (r === null) throw new ShardUnavailableError(`peer ${b.peer} holds no replica of shard ${t.shard} of collection \`${t.collection}\``);
  return r;
}

function tagOf(m: UpdateMsg): ClockTag | undefined {
  return m.tagged ? { peer: BigInt(m.tag_peer), clock: m.tag_clock, tick: BigInt(m.tag_tick) } : undefined;
}

function updateOptions(m: UpdateMsg): UpdateOptions {
  const ordering = m.ordering === 'medium' || m.ordering === 'strong' ? m.ordering : 'weak';
  return { wait: m.wait, ordering, timeout: null };
}

/** Adds the points service to a p2p gRPC server. */
export function addPointsService(server: grpc.Server, backend: PointsBackend, logger: Logger): void {
  const unary =
    <Req, Res>(fn: (req: Req) => Promise<Res>) =>
    (call: grpc.ServerUnaryCall<Req, Res>, cb: grpc.sendUnaryData<Res>) => {
      fn(call.request).then(
        (res) => cb(null, res),
        (err: unknown) => {
          if (!(err instanceof QuiverError)) logger.warn({ err }, 'p2p points call failed');
          cb(errorStatus(err));
        },
      );
    };
  // Reads are reported to the engine's demand count (bindings/demand.ts) as the API
  // layers report their requests: searches other peers send while several are in flight
  // take the pool instead of running inline on this peer's event loop. The client is
  // the calling host, not the connection: a peer spreads its calls over a pool of
  // connections round robin, so one caller's calls one after another would otherwise
  // look like two clients. Only overlapping reads count, and writes (Update, Forward,
  // Replay) are not reads: a forwarded write coming back while this peer's own request
  // waits must not mark it busy. A read is finished once, when it is answered or when
  // the caller gives up on it (cancel or deadline), whichever comes first.
  const reportedRead = <Req, Res>(fn: (req: Req) => Promise<Res>) => {
    const answer = unary<Req, Res>(fn);
    return (call: grpc.ServerUnaryCall<Req, Res>, cb: grpc.sendUnaryData<Res>) => {
      const peer = call.getPeer();
      const colon = peer.lastIndexOf(':');
      requestStarted(`p2p ${colon > 0 ? peer.slice(0, colon) : peer}`);
      let open = true;
      const finish = () => {
        if (open) {
          open = false;
          requestFinished();
        }
      };
      call.once('cancelled', finish);
      answer(call, (err, res) => {
        finish();
        cb(err, res);
      });
    };
  };
  server.addService(p2pPackage().Points.service, {
    Update: unary<UpdateMsg, object>(async (m) => {
      const { collection, set } = await resolveTarget(backend, m.target);
      let id: number;
      if (m.transfer) {
        // A transfer's copy is applied as this replica's own write (see transfer/outgoing.ts).
        const local = localOf(backend, set, m.target);
        requireTransfer(backend, collection, set, m.target, m.transfer);
        id = await local.update(decodeReplicaOperation(m.operation), updateOptions(m), undefined);
      } else {
        // A replicated write (or one a transfer's source forwards after the copy): refused
        // while the placement applied here has this replica Dead (see ReplicaSet.receive).
        id = await set.receive(decodeReplicaOperation(m.operation), updateOptions(m), tagOf(m));
      }
      return { operation_id: String(id) };
    }),
    Forward: unary<UpdateMsg, object>(async (m) => {
      const { set } = await resolveTarget(backend, m.target);
      const id = await set.lead(decodeReplicaOperation(m.operation), { ...updateOptions(m), ordering: 'weak' });
      return { operation_id: String(id) };
    }),
    Status: unary<object, object>(async () => ({ result: Buffer.from(JSON.stringify(backend.status()), 'utf8') })),
    Replay: unary<ReplayMsg, object>(async (m) => {
      const { collection, set } = await resolveTarget(backend, m.target);
      const local = localOf(backend, set, m.target);
      requireTransfer(backend, collection, set, m.target, m.transfer);
      for (const op of m.operations) await local.update(decodeReplicaOperation(op), { wait: false, ordering: 'weak', timeout: null });
      if (m.adopt) {
        requireTransfer(backend, collection, set, m.target, m.transfer);
        local.shard.adoptClocks(m.clocks.map(clockOf));
      }
      if (m.wait) await local.shard.sync();
      return { operation_id: '0' };
    }),
    PullSnapshot: (call: grpc.ServerUnaryCall<PullSnapshotMsg, object>, cb: grpc.sendUnaryData<object>) => {
      const m = call.request;
      const cancel = new AbortController();
      call.once('cancelled', () => cancel.abort());
      (async () => {
        const { collection, set } = await resolveTarget(backend, m.target);
        localOf(backend, set, m.target);
        const wanted = () => requireTransfer(backend, collection, set, m.target, m.transfer);
        wanted();
        return { bytes: String(await backend.pullShard(m.from, { collection: m.target.collection, uuid: m.target.uuid, shard: m.target.shard }, wanted, cancel.signal)) };
      })().then(
        (res) => cb(null, res),
        (err: unknown) => {
          if (!(err instanceof QuiverError)) logger.warn({ err }, 'p2p snapshot pull failed');
          cb(errorStatus(err));
        },
      );
    },
    Read: reportedRead<ReadMsg, object>(async (m) => {
      const { collection, set } = await resolveTarget(backend, m.target);
      const result = await readLocal(backend, collection, set, m);
      return { result: Buffer.from(JSON.stringify(result ?? null), 'utf8') };
    }),
  });
}

/** The copy of transfer `id` reaches this peer only while the placement applied here has that transfer to it, its replica Partial. */
function requireTransfer(b: PointsBackend, collection: Collection, set: ReplicaSet, t: TargetMsg, id: string): void {
  const running = (collection.meta.cluster?.transfers ?? []).some((x) => x.shard === t.shard && x.to === b.peer && (x.id ?? '') === id);
  if (!running || set.replicas?.[b.peer] !== 'Partial') {
    throw new ShardUnavailableError(`transfer ${id} of shard ${t.shard} of collection \`${t.collection}\` to peer ${b.peer} is not running there (it ended, or another one replaced it)`);
  }
}

async function readLocal(b: PointsBackend, collection: Collection, set: ReplicaSet, m: ReadMsg): Promise<unknown> {
  if (m.kind === 'transfer_ready') {
    // The target of a transfer is ready once it applied the transfer's start (for stream_records: its replica emptied and open).
    const { from, method, id } = JSON.parse(m.request.toString('utf8')) as { from: string; method: TransferMethod; id: string };
    const t = (collection.meta.cluster?.transfers ?? []).find((x) => x.shard === m.target.shard && x.from === from && x.to === b.peer && (x.id ?? '') === id);
    return { ready: t !== undefined && methodOf(t) === method && set.localReplica !== null && set.replicas?.[b.peer] === 'Partial' };
  }
  const r = localOf(b, set, m.target);
  if (m.kind === 'clocks') return r.shard.clocks().map(clockMsg);
  if (m.kind === 'index_backlog') return { backlog: r.shard.indexBacklog() };
  const req = decodeRead(m.kind, m.request) as never;
  switch (m.kind) {
    case 'retrieve':
      return r.retrieve(req, DEFAULT_READ);
    case 'search':
      return r.search(req, DEFAULT_READ);
    case 'scroll':
      return r.scroll(req, DEFAULT_READ);
    case 'scroll_ordered':
      return r.scrollOrdered(req, DEFAULT_READ);
    case 'count':
      return r.count((req as { filter: Filter | null }).filter, DEFAULT_READ);
    case 'any_match':
      return r.anyMatch((req as { filter: Filter | null }).filter, DEFAULT_READ);
    case 'facet':
      return r.facet(req as FacetShardRequest, DEFAULT_READ);
    default:
      throw new QuiverError('bad_request', ERROR_PREFIX.bad_request, `unknown read kind ${JSON.stringify(m.kind)}`);
  }
}

// -- clients --------------------------------------------------------------------------------

type PointsMethod = 'Update' | 'Forward' | 'Read' | 'Status' | 'Replay' | 'PullSnapshot';

/** Figures of p2p point calls, for metrics. */
export interface PointsCallStats {
  calls: number;
  failures: number;
}

/** Clients of the points service, a pool of connections per peer URI (ts/api/p2p/h2-unary.ts). */
export class PointsClients {
  private readonly pools = new Map<string, H2UnaryPool>();
  readonly stats = new Map<string, PointsCallStats>();
  private methods: Record<PointsMethod, UnaryMethod> | null = null;

  constructor(private readonly opts: { poolSize: number; callTimeoutMs: number; tls: P2PTls | null }) {}

  private pool(uri: string): H2UnaryPool {
    let p = this.pools.get(uri);
    if (!p) {
      const { host, port } = grpcTarget(uri);
      // With cluster.p2p.enable_tls every peer speaks TLS and presents its certificate, whatever the URI's scheme.
      p = new H2UnaryPool(host, port, this.opts.tls, this.opts.poolSize);
      this.pools.set(uri, p);
    }
    return p;
  }

  private method(name: PointsMethod): UnaryMethod {
    this.methods ??= (() => {
      const service = p2pPackage().Points.service;
      const of = (m: PointsMethod): UnaryMethod => service[m] as unknown as UnaryMethod;
      return { Update: of('Update'), Forward: of('Forward'), Read: of('Read'), Status: of('Status'), Replay: of('Replay'), PullSnapshot: of('PullSnapshot') };
    })();
    return this.methods[name];
  }

  /** One call to the peer at `uri` (`peer` names it in errors), bounded by `timeoutMs`. */
  call<T>(uri: string, peer: string, method: PointsMethod, req: UpdateMsg | ReadMsg | ReplayMsg | PullSnapshotMsg | object, timeoutMs: number | null, signal?: AbortSignal): Promise<T> {
    return new Promise((resolve, reject) => {
      let pool: H2UnaryPool;
      try {
        pool = this.pool(uri);
      } catch (err) {
        reject(new ShardUnavailableError(`peer ${peer}: ${(err as Error).message}`));
        return;
      }
      let stat = this.stats.get(method);
      if (stat === undefined) {
        stat = { calls: 0, failures: 0 };
        this.stats.set(method, stat);
      }
      stat.calls++;
      const ms = timeoutMs ?? this.opts.callTimeoutMs;
      const s = stat;
      const onAbort = () => call.cancel();
      const call = pool.call(this.method(method), req, ms, (failure, answer) => {
        signal?.removeEventListener('abort', onAbort);
        if (failure === null) {
          resolve(answer as T);
          return;
        }
        s.failures++;
        reject(callError(failure, peer, ms));
      });
      if (signal !== undefined) {
        if (signal.aborted) call.cancel();
        else signal.addEventListener('abort', onAbort, { once: true });
      }
    });
  }

  /** Cancels every call in flight to `uri` (its peer stopped answering): they fail as unavailable at once. */
  cancelAll(uri: string): number {
    return this.pools.get(uri)?.cancelAll() ?? 0;
  }

  forget(uri: string): void {
    this.pools.get(uri)?.close();
    this.pools.delete(uri);
  }

  close(): void {
    for (const uri of [...this.pools.keys()]) this.forget(uri);
  }
}

/** The error a failed call is rethrown as: the remote's own kind when it sent one, else the peer's failure. */
export function callError(failure: CallFailure, peer: string, ms: number): Error {
  const kind = failure.trailers?.get(KIND_TRAILER);
  if (typeof kind === 'string' && kind in ERROR_PREFIX) return new QuiverError(kind as ErrorKind, '', failure.details);
  if (failure.code === grpc.status.DEADLINE_EXCEEDED) return new TimeoutError(`peer ${peer} did not answer within ${ms / 1000} s`);
  if (failure.code === grpc.status.CANCELLED) return new ShardUnavailableError(`peer ${peer} stopped answering health checks: call cancelled`);
  return new ShardUnavailableError(`peer ${peer} cannot be reached: ${failure.details}`);
}

/** A grpc-js client's error as a CallFailure (the shard snapshot stream runs on grpc-js). */
export function failureOfServiceError(err: grpc.ServiceError): CallFailure {
  const kind = err.metadata?.get(KIND_TRAILER)?.[0];
  // grpc-js ends some details with an empty "Resolution note:".
  return { code: err.code, details: (err.details || err.message).replace(/\s*Resolution note:\s*$/, ''), trailers: typeof kind === 'string' ? new Map([[KIND_TRAILER, kind]]) : null };
}

// -- the remote replica -----------------------------------------------------------------------

/** The replica of a shard that another peer holds, over the points service. */
export class RemoteReplica implements Replica {
  readonly isLocal = false;

  constructor(
    readonly peer: string,
    protected readonly target: ShardTarget,
    protected readonly clients: PointsClients,
    /** The peer's URI now (peers' addresses come from consensus). */
    private readonly uriOf: (peer: string) => string,
  ) {}

  protected uri(): string {
    return this.uriOf(this.peer);
  }

  private timeoutMs(opts: { timeout: number | null }): number | null {
    return opts.timeout === null ? null : Math.max(1, opts.timeout * 1000);
  }

  async update(op: ReplicaOperation, opts: UpdateOptions, tag?: ClockTag): Promise<number> {
    const res = await this.clients.call<{ operation_id: string }>(this.uri(), this.peer, 'Update', updateMsg(this.target, op, opts, tag), this.timeoutMs(opts));
    return Number(res.operation_id);
  }

  protected async read<T>(kind: ReadKind, req: unknown, opts: ReadOptions): Promise<T> {
    const msg: ReadMsg = { target: targetMsg(this.target), kind, request: encodeRead(kind, req) };
    const res = await this.clients.call<{ result: Buffer }>(this.uri(), this.peer, 'Read', msg, this.timeoutMs(opts));
    return JSON.parse(res.result.toString('utf8')) as T;
  }

  retrieve(req: RetrieveRequest, opts: ReadOptions): Promise<PointRecord[]> {
    return this.read('retrieve', req, opts);
  }

  search(req: SearchRequest, opts: ReadOptions): Promise<ScoredRecord[]> {
    return this.read('search', req, opts);
  }

  scroll(req: ScrollRequest, opts: ReadOptions): Promise<{ points: PointRecord[]; next: PointId | null }> {
    return this.read('scroll', req, opts);
  }

  scrollOrdered(req: OrderedScrollRequest, opts: ReadOptions): Promise<OrderedRecord[]> {
    return this.read('scroll_ordered', req, opts);
  }

  count(filter: Filter | null, opts: ReadOptions): Promise<number> {
    return this.read('count', { filter }, opts);
  }

  anyMatch(filter: Filter | null, opts: ReadOptions): Promise<boolean> {
    return this.read('any_match', { filter }, opts);
  }

  facet(req: FacetShardRequest, opts: ReadOptions): Promise<FacetCounts> {
    return this.read('facet', req, opts);
  }

}

export function updateMsg(target: ShardTarget, op: ReplicaOperation, opts: UpdateOptions, tag?: ClockTag | null, transfer = ''): UpdateMsg {
  return {
    transfer,
    target: targetMsg(target),
    operation: encodeReplicaOperation(op),
    wait: opts.wait,
    ordering: opts.ordering,
    tagged: tag !== undefined && tag !== null,
    tag_peer: tag ? tag.peer.toString() : '',
    tag_clock: tag ? tag.clock : 0,
    tag_tick: tag ? tag.tick.toString() : '',
  };
}

/** Forwards an ordered write to the shard's leader peer. */
export async function forwardUpdate(clients: PointsClients, uri: string, leader: string, target: ShardTarget, op: ReplicaOperation, opts: UpdateOptions): Promise<number> {
  const res = await clients.call<{ operation_id: string }>(uri, leader, 'Forward', updateMsg(target, op, opts), opts.timeout === null ? null : opts.timeout * 1000);
  return Number(res.operation_id);
}
