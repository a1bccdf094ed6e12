//! How a dataset is opened ([`DatasetOptions`]): a plain value that travels
//! with the job, read by `dataset` and by the pruning of partition
//! directories as they are listed (`prune_dirs`, under `listing`). It
//! imports none of them, so each imports it.

use arrow::datatypes::Field;
use serde::{Deserialize, Serialize};

use crate::filter::PartitionFilter;
use crate::format::FormatOptions;
use crate::row_filter::{RowFilter, SessionTz};
use crate::types::{Format, TableVersion};

/// Options for opening a dataset.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DatasetOptions {
    /// Read every file as this format instead of guessing from names.
    pub format: Option<Format>,
    /// Infer partition column types as Spark does; `false` keeps them all strings.
    pub infer_partition_types: bool,
    /// Target split size in bytes.
    pub split_size: u64,
    /// Parsing options of text formats.
    pub format_options: FormatOptions,
    /// Plan around files that cannot be inspected because they are corrupt (a
    /// Parquet footer cut off, say), as Spark's `ignoreCorruptFiles`: each gets
    /// one split whose reading fails at once naming the file, and is listed in
    /// [`Dataset::corrupt`](crate::dataset::Dataset::corrupt), instead of
    /// failing the whole dataset.
    #[serde(default)]
    pub ignore_corrupt_files: bool,
    /// Which version of a Delta or Iceberg table to read (the latest unless
    /// `--version`, `--snapshot-id` or `--timestamp` says otherwise).
    #[serde(default, skip_serializing_if = "TableVersion::is_latest")]
    pub table_version: TableVersion,
    /// Keep only the partitions whose values match (`--where`), decided on
    /// the partition values before any file is inspected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_filter: Option<PartitionFilter>,
    /// Keep only the rows this filter keeps (`--filter`): partitions whose
    /// values cannot hold one are left out before any file is inspected,
    /// and the splits' row counts are unknown until read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_filter: Option<RowFilter>,
    /// The session time zone (`--timezone`) computed columns compute their
    /// timestamps in, as Spark's `spark.sql.session.timeZone` (the filters
    /// carry theirs).
    #[serde(default, skip_serializing_if = "SessionTz::is_utc")]
    pub timezone: SessionTz,
    /// The partitions a catalog (a Hive Metastore) lists for the table: read
    /// instead of a listing of the root, each from its own location with the
    /// catalog's values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_partitions: Option<CatalogPartitions>,
}

/// A table's partitions as its catalog lists them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CatalogPartitions {
    /// The partition columns, typed as the catalog types them.
    pub fields: Vec<Field>,
    /// Each partition: its location and values (`None` for null).
    pub partitions: Vec<CatalogPartition>,
}

/// One partition of a catalog's table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CatalogPartition {
    /// Its location (a URL of the table's store, anywhere in it).
    pub url: String,
    /// Its values, aligned with [`CatalogPartitions::fields`].
    pub values: Vec<Option<String>>,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        DatasetOptions {
            format: None,
            infer_partition_types: true,
            split_size: 128 * 1024 * 1024,
            format_options: FormatOptions::default(),
            ignore_corrupt_files: false,
            table_version: TableVersion::Latest,
            partition_filter: None,
            row_filter: None,
            timezone: SessionTz::Utc,
            catalog_partitions: None,
        }
    }
}
