//! A dataset: what `sluice ls` shows and `sluice train` plans from. Lists the
//! output, applies the layout rules, reads footers, merges schemas and cuts splits.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use futures::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::filter::PartitionFilter;
use crate::format::parquet_footers::{self, FooterKey};
use crate::format::{self, CsvHeader, FileInfo, FileRef};
use crate::layout::names::{classify_dir, dbio_txn, DirClass, FileClass};
use crate::layout::partition::{infer_type, parse_value, unescape, widen};
use crate::layout::success::SuccessMarker;
use crate::listing::{self, ListedFile};
pub use crate::options::{CatalogPartition, CatalogPartitions, DatasetOptions};
use crate::row_filter::RowFilter;
use crate::schema::SchemaMerger;
use crate::sink::{self, Committed, SinkInfo};
use crate::split::{split_file, FileStamp, FileToSplit, Split, SplitRange};
use crate::store::Location;
use crate::table::{self, TableKind, TableSnapshot};
pub use crate::types::Ignored;
use crate::types::{ColumnMapping, Format, Unit};

/// How many files are inspected at once.
const INSPECT_CONCURRENCY: usize = 16;

/// A data file of the dataset.
#[derive(Debug, Clone)]
pub struct DataFile {
    /// Path in the store.
    pub path: Path,
    /// Size in bytes.
    pub size: u64,
    /// Partition directory as on disk, empty when unpartitioned.
    pub partition_dir: String,
    /// Unescaped partition values, `None` for null.
    pub partition_values: Vec<Option<String>>,
    /// Rows, when known.
    pub rows: Option<u64>,
}

/// The Delta or Iceberg table a dataset was read from, and which version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableInfo {
    /// Delta or Iceberg.
    pub kind: TableKind,
    /// The Delta version or Iceberg snapshot id read.
    pub version: i64,
    /// When that version was committed (milliseconds since the epoch), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_ms: Option<i64>,
    /// The table format as `ls` shows it.
    pub format_version: String,
}

/// A discovered dataset.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Where it lives.
    pub location: Location,
    /// `_SUCCESS` is present.
    pub complete: bool,
    /// What `_SUCCESS` says, if present.
    pub success: Option<SuccessMarker>,
    /// In-flight names found (`_temporary`, `__magic`...), relative to the root.
    pub in_flight: Vec<String>,
    /// The format of the data files (`None` when there are none).
    pub format: Option<Format>,
    /// Partition columns with their inferred types.
    pub partition_fields: Vec<Field>,
    /// Merged schema of the data columns.
    pub data_schema: SchemaRef,
    /// Live data files.
    pub files: Vec<DataFile>,
    /// Splits of the live data files.
    pub splits: Vec<Split>,
    /// Files present but not read.
    pub ignored: Vec<Ignored>,
    /// Data files that could not be planned, and why (only with
    /// `ignore_corrupt_files`): each has one split, last in `splits`, whose
    /// reading fails naming the file. They are not in `files`.
    pub corrupt: Vec<Ignored>,
    /// Options the dataset was opened with.
    pub options: DatasetOptions,
    /// The table this dataset is a version of, when it is a Delta or Iceberg table.
    pub table: Option<TableInfo>,
    /// How the data files' columns map to the dataset's (tables with renamed columns).
    pub columns: ColumnMapping,
    /// The Structured Streaming file sink this dataset was read from, and up
    /// to which batch.
    pub sink: Option<SinkInfo>,
    /// For CSV files: whether they were taken to start with a header line
    /// found out from the data, taken to have none, or told. What was taken
    /// is in `options.format_options.csv_header`.
    pub csv_header: Option<CsvHeader>,
    /// What the files are besides their format, as `ls` shows it
    /// (`key IntWritable, value Text, block zlib`): the first file's, or
    /// `mixed` when files differ.
    pub format_detail: Option<String>,
}

/// What a listing found besides the files to read.
struct Found {
    complete: bool,
    success: Option<SuccessMarker>,
    in_flight: Vec<String>,
    ignored: Vec<Ignored>,
    sink: Option<SinkInfo>,
    /// Partition directories left unlisted (see [`crate::prune_dirs`]).
    pruned: Vec<Vec<String>>,
}

/// Refuses `--version`, `--snapshot-id` and `--timestamp` for what is no table.
fn no_version(location: &Location, options: &DatasetOptions) -> Result<()> {
    if options.table_version.is_latest() {
        return Ok(());
    }
    Err(Error::InvalidOption {
        option: "--version/--snapshot-id/--timestamp".to_string(),
        reason: format!(
            "{} is neither a Delta nor an Iceberg table, so it has no versions",
            location.url()
        ),
    })
}

