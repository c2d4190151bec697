/**
 * The test's own grouping: the brute-force answer of a grouped query, from the ranking of
 * every candidate point (best first), by the rules the reference documents and its
 * aggregator applies: the values under the key (a path `a.b` or `a[].b` walks arrays of
 * objects) with arrays expanded one level; every value must be a string or an integer,
 * or the point is in no group; a point joins each of its distinct values' groups; groups
 * come in the order of their best hit, each with its best `size` hits.
 */

export interface RankedPoint {
  id: number | string;
  score: number;
  payload?: Record<string, unknown>;
}

export interface ExpectedGroup {
  id: string | number;
  hits: Array<{ id: number | string; score: number }>;
}

/** Values at a dotted path (`[]` after a segment is the same as walking its array). */
export function valuesAt(payload: unknown, key: string): unknown[] {
  let cur: unknown[] = [payload];
  for (const seg of key.split('.')) {
    const name = seg.replace(/\[\]$/, '');
    const next: unknown[] = [];
    const visit = (v: unknown) => {
      if (Array.isArray(v)) v.forEach(visit);
      else if (v !== null && typeof v === 'object' && name in v) next.push((v as Record<string, unknown>)[name]);
    };
    cur.forEach(visit);
    cur = seg.endsWith('[]') ? next.flatMap((v) => (Array.isArray(v) ? v : [])) : next;
  }
  return cur;
}

export function groupValues(payload: unknown, key: string): Array<string | number> | null {
  const out: Array<string | number> = [];
  for (const raw of valuesAt(payload, key)) {
    for (const v of Array.isArray(raw) ? raw : [raw]) {
      if (typeof v === 'string' || (typeof v === 'number' && Number.isInteger(v))) {
        if (!out.includes(v)) out.push(v);
      } else return null;
    }
  }
  return out;
}

export function bruteForceGroups(ranking: RankedPoint[], key: string, limit: number, size: number): ExpectedGroup[] {
  const groups = new Map<string, ExpectedGroup>();
  for (const p of ranking) {
    const values = groupValues(p.payload ?? {}, key);
    if (values === null) continue;
    for (const v of values) {
      const k = `${typeof v}:${v}`;
      let g = groups.get(k);
      if (!g) groups.set(k, (g = { id: v, hits: [] }));
      if (g.hits.length < size) g.hits.push({ id: p.id, score: p.score });
    }
  }
  return [...groups.values()].slice(0, limit);
}

/** The ids and scores of an answer's groups, as bruteForceGroups gives them. */
export function groupsShape(groups: Array<{ id: string | number; hits: RankedPoint[] }>): ExpectedGroup[] {
  return groups.map((g) => ({ id: g.id, hits: g.hits.map((h) => ({ id: h.id, score: h.score })) }));
}
