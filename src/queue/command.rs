//! Every mutating call on a [`Queue`] as data, so a journal can record the inputs and a
//! restarted master can replay them: the same commands in the same order on a fresh
//! `Queue::new` with the same splits and config give an identical queue. Commands
//! whose [`Reply::changed`] is false may be left out of the journal.

use serde::{Deserialize, Serialize};

use super::books::Queue;
use super::cut::CutPiece;
use super::error::QueueError;
use super::types::{AttemptId, Expired, FailOutcome, LeaseReply, Millis, WorkerId, WorkerSecret};

/// One call on the queue, with the time it was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// [`Queue::register_as`]: a new worker, with its secret and name when given.
    Register {
        now: Millis,
        /// The worker's secret (workers of a master); absent in older journals.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<WorkerSecret>,
        /// The name the worker gave itself; absent in older journals.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// [`Queue::lease`].
    Lease {
        now: Millis,
        worker: WorkerId,
        max: usize,
    },
    /// [`Queue::take_ranks`].
    TakeRanks {
        now: Millis,
        worker: WorkerId,
        devices: u32,
    },
    /// [`Queue::set_world`]: a master resumed with another `--world-size`.
    SetWorld { now: Millis, world: u32 },
    /// [`Queue::heartbeat_holding`].
    Heartbeat {
        now: Millis,
        worker: WorkerId,
        /// The splits whose files the worker's cache holds, when it says
        /// (absent: as before, and in older journals).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cached: Option<Vec<u32>>,
    },
    /// [`Queue::commit_ranges`].
    Commit {
        now: Millis,
        /// The reporting worker. Absent in journals older than the check,
        /// whose records were accepted from the attempt's holder.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<WorkerId>,
        attempt: AttemptId,
        offset: u64,
        /// Rows acknowledged past `offset` (absent: none, and in older journals).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ranges: Vec<(u64, u64)>,
    },
    /// [`Queue::finish`].
    Finish {
        now: Millis,
        /// The reporting worker. Absent in journals older than the check,
        /// whose records were accepted from the attempt's holder.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<WorkerId>,
        attempt: AttemptId,
        rows: u64,
    },
    /// [`Queue::fail`].
    Fail {
        now: Millis,
        /// The reporting worker. Absent in journals older than the check,
        /// whose records were accepted from the attempt's holder.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<WorkerId>,
        attempt: AttemptId,
        reason: String,
        /// No attempt can succeed (a file changed since planning): the task
        /// fails now, whatever attempts it has left ([`Queue::fail_for_good`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        for_good: bool,
    },
    /// [`Queue::hand_back`].
    HandBack {
        now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
    },
    /// [`Queue::declare_checkpoints`].
    DeclareCheckpoints { now: Millis },
    /// [`Queue::checkpoint`].
    Checkpoint {
        now: Millis,
        id: String,
        pieces: Vec<CutPiece>,
        /// The worker whose trainers wrote it (absent for `sluice train`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<WorkerId>,
    },
    /// [`Queue::unsaved`].
    Unsaved {
        now: Millis,
        worker: WorkerId,
        pieces: Vec<CutPiece>,
    },
    /// [`Queue::unsaved_at_end`].
    UnsavedAtEnd {
        now: Millis,
        worker: WorkerId,
        pieces: Vec<CutPiece>,
    },
    /// [`Queue::rewind`].
    Rewind { now: Millis },
    /// [`Queue::renew_all`].
    RenewAll { now: Millis },
    /// [`Queue::tick`].
    Tick { now: Millis },
    /// [`Queue::retry_failed`] (`--retry-failed`).
    RetryFailed { now: Millis },
    /// [`Queue::grow`]: splits a followed job found committed in its source.
    Grow {
        now: Millis,
        first: u32,
        rows: Vec<Option<u64>>,
        record: serde_json::Value,
        /// Each split's source, in a job that mixes several (empty for one).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sources: Vec<u32>,
    },
    /// [`Queue::close`]: a followed job takes no more splits.
    Close { now: Millis },
    /// [`Queue::reopen`]: a closed followed job takes splits again.
    Reopen { now: Millis },
}