impl Dataset {
    /// Lists and inspects the dataset at `location`. A Delta or Iceberg table
    /// is read from its log, never from a listing of its directory; so is a
    /// Structured Streaming file sink (a directory holding `_spark_metadata`):
    /// the files its newest batch holds, see [`Dataset::open_sink_batches`].
    pub async fn open(location: Location, options: DatasetOptions) -> Result<Dataset> {
        if let Some(partitions) = options.catalog_partitions.clone() {
            return Dataset::open_partitions(location, partitions, options).await;
        }
        // One listing of the root tells a table, a sink and the root's
        // files: one round trip to the store for all three.
        let root = listing::RootListing::take(&location).await;
        let (detected, is_sink) = match &root {
            Some(root) => (
                table::detect_listed(&location, root).await,
                Ok(sink::is_sink_listed(root)),
            ),
            None => futures::join!(table::detect(&location), sink::is_sink(&location)),
        };
        if let Some(kind) = detected? {
            let snapshot = table::snapshot(&location, kind, options.table_version).await?;
            return Dataset::from_table(location, snapshot, None, options).await;
        }
        no_version(&location, &options)?;
        if is_sink? {
            return match sink::newest_batch(&location).await? {
                Some(newest) => Dataset::open_sink_batches(location, None, newest, options).await,
                None => Dataset::open_sink(location, Committed::default(), None, options).await,
            };
        }
        let listing = list_unpruned_dirs(&location, &options, root).await?;
        let pruned = listing.pruned;
        let (files, in_flight, mut ignored) = (listing.files, listing.in_flight, listing.ignored);
        // The marker is read while the footers are: one round trip less.
        let planned = async {
            let candidates = live_files(&location, &files, &mut ignored).await?;
            let found = Found {
                complete: false,
                success: None,
                in_flight,
                ignored,
                sink: None,
                pruned,
            };
            Dataset::from_listed(location.clone(), candidates, found, options).await
        };
        let (success, planned) = futures::join!(read_success(&location, &files), planned);
        let success = success?;
        let mut dataset = planned?;
        dataset.complete = success.is_some();
        dataset.success = success;
        Ok(dataset)
    }

    /// The dataset of the files a Structured Streaming file sink committed in
    /// batches `(after, upto]` (every batch up to `upto` when `after` is
    /// `None`), minus those its log deleted up to `upto`, read from its
    /// `_spark_metadata` log; `sink.batch` is `upto`. Files of the directory
    /// that no batch up to `upto` committed are never read and are listed in
    /// [`Dataset::ignored`]; files committed up to `after` are left out
    /// quietly (a follow mode read them before).
    ///
    /// Fails naming the batch file (and line) when the log misses a batch
    /// that is needed, holds a line Spark does not write, or names a file
    /// outside the directory; batch `after` must still be readable (the query
    /// deletes old batches of its log, keeping the newest compaction).
    pub async fn open_sink_batches(
        location: Location,
        after: Option<u64>,
        upto: u64,
        options: DatasetOptions,
    ) -> Result<Dataset> {
        no_version(&location, &options)?;
        let committed = sink::committed(&location, after, upto).await?;
        Dataset::open_sink(location, committed, Some(upto), options).await
    }

    /// Plans the files of a sink's directory that `committed` holds.
    async fn open_sink(
        location: Location,
        committed: Committed,
        batch: Option<u64>,
        options: DatasetOptions,
    ) -> Result<Dataset> {
        let listing = listing::list(&location).await?;
        let mut ignored = listing.ignored;
        let files = sink::committed_listing(&location, committed, listing.files, &mut ignored)?;
        let found = Found {
            complete: true,
            success: None,
            in_flight: listing.in_flight,
            ignored,
            sink: Some(SinkInfo { batch }),
            pruned: Vec::new(),
        };
        Dataset::from_listed(location, files, found, options).await
    }

    /// Plans the live files of a listing: partitions, format, footers, schema
    /// and splits.
    async fn from_listed(
        location: Location,
        files: Vec<ListedFile>,
        found: Found,
        options: DatasetOptions,
    ) -> Result<Dataset> {
        let mut ignored = found.ignored;
        let (files, partition_names) = assign_partitions(&location, files, &mut ignored)?;
        let format = decide_format(&location, &files, options.format).await?;
        let partition_fields = partition_fields(
            &partition_names,
            &files,
            &found.pruned,
            options.infer_partition_types,
        );
        let files = keep_partitions(files, &partition_fields, &options)?;
        let inspected = inspect_all(&location, files, format, &options).await?;
        let data_schema = merge_schemas(&location, &inspected.files, &inspected.infos)?;
        let mut dataset = Dataset {
            complete: found.complete,
            success: found.success,
            in_flight: found.in_flight,
            format,
            partition_fields,
            data_schema,
            files: Vec::new(),
            splits: Vec::new(),
            ignored,
            corrupt: Vec::new(),
            location,
            options,
            table: None,
            columns: ColumnMapping::default(),
            sink: found.sink,
            csv_header: None,
            format_detail: None,
        };
        dataset.finish(inspected);
        Ok(dataset)
    }

    /// Plans a version of a table: its live files (or only `files`, a subset
    /// of them, for an incremental run), each with its deleted rows, under the
    /// table's own schema and partition values.
    pub async fn from_table(
        location: Location,
        snapshot: TableSnapshot,
        files: Option<Vec<table::TableFile>>,
        options: DatasetOptions,
    ) -> Result<Dataset> {
        let kind = snapshot.kind.as_str();
        let mut files = files.unwrap_or(snapshot.files);
        if let (TableKind::Iceberg, Some(filter)) = (snapshot.kind, &options.partition_filter) {
            files = prune_table_files(&location, files, &snapshot.pruning, filter)?;
        }
        let format = table_format(kind, &location, &files)?;
        let names: Vec<String> = snapshot
            .partition_fields
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let candidates = table_candidates(&names, files);
        // An Iceberg table's files were pruned on their partition tuples above.
        let candidates = if snapshot.kind == TableKind::Iceberg {
            candidates
        } else {
            keep_partitions(candidates, &snapshot.partition_fields, &options)?
        };
        let inspected = inspect_all(&location, candidates, format, &options).await?;
        let mut dataset = Dataset {
            complete: true,
            success: None,
            in_flight: Vec::new(),
            format,
            partition_fields: snapshot.partition_fields,
            data_schema: snapshot.schema,
            files: Vec::new(),
            splits: Vec::new(),
            ignored: Vec::new(),
            corrupt: Vec::new(),
            location,
            options,
            table: Some(TableInfo {
                kind: snapshot.kind,
                version: snapshot.version,
                timestamp_ms: snapshot.timestamp_ms,
                format_version: snapshot.format_version,
            }),
            columns: snapshot.columns,
            sink: None,
            csv_header: None,
            format_detail: None,
        };
        dataset.finish(inspected);
        Ok(dataset)
    }

