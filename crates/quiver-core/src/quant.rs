//! Vector quantization: scalar int8 and binary codes with approximate costs.
//!
//! Owns: training the two quantizers (a clip range for int8, per-dimension means for
//! binary), encoding a vector into a fixed-length code, preparing a query once per
//! search, the approximate cost of a prepared query against a code (on the same scale
//! as `Distance::cost`: smaller is better), the integer and bit kernels behind it
//! (picked once per process, like the f32 kernels in `distance`), and the byte form of
//! a trained quantizer.
//! Must never: allocate or pick a kernel inside `cost` (it is the graph-traversal hot
//! path); panic on bytes read back from storage (`from_bytes` returns `Corrupt`);
//! produce a final score. Costs here are approximate: the index traverses with them and
//! then rescores the best `k * oversampling` candidates on the original f32 vectors.
//!
//! Code layouts (both little-endian, no alignment assumed, so codes can sit at any
//! offset of an arena beside graph links):
//! - int8, `dim + 4` bytes: `dim` codes `c` with `x ~= lo + step * c`, then an f32
//!   holding the sum of the codes (exact: at most 255 * dim < 2^24 for dim <= 65793),
//!   which the Cosine/Dot cost needs to undo the `lo` offset.
//! - binary, `ceil(dim / 64) * 8 + 16` bytes: one bit per dimension (`x > mean`),
//!   packed in little-endian u64 words (dimension `i` is bit `i % 64` of word `i / 64`,
//!   padding bits zero), then four f32: `|d|^2 / sum |d|`, `|d|`, `mean . d` (with
//!   `d = v - mean`) and the number of set bits.

use crate::distance::Distance;
use crate::error::{Error, ErrorKind, Result};
use crate::rng::SplitMix64;

/// Bytes after the int8 codes: one f32 (sum of the codes).
const SQ_EXTRA: usize = 4;
/// Bytes after the binary words: four f32 (estimate scale, centred norm,
/// mean . centred vector, number of set bits).
const BQ_EXTRA: usize = 16;
/// Training looks at no more than this many values (a seeded random sample beyond it),
/// so training on a million 1536-d vectors costs a few MB, not 6 GB.
const MAX_TRAIN_VALUES: usize = 1 << 20;
const SQ_MAGIC: &[u8; 4] = b"QVSQ";
const BQ_MAGIC: &[u8; 4] = b"QVBQ";
/// Byte-format versions. They also name the CODE layout, since an index stores codes
/// beside the quantizer: binary is 2 because its per-vector tail grew from 12 to 16
/// bytes (the set-bit count), so an index written with 12-byte tails is refused
/// (`UnsupportedFormat`) rather than misread.
const SQ_VERSION: u32 = 1;
const BQ_VERSION: u32 = 2;
/// Integer kernels sum at most this many elements in 32-bit lanes before spilling into
/// a u64: 32768 * 255 * 255 < 2^32, so no lane or block total can overflow, at any dim.
const BLOCK: usize = 32768;

// ---------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------

/// One set of integer / bit kernels. Lengths: the kernels read `min(a.len(), b.len())`
/// elements (for `bitplanes`, `min(code.len() / 8, planes.len() / 4)` words).
#[derive(Clone, Copy)]
pub struct QuantKernels {
    pub name: &'static str,
    /// `sum a[i] * b[i]` over u8 values, exact.
    pub dot_u8: fn(&[u8], &[u8]) -> u64,
    /// `sum (a[i] - b[i])^2` over u8 values, exact.
    pub l2sq_u8: fn(&[u8], &[u8]) -> u64,
    /// `sum |a[i] - b[i]|` over u8 values, exact.
    pub l1_u8: fn(&[u8], &[u8]) -> u64,
    /// For sign bits `b` (little-endian u64 words stored as bytes) and a 4-bit query
    /// stored as bit-planes (`planes[4 * w + k]` = bit `k` of every value of word `w`):
    /// the sum of the query's 4-bit values where `b` is set.
    pub bitplanes: fn(&[u8], &[u64]) -> u32,
}

pub mod scalar {
    //! Reference kernels: plain loops, the ground truth every SIMD kernel is tested
    //! against. They are also the fallback, and LLVM vectorises them with the target's
    //! baseline SIMD, so they are not slow, just not as fast as the explicit ones.
    use super::BLOCK;

    pub fn dot_u8(a: &[u8], b: &[u8]) -> u64 {
        let n = a.len().min(b.len());
        let mut total = 0u64;
        let mut s = 0;
        while s < n {
            let e = (s + BLOCK).min(n);
            // u32 inside a block cannot overflow (see BLOCK) and vectorises well.
            let mut t = 0u32;
            for (&x, &y) in a[s..e].iter().zip(&b[s..e]) {
                t += x as u32 * y as u32;
            }
            total += t as u64;
            s = e;
        }
        total
    }

    pub fn l2sq_u8(a: &[u8], b: &[u8]) -> u64 {
        let n = a.len().min(b.len());
        let mut total = 0u64;
        let mut s = 0;
        while s < n {
            let e = (s + BLOCK).min(n);
            let mut t = 0u32;
            for (&x, &y) in a[s..e].iter().zip(&b[s..e]) {
                let d = x as i32 - y as i32;
                t += (d * d) as u32;
            }
            total += t as u64;
            s = e;
        }
        total
    }

    pub fn l1_u8(a: &[u8], b: &[u8]) -> u64 {
        let n = a.len().min(b.len());
        let mut total = 0u64;
        let mut s = 0;
        while s < n {
            let e = (s + BLOCK).min(n);
            let mut t = 0u32;
            for (&x, &y) in a[s..e].iter().zip(&b[s..e]) {
                t += (x as i32 - y as i32).unsigned_abs();
            }
            total += t as u64;
            s = e;
        }
        total
    }

    #[inline]
    pub fn bitplanes(code: &[u8], planes: &[u64]) -> u32 {
        let mut weighted = 0u32;
        for (c, p) in code.chunks_exact(8).zip(planes.chunks_exact(4)) {
            let b = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            weighted += (b & p[0]).count_ones()
                + 2 * (b & p[1]).count_ones()
                + 4 * (b & p[2]).count_ones()
                + 8 * (b & p[3]).count_ones();
        }
        weighted
    }
}

pub const SCALAR: QuantKernels = QuantKernels {
    name: "scalar",
    dot_u8: scalar::dot_u8,
    l2sq_u8: scalar::l2sq_u8,
    l1_u8: scalar::l1_u8,
    bitplanes: scalar::bitplanes,
};

