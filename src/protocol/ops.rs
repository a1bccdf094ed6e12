//! The queue operations a worker asks of a master, typed: each is one
//! struct that says how it is recorded (the journal's [`Command`], made at a
//! time the caller gives) and what its answer is (taken out of the queue's
//! [`Reply`]). The master's HTTP handler, the worker's HTTP client and the
//! embedded queue of `sluice train` all go through these, so an operation's
//! rules (the bound on `max`, the length of a failure's reason, which
//! command a checkpoint report is) live in one place.
//!
//! The operations a worker sends over the API ([`WorkerOperation`]) travel
//! signed with its secret, as [`crate::protocol::api::Signed`].

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::queue::{
    AttemptId, Command, CutPiece, FailOutcome, LeaseReply, Millis, QueueError, Reply, WorkerId,
    WorkerSecret,
};

/// Most tasks one lease request may ask for.
pub const MAX_LEASE: usize = 1024;
/// Longest failure reason kept, in characters (longer ones are cut).
pub const MAX_REASON_CHARS: usize = 2000;

/// An operation on the queue.
pub trait Operation: Send + Sync + 'static {
    /// What it does, for messages (`lease tasks`).
    const DOING: &'static str;
    /// The answer when the queue accepts it.
    type Output: Serialize + DeserializeOwned + Send;
    /// The command that records it, made at `now`.
    fn command(self, now: Millis) -> Command;
    /// Its answer out of `reply`, the queue's reply to its command; `None`
    /// for a reply to another command (a bug, reported rather than a panic).
    fn output(reply: Reply) -> Option<Result<Self::Output, QueueError>>;
    /// Whether its fields are well formed by themselves, before the queue
    /// judges them (row ranges that end after they start, in order): why
    /// not, which the API answers `400 Bad Request`.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// An operation a worker sends to a master over the API.
pub trait WorkerOperation: Operation + Serialize + DeserializeOwned {
    /// The path it is posted to, e.g. `/v1/lease`.
    const PATH: &'static str;
    /// Whether the master applying it twice leaves things as once would:
    /// only such operations are sent again after a failure that leaves open
    /// whether the master got them (see [`crate::protocol::api::Request`]).
    const IDEMPOTENT: bool;
    /// The worker that sends it.
    fn worker(&self) -> WorkerId;
}

/// A new worker, with its secret (workers of a master) and name.
#[derive(Debug, Clone, Default)]
pub struct Register {
    /// What the worker proves itself with; `None` in the embedded queue.
    pub secret: Option<WorkerSecret>,
    /// The name it gave itself.
    pub name: Option<String>,
}

impl Operation for Register {
    const DOING: &'static str = "register the worker";
    type Output = WorkerId;
    fn command(self, now: Millis) -> Command {
        Command::Register {
            now,
            secret: self.secret,
            name: self.name,
        }
    }
    fn output(reply: Reply) -> Option<Result<WorkerId, QueueError>> {
        match reply {
            Reply::Register(worker) => Some(Ok(worker)),
            _ => None,
        }
    }
}

/// `POST /v1/lease`: up to `max` tasks (at most [`MAX_LEASE`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lease {
    /// The asking worker.
    pub worker: WorkerId,
    /// Most tasks wanted.
    pub max: usize,
}

impl Operation for Lease {
    const DOING: &'static str = "lease tasks";
    type Output = LeaseReply;
    fn command(self, now: Millis) -> Command {
        Command::Lease {
            now,
            worker: self.worker,
            max: self.max.clamp(1, MAX_LEASE),
        }
    }
    fn output(reply: Reply) -> Option<Result<LeaseReply, QueueError>> {
        match reply {
            Reply::Lease(result) => Some(result),
            _ => None,
        }
    }
}

/// `POST /v1/ranks`: the worker, of `devices` devices, takes as many ranks
/// of a job of `--world-size` (see [`crate::queue::Ranks`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TakeRanks {
    /// The asking worker.
    pub worker: WorkerId,
    /// Its devices: the ranks it takes.
    pub devices: u32,
}

