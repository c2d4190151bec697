//! quiver-wasm: a C ABI over quiver-core for wasm32-unknown-unknown.
//!
//! Owns: a table of indexes addressed by integer handles, byte buffers the host
//! allocates in linear memory, and the last error. Must never: touch files or threads
//! (wasm32-unknown-unknown has neither: the host does the file I/O around the bytes
//! `files.rs` encodes and decodes, and runs this module in one worker), or panic across
//! the boundary on bad input — every export validates pointers and sizes and reports
//! failures as a negative return plus `quiver_last_error`.
//!
//! Conventions: functions return >= 0 on success and -1 on failure; after a failure
//! `quiver_last_error(out)` returns the error code number (see `code_number`) and
//! writes the message's pointer and length to `out[0]`, `out[1]`. Labels travel as u64
//! arrays, vectors as f32 arrays, both in memory from `quiver_alloc` (16-byte aligned).

use std::alloc::{alloc, dealloc, Layout};
use std::sync::Mutex;

use quiver_core::{Distance, Error, ErrorKind, Index, IndexConfig, Quantization, SearchParams};

mod files;
mod multi;
mod sparse;

struct State {
    indexes: Vec<Option<Index>>,
    last_error: Option<(u32, String)>,
}

static STATE: Mutex<State> = Mutex::new(State {
    indexes: Vec::new(),
    last_error: None,
});

fn state() -> std::sync::MutexGuard<'static, State> {
    // One thread only: the lock can never be contended, and panics abort.
    match STATE.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Stable numbers for the codes; the TypeScript side maps them back to strings.
fn code_number(kind: ErrorKind) -> u32 {
    match kind {
        ErrorKind::InvalidArgument => 1,
        ErrorKind::DimensionMismatch => 2,
        ErrorKind::NotFound => 3,
        ErrorKind::Io => 4,
        ErrorKind::Corrupt => 5,
        ErrorKind::UnsupportedFormat => 6,
        ErrorKind::Closed => 7,
        ErrorKind::Unsupported => 8,
    }
}

fn fail(e: Error) -> i32 {
    state().last_error = Some((code_number(e.kind), e.message));
    -1
}

fn invalid(message: &str) -> Error {
    Error::new(ErrorKind::InvalidArgument, message.to_string())
}

/// The message of the panic that aborted the module (panics abort on wasm32; the host
/// sees a trap and reads this to say why).
static PANIC: Mutex<String> = Mutex::new(String::new());

fn install_panic_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            if let Ok(mut p) = PANIC.try_lock() {
                *p = info.to_string();
            }
        }))
    });
}

/// Writes the pointer and length of the last panic message (empty if none).
#[no_mangle]
pub extern "C" fn quiver_panic_message(out: *mut u32) {
    let p = match PANIC.try_lock() {
        Ok(p) => p,
        Err(_) => return,
    };
    if !out.is_null() {
        // SAFETY: the host passes room for two u32s. The String lives in a static
        // and is not touched again (the module is dead after a panic).
        unsafe {
            *out = p.as_ptr() as u32;
            *out.add(1) = p.len() as u32;
        }
    }
}

const ALIGN: usize = 16;

/// Allocates `size` bytes (16-byte aligned); returns 0 when out of memory.
#[no_mangle]
pub extern "C" fn quiver_alloc(size: usize) -> *mut u8 {
    let layout = match Layout::from_size_align(size.max(1), ALIGN) {
        Ok(l) => l,
        Err(_) => return std::ptr::null_mut(),
    };
    // SAFETY: the layout has a non-zero size.
    unsafe { alloc(layout) }
}

/// Frees a buffer from `quiver_alloc` (or `quiver_index_to_bytes`) of `size` bytes.
#[no_mangle]
pub extern "C" fn quiver_free(ptr: *mut u8, size: usize) {
    if ptr.is_null() {
        return;
    }
    if let Ok(layout) = Layout::from_size_align(size.max(1), ALIGN) {
        // SAFETY: the host passes back a pointer and size it got from us.
        unsafe { dealloc(ptr, layout) }
    }
}

/// Returns the code number of the last error (0 if none) and writes the pointer and
/// length of its UTF-8 message to `out[0]`, `out[1]`. The message stays valid until
/// the next failing call.
#[no_mangle]
pub extern "C" fn quiver_last_error(out: *mut u32) -> u32 {
    let s = state();
    match &s.last_error {
        Some((code, message)) => {
            if !out.is_null() {
                // SAFETY: the host passes room for two u32s.
                unsafe {
                    *out = message.as_ptr() as u32;
                    *out.add(1) = message.len() as u32;
                }
            }
            *code
        }
        None => 0,
    }
}

