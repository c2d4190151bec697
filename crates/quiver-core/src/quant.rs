//! Vector quantization: scalar int8 and binary codes with approximate costs.
//!
//! Owns: training the two quantizers (a clip range per dimension for int8, per-dimension
//! means for binary), encoding a vector into a fixed-length code, preparing a query once per
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
//! - int8, `dim + 8` bytes: `dim` codes `c` with `x[j] ~= lo[j] + step[j] * c[j]`, then
//!   two f32: the sum of the codes (exact: at most 255 * dim < 2^24 for dim <= 65793)
//!   and the squared norm of the decoded vector (for the Euclid cost).
//! - binary, `ceil(dim / 64) * 8 + 16` bytes: one bit per dimension (`x > mean`),
//!   packed in little-endian u64 words (dimension `i` is bit `i % 64` of word `i / 64`,
//!   padding bits zero), then four f32: `|d|^2 / sum |d|`, `|d|`, `mean . d` (with
//!   `d = v - mean`) and the number of set bits.

use crate::distance::Distance;
use crate::error::{Error, ErrorKind, Result};

/// Bytes after the int8 codes: two f32 (sum of the codes, squared norm of the decoded
/// vector).
const SQ_EXTRA: usize = 8;
/// Bytes after the binary words: four f32 (estimate scale, centred norm,
/// mean . centred vector, number of set bits).
const BQ_EXTRA: usize = 16;
/// Int8 training looks at no more than this many values (whole vectors picked with a
/// fixed stride, see `MAX_TRAIN_VECTORS`), so training on a million 1536-d vectors
/// takes a moment, not minutes.
const MAX_TRAIN_VALUES: usize = 1 << 22;
const SQ_MAGIC: &[u8; 4] = b"QVSQ";
const BQ_MAGIC: &[u8; 4] = b"QVBQ";
/// Byte-format versions. They also name the CODE layout, since an index stores codes
/// beside the quantizer: binary is 2 because its per-vector tail grew from 12 to 16
/// bytes (the set-bit count), so an index written with 12-byte tails is refused
/// (`UnsupportedFormat`) rather than misread.
/// Scalar is 2 since it keeps one range per dimension and codes grew a second f32
/// (`dim + 8` bytes): version 1 bytes are refused.
const SQ_VERSION: u32 = 2;
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
    /// `sum |p[i] - s[i] * c[i]|` for f32 `p`, `s` and u8 codes: a weighted L1. Float:
    /// summation order differs between kernel sets, so results agree to rounding, not
    /// bit for bit. Reads `min(p.len(), s.len(), c.len())` elements.
    pub l1w_f32_u8: fn(&[f32], &[f32], &[u8]) -> f32,
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

    pub fn l1w_f32_u8(p: &[f32], s: &[f32], c: &[u8]) -> f32 {
        // Eight partial sums: lets LLVM vectorise without reassociating floats itself.
        let n = p.len().min(s.len()).min(c.len());
        let mut acc = [0f32; 8];
        let mut i = 0;
        while i + 8 <= n {
            for k in 0..8 {
                acc[k] += (p[i + k] - s[i + k] * c[i + k] as f32).abs();
            }
            i += 8;
        }
        let mut t = (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]);
        while i < n {
            t += (p[i] - s[i] * c[i] as f32).abs();
            i += 1;
        }
        t
    }
}

