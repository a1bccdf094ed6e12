//! The master's HTTP API (`/v1/...`): request and response bodies shared by
//! the master and the worker's client.
//!
//! Every request carries the job token; every request after `register` also
//! names its worker and carries the secret `register` handed it, and a report
//! on an attempt is accepted only from the worker that leased it.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::epoch::Epoch;
use crate::protocol::ops::{self, WorkerOperation};
use crate::protocol::spec::JobSpec;
use crate::queue::{FailOutcome, LeaseReply, QueueError, QueueStatus, WorkerId, WorkerSecret};

/// The path prefix of every API call.
pub const PREFIX: &str = "/v1";
/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;

/// The longest worker name kept, in characters (longer ones are cut).
pub const MAX_NAME_CHARS: usize = 64;

/// A request of the API: the path it is posted to and the reply it gets.
/// The worker's client sends any of them with one generic call, and the
/// master's handlers take and answer them by the same types.
pub trait Request: Serialize + Send + Sync {
    /// The path, e.g. `/v1/lease`.
    const PATH: &'static str;
    /// Whether the master applying the request twice leaves things as once
    /// would, or adds only what a lost reply leaves anyway (a registration:
    /// see [`RegisterRequest`]): only such requests are sent again after a
    /// failure that leaves open whether the master got them (a timeout, a
    /// reset connection, a 5xx). The others are sent again only when they
    /// never left (the connection was refused) or the master said it did not
    /// apply them (503).
    const IDEMPOTENT: bool;
    /// The body of the master's reply.
    type Reply: serde::de::DeserializeOwned + Serialize + Send;
}

/// A read of the API: `GET PATH?QUERY`, answered with `Reply`. Reads change
/// nothing, so a failed one is always asked again.
pub trait Get: Serialize + DeserializeOwned + Send + Sync {
    /// The path, e.g. `/v1/job`.
    const PATH: &'static str;
    /// The body of the master's reply.
    type Reply: DeserializeOwned + Serialize + Send;
    /// The path with the query string, as the worker's client asks for it.
    fn path_and_query(&self) -> String {
        let query = query_string(self);
        if query.is_empty() {
            Self::PATH.to_string()
        } else {
            format!("{}?{query}", Self::PATH)
        }
    }
}

/// `GET /v1/job?name=NAME`: the job's spec; the worker named NAME resumes from
/// its last complete checkpoint, if its trainers keep checkpoints.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobQuery {
    /// The asking worker's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Get for JobQuery {
    const PATH: &'static str = "/v1/job";
    type Reply = JobSpec;
}

/// `GET /v1/splits?from=N`: the splits from index N on (a followed job adds
/// splits while it runs; a worker asks for those it lacks).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SplitsQuery {
    /// The first split wanted.
    pub from: usize,
}

impl Get for SplitsQuery {
    const PATH: &'static str = "/v1/splits";
    type Reply = Vec<connectors::Split>;
}

/// `GET /v1/epoch?epoch=N`: how epoch N (0-based) hands out its splits
/// ([`crate::queue::EpochView`]): the workers of a job of `--world-size`
/// order their lanes' windows by it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpochQuery {
    /// The epoch (its serde form is the 0-based index).
    pub epoch: Epoch,
}

impl Get for EpochQuery {
    const PATH: &'static str = "/v1/epoch";
    type Reply = Option<crate::queue::EpochView>;
}

/// `GET /v1/status`: the job's status (also the page's and `sluice status`'s).
/// A browser may give the token as `?token=`; the client sends it as a header.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusQuery {
    /// The job token, for pages opened in a browser.
    #[serde(default, skip_serializing)]
    pub token: Option<String>,
}

impl Get for StatusQuery {
    const PATH: &'static str = "/v1/status";
    type Reply = StatusReply;
}

