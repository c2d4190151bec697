//! quiver-node: the Node.js addon over quiver-core (napi-rs).
//!
//! Owns: turning JavaScript arguments into engine calls and engine results back into
//! typed arrays, and running every call that does real work (build, search, delete,
//! compact, save, load, every WAL call) as a napi async task on the libuv thread pool.
//! Must never: run engine work on the JavaScript thread, hold a JavaScript value on a
//! worker thread, or invent error codes — engine errors reach JavaScript as `Error`
//! objects whose `code` is the engine's stable code and whose message is the engine's.
//!
//! Inputs are copied out of their typed arrays before a task is queued, so JavaScript
//! may reuse or detach its buffers the moment a call returns.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

use napi::bindgen_prelude::{
    AsyncTask, BigInt, BigUint64Array, Buffer, Float32Array, ToNapiValue, TypeName, Unknown,
};
use napi::{sys, Env, Status, Task};
use napi_derive::napi;

mod sparse;

use quiver_core::wal::{Wal, WalOptions};
use quiver_core::{
    Distance, Error as CoreError, ErrorKind, Index, IndexConfig, Quantization, SearchParams,
};

type CoreResult<T> = std::result::Result<T, CoreError>;

mod multi;

// ---------------------------------------------------------------------------------
// Errors

/// Builds a JavaScript `Error` with `code` set to `code` and wraps it so napi-rs
/// throws (or rejects with) that very object.
fn js_error(env: &Env, code: &str, message: &str) -> napi::Error {
    let raw = env.raw();
    let mut js_code = std::ptr::null_mut();
    let mut js_message = std::ptr::null_mut();
    let mut js_err = std::ptr::null_mut();
    // SAFETY: `raw` is the live env of the JavaScript thread we are called on, and the
    // strings outlive the calls that copy them.
    let ok = unsafe {
        sys::napi_create_string_utf8(raw, code.as_ptr().cast(), code.len() as isize, &mut js_code)
            == sys::Status::napi_ok
            && sys::napi_create_string_utf8(
                raw,
                message.as_ptr().cast(),
                message.len() as isize,
                &mut js_message,
            ) == sys::Status::napi_ok
            && sys::napi_create_error(raw, js_code, js_message, &mut js_err) == sys::Status::napi_ok
    };
    if !ok || js_err.is_null() {
        return napi::Error::new(Status::GenericFailure, format!("{}: {}", code, message));
    }
    // SAFETY: `js_err` was just created in `raw`.
    napi::Error::from(unsafe { Unknown::from_raw_unchecked(raw, js_err) })
}

fn engine_error(env: &Env, e: CoreError) -> napi::Error {
    js_error(env, e.code(), &e.message)
}

fn invalid(message: impl Into<String>) -> CoreError {
    CoreError::new(ErrorKind::InvalidArgument, message)
}

fn closed(what: &str) -> CoreError {
    CoreError::new(ErrorKind::Closed, format!("{} is closed", what))
}

/// A JavaScript number that must be a non-negative integer (napi's own u32 conversion
/// would silently wrap -1 or truncate 2.5).
fn count_arg(name: &str, v: f64) -> CoreResult<usize> {
    if !v.is_finite() || v < 0.0 || v.fract() != 0.0 || v > 9_007_199_254_740_991.0 {
        return Err(invalid(format!(
            "{} must be a non-negative integer, got {}",
            name, v
        )));
    }
    Ok(v as usize)
}

fn u64_arg(name: &str, v: &BigInt) -> CoreResult<u64> {
    let (negative, value, lossless) = v.get_u64();
    if negative || !lossless {
        return Err(invalid(format!(
            "{} must fit in an unsigned 64-bit integer",
            name
        )));
    }
    Ok(value)
}

// ---------------------------------------------------------------------------------
// One generic async task: a closure run on the libuv pool, then a conversion on the
// JavaScript thread.

pub struct Job<T: Send + 'static, J> {
    work: Option<Box<dyn FnOnce() -> CoreResult<T> + Send>>,
    finish: fn(T) -> J,
}

impl<T: Send + 'static, J> Job<T, J> {
    fn new(
        work: impl FnOnce() -> CoreResult<T> + Send + 'static,
        finish: fn(T) -> J,
    ) -> AsyncTask<Self>
    where
        J: ToNapiValue + TypeName,
    {
        AsyncTask::new(Job {
            work: Some(Box::new(work)),
            finish,
        })
    }

    /// A job that rejects without touching the pool's real work (bad argument, closed).
    fn fail(e: CoreError, finish: fn(T) -> J) -> AsyncTask<Self>
    where
        J: ToNapiValue + TypeName,
    {
        Self::new(move || Err(e), finish)
    }
}

// The pool threads that run engine work are put in SCHED_BATCH once, on their first
// job. A normal thread woken on a busy 2-core machine preempts the thread that woke it:
// the event loop, queueing a search, then sat out the whole search (measured 50-80 us
// per queued call in bench/rest). A batch thread never preempts on wake-up; it runs
// when a core is free. Threads the engine spawns for a build inherit the policy.
#[cfg(target_os = "linux")]
fn yield_on_wakeup() {
    use std::cell::Cell;
    #[repr(C)]
    struct SchedParam {
        sched_priority: i32,
    }
    extern "C" {
        fn sched_setscheduler(pid: i32, policy: i32, param: *const SchedParam) -> i32;
    }
    const SCHED_BATCH: i32 = 3;
    thread_local!(static DONE: Cell<bool> = Cell::new(false));
    DONE.with(|done| {
        if !done.get() {
            done.set(true);
            let param = SchedParam { sched_priority: 0 };
            // pid 0 is the calling thread. Failure only costs the optimisation.
            unsafe {
                sched_setscheduler(0, SCHED_BATCH, &param);
            }
        }
    });
}