#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    //! AVX2 kernels. Products: both sides are widened to i16 with `vpmovzxbw` and
    //! multiplied-and-pair-added with `vpmaddwd` (255 * 255 * 2 fits an i32 exactly;
    //! `vpmaddubsw` would saturate at i16). L1 uses `vpsadbw`, which sums eight
    //! |a - b| bytes into a u64 lane with no overflow risk. The bit kernel is the scalar
    //! one compiled with the `popcnt` instruction, which a plain build cannot assume
    //! (x86-64 baseline lacks it, so `count_ones` would otherwise become a dozen
    //! bit-twiddling instructions per word).
    use super::BLOCK;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn hsum_epi32(v: __m256i) -> u32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        _mm_cvtsi128_si32(s) as u32
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn widen(p: *const u8) -> __m256i {
        _mm256_cvtepu8_epi16(_mm_loadu_si128(p as *const __m128i))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot_block(pa: *const u8, pb: *const u8, n: usize) -> u32 {
        let mut acc0 = _mm256_setzero_si256();
        let mut acc1 = _mm256_setzero_si256();
        let mut i = 0;
        while i + 32 <= n {
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(widen(pa.add(i)), widen(pb.add(i))));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(widen(pa.add(i + 16)), widen(pb.add(i + 16))));
            i += 32;
        }
        if i + 16 <= n {
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(widen(pa.add(i)), widen(pb.add(i))));
            i += 16;
        }
        let mut t = hsum_epi32(_mm256_add_epi32(acc0, acc1));
        while i < n {
            t += *pa.add(i) as u32 * *pb.add(i) as u32;
            i += 1;
        }
        t
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn l2sq_block(pa: *const u8, pb: *const u8, n: usize) -> u32 {
        let mut acc0 = _mm256_setzero_si256();
        let mut acc1 = _mm256_setzero_si256();
        let mut i = 0;
        while i + 32 <= n {
            let d0 = _mm256_sub_epi16(widen(pa.add(i)), widen(pb.add(i)));
            let d1 = _mm256_sub_epi16(widen(pa.add(i + 16)), widen(pb.add(i + 16)));
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(d0, d0));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(d1, d1));
            i += 32;
        }
        if i + 16 <= n {
            let d = _mm256_sub_epi16(widen(pa.add(i)), widen(pb.add(i)));
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(d, d));
            i += 16;
        }
        let mut t = hsum_epi32(_mm256_add_epi32(acc0, acc1));
        while i < n {
            let d = *pa.add(i) as i32 - *pb.add(i) as i32;
            t += (d * d) as u32;
            i += 1;
        }
        t
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn l1_block(pa: *const u8, pb: *const u8, n: usize) -> u32 {
        let mut acc0 = _mm256_setzero_si256();
        let mut acc1 = _mm256_setzero_si256();
        let mut i = 0;
        while i + 64 <= n {
            let a0 = _mm256_loadu_si256(pa.add(i) as *const __m256i);
            let b0 = _mm256_loadu_si256(pb.add(i) as *const __m256i);
            let a1 = _mm256_loadu_si256(pa.add(i + 32) as *const __m256i);
            let b1 = _mm256_loadu_si256(pb.add(i + 32) as *const __m256i);
            acc0 = _mm256_add_epi64(acc0, _mm256_sad_epu8(a0, b0));
            acc1 = _mm256_add_epi64(acc1, _mm256_sad_epu8(a1, b1));
            i += 64;
        }
        if i + 32 <= n {
            let a0 = _mm256_loadu_si256(pa.add(i) as *const __m256i);
            let b0 = _mm256_loadu_si256(pb.add(i) as *const __m256i);
            acc0 = _mm256_add_epi64(acc0, _mm256_sad_epu8(a0, b0));
            i += 32;
        }
        let acc = _mm256_add_epi64(acc0, acc1);
        let s = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        let s = _mm_add_epi64(s, _mm_unpackhi_epi64(s, s));
        let mut t = _mm_cvtsi128_si64(s) as u32;
        while i < n {
            t += (*pa.add(i) as i32 - *pb.add(i) as i32).unsigned_abs();
            i += 1;
        }
        t
    }

    /// Splits a long input into BLOCK-sized pieces so 32-bit lanes never overflow.
    #[inline(always)]
    fn blocked(a: &[u8], b: &[u8], f: unsafe fn(*const u8, *const u8, usize) -> u32) -> u64 {
        let n = a.len().min(b.len());
        if n <= BLOCK {
            // The common case: one call, no loop.
            return unsafe { f(a.as_ptr(), b.as_ptr(), n) } as u64;
        }
        let mut total = 0u64;
        let mut s = 0;
        while s < n {
            let len = BLOCK.min(n - s);
            total += unsafe { f(a.as_ptr().add(s), b.as_ptr().add(s), len) } as u64;
            s += len;
        }
        total
    }

    #[target_feature(enable = "popcnt")]
    unsafe fn bitplanes_impl(code: &[u8], planes: &[u64]) -> u32 {
        // Same body as the reference; `#[inline]` there lets it compile with popcnt here.
        super::scalar::bitplanes(code, planes)
    }

    // Safe entry points, reachable only through `KERNELS` after run-time detection has
    // confirmed AVX2 and POPCNT.
    pub fn dot_u8(a: &[u8], b: &[u8]) -> u64 {
        blocked(a, b, dot_block)
    }
    pub fn l2sq_u8(a: &[u8], b: &[u8]) -> u64 {
        blocked(a, b, l2sq_block)
    }
    pub fn l1_u8(a: &[u8], b: &[u8]) -> u64 {
        blocked(a, b, l1_block)
    }
    pub fn bitplanes(code: &[u8], planes: &[u64]) -> u32 {
        unsafe { bitplanes_impl(code, planes) }
    }

    pub fn available() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("popcnt")
    }

    pub const KERNELS: super::QuantKernels = super::QuantKernels {
        name: "avx2+popcnt",
        dot_u8,
        l2sq_u8,
        l1_u8,
        bitplanes,
    };
}

#[cfg(target_arch = "aarch64")]
pub mod neon {
    //! NEON kernels (always present on aarch64). `umull` multiplies u8 by u8 into u16
    //! exactly (255 * 255 < 65536) and `uadalp` pair-adds into u32 lanes; `uabd` gives
    //! |a - b| directly. The bit kernel stays scalar: LLVM already lowers `count_ones`
    //! on aarch64 to `cnt` + `addv`.
    use super::BLOCK;
    use std::arch::aarch64::*;

    unsafe fn dot_block(pa: *const u8, pb: *const u8, n: usize) -> u32 {
        let mut acc0 = vdupq_n_u32(0);
        let mut acc1 = vdupq_n_u32(0);
        let mut i = 0;
        while i + 16 <= n {
            let a = vld1q_u8(pa.add(i));
            let b = vld1q_u8(pb.add(i));
            acc0 = vpadalq_u16(acc0, vmull_u8(vget_low_u8(a), vget_low_u8(b)));
            acc1 = vpadalq_u16(acc1, vmull_high_u8(a, b));
            i += 16;
        }
        let mut t = vaddvq_u32(vaddq_u32(acc0, acc1));
        while i < n {
            t += *pa.add(i) as u32 * *pb.add(i) as u32;
            i += 1;
        }
        t
    }

    unsafe fn l2sq_block(pa: *const u8, pb: *const u8, n: usize) -> u32 {
        let mut acc0 = vdupq_n_u32(0);
        let mut acc1 = vdupq_n_u32(0);
        let mut i = 0;
        while i + 16 <= n {
            let d = vabdq_u8(vld1q_u8(pa.add(i)), vld1q_u8(pb.add(i)));
            acc0 = vpadalq_u16(acc0, vmull_u8(vget_low_u8(d), vget_low_u8(d)));
            acc1 = vpadalq_u16(acc1, vmull_high_u8(d, d));
            i += 16;
        }
        let mut t = vaddvq_u32(vaddq_u32(acc0, acc1));
        while i < n {
            let d = *pa.add(i) as i32 - *pb.add(i) as i32;
            t += (d * d) as u32;
            i += 1;
        }
        t
    }

    unsafe fn l1_block(pa: *const u8, pb: *const u8, n: usize) -> u32 {
        let mut acc = vdupq_n_u32(0);
        let mut i = 0;
        while i + 16 <= n {
            let d = vabdq_u8(vld1q_u8(pa.add(i)), vld1q_u8(pb.add(i)));
            acc = vpadalq_u16(acc, vpaddlq_u8(d));
            i += 16;
        }
        let mut t = vaddvq_u32(acc);
        while i < n {
            t += (*pa.add(i) as i32 - *pb.add(i) as i32).unsigned_abs();
            i += 1;
        }
        t
    }

    #[inline(always)]
    fn blocked(a: &[u8], b: &[u8], f: unsafe fn(*const u8, *const u8, usize) -> u32) -> u64 {
        let n = a.len().min(b.len());
        let mut total = 0u64;
        let mut s = 0;
        while s < n {
            let len = BLOCK.min(n - s);
            total += unsafe { f(a.as_ptr().add(s), b.as_ptr().add(s), len) } as u64;
            s += len;
        }
        total
    }

    pub fn dot_u8(a: &[u8], b: &[u8]) -> u64 {
        blocked(a, b, dot_block)
    }
    pub fn l2sq_u8(a: &[u8], b: &[u8]) -> u64 {
        blocked(a, b, l2sq_block)
    }
    pub fn l1_u8(a: &[u8], b: &[u8]) -> u64 {
        blocked(a, b, l1_block)
    }

