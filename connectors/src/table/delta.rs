//! Delta Lake tables through `delta_kernel`: the kernel replays `_delta_log`
//! (JSON commits, checkpoints, deletion vectors, column mapping) with its
//! default engine reading through the same object store as the rest of the
//! dataset; the data files are then planned and read by sluice's own Parquet
//! reader, row group by row group, with the deleted rows left out.
//!
//! What an incremental run needs (which commits appended, which rewrote) is
//! read from the commit files themselves: `add`/`remove` actions and their
//! `dataChange` flag tell an append from a rewrite from a compaction.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use delta_kernel::engine::arrow_conversion::TryFromKernel;
use delta_kernel::history_manager::{latest_version_as_of, HistoryCommitType};
use delta_kernel::scan::state::ScanFile;
use delta_kernel::schema::{ColumnMetadataKey, MetadataValue, StructType};
use delta_kernel::{Engine, Snapshot, SnapshotRef};
use delta_kernel_default_engine::executor::tokio::TokioMultiThreadExecutor;
use delta_kernel_default_engine::DefaultEngineBuilder;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use serde::Deserialize;
use url::Url;

use super::{
    show_ms, ColumnMapping, CommitKind, TableChanges, TableCommit, TableFile, TableKind,
    TableSnapshot, TableVersion,
};
use crate::error::{Error, Result};
use crate::store::Location;
use crate::types::Format;

/// The log directory's name.
pub const LOG_DIR: &str = "_delta_log";

/// Reads version `at` of the Delta table at `location`.
pub async fn snapshot(location: &Location, at: TableVersion) -> Result<TableSnapshot> {
    let location = location.clone();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let table = Kernel::new(&location, handle)?;
        let snap = table.snapshot_at(at)?;
        table.read(&snap)
    })
    .await
    .map_err(|e| Error::Table {
        kind: "delta",
        path: String::new(),
        reason: format!("the log reader stopped: {e}"),
    })?
}

/// What changed after version `since` up to version `at`.
pub async fn changes(location: &Location, since: i64, at: TableVersion) -> Result<TableChanges> {
    let snapshot = snapshot(location, at).await?;
    if since > snapshot.version {
        return Err(Error::NoSuchVersion {
            kind: "delta",
            path: location.url(),
            reason: format!(
                "version {since} was trained before, but the table is now at version {}: was it recreated?",
                snapshot.version
            ),
        });
    }
    let mut commits = Vec::new();
    let mut appended_paths: HashSet<Path> = HashSet::new();
    let mut rewritten_paths: HashSet<Path> = HashSet::new();
    for version in (since + 1)..=snapshot.version {
        let commit = read_commit(location, version).await?;
        let kind = commit.kind();
        if kind == CommitKind::Append {
            appended_paths.extend(commit.added.iter().cloned());
        }
        if kind == CommitKind::Rewrite {
            // A file removed and added again by one commit only got new
            // deletion vectors: its rows are no new rows.
            let removed: HashSet<&Path> = commit.removed.iter().collect();
            rewritten_paths.extend(
                commit
                    .added
                    .iter()
                    .filter(|p| !removed.contains(p))
                    .cloned(),
            );
        }
        commits.push(TableCommit {
            version,
            operation: commit.operation.clone(),
            kind,
        });
    }
    let appended = snapshot
        .files
        .iter()
        .filter(|f| appended_paths.contains(&f.path))
        .cloned()
        .collect();
    let rewritten = snapshot
        .files
        .iter()
        .filter(|f| rewritten_paths.contains(&f.path))
        .cloned()
        .collect();
    Ok(TableChanges {
        snapshot,
        commits,
        appended,
        rewritten,
    })
}

/// The kernel's view of one table: its URL and an engine over our store.
struct Kernel {
    location: Location,
    url: Url,
    engine: Arc<dyn Engine>,
}

impl Kernel {
    fn new(location: &Location, handle: tokio::runtime::Handle) -> Result<Kernel> {
        let url = table_url(location)?;
        let executor = Arc::new(TokioMultiThreadExecutor::new(handle));
        let engine = DefaultEngineBuilder::new(location.store.clone())
            .with_task_executor(executor)
            .build();
        Ok(Kernel {
            location: location.clone(),
            url,
            engine: Arc::new(engine),
        })
    }

    fn error(&self, e: impl std::fmt::Display) -> Error {
        table_error(&self.location, e.to_string())
    }

