//! Partition directories left unlisted: while the tree is walked, a
//! directory `col=value` whose value `--where` or `--filter` rejects is
//! never listed, so none of the files under it is either.
//!
//! The verdict must be the one the dataset reaches once everything is
//! listed, where each partition column is typed by Spark's inference over
//! all its values. Those other values are not known while walking, so a
//! directory is pruned only when the filters reject it under every type
//! the column may end up with (the type of its own value widened with any
//! other); the columns of directories further down are not known yet and
//! may be anything. A null partition (`__HIVE_DEFAULT_PARTITION__`) may end
//! up with any type. A type under which a filter is refused (a literal
//! that does not fit it) is left out: the job fails whatever is listed.

use arrow::datatypes::{DataType, Field, TimeUnit};

use crate::filter::PartitionFilter;
use crate::layout::names::{classify_dir, DirClass};
use crate::layout::partition::{infer_type, parse_value, unescape, widen};
use crate::options::DatasetOptions;
use crate::row_filter::RowFilter;

/// Above this many combinations of column types a directory is listed.
const MAX_COMBINATIONS: usize = 512;

/// Decides, from a directory's path, whether it may hold a kept file.
#[derive(Debug, Clone)]
pub struct DirPruner {
    partition_filter: Option<PartitionFilter>,
    row_filter: Option<RowFilter>,
    infer: bool,
    /// Columns the filters name (their types matter; others are strings).
    named: Vec<String>,
}

/// The partition column and value of each partition directory in `dirs`
/// (escaped names, root first): unescaped, `None` for null.
pub fn partition_values(dirs: &[String]) -> Vec<(String, Option<String>)> {
    dirs.iter()
        .filter_map(|segment| match classify_dir(segment) {
            DirClass::Partition { column, value } => Some((unescape(&column), parse_value(&value))),
            _ => None,
        })
        .collect()
}

impl DirPruner {
    /// The pruner for `options`' `--where` and `--filter`, `None` without
    /// either.
    pub fn new(options: &DatasetOptions) -> Option<DirPruner> {
        if options.partition_filter.is_none() && options.row_filter.is_none() {
            return None;
        }
        let mut named = Vec::new();
        if let Some(f) = &options.partition_filter {
            named.extend(f.columns());
        }
        if let Some(f) = &options.row_filter {
            named.extend(f.columns());
        }
        Some(DirPruner {
            partition_filter: options.partition_filter.clone(),
            row_filter: options.row_filter.clone(),
            infer: options.infer_partition_types,
            named,
        })
    }

    /// Whether the directory at `dirs` (escaped names from the root, the
    /// directory itself last) may hold a file the filters keep. Only a
    /// partition directory is ever rejected.
    pub fn may_hold_kept(&self, dirs: &[String]) -> bool {
        let Some(last) = dirs.last() else {
            return true;
        };
        if !matches!(classify_dir(last), DirClass::Partition { .. }) {
            return true;
        }
        let known = partition_values(dirs);
        let choices: Vec<Vec<DataType>> = known
            .iter()
            .map(|(column, value)| self.types(column, value.as_deref()))
            .collect();
        let combinations = choices
            .iter()
            .try_fold(1usize, |n, c| n.checked_mul(c.len()))
            .unwrap_or(usize::MAX);
        if combinations > MAX_COMBINATIONS {
            return true;
        }
        let values: Vec<Option<String>> = known.iter().map(|(_, v)| v.clone()).collect();
        let mut at = vec![0usize; choices.len()];
        loop {
            let fields: Vec<Field> = known
                .iter()
                .zip(&choices)
                .zip(&at)
                .map(|(((name, _), types), &i)| Field::new(name, types[i].clone(), true))
                .collect();
            if self.may_match(&fields, &values) {
                return true;
            }
            if !next(&mut at, &choices) {
                return false;
            }
        }
    }

    fn may_match(&self, fields: &[Field], values: &[Option<String>]) -> bool {
        let by_where = self
            .partition_filter
            .as_ref()
            .is_none_or(|f| f.may_match_known(fields, values));
        by_where
            && self
                .row_filter
                .as_ref()
                .is_none_or(|f| f.partition_may_match_typed(fields, values) == Some(true))
    }