    /// Lists and inspects several directories of one store as one dataset rooted at
    /// `base`: the union of their files, with the directories between `base` and each
    /// root read as partition directories (`base/dt=1` and `base/dt=2` give a `dt`
    /// column). Each root is listed on its own, so nothing else under `base` is read.
    ///
    /// `complete` is true when every root holds its own `_SUCCESS`; `success` is
    /// `None`. Every root must lie under `base`.
    pub async fn open_roots(
        base: Location,
        roots: &[Path],
        options: DatasetOptions,
    ) -> Result<Dataset> {
        let listings = stream::iter(roots.iter().map(|root| {
            let mut location = base.clone();
            location.root = root.clone();
            async move { listing::list(&location).await }
        }))
        .buffered(INSPECT_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
        let mut all = listing::Listing::default();
        let mut complete = !roots.is_empty();
        for (root, listing) in roots.iter().zip(listings) {
            let prefix = relative_dirs(&base, root)?;
            complete &= listing
                .files
                .iter()
                .any(|f| f.class == FileClass::Success && f.dirs.is_empty());
            for mut file in listing.files {
                file.dirs.splice(0..0, prefix.iter().cloned());
                all.files.push(file);
            }
            for name in &listing.in_flight {
                let path: Vec<&str> = prefix.iter().chain([name]).map(String::as_str).collect();
                all.in_flight.push(path.join("/"));
            }
            all.hidden += listing.hidden;
            all.ignored.extend(listing.ignored);
        }
        all.files.retain(|f| f.class != FileClass::Success);
        let mut ignored = all.ignored;
        let candidates = live_files(&base, &all.files, &mut ignored).await?;
        let found = Found {
            complete,
            success: None,
            in_flight: all.in_flight,
            ignored,
            sink: None,
            pruned: Vec::new(),
        };
        Dataset::from_listed(base, candidates, found, options).await
    }

    /// The partitions a catalog lists for the table at `location`, each
    /// listed at its own location (under the table's root or anywhere else
    /// in the same store) and given the catalog's values; nothing else under
    /// the root is read. `--where` is decided on those values first.
    pub async fn open_partitions(
        location: Location,
        catalog: CatalogPartitions,
        options: DatasetOptions,
    ) -> Result<Dataset> {
        let fields = catalog.fields;
        let names: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
        let kept = kept_partitions(&location, &fields, catalog.partitions, &options)?;
        let listings = list_partitions(&location, &kept).await?;
        let mut ignored = Vec::new();
        let mut candidates = Vec::new();
        for ((_, values), listing) in kept.iter().zip(listings) {
            ignored.extend(listing.ignored);
            let files: Vec<ListedFile> = listing
                .files
                .into_iter()
                .filter(|f| f.class != FileClass::Success)
                .collect();
            let dir = partition_dir(&names, values);
            for file in live_files(&location, &files, &mut ignored).await? {
                candidates.push(Candidate {
                    meta: file.meta,
                    partition_dir: dir.clone(),
                    columns: names.clone(),
                    values: values.clone(),
                    deleted: Vec::new(),
                });
            }
        }
        let format = decide_format(&location, &candidates, options.format).await?;
        let inspected = inspect_all(&location, candidates, format, &options).await?;
        let data_schema = merge_schemas(&location, &inspected.files, &inspected.infos)?;
        let mut dataset = Dataset {
            complete: true,
            success: None,
            in_flight: Vec::new(),
            format,
            partition_fields: fields,
            data_schema,
            files: Vec::new(),
            splits: Vec::new(),
            ignored,
            corrupt: Vec::new(),
            location,
            options,
            table: None,
            columns: ColumnMapping::default(),
            sink: None,
            csv_header: None,
            format_detail: None,
        };
        dataset.finish(inspected);
        Ok(dataset)
    }

    fn finish(&mut self, inspected: Inspected) {
        let Inspected {
            files,
            infos,
            corrupt,
            csv_header,
        } = inspected;
        if let Some((header, verdict)) = csv_header {
            self.options.format_options.csv_header = Some(header);
            self.csv_header = Some(verdict);
        }
        self.format_detail = format_detail(&infos);
        for (file, info) in files.into_iter().zip(infos) {
            let path = file.meta.location.to_string();
            let codec = Codec::from_path(&path);
            if let Some(format) = self.format {
                let stamp = FileStamp::of(&file.meta);
                let to_split = FileToSplit {
                    path: &path,
                    size: file.meta.size,
                    format,
                    codec,
                    partition_dir: &file.partition_dir,
                    partition_values: &file.values,
                    units: &info.units,
                    rows: info.rows,
                    stamp: &stamp,
                };
                let mut splits = split_file(&to_split, self.options.split_size);
                if !file.deleted.is_empty() {
                    apply_deletes(&mut splits, &info.units, &file.deleted);
                }
                self.splits.extend(splits);
            }
            let deleted = file.deleted.len() as u64;
            self.files.push(DataFile {
                path: file.meta.location,
                size: file.meta.size,
                partition_dir: file.partition_dir,
                partition_values: file.values,
                rows: info.rows.map(|r| r.saturating_sub(deleted)),
            });
        }
        // A filtered split holds as many rows as its read keeps: known once
        // read, unless the filter names partition columns only (the files
        // of the partitions it rejects are left out, the others kept whole).
        if self.filters_data_columns() {
            for split in &mut self.splits {
                split.rows = None;
            }
        }
        let Some(format) = self.format else {
            return;
        };
        self.plan_corrupt(format, corrupt);
    }

    /// Whether the row filter names a column that is no partition column.
    fn filters_data_columns(&self) -> bool {
        self.options.row_filter.as_ref().is_some_and(|f| {
            f.columns().iter().any(|c| {
                !self
                    .partition_fields
                    .iter()
                    .any(|p| p.name().eq_ignore_ascii_case(c))
            })
        })
    }

    /// Lists the files that could not be inspected in [`Dataset::corrupt`],
    /// each with one split whose reading fails naming it.
    fn plan_corrupt(&mut self, format: Format, corrupt: Vec<(Candidate, String)>) {
        for (file, reason) in corrupt {
            let path = file.meta.location.to_string();
            self.corrupt.push(Ignored {
                path: self.location.display(&file.meta.location),
                reason: reason.clone(),
            });
            self.splits.push(Split {
                codec: Codec::from_path(&path),
                path,
                size: file.meta.size,
                format,
                partition_dir: file.partition_dir,
                partition_values: file.values,
                range: SplitRange::Unreadable { reason },
                rows: None,
                deleted: Vec::new(),
                stamp: FileStamp::of(&file.meta),
                source: 0,
                window: None,
            });
        }
    }

    /// Data columns followed by partition columns.
    pub fn schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .data_schema
            .fields()
            .iter()
            .filter(|f| !self.partition_fields.iter().any(|p| p.name() == f.name()))
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(self.partition_fields.iter().cloned());
        Arc::new(Schema::new(fields))
    }

