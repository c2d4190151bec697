/**
 * A set of engine labels (a shard's point offsets, u64) with the interface of a
 * `Set<bigint>`. A shard's offsets are dense (taken from a counter, below 2^53: see
 * OFFSET_LIMIT in id-tracker.ts), so while the labels are not much sparser than
 * their range the set is one byte per label up to the largest: membership is an
 * array read, and a million labels are added in milliseconds, where a Set of
 * bigints takes most of a second (that was most of the time a shard of a million
 * points took to load). When the labels get sparse (the range more than
 * SPARSE_RATIO times their number, beyond a floor), the set turns into a Set of
 * numbers (bigints for labels from 2^53 on, never a shard's). Iteration is in
 * ascending order while dense, in insertion order once sparse.
 *
 * Owns: the two representations and the switch between them. Must never: answer
 * differently from a Set<bigint> holding the same labels.
 */

import { OFFSET_LIMIT } from './id-tracker';

/** A dense set may span this many times more labels than it holds (plus DENSE_FLOOR) before it turns sparse. */
const SPARSE_RATIO = 16;
const DENSE_FLOOR = 1 << 16;

export class LabelSet implements Iterable<bigint> {
  /** Dense form: `marks[l]` is 1 for a member `l`. */
  private marks: Uint8Array | null = new Uint8Array(0);
  private count = 0;
  /** Sparse form (marks is then null), with its largest label (Infinity once one is a bigint) and the size at which it is checked for density again. */
  private sparse: Set<number | bigint> | null = null;
  private sparseMax = 0;
  private nextCheck = 0;

  constructor(from?: Iterable<bigint> | LabelSet) {
    if (from instanceof LabelSet) {
      this.count = from.count;
      this.marks = from.marks === null ? null : from.marks.slice();
      this.sparse = from.sparse === null ? null : new Set(from.sparse);
      this.sparseMax = from.sparseMax;
      this.nextCheck = from.nextCheck;
      return;
    }
    if (from) for (const l of from) this.add(l);
  }

  get size(): number {
    return this.sparse === null ? this.count : this.sparse.size;
  }

  has(label: bigint): boolean {
    const marks = this.marks;
    if (marks !== null) return label < marks.length && marks[Number(label)] === 1;
    return this.sparse!.has(label < OFFSET_LIMIT ? Number(label) : label);
  }

  add(label: bigint): this {
    if (label < 0n) throw new RangeError(`label ${label} is negative`);
    const marks = this.marks;
    if (marks !== null) {
      if (label < marks.length) {
        const i = Number(label);
        if (marks[i] === 0) {
          marks[i] = 1;
          this.count++;
        }
        return this;
      }
      if (label < OFFSET_LIMIT && Number(label) < SPARSE_RATIO * (this.count + 1) + DENSE_FLOOR) {
        const grown = new Uint8Array(Math.max(Number(label) + 1, marks.length * 2, 1024));
        grown.set(marks);
        this.marks = grown;
        grown[Number(label)] = 1;
        this.count++;
        return this;
      }
      this.toSparse();
    }
    const sparse = this.sparse!;
    if (label < OFFSET_LIMIT) {
      const n = Number(label);
      sparse.add(n);
      if (n > this.sparseMax) this.sparseMax = n;
    } else {
      sparse.add(label);
      this.sparseMax = Infinity;
    }
    // Labels added in no particular order (a graph's) may be dense after all.
    if (sparse.size >= this.nextCheck) {
      if (this.sparseMax < SPARSE_RATIO * sparse.size + DENSE_FLOOR) this.toDense();
      else this.nextCheck = sparse.size * 2;
    }
    return this;
  }

  delete(label: bigint): boolean {
    const marks = this.marks;
    if (marks !== null) {
      if (label >= marks.length || marks[Number(label)] === 0) return false;
      marks[Number(label)] = 0;
      this.count--;
      return true;
    }
    return this.sparse!.delete(label < OFFSET_LIMIT ? Number(label) : label);
  }

  clear(): void {
    this.marks = new Uint8Array(0);
    this.count = 0;
    this.sparse = null;
    this.sparseMax = 0;
    this.nextCheck = 0;
  }

  *[Symbol.iterator](): IterableIterator<bigint> {
    const marks = this.marks;
    if (marks !== null) {
      for (let i = 0; i < marks.length; i++) if (marks[i] === 1) yield BigInt(i);
      return;
    }
    for (const k of this.sparse!) yield typeof k === 'number' ? BigInt(k) : k;
  }

  private toSparse(): void {
    const s = new Set<number | bigint>();
    const marks = this.marks!;
    for (let i = 0; i < marks.length; i++) if (marks[i] === 1) s.add(i);
    this.sparse = s;
    this.marks = null;
    this.count = 0;
    this.sparseMax = marks.length - 1;
    this.nextCheck = Math.max(1024, s.size * 2);
  }

  /** Back to the dense form (every label is then a number below sparseMax + 1). */
  private toDense(): void {
    const marks = new Uint8Array(this.sparseMax + 1);
    for (const k of this.sparse!) marks[k as number] = 1;
    this.count = this.sparse!.size;
    this.marks = marks;
    this.sparse = null;
  }
}
