//! Read-only memory maps of f32 files: how a quantized index keeps its f32 originals
//! on disk while the codes stay in memory (the page cache holds what rescoring reads).
//!
//! Owns: mapping and unmapping. Must never: write through a mapping (the file is
//! written whole, atomically, before it is mapped), or exist on targets without mmap.
//! Nobody may truncate or rewrite a mapped file in place: the process would get SIGBUS
//! on the next read. Replacing it (write elsewhere, rename) is safe.
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
    }
    pub const PROT_READ: c_int = 1;
    pub const MAP_SHARED: c_int = 1;
}

/// A read-only mapping of a little-endian f32 file.
pub struct MappedF32 {
    ptr: *const f32,
    len: usize,
    path: PathBuf,
}

// The mapping is read-only and lives until drop; sharing it between threads is safe.
unsafe impl Send for MappedF32 {}
unsafe impl Sync for MappedF32 {}

impl MappedF32 {
    /// Writes `values` to `path` atomically, then maps the file.
    pub fn create(path: &Path, values: &[f32]) -> Result<MappedF32> {
        if cfg!(target_endian = "big") {
            return Err(Error::new(ErrorKind::Unsupported, "mapped vectors need a little-endian machine"));
        }
        crate::fileio::atomic_write_with(path, |w| {
            // f32 is little-endian here, so the in-memory bytes are the file format.
            let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len() * 4) };
            for chunk in bytes.chunks(1 << 20) {
                w.write_all(chunk).map_err(|e| crate::fileio::io_error("writing vectors", e))?;
            }
            Ok(())
        })?;
        MappedF32::open(path, values.len())
    }

    #[cfg(all(unix, not(target_arch = "wasm32")))]
    pub fn open(path: &Path, len: usize) -> Result<MappedF32> {
        use std::os::unix::io::AsRawFd;
        let file = std::fs::File::open(path).map_err(|e| crate::fileio::io_error(&format!("opening {}", path.display()), e))?;
        let size = file.metadata().map_err(|e| crate::fileio::io_error("stat", e))?.len() as usize;
        if size != len * 4 {
            return Err(Error::corrupt(format!("{}: {} bytes, expected {}", path.display(), size, len * 4)));
        }
        if len == 0 {
            return Ok(MappedF32 { ptr: std::ptr::NonNull::<f32>::dangling().as_ptr(), len: 0, path: path.to_path_buf() });
        }
        let p = unsafe { sys::mmap(std::ptr::null_mut(), size, sys::PROT_READ, sys::MAP_SHARED, file.as_raw_fd(), 0) };
        if p as isize == -1 || p.is_null() {
            return Err(Error::new(ErrorKind::Io, format!("mmap {}: {}", path.display(), std::io::Error::last_os_error())));
        }
        Ok(MappedF32 { ptr: p as *const f32, len, path: path.to_path_buf() })
    }

    #[cfg(not(all(unix, not(target_arch = "wasm32"))))]
    pub fn open(path: &Path, _len: usize) -> Result<MappedF32> {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("cannot map {}: this target has no memory-mapped files", path.display()),
        ))
    }

    #[inline(always)]
    pub fn as_slice(&self) -> &[f32] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file_bytes(&self) -> usize {
        self.len * 4
    }
}

impl Drop for MappedF32 {
    fn drop(&mut self) {
        #[cfg(all(unix, not(target_arch = "wasm32")))]
        if self.len > 0 {
            unsafe {
                sys::munmap(self.ptr as *mut std::os::raw::c_void, self.len * 4);
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn maps_what_it_wrote_and_rejects_a_wrong_size() {
        let tmp = crate::testutil::TempDir::new("mapped");
        let dir = tmp.path();
        let path = dir.join("v.f32");
        let vals: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let m = MappedF32::create(&path, &vals).unwrap();
        assert_eq!(m.as_slice(), &vals[..]);
        assert_eq!(MappedF32::open(&path, 999).err().unwrap().code(), "QUIVER_CORRUPT");
        drop(m);
        let empty = MappedF32::create(&dir.join("e.f32"), &[]).unwrap();
        assert!(empty.as_slice().is_empty());
    }
}
