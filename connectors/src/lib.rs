//! Connectors: where Spark/Hadoop output lives and how to read it as Arrow.
//!
//! [`store::open`] turns a URL into a store and a root; [`Dataset::open`]
//! lists the output under the layout rules of Spark, Hive and MapReduce,
//! reads footers, merges schemas and cuts [`Split`]s (a Delta or Iceberg
//! table, or a Structured Streaming file sink, from its log instead:
//! [`table`], [`sink`]); [`read::read_split`]
//! decodes one split into record batches with partition columns appended.

// Library code says why each `unsafe` block is sound and never unwraps (tests may).
#![warn(clippy::undocumented_unsafe_blocks, clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]
// Most modules are pub(crate): the docs are read with `cargo doc
// --document-private-items`, where a public item's links to private ones resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod cache;
pub mod codec;
pub(crate) mod dataset;
pub mod error;
pub mod filter;
pub mod format;
pub mod layout;
pub mod listing;
pub(crate) mod options;
pub mod private;
pub(crate) mod prune_dirs;
pub mod read;
pub mod read_ahead;
pub mod row_filter;
pub(crate) mod schema;
pub mod sink;
pub mod split;
pub mod store;
pub mod table;
pub(crate) mod types;

pub use dataset::{
    CatalogPartition, CatalogPartitions, DataFile, Dataset, DatasetOptions, Ignored, TableInfo,
};
pub use error::{Error, ErrorKind, Report, Result};
pub use filter::{FilterError, PartitionFilter};
pub use format::{CsvHeader, Format, FormatOptions};
pub use read::{read_split, read_split_within, DerivedColumn, ReadPlan};
pub use read_ahead::ReadAhead;
pub use row_filter::{RowFilter, RowFilterError, SessionTz, TimeZoneError};
pub use sink::SinkInfo;
pub use split::{FileStamp, Split, SplitRange};
pub use store::Location;
