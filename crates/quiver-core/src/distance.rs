//! Distance metrics and their SIMD kernels.
//!
//! Owns: the four metrics, the conversion between the internal "cost" (smaller is
//! better, used by every search loop) and the user-visible score, and the choice of
//! kernel (picked once per process from the CPU's features).
//! Must never: allocate, or pick a kernel per call.
//!
//! Score semantics follow the reference server: Cosine and Dot scores are larger-is-better
//! similarities; Euclid and Manhattan scores are the distances themselves (smaller is
//! better). Cosine vectors are normalised at insert, so Cosine is a dot product inside.

/// How far from 1 a Cosine vector's squared length may be for the vector to count as
/// normalised already (it is then stored as it is; the reference server uses the same
/// threshold, so the same vectors are left alone there).
pub const UNIT_TOLERANCE: f64 = 1.0e-6;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distance {
    Cosine,
    Dot,
    Euclid,
    Manhattan,
}

impl Distance {
    pub fn parse(name: &str) -> Option<Distance> {
        match name {
            "Cosine" | "cosine" => Some(Distance::Cosine),
            "Dot" | "dot" => Some(Distance::Dot),
            "Euclid" | "euclid" => Some(Distance::Euclid),
            "Manhattan" | "manhattan" => Some(Distance::Manhattan),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Distance::Cosine => "Cosine",
            Distance::Dot => "Dot",
            Distance::Euclid => "Euclid",
            Distance::Manhattan => "Manhattan",
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Distance::Cosine => 0,
            Distance::Dot => 1,
            Distance::Euclid => 2,
            Distance::Manhattan => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<Distance> {
        match code {
            0 => Some(Distance::Cosine),
            1 => Some(Distance::Dot),
            2 => Some(Distance::Euclid),
            3 => Some(Distance::Manhattan),
            _ => None,
        }
    }

    /// True when a larger score means a closer match.
    pub fn higher_is_better(self) -> bool {
        matches!(self, Distance::Cosine | Distance::Dot)
    }

    /// Turns an internal cost (smaller is better) into the score the user sees.
    #[inline]
    pub fn cost_to_score(self, cost: f32) -> f32 {
        match self {
            Distance::Cosine | Distance::Dot => -cost,
            Distance::Euclid => cost.max(0.0).sqrt(),
            Distance::Manhattan => cost,
        }
    }

    /// Inverse of `cost_to_score`, used to turn a score threshold into a cost bound.
    #[inline]
    pub fn score_to_cost(self, score: f32) -> f32 {
        match self {
            Distance::Cosine | Distance::Dot => -score,
            Distance::Euclid => score * score,
            Distance::Manhattan => score,
        }
    }

    /// Cost between two (already preprocessed) vectors with the given kernels.
    #[inline]
    pub fn cost(self, k: &Kernels, a: &[f32], b: &[f32]) -> f32 {
        match self {
            Distance::Cosine | Distance::Dot => -(k.dot)(a, b),
            Distance::Euclid => (k.l2sq)(a, b),
            Distance::Manhattan => (k.l1)(a, b),
        }
    }

    /// The kernel computing this metric's cost directly, so search loops hold one
    /// function pointer chosen once per index.
    pub fn cost_fn(self, k: &Kernels) -> fn(&[f32], &[f32]) -> f32 {
        match self {
            Distance::Cosine | Distance::Dot => k.neg_dot,
            Distance::Euclid => k.l2sq,
            Distance::Manhattan => k.l1,
        }
    }

    /// `cost_fn` for four vectors at once (bit for bit four `cost_fn` calls).
    pub fn cost4_fn(self, k: &Kernels) -> fn(&[f32], [&[f32]; 4]) -> [f32; 4] {
        match self {
            Distance::Cosine | Distance::Dot => k.neg_dot4,
            Distance::Euclid => k.l2sq4,
            Distance::Manhattan => k.l1_4,
        }
    }

    /// Cosine vectors are stored normalised; other metrics store vectors unchanged.
    ///
    /// Normalising is a fixed point: a vector whose squared length is within
    /// `UNIT_TOLERANCE` of 1 (every vector this function returned, see below) is kept
    /// bit for bit, so a stored vector written again (a shard transfer copies stored
    /// vectors to another replica) stays identical instead of moving its last bits.
    /// The length is summed in f64 in index order, not by the SIMD kernels, so every
    /// machine normalises a vector to the same bits whatever kernels it picked (replicas
    /// of one write on different CPUs agree). After dividing in f64, each component is
    /// off by at most half an f32 ulp (2^-24 relative), so the result's squared length
    /// is within 2^-23 ≈ 1.2e-7 of 1, well inside the tolerance.
    pub fn preprocess(self, v: &mut [f32]) {
        if self == Distance::Cosine {
            let n2: f64 = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
            if n2.sqrt() <= f64::from(f32::EPSILON) || (n2 - 1.0).abs() <= UNIT_TOLERANCE {
                return;
            }
            let inv = 1.0 / n2.sqrt();
            for x in v.iter_mut() {
                *x = (f64::from(*x) * inv) as f32;
            }
        }
    }
}

/// One set of distance kernels. `a.len() == b.len()` is the caller's duty; kernels
/// read `min(a.len(), b.len())` elements.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub name: &'static str,
    pub dot: fn(&[f32], &[f32]) -> f32,
    pub neg_dot: fn(&[f32], &[f32]) -> f32,
    pub l2sq: fn(&[f32], &[f32]) -> f32,
    pub l1: fn(&[f32], &[f32]) -> f32,
    /// `neg_dot`, `l2sq` and `l1` of one query against four vectors in one call: bit for
    /// bit what four calls of the single kernel give (the same additions in the same
    /// order), with the four vectors' loads interleaved so their cache misses overlap and
    /// each query block is loaded once for all four. A graph walk scores its fresh
    /// neighbours four at a time through these.
    pub neg_dot4: fn(&[f32], [&[f32]; 4]) -> [f32; 4],
    pub l2sq4: fn(&[f32], [&[f32]; 4]) -> [f32; 4],
    pub l1_4: fn(&[f32], [&[f32]; 4]) -> [f32; 4],
}

/// A four-vector kernel that calls the single kernel four times (kernel sets without a
/// dedicated one: scalar, NEON, simd128, and L1 everywhere).
macro_rules! one_by_one {
    ($name:ident, $single:path) => {
        pub fn $name(q: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
            [$single(q, b[0]), $single(q, b[1]), $single(q, b[2]), $single(q, b[3])]
        }
    };
}

/// The element count a four-vector kernel reads: the shortest of the five slices.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn len4(q: &[f32], b: &[&[f32]; 4]) -> usize {
    q.len().min(b[0].len()).min(b[1].len()).min(b[2].len()).min(b[3].len())
}

