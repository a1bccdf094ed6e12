//! Iceberg tables, read from their metadata per the Iceberg table spec: the
//! metadata JSON, its snapshots, manifest lists and manifests (Avro, decoded
//! by arrow-avro), and position delete files (Parquet or Avro).
//!
//! The current metadata file is the one `metadata/version-hint.text` names
//! (Hadoop tables), else the highest-numbered `metadata/*.metadata.json`, or
//! the metadata file the location names itself. Paths in the metadata are
//! absolute URIs written where the table was then: each is read at its place
//! under the table's root now (the part after the metadata's `location`), so
//! a table copied to another store or directory still reads.
//!
//! Iceberg data files hold every column of the table, identity partition
//! sources included, so a snapshot has no partition fields; renamed columns
//! are found in old files by their Parquet field ids. Each file carries its
//! identity partition values from its manifest entry instead, which
//! `--where` prunes on ([`super::Pruning`]).

mod manifest;
mod metadata;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{StreamExt, TryStreamExt};
use object_store::path::{Path, PathPart};
use object_store::ObjectStoreExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use self::manifest::{
    Entry, ManifestFile, CONTENT_DATA, CONTENT_EQUALITY_DELETES, CONTENT_POSITION_DELETES,
    STATUS_DELETED,
};
use self::metadata::{Snapshot, TableMetadata};
use super::{
    show_ms, ColumnMapping, CommitKind, Pruning, TableChanges, TableCommit, TableFile, TableKind,
    TableSnapshot, TableVersion,
};
use crate::error::{Error, Result};
use crate::store::Location;
use crate::types::Format;

/// The metadata directory's name.
pub(crate) const METADATA_DIR: &str = "metadata";
/// The file naming the current version of a Hadoop table.
const VERSION_HINT: &str = "version-hint.text";
/// Manifests and delete files read at once.
const CONCURRENCY: usize = 8;
/// Snapshot ids named in a message about a missing one.
const IDS_SHOWN: usize = 5;

/// Whether `path` names an Iceberg metadata file (`*.metadata.json`).
pub fn is_metadata_file(path: &Path) -> bool {
    path.filename()
        .is_some_and(|name| name.ends_with(".metadata.json"))
}

/// Whether the `metadata` directory of the table at `location` holds at
/// least one `*.metadata.json` (what makes it an Iceberg table).
pub(crate) async fn has_metadata(location: &Location) -> bool {
    let dir = location.root.clone().join(METADATA_DIR);
    match location.store.list_with_delimiter(Some(&dir)).await {
        Ok(listed) => listed.objects.iter().any(|o| is_metadata_file(&o.location)),
        Err(_) => false,
    }
}

/// Reads snapshot `at` of the Iceberg table at `location`.
pub async fn snapshot(location: &Location, at: TableVersion) -> Result<TableSnapshot> {
    let table = Table::load(location).await?;
    let chosen = table.select(at)?;
    table.read(chosen).await
}

