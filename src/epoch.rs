//! Epochs as people count them. Inside sluice (the queue, the state, the
//! operations between workers and master, the trainer protocol's `sluice.epoch`)
//! an epoch is its 0-based index. Everything people and their scripts read counts
//! from 1: lines and the status page through [`Epoch`]'s `Display`, the
//! `sluice_epoch` metric and log fields through [`Epoch::number`], and the JSON
//! documents (`/v1/status`, `sluice status --json`, `--summary-json`, `sluice run
//! --json`) through [`one_based`].
//!
//! Every epoch in the code is an [`Epoch`]: fields, parameters and the
//! operations' bodies. Its serde form is the bare 0-based index
//! (`#[serde(transparent)]`), which the journal, `job.json` and the
//! worker–master operations hold; a JSON document for people says
//! `#[serde(with = "crate::epoch::one_based")]` instead. A count of epochs
//! (`--epochs`) stays a `u32`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A 0-based epoch index that displays 1-based: `Epoch(0)` prints `1`.
/// Its serde form and its `Debug` are the bare index, as a `u32` epoch's were:
/// the journal, the operations and any `{:?}` in a message read as before.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Epoch(pub u32);

impl Epoch {
    /// The first epoch.
    pub const FIRST: Epoch = Epoch(0);

    /// The epoch as people count it, from 1 (`sluice_epoch`, "epoch 2/3").
    pub fn number(self) -> u64 {
        u64::from(self.0) + 1
    }

    /// The epoch after this one.
    pub fn next(self) -> Epoch {
        Epoch(self.0 + 1)
    }

    /// The index as a `usize`, for a vector with one entry per epoch.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The epochs `0..epochs`.
    #[cfg(test)]
    pub fn all(epochs: u32) -> impl DoubleEndedIterator<Item = Epoch> {
        (0..epochs).map(Epoch)
    }
}

impl fmt::Debug for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// Serde for an [`Epoch`] field that JSON shows counted from 1
/// (`#[serde(with = "crate::epoch::one_based")]`).
pub mod one_based {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Epoch;

    /// Writes `epoch` counted from 1.
    pub fn serialize<S: Serializer>(epoch: &Epoch, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(epoch.number())
    }

    /// Reads an epoch counted from 1 back to its index; 0 is refused.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Epoch, D::Error> {
        let number = u64::deserialize(deserializer)?;
        number
            .checked_sub(1)
            .and_then(|index| u32::try_from(index).ok())
            .map(Epoch)
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
        epoch: Epoch,
    }

    #[test]
    fn json_counts_from_one_both_ways() {
        let text = serde_json::to_string(&Shown { epoch: Epoch(0) }).expect("json");
        assert_eq!(text, r#"{"epoch":1}"#);
        let back: Shown = serde_json::from_str(&text).expect("read back");
        assert_eq!(back, Shown { epoch: Epoch(0) });
        assert!(serde_json::from_str::<Shown>(r#"{"epoch":0}"#).is_err());
    }

    #[test]
    fn the_wire_keeps_the_bare_index() {
        assert_eq!(serde_json::to_string(&Epoch(2)).expect("json"), "2");
        assert_eq!(serde_json::from_str::<Epoch>("0").expect("read"), Epoch(0));
        let keyed = std::collections::BTreeMap::from([(Epoch(1), 7u64)]);
        let text = serde_json::to_string(&keyed).expect("json");
        assert_eq!(text, r#"{"1":7}"#);
        let back: std::collections::BTreeMap<Epoch, u64> =
            serde_json::from_str(&text).expect("read back");
        assert_eq!(back, keyed);
    }

    #[test]
    fn shown_from_one() {
        assert_eq!(Epoch(0).to_string(), "1");
        assert_eq!(format!("epoch {}/3", Epoch(2)), "epoch 3/3");
        assert_eq!(Epoch(u32::MAX).number(), 1 << 32);
    }
}