    pub const KERNELS: super::QuantKernels = super::QuantKernels {
        name: "neon",
        dot_u8,
        l2sq_u8,
        l1_u8,
        bitplanes: super::scalar::bitplanes,
    };
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod simd128 {
    //! wasm simd128 kernels (chosen at compile time: wasm has no run-time detection).
    //! `i32x4.dot_i16x8_s` is the wasm `pmaddwd`; bytes are widened to i16 first.
    //! L1 builds |a - b| from two saturating subtractions. The bit kernel stays scalar:
    //! wasm has a native `i64.popcnt`.
    use super::BLOCK;
    use core::arch::wasm32::*;

    #[inline]
    unsafe fn load(p: *const u8) -> v128 {
        // Codes sit at arbitrary offsets of an arena: never assume 16-byte alignment.
        core::ptr::read_unaligned(p as *const v128)
    }

    #[inline]
    fn hsum(v: v128) -> u32 {
        (i32x4_extract_lane::<0>(v) as u32)
            .wrapping_add(i32x4_extract_lane::<1>(v) as u32)
            .wrapping_add(i32x4_extract_lane::<2>(v) as u32)
            .wrapping_add(i32x4_extract_lane::<3>(v) as u32)
    }

    unsafe fn dot_block(pa: *const u8, pb: *const u8, n: usize) -> u32 {
        let mut acc0 = i32x4_splat(0);
        let mut acc1 = i32x4_splat(0);
        let mut i = 0;
        while i + 16 <= n {
            let a = load(pa.add(i));
            let b = load(pb.add(i));
            acc0 = i32x4_add(acc0, i32x4_dot_i16x8(u16x8_extend_low_u8x16(a), u16x8_extend_low_u8x16(b)));
            acc1 = i32x4_add(acc1, i32x4_dot_i16x8(u16x8_extend_high_u8x16(a), u16x8_extend_high_u8x16(b)));
            i += 16;
        }
        let mut t = hsum(i32x4_add(acc0, acc1));
        while i < n {
            t += *pa.add(i) as u32 * *pb.add(i) as u32;
            i += 1;
        }
        t
    }

    unsafe fn l2sq_block(pa: *const u8, pb: *const u8, n: usize) -> u32 {
        let mut acc0 = i32x4_splat(0);
        let mut acc1 = i32x4_splat(0);
        let mut i = 0;
        while i + 16 <= n {
            let a = load(pa.add(i));
            let b = load(pb.add(i));
            let d0 = i16x8_sub(u16x8_extend_low_u8x16(a), u16x8_extend_low_u8x16(b));
            let d1 = i16x8_sub(u16x8_extend_high_u8x16(a), u16x8_extend_high_u8x16(b));
            acc0 = i32x4_add(acc0, i32x4_dot_i16x8(d0, d0));
            acc1 = i32x4_add(acc1, i32x4_dot_i16x8(d1, d1));
            i += 16;
        }
        let mut t = hsum(i32x4_add(acc0, acc1));
        while i < n {
            let d = *pa.add(i) as i32 - *pb.add(i) as i32;
            t += (d * d) as u32;
            i += 1;
        }
        t
    }

    unsafe fn l1_block(pa: *const u8, pb: *const u8, n: usize) -> u32 {
        let mut acc = i32x4_splat(0);
        let mut i = 0;
        while i + 16 <= n {
            let a = load(pa.add(i));
            let b = load(pb.add(i));
            let d = v128_or(u8x16_sub_sat(a, b), u8x16_sub_sat(b, a));
            acc = i32x4_add(acc, i32x4_extadd_pairwise_u16x8(u16x8_extadd_pairwise_u8x16(d)));
            i += 16;
        }
        let mut t = hsum(acc);
        while i < n {
            t += (*pa.add(i) as i32 - *pb.add(i) as i32).unsigned_abs();
            i += 1;
        }
        t
    }

    #[inline(always)]
    fn blocked(a: &[u8], b: &[u8], f: unsafe fn(*const u8, *const u8, usize) -> u32) -> u64 {
        let n = a.len().min(b.len());
        let mut total = 0u64;
        let mut s = 0;
        while s < n {
            let len = BLOCK.min(n - s);
            total += unsafe { f(a.as_ptr().add(s), b.as_ptr().add(s), len) } as u64;
            s += len;
        }
        total
    }

    pub fn dot_u8(a: &[u8], b: &[u8]) -> u64 {
        blocked(a, b, dot_block)
    }
    pub fn l2sq_u8(a: &[u8], b: &[u8]) -> u64 {
        blocked(a, b, l2sq_block)
    }
    pub fn l1_u8(a: &[u8], b: &[u8]) -> u64 {
        blocked(a, b, l1_block)
    }

    pub const KERNELS: super::QuantKernels = super::QuantKernels {
        name: "simd128",
        dot_u8,
        l2sq_u8,
        l1_u8,
        bitplanes: super::scalar::bitplanes,
    };
}

/// Every kernel set this build can run on this machine, scalar first. Tests compare
/// each against scalar.
pub fn available_kernels() -> Vec<QuantKernels> {
    #[allow(unused_mut)]
    let mut v = vec![SCALAR];
    #[cfg(target_arch = "x86_64")]
    {
        if avx2::available() {
            v.push(avx2::KERNELS);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        v.push(neon::KERNELS);
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        v.push(simd128::KERNELS);
    }
    v
}

#[cfg(not(target_arch = "wasm32"))]
fn detect() -> QuantKernels {
    // Same switch as the f32 kernels, so one variable forces the whole engine scalar.
    if std::env::var("QUIVER_KERNELS").map(|s| s == "scalar").unwrap_or(false) {
        return SCALAR;
    }
    *available_kernels().last().unwrap()
}

/// The kernel set in use, chosen once per process.
#[cfg(not(target_arch = "wasm32"))]
pub fn kernels() -> &'static QuantKernels {
    use std::sync::Once;
    static INIT: Once = Once::new();
    static mut K: QuantKernels = SCALAR;
    // Written once under `Once`, read-only afterwards.
    unsafe {
        INIT.call_once(|| K = detect());
        &*std::ptr::addr_of!(K)
    }
}

/// The kernel set in use (fixed at compile time on wasm).
#[cfg(target_arch = "wasm32")]
pub fn kernels() -> &'static QuantKernels {
    #[cfg(target_feature = "simd128")]
    {
        &simd128::KERNELS
    }
    #[cfg(not(target_feature = "simd128"))]
    {
        &SCALAR
    }
}

// ---------------------------------------------------------------------------------
// Scalar (int8) quantization
// ---------------------------------------------------------------------------------

/// Uniform 8-bit quantization with one clip range `[lo, lo + 255 * step]` shared by all
/// dimensions. One range (not one per dimension) keeps the query side a plain integer
/// dot product; the quantile clip keeps a few outliers from wasting the 256 levels.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalarQuantizer {
    dim: usize,
    lo: f32,
    step: f32,
}

/// A query prepared for one search against int8 codes. Owned, so a search holds it
/// without borrowing the quantizer.
///
/// Every distance reduces to `bias + int_scale * I + sum_scale * S`, where `I` is one
/// integer kernel over the codes and `S` the f32 stored after them, so `cost` is one
/// kernel call and two multiply-adds.
#[derive(Clone)]
pub struct ScalarQuery {
    distance: Distance,
    codes: Vec<u8>,
    bias: f32,
    int_scale: f32,
    sum_scale: f32,
    kernel: fn(&[u8], &[u8]) -> u64,
}

impl ScalarQuery {
    pub fn distance(&self) -> Distance {
        self.distance
    }
}

/// `round((x - lo) * inv)` clamped to 0..=255. Adding 0.5 and truncating is rounding
/// for the non-negative values that matter, and the float-to-int `as` cast saturates
/// (negative and NaN become 0, large values 255), so no branches and no libm `round`.
#[inline]
fn quantize(x: f32, lo: f32, inv: f32) -> u8 {
    ((x - lo) * inv + 0.5) as u8
}

