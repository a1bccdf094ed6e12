//! The task queue: a pure state machine that leases a job's tasks to workers, fences
//! stale reports, retries and fails tasks, and steps through the epochs.
//!
//! No I/O, no clock, no threads: every call takes `now`, and the same calls in the
//! same order always give the same state (see [`super::Command`] for replay).
//!
//! Rules a caller can rely on:
//! - Tasks of an epoch are leased in [`super::epoch_order`]; a task that comes back
//!   (failed or lapsed attempt) goes to the back of the line, so one bad split does
//!   not hold up the others and a flaky worker does not take it again at once.
//! - Epoch `e + 1` starts only when every task of epoch `e` is done or failed.
//! - A lease lapses at `deadline` (a tick at `now >= deadline` expires it): the
//!   task goes back at its committed offset. A lapse counts towards
//!   `max_attempts` only when its worker committed no row at all (of any of
//!   its leases) since it was granted: a worker that dies on this task again
//!   and again (a trainer that keeps failing, a worker killed for memory on it,
//!   a read that hangs past the lease) ends with the task failed instead of a
//!   job that never ends, while a worker killed at a random moment, busy with
//!   its other leases, costs its prefetched tasks nothing. A reported read
//!   failure always counts, a hand-back never does, and a commit that moves
//!   the offset forward resets the count: only ends without progress exhaust
//!   a task. Heartbeats renew all of a worker's leases at once; a commit
//!   renews its own lease.
//! - Renewals never shorten a deadline, so calls arriving out of time order are
//!   harmless.
//! - A refused call (an `Err`) changes nothing; see [`super::Reply::changed`] for the
//!   other calls that change nothing and need no journal record.
//! - A worker reports only on its own leases: a commit, finish or fail naming
//!   another worker's attempt is refused.
//! - Where a split's row count is known (from the files' metadata, or learned
//!   from its first finish and kept for later epochs), a commit may not pass it
//!   and a finish must report exactly it.
//! - Counters saturate instead of overflowing.

use crate::epoch::Epoch;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::config::{ConfigError, QueueConfig};
use super::cut::{Cut, CutPiece};
use super::error::QueueError;
use super::types::{
    AttemptId, EpochView, Expired, FailOutcome, Lease, LeaseReply, Millis, QueueStatus, Task,
    TaskFailure, TaskState, WorkerId, WorkerSecret,
};

/// Tasks of the epoch's order a lease looks through for one the asking
/// worker's cache holds (or no other's does); past them, the order rules.
const AFFINITY_WINDOW: usize = 4096;

/// What the queue remembers of a worker.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
struct WorkerRecord {
    /// The worker's live leases: attempt -> split. Exactly the tasks in
    /// `Leased { worker: this worker, .. }`.
    leases: BTreeMap<AttemptId, u32>,
    /// Attempts of this worker that lapsed since its last heartbeat; handed back (and
    /// cleared) by the next heartbeat so the worker stops reading them.
    lost: Vec<AttemptId>,
    /// The secret the worker proves itself with (workers of a master); `None`
    /// for workers in the same process, and in journals older than secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<WorkerSecret>,
    /// The name the worker gave itself, for people; absent in older journals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// When the worker last spoke (any request naming it).
    #[serde(default)]
    last_seen: Millis,
    /// Rows its trainers acknowledged (and it may have committed) that are in
    /// none of its complete checkpoints, as it last reported them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unsaved: Vec<CutPiece>,
    /// Counted gone: silent past the lease timeout with unsaved rows, which
    /// were served again. Its requests are refused.
    #[serde(default)]
    gone: bool,
    /// Rows of its leases that lapsed, past what it committed: served again
    /// elsewhere, so never its to checkpoint or to have made up (rows its
    /// trainers acknowledged while it was paused or cut off are another
    /// worker's). Kept as disjoint ranges (see [`forfeit_rows`]) and pruned
    /// only where a row can no longer matter:
    /// - rows it is leased again leave this (they are its own again);
    /// - a rewind clears it (every lease is dropped, the trainers go back);
    /// - a worker counted gone drops it and forfeits nothing more: every
    ///   request of a gone worker is refused before this is read.
    ///
    /// Rows of an epoch that is over stay: the worker's trainers may still
    /// hold rows they acknowledged during the pause, and its next checkpoint
    /// may name them whatever the epoch is by then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    forfeit: Vec<CutPiece>,
    /// Splits whose files the worker's cache holds, as it last said
    /// ([`Queue::heartbeat_holding`]): from the second epoch on they are
    /// leased to it rather than to others.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    cached: BTreeSet<u32>,
    /// When the worker was last granted a task: asking later while every
    /// task left is in another live worker's cache, it waits until the
    /// config's `affinity_wait_ms` past this before it takes one of them.
    #[serde(default)]
    last_granted: Millis,
    /// Its trainers ended their streams with rows in no checkpoint, as it
    /// reported ([`Queue::unsaved_at_end`]): a repeat of the report (sent
    /// again when its answer was lost) counts once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    ended_unsaved: bool,
    /// The ranks it took in a job of `--world-size` ([`Queue::take_ranks`]),
    /// ascending: its while it is live.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::ranks::held"
    )]
    ranks: Option<Vec<u32>>,
}

/// Leases the tasks (split × epoch) of one job to workers. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Queue {
    config: QueueConfig,
    /// Current epoch, `< config.epochs`. Only increases, and only once every task of
    /// the epoch is done or failed.
    epoch: Epoch,
    /// One entry per split for the current epoch, indexed by split. A task's committed
    /// offset never decreases within an epoch; at most one live lease per task (its
    /// state holds it); `attempts <= config.max_attempts`.
    tasks: Vec<Task>,
    /// Splits in `Todo`, in the order they will be leased: each `Todo` split exactly
    /// once, nothing else.
    todo: VecDeque<u32>,
    /// Live leases: attempt -> split. Exactly the tasks in `Leased { attempt, .. }`.
    live: BTreeMap<AttemptId, u32>,
    /// Registered workers. Every `Leased { worker, .. }` names one of them.
    workers: BTreeMap<WorkerId, WorkerRecord>,
    /// Next worker id to hand out; greater than every id handed out.
    next_worker: u64,
    /// Next attempt id to hand out; greater than every attempt handed out.
    next_attempt: u64,
    /// Tasks of the current epoch in `Done`.
    done: usize,
    /// Tasks of the current epoch in `Failed`.
    failed: usize,
    /// Tasks done over all epochs; never decreases.
    tasks_done: u64,
    /// Rows of done tasks over all epochs; never decreases.
    rows_done: u64,
    /// Rows committed over all epochs (every commit's advance, every finish's
    /// rest), less the rows of a gone worker served again until their makeup
    /// lease finishes: never above `rows_done` plus the committed rows of
    /// tasks not done, and equal to `rows_done` once the job is over.
    #[serde(default)]
    rows_committed: u64,
    /// Every task given up, oldest first; only grows.
    failures: Vec<TaskFailure>,
    /// Every epoch is finished. Once true, stays true and nothing is leased.
    over: bool,
    /// Rows of each split where known, indexed by split (shorter than `tasks`
    /// when the rest is unknown): from the files' metadata, or learned from the
    /// split's first finish. Once known, never changes.
    #[serde(default)]
    split_rows: Vec<Option<u64>>,
    /// The rows of the last complete checkpoint, for jobs whose trainers keep
    /// checkpoints.
    #[serde(default)]
    cut: Cut,
    /// Rows to serve again outside the epochs' tasks: what gone workers'
    /// trainers had acknowledged but not checkpointed.
    #[serde(default)]
    makeup: Makeup,
    /// The last complete checkpoint of each named worker: where a worker
    /// started again under that name resumes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    checkpoint_of: BTreeMap<String, String>,
    /// Rows served again because their worker was lost before its trainers
    /// saved them (counted gone, or its checkpoint refused); only grows.
    #[serde(default)]
    rows_made_up: u64,
    /// Every epoch's tasks are done or failed (the job is over once the
    /// makeup rows are served too).
    #[serde(default)]
    epochs_over: bool,
    /// The job follows its source and has not been closed: more tasks may
    /// come ([`Queue::grow`]), so finishing every task ends nothing.
    #[serde(default)]
    open: bool,
    /// What each [`Queue::grow`] brought, oldest first: the caller's record
    /// of the splits it added (the queue keeps it, so that snapshots hold it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    grown: Vec<Growth>,
    /// Splits whose files were declared repaired: their failed tasks were put
    /// back by [`Queue::retry_failed`]. Their leases, in every later epoch,
    /// say so ([`Lease::repaired`]).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    repaired: BTreeSet<u32>,
    /// Rows some worker's trainers held in no checkpoint when they ended
    /// their streams (no `checkpoint ID` after their last batch), whichever
    /// worker it was: they are served once more, and rows of them held in
    /// no checkpoint at an end of streams again fail the job
    /// ([`Queue::no_final_checkpoint`]). Disjoint ranges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ended_unsaved: Vec<CutPiece>,
    /// The job failed: trainers ended their streams a second time without
    /// a final checkpoint over rows already served again for that reason;
    /// the rows in no checkpoint the second time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    no_final_checkpoint: Option<u64>,
    /// Live leases of tasks whose worker committed no row (of any lease)
    /// since they were granted: should one lapse, it counts as an attempt
    /// of its task (see the module docs). A subset of `live`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    idle: BTreeSet<AttemptId>,
    /// No tick before this time finds anything to do (see [`Due`]).
    #[serde(skip)]
    due: Due,
    /// The lane of every split of a job cut into lanes (see [`LaneOf`]).
    #[serde(skip)]
    lane_of: LaneOf,
}

