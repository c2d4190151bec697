/**
 * `GET /collections/{name}/optimizations` in the reference's JSON form
 * (OptimizationsResponse): the query parameters `with` (queued, completed,
 * idle_segments) and `completed_limit` (default 16), and the answer built from the
 * collection's optimizer jobs on this peer (ts/shard/optimization-log.ts).
 *
 * Owns: that parsing and that answer's shape. Must never: know a transport or change
 * anything.
 */

import type { Collection } from '../../collection/collection';
import { QueryFormatError } from '../errors';
import type { RequestInput } from './parse';

const WITH = ['queued', 'completed', 'idle_segments'] as const;
type With = (typeof WITH)[number];

export interface OptimizationsQuery {
  with: ReadonlySet<With>;
  completedLimit: number;
}

export function parseOptimizationsQuery(ctx: Pick<RequestInput, 'query'>): OptimizationsQuery {
  const raw = ctx.query.with;
  const out = new Set<With>();
  if (raw !== undefined) {
    for (const part of String(raw).split(',')) {
      const w = part.trim();
      if (w === '') continue;
      if (!(WITH as readonly string[]).includes(w)) throw new QueryFormatError(`with: unknown variant \`${w}\`, expected one of ${WITH.map((x) => `\`${x}\``).join(', ')}`);
      out.add(w as With);
    }
  }
  const l = ctx.query.completed_limit;
  if (l !== undefined && !/^[0-9]+$/.test(String(l))) throw new QueryFormatError('completed_limit: invalid digit found in string');
  return { with: out, completedLimit: l === undefined ? 16 : Number(l) };
}

/** OptimizationsResponse of `c`. */
export function optimizationsAnswer(c: Collection, q: OptimizationsQuery): Record<string, unknown> {
  const o = c.optimizations();
  const out: Record<string, unknown> = {
    summary: {
      queued_optimizations: o.queued.length,
      queued_segments: o.queued.reduce((n, p) => n + p.segments.length, 0),
      queued_points: o.queued.reduce((n, p) => n + p.segments.reduce((m, s) => m + s.points_count, 0), 0),
      idle_segments: o.idle.length,
    },
    running: o.running,
  };
  if (q.with.has('queued')) out.queued = o.queued;
  if (q.with.has('completed')) out.completed = o.completed.slice(0, q.completedLimit);
  if (q.with.has('idle_segments')) out.idle_segments = o.idle;
  return out;
}