#[cfg(not(target_os = "linux"))]
fn yield_on_wakeup() {}

// SAFETY: `work` is Send; `finish` is a plain fn pointer.
unsafe impl<T: Send + 'static, J> Send for Job<T, J> {}

impl<T: Send + 'static, J: ToNapiValue + TypeName> Task for Job<T, J> {
    type Output = CoreResult<T>;
    type JsValue = J;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        yield_on_wakeup();
        let work = match self.work.take() {
            Some(w) => w,
            None => return Err(napi::Error::new(Status::GenericFailure, "task ran twice")),
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
            Ok(result) => Ok(result),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_string());
                Err(napi::Error::new(
                    Status::GenericFailure,
                    format!("internal engine error: {}", what),
                ))
            }
        }
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<Self::JsValue> {
        match output {
            Ok(v) => Ok((self.finish)(v)),
            Err(e) => Err(engine_error(&env, e)),
        }
    }
}

// ---------------------------------------------------------------------------------
// Index

type Shared = Arc<RwLock<Index>>;

/// Stats as of the last finished write, for `stats()` calls that arrive while a
/// build holds the write lock: the JavaScript thread must never wait for a build.
type StatsCache = Arc<Mutex<quiver_core::IndexStats>>;

fn remember(cache: &StatsCache, index: &Index) {
    let s = index.stats();
    match cache.lock() {
        Ok(mut c) => *c = s,
        Err(p) => *p.into_inner() = s,
    }
}

/// A panic inside the engine poisons the lock; the index may then be half-updated, so
/// every later call fails with QUIVER_CLOSED instead of reading it.
fn read<I>(index: &Arc<RwLock<I>>) -> CoreResult<RwLockReadGuard<'_, I>> {
    index.read().map_err(|_| unusable())
}

fn write<I>(index: &Arc<RwLock<I>>) -> CoreResult<RwLockWriteGuard<'_, I>> {
    index.write().map_err(|_| unusable())
}

fn unusable() -> CoreError {
    CoreError::new(ErrorKind::Closed, "index is unusable after an internal error")
}

/// The shape of every call that changes an index (plain or multivector): take the
/// index (or the error that stops the call: closed, a bad argument), run `op` on the
/// pool under the write lock, then record the index's stats in `cache` — also after a
/// failed `op`, which may have changed part of the index — so `stats()` never waits.
fn write_job<I, C, T, J>(
    index: CoreResult<Arc<RwLock<I>>>,
    cache: &Arc<Mutex<C>>,
    remember: fn(&Arc<Mutex<C>>, &I),
    op: impl FnOnce(&mut I) -> CoreResult<T> + Send + 'static,
    finish: fn(T) -> J,
) -> AsyncTask<Job<T, J>>
where
    I: Send + Sync + 'static,
    C: Send + 'static,
    T: Send + 'static,
    J: ToNapiValue + TypeName,
{
    let index = match index {
        Ok(i) => i,
        Err(e) => return Job::fail(e, finish),
    };
    let cache = cache.clone();
    Job::new(
        move || {
            let mut index = write(&index)?;
            let result = op(&mut index);
            remember(&cache, &index);
            result
        },
        finish,
    )
}

#[napi(object)]
pub struct NativeIndexOptions {
    pub dim: f64,
    pub distance: String,
    pub m: Option<f64>,
    pub ef_construct: Option<f64>,
    pub full_scan_threshold_kb: Option<f64>,
    /// "none" | "scalar" | "binary"
    pub quantization: Option<String>,
    pub quantile: Option<f64>,
    pub seed: Option<f64>,
    /// Store vectors without graph links; every search is an exact scan.
    pub flat: Option<bool>,
    /// "float32" | "float16" | "uint8": the element type vectors are stored in.
    pub datatype: Option<String>,
    /// Quantized graph indexes: keep the f32 originals in this file (created empty,
    /// memory-mapped, appended to by every add) instead of in memory.
    pub originals_path: Option<String>,
}

#[napi(object)]
pub struct NativeSearchOptions {
    pub k: f64,
    pub ef: Option<f64>,
    pub exact: Option<bool>,
    pub allow: Option<BigUint64Array>,
    pub oversampling: Option<f64>,
    pub rescore: Option<bool>,
    pub ignore_quantization: Option<bool>,
}

/// `len` elements of `bytes_per` bytes from `data`, as a new V8-owned typed array of `kind`.
unsafe fn copied_typed_array(
    env: sys::napi_env,
    kind: sys::napi_typedarray_type,
    data: *const u8,
    len: usize,
    bytes_per: usize,
) -> napi::Result<sys::napi_value> {
    let mut buffer = std::ptr::null_mut();
    let mut underlying: *mut std::ffi::c_void = std::ptr::null_mut();
    let status = sys::napi_create_arraybuffer(env, len * bytes_per, &mut underlying, &mut buffer);
    if status != sys::Status::napi_ok {
        return Err(napi::Error::new(
            Status::GenericFailure,
            "could not allocate an ArrayBuffer",
        ));
    }
    if len > 0 {
        std::ptr::copy_nonoverlapping(data, underlying.cast::<u8>(), len * bytes_per);
    }
    let mut out = std::ptr::null_mut();
    let status = sys::napi_create_typedarray(env, kind, len, buffer, 0, &mut out);
    if status != sys::Status::napi_ok {
        return Err(napi::Error::new(
            Status::GenericFailure,
            "could not create a typed array",
        ));
    }
    Ok(out)
}

