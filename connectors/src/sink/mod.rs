//! Structured Streaming file sinks: a directory holding `_spark_metadata/` is
//! read from that log, as Spark's own reader (`MetadataLogFileIndex`) does.
//! Files in the directory that no batch committed (written by micro-batches
//! that failed or were retried) are never read; they are reported as ignored.
//!
//! Only the directory itself counts, as in Spark: a sink read through one of
//! its partition directories, or several directories at once, is listed.

mod log;
mod uri;

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::layout::names::FileClass;
use crate::listing::ListedFile;
use crate::store::Location;
use crate::types::Ignored;
use log::{Action, BatchFile};

/// The log directory of a file sink, beside its data.
pub const METADATA_DIR: &str = "_spark_metadata";

/// Why a file present in a sink's directory is not read.
pub const NOT_COMMITTED: &str = "not committed by the streaming query";

/// How many times the log is listed and read again when a batch file listed
/// vanishes before it is read (the query compacting and deleting old batches).
const READ_ATTEMPTS: usize = 3;

/// How many batch files are read at once.
const READ_CONCURRENCY: usize = 8;

/// The streaming file sink a dataset was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkInfo {
    /// The newest committed batch the dataset holds the files of (`None`: the
    /// log holds no batch yet).
    pub batch: Option<u64>,
}

/// Whether the directory at `location` is a streaming file sink: it holds a
/// `_spark_metadata` directory itself (one in a parent does not count).
pub async fn is_sink(location: &Location) -> Result<bool> {
    match location
        .store
        .list_with_delimiter(Some(&location.root))
        .await
    {
        Ok(root) => Ok(root
            .common_prefixes
            .iter()
            .any(|p| p.filename() == Some(METADATA_DIR))),
        Err(e) => match Error::from_store(location.url(), e) {
            err if err.kind() == ErrorKind::NotFound => Ok(false),
            err => Err(err),
        },
    }
}

/// [`is_sink`] from a listing of the root already taken.
pub fn is_sink_listed(root: &crate::listing::RootListing) -> bool {
    root.common_prefixes()
        .iter()
        .any(|p| p.filename() == Some(METADATA_DIR))
}

/// The newest batch the sink at `location` committed, from a listing of its
/// log (no file is read); `None` when there is no `_spark_metadata` directory
/// or no batch in it yet.
pub async fn newest_batch(location: &Location) -> Result<Option<u64>> {
    Ok(log::newest(&batch_files(location).await?))
}

/// The sink's log directory.
fn log_dir(location: &Location) -> Path {
    location.root.clone().join(METADATA_DIR)
}

/// The batch files in the log directory, sorted; none when it does not exist.
async fn batch_files(location: &Location) -> Result<Vec<BatchFile>> {
    let dir = log_dir(location);
    let listed = match location.store.list_with_delimiter(Some(&dir)).await {
        Ok(listed) => listed,
        Err(e) => {
            return match Error::from_store(location.display(&dir), e) {
                Error::NotFound { .. } => Ok(Vec::new()),
                err => Err(err),
            }
        }
    };
    let mut found: Vec<BatchFile> = listed
        .objects
        .iter()
        .filter_map(|o| o.location.filename().and_then(BatchFile::parse))
        .collect();
    found.sort();
    Ok(found)
}

/// Where the log names a file: the batch file's URL and the line.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    /// The batch file.
    pub file: String,
    /// The 1-based line.
    pub line: usize,
}

/// What the log says of the sink's files as of one batch.
#[derive(Debug, Default)]
pub(crate) struct Committed {
    /// The batch read up to.
    pub batch: u64,
    /// The newest batch in the log.
    pub newest: u64,
    /// Files committed by the batches read and not deleted since.
    pub files: BTreeMap<Path, Source>,
    /// Files committed up to the batch a caller already read (not read again).
    pub earlier: HashSet<Path>,
    /// Files the log deleted, up to the batch read.
    pub deleted: HashSet<Path>,
}

