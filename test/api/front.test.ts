/**
 * The HTTP front (ts/api/rest/front.ts) on one connection: which requests it answers,
 * which it relays to node:http, which it hands over with the socket, and that answers
 * come back whole and in order whatever the mix. Also its timeouts and closing.
 * direct.test.ts and direct-review.test.ts compare its answers with the lane's and
 * Koa's request by request; this file is about the connection.
 *
 * In process (test/api/lane-pair.ts): server F runs the front before the lane before
 * Koa, as ts/node.ts serves; server B is Koa alone, for comparisons.
 */

import test from 'ava';

import { RawClient as Raw, rawRequest as req } from '../support/raw-http';

import { waitFor } from '../support/wait';
import { LaneHarness, type LanePair } from './lane-pair';

let h: LaneHarness;
let p: LanePair;

const C = 'front';
const DIM = 4;
const QUERY = JSON.stringify({ query: [0.1, 0.2, 0.3, 0.4], limit: 2 });

test.before(async () => {
  h = await LaneHarness.open('quiver-front-');
  p = await h.pair(h.config());
  const c = new Raw(p.portB);
  await c.write(req('PUT', `/collections/${C}`, JSON.stringify({ vectors: { size: DIM, distance: 'Cosine' } })));
  // node:http runs pipelined requests concurrently: the upsert waits for the create's answer.
  await c.until(1);
  const points = Array.from({ length: 20 }, (_, i) => ({ id: i + 1, vector: [i + 1, 1, i % 3, 2], payload: { i } }));
  await c.write(req('PUT', `/collections/${C}/points?wait=true`, JSON.stringify({ points })));
  const [a, b] = await c.until(2);
  c.close();
  if (a?.status !== 200 || b?.status !== 200) throw new Error(`setup: ${JSON.stringify([a, b])}`);
});

test.after.always(async () => {
  await h?.close();
});

const Q = `/collections/${C}/points/query`;

test.serial('a pipelined mix on one connection: the front answers lane requests, node:http the others, in order', async (t) => {
  const served = p.front.served;
  const hits = p.koaHits;
  const c = new Raw(p.portF);
  try {
    const upsert = JSON.stringify({ points: [{ id: 100, vector: [1, 2, 3, 4], payload: { mixed: true } }] });
    await c.write(
      req('POST', Q, QUERY) +
        req('GET', `/collections/${C}`) +
        req('POST', `/collections/${C}/points/count`, '{"exact":true}') +
        req('PUT', `/collections/${C}/points?wait=true`, upsert) +
        req('POST', `/collections/${C}/points/count`, '{"exact":true}') +
        req('POST', Q, '{'),
    );
    const answers = await c.until(6);
    t.deepEqual(
      answers.map((a) => a.status),
      [200, 200, 200, 200, 200, 400],
    );
    t.is(JSON.parse(answers[0].body).result.points.length, 2);
    t.is(JSON.parse(answers[1].body).result.status, 'green');
    const before = JSON.parse(answers[2].body).result.count as number;
    t.is(JSON.parse(answers[4].body).result.count, before + 1, 'the count after the relayed upsert sees it');
    t.is(p.front.served - served, 4, 'the front answered the queries and counts');
    t.is(p.koaHits - hits, 2, 'Koa answered the collection info and the upsert');
    for (const a of answers) t.is(a.headers.connection, 'keep-alive');
    // The front's metrics, as /metrics shows them (node.ts registers them the same way).
    p.rest.stats.addFrontMetrics(p.front);
    const metrics = await p.rest.stats.registry.metrics();
    t.regex(metrics, new RegExp(`^rest_front_answered_total ${p.front.served}$`, 'm'));
    t.regex(metrics, /^rest_connections\{state="idle"\} [0-9]+$/m);
  } finally {
    c.close();
  }
});

test.serial('a relayed body in pieces, and one large enough to fill the relay, then the front answers again on the connection', async (t) => {
  const c = new Raw(p.portF);
  try {
    const small = JSON.stringify({ points: [{ id: 101, vector: [4, 3, 2, 1] }] });
    const text = req('PUT', `/collections/${C}/points?wait=true`, small);
    // One byte at a time for the head's end and the body, each write flushed before the next.
    const cut = text.indexOf('\r\n\r\n') - 2;
    await c.write(text.slice(0, cut));
    for (const ch of text.slice(cut)) await c.write(ch);
    t.is((await c.until(1))[0].status, 200);

    // About 600 KB: many times the relay stream's buffer, so node:http's reading paces the socket.
    const many = Array.from({ length: 6000 }, (_, i) => ({ id: 1000 + i, vector: [i % 7, 1, 2, (i % 11) + 1], payload: { text: 'x'.repeat(60) } }));
    const big = JSON.stringify({ points: many });
    t.true(big.length > 500_000);
    const served = p.front.served;
    await c.write(req('PUT', `/collections/${C}/points?wait=true`, big) + req('POST', `/collections/${C}/points/count`, '{"exact":true}'));
    const [, up, count] = await c.until(3);
    t.is(up.status, 200, up.body.slice(0, 200));
    t.is(count.status, 200);
    t.true((JSON.parse(count.body).result.count as number) >= 6000);
    t.is(p.front.served - served, 1, 'the count after the large relayed body was answered by the front');
  } finally {
    c.close();
  }
});

