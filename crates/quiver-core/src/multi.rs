//! The multivector index: each label holds a list of vectors of one dimension (a
//! ColBERT-style late-interaction document), scored against a list of query vectors
//! by MaxSim, as the reference defines it: the sum, over the query's vectors, of the
//! best similarity of that query vector to any of the point's vectors.
//!
//! Owns: the storage of the lists (one flat f32 array, converted by the datatype's
//! rules, each list a contiguous run), the label map, deletes, an HNSW graph over the
//! points whose distance between two points is minus the MaxSim of one's list against
//! the other's (as the reference links multivector points), the exact MaxSim scan, and
//! the index file (magic `QVRMULTI`). `flat` stores without a graph: every search is an
//! exact scan (the reference's `m: 0`, the usual re-ranking setup).
//! Must never: know what a label means.
//!
//! Similarity per pair of vectors: the dot product for Dot, and for Cosine the dot
//! product of the normalised vectors (Cosine lists are normalised when stored and when
//! queried); higher is better. Euclid and Manhattan are not offered here (the caller
//! refuses them).

use std::collections::{BinaryHeap, HashMap};
use std::path::Path;

use crate::datatype::Datatype;
use crate::distance::{kernels_for_dim, Distance, Kernels};
use crate::error::{Error, ErrorKind, Result};
use crate::fileio::{ByteReader, ByteWriter};
use crate::rng::SplitMix64;

pub const MULTI_MAGIC: [u8; 8] = *b"QVRMULTI";
pub const MULTI_FORMAT_VERSION: u32 = 1;

/// Most vectors one point may hold.
pub const MAX_VECTORS_PER_POINT: usize = 1 << 20;

#[derive(Clone, Debug, PartialEq)]
pub struct MultiConfig {
    pub dim: usize,
    pub distance: Distance,
    pub datatype: Datatype,
    /// Links per node on upper levels (level 0 keeps twice as many).
    pub m: usize,
    pub ef_construct: usize,
    pub seed: u64,
    /// No graph: every search scans exactly.
    pub flat: bool,
}

impl MultiConfig {
    pub fn new(dim: usize, distance: Distance) -> MultiConfig {
        MultiConfig { dim, distance, datatype: Datatype::Float32, m: 16, ef_construct: 100, seed: 42, flat: false }
    }

    fn validate(&self) -> Result<()> {
        if self.dim == 0 || self.dim > 65_536 {
            return Err(Error::invalid(format!("dimension must be in 1..=65536, got {}", self.dim)));
        }
        if !matches!(self.distance, Distance::Cosine | Distance::Dot) {
            return Err(Error::new(ErrorKind::Unsupported, "multivectors are scored with Cosine or Dot only"));
        }
        if self.m < 2 || self.m > 256 {
            return Err(Error::invalid(format!("m must be in 2..=256, got {}", self.m)));
        }
        if self.ef_construct < 4 || self.ef_construct > 100_000 {
            return Err(Error::invalid(format!("ef_construct must be in 4..=100000, got {}", self.ef_construct)));
        }
        Ok(())
    }
}

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

pub struct MultiIndex {
    config: MultiConfig,
    kernels: &'static Kernels,
    /// Every slot's vectors, slot after slot.
    data: Vec<f32>,
    /// Start (in vectors) and count of each slot's list.
    starts: Vec<u64>,
    counts: Vec<u32>,
    labels: Vec<u64>,
    deleted: Vec<bool>,
    deleted_count: usize,
    label_map: HashMap<u64, u32>,
    levels: Vec<u8>,
    /// links[slot][level]: neighbour slots.
    links: Vec<Vec<Vec<u32>>>,
    entry: Option<u32>,
    rng: SplitMix64,
}

impl MultiIndex {
    pub fn new(config: MultiConfig) -> Result<MultiIndex> {
        config.validate()?;
        Ok(MultiIndex {
            kernels: kernels_for_dim(config.dim),
            rng: SplitMix64::new(config.seed),
            config,
            data: Vec::new(),
            starts: Vec::new(),
            counts: Vec::new(),
            labels: Vec::new(),
            deleted: Vec::new(),
            deleted_count: 0,
            label_map: HashMap::new(),
            levels: Vec::new(),
            links: Vec::new(),
            entry: None,
        })
    }

    pub fn config(&self) -> &MultiConfig {
        &self.config
    }

