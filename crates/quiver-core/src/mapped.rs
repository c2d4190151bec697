//! Memory maps of little-endian files of 4-byte words that only grow: how a quantized
//! index keeps its f32 originals on disk while the codes stay in memory (the page
//! cache holds what rescoring and linking read), and how an index keeps its level-0
//! link lists on disk (`hnsw_config.on_disk`: a graph file of u32 words, written once
//! and never appended to, see `Index::move_graph_to_file`).
//!
//! Owns: mapping, appending and unmapping. Must never: write through a mapping (it is
//! read-only; appends go through the file), truncate a file it maps or rewrite bytes a
//! mapping or a checkpoint reads (the process would get SIGBUS on the next read of a
//! truncated page, or read other vectors), or exist on targets without mmap (there
//! `open` and `create` answer `Unsupported`).
//!
//! Appends write at the end of what this mapping covers (`len`), not at the end of the
//! file: bytes past `len` are a tail no index reads (a failed append, or vectors a
//! later save covered that was never made the current checkpoint), and an append
//! writes over them. The mapping reserves address space beyond the file (`cap`), so an
//! append remaps only when it outgrows that; no byte past `len` is ever read.
//! `mmap`/`munmap` are declared here directly: std already links the C library, and
//! quiver-core takes no dependencies.

use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

#[cfg(all(unix, not(target_arch = "wasm32")))]
mod sys {
    use std::os::raw::{c_int, c_long, c_void};
    // off_t is a C long on the 32- and 64-bit Unix targets we build for.
    extern "C" {
        pub fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: c_long) -> *mut c_void;
        pub fn munmap(addr: *mut c_void, len: usize) -> c_int;
        pub fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }
    /// Linux and the BSDs: drop the pages from this mapping (a shared file mapping's
    /// pages stay in the page cache; the next read faults them back in).
    pub const MADV_DONTNEED: c_int = 4;
    pub const PROT_READ: c_int = 1;
    pub const MAP_SHARED: c_int = 1;
}

/// Address space an appendable mapping reserves at least (in f32 values: 16 MiB), so
/// the first appends of a growing index do not remap each time.
#[cfg(all(unix, not(target_arch = "wasm32")))]
const MIN_CAP: usize = 4 << 20;

/// A read-only mapping of a little-endian f32 file, which appends can extend.
pub struct MappedF32 {
    ptr: *const f32,
    /// Values readable (the file holds at least this many).
    len: usize,
    /// Values the mapping spans (>= len; past the file's end nothing may be read).
    cap: usize,
    path: PathBuf,
    /// The mapped file, open for reads (`read_row`) and, when `writable`, appends.
    file: Option<std::fs::File>,
    writable: bool,
}

// The mapping is read-only and lives until drop (appends need `&mut self`); sharing it
// between threads is safe.
unsafe impl Send for MappedF32 {}
unsafe impl Sync for MappedF32 {}

fn unsupported(path: &Path) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("cannot map {}: this target has no memory-mapped files", path.display()),
    )
}

impl MappedF32 {
    /// Writes `values` to `path` atomically (temp file, fsync, rename, directory
    /// fsync), then maps the file.
    pub fn create(path: &Path, values: &[f32]) -> Result<MappedF32> {
        if cfg!(target_endian = "big") {
            return Err(Error::new(ErrorKind::Unsupported, "mapped vectors need a little-endian machine"));
        }
        if cfg!(not(all(unix, not(target_arch = "wasm32")))) {
            return Err(unsupported(path));
        }
        crate::fileio::atomic_write_with(path, |w| {
            // f32 is little-endian here, so the in-memory bytes are the file format.
            for chunk in as_bytes(values).chunks(1 << 20) {
                w.write_all(chunk).map_err(|e| crate::fileio::io_error("writing vectors", e))?;
            }
            Ok(())
        })?;
        MappedF32::open(path, values.len())
    }

