//! The HNSW index: a layered proximity graph over vectors, with labels, deletes,
//! filtered search and optional quantization.
//!
//! Owns: the `Index` and the public types around it (config, search parameters,
//! stats); what an index holds (the label <-> slot mapping, the deleted bitset, the
//! vectors it scores: f32, or quantized codes with the f32 originals kept beside for
//! rescoring, in memory or in a mapped file) and the storage layout below, with the
//! accessors every submodule reads it through; and the read-only views of the
//! contents (`get_vector`, `export_live`, `stats`). The rest is split by job:
//! - `graph`: changing the graph: add (slots, codes, quantizer training, parallel
//!   linking), delete, compact, and the structural invariants;
//! - `search`: walking it (greedy descent and beam search, which insertion uses too)
//!   and answering queries (filters, the choice between graph search and exact scan,
//!   quantized traversal and rescoring);
//! - `persist`: the index file (`to_bytes`, `save`, `load`).
//!
//! Must never: know what a label means (the shard layer maps point ids onto labels),
//! or allocate per visited node (visited sets come from a pool; neighbour lists are
//! gathered into fixed-size arrays).
//!
//! Memory layout (after hnswlib): one flat arena for level 0 where each slot holds
//! `[link count | 2*m links | vector data]` (a flat index has no links: its slots are
//! `[0 | vector data]`), so scoring a neighbour touches the same cache lines as reading
//! its links. Upper levels live in a separate pool, only for the few nodes that reach
//! them. Links are atomics: during a parallel build, writers take the node's lock (one
//! of `LOCK_STRIPES` striped spin locks) and publish the count with Release; readers
//! never take those locks.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::Mutex;

use crate::datatype::{cost as typed_cost, CostKind, Datatype, Half};
use crate::distance::{kernels_for_dim, Distance};
use crate::error::{Error, Result};
use crate::mapped::MappedF32;
use crate::quant::{BinaryQuantizer, ScalarQuantizer};
use crate::rng::SplitMix64;
use crate::visited::VisitedPool;

mod graph;
mod persist;
mod rule;
mod search;

pub use graph::{compacted_path, default_threads};
use graph::{SpinLock, LOCK_STRIPES};
pub use persist::{side_file_of, SideOriginals, INDEX_FORMAT_VERSION, INDEX_MAGIC};
pub use rule::{fast_sigmoid, scaled_fast_sigmoid, Rule};

/// Default clipping quantile of scalar (int8) quantization: 1, the whole range of each
/// dimension's values, as the reference does when no quantile is given. On the three
/// sets of `bench:engine` a 0.99 clip lost recall that no rescoring depth fully won
/// back (at ef 256, oversampling 1: GloVe-50 0.918 against 0.973 with the whole range,
/// the clustered 128-d set 0.771 against 0.942).
pub const DEFAULT_SCALAR_QUANTILE: f32 = 1.0;

/// Candidates a quantized search rescores when the caller gives no `oversampling`:
/// `DEFAULT_RESCORE_FACTOR * k`, but never more than `ef`, so the default never widens
/// the beam (an explicit oversampling does, as in the reference). Rescoring only the
/// top k (the reference's oversampling 1) left int8 0.02-0.06 of recall@10 below f32 on
/// GloVe-50 and on the clustered 128-d set at ef 128-256; 2k closes it on all three sets
/// of `bench:engine` (docs/engine.md, "Quantization"). An explicit `oversampling` is
/// taken as given, 1 included.
pub const DEFAULT_RESCORE_FACTOR: usize = 2;

