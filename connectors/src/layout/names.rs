//! Which names in a Spark/Hadoop output directory are data, markers, hidden or in flight.

/// What a file name means in an output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileClass {
    /// A data file to read.
    Data,
    /// The job-commit marker `_SUCCESS`.
    Success,
    /// `_metadata` / `_common_metadata`: schema hints, not data.
    SchemaHint,
    /// Databricks DBIO `_started_<txn>`.
    DbioStarted(String),
    /// Databricks DBIO `_committed_<txn>`.
    DbioCommitted(String),
    /// A file that is being written right now (`._COPYING_`, `.inprogress.`).
    InFlight,
    /// Hidden by Hadoop/Spark rules (`.crc` siblings, `_` or `.` names, `$folder$` keys).
    Hidden,
}

/// What a directory name means in an output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirClass {
    /// A Hive partition directory `col=value` (both still escaped).
    Partition {
        /// Escaped column name.
        column: String,
        /// Escaped value.
        value: String,
    },
    /// An ordinary directory, listed like the root.
    Plain,
    /// A commit protocol's staging area: output not yet committed.
    InFlight,
    /// Hidden by Hadoop/Spark rules.
    Hidden,
}

/// Classifies a file name (the last path segment).
pub fn classify_file(name: &str) -> FileClass {
    if name == "_SUCCESS" {
        return FileClass::Success;
    }
    if name == "_metadata" || name == "_common_metadata" {
        return FileClass::SchemaHint;
    }
    if let Some(txn) = name.strip_prefix("_started_") {
        return FileClass::DbioStarted(txn.to_string());
    }
    if let Some(txn) = name.strip_prefix("_committed_") {
        return FileClass::DbioCommitted(txn.to_string());
    }
    if name.ends_with("._COPYING_") || name.contains(".inprogress.") {
        return FileClass::InFlight;
    }
    if name.ends_with("_$folder$") || is_spark_hidden(name) {
        return FileClass::Hidden;
    }
    FileClass::Data
}

/// Classifies a directory name (the last path segment).
pub fn classify_dir(name: &str) -> DirClass {
    if name == "_temporary"
        || name.starts_with("__magic")
        || name.starts_with(".spark-staging-")
        || name.starts_with(".hive-staging")
        || name.starts_with("_temporary_")
    {
        return DirClass::InFlight;
    }
    if is_spark_hidden(name) {
        return DirClass::Hidden;
    }
    match name.split_once('=') {
        Some((column, value)) if !column.is_empty() => DirClass::Partition {
            column: column.to_string(),
            value: value.to_string(),
        },
        _ => DirClass::Plain,
    }
}

/// Spark's `shouldFilterOutPathName`: `.` names, and `_` names without `=`
/// (`_col=1` is a partition directory Spark keeps).
fn is_spark_hidden(name: &str) -> bool {
    name.starts_with('.') || (name.starts_with('_') && !name.contains('='))
}

/// The Databricks transaction id in a data file name (`part-0-tid-<txn>-...`).
pub fn dbio_txn(name: &str) -> Option<&str> {
    let start = name.find("-tid-")? + "-tid-".len();
    let rest = &name[start..];
    let end = rest.find('-').unwrap_or(rest.len());
    let txn = &rest[..end];
    (!txn.is_empty()).then_some(txn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files() {
        assert_eq!(classify_file("_SUCCESS"), FileClass::Success);
        assert_eq!(
            classify_file("part-00000-x.snappy.parquet"),
            FileClass::Data
        );
        assert_eq!(classify_file(".part-00000.crc"), FileClass::Hidden);
        assert_eq!(classify_file("part-1._COPYING_"), FileClass::InFlight);
        assert_eq!(classify_file("year=2024_$folder$"), FileClass::Hidden);
        assert_eq!(classify_file("_metadata"), FileClass::SchemaHint);
        assert_eq!(
            classify_file("_committed_9"),
            FileClass::DbioCommitted("9".into())
        );
        assert_eq!(classify_file("_hidden"), FileClass::Hidden);
    }

    #[test]
    fn dirs() {
        assert_eq!(classify_dir("_temporary"), DirClass::InFlight);
        assert_eq!(classify_dir("__magic_job-1"), DirClass::InFlight);
        assert_eq!(classify_dir(".spark-staging-abc"), DirClass::InFlight);
        assert_eq!(classify_dir("_hidden"), DirClass::Hidden);
        assert_eq!(
            classify_dir("_col=1"),
            DirClass::Partition {
                column: "_col".into(),
                value: "1".into()
            }
        );
        assert_eq!(
            classify_dir("s=a%3Db"),
            DirClass::Partition {
                column: "s".into(),
                value: "a%3Db".into()
            }
        );
        assert_eq!(classify_dir("plain"), DirClass::Plain);
    }

    #[test]
    fn dbio_txn_from_name() {
        assert_eq!(
            dbio_txn("part-00000-tid-9-u1.c000.snappy.parquet"),
            Some("9")
        );
        assert_eq!(dbio_txn("part-00000-abc.parquet"), None);
    }
}
