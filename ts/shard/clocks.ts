/**
 * Clock tags: which operations a replica of a shard has seen.
 *
 * Owns: the tag every WAL record carries, `(peer id, clock id, tick)`; the per-shard
 * map of the highest tick applied per (peer, clock); the writer's set of clocks.
 * Must never: touch the WAL or shard state, or know how tags travel between peers.
 *
 * A writer (a peer) owns several clocks. An operation takes a clock that no other
 * operation in flight holds and the next tick of that clock, so the ticks of one clock
 * are applied in order and each (peer, clock, tick) names one operation. A replica
 * records the highest tick it has applied per (peer, clock); an operation whose tick is
 * not above that was applied already and is skipped, which makes re-sending a stretch
 * of history (a wal_delta transfer) idempotent. Ticks start at 1; 0 is never a tick.
 */

export interface ClockTag {
  /** The peer whose writer tagged the operation (u64). */
  peer: bigint;
  /** Which of that writer's clocks (u32). */
  clock: number;
  /** Position on that clock, from 1 (u64). */
  tick: bigint;
}

/** How a clock map is kept in checkpoint.json. */
export interface ClockEntryJson {
  peer: string;
  clock: number;
  tick: string;
}

const U64_MAX = (1n << 64n) - 1n;
const U32_MAX = 0xffff_ffff;

/** What is wrong with a tag, or null. */
export function clockTagProblem(tag: ClockTag): string | null {
  if (typeof tag.peer !== 'bigint' || tag.peer < 0n || tag.peer > U64_MAX) return 'peer is not an unsigned 64-bit integer';
  if (!Number.isInteger(tag.clock) || tag.clock < 0 || tag.clock > U32_MAX) return 'clock is not an unsigned 32-bit integer';
  if (typeof tag.tick !== 'bigint' || tag.tick < 1n || tag.tick > U64_MAX) return 'tick is not an integer from 1 to 2^64-1';
  return null;
}

/**
 * Clock ids from here up tag replicated writes (a peer's writer clocks, reserved per peer
 * in ts/storage/writer-clocks.ts); below it, a shard's own writer tags the writes made to
 * it without a tag (a single node's writes, the batches of a stream_records transfer).
 * A replica's map of replicated clocks says which replicated writes its data holds;
 * local clocks say nothing another replica can compare.
 */
export const REPLICATED_CLOCK_BASE = 1 << 20;

/** Whether a clock tags replicated writes (not a shard's own untagged writes). */
export function isReplicatedClock(clock: number): boolean {
  return clock >= REPLICATED_CLOCK_BASE;
}

/** A (peer, clock) pair as one Map key. */
export function clockKey(peer: bigint, clock: number): string {
  return `${peer}/${clock}`;
}

/** The highest tick applied per (peer, clock) in one shard. */
export class ClockMap {
  private readonly ticks = new Map<string, ClockTag>();

  /** Highest tick applied on (peer, clock); 0n when none was. */
  tickOf(peer: bigint, clock: number): bigint {
    return this.ticks.get(clockKey(peer, clock))?.tick ?? 0n;
  }

  /** Whether the operation with this tag was applied already. */
  seen(tag: ClockTag): boolean {
    return tag.tick <= this.tickOf(tag.peer, tag.clock);
  }

  /** Records the tag's tick if it is newer than the one recorded; returns whether it was. */
  advance(tag: ClockTag): boolean {
    const k = clockKey(tag.peer, tag.clock);
    const cur = this.ticks.get(k);
    if (cur !== undefined && cur.tick >= tag.tick) return false;
    this.ticks.set(k, { peer: tag.peer, clock: tag.clock, tick: tag.tick });
    return true;
  }

  /** Every (peer, clock) with its highest tick, sorted by peer then clock. */
  entries(): ClockTag[] {
    return [...this.ticks.values()].map((t) => ({ ...t })).sort((a, b) => (a.peer === b.peer ? a.clock - b.clock : a.peer < b.peer ? -1 : 1));
  }

  get size(): number {
    return this.ticks.size;
  }

  toJSON(): ClockEntryJson[] {
    return this.entries().map((t) => ({ peer: t.peer.toString(), clock: t.clock, tick: t.tick.toString() }));
  }

  static fromJSON(entries: readonly ClockEntryJson[]): ClockMap {
    const m = new ClockMap();
    for (const e of entries) m.advance({ peer: BigInt(e.peer), clock: e.clock, tick: BigInt(e.tick) });
    return m;
  }
}

/** What is wrong with the `clocks` of a checkpoint.json, or null. */
export function clockMapJsonProblem(x: unknown): string | null {
  if (!Array.isArray(x)) return 'clocks is not an array';
  for (const e of x as unknown[]) {
    const c = e as Partial<ClockEntryJson>;
    if (typeof c !== 'object' || c === null || typeof c.peer !== 'string' || typeof c.tick !== 'string' || !/^[0-9]{1,20}$/.test(c.peer) || !/^[0-9]{1,20}$/.test(c.tick)) {
      return `clocks entry ${JSON.stringify(e)} is not { peer, clock, tick }`;
    }
    const problem = clockTagProblem({ peer: BigInt(c.peer), clock: c.clock as number, tick: BigInt(c.tick) });
    if (problem !== null) return `clocks entry ${JSON.stringify(e)}: ${problem}`;
  }
  return null;
}

/**
 * The clocks of one writer. `acquire` hands out the lowest clock id no operation in
 * flight holds (a new one when all are held), so concurrent operations get distinct
 * clocks and the number of clocks stays at the most operations ever in flight at once.
 * The ticks themselves come from the shard's ClockMap (one past the highest applied).
 */
export class ClockSet {
  private readonly held: boolean[] = [];

  acquire(): number {
    let id = this.held.indexOf(false);
    if (id < 0) id = this.held.push(false) - 1;
    this.held[id] = true;
    return id;
  }

  release(id: number): void {
    if (id < this.held.length) this.held[id] = false;
  }

  /** Clocks created so far (held or not). */
  get size(): number {
    return this.held.length;
  }
}