impl Command {
    /// The time the call was made.
    pub fn now(&self) -> Millis {
        match *self {
            Command::Register { now, .. }
            | Command::Lease { now, .. }
            | Command::TakeRanks { now, .. }
            | Command::SetWorld { now, .. }
            | Command::Heartbeat { now, .. }
            | Command::Commit { now, .. }
            | Command::Finish { now, .. }
            | Command::Fail { now, .. }
            | Command::HandBack { now, .. }
            | Command::DeclareCheckpoints { now }
            | Command::Checkpoint { now, .. }
            | Command::Unsaved { now, .. }
            | Command::UnsavedAtEnd { now, .. }
            | Command::Rewind { now }
            | Command::RenewAll { now }
            | Command::Tick { now }
            | Command::RetryFailed { now }
            | Command::Grow { now, .. }
            | Command::Close { now }
            | Command::Reopen { now } => now,
        }
    }
}

/// What a [`Command`] returned, one variant per command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Answer to [`Command::Register`].
    Register(WorkerId),
    /// Answer to [`Command::Lease`].
    Lease(Result<LeaseReply, QueueError>),
    /// Answer to [`Command::TakeRanks`]: the ranks taken, or how many are
    /// free while too few are.
    Ranks(Result<super::RanksReply, QueueError>),
    /// Answer to [`Command::Heartbeat`]: the attempts the worker lost.
    Heartbeat(Result<Vec<AttemptId>, QueueError>),
    /// Answer to [`Command::Commit`].
    Commit(Result<(), QueueError>),
    /// Answer to [`Command::Finish`].
    Finish(Result<(), QueueError>),
    /// Answer to [`Command::Fail`].
    Fail(Result<FailOutcome, QueueError>),
    /// Answer to [`Command::HandBack`].
    HandBack(Result<(), QueueError>),
    /// Answer to [`Command::Unsaved`] and [`Command::UnsavedAtEnd`].
    Unsaved(Result<(), QueueError>),
    /// Answer to [`Command::Checkpoint`].
    Checkpoint(Result<(), QueueError>),
    /// Answer to [`Command::Grow`].
    Grow(Result<(), QueueError>),
    /// Answer to [`Command::DeclareCheckpoints`] and [`Command::Rewind`].
    Recorded,
    /// Answer to [`Command::RetryFailed`]: the tasks put back, and the
    /// failures that could not be (see [`Queue::retry_failed`]).
    RetryFailed {
        /// Failed tasks put back to be read again.
        retried: usize,
        /// Failures left as they were.
        kept: usize,
    },
    /// Answer to [`Command::Tick`]: the leases that lapsed and the workers
    /// counted gone (silent past the lease timeout with unsaved rows).
    Tick {
        /// The leases that lapsed.
        expired: Vec<Expired>,
        /// The workers counted gone.
        gone: Vec<WorkerId>,
    },
}

impl Reply {
    /// False when the command changed nothing in the queue (a refusal, a lease answered
    /// with no tasks, a tick that expired nothing): a journal need not record it, and
    /// replaying the other commands still gives an identical queue.
    pub fn changed(&self) -> bool {
        match self {
            Reply::Register(_) => true,
            Reply::Lease(Ok(LeaseReply::Tasks(leases))) => !leases.is_empty(),
            Reply::Lease(_) => false,
            Reply::Ranks(reply) => matches!(reply, Ok(super::RanksReply::Taken(_))),
            Reply::Heartbeat(reply) => reply.is_ok(),
            Reply::Commit(reply)
            | Reply::Finish(reply)
            | Reply::HandBack(reply)
            | Reply::Unsaved(reply)
            | Reply::Grow(reply) => reply.is_ok(),
            Reply::Fail(reply) => reply.is_ok(),
            // A refused checkpoint may have counted its worker gone.
            Reply::Recorded | Reply::Checkpoint(_) => true,
            Reply::Tick { expired, gone } => !expired.is_empty() || !gone.is_empty(),
            Reply::RetryFailed { retried, .. } => *retried > 0,
        }
    }
}

