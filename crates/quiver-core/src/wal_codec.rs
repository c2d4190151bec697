//! The write-ahead log's on-disk format as pure functions over bytes.
//!
//! Owns: segment file names, the record encoding (`u32 len | u32 crc32c | u64 seq |
//! data`, little-endian; the CRC covers the sequence bytes and the data), the checks
//! that make a record *bad*, scanning a segment image for its valid prefix, searching
//! a damaged tail for a valid record, and decoding a run of records. Must never:
//! touch a file. `wal.rs` (the native log) does its file I/O around these functions,
//! and the WASM backend does the same from TypeScript with `node:fs`, so both write
//! and recover exactly the same bytes by exactly the same rules (see `wal.rs` for the
//! recovery rule these checks serve).

use crate::crc32c::{crc32c, crc32c_append};

/// Bytes of the record header (len, crc, seq).
pub const RECORD_HEADER_BYTES: usize = 16;
/// Largest data length of one record. Larger lengths read from disk are treated as
/// damage rather than trusted for an allocation.
pub const MAX_RECORD_BYTES: usize = 1 << 30;
/// Distance between entries of the sparse in-memory index that lets a read seek near
/// a record instead of scanning its segment from the start.
pub const INDEX_STRIDE_BYTES: u64 = 64 * 1024;
pub const SEGMENT_SUFFIX: &str = ".wal";
const SEGMENT_NAME_DIGITS: usize = 20;

/// The file name of the segment whose first record has `first_seq`.
pub fn segment_name(first_seq: u64) -> String {
    format!("{:020}{}", first_seq, SEGMENT_SUFFIX)
}

/// The first sequence number a segment file name stands for; None for other files.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    if name.len() != SEGMENT_NAME_DIGITS + SEGMENT_SUFFIX.len() || !name.ends_with(SEGMENT_SUFFIX) {
        return None;
    }
    let digits = &name[..SEGMENT_NAME_DIGITS];
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub fn record_crc(seq: u64, data: &[u8]) -> u32 {
    crc32c_append(crc32c(&seq.to_le_bytes()), data)
}

/// Appends the encoding of one record to `out`.
pub fn encode_record(out: &mut Vec<u8>, seq: u64, data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&record_crc(seq, data).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(data);
}

pub(crate) fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

pub(crate) fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// A record header as read, not yet trusted beyond the length checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub len: u64,
    pub crc: u32,
    pub seq: u64,
}

/// Reads the header at the start of `bytes`, where `remaining` bytes (header included)
/// are left in the segment. Err(reason) when the header is cut short, the length
/// exceeds `MAX_RECORD_BYTES` or the record runs past the end.
pub fn parse_header(bytes: &[u8], remaining: u64) -> Result<RecordHeader, String> {
    if remaining < RECORD_HEADER_BYTES as u64 || bytes.len() < RECORD_HEADER_BYTES {
        return Err(format!("partial record header ({} bytes before end of file)", remaining));
    }
    let h = RecordHeader {
        len: le_u32(&bytes[0..4]) as u64,
        crc: le_u32(&bytes[4..8]),
        seq: le_u64(&bytes[8..16]),
    };
    if h.len > MAX_RECORD_BYTES as u64 {
        return Err(format!("record length {} exceeds the maximum", h.len));
    }
    if RECORD_HEADER_BYTES as u64 + h.len > remaining {
        return Err(format!("record length {} runs past the end of the file", h.len));
    }
    Ok(h)
}

/// Checks a record's data against its header and the sequence number expected there.
pub fn check_record(h: &RecordHeader, data: &[u8], expected: u64) -> Result<(), String> {
    if record_crc(h.seq, data) != h.crc {
        return Err(format!("checksum mismatch in record claiming seq {}", h.seq));
    }
    if h.seq != expected {
        return Err(format!("sequence number {} where {} was expected", h.seq, expected));
    }
    Ok(())
}

/// What a scan of one segment found: its valid prefix and, if it stopped early, where
/// and why. `index` holds sparse (seq, byte offset) pairs, ascending, at least
/// `INDEX_STRIDE_BYTES` apart, the first record always included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentScan {
    /// `first_seq - 1` when the segment holds no valid record.
    pub last_seq: u64,
    /// Bytes of the valid records (the offset of the first bad one, if any).
    pub valid_bytes: u64,
    pub bad: Option<(u64, String)>,
    pub index: Vec<(u64, u64)>,
}

/// Adds `(seq, offset)` to a sparse record index when it is far enough from the last entry.
pub fn note_record(index: &mut Vec<(u64, u64)>, seq: u64, offset: u64) {
    let far_enough = match index.last() {
        Some(&(_, o)) => offset >= o + INDEX_STRIDE_BYTES,
        None => true,
    };
    if far_enough {
        index.push((seq, offset));
    }
}

