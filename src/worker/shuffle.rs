//! `--shuffle global`: a deterministic, resumable order of rows across tasks.
//!
//! An epoch's tasks, in the order its queue leases them ([`crate::queue::epoch_order`]),
//! are taken in windows of whole tasks of up to `--shuffle-window` rows (at
//! least one task; a task whose row count its files do not record is a window
//! of its own). A window is read whole, its rows listed in task order and row
//! order, permuted by [`crate::queue::window_order`] seeded with (seed, epoch,
//! window) and cut into batches; the `i`-th batch of window `w` goes to device
//! `(w + i) mod devices`, so timing never changes which device gets which rows.
//!
//! A run resumed from `--state` reads each window again in full: the rows
//! already committed (a lease's offset and skipped ranges) and the tasks done
//! before it (read outside any lease) keep the permutation whole, and are not
//! dealt again. A batch whose rows were all committed is skipped, the others
//! keep their number and device: every device goes on with the sequence an
//! uninterrupted run would have given it.
//!
//! Where the source tells each epoch's order and its splits already done
//! ([`crate::protocol::TaskSource::epoch_view`]: the embedded queue of `sluice
//! train`, whose one worker is the job's only one), windows follow that order
//! whatever order the leases come in. Elsewhere (the workers of a master share
//! the epoch) a window is the tasks this worker leased, in the order it leased
//! them: rows are still permuted across tasks, but not in the same order from
//! run to run.

use crate::epoch::Epoch;
use std::collections::{HashMap, HashSet, VecDeque};

use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use connectors::Split;

use super::batcher::OutBatch;
use super::dealt::Dealt;
pub use super::global_steps::Cut;
use super::global_steps::GlobalSteps;
use crate::queue::{window_order, AttemptId, EpochView, Lanes, Lease};

/// A read the coordinator starts for the window being read.
#[derive(Debug, Clone)]
pub struct ReadOrder {
    /// The lease to read under: the split from its first row, nothing skipped.
    pub lease: Lease,
    /// Whether the read is outside any lease (a task done before this run).
    pub context: bool,
}

/// The global shuffle of one worker (see the module docs).
pub struct GlobalShuffle {
    seed: u64,
    window_rows: u64,
    batch_size: usize,
    devices: usize,
    /// Whether the source tells each epoch's view (known after the first lease).
    ordered: Option<bool>,
    /// The current epoch's windows (ordered mode).
    plan: Option<Plan>,
    /// The next epoch's view, once a lease of it came while a window of
    /// the current one was still read.
    next_view: Option<EpochView>,
    /// Leases not in a window yet, in the order they came.
    held: Vec<Lease>,
    /// The window being read.
    building: Option<Building>,
    /// Windows read and permuted, whose batches go out, oldest first.
    dealing: VecDeque<Dealt>,
    /// Windows started per epoch outside a plan (leases in the order they came).
    numbers: HashMap<Epoch, u64>,
    /// Attempts whose lease was lost: their rows go to no one.
    dead: HashSet<AttemptId>,
    /// `--global-batch-size`: the windows cut into global batches instead.
    steps: Option<GlobalSteps>,
    /// Epochs the pipeline saw end (nothing more to read).
    ended: Option<Epoch>,
    /// `--global-batch-size` of a job cut into lanes: the lanes, and the
    /// lane of each split ([`crate::queue::Lanes`]).
    lanes: Option<(std::sync::Arc<Lanes>, Vec<u32>)>,
    /// A master's job of `--world-size`: its ranks, and this worker's once
    /// taken ([`Self::set_ranks`]), ascending.
    world: Option<(u32, Option<Vec<u32>>)>,
}

#[derive(Debug)]
struct Plan {
    epoch: Epoch,
    windows: Vec<Vec<u32>>,
    /// Each window's number (its permutation's seed) and lane.
    meta: Vec<(u64, u32)>,
    /// Windows of the epoch's sequence, this worker's or not: the extra
    /// windows are numbered after them.
    total: u64,
    next: usize,
    /// Window of each split.
    window_of: HashMap<u32, usize>,
    done: HashSet<u32>,
    failed: HashSet<u32>,
    /// Windows made of leases outside the plan (a task leased again after
    /// its window went out), numbered after the plan's.
    extra: u64,
}