/// What changed after snapshot `since` up to snapshot `at`: the snapshots in
/// the ancestry of `at` after `since`, oldest first.
pub async fn changes(location: &Location, since: i64, at: TableVersion) -> Result<TableChanges> {
    let table = Table::load(location).await?;
    let Some(target) = table.select(at)? else {
        return Err(Error::NoSuchVersion {
            kind: "iceberg",
            path: location.url(),
            reason: format!(
                "snapshot {since} was trained before, but the table has no snapshot now: was it recreated?"
            ),
        });
    };
    let ancestry = table.metadata.ancestry(target.snapshot_id);
    let Some(newer) = ancestry.iter().position(|s| s.snapshot_id == since) else {
        return Err(Error::NoSuchVersion {
            kind: "iceberg",
            path: location.url(),
            reason: format!(
                "snapshot {since} was trained before, but it is not an ancestor of snapshot {} \
                 (the table was rolled back or recreated, or the snapshot expired)",
                target.snapshot_id
            ),
        });
    };
    let commits: Vec<TableCommit> = ancestry[..newer]
        .iter()
        .rev()
        .map(|s| TableCommit {
            version: s.snapshot_id,
            operation: s.operation().to_string(),
            kind: commit_kind(s.operation()),
        })
        .collect();
    let appends: HashSet<i64> = commits
        .iter()
        .filter(|c| c.kind == CommitKind::Append)
        .map(|c| c.version)
        .collect();
    let rewrites: HashSet<i64> = commits
        .iter()
        .filter(|c| c.kind == CommitKind::Rewrite)
        .map(|c| c.version)
        .collect();
    let snapshot = table.read(Some(target)).await?;
    let added_by = |ids: &HashSet<i64>| -> Vec<TableFile> {
        snapshot
            .files
            .iter()
            .filter(|f| f.added_in.is_some_and(|id| ids.contains(&id)))
            .cloned()
            .collect()
    };
    let appended = added_by(&appends);
    let rewritten = added_by(&rewrites);
    Ok(TableChanges {
        snapshot,
        commits,
        appended,
        rewritten,
    })
}

/// What a snapshot's operation did to the data.
fn commit_kind(operation: &str) -> CommitKind {
    match operation {
        "append" => CommitKind::Append,
        "replace" => CommitKind::Compaction,
        "overwrite" | "delete" => CommitKind::Rewrite,
        _ => CommitKind::Metadata,
    }
}

/// A table's current metadata, and where its files are now.
struct Table {
    location: Location,
    /// The table's directory in the store (where its `location` now is).
    root: Path,
    /// The metadata file read.
    metadata_path: Path,
    metadata: TableMetadata,
}

/// A live data file while the deletes are gathered.
struct DataFile {
    entry: Entry,
    path: Path,
    deleted: Vec<u64>,
}

impl Table {
    /// Finds and reads the current metadata file of the table at `location`.
    async fn load(location: &Location) -> Result<Table> {
        let (metadata_path, root) = if is_metadata_file(&location.root) {
            (location.root.clone(), root_of_metadata_file(&location.root))
        } else {
            (current_metadata(location).await?, location.root.clone())
        };
        let shown = location.display(&metadata_path);
        let bytes = get(location, &metadata_path).await?;
        let bytes = gunzip(&bytes).map_err(|e| {
            table_error(
                location,
                format!("metadata file {shown} cannot be unpacked: {e}"),
            )
        })?;
        let metadata = TableMetadata::parse(&bytes)
            .map_err(|e| table_error(location, format!("metadata file {shown}: {e}")))?;
        tracing::debug!(metadata = %shown, format_version = metadata.format_version, "iceberg metadata");
        Ok(Table {
            location: location.clone(),
            root,
            metadata_path,
            metadata,
        })
    }

    fn error(&self, reason: String) -> Error {
        table_error(&self.location, reason)
    }

    fn no_such(&self, reason: String) -> Error {
        Error::NoSuchVersion {
            kind: "iceberg",
            path: self.location.url(),
            reason,
        }
    }

    /// The snapshot asked for; `None` for the latest of a table without one.
    fn select(&self, at: TableVersion) -> Result<Option<&Snapshot>> {
        let metadata = &self.metadata;
        match at {
            TableVersion::Latest => match metadata.current_snapshot_id.filter(|id| *id != -1) {
                None => Ok(None),
                Some(id) => metadata.snapshot(id).map(Some).ok_or_else(|| {
                    self.error(format!(
                        "the current snapshot {id} is not among the table's snapshots in {}",
                        self.location.display(&self.metadata_path)
                    ))
                }),
            },
            TableVersion::SnapshotId(id) => match metadata.snapshot(id) {
                Some(s) => Ok(Some(s)),
                None => Err(self.no_such(format!(
                    "there is no snapshot {id}; {}",
                    self.known_snapshots()
                ))),
            },
            TableVersion::Timestamp(ms) => match metadata.snapshot_as_of(ms) {
                Some(id) => match metadata.snapshot(id) {
                    Some(s) => Ok(Some(s)),
                    None => Err(self.no_such(format!(
                        "snapshot {id} was current at {} but has expired; {}",
                        show_ms(ms),
                        self.known_snapshots()
                    ))),
                },
                None => Err(self.no_such(format!(
                    "no snapshot was committed at or before {}; {}",
                    show_ms(ms),
                    self.first_commit()
                ))),
            },
            TableVersion::Version(v) => Err(Error::InvalidOption {
                option: "--version".to_string(),
                reason: format!(
                    "{} is an Iceberg table, which has snapshot ids, not versions (asked for {v}); pass --snapshot-id",
                    self.location.url()
                ),
            }),
        }
    }

