//! Sparse indexes (quiver_core::sparse) over the same C ABI conventions as the dense
//! ones: handles into a table, buffers from `quiver_alloc`, -1 plus the last error on
//! failure. Memory only (no files): `to_bytes` / `from_bytes` carry the framed image.

use std::sync::Mutex;

use quiver_core::sparse::{SparseIndex, SparseSearch, SparseVector};
use quiver_core::{Datatype, Error, ErrorKind};

use super::{fail, install_panic_hook, invalid, quiver_alloc, slice};

static SPARSE: Mutex<Vec<Option<SparseIndex>>> = Mutex::new(Vec::new());

fn table() -> std::sync::MutexGuard<'static, Vec<Option<SparseIndex>>> {
    match SPARSE.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn with_sparse<T>(handle: i32, f: impl FnOnce(&mut SparseIndex) -> Result<T, Error>) -> Result<T, Error> {
    let mut t = table();
    match usize::try_from(handle).ok().and_then(|h| t.get_mut(h)) {
        Some(Some(index)) => f(index),
        _ => Err(Error::new(ErrorKind::Closed, format!("sparse index handle {} is closed or unknown", handle))),
    }
}

pub(crate) fn insert(index: SparseIndex) -> i32 {
    let mut t = table();
    match t.iter().position(|i| i.is_none()) {
        Some(h) => {
            t[h] = Some(index);
            h as i32
        }
        None => {
            t.push(Some(index));
            (t.len() - 1) as i32
        }
    }
}

/// Creates a sparse index storing values as `datatype` (0 float32, 1 float16, 2 uint8);
/// returns its handle.
#[no_mangle]
pub extern "C" fn quiver_sparse_new(full_scan_threshold: u32, datatype: u32) -> i32 {
    install_panic_hook();
    let dt = match datatype {
        0 => Datatype::Float32,
        1 => Datatype::Float16,
        2 => Datatype::Uint8,
        _ => return fail(invalid(&format!("unknown sparse datatype code {}", datatype))),
    };
    insert(SparseIndex::with_datatype(full_scan_threshold as usize, dt))
}

#[no_mangle]
pub extern "C" fn quiver_sparse_free(handle: i32) {
    let mut t = table();
    if let Some(slot) = usize::try_from(handle).ok().and_then(|h| t.get_mut(h)) {
        *slot = None;
    }
}

