/**
 * The clocks this peer tags replicated writes with (ts/shard/clocks.ts): every write to
 * a shard of a cluster collection carries (this peer, clock, tick), the same on every
 * replica, so a replica skips a write it has seen and a WAL delta can be computed.
 *
 * Owns: clock ids that are never reused, across restarts too: ids are handed out from
 * blocks reserved in `storage/writer_clocks.json` (the file is written, fsynced, before
 * any id of a block is used), so a restarted peer starts on fresh clocks at tick 1 and
 * never repeats a (clock, tick) a replica has seen. Per shard, a write takes a clock no
 * other write in flight holds, at its next tick; a tick that no replica logged is given
 * back. Must never: know replicas or the network.
 *
 * Ids start at 2^20, above the clocks a local shard's own writer uses (ts/shard: one per
 * write in flight, from 0), so the two never share a (peer, clock).
 */

import * as path from 'node:path';

import { readJson, writeFileAtomic } from '../common/files';
import type { HeldClock } from '../collection/cluster-link';
import { REPLICATED_CLOCK_BASE } from '../shard/clocks';

const FIRST_ID = REPLICATED_CLOCK_BASE;
const BLOCK = 1 << 16;
const U32_MAX = 0xffff_ffff;

interface Slot {
  clock: number;
  tick: bigint;
  held: boolean;
}

export class WriterClocks {
  /** Next id to hand out, and the end of the reserved block. */
  private next: number;
  private end: number;
  private reserving: Promise<void> | null = null;
  private readonly shards = new Map<string, Slot[]>();

  private constructor(
    private readonly file: string,
    start: number,
  ) {
    this.next = start;
    this.end = start + BLOCK;
  }

  static async open(storagePath: string): Promise<WriterClocks> {
    const file = path.join(storagePath, 'writer_clocks.json');
    const saved = await readJson<{ next: number }>(file);
    const start = saved !== null && Number.isInteger(saved.next) && saved.next >= FIRST_ID ? saved.next : FIRST_ID;
    if (start + 2 * BLOCK > U32_MAX) throw new Error(`${file}: clock ids are exhausted (${start}); this peer needs a new storage directory`);
    await writeFileAtomic(file, JSON.stringify({ next: start + BLOCK }));
    return new WriterClocks(file, start);
  }

  /** A clock for one write to the shard `key`: released by the write. */
  take(key: string): HeldClock {
    let slots = this.shards.get(key);
    if (!slots) this.shards.set(key, (slots = []));
    let slot = slots.find((s) => !s.held);
    if (!slot) {
      slot = { clock: this.newId(), tick: 0n, held: false };
      slots.push(slot);
    }
    const s = slot;
    s.held = true;
    s.tick++;
    const tick = s.tick;
    return {
      clock: s.clock,
      tick,
      release(used: boolean) {
        if (!used && s.tick === tick) s.tick--;
        s.held = false;
      },
    };
  }

  private newId(): number {
    if (this.next >= this.end) throw new Error('writer clock ids of the reserved block are used up while the next block is being reserved');
    const id = this.next++;
    if (this.end - this.next < BLOCK / 2 && this.reserving === null) {
      const end = this.end + BLOCK;
      this.reserving = writeFileAtomic(this.file, JSON.stringify({ next: end })).then(
        () => {
          this.end = end;
          this.reserving = null;
        },
        () => {
          this.reserving = null;
        },
      );
    }
    return id;
  }
}
