//! Sparse vectors: an inverted index with exact top-k dot-product search.
//!
//! Owns: posting lists per dimension id (labels ascending, with the largest and
//! smallest value of each list), the forward copy of every stored vector (for reads,
//! deletes, filtered scans and persistence), MaxScore pruning that keeps top-k exact,
//! the IDF weighting of queries and the index's file format (magic `QVRSPARS`).
//! Must never: know of shards or names, or approximate a result.
//!
//! A document is a label (u64) with a sparse vector: dimension ids (u32, strictly
//! increasing once stored) and their values (finite f32). Search returns the documents
//! that share at least one dimension with the query, ranked by dot product (larger is
//! better), ties by label ascending: the same answer as scoring every document.
//!
//! Values are held in the index's datatype (`float32`, `float16` or `uint8`, see
//! crate::datatype): in the posting lists and in the forward copy alike, so a value
//! costs 4, 2 or 1 bytes. Input is converted once on write (float16 rounds to nearest,
//! ties to even, magnitudes past 65504 held at ±65504; uint8 truncates toward zero and
//! saturates to 0..=255, the reference's `value as u8`); reads and scores use the
//! converted values. Queries stay f32.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::path::Path;

use crate::datatype::{f16_to_f32, f32_to_f16, to_u8, Datatype, F16_MAX};
use crate::error::{Error, Result};
use crate::fileio::{ByteReader, ByteWriter};

#[cfg(test)]
mod tests;

pub const SPARSE_MAGIC: [u8; 8] = *b"QVRSPARS";
/// Version 2 records the datatype and stores values in it; version 1 files (f32
/// values, no datatype) load as float32.
pub const SPARSE_FORMAT_VERSION: u32 = 2;

/// Values in one of the stored datatypes.
#[derive(Clone, Debug)]
enum Values {
    F32(Vec<f32>),
    F16(Vec<u16>),
    U8(Vec<u8>),
}

fn to_f16_bits(x: f32) -> u16 {
    f32_to_f16(x.max(-F16_MAX).min(F16_MAX))
}

impl Values {
    fn new(dt: Datatype) -> Values {
        match dt {
            Datatype::Float32 => Values::F32(Vec::new()),
            Datatype::Float16 => Values::F16(Vec::new()),
            Datatype::Uint8 => Values::U8(Vec::new()),
        }
    }

    fn from_f32(dt: Datatype, v: &[f32]) -> Values {
        match dt {
            Datatype::Float32 => Values::F32(v.to_vec()),
            Datatype::Float16 => Values::F16(v.iter().map(|&x| to_f16_bits(x)).collect()),
            Datatype::Uint8 => Values::U8(v.iter().map(|&x| to_u8(x)).collect()),
        }
    }

    #[inline]
    fn get(&self, i: usize) -> f32 {
        match self {
            Values::F32(v) => v[i],
            Values::F16(v) => f16_to_f32(v[i]),
            Values::U8(v) => v[i] as f32,
        }
    }

    fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::F16(v) => v.len(),
            Values::U8(v) => v.len(),
        }
    }

    fn to_f32(&self) -> Vec<f32> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    /// Bytes reserved for the values.
    fn capacity_bytes(&self) -> usize {
        match self {
            Values::F32(v) => v.capacity() * 4,
            Values::F16(v) => v.capacity() * 2,
            Values::U8(v) => v.capacity(),
        }
    }

    /// Inserts the value `x`, already of this type (read back with `get`), at `at`.
    fn insert(&mut self, at: usize, x: f32) {
        match self {
            Values::F32(v) => v.insert(at, x),
            Values::F16(v) => v.insert(at, to_f16_bits(x)),
            Values::U8(v) => v.insert(at, to_u8(x)),
        }
    }

    fn set(&mut self, at: usize, x: f32) {
        match self {
            Values::F32(v) => v[at] = x,
            Values::F16(v) => v[at] = to_f16_bits(x),
            Values::U8(v) => v[at] = to_u8(x),
        }
    }

    fn remove(&mut self, at: usize) -> f32 {
        let x = self.get(at);
        match self {
            Values::F32(v) => {
                v.remove(at);
            }
            Values::F16(v) => {
                v.remove(at);
            }
            Values::U8(v) => {
                v.remove(at);
            }
        }
        x
    }

    fn write(&self, w: &mut ByteWriter) {
        match self {
            Values::F32(v) => w.put_f32_slice(v),
            Values::F16(v) => {
                for &h in v {
                    w.put_u16(h);
                }
            }
            Values::U8(v) => w.put_bytes(v),
        }
    }
}

