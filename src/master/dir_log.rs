//! The job's state in a local directory: `job.json`, an append-only journal
//! synced on every append, and a snapshot that lets older journals go.
//!
//! ```text
//! STATE/lock                held with flock(2) by the one process using the state
//! STATE/job.json            the job (splits, plan, queue settings, options)
//! STATE/snapshot.json       {generation, queue}: everything before journal-<generation>
//! STATE/journal.jsonl       generation 0
//! STATE/journal-<g>.jsonl   generation g
//! STATE/finished.json       `sluice train`: the summary, once its run ended
//! ```
//!
//! Every file created, renamed or removed here is followed by a sync of the
//! directory, so that what a reply depended on is still there after a crash.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::dir_lock::DirLock;
use super::journal::{sync_dir, FileJournal, Journal, JournalError, Loaded};
use crate::task::{Command, Queue};

/// A snapshot: the whole queue after every record of the journals before `generation`.
#[derive(Debug, Serialize, Deserialize)]
struct Snapshot {
    generation: u64,
    queue: Queue,
}

/// The journal and snapshots of a state directory.
#[derive(Debug)]
pub struct DirLog {
    dir: PathBuf,
    generation: u64,
    journal: FileJournal,
    base: Option<Queue>,
    /// Held while the journal may be written.
    _lock: DirLock,
}

impl DirLog {
    /// Opens the journal of `dir` at its latest snapshot; `lock` is the
    /// directory's, kept as long as the journal.
    pub fn open(dir: &Path, lock: DirLock) -> Result<DirLog, JournalError> {
        let snapshot = read_snapshot(dir)?;
        let generation = snapshot.as_ref().map(|s| s.generation).unwrap_or(0);
        Ok(DirLog {
            dir: dir.to_path_buf(),
            generation,
            journal: FileJournal::open(&journal_path(dir, generation))?,
            base: snapshot.map(|s| s.queue),
            _lock: lock,
        })
    }

    /// The journal generation being written (0 until the first snapshot).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl Journal for DirLog {
    fn append(&mut self, commands: &[Command]) -> Result<(), JournalError> {
        self.journal.append(commands)
    }

    fn load(&mut self) -> Result<Loaded, JournalError> {
        Ok(Loaded {
            base: self.base.take(),
            commands: self.journal.load()?.commands,
        })
    }

    fn snapshot(&mut self, queue: &Queue) -> Result<(), JournalError> {
        let next = self.generation + 1;
        let path = self.dir.join("snapshot.json");
        let bytes = serde_json::to_vec(&SnapshotRef {
            generation: next,
            queue,
        })
        .map_err(|e| io_err(&path, e.into()))?;
        write_durably(&path, &bytes)?;
        self.journal = FileJournal::open(&journal_path(&self.dir, next))?;
        for old in 0..next {
            let _ = std::fs::remove_file(journal_path(&self.dir, old));
        }
        // A removal lost in a crash only leaves a journal the snapshot skips.
        if let Err(e) = sync_dir(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot sync the state directory");
        }
        self.generation = next;
        Ok(())
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
}

/// [`Snapshot`] borrowing the queue, for writing without a clone.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    generation: u64,
    queue: &'a Queue,
}

fn io_err(path: &Path, source: std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes a file atomically: a synced temporary file renamed over the target.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), JournalError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| io_err(&tmp, e))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    sync_dir(dir).map_err(|e| io_err(dir, e))
}

/// The journal file of a generation (generation 0 keeps the original name).
fn journal_path(dir: &Path, generation: u64) -> PathBuf {
    if generation == 0 {
        dir.join("journal.jsonl")
    } else {
        dir.join(format!("journal-{generation}.jsonl"))
    }
}

fn read_snapshot(dir: &Path) -> Result<Option<Snapshot>, JournalError> {
    let path = dir.join("snapshot.json");
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| JournalError::Corrupt {
                path: path.display().to_string(),
                line: 1,
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(io_err(&path, source)),
    }
}
