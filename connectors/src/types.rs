//! The plain types that the planning modules share (`format`, `split`,
//! `table`, `options`, `dataset`, `listing`, `sink`): a file format's name, a
//! unit a file splits at, how table columns map to file columns, which
//! version of a table to read, and a file left out of a dataset. This module
//! imports none of them, so that each of them imports it and none needs
//! another's types.

use std::fmt;
use std::str::FromStr;

use arrow::datatypes::Field;
use serde::{Deserialize, Serialize};

use crate::codec::Codec;
use crate::error::{Error, Result};

/// A data file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Apache Parquet.
    Parquet,
    /// Apache ORC.
    Orc,
    /// Apache Avro object container files.
    Avro,
    /// Comma-separated values.
    Csv,
    /// JSON lines.
    Json,
    /// Plain text lines (`saveAsTextFile`, MapReduce `TextOutputFormat`).
    Text,
    /// Hadoop SequenceFiles (`saveAsSequenceFile`, MapReduce
    /// `SequenceFileOutputFormat`, Hive `STORED AS SEQUENCEFILE`).
    Sequencefile,
    /// Hive's RCFile (`STORED AS RCFILE`).
    Rcfile,
    /// TFRecord files of `tf.train.Example` records.
    Tfrecord,
}

impl Format {
    /// Every format, for messages.
    pub const ALL: [Format; 9] = [
        Format::Parquet,
        Format::Orc,
        Format::Avro,
        Format::Csv,
        Format::Json,
        Format::Text,
        Format::Sequencefile,
        Format::Rcfile,
        Format::Tfrecord,
    ];

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Orc => "orc",
            Format::Avro => "avro",
            Format::Csv => "csv",
            Format::Json => "json",
            Format::Text => "text",
            Format::Sequencefile => "sequencefile",
            Format::Rcfile => "rcfile",
            Format::Tfrecord => "tfrecord",
        }
    }

    /// The format a file name suggests, after stripping a text codec suffix;
    /// `None` when the name says nothing (MapReduce `part-r-00000`).
    pub fn from_name(name: &str) -> Option<Format> {
        let base = match Codec::from_path(name) {
            Codec::None => name,
            _ => name.rsplit_once('.').map(|(b, _)| b).unwrap_or(name),
        };
        let ext = base.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
        match ext.as_str() {
            "parquet" | "parq" => Some(Format::Parquet),
            "orc" => Some(Format::Orc),
            "avro" => Some(Format::Avro),
            "csv" | "tsv" => Some(Format::Csv),
            "json" | "jsonl" | "ndjson" => Some(Format::Json),
            "txt" | "text" => Some(Format::Text),
            "seq" => Some(Format::Sequencefile),
            "rc" | "rcfile" => Some(Format::Rcfile),
            "tfrecord" | "tfrecords" => Some(Format::Tfrecord),
            _ => None,
        }
    }

    /// Whether byte ranges of an uncompressed file can be read independently.
    pub fn is_line_based(self) -> bool {
        matches!(self, Format::Csv | Format::Json | Format::Text)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = Error;

    fn from_str(s: &str) -> Result<Format> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s.to_ascii_lowercase())
            .ok_or_else(|| Error::InvalidOption {
                option: "--format".to_string(),
                reason: format!(
                    "unknown format `{s}` ({})",
                    Format::ALL.map(Format::as_str).join(", ")
                ),
            })
    }
}

/// A unit a file can be split at: a Parquet row group or an ORC stripe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    /// Index of the unit in the file.
    pub index: usize,
    /// The byte offset that decides the unit's split (row-group midpoint, stripe start).
    pub anchor: u64,
    /// Rows in the unit.
    pub rows: u64,
}

/// How the columns of a table's data files are found under the table's
/// column names: renamed columns keep their Parquet field id (Iceberg, Delta
/// column mapping) or a physical name of their own (Delta column mapping).
/// A file column matched neither way is taken by its own name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnMapping {
    /// Parquet field id → table column name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_field_id: Vec<(i32, String)>,
    /// Physical column name in the files → table column name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_physical_name: Vec<(String, String)>,
}

impl ColumnMapping {
    /// Whether file columns are taken by their own names.
    pub fn is_identity(&self) -> bool {
        self.by_field_id.is_empty() && self.by_physical_name.is_empty()
    }

    /// The table column a file column stands for: by field id first, then by
    /// physical name, else its own name.
    pub fn logical_name<'a>(&'a self, field: &'a Field) -> &'a str {
        if let Some(id) = field
            .metadata()
            .get(parquet_field_id_key())
            .and_then(|v| v.parse::<i32>().ok())
        {
            if let Some((_, name)) = self.by_field_id.iter().find(|(i, _)| *i == id) {
                return name;
            }
        }
        if let Some((_, name)) = self
            .by_physical_name
            .iter()
            .find(|(physical, _)| physical == field.name())
        {
            return name;
        }
        field.name()
    }
}

/// The field metadata key under which the Parquet reader reports field ids.
pub fn parquet_field_id_key() -> &'static str {
    parquet::arrow::PARQUET_FIELD_ID_META_KEY
}

/// Which version of a table to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableVersion {
    /// The latest version (Delta) or the current snapshot (Iceberg).
    #[default]
    Latest,
    /// A Delta table version (`--version N`).
    Version(u64),
    /// An Iceberg snapshot id (`--snapshot-id N`).
    SnapshotId(i64),
    /// The version that was current at this time, in milliseconds since the
    /// epoch (`--timestamp T`): the last commit at or before it.
    Timestamp(i64),
}

impl TableVersion {
    /// Whether this asks for the latest version.
    pub fn is_latest(&self) -> bool {
        matches!(self, TableVersion::Latest)
    }
}

/// A file that is present but not part of the data, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Ignored {
    /// The file's URL.
    pub path: String,
    /// Why it is not read.
    pub reason: String,
}
