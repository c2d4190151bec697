/**
 * JSON request bodies, read with a size limit.
 *
 * Owns: reading the body of a matched route, the `service.max_request_size_mb` limit
 * (413), and the reference's 400 "Format error in JSON body: ..." for JSON that does
 * not parse. Must never: read a body for a route that did not match (an unknown path
 * answers 404 whatever it was sent), or keep more than the limit in memory.
 */

import type { IncomingMessage } from 'node:http';
import type { Context, Next } from 'koa';

import { FormatError } from '../../common/errors';
import { ClientClosedError, PayloadTooLargeError } from '../errors';

declare module 'koa' {
  interface Request {
    /** The parsed JSON body; undefined when the request had none. */
    body?: unknown;
  }
}

const METHODS_WITH_BODY = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** Route middleware: parses a JSON body of at most `limitBytes` into `ctx.request.body`. */
export function jsonBody(limitBytes: number) {
  return async function parseJsonBody(ctx: Context, next: Next): Promise<void> {
    if (METHODS_WITH_BODY.has(ctx.method)) ctx.request.body = await readJsonBody(ctx.req, limitBytes);
    await next();
  };
}

/** The request's JSON body (undefined when empty), read with the size limit: 413 over it, 400 when it does not parse. */
export async function readJsonBody(req: IncomingMessage, limitBytes: number): Promise<unknown> {
  const raw = await readLimited(req, limitBytes);
  return raw.length === 0 ? undefined : parseJson(raw);
}

function parseJson(raw: Buffer): unknown {
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw new FormatError(err instanceof Error ? err.message : String(err));
  }
}

function tooLarge(limitBytes: number): PayloadTooLargeError {
  const mb = limitBytes / (1024 * 1024);
  return new PayloadTooLargeError(`request body is larger than the limit of ${mb} MB (service.max_request_size_mb)`);
}

function readLimited(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  // Refuse before reading when the client says how much it will send.
  if (Number.isFinite(declared) && declared > limitBytes) {
    discard(req);
    return Promise.reject(tooLarge(limitBytes));
  }
  // The client left before the body was read (while an async guard decided): no
  // stream event will ever come, so answer now instead of waiting forever.
  if (req.destroyed) return Promise.reject(new ClientClosedError('the client went away before its body was read'));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > limitBytes) {
        cleanup();
        discard(req);
        reject(tooLarge(limitBytes));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, received));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const onAborted = () => {
      cleanup();
      reject(new ClientClosedError('the client went away while its body was being read'));
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}

/** Lets the rest of a refused body flow away unread, so the client can read the answer. */
function discard(req: IncomingMessage): void {
  req.on('error', () => {});
  req.resume();
}