/// Inserts or replaces `n` documents: document i is entries offsets[i]..offsets[i+1]
/// of `indices` and `values` (`entries` each); `offsets` has n + 1 values.
#[no_mangle]
pub extern "C" fn quiver_sparse_upsert(
    handle: i32,
    labels: *const u64,
    n: usize,
    offsets: *const u32,
    indices: *const u32,
    values: *const f32,
    entries: usize,
) -> i32 {
    // SAFETY: the host wrote these arrays with these lengths.
    let (labels, offsets, indices, values) =
        unsafe { (slice(labels, n), slice(offsets, n + 1), slice(indices, entries), slice(values, entries)) };
    match with_sparse(handle, |i| i.upsert_batch(labels, offsets, indices, values)) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Removes documents; returns how many existed.
#[no_mangle]
pub extern "C" fn quiver_sparse_delete(handle: i32, labels: *const u64, n: usize) -> i32 {
    // SAFETY: the host wrote `n` labels.
    let labels = unsafe { slice(labels, n) };
    match with_sparse(handle, |i| Ok(labels.iter().filter(|&&l| i.remove(l)).count())) {
        Ok(c) => c as i32,
        Err(e) => fail(e),
    }
}

/// Searches one query (`len` entries). flags: bit 0 idf, bit 1 exact. `has_allow` 0 =
/// no filter. Writes up to `out_cap` labels and scores, best first; returns how many.
#[no_mangle]
pub extern "C" fn quiver_sparse_search(
    handle: i32,
    indices: *const u32,
    values: *const f32,
    len: usize,
    k: usize,
    flags: u32,
    has_allow: u32,
    allow: *const u64,
    allow_len: usize,
    out_labels: *mut u64,
    out_scores: *mut f32,
    out_cap: usize,
) -> i32 {
    if flags & !3 != 0 {
        return fail(invalid("unknown sparse search flags"));
    }
    // SAFETY: the host wrote these arrays and left `out_cap` room in each output.
    let (indices, values, allow) = unsafe { (slice(indices, len), slice(values, len), slice(allow, allow_len)) };
    let q = match SparseVector::new(indices.to_vec(), values.to_vec()) {
        Ok(q) => q,
        Err(e) => return fail(e),
    };
    let p = SparseSearch {
        k,
        allow: if has_allow != 0 { Some(allow.to_vec()) } else { None },
        idf: flags & 1 != 0,
        exact: flags & 2 != 0,
    };
    match with_sparse(handle, |i| Ok(i.search(&q, &p))) {
        Ok(hits) => {
            let n = hits.len().min(out_cap);
            for (j, (label, score)) in hits.into_iter().take(n).enumerate() {
                // SAFETY: j < out_cap.
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

/// First half of a read: writes each label's entry count to `out_lens` (u32::MAX for an
/// absent label) and returns the total entries, for the host to size `quiver_sparse_get`.
#[no_mangle]
pub extern "C" fn quiver_sparse_lens(handle: i32, labels: *const u64, n: usize, out_lens: *mut u32) -> i32 {
    // SAFETY: the host wrote `n` labels and has room for `n` lengths.
    let labels = unsafe { slice(labels, n) };
    match with_sparse(handle, |i| {
        let mut total = 0usize;
        for (j, l) in labels.iter().enumerate() {
            let len = i.get(*l).map(|v| v.indices.len());
            total += len.unwrap_or(0);
            unsafe { *out_lens.add(j) = len.map(|x| x as u32).unwrap_or(u32::MAX) };
        }
        Ok(total)
    }) {
        Ok(t) => t as i32,
        Err(e) => fail(e),
    }
}

/// Copies the entries of the present `labels`, in order, to `out_indices` and
/// `out_values` (room for `cap` each); returns how many entries were written.
#[no_mangle]
pub extern "C" fn quiver_sparse_get(
    handle: i32,
    labels: *const u64,
    n: usize,
    out_indices: *mut u32,
    out_values: *mut f32,
    cap: usize,
) -> i32 {
    // SAFETY: as above.
    let labels = unsafe { slice(labels, n) };
    match with_sparse(handle, |i| {
        let (_, _, indices, values) = i.get_batch(labels);
        if indices.len() > cap {
            return Err(invalid("output buffers too small for the sparse vectors"));
        }
        unsafe {
            std::ptr::copy_nonoverlapping(indices.as_ptr(), out_indices, indices.len());
            std::ptr::copy_nonoverlapping(values.as_ptr(), out_values, values.len());
        }
        Ok(indices.len())
    }) {
        Ok(c) => c as i32,
        Err(e) => fail(e),
    }
}

/// Every stored label, ascending, into `out` (room for `cap`); returns how many. The
/// host sizes `out` from the count in the stats.
#[no_mangle]
pub extern "C" fn quiver_sparse_labels(handle: i32, out: *mut u64, cap: usize) -> i32 {
    match with_sparse(handle, |i| {
        let labels = i.labels();
        if labels.len() > cap {
            return Err(invalid("output buffer too small for the labels"));
        }
        unsafe { std::ptr::copy_nonoverlapping(labels.as_ptr(), out, labels.len()) };
        Ok(labels.len())
    }) {
        Ok(c) => c as i32,
        Err(e) => fail(e),
    }
}

/// Writes five f64s: count, entries, dims, total bytes, full-scan threshold.
#[no_mangle]
pub extern "C" fn quiver_sparse_stats(handle: i32, out: *mut f64) -> i32 {
    match with_sparse(handle, |i| Ok((i.stats(), i.full_scan_threshold(), i.datatype()))) {
        Ok((s, t, dt)) => {
            let code = match dt {
                Datatype::Float32 => 0.0,
                Datatype::Float16 => 1.0,
                Datatype::Uint8 => 2.0,
            };
            let v = [s.count as f64, s.entries as f64, s.dims as f64, s.total_bytes as f64, t as f64, code];
            // SAFETY: the host passes room for six f64s.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, v.len()) };
            0
        }
        Err(e) => fail(e),
    }
}

/// The framed image in a new buffer (the host frees it with `quiver_free`); 0 on failure.
#[no_mangle]
pub extern "C" fn quiver_sparse_to_bytes(handle: i32, out_len: *mut u32) -> *mut u8 {
    let bytes = match with_sparse(handle, |i| Ok(i.to_framed())) {
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
    // SAFETY: `ptr` has room for the bytes; `out_len` for one u32.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len());
        *out_len = bytes.len() as u32;
    }
    ptr
}

/// Reads a framed image from `quiver_sparse_to_bytes`; returns the new handle.
#[no_mangle]
pub extern "C" fn quiver_sparse_from_bytes(bytes: *const u8, len: usize) -> i32 {
    install_panic_hook();
    // SAFETY: the host wrote `len` bytes.
    let bytes = unsafe { slice(bytes, len) };
    match SparseIndex::from_framed(bytes, "sparse index bytes") {
        Ok(i) => insert(i),
        Err(e) => fail(e),
    }
}