#[derive(Debug)]
struct Building {
    epoch: Epoch,
    number: u64,
    lane: u32,
    parts: Vec<Part>,
    /// No task joins any more (always, for a planned window).
    closed: bool,
    /// Rows its tasks hold by their metadata (a task of unknown count: a
    /// whole window).
    rows: u64,
}

#[derive(Debug, PartialEq, Eq)]
enum PartState {
    /// Not leased yet.
    Pending,
    /// To read.
    Queued,
    /// Being read.
    Reading,
    /// Read to its end, or as far as its read got.
    Read,
}

#[derive(Debug)]
struct Part {
    split: u32,
    /// Its lease, or the made-up attempt of a read outside any lease.
    attempt: Option<AttemptId>,
    lease: Option<Lease>,
    /// Read outside any lease: every row was committed before this run.
    context: bool,
    /// Rows committed before this read, not dealt again: sorted, disjoint.
    committed: Vec<(u64, u64)>,
    /// The rows read, by their first row in the split.
    batches: Vec<(u64, RecordBatch)>,
    state: PartState,
}

impl Part {
    fn pending(split: u32) -> Part {
        Part {
            split,
            attempt: None,
            lease: None,
            context: false,
            committed: Vec::new(),
            batches: Vec::new(),
            state: PartState::Pending,
        }
    }

    fn leased(lease: Lease) -> Part {
        let mut part = Part::pending(lease.split);
        part.take(lease);
        part
    }

    /// Reads under `lease`: rows before its offset and those it skips were
    /// committed before.
    fn take(&mut self, lease: Lease) {
        let mut committed = Vec::new();
        if lease.offset > 0 {
            committed.push((0, lease.offset));
        }
        for &(start, end) in &lease.skip {
            crate::queue::insert_range(&mut committed, (start, end));
        }
        self.attempt = Some(lease.attempt);
        self.committed = committed;
        self.lease = Some(lease);
        self.state = PartState::Queued;
    }

    fn is_committed(&self, row: u64) -> bool {
        self.context
            || self
                .committed
                .iter()
                .any(|&(start, end)| start <= row && row < end)
    }
}

impl GlobalShuffle {
    /// A shuffle of windows of `window_rows` rows into batches of
    /// `batch_size` for `devices` devices.
    pub fn new(seed: u64, window_rows: u64, batch_size: usize, devices: usize) -> Self {
        GlobalShuffle {
            seed,
            window_rows: window_rows.max(1),
            batch_size: batch_size.max(1),
            devices: devices.max(1),
            ordered: None,
            plan: None,
            next_view: None,
            held: Vec::new(),
            building: None,
            dealing: VecDeque::new(),
            numbers: HashMap::new(),
            dead: HashSet::new(),
            steps: None,
            ended: None,
            lanes: None,
            world: None,
        }
    }

    /// The global shuffle `config` asks for (`--shuffle global`), if any.
    pub fn of(config: &super::pipeline_config::PipelineConfig) -> Option<Self> {
        let devices = config.devices.max(1);
        let rows = config.shuffle_window?;
        let shuffle = GlobalShuffle::new(config.seed, rows, config.batch_size, devices);
        let Some(size) = config.global_batch_size else {
            return Some(shuffle);
        };
        let mut shuffle = shuffle.with_global_batches(size, devices, config.drop_last);
        if let Some(world) = config.world {
            // The lanes are this worker's ranks', once it took them.
            shuffle.world = Some((world, None));
        }
        Some(match &config.lanes {
            Some(lanes) => {
                let mine = if config.world.is_some() {
                    Vec::new()
                } else {
                    (0..lanes.count).collect()
                };
                shuffle.with_lanes(lanes.clone(), mine)
            }
            None => shuffle,
        })
    }

    /// Whether the worker must take ranks of the job's world before it leases.
    pub fn awaits_ranks(&self) -> bool {
        self.world
            .as_ref()
            .is_some_and(|(_, ranks)| ranks.is_none())
    }

    /// The world's ranks `ranks` (ascending, whether or not they follow
    /// each other) are this worker's: device `i` trains the `i`-th, and the
    /// worker cuts their lanes, rank after rank.
    pub fn set_ranks(&mut self, ranks: &[u32]) {
        let Some((world, mine)) = &mut self.world else {
            return;
        };
        if let Some((lanes, _)) = &self.lanes {
            let lanes_held = lanes.of_rank_set(ranks, *world);
            self.steps = self
                .steps
                .take()
                .map(|s| s.with_lanes(lanes.count, lanes_held));
        }
        self.steps = self
            .steps
            .take()
            .map(|s| s.with_world_ranks(ranks.to_vec()));
        *mine = Some(ranks.to_vec());
    }