pub mod scalar {
    //! Reference kernels: plain loops, the ground truth every SIMD kernel is tested against.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let mut s = [0.0f32; 4];
        let mut i = 0;
        while i + 4 <= n {
            s[0] += a[i] * b[i];
            s[1] += a[i + 1] * b[i + 1];
            s[2] += a[i + 2] * b[i + 2];
            s[3] += a[i + 3] * b[i + 3];
            i += 4;
        }
        let mut t = (s[0] + s[1]) + (s[2] + s[3]);
        while i < n {
            t += a[i] * b[i];
            i += 1;
        }
        t
    }
    pub fn neg_dot(a: &[f32], b: &[f32]) -> f32 {
        -dot(a, b)
    }
    pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let mut s = [0.0f32; 4];
        let mut i = 0;
        while i + 4 <= n {
            for j in 0..4 {
                let d = a[i + j] - b[i + j];
                s[j] += d * d;
            }
            i += 4;
        }
        let mut t = (s[0] + s[1]) + (s[2] + s[3]);
        while i < n {
            let d = a[i] - b[i];
            t += d * d;
            i += 1;
        }
        t
    }
    pub fn l1(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let mut s = [0.0f32; 4];
        let mut i = 0;
        while i + 4 <= n {
            for j in 0..4 {
                s[j] += (a[i + j] - b[i + j]).abs();
            }
            i += 4;
        }
        let mut t = (s[0] + s[1]) + (s[2] + s[3]);
        while i < n {
            t += (a[i] - b[i]).abs();
            i += 1;
        }
        t
    }
    one_by_one!(neg_dot4, neg_dot);
    one_by_one!(l2sq4, l2sq);
    one_by_one!(l1_4, l1);
}

pub const SCALAR: Kernels = Kernels {
    name: "scalar",
    dot: scalar::dot,
    neg_dot: scalar::neg_dot,
    l2sq: scalar::l2sq,
    l1: scalar::l1,
    neg_dot4: scalar::neg_dot4,
    l2sq4: scalar::l2sq4,
    l1_4: scalar::l1_4,
};

