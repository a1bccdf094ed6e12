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
//! A snapshot does not hold up the journal: the journal moves on to the next
//! generation at once, and the snapshot of everything before it is written
//! in the background. Until it is durable, the older snapshot and every
//! journal from its generation on still hold the whole state, so opening
//! the directory replays every journal from the snapshot's generation to the
//! newest; journals older than a snapshot are removed only once it is durable.
//!
//! Every file created, renamed or removed here is followed by a sync of the
//! directory, so that what a reply depended on is still there after a crash.

use connectors::Report;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use super::dir_lock::DirLock;
use super::journal::{sync_dir, Damage, FileJournal, Journal, JournalError, Loaded, Pending};
use crate::queue::{Command, Queue};

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
    /// The records of the journals before `generation` that the snapshot does
    /// not hold yet, until [`Journal::load`] takes them.
    earlier: Vec<Command>,
    /// The snapshot being written in the background.
    writing: Option<JoinHandle<()>>,
    /// Held while the journal may be written (declared last: released only
    /// once a snapshot being written is done, see [`Drop`]).
    _lock: DirLock,
}

impl DirLog {
    /// Opens the journal of `dir` at its latest snapshot; `lock` is the
    /// directory's, kept as long as the journal.
    pub fn open(dir: &Path, lock: DirLock) -> Result<DirLog, JournalError> {
        let snapshot = read_snapshot(dir)?;
        let first = snapshot.as_ref().map(|s| s.generation).unwrap_or(0);
        let last = newest_generation(dir)?.unwrap_or(first).max(first);
        let mut earlier = Vec::new();
        for generation in first..last {
            let path = journal_path(dir, generation);
            if !path.exists() {
                return Err(JournalError::Corrupt {
                    path: path.display().to_string(),
                    line: 0,
                    damage: Damage::MissingGeneration {
                        snapshot: first,
                        newest: last,
                    },
                });
            }
            earlier.extend(FileJournal::open(&path)?.load()?.commands);
        }
        Ok(DirLog {
            dir: dir.to_path_buf(),
            generation: last,
            journal: FileJournal::open(&journal_path(dir, last))?,
            base: snapshot.map(|s| s.queue),
            earlier,
            writing: None,
            _lock: lock,
        })
    }

    /// The journal generation being written (0 until the first snapshot).
    #[cfg(test)]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Waits for the snapshot being written, if any.
    fn wait_for_snapshot(&mut self) {
        if let Some(writing) = self.writing.take() {
            if writing.join().is_err() {
                tracing::warn!(dir = %self.dir.display(), "the snapshot writer panicked");
            }
        }
    }
}

impl Drop for DirLog {
    fn drop(&mut self) {
        // Nothing may write the directory once its lock is released.
        self.wait_for_snapshot();
    }
}

impl Journal for DirLog {
    fn append(&mut self, commands: &[Command]) -> Result<(), JournalError> {
        self.journal.append(commands)
    }

    fn write(&mut self, commands: &[Command]) -> Result<Pending, JournalError> {
        self.journal.write(commands)
    }

    fn load(&mut self) -> Result<Loaded, JournalError> {
        let mut commands = std::mem::take(&mut self.earlier);
        commands.extend(self.journal.load()?.commands);
        Ok(Loaded {
            base: self.base.take(),
            commands,
        })
    }

