//! Several sources mixed by weight: `sluice train URL URL... --weights W,W...`,
//! `--epoch-rows N`, `--source-column NAME`.

use clap::Args;
use connectors::{PartitionFilter, RowFilter};
use serde::Deserialize;

use super::heading;
use super::{rule, OptionError};

/// How the sources of a job are mixed.
#[derive(Debug, Clone, Default, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct MixOptions {
    /// With several sources (`sluice train A B C`): each source's weight, in the order of the sources (default: all 1). Tasks of the sources interleave so that each source's share of the rows trained follows its weight; with --epoch-rows the weights also set how many rows of each an epoch takes.
    #[arg(long, value_name = "W,W,...", value_delimiter = ',', help = "Weights of several sources (A B C --weights 3,1,1)", long_help, help_heading = heading::SOURCE, hide_short_help = true)]
    pub weights: Option<Vec<f64>>,
    /// The rows of an epoch over several sources: each source gives N × its weight / the sum of weights, chosen afresh each epoch (without replacement where it has that many rows; where it has fewer, whole passes first, then a sample). Without it an epoch is every row of every source once.
    #[arg(long, value_name = "N", help = "Rows an epoch takes over the sources", long_help, help_heading = heading::SOURCE, hide_short_help = true)]
    pub epoch_rows: Option<u64>,
    /// Add a string column of this name holding each row's source name (the last path segment of its URL).
    #[arg(long, value_name = "NAME", help = "Add each row's source name as this column", long_help, help_heading = heading::SOURCE, hide_short_help = true)]
    pub source_column: Option<String>,
}

/// One source of a mixed job.
#[derive(Debug, Clone, PartialEq)]
pub struct MixSource {
    /// Its URL (a table name resolved by a catalog to its location).
    pub url: String,
    /// Its name: in the summary, the metrics, `sluice.source` and `--source-column`.
    pub name: String,
    /// Its weight (positive).
    pub weight: f64,
    /// Its own `where` (a job file's `[[source]]`), combined with the job's
    /// `--where` by AND.
    pub partition_filter: Option<PartitionFilter>,
    /// Its own `filter` (a job file's `[[source]]`), combined with the
    /// job's `--filter` by AND.
    pub row_filter: Option<RowFilter>,
}

impl MixSource {
    /// `options` for reading this source: its own `where` and `filter`
    /// added to the job's by AND, in the job's time zone.
    pub fn options(
        &self,
        options: &connectors::DatasetOptions,
    ) -> Result<connectors::DatasetOptions, connectors::Error> {
        let both = |all: &str, mine: &str| format!("({all}) AND ({mine})");
        let mut own = options.clone();
        if let Some(mine) = &self.partition_filter {
            own.partition_filter = Some(
                match &options.partition_filter {
                    Some(all) => PartitionFilter::parse(&both(all.as_str(), mine.as_str()))?,
                    None => mine.clone(),
                }
                .with_timezone(options.timezone),
            );
        }
        if let Some(mine) = &self.row_filter {
            own.row_filter = Some(
                match &options.row_filter {
                    Some(all) => RowFilter::parse(&both(all.as_str(), mine.as_str()))?,
                    None => mine.clone(),
                }
                .with_timezone(options.timezone),
            );
        }
        Ok(own)
    }

    /// Whether the source has a `where` or `filter` of its own.
    pub fn has_own_filter(&self) -> bool {
        self.partition_filter.is_some() || self.row_filter.is_some()
    }
}

/// A validated mix of sources.
#[derive(Debug, Clone, PartialEq)]
pub struct MixConfig {
    /// The sources, in the order given.
    pub sources: Vec<MixSource>,
    /// `--epoch-rows`.
    pub epoch_rows: Option<u64>,
    /// `--source-column`.
    pub source_column: Option<String>,
}

impl MixConfig {
    /// Each source's weight over the largest: at most 1, never 0 (see
    /// [`check_weights`]), whatever their size (`1e308,1e308` as `1,1`).
    pub fn relative_weights(&self) -> Vec<f64> {
        let most = self.sources.iter().map(|s| s.weight).fold(0.0, f64::max);
        self.sources.iter().map(|s| s.weight / most).collect()
    }

    /// Each source's share of an epoch: its weight over the sum of all,
    /// summed after each is divided by the largest, so no sum overflows.
    pub fn shares(&self) -> Vec<f64> {
        let relative = self.relative_weights();
        let total: f64 = relative.iter().sum();
        relative.into_iter().map(|r| r / total).collect()
    }

    /// The sources and weights as one line, for the job's identity.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .sources
            .iter()
            .map(|s| {
                let mut one = format!("{}*{}", s.url, s.weight);
                if let Some(f) = &s.partition_filter {
                    one.push_str(&format!(" where({})", f.as_str()));
                }
                if let Some(f) = &s.row_filter {
                    one.push_str(&format!(" filter({})", f.as_str()));
                }
                one
            })
            .collect();
        parts.join(" ")
    }
}

