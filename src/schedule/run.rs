//! One run of a job: take the lock, find the complete partitions not trained yet,
//! train one model on all of them (continuing the last run's model), and only then
//! record them and the new checkpoint in `trained.json`.

use connectors::Report;
use std::collections::BTreeMap;

use connectors::table::{
    self, CommitKind, TableCommit, TableFile, TableKind, TableSnapshot, TableVersion,
};
use connectors::{Dataset, Location};
use serde::Serialize;
use tracing::{info, warn};

use super::checkpoint::{self, WorkDir};
use super::job::{Job, OnRewrite};
use super::lock::Lock;
use super::partitions::{self, Expansion, Pattern, Status};
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

/// Runs `job` once; `stop`, when given, stops its training early (a
/// signal): what the trainers acknowledged is committed, and nothing of the
/// run is recorded as trained.
pub async fn run(
    job: &Job,
    options: RunOptions,
    stop: Option<Stop>,
) -> Result<RunReport, RunError> {
    let started_at = now_text();
    let run_id = run_id();
    let pattern = match &job.table {
        Some(_) => None,
        None => Some(Pattern::parse(&job.source)?),
    };
    let state = StateStore::open(&job.state).map_err(RunError::state("open the job's state"))?;
    let lock = match options.dry_run {
        true => None,
        false => Some(
            Lock::acquire(&state, &run_id, job.lock_ttl)
                .await
                .map_err(RunError::lock("take the job's lock"))?,
        ),
    };
    let context = Context {
        job,
        state: &state,
        lock: lock.as_ref(),
        run_id: &run_id,
        options,
        started_at,
        stop,
    };
    let result = run_locked(pattern.as_ref(), context).await;
    if let Some(lock) = lock {
        lock.release().await;
    }
    result
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

async fn run_locked(pattern: Option<&Pattern>, cx: Context<'_>) -> Result<RunReport, RunError> {
    let Context { job, state, .. } = cx;
    if let (Some(_), Some(_)) = (&job.train.follow, &job.train.mix) {
        return Err(RunError::Source {
            source_url: job.source.clone(),
            reason: "follow = true takes one source; follow several with `sluice train A B --follow --state DIR`".to_string(),
        });
    }
    if job.train.follow.is_some() {
        return run_followed(&cx).await;
    }
    if let Some(mix) = &job.train.mix {
        return super::mixed::run_mixed(&cx, mix).await;
    }
    let rows = job.train.select.describe();
    let loaded = state
        .load(&job.identity(), rows.as_deref())
        .await
        .map_err(RunError::state("read what earlier runs trained"))?;
    if let Some(table) = &job.table {
        return run_named(&cx, loaded, table).await;
    }
    let Some(pattern) = pattern else {
        return Err(RunError::Source {
            source_url: job.source.clone(),
            reason: "no pattern".to_string(),
        });
    };
    if !job.source.contains('*') {
        let location =
            connectors::store::open(&job.source).map_err(RunError::read("open the source"))?;
        let detected = table::detect(&location).await.map_err(RunError::read(
            "tell whether the source is a Delta or Iceberg table",
        ))?;
        if let Some(kind) = detected {
            return run_table(&cx, loaded, location, kind).await;
        }
    }
    run_partitions(&cx, loaded, pattern).await
}

/// A run over a table by name (`table` in the job file): a partitioned
/// one's new partitions, or a Delta or Iceberg table's new versions.
async fn run_named(
    cx: &Context<'_>,
    loaded: Loaded,
    table: &crate::catalog::CatalogTable,
) -> Result<RunReport, RunError> {
    let location = connectors::store::open(&table.read_url).map_err(RunError::read(format!(
        "open the location of table {}",
        table.identity()
    )))?;
    if table.partitions.is_some() {
        return run_hive(cx, loaded, table, location).await;
    }
    let detected = table::detect(&location)
        .await
        .map_err(RunError::read(format!(
            "tell whether table {} is a Delta or Iceberg table",
            table.identity()
        )))?;
    let Some(kind) = detected else {
        return Err(RunError::Source {
            source_url: table.identity(),
            reason: format!(
                "the catalog's {} table at {} is neither partitioned nor a Delta or Iceberg table: `sluice run` trains what is new in partitions or table versions",
                table.format, table.location
            ),
        });
    };
    run_table(cx, loaded, location, kind).await
}

/// A run over the partitions `pattern` matches: those no earlier run
/// trained and whose writes are complete.
async fn run_partitions(
    cx: &Context<'_>,
    loaded: Loaded,
    pattern: &Pattern,
) -> Result<RunReport, RunError> {
    let Context { job, options, .. } = cx;
    let expansion = partitions::expand(pattern).await?;
    if expansion.partitions.is_empty() {
        if !options.allow_empty {
            return Err(RunError::NoMatch {
                source_url: job.source.clone(),
            });
        }
        warn!(source = %job.source, "the source matches nothing (allowed by allow-empty)");
    }
    let mut report = RunReport::start(cx, expansion.partitions.len());
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
    let dataset = Dataset::open_roots(expansion.base.clone(), &paths, job.train.dataset.clone())
        .await
        .map_err(RunError::read("list the new partitions"))?;
    report.new = new_partitions(&expansion, &roots, &dataset);
    if dataset.known_empty() && !options.allow_empty {
        let urls: Vec<&str> = report.new.iter().map(|p| p.url.as_str()).collect();
        let what = match urls.as_slice() {
            [one] => one.to_string(),
            many => format!("{} new partitions ({})", many.len(), many.join(", ")),
        };
        return Err(RunError::Empty { what });
    }
    if options.dry_run {
        crate::job::train::check_schema(&job.train, &dataset)
            .map_err(RunError::train("the new data (dry run)"))?;
        return Ok(report);
    }
    let mut config = job.train.clone();
    config.url = expansion.base.url();
    train_and_record(cx, loaded, config, dataset, report, None, None).await
}

/// A run over a partitioned Hive table by name: the partitions the
/// metastore lists that no earlier run trained (and that `where` keeps),
/// each read from the location the metastore gives.
async fn run_hive(
    cx: &Context<'_>,
    loaded: Loaded,
    table: &crate::catalog::CatalogTable,
    location: Location,
) -> Result<RunReport, RunError> {
    let job = cx.job;
    let mut options = job.train.dataset.clone();
    table.apply(&mut options);
    let Some(mut catalog) = options.catalog_partitions.take() else {
        return Ok(RunReport::start(cx, 0));
    };
    let names: Vec<String> = catalog.fields.iter().map(|f| f.name().clone()).collect();
    let name_of = |p: &connectors::CatalogPartition| {
        names
            .iter()
            .zip(&p.values)
            .map(|(n, v)| format!("{n}={}", v.as_deref().unwrap_or("null")))
            .collect::<Vec<_>>()
            .join("/")
    };
    if let Some(filter) = &options.partition_filter {
        filter
            .check(&catalog.fields)
            .map_err(connectors::Error::from)
            .map_err(RunError::read(format!(
                "choose the partitions of table {}",
                table.identity()
            )))?;
        catalog
            .partitions
            .retain(|p| filter.matches(&catalog.fields, &p.values));
    }
    let mut report = RunReport::start(cx, catalog.partitions.len());
    let mut new = Vec::new();
    for p in std::mem::take(&mut catalog.partitions) {
        if loaded.trained.partitions.contains_key(&name_of(&p)) {
            report.trained_before += 1;
        } else {
            new.push(p);
        }
    }
    if new.is_empty() {
        info!(source = %table.identity(), "nothing new to train");
        return Ok(report);
    }
    catalog.partitions = new.clone();
    options.catalog_partitions = Some(catalog);
    let dataset = Dataset::open(location, options)
        .await
        .map_err(RunError::read(format!(
            "list the new partitions of table {}",
            table.identity()
        )))?;
    report.new = new
        .iter()
        .map(|p| {
            let name = name_of(p);
            let files: Vec<_> = dataset
                .files
                .iter()
                .filter(|f| f.partition_dir == name)
                .collect();
            NewPartition {
                path: name,
                url: p.url.clone(),
                rows: files.iter().try_fold(0, |sum, f| f.rows.map(|r| sum + r)),
                files: files.len(),
                source: None,
            }
        })
        .collect();
    if dataset.known_empty() && !cx.options.allow_empty {
        let urls: Vec<&str> = report.new.iter().map(|p| p.url.as_str()).collect();
        return Err(RunError::Empty {
            what: format!("{} new partitions ({})", urls.len(), urls.join(", ")),
        });
    }
    if cx.options.dry_run {
        crate::job::train::check_schema(&job.train, &dataset)
            .map_err(RunError::train("the new data (dry run)"))?;
        return Ok(report);
    }
    let mut config = job.train.clone();
    config.url = table.read_url.clone();
    config.dataset = dataset.options.clone();
    train_and_record(cx, loaded, config, dataset, report, None, None).await
}

/// A job file with `follow = true`: one long run that trains what the
/// source (a path, or a table by name) commits as it is committed (`sluice
/// train --follow`), its journal
/// in the job's state directory (`follow/`), so that a run started again
/// after a crash, a reboot or a stop resumes where the last one was.
async fn run_followed(cx: &Context<'_>) -> Result<RunReport, RunError> {
    let job = cx.job;
    if job.source.contains('*') {
        return Err(RunError::Source {
            source_url: job.source.clone(),
            reason: "follow = true follows one directory, table or streaming sink: name the directory above the partitions, without `*`; each partition is taken once it is committed".to_string(),
        });
    }
    let Some(dir) = cx.state.location.local_dir() else {
        return Err(RunError::Source {
            source_url: job.source.clone(),
            reason: format!(
                "follow = true keeps the follower's journal in a local state directory; {} is not one (run `sluice master --follow --state {}` and workers for state on a store)",
                cx.state.location.url(),
                cx.state.location.url()
            ),
        });
    };
    let mut report = RunReport::start(cx, 1);
    if cx.options.dry_run {
        return Ok(report);
    }
    let mut config = job.train.clone();
    config.allow_empty = cx.options.allow_empty;
    config.state = Some(dir.join("follow"));
    if let Some(table) = &job.table {
        // A table by name: read where the catalog says, and ask it again
        // at each poll (the snapshot it points to, the partitions it adds).
        config.url = table.read_url.clone();
        table.apply(&mut config.dataset);
        config.table = Some(table.table_ref(&job.catalog));
    }
    if let Some(follow) = &mut config.follow {
        follow.on_rewrite = job.on_rewrite;
    }
    let outcome = crate::job::train::run(config, cx.stop.clone())
        .await
        .map_err(RunError::train(format!(
            "{} as it is committed",
            job.source
        )))?;
    match outcome {
        Outcome::Trained(summary) => {
            report.rows = summary.rows;
            report.recorded = summary.tasks_failed.is_empty();
            report.summary = Some(summary);
        }
        Outcome::AlreadyFinished(finished) => {
            info!("{}", finished.line());
            report.recorded = finished.tasks_failed.is_empty();
        }
    }
    Ok(report)
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

/// A run whose source is a Delta or Iceberg table: the first run trains the
/// latest version; each later one trains the rows appended since the version
/// recorded, and follows the job's `on-rewrite` policy when commits since
/// removed or rewrote rows already trained.
async fn run_table(
    cx: &Context<'_>,
    loaded: Loaded,
    location: Location,
    kind: TableKind,
) -> Result<RunReport, RunError> {
    let job = cx.job;
    let since = loaded
        .trained
        .table
        .as_ref()
        .filter(|t| t.kind == kind)
        .map(|t| t.version);
    let mut report = RunReport::start(cx, 1);
    report.trained_before = usize::from(since.is_some());
    let (snapshot, files, commits, trains) = match since {
        None => {
            let snapshot = table::snapshot(&location, kind, TableVersion::Latest)
                .await
                .map_err(RunError::read("read the table's latest version"))?;
            (snapshot, None, Vec::new(), "all")
        }
        Some(since) => changes_to_train(cx, &location, kind, since, &mut report).await?,
    };
    let to = snapshot.version;
    report.table = Some(TableRun {
        kind,
        from: since,
        to,
        commits,
        on_rewrite: job.on_rewrite,
        trains,
    });
    if since == Some(to) {
        info!(source = %job.source, version = to, "nothing new in the table");
        return Ok(report);
    }
    let record_only = trains == "nothing";
    let appends_since = since.filter(|_| files.is_some());
    let dataset = Dataset::from_table(location.clone(), snapshot, files, job.train.dataset.clone())
        .await
        .map_err(RunError::read(format!(
            "list the files of {noun} {to}",
            noun = noun(kind)
        )))?;
    if !record_only && dataset.known_empty() && !cx.options.allow_empty {
        let noun = noun(kind);
        let appends = appends_since
            .map(|from| format!(" (the rows appended after {noun} {from})"))
            .unwrap_or_default();
        return Err(RunError::Empty {
            what: format!(
                "the {kind} table {} at {noun} {to}{appends}",
                location.url()
            ),
        });
    }
    if !record_only {
        report
            .new
            .push(table_partition(kind, to, &location, &dataset));
    }
    if cx.options.dry_run {
        if !record_only {
            crate::job::train::check_schema(&job.train, &dataset)
                .map_err(RunError::train("the new data (dry run)"))?;
        }
        return Ok(report);
    }
    let table = TrainedTable {
        kind,
        version: to,
        run: cx.run_id.to_string(),
    };
    if record_only {
        return record_only_run(cx, loaded, report, table).await;
    }
    let mut config = job.train.clone();
    config.url = location.url();
    train_and_record(cx, loaded, config, dataset, report, Some(table), None).await
}

/// What a table's run after version `since` trains, by the job's
/// `on-rewrite` where commits since rewrote rows: the snapshot read, its
/// files to train (`None`: all), the commits since, and what it trains
/// (`all`, `appended` or `nothing`).
async fn changes_to_train(
    cx: &Context<'_>,
    location: &Location,
    kind: TableKind,
    since: i64,
    report: &mut RunReport,
) -> Result<
    (
        TableSnapshot,
        Option<Vec<TableFile>>,
        Vec<TableCommit>,
        &'static str,
    ),
    RunError,
> {
    let job = cx.job;
    let changes = table::changes(location, kind, since, TableVersion::Latest)
        .await
        .map_err(RunError::read(format!(
            "read the table's commits after {} {since}",
            noun(kind)
        )))?;
    let rewrites: Vec<String> = changes
        .commits
        .iter()
        .filter(|c| c.kind == CommitKind::Rewrite)
        .map(|c| format!("{} {} ({})", noun(kind), c.version, c.operation))
        .collect();
    let policy = if rewrites.is_empty() {
        OnRewrite::Skip
    } else {
        job.on_rewrite
    };
    match policy {
        OnRewrite::Fail => Err(RunError::Rewritten {
            kind: kind.as_str(),
            source_url: job.source.clone(),
            noun: noun(kind),
            since,
            commits: rewrites.join(", "),
        }),
        OnRewrite::Retrain => Ok((changes.snapshot, None, changes.commits, "all")),
        OnRewrite::Skip => {
            if !rewrites.is_empty() {
                let rows = rewritten_rows(location, &changes, job).await?;
                warn!(
                    rows,
                    commits = %rewrites.join(", "),
                    "rows in files the rewrites added are not trained (on-rewrite = \"skip\")"
                );
                report.skipped_rewritten_rows = rows;
            }
            let trains = if changes.appended.is_empty() {
                "nothing"
            } else {
                "appended"
            };
            Ok((
                changes.snapshot,
                Some(changes.appended),
                changes.commits,
                trains,
            ))
        }
    }
}

/// A table's run that trains nothing (only compactions, metadata or
/// skipped rewrites since the last): recorded, so that the next run starts
/// after them.
async fn record_only_run(
    cx: &Context<'_>,
    loaded: Loaded,
    mut report: RunReport,
    table: TrainedTable,
) -> Result<RunReport, RunError> {
    let trained = record(
        &loaded.trained,
        &report,
        None,
        cx.started_at.clone(),
        Some(table),
    );
    if let Some(lock) = cx.lock {
        lock.check()
            .await
            .map_err(RunError::lock("record the run"))?;
    }
    cx.state
        .save(&loaded, &trained)
        .await
        .map_err(RunError::state("record what this run trained"))?;
    report.recorded = true;
    Ok(report)
}

/// What a table's run trains, as the report lists it: the table at
/// version `to`.
fn table_partition(
    kind: TableKind,
    to: i64,
    location: &Location,
    dataset: &Dataset,
) -> NewPartition {
    NewPartition {
        path: format!("{kind} {to}"),
        url: location.url(),
        rows: dataset
            .files
            .iter()
            .map(|f| f.rows)
            .try_fold(0u64, |sum, rows| rows.map(|r| sum + r)),
        files: dataset.files.len(),
        source: None,
    }
}

/// Rows in the files of the table's new version that rewriting commits added,
/// less their deleted rows: from the log, or from the files' footers where the
/// log does not count them.
async fn rewritten_rows(
    location: &Location,
    changes: &table::TableChanges,
    job: &Job,
) -> Result<u64, RunError> {
    let files = &changes.rewritten;
    let from_log: Option<u64> = files
        .iter()
        .map(|f| f.rows.map(|r| r.saturating_sub(f.deleted.len() as u64)))
        .sum();
    if let Some(rows) = from_log {
        return Ok(rows);
    }
    let dataset = Dataset::from_table(
        location.clone(),
        changes.snapshot.clone(),
        Some(files.clone()),
        job.train.dataset.clone(),
    )
    .await
    .map_err(RunError::read("count the rows the rewrites added"))?;
    Ok(dataset.files.iter().filter_map(|f| f.rows).sum())
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
fn noun(kind: TableKind) -> &'static str {
    match kind {
        TableKind::Delta => "version",
        TableKind::Iceberg => "snapshot",
    }
}

/// A run id: the UTC time it started and its pid.
fn run_id() -> String {
    let time = now_text().replace([':', '-'], "");
    format!("{time}-{}", std::process::id())
}
