//! The integer and bit kernels behind the quantized costs: one module per instruction
//! set, and the choice among them.
//!
//! Owns: the `QuantKernels` table (what each kernel computes, exactly), the reference
//! set (`scalar`), the SIMD sets (`avx2` on x86_64, chosen at run time; `neon` on
//! aarch64; `simd128` on wasm, chosen at compile time), and picking one set once per
//! process (`QUIVER_KERNELS=scalar` forces the reference set, as it does for the f32
//! kernels in `distance`).
//! Must never: disagree with the reference on an integer result (every set is tested
//! against `scalar`; only the f32 `l1w_f32_u8` may differ, by rounding); overflow at
//! any length (sums leave 32-bit lanes every `BLOCK` elements); assume aligned input;
//! or know what a code means (that is `int8` and `binary`).

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "aarch64")]
pub mod neon;
pub mod scalar;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod simd128;

/// Integer kernels sum at most this many elements in 32-bit lanes before spilling into
/// a u64: 32768 * 255 * 255 < 2^32, so no lane or block total can overflow, at any dim.
const BLOCK: usize = 32768;

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

pub const SCALAR: QuantKernels = QuantKernels {
    name: "scalar",
    dot_u8: scalar::dot_u8,
    l2sq_u8: scalar::l2sq_u8,
    l1_u8: scalar::l1_u8,
    bitplanes: scalar::bitplanes,
    l1w_f32_u8: scalar::l1w_f32_u8,
};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

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
}