    /// A few of the table's snapshot ids, newest first, for messages.
    fn known_snapshots(&self) -> String {
        let mut snapshots: Vec<&Snapshot> = self.metadata.snapshots.iter().collect();
        if snapshots.is_empty() {
            return "the table has no snapshots".to_string();
        }
        snapshots.sort_by_key(|s| std::cmp::Reverse(s.timestamp_ms));
        let ids: Vec<String> = snapshots
            .iter()
            .take(IDS_SHOWN)
            .map(|s| format!("{} ({})", s.snapshot_id, show_ms(s.timestamp_ms)))
            .collect();
        let more = snapshots.len().saturating_sub(IDS_SHOWN);
        let more = if more > 0 {
            format!(" and {more} older")
        } else {
            String::new()
        };
        format!("its snapshots are {}{more}", ids.join(", "))
    }

    /// When the table's first kept snapshot was committed, for messages.
    fn first_commit(&self) -> String {
        let first = self
            .metadata
            .snapshot_log
            .iter()
            .map(|e| e.timestamp_ms)
            .chain(self.metadata.snapshots.iter().map(|s| s.timestamp_ms))
            .min();
        match first {
            Some(ms) => format!("the first was committed at {}", show_ms(ms)),
            None => "the table has no snapshots".to_string(),
        }
    }

    /// The snapshot's live data files with their deletes, and its schema.
    async fn read(&self, snapshot: Option<&Snapshot>) -> Result<TableSnapshot> {
        let schema = self.metadata.schema_for(snapshot).ok_or_else(|| {
            self.error(format!(
                "metadata file {} has no schema",
                self.location.display(&self.metadata_path)
            ))
        })?;
        let (schema, by_field_id) = schema.to_arrow().map_err(|e| self.error(e))?;
        let pruning = self.pruning(&schema, &by_field_id);
        let format_version = self.metadata.format_version;
        let columns = ColumnMapping {
            by_field_id,
            by_physical_name: Vec::new(),
        };
        let Some(snapshot) = snapshot else {
            tracing::info!(table = %self.location.url(), "the Iceberg table has no snapshot yet: no files");
            return Ok(TableSnapshot {
                kind: TableKind::Iceberg,
                version: -1,
                timestamp_ms: None,
                format_version: format!("iceberg format v{format_version}, no snapshot yet"),
                schema: Arc::new(schema),
                partition_fields: Vec::new(),
                columns,
                files: Vec::new(),
                pruning,
            });
        };
        let files = self.live_files(snapshot, &columns.by_field_id).await?;
        Ok(TableSnapshot {
            kind: TableKind::Iceberg,
            version: snapshot.snapshot_id,
            timestamp_ms: Some(snapshot.timestamp_ms),
            format_version: format!(
                "iceberg format v{format_version}, snapshot {}",
                snapshot.snapshot_id
            ),
            schema: Arc::new(schema),
            partition_fields: Vec::new(),
            columns,
            files,
            pruning,
        })
    }

