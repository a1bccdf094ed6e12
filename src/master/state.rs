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
        let journal = FileJournal::open(&dir.join("journal.jsonl"))?;
        Ok((MasterState::with_journal(job, Box::new(journal))?, resumed))
    }

    /// Builds the state over any journal, replaying what it holds.
    pub fn with_journal(
        job: JobFile,
        mut journal: Box<dyn Journal>,
    ) -> Result<MasterState, StateError> {
        let mut queue = Queue::new(job.spec.splits.len(), job.queue.clone())?;
        for command in journal.load()? {
            queue.apply(&command);
        }
        Ok(MasterState {
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
        self.journal.append(&changed)?;
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
    let io = |source| StateError::Io {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec(job).map_err(|e| io(e.into()))?;
    std::fs::write(&tmp, text).map_err(io)?;
    let f = std::fs::File::open(&tmp).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