    /// Takes the windows of lanes `mine` of `lanes` (see
    /// [`crate::queue::Lanes`]), each step `G / L` rows of each of them, in
    /// the order of `mine`.
    pub fn with_lanes(mut self, lanes: std::sync::Arc<Lanes>, mine: Vec<u32>) -> Self {
        self.steps = self.steps.map(|s| s.with_lanes(lanes.count, mine));
        let lane_of = lanes.lane_of();
        self.lanes = Some((lanes, lane_of));
        self
    }

    /// The lane of `split` (0 without lanes).
    fn lane_of(&self, split: u32) -> u32 {
        self.lanes
            .as_ref()
            .and_then(|(_, of)| of.get(split as usize).copied())
            .unwrap_or(0)
    }

    /// Cuts the epoch's order into global batches of `size` rows, one
    /// slice per rank of `ranks` (see [`super::global_steps`]), instead of batches of
    /// `--batch-size` per window.
    pub fn with_global_batches(mut self, size: u64, ranks: usize, drop_last: bool) -> Self {
        self.steps = Some(GlobalSteps::new(size, ranks, drop_last));
        self
    }

    /// Whether the order is cut into global batches ([`Self::next_step`]).
    pub fn global_batches(&self) -> bool {
        self.steps.is_some()
    }

    /// Nothing more is read for now: the epochs dealt so far are over.
    pub fn end_epoch(&mut self) {
        if self.building.is_none() && self.held.is_empty() {
            self.ended = self.dealing.back().map(|d| d.epoch).max(self.ended);
        }
    }

    /// Whether no window of `epoch` is still to come: a later epoch's
    /// window is read, its plan has no window left, or it ended.
    fn epoch_over(&self, epoch: Epoch) -> bool {
        if self.ended.is_some_and(|e| e >= epoch)
            || self.building.as_ref().is_some_and(|b| b.epoch > epoch)
        {
            return true;
        }
        self.ordered == Some(true)
            && self.building.is_none()
            && !self.held.iter().any(|l| l.epoch == epoch)
            && self
                .plan
                .as_ref()
                .is_some_and(|p| p.epoch == epoch && p.next >= p.windows.len())
    }

    /// Whether no window of `lane` of `epoch` is still to come (see
    /// [`Self::epoch_over`]): none left in the plan, none being read, no
    /// lease of it held for a window of its own.
    fn lane_over(&self, epoch: Epoch, lane: u32) -> bool {
        if self.epoch_over(epoch) {
            return true;
        }
        if self.lanes.is_none() || self.ordered != Some(true) {
            return false;
        }
        let Some(plan) = self.plan.as_ref().filter(|p| p.epoch == epoch) else {
            return false;
        };
        !plan.meta[plan.next.min(plan.meta.len())..]
            .iter()
            .any(|&(_, l)| l == lane)
            && !self
                .building
                .as_ref()
                .is_some_and(|b| b.epoch == epoch && b.lane == lane)
            && !self
                .held
                .iter()
                .any(|l| l.epoch == epoch && self.lane_of(l.split) == lane)
    }

    /// The next global batch, once one can be cut (see [`super::global_steps`]).
    pub fn next_step(&mut self) -> Result<Option<Cut>, ArrowError> {
        let front = self.dealing.front().map(|d| d.epoch);
        let lanes = self.steps.as_ref().map_or(&[][..], GlobalSteps::lanes);
        let over: Vec<(u32, bool)> = match front {
            Some(e) => lanes.iter().map(|&l| (l, self.lane_over(e, l))).collect(),
            None => Vec::new(),
        };
        let Some(steps) = &mut self.steps else {
            return Ok(None);
        };
        let ended =
            |e: Epoch, lane: u32| front == Some(e) && over.iter().any(|&(l, o)| l == lane && o);
        steps.next(&mut self.dealing, ended, &self.dead)
    }