#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    //! AVX2 + FMA kernels: two 8-lane accumulators, then one 8-lane step, then a scalar tail.
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
        _mm_cvtss_f32(s)
    }

    // dot and l2sq: two accumulators over 16-element steps, one 8-element step into the
    // first, then a scalar tail. The four-vector kernels below repeat exactly these
    // additions per vector (eight accumulators fit the sixteen ymm registers; the four
    // accumulators per vector this kernel once had would not).

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let pa = a.as_ptr();
        let pb = b.as_ptr();
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8)), _mm256_loadu_ps(pb.add(i + 8)), acc1);
            i += 16;
        }
        if i + 8 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            i += 8;
        }
        let mut t = hsum(_mm256_add_ps(acc0, acc1));
        while i < n {
            t += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        t
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot4_impl(q: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        let n = super::len4(q, &b);
        let pq = q.as_ptr();
        let p = [b[0].as_ptr(), b[1].as_ptr(), b[2].as_ptr(), b[3].as_ptr()];
        let mut e = [_mm256_setzero_ps(); 4];
        let mut o = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 16 <= n {
            let x = _mm256_loadu_ps(pq.add(i));
            let y = _mm256_loadu_ps(pq.add(i + 8));
            for j in 0..4 {
                e[j] = _mm256_fmadd_ps(x, _mm256_loadu_ps(p[j].add(i)), e[j]);
                o[j] = _mm256_fmadd_ps(y, _mm256_loadu_ps(p[j].add(i + 8)), o[j]);
            }
            i += 16;
        }
        if i + 8 <= n {
            let x = _mm256_loadu_ps(pq.add(i));
            for j in 0..4 {
                e[j] = _mm256_fmadd_ps(x, _mm256_loadu_ps(p[j].add(i)), e[j]);
            }
            i += 8;
        }
        let mut t = [0f32; 4];
        for j in 0..4 {
            t[j] = hsum(_mm256_add_ps(e[j], o[j]));
            let mut k = i;
            while k < n {
                t[j] += *pq.add(k) * *p[j].add(k);
                k += 1;
            }
        }
        t
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn l2sq_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let pa = a.as_ptr();
        let pb = b.as_ptr();
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            let d0 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            let d1 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i + 8)), _mm256_loadu_ps(pb.add(i + 8)));
            acc0 = _mm256_fmadd_ps(d0, d0, acc0);
            acc1 = _mm256_fmadd_ps(d1, d1, acc1);
            i += 16;
        }
        if i + 8 <= n {
            let d = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            acc0 = _mm256_fmadd_ps(d, d, acc0);
            i += 8;
        }
        let mut t = hsum(_mm256_add_ps(acc0, acc1));
        while i < n {
            let d = *pa.add(i) - *pb.add(i);
            t += d * d;
            i += 1;
        }
        t
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn l2sq4_impl(q: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        let n = super::len4(q, &b);
        let pq = q.as_ptr();
        let p = [b[0].as_ptr(), b[1].as_ptr(), b[2].as_ptr(), b[3].as_ptr()];
        let mut e = [_mm256_setzero_ps(); 4];
        let mut o = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 16 <= n {
            let x = _mm256_loadu_ps(pq.add(i));
            let y = _mm256_loadu_ps(pq.add(i + 8));
            for j in 0..4 {
                let d0 = _mm256_sub_ps(x, _mm256_loadu_ps(p[j].add(i)));
                let d1 = _mm256_sub_ps(y, _mm256_loadu_ps(p[j].add(i + 8)));
                e[j] = _mm256_fmadd_ps(d0, d0, e[j]);
                o[j] = _mm256_fmadd_ps(d1, d1, o[j]);
            }
            i += 16;
        }
        if i + 8 <= n {
            let x = _mm256_loadu_ps(pq.add(i));
            for j in 0..4 {
                let d = _mm256_sub_ps(x, _mm256_loadu_ps(p[j].add(i)));
                e[j] = _mm256_fmadd_ps(d, d, e[j]);
            }
            i += 8;
        }
        let mut t = [0f32; 4];
        for j in 0..4 {
            t[j] = hsum(_mm256_add_ps(e[j], o[j]));
            let mut k = i;
            while k < n {
                let d = *pq.add(k) - *p[j].add(k);
                t[j] += d * d;
                k += 1;
            }
        }
        t
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn l1_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let pa = a.as_ptr();
        let pb = b.as_ptr();
        // Clearing the sign bit is |x|.
        let mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            let d0 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            let d1 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i + 8)), _mm256_loadu_ps(pb.add(i + 8)));
            acc0 = _mm256_add_ps(acc0, _mm256_and_ps(d0, mask));
            acc1 = _mm256_add_ps(acc1, _mm256_and_ps(d1, mask));
            i += 16;
        }
        while i + 8 <= n {
            let d = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            acc0 = _mm256_add_ps(acc0, _mm256_and_ps(d, mask));
            i += 8;
        }
        let mut t = hsum(_mm256_add_ps(acc0, acc1));
        while i < n {
            t += (*pa.add(i) - *pb.add(i)).abs();
            i += 1;
        }
        t
    }

    // Safe entry points. They are only reachable through `KERNELS` after run-time
    // detection has confirmed AVX2 and FMA.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        unsafe { dot_impl(a, b) }
    }
    pub fn neg_dot(a: &[f32], b: &[f32]) -> f32 {
        -unsafe { dot_impl(a, b) }
    }
    pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
        unsafe { l2sq_impl(a, b) }
    }
    pub fn l1(a: &[f32], b: &[f32]) -> f32 {
        unsafe { l1_impl(a, b) }
    }
    pub fn neg_dot4(q: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        let d = unsafe { dot4_impl(q, b) };
        [-d[0], -d[1], -d[2], -d[3]]
    }
    pub fn l2sq4(q: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        unsafe { l2sq4_impl(q, b) }
    }
    one_by_one!(l1_4, l1);

    pub fn available() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }

    pub const KERNELS: super::Kernels = super::Kernels {
        name: "avx2+fma",
        dot,
        neg_dot,
        l2sq,
        l1,
        neg_dot4,
        l2sq4,
        l1_4,
    };
}


