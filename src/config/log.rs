//! `--log-every`, `--log-format`: how a command logs where no one watches a
//! terminal (a cron mail, a pod's log, a scheduler's task log).

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::heading;
use super::value::parse_duration;
use super::{rule, OptionError};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Lines for people: on a terminal as they always were; elsewhere each
    /// line starts with its RFC 3339 time and level.
    #[default]
    Text,
    /// One JSON object per line, for log collectors: `timestamp`, `level`,
    /// `message`, `fields`.
    Json,
}

/// The logging options of every command.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct LogOptions {
    /// When stderr is not a terminal (or with --log-format json): a progress line (rows, rows/s, epoch, tasks done, ETA) at least this often, and one at each epoch's end; a wait says what it waits for as often (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, global = true, help = "Progress line interval where stderr is no terminal", long_help, help_heading = heading::LOGGING)]
    pub log_every: Duration,
    /// `text`: lines for people, timestamped (RFC 3339) when stderr is not a terminal; `json`: one JSON object per line (timestamp, level, message, fields) for log collectors.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text, global = true, help = "Log lines as text or json", long_help, hide_possible_values = true, help_heading = heading::LOGGING)]
    pub log_format: LogFormat,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            log_every: Duration::from_secs(30),
            log_format: LogFormat::Text,
        }
    }
}

impl LogOptions {
    /// Checks every rule, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        rule(
            self.log_every >= Duration::from_secs(1),
            "log-every",
            "must be at least 1s",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_more_than_once_a_second_is_refused() {
        assert!(LogOptions::default().validate().is_ok());
        let often = LogOptions {
            log_every: Duration::from_millis(100),
            ..LogOptions::default()
        };
        let err = often.validate().expect_err("100ms");
        assert!(err.to_string().contains("--log-every"), "{err}");
    }
}
