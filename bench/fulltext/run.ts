/**
 * `npm run bench:fulltext [-- --n 100000 --queries 1000 --tag NAME]`
 *
 * Full-text index against keyword index, side by side on one collection (issue 19's
 * must-hold). Starts a real server (`node bin/quiver`, bench/rest/server.ts) and loads
 * N documents (default 100,000), each with
 *  - `body`: 8 to 24 words drawn from a Zipf-like vocabulary of 20,000 made-up words,
 *    with mixed case and punctuation, indexed `{type: "text"}` (word tokenizer,
 *    lowercase: the defaults);
 *  - `tag`: one of 200 keywords, indexed `keyword`;
 *  - a 4-d vector.
 * Then, at concurrency 1 and interleaved (one text request, one keyword request, ...),
 * it sends `POST /collections/{c}/points/scroll` with `limit: 10` and
 *  - text: `{key: body, match: {text: "<3 words>"}}`, the words taken from a random
 *    document (so every query matches at least one point);
 *  - keyword: `{key: tag, match: {value: "<random tag>"}}`,
 * and reports p50/p95/p99 of each and the ratio of the p95s (must be <= 1.5).
 *
 * Correctness: for a sample of the text queries (`--check`, default 200) the full result
 * (`POST .../points/count` with exact, and the ids from a scroll with a limit above the
 * count) is compared with a naive scan over the generated documents with this file's
 * own tokenizer. Results go to bench/results/fulltext-<tag>.{json,md}.
 */
import * as fs from 'fs';
import * as path from 'path';
import { REPO_ROOT } from '../engine/common';
import { percentile } from '../engine/measure';
import { makeClient } from '../rest/client';
import { QuiverServer } from '../rest/server';

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SYL = ['ka', 'lo', 'mi', 'ne', 'ru', 'sa', 'ti', 'vo', 'ze', 'pa', 'qu', 'ri', 'do', 'fe', 'gu', 'ha', 'jo', 'xe'];
const SEPS = [' ', ' ', ' ', ', ', '. ', ' - ', '; ', '! '];

function naiveTokens(s: string): string[] {
  return s
    .toLowerCase()
    .split(/[^a-z]+/)
    .filter((x) => x.length > 0);
}