#[cfg(all(target_arch = "x86_64", feature = "avx512"))]
pub mod avx512 {
    //! AVX-512F kernels: 16 lanes, masked tail loads so there is no scalar tail.
    //! Behind the `avx512` cargo feature because these intrinsics need Rust 1.89; the
    //! Rust 1.63 build (wasm toolchain) leaves the feature off.
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tail_mask(rem: usize) -> __mmask16 {
        ((1u32 << rem) - 1) as __mmask16
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn dot_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let pa = a.as_ptr();
        let pb = b.as_ptr();
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        let mut i = 0;
        while i + 32 <= n {
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i + 16)), _mm512_loadu_ps(pb.add(i + 16)), acc1);
            i += 32;
        }
        while i + 16 <= n {
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc0);
            i += 16;
        }
        if i < n {
            let m = tail_mask(n - i);
            acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, pa.add(i)), _mm512_maskz_loadu_ps(m, pb.add(i)), acc1);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn l2sq_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let pa = a.as_ptr();
        let pb = b.as_ptr();
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        let mut i = 0;
        while i + 32 <= n {
            let d0 = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
            let d1 = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i + 16)), _mm512_loadu_ps(pb.add(i + 16)));
            acc0 = _mm512_fmadd_ps(d0, d0, acc0);
            acc1 = _mm512_fmadd_ps(d1, d1, acc1);
            i += 32;
        }
        while i + 16 <= n {
            let d = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
            acc0 = _mm512_fmadd_ps(d, d, acc0);
            i += 16;
        }
        if i < n {
            let m = tail_mask(n - i);
            let d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, pa.add(i)), _mm512_maskz_loadu_ps(m, pb.add(i)));
            acc1 = _mm512_fmadd_ps(d, d, acc1);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn l1_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let pa = a.as_ptr();
        let pb = b.as_ptr();
        let mut acc0 = _mm512_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            let d = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
            acc0 = _mm512_add_ps(acc0, _mm512_abs_ps(d));
            i += 16;
        }
        if i < n {
            let m = tail_mask(n - i);
            let d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, pa.add(i)), _mm512_maskz_loadu_ps(m, pb.add(i)));
            acc0 = _mm512_add_ps(acc0, _mm512_abs_ps(d));
        }
        _mm512_reduce_add_ps(acc0)
    }

    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        unsafe { dot_impl(a, b) }
    }
    pub fn neg_dot(a: &[f32], b: &[f32]) -> f32 {
        -unsafe { dot_impl(a, b) }
    }
    pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
        unsafe { l2sq_impl(a, b) }
    }
    pub fn l1(a: &[f32], b: &[f32]) -> f32 {
        unsafe { l1_impl(a, b) }
    }

    // The four-vector kernels: per vector, exactly the additions of dot_impl and
    // l2sq_impl above (even 16-lane blocks of each 32-element step in one accumulator,
    // odd ones in the other, a last whole block in the first, the masked tail in the
    // second), eight accumulators in all.

    #[target_feature(enable = "avx512f")]
    unsafe fn dot4_impl(q: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        let n = super::len4(q, &b);
        let pq = q.as_ptr();
        let p = [b[0].as_ptr(), b[1].as_ptr(), b[2].as_ptr(), b[3].as_ptr()];
        let mut e = [_mm512_setzero_ps(); 4];
        let mut o = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            let x = _mm512_loadu_ps(pq.add(i));
            let y = _mm512_loadu_ps(pq.add(i + 16));
            for j in 0..4 {
                e[j] = _mm512_fmadd_ps(x, _mm512_loadu_ps(p[j].add(i)), e[j]);
                o[j] = _mm512_fmadd_ps(y, _mm512_loadu_ps(p[j].add(i + 16)), o[j]);
            }
            i += 32;
        }
        if i + 16 <= n {
            let x = _mm512_loadu_ps(pq.add(i));
            for j in 0..4 {
                e[j] = _mm512_fmadd_ps(x, _mm512_loadu_ps(p[j].add(i)), e[j]);
            }
            i += 16;
        }
        if i < n {
            let m = tail_mask(n - i);
            let x = _mm512_maskz_loadu_ps(m, pq.add(i));
            for j in 0..4 {
                o[j] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, p[j].add(i)), o[j]);
            }
        }
        let mut t = [0f32; 4];
        for j in 0..4 {
            t[j] = _mm512_reduce_add_ps(_mm512_add_ps(e[j], o[j]));
        }
        t
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn l2sq4_impl(q: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        let n = super::len4(q, &b);
        let pq = q.as_ptr();
        let p = [b[0].as_ptr(), b[1].as_ptr(), b[2].as_ptr(), b[3].as_ptr()];
        let mut e = [_mm512_setzero_ps(); 4];
        let mut o = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            let x = _mm512_loadu_ps(pq.add(i));
            let y = _mm512_loadu_ps(pq.add(i + 16));
            for j in 0..4 {
                let d0 = _mm512_sub_ps(x, _mm512_loadu_ps(p[j].add(i)));
                let d1 = _mm512_sub_ps(y, _mm512_loadu_ps(p[j].add(i + 16)));
                e[j] = _mm512_fmadd_ps(d0, d0, e[j]);
                o[j] = _mm512_fmadd_ps(d1, d1, o[j]);
            }
            i += 32;
        }
        if i + 16 <= n {
            let x = _mm512_loadu_ps(pq.add(i));
            for j in 0..4 {
                let d = _mm512_sub_ps(x, _mm512_loadu_ps(p[j].add(i)));
                e[j] = _mm512_fmadd_ps(d, d, e[j]);
            }
            i += 16;
        }
        if i < n {
            let m = tail_mask(n - i);
            let x = _mm512_maskz_loadu_ps(m, pq.add(i));
            for j in 0..4 {
                let d = _mm512_sub_ps(x, _mm512_maskz_loadu_ps(m, p[j].add(i)));
                o[j] = _mm512_fmadd_ps(d, d, o[j]);
            }
        }
        let mut t = [0f32; 4];
        for j in 0..4 {
            t[j] = _mm512_reduce_add_ps(_mm512_add_ps(e[j], o[j]));
        }
        t
    }

    pub fn neg_dot4(q: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        let d = unsafe { dot4_impl(q, b) };
        [-d[0], -d[1], -d[2], -d[3]]
    }
    pub fn l2sq4(q: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        unsafe { l2sq4_impl(q, b) }
    }
    one_by_one!(l1_4, l1);

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f")
    }

    pub const KERNELS: super::Kernels = super::Kernels {
        name: "avx512f",
        dot,
        neg_dot,
        l2sq,
        l1,
        neg_dot4,
        l2sq4,
        l1_4,
    };
}

