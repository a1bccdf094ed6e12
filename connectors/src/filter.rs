//! Partition filters (`--where`): a boolean expression over partition
//! columns, evaluated on each partition's values before anything is read.
//! The language is the one of `--filter` (Spark SQL's expressions, with
//! Spark's semantics: see [`crate::row_filter`]), restricted to the
//! partition columns; each partition's values are typed as its columns
//! are. Comparisons with a null value are unknown (SQL's three-valued
//! logic): a partition is kept only when the whole filter is true.

use arrow::datatypes::{Field, Schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::row_filter::{FilterForm, RowFilter, RowFilterError, SessionTz};

/// A parsed `--where` expression.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionFilter {
    filter: RowFilter,
}

/// Why a `--where` expression was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FilterError {
    /// The expression does not parse.
    #[error("invalid --where `{text}`: {reason}")]
    Syntax {
        /// The expression.
        text: String,
        /// What is wrong, and where.
        reason: String,
    },
    /// A column that is no partition column.
    #[error("--where filters partitions, and `{column}` is not a partition column ({}); row filters are not partition pruning", partition_list(.partitions))]
    NotPartition {
        /// The column named.
        column: String,
        /// The partition columns there are.
        partitions: Vec<String>,
    },
    /// An expression that does not fit the partition columns' types.
    #[error("--where `{text}`: {reason}")]
    Type {
        /// The expression.
        text: String,
        /// What does not fit, and where.
        reason: String,
    },
}

fn partition_list(names: &[String]) -> String {
    if names.is_empty() {
        "the source has no partition columns".to_string()
    } else {
        format!("partition columns: {}", names.join(", "))
    }
}

impl PartitionFilter {
    /// Parses a `--where` expression.
    pub fn parse(text: &str) -> Result<PartitionFilter, FilterError> {
        let filter = RowFilter::parse(text).map_err(|e| match e {
            RowFilterError::Syntax { reason, at, .. } => FilterError::Syntax {
                text: text.to_string(),
                reason: format!("{reason} at {at}"),
            },
            other => FilterError::Syntax {
                text: text.to_string(),
                reason: other.to_string(),
            },
        })?;
        Ok(PartitionFilter { filter })
    }

    /// The filter with its timestamps computed in `tz` (`--timezone`).
    pub fn with_timezone(self, tz: SessionTz) -> PartitionFilter {
        PartitionFilter {
            filter: self.filter.with_timezone(tz),
        }
    }

    /// The expression as given.
    pub fn as_str(&self) -> &str {
        self.filter.as_str()
    }

    /// Checks that every column named is one of `fields` (the partition
    /// columns) and that the expression fits their types.
    pub fn check(&self, fields: &[Field]) -> Result<(), FilterError> {
        for name in self.columns() {
            if !fields.iter().any(|f| f.name().eq_ignore_ascii_case(&name)) {
                return Err(FilterError::NotPartition {
                    column: name,
                    partitions: fields.iter().map(|f| f.name().clone()).collect(),
                });
            }
        }
        self.filter
            .check(&Schema::new(fields.to_vec()))
            .map_err(|e| FilterError::Type {
                text: self.as_str().to_string(),
                reason: match e {
                    RowFilterError::Type { reason, at, .. }
                    | RowFilterError::Syntax { reason, at, .. } => format!("{reason} at {at}"),
                    other => other.to_string(),
                },
            })
    }

    /// The columns the expression names, each once, in order of appearance.
    pub fn columns(&self) -> Vec<String> {
        self.filter.columns()
    }

    /// Whether a partition with these values (aligned with `fields`, `None`
    /// for null) is kept. Call [`PartitionFilter::check`] first.
    pub fn matches(&self, fields: &[Field], values: &[Option<String>]) -> bool {
        self.filter.on_values(fields, values, false) == Some(true)
    }

