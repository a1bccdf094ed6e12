//! Stable 64-bit hashing of categorical values into buckets: the same hash as
//! `sluice_trainer.hash64` / `bucket_of` in Python, so serving code maps a value to
//! the bucket training saw.
//!
//! For a string or binary value of bytes `b_0 .. b_{n-1}`:
//!
//! ```text
//! h    = sum((b_j + 1) * P^j) mod 2^64                 P = 0x100000001B3
//! hash = splitmix64(h XOR (n * G mod 2^64))            G = 0x9E3779B97F4A7C15
//! ```
//!
//! an integer `v` hashes to `splitmix64((v mod 2^64) XOR 0xA0761D6478BD642F)`, and a
//! null to `splitmix64(2^64 - 1)`. The bucket is `hash % buckets`.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, ByteView, GenericByteArray, Int64Array, PrimitiveArray,
};
use arrow::buffer::{Buffer, NullBuffer, ScalarBuffer};

use arrow::datatypes::{
    ArrowDictionaryKeyType, ArrowNativeType, ArrowPrimitiveType, ByteArrayType, DataType,
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};

/// The multiplier of the byte polynomial.
const P: u64 = 0x0100_0000_01B3;
/// The length mixer.
const G: u64 = 0x9E37_79B9_7F4A_7C15;
/// XORed into integers before mixing, so `0` and `""` differ.
const INT_SEED: u64 = 0xA076_1D64_78BD_642F;

/// `P^0 .. P^(POWERS-1)`: the terms of a short value are independent products.
const POWERS: usize = 64;
static POW: [u64; POWERS] = powers();

const fn powers() -> [u64; POWERS] {
    let mut out = [1u64; POWERS];
    let mut i = 1;
    while i < POWERS {
        out[i] = out[i - 1].wrapping_mul(P);
        i += 1;
    }
    out
}

/// The splitmix64 finaliser.
#[inline]
pub fn splitmix64(x: u64) -> u64 {
    let mut x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The hash of a null.
pub const NULL_HASH: u64 = splitmix64_const(u64::MAX);

const fn splitmix64_const(x: u64) -> u64 {
    let mut x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The hash of a string's UTF-8 bytes or of a binary value.
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = 0u64;
    let (head, tail) = bytes.split_at(bytes.len().min(POWERS));
    for (b, p) in head.iter().zip(POW.iter()) {
        h = h.wrapping_add((*b as u64 + 1).wrapping_mul(*p));
    }
    if !tail.is_empty() {
        let mut power = POW[POWERS - 1].wrapping_mul(P);
        for b in tail {
            h = h.wrapping_add((*b as u64 + 1).wrapping_mul(power));
            power = power.wrapping_mul(P);
        }
    }
    splitmix64(h ^ (bytes.len() as u64).wrapping_mul(G))
}

/// The hash of an integer (its 64-bit two's complement value).
#[inline]
pub fn hash_int(value: i64) -> u64 {
    splitmix64((value as u64) ^ INT_SEED)
}

/// Whether [`hash_column`] takes values of this type.
pub fn is_hashable(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(_, values) => is_hashable(values),
        other => is_categorical(other) || other.is_integer() || other == &DataType::Boolean,
    }
}

/// Strings, binary, and dictionaries of them: what `--hash-buckets N` hashes.
pub fn is_categorical(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(_, values) => is_categorical(values),
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => true,
        _ => false,
    }
}

/// The buckets (`0 <= b < buckets`) of every value of `array`, nulls included;
/// `None` when the type cannot be hashed (see `is_hashable`).
pub fn hash_column(array: &dyn Array, buckets: u64) -> Option<ArrayRef> {
    let buckets = buckets.max(1);
    let mut hashes = hashes(array)?;
    // In place, and a mask where the count is a power of two (the same buckets as
    // the remainder, without a division per value).
    if buckets.is_power_of_two() {
        let mask = buckets - 1;
        hashes.iter_mut().for_each(|h| *h &= mask);
    } else {
        hashes.iter_mut().for_each(|h| *h %= buckets);
    }
    let len = hashes.len();
    // The same 64-bit patterns, read as Int64 (as `as i64` would).
    let values = ScalarBuffer::<i64>::new(Buffer::from_vec(hashes), 0, len);
    Some(Arc::new(Int64Array::new(values, None)))
}

