//! Tests of every queue transition, and the invariant check the simulation reuses.

use std::collections::BTreeSet;

use super::*;
use crate::epoch::Epoch;
use crate::queue::{epoch_order, Command, RanksReply, Reply};

const TIMEOUT: Millis = 1_000;

fn config(epochs: u32, max_attempts: u32) -> QueueConfig {
    QueueConfig {
        epochs,
        max_attempts,
        lease_timeout_ms: TIMEOUT,
        seed: 5,
        follow: false,
        affinity_wait_ms: 1_000,
        interleave: None,
        lanes: None,
        world: None,
    }
}

fn queue(splits: usize, epochs: u32, max_attempts: u32) -> Queue {
    Queue::new(splits, config(epochs, max_attempts)).expect("valid config")
}

/// The leases of a reply that must carry tasks.
fn tasks(reply: Result<LeaseReply, QueueError>) -> Vec<Lease> {
    match reply {
        Ok(LeaseReply::Tasks(leases)) => leases,
        other => panic!("expected tasks, got {other:?}"),
    }
}

fn lease_one(q: &mut Queue, now: Millis, worker: WorkerId) -> Lease {
    let mut leases = tasks(q.lease(now, worker, 1));
    assert_eq!(leases.len(), 1);
    leases.remove(0)
}

fn state(q: &Queue, split: u32) -> &TaskState {
    &q.tasks()[split as usize].state
}

/// Checks every invariant written on the fields of [`Queue`].
pub(crate) fn check_invariants(q: &Queue) -> Result<(), String> {
    let n = q.tasks.len();
    let (mut todo, mut leased, mut done, mut failed) = (0, 0, 0, 0);
    if let Some(attempt) = q.idle.iter().find(|a| !q.live.contains_key(a)) {
        return Err(format!("idle attempt {attempt} not live"));
    }
    for (split, task) in q.tasks.iter().enumerate() {
        if task.attempts > q.config.max_attempts {
            return Err(format!("split {split} has {} attempts", task.attempts));
        }
        match &task.state {
            TaskState::Todo { .. } => todo += 1,
            TaskState::Leased {
                attempt, worker, ..
            } => {
                leased += 1;
                if q.live.get(attempt) != Some(&(split as u32)) {
                    return Err(format!("split {split}: attempt {attempt} not live"));
                }
                let record = q.workers.get(worker).ok_or("lease of unknown worker")?;
                if record.leases.get(attempt) != Some(&(split as u32)) {
                    return Err(format!("split {split}: worker {worker} misses {attempt}"));
                }
                if attempt.0 >= q.next_attempt {
                    return Err(format!("attempt {attempt} not yet handed out"));
                }
                if q.idle.contains(attempt) && !record.leases.contains_key(attempt) {
                    return Err(format!("idle attempt {attempt} not its worker's"));
                }
            }
            TaskState::Done { .. } => done += 1,
            TaskState::Failed { .. } => failed += 1,
        }
    }
    if todo + leased + done + failed != n {
        return Err("a task is lost".into());
    }
    if (todo, leased, done, failed) != (q.todo.len(), q.live.len(), q.done, q.failed) {
        return Err(format!(
            "counts {:?} disagree with books {:?}",
            (todo, leased, done, failed),
            (q.todo.len(), q.live.len(), q.done, q.failed)
        ));
    }
    let queued: BTreeSet<u32> = q.todo.iter().copied().collect();
    if queued.len() != q.todo.len() {
        return Err("a split is queued twice".into());
    }
    for split in &queued {
        if !matches!(state(q, *split), TaskState::Todo { .. }) {
            return Err(format!("queued split {split} is not todo"));
        }
    }
    let held: usize = q.workers.values().map(|w| w.leases.len()).sum();
    if held != q.live.len() {
        return Err("workers hold leases the queue does not".into());
    }
    if q.epoch.0 >= q.config.epochs || (q.over && (todo > 0 || leased > 0)) {
        return Err(format!("epoch {} over {} with work left", q.epoch, q.over));
    }
    Ok(())
}

#[test]
fn config_rules_are_each_explained() {
    assert_eq!(QueueConfig::default().validate(), Ok(()));
    let broken = [
        (config(0, 3), ConfigError::NoEpochs),
        (config(1, 0), ConfigError::NoAttempts),
        (
            QueueConfig {
                lease_timeout_ms: 0,
                ..config(1, 3)
            },
            ConfigError::NoLeaseTimeout,
        ),
    ];
    for (config, error) in broken {
        assert_eq!(config.validate(), Err(error.clone()));
        assert_eq!(Queue::new(3, config).err(), Some(error.clone()));
        let message = error.to_string();
        assert!(message.starts_with(char::is_lowercase), "{message}");
    }
}

#[test]
fn zero_splits_is_over_at_once() {
    let mut q = queue(0, 3, 3);
    assert!(q.is_over());
    let w = q.register(0);
    assert_eq!(q.lease(0, w, 4), Ok(LeaseReply::JobOver));
    let status = q.status();
    assert!(status.job_over);
    assert_eq!((status.splits, status.todo, status.epoch), (0, 0, Epoch(0)));
}

#[test]
fn workers_get_fresh_ids_and_unknown_ones_are_refused() {
    let mut q = queue(2, 1, 3);
    let a = q.register(0);
    let b = q.register(0);
    assert_ne!(a, b);
    assert!(a.0 >= 1 && b.0 >= 1);
    let stranger = WorkerId(99);
    let unknown = Err(QueueError::UnknownWorker { worker: stranger });
    assert_eq!(
        q.lease(0, stranger, 1),
        unknown.clone().map(|()| LeaseReply::Wait)
    );
    assert_eq!(q.heartbeat(0, stranger), unknown.map(|()| Vec::new()));
    assert_eq!(q.status().workers, 2);
}

#[test]
fn leases_follow_the_epoch_order_and_respect_max() {
    let mut q = queue(10, 2, 3);
    let w = q.register(0);
    let first = tasks(q.lease(100, w, 3));
    let rest = tasks(q.lease(100, w, 100));
    assert_eq!((first.len(), rest.len()), (3, 7));
    let splits: Vec<u32> = first.iter().chain(&rest).map(|l| l.split).collect();
    assert_eq!(splits, epoch_order(5, Epoch(0), 10));
    for lease in first.iter().chain(&rest) {
        assert_eq!(
            (lease.epoch, lease.offset, lease.deadline),
            (Epoch(0), 0, 100 + TIMEOUT)
        );
    }
    let attempts: BTreeSet<AttemptId> = first.iter().chain(&rest).map(|l| l.attempt).collect();
    assert_eq!(attempts.len(), 10, "attempt ids are unique");
    assert_eq!(q.lease(100, w, 0), Ok(LeaseReply::Wait));
    check_invariants(&q).expect("invariants");
}

#[test]
fn lease_order_differs_between_epochs_and_repeats_across_queues() {
    let run = |seed| {
        let mut q = Queue::new(
            20,
            QueueConfig {
                seed,
                ..config(2, 3)
            },
        )
        .expect("valid config");
        let w = q.register(0);
        let mut orders = Vec::new();
        for _ in 0..2 {
            let leases = tasks(q.lease(0, w, 20));
            for lease in &leases {
                q.finish(0, w, lease.attempt, 1).expect("finish");
            }
            orders.push(leases.iter().map(|l| l.split).collect::<Vec<_>>());
        }
        orders
    };
    let orders = run(11);
    for order in &orders {
        let sorted: BTreeSet<u32> = order.iter().copied().collect();
        assert_eq!(sorted, (0..20).collect(), "a permutation");
    }
    assert_ne!(orders[0], orders[1]);
    assert_eq!(orders, run(11));
    assert_ne!(orders, run(12));
}

#[test]
fn commit_then_finish_marks_done() {
    let mut q = queue(1, 1, 3);
    let w = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(10, w, lease.attempt, 40).expect("commit");
    q.commit(11, w, lease.attempt, 40)
        .expect("repeating the offset is fine");
    assert!(matches!(state(&q, 0), TaskState::Leased { offset: 40, .. }));
    q.finish(12, w, lease.attempt, 90).expect("finish");
    assert_eq!(state(&q, 0), &TaskState::Done { rows: 90 });
    let status = q.status();
    assert_eq!(
        (status.done, status.tasks_done, status.rows_done),
        (1, 1, 90)
    );
    assert!(status.job_over);
}

#[test]
fn offsets_never_move_backwards() {
    let mut q = queue(1, 1, 3);
    let w = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(1, w, lease.attempt, 50).expect("commit");
    let backwards = QueueError::OffsetBackwards {
        attempt: lease.attempt,
        committed: 50,
        offset: 49,
    };
    let before = q.clone();
    assert_eq!(q.commit(2, w, lease.attempt, 49), Err(backwards.clone()));
    assert_eq!(q.finish(2, w, lease.attempt, 49), Err(backwards));
    assert_eq!(q, before, "a refused report changes nothing");
}

#[test]
fn a_failure_for_good_fails_the_task_with_attempts_left() {
    let mut q = queue(2, 1, 3);
    let w = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(1, w, lease.attempt, 30).expect("commit");
    let reason = "part-0.parquet changed since the job was planned".to_string();
    let outcome = q.fail_for_good(2, w, lease.attempt, reason.clone());
    assert_eq!(outcome, Ok(FailOutcome::Failed));
    assert_eq!(
        state(&q, lease.split),
        &TaskState::Failed { reason, offset: 30 },
        "failed at once, at its committed offset"
    );
    let other = lease_one(&mut q, 3, w);
    assert_ne!(other.split, lease.split, "never leased again");
    q.finish(4, w, other.attempt, 10).expect("finish");
    let status = q.status();
    assert!(status.job_over, "the job ends with the task failed");
    assert_eq!(status.failed, 1);
    assert_eq!(
        q.tasks()[lease.split as usize].attempts,
        1,
        "one attempt made"
    );
}

