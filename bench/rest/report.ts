/**
 * Result types of the REST benchmark and the Markdown report
 * (bench/results/rest-<tag>.md).
 */
import type { ProfileSummary } from './profile';

export interface CollectionState {
  status: string;
  pointsCount: number;
  indexedVectorsCount: number;
  segmentsCount: number;
}

export interface UpsertRow {
  /** Through REST (`PUT /collections/{c}/points?wait=true`, JSON) or the gRPC API (`Points/Upsert`, wait=true); absent in results from before gRPC: REST. */
  transport?: 'REST' | 'gRPC';
  /** gRPC: the client library (bench/rest/grpc.ts). */
  grpcLib?: 'grpc-js' | 'h2';
  /** gRPC with several clients: one channel each (`per-worker`) or one shared. */
  channels?: 'shared' | 'per-worker';
  label: string;
  collection: string;
  batch: number;
  clients: number;
  points: number;
  requests: number;
  bodyMiB: number;
  bytesPerPoint: number;
  seconds: number;
  pointsPerSec: number;
  /** Per request. */
  p50Ms: number;
  p99Ms: number;
  clientCpuSec: number;
  serverMainCpuSec: number | null;
  serverOtherCpuSec: number | null;
  afterUpsert: CollectionState;
  /** Time from the last acknowledged upsert until the collection reported green. */
  green: { seconds: number; state: CollectionState; serverMainCpuSec: number | null; serverOtherCpuSec: number | null } | null;
  deleteSeconds: number | null;
}

export interface QueryRow {
  /** baseline: GET /readyz through the same server stack (ef and recall do not apply); wrk: REST query driven by wrk (bench/rest/wrk.ts; recall not read); grpc: Points/Query through the gRPC API (bench/rest/grpc.ts); grpc-baseline: Qdrant/HealthCheck, the floor of a gRPC call. */
  via: 'baseline' | 'rest' | 'wrk' | 'engine' | 'grpc' | 'grpc-baseline' | 'h2load-rest' | 'h2load-grpc';
  /** gRPC rows: the client (bench/rest/grpc.ts): @grpc/grpc-js, or node:http2 directly. */
  grpcLib?: 'grpc-js' | 'h2';
  /** gRPC rows at concurrency above 1: one channel per call in flight, or one shared channel. */
  channels?: 'shared' | 'per-worker';
  /** REST: requests in flight; engine: outstanding async search calls. */
  concurrency: number;
  ef: number;
  qps: number;
  p50Us: number;
  p99Us: number;
  recall: number | null;
  clientCpuUsPerQuery: number | null;
  serverMainCpuUsPerQuery: number | null;
  serverOtherCpuUsPerQuery: number | null;
  /** QPS of every timed pass (the best one is reported). */
  passes: number[];
}

export interface EngineBuild {
  seconds: number;
  threads: number;
  cpuPerWall: number;
  backend: string;
}