/// `(keep, ef)` of a quantized search: how many of the beam's best candidates are
/// rescored, and the beam width (`ef` is already at least `k`; `n` caps both).
pub(crate) fn rescore_depth(k: usize, ef: usize, oversampling: Option<f32>, n: usize) -> (usize, usize) {
    let n = n.max(1);
    match oversampling {
        Some(over) => {
            let keep = ((k as f32 * over).ceil() as usize).max(k).min(n);
            (keep, ef.max(keep))
        }
        None => ((k.saturating_mul(DEFAULT_RESCORE_FACTOR)).min(ef).max(k).min(n), ef),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Quantization {
    None,
    Scalar { quantile: f32 },
    Binary,
}

impl Quantization {
    pub fn name(&self) -> &'static str {
        match self {
            Quantization::None => "none",
            Quantization::Scalar { .. } => "scalar",
            Quantization::Binary => "binary",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct IndexConfig {
    pub dim: usize,
    pub distance: Distance,
    /// Links per node on upper levels; level 0 keeps twice as many.
    pub m: usize,
    pub ef_construct: usize,
    /// Filtered searches whose allowed vectors total fewer KiB than this scan exactly.
    pub full_scan_threshold_kb: usize,
    pub quantization: Quantization,
    pub seed: u64,
    /// Store vectors without linking them: `add` only copies, and every search is an
    /// exact scan. For small segments that take writes and are searched by scan until
    /// their points move into a linked index; `m` and `ef_construct` are kept but
    /// unused.
    pub flat: bool,
    /// Element type of the stored vectors (see `datatype`). With quantization, the
    /// originals kept for rescoring hold the converted values as f32.
    pub datatype: Datatype,
}

impl IndexConfig {
    pub fn new(dim: usize, distance: Distance) -> IndexConfig {
        IndexConfig {
            dim,
            distance,
            m: 16,
            ef_construct: 100,
            full_scan_threshold_kb: 10_000,
            quantization: Quantization::None,
            seed: 42,
            flat: false,
            datatype: Datatype::Float32,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.dim == 0 || self.dim > 65_536 {
            return Err(Error::invalid(format!("dimension must be in 1..=65536, got {}", self.dim)));
        }
        if self.m < 2 || self.m > 256 {
            return Err(Error::invalid(format!("m must be in 2..=256, got {}", self.m)));
        }
        if self.ef_construct < 4 || self.ef_construct > 100_000 {
            return Err(Error::invalid(format!("ef_construct must be in 4..=100000, got {}", self.ef_construct)));
        }
        if let Quantization::Scalar { quantile } = self.quantization {
            if !(quantile > 0.5 && quantile <= 1.0) {
                return Err(Error::invalid(format!("scalar quantile must be in (0.5, 1], got {}", quantile)));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SearchParams {
    pub k: usize,
    /// Candidate list size; defaults to ef_construct, never below k.
    pub ef: Option<usize>,
    /// Exact scan over original vectors, ignoring the graph and quantization.
    pub exact: bool,
    /// Quantized search keeps `k * oversampling` candidates for rescoring (and widens
    /// `ef` to that many). `None`: `min(DEFAULT_RESCORE_FACTOR * k, ef)` candidates.
    pub oversampling: Option<f32>,
    pub rescore: bool,
    pub ignore_quantization: bool,
}

impl SearchParams {
    pub fn new(k: usize) -> SearchParams {
        SearchParams { k, ef: None, exact: false, oversampling: None, rescore: true, ignore_quantization: false }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct IndexStats {
    pub dim: usize,
    pub distance: Distance,
    pub count: usize,
    pub slots: usize,
    pub deleted: usize,
    /// Bytes of the vectors the graph search scores (f32, or quantized codes).
    pub vector_bytes: usize,
    /// Bytes of f32 originals kept in memory for rescoring (quantized indexes only;
    /// 0 once they are moved to a mapped file).
    pub original_bytes: usize,
    /// Bytes of f32 originals the index reads from its mapped file (0 in memory).
    pub original_file_bytes: usize,
    pub graph_bytes: usize,
    pub total_bytes: usize,
    pub quantization: &'static str,
    pub flat: bool,
    pub datatype: &'static str,
}

/// Multiplicative hasher for u64 labels (SipHash costs more than the lookup).
#[derive(Default, Clone, Copy)]
pub struct LabelHasher(u64);

impl Hasher for LabelHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ *b as u64).wrapping_mul(0x100_0000_01b3).rotate_left(5);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        let x = (v ^ (v >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        self.0 = x ^ (x >> 29);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub type LabelMap = HashMap<u64, u32, BuildHasherDefault<LabelHasher>>;

#[derive(Clone, Copy, Debug)]
struct Cand {
    cost: f32,
    id: u32,
}
impl PartialEq for Cand {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Cand {}
impl PartialOrd for Cand {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Cand {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.cost.total_cmp(&o.cost).then(self.id.cmp(&o.id))
    }
}

/// What the graph scores: f32 vectors in the arena, or quantized codes.
pub(crate) enum Codes {
    F32,
    Scalar(ScalarQuantizer),
    Binary(BinaryQuantizer),
}

const NONE: u32 = u32::MAX;

pub struct Index {
    pub(crate) config: IndexConfig,
    pub(crate) m0: usize,
    /// u32 words per level-0 slot: count + m0 links + data words.
    pub(crate) stride: usize,
    pub(crate) data_words: usize,
    pub(crate) arena: Vec<AtomicU32>,
    pub(crate) cap: usize,
    pub(crate) n: usize,
    pub(crate) levels: Vec<u8>,
    /// Offset of each node's upper links in `upper`, or NONE for level-0 nodes.
    pub(crate) upper_off: Vec<u32>,
    pub(crate) upper: Vec<AtomicU32>,
    pub(crate) labels: Vec<u64>,
    pub(crate) label_map: LabelMap,
    pub(crate) deleted: Vec<u64>,
    pub(crate) deleted_count: usize,
    pub(crate) entry: AtomicU32,
    pub(crate) max_level: AtomicUsize,
    entry_lock: Mutex<()>,
    /// Striped node locks for the parallel build (node i uses stripe i % LOCK_STRIPES). A
    /// thread never holds two, so striping cannot deadlock, and an add costs nothing
    /// per existing node.
    build_locks: Vec<SpinLock>,
    pub(crate) codes: Codes,
    /// f32 originals when the arena holds codes (for build and rescoring).
    pub(crate) originals: Vec<f32>,
    /// The originals moved to a memory-mapped file (then `originals` is empty).
    pub(crate) mapped: Option<MappedF32>,
    pub(crate) rng: SplitMix64,
    cost_fn: fn(&[f32], &[f32]) -> f32,
    /// The arena holds float16 or uint8 elements (not quantized, not float32): costs
    /// go through `typed_cost` with this arithmetic.
    pub(crate) typed: Option<CostKind>,
    visited: VisitedPool,
}

#[inline(always)]
fn prefetch(p: *const AtomicU32) {
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

fn zeroed_atomics(n: usize) -> Vec<AtomicU32> {
    // AtomicU32 has the layout of u32, so a zeroed u32 vector (calloc) is a valid one.
    let v = std::mem::ManuallyDrop::new(vec![0u32; n]);
    unsafe { Vec::from_raw_parts(v.as_ptr() as *mut AtomicU32, v.len(), v.capacity()) }
}

impl Index {
    pub fn new(config: IndexConfig) -> Result<Index> {
        config.validate()?;
        // A flat index has no level-0 links: its slots are `[count (always 0) | vector]`,
        // so the layout, and every accessor over it, stays the same as a linked one's.
        let m0 = if config.flat { 0 } else { config.m * 2 };
        // The stored type until a quantizer is trained.
        let data_words = (config.dim * config.datatype.bytes() + 3) / 4;
        let k = kernels_for_dim(config.dim);
        Ok(Index {
            cost_fn: config.distance.cost_fn(k),
            typed: if config.datatype == Datatype::Float32 { None } else { Some(CostKind::of(config.distance, config.datatype)) },
            m0,
            stride: 1 + m0 + data_words,
            data_words,
            arena: Vec::new(),
            cap: 0,
            n: 0,
            levels: Vec::new(),
            upper_off: Vec::new(),
            upper: Vec::new(),
            labels: Vec::new(),
            label_map: LabelMap::default(),
            deleted: Vec::new(),
            deleted_count: 0,
            entry: AtomicU32::new(NONE),
            max_level: AtomicUsize::new(0),
            entry_lock: Mutex::new(()),
            build_locks: (0..LOCK_STRIPES).map(|_| SpinLock::new()).collect(),
            codes: Codes::F32,
            originals: Vec::new(),
            mapped: None,
            rng: SplitMix64::new(config.seed),
            visited: VisitedPool::new(),
            config,
        })
    }

    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    pub fn dim(&self) -> usize {
        self.config.dim
    }

    /// Live (not deleted) vectors.
    pub fn len(&self) -> usize {
        self.n - self.deleted_count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, label: u64) -> bool {
        self.label_map.contains_key(&label)
    }

    fn quantized(&self) -> bool {
        !matches!(self.codes, Codes::F32)
    }

    #[inline(always)]
    fn slot(&self, i: u32) -> *const AtomicU32 {
        unsafe { self.arena.as_ptr().add(i as usize * self.stride) }
    }

    /// Whether the arena holds float16 or uint8 elements (then `raw` is not for it).
    #[inline(always)]
    fn stores_typed(&self) -> bool {
        self.typed.is_some() && !self.quantized()
    }

    /// Cost between the (prepared) f32 query `q` and slot `i`'s stored vector.
    #[inline(always)]
    pub(crate) fn cost_to(&self, q: &[f32], i: u32) -> f32 {
        match self.typed {
            Some(kind) if !self.quantized() => {
                let p = unsafe { self.slot(i).add(1 + self.m0) } as *const u8;
                let d = self.config.dim;
                match self.config.datatype {
                    Datatype::Uint8 => typed_cost(kind, q, unsafe { std::slice::from_raw_parts(p, d) }),
                    _ => typed_cost(kind, q, unsafe { std::slice::from_raw_parts(p as *const Half, d) }),
                }
            }
            Some(kind) => typed_cost(kind, q, self.raw(i)),
            None => (self.cost_fn)(q, self.raw(i)),
        }
    }

    /// What `cost_to` computes for a quantized index's slot whose original is `v`.
    #[inline(always)]
    pub(crate) fn cost_to_original(&self, q: &[f32], v: &[f32]) -> f32 {
        match self.typed {
            Some(kind) => typed_cost(kind, q, v),
            None => (self.cost_fn)(q, v),
        }
    }

    /// Slot `i`'s vector as f32 (borrowed when the arena or the originals hold f32).
    pub(crate) fn vector_f32(&self, i: u32) -> std::borrow::Cow<'_, [f32]> {
        if !self.stores_typed() {
            return std::borrow::Cow::Borrowed(self.raw(i));
        }
        let p = unsafe { self.slot(i).add(1 + self.m0) } as *const u8;
        let d = self.config.dim;
        std::borrow::Cow::Owned(match self.config.datatype {
            Datatype::Uint8 => unsafe { std::slice::from_raw_parts(p, d) }.iter().map(|&x| x as f32).collect(),
            _ => unsafe { std::slice::from_raw_parts(p as *const u16, d) }.iter().map(|&h| crate::datatype::f16_to_f32(h)).collect(),
        })
    }

    /// The f32 vector of slot `i` (preprocessed: normalised for Cosine). Not for an
    /// arena of float16 or uint8 elements (`vector_f32` reads those).
    #[inline(always)]
    pub(crate) fn raw(&self, i: u32) -> &[f32] {
        debug_assert!(!self.stores_typed());
        let d = self.config.dim;
        if self.quantized() {
            &self.originals_slice()[i as usize * d..(i as usize + 1) * d]
        } else {
            unsafe { std::slice::from_raw_parts(self.slot(i).add(1 + self.m0) as *const f32, d) }
        }
    }

    #[inline(always)]
    pub(crate) fn code(&self, i: u32) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.slot(i).add(1 + self.m0) as *const u8, self.data_words * 4) }
    }

    /// Prefetches the first cache lines of what scoring slot `i` reads.
    #[inline(always)]
    fn prefetch_data(&self, i: u32) {
        let p = unsafe { self.slot(i).add(1 + self.m0) };
        prefetch(p);
        prefetch((p as *const u8).wrapping_add(64) as *const AtomicU32);
    }

    /// Prefetches the f32 vector of slot `i` (what construction scores).
    #[inline(always)]
    fn prefetch_raw(&self, i: u32) {
        let p: *const u8 = if self.quantized() {
            unsafe { self.originals_slice().as_ptr().add(i as usize * self.config.dim) as *const u8 }
        } else {
            unsafe { self.slot(i).add(1 + self.m0) as *const u8 }
        };
        prefetch(p as *const AtomicU32);
        prefetch(p.wrapping_add(64) as *const AtomicU32);
    }

    #[inline(always)]
    fn is_deleted(&self, i: u32) -> bool {
        self.deleted[(i >> 6) as usize] & (1u64 << (i & 63)) != 0
    }

    /// Link list of `i` at `level`: the count word followed by the link words.
    #[inline(always)]
    fn links(&self, i: u32, level: usize) -> &[AtomicU32] {
        if level == 0 {
            unsafe { std::slice::from_raw_parts(self.slot(i), 1 + self.m0) }
        } else {
            let w = 1 + self.config.m;
            let off = self.upper_off[i as usize] as usize + (level - 1) * w;
            &self.upper[off..off + w]
        }
    }

    fn max_links(&self, level: usize) -> usize {
        if level == 0 {
            self.m0
        } else {
            self.config.m
        }
    }

    #[inline(always)]
    fn originals_slice(&self) -> &[f32] {
        match &self.mapped {
            Some(m) => m.as_slice(),
            None => &self.originals,
        }
    }

    /// Moves the f32 originals of a quantized index to `path` (written atomically, then
    /// memory-mapped read-only), so only the codes and the graph stay in memory and the
    /// page cache holds what rescoring and linking read. An index configured for
    /// quantization may do this while still empty: its originals then never sit in
    /// memory. From then on `add` appends its vectors to the file and maps the longer
    /// file (nothing is copied back into memory), `compact` writes a new file beside
    /// it (`compacted_path`), and `save` names the file instead of holding the vectors
    /// (see `persist`). A file the index stops using (after `compact`, or
    /// `move_originals_to_memory`) is left for the caller to remove.
    pub fn move_originals_to_file(&mut self, path: &std::path::Path) -> Result<()> {
        if self.config.quantization == Quantization::None || self.config.flat {
            return Err(Error::invalid(
                "only a quantized graph index keeps its f32 vectors apart from the graph; this one scores them in place",
            ));
        }
        if path.file_name().is_none() {
            return Err(Error::invalid(format!("{}: not a file path", path.display())));
        }
        let m = MappedF32::create(path, &self.originals_slice()[..self.n * self.config.dim])?;
        self.mapped = Some(m);
        self.originals = Vec::new();
        Ok(())
    }

    /// Whether the originals live in a mapped file.
    pub fn originals_on_disk(&self) -> bool {
        self.mapped.is_some()
    }

    /// The file the originals are mapped from, if they are.
    pub fn originals_path(&self) -> Option<&std::path::Path> {
        self.mapped.as_ref().map(|m| m.path())
    }

    /// Copies the originals from their mapped file back into memory (the file stays
    /// on disk for the caller to remove). Nothing to do when they are in memory.
    pub fn move_originals_to_memory(&mut self) {
        if let Some(m) = self.mapped.take() {
            self.originals = m.as_slice()[..self.n * self.config.dim].to_vec();
        }
    }

    /// The stored vector of `label` (normalised for Cosine).
    pub fn get_vector(&self, label: u64) -> Option<Vec<f32>> {
        self.label_map.get(&label).map(|&i| self.vector_f32(i).into_owned())
    }

    /// Slots that are not deleted, in slot order.
    fn live_slots(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.n as u32).filter(move |&i| !self.is_deleted(i))
    }

    /// Labels of all live vectors, in slot order.
    pub fn live_labels(&self) -> Vec<u64> {
        self.live_slots().map(|i| self.labels[i as usize]).collect()
    }

    /// Every live label and its stored vector (as `get_vector` returns it: normalised
    /// for Cosine, the f32 original for quantized indexes), in slot order, the vectors
    /// in one array of `labels.len() * dim` values. Adding them to a fresh index with
    /// the same config rebuilds this one's contents.
    pub fn export_live(&self) -> (Vec<u64>, Vec<f32>) {
        let (labels, vectors, _) = self.export_page(0, usize::MAX);
        (labels, vectors)
    }

    /// One page of `export_live`: up to `max_count` live labels and their stored
    /// vectors from slot `from` on, in slot order, and the slot the next page starts at
    /// (the slot count, `stats().slots`, once every slot is read: the page is then
    /// shorter than `max_count`, possibly empty). Deleted slots are skipped without counting. Pages read one
    /// after another while the index only sees deletes (slots never move or get reused
    /// before a `compact`) return each label live throughout exactly once.
    /// Refuses `max_count == 0` (no progress) and `from` past the slot count.
    pub fn export_live_from(&self, from: usize, max_count: usize) -> Result<(Vec<u64>, Vec<f32>, usize)> {
        if max_count == 0 {
            return Err(Error::invalid("max_count must be at least 1"));
        }
        if from > self.n {
            return Err(Error::invalid(format!("from slot {} is past the index's {} slots", from, self.n)));
        }
        Ok(self.export_page(from, max_count))
    }

    fn export_page(&self, from: usize, max_count: usize) -> (Vec<u64>, Vec<f32>, usize) {
        let d = self.config.dim;
        let room = max_count.min(self.len());
        let mut labels = Vec::with_capacity(room);
        let mut vectors = Vec::with_capacity(room * d);
        let mut at = from;
        while at < self.n && labels.len() < max_count {
            let i = at as u32;
            at += 1;
            if self.is_deleted(i) {
                continue;
            }
            labels.push(self.labels[i as usize]);
            vectors.extend_from_slice(&self.vector_f32(i));
        }
        (labels, vectors, at)
    }

    pub fn stats(&self) -> IndexStats {
        let slot_vec = self.data_words * 4;
        let vector_bytes = self.n * slot_vec;
        let original_bytes = self.originals.len() * 4;
        let original_file_bytes = self.mapped.as_ref().map_or(0, |m| m.file_bytes());
        let graph_bytes = self.n * (1 + self.m0) * 4 + self.upper.len() * 4 + self.upper_off.len() * 4 + self.levels.len();
        let map_bytes = self.label_map.capacity() * 16 + self.labels.len() * 8 + self.deleted.len() * 8;
        IndexStats {
            dim: self.config.dim,
            distance: self.config.distance,
            count: self.len(),
            slots: self.n,
            deleted: self.deleted_count,
            vector_bytes,
            original_bytes,
            original_file_bytes,
            graph_bytes,
            total_bytes: vector_bytes + original_bytes + graph_bytes + map_bytes,
            quantization: self.config.quantization.name(),
            flat: self.config.flat,
            datatype: self.config.datatype.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    pub(super) fn gaussian(n: usize, d: usize, seed: u64) -> Vec<f32> {
        let mut r = SplitMix64::new(seed);
        (0..n * d).map(|_| r.next_gaussian()).collect()
    }

    pub(super) fn exact(k: usize) -> SearchParams {
        let mut p = SearchParams::new(k);
        p.exact = true;
        p
    }

    pub(super) fn brute(index: &Index, q: &[f32], k: usize) -> Vec<u64> {
        index.search(q, &exact(k), None).unwrap().into_iter().map(|x| x.0).collect()
    }

    pub(super) fn recall(index: &Index, queries: &[f32], k: usize, ef: usize) -> f64 {
        let d = index.dim();
        let nq = queries.len() / d;
        let mut hit = 0usize;
        for qi in 0..nq {
            let q = &queries[qi * d..(qi + 1) * d];
            let truth = brute(index, q, k);
            let mut p = SearchParams::new(k);
            p.ef = Some(ef);
            let got: Vec<u64> = index.search(q, &p, None).unwrap().into_iter().map(|x| x.0).collect();
            hit += got.iter().filter(|g| truth.contains(g)).count();
        }
        hit as f64 / (nq * k) as f64
    }

    #[test]
    fn bad_input_is_rejected_and_changes_nothing() {
        let mut idx = Index::new(IndexConfig::new(4, Distance::Dot)).unwrap();
        idx.add(&[1, 2], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], 1).unwrap();
        let e = idx.add(&[3], &[1.0, 2.0, 3.0], 1).unwrap_err();
        assert_eq!(e.code(), "QUIVER_DIMENSION_MISMATCH");
        let e = idx.add(&[3], &[1.0, f32::NAN, 3.0, 4.0], 1).unwrap_err();
        assert_eq!(e.code(), "QUIVER_INVALID_ARGUMENT");
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.search(&[1.0; 3], &SearchParams::new(1), None).unwrap_err().code(), "QUIVER_DIMENSION_MISMATCH");
        assert_eq!(idx.search(&[1.0; 4], &SearchParams::new(0), None).unwrap_err().code(), "QUIVER_INVALID_ARGUMENT");
        assert!(Index::new(IndexConfig::new(0, Distance::Dot)).is_err());
        let empty = Index::new(IndexConfig::new(4, Distance::Dot)).unwrap();
        assert!(empty.search(&[1.0; 4], &SearchParams::new(3), None).unwrap().is_empty());
    }

    #[test]
    fn originals_move_to_a_mapped_file_and_adds_append_to_it() {
        let d = 32;
        let n = 2000;
        let data = gaussian(n, d, 12);
        let labels: Vec<u64> = (0..n as u64).collect();
        let tmp = crate::testutil::TempDir::new("hnsw-map");
        let dir = tmp.path();
        let mut cfg = IndexConfig::new(d, Distance::Euclid);
        cfg.quantization = Quantization::Scalar { quantile: DEFAULT_SCALAR_QUANTILE };
        let mut idx = Index::new(cfg.clone()).unwrap();
        idx.add(&labels, &data, 2).unwrap();
        let q = gaussian(1, d, 13);
        let mut p = SearchParams::new(10);
        p.oversampling = Some(2.0);
        let before = idx.search(&q, &p, None).unwrap();
        let ram = idx.stats().original_bytes;
        assert_eq!(ram, n * d * 4);
        let file = dir.join("originals.f32");
        idx.move_originals_to_file(&file).unwrap();
        assert!(idx.originals_on_disk());
        assert_eq!(idx.stats().original_bytes, 0);
        assert_eq!(idx.stats().original_file_bytes, n * d * 4);
        assert_eq!(idx.search(&q, &p, None).unwrap(), before);
        assert_eq!(idx.get_vector(5).unwrap(), data[5 * d..6 * d].to_vec());
        // An add appends to the file: nothing comes back into memory.
        idx.add(&[n as u64], &vec![0.25; d], 1).unwrap();
        assert!(idx.originals_on_disk());
        assert_eq!(idx.stats().original_bytes, 0);
        assert_eq!(std::fs::metadata(&file).unwrap().len() as usize, (n + 1) * d * 4);
        assert_eq!(idx.get_vector(n as u64).unwrap(), vec![0.25; d]);
        assert_eq!(idx.get_vector(7).unwrap(), data[7 * d..8 * d].to_vec());
        // Back to memory: the same answers.
        let on_disk = idx.search(&q, &p, None).unwrap();
        idx.move_originals_to_memory();
        assert!(!idx.originals_on_disk());
        assert_eq!(idx.stats().original_bytes, (n + 1) * d * 4);
        assert_eq!(idx.search(&q, &p, None).unwrap(), on_disk);
        let mut plain = Index::new(IndexConfig::new(d, Distance::Euclid)).unwrap();
        plain.add(&labels[..10], &data[..10 * d], 1).unwrap();
        assert_eq!(plain.move_originals_to_file(&dir.join("x")).err().unwrap().code(), "QUIVER_INVALID_ARGUMENT");
    }

    /// An index mapped from the start (empty), built by many appends, equals one built
    /// in memory with the same seed: the same graph, codes and answers, for int8 and
    /// binary; deletes and compaction (a new file) keep it equal to the in-memory one.
    #[test]
    fn an_index_mapped_from_the_start_builds_what_memory_builds() {
        let d = 24;
        let n = 3000;
        let data = gaussian(n, d, 50);
        let labels: Vec<u64> = (0..n as u64).map(|x| x * 7).collect();
        let queries = gaussian(20, d, 51);
        let tmp = crate::testutil::TempDir::new("hnsw-map-build");
        for quant in [Quantization::Scalar { quantile: DEFAULT_SCALAR_QUANTILE }, Quantization::Binary] {
            let mut cfg = IndexConfig::new(d, Distance::Cosine);
            cfg.quantization = quant;
            let mut mem = Index::new(cfg.clone()).unwrap();
            let mut map = Index::new(cfg.clone()).unwrap();
            let file = tmp.path().join(format!("{}.f32", quant.name()));
            map.move_originals_to_file(&file).unwrap();
            for c in 0..(n / 500) {
                let (s, e) = (c * 500, (c + 1) * 500);
                mem.add(&labels[s..e], &data[s * d..e * d], 1).unwrap();
                map.add(&labels[s..e], &data[s * d..e * d], 1).unwrap();
            }
            assert_eq!(map.stats().original_bytes, 0);
            assert_eq!(map.stats().original_file_bytes, n * d * 4);
            let same = |a: &Index, b: &Index, what: &str| {
                for qi in 0..20 {
                    let q = &queries[qi * d..(qi + 1) * d];
                    let mut p = SearchParams::new(10);
                    p.ef = Some(64);
                    assert_eq!(a.search(q, &p, None).unwrap(), b.search(q, &p, None).unwrap(), "{} {:?}", what, quant);
                }
            };
            same(&mem, &map, "build");
            let gone: Vec<u64> = labels.iter().cloned().filter(|l| l % 3 == 0).collect();
            mem.delete(&gone);
            map.delete(&gone);
            mem.compact(1).unwrap();
            map.compact(1).unwrap();
            let moved = map.originals_path().unwrap().to_path_buf();
            assert_ne!(moved, file);
            assert!(moved.file_name().unwrap().to_string_lossy().contains(".c1."), "{}", moved.display());
            assert_eq!(std::fs::metadata(&moved).unwrap().len() as usize, map.len() * d * 4);
            assert_eq!(map.stats().original_bytes, 0);
            same(&mem, &map, "compact");
            // The next compaction takes the next name, not `.c1.c1`.
            map.compact(1).unwrap();
            assert!(map.originals_path().unwrap().to_string_lossy().ends_with(&format!("{}.c2.f32", quant.name())));
        }
    }
    #[test]
    fn export_live_from_pages_concatenate_to_export_live_and_refuse_bad_arguments() {
        let d = 6;
        let n = 700;
        let labels: Vec<u64> = (0..n as u64).map(|x| x * 3 + 1).collect();
        for (flat, quant) in [(true, Quantization::None), (false, Quantization::Scalar { quantile: 0.99 })] {
            let mut cfg = IndexConfig::new(d, Distance::Euclid);
            cfg.flat = flat;
            cfg.quantization = quant;
            let mut idx = Index::new(cfg).unwrap();
            // An empty index: one empty page that ends at slot 0.
            assert_eq!(idx.export_live_from(0, 5).unwrap(), (vec![], vec![], 0));
            idx.add(&labels, &gaussian(n, d, 51), 2).unwrap();
            // A run of deleted slots longer than a page, and scattered ones.
            let gone: Vec<u64> = labels.iter().cloned().enumerate().filter(|(i, _)| (100..180).contains(i) || i % 7 == 0).map(|(_, l)| l).collect();
            idx.delete(&gone);
            idx.add(&[4, 9_999], &gaussian(2, d, 52), 1).unwrap();
            let whole = idx.export_live();
            let slots = idx.stats().slots;
            for page in [1usize, 13, 64, 10_000] {
                let (mut ls, mut vs, mut from, mut calls) = (Vec::new(), Vec::new(), 0usize, 0);
                loop {
                    let (l, v, next) = idx.export_live_from(from, page).unwrap();
                    calls += 1;
                    assert!(l.len() <= page);
                    assert_eq!(v.len(), l.len() * d);
                    assert!(next > from || (next == slots && l.is_empty()));
                    assert!(l.iter().all(|x| !gone.contains(x) || *x == 4));
                    ls.extend(l.iter().cloned());
                    vs.extend(v);
                    from = next;
                    if l.len() < page {
                        assert_eq!(next, slots, "a short page is the last");
                        break;
                    }
                }
                assert_eq!((ls, vs), whole.clone(), "page {}", page);
                assert!(calls <= whole.0.len() / page + 2);
            }
            // Deletes between pages: a label deleted before its page is read is skipped,
            // the others come once each.
            let (first, _, next) = idx.export_live_from(0, 50).unwrap();
            let later: Vec<u64> = whole.0[60..70].to_vec();
            idx.delete(&later);
            let (rest, _, end) = idx.export_live_from(next, usize::MAX).unwrap();
            assert_eq!(end, slots);
            let mut all = first.clone();
            all.extend(rest);
            let expect: Vec<u64> = whole.0.iter().cloned().filter(|l| !later.contains(l)).collect();
            assert_eq!(all, expect);
            for (from, max) in [(0, 0), (slots + 1, 10)] {
                let e = idx.export_live_from(from, max).unwrap_err();
                assert_eq!(e.code(), "QUIVER_INVALID_ARGUMENT", "from {} max {}", from, max);
            }
            assert_eq!(idx.export_live_from(slots, 3).unwrap(), (vec![], vec![], slots));
        }
    }

    #[test]
    fn export_live_returns_what_get_vector_returns_and_rebuilds_the_index() {
        let d = 10;
        let n = 1200;
        let data = gaussian(n, d, 39);
        let labels: Vec<u64> = (0..n as u64).map(|x| x * 11).collect();
        let queries = gaussian(20, d, 40);
        for (flat, quant) in [
            (false, Quantization::None),
            (true, Quantization::None),
            (false, Quantization::Scalar { quantile: 0.99 }),
            (false, Quantization::Binary),
        ] {
            let mut cfg = IndexConfig::new(d, Distance::Cosine);
            cfg.flat = flat;
            cfg.quantization = quant;
            let mut idx = Index::new(cfg.clone()).unwrap();
            assert_eq!(idx.export_live(), (vec![], vec![]));
            idx.add(&labels, &data, 2).unwrap();
            let gone: Vec<u64> = labels.iter().cloned().filter(|l| l % 4 == 0).collect();
            idx.delete(&gone);
            idx.add(&[11, 1_000_000], &gaussian(2, d, 41), 1).unwrap();
            let (got_labels, vectors) = idx.export_live();
            assert_eq!(got_labels, idx.live_labels());
            assert_eq!(got_labels.len(), idx.len());
            assert_eq!(vectors.len(), got_labels.len() * d);
            // Upserted labels come last: their new slots are the newest.
            assert_eq!(&got_labels[got_labels.len() - 2..], &[11, 1_000_000]);
            for (j, l) in got_labels.iter().enumerate() {
                assert_eq!(idx.get_vector(*l).unwrap(), &vectors[j * d..(j + 1) * d], "{:?} label {}", quant, l);
            }
            let mut fresh = Index::new(cfg).unwrap();
            fresh.add(&got_labels, &vectors, 2).unwrap();
            for qi in 0..20 {
                let q = &queries[qi * d..(qi + 1) * d];
                let a = idx.search(q, &exact(10), None).unwrap();
                let b = fresh.search(q, &exact(10), None).unwrap();
                // Normalising an already normalised vector may move its last bit.
                assert_eq!(a.iter().map(|x| x.0).collect::<Vec<_>>(), b.iter().map(|x| x.0).collect::<Vec<_>>());
                for (x, y) in a.iter().zip(&b) {
                    assert!((x.1 - y.1).abs() <= 1e-6, "{} vs {}", x.1, y.1);
                }
            }
        }
    }

    /// Brute force over the converted vectors, in the test's own arithmetic (f64).
    fn typed_truth(dt: Datatype, dist: Distance, data: &[f32], d: usize, q: &[f32], k: usize) -> Vec<(u64, f64)> {
        let conv = |v: &[f32], normalise: bool| -> Vec<f64> {
            let mut v: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
            if normalise && dist == Distance::Cosine && dt != Datatype::Uint8 {
                let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                if n > 0.0 {
                    v.iter_mut().for_each(|x| *x /= n);
                }
            }
            match dt {
                Datatype::Uint8 => v.iter().map(|&x| if x <= 0.0 { 0.0 } else if x >= 255.0 { 255.0 } else { x.trunc() }).collect(),
                _ => v,
            }
        };
        let qv = conv(q, true);
        let mut all: Vec<(u64, f64)> = (0..data.len() / d)
            .map(|i| {
                let x = conv(&data[i * d..(i + 1) * d], true);
                let dot: f64 = qv.iter().zip(&x).map(|(a, b)| a * b).sum();
                let s = match dist {
                    Distance::Dot => dot,
                    Distance::Cosine => {
                        let (na, nb) = (qv.iter().map(|a| a * a).sum::<f64>().sqrt(), x.iter().map(|a| a * a).sum::<f64>().sqrt());
                        if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na * nb) }
                    }
                    Distance::Euclid => qv.iter().zip(&x).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt(),
                    Distance::Manhattan => qv.iter().zip(&x).map(|(a, b)| (a - b).abs()).sum(),
                };
                (i as u64, s)
            })
            .collect();
        if dist.higher_is_better() {
            all.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        } else {
            all.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap());
        }
        all.truncate(k);
        all
    }

    #[test]
    fn typed_vectors_are_stored_small_and_scored_as_converted() {
        let d = 24;
        let n = 600;
        let mut r = SplitMix64::new(77);
        // uint8 data with values out of range and fractions; float16 data in a normal range.
        let u8_data: Vec<f32> = (0..n * d).map(|_| (r.next_f64_open0() * 300.0 - 20.0) as f32).collect();
        let f16_data = gaussian(n, d, 78);
        let labels: Vec<u64> = (0..n as u64).collect();
        for dt in [Datatype::Uint8, Datatype::Float16] {
            let data = if dt == Datatype::Uint8 { &u8_data } else { &f16_data };
            for dist in [Distance::Cosine, Distance::Dot, Distance::Euclid, Distance::Manhattan] {
                for flat in [true, false] {
                    let mut cfg = IndexConfig::new(d, dist);
                    cfg.datatype = dt;
                    cfg.flat = flat;
                    let mut idx = Index::new(cfg).unwrap();
                    idx.add(&labels, data, 2).unwrap();
                    assert_eq!(idx.stats().vector_bytes, n * ((d * dt.bytes() + 3) / 4) * 4);
                    assert_eq!(idx.stats().datatype, dt.name());
                    let back = Index::from_bytes(&idx.to_bytes()).unwrap();
                    for qi in 0..5 {
                        let q: Vec<f32> = if dt == Datatype::Uint8 { u8_data[qi * 7 * d..(qi * 7 + 1) * d].to_vec() } else { gaussian(1, d, 100 + qi as u64) };
                        let truth = typed_truth(dt, dist, data, d, &q, 10);
                        let got = idx.search(&q, &exact(10), None).unwrap();
                        for (g, t) in got.iter().zip(&truth) {
                            assert!((f64::from(g.1) - t.1).abs() <= 1e-3 * t.1.abs().max(1.0), "{:?} {:?} {:?} vs {:?}", dt, dist, g, t);
                        }
                        assert_eq!(back.search(&q, &exact(10), None).unwrap(), got);
                        if !flat {
                            let mut p = SearchParams::new(10);
                            p.ef = Some(200);
                            let approx = idx.search(&q, &p, None).unwrap();
                            let hits = approx.iter().filter(|a| got.iter().any(|g| g.0 == a.0)).count();
                            assert!(hits >= 8, "{:?} {:?} recall {}", dt, dist, hits);
                        }
                    }
                    let v = idx.get_vector(3).unwrap();
                    if dt == Datatype::Uint8 {
                        let want: Vec<f32> = data[3 * d..4 * d].iter().map(|&x| crate::datatype::to_u8(x) as f32).collect();
                        assert_eq!(v, want);
                    }
                    // What export_live returns rebuilds the same contents.
                    let (ls, vs) = idx.export_live();
                    let mut cfg2 = IndexConfig::new(d, dist);
                    cfg2.datatype = dt;
                    let mut again = Index::new(cfg2).unwrap();
                    again.add(&ls, &vs, 1).unwrap();
                    assert_eq!(again.export_live(), (ls, vs));
                }
            }
        }
    }

    #[test]
    fn typed_vectors_with_quantization_and_out_of_range_float16() {
        let d = 16;
        let data = gaussian(300, d, 5);
        let labels: Vec<u64> = (0..300).collect();
        let mut cfg = IndexConfig::new(d, Distance::Dot);
        cfg.datatype = Datatype::Float16;
        cfg.quantization = Quantization::Scalar { quantile: 0.99 };
        let mut idx = Index::new(cfg.clone()).unwrap();
        idx.add(&labels, &data, 1).unwrap();
        let q = gaussian(1, d, 6);
        let truth = typed_truth(Datatype::Float16, Distance::Dot, &data, d, &q, 5);
        let got = idx.search(&q, &exact(5), None).unwrap();
        assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), truth.iter().map(|x| x.0).collect::<Vec<_>>());
        let mut big = vec![0.0f32; d];
        big[2] = 70000.0;
        assert_eq!(idx.add(&[999], &big, 1).unwrap_err().code(), "QUIVER_INVALID_ARGUMENT");
        assert_eq!(idx.len(), 300);
    }
}
