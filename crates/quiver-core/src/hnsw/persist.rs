//! The index file: `to_bytes` / `from_bytes`, `save` / `load`.
//!
//! Owns: the payload format inside the engine frame (magic `QVRINDEX`, format version 2;
//! version 1, without the flags word, still loads; flag bit 16: the f32 originals are
//! in a side file the index names, see `INDEX_FLAG_SIDE`), writing it to a sink (in memory, or
//! streamed to a file through bounded buffers) and parsing it from a source (a slice,
//! or a file read through a bounded buffer straight into the index's own arrays), and
//! every check that turns an inconsistent file into `Corrupt` or `UnsupportedFormat`.
//! Must never: hold a whole index image in memory to save or load a file; write
//! anything but the bytes `to_bytes` returns; allocate for a count read from the file
//! before checking it against the bytes present; let an index it returns hold a link,
//! offset or entry point out of range (it checks the structure, then
//! `check_invariants`); or accept a flag bit it does not know.

use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::error::ErrorKind;
use crate::fileio::{ByteReader, CountingSink, Sink, Source};

/// Magic and version of the index file (`Index::save`). Version 2 added the index
/// flags word after the seed; version 1 files (no flags) still load, as linked indexes.
pub const INDEX_MAGIC: [u8; 8] = *b"QVRINDEX";
pub const INDEX_FORMAT_VERSION: u32 = 2;

/// Index flags (format version 2 on): bit 0, the index is flat; bit 8, its vectors are
/// float16; bit 9, uint8 (neither: float32; both: corrupt).
const INDEX_FLAG_FLAT: u32 = 1;
const INDEX_FLAG_F16: u32 = 1 << 8;
const INDEX_FLAG_U8: u32 = 1 << 9;
/// Bit 16: the index's f32 originals are not in the file but in a side file in the same
/// directory (the index mapped them, `move_originals_to_file`). Right after the flags
/// word come the side file's name (u32 length, UTF-8 bytes: a plain file name) and the
/// number of vectors it covers (u64, the slot count); the originals array at the end is
/// then empty. The side file may be longer than that (vectors appended after the save):
/// its tail is ignored. Shorter is `Corrupt`. Builds before this flag refuse such files
/// as `UnsupportedFormat` (an unknown flag), never misread them.
const INDEX_FLAG_SIDE: u32 = 1 << 16;
/// Bit 17: the level-0 link lists are not in the file but in a graph file in the same
/// directory (`move_graph_to_file`): after the flags word (and after the originals side
/// file's fields when bit 16 is set too) come the graph file's name (u32 length, UTF-8
/// bytes, a plain file name) and the number of slots it covers (u64, the slot count);
/// the arena array then holds each slot's data words only (`n * data_words`). The
/// graph file holds `n * (1 + 2m)` u32 words, little-endian; a longer file's tail is
/// ignored, a shorter one is `Corrupt`, and every link in it is range-checked on load
/// (`check_invariants`). Builds before this flag refuse such files as
/// `UnsupportedFormat`.
const INDEX_FLAG_GRAPH: u32 = 1 << 17;
const INDEX_KNOWN_FLAGS: u32 = INDEX_FLAG_FLAT | INDEX_FLAG_F16 | INDEX_FLAG_U8 | INDEX_FLAG_SIDE | INDEX_FLAG_GRAPH;

/// Longest side file name an index file may carry.
const MAX_SIDE_NAME: usize = 1024;

/// Where a loaded index's originals come from: the mapped side file, or its bytes read
/// into memory (the WASM backend, which has no mmap).
pub enum SideOriginals {
    Mapped(MappedF32),
    Memory(Vec<f32>),
}

/// Where a loaded index's level-0 links come from: the mapped graph file, or its
/// words read into memory (the WASM backend, which has no mmap: the links go back
/// into the arena).
pub enum SideGraph {
    Mapped(MappedF32),
    Memory(Vec<u32>),
}

/// The graph file an index file's bytes name (`INDEX_FLAG_GRAPH`), and the bytes of it
/// the index reads: `None` for an index that holds its links itself. Reads the frame
/// header and the payload's first fields only (the load that follows checks the rest).
pub fn graph_file_of(bytes: &[u8]) -> Result<Option<(String, u64)>> {
    let (p, flags) = match payload_flags(bytes)? {
        Some(v) => v,
        None => return Ok(None),
    };
    if flags & INDEX_FLAG_GRAPH == 0 {
        return Ok(None);
    }
    let mut at = FLAGS_AT + 4;
    if flags & INDEX_FLAG_SIDE != 0 {
        at += 4 + header_word(p, at)? as usize + 8;
    }
    let m = header_word(p, 5)? as u64;
    let (name, covered) = file_named_at(p, at, "graph")?;
    Ok(Some((name, covered.saturating_mul(1 + 2 * m).saturating_mul(4))))
}

/// The side file an index file's bytes name, and the bytes of it the index reads:
/// `None` for an index that holds its originals itself. Reads the frame header and
/// the payload's first fields only (no checksum: the load that follows checks it).
pub fn side_file_of(bytes: &[u8]) -> Result<Option<(String, u64)>> {
    let (p, flags) = match payload_flags(bytes)? {
        Some(v) => v,
        None => return Ok(None),
    };
    if flags & INDEX_FLAG_SIDE == 0 {
        return Ok(None);
    }
    let dim = header_word(p, 0)? as u64;
    let (name, covered) = file_named_at(p, FLAGS_AT + 4, "side")?;
    Ok(Some((name, covered.saturating_mul(dim).saturating_mul(4))))
}

/// Where the flags word stands in an index payload of format 2 and later (after dim,
/// distance, m, ef_construct, threshold, quantization, quantile and seed).
const FLAGS_AT: usize = 4 + 1 + 4 + 4 + 8 + 1 + 4 + 8;

fn truncated_header() -> Error {
    Error::corrupt("index: truncated header")
}

/// The little-endian u32 at `o` of the payload `p`.
fn header_word(p: &[u8], o: usize) -> Result<u32> {
    p.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(truncated_header)
}

/// The payload of an index file's bytes and its flags word, for `side_file_of` and
/// `graph_file_of`: `None` before format 2 (no flags, so neither file).
fn payload_flags(bytes: &[u8]) -> Result<Option<(&[u8], u32)>> {
    use crate::fileio::FRAME_HEADER_BYTES;
    if bytes.len() < FRAME_HEADER_BYTES || bytes[..8] != INDEX_MAGIC {
        return Err(Error::corrupt("index: not an index file"));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version < 2 {
        return Ok(None);
    }
    let p = &bytes[FRAME_HEADER_BYTES..];
    Ok(Some((p, header_word(p, FLAGS_AT)?)))
}

/// The file name at `at` of the payload `p` (a u32 length, then UTF-8) and the u64
/// after it (how much of the file the index covers); `what` ("side", "graph") names
/// the file in errors.
fn file_named_at(p: &[u8], at: usize, what: &str) -> Result<(String, u64)> {
    let name_len = header_word(p, at)? as usize;
    if name_len == 0 || name_len > MAX_SIDE_NAME {
        return Err(Error::corrupt(format!("index: {} file name out of range", what)));
    }
    let name = p.get(at + 4..at + 4 + name_len).ok_or_else(truncated_header)?;
    let name = String::from_utf8(name.to_vec()).map_err(|_| Error::corrupt(format!("index: {} file name is not UTF-8", what)))?;
    let c = p.get(at + 4 + name_len..at + 12 + name_len).ok_or_else(truncated_header)?;
    Ok((name, u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])))
}

/// A side file name is a plain name: no directory parts, not `.` or `..`.
fn plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\\') && !name.contains('\0')
}

fn datatype_flags(d: Datatype) -> u32 {
    match d {
        Datatype::Float32 => 0,
        Datatype::Float16 => INDEX_FLAG_F16,
        Datatype::Uint8 => INDEX_FLAG_U8,
    }
}

