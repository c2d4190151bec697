//! wasm simd128 kernels (chosen at compile time: wasm has no run-time detection).
//! `i32x4.dot_i16x8_s` is the wasm `pmaddwd`; bytes are widened to i16 first.
//! L1 builds |a - b| from two saturating subtractions. The bit kernel stays scalar:
//! wasm has a native `i64.popcnt`.
//!
//! Owns: the wasm simd128 kernel set (only in builds with `target_feature = "simd128"`).
//! Must never: assume aligned input (codes sit at any offset of an arena), or let a
//! 32-bit lane run past `BLOCK` elements.

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
