//! CRC-32C (Castagnoli), the checksum of every WAL record and engine file.
//!
//! Owns: the one checksum the engine writes to disk, and the choice between the
//! portable table-driven version and the SSE4.2 instruction on x86-64.
//! Must never: produce different results on different CPUs or targets (files move
//! between machines and between the native and WASM backends), allocate, or panic.
//!
//! Convention: `crc32c(data)` is the standard CRC-32C (init and final xor 0xFFFFFFFF,
//! reflected polynomial 0x82F63B78), so `crc32c(b"123456789") == 0xE3069283`.
//! `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`, which lets callers checksum data
//! that is not contiguous (a record's sequence number, then its bytes) without
//! copying it.

/// Reflected form of the Castagnoli polynomial 0x1EDC6F41.
const POLY: u32 = 0x82F6_3B78;

/// Slicing-by-8 tables. `TABLES[0]` is the classic byte-at-a-time table;
/// `TABLES[k][b]` is the CRC contribution of byte `b` followed by `k` zero bytes, so
/// eight table lookups fold eight input bytes at once. Built at compile time so that
/// no lazy initialisation (and no `OnceLock`, which Rust 1.63 lacks) is needed.
static TABLES: [[u32; 256]; 8] = make_tables();

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

/// CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// Continues a CRC-32C: `crc` is the result of an earlier `crc32c`/`crc32c_append`
/// (0 to start), and the result is the CRC-32C of the earlier bytes followed by `data`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        // std caches the CPUID answer, so this is one load and a bit test per call.
        if is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU supports SSE4.2, checked just above.
            return !unsafe { x86::update(!crc, data) };
        }
    }
    !update_sw(!crc, data)
}

/// The portable version of `crc32c_append`, always available. Exposed so that tests
/// and benchmarks can compare it with the hardware path; callers should use
/// `crc32c_append`.
pub fn crc32c_append_sw(crc: u32, data: &[u8]) -> u32 {
    !update_sw(!crc, data)
}

/// True when `crc32c` uses a CPU instruction rather than tables on this machine.
pub fn hardware_accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("sse4.2") {
            return true;
        }
    }
    false
}

/// Slicing-by-8 over the raw (not inverted) CRC register.
fn update_sw(mut crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        // Bytes are folded in little-endian order because the CRC is reflected.
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        crc = t[7][(lo & 0xFF) as usize]
            ^ t[6][((lo >> 8) & 0xFF) as usize]
            ^ t[5][((lo >> 16) & 0xFF) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xFF) as usize]
            ^ t[2][((hi >> 8) & 0xFF) as usize]
            ^ t[1][((hi >> 16) & 0xFF) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        crc = t[0][((crc ^ b as u32) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};

    /// SSE4.2 `crc32` instruction over the raw CRC register: it computes exactly
    /// CRC-32C (the instruction is hard-wired to the Castagnoli polynomial).
    ///
    /// One dependent chain of 8-byte steps runs at roughly 8 bytes per 3 cycles,
    /// which is far beyond what the WAL's disk writes need, so the 3-way interleaved
    /// variant (and its combine step) is not worth its complexity here.
    ///
    /// # Safety
    /// The CPU must support SSE4.2.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn update(crc: u32, data: &[u8]) -> u32 {
        let mut c = crc as u64;
        let mut chunks = data.chunks_exact(8);
        for ch in &mut chunks {
            let w = u64::from_le_bytes([ch[0], ch[1], ch[2], ch[3], ch[4], ch[5], ch[6], ch[7]]);
            c = _mm_crc32_u64(c, w);
        }
        let mut c = c as u32;
        for &b in chunks.remainder() {
            c = _mm_crc32_u8(c, b);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    #[test]
    fn known_vectors() {
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b"a"), 0xC1D0_4330);
        // RFC 3720 (iSCSI) appendix B.4 test patterns.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        let dec: Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(crc32c(&dec), 0x113F_DB5C);
        // The software path must agree on the same vectors, whatever this CPU has.
        assert_eq!(crc32c_append_sw(0, b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_append_sw(0, &inc), 0x46DD_794E);
    }

    #[test]
    fn append_equals_whole() {
        let mut rng = SplitMix64::new(7);
        let data: Vec<u8> = (0..1000).map(|_| rng.next_u64() as u8).collect();
        let whole = crc32c(&data);
        for split in 0..data.len() {
            let (a, b) = data.split_at(split);
            assert_eq!(crc32c_append(crc32c(a), b), whole, "split at {}", split);
            assert_eq!(
                crc32c_append_sw(crc32c_append_sw(0, a), b),
                whole,
                "sw split at {}",
                split
            );
        }
    }

    #[test]
    fn hardware_matches_software_on_random_inputs() {
        let mut rng = SplitMix64::new(0xC0FFEE);
        let buf: Vec<u8> = (0..5000).map(|_| rng.next_u64() as u8).collect();
        for _ in 0..2000 {
            // Random offsets make the 8-byte loads unaligned, random lengths exercise
            // every remainder length.
            let start = (rng.next_u64() % 64) as usize;
            let len = (rng.next_u64() % 4000) as usize;
            let seed = rng.next_u64() as u32;
            let s = &buf[start..start + len];
            let sw = crc32c_append_sw(seed, s);
            assert_eq!(crc32c_append(seed, s), sw);
            #[cfg(target_arch = "x86_64")]
            {
                if is_x86_feature_detected!("sse4.2") {
                    let hw = !unsafe { x86::update(!seed, s) };
                    assert_eq!(hw, sw, "start {} len {}", start, len);
                }
            }
        }
    }
}