impl Index {
    /// Serialises the whole index (config, labels, graph, vectors, quantizer) as a
    /// framed image in memory. `save` writes the same bytes without building them.
    pub fn to_bytes(&self) -> Vec<u8> {
        let len = self.payload_len();
        crate::fileio::frame_with(INDEX_MAGIC, INDEX_FORMAT_VERSION, len as usize, |w| self.write_payload(w))
            .expect("serialising into memory cannot fail")
    }

    /// Bytes `write_payload` writes (measured by running it over a counting sink,
    /// which converts nothing, so the count cannot disagree with the writer).
    fn payload_len(&self) -> u64 {
        let mut c = CountingSink::new();
        self.write_payload(&mut c).expect("counting cannot fail");
        c.len()
    }

    /// The index file's payload. The large arrays (labels, the level-0 arena, upper
    /// links, originals) go to the sink as slices, which a streaming sink converts
    /// in bounded chunks.
    fn write_payload<S: Sink>(&self, w: &mut S) -> Result<()> {
        let c = &self.config;
        w.write_u32(c.dim as u32)?;
        w.write_u8(c.distance.code())?;
        w.write_u32(c.m as u32)?;
        w.write_u32(c.ef_construct as u32)?;
        w.write_u64(c.full_scan_threshold_kb as u64)?;
        let (qkind, quantile) = match c.quantization {
            Quantization::None => (0, 0.0),
            Quantization::Scalar { quantile } => (1, quantile),
            Quantization::Binary => (2, 0.0),
        };
        w.write_u8(qkind)?;
        w.write_f32(quantile)?;
        w.write_u64(c.seed)?;
        let side = self.mapped.as_ref().map(|m| m.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        let side_flag = if side.is_some() { INDEX_FLAG_SIDE } else { 0 };
        let graph = self.graph_map.as_ref().map(|m| m.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        let graph_flag = if graph.is_some() { INDEX_FLAG_GRAPH } else { 0 };
        w.write_u32(if c.flat { INDEX_FLAG_FLAT } else { 0 } | datatype_flags(c.datatype) | side_flag | graph_flag)?;
        for name in side.iter().chain(graph.iter()) {
            w.write_u32(name.len() as u32)?;
            w.write_bytes(name.as_bytes())?;
            w.write_u64(self.n as u64)?;
        }
        w.write_u64(self.rng.state())?;
        w.write_u64(self.n as u64)?;
        w.write_u64(self.data_words as u64)?;
        w.write_u32(self.entry.load(Ordering::Acquire))?;
        w.write_u32(self.max_level.load(Ordering::Acquire) as u32)?;
        w.write_u64_slice(&self.labels[..self.n])?;
        w.write_bytes(&self.levels[..self.n])?;
        w.write_u64_slice(&self.deleted[..(self.n + 63) / 64])?;
        w.write_u32_slice(atomics_as_u32(&self.arena[..self.n * self.stride]))?;
        w.write_u32_slice(&self.upper_off[..self.n])?;
        w.write_u64(self.upper.len() as u64)?;
        w.write_u32_slice(atomics_as_u32(&self.upper))?;
        // The quantizer is its parameters only (12 + 8 * dim bytes at most; the codes
        // are in the arena), so building its bytes in memory costs nothing.
        let qbytes = match &self.codes {
            Codes::F32 => Vec::new(),
            Codes::Scalar(q) => q.to_bytes(),
            Codes::Binary(q) => q.to_bytes(),
        };
        w.write_u64(qbytes.len() as u64)?;
        w.write_bytes(&qbytes)?;
        // A mapped index's originals stay in their side file (named above).
        let originals: &[f32] = if side.is_some() { &[] } else { self.originals_slice() };
        w.write_u64(originals.len() as u64)?;
        w.write_f32_slice(originals)
    }

    /// Parses what `to_bytes` wrote. Any inconsistency is a Corrupt error naming `name`.
    /// An index whose originals are in a side file is refused here (`Unsupported`):
    /// `load` maps the file, `from_bytes_with_side` takes its bytes.
    pub fn from_bytes_named(bytes: &[u8], name: &str) -> Result<Index> {
        Index::from_bytes_with_side(bytes, name, None)
    }

    /// Parses what `to_bytes` wrote; `side` is the content of the side file the bytes
    /// name (see `side_file_of`), read into memory: at least the bytes the index covers
    /// (a longer one's tail is ignored; shorter is `Corrupt`).
    /// An index whose level-0 links are in a graph file is refused (`Unsupported`):
    /// `load` maps it, `from_bytes_with_files` takes its bytes.
    pub fn from_bytes_with_side(bytes: &[u8], name: &str, side: Option<&[u8]>) -> Result<Index> {
        Index::from_bytes_with_files(bytes, name, side, None)
    }

    /// `from_bytes_with_side`, and `graph`, the content of the graph file the bytes
    /// name (see `graph_file_of`), read into memory: the links go back into the arena.
    pub fn from_bytes_with_files(bytes: &[u8], name: &str, side: Option<&[u8]>, graph_bytes: Option<&[u8]>) -> Result<Index> {
        let (version, payload) = crate::fileio::unframe(bytes, INDEX_MAGIC, INDEX_FORMAT_VERSION, name)?;
        let mut r = ByteReader::new(payload).with_name(name);
        let mut resolve = |file: &str, len: usize| -> Result<SideOriginals> {
            let words = given_words(side, name, file, len, "its vectors in the side file", "side file", f32::from_le_bytes)?;
            Ok(SideOriginals::Memory(words))
        };
        let mut graph = |file: &str, words: usize| -> Result<SideGraph> {
            let words = given_words(graph_bytes, name, file, words, "its graph in the file", "graph file", u32::from_le_bytes)?;
            Ok(SideGraph::Memory(words))
        };
        Index::read_payload(&mut r, version, name, &mut resolve, &mut graph)
    }

    /// Parses an index payload of format `version` from a slice or a file stream,
    /// reading the large arrays straight into the index's own storage.
    fn read_payload<S: Source>(
        r: &mut S,
        version: u32,
        name: &str,
        side: &mut dyn FnMut(&str, usize) -> Result<SideOriginals>,
        graph: &mut dyn FnMut(&str, usize) -> Result<SideGraph>,
    ) -> Result<Index> {
        let bad = |what: &str| Error::corrupt(format!("{}: {}", name, what));
        let dim = r.read_u32()? as usize;
        let distance = Distance::from_code(r.read_u8()?).ok_or_else(|| bad("unknown distance code"))?;
        let mut config = IndexConfig::new(dim, distance);
        config.m = r.read_u32()? as usize;
        config.ef_construct = r.read_u32()? as usize;
        config.full_scan_threshold_kb = r.read_u64()? as usize;
        let qkind = r.read_u8()?;
        let quantile = r.read_f32()?;
        config.quantization = match qkind {
            0 => Quantization::None,
            1 => Quantization::Scalar { quantile },
            2 => Quantization::Binary,
            _ => return Err(bad("unknown quantization kind")),
        };
        config.seed = r.read_u64()?;
        let flags = if version >= 2 { r.read_u32()? } else { 0 };
        // An unknown bit is a feature of a newer writer that changes what the rest
        // means, so the file is refused rather than read as something else.
        if flags & !INDEX_KNOWN_FLAGS != 0 {
            return Err(Error::new(
                ErrorKind::UnsupportedFormat,
                format!("{}: unknown index flags {:#010x}", name, flags & !INDEX_KNOWN_FLAGS),
            ));
        }
        config.flat = flags & INDEX_FLAG_FLAT != 0;
        config.datatype = match (flags & INDEX_FLAG_F16 != 0, flags & INDEX_FLAG_U8 != 0) {
            (false, false) => Datatype::Float32,
            (true, false) => Datatype::Float16,
            (false, true) => Datatype::Uint8,
            (true, true) => return Err(bad("index flags name two vector datatypes")),
        };
        let side_ref = if flags & INDEX_FLAG_SIDE != 0 {
            let len = r.read_u32()? as usize;
            if len == 0 || len > MAX_SIDE_NAME {
                return Err(bad("side file name out of range"));
            }
            let raw = r.read_byte_vec(len, "side file name")?;
            let file = String::from_utf8(raw).map_err(|_| bad("side file name is not UTF-8"))?;
            if !plain_file_name(&file) {
                return Err(bad("side file name is not a plain file name"));
            }
            if config.quantization == Quantization::None || config.flat {
                return Err(bad("a side file of originals for an index that keeps none apart"));
            }
            Some((file, r.read_u64()?))
        } else {
            None
        };
        let graph_ref = if flags & INDEX_FLAG_GRAPH != 0 {
            let len = r.read_u32()? as usize;
            if len == 0 || len > MAX_SIDE_NAME {
                return Err(bad("graph file name out of range"));
            }
            let raw = r.read_byte_vec(len, "graph file name")?;
            let file = String::from_utf8(raw).map_err(|_| bad("graph file name is not UTF-8"))?;
            if !plain_file_name(&file) {
                return Err(bad("graph file name is not a plain file name"));
            }
            if config.flat {
                return Err(bad("a graph file for a flat index"));
            }
            Some((file, r.read_u64()?))
        } else {
            None
        };
        config.validate().map_err(|e| bad(&e.message))?;
        let mut index = Index::new(config)?;
        index.rng = SplitMix64::new(r.read_u64()?);
        let n = r.read_u64()?;
        let data_words = r.read_u64()?;
        if n >= NONE as u64 || data_words > 65_536 * 2 {
            return Err(bad("slot count or slot size out of range"));
        }
        let (n, data_words) = (n as usize, data_words as usize);
        let entry = r.read_u32()?;
        let max_level = r.read_u32()? as usize;
        // Every slot needs at least a label, a level and its arena words: refuse a count
        // the payload cannot hold before reserving memory for it.
        if r.bytes_left() / 9 < n as u64 {
            return Err(bad("slot count larger than the file"));
        }
        r.check_array(n, 8, "labels")?;
        let mut labels = vec![0u64; n];
        r.read_u64s(&mut labels, "labels")?;
        let levels = r.read_byte_vec(n, "levels")?;
        let deleted_words = (n + 63) / 64;
        r.check_array(deleted_words, 8, "deleted bits")?;
        let mut deleted = vec![0u64; deleted_words];
        r.read_u64s(&mut deleted, "deleted bits")?;
        index.data_words = data_words;
        // With the links in a graph file, the arena holds the data words only.
        index.lofs = if graph_ref.is_some() { 0 } else { 1 + index.m0 };
        index.stride = index.lofs + data_words;
        let arena_words = n.checked_mul(index.stride).ok_or_else(|| bad("slot count or slot size out of range"))?;
        r.check_array(arena_words, 4, "u32 array")?;
        let mut arena = zeroed_atomics(arena_words);
        r.read_u32s(atomics_as_u32_mut(&mut arena), "u32 array")?;
        // (Replaced below when a graph file's links are read into memory.)
        r.check_array(n, 4, "u32 array")?;
        let mut upper_off = vec![0u32; n];
        r.read_u32s(&mut upper_off, "u32 array")?;
        let upper_len = r.read_usize()?;
        r.check_array(upper_len, 4, "u32 array")?;
        let mut upper = zeroed_atomics(upper_len);
        r.read_u32s(atomics_as_u32_mut(&mut upper), "u32 array")?;
        let qlen = r.read_usize()?;
        let qbytes = r.read_byte_vec(qlen, "bytes")?;
        // A quantized index saved before its first vector has no trained quantizer yet.
        index.codes = match index.config.quantization {
            _ if qlen == 0 => Codes::F32,
            Quantization::None => return Err(bad("quantizer bytes in an index without quantization")),
            Quantization::Scalar { .. } => Codes::Scalar(ScalarQuantizer::from_bytes(&qbytes)?),
            Quantization::Binary => Codes::Binary(BinaryQuantizer::from_bytes(&qbytes)?),
        };
        if qlen == 0 && index.config.quantization != Quantization::None && n > 0 {
            return Err(bad("quantized slots without a quantizer"));
        }
        let qdim = match &index.codes {
            Codes::F32 => dim,
            Codes::Scalar(q) => q.dim(),
            Codes::Binary(q) => q.dim(),
        };
        if qdim != dim {
            return Err(bad("quantizer dimension differs from the index dimension"));
        }
        let expect_words = match &index.codes {
            Codes::F32 => (dim * index.config.datatype.bytes() + 3) / 4,
            Codes::Scalar(q) => (q.code_len() + 3) / 4,
            Codes::Binary(q) => (q.code_len() + 3) / 4,
        };
        if expect_words != data_words {
            return Err(bad("slot size does not match the vector encoding"));
        }
        let olen = r.read_usize()?;
        r.check_array(olen, 4, "f32 array")?;
        let mut originals = vec![0f32; olen];
        r.read_f32s(&mut originals, "f32 array")?;
        index.originals = originals;
        r.expect_end()?;
        if let Some((file, covered)) = side_ref {
            if covered != n as u64 || olen != 0 {
                return Err(bad("side file covers another number of vectors than the index holds"));
            }
            match side(&file, n * dim)? {
                SideOriginals::Mapped(m) => index.mapped = Some(m),
                SideOriginals::Memory(v) => index.originals = v,
            }
        }
        if index.quantized() && index.originals_slice().len() != n * dim {
            return Err(bad("original vectors missing"));
        }
        if let Some((file, covered)) = graph_ref {
            if covered != n as u64 {
                return Err(bad("graph file covers another number of slots than the index holds"));
            }
            match graph(&file, n * (1 + index.m0))? {
                SideGraph::Mapped(m) => index.graph_map = Some(m),
                SideGraph::Memory(words) => {
                    // Links back into the arena, in front of each slot's data words.
                    let (w0, dw) = (1 + index.m0, data_words);
                    let mut merged = zeroed_atomics(n * (w0 + dw));
                    {
                        let out = atomics_as_u32_mut(&mut merged);
                        let data = atomics_as_u32(&arena);
                        for i in 0..n {
                            let at = i * (w0 + dw);
                            out[at..at + w0].copy_from_slice(&words[i * w0..(i + 1) * w0]);
                            out[at + w0..at + w0 + dw].copy_from_slice(&data[i * dw..(i + 1) * dw]);
                        }
                    }
                    arena = merged;
                    index.lofs = w0;
                    index.stride = w0 + dw;
                }
            }
        }
        // Structure checks before anything dereferences a link.
        let w = 1 + index.config.m;
        for i in 0..n {
            let lv = levels[i] as usize;
            if lv > 0 && (upper_off[i] as usize + lv * w > upper.len()) {
                return Err(bad("upper links out of range"));
            }
        }
        // A flat index has no entry point; check_invariants below makes sure of that.
        if n > 0 && !index.config.flat && (entry as usize >= n || levels[entry as usize] as usize != max_level) {
            return Err(bad("entry point out of range"));
        }
        // Bits past the last slot would mark future slots deleted.
        if n % 64 != 0 {
            if let Some(w) = deleted.last_mut() {
                *w &= (1u64 << (n % 64)) - 1;
            }
        }
        index.arena = arena;
        index.cap = n;
        index.upper = upper;
        index.upper_off = upper_off;
        index.levels = levels;
        index.labels = labels;
        index.deleted = deleted;
        index.n = n;
        index.deleted_count = 0;
        for i in 0..n as u32 {
            if index.is_deleted(i) {
                index.deleted_count += 1;
            } else {
                index.label_map.insert(index.labels[i as usize], i);
            }
        }
        if index.label_map.len() + index.deleted_count != n {
            return Err(bad("a label appears in more than one live slot"));
        }
        index.entry.store(if n == 0 { NONE } else { entry }, Ordering::Release);
        index.max_level.store(max_level, Ordering::Release);
        index.check_invariants().map_err(|e| bad(&e.message))?;
        // The check read every link through the map: drop those pages from the process
        // again (the page cache keeps them), so a loaded index starts at its memory part.
        if let Some(g) = &index.graph_map {
            g.release_pages();
        }
        Ok(index)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Index> {
        Index::from_bytes_named(bytes, "index")
    }

    /// Writes the index atomically: temp file, fsync, rename, fsync of the directory.
    /// The file is streamed (the bytes `to_bytes` returns, never held in memory whole):
    /// a save costs a few hundred KiB of buffers whatever the index's size.
    ///
    /// An index whose originals are mapped names its side file instead of holding
    /// them: the side file must sit in the same directory as `path` (it is fsynced
    /// first; the directory fsync after the rename makes its name durable too).
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        if let Some(m) = &self.mapped {
            let same_dir = |p: &std::path::Path| p.parent().map(|d| if d.as_os_str().is_empty() { std::path::Path::new(".") } else { d }).map(|d| d.to_path_buf());
            // The side file is named without its directory: it must be the file of that
            // name beside `path` (its directory may have been renamed since it was mapped).
            let beside = match (same_dir(path), m.path().file_name()) {
                (Some(d), Some(name)) => d.join(name),
                _ => std::path::PathBuf::new(),
            };
            if !m.is_file_at(&beside) {
                return Err(Error::invalid(format!(
                    "{}: the index's originals are in {}, which is not in the same directory",
                    path.display(),
                    m.path().display()
                )));
            }
            m.sync()?;
        }
        if let Some(g) = &self.graph_map {
            let beside = match (path.parent(), g.path().file_name()) {
                (Some(d), Some(name)) => (if d.as_os_str().is_empty() { std::path::Path::new(".") } else { d }).join(name),
                _ => std::path::PathBuf::new(),
            };
            // Written and fsynced once when it was created; never changed since.
            if !g.is_file_at(&beside) {
                return Err(Error::invalid(format!(
                    "{}: the index's graph is in {}, which is not in the same directory",
                    path.display(),
                    g.path().display()
                )));
            }
        }
        let len = self.payload_len();
        crate::fileio::write_framed_with(path, INDEX_MAGIC, INDEX_FORMAT_VERSION, len, |w| self.write_payload(w))
    }

    /// Reads an index file through a bounded buffer, straight into the index's own
    /// storage: a load costs the index plus a few hundred KiB. Errors are those of
    /// `from_bytes_named` over the file's bytes, naming the file; a missing file is
    /// `NotFound`.
    ///
    /// An index whose originals are in a side file maps that file (from the index
    /// file's directory); on targets without mmap it reads it into memory instead.
    pub fn load(path: &std::path::Path) -> Result<Index> {
        let name = path.display().to_string();
        let dir = path.parent().map(|d| d.to_path_buf()).unwrap_or_default();
        let mut resolve = |file: &str, len: usize| -> Result<SideOriginals> {
            open_side_file(&dir.join(file), len, SideOriginals::Mapped, SideOriginals::Memory, f32::from_le_bytes)
        };
        let mut graph = |file: &str, words: usize| -> Result<SideGraph> {
            open_side_file(&dir.join(file), words, SideGraph::Mapped, SideGraph::Memory, u32::from_le_bytes)
        };
        crate::fileio::read_framed_with(path, INDEX_MAGIC, INDEX_FORMAT_VERSION, |r, version| {
            Index::read_payload(r, version, &name, &mut resolve, &mut graph)
        })
    }
}

/// The words of an atomic array (no writer may run: `&self` of a save, or a fresh
/// array). AtomicU32 has the in-memory representation of u32.
fn atomics_as_u32(v: &[AtomicU32]) -> &[u32] {
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u32, v.len()) }
}

