//! The multivector index (quiver_core::multi) for JavaScript: lists of vectors per
//! label, scored by MaxSim. Same conventions as `NativeIndex`: every call that does
//! work is an async task on the libuv pool, inputs are copied before it is queued, and
//! engine errors reach JavaScript with their stable `code`.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use napi::bindgen_prelude::{AsyncTask, BigInt, BigUint64Array, Float32Array, Uint32Array};
use napi::Env;
use napi_derive::napi;

use quiver_core::multi::{MultiConfig, MultiIndex};
use quiver_core::{Datatype, Distance, Error as CoreError, ErrorKind};

use crate::{closed, count_arg, engine_error, invalid, read, search_result, u64_arg, unit, vector_of, write_job, CoreResult, Job, NativeIndexOptions, NativeSearchOptions, NativeSearchResult};

type SharedMulti = Arc<RwLock<MultiIndex>>;

#[napi(object)]
pub struct NativeMultiStats {
    pub dim: f64,
    pub distance: String,
    pub count: f64,
    pub slots: f64,
    pub deleted: f64,
    /// Vectors stored over all lists.
    pub vectors: f64,
    pub vector_bytes: f64,
    pub graph_bytes: f64,
    pub total_bytes: f64,
    pub flat: bool,
    pub datatype: String,
}

fn stats_of(i: &MultiIndex) -> NativeMultiStats {
    let c = i.config();
    NativeMultiStats {
        dim: c.dim as f64,
        distance: c.distance.name().to_string(),
        count: i.len() as f64,
        slots: i.slots() as f64,
        deleted: i.deleted_count() as f64,
        vectors: i.vector_count() as f64,
        vector_bytes: i.vector_bytes() as f64,
        graph_bytes: i.graph_bytes() as f64,
        total_bytes: i.total_bytes() as f64,
        flat: c.flat,
        datatype: c.datatype.name().to_string(),
    }
}

/// Live labels, their lists (flat) and each list's vector count, in slot order.
#[napi(object)]
pub struct NativeLiveMulti {
    pub labels: BigUint64Array,
    pub vectors: Float32Array,
    pub counts: Uint32Array,
}

fn live_multi((labels, vectors, counts): (Vec<u64>, Vec<f32>, Vec<u32>)) -> NativeLiveMulti {
    NativeLiveMulti { labels: BigUint64Array::new(labels), vectors: Float32Array::new(vectors), counts: Uint32Array::new(counts) }
}

#[napi(object)]
pub struct NativeLiveMultiPage {
    pub labels: BigUint64Array,
    pub vectors: Float32Array,
    pub counts: Uint32Array,
    pub next: f64,
}

fn live_multi_page((labels, vectors, counts, next): (Vec<u64>, Vec<f32>, Vec<u32>, usize)) -> NativeLiveMultiPage {
    NativeLiveMultiPage { labels: BigUint64Array::new(labels), vectors: Float32Array::new(vectors), counts: Uint32Array::new(counts), next: next as f64 }
}

fn multi_config(o: &NativeIndexOptions) -> CoreResult<MultiConfig> {
    let distance = Distance::parse(&o.distance).ok_or_else(|| invalid(format!("unknown distance {:?}", o.distance)))?;
    let mut c = MultiConfig::new(count_arg("dim", o.dim)?, distance);
    if let Some(m) = o.m {
        c.m = count_arg("m", m)?;
    }
    if let Some(ef) = o.ef_construct {
        c.ef_construct = count_arg("efConstruct", ef)?;
    }
    if let Some(seed) = o.seed {
        c.seed = count_arg("seed", seed)? as u64;
    }
    c.flat = o.flat.unwrap_or(false);
    if let Some(dt) = o.datatype.as_deref() {
        c.datatype = Datatype::parse(dt).ok_or_else(|| invalid(format!("unknown datatype {:?}", dt)))?;
    }
    match o.quantization.as_deref() {
        None | Some("none") => {}
        Some(_) => return Err(CoreError::new(ErrorKind::Unsupported, "multivector indexes are not quantized")),
    }
    Ok(c)
}