/// A `Vec` handed to JavaScript as a typed array in an ArrayBuffer V8 owns (a copy), for
/// search hits. napi-rs hands a `Vec` over as an external ArrayBuffer with a finalizer;
/// for the few dozen bytes of one query's hits, at thousands of queries a second, the
/// finalizers (run on the event loop after each GC) cost more than the copy.
macro_rules! copied_typed_array_type {
    ($name:ident, $elem:ty, $kind:expr, $js:literal) => {
        pub struct $name(Vec<$elem>);

        impl ToNapiValue for $name {
            unsafe fn to_napi_value(
                env: sys::napi_env,
                val: Self,
            ) -> napi::Result<sys::napi_value> {
                copied_typed_array(
                    env,
                    $kind,
                    val.0.as_ptr().cast(),
                    val.0.len(),
                    std::mem::size_of::<$elem>(),
                )
            }
        }

        impl TypeName for $name {
            fn type_name() -> &'static str {
                $js
            }
            fn value_type() -> napi::ValueType {
                napi::ValueType::Object
            }
        }
    };
}

copied_typed_array_type!(
    CopiedU64s,
    u64,
    sys::TypedarrayType::biguint64_array,
    "BigUint64Array"
);
copied_typed_array_type!(
    CopiedF32s,
    f32,
    sys::TypedarrayType::float32_array,
    "Float32Array"
);

#[napi(object, object_from_js = false)]
pub struct NativeSearchResult {
    #[napi(ts_type = "BigUint64Array")]
    pub labels: CopiedU64s,
    #[napi(ts_type = "Float32Array")]
    pub scores: CopiedF32s,
    /// Time the engine spent on this query, in microseconds, measured on the worker
    /// thread (without the hop to it and back, or the wait for a free thread).
    pub compute_us: f64,
}

/// Every live label and its stored vector (`labels.length * dim` values), in slot order.
#[napi(object)]
pub struct NativeLiveVectors {
    pub labels: BigUint64Array,
    pub vectors: Float32Array,
}

#[napi(object)]
pub struct NativeLivePage {
    pub labels: BigUint64Array,
    pub vectors: Float32Array,
    pub next: f64,
}

#[napi(object)]
pub struct NativeIndexStats {
    pub dim: f64,
    pub distance: String,
    pub count: f64,
    pub slots: f64,
    pub deleted: f64,
    pub vector_bytes: f64,
    pub original_bytes: f64,
    pub original_file_bytes: f64,
    pub graph_bytes: f64,
    /// Bytes of level-0 links read from the mapped graph file (0: graph in memory).
    pub graph_file_bytes: f64,
    pub total_bytes: f64,
    pub quantization: String,
    pub flat: bool,
    pub datatype: String,
}

fn config_from(o: &NativeIndexOptions) -> CoreResult<IndexConfig> {
    let distance = Distance::parse(&o.distance)
        .ok_or_else(|| invalid(format!("unknown distance {:?}", o.distance)))?;
    let mut c = IndexConfig::new(count_arg("dim", o.dim)?, distance);
    if let Some(m) = o.m {
        c.m = count_arg("m", m)?;
    }
    if let Some(ef) = o.ef_construct {
        c.ef_construct = count_arg("efConstruct", ef)?;
    }
    if let Some(kb) = o.full_scan_threshold_kb {
        c.full_scan_threshold_kb = count_arg("fullScanThresholdKb", kb)?;
    }
    if let Some(seed) = o.seed {
        c.seed = count_arg("seed", seed)? as u64;
    }
    c.flat = o.flat.unwrap_or(false);
    if let Some(dt) = o.datatype.as_deref() {
        c.datatype = quiver_core::Datatype::parse(dt).ok_or_else(|| invalid(format!("unknown datatype {:?}", dt)))?;
    }
    c.quantization = match o.quantization.as_deref() {
        None | Some("none") => Quantization::None,
        Some("scalar") => {
            let q = o.quantile.unwrap_or(quiver_core::hnsw::DEFAULT_SCALAR_QUANTILE as f64);
            Quantization::Scalar { quantile: q as f32 }
        }
        Some("binary") => Quantization::Binary,
        Some(other) => return Err(invalid(format!("unknown quantization {:?}", other))),
    };
    Ok(c)
}

fn params_from(o: &NativeSearchOptions) -> CoreResult<SearchParams> {
    let mut p = SearchParams::new(count_arg("k", o.k)?);
    if let Some(ef) = o.ef {
        p.ef = Some(count_arg("ef", ef)?);
    }
    p.exact = o.exact.unwrap_or(false);
    p.oversampling = o.oversampling.map(|os| os as f32);
    if let Some(r) = o.rescore {
        p.rescore = r;
    }
    if let Some(i) = o.ignore_quantization {
        p.ignore_quantization = i;
    }
    Ok(p)
}