    /// Whether a directory whose partition columns so far are `fields`
    /// (values aligned, `None` for null) may hold a partition this filter
    /// keeps: false only when a conjunct of the filter's top-level `AND`
    /// that names no other column is not true there.
    pub fn may_match_known(&self, fields: &[Field], values: &[Option<String>]) -> bool {
        self.filter.on_values(fields, values, true) != Some(false)
    }
}

impl Serialize for PartitionFilter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.filter.serialize(s)
    }
}

impl<'de> Deserialize<'de> for PartitionFilter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (text, tz) = match FilterForm::deserialize(d)? {
            FilterForm::Text(text) => (text, SessionTz::Utc),
            FilterForm::Zoned { filter, timezone } => (filter, timezone),
        };
        PartitionFilter::parse(&text)
            .map(|f| f.with_timezone(tz))
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;

    fn fields() -> Vec<Field> {
        vec![
            Field::new("dt", DataType::Date32, true),
            Field::new("hour", DataType::Int32, true),
            Field::new("country", DataType::Utf8, true),
        ]
    }

    fn keeps(text: &str, values: [Option<&str>; 3]) -> bool {
        let filter = PartitionFilter::parse(text).expect("parses");
        filter.check(&fields()).expect("checks");
        let values: Vec<Option<String>> = values.iter().map(|v| v.map(String::from)).collect();
        filter.matches(&fields(), &values)
    }

    #[test]
    fn comparisons_are_typed_by_the_column() {
        let p = [Some("2026-11-02"), Some("9"), Some("DE")];
        assert!(keeps("dt >= '2026-11-02'", p));
        assert!(keeps("dt = DATE '2026-11-02'", p));
        assert!(!keeps("dt > '2026-11-02'", p));
        // 9 < 10 as numbers, though "9" > "10" as strings.
        assert!(keeps("hour < 10", p));
        assert!(keeps("hour IN (1, 9)", p));
        assert!(keeps("hour NOT IN (1, 2)", p));
        assert!(keeps("country = 'DE' AND NOT (hour = 3 OR hour <> 9)", p));
        assert!(keeps("hour = 9.0", p));
        assert!(keeps("hour != 8", p));
    }

    #[test]
    fn null_partitions_match_only_is_null() {
        let p = [Some("2026-11-02"), None, Some("DE")];
        assert!(!keeps("hour = 9", p));
        assert!(!keeps("NOT hour = 9", p));
        assert!(keeps("hour IS NULL", p));
        assert!(keeps("hour IS NULL OR hour = 1", p));
        assert!(!keeps("hour IS NOT NULL", p));
    }

    #[test]
    fn other_columns_and_misfit_literals_are_refused_by_name() {
        let filter = PartitionFilter::parse("n > 3 AND dt = '2026-11-01'").expect("parses");
        let err = filter
            .check(&fields())
            .expect_err("n is no partition column");
        assert!(
            err.to_string().contains("`n` is not a partition column"),
            "{err}"
        );
        assert!(err.to_string().contains("dt, hour, country"), "{err}");
        let filter = PartitionFilter::parse("hour = 'noon'").expect("parses");
        let err = filter.check(&fields()).expect_err("noon is no int");
        // Spark 4 compares a string with an int as bigints.
        assert!(err.to_string().contains("'noon' is no bigint"), "{err}");
    }

    #[test]
    fn columns_are_named_once_in_order() {
        let filter = PartitionFilter::parse("(b = 1 OR a IN (2)) AND NOT b IS NULL AND c < 3")
            .expect("parses");
        assert_eq!(filter.columns(), ["b", "a", "c"]);
    }

    #[test]
    fn syntax_errors_say_what_was_expected() {
        for bad in [
            "dt >",
            "dt = 'x",
            "(dt = 1",
            "dt = 1 extra",
            "= 3",
            "dt NOT 3",
        ] {
            let err = PartitionFilter::parse(bad).expect_err(bad);
            assert!(err.to_string().starts_with("invalid --where"), "{err}");
        }
    }
}