pub const SCALAR: QuantKernels = QuantKernels {
    name: "scalar",
    dot_u8: scalar::dot_u8,
    l2sq_u8: scalar::l2sq_u8,
    l1_u8: scalar::l1_u8,
    bitplanes: scalar::bitplanes,
    l1w_f32_u8: scalar::l1w_f32_u8,
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

    /// Eight codes as eight f32 lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn codes8(p: *const u8) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i)))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn hsum_ps(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn l1w_f32_u8_impl(p: &[f32], s: &[f32], c: &[u8]) -> f32 {
        let n = p.len().min(s.len()).min(c.len());
        let (pp, ps, pc) = (p.as_ptr(), s.as_ptr(), c.as_ptr());
        // Clearing the sign bit is |x|.
        let mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            let d0 = _mm256_fnmadd_ps(_mm256_loadu_ps(ps.add(i)), codes8(pc.add(i)), _mm256_loadu_ps(pp.add(i)));
            let d1 =
                _mm256_fnmadd_ps(_mm256_loadu_ps(ps.add(i + 8)), codes8(pc.add(i + 8)), _mm256_loadu_ps(pp.add(i + 8)));
            acc0 = _mm256_add_ps(acc0, _mm256_and_ps(d0, mask));
            acc1 = _mm256_add_ps(acc1, _mm256_and_ps(d1, mask));
            i += 16;
        }
        if i + 8 <= n {
            let d0 = _mm256_fnmadd_ps(_mm256_loadu_ps(ps.add(i)), codes8(pc.add(i)), _mm256_loadu_ps(pp.add(i)));
            acc0 = _mm256_add_ps(acc0, _mm256_and_ps(d0, mask));
            i += 8;
        }
        let mut t = hsum_ps(_mm256_add_ps(acc0, acc1));
        while i < n {
            t += (*pp.add(i) - *ps.add(i) * *pc.add(i) as f32).abs();
            i += 1;
        }
        t
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
    pub fn l1w_f32_u8(p: &[f32], s: &[f32], c: &[u8]) -> f32 {
        unsafe { l1w_f32_u8_impl(p, s, c) }
    }

    pub fn available() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("popcnt") && is_x86_feature_detected!("fma")
    }

    pub const KERNELS: super::QuantKernels = super::QuantKernels {
        name: "avx2+fma+popcnt",
        dot_u8,
        l2sq_u8,
        l1_u8,
        bitplanes,
        l1w_f32_u8,
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

    /// Codes `i..i + 8` as two f32x4.
    #[inline]
    unsafe fn codes8(p: *const u8) -> (float32x4_t, float32x4_t) {
        let h = vmovl_u8(vld1_u8(p));
        (vcvtq_f32_u32(vmovl_u16(vget_low_u16(h))), vcvtq_f32_u32(vmovl_u16(vget_high_u16(h))))
    }

    pub fn l1w_f32_u8(p: &[f32], s: &[f32], c: &[u8]) -> f32 {
        let n = p.len().min(s.len()).min(c.len());
        unsafe {
            let (pp, ps, pc) = (p.as_ptr(), s.as_ptr(), c.as_ptr());
            let mut acc0 = vdupq_n_f32(0.0);
            let mut acc1 = vdupq_n_f32(0.0);
            let mut i = 0;
            while i + 8 <= n {
                let (c0, c1) = codes8(pc.add(i));
                // vfmsq(a, b, c) = a - b * c
                let d0 = vfmsq_f32(vld1q_f32(pp.add(i)), vld1q_f32(ps.add(i)), c0);
                let d1 = vfmsq_f32(vld1q_f32(pp.add(i + 4)), vld1q_f32(ps.add(i + 4)), c1);
                acc0 = vaddq_f32(acc0, vabsq_f32(d0));
                acc1 = vaddq_f32(acc1, vabsq_f32(d1));
                i += 8;
            }
            let mut t = vaddvq_f32(vaddq_f32(acc0, acc1));
            while i < n {
                t += (*pp.add(i) - *ps.add(i) * *pc.add(i) as f32).abs();
                i += 1;
            }
            t
        }
    }

    pub const KERNELS: super::QuantKernels = super::QuantKernels {
        name: "neon",
        dot_u8,
        l2sq_u8,
        l1_u8,
        bitplanes: super::scalar::bitplanes,
        l1w_f32_u8,
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

    #[inline]
    unsafe fn loadf(p: *const f32) -> v128 {
        core::ptr::read_unaligned(p as *const v128)
    }

    #[inline]
    fn hsumf(v: v128) -> f32 {
        (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
            + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v))
    }

    /// Codes `i..i + 16` (one v128) as four f32x4.
    #[inline]
    fn codes16(b: v128) -> [v128; 4] {
        let lo = u16x8_extend_low_u8x16(b);
        let hi = u16x8_extend_high_u8x16(b);
        [
            f32x4_convert_u32x4(u32x4_extend_low_u16x8(lo)),
            f32x4_convert_u32x4(u32x4_extend_high_u16x8(lo)),
            f32x4_convert_u32x4(u32x4_extend_low_u16x8(hi)),
            f32x4_convert_u32x4(u32x4_extend_high_u16x8(hi)),
        ]
    }

    pub fn l1w_f32_u8(p: &[f32], s: &[f32], c: &[u8]) -> f32 {
        let n = p.len().min(s.len()).min(c.len());
        unsafe {
            let (pp, ps, pc) = (p.as_ptr(), s.as_ptr(), c.as_ptr());
            let mut acc = [f32x4_splat(0.0); 4];
            let mut i = 0;
            while i + 16 <= n {
                let cs = codes16(load(pc.add(i)));
                for k in 0..4 {
                    let d = f32x4_sub(loadf(pp.add(i + 4 * k)), f32x4_mul(loadf(ps.add(i + 4 * k)), cs[k]));
                    acc[k] = f32x4_add(acc[k], f32x4_abs(d));
                }
                i += 16;
            }
            let mut t = hsumf(f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3])));
            while i < n {
                t += (*pp.add(i) - *ps.add(i) * *pc.add(i) as f32).abs();
                i += 1;
            }
            t
        }
    }

    pub const KERNELS: super::QuantKernels = super::QuantKernels {
        name: "simd128",
        dot_u8,
        l2sq_u8,
        l1_u8,
        bitplanes: super::scalar::bitplanes,
        l1w_f32_u8,
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

/// Uniform 8-bit quantization with one clip range per dimension:
/// `x[j] ~= lo[j] + step[j] * c[j]`, `c[j]` in 0..=255. Per-dimension ranges spend the
/// 256 levels where each dimension's values actually are; with one range shared by all
/// dimensions, dimensions of small spread got a handful of levels (measured on 100
/// Gaussian clusters whose within-cluster spread falls from 1 to 0.15 along the
/// dimensions, 100k x 128, Cosine: the exact top 10 in the approximate top 30 went from
/// 0.888 to 0.962). The quantile clip keeps a few outliers from wasting the levels.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalarQuantizer {
    dim: usize,
    lo: Vec<f32>,
    step: Vec<f32>,
    /// `1 / step`, cached for `encode` (always finite: `train` and `from_bytes` see to it).
    inv: Vec<f32>,
}