    /// The types `column` may be given, holding `value` among others.
    fn types(&self, column: &str, value: Option<&str>) -> Vec<DataType> {
        if !self.infer || !self.named.iter().any(|n| n.eq_ignore_ascii_case(column)) {
            return vec![DataType::Utf8];
        }
        let own = value.map_or(DataType::Null, infer_type);
        let mut out: Vec<DataType> = Vec::new();
        for other in inferred_types() {
            let t = match widen(&own, &other) {
                DataType::Null => DataType::Utf8,
                t => t,
            };
            if !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }
}

/// One of each type Spark's partition inference gives, decimals at the
/// least and greatest precision they widen to.
fn inferred_types() -> Vec<DataType> {
    vec![
        DataType::Null,
        DataType::Int32,
        DataType::Int64,
        DataType::Decimal128(19, 0),
        DataType::Decimal128(38, 0),
        DataType::Float64,
        DataType::Date32,
        DataType::Timestamp(TimeUnit::Microsecond, None),
        DataType::Utf8,
    ]
}

/// Steps `at` to the next combination of `choices`; false after the last.
fn next(at: &mut [usize], choices: &[Vec<DataType>]) -> bool {
    for (i, c) in at.iter_mut().zip(choices) {
        *i += 1;
        if *i < c.len() {
            return true;
        }
        *i = 0;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pruner(where_: Option<&str>, filter: Option<&str>) -> DirPruner {
        let options = DatasetOptions {
            partition_filter: where_.map(|w| PartitionFilter::parse(w).expect("where")),
            row_filter: filter.map(|f| RowFilter::parse(f).expect("filter")),
            ..DatasetOptions::default()
        };
        DirPruner::new(&options).expect("a pruner")
    }

    fn keeps(p: &DirPruner, path: &str) -> bool {
        let dirs: Vec<String> = path.split('/').map(str::to_string).collect();
        p.may_hold_kept(&dirs)
    }

    #[test]
    fn rejects_only_what_every_type_rejects() {
        let p = pruner(None, Some("ctry = 'US' AND x > 1"));
        assert!(keeps(&p, "ctry=US"));
        assert!(!keeps(&p, "ctry=DE"));
        assert!(
            !keeps(&p, "ctry=__HIVE_DEFAULT_PARTITION__"),
            "null = 'US' is unknown"
        );
        assert!(keeps(&p, "plain"), "no partition directory");
        // A string column compares with a number as a number, as in Spark.
        let p = pruner(None, Some("n < 9"));
        assert!(keeps(&p, "n=5"));
        assert!(!keeps(&p, "n=10"));
        assert!(!keeps(&p, "n=95"), "95 and '95' are both not below 9");
    }

    #[test]
    fn where_decides_conjuncts_on_columns_known_so_far() {
        let p = pruner(Some("dt = '2026-01-02' AND h = 3"), None);
        assert!(!keeps(&p, "dt=2026-01-01"));
        assert!(keeps(&p, "dt=2026-01-02"));
        assert!(!keeps(&p, "dt=2026-01-02/h=4"));
        assert!(keeps(&p, "dt=2026-01-02/h=3"));
        let p = pruner(Some("dt = '2026-01-02' OR h = 3"), None);
        assert!(keeps(&p, "dt=2026-01-01"), "h may be 3 below");
        assert!(!keeps(&p, "dt=2026-01-01/h=4"));
    }

    #[test]
    fn escaped_names_and_null_partitions() {
        let p = pruner(Some("s = 'a/b'"), Some("s IS NOT NULL"));
        assert!(keeps(&p, "s=a%2Fb"));
        assert!(!keeps(&p, "s=a%2Fc"));
        assert!(!keeps(&p, "s=__HIVE_DEFAULT_PARTITION__"));
        let p = pruner(None, Some("s IS NULL"));
        assert!(keeps(&p, "s=__HIVE_DEFAULT_PARTITION__"));
        assert!(!keeps(&p, "s=x"));
    }
}