#[test]
fn failed_attempt_retries_at_the_committed_offset_at_the_back() {
    let mut q = queue(3, 1, 3);
    let w = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(1, w, lease.attempt, 30).expect("commit");
    let outcome = q.fail(2, w, lease.attempt, "reader crashed".into());
    assert_eq!(outcome, Ok(FailOutcome::Retried));
    assert_eq!(state(&q, lease.split), &TaskState::Todo { offset: 30 });
    let others = tasks(q.lease(3, w, 2));
    assert!(
        others.iter().all(|l| l.split != lease.split),
        "retry goes last"
    );
    let again = lease_one(&mut q, 4, w);
    assert_eq!((again.split, again.offset), (lease.split, 30));
    assert!(again.attempt > lease.attempt);
    assert_eq!(
        q.tasks()[lease.split as usize].attempts,
        1,
        "the first attempt made progress: it does not count"
    );
}

#[test]
fn max_attempts_fails_the_task_and_keeps_the_reason() {
    let mut q = queue(2, 1, 2);
    let w = q.register(0);
    let first = lease_one(&mut q, 0, w);
    assert_eq!(
        q.fail(1, w, first.attempt, "one".into()),
        Ok(FailOutcome::Retried)
    );
    let _other = lease_one(&mut q, 2, w);
    let second = lease_one(&mut q, 3, w);
    assert_eq!(second.split, first.split);
    let reason = "file s3://b/part-0.parquet: bad magic".to_string();
    assert_eq!(
        q.fail(4, w, second.attempt, reason.clone()),
        Ok(FailOutcome::Failed)
    );
    assert_eq!(
        state(&q, first.split),
        &TaskState::Failed {
            reason: reason.clone(),
            offset: 0,
        }
    );
    let failure = TaskFailure {
        epoch: Epoch(0),
        split: first.split,
        attempts: 2,
        reason,
    };
    assert_eq!(q.failures(), std::slice::from_ref(&failure));
    assert_eq!((q.status().failed, q.status().failures), (1, vec![failure]));
}

#[test]
fn a_lapse_of_a_lease_granted_before_a_master_restart_is_never_an_attempt() {
    // max_attempts 1: a single counted attempt would fail the task.
    let mut q = queue(1, 1, 1);
    let w = q.register(0);
    let first = lease_one(&mut q, 0, w);
    // The master (in `train --state` the whole run) crashed and started again.
    q.renew_all(1);
    let expired = q.tick(u64::MAX / 2);
    assert_eq!(
        expired,
        vec![Expired {
            attempt: first.attempt,
            worker: w,
            epoch: Epoch(0),
            split: 0,
            outcome: FailOutcome::Retried,
        }]
    );
    assert!(q.failures().is_empty(), "{:?}", q.failures());
    // A lease granted after the restart counts again.
    let w2 = q.register(2);
    lease_one(&mut q, 2, w2);
    q.tick(u64::MAX / 2);
    assert_eq!(q.failures().len(), 1, "{:?}", q.failures());
}

#[test]
fn a_lapse_after_progress_is_never_an_attempt() {
    // max_attempts 1: a single counted attempt would fail the task.
    let mut q = queue(1, 1, 1);
    let w = q.register(0);
    let first = lease_one(&mut q, 0, w);
    q.commit(1, w, first.attempt, 40).expect("commit");
    assert_eq!(q.tick(TIMEOUT - 1), Vec::new(), "not yet due");
    let expired = q.tick(TIMEOUT + 1);
    let expected = Expired {
        attempt: first.attempt,
        worker: w,
        epoch: Epoch(0),
        split: 0,
        outcome: FailOutcome::Retried,
    };
    assert_eq!(expired, vec![expected]);
    // Ten crashes in a row, each after a commit (a run killed again and
    // again at random moments): the task is never failed.
    let mut now = TIMEOUT + 1;
    for round in 0..10u64 {
        let lease = lease_one(&mut q, now, w);
        assert_eq!(lease.offset, 40 + round, "resumes at its committed rows");
        q.commit(now, w, lease.attempt, 41 + round).expect("commit");
        now += 2 * TIMEOUT;
        let expired = q.tick(now);
        assert_eq!(expired[0].outcome, FailOutcome::Retried);
        assert_eq!(state(&q, 0), &TaskState::Todo { offset: 41 + round });
        assert_eq!(q.tasks()[0].attempts, 0);
    }
    assert!(q.failures().is_empty());
    check_invariants(&q).expect("invariants");
}

/// Leases of a worker that dies on them again and again, committing
/// nothing (a trainer that keeps failing, a worker killed for memory on
/// these rows): each lapse is an attempt, and the last fails the task,
/// naming why, so the job ends.
#[test]
fn lapses_without_a_row_committed_fail_the_task_at_max_attempts() {
    let mut q = queue(1, 1, 3);
    let mut now = 0;
    for round in 1..=3u32 {
        // A worker started again by a supervisor: a new one each time.
        let w = q.register(now);
        let lease = lease_one(&mut q, now, w);
        assert_eq!(q.heartbeat(now + TIMEOUT / 2, w), Ok(Vec::new()));
        now += 2 * TIMEOUT;
        let expired = q.tick(now);
        let outcome = if round < 3 {
            FailOutcome::Retried
        } else {
            FailOutcome::Failed
        };
        assert_eq!(
            expired,
            vec![Expired {
                attempt: lease.attempt,
                worker: w,
                epoch: Epoch(0),
                split: 0,
                outcome,
            }],
            "lapse {round}"
        );
        assert_eq!(q.tasks()[0].attempts, round);
        check_invariants(&q).expect("invariants");
    }
    let failure = &q.failures()[0];
    assert_eq!((failure.split, failure.attempts), (0, 3));
    assert!(
        failure
            .reason
            .contains("lease lapsed 3 times with no row committed"),
        "{}",
        failure.reason
    );
    assert!(q.is_over(), "the job ends with its task failed");
}

/// What resets the count, and what does not count: a commit of the task
/// resets it; a commit by its worker of another lease makes the lapse not
/// count (the worker was busy elsewhere: a prefetched task); a hand-back
/// never counts; a reported failure counts with the lapses.
#[test]
fn only_a_lapse_with_no_progress_of_its_worker_since_the_grant_counts() {
    let mut q = queue(2, 1, 2);
    let w = q.register(0);
    let leases = match q.lease(0, w, 2) {
        Ok(LeaseReply::Tasks(leases)) => leases,
        other => panic!("{other:?}"),
    };
    let (busy, prefetched) = (&leases[0], &leases[1]);
    q.commit(1, w, busy.attempt, 5).expect("commit");
    let expired = q.tick(2 * TIMEOUT);
    assert!(expired.iter().all(|e| e.outcome == FailOutcome::Retried));
    assert_eq!(
        (q.tasks()[0].attempts, q.tasks()[1].attempts),
        (0, 0),
        "its worker committed rows after both were granted"
    );
    // Idle lapse of split `prefetched`: counted once.
    let now = 3 * TIMEOUT;
    let v = q.register(now);
    let again = lease_one(&mut q, now, v);
    assert_eq!(again.split, busy.split);
    let idle = lease_one(&mut q, now, v);
    assert_eq!(idle.split, prefetched.split);
    q.hand_back(now + 1, v, again.attempt).expect("hand back");
    q.tick(now + 2 * TIMEOUT);
    let split = prefetched.split as usize;
    assert_eq!(q.tasks()[split].attempts, 1, "an idle lapse");
    assert_eq!(q.tasks()[busy.split as usize].attempts, 0, "a hand-back");
    // A commit of the task resets its count.
    let now = 6 * TIMEOUT;
    let u = q.register(now);
    let of = |leases: Vec<Lease>| leases.into_iter().find(|l| l.split == prefetched.split);
    let lease = of(tasks(q.lease(now, u, 2))).expect("leased");
    q.commit(now, u, lease.attempt, 1).expect("commit");
    assert_eq!(q.tasks()[split].attempts, 0, "progress resets it");
    // A reported failure and an idle lapse: two attempts, failed.
    assert_eq!(
        q.fail(now, u, lease.attempt, "bad magic".into()),
        Ok(FailOutcome::Retried)
    );
    let t = q.register(now);
    let lease = of(tasks(q.lease(now, t, 2))).expect("leased");
    let expired = q.tick(now + 2 * TIMEOUT);
    let outcome = expired.iter().find(|e| e.attempt == lease.attempt);
    assert_eq!(outcome.map(|e| e.outcome), Some(FailOutcome::Failed));
    check_invariants(&q).expect("invariants");
}

/// A queue saved and loaded keeps which leases are idle: a master started
/// again counts their lapses as the one before would have.
#[test]
fn idle_leases_survive_a_snapshot() {
    let mut q = queue(1, 1, 1);
    let w = q.register(0);
    lease_one(&mut q, 0, w);
    let saved = serde_json::to_string(&q).expect("save");
    let mut loaded: Queue = serde_json::from_str(&saved).expect("load");
    assert_eq!(loaded, q);
    let expired = loaded.tick(2 * TIMEOUT);
    assert_eq!(expired[0].outcome, FailOutcome::Failed);
}

#[test]
fn retry_failed_puts_failed_tasks_back_at_their_committed_rows() {
    let mut q = queue(3, 1, 1);
    let w = q.register(0);
    let leases = tasks(q.lease(0, w, 3));
    let (bad, good) = (&leases[0], &leases[1..]);
    q.commit(1, w, bad.attempt, 25).expect("commit");
    assert_eq!(
        q.fail(2, w, bad.attempt, "unreadable".into()),
        Ok(FailOutcome::Failed)
    );
    for lease in good {
        q.finish(3, w, lease.attempt, 10).expect("finish");
    }
    assert!(q.is_over());
    assert_eq!(q.failures().len(), 1);
    // Nothing failed: nothing to do, nothing changes.
    let mut clean = queue(1, 1, 1);
    assert_eq!(clean.retry_failed(4), (0, 0));
    // The failed task comes back at its committed rows, with fresh attempts.
    let reply = q.apply(&Command::RetryFailed { now: 4 });
    assert_eq!(
        reply,
        Reply::RetryFailed {
            retried: 1,
            kept: 0
        }
    );
    assert!(reply.changed());
    assert!(!q.is_over());
    assert!(q.failures().is_empty());
    assert_eq!(q.status().failed, 0);
    let again = lease_one(&mut q, 5, w);
    assert_eq!((again.split, again.offset), (bad.split, 25));
    q.finish(6, w, again.attempt, 30).expect("finish");
    assert!(q.is_over());
    assert_eq!(q.status().tasks_done, 3);
}

