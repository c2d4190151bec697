/**
 * `GET /issues` and `DELETE /issues`: the performance advisories of this peer's
 * collections (ts/collection/issues.ts) as the reference reports them
 * (`{"issues": [IssueRecord]}`); a collection-scoped caller sees its collections' only.
 *
 * Owns: those two routes. Must never: decide access (the guard checked the route) or
 * change data.
 */

import type { Context } from 'koa';

import { canSee } from '../../auth/access';
import type { TableOfContent } from '../../storage/toc';
import { ok } from '../envelope';
import { accessOf } from './auth';
import type { RouteTable } from './route';

export function addIssueRoutes(routes: RouteTable, toc: TableOfContent): void {
  routes.add('GET', '/issues', (ctx: Context) => {
    const access = accessOf(ctx);
    const issues = toc
      .all()
      .filter((c) => canSee(access, c.name))
      .flatMap((c) => c.issues.all())
      .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    ok(ctx, { issues });
  });

  routes.add('DELETE', '/issues', (ctx: Context) => {
    for (const c of toc.all()) c.issues.clear();
    ok(ctx, true);
  });
}