impl MixOptions {
    /// Whether any option of a mix is given.
    pub fn is_set(&self) -> bool {
        self.weights.is_some() || self.epoch_rows.is_some() || self.source_column.is_some()
    }

    /// The mix of the sources `urls`; `None` for one source without any
    /// option of a mix (a job as before).
    pub fn config(&self, urls: &[String]) -> Result<Option<MixConfig>, OptionError> {
        if urls.len() < 2 && !self.is_set() {
            return Ok(None);
        }
        let weights = match &self.weights {
            Some(w) => {
                rule(
                    w.len() == urls.len(),
                    "weights",
                    &format!(
                        "gives {} weights for {} sources: one per source, in order",
                        w.len(),
                        urls.len()
                    ),
                )?;
                if let Err(reason) = check_weights(w) {
                    return Err(OptionError::new("weights", reason));
                }
                w.clone()
            }
            None => vec![1.0; urls.len()],
        };
        rule(
            self.epoch_rows != Some(0),
            "epoch-rows",
            "at least one row (leave the flag out for every row of every source)",
        )?;
        if let Some(name) = &self.source_column {
            rule(!name.trim().is_empty(), "source-column", "names a column")?;
        }
        let mut sources: Vec<MixSource> = Vec::with_capacity(urls.len());
        for ((url, weight), name) in urls.iter().zip(weights).zip(source_names(urls)) {
            sources.push(MixSource {
                url: url.clone(),
                name,
                weight,
                partition_filter: None,
                row_filter: None,
            });
        }
        Ok(Some(MixConfig {
            sources,
            epoch_rows: self.epoch_rows,
            source_column: self.source_column.clone(),
        }))
    }
}

/// Why `weight` cannot be a source's weight, if it cannot: a weight is a
/// positive normal number (not 0, negative, NaN, infinite or so small that
/// it is subnormal, below 2.2e-308).
pub fn weight_problem(weight: f64) -> Option<String> {
    let why = if weight.is_nan() {
        "is not a number"
    } else if weight.is_infinite() {
        "is infinite"
    } else if weight <= 0.0 {
        "is not positive"
    } else if !weight.is_normal() {
        "is too small to compute with (below 2.2e-308)"
    } else {
        return None;
    };
    Some(format!(
        "weight {weight:?} {why}; each weight is a positive number"
    ))
}

/// Checks every weight ([`weight_problem`]) and that each is within the
/// range of a normal number of the largest, so that [`MixConfig::shares`]
/// divides without underflow.
fn check_weights(weights: &[f64]) -> Result<(), String> {
    if let Some(problem) = weights.iter().find_map(|w| weight_problem(*w)) {
        return Err(problem);
    }
    let most = weights.iter().copied().fold(0.0, f64::max);
    match weights.iter().find(|w| !(**w / most).is_normal()) {
        Some(w) => Err(format!(
            "weight {w:?} is too small beside {most:?}: it would get no share at all"
        )),
        None => Ok(()),
    }
}

/// One `[[source]]` table of a job file, as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceTable {
    /// The source's URL (required).
    pub url: Option<String>,
    /// Its weight (default 1).
    pub weight: Option<f64>,
    /// Its own partition filter (`where`), added to the job's by AND.
    #[serde(rename = "where")]
    pub partition_filter: Option<String>,
    /// Its own row filter (`filter`), added to the job's by AND.
    #[serde(rename = "filter")]
    pub row_filter: Option<String>,
}

/// A `[[source]]` table that is not a source: which one (counted from 1),
/// its name where known, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("[[source]] {index}{}: {reason}", .name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default())]
pub struct SourceTableError {
    /// The table's place among the `[[source]]` tables, from 1.
    pub index: usize,
    /// The source's name, once its `url` is read.
    pub name: Option<String>,
    /// What is wrong.
    pub reason: String,
}

/// A job file's `[[source]]` tables that make no mix.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    /// One table is not a source.
    #[error("the [[source]] tables make no mix")]
    Table {
        /// Which table, and why.
        #[source]
        source: SourceTableError,
    },
    /// An option of the mix (`epoch-rows`, `source-column`) breaks a rule.
    #[error("the [[source]] tables make no mix")]
    Option {
        /// The option and the rule.
        #[source]
        source: OptionError,
    },
}

impl From<SourceTableError> for TablesError {
    /// A table that is not a source makes no mix.
    fn from(source: SourceTableError) -> Self {
        TablesError::Table { source }
    }
}

