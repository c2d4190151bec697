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
//!
//! Graph on disk (`move_graph_to_file`, the reference's `hnsw_config.on_disk`): the
//! level-0 link lists (`[count | 2*m links]` per slot, nearly all of the graph) move
//! to a read-only mapped file, and the arena keeps only the vector data (`lofs`, the
//! link words in front of a slot's data, is then 0). The upper levels (about 1/m of
//! the nodes) and the per-node `levels` / `upper_off` stay in memory. A walk reads
//! level-0 links from the map and vectors or codes from wherever they are. The file
//! is never written again: `add` first copies the links back into memory (the file
//! stays for the caller to remove, as with mapped originals), `delete` only marks
//! the in-memory bitset, and `compact` writes a new file (`compacted_path`).

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
pub use persist::{graph_file_of, side_file_of, SideGraph, SideOriginals, INDEX_FORMAT_VERSION, INDEX_MAGIC};
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
    /// Bytes of the graph kept in memory (upper levels and per-node data, plus the
    /// level-0 links unless they are mapped).
    pub graph_bytes: usize,
    /// Bytes of level-0 links the index reads from its mapped graph file (0 in memory).
    pub graph_file_bytes: usize,
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
    /// Link words in front of the data in each arena slot: `1 + m0`, or 0 when the
    /// level-0 links are in `graph_map` (then `stride == data_words`).
    pub(crate) lofs: usize,
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
    /// The level-0 link lists in a read-only mapped file: `n * (1 + m0)` words, slot
    /// `i`'s list at `i * (1 + m0)` (then the arena holds the vector data only).
    pub(crate) graph_map: Option<MappedF32>,
    pub(crate) rng: SplitMix64,
    cost_fn: fn(&[f32], &[f32]) -> f32,
    /// `cost_fn` for four vectors at once, from the same kernel set (the same bits).
    cost4_fn: fn(&[f32], [&[f32]; 4]) -> [f32; 4],
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
            cost4_fn: config.distance.cost4_fn(k),
            typed: if config.datatype == Datatype::Float32 { None } else { Some(CostKind::of(config.distance, config.datatype)) },
            m0,
            stride: 1 + m0 + data_words,
            lofs: 1 + m0,
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
            graph_map: None,
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
                let p = unsafe { self.slot(i).add(self.lofs) } as *const u8;
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

    /// `cost_to` of four slots, bit for bit, in one call: f32 vectors go through the
    /// four-vector kernel, whose loads of the four overlap.
    #[inline(always)]
    pub(crate) fn cost4_to(&self, q: &[f32], i: [u32; 4]) -> [f32; 4] {
        match self.typed {
            None => (self.cost4_fn)(q, [self.raw(i[0]), self.raw(i[1]), self.raw(i[2]), self.raw(i[3])]),
            Some(_) => [self.cost_to(q, i[0]), self.cost_to(q, i[1]), self.cost_to(q, i[2]), self.cost_to(q, i[3])],
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
        let p = unsafe { self.slot(i).add(self.lofs) } as *const u8;
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
            unsafe { std::slice::from_raw_parts(self.slot(i).add(self.lofs) as *const f32, d) }
        }
    }

    #[inline(always)]
    pub(crate) fn code(&self, i: u32) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.slot(i).add(self.lofs) as *const u8, self.data_words * 4) }
    }

    /// Prefetches the first cache lines of what scoring slot `i` reads.
    #[inline(always)]
    fn prefetch_data(&self, i: u32) {
        let p = unsafe { self.slot(i).add(self.lofs) };
        prefetch(p);
        prefetch((p as *const u8).wrapping_add(64) as *const AtomicU32);
    }

    /// Prefetches the f32 vector of slot `i` (what construction scores).
    #[inline(always)]
    fn prefetch_raw(&self, i: u32) {
        let p: *const u8 = if self.quantized() {
            unsafe { self.originals_slice().as_ptr().add(i as usize * self.config.dim) as *const u8 }
        } else {
            unsafe { self.slot(i).add(self.lofs) as *const u8 }
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
            match &self.graph_map {
                // AtomicU32 has the layout of u32; the mapping is only ever loaded from.
                Some(g) => unsafe { std::slice::from_raw_parts(g.as_words().as_ptr().add(i as usize * (1 + self.m0)) as *const AtomicU32, 1 + self.m0) },
                None => unsafe { std::slice::from_raw_parts(self.slot(i), 1 + self.m0) },
            }
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

    /// Moves the level-0 link lists to `path` (written atomically once, then mapped
    /// read-only; the reference's `hnsw_config.on_disk`), so the arena keeps only the
    /// vectors or codes and the page cache holds the links a walk reads. Searches read
    /// the links in place. The file is never written again: the next `add` copies the
    /// links back into memory first (`move_graph_to_memory`), `compact` writes a new
    /// file, `save` names the file instead of holding the links. A file the index stops
    /// using is left for the caller to remove. Flat indexes have no graph (refused);
    /// targets without mmap answer `Unsupported` and keep the graph in memory.
    pub fn move_graph_to_file(&mut self, path: &std::path::Path) -> Result<()> {
        if self.config.flat {
            return Err(Error::invalid("a flat index has no graph to keep on disk"));
        }
        if path.file_name().is_none() {
            return Err(Error::invalid(format!("{}: not a file path", path.display())));
        }
        let w0 = 1 + self.m0;
        let n = self.n;
        let mut next = 0usize;
        let this: &Index = self;
        let map = MappedF32::create_words(path, n * w0, |buf| {
            while next < n && buf.len() + w0 <= buf.capacity() {
                let list = this.links(next as u32, 0);
                buf.extend(list.iter().map(|a| a.load(std::sync::atomic::Ordering::Relaxed)));
                next += 1;
            }
            next < n
        })?;
        // The arena keeps the data words only.
        let dw = self.data_words;
        let mut arena = zeroed_atomics(n * dw);
        for i in 0..n {
            let from = unsafe { self.slot(i as u32).add(self.lofs) } as *const u32;
            unsafe { std::ptr::copy_nonoverlapping(from, arena.as_mut_ptr().add(i * dw) as *mut u32, dw) };
        }
        self.arena = arena;
        self.cap = n;
        self.stride = dw;
        self.lofs = 0;
        self.graph_map = Some(map);
        Ok(())
    }

    /// Copies the mapped level-0 links back into the arena (the file stays on disk for
    /// the caller to remove). Nothing to do when they are in memory.
    pub fn move_graph_to_memory(&mut self) {
        let map = match self.graph_map.take() {
            Some(m) => m,
            None => return,
        };
        let (n, dw, w0) = (self.n, self.data_words, 1 + self.m0);
        let stride = w0 + dw;
        let mut arena = zeroed_atomics(n * stride);
        let words = map.as_words();
        for i in 0..n {
            unsafe {
                let to = arena.as_mut_ptr().add(i * stride) as *mut u32;
                std::ptr::copy_nonoverlapping(words.as_ptr().add(i * w0), to, w0);
                std::ptr::copy_nonoverlapping(self.arena.as_ptr().add(i * dw) as *const u32, to.add(w0), dw);
            }
        }
        self.arena = arena;
        self.cap = n;
        self.stride = stride;
        self.lofs = w0;
    }

    /// Whether the level-0 links live in a mapped file.
    pub fn graph_on_disk(&self) -> bool {
        self.graph_map.is_some()
    }

    /// The file the level-0 links are mapped from, if they are.
    pub fn graph_path(&self) -> Option<&std::path::Path> {
        self.graph_map.as_ref().map(|m| m.path())
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
        let graph_file_bytes = self.graph_map.as_ref().map_or(0, |m| m.file_bytes());
        let level0 = if self.graph_map.is_some() { 0 } else { self.n * (1 + self.m0) * 4 };
        let graph_bytes = level0 + self.upper.len() * 4 + self.upper_off.len() * 4 + self.levels.len();
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
            graph_file_bytes,
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
    /// The same build with its level-0 links in a mapped file answers exactly what the
    /// in-memory graph answers (f32, float16, int8, binary; originals in memory or
    /// mapped too), filtered or not; reopening it maps the file again; deletes keep the
    /// links mapped, an add brings them back into memory, compaction writes a new file.
    #[test]
    fn a_mapped_graph_answers_what_the_in_memory_graph_answers() {
        let d = 20;
        let n = 2500;
        let data = gaussian(n, d, 60);
        let labels: Vec<u64> = (0..n as u64).map(|x| x * 3 + 1).collect();
        let queries = gaussian(15, d, 61);
        let tmp = crate::testutil::TempDir::new("hnsw-graph-map");
        let cases = [
            ("f32", Quantization::None, Datatype::Float32, false),
            ("f16", Quantization::None, Datatype::Float16, false),
            ("int8", Quantization::Scalar { quantile: DEFAULT_SCALAR_QUANTILE }, Datatype::Float32, false),
            ("int8-orig", Quantization::Scalar { quantile: DEFAULT_SCALAR_QUANTILE }, Datatype::Float32, true),
            ("binary", Quantization::Binary, Datatype::Float32, false),
        ];
        let allow: Vec<u64> = labels.iter().cloned().filter(|l| l % 5 != 0).collect();
        let answers = |idx: &Index| -> Vec<Vec<(u64, f32)>> {
            let mut out = Vec::new();
            for qi in 0..15 {
                let q = &queries[qi * d..(qi + 1) * d];
                let mut p = SearchParams::new(10);
                p.ef = Some(48);
                out.push(idx.search(q, &p, None).unwrap());
                out.push(idx.search(q, &p, Some(&allow)).unwrap());
            }
            out
        };
        for (name, quant, dt, orig) in cases {
            let dir = tmp.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let mut cfg = IndexConfig::new(d, Distance::Cosine);
            cfg.quantization = quant;
            cfg.datatype = dt;
            cfg.full_scan_threshold_kb = 0;
            let mut mem = Index::new(cfg.clone()).unwrap();
            mem.add(&labels, &data, 1).unwrap();
            let mut map = Index::new(cfg.clone()).unwrap();
            if orig {
                map.move_originals_to_file(&dir.join("orig.f32")).unwrap();
            }
            map.add(&labels, &data, 1).unwrap();
            let want = answers(&mem);
            let in_ram = map.stats().graph_bytes;
            let file = dir.join("graph.links");
            map.move_graph_to_file(&file).unwrap();
            assert!(map.graph_on_disk());
            assert_eq!(map.graph_path().unwrap(), file.as_path());
            let s = map.stats();
            assert_eq!(s.graph_file_bytes, n * (1 + 2 * cfg.m) * 4, "{}", name);
            assert_eq!(s.graph_bytes, in_ram - n * (1 + 2 * cfg.m) * 4);
            assert_eq!(std::fs::metadata(&file).unwrap().len() as usize, s.graph_file_bytes);
            assert_eq!(s.vector_bytes, mem.stats().vector_bytes);
            assert_eq!(answers(&map), want, "{}", name);
            map.check_invariants().unwrap();
            assert_eq!(map.get_vector(4).unwrap(), mem.get_vector(4).unwrap());
            assert_eq!(map.export_live(), mem.export_live());

            // Reopen: the index file names the graph file; the load maps it.
            let saved = dir.join("index.qvi");
            map.save(&saved).unwrap();
            let back = Index::load(&saved).unwrap();
            assert!(back.graph_on_disk());
            assert_eq!(back.stats(), map.stats());
            assert_eq!(answers(&back), want, "{} reopened", name);
            // The bytes alone cannot be read without mapping the file.
            assert_eq!(Index::from_bytes(&map.to_bytes()).err().unwrap().code(), "QUIVER_UNSUPPORTED");
            // Given the files' bytes (what the WASM worker does), the links go back into memory.
            let bytes = map.to_bytes();
            let (gname, gbytes) = graph_file_of(&bytes).unwrap().unwrap();
            assert_eq!(gname, "graph.links");
            assert_eq!(gbytes as usize, s.graph_file_bytes);
            let side = side_file_of(&bytes).unwrap().map(|(f, len)| std::fs::read(dir.join(f)).unwrap()[..len as usize].to_vec());
            let graph_file = std::fs::read(&file).unwrap();
            let inmem = Index::from_bytes_with_files(&bytes, "x", side.as_deref(), Some(&graph_file)).unwrap();
            assert!(!inmem.graph_on_disk());
            assert_eq!(inmem.stats().graph_bytes, in_ram);
            assert_eq!(answers(&inmem), want, "{} read into memory", name);
            assert_eq!(Index::from_bytes_with_files(&bytes, "x", side.as_deref(), Some(&graph_file[..graph_file.len() - 4])).err().unwrap().code(), "QUIVER_CORRUPT");

            // Deletes only mark slots: the links stay mapped.
            let gone: Vec<u64> = labels.iter().cloned().filter(|l| l % 7 == 0).collect();
            mem.delete(&gone);
            map.delete(&gone);
            assert!(map.graph_on_disk());
            assert_eq!(answers(&map), answers(&mem), "{} after deletes", name);

            // An add copies the links back into memory (the file stays) and links as
            // the in-memory graph does.
            let more = gaussian(300, d, 62);
            let more_labels: Vec<u64> = (0..300u64).map(|x| 1_000_000 + x).collect();
            mem.add(&more_labels, &more, 1).unwrap();
            map.add(&more_labels, &more, 1).unwrap();
            assert!(!map.graph_on_disk());
            assert_eq!(map.stats().graph_file_bytes, 0);
            assert_eq!(map.stats().graph_bytes, mem.stats().graph_bytes);
            assert!(file.exists());
            assert_eq!(answers(&map), answers(&mem), "{} after add", name);
            // The reopened index still reads the old file unchanged.
            assert_eq!(answers(&back), want, "{} old mapping", name);

            // Mapped again (a new file), then compacted: the compacted links go to a
            // new file beside it, and the answers match the in-memory compaction.
            let file2 = dir.join("graph2.links");
            map.move_graph_to_file(&file2).unwrap();
            assert_eq!(answers(&map), answers(&mem), "{} remapped", name);
            mem.compact(1).unwrap();
            map.compact(1).unwrap();
            assert!(map.graph_on_disk());
            assert!(map.graph_path().unwrap().to_string_lossy().ends_with("graph2.c1.links"), "{}", map.graph_path().unwrap().display());
            assert_eq!(answers(&map), answers(&mem), "{} compacted", name);
            map.move_graph_to_memory();
            assert_eq!(answers(&map), answers(&mem), "{} back in memory", name);
        }
    }

    /// A graph file that is shorter than the index needs, or holds a link out of range,
    /// makes the load fail as Corrupt (never a read out of bounds); flat indexes have
    /// no graph to move.
    #[test]
    fn a_damaged_graph_file_is_refused_on_load() {
        let d = 8;
        let n = 400;
        let data = gaussian(n, d, 70);
        let labels: Vec<u64> = (0..n as u64).collect();
        let tmp = crate::testutil::TempDir::new("hnsw-graph-bad");
        let mut idx = Index::new(IndexConfig::new(d, Distance::Euclid)).unwrap();
        idx.add(&labels, &data, 1).unwrap();
        let file = tmp.path().join("g.links");
        idx.move_graph_to_file(&file).unwrap();
        let saved = tmp.path().join("i.qvi");
        idx.save(&saved).unwrap();
        drop(idx);
        let good = std::fs::read(&file).unwrap();
        // A link past the last slot (a new file: the old one is never rewritten in place).
        let mut bad = good.clone();
        bad[4..8].copy_from_slice(&(n as u32 + 5).to_le_bytes());
        bad[0..4].copy_from_slice(&1u32.to_le_bytes());
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, &bad).unwrap();
        let e = Index::load(&saved).err().unwrap();
        assert_eq!(e.code(), "QUIVER_CORRUPT", "{}", e);
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, &good[..good.len() - 4]).unwrap();
        let e = Index::load(&saved).err().unwrap();
        assert_eq!(e.code(), "QUIVER_CORRUPT", "{}", e);
        assert!(e.message.contains("shorter"), "{}", e);
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, &good).unwrap();
        assert!(Index::load(&saved).unwrap().graph_on_disk());
        let mut cfg = IndexConfig::new(d, Distance::Euclid);
        cfg.flat = true;
        let mut flat = Index::new(cfg).unwrap();
        flat.add(&labels[..10], &data[..10 * d], 1).unwrap();
        assert_eq!(flat.move_graph_to_file(&tmp.path().join("f.links")).err().unwrap().code(), "QUIVER_INVALID_ARGUMENT");
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