    /// The snapshot of the version asked for.
    fn snapshot_at(&self, at: TableVersion) -> Result<SnapshotRef> {
        let latest = || {
            Snapshot::builder_for(self.url.as_str())
                .build(self.engine.as_ref())
                .map_err(|e| self.error(e))
        };
        match at {
            TableVersion::Latest => latest(),
            TableVersion::Version(v) => {
                let newest = latest()?;
                if v > newest.version() {
                    return Err(Error::NoSuchVersion {
                        kind: "delta",
                        path: self.location.url(),
                        reason: format!(
                            "asked for version {v}, the latest is {}",
                            newest.version()
                        ),
                    });
                }
                Snapshot::builder_for(self.url.as_str())
                    .at_version(v)
                    .build(self.engine.as_ref())
                    .map_err(|e| self.version_error(v, e))
            }
            TableVersion::Timestamp(ms) => {
                let newest = latest()?;
                let commit = latest_version_as_of(
                    &newest,
                    self.engine.as_ref(),
                    ms,
                    HistoryCommitType::Recreatable,
                )
                .map_err(|e| Error::NoSuchVersion {
                    kind: "delta",
                    path: self.location.url(),
                    reason: format!("no version committed at or before {}: {e}", show_ms(ms)),
                })?;
                Snapshot::builder_for(self.url.as_str())
                    .at_version(commit.version)
                    .build(self.engine.as_ref())
                    .map_err(|e| self.version_error(commit.version, e))
            }
            TableVersion::SnapshotId(id) => Err(Error::InvalidOption {
                option: "--snapshot-id".to_string(),
                reason: format!(
                    "{} is a Delta table, which has versions, not snapshot ids (asked for {id}); pass --version",
                    self.location.url()
                ),
            }),
        }
    }

    fn version_error(&self, version: u64, e: impl std::fmt::Display) -> Error {
        Error::NoSuchVersion {
            kind: "delta",
            path: self.location.url(),
            reason: format!("version {version} cannot be read (its log may be cleaned up): {e}"),
        }
    }

