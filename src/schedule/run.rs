//! One run of a job: take the lock, find the complete partitions not trained yet,
//! train one model on all of them (continuing the last run's model), and only then
//! record them and the new checkpoint in `trained.json`.

use std::collections::BTreeMap;
use std::time::Instant;

use connectors::Dataset;
use serde::Serialize;
use tracing::{info, warn};

use super::checkpoint::{self, WorkDir};
use super::jobfile::Job;
use super::lock::Lock;
use super::partitions::{self, Expansion, Pattern, Status};
use super::state::{now_text, RunRecord, StateStore, Trained, TrainedPartition};
use super::RunError;
use crate::job::summary::Summary;
use crate::job::train::Outcome;

/// What the caller asks of a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Only say what would be trained: no lock, no training, nothing written.
    pub dry_run: bool,
    /// A source that matches no directory is a warning, not an error.
    pub allow_empty: bool,
}

/// A partition this run trains (or would train).
#[derive(Debug, Clone, Serialize)]
pub struct NewPartition {
    /// Its name below the source's base (`dt=2026-11-29`).
    pub path: String,
    /// Its URL.
    pub url: String,
    /// Rows in its files (from footers; `None` when a format does not tell).
    pub rows: Option<u64>,
    /// Data files.
    pub files: usize,
}

/// A partition not complete yet.
#[derive(Debug, Clone, Serialize)]
pub struct WaitingPartition {
    /// Its name below the source's base.
    pub path: String,
    /// Why it waits.
    pub reason: String,
}

/// What a run did: printed for people, or as JSON with `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The job file.
    pub job: String,
    /// The source, as in the job file.
    pub source: String,
    /// The state location.
    pub state: String,
    /// This run's id.
    pub run: String,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// Directories the source matched (0: nothing there, allowed by `allow_empty`).
    pub matched: usize,
    /// Partitions trained by earlier runs and still present.
    pub trained_before: usize,
    /// Complete partitions not trained before: trained by this run (or would be).
    pub new: Vec<NewPartition>,
    /// Partitions not complete yet, skipped.
    pub waiting: Vec<WaitingPartition>,
    /// Rows the trainers acknowledged, over all epochs (0 when nothing was new).
    pub rows: u64,
    /// Whether the new partitions are now recorded as trained.
    pub recorded: bool,
    /// The training summary, when training ran.
    pub summary: Option<Summary>,
}

impl RunReport {
    /// Lines for people.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let verb = if self.dry_run {
            "would train"
        } else {
            "trained"
        };
        for p in &self.new {
            let rows = p
                .rows
                .map(|r| format!("{r} rows"))
                .unwrap_or("rows unknown".into());
            lines.push(format!("{verb}: {} ({rows}, {} files)", p.url, p.files));
        }
        for w in &self.waiting {
            lines.push(format!("waiting: {} ({})", w.path, w.reason));
        }
        let last = if self.matched == 0 {
            format!("nothing to train: {} matches nothing", self.source)
        } else if self.new.is_empty() {
            format!(
                "nothing new to train in {}: {} partition(s) trained before, {} waiting; trained 0 rows",
                self.source,
                self.trained_before,
                self.waiting.len()
            )
        } else if self.dry_run {
            format!(
                "dry run: {} new partition(s) would be trained; {} trained before, {} waiting",
                self.new.len(),
                self.trained_before,
                self.waiting.len()
            )
        } else {
            let summary = self.summary.as_ref().map(Summary::line).unwrap_or_default();
            let recorded = if self.recorded {
                "recorded as trained"
            } else {
                "NOT recorded (tasks failed); they are trained again next run"
            };
            format!("{summary}; {} partition(s) {recorded}", self.new.len())
        };
        lines.push(last);
        lines
    }
}

/// Runs `job` once.
pub async fn run(job: &Job, options: RunOptions) -> Result<RunReport, RunError> {
    let started = Instant::now();
    let started_at = now_text();
    let run_id = run_id();
    let pattern = Pattern::parse(&job.source)?;
    let state = StateStore::open(&job.state)?;
    let lock = match options.dry_run {
        true => None,
        false => Some(Lock::acquire(&state, &run_id, job.lock_ttl).await?),
    };
    let context = Context {
        job,
        state: &state,
        lock: lock.as_ref(),
        run_id: &run_id,
        options,
        started,
        started_at,
    };
    let result = run_locked(&pattern, context).await;
    if let Some(lock) = lock {
        lock.release().await;
    }
    result
}

/// What a run knows before it looks at the source.
struct Context<'a> {
    job: &'a Job,
    state: &'a StateStore,
    lock: Option<&'a Lock>,
    run_id: &'a str,
    options: RunOptions,
    started: Instant,
    started_at: String,
}