/// A query prepared for one search against int8 codes. Owned, so a search holds it
/// without borrowing the quantizer.
///
/// With `x^ = lo + step * c` the decoded vector and `w[j] = q[j] * step[j]`:
///   `q . x^ = q . lo + w . c`
/// and `w` is quantized on its own range (min..max of `w`, so a query of another scale
/// than the data, common with Dot, is not clipped), `w ~= wlo + wstep * cw`:
///   `w . c ~= wlo * sum(c) + wstep * (cw . c)`
/// with `sum(c)` stored with the code and `cw . c` one exact integer kernel call.
/// Cosine/Dot cost `-(q . x^)`; Euclid `|q|^2 - 2 q . x^ + |x^|^2` with `|x^|^2` also
/// stored with the code. So both are `bias + int_scale * I + sum_scale * S + norm_scale * N`.
///
/// Measured against scoring `w . c` in f32 (an f32 x u8 kernel, no query rounding) on
/// the clustered set of the tests: the same recall to within 0.004 either way, and at
/// dim 784 the integer kernel takes 28 ns where the float one took 42.
///
/// Manhattan is `sum |q[j] - x^[j]| = sum |p[j] - step[j] * c[j]|` with `p = q - lo`:
/// a weighted L1 that no u8 kernel computes, so it runs in f32 (`l1w_f32_u8`): measured
/// 2.5x (dim 128) to 4.5x (dim 784) slower than the unweighted integer L1 that one
/// global range allowed.
#[derive(Clone)]
pub struct ScalarQuery {
    distance: Distance,
    dim: usize,
    /// Cosine/Dot/Euclid: `w` quantized (empty for Manhattan).
    codes: Vec<u8>,
    /// Manhattan: `q - lo` and the steps (empty otherwise).
    p: Vec<f32>,
    s: Vec<f32>,
    bias: f32,
    int_scale: f32,
    sum_scale: f32,
    norm_scale: f32,
    dot_u8: fn(&[u8], &[u8]) -> u64,
    l1w_f32_u8: fn(&[f32], &[f32], &[u8]) -> f32,
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

/// An i32 whose order is the order of the (finite) f32: flip the magnitude bits of
/// negatives. Its own inverse. Lets the selection use plain integer comparisons
/// instead of a `partial_cmp` closure.
#[inline]
fn order_key(x: f32) -> i32 {
    let b = x.to_bits() as i32;
    b ^ ((b >> 31) & 0x7fff_ffff)
}

#[inline]
fn from_order_key(k: i32) -> f32 {
    f32::from_bits((k ^ ((k >> 31) & 0x7fff_ffff)) as u32)
}

/// `(lo, step)` for the clip range `lo..=hi` (`None`: no finite data). Empty or constant
/// data gives a range centred on the value (on 0 for no data) with a half-width of
/// `max(|value|, 1)`, so nothing divides by zero; bounds are clamped to f32's range so
/// values near f32::MAX neither overflow nor round to a zero step.
fn clip_range(range: Option<(f32, f32)>) -> (f32, f32) {
    let centred = |c: f64| {
        let h = c.abs().max(1.0);
        (c - h, c + h)
    };
    let (lo, hi) = match range {
        Some((lo, hi)) if hi > lo => (lo as f64, hi as f64),
        Some((c, _)) => centred(c as f64),
        None => (-1.0, 1.0),
    };
    let fit = |lo: f64, hi: f64| {
        let lo = lo.max(-f32::MAX as f64);
        let hi = hi.min(f32::MAX as f64);
        let step = ((hi - lo) / 255.0) as f32;
        (lo as f32, step)
    };
    let (l, s) = fit(lo, hi);
    if valid_range(l, s) {
        return (l, s);
    }
    // A range so narrow that its step underflows (or 1 / step overflows): widen it.
    let (l, s) = fit(centred(lo).0, centred(lo).1);
    if valid_range(l, s) {
        (l, s)
    } else {
        (-1.0, 2.0 / 255.0)
    }
}

fn valid_range(lo: f32, step: f32) -> bool {
    lo.is_finite() && step > 0.0 && step.is_finite() && (1.0 / step).is_finite()
}

/// Training looks at no more than this many vectors (picked with a fixed stride), and
/// no more than `MAX_TRAIN_VALUES` values unless that would be under the minimum.
const MAX_TRAIN_VECTORS: usize = 32768;
const MIN_TRAIN_VECTORS: usize = 4096;
/// Dimensions gathered per pass over the sample: 16 f32 are one cache line.
const TRAIN_GROUP: usize = 16;

impl ScalarQuantizer {
    /// Learns one clip range per dimension from `vectors` (flat, `n * dim`; a trailing
    /// partial vector is ignored, non-finite values are skipped). Dimension `j`'s range
    /// spans the `(1 - quantile) / 2` and `1 - (1 - quantile) / 2` quantiles of its
    /// values; `quantile` is clamped to [0.5, 1] (NaN means the default 0.99). No data,
    /// or constant data, gives a range centred on that value (on 0 for no data) with a
    /// half-width of `max(|value|, 1)`, so nothing divides by zero.
    ///
    /// Large sets are sampled: at most 32768 vectors (fewer for long vectors, down to
    /// 4096), every `ceil(n / limit)`-th one, then an O(n) selection per dimension.
    pub fn train(vectors: &[f32], dim: usize, quantile: f32) -> ScalarQuantizer {
        let q = if quantile.is_nan() { 0.99 } else { quantile.clamp(0.5, 1.0) };
        let n = vectors.len().checked_div(dim).unwrap_or(0);
        let limit = (MAX_TRAIN_VALUES / dim.max(1)).clamp(MIN_TRAIN_VECTORS, MAX_TRAIN_VECTORS);
        let stride = if n > limit { (n + limit - 1) / limit } else { 1 };
        let picked = (n + stride - 1) / stride;
        let mut lo = Vec::with_capacity(dim);
        let mut step = Vec::with_capacity(dim);
        let mut cols: Vec<Vec<i32>> = (0..TRAIN_GROUP.min(dim)).map(|_| Vec::with_capacity(picked)).collect();
        let mut g0 = 0;
        while g0 < dim {
            let g1 = (g0 + TRAIN_GROUP).min(dim);
            for c in cols.iter_mut() {
                c.clear();
            }
            let mut i = 0;
            while i < n {
                let v = &vectors[i * dim + g0..i * dim + g1];
                for (c, &x) in cols.iter_mut().zip(v) {
                    if x.is_finite() {
                        c.push(order_key(x));
                    }
                }
                i += stride;
            }
            for c in cols[..g1 - g0].iter_mut() {
                let range = if c.is_empty() {
                    None
                } else {
                    let m = c.len();
                    let tail = ((1.0 - q as f64) * 0.5 * m as f64).floor() as usize;
                    let lo_rank = tail.min((m - 1) / 2);
                    let hi_rank = m - 1 - lo_rank;
                    c.select_nth_unstable(lo_rank);
                    let l = c[lo_rank];
                    // Everything right of lo_rank is >= l, so the high rank is found there.
                    let right = &mut c[lo_rank..];
                    right.select_nth_unstable(hi_rank - lo_rank);
                    Some((from_order_key(l), from_order_key(right[hi_rank - lo_rank])))
                };
                let (l, s) = clip_range(range);
                lo.push(l);
                step.push(s);
            }
            g0 = g1;
        }
        let inv = step.iter().map(|&s| 1.0 / s).collect();
        ScalarQuantizer { dim, lo, step, inv }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Lower ends of the clip ranges (the values of code 0), one per dimension.
    pub fn lo(&self) -> &[f32] {
        &self.lo
    }

    /// Distances between adjacent code values, one per dimension; the decoding error
    /// of an in-range value is at most half of it.
    pub fn step(&self) -> &[f32] {
        &self.step
    }

    /// Bytes per encoded vector: `dim + 8` (the codes, then two f32: the sum of the
    /// codes and the squared norm of the decoded vector).
    pub fn code_len(&self) -> usize {
        self.dim + SQ_EXTRA
    }

    /// Writes `v`'s code into `out[..code_len()]`. Panics if `v.len() != dim` or `out`
    /// is shorter than `code_len()`: both are the caller's bugs, not data errors.
    pub fn encode(&self, v: &[f32], out: &mut [u8]) {
        assert_eq!(v.len(), self.dim, "ScalarQuantizer::encode: vector length");
        assert!(out.len() >= self.code_len(), "ScalarQuantizer::encode: output too short");
        let mut sum = 0u64;
        let mut nn = 0f64;
        for (j, (o, &x)) in out[..self.dim].iter_mut().zip(v).enumerate() {
            let c = quantize(x, self.lo[j], self.inv[j]);
            *o = c;
            sum += c as u64;
            // The norm of the DECODED vector: the Euclid cost is |q - x^|^2 expanded,
            // which only holds if every term is about the same x^.
            let xh = (self.lo[j] + self.step[j] * c as f32) as f64;
            nn += xh * xh;
        }
        let d = self.dim;
        // Exact: at most 255 * dim < 2^24 for dim <= 65793.
        out[d..d + 4].copy_from_slice(&(sum as f32).to_le_bytes());
        out[d + 4..d + 8].copy_from_slice(&(nn as f32).to_le_bytes());
    }

    /// The values a code stands for (clipped, rounded to the grid). For tests and
    /// debugging; search never decodes.
    pub fn decode(&self, code: &[u8], out: &mut [f32]) {
        for (j, (o, &c)) in out.iter_mut().zip(&code[..self.dim]).enumerate() {
            *o = self.lo[j] + self.step[j] * c as f32;
        }
    }

    /// Prepares `q` (already preprocessed: normalised for Cosine) for `cost` (see
    /// `ScalarQuery` for the arithmetic).
    pub fn prepare_query(&self, distance: Distance, q: &[f32]) -> ScalarQuery {
        assert_eq!(q.len(), self.dim, "ScalarQuantizer::prepare_query: vector length");
        let k = kernels();
        let mut query = ScalarQuery {
            distance,
            dim: self.dim,
            codes: Vec::new(),
            p: Vec::new(),
            s: Vec::new(),
            bias: 0.0,
            int_scale: 0.0,
            sum_scale: 0.0,
            norm_scale: 0.0,
            dot_u8: k.dot_u8,
            l1w_f32_u8: k.l1w_f32_u8,
        };
        if distance == Distance::Manhattan {
            query.p = q.iter().zip(&self.lo).map(|(&x, &l)| x - l).collect();
            query.s = self.step.clone();
            return query;
        }
        let mut qlo = 0.0f64; // q . lo
        let mut qn2 = 0.0f64;
        let mut wlo = f32::INFINITY;
        let mut whi = f32::NEG_INFINITY;
        let mut w = Vec::with_capacity(self.dim);
        for ((&x, &l), &s) in q.iter().zip(&self.lo).zip(&self.step) {
            qlo += x as f64 * l as f64;
            qn2 += x as f64 * x as f64;
            let y = x * s;
            wlo = wlo.min(y);
            whi = whi.max(y);
            w.push(y);
        }
        if wlo > whi {
            // Empty (dim 0) or all-NaN query (min/max skip NaN).
            wlo = 0.0;
            whi = 0.0;
        }
        let wstep = ((whi as f64 - wlo as f64) / 255.0) as f32;
        // A constant w has wstep = 0 exactly: codes 0 and `wlo * sum(c)` are exact.
        let inv = if wstep > 0.0 { 1.0 / wstep } else { 0.0 };
        query.codes = w.iter().map(|&x| quantize(x, wlo, inv)).collect();
        // cost = base + sign * (q . lo + w . c) + norm_scale * |x^|^2
        let (base, sign) = if distance == Distance::Euclid { (qn2, -2.0) } else { (0.0, -1.0) };
        query.bias = (base + sign * qlo) as f32;
        query.int_scale = (sign * wstep as f64) as f32;
        query.sum_scale = (sign * wlo as f64) as f32;
        query.norm_scale = if distance == Distance::Euclid { 1.0 } else { 0.0 };
        query
    }

    /// Approximate `distance.cost(q, v)` for the vector `v` whose code is `code`
    /// (`code.len() >= code_len()`). The hot path: no allocation, one kernel call
    /// through a pointer chosen in `prepare_query`.
    #[inline]
    pub fn cost(&self, query: &ScalarQuery, code: &[u8]) -> f32 {
        let n = query.dim;
        let tail = &code[n..n + SQ_EXTRA];
        let c = &code[..n];
        if query.distance == Distance::Manhattan {
            return (query.l1w_f32_u8)(&query.p, &query.s, c);
        }
        let i = (query.dot_u8)(c, &query.codes);
        query.bias
            + query.int_scale * i as f32
            + query.sum_scale * read_f32(tail, 0)
            + query.norm_scale * read_f32(tail, 4)
    }

    /// `magic "QVSQ" | version u32 (2) | dim u32 | dim x f32 lo | dim x f32 step`,
    /// little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(12 + 8 * self.dim);
        b.extend_from_slice(SQ_MAGIC);
        b.extend_from_slice(&SQ_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.dim as u32).to_le_bytes());
        for x in self.lo.iter().chain(&self.step) {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b
    }

