//! `--follow` and its options: a job that keeps training what its source
//! commits while it runs (`train`, `master`, job files).

use std::time::{Duration, SystemTime};

use clap::Args;
use serde::{Deserialize, Serialize};

use super::heading;
use super::value::{form, parse_duration, parse_timestamp};
use super::{rule, OptionError};

/// When a followed job stops taking new data: at a point in time, or this
/// long after it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowUntil {
    /// Milliseconds since the epoch.
    At(i64),
    /// After the start of this run.
    After(Duration),
}

impl FollowUntil {
    /// The point in time, for a run that started at `started`.
    pub fn deadline(&self, started: SystemTime) -> SystemTime {
        match *self {
            FollowUntil::At(ms) => {
                let ms = u64::try_from(ms).unwrap_or(0);
                SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
            }
            FollowUntil::After(d) => started + d,
        }
    }
}

/// Parses `--follow-until`: RFC 3339 (or the other forms of a point in
/// time), or a duration from the start (`2h`).
pub fn parse_follow_until(s: &str) -> Result<FollowUntil, String> {
    if let Ok(d) = parse_duration(s) {
        return Ok(FollowUntil::After(d));
    }
    parse_timestamp(s).map(FollowUntil::At).map_err(|_| {
        format!("`{}` is neither a time (RFC 3339, e.g. 2026-12-01T18:00:00Z) nor a duration from the start (e.g. 8h)", s.trim())
    })
}

/// The default of `--poll`.
pub const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// The default of `--settle`.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(30);

/// Following a source: after the data present at the start, the job turns
/// what is committed later into tasks, as it is committed.
#[derive(Debug, Clone, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct FollowOptions {
    /// Keep running after the data present at the start and train what the source commits later, as it is committed: new batches of a streaming file sink, new versions of a Delta table or snapshots of an Iceberg table (appends), new partition directories of an output directory. Every row once; ends on SIGTERM/SIGINT (exit 130, resumable with --state), at --follow-until, or after --idle-exit.
    #[arg(long, help = "Keep training what the source commits later", long_help, help_heading = heading::FOLLOW)]
    pub follow: bool,
    /// With --follow: how often the source is looked at (a local directory is also watched with inotify, which sees a commit at once).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration, requires = "follow", help = "How often the source is looked at", long_help, help_heading = heading::FOLLOW)]
    #[serde(deserialize_with = "form::duration")]
    pub poll: Duration,
    /// With --follow on a directory whose writer leaves no _SUCCESS: a new partition directory is taken once it has not changed for this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, requires = "follow", help = "Quiet time of a new partition without _SUCCESS", long_help, help_heading = heading::FOLLOW, hide_short_help = true)]
    #[serde(deserialize_with = "form::duration")]
    pub settle: Duration,
    /// With --follow: stop taking new data at this time (RFC 3339, e.g. 2026-12-01T18:00:00Z) or this long after the start (e.g. 8h), train what was taken, and exit 0 (also while still waiting for the source's first data).
    #[arg(long, value_name = "TIME|DURATION", value_parser = parse_follow_until, requires = "follow", help = "Stop following at this time or after this long", long_help, help_heading = heading::FOLLOW)]
    #[serde(deserialize_with = "follow_until")]
    pub follow_until: Option<FollowUntil>,
    /// With --follow: stop once what was taken is trained and the source has not changed for this long (files landing in a partition not committed yet count as a change), exit 0; a source that holds nothing yet (not created, or empty) counts from the start. Default: never.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "follow", help = "Stop once the source is unchanged this long", long_help, help_heading = heading::FOLLOW)]
    #[serde(deserialize_with = "form::some_duration")]
    pub idle_exit: Option<Duration>,
}

fn follow_until<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<FollowUntil>, D::Error> {
    let text = String::deserialize(d)?;
    parse_follow_until(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

impl Default for FollowOptions {
    fn default() -> Self {
        FollowOptions {
            follow: false,
            poll: DEFAULT_POLL,
            settle: DEFAULT_SETTLE,
            follow_until: None,
            idle_exit: None,
        }
    }
}

impl FollowOptions {
    /// Checks every rule, naming the first option that breaks one; `epochs`
    /// is the job's.
    pub fn validate(&self, epochs: u32) -> Result<(), OptionError> {
        if !self.follow {
            return Ok(());
        }
        rule(
            epochs == 1,
            "follow",
            "trains each row once, as it is committed; --epochs other than 1 cannot go with it",
        )?;
        rule(!self.poll.is_zero(), "poll", "must be more than 0")?;
        rule(!self.settle.is_zero(), "settle", "must be more than 0")
    }

    /// The validated settings: `None` when the job does not follow.
    pub fn config(&self, epochs: u32) -> Result<Option<FollowConfig>, OptionError> {
        self.validate(epochs)?;
        Ok(self.follow.then_some(FollowConfig {
            poll: self.poll,
            settle: self.settle,
            until: self.follow_until,
            idle_exit: self.idle_exit,
            on_rewrite: OnRewrite::Fail,
        }))
    }
}

/// What `sluice run` does on a table when commits since the last run removed
/// or rewrote rows it trained (overwrite, delete, merge, update). Compactions,
/// which rewrite files without changing rows, are always skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRewrite {
    /// Stop without training or recording anything (exit 2), naming the
    /// rewriting versions and the other choices: a rewrite is never left
    /// untrained unless the job file says so.
    #[default]
    Fail,
    /// Train the table's whole current version again.
    Retrain,
    /// Train only the rows appended since; the rows of files the rewrites
    /// added are not trained, and counted as `skipped_rewritten_rows`.
    Skip,
}

/// How a job follows its source (see [`FollowOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowConfig {
    /// How often the source is looked at.
    pub poll: Duration,
    /// How long a new partition of a writer that leaves no marker must stay unchanged.
    pub settle: Duration,
    /// When to stop taking new data.
    pub until: Option<FollowUntil>,
    /// Stop once what was taken is trained and the source has not changed
    /// for this long.
    pub idle_exit: Option<Duration>,
    /// What a table commit that deleted or rewrote rows does: stop the job
    /// (the default), or, from a job file's `on-rewrite`, take only the
    /// appends (`skip`) or the whole new version (`retrain`).
    pub on_rewrite: OnRewrite,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_until_takes_a_time_or_a_duration() {
        assert_eq!(
            parse_follow_until("2h"),
            Ok(FollowUntil::After(Duration::from_secs(7200)))
        );
        assert_eq!(
            parse_follow_until("2026-12-01T18:00:00Z"),
            Ok(FollowUntil::At(1_796_148_000_000))
        );
        assert!(parse_follow_until("soon").is_err());
    }

    #[test]
    fn follow_refuses_more_than_one_epoch() {
        let options = FollowOptions {
            follow: true,
            ..FollowOptions::default()
        };
        let err = options.config(2).expect_err("refused");
        assert_eq!(err.option, "follow");
        assert!(options.config(1).expect("valid").is_some());
        assert!(FollowOptions::default().config(3).expect("valid").is_none());
    }
}
