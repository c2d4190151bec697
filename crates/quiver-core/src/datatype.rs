//! Element types of stored dense vectors: `float32` (4 bytes), `float16` (2 bytes,
//! IEEE 754 half precision) and `uint8` (1 byte), as the reference's `datatype`.
//!
//! Owns: the conversion of f32 input to each type (the reference's rules: `uint8`
//! truncates toward zero and saturates to 0..=255, so -3 becomes 0, 3.9 becomes 3 and
//! 300 becomes 255; `float16` rounds to nearest, ties to even), reading stored
//! elements back as f32, and the distance costs between an f32 query and a stored
//! vector of any type. Must never: allocate (costs run per visited node).

use crate::distance::Distance;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Datatype {
    Float32,
    Float16,
    Uint8,
}

/// Largest finite half-precision value; inputs of this magnitude or more round to
/// infinity (65520 and above), which no distance can use.
pub const F16_MAX: f32 = 65504.0;

impl Datatype {
    pub fn parse(name: &str) -> Option<Datatype> {
        match name {
            "float32" => Some(Datatype::Float32),
            "float16" => Some(Datatype::Float16),
            "uint8" => Some(Datatype::Uint8),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Datatype::Float32 => "float32",
            Datatype::Float16 => "float16",
            Datatype::Uint8 => "uint8",
        }
    }

    /// Bytes per stored element.
    pub fn bytes(self) -> usize {
        match self {
            Datatype::Float32 => 4,
            Datatype::Float16 => 2,
            Datatype::Uint8 => 1,
        }
    }

    /// Whether Cosine vectors are normalised before they are stored (as f32 and f16
    /// are). A uint8 vector cannot hold a unit vector, so its Cosine is computed in
    /// full from the stored values, as the reference does.
    pub fn normalises(self) -> bool {
        self != Datatype::Uint8
    }

    /// Turns `v` (in place) into the f32 values this type stores: what a stored
    /// vector reads back as, and what a query is scored with. Cosine vectors are
    /// normalised first where the type keeps them normalised.
    pub fn prepare(self, distance: Distance, v: &mut [f32]) {
        match self {
            Datatype::Float32 => distance.preprocess(v),
            Datatype::Float16 => {
                distance.preprocess(v);
                for x in v.iter_mut() {
                    *x = f16_to_f32(f32_to_f16(*x));
                }
            }
            Datatype::Uint8 => {
                for x in v.iter_mut() {
                    *x = to_u8(*x) as f32;
                }
            }
        }
    }

    /// Whether `x` (finite) can be stored: float16 refuses magnitudes that would round
    /// to infinity (Cosine vectors are normalised first, so they always fit).
    pub fn fits(self, distance: Distance, x: f32) -> bool {
        match self {
            Datatype::Float16 if distance != Distance::Cosine => x.abs() < 65520.0,
            _ => true,
        }
    }
}

/// The reference's float-to-uint8 rule: truncate toward zero, saturate at 0 and 255.
#[inline]
pub fn to_u8(x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 {
        0
    } else if x >= 255.0 {
        255
    } else {
        x as u8
    }
}

/// f32 to IEEE 754 binary16 bits, round to nearest even (overflow gives infinity).
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        // Inf or NaN (keep NaN a NaN).
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal half (or zero): shift the mantissa with its hidden bit in.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = if rem > mid || (rem == mid && half & 1 == 1) { 1 } else { 0 };
        return sign | (half + round) as u16;
    }
    let half = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    let round = if rem > 0x1000 || (rem == 0x1000 && half & 1 == 1) { 1 } else { 0 };
    // A carry out of the mantissa moves to the next exponent (up to infinity): right.
    sign | (half + round) as u16
}

