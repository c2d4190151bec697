use super::*;
use crate::datatype::{f16_to_f32, f32_to_f16};
use crate::rng::SplitMix64;
use crate::testutil::TempDir;

fn random_vec(rng: &mut SplitMix64, dims: u32, nnz: usize, negative: bool) -> SparseVector {
    let mut idx: Vec<u32> = Vec::new();
    while idx.len() < nnz {
        // Skewed towards small ids, as term ids are.
        let r = rng.next_f32();
        let d = ((r * r) * dims as f32) as u32;
        if !idx.contains(&d) {
            idx.push(d);
        }
    }
    let vals: Vec<f32> = idx
        .iter()
        .map(|_| {
            let v = (rng.next_f32() * 4.0).round() / 2.0; // coarse values: many ties
            if negative && rng.next_f32() < 0.2 {
                -v
            } else {
                v
            }
        })
        .collect();
    SparseVector::new(idx, vals).unwrap()
}

/// Every stored document scored against the query, independently of the index.
fn brute(docs: &HashMap<u64, SparseVector>, q: &[(u32, f32)], k: usize, allow: Option<&[u64]>) -> Vec<(u64, f32)> {
    let mut all: Vec<(u64, f32)> = Vec::new();
    for (&l, d) in docs {
        if let Some(a) = allow {
            if !a.contains(&l) {
                continue;
            }
        }
        let mut hit = false;
        let mut s = 0.0f64;
        for (i, &x) in d.indices.iter().enumerate() {
            for &(qd, qw) in q {
                if qd == x {
                    hit = true;
                    s += d.values[i] as f64 * qw as f64;
                }
            }
        }
        if hit {
            all.push((l, s as f32));
        }
    }
    all.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

fn check(index: &SparseIndex, docs: &HashMap<u64, SparseVector>, rng: &mut SplitMix64, allow: Option<Vec<u64>>, exact: bool) {
    let nq = 1 + (rng.next_u64() % 12) as usize;
    let q = random_vec(rng, 200, nq, true);
    let k = 1 + (rng.next_u64() % 20) as usize;
    let got = index.search(&q, &SparseSearch { k, allow: allow.clone(), idf: false, exact });
    let pairs: Vec<(u32, f32)> = q.indices.iter().cloned().zip(q.values.iter().cloned()).collect();
    let want = brute(docs, &pairs, k, allow.as_deref());
    assert_eq!(got, want, "query {:?} k {}", q, k);
}

#[test]
fn search_matches_brute_force_with_updates_deletes_and_filters() {
    let mut rng = SplitMix64::new(7);
    let mut index = SparseIndex::new(50);
    let mut docs: HashMap<u64, SparseVector> = HashMap::new();
    for round in 0..6 {
        for _ in 0..400 {
            let l = rng.next_u64() % 1500;
            let nd = 1 + (rng.next_u64() % 15) as usize;
            let v = random_vec(&mut rng, 200, nd, round % 2 == 1);
            index.upsert(l, v.clone());
            docs.insert(l, v);
        }
        for _ in 0..100 {
            let l = rng.next_u64() % 1500;
            assert_eq!(index.remove(l), docs.remove(&l).is_some());
        }
        for _ in 0..40 {
            check(&index, &docs, &mut rng, None, false);
            check(&index, &docs, &mut rng, None, true);
            let small: Vec<u64> = (0..30).map(|_| rng.next_u64() % 1500).collect();
            check(&index, &docs, &mut rng, Some(small), false);
            let large: Vec<u64> = (0..1500).filter(|_| rng.next_f32() < 0.5).collect();
            check(&index, &docs, &mut rng, Some(large), false);
        }
        assert_eq!(index.len(), docs.len());
    }
}

#[test]
fn ties_go_to_the_smaller_label_and_non_overlapping_documents_are_not_returned() {
    let mut index = SparseIndex::new(10);
    for l in [9u64, 3, 5, 1] {
        index.upsert(l, SparseVector::new(vec![1, 4], vec![1.0, 2.0]).unwrap());
    }
    index.upsert(2, SparseVector::new(vec![7], vec![5.0]).unwrap());
    let q = SparseVector::new(vec![4], vec![1.0]).unwrap();
    let got = index.search(&q, &SparseSearch { k: 3, ..Default::default() });
    assert_eq!(got, vec![(1, 2.0), (3, 2.0), (5, 2.0)]);
    let all = index.search(&q, &SparseSearch { k: 10, ..Default::default() });
    assert_eq!(all.len(), 4);
}

#[test]
fn input_is_sorted_and_checked() {
    let v = SparseVector::new(vec![5, 1, 3], vec![0.5, 0.1, 0.3]).unwrap();
    assert_eq!(v.indices, vec![1, 3, 5]);
    assert_eq!(v.values, vec![0.1, 0.3, 0.5]);
    assert!(SparseVector::new(vec![1, 1], vec![1.0, 2.0]).is_err());
    assert!(SparseVector::new(vec![1, 2], vec![1.0]).is_err());
    assert!(SparseVector::new(vec![1], vec![f32::NAN]).is_err());
}

#[test]
fn idf_weights_follow_the_reference_formula() {
    let mut index = SparseIndex::new(10);
    // dim 1 in 3 of 4 documents, dim 2 in 1 of 4.
    index.upsert(1, SparseVector::new(vec![1, 2], vec![1.0, 1.0]).unwrap());
    index.upsert(2, SparseVector::new(vec![1], vec![1.0]).unwrap());
    index.upsert(3, SparseVector::new(vec![1], vec![2.0]).unwrap());
    index.upsert(4, SparseVector::new(vec![3], vec![1.0]).unwrap());
    let q = SparseVector::new(vec![1, 2], vec![1.0, 1.0]).unwrap();
    let got = index.search(&q, &SparseSearch { k: 10, idf: true, ..Default::default() });
    let idf1 = ((4.0f64 - 3.0 + 0.5) / (3.0 + 0.5) + 1.0).ln();
    let idf2 = ((4.0f64 - 1.0 + 0.5) / (1.0 + 0.5) + 1.0).ln();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].0, 1);
    assert!((got[0].1 as f64 - (idf1 + idf2)).abs() < 1e-5);
    assert_eq!(got[1].0, 3);
    assert!((got[1].1 as f64 - 2.0 * idf1).abs() < 1e-5);
    assert!((got[2].1 as f64 - idf1).abs() < 1e-5);
}