/// Writes the pointer and length of the kernel name ("simd128" or "scalar").
#[no_mangle]
pub extern "C" fn quiver_kernel_name(out: *mut u32) {
    let name = quiver_core::distance::kernels().name;
    if !out.is_null() {
        // SAFETY: the host passes room for two u32s.
        unsafe {
            *out = name.as_ptr() as u32;
            *out.add(1) = name.len() as u32;
        }
    }
}

unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if len == 0 || ptr.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(ptr, len)
    }
}

fn with_index<T>(handle: i32, f: impl FnOnce(&mut Index) -> Result<T, Error>) -> Result<T, Error> {
    let mut s = state();
    let slot = usize::try_from(handle)
        .ok()
        .and_then(|h| s.indexes.get_mut(h));
    match slot {
        Some(Some(index)) => f(index),
        _ => Err(Error::new(
            ErrorKind::Closed,
            format!("index handle {} is closed or unknown", handle),
        )),
    }
}

fn insert(index: Index) -> i32 {
    let mut s = state();
    let free = s.indexes.iter().position(|i| i.is_none());
    match free {
        Some(h) => {
            s.indexes[h] = Some(index);
            h as i32
        }
        None => {
            s.indexes.push(Some(index));
            (s.indexes.len() - 1) as i32
        }
    }
}

/// Value of an optional u32 parameter that means "the engine's default".
pub const DEFAULT: u32 = u32::MAX;

/// Creates an index; returns its handle. `distance`: 0 Cosine, 1 Dot, 2 Euclid,
/// 3 Manhattan. `quant`: 0 none, 1 scalar (with `quantile`), 2 binary. `m`,
/// `ef_construct` and `full_scan_threshold_kb` take `DEFAULT` (u32::MAX) for the
/// engine's defaults; `seed` is used only when `has_seed` is non-zero. `flags`: bit 0
/// flat (no graph links, every search an exact scan); bit 1 float16 and bit 2 uint8
/// vectors (neither: float32); other bits must be zero.
#[no_mangle]
pub extern "C" fn quiver_index_new(
    dim: u32,
    distance: u32,
    m: u32,
    ef_construct: u32,
    full_scan_threshold_kb: u32,
    quant: u32,
    quantile: f32,
    has_seed: u32,
    seed: u64,
    flags: u32,
) -> i32 {
    install_panic_hook();
    let distance = match u8::try_from(distance).ok().and_then(Distance::from_code) {
        Some(d) => d,
        None => return fail(invalid("unknown distance code")),
    };
    let mut c = IndexConfig::new(dim as usize, distance);
    if m != DEFAULT {
        c.m = m as usize;
    }
    if ef_construct != DEFAULT {
        c.ef_construct = ef_construct as usize;
    }
    if full_scan_threshold_kb != DEFAULT {
        c.full_scan_threshold_kb = full_scan_threshold_kb as usize;
    }
    if has_seed != 0 {
        c.seed = seed;
    }
    if flags & !7 != 0 || flags & 6 == 6 {
        return fail(invalid("unknown index flags"));
    }
    c.flat = flags & 1 != 0;
    c.datatype = match flags & 6 {
        2 => quiver_core::Datatype::Float16,
        4 => quiver_core::Datatype::Uint8,
        _ => quiver_core::Datatype::Float32,
    };
    c.quantization = match quant {
        0 => Quantization::None,
        1 => Quantization::Scalar { quantile },
        2 => Quantization::Binary,
        _ => return fail(invalid("unknown quantization code")),
    };
    match Index::new(c) {
        Ok(index) => insert(index),
        Err(e) => fail(e),
    }
}

/// Frees an index; its handle may be reused.
#[no_mangle]
pub extern "C" fn quiver_index_free(handle: i32) {
    let mut s = state();
    if let Some(slot) = usize::try_from(handle)
        .ok()
        .and_then(|h| s.indexes.get_mut(h))
    {
        *slot = None;
    }
}

