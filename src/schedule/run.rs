//! One run of a job: take the lock, find the complete partitions not trained yet,
//! train one model on all of them (continuing the last run's model), and only then
//! record them and the new checkpoint in `trained.json`.

use connectors::table::{
    self, CommitKind, TableCommit, TableFile, TableKind, TableSnapshot, TableVersion,
};
use connectors::{Dataset, Location};
use tracing::{info, warn};

use super::common::{
    new_partitions, noun, record, train_and_record, Context, NewPartition, RunOptions, RunReport,
    TableRun, WaitingPartition,
};
use super::job::{Job, OnRewrite};
use super::lock::Lock;
use super::partitions::{self, Pattern, Status};
use super::state::{now_text, Loaded, StateStore, TrainedTable};
use super::RunError;
use crate::job::train::Outcome;
use crate::worker::pipeline::Stop;

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
        .map(|p| new_partition(&dataset, name_of(p), p))
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

/// A new metastore partition `name` as the report shows it: its location,
/// its files in `dataset` and their rows where every file records them.
fn new_partition(
    dataset: &Dataset,
    name: String,
    partition: &connectors::CatalogPartition,
) -> NewPartition {
    let files: Vec<_> = dataset
        .files
        .iter()
        .filter(|f| f.partition_dir == name)
        .collect();
    NewPartition {
        path: name,
        url: partition.url.clone(),
        rows: files.iter().try_fold(0, |sum, f| f.rows.map(|r| sum + r)),
        files: files.len(),
        source: None,
    }
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
        return Err(empty_table(kind, &location, to, appends_since));
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

/// The error of a table run that finds no row to train at version `to`
/// (the rows appended after `appends_since`, where only those are read).
fn empty_table(
    kind: TableKind,
    location: &Location,
    to: i64,
    appends_since: Option<i64>,
) -> RunError {
    let noun = noun(kind);
    let appends = appends_since
        .map(|from| format!(" (the rows appended after {noun} {from})"))
        .unwrap_or_default();
    RunError::Empty {
        what: format!(
            "the {kind} table {} at {noun} {to}{appends}",
            location.url()
        ),
    }
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

/// A run id: the UTC time it started and its pid.
fn run_id() -> String {
    let time = now_text().replace([':', '-'], "");
    format!("{time}-{}", std::process::id())
}