async fn run_locked(pattern: &Pattern, cx: Context<'_>) -> Result<RunReport, RunError> {
    let Context {
        job,
        state,
        run_id,
        options,
        ..
    } = cx;
    let loaded = state.load(&job.source).await?;
    let expansion = partitions::expand(pattern).await?;
    if expansion.partitions.is_empty() {
        if !options.allow_empty {
            return Err(RunError::NoMatch {
                source_url: job.source.clone(),
            });
        }
        warn!(source = %job.source, "the source matches nothing (allowed by allow-empty)");
    }
    let mut report = RunReport {
        job: job.path.display().to_string(),
        source: job.source.clone(),
        state: state.location.url(),
        run: run_id.to_string(),
        dry_run: options.dry_run,
        matched: expansion.partitions.len(),
        trained_before: 0,
        new: Vec::new(),
        waiting: Vec::new(),
        rows: 0,
        recorded: false,
        summary: None,
    };
    let mut roots = Vec::new();
    for p in &expansion.partitions {
        if loaded.trained.partitions.contains_key(&p.name) {
            report.trained_before += 1;
            continue;
        }
        match &p.status {
            Status::Complete => roots.push(p.clone()),
            Status::Waiting(reason) => report.waiting.push(WaitingPartition {
                path: p.name.clone(),
                reason: reason.clone(),
            }),
        }
    }
    if roots.is_empty() {
        info!(source = %job.source, "nothing new to train");
        return Ok(report);
    }
    let paths: Vec<_> = roots.iter().map(|p| p.path.clone()).collect();
    let dataset =
        Dataset::open_roots(expansion.base.clone(), &paths, job.train.dataset.clone()).await?;
    report.new = new_partitions(&expansion, &roots, &dataset);
    if options.dry_run {
        return Ok(report);
    }
    for ignored in &dataset.ignored {
        warn!(path = %ignored.path, reason = %ignored.reason, "file not read");
    }
    let work = WorkDir::create(run_id)?;
    let mut config = job.train.clone();
    config.url = expansion.base.url();
    checkpoint::restore(
        state,
        loaded.trained.checkpoint.as_deref(),
        &mut config.trainer,
        &work,
    )
    .await?;
    let trainer = config.trainer.clone();
    let summary = match crate::job::train::run_dataset(config, dataset, cx.started).await? {
        Outcome::Trained(summary) => summary,
        // A job file's runs keep no queue state: nothing is ever found finished.
        Outcome::AlreadyFinished(_) => return Ok(report),
    };
    report.rows = summary.rows;
    let failed = !summary.tasks_failed.is_empty();
    let model = summary.trainer.model.clone();
    report.summary = Some(summary);
    if failed {
        warn!("tasks failed: the new partitions are not recorded as trained");
        return Ok(report);
    }
    let saved = checkpoint::save(state, run_id, &trainer, model.as_ref(), &work).await?;
    let trained = record(&loaded.trained, &report, saved.clone(), cx.started_at);
    if let Some(lock) = cx.lock {
        lock.check().await?;
    }
    state.save(&loaded, &trained).await?;
    report.recorded = true;
    if let Some(old) = loaded.trained.checkpoint.as_deref() {
        if saved.as_deref() != Some(old) {
            if let Err(e) = state.delete_all(old).await {
                warn!(error = %e, checkpoint = old, "cannot remove the previous checkpoint");
            }
        }
    }
    Ok(report)
}

/// The record with this run's partitions added.
fn record(
    before: &Trained,
    report: &RunReport,
    checkpoint: Option<String>,
    started_at: String,
) -> Trained {
    let finished_at = now_text();
    let mut trained = before.clone();
    for p in &report.new {
        trained.partitions.insert(
            p.path.clone(),
            TrainedPartition {
                rows: p.rows,
                run: report.run.clone(),
                trained_at: finished_at.clone(),
            },
        );
    }
    trained.runs.push(RunRecord {
        run: report.run.clone(),
        started_at,
        finished_at,
        partitions: report.new.iter().map(|p| p.path.clone()).collect(),
        rows: report.rows,
    });
    if checkpoint.is_some() {
        trained.checkpoint = checkpoint;
    }
    trained
}

/// The new partitions with their files and rows.
fn new_partitions(
    expansion: &Expansion,
    roots: &[partitions::Partition],
    dataset: &Dataset,
) -> Vec<NewPartition> {
    let mut counts: BTreeMap<&str, (usize, Option<u64>)> = BTreeMap::new();
    for root in roots {
        counts.insert(root.name.as_str(), (0, Some(0)));
    }
    for file in &dataset.files {
        let Some(root) = roots.iter().find(|r| file.path.prefix_matches(&r.path)) else {
            continue;
        };
        if let Some((files, rows)) = counts.get_mut(root.name.as_str()) {
            *files += 1;
            *rows = rows.zip(file.rows).map(|(a, b)| a + b);
        }
    }
    roots
        .iter()
        .map(|r| {
            let (files, rows) = counts.get(r.name.as_str()).copied().unwrap_or_default();
            NewPartition {
                path: r.name.clone(),
                url: expansion.base.display(&r.path),
                rows,
                files,
            }
        })
        .collect()
}

/// A run id: the UTC time it started and its pid.
fn run_id() -> String {
    let time = now_text().replace([':', '-'], "");
    format!("{time}-{}", std::process::id())
}