/// `KEY=VALUE&...` of a query's fields, percent-encoded (RFC 3986 unreserved
/// characters kept); fields must be strings, numbers or absent.
fn query_string<T: Serialize>(query: &T) -> String {
    let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(query) else {
        return String::new();
    };
    fields
        .iter()
        .filter_map(|(key, value)| match value {
            serde_json::Value::String(s) => Some(format!("{key}={}", crate::percent::encode(s))),
            serde_json::Value::Number(n) => Some(format!("{key}={n}")),
            serde_json::Value::Bool(b) => Some(format!("{key}={b}")),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("&")
}

impl Request for RegisterRequest {
    const PATH: &'static str = "/v1/register";
    // Each one makes a new worker, yet sending one again is safe: a worker
    // registered by a request whose reply never arrived is one that died at
    // once, holding nothing, never seen live (as any worker killed right after
    // it registered), so a worker that starts while its master restarts waits
    // for it like any request does.
    const IDEMPOTENT: bool = true;
    type Reply = RegisterReply;
}

/// A worker's operation as it travels: the operation's fields and the
/// worker's secret, side by side in one JSON object.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Signed<O> {
    /// The secret `register` handed the worker the operation names.
    pub secret: WorkerSecret,
    /// The operation.
    #[serde(flatten)]
    pub op: O,
}

impl<O: WorkerOperation> Request for Signed<O> {
    const PATH: &'static str = O::PATH;
    const IDEMPOTENT: bool = O::IDEMPOTENT;
    type Reply = Answer<O::Output>;
}

/// `POST /v1/lease`.
pub type LeaseRequest = Signed<ops::Lease>;
/// `POST /v1/heartbeat`.
pub type HeartbeatRequest = Signed<ops::Heartbeat>;
/// `POST /v1/commit`.
pub type CommitRequest = Signed<ops::Commit>;
/// `POST /v1/finish`.
pub type FinishRequest = Signed<ops::Finish>;
/// `POST /v1/fail`.
pub type FailRequest = Signed<ops::Fail>;
/// `POST /v1/hand_back`.
pub type HandBackRequest = Signed<ops::HandBack>;
/// `POST /v1/checkpoint`.
pub type CheckpointRequest = Signed<ops::Checkpoint>;
pub use crate::protocol::ops::HeartbeatReply;

/// `POST /v1/register`: the body is optional (older workers send `null`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RegisterRequest {
    /// The name the worker gives itself, shown on the status page, in
    /// `sluice status` and in `/metrics` labels (see [`worker_name`]).
    #[serde(default)]
    pub name: Option<String>,
}

/// A worker's name as the master keeps it: trimmed, control characters
/// replaced by spaces, cut to [`MAX_NAME_CHARS`]; `None` when nothing is left.
pub fn worker_name(given: &str) -> Option<String> {
    let name: String = given
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_NAME_CHARS)
        .collect();
    let name = name.trim_end().to_string();
    (!name.is_empty()).then_some(name)
}

/// Answer to `POST /v1/register`: the worker's id and secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterReply {
    /// The id the master chose.
    pub worker: WorkerId,
    /// What the worker sends with each request to prove it is `worker`.
    pub secret: WorkerSecret,
}

/// Every answer: the queue's result, or its refusal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer<T> {
    /// Done.
    Ok(T),
    /// Refused by the queue (stale attempt, unknown worker...).
    Refused(QueueError),
}

/// `GET /v1/job`: what a worker needs to start.
pub type JobReply = JobSpec;

/// `GET /v1/status`. Row counts are the queue's own, so the status page,
/// `/metrics` and `sluice status` agree with it at every moment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReply {
    /// The dataset.
    pub url: String,
    /// Queue counts.
    pub queue: QueueStatus,
    /// Rows acknowledged by trainers and durably committed, over all epochs
    /// (what a restart would not serve again).
    pub rows_committed: u64,
    /// Rows of tasks done, over all epochs.
    pub rows_done: u64,
    /// Rows the whole job serves (the splits' rows times the epochs), once
    /// every split's row count is known.
    pub rows_total: Option<u64>,
    /// Live workers (heard from within the lease timeout), by id.
    pub workers: Vec<WorkerStatus>,
    /// Workers registered that are no longer live.
    pub workers_departed: usize,
    /// Seconds the job has left at the pace since the master started (the
    /// ETA of its progress lines): `None` before a row was committed, 0
    /// once the job is over.
    #[serde(default)]
    pub eta_seconds: Option<f64>,
    /// Failed tasks with their files.
    pub failed: Vec<FailedTaskStatus>,
    /// A followed job's position and lag (`--follow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<crate::protocol::follow::FollowStatus>,
    /// What the workers' caches did (`--cache`), summed over every worker
    /// that reported one, departed ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<connectors::cache::CacheStats>,
    /// The sources of a job that mixes several, each with its rows
    /// committed over all epochs (with `--epoch-rows`, the rows an epoch
    /// passed over count as committed too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceStatus>,
}

