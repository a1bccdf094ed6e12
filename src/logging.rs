//! Log lines that work without a terminal: where stderr is a file or a pipe
//! (cron, a pod's log, a scheduler's task log) every line starts with its
//! RFC 3339 time, long jobs say how far they are every `--log-every`, and
//! `--log-format json` writes one JSON object per line for log collectors.
//!
//! Two kinds of lines are written whatever the log level: a command's
//! results (its summary, its failed tasks, where a master listens) and its
//! progress (progress lines, what a wait waits for). Everything else is a
//! `tracing` event filtered by `-v` and `RUST_LOG` as before.

use std::fmt;
use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::Visit;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogOptions};
use crate::epoch::Epoch;

/// The `tracing` target of a command's result lines (always written).
pub const RESULT: &str = "sluice_result";
/// The `tracing` target of progress lines and of what waits wait for (always
/// written).
pub const PROGRESS: &str = "sluice_progress";

/// How this process logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Text or JSON.
    pub format: LogFormat,
    /// The longest time between two progress lines.
    pub every: Duration,
    /// Whether stderr is a terminal.
    pub terminal: bool,
}

impl Settings {
    /// Whether progress is written as log lines (stderr is no terminal, or
    /// the lines are JSON) rather than drawn as a progress bar.
    pub fn progress_lines(&self) -> bool {
        !self.terminal || self.format == LogFormat::Json
    }

    /// Whether results are plain lines, as on a terminal, rather than log lines.
    pub fn plain_results(&self) -> bool {
        self.terminal && self.format == LogFormat::Text
    }
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// The settings [`init`] was given; before it (library use, tests): text,
/// every 30 s, and whether stderr is a terminal.
pub fn settings() -> Settings {
    *SETTINGS.get_or_init(|| Settings {
        format: LogFormat::Text,
        every: LogOptions::default().log_every,
        terminal: std::io::stderr().is_terminal(),
    })
}

/// Installs the process's `tracing` subscriber: `verbose` (-v, -vv) or
/// `RUST_LOG` chooses the level of ordinary events; results and progress are
/// always written.
pub fn init(verbose: u8, options: &LogOptions) {
    let settings = Settings {
        format: options.log_format,
        every: options.log_every,
        terminal: std::io::stderr().is_terminal(),
    };
    let _ = SETTINGS.set(settings);
    let default = match verbose {
        // hdfs-native warns about each namenode it fails over from; the error
        // that matters reaches the user as the one-line message.
        0 => "warn,hdfs_native=error",
        1 => "debug",
        _ => "trace",
    };
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    for target in [RESULT, PROGRESS] {
        if let Ok(directive) = format!("{target}=info").parse() {
            filter = filter.add_directive(directive);
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match (settings.format, settings.terminal) {
        (LogFormat::Json, _) => builder.event_format(Json).try_init(),
        (LogFormat::Text, false) => builder.event_format(Plain).try_init(),
        // On a terminal: colours, as before.
        (LogFormat::Text, true) => builder
            .with_ansi(true)
            .with_target(false)
            .with_timer(Rfc3339)
            .compact()
            .try_init(),
    };
}

/// One line of a command's result (its summary, a failed task): plain on a
/// terminal, a timestamped log line elsewhere.
pub fn result(line: impl fmt::Display) {
    if settings().plain_results() {
        eprintln!("{line}");
    } else {
        tracing::info!(target: RESULT, "{line}");
    }
}

/// A result that is a warning (a run stopped before its end).
pub fn result_warning(line: impl fmt::Display) {
    if settings().plain_results() {
        eprintln!("{line}");
    } else {
        tracing::warn!(target: RESULT, "{line}");
    }
}

/// The line of an error that ends the command: `sluice: MESSAGE`, one line,
/// for people and scripts; a JSON object with `--log-format json`.
pub fn fatal(message: &str, exit_code: u8) {
    if settings().format == LogFormat::Json {
        tracing::error!(target: RESULT, exit_code, "{message}");
    } else {
        eprintln!("sluice: {message}");
    }
}

/// Now, as RFC 3339 in UTC with milliseconds: `2026-05-01T07:30:00.123Z`.
pub fn now_rfc3339() -> String {
    chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now())
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The timer of terminal lines.
struct Rfc3339;

impl FormatTime for Rfc3339 {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        w.write_str(&now_rfc3339())
    }
}

/// An event's message and its other fields.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<(&'static str, serde_json::Value)>,
}

impl Fields {
    fn of(event: &Event<'_>) -> Fields {
        let mut fields = Fields::default();
        event.record(&mut fields);
        fields
    }