fn threads_from(threads: Option<f64>) -> CoreResult<usize> {
    match threads {
        None => Ok(0),
        Some(t) => count_arg("threads", t),
    }
}

/// One query's hits in one V8-owned ArrayBuffer (a copy): the labels (u64), then the
/// scores (f32), then the engine's time in microseconds (f32); bindings/native.ts makes
/// the typed arrays over it. Used by the single-vector index's `search`, `searchNow` and
/// `searchRule`: one napi ArrayBuffer instead of an object, two ArrayBuffers and two typed
/// arrays, whose property definitions went through V8's slow path on every query.
pub struct PackedHits(Vec<u64>, Vec<f32>, f64);

impl ToNapiValue for PackedHits {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let PackedHits(labels, scores, compute_us) = val;
        let n = labels.len();
        if scores.len() != n {
            return Err(napi::Error::new(Status::GenericFailure, "internal engine error: hits with unequal labels and scores"));
        }
        let bytes = n * 12 + 4;
        let mut buffer = std::ptr::null_mut();
        let mut underlying: *mut std::ffi::c_void = std::ptr::null_mut();
        let status = sys::napi_create_arraybuffer(env, bytes, &mut underlying, &mut buffer);
        if status != sys::Status::napi_ok {
            return Err(napi::Error::new(Status::GenericFailure, "could not allocate an ArrayBuffer"));
        }
        let out = underlying.cast::<u8>();
        if n > 0 {
            std::ptr::copy_nonoverlapping(labels.as_ptr().cast::<u8>(), out, n * 8);
            std::ptr::copy_nonoverlapping(scores.as_ptr().cast::<u8>(), out.add(n * 8), n * 4);
        }
        let us = (compute_us as f32).to_ne_bytes();
        std::ptr::copy_nonoverlapping(us.as_ptr(), out.add(n * 12), 4);
        Ok(buffer)
    }
}

impl TypeName for PackedHits {
    fn type_name() -> &'static str {
        "ArrayBuffer"
    }
    fn value_type() -> napi::ValueType {
        napi::ValueType::Object
    }
}

fn packed_hits((labels, scores, compute_us): (Vec<u64>, Vec<f32>, f64)) -> PackedHits {
    PackedHits(labels, scores, compute_us)
}

fn search_result((labels, scores, compute_us): (Vec<u64>, Vec<f32>, f64)) -> NativeSearchResult {
    NativeSearchResult {
        labels: CopiedU64s(labels),
        scores: CopiedF32s(scores),
        compute_us,
    }
}

fn live_vectors((labels, vectors): (Vec<u64>, Vec<f32>)) -> NativeLiveVectors {
    NativeLiveVectors {
        labels: BigUint64Array::new(labels),
        vectors: Float32Array::new(vectors),
    }
}

fn live_page((labels, vectors, next): (Vec<u64>, Vec<f32>, usize)) -> NativeLivePage {
    NativeLivePage {
        labels: BigUint64Array::new(labels),
        vectors: Float32Array::new(vectors),
        next: next as f64,
    }
}

fn split(hits: Vec<(u64, f32)>) -> (Vec<u64>, Vec<f32>) {
    hits.into_iter().unzip()
}

/// One search, timed: its hits split into labels and scores, and the microseconds it took.
fn timed_search(
    index: &Index,
    query: &[f32],
    params: &SearchParams,
    allow: Option<&[u64]>,
) -> CoreResult<(Vec<u64>, Vec<f32>, f64)> {
    let started = std::time::Instant::now();
    let hits = index.search(query, params, allow)?;
    let us = started.elapsed().as_secs_f64() * 1e6;
    let (labels, scores) = split(hits);
    Ok((labels, scores, us))
}

fn unit(_: ()) {}

fn count_of(n: usize) -> u32 {
    n as u32
}

fn vector_of(v: Option<Vec<f32>>) -> Option<Float32Array> {
    v.map(Float32Array::new)
}

fn stats_of(s: quiver_core::IndexStats) -> NativeIndexStats {
    NativeIndexStats {
        dim: s.dim as f64,
        distance: s.distance.name().to_string(),
        count: s.count as f64,
        slots: s.slots as f64,
        deleted: s.deleted as f64,
        vector_bytes: s.vector_bytes as f64,
        original_bytes: s.original_bytes as f64,
        original_file_bytes: s.original_file_bytes as f64,
        graph_bytes: s.graph_bytes as f64,
        graph_file_bytes: s.graph_file_bytes as f64,
        total_bytes: s.total_bytes as f64,
        quantization: s.quantization.to_string(),
        flat: s.flat,
        datatype: s.datatype.to_string(),
    }
}

/// An HNSW index owned by JavaScript. Tasks hold their own `Arc`, so `close()` only
/// drops this handle's share: memory is freed as soon as in-flight tasks finish.
#[napi]
pub struct NativeIndex {
    /// None once closed. A RefCell, so `close` takes `&self`: napi-rs refuses a `&mut
    /// self` call while another call's borrow of the object is active (an async search
    /// in flight), and close() then threw instead of closing.
    inner: RefCell<Option<Shared>>,
    cache: StatsCache,
    dim: u32,
    distance: &'static str,
}