/// IEEE 754 binary16 bits to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if man == 0 {
            sign
        } else {
            // Subnormal: value = man * 2^-24.
            let v = man as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
    } else if exp == 0x1f {
        sign | 0x7f80_0000 | (man << 13)
    } else {
        sign | ((exp + 127 - 15) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

/// Which arithmetic a stored-type cost runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CostKind {
    NegDot,
    /// Cosine of vectors not stored normalised (uint8): minus the full cosine.
    NegCosine,
    L2Sq,
    L1,
}

impl CostKind {
    pub(crate) fn of(distance: Distance, datatype: Datatype) -> CostKind {
        match distance {
            Distance::Cosine if !datatype.normalises() => CostKind::NegCosine,
            Distance::Cosine | Distance::Dot => CostKind::NegDot,
            Distance::Euclid => CostKind::L2Sq,
            Distance::Manhattan => CostKind::L1,
        }
    }
}

/// A stored element read as f32.
pub(crate) trait Elem: Copy {
    fn f(self) -> f32;
}
impl Elem for f32 {
    #[inline(always)]
    fn f(self) -> f32 {
        self
    }
}
impl Elem for u8 {
    #[inline(always)]
    fn f(self) -> f32 {
        self as f32
    }
}
/// Half-precision bits.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct Half(pub u16);
impl Elem for Half {
    #[inline(always)]
    fn f(self) -> f32 {
        f16_to_f32(self.0)
    }
}

/// The cost (lower is closer) between two vectors of any element types.
#[inline]
pub(crate) fn cost<A: Elem, B: Elem>(kind: CostKind, a: &[A], b: &[B]) -> f32 {
    let n = a.len().min(b.len());
    match kind {
        CostKind::NegDot => {
            let mut s = 0.0f32;
            for j in 0..n {
                s += a[j].f() * b[j].f();
            }
            -s
        }
        CostKind::NegCosine => {
            let (mut s, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
            for j in 0..n {
                let (x, y) = (f64::from(a[j].f()), f64::from(b[j].f()));
                s += x * y;
                na += x * x;
                nb += y * y;
            }
            if na == 0.0 || nb == 0.0 {
                0.0
            } else {
                -((s / (na.sqrt() * nb.sqrt())) as f32)
            }
        }
        CostKind::L2Sq => {
            let mut s = 0.0f32;
            for j in 0..n {
                let d = a[j].f() - b[j].f();
                s += d * d;
            }
            s
        }
        CostKind::L1 => {
            let mut s = 0.0f32;
            for j in 0..n {
                s += (a[j].f() - b[j].f()).abs();
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uint8_truncates_and_saturates() {
        assert_eq!(to_u8(-3.0), 0);
        assert_eq!(to_u8(-0.5), 0);
        assert_eq!(to_u8(0.99), 0);
        assert_eq!(to_u8(3.9), 3);
        assert_eq!(to_u8(254.999), 254);
        assert_eq!(to_u8(255.0), 255);
        assert_eq!(to_u8(300.0), 255);
        let mut v = [1.5f32, -2.0, 256.0, 7.0];
        Datatype::Uint8.prepare(Distance::Cosine, &mut v);
        assert_eq!(v, [1.0, 0.0, 255.0, 7.0]);
    }

    #[test]
    fn half_conversion_round_trips_and_rounds_to_even() {
        for &x in &[0.0f32, -0.0, 1.0, -2.5, 0.333_251_95, 65504.0, 6.1035156e-5, 5.9604645e-8, 1e-3] {
            let h = f32_to_f16(x);
            let back = f16_to_f32(h);
            assert_eq!(f32_to_f16(back), h, "{}", x);
            let ulp = if x.abs() < 6.1035156e-5 { 5.9604645e-8 } else { x.abs() / 1024.0 };
            assert!((back - x).abs() <= ulp / 2.0 + f32::EPSILON, "{} -> {}", x, back);
        }
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to even (1).
        assert_eq!(f16_to_f32(f32_to_f16(1.0 + 1.0 / 2048.0)), 1.0);
        assert_eq!(f16_to_f32(f32_to_f16(1.0 + 3.0 / 2048.0)), 1.0 + 2.0 / 1024.0);
        assert!(f16_to_f32(f32_to_f16(70000.0)).is_infinite());
        assert!(Datatype::Float16.fits(Distance::Dot, 65504.0));
        assert!(!Datatype::Float16.fits(Distance::Dot, 70000.0));
        assert!(Datatype::Float16.fits(Distance::Cosine, 70000.0));
        // Every half value converts back to itself.
        for h in 0u16..=0xffff {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "{:#06x}", h);
            }
        }
    }

    #[test]
    fn costs_match_f32_arithmetic() {
        let a = [1.0f32, 2.0, 3.0];
        let b = [4u8, 0, 2];
        assert_eq!(cost(CostKind::NegDot, &a, &b), -10.0);
        assert_eq!(cost(CostKind::L2Sq, &a, &b), 9.0 + 4.0 + 1.0);
        assert_eq!(cost(CostKind::L1, &a, &b), 3.0 + 2.0 + 1.0);
        let c = cost(CostKind::NegCosine, &a, &b);
        let want = -10.0 / ((14.0f64).sqrt() * (20.0f64).sqrt());
        assert!((f64::from(c) - want).abs() < 1e-6);
        assert_eq!(cost(CostKind::NegCosine, &a, &[0u8, 0, 0]), 0.0);
        let h = [Half(f32_to_f16(0.5)), Half(f32_to_f16(-1.0)), Half(f32_to_f16(2.0))];
        assert_eq!(cost(CostKind::NegDot, &a, &h), -(0.5 - 2.0 + 6.0));
    }
}