/// The words of an atomic array borrowed exclusively, for filling it in place.
fn atomics_as_u32_mut(v: &mut [AtomicU32]) -> &mut [u32] {
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u32, v.len()) }
}

/// The first `words` little-endian 4-byte words of `given`, the content of the file
/// `file` that the index `name` keeps `kept` in (for `from_bytes_with_files`):
/// `Unsupported` when no content was given, `Corrupt` when it is shorter than that.
fn given_words<T>(
    given: Option<&[u8]>,
    name: &str,
    file: &str,
    words: usize,
    kept: &str,
    kind: &str,
    decode: fn([u8; 4]) -> T,
) -> Result<Vec<T>> {
    let given = given.ok_or_else(|| {
        Error::new(ErrorKind::Unsupported, format!("{}: the index keeps {} {}, which was not given", name, kept, file))
    })?;
    leading_words(given, words, decode, || {
        format!(
            "{}: {} {} has {} bytes, but the index needs {}; the file is shorter than the index it belongs to",
            name,
            kind,
            file,
            given.len(),
            words as u64 * 4
        )
    })
}

/// The side or graph file at `path` that an index covers `words` words of (for
/// `Index::load`): mapped where there is mmap, else read into memory.
fn open_side_file<S, T>(
    path: &std::path::Path,
    words: usize,
    mapped: fn(MappedF32) -> S,
    memory: fn(Vec<T>) -> S,
    decode: fn([u8; 4]) -> T,
) -> Result<S> {
    if cfg!(all(unix, not(target_arch = "wasm32"))) {
        return MappedF32::open(path, words).map(mapped);
    }
    let bytes = std::fs::read(path).map_err(|e| crate::fileio::io_error(&format!("reading {}", path.display()), e))?;
    let short = || {
        format!(
            "{}: {} bytes, but the index needs {}; the file is shorter than the index it belongs to",
            path.display(),
            bytes.len(),
            words as u64 * 4
        )
    };
    leading_words(&bytes, words, decode, short).map(memory)
}

