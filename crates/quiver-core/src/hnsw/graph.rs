//! Building and changing the graph.
//!
//! Owns: `add` (a sequential phase that assigns slots, writes vectors or codes and
//! trains the quantizer, then a parallel phase that links the new slots), the HNSW
//! insertion itself (`link`, back-links, the neighbour heuristic), the build's locks
//! (striped spin locks, one entry lock), `delete` (marking slots), `compact` (a rebuild
//! from the live vectors) and `check_invariants`.
//! Must never: let a thread hold two node locks at once (stripes are shared, so that
//! could deadlock); write a new node's links over those other threads have already
//! given it (`link` merges them first: overwriting left nodes with no way in); move or
//! resize the arena once linking has started (every slot is allocated and written in
//! the sequential phase); or change the layout of a non-empty arena (retraining
//! re-encodes the codes in place, at the same length).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use super::search::{RawScorer, Scorer};
use super::*;
use crate::datatype::f32_to_f16;
use crate::error::ErrorKind;
use crate::visited::VisitedSet;

/// A per-node lock for the parallel build. Hold times are a few microseconds (one
/// neighbour list rewrite), far below the cost of a futex sleep and wake-up, which on a
/// virtual machine with idle cores made a contended `Mutex` build slower with two
/// threads than with one. So: spin, then yield.
pub(super) struct SpinLock(AtomicBool);

struct SpinGuard<'a>(&'a SpinLock);

impl SpinLock {
    pub(super) fn new() -> SpinLock {
        SpinLock(AtomicBool::new(false))
    }

    #[inline]
    fn lock(&self) -> SpinGuard<'_> {
        let mut spins = 0u32;
        while self.0.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            while self.0.load(Ordering::Relaxed) {
                spins += 1;
                if spins < 256 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        SpinGuard(self)
    }
}

impl<'a> Drop for SpinGuard<'a> {
    #[inline]
    fn drop(&mut self) {
        (self.0).0.store(false, Ordering::Release);
    }
}

/// Per-thread state reused across insertions.
struct BuildScratch {
    visited: VisitedSet,
}

/// Number of node-lock stripes of the parallel build.
pub(super) const LOCK_STRIPES: usize = 4096;

/// While the index holds fewer slots than this, each add retrains the quantizer on the
/// originals held so far plus the new batch (at most this many of its vectors) and
/// re-encodes the codes, so a tiny first batch does not fix the quantization range for
/// good.
const RETRAIN_BELOW: usize = 20_000;

pub fn default_threads() -> usize {
    #[cfg(target_arch = "wasm32")]
    {
        1
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    }
}

impl Index {
    fn random_level(&mut self) -> u8 {
        let ml = 1.0 / (self.config.m as f64).ln();
        let r = -self.rng.next_f64_open0().ln() * ml;
        (r as usize).min(31) as u8
    }

