//! Order-preserving integer keys for floating-point elements.
//!
//! Every comparison of the selector runs on an unsigned integer key whose order is the ranking
//! order: `-inf < … < -0 = +0 < … < +inf < NaN`. Both zeros share one key (they compare equal, so
//! the tie rule decides between them) and every NaN maps to the largest key, whatever its sign and
//! payload. Half precision inputs get 16-bit keys, so they are never widened to f32.
//!
//! Ranking by magnitude uses the absolute value's bits, which are already ordered.

use candle_core::WithDType;
use half::{bf16, f16};
use std::fmt::Debug;

/// The unsigned integer type of a key.
pub trait KeyBits: Copy + Ord + Eq + Debug + Send + Sync + Into<u64> + 'static {
    const BITS: u32;
    /// The next larger key, `None` at the maximum.
    fn successor(self) -> Option<Self>;
}

macro_rules! key_bits {
    ($t:ty) => {
        impl KeyBits for $t {
            const BITS: u32 = <$t>::BITS;
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
    /// A signed integer in which the filter pass compares elements (see [`Element::passes`]).
    type Raw: Copy + Ord + Send + Sync + Debug;
    /// Key of `self`, by signed value (`MAG = false`) or by magnitude (`MAG = true`).
    fn key<const MAG: bool>(self) -> Self::Key;
    fn is_nan_value(self) -> bool;
    /// The filter's form of "key >= `min_key`" (`min_key` below the NaN key): a few branch-free
    /// integer operations that vectorize, without canonicalizing zeros and NaNs element by element.
    fn passes<const MAG: bool>(self, min_raw: Self::Raw) -> bool;
    /// The `min_raw` for which [`Element::passes`] equals `key >= min_key`. Needs `min_key` to be
    /// at most the NaN key; every NaN passes.
    fn raw_threshold<const MAG: bool>(min_key: Self::Key) -> Self::Raw;
}

macro_rules! ieee_element {
    ($t:ty, $k:ty, $raw:ty, $mantissa:expr) => {
        impl Element for $t {
            type Key = $k;
            type Raw = $raw;

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

            #[inline(always)]
            fn passes<const MAG: bool>(self, min_raw: $raw) -> bool {
                const INF: $raw = <$raw>::MAX - ((1 << $mantissa) - 1);
                let b = self.to_bits() as $raw;
                let abs = b & <$raw>::MAX;
                if MAG {
                    // Magnitudes are ordered as integers, and NaNs lie above +inf.
                    abs >= min_raw
                } else {
                    // Sign-magnitude to two's complement: ordered as the values, except that -0
                    // lies just below +0 and negative NaNs below -inf; NaNs are let through apart.
                    (b ^ ((b >> (<$raw>::BITS - 1)) & <$raw>::MAX)) >= min_raw || abs > INF
                }
            }

            fn raw_threshold<const MAG: bool>(min_key: $k) -> $raw {
                const SIGN: $k = 1 << (<$k>::BITS - 1);
                const INF: $k = SIGN - (1 << $mantissa);
                if MAG {
                    // Keys are the magnitudes; the NaN key means "NaN only", just above +inf.
                    return min_key.min(INF + 1) as $raw;
                }
                if min_key == <$k>::MAX {
                    return (INF + 1) as $raw; // only NaNs: just above +inf
                }
                if min_key == SIGN {
                    return -1; // zero: let -0 (just below +0) through as well
                }
                // Undo the key: positive values carry the sign bit, negative ones are complemented.
                let bits = if min_key > SIGN {
                    min_key & !SIGN
                } else {
                    !min_key
                };
                let b = bits as $raw;
                b ^ ((b >> (<$raw>::BITS - 1)) & <$raw>::MAX)
            }
        }
    };
}

// Arguments: the float type, its key type, its raw type, its mantissa width.
ieee_element!(f32, u32, i32, 23);
ieee_element!(f64, u64, i64, 52);
ieee_element!(bf16, u16, i16, 7);
ieee_element!(f16, u16, i16, 10);

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

    /// `passes` with the threshold of `raw_threshold` agrees with the keys, for every pair of
    /// interesting values, including the successor keys the filter uses after the threshold index.
    fn check_passes<T: Element>(values: &[T]) {
        fn both<T: Element, const MAG: bool>(values: &[T]) {
            for &t in values {
                let k = t.key::<MAG>();
                for min_key in [Some(k), k.successor()].into_iter().flatten() {
                    let raw = T::raw_threshold::<MAG>(min_key);
                    for &x in values {
                        let want = x.key::<MAG>() >= min_key;
                        assert_eq!(
                            x.passes::<MAG>(raw),
                            want,
                            "{x} vs key {min_key:?} of {t} (mag {MAG})"
                        );
                    }
                }
            }
        }
        both::<T, false>(values);
        both::<T, true>(values);
    }

    #[test]
    fn filter_predicate_matches_the_keys() {
        let f = [
            f32::NEG_INFINITY,
            -1e30,
            -1.0,
            -1e-45,
            -0.0,
            0.0,
            1e-45,
            1.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
            f32::from_bits(0xFFC0_0000),
        ];
        check_passes(&f);
        check_passes(&f.map(f64::from));
        check_passes(&f.map(bf16::from_f32));
        check_passes(&f.map(f16::from_f32));
        check_passes(&[
            f16::MIN_POSITIVE_SUBNORMAL,
            -f16::MIN_POSITIVE_SUBNORMAL,
            f16::MAX,
            f16::MIN,
        ]);
    }

    #[test]
    fn magnitude_keys_ignore_sign() {
        assert_eq!((-3.0f32).key::<true>(), 3.0f32.key::<true>());
        assert!((-3.0f32).key::<true>() > 2.0f32.key::<true>());
        assert_eq!(f32::NEG_INFINITY.key::<true>(), f32::INFINITY.key::<true>());
    }
}
