/**
 * The error kinds, their HTTP status table and the error middleware, in process: every kind answers with the
 * reference's status and prefix, and an unexpected error never shows its internals.
 */

import test from 'ava';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import Koa from 'koa';
import pino from 'pino';
import { Writable } from 'node:stream';

import { accepted, markRequestStart, ok } from '../../ts/api/envelope';
import { AlreadyExistsError, BadInputError, BadRequestError, ChecksumMismatchError, ERROR_PREFIX, ForbiddenError, FormatError, NotFoundError, NotImplementedError, QuiverError, ServiceError, ShardUnavailableError, StandaloneModeError, TimeoutError, ValidationError } from '../../ts/common/errors';
import { ClientClosedError, HTTP_STATUS, PayloadTooLargeError, QueryFormatError, errorMiddleware, httpStatusOf } from '../../ts/api/errors';

test('each error kind answers with the status and message prefix the reference uses', (t) => {
  const cases: Array<[QuiverError, number, string]> = [
    [new BadInputError('x'), 400, 'Wrong input: x'],
    [new AlreadyExistsError('Collection `c` already exists!'), 409, 'Wrong input: Collection `c` already exists!'],
    [new NotFoundError("Collection `c` doesn't exist!"), 404, "Not found: Collection `c` doesn't exist!"],
    [new ServiceError('x'), 500, 'Service internal error: x'],
    [new BadRequestError('x'), 400, 'Bad request: x'],
    [new StandaloneModeError(), 405, 'Quiver is running in standalone mode'],
    [new ForbiddenError('Global access is required'), 403, 'Forbidden: Global access is required'],
    [new TimeoutError('x'), 408, 'Timeout: x'],
    [new ChecksumMismatchError('aa', 'bb'), 400, 'Checksum mismatch: expected aa, actual bb'],
    [new ShardUnavailableError('x'), 503, 'Shard temporarily unavailable: x'],
    [new ValidationError('x'), 422, 'Validation error in JSON body: x'],
    [new FormatError('x'), 400, 'Format error in JSON body: x'],
    [new NotImplementedError('x'), 501, 'Not implemented: x'],
  ];
  for (const [err, status, message] of cases) {
    t.is(httpStatusOf(err), status, err.kind);
    t.is(HTTP_STATUS[err.kind], status, err.kind);
    t.is(err.message, message, err.kind);
    t.is(err.message.startsWith(ERROR_PREFIX[err.kind]), true, err.kind);
  }
  // The kinds only HTTP has.
  const http: Array<[QuiverError<string>, number, string]> = [
    [new QueryFormatError('x'), 400, 'Deserialize error in query parameters: x'],
    [new PayloadTooLargeError('x'), 413, 'Payload too large: x'],
    [new ClientClosedError('x'), 499, 'Client closed request: x'],
  ];
  for (const [err, status, message] of http) {
    t.is(httpStatusOf(err), status, err.kind);
    t.is(err.message, message, err.kind);
  }
});

async function serve(app: Koa): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer(app.callback());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(() => r())) };
}

function appThatThrows(err: unknown, logged: string[]): Koa {
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      logged.push(chunk.toString());
      done();
    },
  });
  const app = new Koa();
  app.use(async (ctx, next) => {
    markRequestStart(ctx);
    await next();
  });
  app.use(errorMiddleware(pino(sink)));
  app.use(() => {
    throw err;
  });
  return app;
}

test('an unexpected error answers 500 without its message or stack, and is logged', async (t) => {
  const logged: string[] = [];
  const server = await serve(appThatThrows(new Error('secret detail at /srv/quiver/x.ts:12'), logged));
  try {
    const res = await fetch(server.url);
    t.is(res.status, 500);
    const body = (await res.json()) as { status: { error: string }; time: number };
    t.true(body.status.error.startsWith('Service internal error: '));
    t.false(JSON.stringify(body).includes('secret'));
    t.false(JSON.stringify(body).includes('.ts'));
    t.is(typeof body.time, 'number');
    t.true(logged.some((line) => line.includes('secret detail') && line.includes('stack')));
  } finally {
    await server.close();
  }
});

test('an QuiverError answers its envelope', async (t) => {
  const server = await serve(appThatThrows(new NotFoundError('No point with id 7 found'), []));
  try {
    const res = await fetch(server.url);
    t.is(res.status, 404);
    const body = (await res.json()) as { status: { error: string }; time: number };
    t.deepEqual(Object.keys(body).sort(), ['status', 'time']);
    t.is(body.status.error, 'Not found: No point with id 7 found');
    t.true(body.time >= 0 && body.time < 5);
  } finally {
    await server.close();
  }
});

test('ok() and accepted() build the success envelopes', async (t) => {
  const app = new Koa();
  app.use(async (ctx) => {
    markRequestStart(ctx);
    if (ctx.path === '/ok') ok(ctx, { exists: true });
    else accepted(ctx);
  });
  const server = await serve(app);
  try {
    const okRes = await fetch(`${server.url}/ok`);
    t.is(okRes.status, 200);
    const okBody = (await okRes.json()) as Record<string, unknown>;
    t.deepEqual(okBody.result, { exists: true });
    t.is(okBody.status, 'ok');
    t.is(typeof okBody.time, 'number');

    const acc = await fetch(`${server.url}/later`);
    t.is(acc.status, 202);
    const accBody = (await acc.json()) as Record<string, unknown>;
    t.is(accBody.status, 'accepted');
    t.false('result' in accBody);
  } finally {
    await server.close();
  }
});