/// Inserts or replaces `n` vectors (`vectors_len` floats in all). Single-threaded.
#[no_mangle]
pub extern "C" fn quiver_index_add(
    handle: i32,
    labels: *const u64,
    n: usize,
    vectors: *const f32,
    vectors_len: usize,
) -> i32 {
    // SAFETY: the host wrote `n` labels and `vectors_len` floats at these addresses.
    let (labels, vectors) = unsafe { (slice(labels, n), slice(vectors, vectors_len)) };
    match with_index(handle, |i| i.add(labels, vectors, 1)) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Marks labels deleted; returns how many existed.
#[no_mangle]
pub extern "C" fn quiver_index_delete(handle: i32, labels: *const u64, n: usize) -> i32 {
    // SAFETY: as in `quiver_index_add`.
    let labels = unsafe { slice(labels, n) };
    match with_index(handle, |i| Ok(i.delete(labels))) {
        Ok(count) => count as i32,
        Err(e) => fail(e),
    }
}

/// Searches one query. `ef` 0 = default; flags are bit 0 exact, bit 1 rescore,
/// bit 2 ignore quantization, bit 3 `oversampling` given; `has_allow` 0 = no filter.
/// Writes up to `out_cap` labels and scores (best first); returns how many.
#[no_mangle]
pub extern "C" fn quiver_index_search(
    handle: i32,
    query: *const f32,
    query_len: usize,
    k: usize,
    ef: usize,
    oversampling: f32,
    flags: u32,
    has_allow: u32,
    allow: *const u64,
    allow_len: usize,
    out_labels: *mut u64,
    out_scores: *mut f32,
    out_cap: usize,
) -> i32 {
    let mut p = SearchParams::new(k);
    p.ef = if ef == 0 { None } else { Some(ef) };
    p.oversampling = if flags & 8 != 0 {
        Some(oversampling)
    } else {
        None
    };
    p.exact = flags & 1 != 0;
    p.rescore = flags & 2 != 0;
    p.ignore_quantization = flags & 4 != 0;
    // SAFETY: the host wrote these arrays and left room for `k` results.
    let (query, allow) = unsafe { (slice(query, query_len), slice(allow, allow_len)) };
    let allow = if has_allow != 0 { Some(allow) } else { None };
    // The core caps k, ef and oversampling at the live count, so a huge k cannot
    // make it preallocate memory it cannot have.
    match with_index(handle, |i| i.search(query, &p, allow)) {
        Ok(hits) => {
            let n = hits.len().min(out_cap);
            for (j, (label, score)) in hits.into_iter().take(n).enumerate() {
                // SAFETY: j < out_cap, the room the host allocated in each output.
                unsafe {
                    *out_labels.add(j) = label;
                    *out_scores.add(j) = score;
                }
            }
            n as i32
        }
        Err(e) => fail(e),
    }
}

/// Searches by a rule over `examples` (`examples_len` values, a multiple of the
/// dimension; see `quiver_core::Rule` for their order and codes): 0 best_score,
/// 1 sum_scores, 2 discover, 3 context; the first `positives` examples are positive.
/// The other arguments and the result are those of `quiver_index_search`.
#[no_mangle]
pub extern "C" fn quiver_index_search_rule(
    handle: i32,
    rule: u32,
    positives: usize,
    examples: *const f32,
    examples_len: usize,
    k: usize,
    ef: usize,
    oversampling: f32,
    flags: u32,
    has_allow: u32,
    allow: *const u64,
    allow_len: usize,
    out_labels: *mut u64,
    out_scores: *mut f32,
    out_cap: usize,
) -> i32 {
    let rule = match quiver_core::Rule::from_code(rule) {
        Some(r) => r,
        None => return fail(quiver_core::Error::invalid(format!("unknown rule code {}", rule))),
    };
    let mut p = SearchParams::new(k);
    p.ef = if ef == 0 { None } else { Some(ef) };
    p.oversampling = if flags & 8 != 0 { Some(oversampling) } else { None };
    p.exact = flags & 1 != 0;
    p.rescore = flags & 2 != 0;
    p.ignore_quantization = flags & 4 != 0;
    // SAFETY: the host wrote these arrays and left room for `out_cap` results.
    let (examples, allow) = unsafe { (slice(examples, examples_len), slice(allow, allow_len)) };
    let allow = if has_allow != 0 { Some(allow) } else { None };
    match with_index(handle, |i| i.search_rule(rule, positives, examples, &p, allow)) {
        Ok(hits) => {
            let n = hits.len().min(out_cap);
            for (j, (label, score)) in hits.into_iter().take(n).enumerate() {
                // SAFETY: j < out_cap, the room the host allocated in each output.
                unsafe {
                    *out_labels.add(j) = label;
                    *out_scores.add(j) = score;
                }
            }
            n as i32
        }
        Err(e) => fail(e),
    }
}

/// Copies the stored vector of `label` (normalised for Cosine) into `out` (room for
/// `cap` floats). Returns its length, 0 when the label is absent.
#[no_mangle]
pub extern "C" fn quiver_index_get_vector(
    handle: i32,
    label: u64,
    out: *mut f32,
    cap: usize,
) -> i32 {
    match with_index(handle, |i| Ok(i.get_vector(label))) {
        Ok(Some(v)) => {
            if v.len() > cap {
                return fail(invalid("output buffer too small for the vector"));
            }
            // SAFETY: v.len() <= cap floats fit in `out`.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, v.len()) };
            v.len() as i32
        }
        Ok(None) => 0,
        Err(e) => fail(e),
    }
}

/// Writes twelve f64s: dim, distance code, count, slots, deleted, vector bytes, graph
/// bytes, total bytes, quantization (0 none, 1 scalar, 2 binary), original bytes,
/// flat (0 or 1), datatype (0 float32, 1 float16, 2 uint8).
#[no_mangle]
pub extern "C" fn quiver_index_stats(handle: i32, out: *mut f64) -> i32 {
    match with_index(handle, |i| Ok(i.stats())) {
        Ok(s) => {
            let quant = match s.quantization {
                "scalar" => 1.0,
                "binary" => 2.0,
                _ => 0.0,
            };
            let values = [
                s.dim as f64,
                s.distance.code() as f64,
                s.count as f64,
                s.slots as f64,
                s.deleted as f64,
                s.vector_bytes as f64,
                s.graph_bytes as f64,
                s.total_bytes as f64,
                quant,
                s.original_bytes as f64,
                if s.flat { 1.0 } else { 0.0 },
                match s.datatype {
                    "float16" => 1.0,
                    "uint8" => 2.0,
                    _ => 0.0,
                },
            ];
            // SAFETY: the host passes room for twelve f64s.
            unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), out, values.len()) };
            0
        }
        Err(e) => fail(e),
    }
}