    /// The columns the table's partition specs partition by identity (what
    /// `--where` prunes on) and those only other transforms partition.
    fn pruning(&self, schema: &arrow::datatypes::Schema, names: &[(i32, String)]) -> Pruning {
        let mut specs: Vec<i32> = self
            .metadata
            .partition_specs
            .iter()
            .map(|s| s.spec_id)
            .collect();
        if specs.is_empty() && self.metadata.partition_spec.is_some() {
            specs.push(0);
        }
        let mut pruning = Pruning::default();
        let mut other: Vec<(String, String)> = Vec::new();
        for field in specs
            .into_iter()
            .filter_map(|id| self.metadata.spec_fields(id))
            .flatten()
        {
            let Some((_, name)) = names.iter().find(|(id, _)| *id == field.source_id) else {
                continue;
            };
            if field.transform == "identity" {
                if !pruning.identity.iter().any(|f| f.name() == name) {
                    if let Ok(column) = schema.field_with_name(name) {
                        pruning.identity.push(column.clone());
                    }
                }
            } else if field.transform != "void"
                && !other
                    .iter()
                    .any(|(n, t)| n == name && *t == field.transform)
            {
                other.push((name.clone(), field.transform.clone()));
            }
        }
        other.retain(|(name, _)| !pruning.identity.iter().any(|f| f.name() == name));
        pruning.transformed = other;
        pruning
    }

