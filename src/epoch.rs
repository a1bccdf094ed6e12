//! Epochs as people count them. Inside sluice (the queue, the state, the
//! operations between workers and master, the trainer protocol's `sluice.epoch`)
//! an epoch is its 0-based index. Everything people and their scripts read counts
//! from 1: lines and the status page through [`Epoch`]'s `Display`, the
//! `sluice_epoch` metric and log fields through [`Epoch::number`], and the JSON
//! documents (`/v1/status`, `sluice status --json`, `--summary-json`, `sluice run
//! --json`) through [`one_based`].

use std::fmt;

/// A 0-based epoch index that displays 1-based: `Epoch(0)` prints `1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u32);

impl Epoch {
    /// The epoch as people count it, from 1 (`sluice_epoch`, "epoch 2/3").
    pub fn number(self) -> u64 {
        u64::from(self.0) + 1
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// Serde for a 0-based `u32` epoch field that JSON shows counted from 1
/// (`#[serde(with = "crate::epoch::one_based")]`).
pub mod one_based {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Epoch;

    /// Writes `epoch` counted from 1.
    pub fn serialize<S: Serializer>(epoch: &u32, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(Epoch(*epoch).number())
    }

    /// Reads an epoch counted from 1 back to its index; 0 is refused.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
        let number = u64::deserialize(deserializer)?;
        number
            .checked_sub(1)
            .and_then(|index| u32::try_from(index).ok())
            .ok_or_else(|| {
                serde::de::Error::custom(format!("epoch {number} (epochs count from 1)"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::Epoch;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Shown {
        #[serde(with = "super::one_based")]
        epoch: u32,
    }

    #[test]
    fn json_counts_from_one_both_ways() {
        let text = serde_json::to_string(&Shown { epoch: 0 }).expect("json");
        assert_eq!(text, r#"{"epoch":1}"#);
        let back: Shown = serde_json::from_str(&text).expect("read back");
        assert_eq!(back, Shown { epoch: 0 });
        assert!(serde_json::from_str::<Shown>(r#"{"epoch":0}"#).is_err());
    }

    #[test]
    fn shown_from_one() {
        assert_eq!(Epoch(0).to_string(), "1");
        assert_eq!(format!("epoch {}/3", Epoch(2)), "epoch 3/3");
        assert_eq!(Epoch(u32::MAX).number(), 1 << 32);
    }
}
