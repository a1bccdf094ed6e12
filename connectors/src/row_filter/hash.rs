//! Spark's `hash` (Murmur3 x86 32-bit) and `xxhash64` (XXH64), each seeded
//! with 42 and chained over the arguments, on the bytes Spark hashes for each
//! type: an int for booleans, bytes, shorts, ints and dates; a long for
//! longs, timestamps and decimals of up to 18 digits; the bits of a float or
//! double with `-0.0` taken as `0.0`; the UTF-8 bytes of a string. A null
//! leaves the hash as it was.

/// The seed Spark starts from.
pub(crate) const SEED: u64 = 42;

/// A value as Spark's hash functions see it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hashed<'a> {
    Int(i32),
    Long(i64),
    Bytes(&'a [u8]),
}

/// Murmur3 (Spark's `Murmur3_x86_32`) of `value` from `seed`.
pub(crate) fn murmur3(value: Hashed<'_>, seed: i32) -> i32 {
    match value {
        Hashed::Int(v) => {
            let h = mix_h1(seed as u32, mix_k1(v as u32));
            fmix(h, 4) as i32
        }
        Hashed::Long(v) => {
            let low = v as u32;
            let high = (v as u64 >> 32) as u32;
            let h = mix_h1(seed as u32, mix_k1(low));
            let h = mix_h1(h, mix_k1(high));
            fmix(h, 8) as i32
        }
        Hashed::Bytes(bytes) => {
            // Spark's `hashUnsafeBytes`: whole words, then each byte left
            // over as a word of its own (sign-extended), not the standard tail.
            let aligned = bytes.len() - bytes.len() % 4;
            let mut h = seed as u32;
            for word in bytes[..aligned].chunks_exact(4) {
                let k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                h = mix_h1(h, mix_k1(k));
            }
            for &b in &bytes[aligned..] {
                h = mix_h1(h, mix_k1(b as i8 as i32 as u32));
            }
            fmix(h, bytes.len() as u32) as i32
        }
    }
}

fn mix_k1(k: u32) -> u32 {
    k.wrapping_mul(0xcc9e_2d51)
        .rotate_left(15)
        .wrapping_mul(0x1b87_3593)
}

fn mix_h1(h: u32, k: u32) -> u32 {
    (h ^ k)
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

fn fmix(h: u32, len: u32) -> u32 {
    let mut h = h ^ len;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

/// XXH64 (Spark's `XXH64`) of `value` from `seed`: the standard XXH64 of
/// the value's little-endian bytes.
pub(crate) fn xxhash64(value: Hashed<'_>, seed: i64) -> i64 {
    match value {
        Hashed::Int(v) => xxh64(&v.to_le_bytes(), seed as u64) as i64,
        Hashed::Long(v) => xxh64(&v.to_le_bytes(), seed as u64) as i64,
        Hashed::Bytes(b) => xxh64(b, seed as u64) as i64,
    }
}

fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

fn merge(acc: u64, val: u64) -> u64 {
    (acc ^ round(0, val)).wrapping_mul(P1).wrapping_add(P4)
}

fn xxh64(data: &[u8], seed: u64) -> u64 {
    let word = |b: &[u8]| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let mut rest = data;
    let mut h = if data.len() >= 32 {
        let mut v = [
            seed.wrapping_add(P1).wrapping_add(P2),
            seed.wrapping_add(P2),
            seed,
            seed.wrapping_sub(P1),
        ];
        while rest.len() >= 32 {
            for (k, acc) in v.iter_mut().enumerate() {
                *acc = round(*acc, word(&rest[k * 8..]));
            }
            rest = &rest[32..];
        }
        let mut h = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        for acc in v {
            h = merge(h, acc);
        }
        h
    } else {
        seed.wrapping_add(P5)
    };
    h = h.wrapping_add(data.len() as u64);
    while rest.len() >= 8 {
        h ^= round(0, word(rest));
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        let k = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as u64;
        h ^= k.wrapping_mul(P1);
        h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        rest = &rest[4..];
    }
    for &b in rest {
        h ^= (b as u64).wrapping_mul(P5);
        h = h.rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from Spark 4 (`SELECT hash(...)`, `SELECT xxhash64(...)`).
    #[test]
    fn as_spark_hashes() {
        assert_eq!(murmur3(Hashed::Int(1), 42), -559_580_957);
        assert_eq!(murmur3(Hashed::Long(1), 42), -1_712_319_331);
        assert_eq!(murmur3(Hashed::Bytes(b"Spark"), 42), 228_093_765);
        assert_eq!(
            xxhash64(Hashed::Bytes(b"Spark"), 42),
            -4_294_468_057_691_064_905
        );
    }
}
