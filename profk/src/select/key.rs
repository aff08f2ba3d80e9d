//! Order-preserving integer keys for floating-point elements.
//!
//! Every comparison of the selector runs on an unsigned integer key whose order is the ranking order:
//! `-inf < … < -0 = +0 < … < +inf < NaN`. Both zeros share one key (they compare equal, so the tie rule
//! decides between them) and every NaN maps to the largest key, whatever its sign and payload. Half
//! precision inputs get 16-bit keys, so they are never widened to f32.
//!
//! Ranking by magnitude uses the absolute value's bits, which are already ordered.

use candle_core::WithDType;
use half::{bf16, f16};
use std::fmt::Debug;

/// The unsigned integer type of a key.
pub trait KeyBits: Copy + Ord + Eq + Debug + Send + Sync + Into<u64> + 'static {
    const BITS: u32;
    const MAX: Self;
    /// The next larger key, `None` at the maximum.
    fn successor(self) -> Option<Self>;
}

macro_rules! key_bits {
    ($t:ty) => {
        impl KeyBits for $t {
            const BITS: u32 = <$t>::BITS;
            const MAX: Self = <$t>::MAX;
            #[inline(always)]
            fn successor(self) -> Option<Self> {
                self.checked_add(1)
            }
        }
    };
}
key_bits!(u16);
key_bits!(u32);
key_bits!(u64);

/// An element type the CPU selector ranks.
pub trait Element: WithDType + Copy + Send + Sync {
    type Key: KeyBits;
    /// Key of `self`, by signed value (`MAG = false`) or by magnitude (`MAG = true`).
    fn key<const MAG: bool>(self) -> Self::Key;
    fn is_nan_value(self) -> bool;
}

macro_rules! ieee_element {
    ($t:ty, $k:ty, $mantissa:expr) => {
        impl Element for $t {
            type Key = $k;
            #[inline(always)]
            fn key<const MAG: bool>(self) -> $k {
                const SIGN: $k = 1 << (<$k>::BITS - 1);
                // +inf: every exponent bit set, mantissa zero.
                const INF: $k = SIGN - (1 << $mantissa);
                let b: $k = self.to_bits();
                let abs = b & !SIGN;
                let ordered = if MAG {
                    abs
                } else if abs == 0 {
                    SIGN
                } else if b & SIGN != 0 {
                    !b
                } else {
                    b | SIGN
                };
                if abs > INF {
                    <$k>::MAX
                } else {
                    ordered
                }
            }
            #[inline(always)]
            fn is_nan_value(self) -> bool {
                self.is_nan()
            }
        }
    };
}

// Arguments: the float type, its key type, its mantissa width.
ieee_element!(f32, u32, 23);
ieee_element!(f64, u64, 52);
ieee_element!(bf16, u16, 7);
ieee_element!(f16, u16, 10);

#[cfg(test)]
mod tests {
    use super::*;

    fn check_order<T: Element>(ascending: &[T]) {
        for w in ascending.windows(2) {
            assert!(
                w[0].key::<false>() < w[1].key::<false>(),
                "{} < {}",
                w[0],
                w[1]
            );
        }
    }

    #[test]
    fn keys_follow_value_order() {
        let f = [
            f32::NEG_INFINITY,
            -1e30,
            -1.0,
            -1e-45,
            0.0,
            1e-45,
            1.0,
            3e38,
            f32::INFINITY,
            f32::NAN,
        ];
        check_order(&f);
        check_order(&f.map(f64::from));
        check_order(&[f64::MIN_POSITIVE / 4.0, f64::MIN_POSITIVE]);
        check_order(&f.map(bf16::from_f32)[..3]);
        check_order(&[
            bf16::NEG_INFINITY,
            bf16::from_f32(-2.0),
            bf16::ZERO,
            bf16::MIN_POSITIVE_SUBNORMAL,
            bf16::INFINITY,
            bf16::NAN,
        ]);
        check_order(&[
            f16::NEG_INFINITY,
            f16::from_f32(-2.0),
            f16::ZERO,
            f16::MIN_POSITIVE_SUBNORMAL,
            f16::INFINITY,
            f16::NAN,
        ]);
    }

    #[test]
    fn zeros_and_nans_are_canonical() {
        assert_eq!((-0.0f32).key::<false>(), 0.0f32.key::<false>());
        assert_eq!((-0.0f64).key::<false>(), 0.0f64.key::<false>());
        assert_eq!(bf16::NEG_ZERO.key::<false>(), bf16::ZERO.key::<false>());
        assert_eq!(f16::NEG_ZERO.key::<false>(), f16::ZERO.key::<false>());
        let neg_nan = f32::from_bits(0xFFC0_0001);
        assert!(neg_nan.is_nan());
        assert_eq!(neg_nan.key::<false>(), u32::MAX);
        assert_eq!(neg_nan.key::<true>(), u32::MAX);
        assert_eq!((-f64::NAN).key::<false>(), u64::MAX);
        assert!(f32::INFINITY.key::<false>() < u32::MAX);
        assert!(f16::INFINITY.key::<true>() < u16::MAX);
    }

    #[test]
    fn magnitude_keys_ignore_sign() {
        assert_eq!((-3.0f32).key::<true>(), 3.0f32.key::<true>());
        assert!((-3.0f32).key::<true>() > 2.0f32.key::<true>());
        assert_eq!(f32::NEG_INFINITY.key::<true>(), f32::INFINITY.key::<true>());
    }
}
