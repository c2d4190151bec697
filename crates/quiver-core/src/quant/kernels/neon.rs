//! NEON kernels (always present on aarch64). `umull` multiplies u8 by u8 into u16
//! exactly (255 * 255 < 65536) and `uadalp` pair-adds into u32 lanes; `uabd` gives
//! |a - b| directly. The bit kernel stays scalar: LLVM already lowers `count_ones`
//! on aarch64 to `cnt` + `addv`.
//!
//! Owns: the aarch64 kernel set. Must never: let a 32-bit lane run past `BLOCK`
//! elements, or assume aligned input.

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