#[cfg(target_arch = "aarch64")]
pub mod neon {
    //! NEON kernels (always present on aarch64).
    use std::arch::aarch64::*;

    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        unsafe {
            let pa = a.as_ptr();
            let pb = b.as_ptr();
            let mut acc0 = vdupq_n_f32(0.0);
            let mut acc1 = vdupq_n_f32(0.0);
            let mut i = 0;
            while i + 8 <= n {
                acc0 = vfmaq_f32(acc0, vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
                acc1 = vfmaq_f32(acc1, vld1q_f32(pa.add(i + 4)), vld1q_f32(pb.add(i + 4)));
                i += 8;
            }
            let mut t = vaddvq_f32(vaddq_f32(acc0, acc1));
            while i < n {
                t += *pa.add(i) * *pb.add(i);
                i += 1;
            }
            t
        }
    }
    pub fn neg_dot(a: &[f32], b: &[f32]) -> f32 {
        -dot(a, b)
    }
    pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        unsafe {
            let pa = a.as_ptr();
            let pb = b.as_ptr();
            let mut acc0 = vdupq_n_f32(0.0);
            let mut acc1 = vdupq_n_f32(0.0);
            let mut i = 0;
            while i + 8 <= n {
                let d0 = vsubq_f32(vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
                let d1 = vsubq_f32(vld1q_f32(pa.add(i + 4)), vld1q_f32(pb.add(i + 4)));
                acc0 = vfmaq_f32(acc0, d0, d0);
                acc1 = vfmaq_f32(acc1, d1, d1);
                i += 8;
            }
            let mut t = vaddvq_f32(vaddq_f32(acc0, acc1));
            while i < n {
                let d = *pa.add(i) - *pb.add(i);
                t += d * d;
                i += 1;
            }
            t
        }
    }
    pub fn l1(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        unsafe {
            let pa = a.as_ptr();
            let pb = b.as_ptr();
            let mut acc = vdupq_n_f32(0.0);
            let mut i = 0;
            while i + 4 <= n {
                acc = vaddq_f32(acc, vabdq_f32(vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i))));
                i += 4;
            }
            let mut t = vaddvq_f32(acc);
            while i < n {
                t += (*pa.add(i) - *pb.add(i)).abs();
                i += 1;
            }
            t
        }
    }
    one_by_one!(neg_dot4, neg_dot);
    one_by_one!(l2sq4, l2sq);
    one_by_one!(l1_4, l1);
    pub const KERNELS: super::Kernels = super::Kernels {
        name: "neon",
        dot,
        neg_dot,
        l2sq,
        l1,
        neg_dot4,
        l2sq4,
        l1_4,
    };
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod simd128 {
    //! wasm simd128 kernels (selected at compile time: wasm has no run-time detection).
    use core::arch::wasm32::*;

    #[inline]
    fn hsum(v: v128) -> f32 {
        f32x4_extract_lane::<0>(v)
            + f32x4_extract_lane::<1>(v)
            + f32x4_extract_lane::<2>(v)
            + f32x4_extract_lane::<3>(v)
    }

    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        unsafe {
            let pa = a.as_ptr();
            let pb = b.as_ptr();
            let mut acc0 = f32x4_splat(0.0);
            let mut acc1 = f32x4_splat(0.0);
            let mut i = 0;
            while i + 8 <= n {
                acc0 = f32x4_add(acc0, f32x4_mul(v128_load(pa.add(i) as *const v128), v128_load(pb.add(i) as *const v128)));
                acc1 = f32x4_add(acc1, f32x4_mul(v128_load(pa.add(i + 4) as *const v128), v128_load(pb.add(i + 4) as *const v128)));
                i += 8;
            }
            while i + 4 <= n {
                acc0 = f32x4_add(acc0, f32x4_mul(v128_load(pa.add(i) as *const v128), v128_load(pb.add(i) as *const v128)));
                i += 4;
            }
            let mut t = hsum(f32x4_add(acc0, acc1));
            while i < n {
                t += *pa.add(i) * *pb.add(i);
                i += 1;
            }
            t
        }
    }
    pub fn neg_dot(a: &[f32], b: &[f32]) -> f32 {
        -dot(a, b)
    }
    pub fn l2sq(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        unsafe {
            let pa = a.as_ptr();
            let pb = b.as_ptr();
            let mut acc0 = f32x4_splat(0.0);
            let mut acc1 = f32x4_splat(0.0);
            let mut i = 0;
            while i + 8 <= n {
                let d0 = f32x4_sub(v128_load(pa.add(i) as *const v128), v128_load(pb.add(i) as *const v128));
                let d1 = f32x4_sub(v128_load(pa.add(i + 4) as *const v128), v128_load(pb.add(i + 4) as *const v128));
                acc0 = f32x4_add(acc0, f32x4_mul(d0, d0));
                acc1 = f32x4_add(acc1, f32x4_mul(d1, d1));
                i += 8;
            }
            while i + 4 <= n {
                let d = f32x4_sub(v128_load(pa.add(i) as *const v128), v128_load(pb.add(i) as *const v128));
                acc0 = f32x4_add(acc0, f32x4_mul(d, d));
                i += 4;
            }
            let mut t = hsum(f32x4_add(acc0, acc1));
            while i < n {
                let d = *pa.add(i) - *pb.add(i);
                t += d * d;
                i += 1;
            }
            t
        }
    }
    pub fn l1(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        unsafe {
            let pa = a.as_ptr();
            let pb = b.as_ptr();
            let mut acc = f32x4_splat(0.0);
            let mut i = 0;
            while i + 4 <= n {
                let d = f32x4_sub(v128_load(pa.add(i) as *const v128), v128_load(pb.add(i) as *const v128));
                acc = f32x4_add(acc, f32x4_abs(d));
                i += 4;
            }
            let mut t = hsum(acc);
            while i < n {
                t += (*pa.add(i) - *pb.add(i)).abs();
                i += 1;
            }
            t
        }
    }
    one_by_one!(neg_dot4, neg_dot);
    one_by_one!(l2sq4, l2sq);
    one_by_one!(l1_4, l1);
    pub const KERNELS: super::Kernels = super::Kernels {
        name: "simd128",
        dot,
        neg_dot,
        l2sq,
        l1,
        neg_dot4,
        l2sq4,
        l1_4,
    };
}

