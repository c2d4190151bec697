//! Durable file writes and the engine's framed file format.
//!
//! Owns: how an engine file reaches the disk (temp file in the same directory, fsync,
//! rename over the target, fsync of the directory), the frame every engine file
//! carries (magic, format version, flags, payload length, payload, CRC-32C), and the
//! little-endian byte writer/reader used to build payloads.
//!
//! Must never: leave a half-written file under the target name (a crash leaves either
//! the old file or the new one), trust a length read from disk before checking it
//! against the bytes actually present, panic on malformed input, or depend on the
//! host's byte order.
//!
//! Frame layout (all integers little-endian):
//! ```text
//! offset 0   8 bytes  magic            chosen by the caller, e.g. b"QVRINDEX"
//! offset 8   u32      format version   checked against the reader's newest
//! offset 12  u32      flags            reserved; written 0, rejected if non-zero
//! offset 16  u64      payload length
//! offset 24  payload
//! then       u32      CRC-32C of the payload
//! ```
//! The checksum covers the payload only. The header is checked structurally instead:
//! the magic must match, the version must be supported, the flags must be zero and
//! the length must account for every byte of the file exactly.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::crc32c::crc32c;
use crate::error::{Error, ErrorKind, Result};

/// Bytes before the payload in a framed file.
pub const FRAME_HEADER_BYTES: usize = 24;
/// Bytes after the payload in a framed file.
pub const FRAME_TRAILER_BYTES: usize = 4;

/// Turns an `io::Error` into an engine error, keeping the distinctions callers act
/// on: a missing file is `NotFound`, a platform without files (wasm32) is
/// `Unsupported`, everything else is `Io`. The context should name the file.
pub fn io_error(context: &str, e: io::Error) -> Error {
    let kind = match e.kind() {
        io::ErrorKind::NotFound => ErrorKind::NotFound,
        io::ErrorKind::Unsupported => ErrorKind::Unsupported,
        _ => ErrorKind::Io,
    };
    Error::new(kind, format!("{}: {}", context, e))
}

/// Makes the directory entries of `dir` durable (new, renamed or deleted files).
/// POSIX only guarantees that a rename or create survives a crash once the directory
/// itself is fsynced. On platforms where directories cannot be opened as files
/// (Windows) this is a no-op; there the rename itself is the best available.
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let d = File::open(dir).map_err(|e| io_error(&format!("open directory {}", dir.display()), e))?;
        d.sync_all()
            .map_err(|e| io_error(&format!("fsync directory {}", dir.display()), e))?;
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
    }
    Ok(())
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Process id used in temp file names. `std::process::id` panics on targets without
/// processes (wasm32-unknown-unknown); there the file calls fail cleanly instead.
fn pid() -> u32 {
    #[cfg(any(unix, windows))]
    {
        std::process::id()
    }
    #[cfg(not(any(unix, windows)))]
    {
        0
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Creates a fresh temp file next to `path`. The name starts with '.' and contains
/// ".tmp-" so directory scanners can recognise (and skip) leftovers of a crash.
fn create_temp_beside(path: &Path) -> Result<(PathBuf, File)> {
    let dir = parent_dir(path);
    let base = match path.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None => return Err(Error::invalid(format!("{} does not name a file", path.display()))),
    };
    // create_new never reuses an existing file: a leftover from a crashed process
    // with the same pid simply makes us try the next counter value.
    for _ in 0..64 {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{}.tmp-{}-{}", base, pid(), n));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error(&format!("create temp file {}", tmp.display()), e)),
        }
    }
    Err(Error::new(
        ErrorKind::Io,
        format!("could not create a temp file beside {}", path.display()),
    ))
}

/// Writes `bytes` to `path` atomically and durably: after `Ok`, the file holds exactly
/// `bytes` even across a crash; after `Err` (or a crash part-way), it holds what it
/// held before.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    atomic_write_with(path, |w| {
        w.write_all(bytes)
            .map_err(|e| io_error(&format!("write {}", path.display()), e))
    })
}