    /// Writes the u32 `words` to `path` atomically, through `fill` in bounded chunks
    /// (each call of `fill` appends words to the buffer it is given), then maps the
    /// file: for files whose words are gathered from elsewhere (a graph's link lists
    /// out of the arena) and never built whole in memory. `total` is the number of
    /// words `fill` writes in all (a different count is an error).
    pub fn create_words<F: FnMut(&mut Vec<u32>) -> bool>(path: &Path, total: usize, mut fill: F) -> Result<MappedF32> {
        if cfg!(target_endian = "big") {
            return Err(Error::new(ErrorKind::Unsupported, "mapped files need a little-endian machine"));
        }
        if cfg!(not(all(unix, not(target_arch = "wasm32")))) {
            return Err(unsupported(path));
        }
        crate::fileio::atomic_write_with(path, |w| {
            let mut buf: Vec<u32> = Vec::with_capacity(1 << 18);
            let mut written = 0usize;
            loop {
                buf.clear();
                let more = fill(&mut buf);
                written += buf.len();
                let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, buf.len() * 4) };
                w.write_all(bytes).map_err(|e| crate::fileio::io_error("writing words", e))?;
                if !more {
                    break;
                }
            }
            if written != total {
                return Err(Error::new(ErrorKind::Io, format!("{}: wrote {} words, expected {}", path.display(), written, total)));
            }
            Ok(())
        })?;
        MappedF32::open(path, total)
    }

    /// Maps the first `len` values of `path`. A longer file is fine (its tail is never
    /// read, and the next append writes over it); a shorter one is `Corrupt`.
    #[cfg(all(unix, not(target_arch = "wasm32")))]
    pub fn open(path: &Path, len: usize) -> Result<MappedF32> {
        // Read-write for appends (mmap needs the descriptor readable too); read-only
        // when that is all the file allows (then appends fail, reads work).
        let (file, writable) = match std::fs::OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => (f, true),
            Err(_) => (std::fs::File::open(path).map_err(|e| crate::fileio::io_error(&format!("opening {}", path.display()), e))?, false),
        };
        let size = file.metadata().map_err(|e| crate::fileio::io_error("stat", e))?.len();
        if size < len as u64 * 4 {
            return Err(Error::corrupt(format!(
                "{}: {} bytes, but the index needs {} ({} vectors' values); the file is shorter than the index it belongs to",
                path.display(),
                size,
                len as u64 * 4,
                len
            )));
        }
        let mut m = MappedF32 { ptr: std::ptr::NonNull::<f32>::dangling().as_ptr(), len: 0, cap: 0, path: path.to_path_buf(), file: None, writable };
        m.remap(&file, len, len)?;
        m.len = len;
        m.file = Some(file);
        Ok(m)
    }

    #[cfg(not(all(unix, not(target_arch = "wasm32"))))]
    pub fn open(path: &Path, _len: usize) -> Result<MappedF32> {
        Err(unsupported(path))
    }

    /// Maps `cap` values of `file` (at least MIN_CAP when appends may follow) in place
    /// of the current mapping, which is unmapped after the new one exists.
    #[cfg(all(unix, not(target_arch = "wasm32")))]
    fn remap(&mut self, file: &std::fs::File, needed: usize, cap: usize) -> Result<()> {
        use std::os::unix::io::AsRawFd;
        let cap = if needed == 0 { 0 } else { cap.max(needed) };
        if cap == 0 {
            return Ok(());
        }
        let p = unsafe { sys::mmap(std::ptr::null_mut(), cap * 4, sys::PROT_READ, sys::MAP_SHARED, file.as_raw_fd(), 0) };
        if p as isize == -1 || p.is_null() {
            return Err(Error::new(ErrorKind::Io, format!("mmap {}: {}", self.path.display(), std::io::Error::last_os_error())));
        }
        self.unmap();
        self.ptr = p as *const f32;
        self.cap = cap;
        Ok(())
    }

    fn unmap(&mut self) {
        #[cfg(all(unix, not(target_arch = "wasm32")))]
        if self.cap > 0 {
            unsafe {
                sys::munmap(self.ptr as *mut std::os::raw::c_void, self.cap * 4);
            }
        }
        self.cap = 0;
        self.ptr = std::ptr::NonNull::<f32>::dangling().as_ptr();
    }

    /// Writes `values` after the `len` values mapped (over any tail the file has),
    /// then makes them readable, remapping when they outgrow the reserved span. On an
    /// error nothing readable changes. Not durable until `sync`.
    #[cfg(all(unix, not(target_arch = "wasm32")))]
    pub fn append(&mut self, values: &[f32]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        if values.is_empty() {
            return Ok(());
        }
        let file = match &self.file {
            Some(f) if self.writable => f,
            _ => return Err(Error::new(ErrorKind::Io, format!("{} is open read-only: cannot append vectors", self.path.display()))),
        };
        let mut at = self.len as u64 * 4;
        for chunk in as_bytes(values).chunks(1 << 20) {
            file.write_all_at(chunk, at).map_err(|e| crate::fileio::io_error(&format!("appending to {}", self.path.display()), e))?;
            at += chunk.len() as u64;
        }
        let needed = self.len + values.len();
        if needed > self.cap {
            let file = self.file.take().expect("checked above");
            let r = self.remap(&file, needed, needed.max(self.cap * 2).max(MIN_CAP));
            self.file = Some(file);
            r?;
        }
        self.len = needed;
        Ok(())
    }

    #[cfg(not(all(unix, not(target_arch = "wasm32"))))]
    pub fn append(&mut self, _values: &[f32]) -> Result<()> {
        Err(unsupported(&self.path))
    }

    /// Copies values `at..at + out.len()` into `out` with a positional read of the
    /// file, not through the mapping: the page cache serves it, and no page is mapped
    /// into the process (what rescoring reads: a few rows per query, scattered, which
    /// through the map would each fault in a fault-around window of the file and
    /// count in the process's resident set). Falls back to the mapping on any error.
    #[inline]
    pub fn read_into(&self, at: usize, out: &mut [f32]) {
        debug_assert!(at + out.len() <= self.len);
        #[cfg(all(unix, not(target_arch = "wasm32"), target_endian = "little"))]
        if let Some(f) = &self.file {
            use std::os::unix::fs::FileExt;
            let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, out.len() * 4) };
            if f.read_exact_at(bytes, at as u64 * 4).is_ok() {
                return;
            }
        }
        out.copy_from_slice(&self.as_slice()[at..at + out.len()]);
    }

    /// Lets go of the pages this mapping has faulted in (they stay in the page cache,
    /// and a later read maps them again): after a build pass touched most of the file,
    /// the process's resident set no longer counts it. Advisory: errors are ignored.
    pub fn release_pages(&self) {
        #[cfg(all(unix, not(target_arch = "wasm32")))]
        if self.cap > 0 {
            unsafe {
                sys::madvise(self.ptr as *mut std::os::raw::c_void, self.cap * 4, sys::MADV_DONTNEED);
            }
        }
    }

    /// Makes the values appended so far durable (fdatasync).
    pub fn sync(&self) -> Result<()> {
        match &self.file {
            Some(f) if self.writable => f.sync_data().map_err(|e| crate::fileio::io_error(&format!("syncing {}", self.path.display()), e)),
            _ => Ok(()),
        }
    }

    #[inline(always)]
    pub fn as_slice(&self) -> &[f32] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The mapped values as u32 words (files of link lists).
    #[inline(always)]
    pub fn as_words(&self) -> &[u32] {
        unsafe { std::slice::from_raw_parts(self.ptr as *const u32, self.len) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `p` names the file this mapping reads (same device and inode): after the
    /// directory holding it was renamed (a recovered snapshot's staging directory moved
    /// into place), the file is still the same under its new path.
    #[cfg(all(unix, not(target_arch = "wasm32")))]
    pub fn is_file_at(&self, p: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (&self.file, std::fs::metadata(p)) {
            (Some(f), Ok(there)) => match f.metadata() {
                Ok(mine) => mine.dev() == there.dev() && mine.ino() == there.ino(),
                Err(_) => false,
            },
            _ => false,
        }
    }

    #[cfg(not(all(unix, not(target_arch = "wasm32"))))]
    pub fn is_file_at(&self, _p: &Path) -> bool {
        false
    }

    /// Bytes of the file the mapping reads (`len * 4`; the file may be longer).
    pub fn file_bytes(&self) -> usize {
        self.len * 4
    }
}

fn as_bytes(values: &[f32]) -> &[u8] {
    // f32 is little-endian where files are mapped (checked in `create`), so the
    // in-memory bytes are the file format.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len() * 4) }
}

impl Drop for MappedF32 {
    fn drop(&mut self) {
        self.unmap();
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn maps_what_it_wrote_and_rejects_a_short_file() {
        let tmp = crate::testutil::TempDir::new("mapped");
        let dir = tmp.path();
        let path = dir.join("v.f32");
        let vals: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let m = MappedF32::create(&path, &vals).unwrap();
        assert_eq!(m.as_slice(), &vals[..]);
        // Longer than needed: the tail is ignored. Shorter: corrupt.
        assert_eq!(MappedF32::open(&path, 999).unwrap().as_slice(), &vals[..999]);
        let e = MappedF32::open(&path, 1001).err().unwrap();
        assert_eq!(e.code(), "QUIVER_CORRUPT");
        assert!(e.message.contains("shorter"), "{}", e);
        drop(m);
        let empty = MappedF32::create(&dir.join("e.f32"), &[]).unwrap();
        assert!(empty.as_slice().is_empty());
    }

    #[test]
    fn appends_grow_the_mapping_and_write_over_a_tail() {
        let tmp = crate::testutil::TempDir::new("mapped-append");
        let path = tmp.path().join("a.f32");
        let mut m = MappedF32::create(&path, &[]).unwrap();
        let mut want: Vec<f32> = Vec::new();
        // Enough to outgrow the first reserved span and remap.
        for round in 0..6 {
            let batch: Vec<f32> = (0..(MIN_CAP / 2 + 7)).map(|i| (round * 10_000_000 + i) as f32).collect();
            let old = m.as_slice().as_ptr();
            m.append(&batch).unwrap();
            want.extend_from_slice(&batch);
            assert_eq!(m.as_slice().len(), want.len());
            assert!(m.as_slice() == &want[..], "round {}", round);
            let _ = old;
        }
        m.sync().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), want.len() as u64 * 4);
        // Opened with fewer values than the file holds, an append writes over the tail.
        let mut short = MappedF32::open(&path, 10).unwrap();
        short.append(&[-1.0, -2.0]).unwrap();
        assert_eq!(&short.as_slice()[8..], &[want[8], want[9], -1.0, -2.0]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), want.len() as u64 * 4);
        // The old mapping (another index of the same file) still reads its values.
        assert_eq!(m.as_slice()[..10], want[..10]);
        // Positional reads return what the mapping holds.
        let mut row = vec![0f32; 5];
        short.read_into(7, &mut row);
        assert_eq!(row, short.as_slice()[7..12].to_vec());
    }
}