impl Operation for TakeRanks {
    const DOING: &'static str = "take ranks of the job's world";
    type Output = crate::queue::RanksReply;
    fn command(self, now: Millis) -> Command {
        Command::TakeRanks {
            now,
            worker: self.worker,
            devices: self.devices,
        }
    }
    fn output(reply: Reply) -> Option<Result<Self::Output, QueueError>> {
        match reply {
            Reply::Ranks(result) => Some(result),
            _ => None,
        }
    }
}

/// `POST /v1/heartbeat`: renews every lease of the worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The worker.
    pub worker: WorkerId,
    /// Rows its trainers acknowledged so far (for the status page).
    #[serde(default)]
    pub rows: u64,
    /// Attempts the worker is working on; leases the master granted it but
    /// missing here never reached it (the master died before answering) and
    /// are taken back.
    #[serde(default)]
    pub held: Option<Vec<AttemptId>>,
    /// The splits whose files the worker's cache holds (`--cache`), sent
    /// when that changed: from the second epoch on the master leases them
    /// to this worker rather than to others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<Vec<u32>>,
    /// What the worker's cache did so far (`--cache`), for status and metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<connectors::cache::CacheStats>,
}

/// Answer to a heartbeat: attempts the worker lost.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// Attempts no longer the worker's.
    pub lost: Vec<AttemptId>,
}

impl Operation for Heartbeat {
    const DOING: &'static str = "renew the worker's leases";
    type Output = HeartbeatReply;
    fn command(self, now: Millis) -> Command {
        Command::Heartbeat {
            now,
            worker: self.worker,
            cached: self.cached,
        }
    }
    fn output(reply: Reply) -> Option<Result<HeartbeatReply, QueueError>> {
        match reply {
            Reply::Heartbeat(result) => Some(result.map(|lost| HeartbeatReply { lost })),
            _ => None,
        }
    }
}

/// `POST /v1/commit`: rows of an attempt acknowledged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Commit {
    /// The reporting worker: the one that leased the attempt.
    pub worker: WorkerId,
    /// The attempt.
    pub attempt: AttemptId,
    /// Rows of the split acknowledged.
    pub offset: u64,
    /// Rows acknowledged past `offset`: sorted, disjoint `[start, end)`
    /// ranges (absent from older workers: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<(u64, u64)>,
}

impl Operation for Commit {
    const DOING: &'static str = "commit acknowledged rows";
    type Output = ();
    fn check(&self) -> Result<(), String> {
        let mut last = self.offset;
        for &(start, end) in &self.ranges {
            if start >= end {
                return Err(format!("row range [{start}, {end}) is empty or inverted"));
            }
            if start < last {
                return Err(format!(
                    "row range [{start}, {end}) starts before the offset or the range before it ({last})"
                ));
            }
            last = end;
        }
        Ok(())
    }
    fn command(self, now: Millis) -> Command {
        Command::Commit {
            now,
            worker: Some(self.worker),
            attempt: self.attempt,
            offset: self.offset,
            ranges: self.ranges,
        }
    }
    fn output(reply: Reply) -> Option<Result<(), QueueError>> {
        match reply {
            Reply::Commit(result) => Some(result),
            _ => None,
        }
    }
}

/// `POST /v1/finish`: an attempt read and acknowledged to its end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finish {
    /// The reporting worker: the one that leased the attempt.
    pub worker: WorkerId,
    /// The attempt.
    pub attempt: AttemptId,
    /// Rows of the split.
    pub rows: u64,
}

impl Operation for Finish {
    const DOING: &'static str = "finish a task";
    type Output = ();
    fn command(self, now: Millis) -> Command {
        Command::Finish {
            now,
            worker: Some(self.worker),
            attempt: self.attempt,
            rows: self.rows,
        }
    }
    fn output(reply: Reply) -> Option<Result<(), QueueError>> {
        match reply {
            Reply::Finish(result) => Some(result),
            _ => None,
        }
    }
}

/// `POST /v1/fail`: an attempt failed (its reason is cut to
/// [`MAX_REASON_CHARS`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fail {
    /// The reporting worker: the one that leased the attempt.
    pub worker: WorkerId,
    /// The attempt.
    pub attempt: AttemptId,
    /// Why, naming the file.
    pub reason: String,
    /// No attempt can succeed (a file changed since planning): the task
    /// fails now, whatever attempts it has left.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub for_good: bool,
}