    /// Whether the listing shows that there is no data row to read: no data
    /// file at all (none set apart as corrupt either), or only files known to
    /// hold none (0 rows in their footers or the table's log, all rows
    /// deleted, or 0 bytes). Text files of unknown rows are not known empty.
    pub fn known_empty(&self) -> bool {
        self.corrupt.is_empty() && self.files.iter().all(|f| f.rows == Some(0) || f.size == 0)
    }

    /// Whether the output is visibly unfinished: no `_SUCCESS` and in-flight markers present.
    pub fn visibly_unfinished(&self) -> bool {
        !self.complete && !self.in_flight.is_empty()
    }
}

/// The directory names leading from `base`'s root to `root`.
fn relative_dirs(base: &Location, root: &Path) -> Result<Vec<String>> {
    match root.prefix_match(&base.root) {
        Some(parts) => Ok(parts.map(|p| p.as_ref().to_string()).collect()),
        None => Err(Error::Layout {
            path: base.display(root),
            reason: format!("not under {}", base.url()),
        }),
    }
}

/// Lists `location` leaving out the partition directories `--where` and
/// `--filter` reject. When that leaves no file in a partition directory,
/// it is listed again whole, so that what is refused or found empty is
/// decided on the partition columns all the files have, as without pruning.
async fn list_unpruned_dirs(
    location: &Location,
    options: &DatasetOptions,
    root: Option<listing::RootListing>,
) -> Result<listing::Listing> {
    let pruner = crate::prune_dirs::DirPruner::new(options);
    let listing = match root {
        Some(root) => root.list_pruned(location, pruner.as_ref()).await?,
        None => listing::list_pruned(location, pruner.as_ref()).await?,
    };
    if listing.pruned.is_empty() {
        return Ok(listing);
    }
    if !listing.files.iter().any(|f| !f.dirs.is_empty()) {
        return listing::list(location).await;
    }
    crate::row_filter::parquet::count_dirs_pruned(listing.pruned.len());
    tracing::debug!(
        pruned = listing.pruned.len(),
        "partition directories left unlisted"
    );
    Ok(listing)
}

/// A file that passed the liveness rules, with its partition values.
#[derive(Debug, Clone)]
struct Candidate {
    meta: object_store::ObjectMeta,
    partition_dir: String,
    columns: Vec<String>,
    values: Vec<Option<String>>,
    /// Positions of rows deleted from the file (tables only), sorted.
    deleted: Vec<u64>,
}

/// Leaves out of `info`'s units the row groups whose statistics say no row
/// of them passes `filter` (conditions on columns the file does not have,
/// partition columns among them, may be anything), and drops the footer it
/// kept. Counts what it left out.
fn prune_units(filter: &RowFilter, info: &mut FileInfo) {
    let Some((meta, legacy)) = info.parquet_meta.take() else {
        return;
    };
    if legacy || info.units.is_empty() {
        return;
    }
    let pred = filter.lenient(&info.schema);
    let names: Vec<String> = info
        .schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let stats = crate::row_filter::parquet::FileStats {
        meta: &meta,
        schema: &info.schema,
        names: &names,
    };
    let groups: Vec<usize> = info.units.iter().map(|u| u.index).collect();
    let mut keep = stats.groups_kept(&pred, &groups).into_iter();
    let before = info.units.len();
    info.units.retain(|_| keep.next().unwrap_or(true));
    crate::row_filter::parquet::count_planned(before - info.units.len(), info.units.is_empty());
}