#[inline]
fn read_f32(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The finite values of the first `n * dim` floats, or a seeded random sample of
/// `MAX_TRAIN_VALUES` of them. Random rather than strided: a stride sharing a factor
/// with `dim` would only ever look at some dimensions.
fn training_sample(vectors: &[f32], dim: usize) -> Vec<f32> {
    let total = vectors.len().checked_div(dim).map_or(0, |n| n * dim);
    let vals = &vectors[..total];
    if total <= MAX_TRAIN_VALUES {
        return vals.iter().copied().filter(|x| x.is_finite()).collect();
    }
    let mut rng = SplitMix64::new(0x5155_4956_4552_5351);
    (0..MAX_TRAIN_VALUES)
        .map(|_| vals[(rng.next_u64() % total as u64) as usize])
        .filter(|x| x.is_finite())
        .collect()
}

impl ScalarQuantizer {
    /// Learns the clip range from `vectors` (flat, `n * dim`; a trailing partial vector
    /// is ignored). The range spans the `(1 - quantile) / 2` and `1 - (1 - quantile) / 2`
    /// quantiles of all values; `quantile` is clamped to [0.5, 1] (NaN means the default
    /// 0.99). No data, or constant data, gives a range centred on that value (on 0 for
    /// no data) with a half-width of `max(|value|, 1)`, so nothing divides by zero.
    pub fn train(vectors: &[f32], dim: usize, quantile: f32) -> ScalarQuantizer {
        let q = if quantile.is_nan() { 0.99 } else { quantile.clamp(0.5, 1.0) };
        let mut vals = training_sample(vectors, dim);
        let mut range = None;
        if !vals.is_empty() {
            let m = vals.len();
            let tail = ((1.0 - q as f64) * 0.5 * m as f64).floor() as usize;
            let lo_rank = tail.min((m - 1) / 2);
            let hi_rank = m - 1 - lo_rank;
            let cmp = |a: &f32, b: &f32| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal);
            vals.select_nth_unstable_by(lo_rank, cmp);
            let lo = vals[lo_rank];
            // Everything right of lo_rank is >= lo, so the high rank is found there.
            let right = &mut vals[lo_rank..];
            right.select_nth_unstable_by(hi_rank - lo_rank, cmp);
            let hi = right[hi_rank - lo_rank];
            range = Some((lo, hi));
        }
        let (lo, hi) = match range {
            Some((lo, hi)) if hi > lo => (lo as f64, hi as f64),
            Some((c, _)) => {
                let h = (c.abs() as f64).max(1.0);
                (c as f64 - h, c as f64 + h)
            }
            None => (-1.0, 1.0),
        };
        // f64, and clamped to f32's range, so that values near f32::MAX neither
        // overflow to an infinite bound nor round to a zero step.
        let lo = lo.max(-f32::MAX as f64);
        let hi = hi.min(f32::MAX as f64);
        let step = ((hi - lo) / 255.0) as f32;
        ScalarQuantizer { dim, lo: lo as f32, step: if step > 0.0 && step.is_finite() { step } else { 1.0 } }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Lower end of the clip range (the value of code 0).
    pub fn lo(&self) -> f32 {
        self.lo
    }

    /// Distance between two adjacent code values; the decoding error of an in-range
    /// value is at most half of it.
    pub fn step(&self) -> f32 {
        self.step
    }

    /// Bytes per encoded vector: `dim + 4` (the codes, then their sum as an f32).
    pub fn code_len(&self) -> usize {
        self.dim + SQ_EXTRA
    }

    /// Writes `v`'s code into `out[..code_len()]`. Panics if `v.len() != dim` or `out`
    /// is shorter than `code_len()`: both are the caller's bugs, not data errors.
    pub fn encode(&self, v: &[f32], out: &mut [u8]) {
        assert_eq!(v.len(), self.dim, "ScalarQuantizer::encode: vector length");
        assert!(out.len() >= self.code_len(), "ScalarQuantizer::encode: output too short");
        let inv = 1.0 / self.step;
        let mut sum = 0u64;
        for (o, &x) in out[..self.dim].iter_mut().zip(v) {
            *o = quantize(x, self.lo, inv);
            sum += *o as u64;
        }
        // The sum of the codes, not of the original values: the Cosine/Dot cost is the
        // product with the DEQUANTIZED vector, whose error per dimension is multiplied
        // by q[i] (small, of either sign). Mixing in exact sums instead leaves the
        // clipping error multiplied by q[i] - min(q), which is large and one-signed;
        // measured, that made the estimate several times worse.
        out[self.dim..self.dim + SQ_EXTRA].copy_from_slice(&(sum as f32).to_le_bytes());
    }

    /// The values a code stands for (clipped, rounded to the grid). For tests and
    /// debugging; search never decodes.
    pub fn decode(&self, code: &[u8], out: &mut [f32]) {
        for (o, &c) in out.iter_mut().zip(&code[..self.dim]) {
            *o = self.lo + self.step * c as f32;
        }
    }

    /// Prepares `q` (already preprocessed: normalised for Cosine) for `cost`.
    ///
    /// Euclid and Manhattan quantize the query on the data's grid, so code differences
    /// are value differences: cost = step^2 * sum (cq - ca)^2, or step * sum |cq - ca|.
    ///
    /// Cosine and Dot quantize the query on its OWN grid `[qlo, qlo + 255 * qstep]`
    /// (min..max of the query, so a query of another scale than the data, common with
    /// Dot, is not clipped) and estimate the product with the dequantized vector:
    ///   `q . a ~= sum q[i] (lo + step ca[i]) = lo * sum(q) + step * sum q[i] ca[i]`
    ///   `sum q[i] ca[i] ~= qlo * sum(ca) + qstep * (cq . ca)`
    /// with `sum(q)` exact, `sum(ca)` stored with the code and `cq . ca` one integer
    /// kernel call.
    pub fn prepare_query(&self, distance: Distance, q: &[f32]) -> ScalarQuery {
        assert_eq!(q.len(), self.dim, "ScalarQuantizer::prepare_query: vector length");
        let k = kernels();
        match distance {
            Distance::Cosine | Distance::Dot => {
                let mut qlo = f32::INFINITY;
                let mut qhi = f32::NEG_INFINITY;
                let mut sq = 0.0f64;
                for &x in q {
                    qlo = qlo.min(x);
                    qhi = qhi.max(x);
                    sq += x as f64;
                }
                if qlo > qhi {
                    // Empty (dim 0) or all-NaN query (min/max skip NaN).
                    qlo = 0.0;
                    qhi = 0.0;
                }
                let qstep = ((qhi as f64 - qlo as f64) / 255.0) as f32;
                // A constant query has r = 0 exactly: codes 0 and qstep 0 are exact.
                let inv = if qstep > 0.0 { 1.0 / qstep } else { 0.0 };
                let codes = q.iter().map(|&x| quantize(x, qlo, inv)).collect();
                let step = self.step as f64;
                ScalarQuery {
                    distance,
                    codes,
                    bias: -((self.lo as f64 * sq) as f32),
                    int_scale: -((step * qstep as f64) as f32),
                    sum_scale: -((step * qlo as f64) as f32),
                    kernel: k.dot_u8,
                }
            }
            Distance::Euclid | Distance::Manhattan => {
                let inv = 1.0 / self.step;
                let codes = q.iter().map(|&x| quantize(x, self.lo, inv)).collect();
                let (int_scale, kernel) = if distance == Distance::Euclid {
                    (self.step * self.step, k.l2sq_u8)
                } else {
                    (self.step, k.l1_u8)
                };
                ScalarQuery { distance, codes, bias: 0.0, int_scale, sum_scale: 0.0, kernel }
            }
        }
    }

    /// Approximate `distance.cost(q, v)` for the vector `v` whose code is `code`
    /// (`code.len() >= code_len()`). The hot path: no allocation, no branching on the
    /// distance, one kernel call through a pointer chosen in `prepare_query`.
    #[inline]
    pub fn cost(&self, query: &ScalarQuery, code: &[u8]) -> f32 {
        let n = query.codes.len();
        let i = (query.kernel)(&code[..n], &query.codes);
        let s = read_f32(code, n);
        query.bias + query.int_scale * i as f32 + query.sum_scale * s
    }

    /// `magic "QVSQ" | version u32 (1) | dim u32 | lo f32 | step f32`, little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(20);
        b.extend_from_slice(SQ_MAGIC);
        b.extend_from_slice(&SQ_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.dim as u32).to_le_bytes());
        b.extend_from_slice(&self.lo.to_le_bytes());
        b.extend_from_slice(&self.step.to_le_bytes());
        b
    }

    /// Reads `to_bytes`' output. `Corrupt` for any malformed input (wrong magic or
    /// length, non-finite or non-positive step); `UnsupportedFormat` for a version this
    /// build does not know.
    pub fn from_bytes(b: &[u8]) -> Result<ScalarQuantizer> {
        let mut r = Reader::new(b, "scalar quantizer");
        r.header(SQ_MAGIC, SQ_VERSION)?;
        let dim = r.u32()? as usize;
        let lo = r.f32()?;
        let step = r.f32()?;
        r.end()?;
        if !lo.is_finite() || !step.is_finite() || step <= 0.0 {
            return Err(Error::corrupt(format!("scalar quantizer: bad range lo={} step={}", lo, step)));
        }
        Ok(ScalarQuantizer { dim, lo, step })
    }
}