    fn add(&mut self, field: &tracing::field::Field, value: serde_json::Value) {
        let name = field.name();
        // Events bridged from the `log` crate carry where they came from.
        if name.starts_with("log.") {
            return;
        }
        if name == "message" {
            self.message = match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
        } else {
            self.rest.push((name, value));
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.add(field, serde_json::Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.add(field, serde_json::Value::String(value.to_string()));
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.add(field, value.into());
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.add(field, value.into());
    }

    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        let value = serde_json::Number::from_f64(value).map_or(serde_json::Value::Null, Into::into);
        self.add(field, value);
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.add(field, value.into());
    }
}

/// Whether an event is a result or progress line, whose message says it all
/// (its fields are for JSON).
fn says_it_all(event: &Event<'_>) -> bool {
    let target = event.metadata().target();
    target == RESULT || target == PROGRESS
}

/// Lines for a file or a pipe: `TIME LEVEL message key=value ...`, no colours.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let fields = Fields::of(event);
        let level = *event.metadata().level();
        write!(writer, "{} {:>5} {}", now_rfc3339(), level, fields.message)?;
        if !says_it_all(event) {
            for (name, value) in &fields.rest {
                match value {
                    serde_json::Value::String(s) => write!(writer, " {name}={s}")?,
                    other => write!(writer, " {name}={other}")?,
                }
            }
        }
        writeln!(writer)
    }
}

/// One JSON object per line: `timestamp`, `level`, `message`, `fields`.
struct Json;

impl<S, N> FormatEvent<S, N> for Json
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let fields = Fields::of(event);
        let rest: serde_json::Map<String, serde_json::Value> = fields
            .rest
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        // In this order, for people reading the raw lines too.
        writeln!(
            writer,
            "{{\"timestamp\":{},\"level\":{},\"message\":{},\"fields\":{}}}",
            serde_json::Value::from(now_rfc3339()),
            serde_json::Value::from(level_name(*event.metadata().level())),
            serde_json::Value::from(fields.message),
            serde_json::Value::Object(rest)
        )
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// When the next periodic line is due.
#[derive(Debug)]
pub struct Every {
    period: Duration,
    next: Instant,
}

impl Every {
    /// Due first `period` from now, then every `period`.
    pub fn new(period: Duration) -> Every {
        Every {
            period,
            next: Instant::now() + period,
        }
    }

    /// Whether a line is due now; if so, the next is due `period` later.
    pub fn due(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        self.next = now + self.period;
        true
    }

    /// A line was just written for another reason (an epoch's end): the next
    /// periodic one is due `period` from now.
    pub fn reset(&mut self) {
        self.next = Instant::now() + self.period;
    }
}

/// Where a job stands, as a progress line says it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProgressLine {
    /// The epoch the line is about (0-based).
    pub epoch: Epoch,
    /// Epochs in the job.
    pub epochs: u32,
    /// Whether that epoch just ended.
    pub epoch_done: bool,
    /// Rows trained (a master: committed) by this process so far; in the
    /// line of an epoch's end, that epoch's rows.
    pub rows: u64,
    /// Rows per second over the last interval (the epoch, for its end).
    pub rows_per_second: f64,
    /// Tasks done over all epochs, and in the whole job.
    pub tasks_done: u64,
    /// Tasks of the whole job (splits times epochs).
    pub tasks: u64,
    /// Time left, when it can be told.
    pub eta: Option<Duration>,
    /// A master's live workers.
    pub workers: Option<usize>,
    /// A master's tasks under a live lease.
    pub leases: Option<usize>,
}

impl ProgressLine {
    /// The line for people.
    pub fn text(&self) -> String {
        let mut text = if self.epoch_done {
            format!("epoch {}/{} done:", self.epoch, self.epochs)
        } else {
            format!("progress: epoch {}/{},", self.epoch, self.epochs)
        };
        text.push_str(&format!(
            " {} rows ({:.0} rows/s), {}/{} tasks done",
            self.rows, self.rows_per_second, self.tasks_done, self.tasks
        ));
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        if let Some(workers) = self.workers {
            text.push_str(&format!(", {workers} worker{}", plural(workers)));
        }
        if let Some(leases) = self.leases {
            text.push_str(&format!(", {leases} lease{}", plural(leases)));
        }
        match self.eta {
            Some(eta) => text.push_str(&format!(", ETA {}", short_duration(eta))),
            None => text.push_str(", ETA unknown"),
        }
        text
    }

    /// Writes the line (always: it is not filtered by the log level).
    pub fn log(&self) {
        tracing::info!(
            target: PROGRESS,
            epoch = self.epoch.number(),
            epochs = self.epochs,
            epoch_done = self.epoch_done,
            rows = self.rows,
            rows_per_second = self.rows_per_second,
            tasks_done = self.tasks_done,
            tasks = self.tasks,
            eta_seconds = self.eta.map(|d| d.as_secs()),
            workers = self.workers.map(|w| w as u64),
            leases = self.leases.map(|l| l as u64),
            "{}",
            self.text()
        );
    }
}

/// A followed job's line: what was taken and trained, and the lag.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowLine {
    /// Rows trained (committed) of the rows taken.
    pub rows_trained: u64,
    /// Rows taken, at least those trained.
    pub rows_taken: u64,
    /// Tasks trained of the tasks taken.
    pub tasks_trained: u64,
    /// Tasks taken, at least those trained.
    pub tasks_taken: u64,
    /// Rows per second over the last interval.
    pub rows_per_second: f64,
    /// Rows taken and not trained yet.
    pub lag_rows: u64,
    /// Seconds since the oldest data not trained yet was seen.
    pub lag_seconds: f64,
}

