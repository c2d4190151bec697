//! AVX2 kernels. Products: both sides are widened to i16 with `vpmovzxbw` and
//! multiplied-and-pair-added with `vpmaddwd` (255 * 255 * 2 fits an i32 exactly;
//! `vpmaddubsw` would saturate at i16). L1 uses `vpsadbw`, which sums eight
//! |a - b| bytes into a u64 lane with no overflow risk. The bit kernel is the scalar
//! one compiled with the `popcnt` instruction, which a plain build cannot assume
//! (x86-64 baseline lacks it, so `count_ones` would otherwise become a dozen
//! bit-twiddling instructions per word).
//!
//! Owns: the AVX2/FMA/POPCNT kernel set and its run-time check (`available`).
//! Must never: run on a CPU without all three features. The safe entry points below do
//! not check: in this crate they are reached only through `available_kernels`, which
//! offers `KERNELS` once `available()` has confirmed the features (the items are
//! public, so an outside caller must check the same). Nor: assume aligned input, or let
//! a 32-bit lane run past `BLOCK` elements.

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