#[test]
fn save_and_load_round_trip_and_detect_corruption() {
    let dir = TempDir::new("sparse");
    let mut rng = SplitMix64::new(3);
    let mut index = SparseIndex::new(77);
    for l in 0..300u64 {
        index.upsert(l * 3, random_vec(&mut rng, 100, 5, true));
    }
    index.remove(6);
    let path = dir.path().join("s.qsi");
    index.save(&path).unwrap();
    let back = SparseIndex::load(&path).unwrap();
    assert_eq!(back.len(), index.len());
    assert_eq!(back.full_scan_threshold(), 77);
    for l in index.labels() {
        assert_eq!(back.get(l), index.get(l));
    }
    let q = random_vec(&mut rng, 100, 6, false);
    let p = SparseSearch { k: 15, ..Default::default() };
    assert_eq!(back.search(&q, &p), index.search(&q, &p));
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    assert_eq!(SparseIndex::from_framed(&bytes, "x").err().unwrap().kind, crate::ErrorKind::Corrupt);
}

/// `v` with its values converted as `dt` stores them, independently of the index code.
fn converted(dt: Datatype, v: &SparseVector) -> SparseVector {
    let values = v
        .values
        .iter()
        .map(|&x| match dt {
            Datatype::Float32 => x,
            Datatype::Float16 => f16_to_f32(f32_to_f16(x)),
            Datatype::Uint8 => {
                if x <= 0.0 {
                    0.0
                } else if x >= 255.0 {
                    255.0
                } else {
                    x.trunc()
                }
            }
        })
        .collect();
    SparseVector { indices: v.indices.clone(), values }
}

fn random_wide(rng: &mut SplitMix64, dims: u32, nnz: usize) -> SparseVector {
    let mut v = random_vec(rng, dims, nnz, true);
    for x in v.values.iter_mut() {
        // Fractions, negatives and values past 255 exercise the conversions.
        *x = (*x + rng.next_f32()) * (1.0 + 150.0 * rng.next_f32());
    }
    v
}

