//! Segmented append-only write-ahead log.
//!
//! Owns: the WAL directory of one shard: segment files, their record format, the
//! recovery rules on open, durable sync with group commit, reads from a sequence
//! number (for replay and `wal_delta` transfers), truncation and retention.
//! Must never: acknowledge an append that did not reach the file, report a sync that
//! did not fsync everything appended before it, keep working after a failed fsync,
//! silently drop records that something valid follows, delete the active segment, or
//! know what the records mean (they are opaque bytes to it).
//!
//! # On disk
//! A directory of segment files, each named by the sequence number of its first
//! record, zero-padded to 20 digits: `00000000000000000001.wal`. Other files in the
//! directory are ignored. Each segment is a run of records:
//! ```text
//! u32 len (LE) | u32 crc32c (LE) | u64 seq (LE) | len bytes of data
//! ```
//! The CRC covers the 8 sequence bytes and the data. Sequence numbers start at 1 and
//! rise by exactly 1, across segment boundaries too. A segment's name must equal the
//! sequence number of its first record, and the next segment must start right after
//! the previous one's last record.
//!
//! # Recovery rule (tail vs. middle corruption)
//! On open every segment is scanned and every record checked. A record is *bad* when
//! its header is cut short, its length runs past the end of the file (or exceeds
//! `MAX_RECORD_BYTES`), its CRC does not match, or its sequence number is not the one
//! expected next. At the first bad record, at byte offset X:
//! * in a segment that is not the last one: open fails with `Corrupt`, naming the file
//!   and X. A torn write can only happen at the end of the log, so anything else is
//!   damage that an operator must look at.
//! * in the last segment: every byte offset after X is searched for a *valid record*:
//!   a length that fits in the file, a sequence number not older than the one expected
//!   at X (and less than 2^32 beyond it), and a matching CRC. If one is found, open
//!   fails with `Corrupt` naming the file, X and the offset of the valid record: data
//!   that was written after the damage exists, so cutting it off could lose records a
//!   caller was told were durable. If none is found, the bytes from X on are a torn
//!   tail (a crash during a write; this includes zero-filled or garbage tails): the
//!   file is truncated to X and fsynced, and `OpenReport` says what was cut.
//!
//! A consequence worth knowing: if the OS wrote back the pages of an *unsynced*
//! write out of order before a power loss (a later page reached the disk, an earlier
//! one did not), open refuses with `Corrupt` rather than guessing. Such records were
//! never acknowledged by `sync`, so removing the segment tail by hand is safe then.
//!
//! # Concurrency and durability
//! `Wal` is `Send + Sync`; every method takes `&self`. Appends are serialised by one
//! mutex and only write to the page cache. `sync` implements group commit: a caller
//! whose records are already covered by a finished fsync returns at once; otherwise
//! it waits for the fsync in flight (if any) and then either finds itself covered or
//! becomes the one caller that fsyncs on behalf of everyone waiting. The fsync runs
//! outside the append mutex, so appends continue while it is in flight. A segment is
//! fsynced when it is closed by a roll, and the new segment's directory entry is
//! fsynced before anything is written to it, so fsyncing only the active segment is
//! enough for `sync`.
//!
//! A failed write is undone by truncating the segment back to its previous length; the
//! sequence number is not consumed and the error is returned (`Io`). A failed fsync
//! (or a failed undo) makes the `Wal` unusable: the kernel may have dropped the dirty
//! pages, so the file's content is unknown, and every later call returns `Closed`
//! with the original reason. Reopening re-reads what actually is on disk.
//!
//! One directory must be opened by one `Wal` at a time; callers own that (the shard
//! holds the only handle).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::{Error, ErrorKind, Result};
use crate::fileio::{io_error, sync_dir};
pub use crate::wal_codec::{MAX_RECORD_BYTES, RECORD_HEADER_BYTES};
use crate::wal_codec::{
    check_record, encode_record, find_valid_record_after, le_u32, le_u64, note_record, parse_header, parse_segment_name,
    record_crc, segment_name,
};

/// A scratch append buffer above this size is released after use, so one huge batch
/// does not pin its memory for the life of the log.
const SCRATCH_KEEP_BYTES: usize = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalOptions {
    /// A segment is closed and a new one started once it holds at least this many
    /// bytes (checked before each append; one batch is never split). Default 32 MiB.
    pub segment_bytes: u64,
    /// After each roll, the oldest closed segments are deleted while the closed
    /// segments together exceed this many bytes. 0 keeps everything.
    pub retention_bytes: u64,
}

impl Default for WalOptions {
    fn default() -> WalOptions {
        WalOptions {
            segment_bytes: 32 << 20,
            retention_bytes: 0,
        }
    }
}

/// What `Wal::open` found. Sequence numbers are 0 when the log holds no records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    pub first_seq: u64,
    pub last_seq: u64,
    /// Bytes cut from the end of the last segment as a torn tail (0 if none).
    pub truncated_bytes: u64,
    /// File name of the segment that was cut, if any.
    pub truncated_file: Option<String>,
    /// Byte offset in that file where the cut was made, if any.
    pub truncated_offset: Option<u64>,
}

/// One segment file as the log knows it.
#[derive(Debug)]
struct Segment {
    first_seq: u64,
    /// `first_seq - 1` while the segment is empty.
    last_seq: u64,
    /// Bytes of complete, acknowledged records; readers never look past this.
    bytes: u64,
    name: String,
    path: PathBuf,
    /// Sparse (seq, byte offset) pairs, ascending, at least `INDEX_STRIDE_BYTES` apart;
    /// the first record of the segment is always indexed.
    index: Vec<(u64, u64)>,
}

impl Segment {
    fn new(dir: &Path, first_seq: u64) -> Segment {
        let name = segment_name(first_seq);
        Segment {
            first_seq,
            last_seq: first_seq - 1,
            bytes: 0,
            path: dir.join(&name),
            name,
            index: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.last_seq < self.first_seq
    }

    fn note_record(&mut self, seq: u64, offset: u64) {
        note_record(&mut self.index, seq, offset);
    }

    /// Byte offset of an indexed record at or before `seq` (which must be in range).
    fn seek_hint(&self, seq: u64) -> (u64, u64) {
        let i = self.index.partition_point(|&(s, _)| s <= seq);
        if i == 0 {
            (self.first_seq, 0)
        } else {
            self.index[i - 1]
        }
    }
}

struct Inner {
    /// Oldest first; the last one is the active segment (appended to).
    segments: Vec<Segment>,
    /// The active segment, opened for append. Shared so that a sync leader can fsync
    /// it without holding this mutex.
    active: Arc<File>,
    next_seq: u64,
    total_bytes: u64,
    closed: bool,
    /// Reused encode buffer, so steady-state appends do not allocate.
    scratch: Vec<u8>,
}

struct SyncState {
    /// Every record with seq <= this is known to be on disk.
    synced_seq: u64,
    /// A leader is fsyncing right now.
    in_progress: bool,
}

/// A segmented write-ahead log. See the module documentation.
pub struct Wal {
    dir: PathBuf,
    opts: WalOptions,
    inner: Mutex<Inner>,
    sync_state: Mutex<SyncState>,
    sync_cv: Condvar,
    /// Highest seq written to the page cache; what a `sync` call has to cover.
    written_seq: AtomicU64,
    fsyncs: AtomicU64,
    failed: AtomicBool,
    /// Why the log became unusable. Leaf lock: never held while taking another.
    failure: Mutex<Option<String>>,
    #[cfg(test)]
    hooks: TestHooks,
}

#[cfg(test)]
#[derive(Default)]
struct TestHooks {
    /// Sleep this long in every sync-leader fsync (to make group commit observable).
    fsync_delay_ms: AtomicU64,
    /// Make the next fsync fail.
    fail_next_fsync: AtomicBool,
    /// Make the next append write half its bytes and then fail.
    fail_next_write: AtomicBool,
}

/// Resets the "fsync in progress" flag and wakes waiters even if the leader unwinds,
/// so a panic cannot leave every later `sync` waiting forever.
struct LeaderGuard<'a> {
    wal: &'a Wal,
    covered: Option<u64>,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        let mut st = match self.wal.sync_state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        st.in_progress = false;
        if let Some(c) = self.covered {
            if c > st.synced_seq {
                st.synced_seq = c;
            }
        }
        drop(st);
        self.wal.sync_cv.notify_all();
    }
}

