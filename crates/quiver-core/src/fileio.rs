//! Durable file writes and the engine's framed file format.
//!
//! Owns: how an engine file reaches the disk (temp file in the same directory, fsync,
//! rename over the target, fsync of the directory), the frame every engine file
//! carries (magic, format version, flags, payload length, payload, CRC-32C), and the
//! little-endian byte writer/reader used to build payloads, in memory or streamed
//! (`Sink`/`Source`: a framed file of any size is written and read through bounded
//! buffers, never held whole).
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
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::crc32c::{crc32c, crc32c_append};
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

/// Checks a frame header: `head` is the first `min(24, total_len)` bytes of an image
/// (or file) of `total_len` bytes. Returns the version and the payload length, which
/// accounts for every byte of the image exactly. Errors as `unframe`'s.
fn check_frame_header(head: &[u8], total_len: u64, magic: [u8; 8], max_version: u32, name: &str) -> Result<(u32, u64)> {
    if total_len < 8 {
        return Err(Error::corrupt(format!(
            "{}: file is {} bytes, too short to hold its header (expected magic {})",
            name,
            total_len,
            show_magic(&magic)
        )));
    }
    if head[..8] != magic {
        return Err(Error::corrupt(format!(
            "{}: wrong magic: expected {}, found {} (not a file of this kind, or damaged)",
            name,
            show_magic(&magic),
            show_magic(&head[..8])
        )));
    }
    if total_len < FRAME_HEADER_BYTES as u64 {
        return Err(Error::corrupt(format!(
            "{}: file is {} bytes, too short to hold its {}-byte header",
            name, total_len, FRAME_HEADER_BYTES
        )));
    }
    // The version is checked before anything else in the file is interpreted: a newer
    // format may lay out the rest differently, so its other fields mean nothing to us.
    let version = le_u32(&head[8..12]);
    if version > max_version {
        return Err(Error::new(
            ErrorKind::UnsupportedFormat,
            format!(
                "{}: format version {} is newer than the newest this build reads (version {})",
                name, version, max_version
            ),
        ));
    }
    let flags = le_u32(&head[12..16]);
    if flags != 0 {
        return Err(Error::new(
            ErrorKind::UnsupportedFormat,
            format!("{}: unknown header flags {:#010x} (this build knows none)", name, flags),
        ));
    }
    let payload_len = le_u64(&head[16..24]);
    let available = total_len - FRAME_HEADER_BYTES as u64;
    let needed = payload_len.checked_add(FRAME_TRAILER_BYTES as u64);
    match needed {
        Some(n) if n == available => Ok((version, payload_len)),
        Some(n) if n > available => Err(Error::corrupt(format!(
            "{}: truncated: header declares a {}-byte payload but only {} bytes follow the header",
            name, payload_len, available
        ))),
        Some(_) => Err(Error::corrupt(format!(
            "{}: {} unexpected bytes after the checksum (header declares a {}-byte payload)",
            name,
            available - payload_len - FRAME_TRAILER_BYTES as u64,
            payload_len
        ))),
        None => Err(Error::corrupt(format!(
            "{}: impossible payload length {}",
            name, payload_len
        ))),
    }
}

fn checksum_mismatch(name: &str, stored: u32, actual: u32) -> Error {
    Error::corrupt(format!(
        "{}: checksum mismatch (stored {:#010x}, computed {:#010x})",
        name, stored, actual
    ))
}

/// Checks a framed image and returns its version and payload. `name` (usually the
/// file path) goes into every error message. Errors: wrong magic, a short image, a
/// length that does not match, trailing bytes or a checksum mismatch are `Corrupt`;
/// a version newer than `max_version` or unknown flags are `UnsupportedFormat`.
pub fn unframe<'a>(bytes: &'a [u8], magic: [u8; 8], max_version: u32, name: &str) -> Result<(u32, &'a [u8])> {
    let head = &bytes[..bytes.len().min(FRAME_HEADER_BYTES)];
    let (version, payload_len) = check_frame_header(head, bytes.len() as u64, magic, max_version, name)?;
    let end = FRAME_HEADER_BYTES + payload_len as usize;
    let payload = &bytes[FRAME_HEADER_BYTES..end];
    let stored = le_u32(&bytes[end..end + 4]);
    let actual = crc32c(payload);
    if stored != actual {
        return Err(checksum_mismatch(name, stored, actual));
    }
    Ok((version, payload))
}