/// The files committed by batches in `(after, upto]` (all up to `upto` when
/// `after` is `None`), minus those the log deleted up to `upto`.
pub(crate) async fn committed(
    location: &Location,
    after: Option<u64>,
    upto: u64,
) -> Result<Committed> {
    if let Some(after) = after.filter(|&a| a > upto) {
        return Err(Error::InvalidOption {
            option: "batches".to_string(),
            reason: format!("batch {after} is after batch {upto}"),
        });
    }
    let mut attempt = 1;
    loop {
        let found = batch_files(location).await?;
        match read_committed(location, &found, after, upto).await {
            Err(Error::NotFound { path }) if attempt < READ_ATTEMPTS => {
                tracing::debug!(%path, "a batch file vanished while reading the sink log; reading it again");
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// [`committed`] on one listing of the log.
async fn read_committed(
    location: &Location,
    found: &[BatchFile],
    after: Option<u64>,
    upto: u64,
) -> Result<Committed> {
    let newest = log::newest(found);
    if newest.is_none_or(|n| n < upto) {
        return Err(sink_error(
            location.display(&log_dir(location)),
            None,
            match newest {
                Some(n) => format!("no batch {upto}: the newest batch is {n}"),
                None => format!("no batch {upto}: the log holds no batch"),
            },
        ));
    }
    let now = files_for(location, found, upto, None)?;
    let before = match after {
        Some(a) => Some(files_for(location, found, a, Some(upto))?),
        None => None,
    };
    let wanted: Vec<BatchFile> = now.iter().chain(before.iter().flatten()).copied().collect();
    let texts = read_batch_files(location, &wanted).await?;
    let now = replay(location, &now, &texts)?;
    let earlier = match before {
        Some(files) => replay(location, &files, &texts)?
            .files
            .into_keys()
            .collect(),
        None => HashSet::new(),
    };
    Ok(Committed {
        batch: upto,
        newest: newest.unwrap_or(upto),
        files: now
            .files
            .into_iter()
            .filter(|(path, _)| !earlier.contains(path))
            .collect(),
        earlier,
        deleted: now.deleted,
    })
}

/// The batch files holding the state after batch `at`, or the error naming
/// the one that is missing. `reading` is the batch a caller reads up to, when
/// `at` is the earlier batch it already has.
fn files_for(
    location: &Location,
    found: &[BatchFile],
    at: u64,
    reading: Option<u64>,
) -> Result<Vec<BatchFile>> {
    log::files_for(found, at).map_err(|missing| {
        let compaction = found
            .iter()
            .filter(|f| f.compact && f.id <= at)
            .map(|f| format!(" after {}", f.name()))
            .next_back()
            .unwrap_or_default();
        let reason = match reading {
            None => format!(
                "missing: batch {} is needed to read up to batch {at}{compaction}",
                missing.id
            ),
            Some(upto) => format!(
                "missing: the files of batches after {at} up to {upto} cannot be told apart \
                 from earlier ones without it (the query deletes old batches of its log)"
            ),
        };
        sink_error(batch_url(location, &missing), None, reason)
    })
}

/// The URL of a batch file.
fn batch_url(location: &Location, file: &BatchFile) -> String {
    location.display(&log_dir(location).join(file.name()))
}

/// Reads the given batch files (each once).
async fn read_batch_files(
    location: &Location,
    files: &[BatchFile],
) -> Result<HashMap<BatchFile, Bytes>> {
    let unique: HashSet<BatchFile> = files.iter().copied().collect();
    stream::iter(unique.into_iter().map(|file| async move {
        let path = log_dir(location).join(file.name());
        let shown = location.display(&path);
        let bytes = location
            .store
            .get(&path)
            .await
            .map_err(|e| Error::from_store(&shown, e))?
            .bytes()
            .await
            .map_err(|e| Error::from_store(&shown, e))?;
        Ok::<_, Error>((file, bytes))
    }))
    .buffer_unordered(READ_CONCURRENCY)
    .try_collect()
    .await
}

/// The files live after replaying `files` in order, and those deleted.
#[derive(Default)]
struct Replayed {
    files: BTreeMap<Path, Source>,
    deleted: HashSet<Path>,
}

/// Replays batch files: every file added and not deleted by any of them (as
/// Spark compacts: a delete removes the path whatever its order), directories
/// left out, each path once.
fn replay(
    location: &Location,
    files: &[BatchFile],
    texts: &HashMap<BatchFile, Bytes>,
) -> Result<Replayed> {
    let mut out = Replayed::default();
    let mut added = Vec::new();
    for file in files {
        let shown = batch_url(location, file);
        let bytes = texts.get(file).cloned().unwrap_or_default();
        let entries = log::parse(&bytes)
            .map_err(|bad| sink_error(shown.clone(), Some(bad.line), bad.reason))?;
        for entry in entries {
            let path = data_path(location, &shown, &entry)?;
            match entry.action {
                Action::Delete => {
                    out.deleted.insert(path);
                }
                Action::Add if entry.is_dir => {}
                Action::Add => added.push((
                    path,
                    Source {
                        file: shown.clone(),
                        line: entry.line,
                    },
                )),
            }
        }
    }
    for (path, source) in added {
        if !out.deleted.contains(&path) {
            out.files.entry(path).or_insert(source);
        }
    }
    Ok(out)
}

/// The store path of an entry's file, which must lie in the sink's directory.
fn data_path(location: &Location, shown: &str, entry: &log::Entry) -> Result<Path> {
    let error = |reason: String| sink_error(shown.to_string(), Some(entry.line), reason);
    let path = uri::store_path(location.base(), &entry.path).map_err(error)?;
    let inside = path
        .prefix_match(&location.root)
        .is_some_and(|mut rest| rest.next().is_some());
    match inside {
        true => Ok(path),
        false => Err(error(format!(
            "{} lies outside the sink directory {} (was the directory moved or copied?)",
            entry.path,
            location.url()
        ))),
    }
}

/// Sorts the data files of a listing of the sink: those committed are kept;
/// the others are reported as ignored (files committed up to the batch a
/// caller already read are dropped quietly). A committed file that the
/// listing lacks fails, naming the log line that records it.
pub(crate) fn committed_listing(
    location: &Location,
    mut committed: Committed,
    files: Vec<ListedFile>,
    ignored: &mut Vec<Ignored>,
) -> Result<Vec<ListedFile>> {
    let mut out = Vec::new();
    for file in files {
        if file.class != FileClass::Data {
            continue;
        }
        let path = &file.meta.location;
        let reason = if committed.files.remove(path).is_some() {
            if file.meta.size > 0 {
                out.push(file);
                continue;
            }
            "zero bytes".to_string()
        } else if committed.deleted.contains(path) {
            "deleted by the streaming query".to_string()
        } else if committed.earlier.contains(path) {
            continue;
        } else if committed.batch < committed.newest {
            format!("{NOT_COMMITTED} by batch {}", committed.batch)
        } else {
            NOT_COMMITTED.to_string()
        };
        ignored.push(Ignored {
            path: location.display(path),
            reason,
        });
    }
    if let Some((path, source)) = committed.files.into_iter().next() {
        return Err(sink_error(
            source.file,
            Some(source.line),
            format!(
                "{} is committed but not in the directory (deleted, or hidden from listings)",
                location.display(&path)
            ),
        ));
    }
    Ok(out)
}

/// The error for a sink log that cannot be read as it should.
fn sink_error(path: String, line: Option<usize>, reason: String) -> Error {
    Error::SinkLog { path, line, reason }
}

#[cfg(test)]
mod tests;