impl MixOptions {
    /// The mix of a job file's `[[source]]` tables (`urls`: each table's
    /// `url`, already anchored at the job file); `weights` is refused in a
    /// job file, so each weight is its table's.
    pub fn config_tables(
        &self,
        tables: &[SourceTable],
        urls: &[String],
    ) -> Result<MixConfig, TablesError> {
        let names = source_names(urls);
        let fail = |index: usize, reason: String| SourceTableError {
            index: index + 1,
            name: names.get(index).cloned(),
            reason,
        };
        for (index, table) in tables.iter().enumerate() {
            if let Some(problem) = table.weight.and_then(weight_problem) {
                return Err(fail(index, problem).into());
            }
        }
        let weights: Vec<f64> = tables.iter().map(|t| t.weight.unwrap_or(1.0)).collect();
        if let Err(reason) = check_weights(&weights) {
            return Err(fail(0, reason).into());
        }
        let options = MixOptions {
            weights: Some(weights),
            ..self.clone()
        };
        let mix = options
            .config(urls)
            .map_err(|source| TablesError::Option { source })?;
        let Some(mut mix) = mix else {
            return Err(fail(0, "no source".to_string()).into());
        };
        for (index, (table, source)) in tables.iter().zip(&mut mix.sources).enumerate() {
            if let Some(text) = &table.partition_filter {
                let filter =
                    PartitionFilter::parse(text).map_err(|e| fail(index, format!("where: {e}")))?;
                source.partition_filter = Some(filter);
            }
            if let Some(text) = &table.row_filter {
                let filter =
                    RowFilter::parse(text).map_err(|e| fail(index, format!("filter: {e}")))?;
                source.row_filter = Some(filter);
            }
        }
        Ok(mix)
    }
}

/// A source's name: the last segment of its path (`s3://b/clicks/` is
/// `clicks`) above any with a `*` (`/data/clicks/dt=*` is `clicks`), or the
/// whole URL when it has none.
pub fn source_name(url: &str) -> String {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let fixed = path.split_once('*').map_or(path, |(before, _)| before);
    let fixed = match path.contains('*') {
        // The segment holding the `*` is no part of the name.
        true => fixed.rsplit_once('/').map_or("", |(above, _)| above),
        false => fixed,
    };
    fixed
        .trim_end_matches('/')
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or(url)
        .to_string()
}

/// The names of the sources `urls` (see [`source_name`]), a name taken
/// before gaining the source's place (`clicks-2`).
pub fn source_names(urls: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(urls.len());
    for (index, url) in urls.iter().enumerate() {
        let mut name = source_name(url);
        if names.contains(&name) {
            name = format!("{name}-{}", index + 1);
        }
        names.push(name);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sources_are_named_by_their_last_segment() {
        assert_eq!(source_name("s3://b/clicks/"), "clicks");
        assert_eq!(source_name("/data/views"), "views");
        assert_eq!(source_name("db.table"), "db.table");
        assert_eq!(source_name("s3://b/clicks/dt=*"), "clicks");
        assert_eq!(source_name("/data/views/dt=*/hour=*"), "views");
        let mix = MixOptions::default()
            .config(&urls(&["/a/x", "/b/x"]))
            .expect("valid")
            .expect("a mix");
        let names: Vec<&str> = mix.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["x", "x-2"]);
    }

    #[test]
    fn weights_are_positive_normal_numbers() {
        let two = urls(&["/a", "/b"]);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-320] {
            let options = MixOptions {
                weights: Some(vec![bad, 1.0]),
                ..MixOptions::default()
            };
            let err = options.config(&two).expect_err("refused");
            assert_eq!(err.option, "weights");
            assert!(err.reason.contains(&format!("{bad:?}")), "{err}");
        }
        let apart = MixOptions {
            weights: Some(vec![1e-300, 1e300]),
            ..MixOptions::default()
        };
        let err = apart.config(&two).expect_err("refused");
        assert!(err.reason.contains("too small beside"), "{err}");
    }

    #[test]
    fn shares_of_huge_weights_do_not_overflow() {
        let options = MixOptions {
            weights: Some(vec![1e308, 1e308, 5e307]),
            ..MixOptions::default()
        };
        let mix = options
            .config(&urls(&["/a", "/b", "/c"]))
            .expect("valid")
            .expect("a mix");
        assert_eq!(mix.shares(), vec![0.4, 0.4, 0.2]);
        assert_eq!(mix.relative_weights(), vec![1.0, 1.0, 0.5]);
    }

    #[test]
    fn weights_are_one_per_source() {
        let options = MixOptions {
            weights: Some(vec![3.0]),
            ..MixOptions::default()
        };
        let err = options.config(&urls(&["/a", "/b"])).expect_err("refused");
        assert_eq!(err.option, "weights");
        assert!(matches!(
            MixOptions::default().config(&urls(&["/a"])),
            Ok(None)
        ));
    }
}