impl Operation for Fail {
    const DOING: &'static str = "fail a task";
    type Output = FailOutcome;
    fn command(self, now: Millis) -> Command {
        Command::Fail {
            now,
            worker: Some(self.worker),
            attempt: self.attempt,
            reason: self.reason.chars().take(MAX_REASON_CHARS).collect(),
            for_good: self.for_good,
        }
    }
    fn output(reply: Reply) -> Option<Result<FailOutcome, QueueError>> {
        match reply {
            Reply::Fail(result) => Some(result),
            _ => None,
        }
    }
}

/// `POST /v1/hand_back`: the worker gives an attempt back unfinished.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HandBack {
    /// The worker that leased the attempt.
    pub worker: WorkerId,
    /// The attempt.
    pub attempt: AttemptId,
}

impl Operation for HandBack {
    const DOING: &'static str = "hand a task back";
    type Output = ();
    fn command(self, now: Millis) -> Command {
        Command::HandBack {
            now,
            worker: self.worker,
            attempt: self.attempt,
        }
    }
    fn output(reply: Reply) -> Option<Result<(), QueueError>> {
        match reply {
            Reply::HandBack(result) => Some(result),
            _ => None,
        }
    }
}

/// `POST /v1/checkpoint`: the worker's trainers keep checkpoints (no `id`),
/// completed checkpoint `id` holding `pieces`, or (with `unsaved`) hold
/// these rows in none of their complete checkpoints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The reporting worker.
    pub worker: WorkerId,
    /// The checkpoint's ID; absent for the declaration.
    #[serde(default)]
    pub id: Option<String>,
    /// Rows the checkpoint adds to the cut.
    #[serde(default)]
    pub pieces: Vec<CutPiece>,
    /// Instead of a checkpoint: the rows the worker's trainers acknowledged
    /// that are in none of its complete checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsaved: Option<Vec<CutPiece>>,
    /// With `unsaved`: the trainers ended their streams holding these rows
    /// in no checkpoint (no `checkpoint ID` after their last batch).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ended: bool,
}

impl Operation for Checkpoint {
    const DOING: &'static str = "record a trainer's checkpoint";
    type Output = ();
    fn check(&self) -> Result<(), String> {
        let pieces = self.pieces.iter().chain(self.unsaved.iter().flatten());
        match pieces.into_iter().find(|p| p.start >= p.end) {
            Some(p) => Err(format!(
                "rows [{}, {}) of split {} are empty or inverted",
                p.start, p.end, p.split
            )),
            None => Ok(()),
        }
    }
    fn command(self, now: Millis) -> Command {
        match (self.unsaved, self.id) {
            (Some(pieces), _) if self.ended => Command::UnsavedAtEnd {
                now,
                worker: self.worker,
                pieces,
            },
            (Some(pieces), _) => Command::Unsaved {
                now,
                worker: self.worker,
                pieces,
            },
            (None, Some(id)) => Command::Checkpoint {
                now,
                id,
                pieces: self.pieces,
                worker: Some(self.worker),
            },
            (None, None) => Command::DeclareCheckpoints { now },
        }
    }
    fn output(reply: Reply) -> Option<Result<(), QueueError>> {
        checkpoint_output(reply)
    }
}

/// A checkpoint of the whole job's trainers (the embedded queue of `sluice
/// train`, whose one worker restores the job's checkpoint): declared (no
/// `id`) or complete. Nothing in it is refused.
#[derive(Debug, Clone)]
pub struct JobCheckpoint {
    /// The checkpoint's ID; `None` for the declaration.
    pub id: Option<String>,
    /// Rows the checkpoint adds to the cut.
    pub pieces: Vec<CutPiece>,
}

impl Operation for JobCheckpoint {
    const DOING: &'static str = "record the job's checkpoint";
    type Output = ();
    fn command(self, now: Millis) -> Command {
        match self.id {
            Some(id) => Command::Checkpoint {
                now,
                id,
                pieces: self.pieces,
                worker: None,
            },
            None => Command::DeclareCheckpoints { now },
        }
    }
    fn output(reply: Reply) -> Option<Result<(), QueueError>> {
        checkpoint_output(reply)
    }
}