impl NativeIndex {
    fn wrap(index: Index) -> NativeIndex {
        let s = index.stats();
        NativeIndex {
            inner: RefCell::new(Some(Arc::new(RwLock::new(index)))),
            dim: s.dim as u32,
            distance: s.distance.name(),
            cache: Arc::new(Mutex::new(s)),
        }
    }

    fn shared(&self) -> CoreResult<Shared> {
        self.inner.borrow().clone().ok_or_else(|| closed("index"))
    }
}

#[napi]
impl NativeIndex {
    #[napi(constructor)]
    pub fn new(env: Env, options: NativeIndexOptions) -> napi::Result<Self> {
        config_from(&options)
            .and_then(Index::new)
            .and_then(|mut index| {
                if let Some(p) = options.originals_path.as_deref() {
                    index.move_originals_to_file(&PathBuf::from(p))?;
                }
                Ok(index)
            })
            .map(NativeIndex::wrap)
            .map_err(|e| engine_error(&env, e))
    }

    #[napi(getter)]
    pub fn dim(&self) -> u32 {
        self.dim
    }

    #[napi(getter)]
    pub fn distance(&self) -> String {
        self.distance.to_string()
    }

    /// Inserts or replaces vectors (`vectors.length == labels.length * dim`).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn add(
        &self,
        labels: BigUint64Array,
        vectors: Float32Array,
        threads: Option<f64>,
    ) -> AsyncTask<Job<(), ()>> {
        let (index, threads) = match self.shared().and_then(|i| Ok((i, threads_from(threads)?))) {
            Ok(v) => v,
            Err(e) => return Job::fail(e, unit),
        };
        let labels = labels.to_vec();
        let vectors = vectors.to_vec();
        write_job(Ok(index), &self.cache, remember, move |index| index.add(&labels, &vectors, threads), unit)
    }

    /// Marks labels deleted; resolves with how many existed.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn delete(&self, labels: BigUint64Array) -> AsyncTask<Job<usize, u32>> {
        let labels = labels.to_vec();
        write_job(self.shared(), &self.cache, remember, move |index| Ok(index.delete(&labels)), count_of)
    }

    /// Resolves with the hits packed in one ArrayBuffer (see `PackedHits`).
    #[napi(ts_return_type = "Promise<ArrayBuffer>")]
    pub fn search(
        &self,
        query: Float32Array,
        options: NativeSearchOptions,
    ) -> AsyncTask<Job<(Vec<u64>, Vec<f32>, f64), PackedHits>> {
        let prepared = self.shared().and_then(|i| Ok((i, params_from(&options)?)));
        let (index, params) = match prepared {
            Ok(v) => v,
            Err(e) => return Job::fail(e, packed_hits),
        };
        let query = query.to_vec();
        let allow = options.allow.as_ref().map(|a| a.to_vec());
        Job::new(
            move || {
                let index = read(&index)?;
                timed_search(&index, &query, &params, allow.as_deref())
            },
            packed_hits,
        )
    }

    /// The synchronous fast path of `search`: runs the search on the calling (JavaScript)
    /// thread and returns its result, or `null` without searching when a writer holds the
    /// index (the caller then takes the async path; the event loop never waits for a
    /// lock). bindings/native.ts calls it only for searches whose measured cost is below
    /// its bound and within a per-turn budget, so the event loop is never held long; the
    /// hop to the pool it saves is measured in bench/engine/percall.ts.
    #[napi(ts_return_type = "ArrayBuffer | null")]
    pub fn search_now(
        &self,
        env: Env,
        query: Float32Array,
        options: NativeSearchOptions,
    ) -> napi::Result<Option<PackedHits>> {
        let run = || -> CoreResult<Option<(Vec<u64>, Vec<f32>, f64)>> {
            let index = self.shared()?;
            let params = params_from(&options)?;
            let guard = match index.try_read() {
                Ok(g) => g,
                Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
                Err(std::sync::TryLockError::Poisoned(_)) => {
                    return Err(CoreError::new(
                        ErrorKind::Closed,
                        "index is unusable after an internal error",
                    ))
                }
            };
            let allow = options.allow.as_ref().map(|a| &a[..]);
            timed_search(&guard, &query, &params, allow).map(Some)
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
            Ok(Ok(v)) => Ok(v.map(packed_hits)),
            Ok(Err(e)) => Err(engine_error(&env, e)),
            Err(_) => Err(napi::Error::new(
                Status::GenericFailure,
                "internal engine error: panic in search",
            )),
        }
    }

    /// Search by a rule over examples (`examples` holds n * dim values; see
    /// `quiver_core::Rule` for their order): "best_score", "sum_scores", "discover" or
    /// "context"; the first `positives` examples are the positive ones of the two
    /// recommend rules.
    #[napi(ts_return_type = "Promise<ArrayBuffer>")]
    pub fn search_rule(
        &self,
        rule: String,
        positives: f64,
        examples: Float32Array,
        options: NativeSearchOptions,
    ) -> AsyncTask<Job<(Vec<u64>, Vec<f32>, f64), PackedHits>> {
        let prepared = self.shared().and_then(|i| {
            let r = quiver_core::Rule::parse(&rule).ok_or_else(|| invalid(format!("unknown rule {:?}", rule)))?;
            Ok((i, params_from(&options)?, r, count_arg("positives", positives)?))
        });
        let (index, params, rule, positives) = match prepared {
            Ok(v) => v,
            Err(e) => return Job::fail(e, packed_hits),
        };
        let examples = examples.to_vec();
        let allow = options.allow.as_ref().map(|a| a.to_vec());
        Job::new(
            move || {
                let index = read(&index)?;
                let started = std::time::Instant::now();
                let hits = index.search_rule(rule, positives, &examples, &params, allow.as_deref())?;
                let us = started.elapsed().as_secs_f64() * 1e6;
                let (labels, scores) = split(hits);
                Ok((labels, scores, us))
            },
            packed_hits,
        )
    }

    /// `queries` holds n * dim values; resolves with one result per query.
    #[napi(ts_return_type = "Promise<NativeSearchResult[]>")]
    pub fn search_batch(
        &self,
        queries: Float32Array,
        options: NativeSearchOptions,
    ) -> AsyncTask<Job<Vec<(Vec<u64>, Vec<f32>, f64)>, Vec<NativeSearchResult>>> {
        fn finish(all: Vec<(Vec<u64>, Vec<f32>, f64)>) -> Vec<NativeSearchResult> {
            all.into_iter().map(search_result).collect()
        }
        let prepared = self.shared().and_then(|i| Ok((i, params_from(&options)?)));
        let (index, params) = match prepared {
            Ok(v) => v,
            Err(e) => return Job::fail(e, finish),
        };
        let dim = self.dim as usize;
        if dim == 0 || queries.len() % dim != 0 {
            let e = CoreError::new(
                ErrorKind::DimensionMismatch,
                format!(
                    "{} query values are not a multiple of dimension {}",
                    queries.len(),
                    dim
                ),
            );
            return Job::fail(e, finish);
        }
        let queries = queries.to_vec();
        let allow = options.allow.as_ref().map(|a| a.to_vec());
        Job::new(
            move || {
                let index = read(&index)?;
                queries
                    .chunks(dim)
                    .map(|q| timed_search(&index, q, &params, allow.as_deref()))
                    .collect()
            },
            finish,
        )
    }

    /// The stored vector (normalised for Cosine), or null when the label is absent.
    #[napi(ts_return_type = "Promise<Float32Array | null>")]
    pub fn get_vector(
        &self,
        label: BigInt,
    ) -> AsyncTask<Job<Option<Vec<f32>>, Option<Float32Array>>> {
        let prepared = self
            .shared()
            .and_then(|i| Ok((i, u64_arg("label", &label)?)));
        let (index, label) = match prepared {
            Ok(v) => v,
            Err(e) => return Job::fail(e, vector_of),
        };
        Job::new(move || Ok(read(&index)?.get_vector(label)), vector_of)
    }

    /// Every live label and its stored vector, in slot order. Holds only the read
    /// lock, so searches keep running while it copies.
    #[napi(ts_return_type = "Promise<NativeLiveVectors>")]
    pub fn export_live(&self) -> AsyncTask<Job<(Vec<u64>, Vec<f32>), NativeLiveVectors>> {
        match self.shared() {
            Ok(index) => Job::new(move || Ok(read(&index)?.export_live()), live_vectors),
            Err(e) => Job::fail(e, live_vectors),
        }
    }

    /// One page of exportLive: up to `maxCount` live labels and their vectors from
    /// slot `from` on, and the slot the next page starts at (the slot count once every
    /// slot is read). Holds the read lock for this page only.
    #[napi(ts_return_type = "Promise<NativeLivePage>")]
    pub fn export_live_from(&self, from: f64, max_count: f64) -> AsyncTask<Job<(Vec<u64>, Vec<f32>, usize), NativeLivePage>> {
        let prepared = self
            .shared()
            .and_then(|i| Ok((i, count_arg("from", from)?, count_arg("maxCount", max_count)?)));
        let (index, from, max_count) = match prepared {
            Ok(v) => v,
            Err(e) => return Job::fail(e, live_page),
        };
        Job::new(move || read(&index)?.export_live_from(from, max_count), live_page)
    }

    /// Every live label, in slot order, without the vectors (the storage layer's
    /// start-up needs only these; exportLive would copy every vector too).
    #[napi(ts_return_type = "Promise<BigUint64Array>")]
    pub fn live_labels(&self) -> AsyncTask<Job<Vec<u64>, BigUint64Array>> {
        match self.shared() {
            Ok(index) => Job::new(move || Ok(read(&index)?.live_labels()), BigUint64Array::new),
            Err(e) => Job::fail(e, BigUint64Array::new),
        }
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn compact(&self, threads: Option<f64>) -> AsyncTask<Job<(), ()>> {
        let (index, threads) = match self.shared().and_then(|i| Ok((i, threads_from(threads)?))) {
            Ok(v) => v,
            Err(e) => return Job::fail(e, unit),
        };
        write_job(Ok(index), &self.cache, remember, move |index| index.compact(threads), unit)
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn save(&self, path: String) -> AsyncTask<Job<(), ()>> {
        let index = match self.shared() {
            Ok(i) => i,
            Err(e) => return Job::fail(e, unit),
        };
        Job::new(move || read(&index)?.save(&PathBuf::from(path)), unit)
    }

    /// Moves the f32 originals of a quantized index to a memory-mapped file.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn move_originals_to_disk(&self, path: String) -> AsyncTask<Job<(), ()>> {
        write_job(self.shared(), &self.cache, remember, move |index| index.move_originals_to_file(&PathBuf::from(path)), unit)
    }

    /// Copies mapped originals back into memory (the file stays on disk).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn move_originals_to_memory(&self) -> AsyncTask<Job<(), ()>> {
        write_job(self.shared(), &self.cache, remember, move |index| Ok(index.move_originals_to_memory()), unit)
    }

    /// Moves the level-0 links of a graph index to a memory-mapped file (written once;
    /// the next add copies them back into memory, the file stays for the caller).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn move_graph_to_disk(&self, path: String) -> AsyncTask<Job<(), ()>> {
        write_job(self.shared(), &self.cache, remember, move |index| index.move_graph_to_file(&PathBuf::from(path)), unit)
    }

    /// Copies mapped level-0 links back into memory (the file stays on disk).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn move_graph_to_memory(&self) -> AsyncTask<Job<(), ()>> {
        write_job(self.shared(), &self.cache, remember, move |index| Ok(index.move_graph_to_memory()), unit)
    }

    /// Current counters, or — while a write (add, delete, compact) is running — the
    /// counters as of the last finished write. Never waits.
    #[napi]
    pub fn stats(&self, env: Env) -> napi::Result<NativeIndexStats> {
        let index = self.shared().map_err(|e| engine_error(&env, e))?;
        let result = match index.try_read() {
            Ok(guard) => {
                remember(&self.cache, &guard);
                Ok(())
            }
            Err(TryLockError::WouldBlock) => Ok(()),
            Err(TryLockError::Poisoned(_)) => Err(CoreError::new(
                ErrorKind::Closed,
                "index is unusable after an internal error",
            )),
        };
        result.map_err(|e| engine_error(&env, e))?;
        let s = match self.cache.lock() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        };
        Ok(stats_of(s))
    }

    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.borrow().is_none()
    }

    #[napi]
    pub fn close(&self) {
        self.inner.borrow_mut().take();
    }
}