/// A multivector index owned by JavaScript (see `NativeIndex` for the lifetime rules).
#[napi]
pub struct NativeMultiIndex {
    /// None once closed (a RefCell so `close` takes `&self`: see `NativeIndex::inner`).
    inner: RefCell<Option<SharedMulti>>,
    cache: Arc<Mutex<NativeMultiStats>>,
    dim: u32,
    distance: &'static str,
}

impl NativeMultiIndex {
    fn wrap(index: MultiIndex) -> NativeMultiIndex {
        NativeMultiIndex {
            dim: index.config().dim as u32,
            distance: index.config().distance.name(),
            cache: Arc::new(Mutex::new(stats_of(&index))),
            inner: RefCell::new(Some(Arc::new(RwLock::new(index)))),
        }
    }

    fn shared(&self) -> CoreResult<SharedMulti> {
        self.inner.borrow().clone().ok_or_else(|| closed("index"))
    }
}

fn remember(cache: &Arc<Mutex<NativeMultiStats>>, index: &MultiIndex) {
    let s = stats_of(index);
    match cache.lock() {
        Ok(mut c) => *c = s,
        Err(p) => *p.into_inner() = s,
    }
}

fn clone_stats(s: &NativeMultiStats) -> NativeMultiStats {
    NativeMultiStats {
        dim: s.dim,
        distance: s.distance.clone(),
        count: s.count,
        slots: s.slots,
        deleted: s.deleted,
        vectors: s.vectors,
        vector_bytes: s.vector_bytes,
        graph_bytes: s.graph_bytes,
        total_bytes: s.total_bytes,
        flat: s.flat,
        datatype: s.datatype.clone(),
    }
}

#[napi]
impl NativeMultiIndex {
    #[napi(constructor)]
    pub fn new(env: Env, options: NativeIndexOptions) -> napi::Result<Self> {
        multi_config(&options).and_then(MultiIndex::new).map(NativeMultiIndex::wrap).map_err(|e| engine_error(&env, e))
    }

    #[napi(getter)]
    pub fn dim(&self) -> u32 {
        self.dim
    }

    #[napi(getter)]
    pub fn distance(&self) -> String {
        self.distance.to_string()
    }