/// A time before which a tick has nothing to do: at or below every live
/// lease's deadline and every time a silent worker may be counted gone. A
/// hint derived from the rest of the queue, not part of its state: it is
/// not saved, a loaded queue starts at 0 (the first tick looks), and two
/// queues compare equal whatever their hints. It lets a tick on every
/// request cost nothing while no lease is due.
#[derive(Debug, Clone, Copy, Default)]
struct Due(Millis);

impl Due {
    /// Something may be due at `at`.
    fn lower(&mut self, at: Millis) {
        self.0 = self.0.min(at);
    }
}

impl PartialEq for Due {
    fn eq(&self, _: &Due) -> bool {
        true
    }
}

impl Eq for Due {}

/// The lane of every split, worked out once from the config's lanes and
/// kept, so that a lease does not work it out again for every split. Like
/// [`Due`], derived from the rest of the queue: not saved (a loaded queue
/// works it out on its first lease), and equal whatever it holds.
#[derive(Debug, Clone, Default)]
struct LaneOf(std::sync::OnceLock<Vec<u32>>);

impl LaneOf {
    /// The lane of each split of `lanes`.
    fn of(&self, lanes: &super::Lanes) -> &[u32] {
        self.0.get_or_init(|| lanes.lane_of())
    }
}

impl PartialEq for LaneOf {
    fn eq(&self, _: &LaneOf) -> bool {
        true
    }
}

impl Eq for LaneOf {}

/// The lane of every split of a job cut into lanes (none otherwise).
fn split_lanes<'a>(config: &'a QueueConfig, lane_of: &'a LaneOf) -> &'a [u32] {
    config.lanes.as_ref().map_or(&[], |lanes| lane_of.of(lanes))
}

/// Whether `split` lies in a lane flagged in `mine`.
fn in_lanes(lane_of: &[u32], mine: &[bool], split: u32) -> bool {
    lane_of
        .get(split as usize)
        .and_then(|&lane| mine.get(lane as usize))
        .is_some_and(|&flag| flag)
}

/// The splits one [`Queue::grow`] added to a followed job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Growth {
    /// The first split added.
    pub first: u32,
    /// Their row counts, where known.
    pub rows: Vec<Option<u64>>,
    /// The caller's account of them (the splits themselves, and where in
    /// its source they came from).
    pub record: serde_json::Value,
}

/// Rows served again outside the epochs' tasks, and their leases.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Makeup {
    todo: VecDeque<CutPiece>,
    /// attempt -> (worker, rows, deadline)
    live: BTreeMap<AttemptId, (WorkerId, CutPiece, Millis)>,
    /// attempt -> the rows of the live lease its worker committed: should
    /// the lease end unfinished, they stay committed (its trainers hold
    /// them) and only the rest is served again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    committed: BTreeMap<AttemptId, Vec<(u64, u64)>>,
}

impl Queue {
    /// A queue for a job of `num_splits` splits, at epoch 0 with every task to do.
    /// A job with no splits is over at once. Row counts are learned from each
    /// split's first finish.
    pub fn new(num_splits: usize, config: QueueConfig) -> Result<Queue, ConfigError> {
        Queue::build(num_splits, Vec::new(), config)
    }

    /// A queue for a job whose splits have these row counts (`None` where the
    /// format has no counts in its metadata: learned from the first finish).
    pub fn with_rows(rows: Vec<Option<u64>>, config: QueueConfig) -> Result<Queue, ConfigError> {
        Queue::build(rows.len(), rows, config)
    }

    fn build(
        num_splits: usize,
        split_rows: Vec<Option<u64>>,
        config: QueueConfig,
    ) -> Result<Queue, ConfigError> {
        config.validate()?;
        if u32::try_from(num_splits).is_err() {
            return Err(ConfigError::TooManySplits {
                splits: num_splits,
                max: u64::from(u32::MAX),
            });
        }
        let open = config.follow;
        let mut queue = Queue {
            config,
            epoch: Epoch::FIRST,
            tasks: Vec::new(),
            todo: VecDeque::new(),
            live: BTreeMap::new(),
            workers: BTreeMap::new(),
            next_worker: 1,
            next_attempt: 1,
            done: 0,
            failed: 0,
            tasks_done: 0,
            rows_done: 0,
            rows_committed: 0,
            failures: Vec::new(),
            over: false,
            split_rows,
            ended_unsaved: Vec::new(),
            no_final_checkpoint: None,
            idle: BTreeSet::new(),
            cut: Cut::default(),
            makeup: Makeup::default(),
            checkpoint_of: BTreeMap::new(),
            rows_made_up: 0,
            epochs_over: false,
            open,
            grown: Vec::new(),
            repaired: BTreeSet::new(),
            due: Due::default(),
            lane_of: LaneOf::default(),
        };
        if let Some(lanes) = &queue.config.lanes {
            queue.lane_of.of(lanes);
        }
        queue.start_epoch(Epoch::FIRST, num_splits);
        queue.settle();
        Ok(queue)
    }

    /// Registers a new worker and names it. Ids are chosen here, never by workers.
    /// `now` is unused beyond the journal record.
    pub fn register(&mut self, _now: Millis) -> WorkerId {
        self.enrol(None, None)
    }

    /// Registers a new worker that proves itself with `secret` (see
    /// [`Queue::authenticate`]). `now` is unused beyond the journal record.
    pub fn register_with_secret(&mut self, _now: Millis, secret: WorkerSecret) -> WorkerId {
        self.enrol(Some(secret), None)
    }

    /// Registers a new worker with an optional secret and the name it gave
    /// itself (kept for status pages, never checked). `now` is unused beyond
    /// the journal record.
    pub fn register_as(
        &mut self,
        _now: Millis,
        secret: Option<WorkerSecret>,
        name: Option<String>,
    ) -> WorkerId {
        self.enrol(secret, name)
    }

    /// The ranks `worker` took in a job of `--world-size`, ascending.
    pub fn ranks_of(&self, worker: WorkerId) -> Option<Vec<u32>> {
        self.workers.get(&worker)?.ranks.clone()
    }

    /// The name `worker` registered with, if it gave one.
    pub fn worker_name(&self, worker: WorkerId) -> Option<&str> {
        self.workers.get(&worker)?.name.as_deref()
    }

    fn enrol(&mut self, secret: Option<WorkerSecret>, name: Option<String>) -> WorkerId {
        let worker = WorkerId(self.next_worker);
        self.next_worker = self.next_worker.saturating_add(1);
        let record = WorkerRecord {
            secret,
            name,
            ..WorkerRecord::default()
        };
        self.workers.insert(worker, record);
        worker
    }

    /// Checks that a request naming `worker` came from it: `given` must be the
    /// secret it registered with (compared in constant time). A worker
    /// registered without one cannot be vouched for this way.
    pub fn authenticate(&self, worker: WorkerId, given: &WorkerSecret) -> Result<(), QueueError> {
        let record = self
            .workers
            .get(&worker)
            .ok_or(QueueError::UnknownWorker { worker })?;
        match &record.secret {
            Some(secret) if secret.matches(given) => Ok(()),
            _ => Err(QueueError::WrongSecret { worker }),
        }
    }

    /// The worker holding the live lease `attempt`, if it is live.
    pub fn holder(&self, attempt: AttemptId) -> Option<WorkerId> {
        let split = *self.live.get(&attempt)?;
        match self.tasks.get(split as usize)?.state {
            TaskState::Leased {
                attempt: held,
                worker,
                ..
            } if held == attempt => Some(worker),
            _ => None,
        }
    }

    /// Rows of `split`, where known (from metadata or an earlier finish).
    pub fn split_rows(&self, split: u32) -> Option<u64> {
        self.split_rows.get(split as usize).copied().flatten()
    }

    /// Takes the row counts of the job's splits where the queue does not know
    /// them yet (a queue restored from a snapshot written before it kept them).
    pub fn know_rows(&mut self, rows: &[Option<u64>]) {
        let splits = self.tasks.len();
        if self.split_rows.len() < splits {
            self.split_rows.resize(splits, None);
        }
        for (known, given) in self.split_rows.iter_mut().zip(rows) {
            if known.is_none() {
                *known = *given;
            }
        }
    }