    /// Moves the journal on to the next generation and writes the snapshot of
    /// everything before it in the background (one at a time). While the
    /// previous snapshot is still being written this one is skipped: the
    /// journal goes on holding everything, and the next one comes after as
    /// many records again. Waiting here would hold up every request, since
    /// the group committer calls this between two batches.
    fn snapshot(&mut self, queue: Arc<Queue>) -> Result<(), JournalError> {
        if self.writing.as_ref().is_some_and(|w| !w.is_finished()) {
            tracing::debug!(dir = %self.dir.display(), "the previous snapshot is still being written; this one is skipped");
            return Ok(());
        }
        self.wait_for_snapshot();
        let next = self.generation + 1;
        self.journal = FileJournal::open(&journal_path(&self.dir, next))?;
        self.generation = next;
        let dir = self.dir.clone();
        let writer = std::thread::Builder::new()
            .name("sluice-snapshot".to_string())
            .spawn(move || {
                yield_cpu();
                if let Err(e) = write_snapshot(&dir, next, &queue) {
                    // The journals still hold everything; the next snapshot retries.
                    tracing::warn!(error = %Report(&e), "snapshot failed");
                }
            });
        match writer {
            Ok(handle) => self.writing = Some(handle),
            Err(e) => tracing::warn!(error = %Report(&e), "cannot start the snapshot writer"),
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
}

/// Bytes of a snapshot written between two syncs of its file. A file system
/// that orders a journal sync behind other files' data (ext4's
/// `data=ordered`) then makes a journal sync wait for at most this much of a
/// snapshot, not for all of it (60 MB for a million tasks).
const SNAPSHOT_SYNC_BYTES: usize = 4 << 20;

/// The nice value of the snapshot writer: the serialization of a large queue
/// takes seconds of CPU, which requests, and the committer they wait on, get
/// first. Not the lowest value, so that a snapshot still ends on a machine
/// kept busy.
const SNAPSHOT_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority to [`SNAPSHOT_NICE`] (raising a
/// nice value needs no privilege). Best effort: a refusal is logged.
fn yield_cpu() {
    #[cfg(target_os = "linux")]
    {
        if let Err(error) = crate::sys::process::set_thread_nice(SNAPSHOT_NICE) {
            tracing::debug!(%error, "cannot lower the snapshot writer's priority");
        }
    }
}

/// Writes the snapshot of everything before journal `generation` durably, then
/// removes the journals it makes unneeded. The JSON is streamed to a
/// temporary file synced every [`SNAPSHOT_SYNC_BYTES`], then renamed over
/// `snapshot.json`.
fn write_snapshot(dir: &Path, generation: u64, queue: &Queue) -> Result<(), JournalError> {
    let started = std::time::Instant::now();
    let path = dir.join("snapshot.json");
    let tmp = path.with_extension("tmp");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(crate::sys::fd::PRIVATE_FILE)
        .open(&tmp)
        .map_err(|e| io_err(&tmp, e))?;
    let written = (|| {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, SyncEvery::new(file));
        serde_json::to_writer(&mut out, &SnapshotRef { generation, queue })
            .map_err(|e| io_err(&tmp, e.into()))?;
        let written = out.into_inner().map_err(|e| io_err(&tmp, e.into_error()))?;
        written.file.sync_all().map_err(|e| io_err(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        Ok(written.total)
    })();
    let bytes = match written {
        Ok(bytes) => bytes,
        Err(e) => {
            // A full disk must not also keep a half-written snapshot.
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    sync_dir(dir).map_err(|e| io_err(dir, e))?;
    for old in 0..generation {
        let _ = std::fs::remove_file(journal_path(dir, old));
    }
    // A removal lost in a crash only leaves a journal the snapshot skips.
    if let Err(e) = sync_dir(dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot sync the state directory");
    }
    tracing::info!(
        generation,
        bytes,
        seconds = started.elapsed().as_secs_f64(),
        "snapshot written"
    );
    Ok(())
}

/// A file that syncs its data every [`SNAPSHOT_SYNC_BYTES`] written.
struct SyncEvery {
    file: std::fs::File,
    unsynced: usize,
    total: u64,
}

impl SyncEvery {
    fn new(file: std::fs::File) -> SyncEvery {
        SyncEvery {
            file,
            unsynced: 0,
            total: 0,
        }
    }
}

impl std::io::Write for SyncEvery {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.unsynced += n;
        self.total += n as u64;
        if self.unsynced >= SNAPSHOT_SYNC_BYTES {
            self.file.sync_data()?;
            self.unsynced = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The newest journal generation in `dir`, if it holds any journal.
fn newest_generation(dir: &Path) -> Result<Option<u64>, JournalError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
    let mut newest = None;
    for entry in entries {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let generation = if name == "journal.jsonl" {
            Some(0)
        } else {
            name.strip_prefix("journal-")
                .and_then(|rest| rest.strip_suffix(".jsonl"))
                .and_then(|g| g.parse::<u64>().ok())
        };
        newest = newest.max(generation);
    }
    Ok(newest)
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
        cause: source,
    }
}

/// Writes a file atomically: a synced temporary file renamed over the target.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), JournalError> {
    // Only sluice's user reads the state (its journal holds worker secrets).
    crate::sys::fd::write_replacing(path, bytes, crate::sys::fd::PRIVATE_FILE)
        .map_err(|e| io_err(path, e))
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
                damage: Damage::Json(e),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(io_err(&path, source)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::QueueConfig;

    fn register(now: u64) -> Command {
        Command::Register {
            now,
            secret: None,
            name: None,
        }
    }

    fn open(dir: &Path) -> DirLog {
        let lock = DirLock::acquire(dir).expect("lock");
        DirLog::open(dir, lock).expect("open")
    }

    /// The queue the commands lead to.
    fn queue_after(commands: &[Command]) -> Queue {
        let mut queue = Queue::new(3, QueueConfig::default()).expect("queue");
        for command in commands {
            queue.apply(command);
        }
        queue
    }

    #[test]
    fn journals_a_snapshot_does_not_hold_yet_are_all_replayed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let commands: Vec<Command> = (1..=5).map(register).collect();
        {
            let mut log = open(dir.path());
            log.append(&commands[..2]).expect("append");
        }
        // A master killed after its journal moved on to generation 1 and
        // before the snapshot of generation 1 was durable.
        FileJournal::open(&journal_path(dir.path(), 1))
            .expect("journal 1")
            .append(&commands[2..4])
            .expect("append");
        let mut log = open(dir.path());
        assert_eq!(log.generation(), 1, "appends go on in the newest journal");
        let loaded = log.load().expect("load");
        assert!(loaded.base.is_none());
        assert_eq!(loaded.commands, commands[..4]);
        log.append(&commands[4..]).expect("append");
        log.snapshot(Arc::new(queue_after(&commands)))
            .expect("snapshot");
        drop(log);

        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("journal") || n.starts_with("snapshot"))
            .collect();
        names.sort();
        assert_eq!(names, ["journal-2.jsonl", "snapshot.json"]);
        let mut log = open(dir.path());
        let loaded = log.load().expect("load");
        assert_eq!(loaded.base, Some(queue_after(&commands)));
        assert!(loaded.commands.is_empty());
    }

    #[test]
    fn journals_older_than_the_snapshot_are_not_replayed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let commands: Vec<Command> = (1..=3).map(register).collect();
        let mut log = open(dir.path());
        log.append(&commands[..2]).expect("append");
        log.snapshot(Arc::new(queue_after(&commands[..2])))
            .expect("snapshot");
        log.append(&commands[2..]).expect("append");
        drop(log);
        // A master killed after the snapshot, before the old journal was removed.
        FileJournal::open(&journal_path(dir.path(), 0))
            .expect("journal 0")
            .append(&commands[..2])
            .expect("append");
        let mut log = open(dir.path());
        let loaded = log.load().expect("load");
        assert_eq!(loaded.base, Some(queue_after(&commands[..2])));
        assert_eq!(loaded.commands, commands[2..]);
    }

    #[test]
    fn a_missing_journal_between_the_snapshot_and_the_newest_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(open(dir.path()));
        FileJournal::open(&journal_path(dir.path(), 2))
            .expect("journal 2")
            .append(&[register(1)])
            .expect("append");
        let lock = DirLock::acquire(dir.path()).expect("lock");
        let err = DirLog::open(dir.path(), lock).expect_err("journal 1 missing");
        assert!(err.to_string().contains("journal-1.jsonl"), "{err}");
    }
}