    /// A manifest entry's identity partition values, by source column.
    fn identity_values(
        &self,
        names: &[(i32, String)],
        entry: &Entry,
    ) -> Vec<(String, Option<String>)> {
        let Some(fields) = self.metadata.spec_fields(entry.spec_id) else {
            return Vec::new();
        };
        let by_position = fields.len() == entry.partition.len();
        fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.transform == "identity")
            .filter_map(|(i, f)| {
                let column = names.iter().find(|(id, _)| *id == f.source_id)?.1.clone();
                let value = if by_position {
                    entry.partition.get(i).map(|(_, v)| v.clone())
                } else {
                    entry
                        .partition
                        .iter()
                        .find(|(n, _)| *n == f.name)
                        .map(|(_, v)| v.clone())
                }?;
                Some((column, value))
            })
            .collect()
    }

    /// The manifests of a snapshot.
    async fn manifests(&self, snapshot: &Snapshot) -> Result<Vec<ManifestFile>> {
        if let Some(list) = &snapshot.manifest_list {
            let path = self.store_path(list);
            let bytes = self.get_named(&path, snapshot, "manifest list").await?;
            let shown = self.location.display(&path);
            return blocking(move || manifest::read_manifest_list(&bytes))
                .await
                .and_then(|r| r)
                .map_err(|e| self.error(format!("manifest list {shown}: {e}")));
        }
        let inline = snapshot.manifests.as_deref().unwrap_or_default();
        Ok(inline
            .iter()
            .map(|path| ManifestFile {
                path: path.clone(),
                spec_id: 0,
                content: CONTENT_DATA,
                sequence_number: 0,
                added_snapshot_id: None,
            })
            .collect())
    }

    /// Every entry of a snapshot's manifests.
    async fn entries(&self, snapshot: &Snapshot) -> Result<Vec<Entry>> {
        let manifests = self.manifests(snapshot).await?;
        let read: Vec<Vec<Entry>> =
            futures::stream::iter(manifests.into_iter().map(|m| async move {
                let path = self.store_path(&m.path);
                let bytes = self.get_named(&path, snapshot, "manifest").await?;
                let shown = self.location.display(&path);
                blocking(move || manifest::read_manifest(&bytes, &m))
                    .await
                    .and_then(|r| r)
                    .map_err(|e| self.error(format!("manifest {shown}: {e}")))
            }))
            .buffered(CONCURRENCY)
            .try_collect()
            .await?;
        Ok(read.into_iter().flatten().collect())
    }

    /// The live data files of a snapshot, with the rows its position deletes
    /// remove from each.
    async fn live_files(
        &self,
        snapshot: &Snapshot,
        names: &[(i32, String)],
    ) -> Result<Vec<TableFile>> {
        let id = snapshot.snapshot_id;
        let mut data: Vec<DataFile> = Vec::new();
        let mut by_path: HashMap<Path, usize> = HashMap::new();
        let mut position_deletes: Vec<Entry> = Vec::new();
        let mut equality_deletes: Vec<Entry> = Vec::new();
        for entry in self.entries(snapshot).await? {
            if entry.status == STATUS_DELETED {
                continue;
            }
            match entry.content {
                CONTENT_DATA => {
                    let path = self.store_path(&entry.file_path);
                    if by_path.contains_key(&path) {
                        continue;
                    }
                    by_path.insert(path.clone(), data.len());
                    data.push(DataFile {
                        entry,
                        path,
                        deleted: Vec::new(),
                    });
                }
                CONTENT_POSITION_DELETES => position_deletes.push(entry),
                CONTENT_EQUALITY_DELETES => equality_deletes.push(entry),
                other => {
                    return Err(self.error(format!(
                        "snapshot {id} lists {} with content {other}, which is not known",
                        entry.file_path
                    )))
                }
            }
        }
        self.refuse_equality_deletes(id, &data, &equality_deletes)?;
        if let Some(dv) = position_deletes
            .iter()
            .find(|d| d.file_format.eq_ignore_ascii_case("PUFFIN"))
        {
            return Err(self.error(format!(
                "snapshot {id} has deletion vectors (format v3, e.g. {}), which are not read",
                self.location.display(&self.store_path(&dv.file_path))
            )));
        }
        let applicable: Vec<&Entry> = position_deletes
            .iter()
            .filter(|d| {
                data.iter()
                    .any(|f| self.position_delete_applies(d, &f.entry))
            })
            .collect();
        let read: Vec<(&Entry, Vec<(String, u64)>)> = futures::stream::iter(
            applicable
                .into_iter()
                .map(|d| async move { Ok::<_, Error>((d, self.read_position_deletes(d).await?)) }),
        )
        .buffered(CONCURRENCY)
        .try_collect()
        .await?;
        let mut removed = 0usize;
        for (delete, rows) in read {
            let mut last: Option<(String, Option<usize>)> = None;
            for (file_path, pos) in rows {
                let target = match &last {
                    Some((p, target)) if *p == file_path => *target,
                    _ => {
                        let target = by_path.get(&self.store_path(&file_path)).copied();
                        last = Some((file_path, target));
                        target
                    }
                };
                if let Some(i) = target {
                    if self.position_delete_applies(delete, &data[i].entry) {
                        data[i].deleted.push(pos);
                        removed += 1;
                    }
                }
            }
        }
        let mut files = Vec::with_capacity(data.len());
        for mut file in data {
            file.deleted.sort_unstable();
            file.deleted.dedup();
            let format = match file.entry.file_format.to_ascii_uppercase().as_str() {
                "PARQUET" => Format::Parquet,
                "ORC" => Format::Orc,
                "AVRO" => Format::Avro,
                other => {
                    return Err(self.error(format!(
                        "data file {} is in format {other}, which is not read",
                        file.entry.file_path
                    )))
                }
            };
            files.push(TableFile {
                path: file.path,
                size: file.entry.file_size.max(0) as u64,
                format,
                rows: u64::try_from(file.entry.record_count).ok(),
                partition_values: Vec::new(),
                deleted: file.deleted,
                added_in: file.entry.snapshot_id,
                identity_values: self.identity_values(names, &file.entry),
            });
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        tracing::debug!(
            snapshot = id,
            files = files.len(),
            deleted_rows = removed,
            "iceberg snapshot read"
        );
        Ok(files)
    }

    /// Whether a position delete file applies to a data file: a data
    /// sequence number not after the delete's, and the same partition spec
    /// (or an unpartitioned delete), and the data file it names if it names one.
    fn position_delete_applies(&self, delete: &Entry, data: &Entry) -> bool {
        data.sequence_number <= delete.sequence_number
            && (data.spec_id == delete.spec_id || self.metadata.is_unpartitioned(delete.spec_id))
            && delete
                .referenced_data_file
                .as_ref()
                .is_none_or(|r| self.store_path(r) == self.store_path(&data.file_path))
    }

    /// Fails when an equality delete file applies to a live data file (one
    /// with an earlier data sequence number in the same partition spec).
    fn refuse_equality_deletes(&self, id: i64, data: &[DataFile], deletes: &[Entry]) -> Result<()> {
        let applying: Vec<&Entry> = deletes
            .iter()
            .filter(|d| {
                data.iter().any(|f| {
                    f.entry.sequence_number < d.sequence_number
                        && (f.entry.spec_id == d.spec_id
                            || self.metadata.is_unpartitioned(d.spec_id))
                })
            })
            .collect();
        match applying.first() {
            None => Ok(()),
            Some(first) => Err(self.error(format!(
                "snapshot {id} has equality deletes ({} file(s), e.g. {}), which are not applied; \
                 compact the table (rewrite_data_files) or read an older snapshot",
                applying.len(),
                self.location.display(&self.store_path(&first.file_path))
            ))),
        }
    }

    /// The (data file, position) rows of a position delete file.
    async fn read_position_deletes(&self, delete: &Entry) -> Result<Vec<(String, u64)>> {
        let path = self.store_path(&delete.file_path);
        let shown = self.location.display(&path);
        let format = delete.file_format.to_ascii_uppercase();
        if format != "PARQUET" && format != "AVRO" {
            return Err(self.error(format!(
                "position delete file {shown} is in format {format}; only Parquet and Avro delete files are read"
            )));
        }
        let bytes = get(&self.location, &path).await?;
        let avro = format == "AVRO";
        let decoded = blocking(move || {
            let batches = if avro {
                manifest::decode_avro(&bytes)?.0
            } else {
                parquet_columns(bytes, &["file_path", "pos"])?
            };
            manifest::position_deletes(&batches)
        })
        .await
        .and_then(|r| r);
        decoded.map_err(|e| Error::corrupt(&shown, format.to_ascii_lowercase(), e))
    }

    /// Reads a file the metadata names, saying which snapshot needs it when it is gone.
    async fn get_named(&self, path: &Path, snapshot: &Snapshot, what: &str) -> Result<Bytes> {
        match get(&self.location, path).await {
            Err(Error::NotFound { .. }) => Err(self.error(format!(
                "the {what} {} of snapshot {} is missing (expired or deleted?)",
                self.location.display(path),
                snapshot.snapshot_id
            ))),
            other => other,
        }
    }

    /// Where a file the metadata names (an absolute URI, written when the
    /// table was at its metadata's `location`) is in the store now.
    fn store_path(&self, uri: &str) -> Path {
        let path = uri_path(uri);
        let base = uri_path(&self.metadata.location).trim_end_matches('/');
        if !base.is_empty() {
            if let Some(rest) = path.strip_prefix(base).and_then(|r| r.strip_prefix('/')) {
                return join(&self.root, rest);
            }
        }
        join(&Path::default(), path)
    }
}