#[test]
fn every_datatype_stores_converted_values_and_scores_them_as_brute_force_does() {
    for dt in [Datatype::Float32, Datatype::Float16, Datatype::Uint8] {
        let mut rng = SplitMix64::new(11);
        let mut index = SparseIndex::with_datatype(50, dt);
        let mut docs: HashMap<u64, SparseVector> = HashMap::new();
        for _ in 0..3 {
            for _ in 0..500 {
                let l = rng.next_u64() % 800;
                let nd = 1 + (rng.next_u64() % 12) as usize;
                let v = random_wide(&mut rng, 150, nd);
                index.upsert(l, v.clone());
                docs.insert(l, converted(dt, &v));
            }
            for _ in 0..80 {
                let l = rng.next_u64() % 800;
                assert_eq!(index.remove(l), docs.remove(&l).is_some());
            }
            for (&l, want) in &docs {
                assert_eq!(index.get(l).as_ref(), Some(want), "{:?} label {}", dt, l);
            }
            for _ in 0..40 {
                check(&index, &docs, &mut rng, None, false);
                check(&index, &docs, &mut rng, None, true);
                let allow: Vec<u64> = (0..800).filter(|_| rng.next_f32() < 0.3).collect();
                check(&index, &docs, &mut rng, Some(allow), false);
            }
        }
        if dt == Datatype::Uint8 {
            let v = SparseVector::new(vec![1, 2, 3, 4], vec![-3.0, 3.9, 300.0, 0.5]).unwrap();
            index.upsert(5000, v);
            assert_eq!(index.get(5000).unwrap().values, vec![0.0, 3.0, 255.0, 0.0]);
        }
        if dt == Datatype::Float16 {
            let v = SparseVector::new(vec![1, 2], vec![1.0 + 1.0 / 4096.0, 1e6]).unwrap();
            index.upsert(5000, v);
            assert_eq!(index.get(5000).unwrap().values, vec![1.0, 65504.0]);
        }
        // The file keeps the datatype and the stored values.
        let back = SparseIndex::from_framed(&index.to_framed(), "x").unwrap();
        assert_eq!(back.datatype(), dt);
        assert_eq!(back.labels(), index.labels());
        for l in index.labels() {
            assert_eq!(back.get(l), index.get(l));
        }
    }
}

#[test]
fn memory_per_posting_shrinks_with_the_datatype() {
    let mut per = Vec::new();
    for dt in [Datatype::Float32, Datatype::Float16, Datatype::Uint8] {
        let mut rng = SplitMix64::new(5);
        let mut index = SparseIndex::with_datatype(0, dt);
        let batch: Vec<SparseVector> = (0..20000).map(|_| random_wide(&mut rng, 30000, 40)).collect();
        let labels: Vec<u64> = (0..batch.len() as u64).collect();
        let mut offsets = vec![0u32];
        let (mut indices, mut values) = (Vec::new(), Vec::new());
        for v in &batch {
            indices.extend_from_slice(&v.indices);
            values.extend_from_slice(&v.values);
            offsets.push(indices.len() as u32);
        }
        index.upsert_batch(&labels, &offsets, &indices, &values).unwrap();
        let s = index.stats();
        let b = s.total_bytes as f64 / s.entries as f64;
        eprintln!("sparse {}: {:.2} bytes per entry (posting + forward copy)", dt.name(), b);
        per.push(b);
    }
    // Each entry is held twice (posting list and forward copy): at least 2 bytes less
    // per value and copy for float16 and 1 less again for uint8 (capacity slack adds a
    // little on top).
    assert!(per[0] - per[1] > 3.5, "{:?}", per);
    assert!(per[1] - per[2] > 1.5, "{:?}", per);
}

#[test]
fn version_1_files_load_as_float32() {
    let mut w = crate::fileio::ByteWriter::new();
    w.put_u64(9);
    w.put_u64(1);
    w.put_u64(4);
    w.put_u32(2);
    w.put_u32_slice(&[3, 7]);
    w.put_f32_slice(&[0.25, -1.5]);
    let bytes = crate::fileio::frame(SPARSE_MAGIC, 1, w.as_slice());
    let idx = SparseIndex::from_framed(&bytes, "v1").unwrap();
    assert_eq!(idx.datatype(), Datatype::Float32);
    assert_eq!(idx.full_scan_threshold(), 9);
    assert_eq!(idx.get(4).unwrap(), SparseVector { indices: vec![3, 7], values: vec![0.25, -1.5] });
}