/// The format of a table's data files (`None` for no file); files of
/// several formats, or rows deleted from a file that is no Parquet file,
/// are refused.
fn table_format(
    kind: &'static str,
    location: &Location,
    files: &[table::TableFile],
) -> Result<Option<Format>> {
    let mut format = None;
    for file in files {
        match format {
            None => format = Some(file.format),
            Some(f) if f != file.format => {
                return Err(Error::Table {
                    kind,
                    path: location.url(),
                    reason: format!(
                        "data files of several formats ({f} and {} in {})",
                        file.format,
                        location.display(&file.path)
                    ),
                })
            }
            Some(_) => {}
        }
        if file.format != Format::Parquet && !file.deleted.is_empty() {
            return Err(Error::Table {
                kind,
                path: location.url(),
                reason: format!(
                    "rows deleted from the {} file {}: deletes are read for Parquet files only",
                    file.format,
                    location.display(&file.path)
                ),
            });
        }
    }
    Ok(format)
}

/// A table's files as candidates, each with its partition values under the
/// partition columns `names`.
fn table_candidates(names: &[String], files: Vec<table::TableFile>) -> Vec<Candidate> {
    files
        .into_iter()
        .map(|file| Candidate {
            partition_dir: partition_dir(names, &file.partition_values),
            meta: object_store::ObjectMeta {
                location: file.path,
                last_modified: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
                size: file.size,
                e_tag: None,
                version: None,
            },
            columns: names.to_vec(),
            values: file.partition_values,
            deleted: file.deleted,
        })
        .collect()
}

/// The partition directory of `values` under the columns `names`
/// (`a=1/b=null`).
fn partition_dir(names: &[String], values: &[Option<String>]) -> String {
    names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}={}", v.as_deref().unwrap_or("null")))
        .collect::<Vec<_>>()
        .join("/")
}

/// The roots and values of the catalog's partitions that `--where` and
/// `--filter` keep; a partition in another store than the table is
/// refused.
fn kept_partitions(
    location: &Location,
    fields: &[Field],
    partitions: Vec<CatalogPartition>,
    options: &DatasetOptions,
) -> Result<Vec<(Path, Vec<Option<String>>)>> {
    let mut kept = Vec::new();
    for p in partitions {
        if let Some(filter) = &options.partition_filter {
            filter.check(fields)?;
            if !filter.matches(fields, &p.values) {
                continue;
            }
        }
        if let Some(filter) = &options.row_filter {
            if !filter.partition_may_match(fields, &p.values) {
                continue;
            }
        }
        let at = crate::store::open(&p.url)?;
        if at.base() != location.base() {
            return Err(Error::Layout {
                path: location.url(),
                reason: format!("partition {} is in another store than the table", p.url),
            });
        }
        kept.push((at.root, p.values));
    }
    if let Some(filter) = &options.partition_filter {
        filter.check(fields)?;
    }
    Ok(kept)
}