#[test]
fn a_split_put_back_by_retry_failed_is_leased_as_repaired_in_every_later_epoch() {
    let mut q = queue(2, 2, 1);
    let w = q.register(0);
    let leases = tasks(q.lease(0, w, 2));
    assert!(leases.iter().all(|l| !l.repaired));
    let (bad, good) = (&leases[0], &leases[1]);
    q.fail(1, w, bad.attempt, "changed".into()).expect("fail");
    assert_eq!(q.retry_failed(2), (1, 0));
    q.finish(3, w, good.attempt, 5).expect("finish");
    let again = lease_one(&mut q, 4, w);
    assert_eq!(again.split, bad.split);
    assert!(again.repaired, "read as the file is now");
    q.finish(5, w, again.attempt, 5).expect("finish");
    // The next epoch: the repaired split still is, the other is not.
    let next = tasks(q.lease(6, w, 2));
    assert_eq!(next.len(), 2);
    for lease in &next {
        assert_eq!(lease.epoch, Epoch(1));
        assert_eq!(lease.repaired, lease.split == bad.split, "{lease:?}");
    }
    // A snapshot keeps it.
    let back: Queue =
        serde_json::from_str(&serde_json::to_string(&q).expect("json")).expect("parse");
    assert_eq!(back, q);
}

#[test]
fn retry_failed_keeps_failures_of_earlier_epochs() {
    let mut q = queue(1, 2, 1);
    let w = q.register(0);
    let first = lease_one(&mut q, 0, w);
    q.fail(1, w, first.attempt, "epoch 0".into()).expect("fail");
    let second = lease_one(&mut q, 2, w);
    assert_eq!(second.epoch, Epoch(1));
    q.fail(3, w, second.attempt, "epoch 1".into())
        .expect("fail");
    assert!(q.is_over());
    assert_eq!(q.retry_failed(4), (1, 1));
    assert_eq!(q.failures()[0].reason, "epoch 0");
    let again = lease_one(&mut q, 5, w);
    q.finish(6, w, again.attempt, 3).expect("finish");
    assert!(q.is_over());
    assert_eq!(q.failures().len(), 1, "the earlier epoch's failure stays");
}

#[test]
fn heartbeat_renews_every_lease_of_the_worker() {
    let mut q = queue(3, 1, 3);
    let w = q.register(0);
    let idle = q.register(0);
    let leases = tasks(q.lease(0, w, 2));
    let other = lease_one(&mut q, 0, idle);
    assert_eq!(q.heartbeat(TIMEOUT - 1, w), Ok(Vec::new()));
    let expired = q.tick(TIMEOUT);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].attempt, other.attempt);
    assert!(q.tick(2 * TIMEOUT - 2).is_empty());
    for lease in &leases {
        q.commit(2 * TIMEOUT - 2, w, lease.attempt, 1)
            .expect("still live");
    }
    assert_eq!(q.heartbeat(TIMEOUT, idle), Ok(vec![other.attempt]));
    assert_eq!(q.heartbeat(TIMEOUT, idle), Ok(Vec::new()), "told once");
}

#[test]
fn stale_reports_after_expiry_and_re_lease_are_refused() {
    let mut q = queue(1, 1, 3);
    let slow = q.register(0);
    let fast = q.register(0);
    let old = lease_one(&mut q, 0, slow);
    q.commit(0, slow, old.attempt, 10).expect("commit");
    let late = TIMEOUT;
    assert_eq!(q.tick(late).len(), 1);
    let new = lease_one(&mut q, late, fast);
    assert_eq!((new.split, new.offset), (old.split, 10));
    let before = q.clone();
    let stale = QueueError::Stale {
        attempt: old.attempt,
    };
    assert_eq!(q.commit(late, slow, old.attempt, 20), Err(stale.clone()));
    assert_eq!(q.finish(late, slow, old.attempt, 20), Err(stale.clone()));
    assert_eq!(q.fail(late, slow, old.attempt, "late".into()), Err(stale));
    assert_eq!(q, before, "stale reports change nothing");
    assert_eq!(q.heartbeat(late, slow), Ok(vec![old.attempt]));
    q.finish(late, fast, new.attempt, 20)
        .expect("the live attempt finishes");
}

#[test]
fn reports_after_the_end_of_an_attempt_are_stale() {
    let mut q = queue(2, 1, 3);
    let w = q.register(0);
    let done = lease_one(&mut q, 0, w);
    let failed = lease_one(&mut q, 0, w);
    q.finish(1, w, done.attempt, 5).expect("finish");
    q.fail(1, w, failed.attempt, "x".into()).expect("fail");
    for attempt in [done.attempt, failed.attempt, AttemptId(0), AttemptId(999)] {
        let stale = Err(QueueError::Stale { attempt });
        assert_eq!(q.finish(2, w, attempt, 5), stale);
        assert_eq!(q.commit(2, w, attempt, 5), stale);
    }
}

#[test]
fn wait_while_others_hold_leases_then_next_epoch_then_job_over() {
    let mut q = queue(2, 2, 3);
    let a = q.register(0);
    let b = q.register(0);
    let held = tasks(q.lease(0, a, 2));
    assert_eq!(q.lease(0, b, 1), Ok(LeaseReply::Wait));
    assert_eq!(
        q.lease(0, a, 1),
        Ok(LeaseReply::Wait),
        "even for the holder"
    );
    q.finish(1, a, held[0].attempt, 3).expect("finish");
    assert_eq!(
        (q.epoch(), q.lease(1, b, 1)),
        (Epoch(0), Ok(LeaseReply::Wait))
    );
    q.commit(1, a, held[1].attempt, 2).expect("commit");
    q.finish(2, a, held[1].attempt, 4).expect("finish");
    assert_eq!(
        q.epoch(),
        Epoch(1),
        "epoch 1 starts when epoch 0 is all done"
    );
    for task in q.tasks() {
        assert_eq!(
            task,
            &Task {
                state: TaskState::Todo { offset: 0 },
                attempts: 0,
                skip: Vec::new(),
            }
        );
    }
    let next = tasks(q.lease(3, b, 5));
    assert!(next.iter().all(|l| l.epoch == Epoch(1) && l.offset == 0));
    for lease in &next {
        let rows = q.split_rows(lease.split).expect("learned in epoch 0");
        q.finish(4, b, lease.attempt, rows).expect("finish");
    }
    assert_eq!(q.lease(5, a, 1), Ok(LeaseReply::JobOver));
    let status = q.status();
    assert_eq!(
        (status.epoch, status.done, status.tasks_done),
        (Epoch(1), 2, 4)
    );
    assert!(status.job_over);
}

#[test]
fn a_task_failed_in_one_epoch_is_tried_afresh_in_the_next() {
    let mut q = queue(1, 2, 1);
    let w = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    assert_eq!(
        q.fail(1, w, lease.attempt, "bad".into()),
        Ok(FailOutcome::Failed)
    );
    assert_eq!(q.epoch(), Epoch(1));
    let again = lease_one(&mut q, 2, w);
    assert_eq!((again.epoch, again.split, again.offset), (Epoch(1), 0, 0));
    q.finish(3, w, again.attempt, 7).expect("finish");
    assert!(q.is_over());
    assert_eq!(q.failures().len(), 1);
    assert_eq!(q.status().tasks_done, 1);
}

#[test]
fn renewals_never_shorten_a_deadline() {
    let mut q = queue(1, 1, 3);
    let w = q.register(0);
    let lease = lease_one(&mut q, 5_000, w);
    assert_eq!(lease.deadline, 5_000 + TIMEOUT);
    q.heartbeat(100, w).expect("a late heartbeat");
    q.commit(100, w, lease.attempt, 1).expect("a late commit");
    assert!(q.tick(5_000 + TIMEOUT - 1).is_empty());
    assert_eq!(q.tick(5_000 + TIMEOUT).len(), 1);
}

#[test]
fn a_commit_renews_its_lease() {
    let mut q = queue(2, 1, 3);
    let w = q.register(0);
    let leases = tasks(q.lease(0, w, 2));
    q.commit(TIMEOUT - 1, w, leases[0].attempt, 3)
        .expect("commit");
    let expired = q.tick(TIMEOUT);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].attempt, leases[1].attempt);
    assert!(matches!(
        state(&q, leases[0].split),
        TaskState::Leased { .. }
    ));
}

#[test]
fn error_messages_are_lowercase() {
    let errors = [
        QueueError::Stale {
            attempt: AttemptId(1),
        }
        .to_string(),
        QueueError::UnknownWorker {
            worker: WorkerId(1),
        }
        .to_string(),
        QueueError::OffsetBackwards {
            attempt: AttemptId(1),
            committed: 2,
            offset: 1,
        }
        .to_string(),
        ConfigError::TooManySplits { splits: 1, max: 0 }.to_string(),
        QueueError::NotYours {
            attempt: AttemptId(1),
            worker: WorkerId(2),
            holder: WorkerId(1),
        }
        .to_string(),
        QueueError::OffsetPastEnd {
            attempt: AttemptId(1),
            split: 0,
            offset: 9,
            rows: 5,
        }
        .to_string(),
        QueueError::WrongRows {
            attempt: AttemptId(1),
            split: 0,
            reported: 7,
            rows: 5,
        }
        .to_string(),
        QueueError::WrongSecret {
            worker: WorkerId(1),
        }
        .to_string(),
    ];
    for message in errors {
        assert!(message.starts_with(char::is_lowercase), "{message}");
        assert!(!message.ends_with('.'), "{message}");
    }
}