    /// Inserts or replaces lists: `counts[j]` vectors of `vectors` belong to `labels[j]`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn add(&self, labels: BigUint64Array, vectors: Float32Array, counts: Uint32Array) -> AsyncTask<Job<(), ()>> {
        let (labels, vectors, counts) = (labels.to_vec(), vectors.to_vec(), counts.to_vec());
        write_job(self.shared(), &self.cache, remember, move |index| index.add(&labels, &vectors, &counts), unit)
    }

    #[napi(ts_return_type = "Promise<number>")]
    pub fn delete(&self, labels: BigUint64Array) -> AsyncTask<Job<usize, u32>> {
        fn count(n: usize) -> u32 {
            n as u32
        }
        let labels = labels.to_vec();
        write_job(self.shared(), &self.cache, remember, move |index| Ok(index.delete(&labels)), count)
    }

    /// `query` holds the query's vectors, flat (a positive multiple of dim values).
    #[napi(ts_return_type = "Promise<NativeSearchResult>")]
    pub fn search(&self, query: Float32Array, options: NativeSearchOptions) -> AsyncTask<Job<(Vec<u64>, Vec<f32>, f64), NativeSearchResult>> {
        let prepared = self.shared().and_then(|i| {
            let k = count_arg("k", options.k)?;
            let ef = match options.ef {
                Some(e) => Some(count_arg("ef", e)?),
                None => None,
            };
            Ok((i, k, ef))
        });
        let (index, k, ef) = match prepared {
            Ok(v) => v,
            Err(e) => return Job::fail(e, search_result),
        };
        let exact = options.exact.unwrap_or(false);
        let query = query.to_vec();
        let allow = options.allow.as_ref().map(|a| a.to_vec());
        Job::new(
            move || {
                let index = read(&index)?;
                let started = std::time::Instant::now();
                let hits = index.search(&query, k, ef, exact, allow.as_deref())?;
                let us = started.elapsed().as_secs_f64() * 1e6;
                let (l, s): (Vec<u64>, Vec<f32>) = hits.into_iter().unzip();
                Ok((l, s, us))
            },
            search_result,
        )
    }

    #[napi(ts_return_type = "Promise<Float32Array | null>")]
    pub fn get_vector(&self, label: BigInt) -> AsyncTask<Job<Option<Vec<f32>>, Option<Float32Array>>> {
        let prepared = self.shared().and_then(|i| Ok((i, u64_arg("label", &label)?)));
        let (index, label) = match prepared {
            Ok(v) => v,
            Err(e) => return Job::fail(e, vector_of),
        };
        Job::new(move || Ok(read(&index)?.get_vector(label)), vector_of)
    }

    #[napi(ts_return_type = "Promise<NativeLiveMulti>")]
    pub fn export_live(&self) -> AsyncTask<Job<(Vec<u64>, Vec<f32>, Vec<u32>), NativeLiveMulti>> {
        match self.shared() {
            Ok(index) => Job::new(move || Ok(read(&index)?.export_live()), live_multi),
            Err(e) => Job::fail(e, live_multi),
        }
    }

    /// One page of exportLive (see the plain index's exportLiveFrom): up to `maxCount` points.
    #[napi(ts_return_type = "Promise<NativeLiveMultiPage>")]
    pub fn export_live_from(&self, from: f64, max_count: f64) -> AsyncTask<Job<(Vec<u64>, Vec<f32>, Vec<u32>, usize), NativeLiveMultiPage>> {
        let prepared = self.shared().and_then(|i| Ok((i, count_arg("from", from)?, count_arg("maxCount", max_count)?)));
        let (index, from, max_count) = match prepared {
            Ok(v) => v,
            Err(e) => return Job::fail(e, live_multi_page),
        };
        Job::new(move || read(&index)?.export_live_from(from, max_count), live_multi_page)
    }

    #[napi(ts_return_type = "Promise<BigUint64Array>")]
    pub fn live_labels(&self) -> AsyncTask<Job<Vec<u64>, BigUint64Array>> {
        match self.shared() {
            Ok(index) => Job::new(move || Ok(read(&index)?.live_labels()), BigUint64Array::new),
            Err(e) => Job::fail(e, BigUint64Array::new),
        }
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn compact(&self) -> AsyncTask<Job<(), ()>> {
        write_job(self.shared(), &self.cache, remember, |index| index.compact(), unit)
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn save(&self, path: String) -> AsyncTask<Job<(), ()>> {
        let index = match self.shared() {
            Ok(i) => i,
            Err(e) => return Job::fail(e, unit),
        };
        Job::new(move || read(&index)?.save(&PathBuf::from(path)), unit)
    }

    /// Counters as of now, or as of the last finished write while one runs. Never waits.
    #[napi]
    pub fn stats(&self, env: Env) -> napi::Result<NativeMultiStats> {
        let index = self.shared().map_err(|e| engine_error(&env, e))?;
        if let Ok(guard) = index.try_read() {
            remember(&self.cache, &guard);
        }
        let s = match self.cache.lock() {
            Ok(c) => clone_stats(&c),
            Err(p) => clone_stats(&p.into_inner()),
        };
        Ok(s)
    }

    #[napi]
    pub fn close(&self) {
        self.inner.borrow_mut().take();
    }
}

/// Reads a file written by `NativeMultiIndex.save`.
#[napi(ts_return_type = "Promise<NativeMultiIndex>")]
pub fn load_multi_index(path: String) -> AsyncTask<Job<MultiIndex, NativeMultiIndex>> {
    Job::new(move || MultiIndex::load(&PathBuf::from(path)), NativeMultiIndex::wrap)
}