/// A stored document: indices strictly increasing, values in the index's datatype.
#[derive(Clone, Debug)]
struct Doc {
    indices: Vec<u32>,
    values: Values,
}

impl Doc {
    /// Dot product with `q` (both sorted), or None when they share no index.
    fn score(&self, q: &[(u32, f32)]) -> Option<f64> {
        let (mut i, mut j) = (0, 0);
        let mut sum = 0.0f64;
        let mut hit = false;
        while i < self.indices.len() && j < q.len() {
            let (a, b) = (self.indices[i], q[j].0);
            if a == b {
                sum += self.values.get(i) as f64 * q[j].1 as f64;
                hit = true;
                i += 1;
                j += 1;
            } else if a < b {
                i += 1;
            } else {
                j += 1;
            }
        }
        if hit {
            Some(sum)
        } else {
            None
        }
    }

    fn vector(&self) -> SparseVector {
        SparseVector { indices: self.indices.clone(), values: self.values.to_f32() }
    }
}

/// One sparse vector as stored: indices strictly increasing, values finite.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseVector {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

impl SparseVector {
    /// Checks lengths and values and sorts by index; duplicate indices are refused.
    pub fn new(indices: Vec<u32>, values: Vec<f32>) -> Result<SparseVector> {
        if indices.len() != values.len() {
            return Err(Error::invalid(format!(
                "sparse vector has {} indices but {} values",
                indices.len(),
                values.len()
            )));
        }
        if let Some(v) = values.iter().find(|v| !v.is_finite()) {
            return Err(Error::invalid(format!("sparse vector value {} is not finite", v)));
        }
        let sorted = indices.windows(2).all(|w| w[0] < w[1]);
        let (indices, values) = if sorted {
            (indices, values)
        } else {
            let mut pairs: Vec<(u32, f32)> = indices.into_iter().zip(values.into_iter()).collect();
            pairs.sort_by_key(|p| p.0);
            for w in pairs.windows(2) {
                if w[0].0 == w[1].0 {
                    return Err(Error::invalid(format!("sparse vector has the index {} twice", w[0].0)));
                }
            }
            pairs.into_iter().unzip()
        };
        Ok(SparseVector { indices, values })
    }
}

#[derive(Clone)]
struct Posting {
    labels: Vec<u64>,
    values: Values,
    max: f32,
    min: f32,
}

impl Posting {
    fn new(dt: Datatype) -> Posting {
        Posting { labels: Vec::new(), values: Values::new(dt), max: 0.0, min: 0.0 }
    }

    fn bounds(&mut self) {
        let (mut max, mut min) = (f32::NEG_INFINITY, f32::INFINITY);
        for i in 0..self.values.len() {
            let x = self.values.get(i);
            max = max.max(x);
            min = min.min(x);
        }
        self.max = max;
        self.min = min;
    }

    fn insert(&mut self, label: u64, value: f32) {
        let at = match self.labels.last() {
            Some(&last) if last < label => self.labels.len(),
            None => 0,
            _ => match self.labels.binary_search(&label) {
                Ok(i) => {
                    self.values.set(i, value);
                    self.bounds();
                    return;
                }
                Err(i) => i,
            },
        };
        self.labels.insert(at, label);
        self.values.insert(at, value);
        let value = self.values.get(at);
        if self.labels.len() == 1 {
            self.max = value;
            self.min = value;
        } else {
            self.max = self.max.max(value);
            self.min = self.min.min(value);
        }
    }

    fn remove(&mut self, label: u64) {
        if let Ok(i) = self.labels.binary_search(&label) {
            self.labels.remove(i);
            let v = self.values.remove(i);
            if v >= self.max || v <= self.min {
                self.bounds();
            }
        }
    }
}

