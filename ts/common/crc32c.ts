/**
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven: the checksum of
 * Quiver's own file formats written from TypeScript (the id tracker's files, snapshot
 * manifests). The Rust core computes the same function for its files (crc32c.rs);
 * test/shard/id-tracker.test.ts checks known vectors.
 *
 * Owns: the function, whole and incremental. Must never: depend on anything.
 */

const CRC32C_TABLE: Uint32Array = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32c(bytes: Uint8Array, start = 0, end = bytes.length): number {
  return crc32cFinish(crc32cUpdate(CRC32C_INIT, bytes, start, end));
}

/** Incremental CRC32C: start from CRC32C_INIT, update piece by piece, then finish. */
export const CRC32C_INIT = 0xffffffff;

export function crc32cUpdate(state: number, bytes: Uint8Array, start = 0, end = bytes.length): number {
  let c = state;
  for (let i = start; i < end; i++) c = CRC32C_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return c;
}

export function crc32cFinish(state: number): number {
  return (state ^ 0xffffffff) >>> 0;
}
