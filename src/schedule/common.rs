//! What every kind of run of a job shares (one source, a table, several
//! sources mixed: [`super::run`], [`super::mixed`]): what a run knows before
//! it looks at its source ([`Context`]), what it reports ([`RunReport`]),
//! and its last step: train, then record what was trained
//! ([`train_and_record`]).

use connectors::Report;
use std::collections::BTreeMap;

use connectors::table::{CommitKind, TableCommit, TableKind};
use connectors::Dataset;
use serde::Serialize;
use tracing::warn;

use super::checkpoint::{self, WorkDir};
use super::job::{Job, OnRewrite};
use super::lock::Lock;
use super::partitions::{self, Expansion};
use super::state::{
    now_text, Loaded, RunRecord, StateStore, Trained, TrainedPartition, TrainedTable,
};
use super::RunError;
use crate::job::summary::Summary;
use crate::job::train::Outcome;
use crate::worker::pipeline::Stop;

/// What the caller asks of a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Only say what would be trained: no lock, no training, nothing written.
    pub dry_run: bool,
    /// A source that matches no directory, or new data with no rows, is a
    /// warning, not an error.
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
    /// The URL of the source it is a partition of, in a job of several
    /// sources (`[[source]]` tables).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
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
    /// On a table with `on-rewrite = "skip"`: rows in the files that commits
    /// removing or rewriting rows added, which this run did not train.
    pub skipped_rewritten_rows: u64,
    /// The training summary, when training ran.
    pub summary: Option<Summary>,
    /// When the source is a Delta or Iceberg table: the versions this run covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<TableRun>,
}

/// What a run on a Delta or Iceberg table found and did.
#[derive(Debug, Clone, Serialize)]
pub struct TableRun {
    /// Delta or Iceberg.
    pub kind: TableKind,
    /// The version (snapshot) trained up to before this run; `None` on the first run.
    pub from: Option<i64>,
    /// The version (snapshot) this run reads, and records once trained.
    pub to: i64,
    /// The commits after `from` up to `to`, oldest first.
    pub commits: Vec<TableCommit>,
    /// The job's policy for commits that rewrote trained rows.
    pub on_rewrite: OnRewrite,
    /// What is trained: `all` (the whole version), `appended` (the rows
    /// appended after `from`) or `nothing`.
    pub trains: &'static str,
}

impl RunReport {
    /// The report of a run of `cx`'s job that found `matched` partitions
    /// (1 for a table or a followed source), before it trained anything.
    pub(super) fn start(cx: &Context<'_>, matched: usize) -> RunReport {
        RunReport {
            job: cx.job.path.display().to_string(),
            source: cx.job.source.clone(),
            state: cx.state.location.url(),
            run: cx.run_id.to_string(),
            dry_run: cx.options.dry_run,
            matched,
            trained_before: 0,
            new: Vec::new(),
            waiting: Vec::new(),
            rows: 0,
            recorded: false,
            skipped_rewritten_rows: 0,
            summary: None,
            table: None,
        }
    }

    /// Lines for people.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = match &self.table {
            Some(table) => table.commit_lines(),
            None => Vec::new(),
        };
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
        lines.push(self.last_line());
        if self.skipped_rewritten_rows > 0 {
            lines.push(format!(
                "skipped_rewritten_rows: {} rows in files the rewrites added were not trained (on-rewrite = \"skip\")",
                self.skipped_rewritten_rows
            ));
        }
        lines
    }

    /// The last line: what the run did, or why it did nothing.
    fn last_line(&self) -> String {
        if self.matched == 0 {
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
            match &self.table {
                Some(table) if self.recorded => {
                    format!("{summary}; {} {} recorded as trained", table.kind, table.to)
                }
                Some(_) => {
                    format!("{summary}; NOT recorded (tasks failed); trained again next run")
                }
                None => format!("{summary}; {} partition(s) {recorded}", self.new.len()),
            }
        }
    }
}

impl TableRun {
    /// A line per commit since the version trained before: what it did,
    /// and what the run does with it.
    fn commit_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let noun = noun(self.kind);
        for commit in &self.commits {
            let what = match commit.kind {
                CommitKind::Append => "appended rows".to_string(),
                CommitKind::Compaction => "compaction (rows unchanged), skipped".to_string(),
                CommitKind::Metadata => "metadata only".to_string(),
                CommitKind::Rewrite => match self.on_rewrite {
                    OnRewrite::Skip => {
                        "removed or rewrote trained rows; not trained again (on-rewrite = \"skip\")".to_string()
                    }
                    OnRewrite::Retrain => {
                        "removed or rewrote trained rows; the whole table is trained again (on-rewrite = \"retrain\")".to_string()
                    }
                    OnRewrite::Fail => "removed or rewrote trained rows".to_string(),
                },
            };
            lines.push(format!(
                "{noun} {} ({}): {what}",
                commit.version, commit.operation
            ));
        }
        lines
    }
}