test.serial('a chunked request hands the socket to node:http, which then serves the connection (the lane on its node path)', async (t) => {
  const c = new Raw(p.portF);
  try {
    await c.write(req('POST', Q, QUERY));
    await c.until(1);
    const served = p.front.served;
    const hits = p.koaHits;
    const chunked = `POST ${Q} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${QUERY.length.toString(16)}\r\n${QUERY}\r\n0\r\n\r\n`;
    await c.write(chunked + req('POST', Q, QUERY) + req('GET', `/collections/${C}`));
    const answers = await c.until(4);
    t.deepEqual(
      answers.map((a) => a.status),
      [200, 200, 200, 200],
    );
    t.is(answers[1].body.replace(/"time":[0-9.e+-]+/, ''), answers[2].body.replace(/"time":[0-9.e+-]+/, ''));
    t.is(p.front.served, served, 'nothing more went through the front');
    t.is(p.koaHits - hits, 1, 'only the collection info reached Koa');
  } finally {
    c.close();
  }
});

test.serial('heads the front does not read are node:http\'s: a long head is served, an oversized one is 431, garbage is 400', async (t) => {
  const long = new Raw(p.portF);
  const served = p.front.served;
  try {
    await long.write(req('POST', Q, QUERY, `X-Filler: ${'a'.repeat(10_000)}\r\n`));
    t.is((await long.until(1))[0].status, 200);
    t.is(p.front.served, served, 'a 10 KB head went to node:http');
  } finally {
    long.close();
  }
  for (const [text, status] of [
    [req('POST', Q, QUERY, `X-Filler: ${'a'.repeat(20_000)}\r\n`), 431],
    ['GARBAGE\r\n\r\n', 400],
    // node:http answers this Expect itself, without a 'request' event.
    [req('POST', Q, QUERY, 'Expect: something-else\r\nConnection: close\r\n'), 417],
    [`POST ${Q} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}`, 400],
    [`POST ${Q} HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}`, 400],
  ] as const) {
    const f = new Raw(p.portF);
    const b = new Raw(p.portB);
    try {
      await f.write(text);
      await b.write(text);
      await f.untilClosed();
      await b.untilClosed();
      const head = (x: Raw) => (x.answers[0] ? `HTTP/1.1 ${x.answers[0].status}` : x.rest().split('\r\n')[0]);
      t.is(head(f), head(b), `the same answer as node:http alone to ${JSON.stringify(text.slice(0, 60))}`);
      t.regex(head(b), new RegExp(`^HTTP/1\\.1 ${status}`));
    } finally {
      f.close();
      b.close();
    }
  }
});

test.serial('an Expect node:http refuses itself (417, no request event) does not stall the connection', async (t) => {
  const c = new Raw(p.portF);
  try {
    await c.write(req('POST', Q, QUERY, 'Expect: something-else\r\n') + req('POST', Q, QUERY));
    const answers = await c.until(2);
    t.deepEqual(
      answers.map((a) => a.status),
      [417, 200],
    );
  } finally {
    c.close();
  }
});

test.serial('HTTP/1.0 and Connection: close end the connection after the answer, relayed or not', async (t) => {
  for (const [text, byFront] of [
    [req('POST', Q, QUERY, 'Connection: close\r\n'), true],
    [req('POST', Q, QUERY).replace('HTTP/1.1', 'HTTP/1.0'), false],
    [req('GET', `/collections/${C}`, undefined, 'Connection: close\r\n'), false],
  ] as const) {
    const served = p.front.served;
    const c = new Raw(p.portF);
    try {
      await c.write(text + req('POST', Q, QUERY));
      await c.untilClosed();
      t.is(c.answers.length, 1, 'one answer, then the connection closed');
      t.is(c.answers[0].status, 200);
      t.is(c.answers[0].headers.connection, 'close');
      t.is(p.front.served - served, byFront ? 1 : 0);
    } finally {
      c.close();
    }
  }
});

test.serial('timeouts: an idle connection closes after keepAliveTimeout, a head that does not come whole is 408', async (t) => {
  const server = h.server(p.portF);
  const [keepAlive, headers] = [server.keepAliveTimeout, server.headersTimeout];
  server.keepAliveTimeout = 1000;
  server.headersTimeout = 1000;
  try {
    const idle = new Raw(p.portF);
    await idle.write(req('POST', Q, QUERY));
    const [a] = await idle.until(1);
    t.is(a.headers['keep-alive'], 'timeout=1');
    await idle.untilClosed();

    const slow = new Raw(p.portF);
    await slow.write(`POST ${Q} HTTP/1.1\r\nHost: x\r\n`);
    await slow.untilClosed();
    t.is(slow.answers.length, 1);
    t.is(slow.answers[0].status, 408);
    t.deepEqual(Object.keys(slow.answers[0].headers), ['connection']);
    t.is(slow.answers[0].headers.connection, 'close');

    const silent = new Raw(p.portF);
    await silent.untilClosed();
    t.is(silent.rest(), '', 'a connection that never sends is closed without an answer');
  } finally {
    server.keepAliveTimeout = keepAlive;
    server.headersTimeout = headers;
  }
});

test.serial('closing: idle connections close at once, one being answered closes after its answer', async (t) => {
  // A pair of its own: closing is for good.
  const q = await h.pair(h.config());
  const idle = new Raw(q.portF);
  const busy = new Raw(q.portF);
  try {
    await idle.write(req('POST', Q, QUERY));
    await idle.until(1);
    // A request whose body is still coming when closing starts: the front waits for it.
    const text = req('POST', Q, QUERY);
    await busy.write(text.slice(0, text.length - 3));
    await waitFor('the front to hold one idle connection and one reading a request', () => {
      const n = q.front.counts();
      return n.idle === 1 && n.reading === 1;
    });
    q.front.closeIdle();
    await idle.untilClosed();
    t.false(busy.closed);
    await busy.write(text.slice(text.length - 3));
    const [a] = await busy.until(1);
    t.is(a.status, 200);
    t.is(a.headers.connection, 'close', 'the answer given while closing says so');
    await busy.untilClosed();
  } finally {
    idle.close();
    busy.close();
  }
});