impl FollowLine {
    /// The line for people.
    pub fn text(&self) -> String {
        format!(
            "following: {} rows trained of {} taken ({:.0} rows/s), {} tasks trained of {} taken, lag {} rows / {}",
            self.rows_trained,
            self.rows_taken,
            self.rows_per_second,
            self.tasks_trained,
            self.tasks_taken,
            self.lag_rows,
            short_duration(Duration::from_secs_f64(self.lag_seconds.max(0.0)))
        )
    }

    /// Writes the line (always: it is not filtered by the log level).
    pub fn log(&self) {
        tracing::info!(
            target: PROGRESS,
            rows_trained = self.rows_trained,
            rows_taken = self.rows_taken,
            tasks_trained = self.tasks_trained,
            tasks_taken = self.tasks_taken,
            rows_per_second = self.rows_per_second,
            lag_rows = self.lag_rows,
            lag_seconds = self.lag_seconds,
            "{}",
            self.text()
        );
    }
}

/// The time left when `done` of `total` took `elapsed`: the rest at the same
/// pace. `None` before anything was done.
pub fn eta(done: u64, total: u64, elapsed: Duration) -> Option<Duration> {
    if done == 0 || total < done {
        return None;
    }
    let left = (total - done) as f64 * elapsed.as_secs_f64() / done as f64;
    Duration::try_from_secs_f64(left).ok()
}

/// A duration for people: `45s`, `12m 5s`, `3h 20m`.
pub fn short_duration(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
    }
}

/// A wait that says what it waits for when it starts and again every
/// `--log-every`; what it was waiting for when it ended is the caller's.
#[derive(Debug)]
pub struct Wait {
    what: String,
    since: Instant,
    next: Option<Instant>,
}

impl Wait {
    /// A wait for `what` (`"_SUCCESS in hdfs://nn:8020/out"`), starting now.
    pub fn new(what: impl Into<String>) -> Wait {
        Wait {
            what: what.into(),
            since: Instant::now(),
            next: None,
        }
    }

    /// How long it has waited.
    pub fn waited(&self) -> Duration {
        self.since.elapsed()
    }

    /// Says, if due, what it waits for and why (`detail`: what is there
    /// instead), with `limit` (how long it waits at most) on the first line.
    pub fn say(&mut self, detail: &str, limit: Option<Duration>) {
        let now = Instant::now();
        match self.next {
            None => {
                let limit = limit
                    .map(|l| format!(" (for up to {})", short_duration(l)))
                    .unwrap_or_default();
                tracing::info!(target: PROGRESS, waiting_for = %self.what, detail, "waiting for {}{limit}: {detail}", self.what);
            }
            Some(next) if now >= next => {
                let waited = short_duration(self.waited());
                tracing::info!(target: PROGRESS, waiting_for = %self.what, detail, waited_seconds = self.waited().as_secs(), "still waiting for {} after {waited}: {detail}", self.what);
            }
            Some(_) => return,
        }
        self.next = Some(now + settings().every);
    }

    /// Whether it has said anything yet.
    pub fn said(&self) -> bool {
        self.next.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        let now = now_rfc3339();
        let parsed = chrono::DateTime::parse_from_rfc3339(&now).expect("RFC 3339");
        assert_eq!(parsed.offset().local_minus_utc(), 0, "{now}");
        assert!(now.ends_with('Z') && now.len() == 24, "{now}");
    }

    #[test]
    fn a_progress_line_says_where_the_job_stands() {
        let line = ProgressLine {
            epoch: Epoch(0),
            epochs: 2,
            rows: 5000,
            rows_per_second: 2500.0,
            tasks_done: 3,
            tasks: 10,
            eta: Some(Duration::from_secs(75)),
            workers: Some(2),
            leases: Some(4),
            ..ProgressLine::default()
        };
        assert_eq!(
            line.text(),
            "progress: epoch 1/2, 5000 rows (2500 rows/s), 3/10 tasks done, 2 workers, 4 leases, ETA 1m 15s"
        );
        let done = ProgressLine {
            epoch_done: true,
            eta: None,
            workers: None,
            leases: None,
            ..line
        };
        assert_eq!(
            done.text(),
            "epoch 1/2 done: 5000 rows (2500 rows/s), 3/10 tasks done, ETA unknown"
        );
    }

    #[test]
    fn the_eta_is_the_rest_at_the_same_pace() {
        assert_eq!(eta(0, 10, Duration::from_secs(5)), None);
        assert_eq!(
            eta(5, 10, Duration::from_secs(5)),
            Some(Duration::from_secs(5))
        );
        assert_eq!(eta(10, 10, Duration::from_secs(5)), Some(Duration::ZERO));
        assert_eq!(eta(11, 10, Duration::from_secs(5)), None);
    }
}
