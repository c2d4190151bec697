//! ns per approximate cost: f32 (the distance kernels), int8 and binary codes; int8
//! training time.
//!
//!     cargo run --release -p quiver-core --example quant_bench
//!
//! Measures one query against every vector of a small, cache-resident set, many times,
//! so the numbers are kernel cost, not memory latency (a graph walk adds the latter).
//! Set QUIVER_KERNELS=scalar to see the fallback kernels.

use quiver_core::distance;
use quiver_core::quant::{self, BinaryQuantizer, ScalarQuantizer};
use quiver_core::rng::SplitMix64;
use quiver_core::Distance;
use std::time::Instant;

const N: usize = 1000;

/// Runs `f(i)` over all N vectors `reps` times; returns ns per call and a checksum that
/// keeps the optimiser from dropping the work.
fn time(reps: usize, mut f: impl FnMut(usize) -> f32) -> (f64, f32) {
    let mut sink = 0f32;
    for i in 0..N {
        sink += f(i); // warm-up
    }
    let t = Instant::now();
    for _ in 0..reps {
        for i in 0..N {
            sink += f(i);
        }
    }
    (t.elapsed().as_nanos() as f64 / (reps * N) as f64, sink)
}

fn main() {
    let k = distance::kernels();
    let qk = quant::kernels();
    println!("f32 kernels: {}, quant kernels: {}", k.name, qk.name);
    println!("{:>4} {:>9} {:>8} {:>8} {:>8} {:>10}", "dim", "distance", "f32 ns", "int8 ns", "bin ns", "prepare ns");
    let mut sink = 0f32;
    for &dim in &[50usize, 128, 784, 1536] {
        let mut rng = SplitMix64::new(dim as u64);
        for &d in &[Distance::Cosine, Distance::Euclid, Distance::Manhattan] {
            let mut data: Vec<f32> = (0..N * dim).map(|_| rng.next_gaussian()).collect();
            let mut q: Vec<f32> = (0..dim).map(|_| rng.next_gaussian()).collect();
            for v in data.chunks_mut(dim) {
                d.preprocess(v);
            }
            d.preprocess(&mut q);
            let sq = ScalarQuantizer::train(&data, dim, 0.99);
            let bq = BinaryQuantizer::train(&data, dim);
            let (sl, bl) = (sq.code_len(), bq.code_len());
            let mut scodes = vec![0u8; N * sl];
            let mut bcodes = vec![0u8; N * bl];
            for (i, v) in data.chunks(dim).enumerate() {
                sq.encode(v, &mut scodes[i * sl..(i + 1) * sl]);
                bq.encode(v, &mut bcodes[i * bl..(i + 1) * bl]);
            }
            let reps = (200_000_000 / (N * dim)).max(5);
            let cost = d.cost_fn(k);
            let (f, s1) = time(reps, |i| cost(&q, &data[i * dim..(i + 1) * dim]));
            let sqq = sq.prepare_query(d, &q);
            let (s, s2) = time(reps, |i| sq.cost(&sqq, &scodes[i * sl..(i + 1) * sl]));
            let bqq = bq.prepare_query(d, &q);
            let (b, s3) = time(reps, |i| bq.cost(&bqq, &bcodes[i * bl..(i + 1) * bl]));
            let t = Instant::now();
            for _ in 0..1000 {
                let p = sq.prepare_query(d, &q);
                let p2 = bq.prepare_query(d, &q);
                sink += sq.cost(&p, &scodes[..sl]) + bq.cost(&p2, &bcodes[..bl]);
            }
            let prep = t.elapsed().as_nanos() as f64 / 1000.0;
            sink += s1 + s2 + s3;
            println!("{:>4} {:>9} {:>8.2} {:>8.2} {:>8.2} {:>10.0}", dim, d.name(), f, s, b, prep);
        }
    }
    // int8 training (per-dimension ranges): hnsw retrains on every add below 20k slots.
    for &(n, dim) in &[(20_000usize, 128usize), (20_000, 784)] {
        let mut rng = SplitMix64::new(7);
        let data: Vec<f32> = (0..n * dim).map(|_| rng.next_gaussian()).collect();
        let t = Instant::now();
        let sq = ScalarQuantizer::train(&data, dim, 0.99);
        println!("int8 train {} x {}: {:.1} ms", n, dim, t.elapsed().as_secs_f64() * 1e3);
        sink += sq.step()[0];
    }
    // The int8 kernels alone, per kernel set, on one code (dot product, dim 784).
    let mut rng = SplitMix64::new(1);
    let a: Vec<u8> = (0..784).map(|_| rng.next_u64() as u8).collect();
    let b: Vec<u8> = (0..784).map(|_| rng.next_u64() as u8).collect();
    for ks in quant::available_kernels() {
        let t = Instant::now();
        let mut acc = 0u64;
        for _ in 0..1_000_000 {
            acc = acc.wrapping_add((ks.dot_u8)(&a, &b));
        }
        println!("{:>12}: dot_u8 dim 784 {:.2} ns", ks.name, t.elapsed().as_nanos() as f64 / 1e6);
        sink += acc as f32;
    }
    println!("(checksum {})", sink);
}
