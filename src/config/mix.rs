//! Several sources mixed by weight: `sluice train URL URL... --weights W,W...`,
//! `--epoch-rows N`, `--source-column NAME`.

use clap::Args;
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
    /// The sources and weights as one line, for the job's identity.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .sources
            .iter()
            .map(|s| format!("{}*{}", s.url, s.weight))
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
                rule(
                    w.iter().all(|w| w.is_finite() && *w > 0.0),
                    "weights",
                    "each weight is a positive number",
                )?;
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
        for (index, (url, weight)) in urls.iter().zip(weights).enumerate() {
            let mut name = source_name(url);
            if sources.iter().any(|s| s.name == name) {
                name = format!("{name}-{}", index + 1);
            }
            sources.push(MixSource {
                url: url.clone(),
                name,
                weight,
            });
        }
        Ok(Some(MixConfig {
            sources,
            epoch_rows: self.epoch_rows,
            source_column: self.source_column.clone(),
        }))
    }
}

/// A source's name: the last segment of its path (`s3://b/clicks/` is
/// `clicks`), or the whole URL when it has none.
pub fn source_name(url: &str) -> String {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    path.trim_end_matches('/')
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or(url)
        .to_string()
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
        let mix = MixOptions::default()
            .config(&urls(&["/a/x", "/b/x"]))
            .expect("valid")
            .expect("a mix");
        let names: Vec<&str> = mix.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["x", "x-2"]);
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