/// What a search asks for.
#[derive(Clone, Debug, Default)]
pub struct SparseSearch {
    pub k: usize,
    /// Only these labels may be returned.
    pub allow: Option<Vec<u64>>,
    /// Weigh each query value by the dimension's inverse document frequency.
    pub idf: bool,
    /// Score every (allowed) document from its stored vector instead of the posting lists.
    pub exact: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SparseStats {
    /// Documents (labels) stored.
    pub count: usize,
    /// Non-zero entries over all documents.
    pub entries: usize,
    /// Dimensions with a non-empty posting list.
    pub dims: usize,
    /// Bytes held in memory (postings, forward vectors, tables).
    pub total_bytes: usize,
}

/// A hit kept in the top-k heap: the heap's top is the worst (lowest score, then largest label).
#[derive(Clone, Copy, Debug)]
struct Hit {
    score: f32,
    label: u64,
}

impl PartialEq for Hit {
    fn eq(&self, o: &Hit) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Hit {}
impl PartialOrd for Hit {
    fn partial_cmp(&self, o: &Hit) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Hit {
    /// Greater = worse.
    fn cmp(&self, o: &Hit) -> Ordering {
        o.score
            .partial_cmp(&self.score)
            .unwrap_or(Ordering::Equal)
            .then(self.label.cmp(&o.label))
    }
}

struct TopK {
    k: usize,
    heap: BinaryHeap<Hit>,
}

impl TopK {
    fn new(k: usize) -> TopK {
        TopK { k, heap: BinaryHeap::with_capacity(k + 1) }
    }
    fn full(&self) -> bool {
        self.heap.len() >= self.k
    }
    /// The score a new hit must beat once full (ties lose to smaller labels).
    fn threshold(&self) -> f64 {
        if self.full() {
            self.heap.peek().map(|h| h.score as f64).unwrap_or(f64::NEG_INFINITY)
        } else {
            f64::NEG_INFINITY
        }
    }
    fn offer(&mut self, label: u64, score: f64) {
        if self.k == 0 {
            return;
        }
        let hit = Hit { score: score as f32, label };
        if !self.full() {
            self.heap.push(hit);
        } else if let Some(worst) = self.heap.peek() {
            if hit < *worst {
                self.heap.pop();
                self.heap.push(hit);
            }
        }
    }
    fn into_sorted(self) -> Vec<(u64, f32)> {
        let mut v = self.heap.into_vec();
        v.sort();
        v.into_iter().map(|h| (h.label, h.score)).collect()
    }
}

/// A bound may exceed a score it covers by rounding; prune only with this much margin.
fn slack(threshold: f64) -> f64 {
    1e-6 * (1.0 + threshold.abs())
}

/// The reference's inverse document frequency: ln((n - df + 0.5) / (df + 0.5) + 1).
pub fn idf(n: f32, df: f32) -> f32 {
    ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
}

pub struct SparseIndex {
    datatype: Datatype,
    postings: HashMap<u32, Posting>,
    docs: HashMap<u64, Doc>,
    entries: usize,
    /// Filtered searches whose allow-list holds fewer labels than this score the allowed
    /// documents directly instead of walking the posting lists.
    full_scan_threshold: usize,
}

impl SparseIndex {
    /// An empty float32 index.
    pub fn new(full_scan_threshold: usize) -> SparseIndex {
        SparseIndex::with_datatype(full_scan_threshold, Datatype::Float32)
    }

    /// An empty index storing values as `datatype`.
    pub fn with_datatype(full_scan_threshold: usize, datatype: Datatype) -> SparseIndex {
        SparseIndex { datatype, postings: HashMap::new(), docs: HashMap::new(), entries: 0, full_scan_threshold }
    }

    pub fn datatype(&self) -> Datatype {
        self.datatype
    }

