/** Sparse vectors for tests: random term-like vectors and the brute-force scorer every sparse test compares with. */

export type Sparse = { indices: number[]; values: number[] };

/** A random sparse vector: term-like ids (skewed to small ones), coarse values (exact sums), indices unsorted. */
export function randomSparse(r: () => number, maxNnz: number, dims: number): Sparse {
  const m = new Map<number, number>();
  const n = 1 + Math.floor(r() * maxNnz);
  // `+ 0`: no -0 (JSON writes it as 0).
  while (m.size < n) m.set(Math.floor(r() * r() * dims), Math.round(r() * 16 - 4) / 4 + 0);
  const e = [...m].sort(() => r() - 0.5);
  return { indices: e.map(([i]) => i), values: e.map(([, v]) => v) };
}

/** Points sharing an index with q, by dot product (f32 result), ties by id ascending; `weight` scales query values (IDF). */
export function bruteForce(points: Map<number, Sparse>, q: Sparse, k: number, keep: (id: number) => boolean = () => true, weight?: (dim: number) => number): Array<{ id: number; score: number }> {
  const out: Array<{ id: number; score: number }> = [];
  for (const [id, v] of points) {
    if (!keep(id)) continue;
    const m = new Map(v.indices.map((d, i) => [d, Math.fround(v.values[i])]));
    let hit = false;
    let s = 0;
    q.indices.forEach((d, i) => {
      const x = m.get(d);
      if (x === undefined) return;
      hit = true;
      s += x * (weight ? Math.fround(Math.fround(q.values[i]) * weight(d)) : Math.fround(q.values[i]));
    });
    if (hit) out.push({ id, score: Math.fround(s) });
  }
  out.sort((a, b) => b.score - a.score || a.id - b.id);
  return out.slice(0, k);
}

