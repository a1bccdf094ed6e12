//! Which rows of the dataset a job trains: one split of a stable hash of a key
//! column (`--split NAME=FRACTION,... --split-key COLUMN --take NAME`), a sample
//! by the same hash (`--sample FRACTION`), and the first rows in split order
//! (`--limit ROWS`). Part of the job's spec, so that every worker's readers cut
//! the same rows, and never ship the ones cut.
//!
//! A row's place in `[0, 1)` is its key's 64-bit hash (the hash of
//! `--hash-buckets`, `sluice_trainer.hash64`) shifted right by 11 bits, over
//! 2^53: the same in every run, partition and table version. The sample draws
//! on the hash mixed once more ([`SAMPLE_SALT`]), so that it is independent of
//! the split.

use arrow::datatypes::{DataType, Schema};
use connectors::Split;
use serde::{Deserialize, Serialize};

use super::splitmix::mix;

/// XORed into a key's hash before it is mixed again for `--sample`.
pub const SAMPLE_SALT: u64 = 0x5A4D_504C_4553_4C43;

/// The rows a job keeps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// The key column whose hash places a row (`--split-key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The half-open part of `[0, 1)` of the split taken (`--take`); its end is
    /// 1 for the last split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<(f64, f64)>,
    /// The fraction of rows kept (`--sample`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<f64>,
    /// `--limit`: the split (by index) where the limit falls, and the rows of
    /// it read; the splits after it are left out of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<(u32, u64)>,
    /// `--epoch-rows` of a job that mixes several sources: the rows each
    /// epoch takes of each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_rows: Option<super::epoch_rows::EpochRows>,
}

impl Selection {
    /// Whether every row is kept.
    pub fn keeps_all(&self) -> bool {
        self.range.is_none()
            && self.sample.is_none()
            && self.limit.is_none()
            && self.epoch_rows.is_none()
    }

    /// Whether rows are cut by their key.
    pub fn by_key(&self) -> bool {
        self.range.is_some() || self.sample.is_some()
    }

    /// Whether a row whose key hashes to `hash` is kept.
    pub fn keeps(&self, hash: u64) -> bool {
        if let Some((start, end)) = self.range {
            let place = unit(hash);
            if place < start || (place >= end && end < 1.0) {
                return false;
            }
        }
        if let Some(fraction) = self.sample {
            if unit(mix(hash ^ SAMPLE_SALT)) >= fraction {
                return false;
            }
        }
        true
    }

    /// The rows of split `split` read at most (`--limit`), if it is the one
    /// the limit falls in.
    pub fn cap(&self, split: u32) -> Option<u64> {
        self.limit
            .and_then(|(at, rows)| (at == split).then_some(rows))
    }
}

/// A key column the job cannot place rows by.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// The key is not a column read.
    #[error("--split-key {column}: the data read has no column {column} (it has {available})")]
    UnknownKey {
        /// The key asked for.
        column: String,
        /// The columns read, comma separated.
        available: String,
    },
    /// The key's values cannot be hashed.
    #[error("--split-key {column}: column {column} has type {data_type}; a key is a string, binary, integer or boolean column")]
    NotHashable {
        /// The key.
        column: String,
        /// Its type.
        data_type: DataType,
    },
}

/// Checks `selection`'s key against the columns read (`schema`) and places
/// `limit` in `splits`, leaving out the splits past it.
pub fn plan(
    mut selection: Selection,
    limit: Option<u64>,
    schema: &Schema,
    splits: &mut Vec<Split>,
) -> Result<Selection, SelectError> {
    if let (Some(key), true) = (&selection.key, selection.by_key()) {
        let Ok(field) = schema.field_with_name(key) else {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(SelectError::UnknownKey {
                column: key.clone(),
                available: names.join(", "),
            });
        };
        if !hashable(field.data_type()) {
            return Err(SelectError::NotHashable {
                column: key.clone(),
                data_type: field.data_type().clone(),
            });
        }
    }
    if let Some(rows) = limit {
        let known: Vec<Option<u64>> = splits.iter().map(|s| s.rows).collect();
        let (kept, cap) = limit_splits(&known, rows);
        splits.truncate(kept);
        if let Some((at, rows)) = cap {
            // The queue finishes a task at the rows its split holds.
            if let Some(split) = splits.get_mut(at as usize) {
                split.rows = split.rows.map(|_| rows);
            }
        }
        selection.limit = cap;
    }
    Ok(selection)
}

/// The types whose values a key hashes (those of `--hash-buckets`).
fn hashable(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(_, values) => hashable(values),
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::Boolean => true,
        other => other.is_integer(),
    }
}

/// A hash as a number in `[0, 1)`: its top 53 bits.
pub fn unit(hash: u64) -> f64 {
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// Which splits a job with `--limit rows` keeps, given each split's rows where
/// known: the first splits in order until `rows` are reached; returns how many
/// splits are kept and the limit of the last one. A split whose rows are not
/// known takes all the rows left and ends the job's splits.
pub fn limit_splits(known_rows: &[Option<u64>], rows: u64) -> (usize, Option<(u32, u64)>) {
    let mut left = rows;
    for (index, known) in known_rows.iter().enumerate() {
        let at = u32::try_from(index).unwrap_or(u32::MAX);
        match known {
            Some(n) if *n < left => left -= n,
            Some(n) if *n == left => return (index + 1, None),
            _ => return (index + 1, Some((at, left))),
        }
    }
    (known_rows.len(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_of_the_unit_range_are_disjoint_and_cover_it() {
        let train = Selection {
            range: Some((0.0, 0.9)),
            ..Selection::default()
        };
        let valid = Selection {
            range: Some((0.9, 1.0)),
            ..Selection::default()
        };
        let mut kept = 0;
        for key in 0..10_000u64 {
            let hash = mix(key);
            assert!(train.keeps(hash) != valid.keeps(hash), "key {key}");
            kept += u64::from(valid.keeps(hash));
        }
        assert!((800..1200).contains(&kept), "{kept}");
        assert!(
            valid.keeps(u64::MAX),
            "the top of the range is in the last split"
        );
    }

    #[test]
    fn the_limit_falls_in_the_split_that_reaches_it() {
        let rows = [Some(10), Some(10), Some(10)];
        assert_eq!(limit_splits(&rows, 5), (1, Some((0, 5))));
        assert_eq!(limit_splits(&rows, 10), (1, None));
        assert_eq!(limit_splits(&rows, 15), (2, Some((1, 5))));
        assert_eq!(limit_splits(&rows, 100), (3, None));
        assert_eq!(
            limit_splits(&[Some(3), None, Some(9)], 7),
            (2, Some((1, 4)))
        );
    }
}