    /// The live files of `snap` with their deletes, and its schema.
    fn read(&self, snap: &SnapshotRef) -> Result<TableSnapshot> {
        let scan = snap
            .clone()
            .scan_builder()
            .build()
            .map_err(|e| self.error(e))?;
        let logical = scan.logical_schema().clone();
        let physical = scan.physical_schema().clone();
        let layout = Layout::of(&logical, &physical).map_err(|e| self.error(e))?;
        let mut found: Vec<ScanFile> = Vec::new();
        for metadata in scan
            .scan_metadata(self.engine.as_ref())
            .map_err(|e| self.error(e))?
        {
            let metadata = metadata.map_err(|e| self.error(e))?;
            found = metadata
                .visit_scan_files(found, |files: &mut Vec<ScanFile>, file: ScanFile| {
                    files.push(file)
                })
                .map_err(|e| self.error(e))?;
        }
        let mut files = Vec::with_capacity(found.len());
        for file in found {
            let deleted = file
                .dv_info
                .get_row_indexes(self.engine.as_ref(), &self.url)
                .map_err(|e| self.error(format!("deletion vector of {}: {e}", file.path)))?
                .unwrap_or_default();
            let mut deleted = deleted;
            deleted.sort_unstable();
            deleted.dedup();
            let partition_values = layout
                .partitions
                .iter()
                .map(|(logical, physical)| {
                    file.partition_values
                        .get(physical)
                        .or_else(|| file.partition_values.get(logical))
                        .cloned()
                })
                .collect();
            files.push(TableFile {
                path: data_path(&self.location, &self.url, &file.path)?,
                size: file.size.max(0) as u64,
                format: Format::Parquet,
                rows: file.stats.as_ref().map(|s| s.num_records),
                partition_values,
                deleted,
                added_in: None,
                identity_values: Vec::new(),
            });
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let timestamp_ms = snap.get_timestamp(self.engine.as_ref()).ok();
        let properties = snap.table_properties();
        let mut format_version = "delta".to_string();
        if properties.enable_deletion_vectors == Some(true) {
            format_version.push_str(", deletion vectors");
        }
        if !layout.columns.is_identity() {
            format_version.push_str(", column mapping");
        }
        Ok(TableSnapshot {
            kind: TableKind::Delta,
            version: snap.version() as i64,
            timestamp_ms,
            format_version,
            schema: Arc::new(layout.data_schema),
            partition_fields: layout.partition_fields,
            columns: layout.columns,
            files,
            pruning: Default::default(),
        })
    }
}

/// The store path of a file the log names (relative to the table and
/// URL-encoded, or an absolute URL into the same store).
fn data_path(location: &Location, table: &Url, raw: &str) -> Result<Path> {
    let bad = |e: String| table_error(location, format!("bad file path {raw} in the log: {e}"));
    let url = match Url::parse(raw) {
        Ok(absolute) => absolute,
        Err(_) => table.join(raw).map_err(|e| bad(e.to_string()))?,
    };
    if url.scheme() != table.scheme() || url.host_str() != table.host_str() {
        return Err(table_error(
            location,
            format!(
                "the log names a data file in another store ({url}); shallow clones are not read"
            ),
        ));
    }
    if url.scheme() == "file" {
        let file = url
            .to_file_path()
            .map_err(|()| bad("not a file path".to_string()))?;
        Path::from_absolute_path(&file).map_err(|e| bad(e.to_string()))
    } else {
        Path::from_url_path(url.path()).map_err(|e| bad(e.to_string()))
    }
}

/// The URL of the table's root as the kernel wants it (a directory: ending in `/`).
fn table_url(location: &Location) -> Result<Url> {
    let text = format!("{}/", location.url().trim_end_matches('/'));
    Url::parse(&text).map_err(|e| table_error(location, format!("bad table url {text}: {e}")))
}

/// The table's columns split into data and partition columns, with the
/// physical names the data files use.
struct Layout {
    data_schema: Schema,
    partition_fields: Vec<Field>,
    /// (logical, physical) names of the partition columns.
    partitions: Vec<(String, String)>,
    columns: ColumnMapping,
}

impl Layout {
    fn of(logical: &StructType, physical: &StructType) -> std::result::Result<Layout, String> {
        let mut data = Vec::new();
        let mut partition_fields = Vec::new();
        let mut partitions = Vec::new();
        let mut columns = ColumnMapping::default();
        for field in logical.fields() {
            let physical_name =
                match field.get_config_value(&ColumnMetadataKey::ColumnMappingPhysicalName) {
                    Some(MetadataValue::String(name)) => name.clone(),
                    _ => field.name().clone(),
                };
            let arrow = Field::try_from_kernel(field)
                .map_err(|e| format!("column `{}`: {e}", field.name()))?;
            let arrow = Field::new(arrow.name(), arrow.data_type().clone(), true);
            if physical.field(&physical_name).is_some() {
                if physical_name != *field.name() {
                    columns
                        .by_physical_name
                        .push((physical_name, field.name().clone()));
                }
                data.push(arrow);
            } else {
                partitions.push((field.name().clone(), physical_name));
                partition_fields.push(arrow);
            }
        }
        Ok(Layout {
            data_schema: Schema::new(data),
            partition_fields,
            partitions,
            columns,
        })
    }
}

/// The actions of one commit file that decide what it did.
#[derive(Debug, Default)]
struct Commit {
    operation: String,
    added: Vec<Path>,
    removed: Vec<Path>,
    adds_with_change: usize,
    adds_without_change: usize,
    removes_with_change: usize,
    removes_without_change: usize,
}

impl Commit {
    fn kind(&self) -> CommitKind {
        if self.removes_with_change > 0 {
            CommitKind::Rewrite
        } else if self.adds_with_change > 0 {
            CommitKind::Append
        } else if self.adds_without_change + self.removes_without_change > 0 {
            CommitKind::Compaction
        } else {
            CommitKind::Metadata
        }
    }
}

#[derive(Deserialize)]
struct Action {
    add: Option<AddAction>,
    remove: Option<RemoveAction>,
    #[serde(rename = "commitInfo")]
    commit_info: Option<CommitInfo>,
}

#[derive(Deserialize)]
struct AddAction {
    path: String,
    #[serde(rename = "dataChange", default = "yes")]
    data_change: bool,
}

#[derive(Deserialize)]
struct RemoveAction {
    path: String,
    #[serde(rename = "dataChange", default = "yes")]
    data_change: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct CommitInfo {
    operation: Option<String>,
}

/// Reads and classifies the commit file of `version`.
async fn read_commit(location: &Location, version: i64) -> Result<Commit> {
    let path = location
        .root
        .clone()
        .join(LOG_DIR)
        .join(format!("{version:020}.json"));
    let shown = location.display(&path);
    let bytes = location
        .store
        .get(&path)
        .await
        .map_err(|e| Error::NoSuchVersion {
            kind: "delta",
            path: location.url(),
            reason: format!("the commit of version {version} ({shown}) cannot be read: {e}"),
        })?
        .bytes()
        .await
        .map_err(|e| Error::from_store(&shown, e))?;
    let url = table_url(location)?;
    let mut commit = Commit::default();
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let action: Action = serde_json::from_slice(line)
            .map_err(|e| table_error(location, format!("commit {shown}: {e}")))?;
        if let Some(info) = action.commit_info {
            commit.operation = info.operation.unwrap_or_default();
        }
        if let Some(add) = action.add {
            if add.data_change {
                commit.adds_with_change += 1;
            } else {
                commit.adds_without_change += 1;
            }
            commit.added.push(data_path(location, &url, &add.path)?);
        }
        if let Some(remove) = action.remove {
            if remove.data_change {
                commit.removes_with_change += 1;
            } else {
                commit.removes_without_change += 1;
            }
            commit
                .removed
                .push(data_path(location, &url, &remove.path)?);
        }
    }
    Ok(commit)
}

fn table_error(location: &Location, reason: String) -> Error {
    super::table_error(TableKind::Delta, location, reason)
}