/// The path part of a URI (`file:/a/b`, `file:///a/b`, `s3://bucket/a/b`,
/// `hdfs://nn:8020/a/b` → `/a/b`), or the string itself when it has no scheme.
fn uri_path(uri: &str) -> &str {
    if let Some((_, rest)) = uri.split_once("://") {
        return rest.find('/').map_or("", |i| &rest[i..]);
    }
    match uri.split_once(':') {
        Some((scheme, rest))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.') =>
        {
            rest
        }
        _ => uri,
    }
}

/// `base` with the `/`-separated parts of `rest` appended, each taken as
/// the file's own name (as a listing of the store names it: a `%` in a
/// partition directory stays a `%`).
fn join(base: &Path, rest: &str) -> Path {
    rest.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .fold(base.clone(), |path, part| {
            path.join(PathPart::parse(part).unwrap_or_else(|_| PathPart::from(part)))
        })
}

/// The table directory of a metadata file: the parent of its `metadata`
/// directory, or its own directory when that is not named `metadata`.
fn root_of_metadata_file(file: &Path) -> Path {
    let parts: Vec<_> = file.parts().collect();
    let dir = &parts[..parts.len().saturating_sub(1)];
    let dir = match dir.last() {
        Some(last) if last.as_ref() == METADATA_DIR => &dir[..dir.len() - 1],
        _ => dir,
    };
    Path::from_iter(dir.iter().cloned())
}