export interface RestResults {
  benchmark: 'rest';
  tag: string;
  startedAt: string;
  finishedAt: string;
  quick: boolean;
  machine: {
    cpuModel: string;
    cores: number;
    cpuFlags: string;
    memoryGiB: number;
    kernel: string;
    node: string;
    loadAverageAtStart: number[];
    coresAvailableAtStart: number;
    loadAverageAtEnd: number[];
    coresAvailableAtEnd: number;
  };
  params: {
    n: number;
    dim: number;
    queries: number;
    k: number;
    m: number;
    efConstruct: number;
    efs: number[];
    concurrency: number[];
    engineConcurrency: number[];
    reps: number;
    floatFormat: string;
    clientKind: string;
    indexingThresholdKb: number | null;
    engineThreads: number;
    client: string;
    /** Seconds per wrk pass, or null when wrk did not run (wrkSkip says why). */
    wrkSeconds: number | null;
    wrkSkip: string | null;
    /** Seconds per timed engine pass (whole cycles over the queries; 0: one cycle); absent in results from before 2026-11-28, whose engine passes were one cycle. */
    enginePassSeconds?: number | null;
    /** The gRPC rows' settings (null or absent: not measured): channel modes, and the mean request size of a query (REST JSON body, gRPC message) at the first ef. */
    grpc?: { clients: string[]; queryRequestBytes: { rest: number; grpc: number } | null } | null;
    /** Seconds per h2load pass, or null when h2load did not run (h2loadSkip says why); absent in older results. */
    h2loadSeconds?: number | null;
    h2loadSkip?: string | null;
  };
  dataset: { key: string; name: string; description: string; distance: string; groundTruthCached: boolean };
  server: {
    command: string;
    /** Engine backend the server ran on (absent in results from before `--backend`: native). */
    backend?: 'native' | 'wasm';
    env: string;
    /** Server RSS right after it answered /readyz (absent in older results). */
    rssAtStartMiB?: number | null;
    /** Server RSS once the queried collection is green (all upserts done, indexed). */
    rssAfterUpsertsMiB: number | null;
    /** VmHWM at that moment and at the end (absent in older results). */
    rssPeakAfterUpsertsMiB?: number | null;
    rssPeakMiB?: number | null;
    rssAtEndMiB: number | null;
    shutdownSeconds: number | null;
    exitCode: number | null;
    logTail: string[];
  };
  upserts: UpsertRow[];
  engineBuild: EngineBuild | null;
  engineSkip: string | null;
  queries: QueryRow[];
  /** The engine rows again from one cycle over the queries per pass (as before passes matched wrk's), when the passes were longer: shown, not compared. */
  engineOnePass?: QueryRow[];
  profile: ProfileSummary | null;
}

/** Target (a): points/s through REST, 128-d, batches of 1000, wait=true. */
export const UPSERT_TARGET = 20_000;
/** Target (b): REST queries/s at concurrency 8 over the engine's in-process 2-thread queries/s. */
export const QUERY_RATIO_TARGET = 0.6;

const int = (x: number | null | undefined) => (x === null || x === undefined || !Number.isFinite(x) ? '–' : Math.round(x).toLocaleString('en-US'));
const num = (x: number | null | undefined, d = 2) => (x === null || x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(d));
const clientName = (c: 'rest' | 'wrk') => (c === 'wrk' ? 'wrk' : 'JavaScript client');
const pass = (ok: boolean) => (ok ? '**met**' : '**not met**');

export interface Ratio {
  /** Who drove the REST requests: the JavaScript client of run.ts, or wrk. */
  client: 'rest' | 'wrk';
  ef: number;
  restConcurrency: number;
  engineConcurrency: number;
  restQps: number;
  engineQps: number;
  ratio: number;
}

/**
 * The engine concurrency the targets were written against: the smallest above 1 (2 by
 * default, one outstanding search per core), or the highest when none is above 1.
 */
export function anchorConcurrency(engineConcurrency: readonly number[]): number {
  const above = engineConcurrency.filter((c) => c > 1);
  return above.length > 0 ? Math.min(...above) : Math.max(...engineConcurrency);
}

export function ratios(r: RestResults): Ratio[] {
  const out: Ratio[] = [];
  const find = (via: 'rest' | 'wrk' | 'engine', c: number, ef: number) => r.queries.find((q) => q.via === via && q.concurrency === c && q.ef === ef);
  const engines = [...new Set(r.params.engineConcurrency)].sort((a, b) => a - b);
  const restMax = Math.max(...r.params.concurrency);
  const engMax = Math.max(...engines);
  const pairs: Array<[number, number]> = [];
  if (r.params.concurrency.includes(1) && engines.includes(1)) pairs.push([1, 1]);
  if (restMax > 1) {
    // REST at its highest concurrency against each engine concurrency above 1: two
    // outstanding calls (one per core; the pairing the targets were written against)
    // leave the pool idle through part of each hop, so the engine at the REST
    // concurrency is its saturated figure. Both are reported.
    for (const ec of engines) if (ec > 1 || engMax === 1) pairs.push([restMax, ec]);
  } else if (!engines.includes(1)) {
    pairs.push([1, engMax]);
  }
  for (const ef of r.params.efs) {
    for (const client of ['rest', 'wrk'] as const) {
      for (const [rc, ec] of pairs) {
        const a = find(client, rc, ef);
        const b = find('engine', ec, ef);
        if (a && b) out.push({ client, ef, restConcurrency: rc, engineConcurrency: ec, restQps: a.qps, engineQps: b.qps, ratio: a.qps / b.qps });
      }
    }
  }
  return out;
}

