//! quiver-core: the engine of Quiver, with no dependencies.
//!
//! Owns: distance kernels, the HNSW index, scalar and binary quantization, the
//! write-ahead log and the engine's file formats. Must never: know of shards, peers,
//! HTTP or JavaScript. Builds with Rust 1.63 (the wasm toolchain) and current stable.

pub mod crc32c;
pub mod datatype;
pub mod distance;
pub mod error;
pub mod fileio;
pub mod hnsw;
pub mod mapped;
pub mod multi;
pub mod quant;
pub mod rng;
pub mod sparse;
pub mod visited;
pub mod wal;
pub mod wal_codec;

#[cfg(test)]
mod testutil;

pub use datatype::Datatype;
pub use distance::Distance;
pub use error::{Error, ErrorKind, Result};
pub use hnsw::{Index, IndexConfig, IndexStats, Quantization, Rule, SearchParams};