/// Every kernel set this build can run on this machine, scalar first. Tests compare
/// each against scalar.
pub fn available_kernels() -> Vec<Kernels> {
    #[allow(unused_mut)]
    let mut v = vec![SCALAR];
    #[cfg(target_arch = "x86_64")]
    {
        if avx2::available() {
            v.push(avx2::KERNELS);
        }
        #[cfg(feature = "avx512")]
        {
            if avx512::available() {
                v.push(avx512::KERNELS);
            }
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
fn detect() -> Kernels {
    // QUIVER_KERNELS=scalar|avx2+fma|... pins a kernel set (for comparisons).
    let all = available_kernels();
    if let Ok(want) = std::env::var("QUIVER_KERNELS") {
        if let Some(k) = all.iter().find(|k| k.name == want) {
            return *k;
        }
    }
    *all.last().unwrap()
}

#[cfg(not(target_arch = "wasm32"))]
pub fn kernels() -> &'static Kernels {
    use std::sync::Once;
    static INIT: Once = Once::new();
    static mut K: Kernels = SCALAR;
    // Written once under `Once`, read-only afterwards.
    unsafe {
        INIT.call_once(|| K = detect());
        &*std::ptr::addr_of!(K)
    }
}

/// The kernels an index of dimension `dim` should use. AVX-512's 16-lane horizontal
/// reduction costs more than it saves on short vectors: measured on GloVe 50-d, AVX2
/// searched 10% faster; on 128-d AVX-512 was 17% faster. An explicit QUIVER_KERNELS
/// choice is kept as it is.
pub fn kernels_for_dim(dim: usize) -> &'static Kernels {
    let k = kernels();
    #[cfg(all(target_arch = "x86_64", feature = "avx512"))]
    {
        if k.name == avx512::KERNELS.name && dim < 64 && std::env::var("QUIVER_KERNELS").is_err() && avx2::available() {
            return &avx2::KERNELS;
        }
    }
    let _ = dim;
    k
}

#[cfg(target_arch = "wasm32")]
pub fn kernels() -> &'static Kernels {
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

    fn close(a: f32, b: f32, scale: f32) -> bool {
        (a - b).abs() <= 1e-4 * scale.max(1.0)
    }

    #[test]
    fn four_vector_kernels_give_the_single_kernels_bits() {
        let mut rng = SplitMix64::new(11);
        let all = available_kernels();
        let mut dims: Vec<usize> = (1..=70).collect();
        dims.extend([96, 127, 128, 129, 200, 384, 768, 784, 1536, 2049]);
        for &dim in &dims {
            let q: Vec<f32> = (0..dim).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
            let v: Vec<Vec<f32>> = (0..4).map(|_| (0..dim).map(|_| rng.next_f32() * 2.0 - 1.0).collect()).collect();
            let b = [&v[0][..], &v[1][..], &v[2][..], &v[3][..]];
            for k in &all {
                for (name, one, four) in [("neg_dot", k.neg_dot, k.neg_dot4), ("l2sq", k.l2sq, k.l2sq4), ("l1", k.l1, k.l1_4)] {
                    let got = four(&q, b);
                    for j in 0..4 {
                        assert_eq!(got[j].to_bits(), one(&q, b[j]).to_bits(), "{} {} dim {} vector {}", k.name, name, dim, j);
                    }
                }
            }
        }
    }

    #[test]
    fn every_kernel_matches_scalar_on_random_dimensions() {
        let mut rng = SplitMix64::new(7);
        let all = available_kernels();
        for _ in 0..400 {
            let dim = 1 + (rng.next_u64() % 2048) as usize;
            let a: Vec<f32> = (0..dim).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
            let b: Vec<f32> = (0..dim).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
            let sd = scalar::dot(&a, &b);
            let sl2 = scalar::l2sq(&a, &b);
            let sl1 = scalar::l1(&a, &b);
            // Sums of |terms| bound the rounding error of any summation order.
            let mag: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
            for k in &all {
                assert!(close((k.dot)(&a, &b), sd, mag), "{} dot dim {}", k.name, dim);
                assert!(close((k.neg_dot)(&a, &b), -sd, mag), "{} neg_dot dim {}", k.name, dim);
                assert!(close((k.l2sq)(&a, &b), sl2, sl2), "{} l2sq dim {}", k.name, dim);
                assert!(close((k.l1)(&a, &b), sl1, sl1), "{} l1 dim {}", k.name, dim);
            }
        }
    }

    #[test]
    fn kernels_handle_empty_and_short_inputs() {
        for k in available_kernels() {
            assert_eq!((k.dot)(&[], &[]), 0.0);
            assert_eq!((k.l1)(&[1.0], &[-2.0]), 3.0);
            assert_eq!((k.l2sq)(&[1.0, 2.0, 3.0], &[1.0, 2.0, 5.0]), 4.0);
        }
    }

    #[test]
    fn scores_follow_reference_semantics() {
        let k = kernels();
        let a = [3.0f32, 4.0];
        let b = [0.0f32, 0.0];
        assert_eq!(Distance::Euclid.cost_to_score(Distance::Euclid.cost(k, &a, &b)), 5.0);
        assert_eq!(Distance::Manhattan.cost_to_score(Distance::Manhattan.cost(k, &a, &b)), 7.0);
        assert_eq!(Distance::Dot.cost_to_score(Distance::Dot.cost(k, &a, &a)), 25.0);
        let mut c = a;
        Distance::Cosine.preprocess(&mut c);
        assert!((Distance::Cosine.cost_to_score(Distance::Cosine.cost(k, &c, &c)) - 1.0).abs() < 1e-6);
        for d in [Distance::Cosine, Distance::Dot, Distance::Euclid, Distance::Manhattan] {
            assert_eq!(Distance::from_code(d.code()), Some(d));
            assert_eq!(Distance::parse(d.name()), Some(d));
            let s = 2.5f32;
            assert!((d.cost_to_score(d.score_to_cost(s)) - s).abs() < 1e-6);
        }
    }
    #[test]
    fn cosine_normalising_is_a_fixed_point() {
        // A stored (normalised) vector written again must keep every bit: a shard
        // transfer copies stored vectors, and replicas compare content by digest.
        let mut rng = SplitMix64::new(11);
        for dim in [1usize, 2, 4, 50, 128, 768, 1536, 4096] {
            for _ in 0..200 {
                let scale = 1e-3 + rng.next_f32() * 100.0;
                let mut v: Vec<f32> = (0..dim).map(|_| rng.next_gaussian() * scale).collect();
                Distance::Cosine.preprocess(&mut v);
                let n2: f64 = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
                assert!((n2 - 1.0).abs() <= 2.0f64.powi(-23) * 1.01, "dim {dim}: squared length {n2}");
                let mut again = v.clone();
                Distance::Cosine.preprocess(&mut again);
                assert_eq!(v, again, "dim {dim}: normalising twice moved bits");
            }
        }
        // Zero stays zero; a vector within the tolerance of unit length is kept as it is;
        // one outside it is normalised.
        let mut z = vec![0.0f32; 8];
        Distance::Cosine.preprocess(&mut z);
        assert_eq!(z, vec![0.0f32; 8]);
        let near = [(1.0f64 + 4e-7).sqrt() as f32, 0.0];
        let mut n = near;
        Distance::Cosine.preprocess(&mut n);
        assert_eq!(n, near);
        let mut far = [3.0f32, 4.0];
        Distance::Cosine.preprocess(&mut far);
        assert_eq!(far, [0.6, 0.8]);
        // Other metrics never change vectors.
        let mut d = [3.0f32, 4.0];
        Distance::Dot.preprocess(&mut d);
        assert_eq!(d, [3.0, 4.0]);
    }
}