/// Reads an index file written by `NativeIndex.save`.
#[napi(ts_return_type = "Promise<NativeIndex>")]
pub fn load_index(path: String) -> AsyncTask<Job<Index, NativeIndex>> {
    Job::new(move || Index::load(&PathBuf::from(path)), NativeIndex::wrap)
}

/// The form of the single-vector index's search results (`PackedHits`): bindings/native.ts
/// refuses an addon that answers another, so one built from other sources than the
/// JavaScript beside it fails at load rather than answering searches it cannot read.
#[napi]
pub fn search_layout() -> u32 {
    1
}

/// Name of the distance kernels this process picked ("avx2+fma", "neon", "scalar").
#[napi]
pub fn kernel_name() -> String {
    quiver_core::distance::kernels().name.to_string()
}

// ---------------------------------------------------------------------------------
// WAL

#[napi(object)]
pub struct NativeWalOptions {
    pub segment_bytes: Option<f64>,
    pub retention_bytes: Option<f64>,
}

#[napi(object)]
pub struct NativeWalReport {
    pub first_seq: BigInt,
    pub last_seq: BigInt,
    pub truncated_bytes: f64,
    pub truncated_file: Option<String>,
    pub truncated_offset: Option<f64>,
}

#[napi(object)]
pub struct NativeWalRecord {
    pub seq: BigInt,
    pub data: Buffer,
}

