//! The splitmix64 finaliser (as `trainer::hashing` mixes), which the seeded
//! choices of rows draw on: `--split`/`--sample` ([`super::select`]) and
//! `--epoch-rows` ([`super::epoch_rows`]).

/// The splitmix64 finaliser of `x`.
pub(crate) fn mix(x: u64) -> u64 {
    let mut x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
