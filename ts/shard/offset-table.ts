/**
 * A table keyed by a shard's point offsets (numbers below 2^53: OFFSET_LIMIT in
 * id-tracker.ts), or by other non-negative integers that are often dense (integer
 * point ids), with the interface of a `Map<number, V>`. Offsets come from a
 * counter, so while the keys are not much sparser than their range the table is a
 * plain array indexed by offset: a million entries are set in a few tens of
 * milliseconds where a Map takes several times that, which counts when a shard of a
 * million points loads. When the keys get sparse (the range more than SPARSE_RATIO
 * times their number, beyond a floor) the table turns into a Map for good.
 * Iteration is in ascending offset order while dense, in insertion order once sparse.
 *
 * Owns: the two representations and the switch. Must never: answer differently from
 * a Map holding the same entries, or hold a key that is not a non-negative integer.
 */

/** A dense table may span this many times more offsets than it holds (plus DENSE_FLOOR) before it turns into a Map. */
const SPARSE_RATIO = 4;
const DENSE_FLOOR = 1 << 16;

export class OffsetTable<V> {
  /** Dense form: the value at each offset, undefined where there is none. */
  private slots: Array<V | undefined> | null = [];
  private count = 0;
  /** Sparse form (slots is then null). */
  private map: Map<number, V> | null = null;

  get size(): number {
    return this.slots !== null ? this.count : this.map!.size;
  }

  get(offset: number): V | undefined {
    return this.slots !== null ? this.slots[offset] : this.map!.get(offset);
  }

  has(offset: number): boolean {
    return this.get(offset) !== undefined;
  }

  /** `value` must not be undefined (undefined marks a free slot). */
  set(offset: number, value: V): this {
    if (!Number.isSafeInteger(offset) || offset < 0) throw new RangeError(`offset table key ${offset} is not a non-negative integer`);
    const slots = this.slots;
    if (slots !== null) {
      if (offset < slots.length) {
        if (slots[offset] === undefined) this.count++;
        slots[offset] = value;
        return this;
      }
      if (offset < SPARSE_RATIO * (this.count + 1) + DENSE_FLOOR) {
        // Filled up to the offset one slot at a time, so the array never has holes
        // (a store far past its end would turn it into a slow dictionary).
        while (slots.length < offset) slots.push(undefined);
        slots.push(value);
        this.count++;
        return this;
      }
      this.toMap();
    }
    this.map!.set(offset, value);
    return this;
  }

  delete(offset: number): boolean {
    const slots = this.slots;
    if (slots === null) return this.map!.delete(offset);
    if (offset >= slots.length || slots[offset] === undefined) return false;
    slots[offset] = undefined;
    this.count--;
    return true;
  }

  *keys(): IterableIterator<number> {
    const slots = this.slots;
    if (slots === null) {
      yield* this.map!.keys();
      return;
    }
    for (let i = 0; i < slots.length; i++) if (slots[i] !== undefined) yield i;
  }

  *values(): IterableIterator<V> {
    const slots = this.slots;
    if (slots === null) {
      yield* this.map!.values();
      return;
    }
    for (let i = 0; i < slots.length; i++) {
      const v = slots[i];
      if (v !== undefined) yield v;
    }
  }

  *entries(): IterableIterator<[number, V]> {
    const slots = this.slots;
    if (slots === null) {
      yield* this.map!.entries();
      return;
    }
    for (let i = 0; i < slots.length; i++) {
      const v = slots[i];
      if (v !== undefined) yield [i, v];
    }
  }

  private toMap(): void {
    const m = new Map<number, V>();
    const slots = this.slots!;
    for (let i = 0; i < slots.length; i++) {
      const v = slots[i];
      if (v !== undefined) m.set(i, v);
    }
    this.map = m;
    this.slots = null;
    this.count = 0;
  }
}