/// Lists each kept partition's root, several at once, in order; a
/// partition whose directory is missing is empty.
async fn list_partitions(
    location: &Location,
    kept: &[(Path, Vec<Option<String>>)],
) -> Result<Vec<listing::Listing>> {
    stream::iter(kept.iter().map(|(root, _)| {
        let mut at = location.clone();
        at.root = root.clone();
        async move {
            match listing::list(&at).await {
                // A partition the metastore lists whose directory is gone
                // (or was never written) holds no rows, as for Spark.
                Err(Error::NotFound { .. }) => Ok(listing::Listing::default()),
                other => other,
            }
        }
    }))
    .buffered(INSPECT_CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await
}

/// The files of the partitions `--where` keeps (all without a filter);
/// a filter naming a column that is no partition column is refused.
fn keep_partitions(
    files: Vec<Candidate>,
    fields: &[Field],
    options: &DatasetOptions,
) -> Result<Vec<Candidate>> {
    let files = match &options.row_filter {
        Some(filter) => {
            let before = files.len();
            let kept: Vec<Candidate> = files
                .into_iter()
                .filter(|f| filter.partition_may_match(fields, &f.values))
                .collect();
            tracing::debug!(
                filter = filter.as_str(),
                before,
                kept = kept.len(),
                "row filter on partition values"
            );
            kept
        }
        None => files,
    };
    let Some(filter) = &options.partition_filter else {
        return Ok(files);
    };
    filter.check(fields)?;
    let before = files.len();
    let kept: Vec<Candidate> = files
        .into_iter()
        .filter(|f| filter.matches(fields, &f.values))
        .collect();
    tracing::debug!(
        filter = filter.as_str(),
        before,
        kept = kept.len(),
        "partition filter"
    );
    Ok(kept)
}

/// The files of an Iceberg table whose identity partition values `filter`
/// keeps, decided on their manifest entries' partition tuples before any
/// file is read. A column partitioned only through another transform (a
/// day, a bucket) is refused: its partitions hold rows of many values, so
/// keeping or dropping them would not be what a row filter keeps. So is a
/// file whose partition spec does not partition by a column the filter names.
fn prune_table_files(
    location: &Location,
    files: Vec<table::TableFile>,
    pruning: &table::Pruning,
    filter: &PartitionFilter,
) -> Result<Vec<table::TableFile>> {
    let fields = &pruning.identity;
    let named = filter.columns();
    let is_identity = |column: &str| fields.iter().any(|f| f.name().eq_ignore_ascii_case(column));
    let identity_list = || {
        if fields.is_empty() {
            "the table has no identity partition columns".to_string()
        } else {
            let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
            format!("identity partition columns: {}", names.join(", "))
        }
    };
    for column in named.iter().filter(|c| !is_identity(c)) {
        let transforms: Vec<String> = pruning
            .transformed
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(column))
            .map(|(name, transform)| format!("{transform}({name})"))
            .collect();
        if !transforms.is_empty() {
            return Err(Error::InvalidOption {
                option: "--where".to_string(),
                reason: format!(
                    "the Iceberg table {} partitions `{column}` only by {}, whose partitions hold \
                     rows of many `{column}` values, so --where cannot prune on it ({}); \
                     row filters are not partition pruning",
                    location.url(),
                    transforms.join(", "),
                    identity_list()
                ),
            });
        }
    }
    filter.check(fields)?;
    let before = files.len();
    let mut kept = Vec::with_capacity(files.len());
    for file in files {
        let mut values = Vec::with_capacity(fields.len());
        for field in fields {
            match file.identity_values.iter().find(|(n, _)| n == field.name()) {
                Some((_, value)) => values.push(value.clone()),
                None if named.iter().any(|c| c.eq_ignore_ascii_case(field.name())) => {
                    return Err(Error::InvalidOption {
                        option: "--where".to_string(),
                        reason: format!(
                            "data file {} of the Iceberg table was written with a partition spec \
                             that does not partition by `{}`, so --where cannot prune it",
                            location.display(&file.path),
                            field.name()
                        ),
                    });
                }
                // Not named by the filter: its value does not matter.
                None => values.push(None),
            }
        }
        if filter.matches(fields, &values) {
            kept.push(file);
        }
    }
    tracing::debug!(
        filter = filter.as_str(),
        before,
        kept = kept.len(),
        "iceberg partition filter"
    );
    Ok(kept)
}

/// Gives each split of one file the deleted rows that fall in it, as ranges
/// of its own row positions, and takes them off its row count. The splits
/// cover whole row groups in file order (`units`, with their row counts).
fn apply_deletes(splits: &mut [Split], units: &[Unit], deleted: &[u64]) {
    let mut first_row = Vec::with_capacity(units.len());
    let mut at = 0u64;
    for unit in units {
        first_row.push((unit.index, at, unit.rows));
        at += unit.rows;
    }
    for split in splits {
        let SplitRange::RowGroups(groups) = &split.range else {
            continue;
        };
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut offset = 0u64;
        for group in groups {
            let Some(&(_, start, rows)) = first_row.iter().find(|(i, _, _)| i == group) else {
                continue;
            };
            let lo = deleted.partition_point(|&p| p < start);
            let hi = deleted.partition_point(|&p| p < start + rows);
            for &position in &deleted[lo..hi] {
                let row = offset + (position - start);
                match ranges.last_mut() {
                    Some((_, end)) if *end == row => *end = row + 1,
                    _ => ranges.push((row, row + 1)),
                }
            }
            offset += rows;
        }
        let gone: u64 = ranges.iter().map(|(a, b)| b - a).sum();
        split.rows = split.rows.map(|r| r.saturating_sub(gone));
        split.deleted = ranges;
    }
}

/// Reads `_SUCCESS` at the root, if present.
async fn read_success(loc: &Location, files: &[ListedFile]) -> Result<Option<SuccessMarker>> {
    let Some(marker) = files
        .iter()
        .find(|f| f.class == FileClass::Success && f.dirs.is_empty())
    else {
        return Ok(None);
    };
    let bytes = loc
        .store
        .get(&marker.meta.location)
        .await
        .map_err(|e| Error::from_store(loc.display(&marker.meta.location), e))?
        .bytes()
        .await
        .map_err(|e| Error::from_store(loc.display(&marker.meta.location), e))?;
    Ok(Some(SuccessMarker::parse(&bytes)))
}

/// Data files that are live: not zero bytes, and committed under DBIO rules.
async fn live_files(
    loc: &Location,
    files: &[ListedFile],
    ignored: &mut Vec<Ignored>,
) -> Result<Vec<ListedFile>> {
    let dbio = DbioMarkers::read(loc, files).await?;
    let mut out = Vec::new();
    for file in files.iter().filter(|f| f.class == FileClass::Data) {
        let name = file.meta.location.filename().unwrap_or_default();
        if file.meta.size == 0 {
            ignored.push(Ignored {
                path: loc.display(&file.meta.location),
                reason: "zero bytes".to_string(),
            });
            continue;
        }
        if let Some(txn) = dbio_txn(name) {
            if !dbio.is_live(&file.dirs.join("/"), txn, name) {
                ignored.push(Ignored {
                    path: loc.display(&file.meta.location),
                    reason: format!("uncommitted databricks transaction {txn}"),
                });
                continue;
            }
        }
        out.push(file.clone());
    }
    Ok(out)
}

