//! The sparse index (quiver_core::sparse) for JavaScript: the same async-task style as
//! the dense index (every call that touches the index runs on the libuv pool, inputs
//! are copied out of their typed arrays before the task is queued).

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use napi::bindgen_prelude::{AsyncTask, BigUint64Array, Float32Array, Uint32Array};
use napi::Env;
use napi_derive::napi;

use quiver_core::sparse::{SparseIndex, SparseSearch, SparseVector};
use quiver_core::{Datatype, Error as CoreError, ErrorKind};

use super::{closed, count_arg, count_of, engine_error, search_result, unit, CoreResult, Job, NativeSearchResult};

type SharedSparse = Arc<RwLock<SparseIndex>>;

fn poisoned() -> CoreError {
    CoreError::new(ErrorKind::Closed, "sparse index is unusable after an internal error")
}

fn read(i: &SharedSparse) -> CoreResult<RwLockReadGuard<'_, SparseIndex>> {
    i.read().map_err(|_| poisoned())
}

fn write(i: &SharedSparse) -> CoreResult<RwLockWriteGuard<'_, SparseIndex>> {
    i.write().map_err(|_| poisoned())
}

#[napi(object)]
pub struct NativeSparseSearchOptions {
    pub k: f64,
    pub allow: Option<BigUint64Array>,
    pub idf: Option<bool>,
    pub exact: Option<bool>,
}

/// Stored sparse vectors, flat: vector `i` of `labels` is entries `offsets[i]..offsets[i + 1]`.
#[napi(object)]
pub struct NativeSparseBatch {
    pub labels: BigUint64Array,
    pub offsets: Uint32Array,
    pub indices: Uint32Array,
    pub values: Float32Array,
}

#[napi(object)]
pub struct NativeSparseStats {
    pub count: f64,
    pub entries: f64,
    pub dims: f64,
    pub total_bytes: f64,
    pub full_scan_threshold: f64,
    pub datatype: String,
}

fn batch_of((labels, offsets, indices, values): (Vec<u64>, Vec<u32>, Vec<u32>, Vec<f32>)) -> NativeSparseBatch {
    NativeSparseBatch {
        labels: BigUint64Array::new(labels),
        offsets: Uint32Array::new(offsets),
        indices: Uint32Array::new(indices),
        values: Float32Array::new(values),
    }
}

fn labels_of(v: Vec<u64>) -> BigUint64Array {
    BigUint64Array::new(v)
}

#[napi]
pub struct NativeSparseIndex {
    /// None once closed (a RefCell so `close` takes `&self`: see `NativeIndex::inner`).
    inner: RefCell<Option<SharedSparse>>,
}

impl NativeSparseIndex {
    fn wrap(index: SparseIndex) -> NativeSparseIndex {
        NativeSparseIndex { inner: RefCell::new(Some(Arc::new(RwLock::new(index)))) }
    }

    fn shared(&self) -> CoreResult<SharedSparse> {
        self.inner.borrow().clone().ok_or_else(|| closed("sparse index"))
    }
}

#[napi]
impl NativeSparseIndex {
    /// `full_scan_threshold`: filtered searches allowing fewer labels than this score
    /// the allowed documents directly. `datatype`: float32, float16 or uint8, the
    /// element type of the stored values.
    #[napi(constructor)]
    pub fn new(env: Env, full_scan_threshold: f64, datatype: String) -> napi::Result<Self> {
        count_arg("fullScanThreshold", full_scan_threshold)
            .and_then(|t| {
                let dt = Datatype::parse(&datatype)
                    .ok_or_else(|| CoreError::new(ErrorKind::InvalidArgument, format!("unknown datatype {:?}", datatype)))?;
                Ok(NativeSparseIndex::wrap(SparseIndex::with_datatype(t, dt)))
            })
            .map_err(|e| engine_error(&env, e))
    }

