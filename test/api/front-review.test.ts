/**
 * Review of the HTTP front (ts/api/rest/front.ts): cases where it differed from node:http
 * alone. Each test sends the same bytes to F (the front) and, where it compares, to B
 * (Koa on node:http alone): test/api/lane-pair.ts.
 */

import * as net from 'node:net';

import test from 'ava';

import { RawClient as Raw, rawRequest as req } from '../support/raw-http';

import { waitFor } from '../support/wait';
import { LaneHarness, type LanePair } from './lane-pair';

let h: LaneHarness;
let p: LanePair;

const C = 'front_review';
const QUERY = JSON.stringify({ query: [0.1, 0.2, 0.3, 0.4], limit: 2 });
const Q = `/collections/${C}/points/query`;

test.before(async () => {
  h = await LaneHarness.open('quiver-front-review-');
  p = await h.pair(h.config());
  const c = new Raw(p.portB);
  await c.write(req('PUT', `/collections/${C}`, JSON.stringify({ vectors: { size: 4, distance: 'Cosine' } })));
  const [status] = await c.untilStatuses(1);
  c.close();
  if (status !== 200) throw new Error(`setup: ${c.text}`);
});

test.after.always(async () => {
  await h?.close();
});

test.serial('an Expect node:http answers itself (417, no request event) is followed by the next request, as on node:http', async (t) => {
  for (const port of [p.portB, p.portF]) {
    const c = new Raw(port);
    try {
      await c.write(req('GET', `/collections/${C}`, undefined, 'Expect: something\r\n') + req('GET', `/collections/${C}/exists`) + req('POST', Q, QUERY));
      t.deepEqual(await c.untilStatuses(3), [417, 200, 200], port === p.portF ? 'front' : 'node:http');
    } finally {
      c.close();
    }
  }
  await waitFor('no connection left waiting for a relayed answer', () => p.front.counts().relayed === 0);
});

test.serial('an answer that closes the connection (Connection: close, HTTP/1.0, 408) closes the socket even when the client keeps its side open', async (t) => {
  const server = h.server(p.portF);
  const headersTimeout = server.headersTimeout;
  server.headersTimeout = 500;
  try {
    for (const [text, status] of [
      [req('POST', Q, QUERY, 'Connection: close\r\n'), 200],
      [req('GET', `/collections/${C}`, undefined, 'Connection: close\r\n'), 200],
      [req('GET', `/collections/${C}`).replace('HTTP/1.1', 'HTTP/1.0'), 200],
      [`POST ${Q} HTTP/1.1\r\nHost: x\r\n`, 408],
    ] as const) {
      const c = new Raw(p.portF, true);
      try {
        await c.write(text);
        t.deepEqual(await c.untilStatuses(1), [status]);
        await waitFor(`the server to close the connection after ${JSON.stringify(text.slice(0, 40))}`, async () => (await h.openConnections(p.portF)) === 0);
        t.false(c.sock.writableEnded, 'the client never ended its side');
      } finally {
        c.close();
      }
    }
  } finally {
    server.headersTimeout = headersTimeout;
  }
});

/** The server-side sockets of server F, as they are accepted. */
function acceptedSockets(): net.Socket[] {
  const sockets: net.Socket[] = [];
  h.server(p.portF).prependListener('connection', (s: net.Socket) => void sockets.push(s));
  return sockets;
}

test.serial('an idle keep-alive connection is timed as node:http times it: the advertised keepAliveTimeout and its grace', async (t) => {
  const server = h.server(p.portF);
  const sockets = acceptedSockets();
  const c = new Raw(p.portF);
  try {
    await c.write(req('POST', Q, QUERY));
    await c.untilStatuses(1);
    t.regex(c.text, new RegExp(`Keep-Alive: timeout=${Math.floor(server.keepAliveTimeout / 1000)}\\r\\n`));
    await waitFor('the server side of the connection', () => sockets.length === 1);
    // node:http: socket.setTimeout(keepAliveTimeout + HTTP_SERVER_KEEP_ALIVE_TIMEOUT_BUFFER (1000 ms)).
    await waitFor('the idle timer', () => (sockets[0] as unknown as { timeout?: number }).timeout === server.keepAliveTimeout + 1000);
    t.pass();
  } finally {
    c.close();
  }
});

