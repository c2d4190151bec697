//! Reference kernels: plain loops, the ground truth every SIMD kernel is tested
//! against. They are also the fallback, and LLVM vectorises them with the target's
//! baseline SIMD, so they are not slow, just not as fast as the explicit ones.
//!
//! Owns: the plain-loop definition of every kernel in `QuantKernels`.
//! Must never: use explicit SIMD or `unsafe` (it is what the others are checked
//! against), or let a 32-bit partial sum run past `BLOCK` elements.

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