    /// Positions left in the windows of each lane cut, any epoch.
    fn lanes_left<'a>(&'a self, steps: &'a GlobalSteps) -> impl Iterator<Item = u64> + 'a {
        steps.lanes().iter().map(|&lane| {
            self.dealing
                .iter()
                .filter(|d| d.lane == lane)
                .map(|d| (d.rows.len() - d.next) as u64)
                .sum()
        })
    }

    /// Whether the windows dealt hold too few rows to go on, so that the
    /// next one is read (two windows, or under global batches a step's).
    fn wants_window(&self) -> bool {
        match &self.steps {
            Some(steps) if self.lanes.is_some() => {
                self.lanes_left(steps).any(|left| left < steps.wanted())
            }
            Some(steps) => {
                let left: u64 = self.lanes_left(steps).sum();
                self.dealing.len() < 2 || left < steps.wanted()
            }
            None => self.dealing.len() < 2,
        }
    }

    /// Whether the view of `epoch` is wanted before a lease of it is placed.
    pub fn needs_view(&self, epoch: Epoch) -> bool {
        self.ordered != Some(false)
            && self.plan.as_ref().is_none_or(|p| p.epoch != epoch)
            && self.next_view.as_ref().is_none_or(|v| v.epoch != epoch)
    }

    /// The source's view of an epoch (`None`: it tells none, and windows are
    /// the leases in the order they come).
    pub fn set_view(&mut self, view: Option<EpochView>, splits: &[Split]) {
        let Some(view) = view else {
            self.ordered = Some(false);
            return;
        };
        self.ordered = Some(true);
        let current = self.plan.as_ref().map(|p| p.epoch);
        if current == Some(view.epoch) {
            self.refresh(&view);
        } else if self.building.is_some() {
            self.next_view = Some(view);
        } else {
            self.plan = Some(self.plan_of(view, splits));
        }
    }

    fn plan_of(&self, view: EpochView, splits: &[Split]) -> Plan {
        let (windows, meta, total) = match &self.lanes {
            Some((lanes, _)) => {
                let all_lanes: Vec<u32> = (0..lanes.count).collect();
                let mine = self
                    .steps
                    .as_ref()
                    .map_or(&all_lanes[..], GlobalSteps::lanes);
                let all = lanes.windows(self.seed, view.epoch);
                let total = all.len() as u64;
                let (windows, meta) = all
                    .into_iter()
                    .filter(|w| mine.contains(&w.lane))
                    .map(|w| (w.tasks, (w.number, w.lane)))
                    .unzip();
                (windows, meta, total)
            }
            None => {
                let windows = self.windows_of(&view, splits);
                let meta: Vec<(u64, u32)> = (0..windows.len() as u64).map(|n| (n, 0)).collect();
                let total = windows.len() as u64;
                (windows, meta, total)
            }
        };
        let window_of = windows
            .iter()
            .enumerate()
            .flat_map(|(w, splits)| splits.iter().map(move |&s| (s, w)))
            .collect();
        Plan {
            epoch: view.epoch,
            windows,
            meta,
            total,
            next: 0,
            window_of,
            done: view.done.into_iter().collect(),
            failed: view.failed.into_iter().collect(),
            extra: 0,
        }
    }

    /// The epoch's tasks, in its order, in windows of up to the window's rows.
    fn windows_of(&self, view: &EpochView, splits: &[Split]) -> Vec<Vec<u32>> {
        let rows = |split| self.rows_of(splits, split);
        crate::queue::windows_of(&view.order, rows, self.window_rows)
    }

    /// Rows of `split` as its metadata records them; a whole window when it
    /// does not.
    fn rows_of(&self, splits: &[Split], split: u32) -> u64 {
        splits
            .get(split as usize)
            .and_then(|s| s.rows)
            .unwrap_or(self.window_rows)
    }

    /// A newer view of the current epoch: the window's tasks not leased yet
    /// that are done meanwhile are read outside any lease, those given up
    /// leave the window.
    fn refresh(&mut self, view: &EpochView) {
        let Some(plan) = &mut self.plan else {
            return;
        };
        plan.done.extend(view.done.iter().copied());
        plan.failed.extend(view.failed.iter().copied());
        if let Some(building) = &mut self.building {
            if building.epoch != plan.epoch {
                return;
            }
            building
                .parts
                .retain(|p| p.state != PartState::Pending || !plan.failed.contains(&p.split));
            for part in &mut building.parts {
                if part.state == PartState::Pending && plan.done.contains(&part.split) {
                    part.context = true;
                    part.state = PartState::Queued;
                }
            }
        }
    }