    /// Leases up to `max` tasks of the current epoch to `worker`, in the epoch's order
    /// (`max == 0` with tasks to do answers `Tasks` with none).
    pub fn lease(
        &mut self,
        now: Millis,
        worker: WorkerId,
        max: usize,
    ) -> Result<LeaseReply, QueueError> {
        if !self.workers.contains_key(&worker) {
            return Err(QueueError::UnknownWorker { worker });
        }
        self.check_alive(worker)?;
        if self.over {
            return Ok(LeaseReply::JobOver);
        }
        if self.nothing_planned() {
            // A worker whose trainers hold rows in no checkpoint ends their
            // streams (their final checkpoints save them); the others wait,
            // to serve again what a worker that dies before that held.
            let holds = self
                .workers
                .get(&worker)
                .is_some_and(|r| !r.unsaved.is_empty());
            return Ok(if holds {
                LeaseReply::JobOver
            } else {
                LeaseReply::Wait
            });
        }
        let mine = self.lanes_of(now, worker)?;
        let mut leases = Vec::new();
        while leases.len() < max {
            let at = match &mine {
                Some(mine) => {
                    let lane_of = split_lanes(&self.config, &self.lane_of);
                    self.makeup
                        .todo
                        .iter()
                        .position(|p| in_lanes(lane_of, mine, p.split))
                }
                None => (!self.makeup.todo.is_empty()).then_some(0),
            };
            let Some(piece) = at.and_then(|at| self.makeup.todo.remove(at)) else {
                break;
            };
            leases.push(self.grant_makeup(now, worker, piece));
        }
        if self.todo.is_empty() && leases.is_empty() {
            return Ok(LeaseReply::Wait);
        }
        while leases.len() < max {
            let next = match &mine {
                Some(mine) => {
                    let lane_of = split_lanes(&self.config, &self.lane_of);
                    let at = self.todo.iter().position(|&s| in_lanes(lane_of, mine, s));
                    at.and_then(|at| self.todo.remove(at))
                }
                None => self.next_for(now, worker),
            };
            let Some(split) = next else {
                break;
            };
            leases.push(self.grant(now, worker, split));
        }
        if leases.is_empty() {
            // Every task left is in another live worker's cache (max > 0).
            return Ok(if max > 0 {
                LeaseReply::Wait
            } else {
                LeaseReply::Tasks(leases)
            });
        }
        self.touch(worker, now);
        Ok(LeaseReply::Tasks(leases))
    }

    /// In a job of `--world-size`, which lanes are those of `worker`'s
    /// ranks (one flag per lane): it is leased only their tasks. `None` in
    /// another job; refused when the worker holds no ranks now.
    fn lanes_of(&self, now: Millis, worker: WorkerId) -> Result<Option<Vec<bool>>, QueueError> {
        let (Some(world), Some(lanes)) = (self.config.world, &self.config.lanes) else {
            return Ok(None);
        };
        let Some(ranks) = self.live_ranks(now, worker) else {
            return Err(QueueError::NoRanks { worker });
        };
        let mut mine = vec![false; lanes.count as usize];
        for lane in lanes.of_rank_set(&ranks, world) {
            if let Some(flag) = mine.get_mut(lane as usize) {
                *flag = true;
            }
        }
        Ok(Some(mine))
    }

    /// The ranks `worker` holds, while no other live worker holds any of them.
    fn live_ranks(&self, now: Millis, worker: WorkerId) -> Option<Vec<u32>> {
        let ranks = self.workers.get(&worker)?.ranks.clone()?;
        let others = self.held_ranks(now, worker);
        (!ranks.iter().any(|r| others.contains(r))).then_some(ranks)
    }

    /// The ranks the live workers other than `worker` hold.
    fn held_ranks(&self, now: Millis, worker: WorkerId) -> Vec<u32> {
        let timeout = self.config.lease_timeout_ms;
        self.workers
            .iter()
            .filter(|(id, r)| {
                **id != worker && !r.gone && r.last_seen.saturating_add(timeout) > now
            })
            .filter_map(|(_, r)| r.ranks.as_ref())
            .flatten()
            .copied()
            .collect()
    }

    /// The job's world is now `world` ranks (a master resumed with another
    /// `--world-size`): every worker takes its ranks again.
    pub fn set_world(&mut self, world: u32) {
        self.config.world = Some(world.max(1));
        for record in self.workers.values_mut() {
            record.ranks = None;
        }
    }

    /// `worker`, of `devices` devices, takes as many ranks of the job's
    /// world: its own again while no other live worker took any of them,
    /// else any that none of the live workers holds (a run of consecutive
    /// ranks where there is one, see [`super::ranks`]). While fewer are
    /// free it is told how many are; once the job is over, so; in a job
    /// without `--world-size`, that there is no world.
    pub fn take_ranks(
        &mut self,
        now: Millis,
        worker: WorkerId,
        devices: u32,
    ) -> Result<super::RanksReply, QueueError> {
        if !self.workers.contains_key(&worker) {
            return Err(QueueError::UnknownWorker { worker });
        }
        self.check_alive(worker)?;
        if self.over {
            return Ok(super::RanksReply::JobOver);
        }
        let Some(world) = self.config.world else {
            return Ok(super::RanksReply::NoWorld);
        };
        let devices = devices.max(1);
        if devices > world {
            return Err(QueueError::WorldTooSmall { devices, world });
        }
        let held = self.held_ranks(now, worker);
        let ranks = match self.live_ranks(now, worker) {
            Some(own) if own.len() as u32 == devices => Some(own),
            _ => super::ranks::free_ranks(&held, world, devices),
        };
        self.touch(worker, now);
        let Some(ranks) = ranks else {
            let free = (0..world).filter(|r| !held.contains(r)).count() as u32;
            return Ok(super::RanksReply::Wait { free, world });
        };
        if let Some(record) = self.workers.get_mut(&worker) {
            record.ranks = Some(ranks.clone());
        }
        Ok(super::RanksReply::Taken(super::Ranks { ranks, world }))
    }

    /// The next split of the epoch for `worker`. From the second epoch on,
    /// where workers said what their caches hold: the first in the epoch's
    /// order that its cache holds, else the first that no other live
    /// worker's cache does; when every split left is in another's, none
    /// until `affinity_wait_ms` after the worker's last grant (then the
    /// first in order). Changes nothing when it finds none.
    fn next_for(&mut self, now: Millis, worker: WorkerId) -> Option<u32> {
        if self.epoch == Epoch::FIRST
            || self.todo.is_empty()
            || self.workers.values().all(|r| r.cached.is_empty())
        {
            return self.todo.pop_front();
        }
        let timeout = self.config.lease_timeout_ms;
        let live = |r: &WorkerRecord| !r.gone && r.last_seen.saturating_add(timeout) > now;
        let record = self.workers.get(&worker)?;
        let others: Vec<&BTreeSet<u32>> = self
            .workers
            .iter()
            .filter(|(id, r)| **id != worker && live(r) && !r.cached.is_empty())
            .map(|(_, r)| &r.cached)
            .collect();
        // Only the next AFFINITY_WINDOW tasks are looked at: a lease costs
        // no more than that, however many tasks are left.
        let window = || self.todo.iter().take(AFFINITY_WINDOW);
        let at = window()
            .position(|s| record.cached.contains(s))
            .or_else(|| window().position(|s| !others.iter().any(|o| o.contains(s))));
        let waited = now.saturating_sub(record.last_granted) >= self.config.affinity_wait_ms;
        match at {
            Some(at) => self.todo.remove(at),
            None if waited => self.todo.pop_front(),
            None => None,
        }
    }