/// The 64-bit hash of every value of `array` (nulls included); `None` when
/// the type cannot be hashed (see `is_hashable`).
pub fn hashes(array: &dyn Array) -> Option<Vec<u64>> {
    let out = match array.data_type() {
        DataType::Utf8 => bytes(array.as_string::<i32>()),
        DataType::LargeUtf8 => bytes(array.as_string::<i64>()),
        DataType::Binary => bytes(array.as_binary::<i32>()),
        DataType::LargeBinary => bytes(array.as_binary::<i64>()),
        DataType::Utf8View => {
            let view = array.as_string_view();
            views(view.views(), view.data_buffers(), view.nulls())
        }
        DataType::BinaryView => {
            let view = array.as_binary_view();
            views(view.views(), view.data_buffers(), view.nulls())
        }
        DataType::Boolean => {
            let flags: &BooleanArray = array.as_boolean();
            (0..flags.len())
                .map(|i| value_or_null(flags, i, |i| hash_int(i64::from(flags.value(i)))))
                .collect()
        }
        DataType::Int8 => ints::<Int8Type>(array.as_primitive()),
        DataType::Int16 => ints::<Int16Type>(array.as_primitive()),
        DataType::Int32 => ints::<Int32Type>(array.as_primitive()),
        DataType::Int64 => ints::<Int64Type>(array.as_primitive()),
        DataType::UInt8 => ints::<UInt8Type>(array.as_primitive()),
        DataType::UInt16 => ints::<UInt16Type>(array.as_primitive()),
        DataType::UInt32 => ints::<UInt32Type>(array.as_primitive()),
        DataType::UInt64 => ints::<UInt64Type>(array.as_primitive()),
        DataType::Dictionary(key, _) => match key.as_ref() {
            DataType::Int8 => dictionary::<Int8Type>(array)?,
            DataType::Int16 => dictionary::<Int16Type>(array)?,
            DataType::Int32 => dictionary::<Int32Type>(array)?,
            DataType::Int64 => dictionary::<Int64Type>(array)?,
            DataType::UInt8 => dictionary::<UInt8Type>(array)?,
            DataType::UInt16 => dictionary::<UInt16Type>(array)?,
            DataType::UInt32 => dictionary::<UInt32Type>(array)?,
            DataType::UInt64 => dictionary::<UInt64Type>(array)?,
            _ => return None,
        },
        _ => return None,
    };
    Some(out)
}

#[inline]
fn value_or_null(array: &dyn Array, i: usize, hash: impl Fn(usize) -> u64) -> u64 {
    if array.is_null(i) {
        NULL_HASH
    } else {
        hash(i)
    }
}

/// Hashes of a string or binary array, reading the offsets and bytes directly.
fn bytes<T: ByteArrayType>(array: &GenericByteArray<T>) -> Vec<u64> {
    let offsets = array.value_offsets();
    let data = array.value_data();
    let mut out: Vec<u64> = offsets
        .windows(2)
        .map(|w| {
            let start = w[0].as_usize();
            let end = w[1].as_usize();
            hash_bytes(&data[start..end])
        })
        .collect();
    if let Some(nulls) = array.nulls().filter(|n| n.null_count() > 0) {
        for i in nulls.iter().enumerate().filter(|(_, v)| !v).map(|(i, _)| i) {
            out[i] = NULL_HASH;
        }
    }
    out
}

/// Hashes of a string or binary view array, read from the views: a value of up to
/// 12 bytes lies in its view itself, a longer one in a data buffer.
fn views(views: &[u128], buffers: &[Buffer], nulls: Option<&NullBuffer>) -> Vec<u64> {
    let mut out: Vec<u64> = views
        .iter()
        .map(|&view| {
            let len = view as u32 as usize;
            if len <= 12 {
                let inline = view.to_le_bytes();
                hash_bytes(&inline[4..4 + len])
            } else {
                let long = ByteView::from(view);
                let start = long.offset as usize;
                // A null's view may point anywhere: it is overwritten below.
                buffers
                    .get(long.buffer_index as usize)
                    .and_then(|data| data.get(start..start + len))
                    .map_or(NULL_HASH, hash_bytes)
            }
        })
        .collect();
    if let Some(nulls) = nulls.filter(|n| n.null_count() > 0) {
        for i in nulls.iter().enumerate().filter(|(_, v)| !v).map(|(i, _)| i) {
            out[i] = NULL_HASH;
        }
    }
    out
}