/// Databricks DBIO markers per directory.
#[derive(Default)]
struct DbioMarkers {
    started: HashSet<(String, String)>,
    committed: HashMap<(String, String), HashSet<String>>,
}

impl DbioMarkers {
    async fn read(loc: &Location, files: &[ListedFile]) -> Result<DbioMarkers> {
        let mut markers = DbioMarkers::default();
        for file in files {
            let dir = file.dirs.join("/");
            match &file.class {
                FileClass::DbioStarted(txn) => {
                    markers.started.insert((dir, txn.clone()));
                }
                FileClass::DbioCommitted(txn) => {
                    let path = loc.display(&file.meta.location);
                    let bytes = loc
                        .store
                        .get(&file.meta.location)
                        .await
                        .map_err(|e| Error::from_store(&path, e))?
                        .bytes()
                        .await
                        .map_err(|e| Error::from_store(&path, e))?;
                    let value: serde_json::Value = serde_json::from_slice(&bytes)
                        .map_err(|e| Error::corrupt(&path, "dbio commit marker", e))?;
                    let added = value
                        .get("added")
                        .and_then(|a| a.as_array())
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default();
                    markers.committed.insert((dir, txn.clone()), added);
                }
                _ => {}
            }
        }
        Ok(markers)
    }

    /// Live iff the transaction has no marker at all, or its commit marker lists the file.
    fn is_live(&self, dir: &str, txn: &str, name: &str) -> bool {
        let key = (dir.to_string(), txn.to_string());
        match self.committed.get(&key) {
            Some(added) => added.contains(name),
            None => !self.started.contains(&key),
        }
    }
}

/// Parses partition directories and checks that every file has the same columns.
/// Files in the root of a partitioned table are reported and left out, as Spark does.
fn assign_partitions(
    loc: &Location,
    files: Vec<ListedFile>,
    ignored: &mut Vec<Ignored>,
) -> Result<(Vec<Candidate>, Vec<String>)> {
    let mut out = Vec::with_capacity(files.len());
    for file in files {
        let mut columns = Vec::new();
        let mut values = Vec::new();
        let mut dir_parts = Vec::new();
        for segment in &file.dirs {
            if let DirClass::Partition { column, value } = classify_dir(segment) {
                columns.push(unescape(&column));
                values.push(parse_value(&value));
                dir_parts.push(segment.clone());
            }
        }
        out.push(Candidate {
            meta: file.meta,
            partition_dir: file.dirs.join("/"),
            columns,
            values,
            deleted: Vec::new(),
        });
    }
    let partitioned = out.iter().any(|c| !c.columns.is_empty());
    if partitioned {
        let (root, rest): (Vec<_>, Vec<_>) = out.into_iter().partition(|c| c.columns.is_empty());
        for c in root {
            ignored.push(Ignored {
                path: loc.display(&c.meta.location),
                reason: "file outside the partition directories of a partitioned table".to_string(),
            });
        }
        out = rest;
    }
    let names = out.first().map(|c| c.columns.clone()).unwrap_or_default();
    if let Some(first) = out.first() {
        for c in &out {
            if c.columns != names {
                return Err(Error::Layout {
                    path: loc.url(),
                    reason: format!(
                        "conflicting partition columns: {} has [{}] but {} has [{}]",
                        loc.display(&first.meta.location),
                        names.join(", "),
                        loc.display(&c.meta.location),
                        c.columns.join(", ")
                    ),
                });
            }
        }
    }
    let mut seen = HashSet::new();
    if let Some(dup) = names.iter().find(|n| !seen.insert(n.to_ascii_lowercase())) {
        return Err(Error::Layout {
            path: loc.url(),
            reason: format!("partition column `{dup}` appears twice in one path"),
        });
    }
    Ok((out, names))
}

/// The format of all files: forced, or read from the names (one format only).
/// Files whose names say nothing (MapReduce's `part-r-00000`) are what the
/// first bytes of the first of them hold: a SequenceFile, RCFile, TFRecord
/// records or another binary format by its magic, text otherwise. Each file
/// is checked against that format when inspected, so a file that holds
/// something else is refused by name, never read as rows.
async fn decide_format(
    loc: &Location,
    files: &[Candidate],
    forced: Option<Format>,
) -> Result<Option<Format>> {
    if forced.is_some() {
        return Ok(forced);
    }
    let mut found: BTreeMap<&'static str, (Format, String)> = BTreeMap::new();
    let mut by_content: Option<Format> = None;
    for file in files {
        let name = file.meta.location.filename().unwrap_or_default();
        let format = match Format::from_name(name) {
            Some(format) => format,
            None => match by_content {
                Some(format) => format,
                None => {
                    let format = crate::format::format_by_content(loc, &file.meta).await?;
                    by_content = Some(format);
                    format
                }
            },
        };
        found
            .entry(format.as_str())
            .or_insert((format, loc.display(&file.meta.location)));
    }
    if found.len() > 1 {
        let list: Vec<String> = found.values().map(|(f, p)| format!("{p} ({f})")).collect();
        return Err(Error::Format {
            path: loc.url(),
            reason: format!(
                "files of several formats: {}; pass --format",
                list.join(", ")
            ),
        });
    }
    Ok(found.into_values().next().map(|(f, _)| f))
}