    /// Inserts or replaces documents (see NativeSparseBatch for the layout).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn upsert(&self, labels: BigUint64Array, offsets: Uint32Array, indices: Uint32Array, values: Float32Array) -> AsyncTask<Job<(), ()>> {
        let index = match self.shared() {
            Ok(i) => i,
            Err(e) => return Job::fail(e, unit),
        };
        let (labels, offsets, indices, values) = (labels.to_vec(), offsets.to_vec(), indices.to_vec(), values.to_vec());
        Job::new(move || write(&index)?.upsert_batch(&labels, &offsets, &indices, &values), unit)
    }

    /// Removes documents; resolves with how many existed.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn delete(&self, labels: BigUint64Array) -> AsyncTask<Job<usize, u32>> {
        let index = match self.shared() {
            Ok(i) => i,
            Err(e) => return Job::fail(e, count_of),
        };
        let labels = labels.to_vec();
        Job::new(
            move || {
                let mut index = write(&index)?;
                Ok(labels.iter().filter(|&&l| index.remove(l)).count())
            },
            count_of,
        )
    }

    #[napi(ts_return_type = "Promise<NativeSearchResult>")]
    pub fn search(&self, indices: Uint32Array, values: Float32Array, options: NativeSparseSearchOptions) -> AsyncTask<Job<(Vec<u64>, Vec<f32>, f64), NativeSearchResult>> {
        let prepared = self.shared().and_then(|i| {
            let k = count_arg("k", options.k)?;
            let q = SparseVector::new(indices.to_vec(), values.to_vec())?;
            Ok((i, k, q))
        });
        let (index, k, q) = match prepared {
            Ok(v) => v,
            Err(e) => return Job::fail(e, search_result),
        };
        let p = SparseSearch {
            k,
            allow: options.allow.as_ref().map(|a| a.to_vec()),
            idf: options.idf.unwrap_or(false),
            exact: options.exact.unwrap_or(false),
        };
        Job::new(
            move || {
                let index = read(&index)?;
                let started = std::time::Instant::now();
                let hits = index.search(&q, &p);
                let us = started.elapsed().as_secs_f64() * 1e6;
                let (labels, scores): (Vec<u64>, Vec<f32>) = hits.into_iter().unzip();
                Ok((labels, scores, us))
            },
            search_result,
        )
    }

    /// The stored vectors of those of `labels` that are present.
    #[napi(ts_return_type = "Promise<NativeSparseBatch>")]
    pub fn get(&self, labels: BigUint64Array) -> AsyncTask<Job<(Vec<u64>, Vec<u32>, Vec<u32>, Vec<f32>), NativeSparseBatch>> {
        let index = match self.shared() {
            Ok(i) => i,
            Err(e) => return Job::fail(e, batch_of),
        };
        let labels = labels.to_vec();
        Job::new(move || Ok(read(&index)?.get_batch(&labels)), batch_of)
    }

    /// Every stored label, ascending.
    #[napi(ts_return_type = "Promise<BigUint64Array>")]
    pub fn labels(&self) -> AsyncTask<Job<Vec<u64>, BigUint64Array>> {
        match self.shared() {
            Ok(index) => Job::new(move || Ok(read(&index)?.labels()), labels_of),
            Err(e) => Job::fail(e, labels_of),
        }
    }

    /// Writes the index atomically (temp file, fsync, rename, fsync dir), checksummed.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn save(&self, path: String) -> AsyncTask<Job<(), ()>> {
        match self.shared() {
            Ok(index) => Job::new(move || read(&index)?.save(&PathBuf::from(path)), unit),
            Err(e) => Job::fail(e, unit),
        }
    }

    /// Counters (waits for a running write; sparse writes are short).
    #[napi]
    pub fn stats(&self, env: Env) -> napi::Result<NativeSparseStats> {
        let s = self
            .shared()
            .and_then(|i| {
                let g = read(&i)?;
                Ok((g.stats(), g.full_scan_threshold(), g.datatype()))
            })
            .map_err(|e| engine_error(&env, e))?;
        Ok(NativeSparseStats {
            count: s.0.count as f64,
            entries: s.0.entries as f64,
            dims: s.0.dims as f64,
            total_bytes: s.0.total_bytes as f64,
            full_scan_threshold: s.1 as f64,
            datatype: s.2.name().to_string(),
        })
    }

    #[napi]
    pub fn close(&self) {
        self.inner.borrow_mut().take();
    }
}

/// Reads a sparse index file written by `NativeSparseIndex.save`.
#[napi(ts_return_type = "Promise<NativeSparseIndex>")]
pub fn load_sparse_index(path: String) -> AsyncTask<Job<SparseIndex, NativeSparseIndex>> {
    Job::new(move || SparseIndex::load(&PathBuf::from(path)), NativeSparseIndex::wrap)
}