/// Hashes of an integer array (unsigned values as their 64-bit pattern).
fn ints<T: ArrowPrimitiveType>(array: &PrimitiveArray<T>) -> Vec<u64>
where
    T::Native: IntoI64,
{
    let mut out: Vec<u64> = array
        .values()
        .iter()
        .map(|v| hash_int(v.into_i64()))
        .collect();
    if let Some(nulls) = array.nulls().filter(|n| n.null_count() > 0) {
        for i in nulls.iter().enumerate().filter(|(_, v)| !v).map(|(i, _)| i) {
            out[i] = NULL_HASH;
        }
    }
    out
}

/// Hashes of a dictionary array: each dictionary value once, then per key.
fn dictionary<K: ArrowDictionaryKeyType>(array: &dyn Array) -> Option<Vec<u64>> {
    let dict = array.as_dictionary::<K>();
    let values = hashes(dict.values().as_ref())?;
    let keys = dict.keys();
    let mut out = Vec::with_capacity(keys.len());
    for i in 0..keys.len() {
        if keys.is_null(i) {
            out.push(NULL_HASH);
        } else {
            let key = keys.value(i).as_usize();
            out.push(values.get(key).copied().unwrap_or(NULL_HASH));
        }
    }
    Some(out)
}

/// Integer natives as the `i64` whose bits the hash takes.
pub trait IntoI64: Copy {
    /// The value as 64 bits (unsigned values keep their bit pattern).
    fn into_i64(self) -> i64;
}

macro_rules! into_i64 {
    ($($t:ty),*) => {$(
        impl IntoI64 for $t {
            #[inline]
            fn into_i64(self) -> i64 {
                self as i64
            }
        }
    )*};
}
into_i64!(i8, i16, i32, i64, u8, u16, u32, u64);

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{DictionaryArray, StringArray};

    /// Values computed by the reference algorithm (the Python `hash64`), here
    /// step by step with a loop over powers.
    fn reference(bytes: &[u8]) -> u64 {
        let mut h = 0u64;
        let mut power = 1u64;
        for b in bytes {
            h = h.wrapping_add((*b as u64 + 1).wrapping_mul(power));
            power = power.wrapping_mul(P);
        }
        splitmix64(h ^ (bytes.len() as u64).wrapping_mul(G))
    }

    #[test]
    fn short_and_long_values_hash_as_the_reference() {
        for n in [0usize, 1, 7, 63, 64, 65, 200] {
            let value: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
            assert_eq!(hash_bytes(&value), reference(&value), "length {n}");
        }
        assert_eq!(NULL_HASH, splitmix64(u64::MAX));
    }

    #[test]
    fn views_hash_like_plain_strings_with_any_bucket_count() {
        use arrow::array::StringViewArray;
        // Inline (up to 12 bytes) and long values, nulls, and a slice.
        let values: Vec<Option<String>> = (0..300)
            .map(|i| (i % 7 != 3).then(|| "x".repeat(i % 40)))
            .collect();
        let plain = StringArray::from(values.clone()).slice(5, 290);
        let view = StringViewArray::from(values).slice(5, 290);
        for buckets in [1u64 << 20, 1000, 7, 1] {
            let a = hash_column(&plain, buckets).expect("strings hash");
            let b = hash_column(&view, buckets).expect("views hash");
            assert_eq!(a.as_ref(), b.as_ref(), "{buckets} buckets");
            let ints = a.as_primitive::<Int64Type>();
            let expected: Vec<i64> = (0..plain.len())
                .map(|i| {
                    let hash = if plain.is_null(i) {
                        NULL_HASH
                    } else {
                        reference(plain.value(i).as_bytes())
                    };
                    (hash % buckets) as i64
                })
                .collect();
            assert_eq!(ints.values().to_vec(), expected, "{buckets} buckets");
        }
    }

    #[test]
    fn dictionaries_hash_like_their_values() {
        let plain = StringArray::from(vec![Some("a"), None, Some("héllo"), Some("a")]);
        let dict: DictionaryArray<Int32Type> = vec![Some("a"), None, Some("héllo"), Some("a")]
            .into_iter()
            .collect();
        let a = hash_column(&plain, 1000).expect("strings hash");
        let b = hash_column(&dict, 1000).expect("dictionaries hash");
        assert_eq!(a.as_ref(), b.as_ref());
        let ints = a.as_primitive::<Int64Type>();
        assert_eq!(ints.value(1), (NULL_HASH % 1000) as i64);
        assert_eq!(ints.value(0), ints.value(3));
    }

    #[test]
    fn floats_are_not_hashable() {
        assert!(!is_hashable(&DataType::Float64));
        let floats = arrow::array::Float64Array::from(vec![1.0]);
        assert!(hash_column(&floats, 10).is_none());
    }
}