    /// Reads `to_bytes`' output. `Corrupt` for any malformed input (wrong magic or
    /// length, a non-finite `lo`, a step that is not positive or whose inverse is not
    /// finite); `UnsupportedFormat` for a version this build does not read, including
    /// version 1 (one global range, `dim + 4`-byte codes: an index holding those codes
    /// must be rebuilt).
    pub fn from_bytes(b: &[u8]) -> Result<ScalarQuantizer> {
        let mut r = Reader::new(b, "scalar quantizer");
        r.header(SQ_MAGIC, SQ_VERSION)?;
        let dim = r.u32()? as usize;
        // Check the length before allocating: a corrupt dim must not ask for 32 GB.
        if r.remaining() != dim as u64 * 8 {
            return Err(Error::corrupt(format!("scalar quantizer: {} bytes of ranges for dim {}", r.remaining(), dim)));
        }
        let mut lo = Vec::with_capacity(dim);
        for _ in 0..dim {
            lo.push(r.f32()?);
        }
        let mut step = Vec::with_capacity(dim);
        for _ in 0..dim {
            step.push(r.f32()?);
        }
        r.end()?;
        for (j, (&l, &s)) in lo.iter().zip(&step).enumerate() {
            if !valid_range(l, s) {
                return Err(Error::corrupt(format!("scalar quantizer: bad range lo={} step={} in dimension {}", l, s, j)));
            }
        }
        let inv = step.iter().map(|&s| 1.0 / s).collect();
        Ok(ScalarQuantizer { dim, lo, step, inv })
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
            // Float kernels: weights of both signs and mixed scales, against an f64 sum.
            let w: Vec<f32> = (0..dim).map(|_| rng.next_gaussian() * (1.0 + 10.0 * rng.next_f32())).collect();
            let st: Vec<f32> = (0..dim).map(|_| rng.next_f32() * 0.1).collect();
            let exact_l1: f64 =
                w.iter().zip(&st).zip(&b).map(|((&p, &s), &c)| (p as f64 - s as f64 * c as f64).abs()).sum();
            let tol_l1 = 1e-5 * exact_l1 + 1e-6;
            // Odd offsets for the float side too (a query's Vec is aligned, but no kernel
            // may rely on it).
            let mut wshift = vec![0f32; off + dim];
            wshift[off..].copy_from_slice(&w);
            let w_unaligned = &wshift[off..];
            assert!((scalar::l1w_f32_u8(&w, &st, &b) as f64 - exact_l1).abs() <= tol_l1);
            for k in &all {
                let fl = (k.l1w_f32_u8)(w_unaligned, &st, a_unaligned);
                let exact_l1_a: f64 =
                    w.iter().zip(&st).zip(&a).map(|((&p, &s), &c)| (p as f64 - s as f64 * c as f64).abs()).sum();
                assert!((fl as f64 - exact_l1_a).abs() <= 1e-5 * exact_l1_a + 1e-6, "{} l1w_f32_u8 dim {}", k.name, dim);
                let fl = (k.l1w_f32_u8)(&w, &st, &b);
                assert!((fl as f64 - exact_l1).abs() <= tol_l1, "{} l1w_f32_u8 dim {}: {} vs {}", k.name, dim, fl, exact_l1);
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
            assert_eq!((k.l1w_f32_u8)(&[], &[], &[]), 0.0);
            // Lengths differ: the shortest wins.
            assert_eq!((k.l1w_f32_u8)(&[1.0; 40], &[1.0; 35], &[3; 33]), 66.0);
        }
    }