export interface GrpcRatio {
  /** Who drove both: the JavaScript clients (grpc-js or node:http2 for gRPC, the raw HTTP/1.1 client for REST), or h2load for both. */
  driver: 'javascript' | 'h2load';
  ef: number;
  concurrency: number;
  lib: 'grpc-js' | 'h2' | undefined;
  channels: 'shared' | 'per-worker' | undefined;
  grpcQps: number;
  restQps: number;
  engineQps: number | null;
  engineConcurrency: number | null;
}

/** gRPC against REST (JavaScript client) at the same ef and calls in flight, and against the engine as the REST ratios pair them. */
export function grpcRatios(r: RestResults): GrpcRatio[] {
  const out: GrpcRatio[] = [];
  const restMax = Math.max(...r.params.concurrency);
  // Against the engine the REST targets are written against (2 outstanding). Since the
  // engine's passes last as long as wrk's (params.enginePassSeconds), they are longer
  // than the gRPC client's one-cycle passes; earlier reports compared one-cycle passes.
  const anchor = anchorConcurrency(r.params.engineConcurrency);
  for (const g of r.queries.filter((q) => q.via === 'grpc' || q.via === 'h2load-grpc')) {
    const restVia = g.via === 'grpc' ? 'rest' : 'h2load-rest';
    const rest = r.queries.find((q) => q.via === restVia && q.concurrency === g.concurrency && q.ef === g.ef);
    if (!rest) continue;
    const ec = g.concurrency === 1 ? 1 : g.concurrency === restMax ? anchor : null;
    const eng = ec === null ? undefined : r.queries.find((q) => q.via === 'engine' && q.concurrency === ec && q.ef === g.ef);
    out.push({ driver: g.via === 'grpc' ? 'javascript' : 'h2load', ef: g.ef, concurrency: g.concurrency, lib: g.grpcLib, channels: g.channels, grpcQps: g.qps, restQps: rest.qps, engineQps: eng ? eng.qps : null, engineConcurrency: eng ? ec : null });
  }
  return out;
}

const channelsText = (c: 'shared' | 'per-worker' | undefined, n: number) => (c === undefined ? '' : c === 'shared' ? ', 1 shared channel' : `, ${n} channels`);
const libText = (lib: 'grpc-js' | 'h2' | undefined) => (lib === 'h2' ? 'node:http2' : lib ?? 'grpc-js');

function viaText(q: QueryRow): string {
  switch (q.via) {
    case 'baseline':
      return 'REST `GET /readyz` (floor)';
    case 'grpc-baseline':
      return `gRPC \`Qdrant/HealthCheck\` (floor; ${libText(q.grpcLib)}${channelsText(q.channels, q.concurrency)})`;
    case 'rest':
      return 'REST query';
    case 'grpc':
      return `gRPC \`Points/Query\` (${libText(q.grpcLib)}${channelsText(q.channels, q.concurrency)})`;
    case 'wrk':
      return 'REST query, wrk';
    case 'h2load-rest':
      return 'REST query, h2load (HTTP/1.1, one query)';
    case 'h2load-grpc':
      return `gRPC \`Points/Query\`, h2load (one query${channelsText(q.channels, q.concurrency)})`;
    default:
      return 'engine';
  }
}