/// Writes `payload` framed (see the module header) to `path`, atomically and durably.
pub fn write_framed(path: &Path, magic: [u8; 8], version: u32, payload: &[u8]) -> Result<()> {
    write_framed_with(path, magic, version, payload.len() as u64, |w| w.write_bytes(payload))
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

// ---------------------------------------------------------------------------------
// Streaming serialisation
//
// A payload serialiser written once against `Sink` can build an image in memory
// (`ByteWriter`), measure it (`CountingSink`, for the length the frame header carries
// before the payload) or stream it to a file (`FramedWriter`, which checksums what
// passes through); a parser written against `Source` reads a slice (`ByteReader`)
// or a file through a bounded buffer (`FramedReader`). Large arrays go through
// fixed-size chunks, so neither direction holds a second copy of the data.

/// Chunk size for converting arrays to little-endian bytes, and the most a
/// `FramedReader` reads (and checksums) in one call.
pub const STREAM_CHUNK_BYTES: usize = 64 * 1024;

/// Buffer size of the reader behind `FramedReader::open`.
pub const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Converts `v` to little-endian in chunks of `STREAM_CHUNK_BYTES` and writes them.
fn write_le_chunks<S, T, const N: usize>(s: &mut S, v: &[T], to_le: fn(T) -> [u8; N]) -> Result<()>
where
    S: Sink + ?Sized,
    T: Copy,
{
    let per = STREAM_CHUNK_BYTES / N;
    let mut buf = vec![0u8; per.min(v.len()) * N];
    for part in v.chunks(per) {
        let out = &mut buf[..part.len() * N];
        for (dst, x) in out.chunks_exact_mut(N).zip(part) {
            dst.copy_from_slice(&to_le(*x));
        }
        s.write_bytes(out)?;
    }
    Ok(())
}

/// Destination of a little-endian serialiser. Only `write_bytes` is required; the
/// array writers convert through a bounded buffer unless an implementation knows
/// better (`ByteWriter` converts in place, `CountingSink` only counts).
pub trait Sink {
    fn write_bytes(&mut self, b: &[u8]) -> Result<()>;

    fn write_u8(&mut self, v: u8) -> Result<()> {
        self.write_bytes(&[v])
    }
    fn write_u32(&mut self, v: u32) -> Result<()> {
        self.write_bytes(&v.to_le_bytes())
    }
    fn write_u64(&mut self, v: u64) -> Result<()> {
        self.write_bytes(&v.to_le_bytes())
    }
    fn write_f32(&mut self, v: f32) -> Result<()> {
        self.write_bytes(&v.to_le_bytes())
    }
    /// The values only, no length prefix.
    fn write_u32_slice(&mut self, v: &[u32]) -> Result<()> {
        write_le_chunks(self, v, u32::to_le_bytes)
    }
    /// The values only, no length prefix.
    fn write_u64_slice(&mut self, v: &[u64]) -> Result<()> {
        write_le_chunks(self, v, u64::to_le_bytes)
    }
    /// The values only, no length prefix.
    fn write_f32_slice(&mut self, v: &[f32]) -> Result<()> {
        write_le_chunks(self, v, f32::to_le_bytes)
    }
}

impl Sink for ByteWriter {
    fn write_bytes(&mut self, b: &[u8]) -> Result<()> {
        self.put_bytes(b);
        Ok(())
    }
    fn write_u32_slice(&mut self, v: &[u32]) -> Result<()> {
        self.put_u32_slice(v);
        Ok(())
    }
    fn write_u64_slice(&mut self, v: &[u64]) -> Result<()> {
        self.put_u64_slice(v);
        Ok(())
    }
    fn write_f32_slice(&mut self, v: &[f32]) -> Result<()> {
        self.put_f32_slice(v);
        Ok(())
    }
}

/// A sink that only counts: what a serialiser would write, in bytes, without
/// converting or storing anything.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingSink {
    len: u64,
}

