//! Multivector indexes (quiver_core::multi) over the C ABI conventions of lib.rs:
//! handles into a table, buffers from `quiver_alloc`, -1 (or a null buffer) plus the
//! last error on failure. Variable-size results come back in one new buffer the host
//! frees with `quiver_free(ptr, len)` (the length is written to `out_len`).

use std::sync::Mutex;

use quiver_core::multi::{MultiConfig, MultiIndex};
use quiver_core::{Datatype, Distance, Error, ErrorKind};

use super::{fail, install_panic_hook, invalid, quiver_alloc, slice, DEFAULT};

static MULTI: Mutex<Vec<Option<MultiIndex>>> = Mutex::new(Vec::new());

fn table() -> std::sync::MutexGuard<'static, Vec<Option<MultiIndex>>> {
    match MULTI.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn with_multi<T>(handle: i32, f: impl FnOnce(&mut MultiIndex) -> Result<T, Error>) -> Result<T, Error> {
    let mut t = table();
    match usize::try_from(handle).ok().and_then(|h| t.get_mut(h)) {
        Some(Some(index)) => f(index),
        _ => Err(Error::new(ErrorKind::Closed, format!("multivector index handle {} is closed or unknown", handle))),
    }
}

pub(crate) fn insert(index: MultiIndex) -> i32 {
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

fn to_host(bytes: &[u8], out_len: *mut u32) -> *mut u8 {
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

fn result_buffer(r: Result<Vec<u8>, Error>, out_len: *mut u32) -> *mut u8 {
    match r {
        Ok(b) => to_host(&b, out_len),
        Err(e) => {
            fail(e);
            std::ptr::null_mut()
        }
    }
}

/// Creates a multivector index; returns its handle. `distance` as for dense indexes
/// (Cosine or Dot only); `m`, `ef_construct` take `DEFAULT`; `seed` is used when
/// `has_seed` is non-zero; `flags`: bit 0 flat, bit 1 float16, bit 2 uint8.
#[no_mangle]
pub extern "C" fn quiver_multi_new(dim: u32, distance: u32, m: u32, ef_construct: u32, has_seed: u32, seed: u64, flags: u32) -> i32 {
    install_panic_hook();
    let distance = match u8::try_from(distance).ok().and_then(Distance::from_code) {
        Some(d) => d,
        None => return fail(invalid("unknown distance code")),
    };
    if flags & !7 != 0 || flags & 6 == 6 {
        return fail(invalid("unknown index flags"));
    }
    let mut c = MultiConfig::new(dim as usize, distance);
    if m != DEFAULT {
        c.m = m as usize;
    }
    if ef_construct != DEFAULT {
        c.ef_construct = ef_construct as usize;
    }
    if has_seed != 0 {
        c.seed = seed;
    }
    c.flat = flags & 1 != 0;
    c.datatype = match flags & 6 {
        2 => Datatype::Float16,
        4 => Datatype::Uint8,
        _ => Datatype::Float32,
    };
    match MultiIndex::new(c) {
        Ok(i) => insert(i),
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub extern "C" fn quiver_multi_free(handle: i32) {
    let mut t = table();
    if let Some(slot) = usize::try_from(handle).ok().and_then(|h| t.get_mut(h)) {
        *slot = None;
    }
}

/// Inserts or replaces `n` labels; label i holds the next `counts[i]` vectors of `vectors`.
#[no_mangle]
pub extern "C" fn quiver_multi_add(handle: i32, labels: *const u64, n: usize, vectors: *const f32, vectors_len: usize, counts: *const u32, counts_len: usize) -> i32 {
    // SAFETY: the host wrote these arrays with these lengths.
    let (labels, vectors, counts) = unsafe { (slice(labels, n), slice(vectors, vectors_len), slice(counts, counts_len)) };
    match with_multi(handle, |i| i.add(labels, vectors, counts)) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

#[no_mangle]
pub extern "C" fn quiver_multi_delete(handle: i32, labels: *const u64, n: usize) -> i32 {
    // SAFETY: as above.
    let labels = unsafe { slice(labels, n) };
    match with_multi(handle, |i| Ok(i.delete(labels))) {
        Ok(c) => c as i32,
        Err(e) => fail(e),
    }
}

/// Scores by MaxSim; returns a buffer of n labels (u64) then n scores (f32). `ef` 0 = default.
#[no_mangle]
pub extern "C" fn quiver_multi_search(
    handle: i32,
    query: *const f32,
    query_len: usize,
    k: usize,
    ef: usize,
    exact: u32,
    has_allow: u32,
    allow: *const u64,
    allow_len: usize,
    out_len: *mut u32,
) -> *mut u8 {
    // SAFETY: the host wrote these arrays.
    let (query, allow) = unsafe { (slice(query, query_len), slice(allow, allow_len)) };
    let allow = if has_allow != 0 { Some(allow) } else { None };
    let r = with_multi(handle, |i| i.search(query, k, if ef == 0 { None } else { Some(ef) }, exact != 0, allow)).map(|hits| {
        let mut b = Vec::with_capacity(hits.len() * 12);
        for (l, _) in &hits {
            b.extend_from_slice(&l.to_le_bytes());
        }
        for (_, s) in &hits {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b
    });
    result_buffer(r, out_len)
}

/// A buffer: u32 1 then the label's vectors (f32), or u32 0 when the label is absent.
#[no_mangle]
pub extern "C" fn quiver_multi_get_vector(handle: i32, label: u64, out_len: *mut u32) -> *mut u8 {
    let r = with_multi(handle, |i| Ok(i.get_vector(label))).map(|v| {
        let mut b = Vec::new();
        match v {
            Some(v) => {
                b.extend_from_slice(&1u32.to_le_bytes());
                for x in v {
                    b.extend_from_slice(&x.to_le_bytes());
                }
            }
            None => b.extend_from_slice(&0u32.to_le_bytes()),
        }
        b
    });
    result_buffer(r, out_len)
}

/// A buffer: u64 n, n labels (u64), n counts (u32), then the vectors (f32), slot order.
#[no_mangle]
pub extern "C" fn quiver_multi_export_live(handle: i32, out_len: *mut u32) -> *mut u8 {
    let r = with_multi(handle, |i| Ok(i.export_live())).map(|(labels, vectors, counts)| live_buffer(None, &labels, &vectors, &counts));
    result_buffer(r, out_len)
}

/// One page of `quiver_multi_export_live` (up to `max_count` points from slot `from`
/// on): a buffer of u64 next slot, then the same layout as the whole export.
#[no_mangle]
pub extern "C" fn quiver_multi_export_live_from(handle: i32, from: u32, max_count: u32, out_len: *mut u32) -> *mut u8 {
    let r = with_multi(handle, |i| i.export_live_from(from as usize, max_count as usize))
        .map(|(labels, vectors, counts, next)| live_buffer(Some(next), &labels, &vectors, &counts));
    result_buffer(r, out_len)
}

/// [u64 next, when given] u64 n, n labels (u64), n counts (u32), then the vectors (f32).
fn live_buffer(next: Option<usize>, labels: &[u64], vectors: &[f32], counts: &[u32]) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + labels.len() * 12 + vectors.len() * 4);
    if let Some(next) = next {
        b.extend_from_slice(&(next as u64).to_le_bytes());
    }
    b.extend_from_slice(&(labels.len() as u64).to_le_bytes());
    for l in labels {
        b.extend_from_slice(&l.to_le_bytes());
    }
    for c in counts {
        b.extend_from_slice(&c.to_le_bytes());
    }
    for v in vectors {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

#[no_mangle]
pub extern "C" fn quiver_multi_compact(handle: i32) -> i32 {
    match with_multi(handle, |i| i.compact()) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Writes eleven f64s: dim, distance code, count, slots, deleted, vectors, vector
/// bytes, graph bytes, total bytes, flat (0/1), datatype (0 float32, 1 float16, 2 uint8).
#[no_mangle]
pub extern "C" fn quiver_multi_stats(handle: i32, out: *mut f64) -> i32 {
    match with_multi(handle, |i| {
        let c = i.config();
        Ok([
            c.dim as f64,
            c.distance.code() as f64,
            i.len() as f64,
            i.slots() as f64,
            i.deleted_count() as f64,
            i.vector_count() as f64,
            i.vector_bytes() as f64,
            i.graph_bytes() as f64,
            i.total_bytes() as f64,
            if c.flat { 1.0 } else { 0.0 },
            match c.datatype {
                Datatype::Float32 => 0.0,
                Datatype::Float16 => 1.0,
                Datatype::Uint8 => 2.0,
            },
        ])
    }) {
        Ok(v) => {
            // SAFETY: the host passes room for eleven f64s.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, v.len()) };
            0
        }
        Err(e) => fail(e),
    }
}

/// The bytes of the index's file (`MultiIndex::save` writes the same).
#[no_mangle]
pub extern "C" fn quiver_multi_to_bytes(handle: i32, out_len: *mut u32) -> *mut u8 {
    result_buffer(with_multi(handle, |i| Ok(i.to_bytes())), out_len)
}

/// A multivector index from the bytes of its file; errors name `name`.
#[no_mangle]
pub extern "C" fn quiver_multi_from_file_bytes(bytes: *const u8, len: usize, name: *const u8, name_len: usize) -> i32 {
    install_panic_hook();
    // SAFETY: the host wrote these bytes.
    let (bytes, name) = unsafe { (slice(bytes, len), slice(name, name_len)) };
    match MultiIndex::from_bytes(bytes, &String::from_utf8_lossy(name)) {
        Ok(i) => insert(i),
        Err(e) => fail(e),
    }
}