/// The version number in a metadata file's name (`v3.metadata.json`,
/// `00003-<uuid>.metadata.json`, `00003-<uuid>.gz.metadata.json`).
fn metadata_version(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".metadata.json")?;
    let stem = stem.strip_suffix(".gz").unwrap_or(stem);
    if let Some(n) = stem.strip_prefix('v') {
        if let Ok(n) = n.parse() {
            return Some(n);
        }
    }
    stem.split('-').next()?.parse().ok()
}

/// The current metadata file of the table directory at `location`.
async fn current_metadata(location: &Location) -> Result<Path> {
    let dir = location.root.clone().join(METADATA_DIR);
    if let Some(path) = hinted_metadata(location, &dir).await {
        return Ok(path);
    }
    let listed = location
        .store
        .list_with_delimiter(Some(&dir))
        .await
        .map_err(|e| Error::from_store(location.display(&dir), e))?;
    listed
        .objects
        .iter()
        .filter(|o| is_metadata_file(&o.location))
        .max_by_key(|o| {
            (
                o.location.filename().and_then(metadata_version),
                o.last_modified,
            )
        })
        .map(|o| o.location.clone())
        .ok_or_else(|| {
            table_error(
                location,
                format!("{} holds no *.metadata.json", location.display(&dir)),
            )
        })
}

/// The metadata file `version-hint.text` names (or a newer one beside it:
/// the hint is written after the metadata), if there is a hint.
async fn hinted_metadata(location: &Location, dir: &Path) -> Option<Path> {
    let hint = get(location, &dir.clone().join(VERSION_HINT)).await.ok()?;
    let mut version: u64 = std::str::from_utf8(&hint).ok()?.trim().parse().ok()?;
    let file = |v: u64| dir.clone().join(format!("v{v}.metadata.json").as_str());
    location.store.head(&file(version)).await.ok()?;
    while location.store.head(&file(version + 1)).await.is_ok() {
        version += 1;
    }
    Some(file(version))
}

/// The whole of an object.
async fn get(location: &Location, path: &Path) -> Result<Bytes> {
    let shown = location.display(path);
    location
        .store
        .get(path)
        .await
        .map_err(|e| Error::from_store(&shown, e))?
        .bytes()
        .await
        .map_err(|e| Error::from_store(&shown, e))
}

/// The bytes, unpacked when they are gzip (`*.gz.metadata.json`).
fn gunzip(bytes: &Bytes) -> std::io::Result<Bytes> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes.clone());
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut out)?;
    Ok(Bytes::from(out))
}

/// Some top-level columns of a Parquet file held in memory.
fn parquet_columns(
    bytes: Bytes,
    names: &[&str],
) -> std::result::Result<Vec<arrow::record_batch::RecordBatch>, String> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| e.to_string())?;
    let roots: Vec<usize> = builder
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| names.contains(&f.name().as_str()))
        .map(|(i, _)| i)
        .collect();
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    builder
        .with_projection(mask)
        .build()
        .map_err(|e| e.to_string())?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
}

/// Runs CPU-bound decoding off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::result::Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("the decoder stopped: {e}"))
}

fn table_error(location: &Location, reason: String) -> Error {
    super::table_error(TableKind::Iceberg, location, reason)
}