/// The first `words` little-endian 4-byte words of `bytes`, a side or graph file's
/// content; `Corrupt` with the message `short` makes when it is shorter than that.
fn leading_words<T>(bytes: &[u8], words: usize, decode: fn([u8; 4]) -> T, short: impl FnOnce() -> String) -> Result<Vec<T>> {
    if (bytes.len() as u64) < words as u64 * 4 {
        return Err(Error::corrupt(short()));
    }
    Ok(bytes[..words * 4].chunks_exact(4).map(|b| decode([b[0], b[1], b[2], b[3]])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hnsw::tests::gaussian;

    #[test]
    fn save_load_round_trip_and_corruption_is_detected() {
        let d = 12;
        let n = 1500;
        let data = gaussian(n, d, 10);
        let labels: Vec<u64> = (0..n as u64).map(|x| x + 1_000_000).collect();
        for quant in [Quantization::None, Quantization::Scalar { quantile: 0.99 }, Quantization::Binary] {
            let mut cfg = IndexConfig::new(d, Distance::Euclid);
            cfg.quantization = quant;
            let mut idx = Index::new(cfg).unwrap();
            idx.add(&labels, &data, 2).unwrap();
            idx.delete(&[1_000_005, 1_000_006]);
            let bytes = idx.to_bytes();
            let back = Index::from_bytes(&bytes).unwrap();
            assert_eq!(back.stats(), idx.stats());
            let q = gaussian(5, d, 11);
            for qi in 0..5 {
                let p = SearchParams::new(10);
                let a = idx.search(&q[qi * d..(qi + 1) * d], &p, None).unwrap();
                let b = back.search(&q[qi * d..(qi + 1) * d], &p, None).unwrap();
                assert_eq!(a, b);
            }
            // Inserting after load continues to work.
            let mut back = back;
            back.add(&[7], &vec![0.5; d], 1).unwrap();
            assert_eq!(back.get_vector(7).unwrap(), vec![0.5; d]);
            // Flipped bytes anywhere are caught by the checksum; truncation too.
            for pos in [0usize, 9, 30, bytes.len() / 2, bytes.len() - 1] {
                let mut bad = bytes.clone();
                bad[pos] ^= 0x40;
                let e = Index::from_bytes(&bad).err().expect("corruption accepted");
                assert!(e.code() == "QUIVER_CORRUPT" || e.code() == "QUIVER_UNSUPPORTED_FORMAT", "{}", e);
            }
            assert_eq!(Index::from_bytes(&bytes[..bytes.len() - 3]).err().unwrap().code(), "QUIVER_CORRUPT");
        }
        let empty = Index::new(IndexConfig::new(3, Distance::Dot)).unwrap();
        let back = Index::from_bytes(&empty.to_bytes()).unwrap();
        assert!(back.is_empty());
    }

    #[test]
    fn save_and_load_through_files() {
        let tmp = crate::testutil::TempDir::new("hnsw-files");
        let dir = tmp.path();
        let path = dir.join("index.qvi");
        let mut idx = Index::new(IndexConfig::new(4, Distance::Cosine)).unwrap();
        idx.add(&[1, 2, 3], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0], 1).unwrap();
        idx.save(&path).unwrap();
        let back = Index::load(&path).unwrap();
        assert_eq!(back.search(&[0.0, 0.9, 0.1, 0.0], &SearchParams::new(1), None).unwrap()[0].0, 2);
        assert_eq!(Index::load(&dir.join("missing")).err().unwrap().code(), "QUIVER_NOT_FOUND");
    }

    #[test]
    fn an_empty_quantized_index_round_trips() {
        for quant in [Quantization::Scalar { quantile: 0.99 }, Quantization::Binary] {
            let mut cfg = IndexConfig::new(8, Distance::Cosine);
            cfg.quantization = quant;
            let idx = Index::new(cfg).unwrap();
            let mut back = Index::from_bytes(&idx.to_bytes()).unwrap();
            assert!(back.is_empty());
            let data = gaussian(300, 8, 23);
            let labels: Vec<u64> = (0..300).collect();
            back.add(&labels, &data, 1).unwrap();
            assert_eq!(back.stats().quantization, quant.name());
            assert!(back.stats().vector_bytes < 300 * 8 * 4);
        }
    }

    #[test]
    fn load_refuses_a_slot_size_that_does_not_match_even_when_empty() {
        let idx = Index::new(IndexConfig::new(12, Distance::Dot)).unwrap();
        let bytes = idx.to_bytes();
        let (_, payload) = crate::fileio::unframe(&bytes, INDEX_MAGIC, INDEX_FORMAT_VERSION, "t").unwrap();
        let mut p = payload.to_vec();
        // data_words sits after the flags, rng state and slot count.
        let off = FLAGS_OFFSET + 4 + 8 + 8;
        p[off..off + 8].copy_from_slice(&0u64.to_le_bytes());
        let forged = crate::fileio::frame(INDEX_MAGIC, INDEX_FORMAT_VERSION, &p);
        assert_eq!(Index::from_bytes(&forged).err().unwrap().code(), "QUIVER_CORRUPT");
        // A slot count the payload cannot hold is refused before anything is reserved.
        let mut p = payload.to_vec();
        p[off - 8..off].copy_from_slice(&(u32::MAX as u64 - 1).to_le_bytes());
        let forged = crate::fileio::frame(INDEX_MAGIC, INDEX_FORMAT_VERSION, &p);
        assert_eq!(Index::from_bytes(&forged).err().unwrap().code(), "QUIVER_CORRUPT");
    }

    /// Offset of the index flags word in a version-2 payload: after dim, distance, m,
    /// ef_construct, threshold, quantization, quantile and seed.
    const FLAGS_OFFSET: usize = 4 + 1 + 4 + 4 + 8 + 1 + 4 + 8;

    #[test]
    fn flat_indexes_round_trip_through_bytes_and_files() {
        let d = 12;
        let n = 700;
        let data = gaussian(n, d, 34);
        let labels: Vec<u64> = (0..n as u64).map(|x| x + 1_000).collect();
        let q = gaussian(1, d, 35);
        for quant in [Quantization::None, Quantization::Binary] {
            let mut cfg = IndexConfig::new(d, Distance::Cosine);
            cfg.flat = true;
            cfg.quantization = quant;
            let mut idx = Index::new(cfg.clone()).unwrap();
            let back = Index::from_bytes(&idx.to_bytes()).unwrap();
            assert!(back.is_empty() && back.config().flat);
            idx.add(&labels, &data, 1).unwrap();
            idx.delete(&[1_005, 1_006]);
            let bytes = idx.to_bytes();
            let mut back = Index::from_bytes(&bytes).unwrap();
            assert_eq!(back.config(), &cfg);
            assert_eq!(back.stats(), idx.stats());
            assert_eq!(back.search(&q, &SearchParams::new(10), None).unwrap(), idx.search(&q, &SearchParams::new(10), None).unwrap());
            back.add(&[1], &vec![0.5; d], 1).unwrap();
            assert_eq!(back.search(&vec![0.5; d], &SearchParams::new(1), None).unwrap()[0].0, 1);
            assert_eq!(back.entry.load(Ordering::Relaxed), NONE);
        }
        let tmp = crate::testutil::TempDir::new("hnsw-flat");
        let path = tmp.path().join("flat.qvi");
        let mut cfg = IndexConfig::new(d, Distance::Dot);
        cfg.flat = true;
        let mut idx = Index::new(cfg).unwrap();
        idx.add(&labels, &data, 1).unwrap();
        idx.save(&path).unwrap();
        let back = Index::load(&path).unwrap();
        assert!(back.config().flat);
        assert_eq!(back.search(&q, &SearchParams::new(5), None).unwrap(), idx.search(&q, &SearchParams::new(5), None).unwrap());
    }

    #[test]
    fn index_flags_that_do_not_fit_are_refused() {
        let mut idx = Index::new(IndexConfig::new(4, Distance::Dot)).unwrap();
        idx.add(&[1, 2, 3], &gaussian(3, 4, 36), 1).unwrap();
        let bytes = idx.to_bytes();
        let (_, payload) = crate::fileio::unframe(&bytes, INDEX_MAGIC, INDEX_FORMAT_VERSION, "t").unwrap();
        let forge = |flags: u32| {
            let mut p = payload.to_vec();
            p[FLAGS_OFFSET..FLAGS_OFFSET + 4].copy_from_slice(&flags.to_le_bytes());
            Index::from_bytes(&crate::fileio::frame(INDEX_MAGIC, INDEX_FORMAT_VERSION, &p))
        };
        assert!(forge(0).is_ok());
        // A flag this build does not know: a newer writer's feature.
        assert_eq!(forge(2).err().unwrap().code(), "QUIVER_UNSUPPORTED_FORMAT");
        // A linked index's slots (with links) declared flat do not fit the flat layout.
        assert_eq!(forge(INDEX_FLAG_FLAT).err().unwrap().code(), "QUIVER_CORRUPT");
        // A flat index whose file claims an entry point is refused too.
        let mut cfg = IndexConfig::new(4, Distance::Dot);
        cfg.flat = true;
        let mut flat = Index::new(cfg).unwrap();
        flat.add(&[1, 2, 3], &gaussian(3, 4, 36), 1).unwrap();
        let bytes = flat.to_bytes();
        let (_, payload) = crate::fileio::unframe(&bytes, INDEX_MAGIC, INDEX_FORMAT_VERSION, "t").unwrap();
        let mut p = payload.to_vec();
        // entry follows the rng state, slot count and slot size.
        let entry = FLAGS_OFFSET + 4 + 8 + 8 + 8;
        assert_eq!(&p[entry..entry + 4], &NONE.to_le_bytes());
        p[entry..entry + 4].copy_from_slice(&0u32.to_le_bytes());
        let e = Index::from_bytes(&crate::fileio::frame(INDEX_MAGIC, INDEX_FORMAT_VERSION, &p)).err().unwrap();
        assert_eq!(e.code(), "QUIVER_CORRUPT", "{}", e);
    }

    /// An index file written by format version 1 (commit f6af32b, before index flags):
    /// dim 3, Euclid, m 2, ef_construct 4, seed 5; labels 10..=14 added as [0,0,0],
    /// [1,0,0], [0,2,0], [0,0,3], [1,1,1], then label 11 re-added as [4,0,0] and label
    /// 13 deleted.
    const INDEX_V1: [u8; 504] = [
        0x51, 0x56, 0x52, 0x49, 0x4e, 0x44, 0x45, 0x58, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xdc, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00,
        0x00, 0x04, 0x00, 0x00, 0x00, 0x10, 0x27, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x83, 0xe8, 0xbe, 0xfb, 0x58, 0xda,
        0x4c, 0xb5, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x03, 0x02, 0x01,
        0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x40, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f,
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x40,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
        0x03, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,
        0x1b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
        0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x57, 0xe5, 0x7c, 0x5f,
    ];

    #[test]
    fn version_1_files_load_as_linked_indexes() {
        let idx = Index::from_bytes(&INDEX_V1).unwrap();
        assert!(!idx.config().flat);
        assert_eq!((idx.config().m, idx.config().ef_construct, idx.config().seed), (2, 4, 5));
        assert_eq!(idx.live_labels(), vec![10, 12, 14, 11]);
        assert_eq!(idx.get_vector(11).unwrap(), vec![4.0, 0.0, 0.0]);
        assert_eq!(idx.get_vector(13), None);
        // What the version-1 code answered for this query on the index it wrote.
        let want = vec![(14, 0.5), (10, 1.5), (12, 1.5), (11, 3.2015622)];
        assert_eq!(idx.search(&[1.0, 1.0, 0.5], &SearchParams::new(4), None).unwrap(), want);
        // Written again it is a version-2 file that reads back the same.
        let again = idx.to_bytes();
        assert_eq!(u32::from_le_bytes([again[8], again[9], again[10], again[11]]), INDEX_FORMAT_VERSION);
        assert_eq!(again.len(), INDEX_V1.len() + 4);
        let back = Index::from_bytes(&again).unwrap();
        assert_eq!(back.search(&[1.0, 1.0, 0.5], &SearchParams::new(4), None).unwrap(), want);

        // A larger, quantized index with its flags word cut out is its version-1 form.
        let d = 16;
        let data = gaussian(1500, d, 37);
        let labels: Vec<u64> = (0..1500).collect();
        let mut cfg = IndexConfig::new(d, Distance::Cosine);
        cfg.quantization = Quantization::Scalar { quantile: 0.99 };
        let mut idx = Index::new(cfg).unwrap();
        idx.add(&labels, &data, 2).unwrap();
        idx.delete(&[3, 4, 5]);
        let bytes = idx.to_bytes();
        let (_, payload) = crate::fileio::unframe(&bytes, INDEX_MAGIC, INDEX_FORMAT_VERSION, "t").unwrap();
        let mut p = payload[..FLAGS_OFFSET].to_vec();
        p.extend_from_slice(&payload[FLAGS_OFFSET + 4..]);
        let v1 = Index::from_bytes(&crate::fileio::frame(INDEX_MAGIC, 1, &p)).unwrap();
        // (Compared with a loaded copy: the label map's capacity differs after a build.)
        assert_eq!(v1.stats(), Index::from_bytes(&bytes).unwrap().stats());
        let q = gaussian(1, d, 38);
        assert_eq!(v1.search(&q, &SearchParams::new(10), None).unwrap(), idx.search(&q, &SearchParams::new(10), None).unwrap());
    }

    /// The serialiser as it was before saves were streamed (the whole payload in a
    /// ByteWriter, then framed): the reference the streamed file must equal.
    fn to_bytes_reference(idx: &Index) -> Vec<u8> {
        use crate::fileio::ByteWriter;
        let c = &idx.config;
        let originals = idx.originals_slice();
        let mut w = ByteWriter::new();
        w.put_u32(c.dim as u32);
        w.put_u8(c.distance.code());
        w.put_u32(c.m as u32);
        w.put_u32(c.ef_construct as u32);
        w.put_u64(c.full_scan_threshold_kb as u64);
        match c.quantization {
            Quantization::None => {
                w.put_u8(0);
                w.put_f32(0.0);
            }
            Quantization::Scalar { quantile } => {
                w.put_u8(1);
                w.put_f32(quantile);
            }
            Quantization::Binary => {
                w.put_u8(2);
                w.put_f32(0.0);
            }
        }
        w.put_u64(c.seed);
        w.put_u32(if c.flat { INDEX_FLAG_FLAT } else { 0 } | datatype_flags(c.datatype));
        w.put_u64(idx.rng.state());
        w.put_u64(idx.n as u64);
        w.put_u64(idx.data_words as u64);
        w.put_u32(idx.entry.load(Ordering::Acquire));
        w.put_u32(idx.max_level.load(Ordering::Acquire) as u32);
        for l in &idx.labels[..idx.n] {
            w.put_u64(*l);
        }
        w.put_bytes(&idx.levels[..idx.n]);
        for word in &idx.deleted[..(idx.n + 63) / 64] {
            w.put_u64(*word);
        }
        let arena: &[u32] = unsafe { std::slice::from_raw_parts(idx.arena.as_ptr() as *const u32, idx.n * idx.stride) };
        w.put_u32_slice(arena);
        w.put_u32_slice(&idx.upper_off[..idx.n]);
        w.put_u64(idx.upper.len() as u64);
        let upper: &[u32] = unsafe { std::slice::from_raw_parts(idx.upper.as_ptr() as *const u32, idx.upper.len()) };
        w.put_u32_slice(upper);
        let qbytes = match &idx.codes {
            Codes::F32 => Vec::new(),
            Codes::Scalar(q) => q.to_bytes(),
            Codes::Binary(q) => q.to_bytes(),
        };
        w.put_u64(qbytes.len() as u64);
        w.put_bytes(&qbytes);
        w.put_u64(originals.len() as u64);
        w.put_f32_slice(originals);
        crate::fileio::frame(INDEX_MAGIC, INDEX_FORMAT_VERSION, w.as_slice())
    }

    /// Flat and linked indexes, unquantized, scalar and binary, with deletions; sizes
    /// that make the arena and the originals span many stream chunks.
    fn persistence_cases() -> Vec<(&'static str, Index)> {
        let d = 24;
        let mut out = Vec::new();
        let quants = [
            ("none", Quantization::None),
            ("scalar", Quantization::Scalar { quantile: 0.99 }),
            ("binary", Quantization::Binary),
        ];
        for (flat, n) in [(true, 6001usize), (false, 1203usize)] {
            for (qname, quant) in quants {
                let mut cfg = IndexConfig::new(d, Distance::Euclid);
                cfg.flat = flat;
                cfg.quantization = quant;
                cfg.seed = 41;
                let mut idx = Index::new(cfg).unwrap();
                let data = gaussian(n, d, 42);
                let labels: Vec<u64> = (0..n as u64).map(|x| x * 3 + 7).collect();
                idx.add(&labels, &data, 2).unwrap();
                idx.delete(&[7, 10, 3 * 500 + 7]);
                // A re-added label deletes its old slot too.
                idx.add(&[13], &vec![0.25; d], 1).unwrap();
                let name = match (flat, qname) {
                    (true, "none") => "flat",
                    (true, "scalar") => "flat scalar",
                    (true, _) => "flat binary",
                    (false, "none") => "hnsw",
                    (false, "scalar") => "hnsw scalar",
                    (false, _) => "hnsw binary",
                };
                out.push((name, idx));
            }
        }
        let mut empty_q = IndexConfig::new(5, Distance::Cosine);
        empty_q.quantization = Quantization::Scalar { quantile: 0.99 };
        out.push(("empty", Index::new(IndexConfig::new(3, Distance::Dot)).unwrap()));
        out.push(("empty scalar", Index::new(empty_q).unwrap()));
        out
    }

    #[test]
    fn streamed_save_is_byte_identical_to_the_in_memory_image() {
        let tmp = crate::testutil::TempDir::new("hnsw-stream-save");
        let q = gaussian(1, 24, 43);
        for (name, idx) in persistence_cases() {
            let reference = to_bytes_reference(&idx);
            assert_eq!(idx.to_bytes(), reference, "{}: to_bytes", name);
            let path = tmp.path().join(format!("{}.qvi", name.replace(' ', "-")));
            idx.save(&path).unwrap();
            assert!(std::fs::read(&path).unwrap() == reference, "{}: saved file differs", name);
            // Round trip through the streaming reader: the same index, saved the same.
            let back = Index::load(&path).unwrap();
            assert_eq!(back.config(), idx.config(), "{}", name);
            assert_eq!(back.stats(), Index::from_bytes(&reference).unwrap().stats(), "{}", name);
            assert_eq!(back.live_labels(), idx.live_labels(), "{}", name);
            assert!(back.to_bytes() == reference, "{}: loaded index serialises differently", name);
            if idx.dim() == 24 {
                let p = SearchParams::new(10);
                assert_eq!(back.search(&q, &p, None).unwrap(), idx.search(&q, &p, None).unwrap(), "{}", name);
            }
        }
        // A mapped index's file names its side file instead of holding the originals.
        let mut cfg = IndexConfig::new(16, Distance::Cosine);
        cfg.quantization = Quantization::Scalar { quantile: 0.99 };
        let mut idx = Index::new(cfg).unwrap();
        idx.add(&(0..2000).collect::<Vec<u64>>(), &gaussian(2000, 16, 44), 2).unwrap();
        let in_memory = idx.to_bytes();
        idx.move_originals_to_file(&tmp.path().join("originals.f32")).unwrap();
        let path = tmp.path().join("mapped.qvi");
        idx.save(&path).unwrap();
        let saved = std::fs::read(&path).unwrap();
        assert!(saved == idx.to_bytes());
        assert!(saved.len() < in_memory.len() - 2000 * 16 * 4 + 64);
        let back = Index::load(&path).unwrap();
        assert!(back.originals_on_disk());
        assert_eq!(back.get_vector(9), idx.get_vector(9));
    }

    /// Save and load of an index whose originals are mapped: the index file names the
    /// side file and the vectors it covers; a load maps it (a longer file's tail is
    /// ignored and later appends write over it), a shorter or missing one is refused,
    /// and bytes given in memory stand in for the map (WASM).
    #[test]
    fn mapped_originals_round_trip_through_a_side_file() {
        let tmp = crate::testutil::TempDir::new("hnsw-side");
        let dir = tmp.path();
        let d = 20;
        let n = 1500;
        let data = gaussian(n + 400, d, 60);
        let labels: Vec<u64> = (0..(n + 400) as u64).collect();
        let q = gaussian(3, d, 61);
        let answers = |i: &Index| -> Vec<Vec<(u64, f32)>> { (0..3).map(|k| i.search(&q[k * d..(k + 1) * d], &SearchParams::new(10), None).unwrap()).collect() };
        for quant in [Quantization::Scalar { quantile: 0.99 }, Quantization::Binary] {
            let mut cfg = IndexConfig::new(d, Distance::Euclid);
            cfg.quantization = quant;
            let side = dir.join(format!("side-{}.f32", quant.name()));
            let mut idx = Index::new(cfg).unwrap();
            idx.move_originals_to_file(&side).unwrap();
            idx.add(&labels[..n], &data[..n * d], 2).unwrap();
            idx.delete(&[3, 4]);
            let path = dir.join(format!("a-{}.qvi", quant.name()));
            idx.save(&path).unwrap();
            assert_eq!(side_file_of(&std::fs::read(&path).unwrap()).unwrap(), Some((format!("side-{}.f32", quant.name()), (n * d * 4) as u64)));
            let saved = answers(&idx);
            // Vectors appended after the save: the file is longer than the save covers.
            idx.add(&labels[n..n + 200], &data[n * d..(n + 200) * d], 2).unwrap();
            assert_eq!(std::fs::metadata(&side).unwrap().len() as usize, (n + 200) * d * 4);
            let mut back = Index::load(&path).unwrap();
            assert!(back.originals_on_disk());
            assert_eq!(back.len(), n - 2);
            assert_eq!(back.stats().original_bytes, 0);
            assert_eq!(answers(&back), saved);
            // In memory from the side file's bytes (what the WASM backend does).
            let bytes = std::fs::read(&path).unwrap();
            let mem = Index::from_bytes_with_side(&bytes, "a", Some(&std::fs::read(&side).unwrap())).unwrap();
            assert!(!mem.originals_on_disk());
            assert_eq!(answers(&mem), saved);
            assert_eq!(Index::from_bytes(&bytes).err().unwrap().code(), "QUIVER_UNSUPPORTED");
            let short = std::fs::read(&side).unwrap()[..n * d * 4 - 4].to_vec();
            assert_eq!(Index::from_bytes_with_side(&bytes, "a", Some(&short)).err().unwrap().code(), "QUIVER_CORRUPT");
            // The loaded index appends at the end of what it covers, over the tail the
            // first one wrote (the first one is done with the file now).
            drop(idx);
            back.add(&labels[n + 200..n + 400], &data[(n + 200) * d..(n + 400) * d], 2).unwrap();
            assert_eq!(back.get_vector(labels[n + 250]).unwrap(), data[(n + 250) * d..(n + 251) * d].to_vec());
            assert_eq!(back.get_vector(7).unwrap(), data[7 * d..8 * d].to_vec());
            assert_eq!(back.get_vector(labels[n + 5]), None);
            let again = dir.join(format!("b-{}.qvi", quant.name()));
            back.save(&again).unwrap();
            let reloaded = Index::load(&again).unwrap();
            assert_eq!(answers(&reloaded), answers(&back));
            // A side file shorter than the index needs, or gone: a clear error.
            let f = std::fs::OpenOptions::new().write(true).open(&side).unwrap();
            f.set_len((n * d * 4 - 8) as u64).unwrap();
            drop(f);
            drop(back);
            drop(reloaded);
            let e = Index::load(&path).err().unwrap();
            assert_eq!(e.code(), "QUIVER_CORRUPT", "{}", e);
            assert!(e.message.contains("shorter"), "{}", e);
            std::fs::remove_file(&side).unwrap();
            assert!(Index::load(&path).is_err());
            // A side file in another directory cannot be named by a file here.
            let mut cfg = IndexConfig::new(d, Distance::Euclid);
            cfg.quantization = quant;
            let mut other = Index::new(cfg).unwrap();
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            other.move_originals_to_file(&dir.join("sub").join("o.f32")).unwrap();
            other.add(&labels[..10], &data[..10 * d], 1).unwrap();
            assert_eq!(other.save(&dir.join("o.qvi")).err().unwrap().code(), "QUIVER_INVALID_ARGUMENT");
            // The directory renamed under the mapped file (a recovered snapshot's staging
            // directory moved into place): the same file beside the new path, so it saves.
            let moved = dir.join(format!("moved-{}", quant.name()));
            std::fs::rename(dir.join("sub"), &moved).unwrap();
            other.save(&moved.join("o.qvi")).unwrap();
            assert_eq!(answers(&Index::load(&moved.join("o.qvi")).unwrap()), answers(&other));
            // ...but not a different file of that name.
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            std::fs::copy(moved.join("o.f32"), dir.join("sub").join("o.f32")).unwrap();
            assert_eq!(other.save(&dir.join("sub").join("o.qvi")).err().unwrap().code(), "QUIVER_INVALID_ARGUMENT");
            std::fs::remove_dir_all(dir.join("sub")).unwrap();
        }
    }

    /// Forged side-file references: a name with a directory part, a covered count that
    /// is not the slot count, or the flag on an unquantized index are Corrupt.
    #[test]
    fn forged_side_file_references_are_refused() {
        let tmp = crate::testutil::TempDir::new("hnsw-side-forged");
        let mut cfg = IndexConfig::new(4, Distance::Dot);
        cfg.quantization = Quantization::Scalar { quantile: 0.99 };
        let mut idx = Index::new(cfg).unwrap();
        idx.move_originals_to_file(&tmp.path().join("abcd.f32")).unwrap();
        idx.add(&[1, 2, 3], &gaussian(3, 4, 62), 1).unwrap();
        let bytes = idx.to_bytes();
        let (_, payload) = crate::fileio::unframe(&bytes, INDEX_MAGIC, INDEX_FORMAT_VERSION, "t").unwrap();
        let side = std::fs::read(tmp.path().join("abcd.f32")).unwrap();
        assert!(Index::from_bytes_with_side(&bytes, "t", Some(&side)).is_ok());
        let name_at = FLAGS_OFFSET + 8;
        assert_eq!(&payload[name_at..name_at + 8], b"abcd.f32");
        let forge = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut p = payload.to_vec();
            f(&mut p);
            Index::from_bytes_with_side(&crate::fileio::frame(INDEX_MAGIC, INDEX_FORMAT_VERSION, &p), "t", Some(&side)).err().unwrap()
        };
        assert_eq!(forge(&|p| p[name_at..name_at + 4].copy_from_slice(b"../a")).code(), "QUIVER_CORRUPT");
        assert_eq!(forge(&|p| p[name_at + 8..name_at + 16].copy_from_slice(&2u64.to_le_bytes())).code(), "QUIVER_CORRUPT");
        assert_eq!(forge(&|p| p[21] = 0).code(), "QUIVER_CORRUPT"); // quantization kind: none
    }

    /// `Index::load` of `bytes` written to `path`, next to `from_bytes_named` of the
    /// same bytes under the same name: they must fail (or succeed) identically.
    fn load_vs_parse(path: &std::path::Path, bytes: &[u8]) -> (Result<Index>, Result<Index>) {
        std::fs::write(path, bytes).unwrap();
        (Index::load(path), Index::from_bytes_named(bytes, &path.display().to_string()))
    }

    fn same_outcome(what: &str, got: (Result<Index>, Result<Index>)) -> Option<Error> {
        match got {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.stats(), b.stats(), "{}", what);
                None
            }
            (Err(a), Err(b)) => {
                assert_eq!(a, b, "{}", what);
                Some(a)
            }
            (a, b) => panic!("{}: load {:?} but from_bytes {:?}", what, a.err(), b.err()),
        }
    }

    #[test]
    fn load_of_a_damaged_file_fails_as_parsing_its_bytes_does() {
        let tmp = crate::testutil::TempDir::new("hnsw-stream-load");
        let path = tmp.path().join("damaged.qvi");
        let name = path.display().to_string();
        // Small enough to try every byte, big enough to span chunks in the larger cases.
        let mut small = Index::new(IndexConfig::new(3, Distance::Euclid)).unwrap();
        small.add(&[1, 2, 3, 4, 5], &gaussian(5, 3, 45), 1).unwrap();
        small.delete(&[2]);
        let mut cases = vec![(true, small.to_bytes())];
        for (_, idx) in persistence_cases().into_iter().step_by(2) {
            cases.push((false, idx.to_bytes()));
        }
        for (every, bytes) in cases {
            let step = |len: usize| if every { 1 } else { (len / 150).max(1) };
            // Truncated anywhere (and extended): Corrupt, the same error, naming the file.
            let mut cut: Vec<usize> = (0..bytes.len()).step_by(step(bytes.len())).collect();
            cut.extend([1, 7, 8, 23, 24, 25, bytes.len() - 4, bytes.len() - 1]);
            for n in cut {
                let e = same_outcome(&format!("cut at {}", n), load_vs_parse(&path, &bytes[..n])).unwrap();
                assert_eq!(e.kind, ErrorKind::Corrupt, "cut at {}: {}", n, e);
                assert!(e.message.contains(&name), "{}", e);
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(same_outcome("extended", load_vs_parse(&path, &longer)).unwrap().kind, ErrorKind::Corrupt);
            // A bit flipped anywhere: the same error (a checksum mismatch in the payload
            // even where the parser would stumble first, a header check in the header).
            let mut at: Vec<usize> = (0..bytes.len()).step_by(step(bytes.len())).collect();
            at.extend(0..FRAME_HEADER_BYTES_FOR_TESTS);
            at.extend(bytes.len() - 4..bytes.len());
            for pos in at {
                for bit in [0u8, 3, 6] {
                    let mut bad = bytes.clone();
                    bad[pos] ^= 1 << bit;
                    let what = format!("flip of bit {} at {}", bit, pos);
                    if let Some(e) = same_outcome(&what, load_vs_parse(&path, &bad)) {
                        assert!(e.kind == ErrorKind::Corrupt || e.kind == ErrorKind::UnsupportedFormat, "{}: {}", what, e);
                        if pos >= FRAME_HEADER_BYTES_FOR_TESTS {
                            assert!(e.message.contains("checksum mismatch"), "{}: {}", what, e);
                        }
                    }
                }
            }
        }
        // Payloads with a valid checksum but a wrong content: the parse error stands,
        // found with the payload read whole.
        let mut idx = Index::new(IndexConfig::new(4, Distance::Dot)).unwrap();
        idx.add(&[1, 2, 3], &gaussian(3, 4, 46), 1).unwrap();
        let bytes = idx.to_bytes();
        let (_, payload) = crate::fileio::unframe(&bytes, INDEX_MAGIC, INDEX_FORMAT_VERSION, "t").unwrap();
        for (flags, kind) in [(2u32, ErrorKind::UnsupportedFormat), (INDEX_FLAG_FLAT, ErrorKind::Corrupt)] {
            let mut p = payload.to_vec();
            p[FLAGS_OFFSET..FLAGS_OFFSET + 4].copy_from_slice(&flags.to_le_bytes());
            let forged = crate::fileio::frame(INDEX_MAGIC, INDEX_FORMAT_VERSION, &p);
            assert_eq!(same_outcome("forged flags", load_vs_parse(&path, &forged)).unwrap().kind, kind);
        }
        let mut p = payload.to_vec();
        p.push(0);
        let forged = crate::fileio::frame(INDEX_MAGIC, INDEX_FORMAT_VERSION, &p);
        let e = same_outcome("trailing payload byte", load_vs_parse(&path, &forged)).unwrap();
        assert!(e.kind == ErrorKind::Corrupt && e.message.contains("trailing"), "{}", e);
        // A version-1 file loads from disk as from memory.
        assert!(same_outcome("version 1", load_vs_parse(&path, &INDEX_V1)).is_none());
        assert_eq!(Index::load(&path).unwrap().live_labels(), vec![10, 12, 14, 11]);
        // A missing file, and a directory, are not index files.
        assert_eq!(Index::load(&tmp.path().join("missing")).err().unwrap().kind, ErrorKind::NotFound);
        assert!(Index::load(tmp.path()).is_err());
    }

    const FRAME_HEADER_BYTES_FOR_TESTS: usize = crate::fileio::FRAME_HEADER_BYTES;
}
