/**
 * How a route is declared: method, pattern in the reference's OpenAPI spelling
 * (`/collections/{collection_name}/points`), then its middleware chain.
 *
 * Owns: turning that spelling into a router path, remembering the matched pattern
 * (metrics, telemetry and the request log label requests with it), and putting the
 * JSON body reader in front of the handlers of methods that carry a body.
 */

import type { Context, Middleware, Next } from 'koa';
import type { Router } from '@koa/router';

import { ok } from '../envelope';
import { jsonBody } from './body';
import type { VectorPlaces } from './json-numbers';
import { accessOf } from './auth';
import type { DirectHandler, DirectLane } from './direct';
import type { RequestInput } from '../request/parse';

import type { HttpMethod } from './method';

export type { HttpMethod };

const ROUTE_PATTERN = Symbol('quiver.routePattern');

type Labelled = { [ROUTE_PATTERN]?: string };

/** The pattern of the route that matched this request, or null. */
export function matchedRoute(ctx: Context): string | null {
  return (ctx as unknown as Labelled)[ROUTE_PATTERN] ?? null;
}

/** `/collections/{collection_name}` -> `/collections/:collection_name`. */
export function routerPath(pattern: string): string {
  return pattern.replace(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g, ':$1');
}

/** The access check of a route (ts/api/rest/auth.ts), or null when it is open. */
export type Guard = (method: HttpMethod, pattern: string) => Middleware | null;

export class RouteTable {
  constructor(
    private readonly router: Router,
    private readonly bodyLimitBytes: number,
    private readonly guard: Guard,
    /** Where addDirect also puts its routes (ts/api/rest/direct.ts); null: Koa serves them alone. */
    private readonly lane: DirectLane | null = null,
  ) {}

  add(method: HttpMethod, pattern: string, ...handlers: Middleware[]): void {
    this.register(method, pattern, method !== 'GET' ? 'none' : null, handlers);
  }

  /** A route that writes points: as `add`, with the dense vectors of its body read as Float32Arrays (body.ts jsonBody). */
  addPointWrite(method: HttpMethod, pattern: string, ...handlers: Middleware[]): void {
    this.register(method, pattern, 'point-writes', handlers);
  }

  /**
   * A JSON route whose handler reads only params, query and body and returns the
   * `result` of its 200 envelope: served by the direct lane, and by Koa when the lane
   * passes a request on (both call `handler`). `places`: where its bodies hold dense
   * vectors read as Float32Arrays (json-numbers.ts).
   */
  addDirect(method: HttpMethod, pattern: string, handler: DirectHandler, places: VectorPlaces = 'none'): void {
    this.register(method, pattern, places, [async (ctx: Context) => ok(ctx, await handler(Object.assign(ctx as unknown as RequestInput, { access: accessOf(ctx) })))]);
    this.lane?.add(method, pattern, handler, places);
  }

  /** A route whose handler reads the request body itself, as a stream (uploads). */
  addStreaming(method: HttpMethod, pattern: string, ...handlers: Middleware[]): void {
    this.register(method, pattern, null, handlers);
  }

  /** `json`: the body is JSON, with vectors read as float32 in these places; null: the handlers read the body. */
  private register(method: HttpMethod, pattern: string, json: VectorPlaces | null, handlers: Middleware[]): void {
    const label = async (ctx: Context, next: Next) => {
      (ctx as unknown as Labelled)[ROUTE_PATTERN] = pattern;
      await next();
    };
    const chain: Middleware[] = [label];
    // Access first: a caller without it never gets a body read.
    const guard = this.guard(method, pattern);
    if (guard) chain.push(guard);
    if (json !== null) chain.push(jsonBody(this.bodyLimitBytes, json));
    chain.push(...handlers);
    this.router.register(routerPath(pattern), [method], chain as never);
  }
}