test.serial("a lane request's body is under requestTimeout, not headersTimeout; headersTimeout 0 turns that limit off", async (t) => {
  const server = h.server(p.portF);
  const [headersTimeout, requestTimeout] = [server.headersTimeout, server.requestTimeout];
  try {
    // The head comes whole at once; the body's end comes well after headersTimeout.
    server.headersTimeout = 300;
    server.requestTimeout = 60_000;
    const text = req('POST', Q, QUERY);
    const c = new Raw(p.portF);
    try {
      await c.write(text.slice(0, -3));
      const wrote = performance.now();
      await waitFor('the front to read the request', () => p.front.counts().reading === 1);
      // The case is a body that comes after headersTimeout: let that pass (a condition on the clock, not a sleep).
      await waitFor('headersTimeout to pass since the head', () => performance.now() - wrote > 2 * server.headersTimeout);
      await c.write(text.slice(-3));
      t.deepEqual(await c.untilStatuses(1), [200]);
    } finally {
      c.close();
    }
    // headersTimeout 0 (off, as in node:http): a head in two pieces is read, not timed out.
    server.headersTimeout = 0;
    const d = new Raw(p.portF);
    try {
      await d.write(text.slice(0, 20));
      await waitFor('the front to read the request', () => p.front.counts().reading === 1);
      await d.write(text.slice(20));
      t.deepEqual(await d.untilStatuses(1), [200]);
    } finally {
      d.close();
    }
  } finally {
    server.headersTimeout = headersTimeout;
    server.requestTimeout = requestTimeout;
  }
});

test.serial('a head that cannot be a request is 400 at once, as node:http answers it, not 408 once headersTimeout passes', async (t) => {
  for (const text of ['GARBAGE\r\n', `POST ${Q} HTTP/1.1\nHost: x\n`, '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03']) {
    const f = new Raw(p.portF);
    const b = new Raw(p.portB);
    try {
      await f.write(text);
      await b.write(text);
      await waitFor('node:http to close', () => b.closed);
      await waitFor('the front to close', () => f.closed);
      t.is(f.text, b.text, JSON.stringify(text));
      t.regex(f.text, /^HTTP\/1\.1 400 /);
    } finally {
      f.close();
      b.close();
    }
  }
});

test.serial('a client ending its side mid-request gets the 400 node:http gives', async (t) => {
  const text = req('POST', Q, QUERY);
  for (const cut of [`POST ${Q} HTTP/1.1\r\nHo`, text.slice(0, -4)]) {
    const f = new Raw(p.portF);
    const b = new Raw(p.portB);
    try {
      await f.write(cut);
      await b.write(cut);
      await waitFor('the front to read the request', () => p.front.counts().reading === 1);
      f.sock.end();
      b.sock.end();
      await waitFor('node:http to close', () => b.closed);
      await waitFor('the front to close', () => f.closed);
      t.is(f.text, b.text, JSON.stringify(cut));
      t.regex(f.text, /^HTTP\/1\.1 400 /);
    } finally {
      f.close();
      b.close();
    }
  }
});

test.serial('a large lane body in small pieces is answered as node:http answers it', async (t) => {
  const q = await h.pair(h.config({ SERVICE__SERVICE__MAX_REQUEST_SIZE_MB: '8' }));
  const body = JSON.stringify({ query: [0.1, 0.2, 0.3, 0.4], limit: 2, filter: { must: [{ key: 'k', match: { any: Array.from({ length: 200_000 }, (_, i) => `v${i}`) } }] } });
  t.true(body.length > 1_500_000);
  const text = Buffer.from(req('POST', Q, body));
  const answers: string[] = [];
  for (const port of [q.portF, q.portB]) {
    const c = new Raw(port);
    try {
      for (let i = 0; i < text.length; i += 4096) await c.write(text.subarray(i, i + 4096));
      await c.untilStatuses(1);
      await waitFor('the whole answer', () => {
        const end = c.text.indexOf('\r\n\r\n');
        const m = /Content-Length: (\d+)/.exec(c.text);
        return end > 0 && m !== null && c.text.length >= end + 4 + Number(m[1]);
      });
      answers.push(c.text.slice(c.text.indexOf('\r\n\r\n') + 4).replace(/"time":[0-9.e+-]+/, ''));
    } finally {
      c.close();
    }
  }
  t.is(answers[0], answers[1]);
  t.true(q.front.served > 0, JSON.stringify([q.front.served, q.koaHits, answers[0].slice(0, 200)]));
});