    #[test]
    fn encode_decode_error_is_within_half_a_step() {
        let mut rng = SplitMix64::new(3);
        let dim = 77;
        let mut data = gaussian(&mut rng, 500 * dim);
        // Dimension j has spread 1 + j: each gets its own range.
        for (i, x) in data.iter_mut().enumerate() {
            *x *= 1.0 + (i % dim) as f32;
        }
        let sq = ScalarQuantizer::train(&data, dim, 0.99);
        assert_eq!(sq.code_len(), dim + 8);
        assert!(sq.step()[dim - 1] > 20.0 * sq.step()[0], "{} vs {}", sq.step()[dim - 1], sq.step()[0]);
        let mut code = vec![0u8; sq.code_len()];
        let mut back = vec![0f32; dim];
        for v in data.chunks(dim).take(100) {
            sq.encode(v, &mut code);
            sq.decode(&code, &mut back);
            for (j, (&x, &y)) in v.iter().zip(&back).enumerate() {
                let (lo, step) = (sq.lo()[j], sq.step()[j]);
                let clipped = x.max(lo).min(lo + 255.0 * step);
                assert!((clipped - y).abs() <= step * 0.5 + 1e-5 * (1.0 + x.abs()), "{} -> {}", x, y);
            }
            let sum: u32 = code[..dim].iter().map(|&c| c as u32).sum();
            assert_eq!(read_f32(&code, dim), sum as f32);
            let nn: f64 = back.iter().map(|&x| x as f64 * x as f64).sum();
            assert!((read_f32(&code, dim + 4) as f64 - nn).abs() <= 1e-5 * nn);
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
        for j in 0..dim {
            let (lo, hi) = (sq.lo()[j], sq.lo()[j] + 255.0 * sq.step()[j]);
            assert!(lo > -1.0 && lo < -0.98, "lo {}", lo);
            assert!(hi < 1.0 && hi > 0.98, "hi {}", hi);
        }
        // quantile 1 is min..max: the outliers are the range, in their dimensions only.
        let full = ScalarQuantizer::train(&data, dim, 1.0);
        let min = full.lo().iter().cloned().fold(f32::INFINITY, f32::min);
        assert_eq!(min, -1e6);
        assert!(full.lo()[1] > -1.0, "dimension 1 has no outlier: lo {}", full.lo()[1]);
        // Out-of-range quantiles are clamped, not trusted.
        let clamped = ScalarQuantizer::train(&data, dim, 7.0);
        assert_eq!(clamped, full);
        let half = ScalarQuantizer::train(&data, dim, 0.1);
        assert!(half.step().iter().all(|&s| s > 0.0 && s.is_finite()));
        // The half quantile is the median: a range of one value, widened around it.
        let med = ScalarQuantizer::train(&data, dim, 0.5);
        assert!(med.step().iter().all(|&s| s > 0.0 && s.is_finite()));
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
        assert!(valid_range(huge.lo()[0], huge.step()[0]));
        assert_eq!(ScalarQuantizer::from_bytes(&huge.to_bytes()).unwrap(), huge);
        // Ranges so narrow the step would underflow, and mixed dimensions: constant,
        // NaN-only, ordinary.
        let mut tiny = vec![0f32; 4 * dim];
        for (i, x) in tiny.iter_mut().enumerate() {
            let j = i % dim;
            *x = match j {
                0 => 1e-45 * (i / dim) as f32,
                1 => 1.0 + f32::EPSILON * (i / dim) as f32,
                2 => f32::NAN,
                3 => 7.0,
                4 => f32::INFINITY,
                _ => (i as f32).sin(),
            };
        }
        let mut cases = cases;
        cases.push(tiny);
        for data in cases {
            let sq = ScalarQuantizer::train(&data, dim, 0.99);
            for j in 0..dim {
                assert!(valid_range(sq.lo()[j], sq.step()[j]), "dim {}: {} {}", j, sq.lo()[j], sq.step()[j]);
            }
            assert_eq!(ScalarQuantizer::from_bytes(&sq.to_bytes()).unwrap(), sq);
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
        assert!(back.iter().zip(sq.step()).all(|(&x, &s)| (x - 4.0).abs() <= s));
        // dim 0 works end to end.
        let sq = ScalarQuantizer::train(&[], 0, 0.99);
        let bq = BinaryQuantizer::train(&[1.0], 0);
        assert_eq!((sq.code_len(), bq.code_len()), (8, 16));
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
        // A future version is named as such, and so is version 1 (one global range,
        // `dim + 4`-byte codes), whose 20 bytes are refused, not misread.
        let mut v3 = sb.clone();
        v3[4] = 3;
        assert_eq!(ScalarQuantizer::from_bytes(&v3).unwrap_err().kind, ErrorKind::UnsupportedFormat);
        let mut v1 = Vec::new();
        v1.extend_from_slice(SQ_MAGIC);
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&(dim as u32).to_le_bytes());
        v1.extend_from_slice(&(-3.0f32).to_le_bytes());
        v1.extend_from_slice(&(0.02f32).to_le_bytes());
        assert_eq!(ScalarQuantizer::from_bytes(&v1).unwrap_err().kind, ErrorKind::UnsupportedFormat);
        // Binary bytes of version 1 (12-byte code tails) are refused, not misread.
        let mut v1 = bb.clone();
        v1[4] = 1;
        assert_eq!(BinaryQuantizer::from_bytes(&v1).unwrap_err().kind, ErrorKind::UnsupportedFormat);
        // A zero, negative, subnormal or NaN step, a NaN lo and a NaN mean are corrupt,
        // not accepted, in any dimension.
        let step_at = |j: usize| 12 + 4 * dim + 4 * j;
        for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY, 1e-45] {
            for j in [0, 17, dim - 1] {
                let mut b = sb.clone();
                b[step_at(j)..step_at(j) + 4].copy_from_slice(&bad.to_le_bytes());
                assert_eq!(ScalarQuantizer::from_bytes(&b).unwrap_err().kind, ErrorKind::Corrupt);
            }
        }
        for bad in [f32::NAN, f32::NEG_INFINITY] {
            let mut b = sb.clone();
            b[12 + 4 * 5..12 + 4 * 6].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(ScalarQuantizer::from_bytes(&b).unwrap_err().kind, ErrorKind::Corrupt);
        }
        let mut b = sb.clone();
        b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(ScalarQuantizer::from_bytes(&b).unwrap_err().kind, ErrorKind::Corrupt);
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
        // More vectors than the sample holds: the strided sample still finds each range.
        let dim = 3;
        let n = MAX_TRAIN_VECTORS * 3 + 1000;
        let mut rng = SplitMix64::new(13);
        let data: Vec<f32> = (0..n * dim).map(|i| rng.next_f32() * 10.0 * (1 + i % dim) as f32).collect();
        let sq = ScalarQuantizer::train(&data, dim, 0.98);
        for j in 0..dim {
            let scale = (1 + j) as f32;
            let hi = sq.lo()[j] + 255.0 * sq.step()[j];
            assert!((sq.lo()[j] - 0.1 * scale).abs() < 0.02 * scale, "lo {}", sq.lo()[j]);
            assert!((hi - 9.9 * scale).abs() < 0.02 * scale, "hi {}", hi);
        }
    }

