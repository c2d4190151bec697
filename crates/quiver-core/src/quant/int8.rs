//! Scalar (int8) quantization: one clip range per dimension, one byte per value.
//!
//! Owns: training the clip ranges (a sample of the data, a quantile clip per
//! dimension), encoding a vector into its code, preparing a query once per search, the
//! approximate cost of a prepared query against a code (on the `Distance::cost` scale),
//! and the quantizer's byte form.
//! Must never: allocate or pick a kernel in `cost` (the graph-traversal hot path);
//! panic on bytes read back from storage (`from_bytes` returns `Corrupt` or
//! `UnsupportedFormat`); produce a final score (the index rescores on f32 originals).
//!
//! Code layout, `dim + 8` bytes, little-endian, no alignment assumed: `dim` codes `c`
//! with `x[j] ~= lo[j] + step[j] * c[j]`, then two f32: the sum of the codes (exact: at
//! most 255 * dim < 2^24 for dim <= 65793) and the squared norm of the decoded vector
//! (for the Euclid cost).

use super::{kernels, quantize, read_f32, SQ_MAGIC, SQ_VERSION};
use crate::distance::Distance;
use crate::error::{Error, Result};
use crate::fileio::ByteReader;

/// Bytes after the int8 codes: two f32 (sum of the codes, squared norm of the decoded
/// vector).
const SQ_EXTRA: usize = 8;
/// Int8 training looks at no more than this many values (whole vectors picked with a
/// fixed stride, see `MAX_TRAIN_VECTORS`), so training on a million 1536-d vectors
/// takes a moment, not minutes.
const MAX_TRAIN_VALUES: usize = 1 << 22;

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

/// Whether `lo..lo + 255 * step` is a usable range: a finite `lo` and a positive, finite
/// step with a finite inverse. `clip_range` makes every trained range one; `from_bytes`
/// refuses any other.
pub(super) fn valid_range(lo: f32, step: f32) -> bool {
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
    /// values; `quantile` is clamped to [0.5, 1] (NaN means the default, `hnsw::DEFAULT_SCALAR_QUANTILE`). No data,
    /// or constant data, gives a range centred on that value (on 0 for no data) with a
    /// half-width of `max(|value|, 1)`, so nothing divides by zero.
    ///
    /// Large sets are sampled: at most 32768 vectors (fewer for long vectors, down to
    /// 4096), every `ceil(n / limit)`-th one, then an O(n) selection per dimension.
    pub fn train(vectors: &[f32], dim: usize, quantile: f32) -> ScalarQuantizer {
        let q = if quantile.is_nan() { crate::hnsw::DEFAULT_SCALAR_QUANTILE } else { quantile.clamp(0.5, 1.0) };
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
        let mut r = ByteReader::new(b).with_name("scalar quantizer");
        r.expect_header(SQ_MAGIC, SQ_VERSION)?;
        let dim = r.get_u32()? as usize;
        // Check the length before allocating: a corrupt dim must not ask for 32 GB.
        if r.remaining() as u64 != dim as u64 * 8 {
            return Err(Error::corrupt(format!("scalar quantizer: {} bytes of ranges for dim {}", r.remaining(), dim)));
        }
        let lo = r.get_f32_vec(dim)?;
        let step = r.get_f32_vec(dim)?;
        r.finish()?;
        for (j, (&l, &s)) in lo.iter().zip(&step).enumerate() {
            if !valid_range(l, s) {
                return Err(Error::corrupt(format!("scalar quantizer: bad range lo={} step={} in dimension {}", l, s, j)));
            }
        }
        let inv = step.iter().map(|&s| 1.0 / s).collect();
        Ok(ScalarQuantizer { dim, lo, step, inv })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance;
    use crate::quant::tests::{dataset, gaussian, recall, ALL};
    use crate::rng::SplitMix64;

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
