//! The engine's file formats for a host that does its own file I/O.
//!
//! Owns: exports that encode and decode the bytes of engine files in buffers: WAL
//! records and segment scans (quiver_core::wal_codec, the functions the native log
//! uses around its own file calls), and index images loaded under the file's name.
//! Must never: touch a file (the TypeScript worker reads and writes them with
//! `node:fs`, with the fsyncs and renames of the native backend), or have its own
//! copy of a format: every byte comes from quiver-core.
//!
//! Output buffers come from `quiver_alloc`; the host frees them with `quiver_free`
//! and the length written to `out_len` (bytes).

use quiver_core::sparse::SparseIndex;
use quiver_core::wal_codec;
use quiver_core::{Error, Index};

use super::{fail, install_panic_hook, invalid, quiver_alloc, slice};

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

fn words_to_host(words: &[u64], out_len: *mut u32) -> *mut u64 {
    let mut bytes = Vec::with_capacity(words.len() * 8);
    for w in words {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    to_host(&bytes, out_len) as *mut u64
}

fn name_of(name: *const u8, name_len: usize) -> String {
    // SAFETY: the host wrote `name_len` bytes of UTF-8 at `name`.
    String::from_utf8_lossy(unsafe { slice(name, name_len) }).into_owned()
}

/// Encodes `n` records with sequence numbers from `first_seq`: record i is the next
/// `lens[i]` bytes of `data`. Returns the bytes to append to the active segment.
#[no_mangle]
pub extern "C" fn quiver_wal_encode(
    first_seq: u64,
    data: *const u8,
    data_len: usize,
    lens: *const u32,
    n: usize,
    out_len: *mut u32,
) -> *mut u8 {
    // SAFETY: the host wrote these arrays with these lengths.
    let (data, lens) = unsafe { (slice(data, data_len), slice(lens, n)) };
    let total: usize = lens.iter().map(|&l| l as usize).sum();
    if total != data.len() {
        fail(invalid("record lengths do not add up to the data"));
        return std::ptr::null_mut();
    }
    if let Some(&l) = lens.iter().find(|&&l| l as usize > wal_codec::MAX_RECORD_BYTES) {
        fail(invalid(&format!(
            "wal record of {} bytes exceeds the maximum of {} bytes",
            l,
            wal_codec::MAX_RECORD_BYTES
        )));
        return std::ptr::null_mut();
    }
    let mut out = Vec::with_capacity(total + n * wal_codec::RECORD_HEADER_BYTES);
    let mut at = 0usize;
    for (i, &l) in lens.iter().enumerate() {
        wal_codec::encode_record(&mut out, first_seq + i as u64, &data[at..at + l as usize]);
        at += l as usize;
    }
    to_host(&out, out_len)
}

/// Scans a segment image named for `first_seq`. Returns u64s: last seq (`first_seq -
/// 1` if none is valid), valid bytes, the offset of the first bad record (u64::MAX if
/// none; then the reason is the last error's message), the number of index entries,
/// then (seq, offset) per entry.
#[no_mangle]
pub extern "C" fn quiver_wal_scan(bytes: *const u8, len: usize, first_seq: u64, out_len: *mut u32) -> *mut u64 {
    if first_seq == 0 {
        fail(invalid("segments start at sequence number 1"));
        return std::ptr::null_mut();
    }
    // SAFETY: the host wrote `len` bytes.
    let bytes = unsafe { slice(bytes, len) };
    let s = wal_codec::scan_segment_bytes(bytes, first_seq);
    let bad = match &s.bad {
        Some((offset, reason)) => {
            fail(Error::corrupt(reason.clone()));
            *offset
        }
        None => u64::MAX,
    };
    let mut words = vec![s.last_seq, s.valid_bytes, bad, s.index.len() as u64];
    for (seq, off) in &s.index {
        words.push(*seq);
        words.push(*off);
    }
    words_to_host(&words, out_len)
}

/// Searches a damaged tail (from the bad record on) for a valid record; returns 1 and
/// writes (offset, seq) to `out` when one exists, else 0.
#[no_mangle]
pub extern "C" fn quiver_wal_find_valid(bytes: *const u8, len: usize, expected: u64, out: *mut u64) -> i32 {
    // SAFETY: the host wrote `len` bytes and passes room for two u64s.
    let bytes = unsafe { slice(bytes, len) };
    match wal_codec::find_valid_record_after(bytes, expected) {
        Some((off, seq)) => {
            unsafe {
                *out = off as u64;
                *out.add(1) = seq;
            }
            1
        }
        None => 0,
    }
}

/// Decodes the records of a run of a segment (`bytes`, starting at byte `base` of
/// file `name` on the record holding `start_seq`): returns u64s, the count n then
/// (seq, data offset in `bytes`, data length) per record kept (seq >= `want_from`, at
/// most `max_records`). A bad record fails with Corrupt naming the file and offset.
#[no_mangle]
pub extern "C" fn quiver_wal_decode(
    bytes: *const u8,
    len: usize,
    start_seq: u64,
    want_from: u64,
    max_records: usize,
    base: u64,
    name: *const u8,
    name_len: usize,
    out_len: *mut u32,
) -> *mut u64 {
    // SAFETY: the host wrote `len` bytes.
    let bytes = unsafe { slice(bytes, len) };
    match wal_codec::decode_records(bytes, start_seq, want_from, max_records) {
        Ok(recs) => {
            let mut words = Vec::with_capacity(1 + recs.len() * 3);
            words.push(recs.len() as u64);
            for (seq, off, l) in recs {
                words.push(seq);
                words.push(off as u64);
                words.push(l as u64);
            }
            words_to_host(&words, out_len)
        }
        Err((offset, reason)) => {
            fail(Error::corrupt(format!(
                "{}: corrupt record at byte offset {}: {}",
                name_of(name, name_len),
                base + offset,
                reason
            )));
            std::ptr::null_mut()
        }
    }
}

/// Reads an index file's bytes (`Index::save` wrote them; `quiver_index_to_bytes`
/// returns the same) and returns the new handle; errors name `name`.
#[no_mangle]
pub extern "C" fn quiver_index_from_file_bytes(bytes: *const u8, len: usize, name: *const u8, name_len: usize) -> i32 {
    install_panic_hook();
    // SAFETY: the host wrote `len` bytes.
    let bytes = unsafe { slice(bytes, len) };
    index_from(bytes, name, name_len, None, None)
}

/// The new handle of the index in `bytes` and the content of the files they name (see
/// `Index::from_bytes_with_files`), or -1 with the error kept; errors name `name`.
fn index_from(bytes: &[u8], name: *const u8, name_len: usize, side: Option<&[u8]>, graph: Option<&[u8]>) -> i32 {
    match Index::from_bytes_with_files(bytes, &name_of(name, name_len), side, graph) {
        Ok(index) => super::insert(index),
        Err(e) => fail(e),
    }
}

/// Reads an index file's bytes whose originals are in a side file (`quiver_core::hnsw::side_file_of`
/// names it): `side` is that file's content, at least the bytes the index covers (its
/// tail is ignored). The originals are held in memory: wasm32 has no mmap.
#[no_mangle]
pub extern "C" fn quiver_index_from_file_bytes_side(
    bytes: *const u8,
    len: usize,
    name: *const u8,
    name_len: usize,
    side: *const u8,
    side_len: usize,
) -> i32 {
    install_panic_hook();
    // SAFETY: the host wrote `len` and `side_len` bytes.
    let (bytes, side) = unsafe { (slice(bytes, len), slice(side, side_len)) };
    index_from(bytes, name, name_len, Some(side), None)
}

/// Reads an index file's bytes whose level-0 links are in a graph file
/// (`quiver_core::hnsw::graph_file_of` names it; a native node mapped it): `graph` is
/// that file's content, and `side` the originals' side file when `has_side` is 1. Both
/// are held in memory: wasm32 has no mmap.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn quiver_index_from_file_bytes_graph(
    bytes: *const u8,
    len: usize,
    name: *const u8,
    name_len: usize,
    side: *const u8,
    side_len: usize,
    has_side: i32,
    graph: *const u8,
    graph_len: usize,
) -> i32 {
    install_panic_hook();
    // SAFETY: the host wrote `len`, `side_len` and `graph_len` bytes.
    let (bytes, side, graph) = unsafe { (slice(bytes, len), slice(side, side_len), slice(graph, graph_len)) };
    let side = if has_side == 1 { Some(side) } else { None };
    index_from(bytes, name, name_len, side, Some(graph))
}

/// Reads a sparse index file's bytes (`SparseIndex::save` wrote them) and returns the
/// new sparse handle; errors name `name`.
#[no_mangle]
pub extern "C" fn quiver_sparse_from_file_bytes(bytes: *const u8, len: usize, name: *const u8, name_len: usize) -> i32 {
    install_panic_hook();
    // SAFETY: the host wrote `len` bytes.
    let bytes = unsafe { slice(bytes, len) };
    match SparseIndex::from_framed(bytes, &name_of(name, name_len)) {
        Ok(index) => super::sparse::insert(index),
        Err(e) => fail(e),
    }
}