export function markdown(r: RestResults): string {
  const L: string[] = [];
  const p = r.params;
  L.push(`# REST benchmark ${r.tag}`);
  L.push('');
  L.push(
    `${p.n.toLocaleString('en-US')} points × ${p.dim}-d (${r.dataset.name}, ${r.dataset.distance}), ${p.queries} queries, k=${p.k}, ` +
      `m=${p.m}, ef_construct=${p.efConstruct}. Server: \`${r.server.command}\` on 127.0.0.1 with a temporary storage directory, log level WARN. ` +
      `Client: ${p.client}; vectors written as ${p.floatFormat === 'full' ? 'JSON.stringify of the float32 values (up to 17 significant digits, as a JS or numpy client sends them)' : 'the shortest decimals that round-trip to float32'}.`,
  );
  L.push('');
  const m = r.machine;
  L.push(
    `Machine: ${m.cores} cores (${m.cpuModel}; ${m.cpuFlags}), ${m.memoryGiB} GiB, Linux ${m.kernel}, Node ${m.node}. ` +
      `Load average ${m.loadAverageAtStart.join(' ')} at start, ${m.loadAverageAtEnd.join(' ')} at end; cores this process could get ≈ ${m.coresAvailableAtStart} at start, ${m.coresAvailableAtEnd} at end. ` +
      `The client, the server and the in-process engine share these cores, so every figure is noisy when the machine is busy.`,
  );
  L.push('');

  // -- targets
  L.push('## Targets');
  L.push('');
  const viaRest = r.upserts.filter((u) => (u.transport ?? 'REST') === 'REST');
  const main = viaRest.find((u) => u.batch === 1000 && u.clients === 1);
  const multi = viaRest.find((u) => u.batch === 1000 && u.clients > 1);
  const viaGrpc = r.upserts.filter((u) => u.transport === 'gRPC');
  if (main) {
    L.push(
      `- (a) upsert ≥ ${UPSERT_TARGET.toLocaleString('en-US')} points/s (batches of 1000, wait=true): 1 client ${int(main.pointsPerSec)} points/s ${pass(main.pointsPerSec >= UPSERT_TARGET)}` +
        (multi ? `; ${multi.clients} clients ${int(multi.pointsPerSec)} points/s ${pass(multi.pointsPerSec >= UPSERT_TARGET)}` : ''),
    );
  }
  for (const g of viaGrpc.filter((u) => u.batch === 1000)) {
    const twin = viaRest.find((u) => u.batch === g.batch && u.clients === g.clients);
    L.push(
      `- (a, gRPC) the same through \`Points/Upsert\`, ${g.label}: ${int(g.pointsPerSec)} points/s ${pass(g.pointsPerSec >= UPSERT_TARGET)}` +
        (twin ? ` (${(g.pointsPerSec / twin.pointsPerSec).toFixed(2)}× REST's ${int(twin.pointsPerSec)})` : ''),
    );
  }
  const rs = ratios(r);
  const top = rs.filter((x) => x.restConcurrency === Math.max(...p.concurrency));
  const anchor = anchorConcurrency(p.engineConcurrency);
  for (const x of top) {
    L.push(
      x.engineConcurrency === anchor || x.restConcurrency === 1
        ? `- (b) REST queries/s at concurrency ${x.restConcurrency} (${clientName(x.client)}) ≥ ${QUERY_RATIO_TARGET * 100}% of the in-process engine with ${x.engineConcurrency} outstanding searches, ef=${x.ef}: ` +
            `${int(x.restQps)} / ${int(x.engineQps)} = ${(x.ratio * 100).toFixed(0)}% ${pass(x.ratio >= QUERY_RATIO_TARGET)}`
        : `- (information, not a target) the same against the engine with ${x.engineConcurrency} outstanding searches (its saturated figure), ${clientName(x.client)}, ef=${x.ef}: ` +
            `${int(x.restQps)} / ${int(x.engineQps)} = ${(x.ratio * 100).toFixed(0)}%`,
    );
  }
  if (r.engineSkip) L.push(`- (b) not measured: in-process engine skipped (${r.engineSkip})`);
  const gr = grpcRatios(r);
  for (const x of gr.filter((y) => y.concurrency === Math.max(...p.concurrency))) {
    L.push(
      `- (issue 17) gRPC queries/s at concurrency ${x.concurrency} (${x.driver === 'h2load' ? 'h2load' : libText(x.lib)}${channelsText(x.channels, x.concurrency)}) ≥ REST's (${x.driver === 'h2load' ? 'h2load, HTTP/1.1; one query' : 'JavaScript client'}), same data, ef=${x.ef}: ` +
        `${int(x.grpcQps)} / ${int(x.restQps)} = ${(x.grpcQps / x.restQps).toFixed(2)}× ${pass(x.grpcQps >= x.restQps)}`,
    );
  }
  L.push('');

  // -- upserts
  L.push('## Upsert (wait=true)');
  L.push('');
  L.push('Each run upserts every point into a fresh collection (Cosine, m=16, ef_construct=100, server defaults otherwise); the background optimizer starts moving points into the HNSW index during the run whenever the appendable segment passes the indexing threshold, so its work is part of what the writes compete with.');
  L.push('');
  if (r.upserts.some((u) => u.transport === 'gRPC')) {
    L.push('');
    L.push(
      'gRPC rows: `Points/Upsert` with `wait: true` and the same points, batches and clients (dense vectors as float32 in the message), each run right after its REST twin, into a fresh collection deleted afterwards. ' +
        'Messages are encoded before the timing as the REST bodies are built; several clients have a channel (connection) each.',
    );
  }
  L.push('');
  L.push('| via | run | points/s | seconds | requests | p50 ms | p99 ms | body MiB (B/point) | server CPU s main / other threads | client CPU s | after the run |');
  L.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|');
  for (const u of r.upserts) {
    const a = u.afterUpsert;
    L.push(
      `| ${u.transport === 'gRPC' ? `gRPC (${libText(u.grpcLib)})` : 'REST'} | ${u.label} | ${int(u.pointsPerSec)} | ${num(u.seconds)} | ${u.requests} | ${num(u.p50Ms)} | ${num(u.p99Ms)} | ${num(u.bodyMiB, 1)} (${u.bytesPerPoint}) | ` +
        `${num(u.serverMainCpuSec)} / ${num(u.serverOtherCpuSec)} | ${num(u.clientCpuSec)} | ${a.status}, ${int(a.indexedVectorsCount)} indexed, ${a.segmentsCount} segments |`,
    );
  }
  L.push('');
  for (const u of r.upserts) {
    if (u.green) {
      L.push(
        `Green after the ${u.label} run: ${num(u.green.seconds)} s after the last write was acknowledged (${int(u.green.state.indexedVectorsCount)} of ${int(u.green.state.pointsCount)} vectors in the HNSW index, ` +
          `${u.green.state.segmentsCount} segments; server CPU ${num(u.green.serverMainCpuSec)} s main, ${num(u.green.serverOtherCpuSec)} s other threads meanwhile). Points are searchable before that (exact scan of the unindexed ones).`,
      );
    }
  }
  if (r.engineBuild) {
    L.push('');
    L.push(`For comparison, the in-process engine (${r.engineBuild.backend}) built the whole HNSW index in ${num(r.engineBuild.seconds)} s with ${r.engineBuild.threads} threads (CPU/wall ${num(r.engineBuild.cpuPerWall)}).`);
  }
  const sv = r.server;
  if (sv.rssAfterUpsertsMiB !== null && sv.rssAfterUpsertsMiB !== undefined) {
    const perPoint = (mib: number | null | undefined) => (mib === null || mib === undefined ? '–' : `${int(((mib - (sv.rssAtStartMiB ?? 0)) * 2 ** 20) / p.n)} B`);
    L.push('');
    L.push(
      `Server memory (\`/proc/<pid>/status\`): RSS ${sv.rssAtStartMiB ?? '–'} MiB at start, **${sv.rssAfterUpsertsMiB} MiB after the load** (the queried collection green; ${perPoint(sv.rssAfterUpsertsMiB)} per point over the start)` +
        `${sv.rssPeakAfterUpsertsMiB ? `, peak (VmHWM) ${sv.rssPeakAfterUpsertsMiB} MiB by then` : ''}; ${sv.rssAtEndMiB ?? '–'} MiB at the end of the run${sv.rssPeakMiB ? ` (peak ${sv.rssPeakMiB} MiB)` : ''}. ` +
        `Raw f32 vectors: ${int((p.n * p.dim * 4) / 2 ** 20)} MiB.`,
    );
  }
  L.push('');

  // -- queries
  if (r.queries.length) {
    L.push('## Query');
    L.push('');
    L.push(
      `REST: \`POST /collections/{c}/points/query\` with \`{"query": [...], "limit": ${p.k}, "params": {"hnsw_ef": ef}}\`, c requests in flight over keep-alive connections. ` +
        `Engine: \`index.search(q, { k: ${p.k}, ef })\` in this process on an index built from the same data, c async calls outstanding (the libuv pool runs them in parallel). ` +
        `Best of ${p.reps} interleaved passes over the ${p.queries} queries, after a warm-up of 3 passes through each path. Latency percentiles are per request in that pass; CPU µs/query are over the pass (server: main thread / all other threads, from /proc; client: this process; for the engine rows that is the benchmark process, every thread: the engine's searches and the harness's calls). ` +
        '`GET /readyz` runs through the same HTTP server and Koa middleware with no body, storage or engine: the floor of any REST request.' +
        (p.enginePassSeconds
          ? ` Each engine pass cycles over the queries until ${p.enginePassSeconds} s have passed${p.wrkSeconds === p.enginePassSeconds ? ', as long as a wrk pass, so the two bests compare passes of equal length' : ''} (a one-cycle pass is ${p.queries} queries, tens of milliseconds, and its best of three moves with the machine's moments both ways: bench/README.md). Recall is read from the first cycle. The JavaScript client's REST passes and the gRPC passes are still one cycle each, so their ratios to the engine compare short passes with long ones; the wrk rows are the like-for-like comparison.`
          : ''),
    );
    L.push('');
    L.push(
      p.wrkSeconds !== null
        ? `Rows "REST query, wrk": the same requests (same bodies, in order, c keep-alive connections with one request in flight each) driven by wrk, a load generator in C, for ${p.wrkSeconds} s per pass, interleaved with the others. ` +
            'The JavaScript client spends 30-40 µs of CPU per request on the same two cores the server and its search threads use; wrk spends less, so these rows show more of what the server itself answers. ' +
            'wrk does not read the answers (recall is checked on the JavaScript client\'s rows, same server, same bodies) but every answer must be a 200; its latency percentiles are its own; client CPU is wrk\'s.'
        : `wrk rows: not measured (${p.wrkSkip ?? 'disabled'}).`,
    );
    L.push('');
    if (p.grpc) {
      const b = p.grpc.queryRequestBytes;
      L.push(
        'gRPC rows: `Points/Query` `{collection_name, query: {nearest: {dense: {data}}}, limit, params: {hnsw_ef}}` on the same collection with the same queries and ef, with the committed contract (bench/rest/grpc.ts): ' +
          'each message encoded before the timing (as the REST bodies are), each answer decoded by the contract\'s deserializer (proto-loader) in the timed loop (as the REST client parses its JSON), interleaved with the REST passes. ' +
          'Two clients: @grpc/grpc-js (`makeUnaryRequest`, what a Node application uses), and node:http2 directly (one stream per call, the gRPC framing and `grpc-status` trailer read off the stream: the counterpart of the REST rows\' raw HTTP/1.1 client; client and server share the cores, so what a client spends is taken from the server). ' +
          'At concurrency above 1, "channels" rows give each call in flight its own channel and connection (as the REST client has a keep-alive connection per request in flight), "1 shared channel" rows multiplex the calls on one HTTP/2 connection. ' +
          '`Qdrant/HealthCheck` runs through the same gRPC server and call wrapper (metrics, deadline) with no storage or engine: the floor of a gRPC call.' +
          (b ? ` Mean query request: ${int(b.rest)} B of JSON (REST), ${int(b.grpc)} B of protobuf (gRPC).` : ''),
      );
      L.push('');
    }
    if (p.h2loadSeconds !== undefined && p.h2loadSeconds !== null) {
      L.push(
        `Rows "h2load": nghttp2's load generator (C) drives REST (HTTP/1.1, c connections) and gRPC (HTTP/2: c connections with one call each, or one connection with c concurrent streams) alike, for ${p.h2loadSeconds} s per pass, interleaved with the others. ` +
          'It sends one body throughout, so these rows repeat the first query of the set (same for both APIs; the engine\'s work per query is then not the set\'s mean); recall is not read. ' +
          'Every answer must be a 2xx, and, since h2load does not read gRPC\'s status, every gRPC answer must carry the 10-hit message (bytes counted). ' +
          'h2load reports mean and maximum request times, not percentiles: the p50 and p99 columns hold them for these rows. ' +
          'Client CPU is h2load\'s; the JavaScript gRPC clients spend several times the REST client\'s CPU per call on the cores the server uses, which these rows take out of the comparison.',
      );
      L.push('');
    } else if (p.h2loadSkip) {
      L.push(`h2load rows: not measured (${p.h2loadSkip}).`);
      L.push('');
    }
    L.push('| via | in flight | ef | QPS | recall@10 | p50 µs | p99 µs | server CPU µs/request main / other | client CPU µs/request | QPS of each pass |');
    L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---|');
    for (const q of r.queries) {
      const via = viaText(q);
      L.push(
        `| ${via} | ${q.concurrency} | ${q.via === 'baseline' || q.via === 'grpc-baseline' ? '–' : q.ef} | ${int(q.qps)} | ${q.recall === null ? '–' : q.recall.toFixed(4)} | ${int(q.p50Us)} | ${int(q.p99Us)} | ` +
          `${q.via !== 'engine' ? `${int(q.serverMainCpuUsPerQuery)} / ${int(q.serverOtherCpuUsPerQuery)}` : '–'} | ${int(q.clientCpuUsPerQuery)} | ${q.passes.map((x) => int(x)).join(', ')} |`,
      );
    }
    L.push('');
    if (rs.length) {
      L.push('### REST / in-process ratios');
      L.push('');
      L.push('| ef | REST client | REST in flight | engine outstanding | REST QPS | engine QPS | ratio |');
      L.push('|---:|---|---:|---:|---:|---:|---:|');
      for (const x of rs) L.push(`| ${x.ef} | ${clientName(x.client)} | ${x.restConcurrency} | ${x.engineConcurrency} | ${int(x.restQps)} | ${int(x.engineQps)} | ${x.ratio.toFixed(2)} |`);
      L.push('');
    }
    const one = r.engineOnePass ?? [];
    if (one.length) {
      L.push('### The engine in one-cycle passes (information)');
      L.push('');
      L.push(`The same engine rows from passes of one cycle over the ${p.queries} queries, interleaved with the others: how every engine pass was timed before they matched wrk's passes. Not compared; the wrk column divides the wrk row at the highest concurrency by them.`);
      L.push('');
      L.push('| outstanding | ef | QPS | QPS of each pass | engine (matched passes) / this | wrk / this |');
      L.push('|---:|---:|---:|---|---:|---:|');
      const cMax = Math.max(...p.concurrency);
      for (const q of one) {
        const matched = r.queries.find((x) => x.via === 'engine' && x.concurrency === q.concurrency && x.ef === q.ef);
        const w = r.queries.find((x) => x.via === 'wrk' && x.concurrency === cMax && x.ef === q.ef);
        L.push(`| ${q.concurrency} | ${q.ef} | ${int(q.qps)} | ${q.passes.map((x) => int(x)).join(', ')} | ${matched ? (matched.qps / q.qps).toFixed(2) : '–'} | ${w ? (w.qps / q.qps).toFixed(2) : '–'} |`);
      }
      L.push('');
    }
    if (gr.length) {
      L.push('### gRPC / REST and gRPC / in-process ratios');
      L.push('');
      L.push('| ef | in flight | load generator (gRPC / REST) | gRPC channels | gRPC QPS | REST QPS | gRPC / REST | engine outstanding | engine QPS | gRPC / engine |');
      L.push('|---:|---:|---|---|---:|---:|---:|---:|---:|---:|');
      for (const x of gr) {
        L.push(
          `| ${x.ef} | ${x.concurrency} | ${x.driver === 'h2load' ? 'h2load / h2load (one query)' : `${libText(x.lib)} / raw HTTP/1.1`} | ${x.channels === undefined ? '1' : x.channels === 'shared' ? '1 shared' : `${x.concurrency}, one per call in flight`} | ${int(x.grpcQps)} | ${int(x.restQps)} | ${(x.grpcQps / x.restQps).toFixed(2)} | ` +
            `${x.engineConcurrency ?? '–'} | ${int(x.engineQps)} | ${x.engineQps ? (x.grpcQps / x.engineQps).toFixed(2) : '–'} |`,
        );
      }
      L.push('');
    }
    const mainRow = r.upserts.find((u) => u.green);
    if (mainRow?.green && mainRow.green.state.indexedVectorsCount < mainRow.green.state.pointsCount) {
      const rest = mainRow.green.state.pointsCount - mainRow.green.state.indexedVectorsCount;
      L.push(
        `Note: ${int(rest)} of the queried collection's points are below the indexing threshold and stay in the appendable (flat) segment, which every REST query also scans exactly; the in-process index holds every point in one graph.`,
      );
      L.push('');
    }
  }

  // -- profile
  if (r.profile) {
    L.push('## Server CPU profile (main thread)');
    L.push('');
    L.push(`From \`${r.profile.file}\` (node --cpu-prof), per phase of this run${r.profile.clockMatched ? '' : ' (WARNING: the phase windows fall outside the profile; clocks may not match)'}. Self time; work on other threads (engine calls, fsync, GC helpers) is not in it.`);
    L.push('');
    for (const w of r.profile.windows) {
      L.push(`### ${w.name}: ${num(w.wallMs / 1000)} s wall, main thread busy ${num(w.busyMs / 1000)} s`);
      L.push('');
      L.push('| area | ms | share |');
      L.push('|---|---:|---:|');
      for (const a of w.areas) L.push(`| ${a.name} | ${int(a.ms)} | ${(a.share * 100).toFixed(1)}% |`);
      L.push('');
      L.push('| function | ms | share |');
      L.push('|---|---:|---:|');
      for (const f of w.functions) L.push(`| \`${f.name}\` | ${int(f.ms)} | ${(f.share * 100).toFixed(1)}% |`);
      L.push('');
      L.push('| function (total: self + callees) | ms | share |');
      L.push('|---|---:|---:|');
      for (const f of w.inclusive) L.push(`| \`${f.name}\` | ${int(f.ms)} | ${(f.share * 100).toFixed(1)}% |`);
      L.push('');
    }
  }
  return L.join('\n');
}
