/**
 * Result types of the snapshot benchmark and its Markdown report
 * (bench/results/snapshots-<tag>.md).
 */

/** The issue's target: no snapshot operation grows the server's RSS by this much. */
export const RSS_GROWTH_LIMIT_MIB = 100;

export interface RssFigures {
  /** VmRSS just before the operation. */
  baselineMiB: number;
  /** Largest VmRSS sampled during it. */
  peakMiB: number;
  growthMiB: number;
  /** Anonymous memory (heap, buffers) alone: baseline, peak, growth. */
  anonBaselineMiB: number;
  anonPeakMiB: number;
  anonGrowthMiB: number;
  /** File-backed mapped pages (mmap'd files) growth. */
  fileGrowthMiB: number;
  /** VmRSS at the end of the operation. */
  endMiB: number;
  /** VmRSS `settleMs` after the operation ended. */
  settledMiB: number | null;
  /** settled − baseline: what the server still holds afterwards (a recovery: the new collection). */
  retainedMiB: number | null;
  /** peak − max(settled, baseline): memory used only while the operation ran. */
  transientMiB: number | null;
  /** Seconds into the operation when the VmRSS peak was sampled. */
  peakAtSec: number;
  samples: number;
  /** Largest gap between two samples (20 ms asked; more when the machine is busy). */
  maxGapMs: number;
  /** [ms since start, VmRSS kB], every 5th sample. */
  series: Array<[number, number]>;
}

export interface PhaseRow {
  key: string;
  label: string;
  request: string;
  seconds: number;
  archiveBytes: number;
  archiveMiB: number;
  mibPerSec: number;
  rss: RssFigures;
  serverMainCpuSec: number | null;
  serverOtherCpuSec: number | null;
  /** Phase-specific figures (upload send time, checksum check, points wait ...). */
  details: Record<string, string | number | boolean | null>;
}

export interface SnapshotResults {
  benchmark: 'snapshots';
  tag: string;
  startedAt: string;
  finishedAt: string;
  argv: string[];
  commands: string[];
  machine: {
    cpuModel: string;
    cores: number;
    memoryGiB: number;
    kernel: string;
    node: string;
    loadAverageAtStart: number[];
    coresAvailableAtStart: number;
    loadAverageAtEnd: number[];
    coresAvailableAtEnd: number;
    dataDirFs: string;
    /** The checkout the server ran from. */
    git: string;
  };
  params: {
    points: number;
    dim: number;
    distance: string;
    batch: number;
    concurrency: number;
    index: boolean;
    collectionBody: unknown;
    payload: string;
    vectors: string;
    full: boolean;
  };
  load: {
    seconds: number;
    pointsPerSec: number;
    bodyMiB: number;
    p50Ms: number;
    p99Ms: number;
    greenSeconds: number | null;
    state: { status: string; pointsCount: number; indexedVectorsCount: number; segmentsCount: number };
    serverRssEmptyMiB: number | null;
    serverRssAfterMiB: number | null;
  };
  server: {
    command: string;
    env: string;
    pid: number;
    storageDir: string;
    shutdownSeconds: number | null;
    exitCode: number | null;
    logTail: string[];
  };
  snapshot: { name: string; bytes: number; sha256: string } | null;
  fullSnapshot: { name: string; bytes: number; sha256: string } | null;
  phases: PhaseRow[];
  /** `--base`: the recoveries timed on both builds, interleaved (null without --base). */
  ab?: {
    base: string;
    baseLabel: string | null;
    baseGit: string;
    rounds: number;
    rows: Array<{ round: number; op: string; tag: string; seconds: number; mibPerSec: number; mainCpuSec: number | null; otherCpuSec: number | null; same: boolean }>;
    summary: Array<{
      op: string;
      label: string;
      newMedianSec: number;
      baseMedianSec: number;
      newMedianMiBs: number;
      baseMedianMiBs: number;
      newBestMiBs: number;
      baseBestMiBs: number;
      /** base median seconds ÷ new median seconds. */
      speedup: number;
      newMedianCpuSec: number;
      baseMedianCpuSec: number;
    }>;
  } | null;
  checks: string[];
  problems: string[];
}

