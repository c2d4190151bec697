//! WAL throughput benchmark.
//!
//! ```text
//! cargo run --release -p quiver-core --example wal_bench -- [--quick] [--json out.json] [--dir PATH]
//! ```
//! Writes into a fresh directory under the system temp dir (or `--dir`, which should
//! be on the disk you care about: fsync cost is a property of the device) and removes
//! it afterwards. Measures, for 128 B and 4 KiB records: (a) appends with no fsync,
//! (b) an fsync per batch of 100 records, (c) an fsync per record; then group commit:
//! 8 threads that each append one record and sync, in a loop.
//!
//! Every run is bounded by time (2 s, or 0.4 s with --quick) and by bytes, so the
//! whole benchmark stays under ~20 s (~5 s quick) and cannot fill the disk.
//! MB/s counts record data only (10^6 bytes), not the 16-byte record headers.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_core::crc32c;
use quiver_core::wal::{Wal, WalOptions};

struct Args {
    quick: bool,
    json: Option<PathBuf>,
    dir: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        quick: false,
        json: None,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--json" => a.json = Some(PathBuf::from(it.next().ok_or("--json needs a file name")?)),
            "--dir" => a.dir = Some(PathBuf::from(it.next().ok_or("--dir needs a directory")?)),
            "-h" | "--help" => {
                return Err("usage: wal_bench [--quick] [--json out.json] [--dir PATH]".to_string());
            }
            other => return Err(format!("unknown argument {:?} (try --help)", other)),
        }
    }
    Ok(a)
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    NoFsync,
    FsyncPerBatch,
    FsyncPerRecord,
    GroupCommit,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::NoFsync => "no_fsync",
            Mode::FsyncPerBatch => "fsync_per_100",
            Mode::FsyncPerRecord => "fsync_per_record",
            Mode::GroupCommit => "group_commit_8t",
        }
    }
}

struct RunResult {
    mode: Mode,
    record_bytes: usize,
    threads: usize,
    records: u64,
    seconds: f64,
    fsyncs: u64,
}

impl RunResult {
    fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.seconds
    }
    fn mb_per_sec(&self) -> f64 {
        (self.records as f64 * self.record_bytes as f64) / 1e6 / self.seconds
    }
}