/// What a run knows before it looks at the source.
pub(super) struct Context<'a> {
    pub(super) job: &'a Job,
    pub(super) state: &'a StateStore,
    pub(super) lock: Option<&'a Lock>,
    pub(super) run_id: &'a str,
    pub(super) options: RunOptions,
    pub(super) started_at: String,
    /// Stops the training early.
    pub(super) stop: Option<Stop>,
}

/// Trains `dataset` (continuing the last run's model) and records the run:
/// its partitions, or the table version `table`.
pub(super) async fn train_and_record(
    cx: &Context<'_>,
    loaded: Loaded,
    mut config: crate::config::TrainConfig,
    dataset: Dataset,
    mut report: RunReport,
    table: Option<TrainedTable>,
    mixed: Option<crate::mix::Mixed>,
) -> Result<RunReport, RunError> {
    let state = cx.state;
    let run_id = cx.run_id;
    config.allow_empty = cx.options.allow_empty;
    for ignored in &dataset.ignored {
        warn!(path = %ignored.path, reason = %ignored.reason, "file not read");
    }
    let work = WorkDir::create(run_id)?;
    checkpoint::restore(
        state,
        loaded.trained.checkpoint.as_deref(),
        &mut config.trainer,
        &work,
    )
    .await?;
    let trainer = config.trainer.clone();
    let summary =
        match crate::job::train::run_dataset_mixed(config, cx.stop.clone(), dataset, mixed)
            .await
            .map_err(RunError::train(format!("what is new in {}", report.source)))?
        {
            Outcome::Trained(summary) => summary,
            // A job file's runs keep no queue state: nothing is ever found finished.
            Outcome::AlreadyFinished(_) => return Ok(report),
        };
    report.rows = summary.rows;
    let failed = !summary.tasks_failed.is_empty();
    let model = summary.trainer.model.clone();
    report.summary = Some(summary);
    if failed {
        warn!("tasks failed: this run's data is not recorded as trained");
        return Ok(report);
    }
    let saved = checkpoint::save(state, run_id, &trainer, model.as_ref(), &work).await?;
    let trained = record(
        &loaded.trained,
        &report,
        saved.clone(),
        cx.started_at.clone(),
        table,
    );
    if let Some(lock) = cx.lock {
        lock.check()
            .await
            .map_err(RunError::lock("record the run"))?;
    }
    state
        .save(&loaded, &trained)
        .await
        .map_err(RunError::state("record what this run trained"))?;
    report.recorded = true;
    if let Some(old) = loaded.trained.checkpoint.as_deref() {
        if saved.as_deref() != Some(old) {
            if let Err(e) = state.delete_all(old).await {
                warn!(error = %Report(&e), checkpoint = old, "cannot remove the previous checkpoint");
            }
        }
    }
    Ok(report)
}

/// The record with this run's partitions added.
pub(super) fn record(
    before: &Trained,
    report: &RunReport,
    checkpoint: Option<String>,
    started_at: String,
    table: Option<TrainedTable>,
) -> Trained {
    let finished_at = now_text();
    let mut trained = before.clone();
    let is_table = table.is_some();
    if is_table {
        trained.table = table;
    }
    for p in report.new.iter().filter(|_| !is_table) {
        let partitions = match &p.source {
            Some(source) => trained.sources.entry(source.clone()).or_default(),
            None => &mut trained.partitions,
        };
        partitions.insert(
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
        partitions: report
            .new
            .iter()
            .map(|p| match &p.source {
                Some(source) => format!("{source}: {}", p.path),
                None => p.path.clone(),
            })
            .collect(),
        rows: report.rows,
        skipped_rewritten_rows: report.skipped_rewritten_rows,
    });
    if checkpoint.is_some() {
        trained.checkpoint = checkpoint;
    }
    trained
}

/// The new partitions with their files and rows.
pub(super) fn new_partitions(
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
                source: None,
            }
        })
        .collect()
}

/// What a table calls one of its versions: a Delta version, an Iceberg snapshot.
pub(super) fn noun(kind: TableKind) -> &'static str {
    match kind {
        TableKind::Delta => "version",
        TableKind::Iceberg => "snapshot",
    }
}