    /// Places a lease: in the window being read when it waits for its task,
    /// else held for a later window.
    pub fn offer(&mut self, lease: Lease, splits: &[Split]) {
        let rows = self.rows_of(splits, lease.split);
        if let Some(building) = &mut self.building {
            if building.epoch == lease.epoch {
                if let Some(part) = building
                    .parts
                    .iter_mut()
                    .find(|p| p.split == lease.split && p.state == PartState::Pending)
                {
                    part.take(lease);
                    return;
                }
            }
            if self.ordered == Some(false) && !building.closed {
                if building.epoch == lease.epoch
                    && building.rows.saturating_add(rows) <= self.window_rows
                {
                    building.rows += rows;
                    building.parts.push(Part::leased(lease));
                    return;
                }
                building.closed = true;
            }
        }
        self.held.push(lease);
    }

    /// The source has nothing to lease now: a window of leases in the order
    /// they came takes no more.
    pub fn nothing_to_lease(&mut self) {
        if self.ordered == Some(false) {
            if let Some(building) = &mut self.building {
                building.closed = true;
            }
        }
    }

    /// The epoch of the planned window being read while it waits for tasks
    /// not leased yet (some may be done or given up meanwhile).
    pub fn pending_epoch(&self) -> Option<Epoch> {
        let building = self.building.as_ref()?;
        (self.ordered == Some(true) && building.parts.iter().any(|p| p.state == PartState::Pending))
            .then_some(building.epoch)
    }

    /// Whether the shuffle waits for a lease.
    pub fn wants_lease(&self) -> bool {
        if self.awaits_ranks() {
            // The first lease takes the ranks, which say the lanes.
            return true;
        }
        if !self.wants_window() {
            return false;
        }
        match (&self.building, self.ordered) {
            (Some(b), Some(true)) => b.parts.iter().any(|p| p.state == PartState::Pending),
            (Some(b), _) => !b.closed,
            (None, Some(true)) => {
                self.held.is_empty() && self.plan.as_ref().is_none_or(|p| p.next >= p.windows.len())
            }
            (None, _) => self.held.is_empty(),
        }
    }

    /// Whether `attempt` is read for the window being read.
    pub fn owns(&self, attempt: AttemptId) -> bool {
        self.building
            .as_ref()
            .is_some_and(|b| b.parts.iter().any(|p| p.attempt == Some(attempt)))
    }

    /// Reads being run for the window.
    pub fn reading(&self) -> usize {
        self.building.as_ref().map_or(0, |b| {
            b.parts
                .iter()
                .filter(|p| p.state == PartState::Reading)
                .count()
        })
    }

    /// Moves on: a window read whole is permuted, the next window started,
    /// and up to `room` reads of it returned to be started (`next_id` names
    /// the reads outside any lease, counting down).
    pub fn pump(&mut self, splits: &[Split], room: usize, next_id: &mut u64) -> Vec<ReadOrder> {
        if self.building.as_ref().is_some_and(Building::is_read) {
            if let Some(building) = self.building.take() {
                let dealt = self.permute(building);
                // Under global batches, rows committed before keep their
                // positions: the window counts whole.
                let keep = if self.steps.is_some() {
                    !dealt.rows.is_empty()
                } else {
                    dealt.rows.iter().any(Option::is_some)
                };
                if keep {
                    self.dealing.push_back(dealt);
                }
            }
        }
        if self.building.is_none() && self.wants_window() {
            self.start_window(splits);
        }
        let mut orders = Vec::new();
        let Some(building) = &mut self.building else {
            return orders;
        };
        for part in &mut building.parts {
            if orders.len() >= room {
                break;
            }
            if part.state != PartState::Queued {
                continue;
            }
            part.state = PartState::Reading;
            let lease = match &part.lease {
                Some(lease) => Lease {
                    offset: 0,
                    skip: Vec::new(),
                    ..lease.clone()
                },
                None => {
                    let attempt = AttemptId(*next_id);
                    *next_id -= 1;
                    part.attempt = Some(attempt);
                    part.context = true;
                    Lease {
                        attempt,
                        epoch: building.epoch,
                        split: part.split,
                        offset: 0,
                        deadline: 0,
                        skip: Vec::new(),
                        repaired: false,
                    }
                }
            };
            orders.push(ReadOrder {
                context: part.context,
                lease,
            });
        }
        orders
    }