/// The files as inspected: those planned with what was found, and the corrupt
/// ones set apart (only with `ignore_corrupt_files`) with the decoder's reason.
struct Inspected {
    files: Vec<Candidate>,
    infos: Vec<FileInfo>,
    corrupt: Vec<(Candidate, String)>,
    /// CSV files: whether they start with a header line, and who said so.
    csv_header: Option<(bool, CsvHeader)>,
}

async fn inspect_all(
    loc: &Location,
    files: Vec<Candidate>,
    format: Option<Format>,
    options: &DatasetOptions,
) -> Result<Inspected> {
    let mut inspected = Inspected {
        files: Vec::new(),
        infos: Vec::new(),
        corrupt: Vec::new(),
        csv_header: None,
    };
    let Some(format) = format else {
        inspected.files = files;
        return Ok(inspected);
    };
    let opts = &options.format_options;
    let results: Vec<Result<FileInfo, String>> = stream::iter(files.iter().map(|f| {
        let file = FileRef {
            path: f.meta.location.clone(),
            size: f.meta.size,
        };
        async move {
            match format::inspect(loc, &file, format, opts).await {
                Ok(mut info) => {
                    // Kept for the reads of the file's splits that follow.
                    if let Some((meta, _)) = &info.parquet_meta {
                        let stamp = FileStamp::of(&f.meta);
                        let key = FooterKey::new(loc.display(&file.path), file.size, &stamp);
                        if let Some(key) = key {
                            parquet_footers::keep(key, meta.clone(), false);
                        }
                    }
                    if let Some(filter) = &options.row_filter {
                        prune_units(filter, &mut info);
                    }
                    info.parquet_meta = None;
                    Ok(Ok(info))
                }
                Err(Error::Corrupt { reason, .. }) if options.ignore_corrupt_files => {
                    Ok(Err(reason))
                }
                Err(e) => Err(e),
            }
        }
    }))
    .buffered(INSPECT_CONCURRENCY)
    .try_collect()
    .await?;
    for (file, result) in files.into_iter().zip(results) {
        match result {
            Ok(info) => {
                inspected.files.push(file);
                inspected.infos.push(info);
            }
            Err(reason) => {
                tracing::warn!(path = %loc.display(&file.meta.location), %reason, "corrupt file left out of the plan: its task fails");
                inspected.corrupt.push((file, reason));
            }
        }
    }
    if format == Format::Csv {
        inspected.csv_header = Some(csv_header(loc, &mut inspected, opts.csv_header)?);
        format::widen_csv_types(&mut inspected.infos);
    }
    if format == Format::Tfrecord {
        format::widen_tfrecord_features(&mut inspected.infos);
    }
    Ok(inspected)
}

/// What the files say of themselves besides their format: the first one's
/// detail when all agree, `mixed` otherwise.
fn format_detail(infos: &[FileInfo]) -> Option<String> {
    let first = infos.first()?.detail.clone()?;
    if infos
        .iter()
        .all(|i| i.detail.as_deref() == Some(first.as_str()))
    {
        Some(first)
    } else {
        Some("mixed".to_string())
    }
}

/// Whether the CSV files start with a header line: as given, or decided
/// once for all of them from what their heads show; each file's schema is
/// then the one read that way.
fn csv_header(
    loc: &Location,
    inspected: &mut Inspected,
    given: Option<bool>,
) -> Result<(bool, CsvHeader)> {
    if let Some(header) = given {
        return Ok((header, CsvHeader::Given));
    }
    let names: Vec<String> = inspected
        .files
        .iter()
        .map(|f| loc.display(&f.meta.location))
        .collect();
    let heads = names
        .iter()
        .zip(&inspected.infos)
        .filter_map(|(name, info)| Some((name.as_str(), info.csv_head.as_ref()?)));
    let header = format::decide_header(heads)?;
    for info in &mut inspected.infos {
        if let Some(head) = info.csv_head.take() {
            info.schema = if header {
                head.with_header
            } else {
                head.without_header
            };
        }
    }
    let verdict = if header {
        CsvHeader::Detected
    } else {
        CsvHeader::None
    };
    tracing::debug!(header, verdict = verdict.as_str(), "csv header");
    Ok((header, verdict))
}

fn merge_schemas(loc: &Location, files: &[Candidate], infos: &[FileInfo]) -> Result<SchemaRef> {
    let mut merger = SchemaMerger::default();
    for (file, info) in files.iter().zip(infos) {
        merger.add(&loc.display(&file.meta.location), &info.schema)?;
    }
    Ok(merger.finish())
}

/// Partition columns typed by Spark's inference (or all strings).
/// Directories pruned unlisted count with the value of their own column
/// (Spark writes no empty partition directory).
fn partition_fields(
    names: &[String],
    files: &[Candidate],
    pruned: &[Vec<String>],
    infer: bool,
) -> Vec<Field> {
    let pruned: Vec<(String, Option<String>)> = pruned
        .iter()
        .filter_map(|dirs| crate::prune_dirs::partition_values(dirs).pop())
        .collect();
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut ty = DataType::Null;
            let unlisted = pruned.iter().filter(|(c, _)| c == name);
            for value in files
                .iter()
                .filter_map(|f| f.values.get(i).cloned().flatten())
                .chain(unlisted.filter_map(|(_, v)| v.clone()))
            {
                let t = if infer {
                    infer_type(&value)
                } else {
                    DataType::Utf8
                };
                ty = widen(&ty, &t);
            }
            if ty == DataType::Null {
                ty = DataType::Utf8;
            }
            Field::new(name, ty, true)
        })
        .collect()
}