// ---------------------------------------------------------------------------------
// Binary quantization
// ---------------------------------------------------------------------------------

/// One bit per dimension: is the value above that dimension's training mean? Centring
/// makes the bits informative for data with an offset (real embeddings usually have
/// one); with zero-mean data it changes nothing. Three stored f32 per vector undo the
/// centring exactly in the cost and scale the estimate, so it suits every distance.
#[derive(Clone, Debug, PartialEq)]
pub struct BinaryQuantizer {
    dim: usize,
    mean: Vec<f32>,
}

/// A query prepared for one search against binary codes.
///
/// The query is NOT reduced to sign bits: that loses twice, and measured 0.60 recall@10
/// (top 100 rescored, Gaussian dim 128) where this gets 0.85, for 4 popcounts per word
/// instead of 1. Its centred values `y = q - mean` are kept at 4 bits,
/// `y ~= ylo + ystep * cy`, as four bit-planes. With `s = +-1` the vector's signs,
///   `sum y s = 2 * sum_{bit set} y - sum y ~= 2 (ylo * ones + ystep * weighted) - sum y`
/// where `weighted` comes from one `bitplanes` kernel call and `ones` (the number of
/// set bits) is stored with the code.
#[derive(Clone)]
pub struct BinaryQuery {
    distance: Distance,
    planes: Vec<u64>,
    /// 2 * ylo, 2 * ystep, -sum y: `sum y s = c_ones * ones + c_weighted * weighted + c0`.
    c_ones: f32,
    c_weighted: f32,
    c0: f32,
    /// |q - mean|^2
    qn2: f32,
    /// q . mean
    qmu: f32,
    /// Manhattan estimate = this * estimated L2 (E|x| = sqrt(2/pi) sigma for a Gaussian).
    l1_per_l2: f32,
    kernel: fn(&[u8], &[u64]) -> u32,
}

impl BinaryQuery {
    pub fn distance(&self) -> Distance {
        self.distance
    }
}