impl CountingSink {
    pub fn new() -> CountingSink {
        CountingSink { len: 0 }
    }
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Sink for CountingSink {
    fn write_bytes(&mut self, b: &[u8]) -> Result<()> {
        self.len += b.len() as u64;
        Ok(())
    }
    fn write_u32_slice(&mut self, v: &[u32]) -> Result<()> {
        self.len += v.len() as u64 * 4;
        Ok(())
    }
    fn write_u64_slice(&mut self, v: &[u64]) -> Result<()> {
        self.len += v.len() as u64 * 8;
        Ok(())
    }
    fn write_f32_slice(&mut self, v: &[f32]) -> Result<()> {
        self.len += v.len() as u64 * 4;
        Ok(())
    }
}

/// The payload of a framed file on its way to disk: passes bytes on to the file's
/// buffered stream and keeps the running CRC-32C the trailer needs.
pub struct FramedWriter<'a> {
    out: &'a mut (dyn Write + 'a),
    crc: u32,
    written: u64,
    declared: u64,
    name: &'a str,
}

impl<'a> Sink for FramedWriter<'a> {
    fn write_bytes(&mut self, b: &[u8]) -> Result<()> {
        self.crc = crc32c_append(self.crc, b);
        self.written += b.len() as u64;
        self.out
            .write_all(b)
            .map_err(|e| io_error(&format!("write {}", self.name), e))
    }
}

/// Writes a framed file (see the module header) to `path`, atomically and durably,
/// without holding its image in memory: the header declares `payload_len`, `fill`
/// streams the payload, and the trailer is the checksum of what `fill` wrote. If
/// `fill` fails, or writes other than `payload_len` bytes, the target is untouched.
pub fn write_framed_with<F>(path: &Path, magic: [u8; 8], version: u32, payload_len: u64, fill: F) -> Result<()>
where
    F: FnOnce(&mut FramedWriter<'_>) -> Result<()>,
{
    let name = path.display().to_string();
    atomic_write_with(path, |w| {
        let mut header = Vec::with_capacity(FRAME_HEADER_BYTES);
        put_frame_header(&mut header, magic, version, payload_len);
        w.write_all(&header)
            .map_err(|e| io_error(&format!("write {}", name), e))?;
        let mut fw = FramedWriter {
            out: w,
            crc: 0,
            written: 0,
            declared: payload_len,
            name: &name,
        };
        fill(&mut fw)?;
        if fw.written != fw.declared {
            // A serialiser that disagrees with its own count: refuse to publish a
            // file that would fail its length check on the next read.
            return Err(Error::invalid(format!(
                "{}: payload of {} bytes written where {} were declared",
                name, fw.written, fw.declared
            )));
        }
        let crc = fw.crc;
        w.write_all(&crc.to_le_bytes())
            .map_err(|e| io_error(&format!("write {}", name), e))
    })
}

/// Builds a framed image in memory, the payload produced by `fill` (byte-identical
/// to `frame` over the same payload). `capacity` is the expected payload size: the
/// image is reserved once at its full size.
pub fn frame_with<F>(magic: [u8; 8], version: u32, capacity: usize, fill: F) -> Result<Vec<u8>>
where
    F: FnOnce(&mut ByteWriter) -> Result<()>,
{
    let mut w = ByteWriter::with_capacity(FRAME_HEADER_BYTES + capacity + FRAME_TRAILER_BYTES);
    put_frame_header(&mut w.buf, magic, version, 0);
    fill(&mut w)?;
    let payload_len = (w.buf.len() - FRAME_HEADER_BYTES) as u64;
    w.buf[16..24].copy_from_slice(&payload_len.to_le_bytes());
    let crc = crc32c(&w.buf[FRAME_HEADER_BYTES..]);
    w.buf.extend_from_slice(&crc.to_le_bytes());
    Ok(w.buf)
}

fn truncated_error(name: &str, pos: u64, need: u64, remaining: u64, what: &str) -> Error {
    Error::corrupt(format!(
        "{}: truncated at byte {}: reading {} needs {} bytes, {} remain",
        if name.is_empty() { "data" } else { name },
        pos,
        what,
        need,
        remaining
    ))
}

fn array_error(name: &str, pos: u64, n: usize, remaining: u64, what: &str) -> Error {
    Error::corrupt(format!(
        "{}: truncated at byte {}: {} of {} elements does not fit in the {} bytes that remain",
        if name.is_empty() { "data" } else { name },
        pos,
        what,
        n,
        remaining
    ))
}

/// Plain values that any bit pattern is valid for, read from little-endian bytes.
trait LeWord: Copy {
    fn fix_byte_order(&mut self);
}
impl LeWord for u32 {
    #[inline]
    fn fix_byte_order(&mut self) {
        *self = u32::from_le(*self);
    }
}
impl LeWord for u64 {
    #[inline]
    fn fix_byte_order(&mut self) {
        *self = u64::from_le(*self);
    }
}
impl LeWord for f32 {
    #[inline]
    fn fix_byte_order(&mut self) {
        *self = f32::from_bits(u32::from_le(self.to_bits()));
    }
}

/// Reads `out.len()` little-endian words straight into `out` (no intermediate copy),
/// then fixes the byte order in place (a no-op on little-endian hosts).
fn read_words<S: Source + ?Sized, T: LeWord>(s: &mut S, out: &mut [T], what: &str) -> Result<()> {
    s.check_array(out.len(), std::mem::size_of::<T>(), what)?;
    let len = std::mem::size_of_val(out);
    // SAFETY: T is u32, u64 or f32: no padding, every bit pattern valid, alignment at
    // least that of u8, and `out` is borrowed exclusively for the view's lifetime.
    let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, len) };
    s.read_into(bytes, what)?;
    if cfg!(target_endian = "big") {
        for x in out.iter_mut() {
            x.fix_byte_order();
        }
    }
    Ok(())
}