/// Copies every live label and its stored vector (slot order) into `out_labels` (room
/// for `cap` labels) and `out_vectors` (room for `cap * dim` floats); the host sizes
/// them from the live count in the stats. Returns how many were written.
#[no_mangle]
pub extern "C" fn quiver_index_export_live(
    handle: i32,
    out_labels: *mut u64,
    out_vectors: *mut f32,
    cap: usize,
) -> i32 {
    match with_index(handle, |i| Ok(i.export_live())) {
        Ok((labels, vectors)) => {
            if labels.len() > cap {
                return fail(invalid("output buffers too small for the live vectors"));
            }
            // SAFETY: labels.len() <= cap, and vectors holds labels.len() * dim floats,
            // which fit in the `cap * dim` the host allocated.
            unsafe {
                std::ptr::copy_nonoverlapping(labels.as_ptr(), out_labels, labels.len());
                std::ptr::copy_nonoverlapping(vectors.as_ptr(), out_vectors, vectors.len());
            }
            labels.len() as i32
        }
        Err(e) => fail(e),
    }
}

/// One page of `quiver_index_export_live`: up to `max_count` live labels from slot
/// `from` on into `out_labels` / `out_vectors` (room for `cap` labels; the host passes
/// the smaller of `max_count` and the live count), the slot the next page starts at
/// into `out_next`. Returns how many were written.
#[no_mangle]
pub extern "C" fn quiver_index_export_live_from(
    handle: i32,
    from: u32,
    max_count: u32,
    out_labels: *mut u64,
    out_vectors: *mut f32,
    cap: usize,
    out_next: *mut u32,
) -> i32 {
    match with_index(handle, |i| i.export_live_from(from as usize, max_count as usize)) {
        Ok((labels, vectors, next)) => {
            if labels.len() > cap {
                return fail(invalid("output buffers too small for the page"));
            }
            // SAFETY: as in quiver_index_export_live; out_next has room for one u32
            // (slot numbers fit u32: labels are placed in u32 slots).
            unsafe {
                std::ptr::copy_nonoverlapping(labels.as_ptr(), out_labels, labels.len());
                std::ptr::copy_nonoverlapping(vectors.as_ptr(), out_vectors, vectors.len());
                *out_next = next as u32;
            }
            labels.len() as i32
        }
        Err(e) => fail(e),
    }
}

/// Rebuilds the graph without deleted slots. Single-threaded.
#[no_mangle]
pub extern "C" fn quiver_index_compact(handle: i32) -> i32 {
    match with_index(handle, |i| i.compact(1)) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Serialises an index into a new buffer; writes its length to `out_len`. The host
/// frees it with `quiver_free(ptr, len)`. Returns 0 on failure.
#[no_mangle]
pub extern "C" fn quiver_index_to_bytes(handle: i32, out_len: *mut u32) -> *mut u8 {
    let bytes = match with_index(handle, |i| Ok(i.to_bytes())) {
        Ok(b) => b,
        Err(e) => {
            fail(e);
            return std::ptr::null_mut();
        }
    };
    let ptr = quiver_alloc(bytes.len());
    if ptr.is_null() {
        fail(invalid("out of memory"));
        return ptr;
    }
    // SAFETY: `ptr` has room for `bytes.len()` bytes; `out_len` for one u32.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len());
        *out_len = bytes.len() as u32;
    }
    ptr
}

/// Reads an index from bytes written by `quiver_index_to_bytes`; returns its handle.
#[no_mangle]
pub extern "C" fn quiver_index_from_bytes(bytes: *const u8, len: usize) -> i32 {
    // SAFETY: the host wrote `len` bytes at `bytes`.
    let bytes = unsafe { slice(bytes, len) };
    install_panic_hook();
    match Index::from_bytes(bytes) {
        Ok(index) => insert(index),
        Err(e) => fail(e),
    }
}
