//! How a dataset is read: format, partition values, split size, text options
//! and the version of a table.

use clap::Args;
use connectors::table::TableVersion;
use connectors::{DatasetOptions, Format, FormatOptions, PartitionFilter, RowFilter, SessionTz};
use serde::Deserialize;

use super::heading;
use super::value::{form, parse_size, parse_timestamp, parse_with};
use super::{rule, OptionError};

/// The default of `--split-size`.
pub const DEFAULT_SPLIT_SIZE: &str = "128MiB";

/// How to read a dataset; shared by every command that reads one.
#[derive(Debug, Clone, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct ReadOptions {
    /// Read every file as this format instead of guessing from file names.
    #[arg(long, value_parser = parse_with::<Format>, help = "Read every file as this format", long_help, help_heading = heading::READING)]
    #[serde(deserialize_with = "form::some_parsed")]
    pub format: Option<Format>,
    /// Keep partition values as strings instead of inferring types as Spark does (`007` stays `007`).
    #[arg(long, help = "Keep partition values as strings", long_help, help_heading = heading::READING, hide_short_help = true)]
    pub partition_strings: bool,
    /// Target split size: a task covers about this many bytes (e.g. 128MiB, 4MB, 1000000).
    #[arg(long, default_value = DEFAULT_SPLIT_SIZE, value_parser = parse_size, help = "About this many bytes per task", long_help, help_heading = heading::READING)]
    #[serde(deserialize_with = "form::size")]
    pub split_size: u64,
    /// CSV files start with a header line: take it for the column names. Without this
    /// or --csv-no-header, it is found out from the data (no header when it cannot tell).
    #[arg(
        long,
        num_args = 0,
        default_missing_value = "true",
        conflicts_with = "csv_no_header",
        help = "CSV files start with a header line",
        long_help,
        help_heading = heading::READING,
        hide_short_help = true,
    )]
    pub csv_header: Option<bool>,
    /// CSV files have no header line: every line is data, columns `_c0`, `_c1`, ... (Spark's reader default).
    #[arg(long, help = "CSV files have no header line", long_help, help_heading = heading::READING, hide_short_help = true)]
    pub csv_no_header: bool,
    /// CSV field delimiter (one character).
    #[arg(long, default_value_t = ',', help_heading = heading::READING, hide_short_help = true)]
    pub csv_delimiter: char,
    /// Split text lines at the first tab into `key` and `value` (MapReduce TextOutputFormat).
    #[arg(long, help = "Split text lines at the first tab (key, value)", long_help, help_heading = heading::READING, hide_short_help = true)]
    pub text_key_value: bool,
    /// Read this version of a Delta table (time travel) instead of the latest.
    #[arg(long, value_name = "N", conflicts_with_all = ["snapshot_id", "timestamp"], help = "Read this version of a Delta table", long_help, help_heading = heading::SOURCE)]
    pub table_version: Option<u64>,
    /// Read this snapshot of an Iceberg table instead of the current one.
    #[arg(long, value_name = "ID", conflicts_with = "timestamp", help = "Read this snapshot of an Iceberg table", long_help, help_heading = heading::SOURCE, hide_short_help = true)]
    pub snapshot_id: Option<i64>,
    /// Read the version of a Delta or Iceberg table that was current at this time:
    /// RFC 3339 (`2026-11-29T10:00:00Z`), `YYYY-MM-DD[ HH:MM:SS]` in UTC, or
    /// milliseconds since the epoch.
    #[arg(long, value_name = "T", value_parser = parse_timestamp, help = "Read the table's version current at this time", long_help, help_heading = heading::SOURCE)]
    #[serde(deserialize_with = "form::some_timestamp")]
    pub timestamp: Option<i64>,
    /// Read only the partitions whose values match this filter on partition columns, e.g. "dt >= '2026-11-01' AND country IN ('DE', 'FR')": the Spark SQL expressions of --filter, over partition columns only; values typed by their column.
    #[arg(long = "where", value_name = "EXPR", value_parser = parse_filter, help = "Read only the partitions matching this filter", long_help, help_heading = heading::ROWS)]
    #[serde(rename = "where")]
    pub partition_filter: Option<PartitionFilter>,
    /// Read only the rows this Spark SQL condition keeps, e.g. "label IS NOT NULL AND country = 'US'" or "hash(user) % 10 < 8 AND lower(country) = 'us'": comparisons (= <> != < <= > >= <=>), AND, OR, NOT, IN (...), BETWEEN, IS [NOT] NULL, LIKE, ILIKE, RLIKE, arithmetic, CASE, CAST, COALESCE and Spark's common string, date, math and hash functions; data and partition columns; timestamps in the --timezone (UTC unless given). Rows are exactly those Spark's df.filter(EXPR) keeps (ANSI mode, its default); partitions, Parquet row groups and pages that cannot hold one are not read.
    #[arg(long = "filter", value_name = "EXPR", value_parser = parse_row_filter, help = "Read only the rows this Spark SQL condition keeps", long_help, help_heading = heading::ROWS)]
    #[serde(rename = "filter")]
    pub row_filter: Option<RowFilter>,
    /// The session time zone of --filter, --where and computed --columns, as Spark's spark.sql.session.timeZone: a region (America/Los_Angeles), an offset (+05:30) or UTC. A timestamp's hour, day, date, truncation and text are those of its wall-clock time there, and a date or a timestamp written without a zone ('2026-03-08 02:30:00') is read there (a time a change to summer time skips moved on by the gap, one it repeats taken the first time, as java.time does). timestamp_ntz columns are wall-clock times no zone shifts. The values read are unchanged: a timestamp stays the instant it is (a CSV timestamp written without an offset is read as a wall-clock time there, as Spark's CSV reader reads it).
    #[arg(long, value_name = "TZ", default_value = "UTC", value_parser = parse_with::<SessionTz>, help = "Time zone of timestamps in --filter, --where and --columns", long_help, help_heading = heading::ROWS, hide_short_help = true)]
    pub timezone: SessionTz,
}