/// Origin of a little-endian parser's input: a byte slice (`ByteReader`) or a file
/// streamed through a bounded buffer (`FramedReader`). Every read checks what is left
/// first and fails with a `Corrupt` error naming the source and the position, so a
/// corrupt count never triggers a huge allocation when callers `check_array` before
/// allocating. `bytes_left` is measured against the real size of the input (the
/// file's length), not against anything the input claims.
pub trait Source {
    /// Fills `out` from the input; `what` names the field in a truncation error.
    fn read_into(&mut self, out: &mut [u8], what: &str) -> Result<()>;
    /// Bytes left in the input (the payload, for a framed file).
    fn bytes_left(&self) -> u64;
    /// Bytes consumed so far.
    fn offset(&self) -> u64;
    /// The input's name in error messages (usually the file path).
    fn source_name(&self) -> &str;

    fn read_u8(&mut self) -> Result<u8> {
        let mut b = [0u8; 1];
        self.read_into(&mut b, "u8")?;
        Ok(b[0])
    }
    fn read_u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.read_into(&mut b, "u32")?;
        Ok(u32::from_le_bytes(b))
    }
    fn read_u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read_into(&mut b, "u64")?;
        Ok(u64::from_le_bytes(b))
    }
    fn read_f32(&mut self) -> Result<f32> {
        Ok(f32::from_bits(self.read_u32()?))
    }
    /// A u64 count or length that must fit this platform's usize.
    fn read_usize(&mut self) -> Result<usize> {
        let at = self.offset();
        let v = self.read_u64()?;
        if v > usize::MAX as u64 {
            let name = self.source_name();
            return Err(Error::corrupt(format!(
                "{}: length {} at byte {} is too large",
                if name.is_empty() { "data" } else { name },
                v,
                at
            )));
        }
        Ok(v as usize)
    }
    /// Checks that `n` elements of `size` bytes fit in what is left: call it before
    /// allocating room for them.
    fn check_array(&self, n: usize, size: usize, what: &str) -> Result<()> {
        match (n as u64).checked_mul(size as u64) {
            Some(b) if b <= self.bytes_left() => Ok(()),
            _ => Err(array_error(self.source_name(), self.offset(), n, self.bytes_left(), what)),
        }
    }
    /// Fills `out` completely with little-endian values.
    fn read_u32s(&mut self, out: &mut [u32], what: &str) -> Result<()> {
        read_words(self, out, what)
    }
    fn read_u64s(&mut self, out: &mut [u64], what: &str) -> Result<()> {
        read_words(self, out, what)
    }
    fn read_f32s(&mut self, out: &mut [f32], what: &str) -> Result<()> {
        read_words(self, out, what)
    }
    /// The next `n` bytes, as a new vector (checked before allocating).
    fn read_byte_vec(&mut self, n: usize, what: &str) -> Result<Vec<u8>> {
        self.check_array(n, 1, what)?;
        let mut v = vec![0u8; n];
        self.read_into(&mut v, what)?;
        Ok(v)
    }
    /// Errors if any bytes are left: a payload longer than its structure is as
    /// suspicious as a shorter one.
    fn expect_end(&self) -> Result<()> {
        if self.bytes_left() != 0 {
            let name = self.source_name();
            return Err(Error::corrupt(format!(
                "{}: {} unexpected trailing bytes at byte {}",
                if name.is_empty() { "data" } else { name },
                self.bytes_left(),
                self.offset()
            )));
        }
        Ok(())
    }
}

