//! The start of a followed job: what its source holds committed, waited
//! for until it holds something (a streaming query or ETL that has not
//! written yet is normal), `--idle-exit` and `--follow-until` ending the wait.

use std::time::{Duration, Instant, SystemTime};

use connectors::table::TableKind;
use connectors::{Dataset, DatasetOptions, ErrorKind, Location, Report};

use super::inotify::LocalWatch;
use super::{catalog, delta, dirs, iceberg, sink, wait, watch_of, Watch};
use crate::config::FollowConfig;
use crate::protocol::follow::FollowPosition;

/// What a followed source holds at the start of its job.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per job
pub enum First {
    /// Its first committed data, and the position it stands for.
    Found(Dataset, FollowPosition),
    /// It held nothing until `--idle-exit` or `--follow-until` ended the
    /// wait (the warning written names which): the job has nothing to train.
    Ended,
}

/// Opens what the source holds committed at the start of a followed job,
/// waiting until it holds something: a streaming query or ETL that has not
/// written yet is normal. The wait says what it waits for when it starts
/// and every `--log-every`, and ends, with nothing, at `--follow-until` or
/// once the source has held nothing for `--idle-exit`. A table by name
/// (`table`) is asked about again at each look. The future holds nothing
/// durable: cancel it to stop waiting (a signal).
pub async fn first_dataset(
    location: &Location,
    options: &DatasetOptions,
    config: &FollowConfig,
    table: Option<&crate::config::TableRef>,
) -> Result<First, connectors::Error> {
    let started = Instant::now();
    let until = config.until.map(|u| u.deadline(SystemTime::now()));
    let mut said: Option<(String, crate::logging::Wait)> = None;
    let mut local = LocalWatch::new(location);
    let mut location = location.clone();
    let mut options = options.clone();
    let mut first = true;
    loop {
        if let (Some(table), false) = (table, first) {
            catalog::ask_waiting(table, &mut location, &mut options).await?;
        }
        first = false;
        let waiting = match try_first(&location, &options, config).await {
            Ok(Some((dataset, position))) => return Ok(First::Found(dataset, position)),
            Ok(None) => Waiting::Commit,
            Err(e) => Waiting::after(e, &location)?,
        };
        let limit = first_limit(config, until, started);
        if limit.is_some_and(|left| left.is_zero()) {
            let by = if until.is_some_and(|t| SystemTime::now() >= t) {
                "--follow-until"
            } else {
                "--idle-exit"
            };
            crate::logging::result_warning(format!(
                "following: {} held nothing to train when {by} ended the wait; nothing trained",
                location.url()
            ));
            return Ok(First::Ended);
        }
        let (what, detail) = waiting.said(&location.url());
        if said.as_ref().is_none_or(|(w, _)| *w != what) {
            said = Some((what.clone(), crate::logging::Wait::new(what)));
        }
        if let Some((_, wait)) = &mut said {
            // Whole seconds, rounded up: `--idle-exit 2s` reads as 2s.
            let shown = limit.map(|l| Duration::from_secs(l.as_secs_f64().ceil() as u64));
            wait.say(&detail, shown);
        }
        let pause = limit.map_or(config.poll, |left| left.min(config.poll));
        wait(&mut local, pause.max(Duration::from_millis(10))).await;
    }
}

/// What the start of a followed job waits for.
enum Waiting {
    /// The source's directory, bucket prefix or table to exist.
    Exist,
    /// Its first committed data.
    Commit,
    /// The source to answer again (a transient failure, its message).
    Readable(String),
}

impl Waiting {
    /// What a failed look at the source at `location` leaves the wait
    /// waiting for; an error that is not a wait's is returned.
    fn after(e: connectors::Error, location: &Location) -> Result<Waiting, connectors::Error> {
        match e {
            // A local directory that exists and holds nothing lists as
            // missing, as an empty prefix of an object store does.
            e if matches!(e.kind(), ErrorKind::NotFound) => {
                match location.local_dir().is_some_and(|dir| dir.is_dir()) {
                    true => Ok(Waiting::Commit),
                    false => Ok(Waiting::Exist),
                }
            }
            e @ connectors::Error::EmptyDir { .. } => {
                tracing::debug!(error = %Report(&e), "nothing to follow yet");
                Ok(Waiting::Commit)
            }
            e if e.is_transient() => Ok(Waiting::Readable(Report(&e).to_string())),
            e => Err(e),
        }
    }

    /// What is waited for in `url`, and what is there instead, as a wait says them.
    fn said(&self, url: &str) -> (String, String) {
        match self {
            Waiting::Exist => (format!("{url} to exist"), "nothing there yet".to_string()),
            Waiting::Commit => (
                format!("the first commit in {url}"),
                "nothing committed there yet".to_string(),
            ),
            Waiting::Readable(e) => (
                format!("the first commit in {url}"),
                format!("cannot read it now ({e}); trying again"),
            ),
        }
    }
}

/// How long the start of a followed job may still wait: until
/// `--follow-until`, and for `--idle-exit` since it `started` (the source
/// has held nothing since); `None` without either.
fn first_limit(
    config: &FollowConfig,
    until: Option<SystemTime>,
    started: Instant,
) -> Option<Duration> {
    let until = until.map(|t| t.duration_since(SystemTime::now()).unwrap_or_default());
    let idle = config
        .idle_exit
        .map(|d| d.saturating_sub(started.elapsed()));
    match (until, idle) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What the source at `location` holds committed now, by the kind of
/// source it is; `None` while nothing is.
async fn try_first(
    location: &Location,
    options: &DatasetOptions,
    config: &FollowConfig,
) -> Result<Option<(Dataset, FollowPosition)>, connectors::Error> {
    if options.catalog_partitions.is_some() {
        return catalog::first(location, options).await;
    }
    match watch_of(location).await? {
        Watch::Sink { .. } => sink::first(location, options).await,
        // Taken above (the catalog's partitions are in the options).
        Watch::Catalog { .. } => Ok(None),
        Watch::Table {
            kind: TableKind::Delta,
            ..
        } => delta::first(location, options).await,
        Watch::Table {
            kind: TableKind::Iceberg,
            ..
        } => iceberg::first(location, options).await,
        Watch::Partitions(_) => dirs::first(location, options, config.settle).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OnRewrite;

    fn config(idle_exit: Option<Duration>) -> FollowConfig {
        FollowConfig {
            poll: Duration::from_secs(1),
            settle: Duration::from_secs(30),
            until: None,
            idle_exit,
            on_rewrite: OnRewrite::Fail,
        }
    }

    #[test]
    fn the_wait_for_a_first_commit_is_bounded_by_idle_exit_from_the_start_and_follow_until() {
        let started = Instant::now();
        assert_eq!(first_limit(&config(None), None, started), None);
        let idle =
            first_limit(&config(Some(Duration::from_secs(2))), None, started).expect("a limit");
        assert!(idle <= Duration::from_secs(2) && idle > Duration::from_secs(1));
        let long_ago = started - Duration::from_secs(5);
        assert_eq!(
            first_limit(&config(Some(Duration::from_secs(2))), None, long_ago),
            Some(Duration::ZERO),
            "--idle-exit counts from the start while nothing is there"
        );
        let past = SystemTime::now() - Duration::from_secs(1);
        assert_eq!(
            first_limit(&config(Some(Duration::from_secs(60))), Some(past), started),
            Some(Duration::ZERO),
            "--follow-until passed ends the wait"
        );
    }
}