#[test]
fn attempts_that_make_progress_never_exhaust_a_task() {
    let mut q = queue(1, 1, 2);
    let w = q.register(0);
    // Five failed attempts, each committing more rows: the task goes on.
    for round in 0..5u64 {
        let lease = lease_one(&mut q, round * 10_000, w);
        assert_eq!(lease.offset, round * 100);
        q.commit(round * 10_000 + 1, w, lease.attempt, (round + 1) * 100)
            .expect("commit");
        q.fail(round * 10_000 + 2, w, lease.attempt, "read".into())
            .expect("fail");
        assert!(
            matches!(state(&q, 0), TaskState::Todo { .. }),
            "round {round}: {:?}",
            state(&q, 0)
        );
        assert_eq!(q.status().rows_committed, (round + 1) * 100);
    }
    // The last of them counts, and one more failure without progress
    // since makes two: the task fails (max_attempts = 2).
    for round in 5..6u64 {
        let lease = lease_one(&mut q, round * 10_000, w);
        q.fail(round * 10_000 + 2, w, lease.attempt, "read".into())
            .expect("fail");
    }
    assert!(matches!(state(&q, 0), TaskState::Failed { .. }));
    assert_eq!(
        q.status().rows_committed,
        500,
        "committed rows stay counted"
    );
}

#[test]
fn reports_on_another_workers_attempt_are_refused() {
    let mut q = queue(2, 1, 3);
    let owner = q.register(0);
    let other = q.register(0);
    let lease = lease_one(&mut q, 0, owner);
    let not_yours = QueueError::NotYours {
        attempt: lease.attempt,
        worker: other,
        holder: owner,
    };
    let before = q.clone();
    assert_eq!(q.commit(1, other, lease.attempt, 1), Err(not_yours.clone()));
    assert_eq!(q.finish(1, other, lease.attempt, 1), Err(not_yours.clone()));
    assert_eq!(q.fail(1, other, lease.attempt, "x".into()), Err(not_yours));
    assert_eq!(q, before, "refused reports change nothing");
    assert_eq!(q.holder(lease.attempt), Some(owner));
    q.commit(2, owner, lease.attempt, 1)
        .expect("the owner still commits");
    check_invariants(&q).expect("invariants");
}

#[test]
fn known_rows_bound_commits_and_fix_finishes() {
    let mut q = Queue::with_rows(vec![Some(100), None], config(1, 3)).expect("queue");
    let w = q.register(0);
    let leases = tasks(q.lease(0, w, 2));
    let lease = leases.iter().find(|l| l.split == 0).expect("split 0");
    q.commit(1, w, lease.attempt, 60).expect("commit");
    let before = q.clone();
    for offset in [101, u64::MAX] {
        assert_eq!(
            q.commit(2, w, lease.attempt, offset),
            Err(QueueError::OffsetPastEnd {
                attempt: lease.attempt,
                split: 0,
                offset,
                rows: 100,
            })
        );
    }
    for reported in [60, 99, 101, u64::MAX] {
        assert_eq!(
            q.finish(2, w, lease.attempt, reported),
            Err(QueueError::WrongRows {
                attempt: lease.attempt,
                split: 0,
                reported,
                rows: 100,
            })
        );
    }
    assert_eq!(q, before, "refused reports change nothing");
    q.commit(3, w, lease.attempt, 100)
        .expect("the last row may be committed");
    q.finish(3, w, lease.attempt, 100).expect("finish");
    assert_eq!(q.status().rows_done, 100);
}

#[test]
fn rows_without_metadata_are_learned_at_the_first_finish_then_enforced() {
    let mut q = queue(1, 3, 3);
    let w = q.register(0);
    assert_eq!(q.split_rows(0), None);
    let first = lease_one(&mut q, 0, w);
    q.commit(1, w, first.attempt, 1_000)
        .expect("no bound before the count is known");
    q.finish(1, w, first.attempt, 5_000).expect("finish");
    assert_eq!(q.split_rows(0), Some(5_000));
    let second = lease_one(&mut q, 2, w);
    assert_eq!(second.epoch, Epoch(1));
    assert!(matches!(
        q.commit(3, w, second.attempt, 5_001),
        Err(QueueError::OffsetPastEnd { rows: 5_000, .. })
    ));
    assert!(matches!(
        q.finish(3, w, second.attempt, 7),
        Err(QueueError::WrongRows { rows: 5_000, .. })
    ));
    q.finish(3, w, second.attempt, 5_000).expect("finish");
    // A snapshot and a replay of the commands both keep what was learned.
    let json = serde_json::to_string(&q).expect("serialize");
    let restored: Queue = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(restored.split_rows(0), Some(5_000));
    assert_eq!(restored, q);
}

#[test]
fn know_rows_fills_only_what_is_unknown() {
    let mut q = Queue::with_rows(vec![Some(5), None, None], config(1, 3)).expect("queue");
    let w = q.register(0);
    let leases = tasks(q.lease(0, w, 3));
    let second = leases.iter().find(|l| l.split == 1).expect("split 1");
    q.finish(1, w, second.attempt, 8).expect("finish");
    q.know_rows(&[Some(6), Some(9), Some(10)]);
    assert_eq!(
        (0..3).map(|s| q.split_rows(s)).collect::<Vec<_>>(),
        vec![Some(5), Some(8), Some(10)]
    );
}

#[test]
fn a_snapshot_from_before_row_counts_still_loads() {
    let mut q = queue(2, 1, 3);
    let w = q.register(0);
    let mut json: serde_json::Value = serde_json::to_value(&q).expect("serialize");
    json.as_object_mut()
        .expect("object")
        .remove("split_rows")
        .expect("split_rows is written");
    let mut old: Queue = serde_json::from_value(json).expect("an old snapshot loads");
    assert_eq!(old.split_rows(0), None);
    old.know_rows(&[Some(3), None]);
    assert_eq!((old.split_rows(0), old.split_rows(1)), (Some(3), None));
    let lease = lease_one(&mut old, 0, w);
    assert_eq!(old.holder(lease.attempt), Some(w));
    check_invariants(&old).expect("invariants");
}

#[test]
fn counters_saturate_instead_of_overflowing() {
    let mut q = queue(2, 1, 3);
    let w = q.register(0);
    for lease in tasks(q.lease(0, w, 2)) {
        q.commit(1, w, lease.attempt, u64::MAX).expect("commit");
        q.finish(1, w, lease.attempt, u64::MAX).expect("finish");
    }
    let status = q.status();
    assert_eq!((status.rows_done, status.tasks_done), (u64::MAX, 2));
    assert!(status.job_over);
}

#[test]
fn a_worker_proves_itself_with_its_secret() {
    let mut q = queue(1, 1, 3);
    let secret = WorkerSecret::new("0123456789abcdef0123456789abcdef");
    let w = q.register_with_secret(0, secret.clone());
    let local = q.register(0);
    assert_eq!(q.authenticate(w, &secret), Ok(()));
    let wrong = WorkerSecret::new("0123456789abcdef0123456789abcdee");
    assert_eq!(
        q.authenticate(w, &wrong),
        Err(QueueError::WrongSecret { worker: w })
    );
    assert_eq!(
        q.authenticate(local, &secret),
        Err(QueueError::WrongSecret { worker: local }),
        "a worker registered without a secret cannot be vouched for"
    );
    assert_eq!(
        q.authenticate(WorkerId(42), &secret),
        Err(QueueError::UnknownWorker {
            worker: WorkerId(42)
        })
    );
    let json = serde_json::to_string(&q).expect("serialize");
    let restored: Queue = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(
        restored.authenticate(w, &secret),
        Ok(()),
        "kept in snapshots"
    );
}

#[test]
fn a_task_handed_back_is_next_in_line_and_keeps_its_attempts() {
    let mut q = queue(3, 1, 1);
    let w = q.register(0);
    let other = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(1, w, lease.attempt, 7).expect("commit");
    assert!(
        q.hand_back(2, other, lease.attempt).is_err(),
        "only its worker"
    );
    q.hand_back(2, w, lease.attempt).expect("hand back");
    assert_eq!(state(&q, lease.split), &TaskState::Todo { offset: 7 });
    let again = lease_one(&mut q, 3, other);
    assert_eq!(
        (again.split, again.offset),
        (lease.split, 7),
        "next in line"
    );
    q.hand_back(4, other, again.attempt).expect("hand back");
    let third = lease_one(&mut q, 5, w);
    assert_eq!(third.split, lease.split, "max_attempts 1 and still leased");
    assert!(q.hand_back(6, w, lease.attempt).is_err(), "a stale attempt");
}

fn rows(epoch: Epoch, split: u32, start: u64, end: u64) -> CutPiece {
    CutPiece {
        epoch,
        split,
        start,
        end,
    }
}

#[test]
fn a_silent_worker_with_unsaved_rows_is_gone_and_they_are_served_again() {
    let mut q = queue(2, 1, 3);
    let w = q.register_as(0, None, Some("w1".to_string()));
    let other = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(10, w, lease.attempt, 60).expect("commit");
    // Rows 0..40 are in a checkpoint, 40..60 acknowledged after it, 60..80
    // acknowledged but never committed.
    q.unsaved(11, w, vec![rows(Epoch(0), lease.split, 0, 80)])
        .expect("unsaved");
    q.checkpoint_by(Some(w), "7", &[rows(Epoch(0), lease.split, 0, 40)])
        .expect("checkpoint");
    assert_eq!(q.checkpoint_of("w1"), Some("7"));
    // Silent past the lease timeout: gone; its task resumes at 60 and rows
    // 40..60 are served again on their own.
    q.tick(11 + TIMEOUT);
    assert_eq!(state(&q, lease.split), &TaskState::Todo { offset: 60 });
    assert_eq!(
        q.heartbeat(11 + TIMEOUT, w),
        Err(QueueError::Gone { worker: w })
    );
    let leases = tasks(q.lease(2_000, other, 3));
    let makeup = leases
        .iter()
        .find(|l| l.skip.last().is_some_and(|s| s.1 == u64::MAX))
        .expect("a lease of the rows served again");
    assert_eq!(
        (makeup.offset, makeup.skip.clone()),
        (40, vec![(60, u64::MAX)])
    );
    assert!(
        q.finish(2_001, other, makeup.attempt, 59).is_err(),
        "all its rows"
    );
    q.finish(2_001, other, makeup.attempt, 60).expect("finish");
    for l in leases.iter().filter(|l| l.attempt != makeup.attempt) {
        q.finish(2_002, other, l.attempt, 100).expect("finish task");
    }
    assert!(q.is_over(), "{:?}", q.status());
}