impl<'a> Source for ByteReader<'a> {
    fn read_into(&mut self, out: &mut [u8], what: &str) -> Result<()> {
        let b = self.take(out.len(), what)?;
        out.copy_from_slice(b);
        Ok(())
    }
    fn bytes_left(&self) -> u64 {
        self.remaining() as u64
    }
    fn offset(&self) -> u64 {
        self.pos as u64
    }
    fn source_name(&self) -> &str {
        &self.name
    }
}

/// The payload of a framed file, read through a buffer while its CRC-32C is kept:
/// `open` checks the header (against the file's real length), a parser reads the
/// payload through `Source`, and `finish` checks the trailer. See `read_framed_with`,
/// which also settles what a parse error means.
pub struct FramedReader<R: Read> {
    inner: R,
    version: u32,
    crc: u32,
    pos: u64,
    len: u64,
    name: String,
}

impl FramedReader<BufReader<File>> {
    /// Opens `path` and checks its header. Errors name the file; a missing file is
    /// `NotFound`, a short or inconsistent header `Corrupt`, a newer version or
    /// unknown flags `UnsupportedFormat`.
    pub fn open(path: &Path, magic: [u8; 8], max_version: u32) -> Result<FramedReader<BufReader<File>>> {
        let name = path.display().to_string();
        let ctx = || format!("reading {}", name);
        let file = File::open(path).map_err(|e| io_error(&ctx(), e))?;
        let total = file.metadata().map_err(|e| io_error(&ctx(), e))?.len();
        FramedReader::new(BufReader::with_capacity(READ_BUFFER_BYTES, file), total, magic, max_version, &name)
    }
}

impl<R: Read> FramedReader<R> {
    /// Reads and checks the header of a framed input of `total_len` bytes.
    pub fn new(mut inner: R, total_len: u64, magic: [u8; 8], max_version: u32, name: &str) -> Result<FramedReader<R>> {
        let mut head = [0u8; FRAME_HEADER_BYTES];
        let n = total_len.min(FRAME_HEADER_BYTES as u64) as usize;
        read_fully(&mut inner, &mut head[..n], name, 0, total_len, "the header")?;
        let (version, len) = check_frame_header(&head[..n], total_len, magic, max_version, name)?;
        Ok(FramedReader {
            inner,
            version,
            crc: 0,
            pos: 0,
            len,
            name: name.to_string(),
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// Once the payload has been read whole: reads the trailer and checks the
    /// checksum.
    pub fn finish(mut self) -> Result<()> {
        self.expect_end()?;
        let mut trailer = [0u8; FRAME_TRAILER_BYTES];
        let at = FRAME_HEADER_BYTES as u64 + self.len;
        read_fully(&mut self.inner, &mut trailer, &self.name, at, FRAME_TRAILER_BYTES as u64, "the checksum")?;
        let stored = u32::from_le_bytes(trailer);
        if stored != self.crc {
            return Err(checksum_mismatch(&self.name, stored, self.crc));
        }
        Ok(())
    }

    /// Reads (and discards) the rest of the payload, then checks the checksum. After
    /// a parse error this tells a damaged file (a checksum mismatch, reported instead)
    /// from an intact one whose content is wrong (the parse error stands).
    pub fn verify_rest(mut self) -> Result<()> {
        let mut buf = vec![0u8; STREAM_CHUNK_BYTES];
        while self.pos < self.len {
            let n = (self.len - self.pos).min(STREAM_CHUNK_BYTES as u64) as usize;
            self.read_into(&mut buf[..n], "the payload")?;
        }
        self.finish()
    }
}

/// `read_exact`, with the engine's errors: a short read is a truncated file
/// (`Corrupt`), anything else an I/O error naming the file.
fn read_fully<R: Read>(r: &mut R, out: &mut [u8], name: &str, at: u64, remaining: u64, what: &str) -> Result<()> {
    r.read_exact(out).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            // The file was shorter than its length said: it shrank while being read.
            truncated_error(name, at, out.len() as u64, remaining, what)
        } else {
            io_error(&format!("reading {}", name), e)
        }
    })
}