struct Report {
    first_seq: u64,
    last_seq: u64,
    truncated_bytes: u64,
    truncated_file: Option<String>,
    truncated_offset: Option<u64>,
}

/// First and last sequence numbers as of the last finished call, so the synchronous
/// getters never wait for the WAL's append lock (held across a segment roll's fsync).
/// Both only grow while the log is open (truncation never empties it).
#[derive(Default)]
struct Seqs {
    first: AtomicU64,
    last: AtomicU64,
}

impl Seqs {
    fn refresh(&self, wal: &Wal) {
        self.first.fetch_max(wal.first_seq(), Ordering::AcqRel);
        self.last.fetch_max(wal.last_seq(), Ordering::AcqRel);
    }
}

/// A write-ahead log directory. `&self` methods of the engine's `Wal` are safe from
/// several pool threads at once; concurrent `sync` calls share one fsync.
#[napi]
pub struct NativeWal {
    /// None once closed (a RefCell for the reason given at `NativeIndex::inner`).
    inner: RefCell<Option<Arc<Wal>>>,
    seqs: Arc<Seqs>,
    report: Report,
}

impl NativeWal {
    fn shared(&self) -> CoreResult<(Arc<Wal>, Arc<Seqs>)> {
        match &*self.inner.borrow() {
            Some(w) => Ok((w.clone(), self.seqs.clone())),
            None => Err(closed("WAL")),
        }
    }
}

fn seqs_of(seqs: Vec<u64>) -> BigUint64Array {
    BigUint64Array::new(seqs)
}

fn records_of(records: Vec<(u64, Vec<u8>)>) -> Vec<NativeWalRecord> {
    records
        .into_iter()
        .map(|(seq, data)| NativeWalRecord {
            seq: BigInt::from(seq),
            data: Buffer::from(data),
        })
        .collect()
}

fn opened((wal, r): (Wal, quiver_core::wal::OpenReport)) -> NativeWal {
    let seqs = Seqs::default();
    seqs.refresh(&wal);
    NativeWal {
        inner: RefCell::new(Some(Arc::new(wal))),
        seqs: Arc::new(seqs),
        report: Report {
            first_seq: r.first_seq,
            last_seq: r.last_seq,
            truncated_bytes: r.truncated_bytes,
            truncated_file: r.truncated_file,
            truncated_offset: r.truncated_offset,
        },
    }
}