#[test]
fn the_job_is_not_over_while_rows_wait_to_be_served_again() {
    let mut q = queue(2, 1, 3);
    let w = q.register(0);
    let other = q.register(0);
    let first = lease_one(&mut q, 0, w);
    let second = lease_one(&mut q, 0, other);
    q.unsaved(1, w, vec![rows(Epoch(0), first.split, 0, 10)])
        .expect("unsaved");
    q.finish(2, w, first.attempt, 10).expect("finish");
    q.heartbeat(2 + TIMEOUT - 1, other).expect("heartbeat");
    q.tick(2 + TIMEOUT);
    q.finish(2 + TIMEOUT, other, second.attempt, 10)
        .expect("finish");
    assert!(!q.is_over(), "the gone worker's rows are still to serve");
    let again = tasks(q.lease(3_000, other, 1));
    assert_eq!((again.len(), again[0].offset), (1, 0));
    q.finish(3_001, other, again[0].attempt, 10)
        .expect("finish");
    assert!(q.is_over());
}

#[test]
fn a_tick_finds_every_lapse_whatever_ticks_came_before() {
    let mut q = queue(3, 1, 3);
    let w = q.register(0);
    assert!(q.tick(5_000).is_empty(), "nothing leased, nothing due");
    // A lease granted on a clock behind the last tick still lapses at its deadline.
    let lease = lease_one(&mut q, 0, w);
    assert!(q.tick(TIMEOUT - 1).is_empty());
    let expired = q.tick(TIMEOUT);
    assert_eq!(
        expired.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [lease.attempt]
    );
    // A worker that reports unsaved rows is counted gone a lease timeout
    // after it last spoke, though nothing was due when it spoke.
    let other = q.register(0);
    let held = lease_one(&mut q, 6_000, other);
    q.finish(6_000, other, held.attempt, 10).expect("finish");
    assert_eq!(q.tick_all(6_500), (Vec::new(), Vec::new()));
    q.unsaved(6_500, other, vec![rows(Epoch(0), held.split, 0, 10)])
        .expect("unsaved");
    assert_eq!(q.tick_all(6_500 + TIMEOUT - 1), (Vec::new(), Vec::new()));
    assert_eq!(q.tick_all(6_500 + TIMEOUT), (Vec::new(), vec![other]));
    // A queue read back from a snapshot knows nothing of what is due: its
    // first tick looks.
    let mut q = queue(1, 1, 3);
    let w = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    assert!(q.tick(1).is_empty());
    let mut restored: Queue =
        serde_json::from_str(&serde_json::to_string(&q).expect("save")).expect("load");
    assert_eq!(restored, q);
    let expired = restored.tick(TIMEOUT);
    assert_eq!(
        expired.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [lease.attempt]
    );
}

#[test]
fn acknowledged_ranges_past_the_offset_are_committed_and_skipped_by_the_next_lease() {
    let mut q = Queue::with_rows(vec![Some(1_000)], config(1, 3)).expect("queue");
    let w = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    // A slow device holds rows 0..100; the fast one acknowledged 100..600
    // and 700..800.
    q.commit_ranges(1, w, lease.attempt, 0, &[(100, 600), (700, 800)])
        .expect("commit ranges");
    assert_eq!(q.rows_committed(), 600);
    // Repeating what is committed adds nothing; a range past the rows is refused.
    q.commit_ranges(2, w, lease.attempt, 0, &[(100, 300)])
        .expect("commit again");
    assert_eq!(q.rows_committed(), 600);
    assert!(matches!(
        q.commit_ranges(2, w, lease.attempt, 0, &[(900, 1_001)]),
        Err(QueueError::OffsetPastEnd { .. })
    ));
    // The run dies: the next lease reads only what was not acknowledged.
    q.tick(TIMEOUT + 5);
    let again = lease_one(&mut q, TIMEOUT + 5, w);
    assert_eq!(again.offset, 0);
    assert_eq!(again.skip, vec![(100, 600), (700, 800)]);
    // The slow device's rows arrive: the offset passes the first range.
    q.commit_ranges(TIMEOUT + 6, w, again.attempt, 600, &[(700, 800)])
        .expect("commit");
    assert_eq!(q.rows_committed(), 700);
    assert_eq!(q.tasks()[0].skip, vec![(700, 800)]);
    q.finish(TIMEOUT + 7, w, again.attempt, 1_000)
        .expect("finish");
    assert_eq!(q.rows_committed(), 1_000, "each row counted once");
    assert!(q.is_over());
}

#[test]
fn a_gone_workers_rows_in_committed_ranges_are_made_up() {
    let mut q = Queue::with_rows(vec![Some(1_000)], config(1, 3)).expect("queue");
    q.declare_checkpoints(0);
    let w = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.unsaved(1, w, vec![rows(Epoch(0), 0, 0, 500)])
        .expect("unsaved");
    q.commit_ranges(1, w, lease.attempt, 100, &[(200, 300)])
        .expect("commit");
    let (_, gone) = q.tick_all(TIMEOUT + 2);
    assert_eq!(gone, vec![w]);
    let other = q.register(TIMEOUT + 2);
    let leases = tasks(q.lease(TIMEOUT + 2, other, 3));
    let made_up: Vec<(u64, u64)> = leases
        .iter()
        .filter(|l| l.skip.last().is_some_and(|s| s.1 == u64::MAX))
        .map(|l| (l.offset, l.skip[0].0))
        .collect();
    assert_eq!(made_up, vec![(0, 100), (200, 300)], "{leases:?}");
}

fn follow_queue(splits: usize) -> Queue {
    let config = QueueConfig {
        follow: true,
        ..config(1, 3)
    };
    Queue::new(splits, config).expect("valid config")
}

#[test]
fn a_followed_job_is_not_over_when_its_tasks_are_done_until_closed() {
    let mut q = follow_queue(0);
    assert!(!q.is_over(), "an empty followed job waits for splits");
    let w = q.register(0);
    assert_eq!(q.lease(1, w, 1), Ok(LeaseReply::Wait));
    q.grow(2, 0, vec![Some(10)], serde_json::json!({"batch": 0}))
        .expect("grows");
    let lease = lease_one(&mut q, 3, w);
    assert_eq!(lease.split, 0);
    q.finish(4, w, lease.attempt, 10).expect("finishes");
    assert!(!q.is_over());
    assert_eq!(q.lease(5, w, 1), Ok(LeaseReply::Wait));
    // Splits must come in order, after the last one.
    assert_eq!(
        q.grow(6, 3, vec![None], serde_json::Value::Null),
        Err(QueueError::NotNext { first: 3, next: 1 })
    );
    q.grow(6, 1, vec![None, Some(5)], serde_json::json!({"batch": 1}))
        .expect("grows");
    let a = lease_one(&mut q, 7, w);
    let b = lease_one(&mut q, 7, w);
    assert_eq!(
        (a.split, b.split),
        (1, 2),
        "added splits are leased in order"
    );
    q.close(8);
    assert!(!q.is_over(), "closed, with tasks still leased");
    assert_eq!(
        q.grow(8, 3, vec![None], serde_json::Value::Null),
        Err(QueueError::Closed)
    );
    q.finish(9, w, a.attempt, 7).expect("finishes");
    q.finish(9, w, b.attempt, 5).expect("finishes");
    assert!(q.is_over());
    assert_eq!(q.status().rows_done, 22);
    assert_eq!(q.grown().len(), 2);
    check_invariants(&q).expect("invariants");
}

#[test]
fn a_followed_job_replays_its_growth_and_refuses_epochs() {
    let commands = [
        Command::Register {
            now: 0,
            secret: None,
            name: None,
        },
        Command::Grow {
            now: 1,
            first: 1,
            rows: vec![Some(3)],
            record: serde_json::json!({"batch": 4}),
            sources: Vec::new(),
        },
        Command::Lease {
            now: 2,
            worker: WorkerId(1),
            max: 2,
        },
    ];
    let mut a = follow_queue(1);
    for c in &commands {
        assert!(a.apply(c).changed(), "{c:?}");
    }
    let mut b = follow_queue(1);
    for c in &commands {
        b.apply(c);
    }
    assert_eq!(a, b);
    let json = serde_json::to_string(&a).expect("serializes");
    let back: Queue = serde_json::from_str(&json).expect("loads");
    assert_eq!(back, a);
    assert_eq!(back.grown()[0].record["batch"], 4);
    let two_epochs = QueueConfig {
        follow: true,
        ..config(2, 3)
    };
    assert!(matches!(
        Queue::new(1, two_epochs),
        Err(ConfigError::FollowEpochs { epochs: 2 })
    ));
}

#[test]
fn a_checkpoint_of_a_followed_job_never_makes_its_epoch_whole() {
    let mut q = follow_queue(1);
    q.know_rows(&[Some(4)]);
    q.declare_checkpoints(0);
    let w = q.register(0);
    let lease = lease_one(&mut q, 1, w);
    q.finish(2, w, lease.attempt, 4).expect("finishes");
    q.checkpoint(
        3,
        "c1",
        &[CutPiece {
            epoch: Epoch(0),
            split: 0,
            start: 0,
            end: 4,
        }],
    );
    q.grow(4, 1, vec![Some(2)], serde_json::Value::Null)
        .expect("grows");
    q.rewind(5);
    assert!(!q.is_over());
    let lease = lease_one(&mut q, 6, w);
    assert_eq!(
        lease.split, 1,
        "the checkpointed split stays done, the new one is served"
    );
}

