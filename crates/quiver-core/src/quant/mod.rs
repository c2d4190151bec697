//! Vector quantization: scalar int8 and binary codes with approximate costs.
//!
//! Owns: the two quantizers (`int8`: a clip range per dimension; `binary`: one bit per
//! dimension around the training means), each with its training, encoding, query
//! preparation, approximate cost (on the same scale as `Distance::cost`: smaller is
//! better) and byte form; the integer and bit kernels behind the costs (`kernels`:
//! one module per instruction set, picked once per process, like the f32 kernels in
//! `distance`); and what the two share: the rounding to a code, the reading of the
//! f32 that codes carry, and the byte forms' magics and versions.
//! Must never: allocate or pick a kernel inside `cost` (it is the graph-traversal hot
//! path); panic on bytes read back from storage (`from_bytes` returns `Corrupt` or
//! `UnsupportedFormat`); produce a final score. Costs here are approximate: the index
//! traverses with them and then rescores the best candidates (how many:
//! `hnsw::rescore_depth`) on the original f32 vectors.
//!
//! Codes are little-endian and assume no alignment, so they can sit at any offset of
//! an arena beside graph links; each quantizer's module gives its code layout.

mod binary;
mod int8;
mod kernels;
#[cfg(test)]
mod tests;

pub use binary::{BinaryQuantizer, BinaryQuery};
pub use int8::{ScalarQuantizer, ScalarQuery};
#[cfg(target_arch = "x86_64")]
pub use kernels::avx2;
#[cfg(target_arch = "aarch64")]
pub use kernels::neon;
pub use kernels::scalar;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub use kernels::simd128;
pub use kernels::{available_kernels, kernels, QuantKernels, SCALAR};

const SQ_MAGIC: &[u8; 4] = b"QVSQ";
const BQ_MAGIC: &[u8; 4] = b"QVBQ";
/// Byte-format versions. They also name the CODE layout, since an index stores codes
/// beside the quantizer: binary is 2 because its per-vector tail grew from 12 to 16
/// bytes (the set-bit count), so an index written with 12-byte tails is refused
/// (`UnsupportedFormat`) rather than misread.
/// Scalar is 2 since it keeps one range per dimension and codes grew a second f32
/// (`dim + 8` bytes): version 1 bytes are refused.
const SQ_VERSION: u32 = 2;
const BQ_VERSION: u32 = 2;

/// `round((x - lo) * inv)` clamped to 0..=255. Adding 0.5 and truncating is rounding
/// for the non-negative values that matter, and the float-to-int `as` cast saturates
/// (negative and NaN become 0, large values 255), so no branches and no libm `round`.
#[inline]
fn quantize(x: f32, lo: f32, inv: f32) -> u8 {
    ((x - lo) * inv + 0.5) as u8
}

#[inline]
fn read_f32(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