    /// The attempts `worker` holds a live lease for (none for an unknown worker).
    pub fn leases_of(&self, worker: WorkerId) -> impl Iterator<Item = AttemptId> + '_ {
        self.workers
            .get(&worker)
            .into_iter()
            .flat_map(|record| record.leases.keys().copied())
    }

    /// Renews every lease of `worker` to at least `now + lease_timeout_ms` and returns
    /// the worker's attempts that lapsed since its last heartbeat: it must drop them.
    pub fn heartbeat(
        &mut self,
        now: Millis,
        worker: WorkerId,
    ) -> Result<Vec<AttemptId>, QueueError> {
        self.heartbeat_holding(now, worker, None)
    }

    /// [`Queue::heartbeat`] of a worker whose cache holds the files of the
    /// splits `cached`, when it says (replacing what it said before).
    pub fn heartbeat_holding(
        &mut self,
        now: Millis,
        worker: WorkerId,
        cached: Option<&[u32]>,
    ) -> Result<Vec<AttemptId>, QueueError> {
        let deadline = self.deadline(now);
        self.check_alive(worker)?;
        self.touch(worker, now);
        for (holder, _, d) in self.makeup.live.values_mut() {
            if *holder == worker {
                *d = (*d).max(deadline);
            }
        }
        let record = self
            .workers
            .get_mut(&worker)
            .ok_or(QueueError::UnknownWorker { worker })?;
        if let Some(cached) = cached {
            record.cached = cached.iter().copied().collect();
        }
        for &split in record.leases.values() {
            if let Some(Task {
                state: TaskState::Leased { deadline: d, .. },
                ..
            }) = self.tasks.get_mut(split as usize)
            {
                *d = (*d).max(deadline);
            }
        }
        Ok(std::mem::take(&mut record.lost))
    }

    /// Records that trainers acknowledged the first `offset` rows of the attempt's
    /// split, and the rows of `ranges` past it. `offset` is absolute within the
    /// split; repeating the committed offset is fine, going below it or past
    /// the split's known rows is refused (so is a range past them), and so is
    /// an attempt `worker` does not hold. Progress proves the worker alive, so
    /// a commit also renews this lease like a heartbeat does.
    fn commit_task(
        &mut self,
        now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
        offset: u64,
        ranges: &[(u64, u64)],
    ) -> Result<(), QueueError> {
        let renewed = self.deadline(now);
        let split = self.owned(worker, attempt)?;
        let rows = self.split_rows(split);
        let committed = *self.leased_mut(attempt)?.0;
        if offset < committed {
            return Err(QueueError::OffsetBackwards {
                attempt,
                committed,
                offset,
            });
        }
        let last = ranges.iter().map(|r| r.1).max().unwrap_or(0).max(offset);
        if let Some(rows) = rows.filter(|&rows| last > rows) {
            return Err(QueueError::OffsetPastEnd {
                attempt,
                split,
                offset: last,
                rows,
            });
        }
        let Some(task) = self.tasks.get_mut(split as usize) else {
            return Err(QueueError::Stale { attempt });
        };
        let before = covered(committed, &task.skip);
        for &(start, end) in ranges {
            if end > start.max(offset) {
                crate::queue::cut::insert(&mut task.skip, (start.max(offset), end));
            }
        }
        // Ranges the offset reached are in the prefix now.
        task.skip.retain(|r| r.1 > offset);
        if let Some(first) = task.skip.first_mut() {
            first.0 = first.0.max(offset);
        }
        let advance = covered(offset, &task.skip).saturating_sub(before);
        if let TaskState::Leased {
            offset: held,
            deadline,
            ..
        } = &mut task.state
        {
            *held = offset;
            *deadline = (*deadline).max(renewed);
        }
        self.rows_committed = self.rows_committed.saturating_add(advance);
        if advance > 0 {
            // Progress proves the task is not what kills its attempts: an
            // attempt that committed rows does not count towards `max_attempts`.
            task.attempts = 0;
            self.progressed(worker);
        }
        Ok(())
    }

    /// Marks the attempt's task done: all `rows` rows of the split were read and
    /// acknowledged (`rows` also becomes its committed offset, so it may not be
    /// below the committed offset). Where the split's rows are known, `rows` must
    /// be exactly that; otherwise it becomes known, for the epochs that follow.
    /// Only the attempt's own `worker` may finish it. `now` is unused beyond the
    /// journal record.
    fn finish_task(
        &mut self,
        _now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
        rows: u64,
    ) -> Result<(), QueueError> {
        let split = self.owned(worker, attempt)?;
        let committed = *self.leased_mut(attempt)?.0;
        if rows < committed {
            return Err(QueueError::OffsetBackwards {
                attempt,
                committed,
                offset: rows,
            });
        }
        if let Some(known) = self.split_rows(split).filter(|&known| known != rows) {
            return Err(QueueError::WrongRows {
                attempt,
                split,
                reported: rows,
                rows: known,
            });
        }
        self.progressed(worker);
        self.release(attempt)?;
        let mut before = committed;
        if let Some(task) = self.tasks.get_mut(split as usize) {
            before = covered(committed, &task.skip).min(rows);
            task.state = TaskState::Done { rows };
            task.skip.clear();
        }
        self.learn_rows(split, rows);
        self.done = self.done.saturating_add(1);
        self.tasks_done = self.tasks_done.saturating_add(1);
        self.rows_done = self.rows_done.saturating_add(rows);
        self.rows_committed = self.rows_committed.saturating_add(rows - before);
        self.settle();
        Ok(())
    }

    /// Ends the attempt as failed: its task goes back to todo at the committed
    /// offset, or is failed with `reason` if it has used `max_attempts` attempts.
    /// Only the attempt's own `worker` may fail it. `now` is unused beyond the
    /// journal record.
    fn fail_task(
        &mut self,
        _now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
        for_good: bool,
    ) -> Result<FailOutcome, QueueError> {
        self.owned(worker, attempt)?;
        let (_, split) = self.release(attempt)?;
        if let Some(task) = self.tasks.get_mut(split as usize) {
            task.attempts = task.attempts.saturating_add(1);
        }
        let outcome = self.end_attempt(split, reason, for_good);
        self.settle();
        Ok(outcome)
    }

    /// The attempt's worker gives the task back unfinished (it is stopping,
    /// e.g. pre-empted): the task goes to the front of the line at its
    /// committed offset, to be leased again at once, and the attempt does not
    /// count against it. `now` is unused beyond the journal record.
    fn hand_back_task(
        &mut self,
        _now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
    ) -> Result<(), QueueError> {
        self.owned(worker, attempt)?;
        let (_, split) = self.release(attempt)?;
        if self.back_to_todo(split) {
            self.todo.push_front(split);
        }
        Ok(())
    }

    /// Records that trainers acknowledged the first `offset` rows of the attempt's
    /// split (see `commit_task`; a makeup lease takes offsets within its rows).
    pub fn commit(
        &mut self,
        now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
        offset: u64,
    ) -> Result<(), QueueError> {
        self.commit_ranges(now, worker, attempt, offset, &[])
    }

    /// [`Queue::commit`], with the rows trainers acknowledged past `offset`:
    /// sorted, disjoint `(start, end)` ranges, committed as they are, so that
    /// a device holding an earlier batch holds back no other device's acks.
    /// A later lease of the task skips them. Ranges of a makeup lease are
    /// ignored (its rows are served again whole).
    pub fn commit_ranges(
        &mut self,
        now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
        offset: u64,
        ranges: &[(u64, u64)],
    ) -> Result<(), QueueError> {
        self.check_alive(worker)?;
        match self.makeup_of(worker, attempt)? {
            Some(piece) => {
                if offset < piece.start || offset > piece.end {
                    return Err(QueueError::OffsetPastEnd {
                        attempt,
                        split: piece.split,
                        offset,
                        rows: piece.end,
                    });
                }
                let renewed = self.deadline(now);
                if let Some(lease) = self.makeup.live.get_mut(&attempt) {
                    lease.2 = lease.2.max(renewed);
                }
                let done = self.makeup.committed.entry(attempt).or_default();
                let rows = std::iter::once((piece.start, offset)).chain(ranges.iter().copied());
                let before = covered(0, done);
                for (start, end) in rows {
                    let (start, end) = (start.max(piece.start), end.min(piece.end));
                    if end > start {
                        crate::queue::cut::insert(done, (start, end));
                    }
                }
                if covered(0, done) > before {
                    self.progressed(worker);
                }
            }
            None => self.commit_task(now, worker, attempt, offset, ranges)?,
        }
        self.touch(worker, now);
        Ok(())
    }

    /// Marks the attempt's task done (see `finish_task`); a makeup lease is
    /// done when all its rows are.
    pub fn finish(
        &mut self,
        now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
        rows: u64,
    ) -> Result<(), QueueError> {
        self.check_alive(worker)?;
        match self.makeup_of(worker, attempt)? {
            Some(piece) => {
                if rows != piece.end {
                    return Err(QueueError::WrongRows {
                        attempt,
                        split: piece.split,
                        reported: rows,
                        rows: piece.end,
                    });
                }
                self.makeup.live.remove(&attempt);
                self.makeup.committed.remove(&attempt);
                self.rows_committed = self.rows_committed.saturating_add(piece.end - piece.start);
                self.progressed(worker);
                self.settle_makeup();
            }
            None => self.finish_task(now, worker, attempt, rows)?,
        }
        self.touch(worker, now);
        Ok(())
    }

    /// Ends the attempt as failed (see `fail_task`); a makeup lease's rows go
    /// back to be served again.
    pub fn fail(
        &mut self,
        now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
    ) -> Result<FailOutcome, QueueError> {
        self.end_failed(now, worker, attempt, reason, false)
    }

    /// Ends the attempt as failed for good (a file changed since planning:
    /// no attempt can succeed): the task is failed now, whatever attempts it
    /// has left.
    pub fn fail_for_good(
        &mut self,
        now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
    ) -> Result<FailOutcome, QueueError> {
        self.end_failed(now, worker, attempt, reason, true)
    }

    fn end_failed(
        &mut self,
        now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
        for_good: bool,
    ) -> Result<FailOutcome, QueueError> {
        self.check_alive(worker)?;
        let outcome = match self.makeup_of(worker, attempt)? {
            Some(_) => {
                self.end_makeup(attempt, false);
                FailOutcome::Retried
            }
            None => self.fail_task(now, worker, attempt, reason, for_good)?,
        };
        self.touch(worker, now);
        Ok(outcome)
    }

    /// The worker gives the attempt back unfinished (see `hand_back_task`).
    pub fn hand_back(
        &mut self,
        now: Millis,
        worker: WorkerId,
        attempt: AttemptId,
    ) -> Result<(), QueueError> {
        self.check_alive(worker)?;
        match self.makeup_of(worker, attempt)? {
            Some(_) => {
                self.end_makeup(attempt, true);
            }
            None => self.hand_back_task(now, worker, attempt)?,
        }
        self.touch(worker, now);
        Ok(())
    }

    /// A makeup lease ended unfinished (failed, handed back, lapsed): the
    /// rows its worker committed stay committed (its trainers hold them:
    /// made up again only if it is counted gone); the rest is served again
    /// (`first`: before the other rows waiting), so it is never the
    /// worker's to checkpoint or to have made up. Returns its worker.
    fn end_makeup(&mut self, attempt: AttemptId, first: bool) -> Option<WorkerId> {
        let (worker, piece, _) = self.makeup.live.remove(&attempt)?;
        let done = self.makeup.committed.remove(&attempt).unwrap_or_default();
        let rows: u64 = done.iter().map(|(start, end)| end - start).sum();
        self.rows_committed = self.rows_committed.saturating_add(rows);
        let done: Vec<CutPiece> = done
            .into_iter()
            .map(|(start, end)| CutPiece {
                start,
                end,
                ..piece
            })
            .collect();
        let rest = subtract(vec![piece], &done);
        if first {
            for part in rest.iter().rev() {
                self.makeup.todo.push_front(*part);
            }
        } else {
            self.makeup.todo.extend(rest.iter().copied());
        }
        if let Some(record) = self.workers.get_mut(&worker) {
            if !record.gone {
                forfeit_rows(&mut record.forfeit, rest);
            }
        }
        Some(worker)
    }

    /// The rows of a makeup lease `worker` holds, `None` for another attempt.
    fn makeup_of(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
    ) -> Result<Option<CutPiece>, QueueError> {
        match self.makeup.live.get(&attempt) {
            Some(&(holder, _, _)) if holder != worker => Err(QueueError::NotYours {
                attempt,
                worker,
                holder,
            }),
            Some(&(_, piece, _)) => Ok(Some(piece)),
            None => Ok(None),
        }
    }

    /// Leases rows to serve again (from a gone worker).
    fn grant_makeup(&mut self, now: Millis, worker: WorkerId, piece: CutPiece) -> Lease {
        let attempt = AttemptId(self.next_attempt);
        self.next_attempt = self.next_attempt.saturating_add(1);
        let deadline = self.deadline(now);
        self.due.lower(deadline);
        self.makeup.live.insert(attempt, (worker, piece, deadline));
        if let Some(record) = self.workers.get_mut(&worker) {
            if !record.forfeit.is_empty() {
                record.forfeit = subtract(std::mem::take(&mut record.forfeit), &[piece]);
            }
        }
        // Rows in some trainer's checkpoint meanwhile (of an earlier lease
        // of these rows, whose commit never came) are not served again.
        let mut skip: Vec<(u64, u64)> = if piece.epoch < Epoch(self.cut.full_epochs) {
            vec![(piece.start, piece.end)]
        } else {
            let covered = self.cut.covered(piece.epoch, piece.split).iter();
            covered
                .map(|&(start, end)| (start.max(piece.start), end.min(piece.end)))
                .filter(|(start, end)| end > start)
                .collect()
        };
        skip.push((piece.end, u64::MAX));
        Lease {
            attempt,
            epoch: piece.epoch,
            split: piece.split,
            offset: piece.start,
            deadline,
            skip,
            repaired: self.repaired.contains(&piece.split),
        }
    }

    /// Refuses a worker that was counted gone (an unknown one is refused by
    /// each call in its own way).
    fn check_alive(&self, worker: WorkerId) -> Result<(), QueueError> {
        match self.workers.get(&worker) {
            Some(record) if record.gone => Err(QueueError::Gone { worker }),
            _ => Ok(()),
        }
    }

    /// The worker spoke at `now` (only on changes that are journaled).
    fn touch(&mut self, worker: WorkerId, now: Millis) {
        if let Some(record) = self.workers.get_mut(&worker) {
            record.last_seen = record.last_seen.max(now);
            if !record.unsaved.is_empty() {
                // It may be counted gone a lease timeout from now.
                let at = record
                    .last_seen
                    .saturating_add(self.config.lease_timeout_ms);
                self.due.lower(at);
            }
        }
    }

    /// The job is over once every epoch is, the makeup rows are served, and
    /// no live worker's trainers hold rows in no checkpoint: a worker that
    /// dies before its trainers' final checkpoint has those rows made up.
    fn settle_makeup(&mut self) {
        if self.nothing_planned()
            && !self
                .workers
                .values()
                .any(|r| !r.gone && !r.unsaved.is_empty())
        {
            self.over = true;
        }
    }

    /// Every epoch is over and no makeup rows wait or are leased: the job is
    /// over once the live workers' trainers saved what they hold.
    fn nothing_planned(&self) -> bool {
        self.epochs_over && self.makeup.todo.is_empty() && self.makeup.live.is_empty()
    }

    /// What `worker`'s trainers acknowledged that is in none of its complete
    /// checkpoints (it reports this before the commits it covers).
    pub fn unsaved(
        &mut self,
        now: Millis,
        worker: WorkerId,
        pieces: Vec<CutPiece>,
    ) -> Result<(), QueueError> {
        self.check_alive(worker)?;
        if let Some(record) = self.workers.get_mut(&worker) {
            record.unsaved = pieces;
        }
        self.touch(worker, now);
        self.settle_makeup();
        Ok(())
    }

    /// [`Queue::unsaved`] reported as `worker`'s trainers ended their
    /// streams: `pieces` are in no checkpoint and are served once more
    /// (once the worker is counted gone). Rows among them that were in no
    /// checkpoint at an earlier end of streams, of any worker, end the job
    /// as failed: serving them again changes nothing
    /// ([`Queue::no_final_checkpoint`]).
    pub fn unsaved_at_end(
        &mut self,
        now: Millis,
        worker: WorkerId,
        pieces: Vec<CutPiece>,
    ) -> Result<(), QueueError> {
        self.unsaved(now, worker, pieces.clone())?;
        match self.workers.get_mut(&worker) {
            Some(record) if !record.ended_unsaved => record.ended_unsaved = true,
            _ => return Ok(()),
        }
        let again: u64 = pieces.iter().map(|p| p.end - p.start).sum::<u64>()
            - subtract(pieces.clone(), &self.ended_unsaved)
                .iter()
                .map(|p| p.end - p.start)
                .sum::<u64>();
        if again > 0 {
            let rows = pieces.iter().map(|p| p.end - p.start).sum();
            self.no_final_checkpoint = Some(rows);
            self.over = true;
        } else {
            forfeit_rows(&mut self.ended_unsaved, pieces);
        }
        Ok(())
    }

    /// Rows in no checkpoint when trainers ended their streams a second
    /// time over rows served again for that reason: the job failed
    /// (`None` while it did not).
    pub fn no_final_checkpoint(&self) -> Option<u64> {
        self.no_final_checkpoint
    }

    /// A master started again after a crash: every lease and every worker
    /// gets a full lease timeout from `now`, so the master's own downtime
    /// neither expires leases nor counts live workers gone. Nor does a lease
    /// granted before it count as an attempt should it lapse: the crash was
    /// the master's (in `train --state` the worker's too, one process), and
    /// what its worker committed meanwhile went unseen.
    pub fn renew_all(&mut self, now: Millis) {
        self.idle.clear();
        let deadline = self.deadline(now);
        for task in &mut self.tasks {
            if let TaskState::Leased { deadline: d, .. } = &mut task.state {
                *d = (*d).max(deadline);
            }
        }
        for (_, _, d) in self.makeup.live.values_mut() {
            *d = (*d).max(deadline);
        }
        for record in self.workers.values_mut().filter(|r| !r.gone) {
            record.last_seen = record.last_seen.max(now);
        }
    }

    /// The last complete checkpoint of the worker named `name`.
    pub fn checkpoint_of(&self, name: &str) -> Option<&str> {
        self.checkpoint_of.get(name).map(String::as_str)
    }

    /// Workers silent past the lease timeout whose trainers held rows in no
    /// checkpoint: counted gone, and those rows (as far as they were
    /// committed: the rest is served again with its task) are served again.
    fn count_gone(&mut self, now: Millis) -> Vec<WorkerId> {
        let timeout = self.config.lease_timeout_ms;
        let gone: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, r)| {
                !r.gone && !r.unsaved.is_empty() && r.last_seen.saturating_add(timeout) <= now
            })
            .map(|(w, _)| *w)
            .collect();
        for &worker in &gone {
            self.make_gone(worker);
        }
        if !gone.is_empty() {
            self.settle_makeup();
        }
        gone
    }

    /// Counts `worker` gone: its requests are refused from now on, and the
    /// committed rows its trainers held in no checkpoint are served again.
    fn make_gone(&mut self, worker: WorkerId) {
        // Its makeup leases end first: what it did not commit of them is
        // served again with them (forfeit), not once more as its unsaved.
        let makeup: Vec<AttemptId> = self
            .makeup
            .live
            .iter()
            .filter(|(_, (holder, _, _))| *holder == worker)
            .map(|(attempt, _)| *attempt)
            .collect();
        for attempt in makeup {
            self.end_makeup(attempt, false);
        }
        let unsaved = match self.workers.get_mut(&worker) {
            Some(record) => {
                record.gone = true;
                let unsaved = std::mem::take(&mut record.unsaved);
                // Never read again: a gone worker's requests are refused.
                let forfeit = std::mem::take(&mut record.forfeit);
                subtract(unsaved, &forfeit)
            }
            None => return,
        };
        for piece in unsaved {
            for committed in self.committed_parts(piece) {
                let rows = committed.end - committed.start;
                self.rows_made_up = self.rows_made_up.saturating_add(rows);
                // Served again, so no longer committed until the makeup
                // lease that serves them finishes (and counts them again).
                self.rows_committed = self.rows_committed.saturating_sub(rows);
                self.makeup.todo.push_back(committed);
            }
        }
    }

    /// Rows served again because their worker was lost before its trainers
    /// saved them (see [`Queue::checkpoint_of`]).
    pub fn rows_made_up(&self) -> u64 {
        self.rows_made_up
    }

    /// Whether any row of `piece` is in `worker`'s forfeit rows (a lease of
    /// theirs lapsed before it committed them: they were served again).
    fn forfeited(&self, worker: WorkerId, piece: &CutPiece) -> bool {
        self.workers.get(&worker).is_some_and(|record| {
            record.forfeit.iter().any(|f| {
                f.epoch == piece.epoch
                    && f.split == piece.split
                    && f.start < piece.end
                    && piece.start < f.end
            })
        })
    }

    /// Whether the rows of `piece` are committed, or held by `worker` under
    /// a live lease (of their task, or of rows served again).
    fn held_or_committed(&self, worker: WorkerId, piece: &CutPiece) -> bool {
        let committed: u64 = self
            .committed_parts(*piece)
            .iter()
            .map(|p| p.end - p.start)
            .sum();
        if committed >= piece.end - piece.start {
            return true;
        }
        let leased = piece.epoch == self.epoch
            && self.tasks.get(piece.split as usize).is_some_and(
                |t| matches!(t.state, TaskState::Leased { worker: w, .. } if w == worker),
            );
        leased
            || self.makeup.live.values().any(|(w, held, _)| {
                *w == worker
                    && held.epoch == piece.epoch
                    && held.split == piece.split
                    && held.start <= piece.start
                    && piece.end <= held.end
            })
    }

    /// The parts of `piece` whose rows are committed (not served again by
    /// their task): in its committed prefix or its committed ranges.
    fn committed_parts(&self, piece: CutPiece) -> Vec<CutPiece> {
        if piece.epoch < self.epoch || self.epochs_over {
            return vec![piece];
        }
        let Some(task) = self.tasks.get(piece.split as usize) else {
            return Vec::new();
        };
        if piece.epoch > self.epoch {
            return Vec::new();
        }
        let offset = match &task.state {
            TaskState::Done { .. } | TaskState::Failed { .. } => return vec![piece],
            TaskState::Leased { offset, .. } | TaskState::Todo { offset } => *offset,
        };
        std::iter::once((0, offset))
            .chain(task.skip.iter().copied())
            .filter_map(|(start, end)| {
                let (start, end) = (start.max(piece.start), end.min(piece.end));
                (end > start).then_some(CutPiece {
                    start,
                    end,
                    ..piece
                })
            })
            .collect()
    }

    /// Expires every lease whose deadline is at or before `now`: each task goes
    /// back to todo at its committed offset, without counting an attempt.
    /// Returns them in attempt order.
    pub fn tick(&mut self, now: Millis) -> Vec<Expired> {
        self.tick_all(now).0
    }

    /// [`Queue::tick`], also returning the workers it counted gone: silent
    /// past the lease timeout while their trainers held rows in no
    /// checkpoint (those rows are served again).
    pub fn tick_all(&mut self, now: Millis) -> (Vec<Expired>, Vec<WorkerId>) {
        if now < self.due.0 {
            return (Vec::new(), Vec::new());
        }
        let gone = self.count_gone(now);
        let expired = self.expire(now);
        self.due = Due(self.next_due());
        (expired, gone)
    }

    /// The earliest time a tick may find something to do: a live lease's
    /// deadline, or a silent worker with unsaved rows counted gone.
    fn next_due(&self) -> Millis {
        let timeout = self.config.lease_timeout_ms;
        let leases = self
            .live
            .values()
            .filter_map(|&split| self.deadline_of(split));
        let makeup = self.makeup.live.values().map(|&(_, _, deadline)| deadline);
        let gone = self
            .workers
            .values()
            .filter(|r| !r.gone && !r.unsaved.is_empty())
            .map(|r| r.last_seen.saturating_add(timeout));
        leases
            .chain(makeup)
            .chain(gone)
            .min()
            .unwrap_or(Millis::MAX)
    }

    /// Expires the leases whose deadline is at or before `now`.
    fn expire(&mut self, now: Millis) -> Vec<Expired> {
        let lapsed_makeup: Vec<AttemptId> = self
            .makeup
            .live
            .iter()
            .filter(|(_, (_, _, deadline))| *deadline <= now)
            .map(|(attempt, _)| *attempt)
            .collect();
        for attempt in lapsed_makeup {
            if let Some(worker) = self.end_makeup(attempt, false) {
                if let Some(record) = self.workers.get_mut(&worker) {
                    record.lost.push(attempt);
                }
            }
        }
        let lapsed: Vec<AttemptId> = self
            .live
            .iter()
            .filter(|(_, &split)| self.deadline_of(split).is_some_and(|d| d <= now))
            .map(|(&attempt, _)| attempt)
            .collect();
        let mut expired = Vec::with_capacity(lapsed.len());
        for attempt in lapsed {
            let idle = self.idle.contains(&attempt);
            let Ok((worker, split)) = self.release(attempt) else {
                continue;
            };
            let forfeit = self.uncommitted(split);
            if let Some(record) = self.workers.get_mut(&worker) {
                record.lost.push(attempt);
                if !record.gone {
                    forfeit_rows(&mut record.forfeit, forfeit);
                }
            }
            let outcome = if idle {
                self.lapse_idle(split)
            } else {
                self.lapse(split)
            };
            expired.push(Expired {
                attempt,
                worker,
                epoch: self.epoch,
                split,
                outcome,
            });
        }
        self.settle();
        expired
    }

    /// How epoch `epoch` hands out its splits (see [`EpochView`]): every
    /// split of an epoch before the current one is done or failed, none of
    /// a later one. `None` for a job that follows its source, whose epoch
    /// grows in the order its source commits.
    pub fn epoch_view(&self, epoch: Epoch) -> Option<EpochView> {
        if self.config.follow {
            return None;
        }
        let splits = self.tasks.len();
        let mut view = EpochView {
            epoch,
            order: self.config.order(epoch, splits),
            ..EpochView::default()
        };
        if epoch < self.epoch || (epoch == self.epoch && self.over) {
            let failed: Vec<u32> = self
                .failures
                .iter()
                .filter(|f| f.epoch == epoch)
                .map(|f| f.split)
                .collect();
            view.done = (0..splits as u32).filter(|s| !failed.contains(s)).collect();
            view.failed = failed;
        } else if epoch == self.epoch {
            for (split, task) in self.tasks.iter().enumerate() {
                match task.state {
                    TaskState::Done { .. } => view.done.push(split as u32),
                    TaskState::Failed { .. } => view.failed.push(split as u32),
                    TaskState::Todo { .. } | TaskState::Leased { .. } => {}
                }
            }
        }
        Some(view)
    }

    /// Counts of the current epoch and totals of the job.
    pub fn status(&self) -> QueueStatus {
        QueueStatus {
            epoch: self.epoch,
            epochs: self.config.epochs,
            splits: self.tasks.len(),
            todo: self.todo.len(),
            leased: self.live.len(),
            done: self.done,
            failed: self.failed,
            tasks_done: self.tasks_done,
            rows_done: self.rows_done,
            rows_committed: self.rows_committed,
            workers: self.workers.len(),
            failures: self.failures.clone(),
            job_over: self.over,
        }
    }

    /// Rows committed of each source of a job that mixes several (its
    /// queue interleaves them), by the source's index: every split's rows
    /// for each epoch finished (less the tasks failed in it), and the
    /// committed rows of the current epoch's tasks. Empty for one source.
    /// Computed on demand, over every split.
    pub fn rows_by_source(&self) -> Vec<u64> {
        let Some(mix) = &self.config.interleave else {
            return Vec::new();
        };
        let mut rows = vec![0u64; mix.pace.len()];
        let source = |split: usize| mix.source.get(split).map_or(0, |&s| s as usize);
        let finished = if self.over {
            self.epoch.0 + 1
        } else {
            self.epoch.0
        };
        for (split, known) in self.split_rows.iter().enumerate() {
            let n = known.unwrap_or(0);
            if let Some(sum) = rows.get_mut(source(split)) {
                *sum = sum.saturating_add(n.saturating_mul(u64::from(finished)));
            }
        }
        for failure in &self.failures {
            if failure.epoch.0 < finished {
                let split = failure.split as usize;
                let n = self.split_rows.get(split).copied().flatten().unwrap_or(0);
                if let Some(sum) = rows.get_mut(source(split)) {
                    *sum = sum.saturating_sub(n);
                }
            }
        }
        if !self.over {
            for (split, task) in self.tasks.iter().enumerate() {
                let committed = match &task.state {
                    TaskState::Done { rows } => *rows,
                    TaskState::Todo { offset }
                    | TaskState::Leased { offset, .. }
                    | TaskState::Failed { offset, .. } => covered(*offset, &task.skip),
                };
                if let Some(sum) = rows.get_mut(source(split)) {
                    *sum = sum.saturating_add(committed);
                }
            }
        }
        rows
    }

    /// Whether any task of the current epoch is to do or leased (what
    /// [`QueueStatus::todo`] and [`QueueStatus::leased`] count), without
    /// building a [`QueueStatus`].
    pub fn has_work(&self) -> bool {
        !self.todo.is_empty() || !self.live.is_empty()
    }

    /// Rows committed over all epochs (see [`QueueStatus::rows_committed`]).
    pub fn rows_committed(&self) -> u64 {
        self.rows_committed
    }

    /// True once every task of every epoch is done or failed.
    pub fn is_over(&self) -> bool {
        self.over
    }

    /// Every task given up so far, oldest first.
    pub fn failures(&self) -> &[TaskFailure] {
        &self.failures
    }

    /// The tasks of the current epoch, indexed by split.
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// The current epoch (the last one once the job is over).
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The settings the queue was built with.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    fn deadline(&self, now: Millis) -> Millis {
        now.saturating_add(self.config.lease_timeout_ms)
    }

    fn deadline_of(&self, split: u32) -> Option<Millis> {
        match self.tasks.get(split as usize)?.state {
            TaskState::Leased { deadline, .. } => Some(deadline),
            _ => None,
        }
    }

    /// The split of the live lease `attempt` if `worker` holds it; `Stale` when
    /// the attempt is not live, `NotYours` when another worker holds it.
    fn owned(&self, worker: WorkerId, attempt: AttemptId) -> Result<u32, QueueError> {
        let holder = self.holder(attempt).ok_or(QueueError::Stale { attempt })?;
        if holder != worker {
            return Err(QueueError::NotYours {
                attempt,
                worker,
                holder,
            });
        }
        self.live
            .get(&attempt)
            .copied()
            .ok_or(QueueError::Stale { attempt })
    }

    /// Remembers the rows of `split` if they were not known.
    fn learn_rows(&mut self, split: u32, rows: u64) {
        let index = split as usize;
        if self.split_rows.len() <= index {
            self.split_rows
                .resize(self.tasks.len().max(index + 1), None);
        }
        if let Some(known) = self.split_rows.get_mut(index) {
            known.get_or_insert(rows);
        }
    }

    /// Leases `split` (just taken off `todo`) to `worker`.
    fn grant(&mut self, now: Millis, worker: WorkerId, split: u32) -> Lease {
        let attempt = AttemptId(self.next_attempt);
        self.next_attempt = self.next_attempt.saturating_add(1);
        let deadline = self.deadline(now);
        self.due.lower(deadline);
        let mut offset = 0;
        if let Some(task) = self.tasks.get_mut(split as usize) {
            if let TaskState::Todo { offset: committed } = task.state {
                offset = committed;
            }
            task.state = TaskState::Leased {
                attempt,
                worker,
                deadline,
                offset,
            };
        }
        self.live.insert(attempt, split);
        self.idle.insert(attempt);
        let epoch = self.epoch;
        if let Some(record) = self.workers.get_mut(&worker) {
            record.leases.insert(attempt, split);
            record.last_granted = record.last_granted.max(now);
            if !record.forfeit.is_empty() {
                let taken = CutPiece {
                    epoch,
                    split,
                    start: offset,
                    end: u64::MAX,
                };
                record.forfeit = subtract(std::mem::take(&mut record.forfeit), &[taken]);
            }
        }
        // Rows already in some trainer's checkpoint are not served again:
        // those of a rewind, and those a gone worker checkpointed but never
        // committed (its trainer's model holds them).
        let mut skip = self
            .tasks
            .get(split as usize)
            .map(|t| t.skip.clone())
            .unwrap_or_default();
        for &(start, end) in self.cut.covered(self.epoch, split) {
            if end > offset {
                crate::queue::cut::insert(&mut skip, (start.max(offset), end));
            }
        }
        Lease {
            attempt,
            epoch: self.epoch,
            split,
            offset,
            deadline,
            skip,
            repaired: self.repaired.contains(&split),
        }
    }

    /// The committed offset and deadline of the task `attempt` holds, or `Stale`.
    fn leased_mut(&mut self, attempt: AttemptId) -> Result<(&mut u64, &mut Millis), QueueError> {
        let stale = QueueError::Stale { attempt };
        let split = *self.live.get(&attempt).ok_or_else(|| stale.clone())?;
        match self.tasks.get_mut(split as usize) {
            Some(Task {
                state:
                    TaskState::Leased {
                        attempt: held,
                        offset,
                        deadline,
                        ..
                    },
                ..
            }) if *held == attempt => Ok((offset, deadline)),
            _ => Err(stale),
        }
    }

    /// Drops the live lease `attempt` from the books (the task keeps its `Leased`
    /// state until the caller sets the next one). Returns its worker and split.
    fn release(&mut self, attempt: AttemptId) -> Result<(WorkerId, u32), QueueError> {
        let stale = QueueError::Stale { attempt };
        let split = *self.live.get(&attempt).ok_or_else(|| stale.clone())?;
        let worker = match self.tasks.get(split as usize) {
            Some(Task {
                state:
                    TaskState::Leased {
                        attempt: held,
                        worker,
                        ..
                    },
                ..
            }) if *held == attempt => *worker,
            _ => return Err(stale),
        };
        self.live.remove(&attempt);
        self.idle.remove(&attempt);
        if let Some(record) = self.workers.get_mut(&worker) {
            record.leases.remove(&attempt);
        }
        Ok((worker, split))
    }

    /// The rows of the task of `split` (leased, in this epoch) not committed:
    /// past its committed offset, outside its committed ranges.
    fn uncommitted(&self, split: u32) -> Vec<CutPiece> {
        let Some(task) = self.tasks.get(split as usize) else {
            return Vec::new();
        };
        let TaskState::Leased { offset, .. } = task.state else {
            return Vec::new();
        };
        let rest = CutPiece {
            epoch: self.epoch,
            split,
            start: offset,
            end: u64::MAX,
        };
        let committed: Vec<CutPiece> = task
            .skip
            .iter()
            .map(|&(start, end)| CutPiece { start, end, ..rest })
            .collect();
        subtract(vec![rest], &committed)
    }

    /// Moves a task whose lease just lapsed back to the end of the line at its
    /// committed offset. Not an attempt: the worker died or was cut off, the
    /// task itself did not fail.
    fn lapse(&mut self, split: u32) -> FailOutcome {
        if self.back_to_todo(split) {
            self.todo.push_back(split);
        }
        FailOutcome::Retried
    }

    /// A just-released lease of `split` lapsed with no row committed by its
    /// worker since it was granted: an attempt of the task, failed once it
    /// has used every attempt (what kills its workers would kill the next).
    fn lapse_idle(&mut self, split: u32) -> FailOutcome {
        let Some(task) = self.tasks.get_mut(split as usize) else {
            return FailOutcome::Retried;
        };
        task.attempts = task.attempts.saturating_add(1);
        let reason = format!(
            "its lease lapsed {} times with no row committed by the worker holding it \
             (the worker died, was killed or stopped answering while it held this task, \
             every time: a trainer that keeps failing, a worker killed on these rows, \
             e.g. for memory, or a read that hangs past the lease timeout); \
             --max-attempts {} allows no more",
            task.attempts, self.config.max_attempts
        );
        self.end_attempt(split, reason, false)
    }

    /// `worker` committed rows: none of its live leases lapses idle now.
    fn progressed(&mut self, worker: WorkerId) {
        if self.idle.is_empty() {
            return;
        }
        if let Some(record) = self.workers.get(&worker) {
            for attempt in record.leases.keys() {
                self.idle.remove(attempt);
            }
        }
    }

    /// Sets a just-released task to todo at its committed offset, without
    /// counting an attempt; false for an unknown split. The caller queues it.
    fn back_to_todo(&mut self, split: u32) -> bool {
        let Some(task) = self.tasks.get_mut(split as usize) else {
            return false;
        };
        let offset = match task.state {
            TaskState::Leased { offset, .. } => offset,
            _ => 0,
        };
        task.state = TaskState::Todo { offset };
        true
    }

    /// Moves a just-released task back to todo at its committed offset, or to
    /// failed once it has used every attempt, or at once `for_good`.
    fn end_attempt(&mut self, split: u32, reason: String, for_good: bool) -> FailOutcome {
        let Some(task) = self.tasks.get_mut(split as usize) else {
            return FailOutcome::Failed;
        };
        let offset = match task.state {
            TaskState::Leased { offset, .. } => offset,
            _ => 0,
        };
        if !for_good && task.attempts < self.config.max_attempts {
            task.state = TaskState::Todo { offset };
            self.todo.push_back(split);
            return FailOutcome::Retried;
        }
        self.failures.push(TaskFailure {
            epoch: self.epoch,
            split,
            attempts: task.attempts,
            reason: reason.clone(),
        });
        task.state = TaskState::Failed { reason, offset };
        self.failed = self.failed.saturating_add(1);
        FailOutcome::Failed
    }

    /// Puts the current epoch's failed tasks back to be read again, each at
    /// the offset it had committed, with its attempts counted afresh; a job
    /// that was over goes on until they are done. Failures of earlier epochs
    /// are kept (their epoch's tasks are gone); returns (put back, kept).
    /// Their files count as repaired from now on: their leases say so, and
    /// they are read as they are now (their size checked, not their stamp).
    pub fn retry_failed(&mut self, _now: Millis) -> (usize, usize) {
        let epoch = self.epoch;
        let mut retried = 0;
        for (split, task) in self.tasks.iter_mut().enumerate() {
            if let TaskState::Failed { offset, .. } = task.state {
                task.state = TaskState::Todo { offset };
                task.attempts = 0;
                self.todo.push_back(split as u32);
                self.repaired.insert(split as u32);
                retried += 1;
            }
        }
        if retried == 0 {
            return (0, self.failures.len());
        }
        self.failures.retain(|f| f.epoch != epoch);
        self.failed = self.failed.saturating_sub(retried);
        self.over = false;
        self.epochs_over = false;
        (retried, self.failures.len())
    }

    /// Adds tasks for splits `first..first + rows.len()` (their row counts,
    /// where known) to the current epoch of a followed job, after every task
    /// queued so far; `record` is the caller's account of them, kept in
    /// [`Queue::grown`]. Refused once the job is closed or over, and when the
    /// splits would not follow the last one.
    pub fn grow(
        &mut self,
        _now: Millis,
        first: u32,
        rows: Vec<Option<u64>>,
        record: serde_json::Value,
    ) -> Result<(), QueueError> {
        if !self.open || self.over {
            return Err(QueueError::Closed);
        }
        let splits = self.tasks.len();
        if first as usize != splits {
            return Err(QueueError::NotNext {
                first,
                next: splits as u32,
            });
        }
        let added = rows.len();
        if u32::try_from(splits.saturating_add(added)).is_err() {
            return Err(QueueError::Full);
        }
        if self.split_rows.len() < splits {
            self.split_rows.resize(splits, None);
        }
        self.split_rows.extend(rows.iter().copied());
        self.tasks.extend(std::iter::repeat_n(
            Task {
                state: TaskState::Todo { offset: 0 },
                attempts: 0,
                skip: Vec::new(),
            },
            added,
        ));
        self.todo.extend(splits as u32..(splits + added) as u32);
        self.grown.push(Growth {
            first,
            rows,
            record,
        });
        Ok(())
    }

    /// The sources of the splits a [`Queue::grow`] just added (`rows`: their
    /// rows), in a job that mixes several: where its per-source counts and
    /// later epochs' interleaving find them. Nothing for one source.
    pub fn grew_sources(&mut self, sources: &[u32], rows: &[Option<u64>]) {
        let Some(mix) = &mut self.config.interleave else {
            return;
        };
        if sources.is_empty() {
            return;
        }
        let before = self.tasks.len().saturating_sub(rows.len());
        mix.source.resize(before, 0);
        mix.rows.resize(before, 1);
        mix.source.extend_from_slice(sources);
        mix.rows.extend(rows.iter().map(|r| r.unwrap_or(1).max(1)));
    }

    /// Ends a followed job's growth: once every task is done or failed the
    /// job is over. Nothing happens to a job that does not follow.
    pub fn close(&mut self, _now: Millis) {
        if self.open {
            self.open = false;
            self.settle();
        }
    }

    /// Opens a followed job that was closed again (a later run follows on
    /// from where the closed one stopped): more tasks may come, and it is
    /// not over until closed again. Nothing happens to a job that does not
    /// follow.
    pub fn reopen(&mut self, _now: Millis) {
        if self.config.follow && !self.open {
            self.open = true;
            self.over = false;
            self.epochs_over = false;
        }
    }

    /// Whether the job follows its source and has not been closed.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// What each [`Queue::grow`] brought, oldest first.
    pub fn grown(&self) -> &[Growth] {
        &self.grown
    }

    /// Starts the next epoch, or ends the job, once every task is done or failed.
    fn settle(&mut self) {
        if self.over || self.open || self.done + self.failed < self.tasks.len() {
            return;
        }
        match self.epoch.0.checked_add(1) {
            Some(next) if next < self.config.epochs && !self.tasks.is_empty() => {
                self.start_epoch(Epoch(next), self.tasks.len());
            }
            _ => {
                self.epochs_over = true;
                self.settle_makeup();
            }
        }
    }

    /// Resets every task to todo at offset 0, in epoch `epoch`'s order.
    fn start_epoch(&mut self, epoch: Epoch, splits: usize) {
        self.epoch = epoch;
        let fresh = Task {
            state: TaskState::Todo { offset: 0 },
            attempts: 0,
            skip: Vec::new(),
        };
        self.tasks.clear();
        self.tasks.resize(splits, fresh);
        self.todo = self.config.order(epoch, splits).into();
        self.done = 0;
        self.failed = 0;
        if self.cut.touches(epoch) {
            self.apply_cut(epoch);
        }
    }

    /// Rows of `epoch` already in the checkpoint (after a rewind): a task
    /// starts after its covered prefix and skips the rest of what is covered;
    /// a task covered whole is done.
    fn apply_cut(&mut self, epoch: Epoch) {
        let mut whole = Vec::new();
        for split in 0..self.tasks.len() as u32 {
            let covered = self.cut.covered(epoch, split).to_vec();
            let Some(&(first_start, first_end)) = covered.first() else {
                continue;
            };
            let prefix = if first_start == 0 { first_end } else { 0 };
            let rest: Vec<(u64, u64)> = covered.into_iter().filter(|r| r.0 > 0).collect();
            let rows = self.split_rows(split);
            let Some(task) = self.tasks.get_mut(split as usize) else {
                continue;
            };
            if rest.is_empty() && rows == Some(prefix) {
                task.state = TaskState::Done { rows: prefix };
                whole.push(split);
            } else {
                task.state = TaskState::Todo { offset: prefix };
                task.skip = rest;
            }
        }
        self.done = whole.len();
        self.todo.retain(|split| !whole.contains(split));
    }

    /// A trainer of this job keeps checkpoints: a resume restores the last
    /// complete checkpoint rather than what was acknowledged.
    pub fn declare_checkpoints(&mut self, _now: Millis) {
        self.cut.checkpointed = true;
    }

    /// Records the complete checkpoint `id`, holding `pieces` besides what
    /// earlier checkpoints held.
    pub fn checkpoint(&mut self, _now: Millis, id: &str, pieces: &[CutPiece]) {
        // Without a worker nothing is refused.
        let _ = self.checkpoint_by(None, id, pieces);
    }

    /// [`Queue::checkpoint`] reported by `worker`, whose name then resumes
    /// from `id` (see [`Queue::checkpoint_of`]).
    ///
    /// A worker's checkpoint may hold only rows that are committed, or that
    /// it holds a live lease of (their commits follow): a checkpoint with
    /// rows that are served again elsewhere (a lease that lapsed while the
    /// worker was paused or cut off) is refused, and the worker is counted
    /// gone at once, so its trainers go back to its last checkpoint recorded
    /// here and what it held in none is served again.
    pub fn checkpoint_by(
        &mut self,
        worker: Option<WorkerId>,
        id: &str,
        pieces: &[CutPiece],
    ) -> Result<(), QueueError> {
        if let Some(worker) = worker {
            self.check_alive(worker)?;
            if pieces
                .iter()
                .any(|p| self.forfeited(worker, p) || !self.held_or_committed(worker, p))
            {
                self.make_gone(worker);
                self.due = Due(self.next_due());
                self.settle_makeup();
                return Err(QueueError::Gone { worker });
            }
        }
        let name = worker
            .and_then(|w| self.workers.get(&w))
            .and_then(|r| r.name.clone());
        if let Some(name) = name {
            self.checkpoint_of.insert(name, id.to_string());
        }
        // The checkpoint's rows are saved now, whether or not the worker's
        // next report of its unsaved rows arrives.
        if let Some(record) = worker.and_then(|w| self.workers.get_mut(&w)) {
            record.unsaved = subtract(std::mem::take(&mut record.unsaved), pieces);
            self.settle_makeup();
        }
        let splits = self.tasks.len();
        let rows: Vec<Option<u64>> = (0..splits as u32).map(|s| self.split_rows(s)).collect();
        // A followed job's epoch is never whole while splits may still come.
        let splits = if self.open { 0 } else { splits };
        self.cut.add(id, pieces, splits, |s| {
            rows.get(s as usize).copied().flatten()
        });
        Ok(())
    }

    /// The rows of the last complete checkpoint.
    pub fn cut(&self) -> &Cut {
        &self.cut
    }

    /// Goes back to the last complete checkpoint (every trainer restarts
    /// from it): every lease is dropped, and the first epoch not wholly in
    /// the checkpoint starts again with the rows it holds skipped. Nothing
    /// happens in a job that keeps no checkpoints.
    pub fn rewind(&mut self, _now: Millis) {
        if !self.cut.checkpointed {
            return;
        }
        self.live.clear();
        self.idle.clear();
        for record in self.workers.values_mut() {
            record.leases.clear();
            record.lost.clear();
            record.forfeit.clear();
        }
        let splits = self.tasks.len();
        let epoch = self.cut.full_epochs;
        self.over = false;
        self.epochs_over = false;
        self.makeup = Makeup::default();
        self.tasks_done = u64::from(epoch).saturating_mul(splits as u64);
        self.rows_committed = self.cut.rows;
        self.rows_done = self.cut.rows;
        if !self.open && (epoch >= self.config.epochs || splits == 0) {
            self.over = true;
            return;
        }
        self.start_epoch(Epoch(epoch), splits);
        self.tasks_done = self.tasks_done.saturating_add(self.done as u64);
        self.settle();
    }
}