/// Like `atomic_write`, but the content is produced by `fill`, which writes into a
/// buffered stream, so large files need not be held in memory whole. If `fill`
/// returns an error, the temp file is removed, the target is untouched and the error
/// is returned unchanged.
pub fn atomic_write_with<F>(path: &Path, fill: F) -> Result<()>
where
    F: FnOnce(&mut dyn Write) -> Result<()>,
{
    let (tmp, file) = create_temp_beside(path)?;
    match write_then_rename(path, &tmp, file, fill) {
        Ok(()) => Ok(()),
        Err(e) => {
            // Best effort: a leftover temp file is harmless, the original error matters.
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn write_then_rename<F>(path: &Path, tmp: &Path, file: File, fill: F) -> Result<()>
where
    F: FnOnce(&mut dyn Write) -> Result<()>,
{
    let mut w = BufWriter::with_capacity(256 * 1024, file);
    fill(&mut w)?;
    let file = w
        .into_inner()
        .map_err(|e| io_error(&format!("write {}", tmp.display()), e.into_error()))?;
    // The data must be on disk before the rename makes it visible under the real name,
    // or a crash could leave the new name pointing at an empty or partial file.
    file.sync_all()
        .map_err(|e| io_error(&format!("fsync {}", tmp.display()), e))?;
    drop(file);
    fs::rename(tmp, path).map_err(|e| io_error(&format!("rename {} to {}", tmp.display(), path.display()), e))?;
    sync_dir(&parent_dir(path))
}

/// Builds a framed file image in memory. See the module header for the layout.
pub fn frame(magic: [u8; 8], version: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len() + FRAME_TRAILER_BYTES);
    put_frame_header(&mut out, magic, version, payload.len() as u64);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32c(payload).to_le_bytes());
    out
}

fn put_frame_header(out: &mut Vec<u8>, magic: [u8; 8], version: u32, payload_len: u64) {
    out.extend_from_slice(&magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&payload_len.to_le_bytes());
}

/// Shows a magic in error messages: printable ASCII as is, other bytes as \xNN.
fn show_magic(m: &[u8]) -> String {
    let mut s = String::new();
    for &b in m {
        if (0x20..0x7F).contains(&b) && b != b'\\' {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{:02x}", b));
        }
    }
    s
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// Checks a framed image and returns its version and payload. `name` (usually the
/// file path) goes into every error message. Errors: wrong magic, a short image, a
/// length that does not match, trailing bytes or a checksum mismatch are `Corrupt`;
/// a version newer than `max_version` or unknown flags are `UnsupportedFormat`.
pub fn unframe<'a>(bytes: &'a [u8], magic: [u8; 8], max_version: u32, name: &str) -> Result<(u32, &'a [u8])> {
    if bytes.len() < 8 {
        return Err(Error::corrupt(format!(
            "{}: file is {} bytes, too short to hold its header (expected magic {})",
            name,
            bytes.len(),
            show_magic(&magic)
        )));
    }
    if bytes[..8] != magic {
        return Err(Error::corrupt(format!(
            "{}: wrong magic: expected {}, found {} (not a file of this kind, or damaged)",
            name,
            show_magic(&magic),
            show_magic(&bytes[..8])
        )));
    }
    if bytes.len() < FRAME_HEADER_BYTES {
        return Err(Error::corrupt(format!(
            "{}: file is {} bytes, too short to hold its {}-byte header",
            name,
            bytes.len(),
            FRAME_HEADER_BYTES
        )));
    }
    // The version is checked before anything else in the file is interpreted: a newer
    // format may lay out the rest differently, so its other fields mean nothing to us.
    let version = le_u32(&bytes[8..12]);
    if version > max_version {
        return Err(Error::new(
            ErrorKind::UnsupportedFormat,
            format!(
                "{}: format version {} is newer than the newest this build reads (version {})",
                name, version, max_version
            ),
        ));
    }
    let flags = le_u32(&bytes[12..16]);
    if flags != 0 {
        return Err(Error::new(
            ErrorKind::UnsupportedFormat,
            format!("{}: unknown header flags {:#010x} (this build knows none)", name, flags),
        ));
    }
    let payload_len = le_u64(&bytes[16..24]);
    let available = (bytes.len() - FRAME_HEADER_BYTES) as u64;
    let needed = payload_len.checked_add(FRAME_TRAILER_BYTES as u64);
    match needed {
        Some(n) if n == available => {}
        Some(n) if n > available => {
            return Err(Error::corrupt(format!(
                "{}: truncated: header declares a {}-byte payload but only {} bytes follow the header",
                name, payload_len, available
            )))
        }
        Some(_) => {
            return Err(Error::corrupt(format!(
                "{}: {} unexpected bytes after the checksum (header declares a {}-byte payload)",
                name,
                available - payload_len - FRAME_TRAILER_BYTES as u64,
                payload_len
            )))
        }
        None => {
            return Err(Error::corrupt(format!(
                "{}: impossible payload length {}",
                name, payload_len
            )))
        }
    }
    let end = FRAME_HEADER_BYTES + payload_len as usize;
    let payload = &bytes[FRAME_HEADER_BYTES..end];
    let stored = le_u32(&bytes[end..end + 4]);
    let actual = crc32c(payload);
    if stored != actual {
        return Err(Error::corrupt(format!(
            "{}: checksum mismatch (stored {:#010x}, computed {:#010x})",
            name, stored, actual
        )));
    }
    Ok((version, payload))
}

/// Writes `payload` framed (see the module header) to `path`, atomically and durably.
pub fn write_framed(path: &Path, magic: [u8; 8], version: u32, payload: &[u8]) -> Result<()> {
    atomic_write_with(path, |w| {
        let mut header = Vec::with_capacity(FRAME_HEADER_BYTES);
        put_frame_header(&mut header, magic, version, payload.len() as u64);
        let ctx = || format!("write {}", path.display());
        w.write_all(&header).map_err(|e| io_error(&ctx(), e))?;
        w.write_all(payload).map_err(|e| io_error(&ctx(), e))?;
        w.write_all(&crc32c(payload).to_le_bytes())
            .map_err(|e| io_error(&ctx(), e))
    })
}

/// Reads a framed file written by `write_framed` and returns its version and payload.
/// Errors name the file; a missing file is `NotFound`. See `unframe` for the rest.
pub fn read_framed(path: &Path, magic: [u8; 8], max_version: u32) -> Result<(u32, Vec<u8>)> {
    let mut bytes = fs::read(path).map_err(|e| io_error(&format!("read {}", path.display()), e))?;
    let name = path.display().to_string();
    let (version, len) = {
        let (v, p) = unframe(&bytes, magic, max_version, &name)?;
        (v, p.len())
    };
    // Reuse the buffer rather than copying the payload out: engine files can be large.
    bytes.truncate(FRAME_HEADER_BYTES + len);
    bytes.drain(..FRAME_HEADER_BYTES);
    Ok((version, bytes))
}

/// Little-endian serialiser over a growable buffer. Infallible; it only appends.
#[derive(Clone, Debug, Default)]
pub struct ByteWriter {
    buf: Vec<u8>,
}

impl ByteWriter {
    pub fn new() -> ByteWriter {
        ByteWriter { buf: Vec::new() }
    }
    pub fn with_capacity(n: usize) -> ByteWriter {
        ByteWriter {
            buf: Vec::with_capacity(n),
        }
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }
    #[inline]
    pub fn put_u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    #[inline]
    pub fn put_u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn put_u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn put_u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn put_f32(&mut self, v: f32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn put_f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Raw bytes, no length prefix (write the length yourself if the reader needs it).
    pub fn put_bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    /// The values only, no length prefix.
    pub fn put_f32_slice(&mut self, v: &[f32]) {
        // Grow once, then fill fixed 4-byte chunks: the compiler turns this into a
        // plain copy on little-endian targets and a byte swap loop on big-endian ones.
        let start = self.buf.len();
        self.buf.resize(start + v.len() * 4, 0);
        for (dst, x) in self.buf[start..].chunks_exact_mut(4).zip(v) {
            dst.copy_from_slice(&x.to_le_bytes());
        }
    }
    /// The values only, no length prefix.
    pub fn put_u32_slice(&mut self, v: &[u32]) {
        let start = self.buf.len();
        self.buf.resize(start + v.len() * 4, 0);
        for (dst, x) in self.buf[start..].chunks_exact_mut(4).zip(v) {
            dst.copy_from_slice(&x.to_le_bytes());
        }
    }
}

/// Little-endian deserialiser over a byte slice. Every read checks the remaining
/// length first and returns a `Corrupt` error (naming the source and the position)
/// instead of panicking, because its input comes from disk.
#[derive(Clone, Debug)]
pub struct ByteReader<'a> {
    buf: &'a [u8],
    pos: usize,
    name: String,
}

impl<'a> ByteReader<'a> {
    pub fn new(buf: &'a [u8]) -> ByteReader<'a> {
        ByteReader {
            buf,
            pos: 0,
            name: String::new(),
        }
    }
    /// Names the source (e.g. the file path) in error messages.
    pub fn with_name(mut self, name: &str) -> ByteReader<'a> {
        self.name = name.to_string();
        self
    }
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    fn truncated(&self, need: usize, what: &str) -> Error {
        let src = if self.name.is_empty() {
            "data"
        } else {
            self.name.as_str()
        };
        Error::corrupt(format!(
            "{}: truncated at byte {}: reading {} needs {} bytes, {} remain",
            src,
            self.pos,
            what,
            need,
            self.remaining()
        ))
    }

    #[inline]
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(n, what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Byte count of `n` elements of `size` bytes, as an error when it overflows or
    /// exceeds what is left, so a corrupt count never triggers a huge allocation.
    fn array_bytes(&self, n: usize, size: usize, what: &str) -> Result<usize> {
        match n.checked_mul(size) {
            Some(b) if b <= self.remaining() => Ok(b),
            _ => {
                let src = if self.name.is_empty() {
                    "data"
                } else {
                    self.name.as_str()
                };
                Err(Error::corrupt(format!(
                    "{}: truncated at byte {}: {} of {} elements does not fit in the {} bytes that remain",
                    src,
                    self.pos,
                    what,
                    n,
                    self.remaining()
                )))
            }
        }
    }

    pub fn get_u8(&mut self) -> Result<u8> {
        Ok(self.take(1, "u8")?[0])
    }
    pub fn get_u16(&mut self) -> Result<u16> {
        let b = self.take(2, "u16")?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn get_u32(&mut self) -> Result<u32> {
        Ok(le_u32(self.take(4, "u32")?))
    }
    pub fn get_u64(&mut self) -> Result<u64> {
        Ok(le_u64(self.take(8, "u64")?))
    }
    pub fn get_f32(&mut self) -> Result<f32> {
        Ok(f32::from_bits(self.get_u32()?))
    }
    pub fn get_f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.get_u64()?))
    }
    /// A u64 count or length that must fit this platform's usize (it may not on
    /// wasm32 if the file is corrupt or came from a 64-bit machine's huge index).
    pub fn get_usize(&mut self) -> Result<usize> {
        let at = self.pos;
        let v = self.get_u64()?;
        if v > usize::MAX as u64 {
            let src = if self.name.is_empty() {
                "data"
            } else {
                self.name.as_str()
            };
            return Err(Error::corrupt(format!(
                "{}: length {} at byte {} is too large",
                src, v, at
            )));
        }
        Ok(v as usize)
    }
    /// The next `n` bytes, borrowed from the input.
    pub fn get_bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        self.take(n, "bytes")
    }
    pub fn get_f32_vec(&mut self, n: usize) -> Result<Vec<f32>> {
        let bytes = self.array_bytes(n, 4, "f32 array")?;
        let b = self.take(bytes, "f32 array")?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    /// Fills `out` completely (for reading straight into preallocated storage).
    pub fn get_f32_into(&mut self, out: &mut [f32]) -> Result<()> {
        let bytes = self.array_bytes(out.len(), 4, "f32 array")?;
        let b = self.take(bytes, "f32 array")?;
        for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
            *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        Ok(())
    }
    pub fn get_u32_vec(&mut self, n: usize) -> Result<Vec<u32>> {
        let bytes = self.array_bytes(n, 4, "u32 array")?;
        let b = self.take(bytes, "u32 array")?;
        Ok(b.chunks_exact(4).map(le_u32).collect())
    }
    /// Errors if any bytes are left: a payload longer than its structure is as
    /// suspicious as a shorter one.
    pub fn finish(&self) -> Result<()> {
        if self.remaining() != 0 {
            let src = if self.name.is_empty() {
                "data"
            } else {
                self.name.as_str()
            };
            return Err(Error::corrupt(format!(
                "{}: {} unexpected trailing bytes at byte {}",
                src,
                self.remaining(),
                self.pos
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    const MAGIC: [u8; 8] = *b"QVRTESTF";

    #[test]
    fn atomic_write_creates_and_replaces_without_leftovers() {
        let d = TempDir::new("aw");
        let p = d.path().join("a.bin");
        atomic_write(&p, b"first").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"first");
        atomic_write(&p, b"second, longer").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second, longer");
        atomic_write(&p, b"").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"");
        assert_eq!(entries(d.path()), vec!["a.bin".to_string()]);
    }

    #[test]
    fn atomic_write_with_streams_and_failure_keeps_old_content() {
        let d = TempDir::new("aww");
        let p = d.path().join("big.bin");
        atomic_write_with(&p, |w| {
            for i in 0..10_000u32 {
                w.write_all(&i.to_le_bytes()).map_err(|e| io_error("t", e))?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(fs::read(&p).unwrap().len(), 40_000);
        let err = atomic_write_with(&p, |w| {
            w.write_all(b"partial").map_err(|e| io_error("t", e))?;
            Err(Error::invalid("producer failed"))
        })
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgument);
        assert_eq!(fs::read(&p).unwrap().len(), 40_000, "target untouched");
        assert_eq!(entries(d.path()), vec!["big.bin".to_string()], "temp file removed");
    }

    #[test]
    fn atomic_write_into_missing_directory_is_not_found() {
        let d = TempDir::new("awm");
        let err = atomic_write(&d.path().join("no/such/dir/f"), b"x").unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);
    }

    #[test]
    fn frame_round_trip_and_layout() {
        let payload = b"hello payload";
        let img = frame(MAGIC, 3, payload);
        assert_eq!(img.len(), FRAME_HEADER_BYTES + payload.len() + FRAME_TRAILER_BYTES);
        assert_eq!(&img[..8], b"QVRTESTF");
        assert_eq!(&img[8..12], &3u32.to_le_bytes());
        assert_eq!(&img[12..16], &[0, 0, 0, 0]);
        assert_eq!(&img[16..24], &(payload.len() as u64).to_le_bytes());
        assert_eq!(&img[img.len() - 4..], &crc32c(payload).to_le_bytes());
        let (v, p) = unframe(&img, MAGIC, 3, "x").unwrap();
        assert_eq!(v, 3);
        assert_eq!(p, payload);
        let empty = frame(MAGIC, 1, b"");
        let (v, p) = unframe(&empty, MAGIC, 5, "x").unwrap();
        assert_eq!((v, p), (1, &b""[..]));
    }

    #[test]
    fn unframe_errors() {
        let img = frame(MAGIC, 2, b"some payload bytes");
        let e = unframe(&img, *b"QVRINDEX", 9, "f.idx").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(
            e.message.contains("f.idx") && e.message.contains("wrong magic"),
            "{}",
            e.message
        );

        let e = unframe(&img, MAGIC, 1, "f.idx").unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnsupportedFormat);
        assert!(e.message.contains("f.idx") && e.message.contains("version 2") && e.message.contains("version 1"));

        // Every strict prefix is rejected as corrupt, never a panic.
        for n in 0..img.len() {
            let e = unframe(&img[..n], MAGIC, 2, "f.idx").unwrap_err();
            assert_eq!(e.kind, ErrorKind::Corrupt, "prefix {}", n);
            assert!(e.message.contains("f.idx"));
        }
        let mut longer = img.clone();
        longer.push(0);
        assert_eq!(unframe(&longer, MAGIC, 2, "f").unwrap_err().kind, ErrorKind::Corrupt);

        // Any bit flip in the payload or trailer is caught by the checksum.
        for i in FRAME_HEADER_BYTES..img.len() {
            for bit in 0..8 {
                let mut bad = img.clone();
                bad[i] ^= 1 << bit;
                let e = unframe(&bad, MAGIC, 2, "f.idx").unwrap_err();
                assert_eq!(e.kind, ErrorKind::Corrupt);
            }
        }
        let mut flagged = img.clone();
        flagged[12] = 1;
        assert_eq!(
            unframe(&flagged, MAGIC, 2, "f").unwrap_err().kind,
            ErrorKind::UnsupportedFormat
        );
        let mut huge = img;
        huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(unframe(&huge, MAGIC, 2, "f").unwrap_err().kind, ErrorKind::Corrupt);
    }

    #[test]
    fn framed_file_round_trip() {
        let d = TempDir::new("framed");
        let p = d.path().join("index.qvr");
        let payload: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        write_framed(&p, MAGIC, 4, &payload).unwrap();
        let (v, back) = read_framed(&p, MAGIC, 4).unwrap();
        assert_eq!(v, 4);
        assert_eq!(back, payload);
        assert_eq!(fs::read(&p).unwrap(), frame(MAGIC, 4, &payload));

        let e = read_framed(&p, MAGIC, 3).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnsupportedFormat);
        assert!(e.message.contains("index.qvr"));

        let mut bytes = fs::read(&p).unwrap();
        bytes[FRAME_HEADER_BYTES + 500] ^= 0x10;
        fs::write(&p, &bytes).unwrap();
        let e = read_framed(&p, MAGIC, 4).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(e.message.contains("index.qvr") && e.message.contains("checksum"));

        fs::write(&p, &bytes[..1000]).unwrap();
        let e = read_framed(&p, MAGIC, 4).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(e.message.contains("index.qvr") && e.message.contains("truncated"));

        let e = read_framed(&d.path().join("missing"), MAGIC, 4).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
    }

    #[test]
    fn byte_writer_reader_round_trip() {
        let mut w = ByteWriter::new();
        w.put_u8(0xAB);
        w.put_u16(0xBEEF);
        w.put_u32(0xDEAD_BEEF);
        w.put_u64(0x0123_4567_89AB_CDEF);
        w.put_f32(-1.5);
        w.put_f64(std::f64::consts::PI);
        w.put_u64(3);
        w.put_f32_slice(&[1.0, f32::NAN, -0.0]);
        w.put_u32_slice(&[7, 8]);
        w.put_bytes(b"xyz");
        let bytes = w.into_vec();
        // Endianness is fixed, whatever the host: check one value byte by byte.
        assert_eq!(&bytes[3..7], &[0xEF, 0xBE, 0xAD, 0xDE]);

        let mut r = ByteReader::new(&bytes).with_name("t.bin");
        assert_eq!(r.get_u8().unwrap(), 0xAB);
        assert_eq!(r.get_u16().unwrap(), 0xBEEF);
        assert_eq!(r.get_u32().unwrap(), 0xDEAD_BEEF);
        assert_eq!(r.get_u64().unwrap(), 0x0123_4567_89AB_CDEF);
        assert_eq!(r.get_f32().unwrap(), -1.5);
        assert_eq!(r.get_f64().unwrap(), std::f64::consts::PI);
        let n = r.get_usize().unwrap();
        let f = r.get_f32_vec(n).unwrap();
        assert_eq!(f[0], 1.0);
        assert!(f[1].is_nan());
        assert!(f[2] == 0.0 && f[2].is_sign_negative());
        assert_eq!(r.get_u32_vec(2).unwrap(), vec![7, 8]);
        assert_eq!(r.get_bytes(3).unwrap(), b"xyz");
        assert!(r.is_empty());
        r.finish().unwrap();
        let e = r.get_u8().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(e.message.contains("t.bin"));
    }

    #[test]
    fn byte_reader_never_panics_on_truncation_or_huge_counts() {
        let mut w = ByteWriter::new();
        w.put_u32(1);
        w.put_f32_slice(&[1.0, 2.0, 3.0]);
        let bytes = w.into_vec();
        for n in 0..bytes.len() {
            let mut r = ByteReader::new(&bytes[..n]);
            let ok = r.get_u32().and_then(|_| r.get_f32_vec(3));
            assert_eq!(ok.unwrap_err().kind, ErrorKind::Corrupt, "prefix {}", n);
        }
        let mut r = ByteReader::new(&bytes);
        assert_eq!(r.get_f32_vec(usize::MAX).unwrap_err().kind, ErrorKind::Corrupt);
        assert_eq!(r.get_u32_vec(usize::MAX / 2).unwrap_err().kind, ErrorKind::Corrupt);
        let mut out = [0f32; 5];
        assert_eq!(r.get_f32_into(&mut out).unwrap_err().kind, ErrorKind::Corrupt);
        assert_eq!(r.position(), 0, "failed reads consume nothing");
        let mut out = [0f32; 4];
        r.get_f32_into(&mut out).unwrap();
        assert_eq!(out[1..], [1.0, 2.0, 3.0]);
        assert_eq!(ByteReader::new(b"x").finish().unwrap_err().kind, ErrorKind::Corrupt);
    }
}