const num = (x: number | null | undefined, d = 1) => (x === null || x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(d));
const int = (x: number) => Math.round(x).toLocaleString('en-US');

export function markdown(r: SnapshotResults): string {
  const L: string[] = [];
  const p = r.params;
  const m = r.machine;
  L.push(`# Snapshot benchmark ${r.tag}`);
  L.push('');
  L.push(
    `${int(p.points)} points × ${p.dim}-d (${p.vectors}; ${p.distance}) with small payloads (${p.payload}), loaded through REST ` +
      `(\`PUT /collections/{c}/points?wait=true\`, batches of ${p.batch}, ${p.concurrency} requests in flight) into a real server ` +
      `(\`${r.server.command}\`, ${r.server.env}).`,
  );
  L.push('');
  if (p.index) {
    L.push('**HNSW kept** (`--index`): the collection uses the server\'s default indexing threshold and the bench waits until it is green before the first snapshot, so the archives include the graph files.');
  } else {
    L.push(
      '**The collection is created with `optimizers_config.indexing_threshold: 0`** (no HNSW graph is ever built), so the figures measure snapshot I/O ' +
        '(checkpoint, tar writing, hashing, transfer, unpacking, swapping in) and not graph building; the archive holds the vectors, payloads and id tracker ' +
        '(pass `--index` to keep HNSW).',
    );
  }
  L.push('');
  L.push(
    `Server code: ${m.git}. Machine: ${m.cores} cores (${m.cpuModel}), ${m.memoryGiB} GiB, Linux ${m.kernel}, Node ${m.node}; data on ${m.dataDirFs}. ` +
      `Load average ${m.loadAverageAtStart.join(' ')} at start, ${m.loadAverageAtEnd.join(' ')} at end; cores this process could get ≈ ${m.coresAvailableAtStart} at start, ${m.coresAvailableAtEnd} at end. ` +
      '**The machine is shared with other agents running tests**, and the bench client, the server and its disk I/O share the two cores: throughput figures are noisy and on the low side. RSS figures do not depend on load much.',
  );
  L.push('');
  L.push('Commands:');
  L.push('');
  L.push('```sh');
  for (const c of r.commands) L.push(c);
  L.push('```');
  L.push('');

  // -- load
  const ld = r.load;
  L.push(
    `Load: ${int(ld.state.pointsCount)} points in ${num(ld.seconds)} s (${int(ld.pointsPerSec)} points/s, ${num(ld.bodyMiB)} MiB of JSON, p50 ${num(ld.p50Ms)} ms / p99 ${num(ld.p99Ms)} ms per request); ` +
      `after the load: ${ld.state.status}, ${ld.state.segmentsCount} segments, ${int(ld.state.indexedVectorsCount)} indexed vectors` +
      (ld.greenSeconds !== null ? `, green ${num(ld.greenSeconds)} s after the last write` : '') +
      (ld.serverRssAfterMiB !== null ? `; server RSS ${num(ld.serverRssEmptyMiB, 0)} MiB before the collection was created, ${num(ld.serverRssAfterMiB, 0)} MiB after the load.` : '.'),
  );
  L.push('');
  if (r.snapshot) L.push(`Collection snapshot: \`${r.snapshot.name}\`, **${num(r.snapshot.bytes / 2 ** 20)} MiB** (${int(r.snapshot.bytes)} bytes), SHA-256 \`${r.snapshot.sha256}\`.`);
  if (r.fullSnapshot) L.push(`Full-storage snapshot: \`${r.fullSnapshot.name}\`, **${num(r.fullSnapshot.bytes / 2 ** 20)} MiB**.`);
  L.push('');

  // -- targets
  L.push('## Target');
  L.push('');
  // This build's phases (the base build's, with --base, are there to compare with).
  const own = r.phases.filter((x) => !x.label.endsWith('[base]'));
  const worst = own.reduce<PhaseRow | null>((a, b) => (a === null || b.rss.growthMiB > a.rss.growthMiB ? b : a), null);
  if (worst) {
    const ok = own.every((x) => x.rss.growthMiB < RSS_GROWTH_LIMIT_MIB);
    L.push(
      `- Creating, downloading, uploading and recovering a snapshot grows the server's RSS by less than ${RSS_GROWTH_LIMIT_MIB} MB: ` +
        `largest growth ${num(worst.rss.growthMiB)} MiB (${worst.label}) ${ok ? '**met**' : '**not met**'}` +
        (r.snapshot && r.snapshot.bytes < 2 ** 30 && !r.fullSnapshot ? ` (the archive here is ${num(r.snapshot.bytes / 2 ** 20, 0)} MiB, not 1 GB)` : '') +
        (r.fullSnapshot ? ` (collection archive ${num((r.snapshot?.bytes ?? 0) / 2 ** 20, 0)} MiB, full-storage archive ${num(r.fullSnapshot.bytes / 2 ** 20, 0)} MiB)` : '') +
        '.',
    );
    const tr = own.reduce<PhaseRow | null>((a, b) => (a === null || (b.rss.transientMiB ?? 0) > (a.rss.transientMiB ?? 0) ? b : a), null);
    if (tr && tr.rss.transientMiB !== null) {
      const okT = own.every((x) => (x.rss.transientMiB ?? 0) < RSS_GROWTH_LIMIT_MIB);
      L.push(
        `- The same with the memory the server still holds afterwards left out (a recovery keeps the recovered collection loaded; "transient" column): ` +
          `largest ${num(tr.rss.transientMiB)} MiB (${tr.label}) ${okT ? '**met**' : '**not met**'}.`,
      );
    }
    const creates = r.phases.filter((x) => x.key === 'create' || x.key === 'create-again' || x.key === 'full-create');
    const recs = r.phases.filter((x) => x.key === 'upload' || x.key.startsWith('recover'));
    L.push(`- Throughput of create: ${creates.map((x) => `${num(x.mibPerSec)} MiB/s (${x.label})`).join(', ')}; of recover: ${recs.map((x) => `${num(x.mibPerSec)} MiB/s (${x.label})`).join(', ')}.`);
    if (r.ab) {
      L.push(
        `- Recovery, this build against the base build, medians of ${r.ab.rounds} rounds: ` +
          r.ab.summary.map((x) => `${x.label} ${num(x.newMedianMiBs)} against ${num(x.baseMedianMiBs)} MiB/s (${num(x.speedup, 2)}×; best ${num(x.newBestMiBs)})`).join('; ') +
          '.',
      );
    }
  }
  L.push('');

  // -- side by side
  if (r.ab) {
    const ab = r.ab;
    L.push('## Side by side with the base build');
    L.push('');
    L.push(
      `The base build (${ab.baseLabel ?? ab.baseGit}, from \`${ab.base}\`) ran as a second server beside this one, with the same archive (a hard link in its snapshots folder). ` +
        `${ab.rounds} rounds; in each, operation after operation, the two servers one after the other, the order flipped every time; each recovered collection was checked and deleted before the next. ` +
        'Seconds: request sent → answer, plus the wait until the collection reports every point. Server CPU: main thread + other threads, seconds, median.',
    );
    L.push('');
    L.push('| recovery | new median s | base median s | **speed-up** | new MiB/s (median / best) | base MiB/s (median / best) | server CPU s new / base |');
    L.push('|---|---:|---:|---:|---:|---:|---:|');
    for (const x of ab.summary) {
      L.push(`| ${x.label} | ${num(x.newMedianSec, 2)} | ${num(x.baseMedianSec, 2)} | **${num(x.speedup, 2)}×** | ${num(x.newMedianMiBs)} / ${num(x.newBestMiBs)} | ${num(x.baseMedianMiBs)} / ${num(x.baseBestMiBs)} | ${num(x.newMedianCpuSec, 2)} / ${num(x.baseMedianCpuSec, 2)} |`);
    }
    L.push('');
    L.push('Every run, in order:');
    L.push('');
    L.push('| round | recovery | build | seconds | MiB/s | server CPU s main / other |');
    L.push('|---:|---|---|---:|---:|---:|');
    for (const x of ab.rows) {
      const label = ab.summary.find((y) => y.op === x.op)?.label ?? x.op;
      L.push(`| ${x.round} | ${label} | ${x.tag} | ${num(x.seconds, 2)} | ${num(x.mibPerSec)} | ${num(x.mainCpuSec, 2)} / ${num(x.otherCpuSec, 2)} |`);
    }
    L.push('');
  }

  // -- table
  L.push('## Phases');
  L.push('');
  L.push('MiB/s = archive bytes ÷ wall seconds of the whole operation (request sent → answer received, plus the wait for the points where noted). ' +
    `RSS: the server process's VmRSS from \`/proc/<pid>/status\`, sampled every 20 ms by a worker thread of the bench process; baseline = the sample just before the request, ` +
    'growth = peak − baseline; retained = VmRSS a moment (`--settle-ms`) after the answer − baseline (for a recovery: mostly the recovered collection, which stays loaded); transient = peak − max(that, baseline). "anon" is RssAnon (JS heap, Buffers, native allocations) on its own; "file" is the growth of RssFile (memory-mapped files, e.g. vector storage the snapshot reads through a mapping). The page cache is not part of RSS.');
  L.push('');
  L.push('| phase | request | seconds | archive MiB | MiB/s | RSS baseline MiB | RSS peak MiB | **RSS growth MiB** | anon growth MiB | file growth MiB | retained MiB | transient MiB | peak at s | server CPU s main / other | samples (max gap ms) |');
  L.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const x of r.phases) {
    L.push(
      `| ${x.label} | \`${x.request}\` | ${num(x.seconds, 2)} | ${num(x.archiveMiB)} | ${num(x.mibPerSec)} | ${num(x.rss.baselineMiB)} | ${num(x.rss.peakMiB)} | **${num(x.rss.growthMiB)}** | ` +
        `${num(x.rss.anonGrowthMiB)} | ${num(x.rss.fileGrowthMiB)} | ${num(x.rss.retainedMiB)} | ${num(x.rss.transientMiB)} | ${num(x.rss.peakAtSec, 2)} | ${num(x.serverMainCpuSec, 2)} / ${num(x.serverOtherCpuSec, 2)} | ${x.rss.samples} (${num(x.rss.maxGapMs, 0)}) |`,
    );
  }
  L.push('');
  const detailRows = r.phases.filter((x) => Object.keys(x.details).length > 0);
  if (detailRows.length) {
    L.push('Details:');
    L.push('');
    for (const x of detailRows) {
      L.push(`- ${x.label}: ${Object.entries(x.details).map(([k, v]) => `${k} ${typeof v === 'number' ? (Number.isInteger(v) ? int(v) : num(v, 2)) : String(v)}`).join('; ')}`);
    }
    L.push('');
  }
  if (r.checks.length) {
    L.push('Checks:');
    L.push('');
    for (const c of r.checks) L.push(`- ${c}`);
    L.push('');
  }
  L.push('## Problems found');
  L.push('');
  if (r.problems.length === 0) L.push('None.');
  else for (const q of r.problems) L.push(`- ${q}`);
  L.push('');
  if (r.server.logTail.length) {
    L.push('Server log (WARN and above, last lines):');
    L.push('');
    L.push('```');
    for (const l of r.server.logTail.slice(-15)) L.push(l.length > 400 ? l.slice(0, 400) + '…' : l);
    L.push('```');
    L.push('');
  }
  return L.join('\n');
}