    pub fn full_scan_threshold(&self) -> usize {
        self.full_scan_threshold
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Inserts or replaces the document `label`.
    /// Values are converted to the index's datatype (see the module header).
    pub fn upsert(&mut self, label: u64, v: SparseVector) {
        self.remove(label);
        let dt = self.datatype;
        let values = Values::from_f32(dt, &v.values);
        for (i, &d) in v.indices.iter().enumerate() {
            self.postings.entry(d).or_insert_with(|| Posting::new(dt)).insert(label, values.get(i));
        }
        self.entries += v.indices.len();
        self.docs.insert(label, Doc { indices: v.indices, values });
    }

    /// Inserts or replaces `labels.len()` documents given flat: document `i` has the
    /// entries `offsets[i]..offsets[i + 1]` of `indices` and `values`. Everything is
    /// checked before anything changes, so a refused batch leaves the index as it was.
    pub fn upsert_batch(&mut self, labels: &[u64], offsets: &[u32], indices: &[u32], values: &[f32]) -> Result<()> {
        if offsets.len() != labels.len() + 1 || indices.len() != values.len() {
            return Err(Error::invalid(format!(
                "sparse batch of {} labels needs {} offsets (got {}) and as many values as indices ({} and {})",
                labels.len(),
                labels.len() + 1,
                offsets.len(),
                indices.len(),
                values.len()
            )));
        }
        if offsets[0] != 0 || offsets[labels.len()] as usize != indices.len() || offsets.windows(2).any(|w| w[0] > w[1]) {
            return Err(Error::invalid("sparse batch offsets must rise from 0 to the number of entries"));
        }
        let mut docs = Vec::with_capacity(labels.len());
        for i in 0..labels.len() {
            let (a, b) = (offsets[i] as usize, offsets[i + 1] as usize);
            docs.push(SparseVector::new(indices[a..b].to_vec(), values[a..b].to_vec())?);
        }
        for (&l, v) in labels.iter().zip(docs.into_iter()) {
            self.upsert(l, v);
        }
        Ok(())
    }

    /// The stored vectors of `labels`, flat: the labels found, their offsets (one more
    /// than the labels found), indices and values.
    pub fn get_batch(&self, labels: &[u64]) -> (Vec<u64>, Vec<u32>, Vec<u32>, Vec<f32>) {
        let mut found = Vec::new();
        let mut offsets = vec![0u32];
        let mut indices = Vec::new();
        let mut values = Vec::new();
        for &l in labels {
            if let Some(d) = self.docs.get(&l) {
                found.push(l);
                indices.extend_from_slice(&d.indices);
                values.extend(d.values.to_f32());
                offsets.push(indices.len() as u32);
            }
        }
        (found, offsets, indices, values)
    }

    /// Removes `label`; returns whether it was stored.
    pub fn remove(&mut self, label: u64) -> bool {
        match self.docs.remove(&label) {
            None => false,
            Some(old) => {
                for d in &old.indices {
                    let empty = match self.postings.get_mut(d) {
                        Some(p) => {
                            p.remove(label);
                            p.labels.is_empty()
                        }
                        None => false,
                    };
                    if empty {
                        self.postings.remove(d);
                    }
                }
                self.entries -= old.indices.len();
                true
            }
        }
    }

    /// The stored vector of `label`, its values as stored (converted to the datatype).
    pub fn get(&self, label: u64) -> Option<SparseVector> {
        self.docs.get(&label).map(Doc::vector)
    }

    /// Every stored label, ascending.
    pub fn labels(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.docs.keys().cloned().collect();
        v.sort_unstable();
        v
    }

    /// Documents carrying dimension `d`.
    pub fn doc_freq(&self, d: u32) -> usize {
        self.postings.get(&d).map(|p| p.labels.len()).unwrap_or(0)
    }

    pub fn stats(&self) -> SparseStats {
        let mut bytes = 0usize;
        for p in self.postings.values() {
            bytes += p.labels.capacity() * 8 + p.values.capacity_bytes() + 4 + std::mem::size_of::<Posting>();
        }
        for v in self.docs.values() {
            bytes += v.indices.capacity() * 4 + v.values.capacity_bytes() + 8 + std::mem::size_of::<Doc>();
        }
        SparseStats { count: self.docs.len(), entries: self.entries, dims: self.postings.len(), total_bytes: bytes }
    }

    /// The query's (dimension, weight) pairs sorted by dimension, weighted by IDF when asked.
    fn weights(&self, q: &SparseVector, idf_on: bool) -> Vec<(u32, f32)> {
        let n = self.docs.len() as f32;
        q.indices
            .iter()
            .zip(q.values.iter())
            .map(|(&d, &x)| {
                if idf_on {
                    (d, x * idf(n, self.doc_freq(d) as f32))
                } else {
                    (d, x)
                }
            })
            .collect()
    }

    /// Exact top-k by dot product (ties by label ascending) among the documents sharing
    /// a dimension with `query`.
    pub fn search(&self, query: &SparseVector, p: &SparseSearch) -> Vec<(u64, f32)> {
        let q = self.weights(query, p.idf);
        let mut top = TopK::new(p.k);
        if p.k == 0 || q.is_empty() {
            return Vec::new();
        }
        match &p.allow {
            Some(allow) if p.exact || allow.len() < self.full_scan_threshold => {
                let mut seen = HashSet::with_capacity(allow.len());
                for &l in allow {
                    if !seen.insert(l) {
                        continue;
                    }
                    if let Some(s) = self.docs.get(&l).and_then(|d| d.score(&q)) {
                        top.offer(l, s);
                    }
                }
            }
            None if p.exact => {
                for (&l, d) in &self.docs {
                    if let Some(s) = d.score(&q) {
                        top.offer(l, s);
                    }
                }
            }
            allow => {
                let allowed: Option<HashSet<u64>> = allow.as_ref().map(|a| a.iter().cloned().collect());
                self.max_score(&q, allowed.as_ref(), &mut top);
            }
        }
        top.into_sorted()
    }

    /// Document-at-a-time MaxScore over the posting lists: lists whose summed upper bounds
    /// cannot reach the current k-th score only complete candidates found in the others.
    fn max_score(&self, q: &[(u32, f32)], allowed: Option<&HashSet<u64>>, top: &mut TopK) {
        struct Term<'a> {
            p: &'a Posting,
            w: f64,
            ub: f64,
            at: usize,
        }
        let mut terms: Vec<Term> = q
            .iter()
            .filter_map(|&(d, w)| {
                self.postings.get(&d).map(|p| {
                    let w = w as f64;
                    let ub = (w * p.max as f64).max(w * p.min as f64).max(0.0);
                    Term { p, w, ub, at: 0 }
                })
            })
            .collect();
        if terms.is_empty() {
            return;
        }
        terms.sort_by(|a, b| a.ub.partial_cmp(&b.ub).unwrap_or(Ordering::Equal));
        let m = terms.len();
        // prefix[j]: summed bounds of terms[..j].
        let mut prefix = vec![0.0f64; m + 1];
        for j in 0..m {
            prefix[j + 1] = prefix[j] + terms[j].ub;
        }
        // terms[..ess] are non-essential: together they cannot beat the threshold.
        let mut ess = 0usize;
        loop {
            let thr = top.threshold();
            while ess < m && prefix[ess + 1] < thr - slack(thr) {
                ess += 1;
            }
            if ess >= m {
                break;
            }
            // Next candidate: the smallest label under an essential cursor.
            let mut cand = u64::MAX;
            let mut any = false;
            for t in &terms[ess..] {
                if t.at < t.p.labels.len() {
                    any = true;
                    cand = cand.min(t.p.labels[t.at]);
                }
            }
            if !any {
                break;
            }
            let mut score = 0.0f64;
            for t in terms[ess..].iter_mut() {
                if t.at < t.p.labels.len() && t.p.labels[t.at] == cand {
                    score += t.w * t.p.values.get(t.at) as f64;
                    t.at += 1;
                }
            }
            if let Some(a) = allowed {
                if !a.contains(&cand) {
                    continue;
                }
            }
            let mut pruned = false;
            for j in (0..ess).rev() {
                if top.full() && score + prefix[j + 1] < thr - slack(thr) {
                    pruned = true;
                    break;
                }
                let t = &mut terms[j];
                // Gallop forward: cursors only move up, as candidates do.
                let rest = &t.p.labels[t.at..];
                let off = match rest.binary_search(&cand) {
                    Ok(i) => {
                        score += t.w * t.p.values.get(t.at + i) as f64;
                        i + 1
                    }
                    Err(i) => i,
                };
                t.at += off;
            }
            if !pruned {
                top.offer(cand, score);
            }
        }
    }

