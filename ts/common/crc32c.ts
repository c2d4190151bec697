/**
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven with slicing by
 * eight (eight table lookups fold eight input bytes at once): the checksum of
 * Quiver's own file formats written from TypeScript (the id tracker's files, snapshot
 * manifests). The Rust core computes the same function for its files (crc32c.rs);
 * test/shard/id-tracker.test.ts checks known vectors.
 *
 * Owns: the function, whole and incremental. Must never: depend on anything.
 */

/** `TABLES[k * 256 + b]`: the CRC contribution of byte `b` followed by `k` zero bytes (k = 0..7). */
const TABLES: Uint32Array = (() => {
  const t = new Uint32Array(8 * 256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c >>> 0;
  }
  for (let k = 1; k < 8; k++) {
    for (let n = 0; n < 256; n++) {
      const prev = t[(k - 1) * 256 + n];
      t[k * 256 + n] = (prev >>> 8) ^ t[prev & 0xff];
    }
  }
  return t;
})();

export function crc32c(bytes: Uint8Array, start = 0, end = bytes.length): number {
  return crc32cFinish(crc32cUpdate(CRC32C_INIT, bytes, start, end));
}

/** Incremental CRC32C: start from CRC32C_INIT, update piece by piece, then finish. */
export const CRC32C_INIT = 0xffffffff;

export function crc32cUpdate(state: number, bytes: Uint8Array, start = 0, end = bytes.length): number {
  const t = TABLES;
  let c = state >>> 0;
  let i = start;
  // Eight bytes per step: the state folds into the first four, the next four go straight to their tables.
  for (const last = end - 8; i <= last; i += 8) {
    const a = (c ^ (bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) | (bytes[i + 3] << 24))) >>> 0;
    c =
      t[1792 + (a & 0xff)] ^
      t[1536 + ((a >>> 8) & 0xff)] ^
      t[1280 + ((a >>> 16) & 0xff)] ^
      t[1024 + (a >>> 24)] ^
      t[768 + bytes[i + 4]] ^
      t[512 + bytes[i + 5]] ^
      t[256 + bytes[i + 6]] ^
      t[bytes[i + 7]];
  }
  for (; i < end; i++) c = t[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return c >>> 0;
}

export function crc32cFinish(state: number): number {
  return (state ^ 0xffffffff) >>> 0;
}
