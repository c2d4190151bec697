//! Single-thread search QPS and recall@10 on a `bench:engine` data set, without Node:
//! for comparing two builds of the engine's search loop side by side.
//!
//!     cargo run --release -p quiver-core --features avx512 --example search_bench -- \
//!         bench/data/mnist-9000-1000 [efs=16,32,64] [rounds=5]
//!
//! Reads `<stem>.json` (dim, nBase, nQuery, distance) and `<stem>.bin` (f32 base rows
//! then query rows), and the ground truth `bench/data/gt-<key>-...-k10-*.bin` that
//! `bench:engine` wrote next to it. Builds with 2 threads and seed 42 (as bench:engine),
//! then runs every query once per ef per round and prints the median QPS. An ef of 0
//! runs exact searches instead.

use quiver_core::hnsw::{Index, IndexConfig, SearchParams};
use quiver_core::Distance;
use std::time::Instant;

fn field(json: &str, name: &str) -> String {
    let at = json.find(&format!("\"{}\"", name)).expect(name) + name.len() + 2;
    let rest = json[at..].trim_start_matches(|c: char| c == ':' || c.is_whitespace());
    rest.chars().take_while(|&c| c != ',' && c != '\n' && c != '}').collect::<String>().trim().trim_matches('"').to_string()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let stem = &args[1];
    let efs: Vec<usize> = args.get(2).map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(vec![16, 32, 64, 128]);
    let rounds: usize = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(5);
    let json = std::fs::read_to_string(format!("{}.json", stem)).unwrap();
    let dim: usize = field(&json, "dim").parse().unwrap();
    let nb: usize = field(&json, "nBase").parse().unwrap();
    let nq: usize = field(&json, "nQuery").parse().unwrap();
    let dist = Distance::parse(&field(&json, "distance")).unwrap();
    let bytes = std::fs::read(format!("{}.bin", stem)).unwrap();
    let all: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let (base, queries) = all.split_at(nb * dim);
    let dir = std::path::Path::new(stem).parent().unwrap();
    let key = std::path::Path::new(stem).file_name().unwrap().to_str().unwrap().to_string();
    let gt_file = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(&format!("gt-{}-k10-", key)))
        .expect("ground truth (run bench:engine once)");
    let gtb = std::fs::read(gt_file).unwrap();
    let gt: Vec<i32> = gtb[..nq * 10 * 4].chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();

    let mut config = IndexConfig::new(dim, dist);
    config.seed = 42;
    let mut index = Index::new(config).unwrap();
    let labels: Vec<u64> = (0..nb as u64).collect();
    let t = Instant::now();
    index.add(&labels, base, 2).unwrap();
    eprintln!("{}: {} x {}-d {:?}, built in {:.2} s", key, nb, dim, dist, t.elapsed().as_secs_f64());

    let mut qps: Vec<Vec<f64>> = vec![Vec::new(); efs.len()];
    let mut recall = vec![0f64; efs.len()];
    for _ in 0..rounds {
        for (e, &ef) in efs.iter().enumerate() {
            let mut p = SearchParams::new(10);
            // ef 0: an exact search (a scan of every vector).
            if ef == 0 {
                p.exact = true;
            } else {
                p.ef = Some(ef);
            }
            let mut hits = 0usize;
            let t = Instant::now();
            for q in 0..nq {
                let r = index.search(&queries[q * dim..(q + 1) * dim], &p, None).unwrap();
                let want = &gt[q * 10..q * 10 + 10];
                hits += r.iter().filter(|(l, _)| want.contains(&(*l as i32))).count();
            }
            qps[e].push(nq as f64 / t.elapsed().as_secs_f64());
            recall[e] = hits as f64 / (nq * 10) as f64;
        }
    }
    for (e, &ef) in efs.iter().enumerate() {
        let mut v = qps[e].clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("{} ef={} recall={:.4} qps_median={:.0} qps_best={:.0}", key, ef, recall[e], v[v.len() / 2], v[v.len() - 1]);
    }
}