    /// The index as bytes (without the file frame, format version 2): full-scan
    /// threshold, datatype (0 float32, 1 float16, 2 uint8), then every document by
    /// label ascending with its values in the datatype.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = ByteWriter::with_capacity(17 + self.docs.len() * 12 + self.entries * (4 + self.datatype.bytes()));
        w.put_u64(self.full_scan_threshold as u64);
        w.put_u8(match self.datatype {
            Datatype::Float32 => 0,
            Datatype::Float16 => 1,
            Datatype::Uint8 => 2,
        });
        w.put_u64(self.docs.len() as u64);
        for l in self.labels() {
            let d = &self.docs[&l];
            w.put_u64(l);
            w.put_u32(d.indices.len() as u32);
            w.put_u32_slice(&d.indices);
            d.values.write(&mut w);
        }
        w.into_vec()
    }

    /// Reads `to_bytes` output of format `version` (1: f32 values, no datatype).
    pub fn from_bytes(bytes: &[u8], version: u32, name: &str) -> Result<SparseIndex> {
        let mut r = ByteReader::new(bytes).with_name(name);
        let threshold = r.get_u64()? as usize;
        let dt = if version < 2 {
            Datatype::Float32
        } else {
            match r.get_u8()? {
                0 => Datatype::Float32,
                1 => Datatype::Float16,
                2 => Datatype::Uint8,
                t => return Err(Error::corrupt(format!("{}: unknown sparse datatype {}", name, t))),
            }
        };
        let n = r.get_u64()? as usize;
        let mut idx = SparseIndex::with_datatype(threshold, dt);
        let mut prev: Option<u64> = None;
        for _ in 0..n {
            let l = r.get_u64()?;
            if prev.map(|p| p >= l).unwrap_or(false) {
                return Err(Error::corrupt(format!("{}: sparse labels out of order", name)));
            }
            prev = Some(l);
            let nnz = r.get_u32()? as usize;
            if nnz * (4 + dt.bytes()) > r.remaining() {
                return Err(Error::corrupt(format!("{}: sparse vector runs past the end", name)));
            }
            let indices = r.get_u32_vec(nnz)?;
            let values = match dt {
                Datatype::Float32 => r.get_f32_vec(nnz)?,
                Datatype::Float16 => {
                    let mut v = Vec::with_capacity(nnz);
                    for _ in 0..nnz {
                        v.push(f16_to_f32(r.get_u16()?));
                    }
                    v
                }
                Datatype::Uint8 => r.get_bytes(nnz)?.iter().map(|&b| b as f32).collect(),
            };
            if !indices.windows(2).all(|w| w[0] < w[1]) || values.iter().any(|v| !v.is_finite()) {
                return Err(Error::corrupt(format!("{}: sparse vector of label {} is malformed", name, l)));
            }
            idx.upsert(l, SparseVector { indices, values });
        }
        if !r.is_empty() {
            return Err(Error::corrupt(format!("{}: trailing bytes after the sparse index", name)));
        }
        Ok(idx)
    }

    /// Writes the index framed and checksummed, atomically (temp file, fsync, rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::fileio::write_framed(path, SPARSE_MAGIC, SPARSE_FORMAT_VERSION, &self.to_bytes())
    }

    pub fn load(path: &Path) -> Result<SparseIndex> {
        let (version, payload) = crate::fileio::read_framed(path, SPARSE_MAGIC, SPARSE_FORMAT_VERSION)?;
        SparseIndex::from_bytes(&payload, version, &path.display().to_string())
    }

    /// The framed image, for backends without files.
    pub fn to_framed(&self) -> Vec<u8> {
        crate::fileio::frame(SPARSE_MAGIC, SPARSE_FORMAT_VERSION, &self.to_bytes())
    }

    pub fn from_framed(bytes: &[u8], name: &str) -> Result<SparseIndex> {
        let (version, payload) = crate::fileio::unframe(bytes, SPARSE_MAGIC, SPARSE_FORMAT_VERSION, name)?;
        SparseIndex::from_bytes(payload, version, name)
    }
}