/// Rows committed: the prefix up to `offset` and the ranges of `skip` past it.
fn covered(offset: u64, skip: &[(u64, u64)]) -> u64 {
    skip.iter().fold(offset, |n, &(start, end)| {
        n.saturating_add(end.saturating_sub(start.max(offset)))
    })
}

/// Adds `pieces` to a worker's forfeit rows, merging each with the ranges
/// of its epoch and split it overlaps or touches: the list stays a set of
/// disjoint ranges, so a worker whose lease of one task lapses again and
/// again without progress keeps one range for it, not one per lapse.
fn forfeit_rows(forfeit: &mut Vec<CutPiece>, pieces: impl IntoIterator<Item = CutPiece>) {
    for piece in pieces {
        if piece.start >= piece.end {
            continue;
        }
        let mut merged = piece;
        forfeit.retain(|f| {
            let touches = f.epoch == merged.epoch
                && f.split == merged.split
                && f.start <= merged.end
                && merged.start <= f.end;
            if touches {
                merged.start = merged.start.min(f.start);
                merged.end = merged.end.max(f.end);
            }
            !touches
        });
        forfeit.push(merged);
    }
}

/// `pieces` without the rows of `removed`.
fn subtract(pieces: Vec<CutPiece>, removed: &[CutPiece]) -> Vec<CutPiece> {
    let mut out = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let mut left = vec![(piece.start, piece.end)];
        for cut in removed
            .iter()
            .filter(|r| r.epoch == piece.epoch && r.split == piece.split)
        {
            left = left
                .into_iter()
                .flat_map(|(s, e)| {
                    let mut parts = Vec::new();
                    if cut.start > s {
                        parts.push((s, e.min(cut.start)));
                    }
                    if cut.end < e {
                        parts.push((s.max(cut.end), e));
                    }
                    parts.into_iter().filter(|(s, e)| s < e)
                })
                .collect();
        }
        out.extend(left.into_iter().map(|(start, end)| CutPiece {
            start,
            end,
            ..piece
        }));
    }
    out
}

#[cfg(test)]
#[path = "books_tests.rs"]
pub(crate) mod tests;