/// One source of a mixed job in the status.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceStatus {
    /// Its name (`sluice.source`).
    pub name: String,
    /// Its rows committed, over all epochs.
    pub rows: u64,
}

/// One live worker on the status page.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Its id.
    pub worker: WorkerId,
    /// The name it gave itself (`sluice worker --name`); empty for workers
    /// that gave none.
    pub name: String,
    /// Rows its trainers acknowledged, as its last heartbeat reported them
    /// (its own figure: it trails the queue's committed rows).
    pub rows: u64,
    /// Recent rows per second, from its heartbeats.
    pub rows_per_second: f64,
    /// Seconds since its last heartbeat.
    pub seconds_since_heartbeat: f64,
    /// The ranks of the world it took, ascending, in a job of
    /// `--world-size` (absent otherwise): its device `i` trains the `i`-th.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<u32>>,
}

/// A failed task on the status page.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailedTaskStatus {
    /// Its file.
    pub file: String,
    /// Epoch (JSON counts from 1).
    #[serde(with = "crate::epoch::one_based")]
    pub epoch: Epoch,
    /// Why.
    pub reason: String,
}

/// Lease answers use the queue's own type.
pub type LeaseAnswer = Answer<LeaseReply>;
/// Fail answers use the queue's own type.
pub type FailAnswer = Answer<FailOutcome>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_names_are_trimmed_cleaned_and_bounded() {
        assert_eq!(worker_name("  node-7-4121 \n"), Some("node-7-4121".into()));
        assert_eq!(worker_name("a\nb\u{7}c"), Some("a b c".into()));
        assert_eq!(worker_name(" \t "), None);
        let long = "x".repeat(500);
        assert_eq!(
            worker_name(&long).map(|n| n.chars().count()),
            Some(MAX_NAME_CHARS)
        );
    }

    #[test]
    fn a_register_body_may_be_null_empty_or_named() {
        let none: Option<RegisterRequest> = serde_json::from_str("null").expect("null");
        assert!(none.is_none());
        let empty: RegisterRequest = serde_json::from_str("{}").expect("{}");
        assert_eq!(empty.name, None);
        let named: RegisterRequest = serde_json::from_str(r#"{"name":"w1"}"#).expect("named");
        assert_eq!(named.name.as_deref(), Some("w1"));
    }
}

#[cfg(test)]
mod get_tests {
    use super::*;

    #[test]
    fn reads_ask_for_their_path_with_the_query_encoded() {
        let job = JobQuery {
            name: Some("pod a/1".to_string()),
        };
        assert_eq!(job.path_and_query(), "/v1/job?name=pod%20a%2F1");
        assert_eq!(JobQuery::default().path_and_query(), "/v1/job");
        assert_eq!(
            SplitsQuery { from: 7 }.path_and_query(),
            "/v1/splits?from=7"
        );
        // The token travels in a header, never in a URL a log could keep.
        let status = StatusQuery {
            token: Some("secret".to_string()),
        };
        assert_eq!(status.path_and_query(), "/v1/status");
    }

    #[test]
    fn an_epoch_travels_as_its_index_and_reads_back_as_an_epoch() {
        let asked = EpochQuery { epoch: Epoch(2) };
        let path = asked.path_and_query();
        assert_eq!(path, "/v1/epoch?epoch=2");
        let uri: axum::http::Uri = path.parse().expect("a path");
        let axum::extract::Query(read) =
            axum::extract::Query::<EpochQuery>::try_from_uri(&uri).expect("the master reads it");
        assert_eq!(read.epoch, Epoch(2));
    }
}