enum ScanEnd {
    Clean,
    Bad { offset: u64, reason: String },
}

struct ScanResult {
    segment: Segment,
    end: ScanEnd,
    file_len: u64,
}

/// Reads and checks every record of one segment, stopping at the first bad one.
fn scan_segment(dir: &Path, first_seq: u64) -> Result<ScanResult> {
    let mut seg = Segment::new(dir, first_seq);
    let ctx = |what: &str| format!("{} {}", what, seg_path_display(dir, first_seq));
    let file = File::open(&seg.path).map_err(|e| io_error(&ctx("open"), e))?;
    let file_len = file.metadata().map_err(|e| io_error(&ctx("stat"), e))?.len();
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut header = [0u8; RECORD_HEADER_BYTES];
    let mut data = Vec::new();
    let mut offset = 0u64;
    let mut expected = first_seq;
    let end = loop {
        let remaining = file_len - offset;
        if remaining == 0 {
            break ScanEnd::Clean;
        }
        if remaining >= RECORD_HEADER_BYTES as u64 {
            r.read_exact(&mut header).map_err(|e| io_error(&ctx("read"), e))?;
        }
        let h = match parse_header(&header, remaining) {
            Ok(h) => h,
            Err(reason) => break ScanEnd::Bad { offset, reason },
        };
        let (seq, len) = (h.seq, h.len);
        data.resize(len as usize, 0);
        r.read_exact(&mut data).map_err(|e| io_error(&ctx("read"), e))?;
        if let Err(reason) = check_record(&h, &data, expected) {
            break ScanEnd::Bad { offset, reason };
        }
        seg.note_record(seq, offset);
        seg.last_seq = seq;
        offset += RECORD_HEADER_BYTES as u64 + len;
        expected += 1;
    };
    seg.bytes = offset;
    Ok(ScanResult {
        segment: seg,
        end,
        file_len,
    })
}

fn seg_path_display(dir: &Path, first_seq: u64) -> String {
    dir.join(segment_name(first_seq)).display().to_string()
}

fn lock_or_closed<'a, T>(m: &'a Mutex<T>, dir: &Path) -> Result<MutexGuard<'a, T>> {
    m.lock().map_err(|_| {
        Error::new(
            ErrorKind::Closed,
            format!(
                "wal {}: unusable after a panic while it was being modified",
                dir.display()
            ),
        )
    })
}

impl Wal {
    /// Opens (creating if needed) the log in `dir`, recovering a torn tail as the
    /// module documentation describes.
    pub fn open(dir: &Path, opts: WalOptions) -> Result<(Wal, OpenReport)> {
        if opts.segment_bytes == 0 {
            return Err(Error::invalid("wal segment_bytes must be at least 1"));
        }
        let existed = dir.is_dir();
        fs::create_dir_all(dir).map_err(|e| io_error(&format!("create wal directory {}", dir.display()), e))?;
        if !existed {
            if let Some(parent) = dir.parent() {
                if !parent.as_os_str().is_empty() {
                    sync_dir(parent)?;
                }
            }
        }

        let mut firsts = Vec::new();
        let entries = fs::read_dir(dir).map_err(|e| io_error(&format!("list wal directory {}", dir.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&format!("list wal directory {}", dir.display()), e))?;
            let name = entry.file_name();
            if let Some(seq) = name.to_str().and_then(parse_segment_name) {
                if seq == 0 {
                    return Err(Error::corrupt(format!(
                        "{}: segment named for sequence number 0, which is never used",
                        entry.path().display()
                    )));
                }
                firsts.push(seq);
            }
        }
        firsts.sort_unstable();

        let mut report = OpenReport::default();
        let mut segments: Vec<Segment> = Vec::with_capacity(firsts.len().max(1));
        for (i, &first) in firsts.iter().enumerate() {
            let is_last = i + 1 == firsts.len();
            if let Some(prev) = segments.last() {
                if first != prev.last_seq + 1 {
                    return Err(Error::corrupt(format!(
                        "{}: segment starts at seq {} but the previous segment {} ends at seq {} (missing or extra segment)",
                        seg_path_display(dir, first),
                        first,
                        prev.name,
                        prev.last_seq
                    )));
                }
            }
            let scan = scan_segment(dir, first)?;
            let seg = scan.segment;
            if let ScanEnd::Bad { offset, reason } = scan.end {
                let path = seg.path.display().to_string();
                if !is_last {
                    return Err(Error::corrupt(format!(
                        "{}: corrupt record at byte offset {}: {}; this is not the last segment, so it cannot be a torn tail",
                        path, offset, reason
                    )));
                }
                let rest = read_from_offset(&seg.path, offset)?;
                if let Some((off, seq)) = find_valid_record_after(&rest, seg.last_seq + 1) {
                    return Err(Error::corrupt(format!(
                        "{}: corrupt record at byte offset {}: {}; a valid record (seq {}) follows at byte offset {}, so this is not a torn tail",
                        path,
                        offset,
                        reason,
                        seq,
                        offset + off as u64
                    )));
                }
                let f = OpenOptions::new()
                    .write(true)
                    .open(&seg.path)
                    .map_err(|e| io_error(&format!("open {} to cut its torn tail", path), e))?;
                f.set_len(offset)
                    .map_err(|e| io_error(&format!("truncate {} to {}", path, offset), e))?;
                f.sync_all().map_err(|e| io_error(&format!("fsync {}", path), e))?;
                report.truncated_bytes = scan.file_len - offset;
                report.truncated_file = Some(seg.name.clone());
                report.truncated_offset = Some(offset);
            }
            segments.push(seg);
        }

        let created = segments.is_empty();
        if created {
            segments.push(Segment::new(dir, 1));
        }
        let active_path = segments.last().map(|s| s.path.clone()).unwrap_or_default();
        let mut oo = OpenOptions::new();
        oo.append(true);
        if created {
            oo.create_new(true);
        }
        let active = oo
            .open(&active_path)
            .map_err(|e| io_error(&format!("open {}", active_path.display()), e))?;
        // What we just read may still be only in the page cache (the previous process
        // may have died before syncing). Make it durable now, so that everything the
        // log reports as present is also on disk.
        active
            .sync_data()
            .map_err(|e| io_error(&format!("fsync {}", active_path.display()), e))?;
        sync_dir(dir)?;

        let next_seq = segments.last().map(|s| s.last_seq + 1).unwrap_or(1);
        let first_seq = segments[0].first_seq;
        if next_seq > first_seq {
            report.first_seq = first_seq;
            report.last_seq = next_seq - 1;
        }
        let total_bytes = segments.iter().map(|s| s.bytes).sum();
        let wal = Wal {
            dir: dir.to_path_buf(),
            opts,
            inner: Mutex::new(Inner {
                segments,
                active: Arc::new(active),
                next_seq,
                total_bytes,
                closed: false,
                scratch: Vec::new(),
            }),
            sync_state: Mutex::new(SyncState {
                synced_seq: next_seq - 1,
                in_progress: false,
            }),
            sync_cv: Condvar::new(),
            written_seq: AtomicU64::new(next_seq - 1),
            fsyncs: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            #[cfg(test)]
            hooks: TestHooks::default(),
        };
        Ok((wal, report))
    }