    /// Training is on the index's insert path while it is small (hnsw retrains on every
    /// add below 20k slots), so it must stay fast.
    #[test]
    fn training_20k_by_128_is_fast() {
        let dim = 128;
        let mut rng = SplitMix64::new(23);
        let data = gaussian(&mut rng, 20_000 * dim);
        let t = std::time::Instant::now();
        let sq = ScalarQuantizer::train(&data, dim, 0.99);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        println!("int8 training 20k x 128: {:.1} ms", ms);
        assert_eq!(sq.dim(), dim);
        // Generous (debug builds, a loaded machine); release measures a few ms.
        assert!(ms < 2000.0, "training took {} ms", ms);
    }
}

#[cfg(test)]
mod clustered_tests {
    use super::*;
    use crate::distance;
    use crate::rng::SplitMix64;

    /// 100 Gaussian clusters in `dim` dimensions: centres N(0, 1), within-cluster sd
    /// `0.15 + 0.85 exp(-j / 24)` for dimension j, so dimensions differ a lot in spread
    /// (the case one global clip range handles badly). Queries come from the same
    /// clusters.
    fn clustered(seed: u64, n: usize, nq: usize, dim: usize, d: Distance) -> (Vec<f32>, Vec<f32>) {
        let mut rng = SplitMix64::new(seed);
        let centres: Vec<f32> = (0..100 * dim).map(|_| rng.next_gaussian()).collect();
        let sd: Vec<f32> = (0..dim).map(|j| 0.15 + 0.85 * (-(j as f32) / 24.0).exp()).collect();
        let mut gen = |count: usize| {
            let mut out = Vec::with_capacity(count * dim);
            for _ in 0..count {
                let c = (rng.next_u64() % 100) as usize;
                for j in 0..dim {
                    out.push(centres[c * dim + j] + sd[j] * rng.next_gaussian());
                }
            }
            for v in out.chunks_mut(dim) {
                d.preprocess(v);
            }
            out
        };
        let data = gen(n);
        let queries = gen(nq);
        (data, queries)
    }