/// Opens (creating if needed) a WAL directory, cutting a torn tail back to the last
/// valid record.
#[napi(ts_return_type = "Promise<NativeWal>")]
pub fn open_wal(
    dir: String,
    options: Option<NativeWalOptions>,
) -> AsyncTask<Job<(Wal, quiver_core::wal::OpenReport), NativeWal>> {
    let mut opts = WalOptions::default();
    if let Some(o) = options {
        let parsed = (|| -> CoreResult<()> {
            if let Some(s) = o.segment_bytes {
                opts.segment_bytes = count_arg("segmentBytes", s)? as u64;
            }
            if let Some(r) = o.retention_bytes {
                opts.retention_bytes = count_arg("retentionBytes", r)? as u64;
            }
            Ok(())
        })();
        if let Err(e) = parsed {
            return Job::fail(e, opened);
        }
    }
    Job::new(move || Wal::open(&PathBuf::from(dir), opts), opened)
}

#[napi]
impl NativeWal {
    #[napi(getter)]
    pub fn report(&self) -> NativeWalReport {
        let r = &self.report;
        NativeWalReport {
            first_seq: BigInt::from(r.first_seq),
            last_seq: BigInt::from(r.last_seq),
            truncated_bytes: r.truncated_bytes as f64,
            truncated_file: r.truncated_file.clone(),
            truncated_offset: r.truncated_offset.map(|o| o as f64),
        }
    }

    /// Appends records in one batch; fsyncs before resolving when `sync` is true.
    /// Resolves with the sequence number of each record.
    #[napi(ts_return_type = "Promise<BigUint64Array>")]
    pub fn append(
        &self,
        records: Vec<Buffer>,
        sync: Option<bool>,
    ) -> AsyncTask<Job<Vec<u64>, BigUint64Array>> {
        let (wal, seqs) = match self.shared() {
            Ok(w) => w,
            Err(e) => return Job::fail(e, seqs_of),
        };
        let records: Vec<Vec<u8>> = records.iter().map(|b| b.to_vec()).collect();
        let sync = sync.unwrap_or(false);
        Job::new(
            move || {
                let refs: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
                let assigned = wal.append_batch(&refs);
                seqs.refresh(&wal);
                let assigned = assigned?;
                if sync {
                    wal.sync()?;
                }
                Ok(assigned)
            },
            seqs_of,
        )
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn sync(&self) -> AsyncTask<Job<(), ()>> {
        match self.shared() {
            Ok((wal, _)) => Job::new(move || wal.sync(), unit),
            Err(e) => Job::fail(e, unit),
        }
    }

    #[napi(ts_return_type = "Promise<NativeWalRecord[]>")]
    pub fn read_from(
        &self,
        seq: BigInt,
        max_records: Option<f64>,
    ) -> AsyncTask<Job<Vec<(u64, Vec<u8>)>, Vec<NativeWalRecord>>> {
        let prepared = self.shared().and_then(|w| {
            let max = match max_records {
                Some(m) => count_arg("maxRecords", m)?,
                None => usize::MAX,
            };
            Ok((w.0, u64_arg("seq", &seq)?, max))
        });
        match prepared {
            Ok((wal, seq, max)) => Job::new(move || wal.read_from(seq, max), records_of),
            Err(e) => Job::fail(e, records_of),
        }
    }

    /// Deletes whole segments whose records are all before `seq`, keeping at least the
    /// newest `keepBytes` (default 0) of the log (`Wal::truncate_retaining`).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn truncate_before(&self, seq: BigInt, keep_bytes: Option<f64>) -> AsyncTask<Job<(), ()>> {
        let prepared = self.shared().and_then(|w| {
            let keep = match keep_bytes {
                Some(k) => count_arg("keepBytes", k)? as u64,
                None => 0,
            };
            Ok((w, u64_arg("seq", &seq)?, keep))
        });
        match prepared {
            Ok(((wal, seqs), seq, keep)) => Job::new(
                move || {
                    let result = wal.truncate_retaining(seq, keep);
                    seqs.refresh(&wal);
                    result
                },
                unit,
            ),
            Err(e) => Job::fail(e, unit),
        }
    }

    /// Oldest sequence number in the log (0 when empty), as of the last finished call.
    #[napi]
    pub fn first_seq(&self, env: Env) -> napi::Result<BigInt> {
        self.shared()
            .map(|(_, s)| BigInt::from(s.first.load(Ordering::Acquire)))
            .map_err(|e| engine_error(&env, e))
    }

    /// Newest sequence number in the log (0 when empty), as of the last finished call.
    #[napi]
    pub fn last_seq(&self, env: Env) -> napi::Result<BigInt> {
        self.shared()
            .map(|(_, s)| BigInt::from(s.last.load(Ordering::Acquire)))
            .map_err(|e| engine_error(&env, e))
    }

    /// Flushes and closes; later calls fail with QUIVER_CLOSED. Closing twice is a no-op.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close(&self) -> AsyncTask<Job<(), ()>> {
        let taken = self.inner.borrow_mut().take();
        match taken {
            Some(wal) => Job::new(move || wal.close(), unit),
            None => Job::new(|| Ok(()), unit),
        }
    }
}