    pub fn len(&self) -> usize {
        self.labels.len() - self.deleted_count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn list(&self, i: u32) -> &[f32] {
        let d = self.config.dim;
        let s = self.starts[i as usize] as usize * d;
        &self.data[s..s + self.counts[i as usize] as usize * d]
    }

    /// MaxSim of the query list `q` (prepared) against slot `i`.
    fn max_sim(&self, q: &[f32], i: u32) -> f32 {
        let d = self.config.dim;
        let doc = self.list(i);
        let mut total = 0.0f32;
        for qv in q.chunks_exact(d) {
            let mut best = f32::NEG_INFINITY;
            for dv in doc.chunks_exact(d) {
                let s = (self.kernels.dot)(qv, dv);
                if s > best {
                    best = s;
                }
            }
            total += best;
        }
        total
    }

    fn check_lists(&self, labels: &[u64], vectors: &[f32], counts: &[u32]) -> Result<()> {
        let d = self.config.dim;
        if labels.len() != counts.len() {
            return Err(Error::invalid(format!("{} labels but {} vector counts", labels.len(), counts.len())));
        }
        let mut total = 0usize;
        for (j, &c) in counts.iter().enumerate() {
            if c == 0 {
                return Err(Error::invalid(format!("multivector {} is empty", j)));
            }
            if c as usize > MAX_VECTORS_PER_POINT {
                return Err(Error::invalid(format!("multivector {} has {} vectors, at most {}", j, c, MAX_VECTORS_PER_POINT)));
            }
            total += c as usize;
        }
        if vectors.len() != total * d {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!("expected {} vectors of dimension {} ({} values), got {} values", total, d, total * d, vectors.len()),
            ));
        }
        if let Some(p) = vectors.iter().position(|x| !x.is_finite()) {
            return Err(Error::invalid(format!("a multivector has a non-finite value at position {}", p % d)));
        }
        let (dt, dist) = (self.config.datatype, self.config.distance);
        if let Some(p) = vectors.iter().position(|&x| !dt.fits(dist, x)) {
            return Err(Error::invalid(format!("a multivector has a value out of the {} range: {}", dt.name(), vectors[p])));
        }
        Ok(())
    }

    fn prepare(&self, v: &mut [f32]) {
        for row in v.chunks_exact_mut(self.config.dim) {
            self.config.datatype.prepare(self.config.distance, row);
        }
    }

    /// Inserts or replaces the lists of `labels`; `counts[j]` vectors of `vectors` (in
    /// order) belong to `labels[j]`. A label repeated in the batch keeps its last list.
    pub fn add(&mut self, labels: &[u64], vectors: &[f32], counts: &[u32]) -> Result<()> {
        self.check_lists(labels, vectors, counts)?;
        if self.labels.len() + labels.len() >= u32::MAX as usize {
            return Err(Error::invalid("index is full"));
        }
        let d = self.config.dim;
        let mut at = 0usize;
        for (j, &label) in labels.iter().enumerate() {
            let c = counts[j] as usize;
            let mut v = vectors[at * d..(at + c) * d].to_vec();
            at += c;
            self.prepare(&mut v);
            let i = self.labels.len() as u32;
            if let Some(old) = self.label_map.insert(label, i) {
                self.deleted[old as usize] = true;
                self.deleted_count += 1;
            }
            self.starts.push((self.data.len() / d) as u64);
            self.counts.push(c as u32);
            self.data.extend_from_slice(&v);
            self.labels.push(label);
            self.deleted.push(false);
            let level = if self.config.flat { 0 } else { self.random_level() };
            self.levels.push(level);
            self.links.push(if self.config.flat { Vec::new() } else { vec![Vec::new(); level as usize + 1] });
            if !self.config.flat {
                self.link(i);
            }
        }
        Ok(())
    }

    fn random_level(&mut self) -> u8 {
        let ml = 1.0 / (self.config.m as f64).ln();
        let r = -self.rng.next_f64_open0().ln() * ml;
        (r as usize).min(31) as u8
    }

    fn max_links(&self, level: usize) -> usize {
        if level == 0 {
            self.config.m * 2
        } else {
            self.config.m
        }
    }

    /// Best-first search on one level from `ep`; returns up to `ef` candidates, best first.
    fn beam(&self, q: &[f32], ep: u32, ef: usize, level: usize) -> Vec<Cand> {
        // A set of what this walk visited (not a bitmap of every slot: a walk touches few).
        let mut visited: std::collections::HashSet<u32> = std::collections::HashSet::with_capacity(ef * 8);
        let c0 = Cand { cost: -self.max_sim(q, ep), id: ep };
        visited.insert(ep);
        let mut frontier: BinaryHeap<std::cmp::Reverse<Cand>> = BinaryHeap::new();
        let mut best: BinaryHeap<Cand> = BinaryHeap::new();
        frontier.push(std::cmp::Reverse(c0));
        best.push(c0);
        while let Some(std::cmp::Reverse(c)) = frontier.pop() {
            if best.len() >= ef && c.cost > best.peek().map(|b| b.cost).unwrap_or(f32::INFINITY) {
                break;
            }
            let node_links = &self.links[c.id as usize];
            if level >= node_links.len() {
                continue;
            }
            for &n in &node_links[level] {
                if !visited.insert(n) {
                    continue;
                }
                let cost = -self.max_sim(q, n);
                if best.len() < ef || cost < best.peek().map(|b| b.cost).unwrap_or(f32::INFINITY) {
                    let cand = Cand { cost, id: n };
                    frontier.push(std::cmp::Reverse(cand));
                    best.push(cand);
                    if best.len() > ef {
                        best.pop();
                    }
                }
            }
        }
        best.into_sorted_vec()
    }

    /// Greedy descent from `ep` through the levels above `to`; returns the closest node found.
    fn descend(&self, q: &[f32], ep: u32, from: usize, to: usize) -> u32 {
        let mut cur = ep;
        let mut cur_cost = -self.max_sim(q, cur);
        let mut level = from;
        while level > to {
            loop {
                let mut changed = false;
                for &n in &self.links[cur as usize][level] {
                    let c = -self.max_sim(q, n);
                    if c < cur_cost {
                        cur = n;
                        cur_cost = c;
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
            level -= 1;
        }
        cur
    }

    fn top_level(&self) -> usize {
        self.entry.map(|e| self.levels[e as usize] as usize).unwrap_or(0)
    }

    fn link(&mut self, i: u32) {
        let entry = match self.entry {
            None => {
                self.entry = Some(i);
                return;
            }
            Some(e) => e,
        };
        let level = self.levels[i as usize] as usize;
        let top = self.top_level();
        let q = self.list(i).to_vec();
        let mut ep = self.descend(&q, entry, top, level.min(top));
        let mut l = level.min(top) as isize;
        while l >= 0 {
            let lu = l as usize;
            let found = self.beam(&q, ep, self.config.ef_construct, lu);
            ep = found[0].id;
            let max = self.max_links(lu);
            let chosen: Vec<u32> = found.iter().filter(|c| c.id != i).take(max).map(|c| c.id).collect();
            self.links[i as usize][lu] = chosen.clone();
            for n in chosen {
                self.add_back_link(n, i, lu);
            }
            l -= 1;
        }
        if level > top {
            self.entry = Some(i);
        }
    }

    /// Adds `new` to `node`'s links at `level`; when full, keeps the `max` nearest to
    /// `node` (by `node`'s list as the query).
    fn add_back_link(&mut self, node: u32, new: u32, level: usize) {
        let max = self.max_links(level);
        let cur = &self.links[node as usize][level];
        if cur.contains(&new) {
            return;
        }
        if cur.len() < max {
            self.links[node as usize][level].push(new);
            return;
        }
        let q = self.list(node).to_vec();
        let mut cands: Vec<Cand> = cur.iter().chain(std::iter::once(&new)).map(|&id| Cand { cost: -self.max_sim(&q, id), id }).collect();
        cands.sort_unstable();
        cands.truncate(max);
        self.links[node as usize][level] = cands.into_iter().map(|c| c.id).collect();
    }

    /// Marks labels deleted; returns how many were present.
    pub fn delete(&mut self, labels: &[u64]) -> usize {
        let mut n = 0;
        for l in labels {
            if let Some(i) = self.label_map.remove(l) {
                self.deleted[i as usize] = true;
                self.deleted_count += 1;
                n += 1;
            }
        }
        n
    }

    /// The best `k` points for the query list `query` (`query.len()` a multiple of the
    /// dimension), best first, as (label, MaxSim). `exact` scans every point; `allow`
    /// restricts the answer to those labels (scanned exactly).
    pub fn search(&self, query: &[f32], k: usize, ef: Option<usize>, exact: bool, allow: Option<&[u64]>) -> Result<Vec<(u64, f32)>> {
        let d = self.config.dim;
        if query.is_empty() || query.len() % d != 0 {
            return Err(Error::new(
                ErrorKind::DimensionMismatch,
                format!("a query multivector needs a positive multiple of {} values, got {}", d, query.len()),
            ));
        }
        if query.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid("query has a non-finite value"));
        }
        if k == 0 {
            return Err(Error::invalid("k must be at least 1"));
        }
        let mut q = query.to_vec();
        self.prepare(&mut q);
        let k = k.min(self.len().max(1));
        let mut top: BinaryHeap<Cand> = BinaryHeap::new();
        let mut consider = |i: u32, cost: f32| {
            if top.len() < k {
                top.push(Cand { cost, id: i });
            } else if cost < top.peek().map(|x| x.cost).unwrap_or(f32::INFINITY) {
                top.pop();
                top.push(Cand { cost, id: i });
            }
        };
        if let Some(ls) = allow {
            let mut seen = std::collections::HashSet::new();
            for l in ls {
                if let Some(&i) = self.label_map.get(l) {
                    if seen.insert(i) {
                        consider(i, -self.max_sim(&q, i));
                    }
                }
            }
        } else if exact || self.config.flat || self.entry.is_none() {
            for i in 0..self.labels.len() as u32 {
                if !self.deleted[i as usize] {
                    consider(i, -self.max_sim(&q, i));
                }
            }
        } else {
            let entry = self.entry.unwrap_or(0);
            let ep = self.descend(&q, entry, self.top_level(), 0);
            let ef = ef.unwrap_or(self.config.ef_construct).max(k);
            for c in self.beam(&q, ep, ef, 0) {
                if !self.deleted[c.id as usize] {
                    consider(c.id, c.cost);
                }
            }
        }
        Ok(top.into_sorted_vec().into_iter().map(|c| (self.labels[c.id as usize], -c.cost)).collect())
    }

    /// The stored list of `label` (converted; normalised for Cosine), flat.
    pub fn get_vector(&self, label: u64) -> Option<Vec<f32>> {
        self.label_map.get(&label).map(|&i| self.list(i).to_vec())
    }

    /// Live labels, their lists (flat) and the number of vectors of each, in slot order.
    pub fn export_live(&self) -> (Vec<u64>, Vec<f32>, Vec<u32>) {
        let (ls, vs, cs, _) = self.export_page(0, usize::MAX);
        (ls, vs, cs)
    }

    /// One page of `export_live`: up to `max_count` live labels (points, whatever the
    /// length of their lists) from slot `from` on, in slot order, and the slot the next
    /// page starts at (`slots()` once every slot is read). Deleted slots are skipped
    /// without counting; slots never move or get reused before a `compact`, so pages
    /// read while the index only sees deletes return each label live throughout once.
    /// Refuses `max_count == 0` and `from > slots()`.
    pub fn export_live_from(&self, from: usize, max_count: usize) -> Result<(Vec<u64>, Vec<f32>, Vec<u32>, usize)> {
        if max_count == 0 {
            return Err(Error::invalid("max_count must be at least 1"));
        }
        if from > self.labels.len() {
            return Err(Error::invalid(format!("from slot {} is past the index's {} slots", from, self.labels.len())));
        }
        Ok(self.export_page(from, max_count))
    }

    fn export_page(&self, from: usize, max_count: usize) -> (Vec<u64>, Vec<f32>, Vec<u32>, usize) {
        let (mut ls, mut vs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
        let mut at = from;
        while at < self.labels.len() && ls.len() < max_count {
            let i = at as u32;
            at += 1;
            if !self.deleted[i as usize] {
                ls.push(self.labels[i as usize]);
                vs.extend_from_slice(self.list(i));
                cs.push(self.counts[i as usize]);
            }
        }
        (ls, vs, cs, at)
    }

    pub fn live_labels(&self) -> Vec<u64> {
        (0..self.labels.len()).filter(|&i| !self.deleted[i]).map(|i| self.labels[i]).collect()
    }

    /// Rebuilds without deleted slots.
    pub fn compact(&mut self) -> Result<()> {
        let (ls, vs, cs) = self.export_live();
        let mut fresh = MultiIndex::new(self.config.clone())?;
        fresh.add(&ls, &vs, &cs)?;
        *self = fresh;
        Ok(())
    }

    /// Vectors stored (all lists, deleted ones until compact).
    pub fn vector_count(&self) -> usize {
        self.data.len() / self.config.dim
    }

    pub fn slots(&self) -> usize {
        self.labels.len()
    }

    pub fn deleted_count(&self) -> usize {
        self.deleted_count
    }

    pub fn vector_bytes(&self) -> usize {
        self.data.len() * 4
    }

    pub fn graph_bytes(&self) -> usize {
        self.links.iter().map(|l| l.iter().map(|x| x.len() * 4 + 24).sum::<usize>() + 24).sum()
    }

    pub fn total_bytes(&self) -> usize {
        self.vector_bytes() + self.graph_bytes() + self.labels.len() * (8 + 8 + 4 + 1 + 1) + self.label_map.capacity() * 16
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        crate::fileio::frame_with(MULTI_MAGIC, MULTI_FORMAT_VERSION, 64 + self.data.len() * 4, |w| {
            self.write(w);
            Ok(())
        })
        .expect("serialising into memory cannot fail")
    }

    fn write(&self, w: &mut ByteWriter) {
        let c = &self.config;
        w.put_u32(c.dim as u32);
        w.put_u8(c.distance.code());
        w.put_u8(match c.datatype {
            Datatype::Float32 => 0,
            Datatype::Float16 => 1,
            Datatype::Uint8 => 2,
        });
        w.put_u8(c.flat as u8);
        w.put_u32(c.m as u32);
        w.put_u32(c.ef_construct as u32);
        w.put_u64(c.seed);
        w.put_u64(self.rng.state());
        let n = self.labels.len();
        w.put_u64(n as u64);
        w.put_u64_slice(&self.labels);
        w.put_u32_slice(&self.counts);
        w.put_bytes(&self.deleted.iter().map(|&x| x as u8).collect::<Vec<u8>>());
        w.put_bytes(&self.levels);
        w.put_u32(self.entry.unwrap_or(u32::MAX));
        for node in &self.links {
            for level in node {
                w.put_u32(level.len() as u32);
                w.put_u32_slice(level);
            }
        }
        w.put_u64(self.data.len() as u64);
        w.put_f32_slice(&self.data);
    }

    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<MultiIndex> {
        let (_version, payload) = crate::fileio::unframe(bytes, MULTI_MAGIC, MULTI_FORMAT_VERSION, name)?;
        let mut r = ByteReader::new(payload).with_name(name);
        let bad = |what: &str| Error::corrupt(format!("{}: {}", name, what));
        let dim = r.get_u32()? as usize;
        let distance = Distance::from_code(r.get_u8()?).ok_or_else(|| bad("unknown distance code"))?;
        let mut config = MultiConfig::new(dim, distance);
        config.datatype = match r.get_u8()? {
            0 => Datatype::Float32,
            1 => Datatype::Float16,
            2 => Datatype::Uint8,
            _ => return Err(bad("unknown datatype code")),
        };
        config.flat = match r.get_u8()? {
            0 => false,
            1 => true,
            _ => return Err(bad("bad flat flag")),
        };
        config.m = r.get_u32()? as usize;
        config.ef_construct = r.get_u32()? as usize;
        config.seed = r.get_u64()?;
        let mut idx = MultiIndex::new(config).map_err(|e| bad(&e.message))?;
        idx.rng = SplitMix64::new(r.get_u64()?);
        let n = r.get_usize()?;
        if n > payload.len() {
            return Err(bad("slot count larger than the file"));
        }
        let mut labels = Vec::with_capacity(n);
        for _ in 0..n {
            labels.push(r.get_u64()?);
        }
        let counts = r.get_u32_vec(n)?;
        let deleted: Vec<bool> = r.get_bytes(n)?.iter().map(|&b| b != 0).collect();
        let levels = r.get_bytes(n)?.to_vec();
        let entry = r.get_u32()?;
        let mut links = Vec::with_capacity(n);
        for i in 0..n {
            let nl = if idx.config.flat { 0 } else { levels[i] as usize + 1 };
            let mut node = Vec::with_capacity(nl);
            for _ in 0..nl {
                let len = r.get_u32()? as usize;
                let l = r.get_u32_vec(len)?;
                if l.iter().any(|&x| x as usize >= n) {
                    return Err(bad("a link out of range"));
                }
                node.push(l);
            }
            links.push(node);
        }
        let dlen = r.get_usize()?;
        let data = r.get_f32_vec(dlen)?;
        r.finish()?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        if total * dim != data.len() || counts.iter().any(|&c| c == 0) {
            return Err(bad("vector counts do not match the stored vectors"));
        }
        let mut at = 0u64;
        for &c in &counts {
            idx.starts.push(at);
            at += c as u64;
        }
        if n > 0 && !idx.config.flat && (entry as usize >= n) {
            return Err(bad("entry point out of range"));
        }
        idx.entry = if n == 0 || idx.config.flat { None } else { Some(entry) };
        for i in 0..n {
            if deleted[i] {
                idx.deleted_count += 1;
            } else if idx.label_map.insert(labels[i], i as u32).is_some() {
                return Err(bad("a label appears in more than one live slot"));
            }
        }
        idx.labels = labels;
        idx.counts = counts;
        idx.deleted = deleted;
        idx.levels = levels;
        idx.links = links;
        idx.data = data;
        Ok(idx)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        crate::fileio::atomic_write(path, &self.to_bytes())
    }

    pub fn load(path: &Path) -> Result<MultiIndex> {
        let bytes = std::fs::read(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::new(ErrorKind::NotFound, format!("{}: no such file", path.display()))
            } else {
                Error::new(ErrorKind::Io, format!("read {}: {}", path.display(), e))
            }
        })?;
        MultiIndex::from_bytes(&bytes, &path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaussian(n: usize, seed: u64) -> Vec<f32> {
        let mut r = SplitMix64::new(seed);
        (0..n).map(|_| r.next_gaussian()).collect()
    }

    /// MaxSim written out in f64, independent of the index.
    fn brute(dist: Distance, d: usize, q: &[f32], docs: &[(u64, Vec<f32>)], k: usize) -> Vec<(u64, f64)> {
        let norm = |v: &[f32]| -> Vec<f64> {
            let v: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
            if dist == Distance::Cosine {
                let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                v.iter().map(|x| x / n).collect()
            } else {
                v
            }
        };
        let mut all: Vec<(u64, f64)> = docs
            .iter()
            .map(|(l, doc)| {
                let s: f64 = q
                    .chunks(d)
                    .map(|qv| {
                        let qv = norm(qv);
                        doc.chunks(d).map(|dv| norm(dv).iter().zip(&qv).map(|(a, b)| a * b).sum::<f64>()).fold(f64::NEG_INFINITY, f64::max)
                    })
                    .sum();
                (*l, s)
            })
            .collect();
        all.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }

    #[test]
    fn max_sim_matches_brute_force_with_and_without_a_graph_and_after_save() {
        let d = 8;
        let mut r = SplitMix64::new(3);
        let docs: Vec<(u64, Vec<f32>)> = (0..400u64).map(|l| (l * 3, gaussian(d * (1 + (r.next_u64() % 6) as usize), 100 + l))).collect();
        let labels: Vec<u64> = docs.iter().map(|x| x.0).collect();
        let counts: Vec<u32> = docs.iter().map(|x| (x.1.len() / d) as u32).collect();
        let flat: Vec<f32> = docs.iter().flat_map(|x| x.1.clone()).collect();
        for dist in [Distance::Dot, Distance::Cosine] {
            for graph in [false, true] {
                let mut cfg = MultiConfig::new(d, dist);
                cfg.flat = !graph;
                let mut idx = MultiIndex::new(cfg).unwrap();
                idx.add(&labels, &flat, &counts).unwrap();
                let back = MultiIndex::from_bytes(&idx.to_bytes(), "t").unwrap();
                let mut hits = 0;
                for qi in 0..10u64 {
                    let q = gaussian(d * (1 + qi as usize % 4), 900 + qi);
                    let truth = brute(dist, d, &q, &docs, 5);
                    let exact = idx.search(&q, 5, None, true, None).unwrap();
                    for (g, t) in exact.iter().zip(&truth) {
                        assert_eq!(g.0, t.0);
                        assert!((f64::from(g.1) - t.1).abs() < 1e-3 * t.1.abs().max(1.0), "{} vs {}", g.1, t.1);
                    }
                    let got = idx.search(&q, 5, Some(100), false, None).unwrap();
                    hits += got.iter().filter(|g| truth.iter().any(|t| t.0 == g.0)).count();
                    assert_eq!(back.search(&q, 5, Some(100), false, None).unwrap(), got);
                    let allow: Vec<u64> = labels.iter().cloned().filter(|l| l % 2 == 0).collect();
                    let filtered = idx.search(&q, 5, None, false, Some(&allow)).unwrap();
                    let docs_even: Vec<(u64, Vec<f32>)> = docs.iter().filter(|x| x.0 % 2 == 0).cloned().collect();
                    let t2 = brute(dist, d, &q, &docs_even, 5);
                    assert_eq!(filtered.iter().map(|x| x.0).collect::<Vec<_>>(), t2.iter().map(|x| x.0).collect::<Vec<_>>());
                }
                assert!(hits >= 45, "{:?} graph={} recall {}/50", dist, graph, hits);
            }
        }
    }

    #[test]
    fn export_live_from_pages_concatenate_to_export_live() {
        let d = 3;
        let mut idx = MultiIndex::new(MultiConfig::new(d, Distance::Dot)).unwrap();
        assert_eq!(idx.export_live_from(0, 4).unwrap(), (vec![], vec![], vec![], 0));
        let n = 60u64;
        let labels: Vec<u64> = (0..n).map(|x| x + 100).collect();
        let counts: Vec<u32> = (0..n).map(|x| (x % 4 + 1) as u32).collect();
        let total: u32 = counts.iter().sum();
        idx.add(&labels, &gaussian(total as usize * d, 8), &counts).unwrap();
        idx.delete(&[100, 101, 102, 110, 140, 141, 142, 143, 144, 145, 146]);
        idx.add(&[103], &[1.0, 2.0, 3.0], &[1]).unwrap();
        let whole = idx.export_live();
        for page in [1usize, 5, 100] {
            let (mut ls, mut vs, mut cs, mut from) = (Vec::new(), Vec::new(), Vec::new(), 0);
            loop {
                let (l, v, c, next) = idx.export_live_from(from, page).unwrap();
                assert!(l.len() <= page);
                assert_eq!(c.len(), l.len());
                assert_eq!(v.len(), c.iter().sum::<u32>() as usize * d);
                ls.extend(l.iter().cloned());
                vs.extend(v);
                cs.extend(c);
                from = next;
                if l.len() < page {
                    assert_eq!(next, idx.slots());
                    break;
                }
            }
            assert_eq!((ls, vs, cs), whole.clone(), "page {}", page);
        }
        assert_eq!(idx.export_live_from(0, 0).unwrap_err().code(), "QUIVER_INVALID_ARGUMENT");
        assert_eq!(idx.export_live_from(idx.slots() + 1, 1).unwrap_err().code(), "QUIVER_INVALID_ARGUMENT");
    }

    #[test]
    fn upserts_deletes_compact_and_bad_input() {
        let d = 4;
        let mut idx = MultiIndex::new(MultiConfig::new(d, Distance::Dot)).unwrap();
        idx.add(&[1, 2], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0], &[2, 1]).unwrap();
        assert_eq!(idx.get_vector(1).unwrap().len(), 8);
        assert_eq!(idx.search(&[0.0, 0.0, 2.0, 0.0], 1, None, true, None).unwrap(), vec![(2, 2.0)]);
        // Replace 2, delete 1.
        idx.add(&[2], &[0.0, 3.0, 0.0, 0.0], &[1]).unwrap();
        assert_eq!(idx.delete(&[1, 7]), 1);
        assert_eq!(idx.len(), 1);
        assert_eq!(idx.search(&[0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], 5, None, true, None).unwrap(), vec![(2, 3.0)]);
        idx.compact().unwrap();
        assert_eq!(idx.slots(), 1);
        assert_eq!(idx.add(&[3], &[1.0; 4], &[0]).unwrap_err().code(), "QUIVER_INVALID_ARGUMENT");
        assert_eq!(idx.add(&[3], &[1.0; 3], &[1]).unwrap_err().code(), "QUIVER_DIMENSION_MISMATCH");
        assert_eq!(idx.search(&[1.0; 3], 1, None, true, None).unwrap_err().code(), "QUIVER_DIMENSION_MISMATCH");
        assert!(MultiIndex::new(MultiConfig::new(4, Distance::Euclid)).is_err());
        let mut bytes = idx.to_bytes();
        let l = bytes.len();
        bytes[l - 6] ^= 1;
        assert_eq!(MultiIndex::from_bytes(&bytes, "x").err().unwrap().code(), "QUIVER_CORRUPT");
    }
}
