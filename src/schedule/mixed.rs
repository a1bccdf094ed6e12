//! A run of a job file with `[[source]]` tables: each source's complete
//! partitions that no earlier run trained (each source's record kept apart
//! in `trained.json`, under its URL), mixed by weight into one training,
//! each source read with its own `where` and `filter`. A source with nothing
//! new sits this run out; the weights interleave the sources that have new
//! partitions (and with `epoch-rows`, share the epoch among them).

use connectors::table;
use connectors::Dataset;
use tracing::{info, warn};

use super::common::{
    new_partitions, record, train_and_record, Context, RunReport, WaitingPartition,
};
use super::partitions::{self, Pattern, Status};
use super::state::Loaded;
use super::RunError;
use crate::config::MixConfig;
use crate::job::train::TrainError;
use crate::plan::{PlanError, PlanRequest};

/// What one source holds that is new.
struct SourceNews {
    /// Its index among the job's sources.
    index: usize,
    /// Its new partitions, opened as one dataset.
    dataset: Dataset,
}

/// Runs a job of several sources once (see the module's notes).
pub(super) async fn run_mixed(cx: &Context<'_>, mix: &MixConfig) -> Result<RunReport, RunError> {
    let job = cx.job;
    if job.table.is_some() || job.catalog.is_set() {
        return Err(RunError::Source {
            source_url: job.source.clone(),
            reason: "[[source]] tables take paths or URLs of directories (with `*` for partitions); a table by name in a catalog is one source of its own job".to_string(),
        });
    }
    let identity = mix.describe();
    let rows = job.train.select.describe();
    let loaded = cx
        .state
        .load(&identity, rows.as_deref())
        .await
        .map_err(RunError::state("read what earlier runs trained"))?;
    let mut report = RunReport::start(cx, 0);
    report.source = identity;
    let mut news = Vec::new();
    for index in 0..mix.sources.len() {
        if let Some(found) = source_news(cx, &loaded, mix, index, &mut report).await? {
            news.push(found);
        }
    }
    if report.matched == 0 && !cx.options.allow_empty {
        return Err(RunError::NoMatch {
            source_url: report.source.clone(),
        });
    }
    if report.new.is_empty() {
        info!(sources = %report.source, "nothing new to train");
        return Ok(report);
    }
    news.retain(|n| !n.dataset.known_empty());
    if news.is_empty() {
        let urls: Vec<&str> = report.new.iter().map(|p| p.url.as_str()).collect();
        if !cx.options.allow_empty {
            return Err(RunError::Empty {
                what: format!("{} new partitions ({})", urls.len(), urls.join(", ")),
            });
        }
        warn!("the new partitions hold no rows (allowed by allow-empty)");
        if !cx.options.dry_run {
            record_empty(cx, &loaded, &mut report).await?;
        }
        return Ok(report);
    }
    let present = MixConfig {
        sources: news.iter().map(|n| mix.sources[n.index].clone()).collect(),
        ..mix.clone()
    };
    let datasets: Vec<Dataset> = news.into_iter().map(|n| n.dataset).collect();
    let mut config = job.train.clone();
    let (dataset, mixed) = PlanRequest::of_train(&config)
        .mix_opened(&present, datasets)
        .await
        .map_err(|e| RunError::train("the mixed sources")(TrainError::from(e)))?;
    if cx.options.dry_run {
        return Ok(report);
    }
    config.url = present.sources[0].url.clone();
    config.mix = Some(present);
    train_and_record(cx, loaded, config, dataset, report, None, Some(mixed)).await
}

/// Lists source `index` of `mix`: its partitions trained before and
/// waiting go into `report`, its new complete ones too, opened as one
/// dataset (`None` when it has none).
async fn source_news(
    cx: &Context<'_>,
    loaded: &Loaded,
    mix: &MixConfig,
    index: usize,
    report: &mut RunReport,
) -> Result<Option<SourceNews>, RunError> {
    let source = &mix.sources[index];
    let pattern = Pattern::parse(&source.url)?;
    if !source.url.contains('*') {
        let location =
            connectors::store::open(&source.url).map_err(RunError::read("open the source"))?;
        let detected = table::detect(&location)
            .await
            .map_err(RunError::read(format!(
                "tell whether source {} is a Delta or Iceberg table",
                source.url
            )))?;
        if let Some(kind) = detected {
            return Err(RunError::Source {
                source_url: source.url.clone(),
                reason: format!("a {kind} table cannot be a [[source]] of a job file yet: `sluice run` mixes directories and partition patterns; train the table in a job of its own"),
            });
        }
    }
    let expansion = partitions::expand(&pattern).await?;
    report.matched += expansion.partitions.len();
    let trained = loaded.trained.sources.get(&source.url);
    let mut roots = Vec::new();
    for p in &expansion.partitions {
        if trained.is_some_and(|t| t.contains_key(&p.name)) {
            report.trained_before += 1;
            continue;
        }
        match &p.status {
            Status::Complete => roots.push(p.clone()),
            Status::Waiting(reason) => report.waiting.push(WaitingPartition {
                path: format!("{}: {}", source.name, p.name),
                reason: reason.clone(),
            }),
        }
    }
    if roots.is_empty() {
        return Ok(None);
    }
    let paths: Vec<_> = roots.iter().map(|p| p.path.clone()).collect();
    let named = |cause| match source.has_own_filter() {
        true => RunError::train(format!("the new partitions of source {}", source.url))(
            TrainError::from(PlanError::from(crate::mix::named(source, cause))),
        ),
        false => RunError::read(format!("list the new partitions of source {}", source.url))(cause),
    };
    let options = source.options(&cx.job.train.dataset).map_err(named)?;
    let dataset = Dataset::open_roots(expansion.base.clone(), &paths, options)
        .await
        .map_err(named)?;
    for mut new in new_partitions(&expansion, &roots, &dataset) {
        new.source = Some(source.url.clone());
        report.new.push(new);
    }
    Ok(Some(SourceNews { index, dataset }))
}

/// Records `report`'s new partitions, none of which holds a row, as trained.
async fn record_empty(
    cx: &Context<'_>,
    loaded: &Loaded,
    report: &mut RunReport,
) -> Result<(), RunError> {
    let trained = record(&loaded.trained, report, None, cx.started_at.clone(), None);
    if let Some(lock) = cx.lock {
        lock.check()
            .await
            .map_err(RunError::lock("record the run"))?;
    }
    cx.state
        .save(loaded, &trained)
        .await
        .map_err(RunError::state("record what this run trained"))?;
    report.recorded = true;
    Ok(())
}