    /// Shares of the exact top 10 found among the 10, 30 and 50 best approximate costs.
    fn contained(d: Distance, data: &[f32], dim: usize, queries: &[f32], approx: &dyn Fn(&[f32]) -> Vec<f32>) -> [f64; 3] {
        let k = distance::kernels();
        let mut hit = [0usize; 3];
        let mut total = 0usize;
        let cmp = |a: &f32, b: &f32| a.partial_cmp(b).unwrap();
        for q in queries.chunks(dim) {
            let exact: Vec<f32> = data.chunks(dim).map(|v| d.cost(k, q, v)).collect();
            let mut by_exact: Vec<usize> = (0..exact.len()).collect();
            by_exact.select_nth_unstable_by(10, |&a, &b| cmp(&exact[a], &exact[b]));
            let ap = approx(q);
            let mut by_approx: Vec<usize> = (0..ap.len()).collect();
            by_approx.select_nth_unstable_by(50, |&a, &b| cmp(&ap[a], &ap[b]));
            by_approx[..50].sort_by(|&a, &b| cmp(&ap[a], &ap[b]));
            for (h, &s) in hit.iter_mut().zip(&[10usize, 30, 50]) {
                *h += by_exact[..10].iter().filter(|i| by_approx[..s].contains(i)).count();
            }
            total += 10;
        }
        [hit[0] as f64 / total as f64, hit[1] as f64 / total as f64, hit[2] as f64 / total as f64]
    }

