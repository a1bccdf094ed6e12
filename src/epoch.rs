//! Epochs as people count them. Inside sluice (the queue, the state, every JSON
//! document: `/v1/status`, `--summary-json`, `ls --json`) an epoch is its 0-based
//! index; every line, page and metric meant for people shows it counted from 1,
//! through [`Epoch`]'s `Display` and [`Epoch::number`] only.

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

#[cfg(test)]
mod tests {
    use super::Epoch;

    #[test]
    fn shown_from_one() {
        assert_eq!(Epoch(0).to_string(), "1");
        assert_eq!(format!("epoch {}/3", Epoch(2)), "epoch 3/3");
        assert_eq!(Epoch(u32::MAX).number(), 1 << 32);
    }
}