async function main(): Promise<void> {
  const N = Number(arg('n', '100000'));
  const Q = Number(arg('queries', '1000'));
  const CHECK = Number(arg('check', '200'));
  const tag = arg('tag', new Date().toISOString().slice(0, 10));
  const rnd = rng(19);
  const V = 20000;
  const vocab: string[] = [];
  const seen = new Set<string>();
  while (vocab.length < V) {
    let w = '';
    const n = 2 + Math.floor(rnd() * 3);
    for (let i = 0; i < n; i++) w += SYL[Math.floor(rnd() * SYL.length)];
    if (!seen.has(w)) {
      seen.add(w);
      vocab.push(w);
    }
  }
  // Zipf-like: rank r drawn with weight 1/(r+1)^0.9 via inverse CDF on a table
  const cdf = new Float64Array(V);
  let acc = 0;
  for (let r = 0; r < V; r++) cdf[r] = acc += 1 / Math.pow(r + 1, 0.9);
  const word = () => {
    const x = rnd() * acc;
    let lo = 0;
    let hi = V - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    const w = vocab[lo];
    return rnd() < 0.1 ? w[0].toUpperCase() + w.slice(1) : w;
  };
  const docs: string[] = [];
  const tags: string[] = [];
  for (let i = 0; i < N; i++) {
    const len = 8 + Math.floor(rnd() * 17);
    let s = '';
    for (let j = 0; j < len; j++) s += word() + SEPS[Math.floor(rnd() * SEPS.length)];
    docs.push(s.trim());
    tags.push(`tag${Math.floor(rnd() * 200)}`);
  }

  const server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {} });
  const client = makeClient('raw', server.url, 1);
  const C = 'fulltext_bench';
  const out: Record<string, unknown> = { n: N, queries: Q, vocabulary: V, tags: 200, date: new Date().toISOString() };
  try {
    await client.json('PUT', `/collections/${C}`, { vectors: { size: 4, distance: 'Cosine' } });
    await client.json('PUT', `/collections/${C}/index?wait=true`, { field_name: 'body', field_schema: { type: 'text' } });
    await client.json('PUT', `/collections/${C}/index?wait=true`, { field_name: 'tag', field_schema: 'keyword' });
    const t0 = Date.now();
    for (let i = 0; i < N; i += 1000) {
      const points = [];
      for (let j = i; j < Math.min(N, i + 1000); j++) {
        points.push({ id: j, vector: [rnd() + 0.01, rnd(), rnd(), rnd()], payload: { body: docs[j], tag: tags[j] } });
      }
      await client.json('PUT', `/collections/${C}/points?wait=true`, { points });
    }
    out.load_seconds = (Date.now() - t0) / 1000;
    console.log(`loaded ${N} documents in ${out.load_seconds} s`);

    // text queries: 3 distinct words of a random document, in random case
    const textQueries: string[] = [];
    while (textQueries.length < Q) {
      const toks = [...new Set(naiveTokens(docs[Math.floor(rnd() * N)]))];
      if (toks.length < 3) continue;
      const pick: string[] = [];
      while (pick.length < 3) {
        const w = toks[Math.floor(rnd() * toks.length)];
        if (!pick.includes(w)) pick.push(w);
      }
      textQueries.push(pick.map((w) => (rnd() < 0.3 ? w.toUpperCase() : w)).join(' '));
    }
    const kwQueries = Array.from({ length: Q }, () => `tag${Math.floor(rnd() * 200)}`);

    // correctness against a naive scan
    const docTokens = docs.map((d) => new Set(naiveTokens(d)));
    let checked = 0;
    let totalMatches = 0;
    for (const q of textQueries.slice(0, CHECK)) {
      const qt = naiveTokens(q);
      const want: number[] = [];
      for (let i = 0; i < N; i++) if (qt.every((x) => docTokens[i].has(x))) want.push(i);
      const filter = { must: [{ key: 'body', match: { text: q } }] };
      const cnt = await client.json<{ count: number }>('POST', `/collections/${C}/points/count`, { filter, exact: true });
      const sc = await client.json<{ points: Array<{ id: number }> }>('POST', `/collections/${C}/points/scroll`, {
        filter,
        limit: want.length + 10,
        with_payload: false,
      });
      const got = sc.points.map((p) => p.id).sort((a, b) => a - b);
      if (cnt.count !== want.length || JSON.stringify(got) !== JSON.stringify(want)) {
        throw new Error(`query "${q}": server count ${cnt.count} ids ${JSON.stringify(got.slice(0, 20))}, naive scan ${JSON.stringify(want.slice(0, 20))} (${want.length})`);
      }
      checked++;
      totalMatches += want.length;
    }
    out.checked_queries = checked;
    out.mean_matches_per_checked_query = totalMatches / Math.max(1, checked);
    const kwMatches = kwQueries.slice(0, 50).map((k) => tags.filter((x) => x === k).length);
    out.mean_matches_per_keyword_query = kwMatches.reduce((a, b) => a + b, 0) / kwMatches.length;
    console.log(`naive scan agrees on ${checked} text queries (mean ${out.mean_matches_per_checked_query} matches)`);

    const body = (cond: unknown) => Buffer.from(JSON.stringify({ filter: { must: [cond] }, limit: 10, with_payload: true }));
    const textBodies = textQueries.map((q) => body({ key: 'body', match: { text: q } }));
    const kwBodies = kwQueries.map((v) => body({ key: 'tag', match: { value: v } }));
    const p = `/collections/${C}/points/scroll`;
    const once = async (b: Buffer): Promise<number> => {
      const s = process.hrtime.bigint();
      const r = await client.request('POST', p, b);
      const us = Number(process.hrtime.bigint() - s) / 1000;
      if (r.status !== 200) throw new Error(`scroll: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
      return us;
    };
    // warm-up: one pass of each, interleaved
    for (let i = 0; i < Q; i++) {
      await once(textBodies[i]);
      await once(kwBodies[i]);
    }
    const textUs = new Float64Array(Q);
    const kwUs = new Float64Array(Q);
    for (let i = 0; i < Q; i++) {
      textUs[i] = await once(textBodies[i]);
      kwUs[i] = await once(kwBodies[i]);
    }
    const stats = (xs: Float64Array) => ({
      p50_us: Math.round(percentile(xs, 50)),
      p95_us: Math.round(percentile(xs, 95)),
      p99_us: Math.round(percentile(xs, 99)),
      mean_us: Math.round(xs.reduce((a, b) => a + b, 0) / xs.length),
    });
    out.text = stats(textUs);
    out.keyword = stats(kwUs);
    out.p95_ratio = Number((percentile(textUs, 95) / percentile(kwUs, 95)).toFixed(3));
    out.holds = (out.p95_ratio as number) <= 1.5;
    console.log(JSON.stringify(out, null, 2));
  } finally {
    client.close();
    await server.stop();
  }

  const dir = path.join(REPO_ROOT, 'bench', 'results');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, `fulltext-${tag}.json`), JSON.stringify(out, null, 2) + '\n');
  const t = out.text as Record<string, number>;
  const k = out.keyword as Record<string, number>;
  const md = [
    `# Full-text vs keyword filter latency (${out.date})`,
    '',
    `Command: \`npm run bench:fulltext -- --n ${N} --queries ${Q}\` (bench/fulltext/run.ts). One server, one collection of ${N} documents ` +
      `(body: 8-24 words of a ${V}-word Zipf-like vocabulary, \`{type: "text"}\` index; tag: one of 200 keywords, \`keyword\` index). ` +
      'POST /points/scroll with limit 10 and the payload, concurrency 1, text and keyword requests interleaved, after one warm-up pass.',
    '',
    '| query | p50 µs | p95 µs | p99 µs | mean µs |',
    '|---|---|---|---|---|',
    `| text, 3 words (\`match: {text}\`) | ${t.p50_us} | ${t.p95_us} | ${t.p99_us} | ${t.mean_us} |`,
    `| keyword (\`match: {value}\`) | ${k.p50_us} | ${k.p95_us} | ${k.p99_us} | ${k.mean_us} |`,
    '',
    `p95 ratio text / keyword: **${out.p95_ratio}** (must be <= 1.5: ${out.holds ? 'holds' : 'DOES NOT HOLD'}).`,
    '',
    `Correctness: ${out.checked_queries} text queries' full results (exact count and every id) equal a naive scan over the ` +
      `generated documents (mean ${Number(out.mean_matches_per_checked_query).toFixed(1)} matches per query; a keyword query matches about ` +
      `${Math.round(out.mean_matches_per_keyword_query as number)} points). Load: ${out.load_seconds} s.`,
    '',
  ].join('\n');
  fs.writeFileSync(path.join(dir, `fulltext-${tag}.md`), md);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