/// Removes the benchmark directory however the run ends.
struct Cleanup(PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const BATCH: usize = 100;
const THREADS: usize = 8;

fn run(base: &Path, mode: Mode, record_bytes: usize, budget: Duration, max_bytes: u64) -> RunResult {
    let dir = base.join(format!("{}-{}", mode.name(), record_bytes));
    // Retention keeps disk use bounded during the long no-fsync runs.
    let opts = WalOptions {
        segment_bytes: 32 << 20,
        retention_bytes: 128 << 20,
    };
    let (wal, _) = Wal::open(&dir, opts).expect("open wal");
    let record: Vec<u8> = (0..record_bytes).map(|i| (i * 131 + 7) as u8).collect();
    let max_records = (max_bytes / record_bytes as u64).max(1);
    let start = Instant::now();
    let deadline = start + budget;
    let mut records = 0u64;
    match mode {
        Mode::NoFsync => {
            while records < max_records {
                wal.append(&record).expect("append");
                records += 1;
                if records % 256 == 0 && Instant::now() >= deadline {
                    break;
                }
            }
        }
        Mode::FsyncPerBatch => {
            let batch: Vec<&[u8]> = (0..BATCH).map(|_| record.as_slice()).collect();
            while records < max_records {
                wal.append_batch(&batch).expect("append_batch");
                wal.sync().expect("sync");
                records += BATCH as u64;
                if Instant::now() >= deadline {
                    break;
                }
            }
        }
        Mode::FsyncPerRecord => {
            while records < max_records {
                wal.append(&record).expect("append");
                wal.sync().expect("sync");
                records += 1;
                if Instant::now() >= deadline {
                    break;
                }
            }
        }
        Mode::GroupCommit => {
            let wal = Arc::new(wal);
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let wal = Arc::clone(&wal);
                    let record = record.clone();
                    std::thread::spawn(move || {
                        let mut n = 0u64;
                        while n < max_records / THREADS as u64 {
                            wal.append(&record).expect("append");
                            wal.sync().expect("sync");
                            n += 1;
                            if Instant::now() >= deadline {
                                break;
                            }
                        }
                        n
                    })
                })
                .collect();
            records = handles.into_iter().map(|h| h.join().expect("bench thread")).sum();
            let seconds = start.elapsed().as_secs_f64();
            let fsyncs = wal.sync_count();
            drop(wal);
            let _ = fs::remove_dir_all(&dir);
            return RunResult {
                mode,
                record_bytes,
                threads: THREADS,
                records,
                seconds,
                fsyncs,
            };
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let fsyncs = wal.sync_count();
    drop(wal);
    let _ = fs::remove_dir_all(&dir);
    RunResult {
        mode,
        record_bytes,
        threads: 1,
        records,
        seconds,
        fsyncs,
    }
}

/// GB/s of the dispatching crc32c and of the portable version over 64 KiB buffers.
fn crc_speed(budget: Duration) -> (f64, f64) {
    let buf: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let measure = |f: &dyn Fn(&[u8]) -> u32| {
        let start = Instant::now();
        let mut bytes = 0u64;
        let mut acc = 0u32;
        while start.elapsed() < budget {
            for _ in 0..16 {
                acc ^= f(&buf);
                bytes += buf.len() as u64;
            }
        }
        // Use the result so the loop cannot be optimised away (std::hint::black_box
        // needs Rust 1.66; this crate builds with 1.63).
        if acc == 0x5EED_5EED {
            eprint!(" ");
        }
        bytes as f64 / 1e9 / start.elapsed().as_secs_f64()
    };
    (
        measure(&|b| crc32c::crc32c(b)),
        measure(&|b| crc32c::crc32c_append_sw(0, b)),
    )
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{}", msg);
            std::process::exit(2);
        }
    };
    let (budget, max_bytes) = if args.quick {
        (Duration::from_millis(400), 256u64 << 20)
    } else {
        (Duration::from_millis(2000), 1u64 << 30)
    };
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let base = parent.join(format!("quiver-wal-bench-{}-{}", std::process::id(), nanos));
    fs::create_dir_all(&base).expect("create benchmark directory");
    let _cleanup = Cleanup(base.clone());

    let total = Instant::now();
    let (crc_hw, crc_sw) = crc_speed(Duration::from_millis(if args.quick { 50 } else { 200 }));
    println!(
        "wal_bench: dir {}  budget {:.1} s/run  crc32c {:.1} GB/s ({}), software {:.1} GB/s",
        base.display(),
        budget.as_secs_f64(),
        crc_hw,
        if crc32c::hardware_accelerated() {
            "sse4.2"
        } else {
            "software"
        },
        crc_sw
    );
    println!(
        "{:<18} {:>6} {:>7} {:>10} {:>7} {:>12} {:>9} {:>8} {:>9}",
        "mode", "bytes", "threads", "records", "secs", "records/s", "MB/s", "fsyncs", "rec/fsync"
    );

    let mut results = Vec::new();
    let plan = [
        (Mode::NoFsync, 128),
        (Mode::NoFsync, 4096),
        (Mode::FsyncPerBatch, 128),
        (Mode::FsyncPerBatch, 4096),
        (Mode::FsyncPerRecord, 128),
        (Mode::FsyncPerRecord, 4096),
        (Mode::GroupCommit, 128),
        (Mode::GroupCommit, 4096),
    ];
    for &(mode, size) in plan.iter() {
        let r = run(&base, mode, size, budget, max_bytes);
        let per_fsync = if r.fsyncs > 0 {
            format!("{:.1}", r.records as f64 / r.fsyncs as f64)
        } else {
            "-".to_string()
        };
        println!(
            "{:<18} {:>6} {:>7} {:>10} {:>7.2} {:>12.0} {:>9.1} {:>8} {:>9}",
            r.mode.name(),
            r.record_bytes,
            r.threads,
            r.records,
            r.seconds,
            r.records_per_sec(),
            r.mb_per_sec(),
            r.fsyncs,
            per_fsync
        );
        results.push(r);
    }
    println!("total {:.1} s", total.elapsed().as_secs_f64());

    if let Some(path) = args.json {
        let mut s = String::new();
        s.push_str("{\n");
        s.push_str(&format!("  \"quick\": {},\n", args.quick));
        s.push_str(&format!("  \"crc32c_hardware\": {},\n", crc32c::hardware_accelerated()));
        s.push_str(&format!("  \"crc32c_gb_per_sec\": {:.3},\n", crc_hw));
        s.push_str(&format!("  \"crc32c_software_gb_per_sec\": {:.3},\n", crc_sw));
        s.push_str(&format!("  \"budget_seconds_per_run\": {:.3},\n", budget.as_secs_f64()));
        s.push_str("  \"runs\": [\n");
        for (i, r) in results.iter().enumerate() {
            s.push_str(&format!(
                "    {{\"mode\": \"{}\", \"record_bytes\": {}, \"threads\": {}, \"records\": {}, \"seconds\": {:.4}, \"records_per_sec\": {:.1}, \"mb_per_sec\": {:.3}, \"fsyncs\": {}}}{}\n",
                r.mode.name(),
                r.record_bytes,
                r.threads,
                r.records,
                r.seconds,
                r.records_per_sec(),
                r.mb_per_sec(),
                r.fsyncs,
                if i + 1 < results.len() { "," } else { "" }
            ));
        }
        s.push_str("  ]\n}\n");
        let write = fs::File::create(&path).and_then(|mut f| f.write_all(s.as_bytes()));
        if let Err(e) = write {
            eprintln!("wal_bench: cannot write {}: {}", path.display(), e);
            std::process::exit(1);
        }
        println!("wrote {}", path.display());
    }
}
