//! The master's state: the queue, its journal, the job spec, and what the
//! status page shows about workers. Every queue command goes through
//! [`MasterState::execute`], which journals it before its reply is used.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::journal::{FileJournal, Journal, JournalError};
use crate::job::spec::JobSpec;
use crate::task::{Command, ConfigError, Millis, Queue, QueueConfig, Reply, WorkerId};

/// Samples kept for the rows/s chart.
const HISTORY: usize = 120;
/// Journal records between two snapshots.
pub const SNAPSHOT_EVERY: u64 = 50_000;

/// A snapshot: the whole queue after every record of the journals before `generation`.
#[derive(Debug, Serialize, Deserialize)]
struct Snapshot {
    generation: u64,
    queue: Queue,
}

/// What the state location holds besides the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobFile {
    /// The job.
    pub spec: JobSpec,
    /// The queue's settings.
    pub queue: QueueConfig,
}

/// Errors opening or running the master's state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The state directory is unusable.
    #[error("state {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// `job.json` cannot be read.
    #[error("state {path} is not a sluice job: {reason}")]
    BadJob {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The queue refused its settings.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Milliseconds on the wall clock, so deadlines survive a master restart.
pub fn wall_millis() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// What the master knows of a worker beyond the queue.
#[derive(Debug, Clone)]
pub struct WorkerSeen {
    /// Rows reported at the last heartbeat.
    pub rows: u64,
    /// When.
    pub last: Instant,
    /// Rows per second between the last two heartbeats.
    pub rate: f64,
}

/// The master.
pub struct MasterState {
    /// The queue.
    pub queue: Queue,
    journal: Box<dyn Journal>,
    /// The job.
    pub spec: Arc<JobSpec>,
    /// Workers seen.
    pub workers: HashMap<WorkerId, WorkerSeen>,
    /// Total rows/s samples for the chart, oldest first.
    pub history: VecDeque<f64>,
    /// Requests served.
    pub requests: u64,
    /// Commands journaled.
    pub journaled: u64,
    /// When the job was first seen over.
    pub over_since: Option<Instant>,
    /// The state directory, when the journal is on disk.
    dir: Option<PathBuf>,
    /// Journal generation being written (`journal-<generation>.jsonl`).
    generation: u64,
    /// Records since the last snapshot.
    since_snapshot: u64,
    /// Records between snapshots.
    snapshot_every: u64,
}

impl MasterState {
    /// Opens the state directory: loads `job.json` or writes it from `make`,
    /// then replays the journal.
    pub fn open(
        dir: &Path,
        make: impl FnOnce() -> Result<JobFile, StateError>,
    ) -> Result<(MasterState, bool), StateError> {
        std::fs::create_dir_all(dir).map_err(|source| StateError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let job_path = dir.join("job.json");
        let (job, resumed) = if job_path.exists() {
            (read_job(&job_path)?, true)
        } else {
            let job = make()?;
            write_job(&job_path, &job)?;
            (job, false)
        };
        let snapshot = read_snapshot(dir)?;
        let generation = snapshot.as_ref().map(|s| s.generation).unwrap_or(0);
        let journal = FileJournal::open(&journal_path(dir, generation))?;
        // The snapshot holds everything before this generation's journal.
        let mut state = MasterState::replay(job, snapshot.map(|s| s.queue), Box::new(journal))?;
        state.dir = Some(dir.to_path_buf());
        state.generation = generation;
        Ok((state, resumed))
    }

    /// Changes how many records go between snapshots (tests use small numbers).
    pub fn set_snapshot_every(&mut self, records: u64) {
        self.snapshot_every = records.max(1);
    }

    /// Writes a snapshot of the queue and starts a new journal generation;
    /// older journals are removed once the snapshot is durable.
    pub fn snapshot(&mut self) -> Result<(), StateError> {
        let Some(dir) = self.dir.clone() else {
            return Ok(());
        };
        let next = self.generation + 1;
        let snap = Snapshot {
            generation: next,
            queue: self.queue.clone(),
        };
        let path = dir.join("snapshot.json");
        let bytes = serde_json::to_vec(&snap).map_err(|e| StateError::Io {
            path: path.display().to_string(),
            source: e.into(),
        })?;
        write_durably(&path, &bytes)?;
        self.journal = Box::new(FileJournal::open(&journal_path(&dir, next))?);
        for old in 0..next {
            let _ = std::fs::remove_file(journal_path(&dir, old));
        }
        self.generation = next;
        self.since_snapshot = 0;
        Ok(())
    }

    /// Builds the state over any journal, replaying what it holds.
    pub fn with_journal(
        job: JobFile,
        journal: Box<dyn Journal>,
    ) -> Result<MasterState, StateError> {
        MasterState::replay(job, None, journal)
    }

    /// Replays the journal over `base` (a snapshot) or over a fresh queue.
    fn replay(
        job: JobFile,
        base: Option<Queue>,
        mut journal: Box<dyn Journal>,
    ) -> Result<MasterState, StateError> {
        let mut queue = match base {
            Some(queue) => queue,
            None => Queue::new(job.spec.splits.len(), job.queue.clone())?,
        };
        for command in journal.load()? {
            queue.apply(&command);
        }
        Ok(MasterState {
            dir: None,
            generation: 0,
            since_snapshot: 0,
            snapshot_every: SNAPSHOT_EVERY,
            queue,
            journal,
            spec: Arc::new(job.spec),
            workers: HashMap::new(),
            history: VecDeque::new(),
            requests: 0,
            journaled: 0,
            over_since: None,
        })
    }

    /// Expires lapsed leases, then applies `command`; changes are durable before returning.
    pub fn execute(&mut self, command: Command) -> Result<Reply, JournalError> {
        self.requests += 1;
        let mut changed = Vec::with_capacity(2);
        let tick = Command::Tick { now: command.now() };
        if self.queue.apply(&tick).changed() {
            changed.push(tick);
        }
        let reply = self.queue.apply(&command);
        if reply.changed() {
            changed.push(command);
        }
        self.journaled += changed.len() as u64;
        self.since_snapshot += changed.len() as u64;
        self.journal.append(&changed)?;
        if self.since_snapshot >= self.snapshot_every {
            if let Err(e) = self.snapshot() {
                // The journal still holds everything: keep going, try again later.
                tracing::warn!(error = %e, "snapshot failed");
                self.since_snapshot = 0;
            }
        }
        Ok(reply)
    }

    /// Records a heartbeat's row count for the status page.
    pub fn saw_worker(&mut self, worker: WorkerId, rows: u64) {
        let now = Instant::now();
        let entry = self.workers.entry(worker).or_insert(WorkerSeen {
            rows,
            last: now,
            rate: 0.0,
        });
        let dt = now.duration_since(entry.last).as_secs_f64();
        if dt > 0.0 && rows >= entry.rows {
            entry.rate = (rows - entry.rows) as f64 / dt;
        }
        entry.rows = rows;
        entry.last = now;
    }

    /// Adds a sample to the rows/s chart.
    pub fn sample(&mut self) {
        let total: f64 = self
            .workers
            .values()
            .filter(|w| w.last.elapsed().as_secs_f64() < 10.0)
            .map(|w| w.rate)
            .sum();
        self.history.push_back(total);
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
    }
}

fn read_job(path: &PathBuf) -> Result<JobFile, StateError> {
    let text = std::fs::read_to_string(path).map_err(|source| StateError::Io {
        path: path.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| StateError::BadJob {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

fn write_job(path: &Path, job: &JobFile) -> Result<(), StateError> {
    let text = serde_json::to_vec(job).map_err(|e| StateError::Io {
        path: path.display().to_string(),
        source: e.into(),
    })?;
    write_durably(path, &text)
}

/// Writes a file atomically: a synced temporary file renamed over the target.
fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let io = |source| StateError::Io {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(parent) = path.parent() {
        let _ = std::fs::File::open(parent).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// The journal file of a generation (generation 0 keeps the original name).
fn journal_path(dir: &Path, generation: u64) -> PathBuf {
    if generation == 0 {
        dir.join("journal.jsonl")
    } else {
        dir.join(format!("journal-{generation}.jsonl"))
    }
}

fn read_snapshot(dir: &Path) -> Result<Option<Snapshot>, StateError> {
    let path = dir.join("snapshot.json");
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StateError::BadJob {
                path: path.display().to_string(),
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StateError::Io {
            path: path.display().to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::LeaseReply;
    use connectors::{FormatOptions, ReadPlan};

    fn job(splits: usize) -> JobFile {
        let split = connectors::Split {
            path: "p".into(),
            size: 1,
            format: connectors::Format::Text,
            codec: connectors::codec::Codec::None,
            partition_dir: String::new(),
            partition_values: Vec::new(),
            range: connectors::SplitRange::Whole,
            rows: Some(1),
        };
        JobFile {
            spec: JobSpec {
                url: "file:///x".into(),
                splits: vec![split; splits],
                plan: ReadPlan {
                    data_schema: Arc::new(arrow::datatypes::Schema::empty()),
                    partition_fields: Vec::new(),
                    columns: Vec::new(),
                    options: FormatOptions::default(),
                },
                epochs: 2,
                seed: 1,
            },
            queue: QueueConfig {
                epochs: 2,
                ..QueueConfig::default()
            },
        }
    }

    #[test]
    fn snapshots_compact_the_journal_and_restore_the_same_queue() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut state, resumed) = MasterState::open(dir.path(), || Ok(job(30))).expect("open");
        assert!(!resumed);
        state.set_snapshot_every(7);
        let worker = match state
            .execute(Command::Register { now: 1 })
            .expect("register")
        {
            Reply::Register(w) => w,
            other => panic!("{other:?}"),
        };
        for step in 0..40u64 {
            let reply = state
                .execute(Command::Lease {
                    now: 10 + step,
                    worker,
                    max: 1,
                })
                .expect("lease");
            if let Reply::Lease(Ok(LeaseReply::Tasks(ls))) = reply {
                for l in ls {
                    state
                        .execute(Command::Finish {
                            now: 10 + step,
                            attempt: l.attempt,
                            rows: 1,
                        })
                        .expect("finish");
                }
            }
        }
        let before = state.queue.clone();
        assert!(state.generation > 0, "snapshots were taken");
        let journals = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("journal"))
            })
            .count();
        assert_eq!(journals, 1, "old journals are removed");
        drop(state);
        let (restored, resumed) =
            MasterState::open(dir.path(), || panic!("job.json exists")).expect("reopen");
        assert!(resumed);
        assert_eq!(
            restored.queue, before,
            "snapshot + journal rebuild the same queue"
        );
    }
}