#[test]
fn the_job_waits_for_the_final_checkpoints_of_live_workers() {
    let mut q = queue(1, 1, 3);
    let w = q.register_as(0, None, Some("w1".to_string()));
    let lease = lease_one(&mut q, 0, w);
    q.unsaved(1, w, vec![rows(Epoch(0), lease.split, 0, 10)])
        .expect("unsaved");
    q.finish(2, w, lease.attempt, 10).expect("finish");
    assert!(
        !q.is_over(),
        "w1's trainers hold rows in no checkpoint: {:?}",
        q.status()
    );
    // Nothing more for w1 to read: it ends its trainers' streams...
    assert_eq!(q.lease(3, w, 1), Ok(LeaseReply::JobOver));
    // ... and their final checkpoint covers the rows.
    q.checkpoint_by(Some(w), "2", &[rows(Epoch(0), lease.split, 0, 10)])
        .expect("checkpoint");
    assert!(q.is_over(), "{:?}", q.status());
}

#[test]
fn a_worker_that_dies_before_its_final_checkpoint_has_its_rows_made_up() {
    let mut q = queue(1, 1, 3);
    let w = q.register_as(0, None, Some("w1".to_string()));
    let other = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.checkpoint_by(Some(w), "1", &[rows(Epoch(0), lease.split, 0, 4)])
        .expect("checkpoint");
    q.unsaved(1, w, vec![rows(Epoch(0), lease.split, 4, 10)])
        .expect("unsaved");
    q.finish(2, w, lease.attempt, 10).expect("finish");
    assert_eq!(q.lease(3, w, 1), Ok(LeaseReply::JobOver));
    // The other worker holds nothing unsaved: it waits, in case w1 dies.
    assert_eq!(q.lease(3, other, 1), Ok(LeaseReply::Wait));
    // Killed before its final checkpoint: silent past the lease timeout.
    q.heartbeat(TIMEOUT, other).expect("heartbeat");
    q.tick(3 + TIMEOUT);
    assert!(!q.is_over(), "rows 4..10 are in no model yet");
    // The waiting worker is served exactly the rows after checkpoint 1.
    assert_eq!(q.checkpoint_of("w1"), Some("1"));
    let again = other;
    let makeup = tasks(q.lease(4_001, again, 3));
    assert_eq!(makeup.len(), 1, "{makeup:?}");
    assert_eq!(
        (makeup[0].offset, makeup[0].skip.clone()),
        (4, vec![(10, u64::MAX)])
    );
    q.finish(4_002, again, makeup[0].attempt, 10)
        .expect("finish");
    assert!(q.is_over(), "{:?}", q.status());
}

#[test]
fn a_checkpoint_with_rows_another_worker_finished_is_refused() {
    // Two splits, so the job is not over when the first is finished.
    let mut q = queue(2, 1, 3);
    let w = q.register_as(0, None, Some("w1".to_string()));
    let other = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(1, w, lease.attempt, 4).expect("commit");
    q.checkpoint_by(Some(w), "1", &[rows(Epoch(0), lease.split, 0, 4)])
        .expect("committed rows of a live lease");
    // w1 is paused past its lease; the other worker takes the task at row
    // 4 and finishes it: rows 4..10 are committed, by the other worker.
    q.heartbeat(TIMEOUT, other).expect("heartbeat");
    q.tick(1 + TIMEOUT);
    let mut again = lease_one(&mut q, 1 + TIMEOUT, other);
    if again.split != lease.split {
        again = lease_one(&mut q, 1 + TIMEOUT, other);
    }
    assert_eq!((again.split, again.offset), (lease.split, 4));
    q.finish(2 + TIMEOUT, other, again.attempt, 10)
        .expect("finish");
    // Back, w1's trainer saved rows 4..6 it trained during the pause: the
    // other worker's trainer holds them too.
    assert_eq!(
        q.checkpoint_by(Some(w), "2", &[rows(Epoch(0), lease.split, 4, 6)]),
        Err(QueueError::Gone { worker: w })
    );
    assert_eq!(q.checkpoint_of("w1"), Some("1"));
}

#[test]
fn rows_leased_again_to_the_same_worker_may_be_checkpointed() {
    let mut q = queue(1, 1, 3);
    let w = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(1, w, lease.attempt, 4).expect("commit");
    q.tick(1 + TIMEOUT);
    let again = lease_one(&mut q, 2 + TIMEOUT, w);
    assert_eq!(again.offset, 4);
    q.commit(3 + TIMEOUT, w, again.attempt, 8).expect("commit");
    q.checkpoint_by(Some(w), "1", &[rows(Epoch(0), 0, 0, 8)])
        .expect("every row was committed by this worker");
}

/// Two splits, two workers: `w` leased a task and committed rows 0..4, its
/// trainers acknowledged rows 0..6 (4..6 never committed), and its lease lapsed
/// while `other` stayed alive; `w` is not counted gone yet (it spoke later than
/// it leased). Returns the queue, `w`, `other` and `w`'s lease.
fn lapsed_with_unsaved_rows() -> (Queue, WorkerId, WorkerId, Lease) {
    let mut q = queue(2, 1, 3);
    let w = q.register(0);
    let other = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(0, w, lease.attempt, 4).expect("commit");
    q.unsaved(1, w, vec![rows(Epoch(0), lease.split, 0, 6)])
        .expect("unsaved");
    q.heartbeat(TIMEOUT, other).expect("heartbeat");
    q.tick(TIMEOUT);
    (q, w, other, lease)
}

#[test]
fn a_gone_worker_has_only_rows_it_committed_made_up() {
    let (mut q, _, other, lease) = lapsed_with_unsaved_rows();
    // The other worker reads the task from row 4.
    let mut served: Vec<(u64, u64)> = Vec::new();
    let take = |q: &mut Queue, now: Millis, served: &mut Vec<(u64, u64)>| {
        let Ok(LeaseReply::Tasks(leases)) = q.lease(now, other, 1) else {
            return false;
        };
        for l in leases {
            let end = l
                .skip
                .iter()
                .find(|(_, e)| *e == u64::MAX)
                .map_or(10, |(s, _)| *s);
            if l.split == lease.split {
                served.push((l.offset, end));
            }
            q.finish(now, other, l.attempt, end).expect("finish");
        }
        true
    };
    while !served.iter().any(|&(s, _)| s == 4) {
        assert!(
            take(&mut q, TIMEOUT, &mut served),
            "the task is served again"
        );
    }
    // Now the worker is counted gone: of its unsaved rows only those it
    // committed are served again (4..6 were the other worker's).
    q.heartbeat(1 + TIMEOUT, other).expect("heartbeat");
    q.tick(1 + TIMEOUT);
    while take(&mut q, 2 + TIMEOUT, &mut served) {
        if q.is_over() {
            break;
        }
    }
    served.sort_unstable();
    assert_eq!(
        served,
        vec![(0, 4), (4, 10)],
        "rows 0..4 made up, the task from 4"
    );
}

#[test]
fn a_checkpoint_with_rows_that_went_elsewhere_is_refused_and_its_worker_gone() {
    let mut q = queue(1, 1, 3);
    let w = q.register_as(0, None, Some("w1".to_string()));
    let other = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.unsaved(1, w, vec![rows(Epoch(0), lease.split, 0, 4)])
        .expect("unsaved");
    q.commit(1, w, lease.attempt, 4).expect("commit");
    q.checkpoint_by(Some(w), "1", &[rows(Epoch(0), lease.split, 0, 4)])
        .expect("committed rows of a live lease");
    // w1 is paused past its lease (it holds no unsaved rows, so it is not
    // counted gone); the task goes to another worker at row 4.
    q.heartbeat(TIMEOUT, other).expect("heartbeat");
    q.tick(1 + TIMEOUT);
    let again = lease_one(&mut q, 1 + TIMEOUT, other);
    assert_eq!(again.offset, 4);
    // Back, w1's trainer saved rows 4..6, which are the other worker's now.
    assert_eq!(
        q.checkpoint_by(Some(w), "2", &[rows(Epoch(0), lease.split, 4, 6)]),
        Err(QueueError::Gone { worker: w })
    );
    assert_eq!(
        q.checkpoint_of("w1"),
        Some("1"),
        "w1 resumes from checkpoint 1"
    );
    assert_eq!(q.heartbeat(2_000, w), Err(QueueError::Gone { worker: w }));
    q.finish(2_001, other, again.attempt, 10).expect("finish");
    assert!(q.is_over(), "{:?}", q.status());
}

#[test]
fn has_work_agrees_with_the_status_counts() {
    let agrees = |q: &Queue| {
        let status = q.status();
        assert_eq!(q.has_work(), status.todo + status.leased > 0, "{status:?}");
    };
    let empty = queue(0, 1, 3);
    agrees(&empty);
    assert!(!empty.has_work(), "a job with no splits has nothing to do");

    let mut q = queue(2, 1, 3);
    let w = q.register(0);
    agrees(&q);
    assert!(q.has_work(), "every task to do");
    let first = lease_one(&mut q, 0, w);
    let second = lease_one(&mut q, 0, w);
    agrees(&q);
    assert!(q.has_work(), "both tasks leased");
    q.finish(1, w, first.attempt, 10).expect("finish");
    agrees(&q);
    assert!(q.has_work(), "one task still leased");
    q.finish(2, w, second.attempt, 10).expect("finish");
    agrees(&q);
    assert!(!q.has_work(), "every task done: {:?}", q.status());
}

/// The forfeit rows `worker`'s record holds.
fn forfeit_of(q: &Queue, worker: WorkerId) -> Vec<CutPiece> {
    q.workers
        .get(&worker)
        .map(|r| r.forfeit.clone())
        .unwrap_or_default()
}