/// The filters of `options` (`--where`, `--filter`) as the subject of a
/// sentence (``the filter `id < 0` (--filter)``), for a job that kept no
/// row; `None` when it has none.
pub fn filters_named(options: &DatasetOptions) -> Option<String> {
    let partitions = options
        .partition_filter
        .as_ref()
        .map(|f| format!("the partition filter `{}` (--where)", f.as_str()));
    let rows = options
        .row_filter
        .as_ref()
        .map(|f| format!("the filter `{}` (--filter)", f.as_str()));
    match (partitions, rows) {
        (Some(p), Some(r)) => Some(format!("{p} and {r}")),
        (p, r) => p.or(r),
    }
}

/// Parses `--filter`.
fn parse_row_filter(text: &str) -> Result<RowFilter, String> {
    RowFilter::parse(text).map_err(|e| e.to_string())
}

/// Parses `--where`.
fn parse_filter(text: &str) -> Result<PartitionFilter, String> {
    PartitionFilter::parse(text).map_err(|e| e.to_string())
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            format: None,
            partition_strings: false,
            split_size: 128 * 1024 * 1024,
            csv_header: None,
            csv_no_header: false,
            csv_delimiter: ',',
            text_key_value: false,
            table_version: None,
            snapshot_id: None,
            timestamp: None,
            partition_filter: None,
            row_filter: None,
            timezone: SessionTz::Utc,
        }
    }
}

impl ReadOptions {
    /// Whether CSV files start with a header line, when given
    /// (`--csv-header`, `--csv-no-header`, `csv-header = true|false`);
    /// `None`: found out from the data.
    pub fn csv_header(&self) -> Option<bool> {
        if self.csv_no_header {
            Some(false)
        } else {
            self.csv_header
        }
    }

    /// Checks every rule, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        rule(
            self.csv_delimiter.is_ascii(),
            "csv-delimiter",
            "must be one ASCII character",
        )?;
        rule(self.split_size > 0, "split-size", "must be more than 0")?;
        rule(
            !(self.csv_no_header && self.csv_header == Some(true)),
            "csv-header",
            "--csv-header and --csv-no-header contradict each other: give one",
        )?;
        let versions = [
            self.table_version.is_some(),
            self.snapshot_id.is_some(),
            self.timestamp.is_some(),
        ];
        rule(
            versions.iter().filter(|v| **v).count() <= 1,
            "table-version",
            "--table-version, --snapshot-id and --timestamp each choose the version read: give one",
        )
    }

    /// The connectors' options these describe, once valid.
    pub fn dataset_options(
        &self,
        ignore_corrupt_files: bool,
    ) -> Result<DatasetOptions, OptionError> {
        self.validate()?;
        Ok(DatasetOptions {
            format: self.format,
            infer_partition_types: !self.partition_strings,
            split_size: self.split_size,
            format_options: FormatOptions {
                csv_header: self.csv_header(),
                csv_delimiter: self.csv_delimiter as u8,
                text_key_value: self.text_key_value,
                ..FormatOptions::default()
            },
            ignore_corrupt_files,
            table_version: match (self.table_version, self.snapshot_id, self.timestamp) {
                (Some(v), _, _) => TableVersion::Version(v),
                (_, Some(id), _) => TableVersion::SnapshotId(id),
                (_, _, Some(ms)) => TableVersion::Timestamp(ms),
                _ => TableVersion::Latest,
            },
            partition_filter: self
                .partition_filter
                .clone()
                .map(|f| f.with_timezone(self.timezone)),
            row_filter: self
                .row_filter
                .clone()
                .map(|f| f.with_timezone(self.timezone)),
            timezone: self.timezone,
            catalog_partitions: None,
        })
    }
}
