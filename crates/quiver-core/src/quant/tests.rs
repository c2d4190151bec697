//! Test data shared by the quantizers' tests, and the tests that hold both quantizers
//! to the same contract (degenerate training sets, the byte forms).

use super::*;
use crate::distance::{self, Distance};
use crate::error::ErrorKind;
use crate::quant::int8::valid_range;
use crate::rng::SplitMix64;

pub(super) const ALL: [Distance; 4] = [Distance::Cosine, Distance::Dot, Distance::Euclid, Distance::Manhattan];

pub(super) fn gaussian(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.next_gaussian()).collect()
}

/// Recall@10 after taking the `shortlist` best approximate candidates and rescoring
/// them exactly, averaged over `queries` random queries.
pub(super) fn recall(
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

pub(super) fn dataset(d: Distance, seed: u64, n: usize, nq: usize, dim: usize) -> (Vec<f32>, Vec<f32>) {
    let mut rng = SplitMix64::new(seed);
    let mut data = gaussian(&mut rng, n * dim);
    let mut queries = gaussian(&mut rng, nq * dim);
    for v in data.chunks_mut(dim).chain(queries.chunks_mut(dim)) {
        d.preprocess(v);
    }
    (data, queries)
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