    /// Starts the next window: the plan's next one with a task not done
    /// before (after a window of the leases of tasks whose window went
    /// out), or the leases held in the order they came.
    fn start_window(&mut self, splits: &[Split]) {
        if self.ordered != Some(true) {
            self.extra_window(splits, |_| true);
            return;
        }
        // A lease of the next epoch: the current one is over.
        let next_epoch = self
            .next_view
            .as_ref()
            .is_some_and(|v| self.held.iter().any(|l| l.epoch == v.epoch));
        if next_epoch {
            if let Some(view) = self.next_view.take() {
                self.plan = Some(self.plan_of(view, splits));
            }
        }
        let Some(plan) = &self.plan else {
            return;
        };
        // Tasks leased again after their window went out (a read that
        // failed) make a window of their own.
        let (epoch, next) = (plan.epoch, plan.next);
        let window_of = &plan.window_of;
        let late =
            |l: &Lease| l.epoch == epoch && window_of.get(&l.split).is_none_or(|&w| w < next);
        if self.held.iter().any(late) {
            let late: Vec<AttemptId> = self
                .held
                .iter()
                .filter(|l| late(l))
                .map(|l| l.attempt)
                .collect();
            self.extra_window(splits, |l| late.contains(&l.attempt));
            return;
        }
        let Some(plan) = &mut self.plan else {
            return;
        };
        while plan.next < plan.windows.len() {
            let (number, lane) = plan.meta[plan.next];
            let window = &plan.windows[plan.next];
            plan.next += 1;
            if self.steps.is_none()
                && window
                    .iter()
                    .all(|s| plan.done.contains(s) || plan.failed.contains(s))
            {
                // Every row dealt before: nothing to read.
                continue;
            }
            let mut parts = Vec::with_capacity(window.len());
            for &split in window {
                if plan.failed.contains(&split) {
                    continue;
                }
                let mut part = Part::pending(split);
                if let Some(at) = self
                    .held
                    .iter()
                    .position(|l| l.split == split && l.epoch == plan.epoch)
                {
                    part.take(self.held.remove(at));
                } else if plan.done.contains(&split) {
                    part.context = true;
                    part.state = PartState::Queued;
                }
                parts.push(part);
            }
            self.building = Some(Building {
                epoch: plan.epoch,
                number,
                lane,
                parts,
                closed: true,
                rows: 0,
            });
            return;
        }
    }

    /// A window of the leases held that `take` picks, in the order they
    /// came, of the first one's epoch, up to the window's rows.
    fn extra_window(&mut self, splits: &[Split], take: impl Fn(&Lease) -> bool) {
        let Some(first) = self.held.iter().find(|l| take(l)) else {
            return;
        };
        let epoch = first.epoch;
        let lane = self.lane_of(first.split);
        let number = match &mut self.plan {
            Some(plan) if plan.epoch == epoch && self.ordered == Some(true) => {
                plan.extra += 1;
                plan.total + plan.extra - 1
            }
            _ => {
                let next = self.numbers.entry(epoch).or_default();
                *next += 1;
                *next - 1
            }
        };
        let mut building = Building {
            epoch,
            number,
            lane,
            parts: Vec::new(),
            closed: false,
            rows: 0,
        };
        let mut kept = Vec::new();
        for lease in std::mem::take(&mut self.held) {
            let rows = self.rows_of(splits, lease.split);
            let fits =
                building.parts.is_empty() || building.rows.saturating_add(rows) <= self.window_rows;
            let same_lane = self.lane_of(lease.split) == lane;
            if lease.epoch == epoch && take(&lease) && same_lane && !building.closed && fits {
                building.rows = building.rows.saturating_add(rows);
                building.parts.push(Part::leased(lease));
            } else {
                if take(&lease) {
                    building.closed = true;
                }
                kept.push(lease);
            }
        }
        if self.ordered == Some(true) || building.rows >= self.window_rows {
            building.closed = true;
        }
        self.held = kept;
        self.building = Some(building);
    }

    /// Rows `start..` of a read for the window.
    pub fn add(&mut self, attempt: AttemptId, start: u64, batch: RecordBatch) {
        if let Some(part) = self.part_mut(attempt) {
            part.batches.push((start, batch));
        }
    }