impl Queue {
    /// Performs `command` and returns its answer.
    pub fn apply(&mut self, command: &Command) -> Reply {
        match command {
            Command::Register { now, secret, name } => {
                Reply::Register(self.register_as(*now, secret.clone(), name.clone()))
            }
            Command::Lease { now, worker, max } => Reply::Lease(self.lease(*now, *worker, *max)),
            Command::TakeRanks {
                now,
                worker,
                devices,
            } => Reply::Ranks(self.take_ranks(*now, *worker, *devices)),
            Command::SetWorld { world, .. } => {
                self.set_world(*world);
                Reply::Recorded
            }
            Command::Heartbeat {
                now,
                worker,
                cached,
            } => Reply::Heartbeat(self.heartbeat_holding(*now, *worker, cached.as_deref())),
            Command::Commit {
                now,
                worker,
                attempt,
                offset,
                ranges,
            } => self.apply_commit(*now, *worker, *attempt, *offset, ranges),
            Command::Finish {
                now,
                worker,
                attempt,
                rows,
            } => self.apply_finish(*now, *worker, *attempt, *rows),
            Command::Fail {
                now,
                worker,
                attempt,
                reason,
                for_good,
            } => self.apply_fail(*now, *worker, *attempt, reason, *for_good),
            Command::HandBack {
                now,
                worker,
                attempt,
            } => Reply::HandBack(self.hand_back(*now, *worker, *attempt)),
            Command::DeclareCheckpoints { now } => self.recorded(|q| q.declare_checkpoints(*now)),
            Command::Checkpoint {
                id, pieces, worker, ..
            } => Reply::Checkpoint(self.checkpoint_by(*worker, id, pieces)),
            Command::Unsaved {
                now,
                worker,
                pieces,
            } => Reply::Unsaved(self.unsaved(*now, *worker, pieces.clone())),
            Command::UnsavedAtEnd {
                now,
                worker,
                pieces,
            } => Reply::Unsaved(self.unsaved_at_end(*now, *worker, pieces.clone())),
            Command::Rewind { now } => self.recorded(|q| q.rewind(*now)),
            Command::RenewAll { now } => self.recorded(|q| q.renew_all(*now)),
            Command::Tick { now } => self.apply_tick(*now),
            Command::RetryFailed { now } => self.apply_retry_failed(*now),
            Command::Grow {
                now,
                first,
                rows,
                record,
                sources,
            } => self.apply_grow(*now, *first, rows, record, sources),
            Command::Close { now } => self.recorded(|q| q.close(*now)),
            Command::Reopen { now } => self.recorded(|q| q.reopen(*now)),
        }
    }

    /// Performs a command whose only answer is [`Reply::Recorded`].
    fn recorded(&mut self, change: impl FnOnce(&mut Self)) -> Reply {
        change(self);
        Reply::Recorded
    }

    /// Performs [`Command::Commit`].
    fn apply_commit(
        &mut self,
        now: Millis,
        worker: Option<WorkerId>,
        attempt: AttemptId,
        offset: u64,
        ranges: &[(u64, u64)],
    ) -> Reply {
        Reply::Commit(
            self.reporter(worker, attempt)
                .and_then(|w| self.commit_ranges(now, w, attempt, offset, ranges)),
        )
    }

    /// Performs [`Command::Finish`].
    fn apply_finish(
        &mut self,
        now: Millis,
        worker: Option<WorkerId>,
        attempt: AttemptId,
        rows: u64,
    ) -> Reply {
        Reply::Finish(
            self.reporter(worker, attempt)
                .and_then(|w| self.finish(now, w, attempt, rows)),
        )
    }

    /// Performs [`Command::Fail`]: for good, or counting an attempt.
    fn apply_fail(
        &mut self,
        now: Millis,
        worker: Option<WorkerId>,
        attempt: AttemptId,
        reason: &str,
        for_good: bool,
    ) -> Reply {
        Reply::Fail(self.reporter(worker, attempt).and_then(|w| {
            if for_good {
                self.fail_for_good(now, w, attempt, reason.to_string())
            } else {
                self.fail(now, w, attempt, reason.to_string())
            }
        }))
    }

    /// Performs [`Command::Tick`].
    fn apply_tick(&mut self, now: Millis) -> Reply {
        let (expired, gone) = self.tick_all(now);
        Reply::Tick { expired, gone }
    }

    /// Performs [`Command::RetryFailed`].
    fn apply_retry_failed(&mut self, now: Millis) -> Reply {
        let (retried, kept) = self.retry_failed(now);
        Reply::RetryFailed { retried, kept }
    }

    /// Performs [`Command::Grow`], then counts the new tasks to their sources.
    fn apply_grow(
        &mut self,
        now: Millis,
        first: u32,
        rows: &[Option<u64>],
        record: &serde_json::Value,
        sources: &[u32],
    ) -> Reply {
        Reply::Grow(
            self.grow(now, first, rows.to_vec(), record.clone())
                .map(|()| {
                    self.grew_sources(sources, rows);
                }),
        )
    }