    /// The directory this log lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one record and returns its sequence number. The record is in the page
    /// cache, not yet durable: call `sync` before acknowledging it to anyone.
    pub fn append(&self, data: &[u8]) -> Result<u64> {
        self.append_records(&[data])
    }

    /// Appends records with consecutive sequence numbers, in one write call, all into
    /// the same segment. Either all are appended or none is.
    pub fn append_batch(&self, records: &[&[u8]]) -> Result<Vec<u64>> {
        if records.is_empty() {
            // Still refuse on a closed or failed log, like every other call.
            let g = lock_or_closed(&self.inner, &self.dir)?;
            self.check_usable(&g)?;
            return Ok(Vec::new());
        }
        let first = self.append_records(records)?;
        Ok((first..first + records.len() as u64).collect())
    }

    fn append_records(&self, records: &[&[u8]]) -> Result<u64> {
        let mut total = 0usize;
        for r in records {
            if r.len() > MAX_RECORD_BYTES {
                return Err(Error::invalid(format!(
                    "wal record of {} bytes exceeds the maximum of {} bytes",
                    r.len(),
                    MAX_RECORD_BYTES
                )));
            }
            total = total.saturating_add(RECORD_HEADER_BYTES + r.len());
        }
        let mut guard = lock_or_closed(&self.inner, &self.dir)?;
        let g = &mut *guard;
        self.check_usable(g)?;
        {
            let active = g.segments.last().expect("a wal always has an active segment");
            if active.bytes >= self.opts.segment_bytes && !active.is_empty() {
                self.roll(g)?;
            }
        }

        let first = g.next_seq;
        let mut buf = std::mem::take(&mut g.scratch);
        buf.clear();
        buf.reserve(total);
        for (i, r) in records.iter().enumerate() {
            encode_record(&mut buf, first + i as u64, r);
        }
        let start = g.segments.last().map(|s| s.bytes).unwrap_or(0);
        let written = self.write_active(&g.active, &buf);
        if buf.capacity() <= SCRATCH_KEEP_BYTES {
            g.scratch = buf;
        }
        if let Err(e) = written {
            let seg_path = g
                .segments
                .last()
                .map(|s| s.path.display().to_string())
                .unwrap_or_default();
            // Some bytes may have reached the file. Cut them off so the next append
            // starts on a record boundary; if even that fails, the file's content is
            // unknown and the log must stop.
            if let Err(e2) = g.active.set_len(start) {
                let msg = format!(
                    "write to {} failed ({}) and undoing the partial write failed ({})",
                    seg_path, e, e2
                );
                self.fail(msg.clone());
                return Err(Error::new(ErrorKind::Io, msg));
            }
            return Err(io_error(&format!("append to {}", seg_path), e));
        }

        let seg = g.segments.last_mut().expect("a wal always has an active segment");
        let mut offset = start;
        for (i, r) in records.iter().enumerate() {
            seg.note_record(first + i as u64, offset);
            offset += (RECORD_HEADER_BYTES + r.len()) as u64;
        }
        let n = records.len() as u64;
        seg.bytes = offset;
        seg.last_seq = first + n - 1;
        g.total_bytes += offset - start;
        g.next_seq = first + n;
        self.written_seq.store(first + n - 1, Ordering::Release);
        Ok(first)
    }

    fn write_active(&self, file: &File, buf: &[u8]) -> io::Result<()> {
        #[cfg(test)]
        {
            if self.hooks.fail_next_write.swap(false, Ordering::SeqCst) {
                let mut f = file;
                f.write_all(&buf[..buf.len() / 2])?;
                return Err(io::Error::new(
                    io::ErrorKind::Other,
                    "injected write failure (disk full)",
                ));
            }
        }
        let mut f = file;
        f.write_all(buf)
    }