impl BinaryQuantizer {
    /// Learns the per-dimension means of `vectors` (flat, `n * dim`; a trailing partial
    /// vector is ignored, non-finite values are skipped). No data gives zero means.
    pub fn train(vectors: &[f32], dim: usize) -> BinaryQuantizer {
        let mut sum = vec![0.0f64; dim];
        let mut count = vec![0u64; dim];
        if dim > 0 {
            for v in vectors.chunks_exact(dim) {
                for (j, &x) in v.iter().enumerate() {
                    if x.is_finite() {
                        sum[j] += x as f64;
                        count[j] += 1;
                    }
                }
            }
        }
        let mean = sum
            .iter()
            .zip(&count)
            .map(|(&s, &c)| if c == 0 { 0.0 } else { (s / c as f64) as f32 })
            .collect();
        BinaryQuantizer { dim, mean }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn mean(&self) -> &[f32] {
        &self.mean
    }

    fn words(&self) -> usize {
        (self.dim + 63) / 64
    }

    /// Bytes per encoded vector: `ceil(dim / 64) * 8 + 16` (the sign words, then four
    /// f32: the estimate's scale, `|v - mean|`, `mean . (v - mean)` and the number of
    /// set bits). A multiple of 8, so u64-aligned arenas stay aligned.
    pub fn code_len(&self) -> usize {
        self.words() * 8 + BQ_EXTRA
    }

    /// Writes `v`'s code into `out[..code_len()]`. Panics if `v.len() != dim` or `out`
    /// is too short (caller bugs).
    ///
    /// With `d = v - mean` and signs `s`, the stored scale is `|d|^2 / sum |d|`, so that
    /// `y . d ~= scale * (y . s)`. That is the RaBitQ estimator `<y, s/|s|> / <d/|d|, s/|s|>`
    /// times `|d|`: dividing by how well the signs align with `d` makes it unbiased
    /// for directions independent of the signs, and gives costs on the right scale.
    pub fn encode(&self, v: &[f32], out: &mut [u8]) {
        assert_eq!(v.len(), self.dim, "BinaryQuantizer::encode: vector length");
        assert!(out.len() >= self.code_len(), "BinaryQuantizer::encode: output too short");
        let mut nn = 0.0f64;
        let mut l1 = 0.0f64;
        let mut md = 0.0f64;
        let mut ones = 0u32;
        for (w, chunk) in v.chunks(64).enumerate() {
            let mut word = 0u64;
            for (b, (&x, &m)) in chunk.iter().zip(&self.mean[w * 64..]).enumerate() {
                let d = x - m;
                // NaN compares false: its bit is 0.
                if d > 0.0 {
                    word |= 1u64 << b;
                }
                let d = d as f64;
                nn += d * d;
                l1 += d.abs();
                md += m as f64 * d;
            }
            ones += word.count_ones();
            out[w * 8..w * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        let scale = if l1 > 0.0 { nn / l1 } else { 0.0 };
        let nb = self.words() * 8;
        out[nb..nb + 4].copy_from_slice(&(scale as f32).to_le_bytes());
        out[nb + 4..nb + 8].copy_from_slice(&(nn.sqrt() as f32).to_le_bytes());
        out[nb + 8..nb + 12].copy_from_slice(&(md as f32).to_le_bytes());
        // Stored because it depends on the vector only: one popcount per word less in
        // `cost`. Exact in an f32 (at most 2^24 bits for any real dimension).
        out[nb + 12..nb + 16].copy_from_slice(&(ones as f32).to_le_bytes());
    }

    /// Prepares `q` (already preprocessed: normalised for Cosine) for `cost`.
    pub fn prepare_query(&self, distance: Distance, q: &[f32]) -> BinaryQuery {
        assert_eq!(q.len(), self.dim, "BinaryQuantizer::prepare_query: vector length");
        let mut ylo = f32::INFINITY;
        let mut yhi = f32::NEG_INFINITY;
        let mut ysum = 0.0f64;
        let mut qn2 = 0.0f64;
        let mut qmu = 0.0f64;
        for (&x, &m) in q.iter().zip(&self.mean) {
            let y = x - m;
            ylo = ylo.min(y);
            yhi = yhi.max(y);
            ysum += y as f64;
            qn2 += y as f64 * y as f64;
            qmu += x as f64 * m as f64;
        }
        if ylo > yhi {
            // Empty (dim 0) or all-NaN query (min/max skip NaN).
            ylo = 0.0;
            yhi = 0.0;
        }
        let ystep = ((yhi as f64 - ylo as f64) / 15.0) as f32;
        let inv = if ystep > 0.0 { 1.0 / ystep } else { 0.0 };
        let mut planes = vec![0u64; self.words() * 4];
        for (j, &x) in q.iter().enumerate() {
            // 0..=15 (`quantize` saturates at 255, but (yhi - ylo) * inv rounds to 15).
            let c = quantize(x - self.mean[j], ylo, inv).min(15);
            for k in 0..4 {
                if c & (1 << k) != 0 {
                    planes[(j / 64) * 4 + k] |= 1u64 << (j % 64);
                }
            }
        }
        BinaryQuery {
            distance,
            planes,
            c_ones: 2.0 * ylo,
            c_weighted: 2.0 * ystep,
            c0: -(ysum as f32),
            qn2: qn2 as f32,
            qmu: qmu as f32,
            l1_per_l2: (2.0 * self.dim as f64 / std::f64::consts::PI).sqrt() as f32,
            kernel: kernels().bitplanes,
        }
    }

    /// Approximate `distance.cost(q, v)` for the vector whose code is `code`. Only the
    /// ORDER is meant to be good (results are always rescored), but the value is on the
    /// `Distance::cost` scale and finite for finite inputs. With `y = q - m`,
    /// `d = v - m` and `e ~= y . d` (see `BinaryQuery`, `encode`):
    ///   Cosine/Dot: -(q . m + m . d + e)
    ///   Euclid:     max(0, |y|^2 + |d|^2 - 2 e)
    ///   Manhattan:  sqrt(2 dim / pi) * sqrt(Euclid estimate)
    #[inline]
    pub fn cost(&self, query: &BinaryQuery, code: &[u8]) -> f32 {
        let nb = query.planes.len() * 2;
        let weighted = (query.kernel)(&code[..nb], &query.planes);
        let ones = read_f32(code, nb + 12);
        let ys = query.c_ones * ones + query.c_weighted * weighted as f32 + query.c0;
        let e = read_f32(code, nb) * ys;
        match query.distance {
            Distance::Cosine | Distance::Dot => -(query.qmu + read_f32(code, nb + 8) + e),
            Distance::Euclid => {
                let dn = read_f32(code, nb + 4);
                (query.qn2 + dn * dn - 2.0 * e).max(0.0)
            }
            Distance::Manhattan => {
                let dn = read_f32(code, nb + 4);
                query.l1_per_l2 * (query.qn2 + dn * dn - 2.0 * e).max(0.0).sqrt()
            }
        }
    }

    /// `magic "QVBQ" | version u32 (2) | dim u32 | dim x f32 means`, little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(12 + 4 * self.dim);
        b.extend_from_slice(BQ_MAGIC);
        b.extend_from_slice(&BQ_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.dim as u32).to_le_bytes());
        for m in &self.mean {
            b.extend_from_slice(&m.to_le_bytes());
        }
        b
    }

    /// Reads `to_bytes`' output: `Corrupt` on malformed input (the length must match
    /// `dim` exactly, means must be finite), `UnsupportedFormat` on an unknown version.
    pub fn from_bytes(b: &[u8]) -> Result<BinaryQuantizer> {
        let mut r = Reader::new(b, "binary quantizer");
        r.header(BQ_MAGIC, BQ_VERSION)?;
        let dim = r.u32()? as usize;
        // Check the length before allocating: a corrupt dim must not ask for 16 GB.
        if r.remaining() != dim as u64 * 4 {
            return Err(Error::corrupt(format!(
                "binary quantizer: {} bytes of means for dim {}",
                r.remaining(),
                dim
            )));
        }
        let mut mean = Vec::with_capacity(dim);
        for _ in 0..dim {
            let m = r.f32()?;
            if !m.is_finite() {
                return Err(Error::corrupt("binary quantizer: non-finite mean"));
            }
            mean.push(m);
        }
        r.end()?;
        Ok(BinaryQuantizer { dim, mean })
    }
}

/// Bounds-checked little-endian reader: every short read is a `Corrupt` error.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { b, pos: 0, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() - self.pos < n {
            return Err(Error::corrupt(format!("{}: truncated at byte {}", self.what, self.pos)));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn f32(&mut self) -> Result<f32> {
        let s = self.take(4)?;
        Ok(f32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn remaining(&self) -> u64 {
        (self.b.len() - self.pos) as u64
    }

    fn header(&mut self, magic: &[u8; 4], version: u32) -> Result<()> {
        if self.take(4)? != &magic[..] {
            return Err(Error::corrupt(format!("{}: bad magic", self.what)));
        }
        let v = self.u32()?;
        if v != version {
            return Err(Error::new(
                ErrorKind::UnsupportedFormat,
                format!("{}: format version {} (this build reads {})", self.what, v, version),
            ));
        }
        Ok(())
    }

    fn end(&self) -> Result<()> {
        if self.pos != self.b.len() {
            return Err(Error::corrupt(format!("{}: {} trailing bytes", self.what, self.b.len() - self.pos)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance;
    use crate::rng::SplitMix64;

    const ALL: [Distance; 4] = [Distance::Cosine, Distance::Dot, Distance::Euclid, Distance::Manhattan];

    fn gaussian(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.next_gaussian()).collect()
    }

    fn random_bytes(rng: &mut SplitMix64, n: usize) -> Vec<u8> {
        // A third of the inputs are all-extreme, the values where saturation would bite.
        match rng.next_u64() % 3 {
            0 => (0..n).map(|_| if rng.next_u64() & 1 == 0 { 0 } else { 255 }).collect(),
            _ => (0..n).map(|_| rng.next_u64() as u8).collect(),
        }
    }

    #[test]
    fn every_kernel_matches_scalar_on_random_dimensions() {
        let mut rng = SplitMix64::new(11);
        let all = available_kernels();
        assert_eq!(all[0].name, "scalar");
        println!("quant kernel sets checked: {:?}", all.iter().map(|k| k.name).collect::<Vec<_>>());
        for _ in 0..400 {
            let dim = 1 + (rng.next_u64() % 2048) as usize;
            let a = random_bytes(&mut rng, dim);
            let b = random_bytes(&mut rng, dim);
            let words = (dim + 63) / 64;
            let code = random_bytes(&mut rng, words * 8);
            let planes: Vec<u64> = (0..words * 4).map(|_| rng.next_u64()).collect();
            // Odd offsets: codes sit unaligned in the arena.
            let off = (rng.next_u64() % 7) as usize;
            let mut shifted = vec![0u8; off + dim];
            shifted[off..].copy_from_slice(&a);
            let a_unaligned = &shifted[off..];
            let d = scalar::dot_u8(&a, &b);
            let l2 = scalar::l2sq_u8(&a, &b);
            let l1 = scalar::l1_u8(&a, &b);
            let bp = scalar::bitplanes(&code, &planes);
            // The reference against the definition: sum of the 4-bit values where set.
            let mut want = 0u32;
            for i in 0..words * 64 {
                if code[i / 8] & (1 << (i % 8)) != 0 {
                    let v: u32 = (0..4).map(|k| ((planes[(i / 64) * 4 + k] >> (i % 64)) as u32 & 1) << k).sum();
                    want += v;
                }
            }
            assert_eq!(bp, want);
            // The reference against a direct u64 sum.
            assert_eq!(d, a.iter().zip(&b).map(|(&x, &y)| x as u64 * y as u64).sum::<u64>());
            for k in &all {
                assert_eq!((k.dot_u8)(a_unaligned, &b), d, "{} dot dim {}", k.name, dim);
                assert_eq!((k.l2sq_u8)(a_unaligned, &b), l2, "{} l2sq dim {}", k.name, dim);
                assert_eq!((k.l1_u8)(a_unaligned, &b), l1, "{} l1 dim {}", k.name, dim);
                assert_eq!((k.bitplanes)(&code, &planes), bp, "{} bitplanes dim {}", k.name, dim);
            }
        }
    }

    #[test]
    fn kernels_do_not_overflow_on_huge_inputs() {
        // 70000 * 255 * 255 > 2^32: a 32-bit total would wrap.
        let n = 70_000;
        let a = vec![255u8; n];
        let z = vec![0u8; n];
        for k in available_kernels() {
            assert_eq!((k.dot_u8)(&a, &a), n as u64 * 65025, "{}", k.name);
            assert_eq!((k.l2sq_u8)(&a, &z), n as u64 * 65025, "{}", k.name);
            assert_eq!((k.l1_u8)(&a, &z), n as u64 * 255, "{}", k.name);
            assert_eq!((k.dot_u8)(&[], &[]), 0);
            assert_eq!((k.bitplanes)(&[], &[]), 0);
        }
    }

    #[test]
    fn encode_decode_error_is_within_half_a_step() {
        let mut rng = SplitMix64::new(3);
        let dim = 77;
        let data = gaussian(&mut rng, 500 * dim);
        let sq = ScalarQuantizer::train(&data, dim, 0.99);
        assert_eq!(sq.code_len(), dim + 4);
        let hi = sq.lo() + 255.0 * sq.step();
        let mut code = vec![0u8; sq.code_len()];
        let mut back = vec![0f32; dim];
        for v in data.chunks(dim).take(100) {
            sq.encode(v, &mut code);
            sq.decode(&code, &mut back);
            for (&x, &y) in v.iter().zip(&back) {
                let clipped = x.max(sq.lo()).min(hi);
                assert!((clipped - y).abs() <= sq.step() * 0.5 + 1e-5, "{} -> {}", x, y);
            }
            let sum: u32 = code[..dim].iter().map(|&c| c as u32).sum();
            assert_eq!(read_f32(&code, dim), sum as f32);
        }
    }

    #[test]
    fn quantile_clipping_ignores_outliers() {
        let mut rng = SplitMix64::new(5);
        let dim = 10;
        let mut data: Vec<f32> = (0..10_000 * dim).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
        for i in 0..5 {
            data[i * 977] = 1e6;
            data[i * 1361 + 3] = -1e6;
        }
        let sq = ScalarQuantizer::train(&data, dim, 0.99);
        let hi = sq.lo() + 255.0 * sq.step();
        assert!(sq.lo() > -1.0 && sq.lo() < -0.98, "lo {}", sq.lo());
        assert!(hi < 1.0 && hi > 0.98, "hi {}", hi);
        // quantile 1 is min..max: the outliers are the range.
        let full = ScalarQuantizer::train(&data, dim, 1.0);
        assert_eq!(full.lo(), -1e6);
        // Out-of-range quantiles are clamped, not trusted.
        let clamped = ScalarQuantizer::train(&data, dim, 7.0);
        assert_eq!(clamped, full);
        let half = ScalarQuantizer::train(&data, dim, 0.1);
        assert!(half.step() > 0.0 && half.step().is_finite());
    }

    #[test]
    fn degenerate_training_sets_give_finite_quantizers() {
        let dim = 8;
        let v: Vec<f32> = (0..dim).map(|i| i as f32 * 0.1 - 0.3).collect();
        let cases: Vec<Vec<f32>> = vec![
            vec![],
            vec![4.0; 10 * dim],
            vec![0.0; 10 * dim],
            vec![f32::NAN; 3 * dim],
            vec![1.0; dim - 1], // shorter than one vector
        ];
        // Constant data near the f32 limit: the range stays finite (and persistable),
        // though costs at that scale are beyond f32, as exact ones would be.
        let huge = ScalarQuantizer::train(&vec![-3e38; 2 * dim], dim, 0.99);
        assert!(huge.lo().is_finite() && huge.step().is_finite() && huge.step() > 0.0);
        assert_eq!(ScalarQuantizer::from_bytes(&huge.to_bytes()).unwrap(), huge);
        for data in cases {
            let sq = ScalarQuantizer::train(&data, dim, 0.99);
            assert!(sq.step() > 0.0 && sq.step().is_finite() && sq.lo().is_finite());
            let bq = BinaryQuantizer::train(&data, dim);
            assert!(bq.mean().iter().all(|m| m.is_finite()));
            let mut code = vec![0u8; sq.code_len()];
            sq.encode(&v, &mut code);
            let mut bcode = vec![0u8; bq.code_len()];
            bq.encode(&v, &mut bcode);
            for d in ALL {
                let c = sq.cost(&sq.prepare_query(d, &v), &code);
                assert!(c.is_finite(), "{:?} {}", d, c);
                let c = bq.cost(&bq.prepare_query(d, &v), &bcode);
                assert!(c.is_finite(), "{:?} {}", d, c);
                // A constant query is exact on its own grid.
                let cq = sq.cost(&sq.prepare_query(d, &[0.5; 8]), &code);
                assert!(cq.is_finite());
            }
        }
        // Constant data decodes to (about) itself.
        let sq = ScalarQuantizer::train(&vec![4.0; 10 * dim], dim, 0.99);
        let mut code = vec![0u8; sq.code_len()];
        sq.encode(&[4.0; 8], &mut code);
        let mut back = [0f32; 8];
        sq.decode(&code, &mut back);
        assert!(back.iter().all(|&x| (x - 4.0).abs() <= sq.step()));
        // dim 0 works end to end.
        let sq = ScalarQuantizer::train(&[], 0, 0.99);
        let bq = BinaryQuantizer::train(&[1.0], 0);
        assert_eq!((sq.code_len(), bq.code_len()), (4, 16));
        let mut c = vec![0u8; 16];
        sq.encode(&[], &mut c);
        bq.encode(&[], &mut c);
        for d in ALL {
            assert!(sq.cost(&sq.prepare_query(d, &[]), &c).is_finite());
            assert!(bq.cost(&bq.prepare_query(d, &[]), &c).is_finite());
        }
    }

    /// The int8 cost is an estimate of the exact cost on the same scale, not just an order.
    #[test]
    fn scalar_cost_tracks_the_exact_cost() {
        let mut rng = SplitMix64::new(17);
        let dim = 96;
        let k = distance::kernels();
        for d in ALL {
            let mut data = gaussian(&mut rng, 300 * dim);
            for v in data.chunks_mut(dim) {
                d.preprocess(v);
            }
            let sq = ScalarQuantizer::train(&data, dim, 0.99);
            let mut code = vec![0u8; sq.code_len()];
            let mut q = gaussian(&mut rng, dim);
            d.preprocess(&mut q);
            // Dot queries of another scale than the data must not be clipped away.
            if d == Distance::Dot {
                for x in q.iter_mut() {
                    *x *= 20.0;
                }
            }
            let pq = sq.prepare_query(d, &q);
            let mut worst = 0f32;
            let mut mean = 0f32;
            let mut spread = 0f32;
            for v in data.chunks(dim) {
                sq.encode(v, &mut code);
                let exact = d.cost(k, &q, v);
                let err = (sq.cost(&pq, &code) - exact).abs();
                worst = worst.max(err);
                mean += err / 300.0;
                spread = spread.max(exact.abs());
            }
            println!("int8 {:?}: |approx - exact| mean {:.2e} worst {:.2e}, max |cost| {:.3}", d, mean, worst, spread);
            // Errors are a small fraction of the range of costs. The worst case is the
            // one value in a hundred that the 0.99 quantile clips, times q[i].
            assert!(mean <= 0.01 * spread, "{:?}: mean error {} of {}", d, mean, spread);
            assert!(worst <= 0.08 * spread, "{:?}: worst error {} of {}", d, worst, spread);
        }
    }

    /// Recall@10 after taking the `shortlist` best approximate candidates and rescoring
    /// them exactly, averaged over `queries` random queries.
    fn recall(
        d: Distance,
        data: &[f32],
        dim: usize,
        queries: &[f32],
        shortlist: usize,
        approx: &dyn Fn(&[f32]) -> Vec<f32>,
    ) -> f64 {
        let k = distance::kernels();
        let mut hit = 0usize;
        let mut total = 0usize;
        for q in queries.chunks(dim) {
            let exact: Vec<f32> = data.chunks(dim).map(|v| d.cost(k, q, v)).collect();
            let mut by_exact: Vec<usize> = (0..exact.len()).collect();
            by_exact.sort_by(|&a, &b| exact[a].partial_cmp(&exact[b]).unwrap());
            let ap = approx(q);
            let mut by_approx: Vec<usize> = (0..ap.len()).collect();
            by_approx.sort_by(|&a, &b| ap[a].partial_cmp(&ap[b]).unwrap());
            let mut short: Vec<usize> = by_approx[..shortlist].to_vec();
            short.sort_by(|&a, &b| exact[a].partial_cmp(&exact[b]).unwrap());
            let truth = &by_exact[..10];
            hit += short[..10].iter().filter(|i| truth.contains(i)).count();
            total += 10;
        }
        hit as f64 / total as f64
    }

    fn dataset(d: Distance, seed: u64, n: usize, nq: usize, dim: usize) -> (Vec<f32>, Vec<f32>) {
        let mut rng = SplitMix64::new(seed);
        let mut data = gaussian(&mut rng, n * dim);
        let mut queries = gaussian(&mut rng, nq * dim);
        for v in data.chunks_mut(dim).chain(queries.chunks_mut(dim)) {
            d.preprocess(v);
        }
        (data, queries)
    }

    #[test]
    fn scalar_ranking_recovers_the_exact_top_10() {
        let dim = 128;
        for d in ALL {
            let (data, queries) = dataset(d, 21 + d.code() as u64, 2000, 50, dim);
            let sq = ScalarQuantizer::train(&data, dim, 0.99);
            let cl = sq.code_len();
            let mut codes = vec![0u8; cl * 2000];
            for (v, c) in data.chunks(dim).zip(codes.chunks_mut(cl)) {
                sq.encode(v, c);
            }
            let r = recall(d, &data, dim, &queries, 30, &|q| {
                let pq = sq.prepare_query(d, q);
                codes.chunks(cl).map(|c| sq.cost(&pq, c)).collect()
            });
            println!("int8 {:?}: recall@10 (top 30 rescored) = {:.3}", d, r);
            assert!(r >= 0.95, "int8 {:?} recall {}", d, r);
        }
    }

    #[test]
    fn binary_ranking_recovers_a_fair_share_of_the_top_10() {
        let dim = 128;
        for d in ALL {
            let (data, queries) = dataset(d, 31 + d.code() as u64, 2000, 50, dim);
            let bq = BinaryQuantizer::train(&data, dim);
            let cl = bq.code_len();
            let mut codes = vec![0u8; cl * 2000];
            for (v, c) in data.chunks(dim).zip(codes.chunks_mut(cl)) {
                bq.encode(v, c);
            }
            let r = recall(d, &data, dim, &queries, 100, &|q| {
                let pq = bq.prepare_query(d, q);
                codes.chunks(cl).map(|c| bq.cost(&pq, c)).collect()
            });
            println!("binary {:?}: recall@10 (top 100 rescored) = {:.3}", d, r);
            if d == Distance::Cosine {
                assert!(r >= 0.6, "binary Cosine recall {}", r);
            }
        }
    }

    #[test]
    fn binary_cost_finds_the_vector_itself_and_survives_bad_padding() {
        let dim = 100;
        for d in ALL {
            let (data, _) = dataset(d, 41, 300, 0, dim);
            let bq = BinaryQuantizer::train(&data, dim);
            let cl = bq.code_len();
            assert_eq!(cl, 2 * 8 + 16);
            let mut codes = vec![0u8; cl * 300];
            for (v, c) in data.chunks(dim).zip(codes.chunks_mut(cl)) {
                bq.encode(v, c);
            }
            let mut first = 0;
            for (i, q) in data.chunks(dim).enumerate().take(50) {
                let pq = bq.prepare_query(d, q);
                let costs: Vec<f32> = codes.chunks(cl).map(|c| bq.cost(&pq, c)).collect();
                assert!(costs.iter().all(|c| c.is_finite()));
                let better = costs.iter().filter(|&&c| c < costs[i]).count();
                if better == 0 {
                    first += 1;
                }
                // Set padding bits (as a corrupt code would): no panic, still finite.
                let mut c = codes[i * cl..(i + 1) * cl].to_vec();
                c[15] = 0xff;
                assert!(bq.cost(&pq, &c).is_finite());
            }
            // Dot favours long vectors over the query itself, so only the others must.
            println!("binary {:?}: the query's own code ranks first {} / 50", d, first);
            if d != Distance::Dot {
                assert!(first >= 45, "{:?}: self ranked first only {} / 50", d, first);
            }
        }
    }

    #[test]
    fn bytes_round_trip_and_reject_damage() {
        let mut rng = SplitMix64::new(9);
        let dim = 33;
        let data = gaussian(&mut rng, 100 * dim);
        let sq = ScalarQuantizer::train(&data, dim, 0.99);
        let bq = BinaryQuantizer::train(&data, dim);
        let sb = sq.to_bytes();
        let bb = bq.to_bytes();
        assert_eq!(ScalarQuantizer::from_bytes(&sb).unwrap(), sq);
        assert_eq!(BinaryQuantizer::from_bytes(&bb).unwrap(), bq);
        for n in 0..sb.len() {
            assert_eq!(ScalarQuantizer::from_bytes(&sb[..n]).unwrap_err().kind, ErrorKind::Corrupt);
        }
        for n in 0..bb.len() {
            assert_eq!(BinaryQuantizer::from_bytes(&bb[..n]).unwrap_err().kind, ErrorKind::Corrupt);
        }
        let mut longer = sb.clone();
        longer.push(0);
        assert_eq!(ScalarQuantizer::from_bytes(&longer).unwrap_err().kind, ErrorKind::Corrupt);
        let mut longer = bb.clone();
        longer.push(0);
        assert_eq!(BinaryQuantizer::from_bytes(&longer).unwrap_err().kind, ErrorKind::Corrupt);
        // Wrong magic: each quantizer refuses the other's bytes.
        assert_eq!(ScalarQuantizer::from_bytes(&bb).unwrap_err().kind, ErrorKind::Corrupt);
        assert_eq!(BinaryQuantizer::from_bytes(&sb).unwrap_err().kind, ErrorKind::Corrupt);
        // A future version is named as such.
        let mut v2 = sb.clone();
        v2[4] = 2;
        assert_eq!(ScalarQuantizer::from_bytes(&v2).unwrap_err().kind, ErrorKind::UnsupportedFormat);
        // Binary bytes of version 1 (12-byte code tails) are refused, not misread.
        let mut v1 = bb.clone();
        v1[4] = 1;
        assert_eq!(BinaryQuantizer::from_bytes(&v1).unwrap_err().kind, ErrorKind::UnsupportedFormat);
        // A zero or NaN step and a NaN mean are corrupt, not accepted.
        for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
            let mut b = sb.clone();
            b[16..20].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(ScalarQuantizer::from_bytes(&b).unwrap_err().kind, ErrorKind::Corrupt);
        }
        let mut b = bb.clone();
        b[12..16].copy_from_slice(&f32::NAN.to_le_bytes());
        assert_eq!(BinaryQuantizer::from_bytes(&b).unwrap_err().kind, ErrorKind::Corrupt);
        // A huge dim with few bytes is refused before any allocation.
        let mut b = bb.clone();
        b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(BinaryQuantizer::from_bytes(&b).unwrap_err().kind, ErrorKind::Corrupt);
        // Random garbage never panics.
        for _ in 0..2000 {
            let n = (rng.next_u64() % 64) as usize;
            let mut g: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            if n >= 8 && rng.next_u64() & 1 == 0 {
                if n & 1 == 0 {
                    g[..4].copy_from_slice(SQ_MAGIC);
                    g[4..8].copy_from_slice(&SQ_VERSION.to_le_bytes());
                } else {
                    g[..4].copy_from_slice(BQ_MAGIC);
                    g[4..8].copy_from_slice(&BQ_VERSION.to_le_bytes());
                }
            }
            let _ = ScalarQuantizer::from_bytes(&g);
            let _ = BinaryQuantizer::from_bytes(&g);
        }
    }

    #[test]
    fn large_training_sets_are_sampled() {
        // More values than MAX_TRAIN_VALUES: the sample still finds the range.
        let dim = 3;
        let n = MAX_TRAIN_VALUES / dim + 1000;
        let mut rng = SplitMix64::new(13);
        let data: Vec<f32> = (0..n * dim).map(|_| rng.next_f32() * 10.0).collect();
        let sq = ScalarQuantizer::train(&data, dim, 0.98);
        let hi = sq.lo() + 255.0 * sq.step();
        assert!((sq.lo() - 0.1).abs() < 0.02, "lo {}", sq.lo());
        assert!((hi - 9.9).abs() < 0.02, "hi {}", hi);
    }
}