/// Scans a whole segment image (named for `first_seq`), stopping at the first bad record.
pub fn scan_segment_bytes(bytes: &[u8], first_seq: u64) -> SegmentScan {
    let mut scan = SegmentScan {
        last_seq: first_seq - 1,
        valid_bytes: 0,
        bad: None,
        index: Vec::new(),
    };
    let total = bytes.len() as u64;
    let mut offset = 0u64;
    let mut expected = first_seq;
    while offset < total {
        let at = offset as usize;
        let h = match parse_header(&bytes[at..], total - offset) {
            Ok(h) => h,
            Err(reason) => {
                scan.bad = Some((offset, reason));
                break;
            }
        };
        let data = &bytes[at + RECORD_HEADER_BYTES..at + RECORD_HEADER_BYTES + h.len as usize];
        if let Err(reason) = check_record(&h, data, expected) {
            scan.bad = Some((offset, reason));
            break;
        }
        note_record(&mut scan.index, h.seq, offset);
        scan.last_seq = h.seq;
        offset += RECORD_HEADER_BYTES as u64 + h.len;
        expected += 1;
    }
    scan.valid_bytes = offset;
    scan
}

/// Searches `rest` (the bytes of a segment from a bad record at its start to the end
/// of the file) for a valid record at any offset after 0. `expected` is the sequence
/// number the bad record should have had. Returns (offset in `rest`, seq).
///
/// The cheap checks (length fits, sequence number in range) come first so the CRC is
/// computed only for real candidates; zero-filled tails fail the sequence check at
/// every offset, so they cost one comparison per byte.
pub fn find_valid_record_after(rest: &[u8], expected: u64) -> Option<(usize, u64)> {
    let n = rest.len();
    if n < RECORD_HEADER_BYTES + 1 {
        return None;
    }
    let max_seq = expected.saturating_add(1 << 32);
    for off in 1..=(n - RECORD_HEADER_BYTES) {
        let seq = le_u64(&rest[off + 8..off + 16]);
        if seq < expected || seq > max_seq {
            continue;
        }
        let len = le_u32(&rest[off..off + 4]) as usize;
        if len > MAX_RECORD_BYTES || len > n - off - RECORD_HEADER_BYTES {
            continue;
        }
        let data = &rest[off + RECORD_HEADER_BYTES..off + RECORD_HEADER_BYTES + len];
        if record_crc(seq, data) == le_u32(&rest[off + 4..off + 8]) {
            return Some((off, seq));
        }
    }
    None
}

/// Decodes the records of `bytes` (a run of a segment that starts on a record boundary
/// holding `start_seq` and ends on one), keeping at most `max_records` of those with
/// seq >= `want_from`, as (seq, offset of the data in `bytes`, data length). Records
/// are checked again (the disk may have changed since open); a bad one is
/// Err((offset in `bytes`, reason)).
pub fn decode_records(
    bytes: &[u8],
    start_seq: u64,
    want_from: u64,
    max_records: usize,
) -> Result<Vec<(u64, usize, usize)>, (u64, String)> {
    let total = bytes.len() as u64;
    let mut out = Vec::new();
    let mut offset = 0u64;
    let mut expected = start_seq;
    while offset < total && out.len() < max_records {
        let at = offset as usize;
        let h = match parse_header(&bytes[at..], total - offset) {
            Ok(h) => h,
            Err(reason) => return Err((offset, reason)),
        };
        let start = at + RECORD_HEADER_BYTES;
        let data = &bytes[start..start + h.len as usize];
        check_record(&h, data, expected).map_err(|r| (offset, r))?;
        if h.seq >= want_from {
            out.push((h.seq, start, h.len as usize));
        }
        offset += RECORD_HEADER_BYTES as u64 + h.len;
        expected += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(first: u64, n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for s in first..first + n {
            encode_record(&mut out, s, format!("record {}", s).as_bytes());
        }
        out
    }

    #[test]
    fn scan_and_decode_agree() {
        let img = image(5, 10);
        let s = scan_segment_bytes(&img, 5);
        assert_eq!(s.last_seq, 14);
        assert_eq!(s.valid_bytes, img.len() as u64);
        assert!(s.bad.is_none());
        assert_eq!(s.index[0], (5, 0));
        let recs = decode_records(&img, 5, 8, 3).unwrap();
        assert_eq!(recs.iter().map(|r| r.0).collect::<Vec<_>>(), vec![8, 9, 10]);
        let (_, off, len) = recs[0];
        assert_eq!(&img[off..off + len], b"record 8");
    }

    #[test]
    fn torn_tail_and_damage() {
        let mut img = image(1, 3);
        let good = img.len() as u64;
        img.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
        let s = scan_segment_bytes(&img, 1);
        assert_eq!(s.valid_bytes, good);
        assert_eq!(s.last_seq, 3);
        assert!(s.bad.as_ref().unwrap().1.contains("partial record header"));
        assert!(find_valid_record_after(&img[good as usize..], 4).is_none());
        // A flipped byte in the first record, with valid records after it.
        let mut bad = image(1, 3);
        bad[20] ^= 1;
        let s = scan_segment_bytes(&bad, 1);
        assert_eq!(s.valid_bytes, 0);
        assert!(find_valid_record_after(&bad, 1).is_some());
        assert!(decode_records(&bad, 1, 1, 10).is_err());
    }
}
