//! Which rows a job trains: a split by a stable hash of a key column, a sample
//! by the same hash, the first rows (`--split`, `--split-key`, `--take`,
//! `--sample`, `--limit`).

use std::fmt;
use std::str::FromStr;

use clap::Args;
use serde::Deserialize;

use super::heading;
use super::value::{form, parse_with};
use super::{rule, OptionError};
use crate::protocol::select::Selection;

/// Named fractions of the rows, in order: `train=0.9,valid=0.1`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fractions(pub Vec<(String, f64)>);

impl FromStr for Fractions {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = Vec::new();
        for item in s.split(',') {
            let Some((name, fraction)) = item.split_once('=') else {
                return Err(format!(
                    "`{item}` is not NAME=FRACTION (e.g. train=0.9,valid=0.1)"
                ));
            };
            let name = name.trim();
            if name.is_empty() {
                return Err(format!("`{item}` names no split"));
            }
            let fraction: f64 = fraction
                .trim()
                .parse()
                .map_err(|_| format!("`{fraction}` (of split {name}) is not a number"))?;
            if !(fraction > 0.0 && fraction <= 1.0) {
                return Err(format!(
                    "split {name} has the fraction {fraction}: each is more than 0 and at most 1"
                ));
            }
            if parts.iter().any(|(n, _): &(String, f64)| n == name) {
                return Err(format!("split {name} is named twice"));
            }
            parts.push((name.to_string(), fraction));
        }
        let sum: f64 = parts.iter().map(|(_, f)| f).sum();
        if (sum - 1.0).abs() > 1e-9 {
            return Err(format!("the fractions add up to {sum}, not 1"));
        }
        Ok(Fractions(parts))
    }
}

impl fmt::Display for Fractions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(n, x)| format!("{n}={x}")).collect();
        write!(f, "{}", parts.join(","))
    }
}

/// The rows a job trains; shared by `train`, `master` and job files.
#[derive(Debug, Clone, Default, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct SelectOptions {
    /// Assign each row to one of these named splits by a stable hash of --split-key (the same split in every run, partition and table version), e.g. train=0.9,valid=0.1; --take says which one is trained.
    #[arg(long, value_name = "NAME=FRACTION,...", value_parser = parse_with::<Fractions>, help = "Named splits by a stable hash of --split-key", long_help, help_heading = heading::ROWS)]
    #[serde(deserialize_with = "form::some_parsed")]
    pub split: Option<Fractions>,
    /// The column whose value places a row in a --split or --sample (a string, binary, integer or boolean column, hashed as --hash-buckets hashes).
    #[arg(long, value_name = "COLUMN", help = "The column --split and --sample hash", long_help, help_heading = heading::ROWS)]
    pub split_key: Option<String>,
    /// The --split to train, e.g. --split train=0.9,valid=0.1 --take valid.
    #[arg(long, value_name = "NAME", help = "The --split to train", long_help, help_heading = heading::ROWS)]
    pub take: Option<String>,
    /// Keep this fraction of the rows (0 < FRACTION <= 1), chosen by the stable hash of --split-key: the same rows every run. Rows left out are never shipped to a trainer.
    #[arg(long, value_name = "FRACTION", help = "Keep this fraction of the rows (stable)", long_help, help_heading = heading::ROWS)]
    pub sample: Option<f64>,
    /// Train only the first ROWS rows of each epoch, in the order of the dataset's splits (a smoke test): the splits past them are not read.
    #[arg(long, value_name = "ROWS", help = "Train only the first ROWS rows of each epoch", long_help, help_heading = heading::ROWS)]
    pub limit: Option<u64>,
}

