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
//!
//! This module reads and decodes (the metadata file here, the Avro of
//! manifest lists and manifests in `manifest`, position delete files); what
//! a read plans from them (which snapshot, which files, which deletes apply)
//! is decided in `plan`, from the decoded structs alone.

mod manifest;
mod metadata;
mod plan;
#[cfg(test)]
mod tests;

use std::io::Read;

use bytes::Bytes;
use futures::stream::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use self::metadata::{Snapshot, TableMetadata};
use self::plan::{Entry, ManifestFile, Table};
use super::{TableChanges, TableKind, TableSnapshot, TableVersion};
use crate::error::{Error, Result};
use crate::store::Location;

/// The metadata directory's name.
pub(crate) const METADATA_DIR: &str = "metadata";
/// The file naming the current version of a Hadoop table.
const VERSION_HINT: &str = "version-hint.text";
/// Manifests and delete files read at once.
const CONCURRENCY: usize = 8;

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
    let table = load(location).await?;
    let chosen = table.select(at)?;
    read(&table, chosen).await
}

/// What changed after snapshot `since` up to snapshot `at`: the snapshots in
/// the ancestry of `at` after `since`, oldest first.
pub async fn changes(location: &Location, since: i64, at: TableVersion) -> Result<TableChanges> {
    let table = load(location).await?;
    let (target, commits) = table.commits_since(since, at)?;
    let snapshot = read(&table, Some(target)).await?;
    Ok(plan::changes(snapshot, commits))
}

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

/// The snapshot's live data files with their deletes, and its schema: the
/// manifests and the delete files that apply are read and decoded, and the
/// plan decides the rest.
async fn read(table: &Table, snapshot: Option<&Snapshot>) -> Result<TableSnapshot> {
    let columns = table.columns(snapshot)?;
    let Some(snapshot) = snapshot else {
        tracing::info!(table = %table.location.url(), "the Iceberg table has no snapshot yet: no files");
        return Ok(table.snapshot(None, columns, Vec::new()));
    };
    let scan = table.scan(snapshot.snapshot_id, entries(table, snapshot).await?)?;
    let rows: Vec<Vec<(String, u64)>> = futures::stream::iter(
        scan.deletes()
            .iter()
            .map(|d| read_position_deletes(table, d)),
    )
    .buffered(CONCURRENCY)
    .try_collect()
    .await?;
    let files = table.live_files(scan, rows, &columns)?;
    Ok(table.snapshot(Some(snapshot), columns, files))
}

/// The manifests of a snapshot.
async fn manifests(table: &Table, snapshot: &Snapshot) -> Result<Vec<ManifestFile>> {
    if let Some(list) = &snapshot.manifest_list {
        let path = table.store_path(list);
        let bytes = get_named(table, &path, snapshot, "manifest list").await?;
        let shown = table.location.display(&path);
        return blocking(move || manifest::read_manifest_list(&bytes))
            .await
            .and_then(|r| r)
            .map_err(|e| table.error(format!("manifest list {shown}: {e}")));
    }
    let inline = snapshot.manifests.as_deref().unwrap_or_default();
    Ok(inline
        .iter()
        .map(|path| ManifestFile::inline(path))
        .collect())
}

/// Every entry of a snapshot's manifests.
async fn entries(table: &Table, snapshot: &Snapshot) -> Result<Vec<Entry>> {
    let manifests = manifests(table, snapshot).await?;
    let read: Vec<Vec<Entry>> = futures::stream::iter(manifests.into_iter().map(|m| async move {
        let path = table.store_path(&m.path);
        let bytes = get_named(table, &path, snapshot, "manifest").await?;
        let shown = table.location.display(&path);
        blocking(move || manifest::read_manifest(&bytes, &m))
            .await
            .and_then(|r| r)
            .map_err(|e| table.error(format!("manifest {shown}: {e}")))
    }))
    .buffered(CONCURRENCY)
    .try_collect()
    .await?;
    Ok(read.into_iter().flatten().collect())
}

/// The (data file, position) rows of a position delete file.
async fn read_position_deletes(table: &Table, delete: &Entry) -> Result<Vec<(String, u64)>> {
    let path = table.store_path(&delete.file_path);
    let shown = table.location.display(&path);
    let format = delete.file_format.to_ascii_uppercase();
    if format != "PARQUET" && format != "AVRO" {
        return Err(table.error(format!(
            "position delete file {shown} is in format {format}; only Parquet and Avro delete files are read"
        )));
    }
    let bytes = get(&table.location, &path).await?;
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
async fn get_named(table: &Table, path: &Path, snapshot: &Snapshot, what: &str) -> Result<Bytes> {
    match get(&table.location, path).await {
        Err(Error::NotFound { .. }) => Err(table.error(format!(
            "the {what} {} of snapshot {} is missing (expired or deleted?)",
            table.location.display(path),
            snapshot.snapshot_id
        ))),
        other => other,
    }
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