    /// The worker a report speaks for: the one it names, or for a record of
    /// an older journal (which names none) the attempt's holder.
    fn reporter(
        &self,
        worker: Option<WorkerId>,
        attempt: AttemptId,
    ) -> Result<WorkerId, QueueError> {
        worker
            .or_else(|| self.holder(attempt))
            .ok_or(QueueError::Stale { attempt })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_through_json() {
        let commands = [
            Command::Register {
                now: 1,
                secret: None,
                name: None,
            },
            Command::Register {
                now: 1,
                secret: Some(WorkerSecret::new("00112233445566778899aabbccddeeff")),
                name: Some("gpu-node-7".into()),
            },
            Command::Lease {
                now: 2,
                worker: WorkerId(1),
                max: 4,
            },
            Command::Heartbeat {
                now: 3,
                worker: WorkerId(1),
                cached: Some(vec![0, 4]),
            },
            Command::Commit {
                now: 4,
                worker: Some(WorkerId(1)),
                attempt: AttemptId(7),
                offset: 100,
                ranges: vec![(150, 200)],
            },
            Command::Finish {
                now: 5,
                worker: None,
                attempt: AttemptId(7),
                rows: 120,
            },
            Command::Fail {
                now: 6,
                worker: Some(WorkerId(2)),
                attempt: AttemptId(8),
                reason: "file part-0001.parquet: bad magic".into(),
                for_good: false,
            },
            Command::Fail {
                now: 6,
                worker: Some(WorkerId(2)),
                attempt: AttemptId(9),
                reason: "file part-0002.parquet changed since the job was planned".into(),
                for_good: true,
            },
            Command::Tick { now: 7 },
        ];
        for command in commands {
            let json = serde_json::to_string(&command).expect("serialize");
            let back: Command = serde_json::from_str(&json).expect("deserialize");
            assert_eq!(back, command, "{json}");
            assert_eq!(back.now(), command.now());
        }
        let json = serde_json::to_string(&Command::Tick { now: 9 }).expect("serialize");
        assert_eq!(json, r#"{"op":"tick","now":9}"#);
    }

    #[test]
    fn records_of_older_journals_still_replay() {
        let old = [
            r#"{"op":"register","now":1}"#,
            r#"{"op":"lease","now":2,"worker":1,"max":1}"#,
            r#"{"op":"commit","now":3,"attempt":1,"offset":5}"#,
            r#"{"op":"finish","now":4,"attempt":1,"rows":9}"#,
        ];
        let mut queue = Queue::new(1, crate::queue::QueueConfig::default()).expect("queue");
        for line in old {
            let command: Command = serde_json::from_str(line).expect(line);
            assert!(queue.apply(&command).changed(), "{line}");
        }
        assert!(queue.is_over());
        assert_eq!(queue.split_rows(0), Some(9), "learned from the finish");
    }

    #[test]
    fn a_workers_name_survives_replay_and_snapshots() {
        let commands = [
            r#"{"op":"register","now":1,"secret":"00112233445566778899aabbccddeeff","name":"gpu-node-7"}"#,
            r#"{"op":"register","now":2}"#,
        ];
        let mut queue = Queue::new(1, crate::queue::QueueConfig::default()).expect("queue");
        for line in commands {
            let command: Command = serde_json::from_str(line).expect(line);
            queue.apply(&command);
        }
        assert_eq!(queue.worker_name(WorkerId(1)), Some("gpu-node-7"));
        assert_eq!(
            queue.worker_name(WorkerId(2)),
            None,
            "older records name none"
        );
        let snapshot = serde_json::to_string(&queue).expect("snapshot");
        let restored: Queue = serde_json::from_str(&snapshot).expect("restore");
        assert_eq!(restored.worker_name(WorkerId(1)), Some("gpu-node-7"));
        assert_eq!(restored, queue);
    }

    #[test]
    fn a_register_keeps_its_secret_out_of_debug_output() {
        let secret = "00112233445566778899aabbccddeeff";
        let command = Command::Register {
            now: 1,
            secret: Some(WorkerSecret::new(secret)),
            name: Some("w".into()),
        };
        assert!(!format!("{command:?}").contains(secret));
        let json = serde_json::to_string(&command).expect("serialize");
        assert!(json.contains(secret), "the journal keeps it: {json}");
    }

    #[test]
    fn replies_round_trip_through_json() {
        let replies = [
            Reply::Register(WorkerId(3)),
            Reply::Lease(Ok(LeaseReply::Wait)),
            Reply::Commit(Err(QueueError::OffsetBackwards {
                attempt: AttemptId(2),
                committed: 10,
                offset: 5,
            })),
            Reply::Heartbeat(Err(QueueError::UnknownWorker {
                worker: WorkerId(9),
            })),
            Reply::Fail(Ok(FailOutcome::Retried)),
        ];
        for reply in replies {
            let json = serde_json::to_string(&reply).expect("serialize");
            let back: Reply = serde_json::from_str(&json).expect("deserialize");
            assert_eq!(back, reply, "{json}");
        }
    }
}

#[cfg(test)]
mod journal_tests {
    use super::*;
    use crate::epoch::Epoch;
    use crate::queue::{CutPiece, Lease, QueueConfig};

    /// Applies `command` as a master does (a tick first) and records what
    /// changed the queue, as its journal does; returns the command's reply.
    fn run(queue: &mut Queue, journal: &mut Vec<Command>, command: Command) -> Reply {
        let tick = Command::Tick { now: command.now() };
        if queue.apply(&tick).changed() {
            journal.push(tick);
        }
        let reply = queue.apply(&command);
        if reply.changed() {
            journal.push(command);
        }
        reply
    }

    fn leased(reply: Reply) -> Lease {
        match reply {
            Reply::Lease(Ok(LeaseReply::Tasks(mut leases))) if leases.len() == 1 => {
                leases.remove(0)
            }
            other => panic!("expected one lease, got {other:?}"),
        }
    }

    #[test]
    fn a_worker_counted_gone_by_a_tick_replays_from_the_journal() {
        let config = QueueConfig {
            epochs: 1,
            max_attempts: 3,
            lease_timeout_ms: 1_000,
            seed: 5,
            follow: false,
            affinity_wait_ms: 0,
            interleave: None,
            lanes: None,
            world: None,
        };
        let mut queue = Queue::new(2, config).expect("queue");
        let fresh = queue.clone();
        let mut journal = Vec::new();
        let register = Command::Register {
            now: 0,
            secret: None,
            name: None,
        };
        run(&mut queue, &mut journal, register.clone());
        run(&mut queue, &mut journal, register);
        let (w, other) = (WorkerId(1), WorkerId(2));
        let mine = leased(run(
            &mut queue,
            &mut journal,
            Command::Lease {
                now: 0,
                worker: w,
                max: 1,
            },
        ));
        let theirs = leased(run(
            &mut queue,
            &mut journal,
            Command::Lease {
                now: 0,
                worker: other,
                max: 1,
            },
        ));
        let pieces = vec![CutPiece {
            epoch: Epoch(0),
            split: mine.split,
            start: 0,
            end: 10,
        }];
        run(
            &mut queue,
            &mut journal,
            Command::Unsaved {
                now: 1,
                worker: w,
                pieces,
            },
        );
        let finish = Command::Finish {
            now: 2,
            worker: Some(w),
            attempt: mine.attempt,
            rows: 10,
        };
        run(&mut queue, &mut journal, finish);
        // The first worker holds no lease and goes silent past the lease
        // timeout: a tick counts it gone, and expires nothing.
        let heartbeat = Command::Heartbeat {
            now: 999,
            worker: other,
            cached: None,
        };
        run(&mut queue, &mut journal, heartbeat);
        let tick = Command::Tick { now: 1_002 };
        let reply = queue.apply(&tick);
        assert_eq!(
            reply,
            Reply::Tick {
                expired: Vec::new(),
                gone: vec![w]
            }
        );
        assert!(
            reply.changed(),
            "a tick that counted a worker gone is journaled"
        );
        journal.push(tick);
        let finish = Command::Finish {
            now: 1_003,
            worker: Some(other),
            attempt: theirs.attempt,
            rows: 10,
        };
        run(&mut queue, &mut journal, finish);
        // Its rows are served again.
        let again = leased(run(
            &mut queue,
            &mut journal,
            Command::Lease {
                now: 1_004,
                worker: other,
                max: 1,
            },
        ));
        assert_eq!((again.split, again.offset), (mine.split, 0));
        let mut replayed = fresh;
        for command in &journal {
            replayed.apply(command);
        }
        assert_eq!(replayed, queue, "journal: {journal:?}");
    }
}