    /// Closes the active segment (fsynced) and starts a new one at `next_seq`, then
    /// applies retention. Called with the append lock held.
    fn roll(&self, g: &mut Inner) -> Result<()> {
        let old = g
            .segments
            .last()
            .map(|s| s.path.display().to_string())
            .unwrap_or_default();
        // `sync` only ever fsyncs the active segment, so a segment must be durable
        // before it stops being active.
        if let Err(e) = self.fsync_file(&g.active) {
            let msg = format!("fsync {} while closing it: {}", old, e);
            self.fail(msg.clone());
            return Err(Error::new(ErrorKind::Io, msg));
        }
        let seg = Segment::new(&self.dir, g.next_seq);
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&seg.path)
            .map_err(|e| io_error(&format!("create wal segment {}", seg.path.display()), e))?;
        // The new file's directory entry must be durable before records in it are
        // acknowledged, and `sync` does not fsync the directory.
        if let Err(e) = sync_dir(&self.dir) {
            let msg = format!("fsync of wal directory after creating {}: {}", seg.name, e.message);
            self.fail(msg.clone());
            return Err(Error::new(ErrorKind::Io, msg));
        }
        g.segments.push(seg);
        g.active = Arc::new(file);
        self.apply_retention(g)
    }

    fn apply_retention(&self, g: &mut Inner) -> Result<()> {
        if self.opts.retention_bytes == 0 {
            return Ok(());
        }
        let active_bytes = g.segments.last().map(|s| s.bytes).unwrap_or(0);
        while g.segments.len() > 1 && g.total_bytes - active_bytes > self.opts.retention_bytes {
            self.delete_oldest(g)?;
        }
        Ok(())
    }

    /// Deletes the oldest segment (never the active one). The directory is fsynced
    /// after each deletion so that a crash can only ever leave a contiguous run of
    /// segments, never a gap (which open would report as corruption).
    fn delete_oldest(&self, g: &mut Inner) -> Result<()> {
        debug_assert!(g.segments.len() > 1);
        let path = g.segments[0].path.clone();
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(&format!("delete wal segment {}", path.display()), e)),
        }
        let s = g.segments.remove(0);
        g.total_bytes -= s.bytes;
        sync_dir(&self.dir)
    }

    fn fsync_file(&self, f: &File) -> io::Result<()> {
        #[cfg(test)]
        {
            let ms = self.hooks.fsync_delay_ms.load(Ordering::SeqCst);
            if ms > 0 {
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            if self.hooks.fail_next_fsync.swap(false, Ordering::SeqCst) {
                return Err(io::Error::new(io::ErrorKind::Other, "injected fsync failure (EIO)"));
            }
        }
        f.sync_data()?;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Makes every record appended before this call durable. Group commit: see the
    /// module documentation.
    pub fn sync(&self) -> Result<()> {
        {
            let g = lock_or_closed(&self.inner, &self.dir)?;
            self.check_usable(&g)?;
        }
        self.sync_to(self.written_seq.load(Ordering::Acquire))
    }

    fn sync_to(&self, target: u64) -> Result<()> {
        let mut st = lock_or_closed(&self.sync_state, &self.dir)?;
        loop {
            if self.failed.load(Ordering::Acquire) {
                return Err(self.failure_error());
            }
            if st.synced_seq >= target {
                return Ok(());
            }
            if !st.in_progress {
                break;
            }
            st = self.sync_cv.wait(st).map_err(|_| {
                Error::new(
                    ErrorKind::Closed,
                    format!("wal {}: unusable after a panic", self.dir.display()),
                )
            })?;
        }
        // Become the leader: one fsync for everyone waiting.
        st.in_progress = true;
        drop(st);
        let mut guard = LeaderGuard {
            wal: self,
            covered: None,
        };
        // Capture what the fsync will cover *before* it starts: everything written so
        // far is in this file or in a segment that was fsynced when it was closed.
        let (file, covered, path) = {
            let g = lock_or_closed(&self.inner, &self.dir)?;
            let path = g
                .segments
                .last()
                .map(|s| s.path.display().to_string())
                .unwrap_or_default();
            (Arc::clone(&g.active), g.next_seq - 1, path)
        };
        match self.fsync_file(&file) {
            Ok(()) => {
                guard.covered = Some(covered);
                Ok(())
            }
            Err(e) => {
                let msg = format!("fsync {} failed: {}", path, e);
                self.fail(msg.clone());
                Err(Error::new(ErrorKind::Io, msg))
            }
        }
    }

    fn fail(&self, msg: String) {
        {
            let mut f = match self.failure.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if f.is_none() {
                *f = Some(msg);
            }
        }
        self.failed.store(true, Ordering::Release);
    }

    fn failure_error(&self) -> Error {
        let why = match self.failure.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        Error::new(
            ErrorKind::Closed,
            format!(
                "wal {} is unusable after an I/O failure ({}); reopen it to recover what is on disk",
                self.dir.display(),
                why.unwrap_or_default()
            ),
        )
    }

    fn check_usable(&self, g: &Inner) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(self.failure_error());
        }
        if g.closed {
            return Err(Error::new(
                ErrorKind::Closed,
                format!("wal {} is closed", self.dir.display()),
            ));
        }
        Ok(())
    }

    /// Reads up to `max_records` records starting at `seq`. `NotFound` if `seq` was
    /// already truncated away; empty if `seq` is past the last record.
    pub fn read_from(&self, seq: u64, max_records: usize) -> Result<Vec<(u64, Vec<u8>)>> {
        if seq == 0 {
            return Err(Error::invalid("wal sequence numbers start at 1"));
        }
        // Plan under the lock (which segments, where to start, where each one ends),
        // read without it, so appends are not blocked by disk reads. Only complete,
        // acknowledged bytes (`Segment::bytes`) are read.
        struct Part {
            path: PathBuf,
            start_offset: u64,
            start_seq: u64,
            end_offset: u64,
        }
        let mut parts = Vec::new();
        {
            let g = lock_or_closed(&self.inner, &self.dir)?;
            self.check_usable(&g)?;
            let first = g.segments[0].first_seq;
            if seq < first {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "wal {}: seq {} is no longer in the log (records before {} were truncated)",
                        self.dir.display(),
                        seq,
                        first
                    ),
                ));
            }
            if seq >= g.next_seq || max_records == 0 {
                return Ok(Vec::new());
            }
            let i = g.segments.partition_point(|s| s.first_seq <= seq) - 1;
            let mut planned = 0u64;
            for (k, s) in g.segments[i..].iter().enumerate() {
                if s.is_empty() {
                    continue;
                }
                let (start_seq, start_offset) = if k == 0 { s.seek_hint(seq) } else { (s.first_seq, 0) };
                parts.push(Part {
                    path: s.path.clone(),
                    start_offset,
                    start_seq,
                    end_offset: s.bytes,
                });
                planned += s.last_seq + 1 - seq.max(s.first_seq);
                if planned >= max_records as u64 {
                    break;
                }
            }
        }

        let mut out = Vec::new();
        for p in parts {
            read_segment_part(
                &p.path,
                p.start_offset,
                p.start_seq,
                p.end_offset,
                seq,
                max_records,
                &mut out,
            )?;
            if out.len() >= max_records {
                break;
            }
        }
        Ok(out)
    }

    /// Deletes whole segments whose records are all before `seq`. The active segment
    /// is never deleted, so records at or after `seq` always survive, and some before
    /// it may too.
    pub fn truncate_before(&self, seq: u64) -> Result<()> {
        self.truncate_retaining(seq, 0)
    }

    /// Like `truncate_before`, but keeps history: the oldest segment is deleted only
    /// while every record in it is before `seq` *and* the segments after it still
    /// hold at least `keep_bytes` (records and headers). So the log keeps at least the
    /// newest `keep_bytes` of records (all of them while it is smaller), plus at most
    /// one segment more, and never anything at or after `seq`. Segments go oldest
    /// first, each with a directory fsync, so what is left is always contiguous.
    pub fn truncate_retaining(&self, seq: u64, keep_bytes: u64) -> Result<()> {
        let mut guard = lock_or_closed(&self.inner, &self.dir)?;
        let g = &mut *guard;
        self.check_usable(g)?;
        while g.segments.len() > 1
            && g.segments[1].first_seq <= seq
            && g.total_bytes - g.segments[0].bytes >= keep_bytes
        {
            self.delete_oldest(g)?;
        }
        Ok(())
    }

    /// Sequence number of the oldest record still in the log; 0 if it holds none.
    pub fn first_seq(&self) -> u64 {
        let g = self.inner_for_getter();
        if g.next_seq > g.segments[0].first_seq {
            g.segments[0].first_seq
        } else {
            0
        }
    }

    /// Sequence number of the newest record; 0 if the log holds none.
    pub fn last_seq(&self) -> u64 {
        let g = self.inner_for_getter();
        if g.next_seq > g.segments[0].first_seq {
            g.next_seq - 1
        } else {
            0
        }
    }

    /// The sequence number the next append will get (defined even when the log is
    /// empty after truncation, unlike `last_seq`).
    pub fn next_seq(&self) -> u64 {
        self.inner_for_getter().next_seq
    }

    /// Bytes of all segments on disk.
    pub fn size_bytes(&self) -> u64 {
        self.inner_for_getter().total_bytes
    }

    /// Number of fsyncs of segment files done since open (by `sync` leaders and by
    /// segment rolls). With group commit this grows slower than the number of `sync`
    /// calls when several threads sync at once.
    pub fn sync_count(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    /// Syncs and closes the log. Every later call (including `close`) returns
    /// `Closed`. Dropping a `Wal` without closing it does not sync.
    pub fn close(&self) -> Result<()> {
        {
            let mut g = lock_or_closed(&self.inner, &self.dir)?;
            self.check_usable(&g)?;
            // Refuse new appends first, so the final sync covers everything.
            g.closed = true;
        }
        self.sync_to(self.written_seq.load(Ordering::Acquire))
    }

    /// Getters stay infallible: the counters they read are consistent between
    /// statements, so a panic elsewhere cannot leave them half-updated.
    fn inner_for_getter(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

fn read_from_offset(path: &Path, offset: u64) -> Result<Vec<u8>> {
    let ctx = format!("read {}", path.display());
    let mut f = File::open(path).map_err(|e| io_error(&ctx, e))?;
    f.seek(SeekFrom::Start(offset)).map_err(|e| io_error(&ctx, e))?;
    let mut rest = Vec::new();
    f.read_to_end(&mut rest).map_err(|e| io_error(&ctx, e))?;
    Ok(rest)
}

/// Reads records of one segment from `start_offset` (a record boundary holding
/// `start_seq`) up to `end_offset`, keeping those with seq >= `want_from`.
fn read_segment_part(
    path: &Path,
    start_offset: u64,
    start_seq: u64,
    end_offset: u64,
    want_from: u64,
    max_records: usize,
    out: &mut Vec<(u64, Vec<u8>)>,
) -> Result<()> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            Error::new(
                ErrorKind::NotFound,
                format!("{}: segment was truncated away while being read", shown),
            )
        } else {
            io_error(&format!("open {}", shown), e)
        }
    })?;
    let cap = (end_offset - start_offset)
        .min(256 << 10)
        .max(RECORD_HEADER_BYTES as u64) as usize;
    let mut r = BufReader::with_capacity(cap, file);
    r.seek(SeekFrom::Start(start_offset))
        .map_err(|e| io_error(&format!("seek {}", shown), e))?;
    let mut offset = start_offset;
    let mut expected = start_seq;
    let mut header = [0u8; RECORD_HEADER_BYTES];
    let mut skip = Vec::new();
    let corrupt = |offset: u64, why: String| {
        Error::corrupt(format!("{}: corrupt record at byte offset {}: {}", shown, offset, why))
    };
    while offset < end_offset && out.len() < max_records {
        if end_offset - offset < RECORD_HEADER_BYTES as u64 {
            return Err(corrupt(offset, "partial record header".to_string()));
        }
        r.read_exact(&mut header)
            .map_err(|e| io_error(&format!("read {}", shown), e))?;
        let len = le_u32(&header[0..4]) as u64;
        let seq = le_u64(&header[8..16]);
        if len > MAX_RECORD_BYTES as u64 || offset + RECORD_HEADER_BYTES as u64 + len > end_offset {
            return Err(corrupt(
                offset,
                format!("record length {} runs past the end of the segment", len),
            ));
        }
        let keep = seq >= want_from;
        let mut data = Vec::new();
        let buf = if keep { &mut data } else { &mut skip };
        buf.resize(len as usize, 0);
        r.read_exact(buf).map_err(|e| io_error(&format!("read {}", shown), e))?;
        // Records are checked again on every read: the disk may have changed since open.
        if record_crc(seq, buf) != le_u32(&header[4..8]) {
            return Err(corrupt(
                offset,
                format!("checksum mismatch in record claiming seq {}", seq),
            ));
        }
        if seq != expected {
            return Err(corrupt(
                offset,
                format!("sequence number {} where {} was expected", seq, expected),
            ));
        }
        if keep {
            out.push((seq, data));
        }
        offset += RECORD_HEADER_BYTES as u64 + len;
        expected += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::time::Duration;

    fn opts(segment_bytes: u64) -> WalOptions {
        WalOptions {
            segment_bytes,
            retention_bytes: 0,
        }
    }

    /// Deterministic, distinct content per seq, with varying lengths.
    fn payload(seq: u64) -> Vec<u8> {
        let len = 10 + (seq * 37 % 90) as usize;
        (0..len).map(|i| (seq as usize * 31 + i * 7) as u8).collect()
    }

    fn segment_files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| parse_segment_name(n).is_some())
            .collect();
        v.sort();
        v
    }

    fn check_all(wal: &Wal, from: u64, to: u64) {
        if to < from {
            assert_eq!(wal.last_seq(), 0);
            return;
        }
        let got = wal.read_from(from, (to + 1 - from) as usize).unwrap();
        assert_eq!(got.len() as u64, to + 1 - from);
        for (i, (seq, data)) in got.iter().enumerate() {
            assert_eq!(*seq, from + i as u64);
            assert_eq!(data, &payload(*seq));
        }
    }

    #[test]
    fn wal_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Wal>();
    }

    #[test]
    fn segment_names() {
        assert_eq!(segment_name(1), "00000000000000000001.wal");
        assert_eq!(parse_segment_name("00000000000000000001.wal"), Some(1));
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("0000000000000000001.wal"), None);
        assert_eq!(parse_segment_name("0000000000000000000x.wal"), None);
        assert_eq!(parse_segment_name("00000000000000000001.wal.tmp"), None);
        assert_eq!(parse_segment_name("99999999999999999999.wal"), None, "overflows u64");
    }

    #[test]
    fn empty_open_creates_dir_and_first_segment() {
        let d = TempDir::new("empty");
        let (wal, rep) = Wal::open(&d.path().join("nested/wal"), WalOptions::default()).unwrap();
        assert_eq!(rep, OpenReport::default());
        assert_eq!((wal.first_seq(), wal.last_seq(), wal.next_seq()), (0, 0, 1));
        assert_eq!(segment_files(wal.dir()), vec!["00000000000000000001.wal".to_string()]);
        assert!(wal.read_from(1, 10).unwrap().is_empty());
        assert_eq!(wal.read_from(0, 10).unwrap_err().kind, ErrorKind::InvalidArgument);
        wal.sync().unwrap();
        assert_eq!(wal.sync_count(), 0, "nothing to sync");
        assert_eq!(
            Wal::open(d.path(), opts(0)).err().map(|e| e.kind),
            Some(ErrorKind::InvalidArgument)
        );
    }

    #[test]
    fn round_trip_across_segments_and_reopen() {
        let d = TempDir::new("roundtrip");
        {
            let (wal, _) = Wal::open(d.path(), opts(1000)).unwrap();
            for seq in 1..=200u64 {
                assert_eq!(wal.append(&payload(seq)).unwrap(), seq);
            }
            let batch: Vec<Vec<u8>> = (201..=250).map(payload).collect();
            let refs: Vec<&[u8]> = batch.iter().map(|b| b.as_slice()).collect();
            assert_eq!(wal.append_batch(&refs).unwrap(), (201..=250).collect::<Vec<u64>>());
            assert!(wal.append_batch(&[]).unwrap().is_empty());
            wal.append(b"").unwrap(); // empty records are legal
            assert_eq!((wal.first_seq(), wal.last_seq()), (1, 251));
            check_all(&wal, 1, 250);
            assert!(segment_files(d.path()).len() > 5, "rolled across several segments");
            let on_disk: u64 = segment_files(d.path())
                .iter()
                .map(|n| fs::metadata(d.path().join(n)).unwrap().len())
                .sum();
            assert_eq!(wal.size_bytes(), on_disk);
            wal.close().unwrap();
        }
        let (wal, rep) = Wal::open(d.path(), opts(1000)).unwrap();
        assert_eq!(
            rep,
            OpenReport {
                first_seq: 1,
                last_seq: 251,
                ..OpenReport::default()
            }
        );
        check_all(&wal, 1, 250);
        assert_eq!(wal.read_from(251, 5).unwrap(), vec![(251, Vec::new())]);
        // Each segment name is the seq of its first record.
        for name in segment_files(d.path()) {
            let first = parse_segment_name(&name).unwrap();
            assert_eq!(wal.read_from(first, 1).unwrap()[0].0, first);
        }
    }

    #[test]
    fn append_after_reopen_continues_the_sequence() {
        let d = TempDir::new("continue");
        {
            let (wal, _) = Wal::open(d.path(), opts(500)).unwrap();
            for seq in 1..=20 {
                wal.append(&payload(seq)).unwrap();
            }
            wal.sync().unwrap();
        } // dropped without close
        for round in 0..3u64 {
            let (wal, rep) = Wal::open(d.path(), opts(500)).unwrap();
            let last = 20 + round * 10;
            assert_eq!(rep.last_seq, last);
            for seq in last + 1..=last + 10 {
                assert_eq!(wal.append(&payload(seq)).unwrap(), seq);
            }
            wal.close().unwrap();
        }
        let (wal, _) = Wal::open(d.path(), opts(500)).unwrap();
        check_all(&wal, 1, 50);
    }

    #[test]
    fn read_from_limits_and_errors() {
        let d = TempDir::new("readfrom");
        let (wal, _) = Wal::open(d.path(), opts(300)).unwrap();
        for seq in 1..=100 {
            wal.append(&payload(seq)).unwrap();
        }
        let got = wal.read_from(37, 10).unwrap();
        assert_eq!(
            got.iter().map(|r| r.0).collect::<Vec<_>>(),
            (37..47).collect::<Vec<u64>>()
        );
        assert_eq!(got[3].1, payload(40));
        assert_eq!(wal.read_from(95, 100).unwrap().len(), 6);
        assert!(wal.read_from(101, 10).unwrap().is_empty());
        assert!(wal.read_from(50, 0).unwrap().is_empty());
        // Starting at every seq works, including segment boundaries.
        for s in 1..=100 {
            let got = wal.read_from(s, 3).unwrap();
            assert_eq!(got[0], (s, payload(s)));
            assert_eq!(got.len(), (101 - s).min(3) as usize);
        }
    }

    #[test]
    fn read_from_uses_sparse_index_in_large_segments() {
        let d = TempDir::new("index");
        let (wal, _) = Wal::open(d.path(), WalOptions::default()).unwrap();
        let big = vec![7u8; 10_000];
        for _ in 0..100 {
            wal.append(&big).unwrap();
        }
        {
            let g = wal.inner.lock().unwrap();
            assert!(g.segments[0].index.len() > 10, "index has entries");
        }
        for s in [1u64, 2, 7, 50, 99, 100] {
            let got = wal.read_from(s, 2).unwrap();
            assert_eq!(got[0].0, s);
            assert_eq!(got[0].1, big);
        }
        drop(wal);
        let (wal, _) = Wal::open(d.path(), WalOptions::default()).unwrap();
        assert_eq!(wal.read_from(77, 1).unwrap()[0].0, 77, "index rebuilt on open");
    }

    #[test]
    fn truncate_before_drops_whole_old_segments_only() {
        let d = TempDir::new("truncate");
        let (wal, _) = Wal::open(d.path(), opts(400)).unwrap();
        for seq in 1..=100 {
            wal.append(&payload(seq)).unwrap();
        }
        let firsts: Vec<u64> = segment_files(d.path())
            .iter()
            .map(|n| parse_segment_name(n).unwrap())
            .collect();
        assert!(firsts.len() >= 4);
        let cut = firsts[2] + 1; // inside the third segment
        wal.truncate_before(cut).unwrap();
        assert_eq!(wal.first_seq(), firsts[2], "the segment holding cut-1 and cut is kept");
        assert_eq!(segment_files(d.path()).len(), firsts.len() - 2);
        assert_eq!(wal.read_from(firsts[2] - 1, 1).unwrap_err().kind, ErrorKind::NotFound);
        check_all(&wal, firsts[2], 100);
        let size_before = wal.size_bytes();
        wal.truncate_before(cut).unwrap(); // idempotent
        assert_eq!(wal.size_bytes(), size_before);

        // Even truncating past the end keeps the active segment and its records.
        wal.truncate_before(u64::MAX).unwrap();
        assert_eq!(segment_files(d.path()), vec![segment_name(*firsts.last().unwrap())]);
        assert_eq!(wal.last_seq(), 100);
        assert_eq!(wal.first_seq(), *firsts.last().unwrap());
        assert_eq!(wal.append(&payload(101)).unwrap(), 101);
        wal.close().unwrap();
        let (wal, rep) = Wal::open(d.path(), opts(400)).unwrap();
        assert_eq!((rep.first_seq, rep.last_seq), (*firsts.last().unwrap(), 101));
        check_all(&wal, rep.first_seq, 101);
    }

    /// Bytes of each segment file, oldest first.
    fn segment_sizes(dir: &Path) -> Vec<(u64, u64)> {
        segment_files(dir)
            .iter()
            .map(|n| (parse_segment_name(n).unwrap(), fs::metadata(dir.join(n)).unwrap().len()))
            .collect()
    }

    #[test]
    fn truncate_retaining_keeps_the_newest_bytes_and_everything_from_seq() {
        let filled = |name: &str| {
            let d = TempDir::new(name);
            let (wal, _) = Wal::open(d.path(), opts(400)).unwrap();
            for seq in 1..=200 {
                wal.append(&payload(seq)).unwrap();
            }
            (d, wal)
        };
        let (d, wal) = filled("retaining");
        let before = segment_sizes(d.path());
        assert!(before.len() >= 8);
        let total: u64 = before.iter().map(|s| s.1).sum();

        // Everything is before the cut, but 1000 bytes must stay: the oldest segments go
        // until dropping one more would leave less than that.
        wal.truncate_retaining(u64::MAX, 1000).unwrap();
        let after = segment_sizes(d.path());
        let kept: u64 = after.iter().map(|s| s.1).sum();
        assert!(kept >= 1000, "kept {} bytes", kept);
        assert!(kept - after[0].1 < 1000, "one segment fewer would be below the limit");
        assert_eq!(wal.size_bytes(), kept);
        assert_eq!(wal.first_seq(), after[0].0);
        check_all(&wal, after[0].0, 200);

        // The cut wins over a small budget: nothing at or after it goes.
        let (_d, wal) = filled("retaining-cut");
        let cut = before[3].0 + 2; // inside the fourth segment
        wal.truncate_retaining(cut, 0).unwrap();
        assert_eq!(wal.first_seq(), before[3].0);

        // A budget bigger than the log keeps everything; with both limits the stricter
        // one decides, and reopening finds the same contiguous log.
        let (d, wal) = filled("retaining-both");
        wal.truncate_retaining(u64::MAX, total + 1).unwrap();
        assert_eq!(wal.first_seq(), 1);
        wal.truncate_retaining(cut, 1000).unwrap();
        let first = wal.first_seq();
        assert!(first > 1 && first <= before[3].0);
        assert!(segment_sizes(d.path()).iter().map(|s| s.1).sum::<u64>() >= 1000);
        wal.truncate_retaining(cut, 1000).unwrap();
        assert_eq!(wal.first_seq(), first, "idempotent");
        wal.close().unwrap();
        let (wal, rep) = Wal::open(d.path(), opts(400)).unwrap();
        assert_eq!((rep.first_seq, rep.last_seq), (first, 200));
        check_all(&wal, first, 200);
    }

    #[test]
    fn retention_keeps_closed_segments_under_the_limit() {
        let d = TempDir::new("retention");
        let o = WalOptions {
            segment_bytes: 500,
            retention_bytes: 1500,
        };
        let (wal, _) = Wal::open(d.path(), o).unwrap();
        for seq in 1..=300 {
            wal.append(&payload(seq)).unwrap();
            let g = wal.inner.lock().unwrap();
            let closed: u64 = g.segments[..g.segments.len() - 1].iter().map(|s| s.bytes).sum();
            assert!(closed <= 1500, "closed bytes {} after seq {}", closed, seq);
        }
        let first = wal.first_seq();
        assert!(first > 1, "old segments were deleted");
        assert_eq!(wal.read_from(1, 1).unwrap_err().kind, ErrorKind::NotFound);
        check_all(&wal, first, 300);
        let files = segment_files(d.path());
        let on_disk: u64 = files
            .iter()
            .map(|n| fs::metadata(d.path().join(n)).unwrap().len())
            .sum();
        assert_eq!(wal.size_bytes(), on_disk);
        assert_eq!(parse_segment_name(&files[0]), Some(first));
        drop(wal);
        let (wal, rep) = Wal::open(d.path(), o).unwrap();
        assert_eq!((rep.first_seq, rep.last_seq), (first, 300));
        check_all(&wal, first, 300);
    }

    /// Writes `n` records into a fresh log with big segments and returns the byte
    /// offset where the last record starts and the segment path.
    fn build_single_segment(dir: &Path, n: u64) -> (PathBuf, u64) {
        let (wal, _) = Wal::open(dir, WalOptions::default()).unwrap();
        let mut start = 0;
        for seq in 1..=n {
            start = wal.size_bytes();
            wal.append(&payload(seq)).unwrap();
        }
        wal.close().unwrap();
        (dir.join(segment_name(1)), start)
    }

    #[test]
    fn torn_tail_cut_at_every_byte_offset_of_the_last_record() {
        let d = TempDir::new("cut");
        let n = 12;
        let (seg, last_start) = build_single_segment(d.path(), n);
        let pristine = fs::read(&seg).unwrap();
        let end = pristine.len() as u64;
        assert!(end - last_start > RECORD_HEADER_BYTES as u64);
        for cut in last_start..=end {
            fs::write(&seg, &pristine[..cut as usize]).unwrap();
            let (wal, rep) = Wal::open(d.path(), WalOptions::default()).unwrap();
            if cut == end {
                assert_eq!(rep.last_seq, n);
                assert_eq!(rep.truncated_bytes, 0);
                assert_eq!(rep.truncated_offset, None);
            } else {
                assert_eq!(rep.last_seq, n - 1, "cut at {}", cut);
                assert_eq!(rep.first_seq, 1);
                assert_eq!(rep.truncated_bytes, cut - last_start, "cut at {}", cut);
                if cut == last_start {
                    assert_eq!(rep.truncated_file, None, "a cut on a record boundary is clean");
                } else {
                    assert_eq!(rep.truncated_file.as_deref(), Some(segment_name(1).as_str()));
                    assert_eq!(rep.truncated_offset, Some(last_start));
                }
                assert_eq!(fs::metadata(&seg).unwrap().len(), last_start, "file cut back");
            }
            check_all(&wal, 1, rep.last_seq);
            // The log continues cleanly after the cut.
            assert_eq!(wal.append(&payload(rep.last_seq + 1)).unwrap(), rep.last_seq + 1);
            wal.close().unwrap();
            let (wal, rep2) = Wal::open(d.path(), WalOptions::default()).unwrap();
            assert_eq!(rep2.truncated_bytes, 0);
            check_all(&wal, 1, rep.last_seq + 1);
        }
    }

    #[test]
    fn bit_flip_anywhere_in_the_last_record_recovers_the_records_before_it() {
        let d = TempDir::new("flip");
        let n = 9;
        let (seg, last_start) = build_single_segment(d.path(), n);
        let pristine = fs::read(&seg).unwrap();
        for byte in last_start as usize..pristine.len() {
            for bit in 0..8 {
                let mut bad = pristine.clone();
                bad[byte] ^= 1 << bit;
                fs::write(&seg, &bad).unwrap();
                let (wal, rep) = Wal::open(d.path(), WalOptions::default()).unwrap();
                assert_eq!(rep.last_seq, n - 1, "byte {} bit {}", byte, bit);
                assert_eq!(rep.truncated_offset, Some(last_start));
                assert_eq!(rep.truncated_bytes, pristine.len() as u64 - last_start);
                check_all(&wal, 1, n - 1);
            }
        }
    }

    #[test]
    fn zero_filled_and_garbage_tails_are_torn_tails() {
        let d = TempDir::new("zeros");
        let (seg, _) = build_single_segment(d.path(), 5);
        let good_len = fs::metadata(&seg).unwrap().len();
        let mut bytes = fs::read(&seg).unwrap();
        bytes.extend_from_slice(&vec![0u8; 8192]);
        fs::write(&seg, &bytes).unwrap();
        let (wal, rep) = Wal::open(d.path(), WalOptions::default()).unwrap();
        assert_eq!(rep.last_seq, 5);
        assert_eq!((rep.truncated_bytes, rep.truncated_offset), (8192, Some(good_len)));
        drop(wal);

        let mut bytes = fs::read(&seg).unwrap();
        let mut x = 0x1234_5678u32;
        for _ in 0..3000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            bytes.push((x >> 24) as u8);
        }
        fs::write(&seg, &bytes).unwrap();
        let (_, rep) = Wal::open(d.path(), WalOptions::default()).unwrap();
        assert_eq!(rep.last_seq, 5);
        assert_eq!(rep.truncated_bytes, 3000);
    }

    #[test]
    fn corrupt_record_followed_by_valid_records_in_last_segment_is_an_error() {
        let d = TempDir::new("midlast");
        let (seg, _) = build_single_segment(d.path(), 10);
        let pristine = fs::read(&seg).unwrap();
        // Offset of record 4: sum of the first three record sizes.
        let off: usize = (1..=3).map(|s| RECORD_HEADER_BYTES + payload(s).len()).sum();
        let mut bad = pristine.clone();
        bad[off + RECORD_HEADER_BYTES + 2] ^= 0x40; // damage record 4's data
        fs::write(&seg, &bad).unwrap();
        let e = Wal::open(d.path(), WalOptions::default()).err().unwrap();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(e.message.contains(&segment_name(1)), "{}", e.message);
        assert!(e.message.contains(&format!("byte offset {}", off)), "{}", e.message);
        assert_eq!(fs::read(&seg).unwrap(), bad, "nothing was cut");

        // Zeroed bytes in the middle (a lost page) followed by valid records: error.
        let mut holed = pristine;
        for b in &mut holed[off..off + 20] {
            *b = 0;
        }
        fs::write(&seg, &holed).unwrap();
        let e = Wal::open(d.path(), WalOptions::default()).err().unwrap();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(e.message.contains(&format!("byte offset {}", off)), "{}", e.message);
    }

    #[test]
    fn corrupt_record_in_a_non_last_segment_is_an_error_naming_file_and_offset() {
        let d = TempDir::new("midseg");
        {
            let (wal, _) = Wal::open(d.path(), opts(300)).unwrap();
            for seq in 1..=60 {
                wal.append(&payload(seq)).unwrap();
            }
            wal.close().unwrap();
        }
        let files = segment_files(d.path());
        assert!(files.len() >= 3);
        let victim = d.path().join(&files[1]);
        let first = parse_segment_name(&files[1]).unwrap();
        let off = RECORD_HEADER_BYTES + payload(first).len(); // second record of the segment
        let mut bytes = fs::read(&victim).unwrap();
        bytes[off + 5] ^= 0x01; // damage its CRC
        fs::write(&victim, &bytes).unwrap();
        let e = Wal::open(d.path(), opts(300)).err().unwrap();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(e.message.contains(&files[1]), "{}", e.message);
        assert!(e.message.contains(&format!("byte offset {}", off)), "{}", e.message);

        // A torn end of a non-last segment is not a torn tail either.
        bytes[off + 5] ^= 0x01;
        let len = bytes.len();
        fs::write(&victim, &bytes[..len - 3]).unwrap();
        let e = Wal::open(d.path(), opts(300)).err().unwrap();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(e.message.contains(&files[1]), "{}", e.message);
    }

    #[test]
    fn missing_middle_segment_is_an_error() {
        let d = TempDir::new("gap");
        {
            let (wal, _) = Wal::open(d.path(), opts(300)).unwrap();
            for seq in 1..=60 {
                wal.append(&payload(seq)).unwrap();
            }
            wal.close().unwrap();
        }
        let files = segment_files(d.path());
        fs::remove_file(d.path().join(&files[1])).unwrap();
        let e = Wal::open(d.path(), opts(300)).err().unwrap();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(e.message.contains(&files[2]), "{}", e.message);
    }

    #[test]
    fn torn_first_record_of_a_fresh_segment_leaves_it_empty() {
        let d = TempDir::new("freshseg");
        {
            let (wal, _) = Wal::open(d.path(), opts(300)).unwrap();
            for seq in 1..=30 {
                wal.append(&payload(seq)).unwrap();
            }
            wal.close().unwrap();
        }
        let files = segment_files(d.path());
        let last = d.path().join(files.last().unwrap());
        let last_first = parse_segment_name(files.last().unwrap()).unwrap();
        let bytes = fs::read(&last).unwrap();
        fs::write(&last, &bytes[..7]).unwrap();
        let (wal, rep) = Wal::open(d.path(), opts(300)).unwrap();
        assert_eq!(rep.last_seq, last_first - 1);
        assert_eq!(rep.truncated_offset, Some(0));
        assert_eq!(wal.append(&payload(last_first)).unwrap(), last_first);
        wal.close().unwrap();
        let (wal, _) = Wal::open(d.path(), opts(300)).unwrap();
        check_all(&wal, 1, last_first);
    }

    #[test]
    fn group_commit_shares_fsyncs_between_threads() {
        let d = TempDir::new("group");
        let (wal, _) = Wal::open(d.path(), WalOptions::default()).unwrap();
        let wal = Arc::new(wal);
        wal.hooks.fsync_delay_ms.store(20, Ordering::SeqCst);
        let threads = 8;
        let per_thread = 10;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let wal = Arc::clone(&wal);
                std::thread::spawn(move || {
                    for i in 0..per_thread {
                        let seq = wal.append(format!("t{} i{}", t, i).as_bytes()).unwrap();
                        wal.sync().unwrap();
                        // Durability contract: after sync returns, a sync covering
                        // this seq has finished.
                        assert!(wal.sync_state.lock().unwrap().synced_seq >= seq);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let calls = (threads * per_thread) as u64;
        let fsyncs = wal.sync_count();
        assert!(fsyncs >= 1);
        assert!(
            fsyncs <= calls / 2,
            "{} fsyncs for {} sync calls: no grouping",
            fsyncs,
            calls
        );
        assert_eq!(wal.last_seq(), calls);
        assert_eq!(wal.read_from(1, usize::MAX).unwrap().len() as u64, calls);
    }

    #[test]
    fn sync_returns_without_fsync_when_a_concurrent_fsync_covers_it() {
        let d = TempDir::new("covered");
        let (wal, _) = Wal::open(d.path(), WalOptions::default()).unwrap();
        let wal = Arc::new(wal);
        wal.hooks.fsync_delay_ms.store(300, Ordering::SeqCst);
        wal.append(b"one").unwrap();
        let w2 = Arc::clone(&wal);
        let leader = std::thread::spawn(move || w2.sync().unwrap());
        std::thread::sleep(Duration::from_millis(100)); // the leader is inside its fsync
        wal.sync().unwrap(); // covered by the leader's fsync: waits, no fsync of its own
        leader.join().unwrap();
        assert_eq!(wal.sync_count(), 1);

        // Now a record appended while an fsync is in flight is NOT covered by it.
        wal.append(b"two").unwrap();
        let w2 = Arc::clone(&wal);
        let leader = std::thread::spawn(move || w2.sync().unwrap());
        std::thread::sleep(Duration::from_millis(100));
        wal.append(b"three").unwrap();
        wal.sync().unwrap();
        leader.join().unwrap();
        assert_eq!(wal.sync_count(), 3);
        wal.sync().unwrap();
        assert_eq!(wal.sync_count(), 3, "nothing new to sync");
    }

    #[test]
    fn failed_fsync_poisons_the_wal() {
        let d = TempDir::new("poison");
        let (wal, _) = Wal::open(d.path(), WalOptions::default()).unwrap();
        wal.append(b"a").unwrap();
        wal.hooks.fail_next_fsync.store(true, Ordering::SeqCst);
        let e = wal.sync().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        let e = wal.append(b"b").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Closed);
        assert!(e.message.contains("injected fsync failure"), "{}", e.message);
        assert_eq!(wal.sync().unwrap_err().kind, ErrorKind::Closed);
        assert_eq!(wal.read_from(1, 1).unwrap_err().kind, ErrorKind::Closed);
        assert_eq!(wal.close().unwrap_err().kind, ErrorKind::Closed);
        drop(wal);
        let (wal, rep) = Wal::open(d.path(), WalOptions::default()).unwrap();
        assert_eq!(rep.last_seq, 1);
        assert_eq!(wal.read_from(1, 1).unwrap()[0].1, b"a");
    }

    #[test]
    fn failed_fsync_at_segment_roll_poisons_the_wal() {
        let d = TempDir::new("poisonroll");
        let (wal, _) = Wal::open(d.path(), opts(10)).unwrap();
        wal.append(b"0123456789ab").unwrap();
        wal.hooks.fail_next_fsync.store(true, Ordering::SeqCst);
        assert_eq!(wal.append(b"x").unwrap_err().kind, ErrorKind::Io);
        assert_eq!(wal.append(b"y").unwrap_err().kind, ErrorKind::Closed);
    }

    #[test]
    fn failed_write_is_undone_and_does_not_consume_a_seq() {
        let d = TempDir::new("writefail");
        let (wal, _) = Wal::open(d.path(), WalOptions::default()).unwrap();
        wal.append(&payload(1)).unwrap();
        let size = wal.size_bytes();
        wal.hooks.fail_next_write.store(true, Ordering::SeqCst);
        let e = wal.append_batch(&[&payload(2), &payload(3)]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert_eq!(
            fs::metadata(d.path().join(segment_name(1))).unwrap().len(),
            size,
            "partial bytes cut"
        );
        assert_eq!(wal.last_seq(), 1);
        assert_eq!(
            wal.append(&payload(2)).unwrap(),
            2,
            "seq not consumed, log still usable"
        );
        wal.close().unwrap();
        let (wal, rep) = Wal::open(d.path(), WalOptions::default()).unwrap();
        assert_eq!(rep.truncated_bytes, 0);
        check_all(&wal, 1, 2);
    }

    #[test]
    fn close_makes_later_calls_fail_with_closed() {
        let d = TempDir::new("close");
        let (wal, _) = Wal::open(d.path(), WalOptions::default()).unwrap();
        wal.append(b"x").unwrap();
        wal.close().unwrap();
        assert_eq!(wal.sync_count(), 1, "close synced");
        assert_eq!(wal.append(b"y").unwrap_err().kind, ErrorKind::Closed);
        assert_eq!(wal.append_batch(&[]).unwrap_err().kind, ErrorKind::Closed);
        assert_eq!(wal.sync().unwrap_err().kind, ErrorKind::Closed);
        assert_eq!(wal.close().unwrap_err().kind, ErrorKind::Closed);
        assert_eq!(wal.truncate_before(5).unwrap_err().kind, ErrorKind::Closed);
        assert_eq!(wal.read_from(1, 1).unwrap_err().kind, ErrorKind::Closed);
        assert_eq!(wal.last_seq(), 1, "getters still answer");
    }

    #[test]
    fn unrelated_files_in_the_directory_are_ignored() {
        let d = TempDir::new("unrelated");
        fs::create_dir_all(d.path()).unwrap();
        fs::write(d.path().join("README"), b"hi").unwrap();
        fs::write(d.path().join("00000000000000000001.wal.bak"), b"junk").unwrap();
        let (wal, rep) = Wal::open(d.path(), WalOptions::default()).unwrap();
        assert_eq!(rep.last_seq, 0);
        wal.append(b"x").unwrap();
    }
}