#[test]
fn forfeit_rows_merge_ranges_that_touch_and_keep_the_others() {
    let mut forfeit = Vec::new();
    forfeit_rows(
        &mut forfeit,
        [rows(Epoch(0), 0, 4, 6), rows(Epoch(0), 0, 8, 9)],
    );
    forfeit_rows(&mut forfeit, [rows(Epoch(0), 0, 6, 8)]);
    assert_eq!(
        forfeit,
        vec![rows(Epoch(0), 0, 4, 9)],
        "4..6, 6..8 and 8..9 touch"
    );
    forfeit_rows(
        &mut forfeit,
        [
            rows(Epoch(0), 1, 4, 9),
            rows(Epoch(1), 0, 0, 2),
            rows(Epoch(0), 0, 5, 5),
            rows(Epoch(0), 0, 2, 3),
        ],
    );
    assert_eq!(
        forfeit,
        vec![
            rows(Epoch(0), 0, 4, 9),
            rows(Epoch(0), 1, 4, 9),
            rows(Epoch(1), 0, 0, 2),
            rows(Epoch(0), 0, 2, 3)
        ],
        "other splits, other epochs and gaps stay apart; empty ranges are dropped"
    );
}

#[test]
fn a_worker_whose_lease_lapses_again_and_again_keeps_one_forfeit_range() {
    let mut q = queue(1, 1, 3);
    let w = q.register(0);
    let other = q.register(0);
    let mut now = 0;
    let lease = lease_one(&mut q, now, w);
    q.commit(now, w, lease.attempt, 4).expect("commit");
    for round in 0..5u64 {
        // w's lease lapses; the other worker takes the task, commits two
        // rows and lapses too; w is leased the task again and lapses
        // without progress.
        now += TIMEOUT;
        q.tick(now);
        let theirs = lease_one(&mut q, now, other);
        let at = 6 + 2 * round;
        q.commit(now, other, theirs.attempt, at).expect("commit");
        now += TIMEOUT;
        q.tick(now);
        let again = lease_one(&mut q, now, w);
        assert_eq!(again.offset, at);
        assert_eq!(
            forfeit_of(&q, w),
            vec![rows(Epoch(0), 0, 4, at)],
            "round {round}"
        );
    }
    now += TIMEOUT;
    q.tick(now);
    assert_eq!(
        forfeit_of(&q, w),
        vec![rows(Epoch(0), 0, 4, u64::MAX)],
        "one range however many lapses"
    );
    assert!(q.forfeited(w, &rows(Epoch(0), 0, 12, 13)));
    assert!(
        !q.forfeited(w, &rows(Epoch(0), 0, 0, 4)),
        "rows it committed"
    );
    check_invariants(&q).expect("invariants");
}

#[test]
fn rows_made_up_are_committed_once() {
    let (mut q, _, other, _) = lapsed_with_unsaved_rows();
    for now in TIMEOUT..TIMEOUT + 100 {
        if q.is_over() {
            break;
        }
        q.heartbeat(now, other).expect("heartbeat");
        // Counted gone once the other worker has spoken past its lease.
        q.tick(now + 1);
        if let Ok(LeaseReply::Tasks(leases)) = q.lease(now + 1, other, 1) {
            for l in leases {
                let end = l
                    .skip
                    .iter()
                    .find(|(_, e)| *e == u64::MAX)
                    .map_or(10, |(s, _)| *s);
                q.finish(now + 1, other, l.attempt, end).expect("finish");
            }
        }
        let status = q.status();
        assert!(
            status.rows_committed <= 20,
            "{} rows committed of 20",
            status.rows_committed
        );
    }
    assert!(q.is_over(), "the job ends");
    assert!(q.rows_made_up() > 0, "rows were made up");
    let status = q.status();
    assert_eq!(status.rows_committed, status.rows_done, "{status:?}");
}

#[test]
fn a_worker_counted_gone_keeps_no_forfeit_rows() {
    let (mut q, w, _, lease) = lapsed_with_unsaved_rows();
    assert_eq!(
        forfeit_of(&q, w),
        vec![rows(Epoch(0), lease.split, 4, u64::MAX)]
    );
    q.tick(1 + TIMEOUT);
    assert_eq!(
        q.heartbeat(2 + TIMEOUT, w),
        Err(QueueError::Gone { worker: w })
    );
    assert!(forfeit_of(&q, w).is_empty(), "never read again");
    assert_eq!(q.rows_made_up(), 4, "only the rows it committed");
}

#[test]
fn forfeit_rows_of_an_epoch_that_is_over_still_refuse_a_checkpoint() {
    // One split and two epochs: the other worker's finish starts epoch 1.
    let mut q = queue(1, 2, 3);
    let w = q.register_as(0, None, Some("w1".to_string()));
    let other = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(1, w, lease.attempt, 4).expect("commit");
    q.checkpoint_by(Some(w), "1", &[rows(Epoch(0), lease.split, 0, 4)])
        .expect("committed rows of a live lease");
    q.heartbeat(TIMEOUT, other).expect("heartbeat");
    q.tick(1 + TIMEOUT);
    let again = lease_one(&mut q, 1 + TIMEOUT, other);
    assert_eq!(again.offset, 4);
    q.finish(2 + TIMEOUT, other, again.attempt, 10)
        .expect("finish");
    assert_eq!(q.epoch(), Epoch(1), "{:?}", q.status());
    // Back, w1's trainer saved rows 4..6 of epoch 0 it trained during the
    // pause: the other worker's trainer holds them too.
    assert_eq!(
        q.checkpoint_by(Some(w), "2", &[rows(Epoch(0), lease.split, 4, 6)]),
        Err(QueueError::Gone { worker: w })
    );
    assert_eq!(q.checkpoint_of("w1"), Some("1"));
}

/// Leases every task of the current epoch to `worker` and finishes each
/// with one row.
fn finish_epoch(q: &mut Queue, now: Millis, worker: WorkerId) {
    for lease in tasks(q.lease(now, worker, 1024)) {
        q.finish(now, worker, lease.attempt, 1).expect("finish");
    }
}

#[test]
fn from_the_second_epoch_a_worker_is_leased_what_its_cache_holds() {
    let mut q = queue(4, 3, 3);
    let a = q.register(0);
    let b = q.register(0);
    q.heartbeat_holding(0, a, Some(&[0, 1])).expect("heartbeat");
    q.heartbeat_holding(0, b, Some(&[2, 3])).expect("heartbeat");
    // The first epoch goes in its order: nothing is cached yet.
    let first: Vec<u32> = tasks(q.lease(1, b, 4)).iter().map(|l| l.split).collect();
    assert_eq!(first, epoch_order(5, Epoch(0), 4));
    for split in 0..4 {
        if let TaskState::Leased { attempt, .. } = *state(&q, split) {
            q.finish(1, b, attempt, 1).expect("finish");
        }
    }
    assert_eq!(q.epoch(), Epoch(1));
    let now = 10;
    q.heartbeat(now, a).expect("heartbeat");
    let of_b: BTreeSet<u32> = tasks(q.lease(now, b, 2)).iter().map(|l| l.split).collect();
    assert_eq!(of_b, BTreeSet::from([2, 3]));
    let of_a = lease_one(&mut q, now, a);
    assert!(of_a.split < 2, "{of_a:?}");
    let of_a = lease_one(&mut q, now, a);
    assert!(of_a.split < 2, "{of_a:?}");
    check_invariants(&q).expect("invariants");
}

#[test]
fn a_worker_waits_a_bounded_time_for_another_live_workers_cached_tasks() {
    let mut q = queue(4, 2, 3);
    let a = q.register(0);
    let b = q.register(0);
    finish_epoch(&mut q, 0, a);
    q.heartbeat_holding(1, b, Some(&[0, 1, 2, 3]))
        .expect("heartbeat");
    // a holds nothing; b, live, holds everything: a waits...
    assert_eq!(q.lease(100, a, 1), Ok(LeaseReply::Wait));
    assert_eq!(q.lease(900, a, 1), Ok(LeaseReply::Wait));
    // ... b takes two ...
    let taken = tasks(q.lease(950, b, 2));
    assert_eq!(taken.len(), 2);
    // ... and past the wait (since a's last grant, at 0) a takes the rest.
    assert_eq!(lease_one(&mut q, 1_000, a).epoch, Epoch(1));
    check_invariants(&q).expect("invariants");

    // A worker silent past the lease timeout holds nothing for anyone.
    let mut q = Queue::new(
        2,
        QueueConfig {
            affinity_wait_ms: 5_000,
            ..config(2, 3)
        },
    )
    .expect("valid config");
    let a = q.register(0);
    let b = q.register(0);
    finish_epoch(&mut q, 0, a);
    q.heartbeat_holding(1, b, Some(&[0, 1])).expect("heartbeat");
    assert_eq!(q.lease(999, a, 1), Ok(LeaseReply::Wait));
    assert_eq!(
        lease_one(&mut q, 1_001, a).epoch,
        Epoch(1),
        "b is silent: a takes it"
    );
}

#[test]
fn an_affinity_wait_changes_nothing_and_heartbeats_that_say_what_is_cached_replay() {
    let mut q = queue(3, 2, 3);
    let a = q.register(0);
    let b = q.register(0);
    finish_epoch(&mut q, 0, a);
    let beat = Command::Heartbeat {
        now: 1,
        worker: b,
        cached: Some(vec![0, 1, 2]),
    };
    assert!(q.apply(&beat).changed());
    let before = q.clone();
    let wait = Command::Lease {
        now: 2,
        worker: a,
        max: 1,
    };
    let reply = q.apply(&wait);
    assert_eq!(reply, Reply::Lease(Ok(LeaseReply::Wait)));
    assert!(!reply.changed());
    assert_eq!(
        q, before,
        "a wait is not journaled, so it must change nothing"
    );
}