impl SelectOptions {
    /// Checks every rule, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        self.selection().map(drop)
    }

    /// The options as one line (`split=train=0.9,valid=0.1 take=valid
    /// split-key=id`), or `None` when every row is trained.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(split) = &self.split {
            parts.push(format!("split={split}"));
        }
        if let Some(take) = &self.take {
            parts.push(format!("take={take}"));
        }
        if let Some(sample) = self.sample {
            parts.push(format!("sample={sample}"));
        }
        if let Some(key) = &self.split_key {
            parts.push(format!("split-key={key}"));
        }
        if let Some(limit) = self.limit {
            parts.push(format!("limit={limit}"));
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }

    /// The rows kept, as the job's spec carries them (without the limit,
    /// which is placed once the splits are known).
    pub fn selection(&self) -> Result<Selection, OptionError> {
        let by_key = self.split.is_some() || self.sample.is_some();
        rule(
            self.split_key.is_some() || !by_key,
            "split-key",
            "--split and --sample place each row by a key column: name it with --split-key COLUMN",
        )?;
        rule(
            self.split_key.is_none() || by_key,
            "split-key",
            "applies to --split and --sample",
        )?;
        if let Some(key) = &self.split_key {
            rule(!key.trim().is_empty(), "split-key", "names no column")?;
        }
        let range = match (&self.split, &self.take) {
            (Some(split), Some(take)) => Some(range_of(split, take)?),
            (Some(_), None) => {
                return Err(OptionError::new(
                    "take",
                    "--split needs --take NAME: the split to train",
                ))
            }
            (None, Some(_)) => {
                return Err(OptionError::new(
                    "take",
                    "applies to --split (e.g. --split train=0.9,valid=0.1 --take train)",
                ))
            }
            (None, None) => None,
        };
        if let Some(sample) = self.sample {
            if !(sample > 0.0 && sample <= 1.0) {
                return Err(OptionError {
                    option: "sample",
                    value: Some(sample.to_string()),
                    reason: "the fraction kept is more than 0 and at most 1".to_string(),
                });
            }
        }
        rule(
            self.limit != Some(0),
            "limit",
            "at least one row (leave the flag out for all)",
        )?;
        Ok(Selection {
            key: self.split_key.clone(),
            range,
            sample: self.sample,
            limit: None,
            epoch_rows: None,
        })
    }
}

/// The part of `[0, 1)` of the split `take`.
fn range_of(split: &Fractions, take: &str) -> Result<(f64, f64), OptionError> {
    let mut start = 0.0;
    for (index, (name, fraction)) in split.0.iter().enumerate() {
        let last = index + 1 == split.0.len();
        let end = if last { 1.0 } else { start + fraction };
        if name == take {
            return Ok((start, end));
        }
        start = end;
    }
    let names: Vec<&str> = split.0.iter().map(|(n, _)| n.as_str()).collect();
    Err(OptionError {
        option: "take",
        value: Some(take.to_string()),
        reason: format!("--split names no such split (it has {})", names.join(", ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(split: &str, take: &str) -> SelectOptions {
        SelectOptions {
            split: Some(split.parse().expect("fractions")),
            split_key: Some("id".into()),
            take: Some(take.into()),
            ..SelectOptions::default()
        }
    }

    #[test]
    fn the_taken_split_is_its_part_of_the_unit_range() {
        let valid = options("train=0.9,valid=0.1", "valid").selection();
        assert_eq!(valid.expect("valid").range, Some((0.9, 1.0)));
        let train = options("train=0.9,valid=0.1", "train").selection();
        assert_eq!(train.expect("valid").range, Some((0.0, 0.9)));
    }

    #[test]
    fn broken_rules_name_the_option() {
        for (text, needle) in [
            ("train=0.9,valid=0.2", "add up to"),
            ("train=0.9,valid", "NAME=FRACTION"),
            ("train=0,valid=1", "more than 0"),
            ("a=0.5,a=0.5", "twice"),
        ] {
            let error = text.parse::<Fractions>().expect_err(text);
            assert!(error.contains(needle), "{text}: {error}");
        }
        let unknown = options("train=0.9,valid=0.1", "test").validate();
        assert!(unknown.is_err_and(|e| e.to_string().contains("--take test")));
        let keyless = SelectOptions {
            sample: Some(0.1),
            ..SelectOptions::default()
        };
        assert!(keyless
            .validate()
            .is_err_and(|e| e.to_string().contains("--split-key")));
        let zero = SelectOptions {
            limit: Some(0),
            ..SelectOptions::default()
        };
        assert!(zero.validate().is_err());
    }
}