    /// The read of `attempt` ended (at its end, or where it failed).
    pub fn read_ended(&mut self, attempt: AttemptId) {
        if let Some(part) = self.part_mut(attempt) {
            part.state = PartState::Read;
        }
    }

    /// The runs of rows `start..start + len` of `attempt` not committed
    /// before this read.
    pub fn uncommitted(&self, attempt: AttemptId, start: u64, len: u64) -> Vec<(u64, u64)> {
        let Some(part) = self
            .building
            .as_ref()
            .and_then(|b| b.parts.iter().find(|p| p.attempt == Some(attempt)))
        else {
            return vec![(start, start + len)];
        };
        if part.context {
            return Vec::new();
        }
        super::reader::unskipped(start, start + len, &part.committed)
    }

    fn part_mut(&mut self, attempt: AttemptId) -> Option<&mut Part> {
        self.building
            .as_mut()?
            .parts
            .iter_mut()
            .find(|p| p.attempt == Some(attempt))
    }

    /// The lease of `attempt` was lost: none of its rows goes out, and a
    /// read of it for the window being read stops counting. Returns whether
    /// a read of it was running.
    pub fn drop_attempt(&mut self, attempt: AttemptId) -> bool {
        self.dead.insert(attempt);
        self.held.retain(|l| l.attempt != attempt);
        let Some(building) = &mut self.building else {
            return false;
        };
        let before = building.parts.len();
        building.parts.retain(|p| p.attempt != Some(attempt));
        before != building.parts.len()
    }

    /// Forgets everything (the worker is stopping).
    pub fn clear(&mut self) {
        self.held.clear();
        self.building = None;
        self.dealing.clear();
    }

    /// Whether rows are held: read for a window, or waiting to go out
    /// (under global batches: enough to cut a step without the epoch's end).
    pub fn holds_rows(&self) -> bool {
        let dealt = match &self.steps {
            Some(steps) => self.lanes_left(steps).all(|left| left >= steps.wanted()),
            None => !self.dealing.is_empty(),
        };
        dealt
            || self
                .building
                .as_ref()
                .is_some_and(|b| b.parts.iter().any(|p| !p.batches.is_empty()))
    }

    /// Whether nothing at all is held (no lease, no window).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty() && self.building.is_none() && self.dealing.is_empty()
    }

    /// The next batch to go out and its device, if a window is dealt.
    pub fn next_batch(&mut self) -> Result<Option<(usize, OutBatch)>, ArrowError> {
        while let Some(dealt) = self.dealing.front_mut() {
            match dealt.cut(self.batch_size, &self.dead)? {
                Some((index, out)) => {
                    let device = ((dealt.number + index as u64) % self.devices as u64) as usize;
                    return Ok(Some((device, out)));
                }
                None => {
                    self.dealing.pop_front();
                }
            }
        }
        Ok(None)
    }

    /// Lists the rows of a window read whole, in task and row order, and
    /// permutes them.
    fn permute(&self, building: Building) -> Dealt {
        let mut batches = Vec::new();
        let mut origin = Vec::new();
        let mut listed: Vec<Option<(u32, u32)>> = Vec::new();
        for mut part in building.parts {
            let Some(attempt) = part.attempt else {
                continue;
            };
            part.batches.sort_by_key(|(start, _)| *start);
            for (start, batch) in std::mem::take(&mut part.batches) {
                let index = batches.len() as u32;
                for row in 0..batch.num_rows() {
                    let committed = part.is_committed(start + row as u64);
                    listed.push((!committed).then_some((index, row as u32)));
                }
                origin.push((attempt, start));
                batches.push(batch);
            }
        }
        let order = window_order(self.seed, building.epoch, building.number, listed.len());
        let rows = order.iter().map(|&i| listed[i as usize]).collect();
        Dealt {
            epoch: building.epoch,
            number: building.number,
            lane: building.lane,
            batches,
            origin,
            rows,
            next: 0,
        }
    }
}

impl Building {
    /// Every task leased and read.
    fn is_read(&self) -> bool {
        self.closed && self.parts.iter().all(|p| p.state == PartState::Read)
    }
}

#[cfg(test)]
#[path = "shuffle_tests.rs"]
mod tests;