/// A worker counted gone with rows 40..60 of split 0 unsaved and committed:
/// they are served again, to `other` (which gets the lease), at 2_000.
fn rows_served_again() -> (Queue, WorkerId, WorkerId, Lease) {
    let mut q = queue(1, 1, 3);
    let w = q.register(0);
    let other = q.register(0);
    let third = q.register(0);
    let lease = lease_one(&mut q, 0, w);
    q.commit(10, w, lease.attempt, 60).expect("commit");
    q.unsaved(11, w, vec![rows(Epoch(0), 0, 40, 60)])
        .expect("unsaved");
    q.tick(11 + TIMEOUT);
    let makeup = lease_one(&mut q, 2_000, other);
    assert_eq!(
        (makeup.offset, makeup.skip.clone()),
        (40, vec![(60, u64::MAX)])
    );
    (q, other, third, makeup)
}

/// The rows of each lease of rows served again, as `(start, end)`, sorted.
fn makeup_rows(leases: &[Lease]) -> Vec<(u64, u64)> {
    let mut served: Vec<(u64, u64)> = leases
        .iter()
        .filter_map(|l| {
            let end = l.skip.last().filter(|s| s.1 == u64::MAX)?.0;
            Some((l.offset, end))
        })
        .collect();
    served.sort_unstable();
    served
}

#[test]
fn a_makeup_lease_handed_back_keeps_the_rows_it_committed() {
    // Found by the coordinator's simulation (seed 3): the rows were served
    // again whole, and once more when the worker was counted gone.
    let (mut q, other, third, makeup) = rows_served_again();
    q.commit(2_001, other, makeup.attempt, 50).expect("commit");
    q.unsaved(2_001, other, vec![rows(Epoch(0), 0, 40, 50)])
        .expect("unsaved");
    q.hand_back(2_002, other, makeup.attempt)
        .expect("hand back");
    // Only the rows it did not commit are served again at once...
    let again = lease_one(&mut q, 2_003, third);
    assert_eq!(
        (again.offset, again.skip.clone()),
        (50, vec![(60, u64::MAX)])
    );
    q.finish(2_004, third, again.attempt, 60).expect("finish");
    // ...those it did once its trainers are lost with them.
    q.tick(2_002 + TIMEOUT);
    let leases = tasks(q.lease(2_100 + TIMEOUT, third, 10));
    assert_eq!(makeup_rows(&leases), vec![(40, 50)], "{leases:?}");
}

#[test]
fn a_failed_makeup_lease_serves_again_only_what_it_did_not_commit() {
    let (mut q, other, third, makeup) = rows_served_again();
    q.commit(2_001, other, makeup.attempt, 55).expect("commit");
    q.fail(2_002, other, makeup.attempt, "read".to_string())
        .expect("fail");
    let leases = tasks(q.lease(2_003, third, 10));
    assert_eq!(makeup_rows(&leases), vec![(55, 60)], "{leases:?}");
}

#[test]
fn a_worker_counted_gone_as_its_makeup_lease_lapses_has_each_row_served_once() {
    // Found by the coordinator's simulation (seed 99): rows it acknowledged
    // and never committed were served again with the lease, and as its
    // unsaved rows too.
    let (mut q, other, third, makeup) = rows_served_again();
    q.commit(2_001, other, makeup.attempt, 45).expect("commit");
    q.unsaved(2_001, other, vec![rows(Epoch(0), 0, 40, 55)])
        .expect("unsaved");
    // Silent: counted gone in the tick that lapses its lease.
    q.tick(2_001 + TIMEOUT);
    let leases = tasks(q.lease(2_100 + TIMEOUT, third, 10));
    assert_eq!(makeup_rows(&leases), vec![(40, 45), (45, 60)], "{leases:?}");
}

#[test]
fn rows_served_again_skip_what_a_checkpoint_holds_meanwhile() {
    let (mut q, other, third, makeup) = rows_served_again();
    // Checkpointed under its live lease; its commit never comes.
    q.checkpoint_by(Some(other), "1", &[rows(Epoch(0), 0, 40, 50)])
        .expect("held under its lease");
    q.tick(makeup.deadline);
    let again = lease_one(&mut q, makeup.deadline + 1, third);
    assert_eq!(
        (again.offset, again.skip.clone()),
        (40, vec![(40, 50), (60, u64::MAX)])
    );
    q.finish(makeup.deadline + 2, third, again.attempt, 60)
        .expect("finish");
}

/// A queue of 6 ranks over 24 lanes of 10 rows each (one split a lane).
fn world_of_six() -> Queue {
    let rows = vec![10u64; 24];
    let cut = crate::queue::cut_lanes(&rows, 24, 10);
    let lanes = crate::queue::Lanes {
        count: 24,
        window_rows: 10,
        rows: cut.iter().map(|&(_, s, e)| e - s).collect(),
        group: cut.iter().map(|&(g, _, _)| g).collect(),
        ..crate::queue::Lanes::default()
    };
    let config = QueueConfig {
        lanes: Some(lanes),
        world: Some(6),
        ..config(1, 3)
    };
    Queue::with_rows(rows.into_iter().map(Some).collect(), config).expect("valid config")
}

/// The ranks `worker` of `devices` devices takes at `now`, if any are free.
fn ranks_taken(q: &mut Queue, now: Millis, worker: WorkerId, devices: u32) -> Option<Vec<u32>> {
    match q.take_ranks(now, worker, devices).expect("a live worker") {
        RanksReply::Taken(ranks) => Some(ranks.ranks),
        RanksReply::Wait { .. } | RanksReply::NoWorld | RanksReply::JobOver => None,
    }
}

#[test]
fn a_worker_takes_free_ranks_that_lie_apart_and_is_leased_their_lanes_only() {
    let mut q = world_of_six();
    let (a, b, c) = (q.register(0), q.register(0), q.register(0));
    assert_eq!(ranks_taken(&mut q, 0, a, 1), Some(vec![0]));
    assert_eq!(ranks_taken(&mut q, 0, b, 2), Some(vec![1, 2]));
    assert_eq!(ranks_taken(&mut q, 0, c, 3), Some(vec![3, 4, 5]));
    let d = q.register(0);
    assert_eq!(
        q.take_ranks(0, d, 1),
        Ok(RanksReply::Wait { free: 0, world: 6 }),
        "the world is full"
    );
    // c goes silent: a worker of 2 takes the first run of its ranks.
    q.heartbeat(TIMEOUT, a).expect("a is live");
    q.heartbeat(TIMEOUT, b).expect("b is live");
    let e = q.register(TIMEOUT);
    assert_eq!(ranks_taken(&mut q, TIMEOUT + 1, e, 2), Some(vec![3, 4]));
    // b goes silent: 1, 2 and 5 are free, and a worker of 3 takes them.
    q.heartbeat(2 * TIMEOUT, a).expect("a is live");
    q.heartbeat(2 * TIMEOUT, e).expect("e is live");
    let f = q.register(2 * TIMEOUT);
    let now = 2 * TIMEOUT + 1;
    assert_eq!(
        q.take_ranks(now, f, 4),
        Ok(RanksReply::Wait { free: 3, world: 6 }),
        "3 free, 4 wanted"
    );
    assert_eq!(ranks_taken(&mut q, now, f, 3), Some(vec![1, 2, 5]));
    assert_eq!(q.ranks_of(f), Some(vec![1, 2, 5]));
    // Its own again while no other took them.
    assert_eq!(ranks_taken(&mut q, now, f, 3), Some(vec![1, 2, 5]));
    // Lanes 4..12 and 20..24: the splits of those lanes, and no other.
    let mut leased: Vec<u32> = tasks(q.lease(now, f, 100))
        .iter()
        .map(|l| l.split)
        .collect();
    leased.sort_unstable();
    let mine: Vec<u32> = (4..12).chain(20..24).collect();
    assert_eq!(leased, mine);
    check_invariants(&q).expect("invariants");
}

#[test]
fn a_snapshot_keeps_the_ranks_of_every_worker_and_reads_older_ones() {
    let mut q = world_of_six();
    let (a, b) = (q.register(0), q.register(0));
    assert_eq!(ranks_taken(&mut q, 0, a, 2), Some(vec![0, 1]));
    assert_eq!(ranks_taken(&mut q, 0, b, 1), Some(vec![2]));
    let json = serde_json::to_string(&q).expect("snapshot");
    let back: Queue = serde_json::from_str(&json).expect("read back");
    assert_eq!(back, q);
    assert_eq!(back.ranks_of(a), Some(vec![0, 1]));
    // A snapshot written while a worker's ranks were a run `[first, count]`.
    let old = json.replace(r#""ranks":{"set":[0,1]}"#, r#""ranks":[0,2]"#);
    assert_ne!(old, json);
    let mut back: Queue = serde_json::from_str(&old).expect("read the older snapshot");
    assert_eq!(back.ranks_of(a), Some(vec![0, 1]));
    assert_eq!(back, q);
    // A restored queue works out the splits' lanes again: it leases as the
    // one it was saved from.
    for worker in [a, b] {
        assert_eq!(back.lease(1, worker, 100), q.lease(1, worker, 100));
    }
    assert_eq!(back, q);
}

#[test]
fn a_worker_waiting_for_ranks_is_told_once_the_job_is_over() {
    let mut q = world_of_six();
    let (a, b) = (q.register(0), q.register(0));
    assert_eq!(ranks_taken(&mut q, 0, a, 6), Some((0..6).collect()));
    assert_eq!(
        q.take_ranks(0, b, 1),
        Ok(RanksReply::Wait { free: 0, world: 6 })
    );
    for lease in tasks(q.lease(1, a, 100)) {
        q.finish(2, a, lease.attempt, 10).expect("finished");
    }
    assert!(q.is_over());
    assert_eq!(q.take_ranks(3, b, 1), Ok(RanksReply::JobOver));
    assert_eq!(q.lease(3, b, 1), Ok(LeaseReply::JobOver));
}
