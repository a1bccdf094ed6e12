//! The master's HTTP API (`/v1/...`): request and response bodies shared by
//! the master and the worker's client.
//!
//! Every request carries the job token; every request after `register` also
//! names its worker and carries the secret `register` handed it, and a report
//! on an attempt is accepted only from the worker that leased it.

use serde::{Deserialize, Serialize};

use crate::job::spec::JobSpec;
use crate::task::{
    AttemptId, FailOutcome, LeaseReply, QueueError, QueueStatus, WorkerId, WorkerSecret,
};

/// The path prefix of every API call.
pub const PREFIX: &str = "/v1";
/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;

/// `POST /v1/register`: answered with the worker's id and secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterReply {
    /// The id the master chose.
    pub worker: WorkerId,
    /// What the worker sends with each request to prove it is `worker`.
    pub secret: WorkerSecret,
}

/// `POST /v1/lease`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseRequest {
    /// The asking worker.
    pub worker: WorkerId,
    /// Its secret.
    pub secret: WorkerSecret,
    /// Most tasks wanted.
    pub max: usize,
}

/// `POST /v1/heartbeat`: renews every lease of the worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatRequest {
    /// The worker.
    pub worker: WorkerId,
    /// Its secret.
    pub secret: WorkerSecret,
    /// Rows its trainers acknowledged so far (for the status page).
    #[serde(default)]
    pub rows: u64,
    /// Attempts the worker is working on; leases the master granted it but
    /// missing here never reached it (the master died before answering) and
    /// are taken back.
    #[serde(default)]
    pub held: Option<Vec<crate::task::AttemptId>>,
}

/// Answer to a heartbeat: attempts the worker lost.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// Attempts no longer the worker's.
    pub lost: Vec<AttemptId>,
}

/// `POST /v1/commit`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitRequest {
    /// The reporting worker: the one that leased the attempt.
    pub worker: WorkerId,
    /// Its secret.
    pub secret: WorkerSecret,
    /// The attempt.
    pub attempt: AttemptId,
    /// Rows of the split acknowledged.
    pub offset: u64,
}

/// `POST /v1/finish`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FinishRequest {
    /// The reporting worker: the one that leased the attempt.
    pub worker: WorkerId,
    /// Its secret.
    pub secret: WorkerSecret,
    /// The attempt.
    pub attempt: AttemptId,
    /// Rows of the split.
    pub rows: u64,
}

/// `POST /v1/hand_back`: the worker gives an attempt back unfinished.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HandBackRequest {
    /// The worker that leased the attempt.
    pub worker: WorkerId,
    /// Its secret.
    pub secret: WorkerSecret,
    /// The attempt.
    pub attempt: AttemptId,
}

/// `POST /v1/checkpoint`: the worker's trainers keep checkpoints (no `id`),
/// or completed checkpoint `id` holding `pieces`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointRequest {
    /// The reporting worker.
    pub worker: WorkerId,
    /// Its secret.
    pub secret: WorkerSecret,
    /// The checkpoint's ID; absent for the declaration.
    #[serde(default)]
    pub id: Option<String>,
    /// Rows the checkpoint adds to the cut.
    #[serde(default)]
    pub pieces: Vec<crate::task::CutPiece>,
}

/// `POST /v1/fail`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailRequest {
    /// The reporting worker: the one that leased the attempt.
    pub worker: WorkerId,
    /// Its secret.
    pub secret: WorkerSecret,
    /// The attempt.
    pub attempt: AttemptId,
    /// Why, naming the file.
    pub reason: String,
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

/// `GET /v1/status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReply {
    /// The dataset.
    pub url: String,
    /// Queue counts.
    pub queue: QueueStatus,
    /// Rows acknowledged, summed over workers' last heartbeats.
    pub rows: u64,
    /// Per-worker figures.
    pub workers: Vec<WorkerStatus>,
    /// Failed tasks with their files.
    pub failed: Vec<FailedTaskStatus>,
}

/// One worker on the status page.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Its id.
    pub worker: WorkerId,
    /// Rows its trainers acknowledged.
    pub rows: u64,
    /// Recent rows per second.
    pub rows_per_second: f64,
    /// Seconds since its last heartbeat.
    pub seconds_since_heartbeat: f64,
}

/// A failed task on the status page.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailedTaskStatus {
    /// Its file.
    pub file: String,
    /// Epoch.
    pub epoch: u32,
    /// Why.
    pub reason: String,
}

/// Lease answers use the queue's own type.
pub type LeaseAnswer = Answer<LeaseReply>;
/// Fail answers use the queue's own type.
pub type FailAnswer = Answer<FailOutcome>;