    #[test]
    fn clustered_data_keeps_the_exact_top_10_in_the_int8_top_30() {
        // Measured with one global range (byte format 1), exact top 10 in the approximate
        // top 10 / 30 / 50, Cosine: 0.744 / 0.952 / 0.972 at 20k, 0.668 / 0.888 / 0.934
        // at 100k. Per-dimension ranges: 0.828 / 0.980 / 0.992 and 0.768 / 0.962 / 0.984.
        let dim = 128;
        let runs = [
            (Distance::Cosine, 20_000),
            (Distance::Cosine, 100_000),
            (Distance::Dot, 20_000),
            (Distance::Euclid, 20_000),
            (Distance::Manhattan, 20_000),
        ];
        for (d, n) in runs {
            let (data, queries) = clustered(77, n, 50, dim, d);
            let sq = ScalarQuantizer::train(&data, dim, 0.99);
            let cl = sq.code_len();
            let mut codes = vec![0u8; cl * n];
            for (v, c) in data.chunks(dim).zip(codes.chunks_mut(cl)) {
                sq.encode(v, c);
            }
            let approx = |q: &[f32]| {
                let pq = sq.prepare_query(d, q);
                codes.chunks(cl).map(|c| sq.cost(&pq, c)).collect::<Vec<f32>>()
            };
            let [r10, r30, r50] = contained(d, &data, dim, &queries, &approx);
            println!(
                "clustered int8 {:?} {}k: exact top 10 in approx top 10 {:.3}, top 30 {:.3}, top 50 {:.3}",
                d,
                n / 1000,
                r10,
                r30,
                r50
            );
            if d == Distance::Cosine {
                // The same codes scored with the f32 query against the decoded vectors:
                // what rounding the query's weights to u8 costs.
                let mut decoded = vec![0f32; n * dim];
                for (c, o) in codes.chunks(cl).zip(decoded.chunks_mut(dim)) {
                    sq.decode(c, o);
                }
                let k = distance::kernels();
                let exact_q = |q: &[f32]| decoded.chunks(dim).map(|v| d.cost(k, q, v)).collect::<Vec<f32>>();
                let [f10, f30, f50] = contained(d, &data, dim, &queries, &exact_q);
                println!("  (f32 query on decoded vectors: top 10 {:.3}, top 30 {:.3}, top 50 {:.3})", f10, f30, f50);
            }
            if d == Distance::Cosine {
                assert!(r30 >= 0.93, "clustered Cosine {}k: top 30 holds {:.3} of the top 10", n / 1000, r30);
            }
        }
    }
}