impl<R: Read> Source for FramedReader<R> {
    fn read_into(&mut self, out: &mut [u8], what: &str) -> Result<()> {
        if out.len() as u64 > self.bytes_left() {
            return Err(truncated_error(&self.name, self.pos, out.len() as u64, self.bytes_left(), what));
        }
        // In pieces, so each is checksummed while it is still in the cache.
        for piece in out.chunks_mut(STREAM_CHUNK_BYTES) {
            let left = self.len - self.pos;
            read_fully(&mut self.inner, piece, &self.name, self.pos, left, what)?;
            self.crc = crc32c_append(self.crc, piece);
            self.pos += piece.len() as u64;
        }
        Ok(())
    }
    fn bytes_left(&self) -> u64 {
        self.len - self.pos
    }
    fn offset(&self) -> u64 {
        self.pos
    }
    fn source_name(&self) -> &str {
        &self.name
    }
}

/// Reads a framed file at `path` with `parse`, which gets the payload as a `Source`
/// and the file's format version, without holding the file in memory. The result
/// is the same as parsing the whole image after `unframe`: a damaged payload is a
/// checksum mismatch even when `parse` fails on it first (the rest of the file is
/// then read to tell), and a parse error of an intact payload stands.
pub fn read_framed_with<T, F>(path: &Path, magic: [u8; 8], max_version: u32, parse: F) -> Result<T>
where
    F: FnOnce(&mut FramedReader<BufReader<File>>, u32) -> Result<T>,
{
    let mut r = FramedReader::open(path, magic, max_version)?;
    let version = r.version();
    match parse(&mut r, version) {
        Ok(v) => {
            r.finish()?;
            Ok(v)
        }
        Err(e) => {
            r.verify_rest()?;
            Err(e)
        }
    }
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
    pub fn put_u64_slice(&mut self, v: &[u64]) {
        let start = self.buf.len();
        self.buf.resize(start + v.len() * 8, 0);
        for (dst, x) in self.buf[start..].chunks_exact_mut(8).zip(v) {
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
        truncated_error(&self.name, self.pos as u64, need as u64, self.remaining() as u64, what)
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
            _ => Err(array_error(&self.name, self.pos as u64, n, self.remaining() as u64, what)),
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
            return Err(Error::corrupt(format!(
                "{}: length {} at byte {} is too large",
                self.display_name(),
                v,
                at
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
            return Err(Error::corrupt(format!(
                "{}: {} unexpected trailing bytes at byte {}",
                self.display_name(),
                self.remaining(),
                self.pos
            )));
        }
        Ok(())
    }
    /// Checks a small header at the current position: the bytes of `magic`, then a u32
    /// version that must equal `version` exactly (for formats, like the quantizers',
    /// that one build reads in one version only). Another magic is `Corrupt` (not this
    /// kind of data); another version, older or newer, is `UnsupportedFormat`; a short
    /// input is `Corrupt`, as every read is.
    pub fn expect_header(&mut self, magic: &[u8], version: u32) -> Result<()> {
        if self.take(magic.len(), "magic")? != magic {
            return Err(Error::corrupt(format!("{}: bad magic", self.display_name())));
        }
        let v = self.get_u32()?;
        if v != version {
            return Err(Error::new(
                ErrorKind::UnsupportedFormat,
                format!("{}: format version {} (this build reads {})", self.display_name(), v, version),
            ));
        }
        Ok(())
    }

    /// The source's name in error messages ("data" when it has none).
    fn display_name(&self) -> &str {
        if self.name.is_empty() {
            "data"
        } else {
            &self.name
        }
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

    /// A sink that takes the default (chunked) array writers and records each write.
    struct Recording {
        bytes: Vec<u8>,
        largest_write: usize,
    }

    impl Sink for Recording {
        fn write_bytes(&mut self, b: &[u8]) -> Result<()> {
            self.largest_write = self.largest_write.max(b.len());
            self.bytes.extend_from_slice(b);
            Ok(())
        }
    }

    fn mixed_payload<S: Sink>(s: &mut S, words: &[u32], longs: &[u64], floats: &[f32]) -> Result<()> {
        s.write_u8(0xAB)?;
        s.write_u32(0xDEAD_BEEF)?;
        s.write_u64(words.len() as u64)?;
        s.write_u32_slice(words)?;
        s.write_u64_slice(longs)?;
        s.write_bytes(b"xyz")?;
        s.write_f32(-1.5)?;
        s.write_f32_slice(floats)?;
        s.write_u32_slice(&[])
    }

    #[test]
    fn sinks_agree_and_stream_in_bounded_chunks() {
        let words: Vec<u32> = (0..100_003u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let longs: Vec<u64> = (0..20_001u64).map(|i| i << 40 | i).collect();
        let floats: Vec<f32> = (0..50_000).map(|i| i as f32 * 0.5 - 7.0).collect();
        let mut w = ByteWriter::new();
        mixed_payload(&mut w, &words, &longs, &floats).unwrap();
        let mut rec = Recording { bytes: Vec::new(), largest_write: 0 };
        mixed_payload(&mut rec, &words, &longs, &floats).unwrap();
        assert!(rec.bytes == w.as_slice(), "chunked conversion differs from the in-memory writer");
        assert!(rec.largest_write <= STREAM_CHUNK_BYTES, "a write of {} bytes", rec.largest_write);
        let mut c = CountingSink::new();
        mixed_payload(&mut c, &words, &longs, &floats).unwrap();
        assert_eq!(c.len(), w.len() as u64);

        // In memory and streamed to a file, framed: the bytes `frame` builds.
        let img = frame(MAGIC, 3, w.as_slice());
        let built = frame_with(MAGIC, 3, 0, |s| mixed_payload(s, &words, &longs, &floats)).unwrap();
        assert!(built == img);
        let d = TempDir::new("stream");
        let p = d.path().join("s.bin");
        write_framed_with(&p, MAGIC, 3, c.len(), |s| mixed_payload(s, &words, &longs, &floats)).unwrap();
        assert!(fs::read(&p).unwrap() == img);

        // A fill that writes other than it declared, or fails, leaves the target as it was.
        let e = write_framed_with(&p, MAGIC, 3, c.len() + 1, |s| mixed_payload(s, &words, &longs, &floats)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        let e = write_framed_with(&p, MAGIC, 3, c.len(), |s| {
            s.write_u32(1)?;
            Err(Error::invalid("producer failed"))
        })
        .unwrap_err();
        assert_eq!(e.message, "producer failed");
        assert!(fs::read(&p).unwrap() == img);
        assert_eq!(entries(d.path()), vec!["s.bin".to_string()]);
    }

    fn parse_mixed<S: Source>(r: &mut S) -> Result<(Vec<u32>, Vec<u64>, Vec<f32>)> {
        assert_eq!(r.read_u8()?, 0xAB);
        assert_eq!(r.read_u32()?, 0xDEAD_BEEF);
        let n = r.read_usize()?;
        r.check_array(n, 4, "words")?;
        let mut words = vec![0u32; n];
        r.read_u32s(&mut words, "words")?;
        let mut longs = vec![0u64; 20_001];
        r.read_u64s(&mut longs, "longs")?;
        assert_eq!(r.read_byte_vec(3, "tag")?, b"xyz");
        assert_eq!(r.read_f32()?, -1.5);
        let mut floats = vec![0f32; r.bytes_left() as usize / 4];
        r.read_f32s(&mut floats, "floats")?;
        r.expect_end()?;
        Ok((words, longs, floats))
    }

    #[test]
    fn framed_reader_parses_as_the_slice_reader_does() {
        let words: Vec<u32> = (0..70_001u32).map(|i| i ^ 0x5555_5555).collect();
        let longs: Vec<u64> = (0..20_001u64).map(|i| !i).collect();
        let floats: Vec<f32> = (0..33_333).map(|i| i as f32 / 3.0).collect();
        let mut w = ByteWriter::new();
        mixed_payload(&mut w, &words, &longs, &floats).unwrap();
        let img = frame(MAGIC, 2, w.as_slice());
        let d = TempDir::new("framed-reader");
        let p = d.path().join("r.bin");
        fs::write(&p, &img).unwrap();

        let from_slice = parse_mixed(&mut ByteReader::new(w.as_slice())).unwrap();
        let from_file = read_framed_with(&p, MAGIC, 2, |r, v| {
            assert_eq!(v, 2);
            parse_mixed(r)
        })
        .unwrap();
        assert!(from_file == from_slice && from_slice == (words, longs, floats));

        // Header errors as unframe's, measured against the file's real length.
        let e = read_framed_with(&p, MAGIC, 1, |r, _| parse_mixed(r)).unwrap_err();
        assert_eq!(e, unframe(&img, MAGIC, 1, &p.display().to_string()).unwrap_err());
        fs::write(&p, &img[..img.len() - 1]).unwrap();
        let e = read_framed_with(&p, MAGIC, 2, |r, _| parse_mixed(r)).unwrap_err();
        assert!(e.kind == ErrorKind::Corrupt && e.message.contains("truncated"), "{}", e);
        // A damaged payload: the checksum mismatch is reported, not the parser's error.
        let mut bad = img.clone();
        bad[FRAME_HEADER_BYTES] ^= 1;
        fs::write(&p, &bad).unwrap();
        let e = read_framed_with(&p, MAGIC, 2, |r, _| {
            r.read_u8()?;
            Err::<(), _>(Error::invalid("parser gave up"))
        })
        .unwrap_err();
        assert!(e.kind == ErrorKind::Corrupt && e.message.contains("checksum mismatch"), "{}", e);
        // An intact payload: the parser's error stands.
        fs::write(&p, &img).unwrap();
        let e = read_framed_with(&p, MAGIC, 2, |r, _| {
            r.read_u8()?;
            Err::<(), _>(Error::invalid("parser gave up"))
        })
        .unwrap_err();
        assert_eq!(e.message, "parser gave up");
        // A parser that stops short of the payload's end: trailing bytes.
        let e = read_framed_with(&p, MAGIC, 2, |r, _| r.read_u8()).unwrap_err();
        assert!(e.kind == ErrorKind::Corrupt && e.message.contains("trailing"), "{}", e);
        // Reading past the payload, or an array the payload cannot hold, is refused
        // before anything is read or allocated.
        let e = read_framed_with(&p, MAGIC, 2, |r, _| r.check_array(usize::MAX / 2, 4, "huge")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        let e = read_framed_with(&p, MAGIC, 2, |r, _| {
            let mut big = vec![0u8; w.len() + 1];
            r.read_into(&mut big, "too much")
        })
        .unwrap_err();
        assert!(e.kind == ErrorKind::Corrupt && e.message.contains("too much"), "{}", e);
        assert_eq!(
            read_framed_with(&d.path().join("missing"), MAGIC, 2, |r, _| r.read_u8()).unwrap_err().kind,
            ErrorKind::NotFound
        );
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

    #[test]
    fn byte_reader_checks_a_magic_and_an_exact_version() {
        let mut w = ByteWriter::new();
        w.put_bytes(b"QVXX");
        w.put_u32(2);
        w.put_u32(7);
        let bytes = w.into_vec();
        let mut r = ByteReader::new(&bytes).with_name("thing");
        r.expect_header(b"QVXX", 2).unwrap();
        assert_eq!(r.get_u32().unwrap(), 7);
        // Another magic is not this kind of data; another version, older or newer, is
        // a format this build does not read.
        let e = ByteReader::new(&bytes).with_name("thing").expect_header(b"QVYY", 2).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert_eq!(e.message, "thing: bad magic");
        for version in [1, 3] {
            let e = ByteReader::new(&bytes).with_name("thing").expect_header(b"QVXX", version).unwrap_err();
            assert_eq!(e.kind, ErrorKind::UnsupportedFormat);
            assert_eq!(e.message, format!("thing: format version 2 (this build reads {})", version));
        }
        // Every truncation is Corrupt, and names the source.
        for n in 0..8 {
            let e = ByteReader::new(&bytes[..n]).with_name("thing").expect_header(b"QVXX", 2).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Corrupt, "prefix {}", n);
            assert!(e.message.starts_with("thing: truncated"), "{}", e.message);
        }
    }
}