    fn check_vectors(&self, vectors: &[f32], count: usize) -> Result<()> {
        let d = self.config.dim;
        if vectors.len() != count * d {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!(
                    "expected {} vectors of dimension {} ({} values), got {} values",
                    count,
                    d,
                    count * d,
                    vectors.len()
                ),
            ));
        }
        if let Some(p) = vectors.iter().position(|x| !x.is_finite()) {
            return Err(Error::invalid(format!(
                "vector {} has a non-finite value at position {}",
                p / d,
                p % d
            )));
        }
        let (dt, dist) = (self.config.datatype, self.config.distance);
        if let Some(p) = vectors.iter().position(|&x| !dt.fits(dist, x)) {
            return Err(Error::invalid(format!(
                "vector {} has a value out of the {} range at position {}: {}",
                p / d,
                dt.name(),
                p % d,
                vectors[p]
            )));
        }
        Ok(())
    }

    fn grow(&mut self, needed: usize) {
        if needed <= self.cap {
            return;
        }
        let cap = needed.max(self.cap * 2).max(16);
        let mut arena = zeroed_atomics(cap * self.stride);
        unsafe {
            std::ptr::copy_nonoverlapping(self.arena.as_ptr(), arena.as_mut_ptr(), self.n * self.stride);
        }
        self.arena = arena;
        self.cap = cap;
        self.levels.reserve(cap - self.levels.len());
        self.upper_off.reserve(cap - self.upper_off.len());
        self.labels.reserve(cap - self.labels.len());
        self.deleted.resize((cap + 63) / 64, 0);
        if self.quantized() && self.mapped.is_none() {
            self.originals.reserve(cap * self.config.dim - self.originals.len());
        }
    }

    fn mark_deleted(&mut self, i: u32) {
        let w = &mut self.deleted[(i >> 6) as usize];
        let bit = 1u64 << (i & 63);
        if *w & bit == 0 {
            *w |= bit;
            self.deleted_count += 1;
        }
    }

    /// Trains the quantizer on the first data the index sees. The arena switches
    /// from f32 to code slots, which is only possible while it is empty.
    fn train_quantizer(&mut self, sample: &[f32]) {
        debug_assert_eq!(self.n, 0);
        let d = self.config.dim;
        let codes = match self.config.quantization {
            Quantization::None => return,
            Quantization::Scalar { quantile } => Codes::Scalar(ScalarQuantizer::train(sample, d, quantile)),
            Quantization::Binary => Codes::Binary(BinaryQuantizer::train(sample, d)),
        };
        let code_len = match &codes {
            Codes::Scalar(q) => q.code_len(),
            Codes::Binary(q) => q.code_len(),
            Codes::F32 => d * 4,
        };
        self.codes = codes;
        self.data_words = (code_len + 3) / 4;
        self.stride = self.lofs + self.data_words;
        self.arena = Vec::new();
        self.cap = 0;
    }

    /// Retrains the quantizer on the originals held so far plus `new`, and re-encodes
    /// every code. The code length depends only on the dimension, so the arena layout
    /// stays as it is.
    fn retrain_quantizer(&mut self, new: &[f32]) {
        let d = self.config.dim;
        let n = self.n;
        // In memory or mapped (field borrows: the arena is written below).
        let originals: &[f32] = match &self.mapped {
            Some(m) => m.as_slice(),
            None => &self.originals,
        };
        let mut sample: Vec<f32> = Vec::with_capacity(n * d + new.len());
        sample.extend_from_slice(&originals[..n * d]);
        sample.extend_from_slice(&new[..new.len().min(RETRAIN_BELOW * d)]);
        let codes = match self.config.quantization {
            Quantization::None => return,
            Quantization::Scalar { quantile } => Codes::Scalar(ScalarQuantizer::train(&sample, d, quantile)),
            Quantization::Binary => Codes::Binary(BinaryQuantizer::train(&sample, d)),
        };
        self.codes = codes;
        for i in 0..n {
            let base = i * self.stride + self.lofs;
            let p = self.arena[base..].as_mut_ptr() as *mut u8;
            let v = &originals[i * d..(i + 1) * d];
            match &self.codes {
                Codes::Scalar(q) => q.encode(v, unsafe { std::slice::from_raw_parts_mut(p, q.code_len()) }),
                Codes::Binary(q) => q.encode(v, unsafe { std::slice::from_raw_parts_mut(p, q.code_len()) }),
                Codes::F32 => {}
            }
        }
    }

    /// Inserts or replaces vectors. A label seen before has its old slot deleted.
    /// Graph insertion runs on `threads` threads (0 = all cores).
    pub fn add(&mut self, labels: &[u64], vectors: &[f32], threads: usize) -> Result<()> {
        self.check_vectors(vectors, labels.len())?;
        if labels.is_empty() {
            return Ok(());
        }
        if self.n + labels.len() >= NONE as usize {
            return Err(Error::invalid("index is full (2^32 - 1 slots)"));
        }
        // Links on disk are never written in place: copy them back into memory first
        // (the file stays for the caller; the caller maps the grown graph again).
        self.move_graph_to_memory();
        let d = self.config.dim;
        // A label repeated within the batch: the last occurrence wins.
        let mut last: LabelMap = LabelMap::default();
        last.reserve(labels.len());
        for (j, l) in labels.iter().enumerate() {
            last.insert(*l, j as u32);
        }
        let mut prepared: Vec<f32> = Vec::with_capacity(last.len() * d);
        let mut batch_labels: Vec<u64> = Vec::with_capacity(last.len());
        for (j, l) in labels.iter().enumerate() {
            if last[l] as usize != j {
                continue;
            }
            let start = prepared.len();
            prepared.extend_from_slice(&vectors[j * d..(j + 1) * d]);
            self.config.datatype.prepare(self.config.distance, &mut prepared[start..]);
            batch_labels.push(*l);
        }
        // Originals in a mapped file: the batch goes to the file first (before anything
        // changes, so a failed write leaves the index as it was), then the linking
        // below reads it from the longer mapping like every other original.
        if let Some(m) = self.mapped.as_mut() {
            debug_assert_eq!(m.as_slice().len(), self.n * d);
            m.append(&prepared)?;
        }
        if self.config.quantization != Quantization::None {
            if self.n == 0 && !self.quantized() {
                self.train_quantizer(&prepared);
            } else if self.n < RETRAIN_BELOW {
                self.retrain_quantizer(&prepared);
            }
        }
        let first = self.n;
        let count = batch_labels.len();
        self.grow(first + count);
        self.label_map.reserve(count);

        // Sequential phase: assign slots, write data, allocate upper links. After it,
        // every new slot is fully formed except for its links.
        for j in 0..count {
            let i = (first + j) as u32;
            let label = batch_labels[j];
            if let Some(old) = self.label_map.insert(label, i) {
                self.mark_deleted(old);
            }
            self.labels.push(label);
            // Flat slots all sit on level 0, with no upper links (and no entry point).
            let level = if self.config.flat { 0 } else { self.random_level() };
            self.levels.push(level);
            if level > 0 {
                self.upper_off.push(self.upper.len() as u32);
                let words = level as usize * (1 + self.config.m);
                self.upper.extend((0..words).map(|_| AtomicU32::new(0)));
            } else {
                self.upper_off.push(NONE);
            }
            let v = &prepared[j * d..(j + 1) * d];
            let base = i as usize * self.stride + self.lofs;
            match &self.codes {
                Codes::F32 => match self.config.datatype {
                    Datatype::Float32 => {
                        // Zipped over one subslice (one bounds check, not d), so this is a
                        // plain copy: it is all a flat add does per vector.
                        for (w, x) in self.arena[base..base + d].iter_mut().zip(v) {
                            *w.get_mut() = x.to_bits();
                        }
                    }
                    Datatype::Float16 => {
                        let p = self.arena[base..].as_mut_ptr() as *mut u16;
                        let out = unsafe { std::slice::from_raw_parts_mut(p, d) };
                        for (o, x) in out.iter_mut().zip(v) {
                            *o = f32_to_f16(*x);
                        }
                    }
                    Datatype::Uint8 => {
                        let p = self.arena[base..].as_mut_ptr() as *mut u8;
                        let out = unsafe { std::slice::from_raw_parts_mut(p, d) };
                        // `prepare` made every value an integer in 0..=255.
                        for (o, x) in out.iter_mut().zip(v) {
                            *o = *x as u8;
                        }
                    }
                },
                Codes::Scalar(q) => {
                    let p = self.arena[base..].as_mut_ptr() as *mut u8;
                    let out = unsafe { std::slice::from_raw_parts_mut(p, q.code_len()) };
                    q.encode(v, out);
                }
                Codes::Binary(q) => {
                    let p = self.arena[base..].as_mut_ptr() as *mut u8;
                    let out = unsafe { std::slice::from_raw_parts_mut(p, q.code_len()) };
                    q.encode(v, out);
                }
            }
            if self.quantized() && self.mapped.is_none() {
                self.originals.extend_from_slice(v);
            }
            self.n += 1;
        }
        if self.config.flat {
            return Ok(()); // nothing to link
        }

        // Parallel phase: link the new slots into the graph.
        let threads = if threads == 0 { default_threads() } else { threads }.max(1).min(count);
        let locks: &[SpinLock] = &self.build_locks;
        let next = AtomicUsize::new(first);
        let end = first + count;
        let this: &Index = self;
        let work = |scratch: &mut BuildScratch| loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= end {
                break;
            }
            this.link(i as u32, locks, scratch);
        };
        let run = || {
            let mut scratch = BuildScratch { visited: this.visited.take(this.n) };
            work(&mut scratch);
            this.visited.give(scratch.visited);
        };
        if threads <= 1 {
            run();
        } else {
            #[cfg(not(target_arch = "wasm32"))]
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(run);
                }
            });
            #[cfg(target_arch = "wasm32")]
            run();
        }
        // Linking read originals all over the mapped file: drop those pages from the
        // process (the page cache keeps them), so a build leaves the resident set at
        // the codes and the graph.
        if let Some(m) = &self.mapped {
            m.release_pages();
        }
        Ok(())
    }

    /// Links slot `i` into the graph (the HNSW insertion algorithm).
    fn link(&self, i: u32, locks: &[SpinLock], scratch: &mut BuildScratch) {
        let level = self.levels[i as usize] as usize;
        // Most nodes stay below the top level and need no global lock. A node that
        // may become the new top (or the very first node) holds the entry lock for its
        // whole insert, which keeps entry and max level consistent; that is ~1/m^L of
        // the nodes.
        let mut guard = None;
        if self.entry.load(Ordering::Acquire) == NONE || level > self.max_level.load(Ordering::Acquire) {
            guard = Some(self.entry_lock.lock().unwrap_or_else(|e| e.into_inner()));
        }
        let entry = self.entry.load(Ordering::Acquire);
        if entry == NONE {
            self.max_level.store(level, Ordering::Release);
            self.entry.store(i, Ordering::Release);
            return;
        }
        let top = self.max_level.load(Ordering::Acquire).min(self.levels[entry as usize] as usize);
        if level <= top {
            guard = None;
        }

        let qv = self.vector_f32(i);
        let q: &[f32] = &qv;
        let scorer = RawScorer { index: self, q };
        let mut cur = entry;
        let mut cur_cost = scorer.cost(cur);
        let mut lvl = top;
        while lvl > level {
            let (c, cc) = self.greedy(&scorer, cur, cur_cost, lvl);
            cur = c;
            cur_cost = cc;
            lvl -= 1;
        }
        let mut l = level.min(top) as isize;
        while l >= 0 {
            let lu = l as usize;
            scratch.visited.reset(self.n);
            let found = self.beam(&scorer, cur, cur_cost, self.config.ef_construct, lu, &mut scratch.visited, |i| self.prefetch_raw(i));
            // `found` is sorted best first.
            cur = found[0].id;
            cur_cost = found[0].cost;
            let chosen = self.select_neighbors(&found, self.config.m);
            {
                let _g = locks[i as usize % LOCK_STRIPES].lock();
                let list = self.links(i, lu);
                // Another thread may already have linked to `i` at this level (it
                // reached `i` from a higher level first) and added its back-link here.
                // Keep those links: overwriting them can leave a node with no way in.
                let cnt = list[0].load(Ordering::Acquire) as usize;
                let keep = if cnt == 0 {
                    chosen.clone()
                } else {
                    let mut merged = chosen.clone();
                    for t in 0..cnt {
                        let id = list[1 + t].load(Ordering::Relaxed);
                        if !merged.iter().any(|c| c.id == id) {
                            merged.push(Cand { cost: self.cost_to(q, id), id });
                        }
                    }
                    merged.sort_unstable();
                    self.select_neighbors(&merged, self.max_links(lu))
                };
                for (t, c) in keep.iter().enumerate() {
                    list[1 + t].store(c.id, Ordering::Relaxed);
                }
                list[0].store(keep.len() as u32, Ordering::Release);
            }
            for c in &chosen {
                self.add_back_link(c.id, i, c.cost, lu, locks);
            }
            l -= 1;
        }
        if let Some(_g) = guard {
            if level > self.max_level.load(Ordering::Acquire) {
                self.max_level.store(level, Ordering::Release);
                self.entry.store(i, Ordering::Release);
            }
        }
    }

    /// Adds `new` to `node`'s links at `level`, pruning with the heuristic when full.
    fn add_back_link(&self, node: u32, new: u32, cost: f32, level: usize, locks: &[SpinLock]) {
        if node == new {
            return;
        }
        let _g = locks[node as usize % LOCK_STRIPES].lock();
        let list = self.links(node, level);
        let cnt = list[0].load(Ordering::Acquire) as usize;
        let max = self.max_links(level);
        for t in 0..cnt {
            if list[1 + t].load(Ordering::Relaxed) == new {
                return;
            }
        }
        if cnt < max {
            list[1 + cnt].store(new, Ordering::Relaxed);
            list[0].store(cnt as u32 + 1, Ordering::Release);
            return;
        }
        let base = self.vector_f32(node);
        let mut cands: Vec<Cand> = Vec::with_capacity(cnt + 1);
        cands.push(Cand { cost, id: new });
        for t in 0..cnt {
            let id = list[1 + t].load(Ordering::Relaxed);
            cands.push(Cand { cost: self.cost_to(&base, id), id });
        }
        cands.sort_unstable();
        let keep = self.select_neighbors(&cands, max);
        for (t, c) in keep.iter().enumerate() {
            list[1 + t].store(c.id, Ordering::Relaxed);
        }
        list[0].store(keep.len() as u32, Ordering::Release);
    }

    /// The HNSW neighbour heuristic: keep a candidate only if it is closer to the base
    /// than to every neighbour already kept. `sorted` is best first.
    fn select_neighbors(&self, sorted: &[Cand], max: usize) -> Vec<Cand> {
        if sorted.len() <= max {
            return sorted.to_vec();
        }
        let mut kept: Vec<Cand> = Vec::with_capacity(max);
        for c in sorted {
            if kept.len() >= max {
                break;
            }
            let cv = self.vector_f32(c.id);
            let good = kept.iter().all(|k| self.cost_to(&cv, k.id) >= c.cost);
            if good {
                kept.push(*c);
            }
        }
        kept
    }

    /// Marks labels deleted; returns how many were present.
    pub fn delete(&mut self, labels: &[u64]) -> usize {
        let mut removed = 0;
        for l in labels {
            if let Some(i) = self.label_map.remove(l) {
                self.mark_deleted(i);
                removed += 1;
            }
        }
        removed
    }

    /// Rebuilds the index from its live vectors, reclaiming deleted slots (and
    /// retraining the quantizer on the live data).
    /// An index whose originals are mapped writes them to a new file
    /// (`compacted_path`) and maps that; the old file stays for the caller to remove
    /// (a checkpoint may still name it).
    pub fn compact(&mut self, threads: usize) -> Result<()> {
        let (labels, vectors) = self.export_live();
        let mut fresh = Index::new(self.config.clone())?;
        if let Some(m) = &self.mapped {
            fresh.move_originals_to_file(&compacted_path(m.path()))?;
        }
        fresh.add(&labels, &vectors, threads)?;
        if let Some(g) = &self.graph_map {
            fresh.move_graph_to_file(&compacted_path(g.path()))?;
        }
        *self = fresh;
        Ok(())
    }

    /// Checks the graph's structural invariants (for tests and after load). A flat
    /// index must have no graph at all: every slot on level 0 with no links (its
    /// `max_links(0)` is 0) and no entry point.
    pub fn check_invariants(&self) -> Result<()> {
        if self.config.flat && (self.entry.load(Ordering::Acquire) != NONE || self.max_level.load(Ordering::Acquire) != 0) {
            return Err(Error::corrupt("flat index has an entry point or upper levels"));
        }
        for i in 0..self.n as u32 {
            let lv = self.levels[i as usize] as usize;
            if self.config.flat && lv != 0 {
                return Err(Error::corrupt(format!("slot {} of a flat index is on level {}", i, lv)));
            }
            for l in 0..=lv {
                let list = self.links(i, l);
                let cnt = list[0].load(Ordering::Acquire) as usize;
                if cnt > self.max_links(l) {
                    return Err(Error::corrupt(format!("slot {} level {} has {} links", i, l, cnt)));
                }
                for t in 0..cnt {
                    let nb = list[1 + t].load(Ordering::Relaxed);
                    if nb as usize >= self.n || nb == i {
                        return Err(Error::corrupt(format!("slot {} level {} links to {}", i, l, nb)));
                    }
                    if (self.levels[nb as usize] as usize) < l {
                        return Err(Error::corrupt(format!("slot {} level {} links to lower node {}", i, l, nb)));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The file `compact` writes a mapped index's originals to: beside `old`, named
/// `<stem>.c<k>.<ext>` with the first `k` whose file does not exist (a rerun after
/// `<stem>.c1` becomes `<stem>.c2`, not `<stem>.c1.c1`).
pub fn compacted_path(old: &std::path::Path) -> std::path::PathBuf {
    let dir = old.parent().map(|p| p.to_path_buf()).unwrap_or_default();
    let name = old.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (name[..i].to_string(), name[i..].to_string()),
        _ => (name.clone(), String::new()),
    };
    // Strip a previous compaction's `.c<k>`.
    let base = match stem.rfind(".c") {
        Some(i) if i > 0 && stem[i + 2..].chars().all(|c| c.is_ascii_digit()) && stem.len() > i + 2 => stem[..i].to_string(),
        _ => stem,
    };
    let mut k = 1u64;
    loop {
        let p = dir.join(format!("{}.c{}{}", base, k, ext));
        if !p.exists() {
            return p;
        }
        k += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hnsw::tests::{brute, gaussian, recall};

    #[test]
    fn parallel_and_incremental_builds_keep_recall() {
        let d = 24;
        let data = gaussian(4000, d, 3);
        let labels: Vec<u64> = (0..4000).collect();
        let mut idx = Index::new(IndexConfig::new(d, Distance::Euclid)).unwrap();
        idx.add(&labels[..2000], &data[..2000 * d], 4).unwrap();
        for c in 0..10 {
            let s = 2000 + c * 200;
            idx.add(&labels[s..s + 200], &data[s * d..(s + 200) * d], 2).unwrap();
        }
        idx.check_invariants().unwrap();
        assert_eq!(idx.len(), 4000);
        let r = recall(&idx, &gaussian(50, d, 4), 10, 64);
        assert!(r >= 0.95, "recall {}", r);
    }

    #[test]
    fn upsert_delete_and_compact() {
        let d = 8;
        let data = gaussian(500, d, 5);
        let labels: Vec<u64> = (0..500).collect();
        let mut idx = Index::new(IndexConfig::new(d, Distance::Euclid)).unwrap();
        idx.add(&labels, &data, 1).unwrap();
        // Replace label 7 with a far-away vector and find it there.
        let far = vec![100.0f32; d];
        idx.add(&[7], &far, 1).unwrap();
        assert_eq!(idx.len(), 500);
        assert_eq!(idx.stats().deleted, 1);
        let hit = idx.search(&far, &SearchParams::new(1), None).unwrap();
        assert_eq!(hit[0].0, 7);
        assert!(hit[0].1 < 1e-3);
        assert_eq!(idx.get_vector(7).unwrap(), far);
        // Delete half; none of them come back.
        let gone: Vec<u64> = (0..250).collect();
        assert_eq!(idx.delete(&gone), 250);
        assert_eq!(idx.delete(&gone), 0);
        for qi in 0..20 {
            let q = &data[(300 + qi) * d..(301 + qi) * d];
            for (l, _) in idx.search(q, &SearchParams::new(10), None).unwrap() {
                assert!(l >= 250, "deleted label {} returned", l);
            }
        }
        idx.compact(2).unwrap();
        assert_eq!(idx.stats().slots, 250);
        assert_eq!(idx.stats().deleted, 0);
        idx.check_invariants().unwrap();
        let q = &data[400 * d..401 * d];
        assert_eq!(idx.search(q, &SearchParams::new(1), None).unwrap()[0].0, 400);
    }

    #[test]
    fn duplicate_labels_in_one_batch_keep_the_last() {
        let mut idx = Index::new(IndexConfig::new(2, Distance::Euclid)).unwrap();
        idx.add(&[5, 5, 6], &[0.0, 0.0, 9.0, 9.0, 1.0, 1.0], 1).unwrap();
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.get_vector(5).unwrap(), vec![9.0, 9.0]);
    }

    /// Level-0 in-degree of every slot.
    fn in_degrees(idx: &Index) -> Vec<u32> {
        let mut indeg = vec![0u32; idx.n];
        for i in 0..idx.n as u32 {
            let list = idx.links(i, 0);
            let c = list[0].load(Ordering::Relaxed) as usize;
            for t in 0..c {
                indeg[list[1 + t].load(Ordering::Relaxed) as usize] += 1;
            }
        }
        indeg
    }

    #[test]
    fn parallel_build_leaves_no_node_without_a_way_in() {
        // Tight clusters inserted one after another: the case where a thread reaches a
        // node from above before that node has written its own lower-level links.
        let d = 16;
        let clusters = 40;
        let per = 400;
        let mut r = SplitMix64::new(21);
        let mut data = Vec::with_capacity(clusters * per * d);
        for _ in 0..clusters {
            let c: Vec<f32> = (0..d).map(|_| r.next_gaussian() * 10.0).collect();
            for _ in 0..per {
                for j in 0..d {
                    data.push(c[j] + r.next_gaussian() * 0.1);
                }
            }
        }
        let n = clusters * per;
        let labels: Vec<u64> = (0..n as u64).collect();
        let mut idx = Index::new(IndexConfig::new(d, Distance::Euclid)).unwrap();
        idx.add(&labels, &data, 4).unwrap();
        idx.check_invariants().unwrap();
        let entry = idx.entry.load(Ordering::Relaxed) as usize;
        let orphans = in_degrees(&idx).iter().enumerate().filter(|&(i, &deg)| i != entry && deg == 0).count();
        // Overwriting links other threads had added left 55-81 of these 16000 slots
        // without a way in. The neighbour heuristic can still prune a slot's last
        // in-link when inserts interleave (about one slot in one run of thirty here),
        // as it can in hnswlib; more than that is the bug.
        assert!(orphans <= 8, "{} slots have no incoming level-0 link", orphans);
    }

    #[test]
    fn an_add_costs_nothing_per_existing_slot() {
        // One-vector adds into a growing index: no per-slot locks or visited sets are
        // allocated per call, so 2000 of them stay fast (the old code did O(n) each).
        let d = 8;
        let data = gaussian(2000, d, 22);
        let mut idx = Index::new(IndexConfig::new(d, Distance::Dot)).unwrap();
        for i in 0..2000 {
            idx.add(&[i as u64], &data[i * d..(i + 1) * d], 1).unwrap();
        }
        assert_eq!(idx.len(), 2000);
        idx.check_invariants().unwrap();
    }

    #[test]
    fn a_tiny_first_batch_does_not_fix_the_quantization_range() {
        let d = 64;
        let n = 3000;
        let mut r = SplitMix64::new(24);
        let data: Vec<f32> = (0..n * d).map(|_| 5.0 + r.next_gaussian()).collect();
        let mut cfg = IndexConfig::new(d, Distance::Euclid);
        cfg.quantization = Quantization::Scalar { quantile: 0.99 };
        let mut idx = Index::new(cfg).unwrap();
        idx.add(&[u64::MAX], &vec![0.0; d], 1).unwrap();
        let labels: Vec<u64> = (0..n as u64).collect();
        idx.add(&labels, &data, 2).unwrap();
        let queries: Vec<f32> = (0..20 * d).map(|_| 5.0 + r.next_gaussian()).collect();
        let mut hit = 0;
        for qi in 0..20 {
            let q = &queries[qi * d..(qi + 1) * d];
            let truth = brute(&idx, q, 10);
            let mut p = SearchParams::new(10);
            p.oversampling = Some(2.0);
            hit += idx.search(q, &p, None).unwrap().iter().filter(|g| truth.contains(&g.0)).count();
        }
        assert!(hit as f64 / 200.0 >= 0.9, "recall {}", hit as f64 / 200.0);
    }

    #[test]
    fn flat_upsert_delete_and_compact() {
        let d = 8;
        let n = 500;
        let data = gaussian(n, d, 32);
        let labels: Vec<u64> = (0..n as u64).collect();
        let mut cfg = IndexConfig::new(d, Distance::Euclid);
        cfg.flat = true;
        let mut idx = Index::new(cfg).unwrap();
        idx.add(&labels, &data, 0).unwrap();
        let far = vec![50.0f32; d];
        idx.add(&[7, 7], &[vec![1.0; d], far.clone()].concat(), 1).unwrap();
        assert_eq!(idx.len(), n);
        assert_eq!(idx.stats().deleted, 1);
        assert_eq!(idx.get_vector(7).unwrap(), far);
        assert_eq!(idx.search(&far, &SearchParams::new(1), None).unwrap(), vec![(7, 0.0)]);
        let gone: Vec<u64> = (0..n as u64).filter(|l| l % 3 == 0).collect();
        assert_eq!(idx.delete(&gone), gone.len());
        assert_eq!(idx.delete(&gone), 0);
        assert_eq!(idx.get_vector(3), None);
        let live = idx.len();
        let q = gaussian(1, d, 33);
        let all = idx.search(&q, &SearchParams::new(n), None).unwrap();
        assert_eq!(all.len(), live);
        assert!(all.iter().all(|(l, _)| l % 3 != 0));
        // Deleted labels in an allow-set are ignored.
        let got = idx.search(&q, &SearchParams::new(5), Some(&[0, 1, 2, 3])).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|(l, _)| *l == 1 || *l == 2));
        idx.compact(1).unwrap();
        assert!(idx.config().flat);
        let s = idx.stats();
        assert_eq!((s.count, s.slots, s.deleted), (live, live, 0));
        idx.check_invariants().unwrap();
        assert_eq!(idx.search(&q, &SearchParams::new(n), None).unwrap(), all);
        assert_eq!(idx.get_vector(7).unwrap(), far);
    }
}