fn checkpoint_output(reply: Reply) -> Option<Result<(), QueueError>> {
    match reply {
        Reply::Recorded => Some(Ok(())),
        Reply::Unsaved(result) | Reply::Checkpoint(result) => Some(result),
        _ => None,
    }
}

macro_rules! worker_operations {
    ($($op:ty => $path:literal, idempotent: $idempotent:literal;)*) => {$(
        impl WorkerOperation for $op {
            const PATH: &'static str = $path;
            const IDEMPOTENT: bool = $idempotent;
            fn worker(&self) -> WorkerId {
                self.worker
            }
        }
    )*};
}

// Why each is idempotent:
// - lease: a second grant whose reply never arrived is taken back at the
//   worker's next heartbeat, which lists the leases it holds;
// - heartbeat: renews the same leases;
// - commit: committed offsets only move forward; the same offset again is
//   accepted and changes nothing;
// - finish, fail, hand back: once applied the attempt is no longer live, and
//   a repeat is refused as stale without changing anything;
// - checkpoint: records the same id with the same pieces (a set), or the
//   same unsaved pieces (replaced, not added);
// - take ranks: a worker takes its own ranks again.
worker_operations! {
    Lease => "/v1/lease", idempotent: true;
    TakeRanks => "/v1/ranks", idempotent: true;
    Heartbeat => "/v1/heartbeat", idempotent: true;
    Commit => "/v1/commit", idempotent: true;
    Finish => "/v1/finish", idempotent: true;
    Fail => "/v1/fail", idempotent: true;
    HandBack => "/v1/hand_back", idempotent: true;
    Checkpoint => "/v1/checkpoint", idempotent: true;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_row_ranges_are_refused_before_the_queue() {
        let commit = |offset: u64, ranges: Vec<(u64, u64)>| Commit {
            worker: WorkerId(1),
            attempt: crate::queue::AttemptId(1),
            offset,
            ranges,
        };
        assert!(commit(0, vec![(500, 100)]).check().is_err(), "inverted");
        assert!(commit(0, vec![(5, 5)]).check().is_err(), "empty");
        assert!(
            commit(10, vec![(5, 20)]).check().is_err(),
            "before the offset"
        );
        assert!(
            commit(0, vec![(5, 9), (7, 12)]).check().is_err(),
            "overlapping"
        );
        assert!(commit(0, vec![(5, 9), (9, 12)]).check().is_ok());
        assert!(commit(4, Vec::new()).check().is_ok());
    }

    #[test]
    fn a_checkpoint_report_is_one_of_three_commands() {
        let report = |id: Option<&str>, unsaved: Option<Vec<CutPiece>>| Checkpoint {
            worker: WorkerId(3),
            id: id.map(str::to_string),
            pieces: Vec::new(),
            unsaved,
            ended: false,
        };
        assert!(matches!(
            report(None, None).command(1),
            Command::DeclareCheckpoints { now: 1 }
        ));
        assert!(matches!(
            report(Some("7"), None).command(1),
            Command::Checkpoint { worker: Some(WorkerId(3)), ref id, .. } if id == "7"
        ));
        assert!(matches!(
            report(Some("7"), Some(Vec::new())).command(1),
            Command::Unsaved { .. }
        ));
    }

    #[test]
    fn bounds_are_applied_where_the_command_is_made() {
        let lease = Lease {
            worker: WorkerId(1),
            max: 1 << 20,
        };
        assert!(matches!(
            lease.command(0),
            Command::Lease { max: MAX_LEASE, .. }
        ));
        let fail = Fail {
            worker: WorkerId(1),
            attempt: AttemptId(2),
            reason: "x".repeat(10_000),
            for_good: false,
        };
        match fail.command(0) {
            Command::Fail { reason, .. } => assert_eq!(reason.chars().count(), MAX_REASON_CHARS),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reply_to_another_command_is_no_answer() {
        assert!(Commit::output(Reply::Finish(Ok(()))).is_none());
        assert!(Commit::output(Reply::Commit(Ok(()))).is_some());
        assert!(Register::output(Reply::Recorded).is_none());
    }
}
