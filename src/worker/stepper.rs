//! Stepper: under `--lockstep`, turns the batcher's batches into steps of one
//! batch per device, so that every device gets the same number of batches in
//! each epoch. Steps hold full batches; the epoch's last step takes the rows
//! left over and splits them as evenly as possible across the devices (or
//! drops them, with `--drop-last`). Each batch is tagged with its epoch and
//! step, and a device's last batch of an epoch with the epoch's end; on a
//! worker of a master's world, each with its device's world rank (those of
//! 0 rows too).
//!
//! The stepper holds back one full step until it knows whether more rows
//! follow: only then can it tell which step is the epoch's last, and fold a
//! remainder smaller than the number of devices into it (so that no device
//! gets an empty batch while another gets a full one).

use crate::epoch::Epoch;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::batcher::{self, OutBatch};
use crate::queue::AttemptId;

pub use crate::trainer::protocol::{EPOCH_END_KEY, EPOCH_KEY, RANK_KEY, STEP_KEY};

/// One batch per device, in device order.
#[derive(Debug)]
pub struct Step {
    /// Epoch of the rows (the batches carry it in their tags: only tests read it here).
    #[cfg_attr(not(test), allow(dead_code))]
    pub epoch: Epoch,
    /// The batches, tagged (see [`EPOCH_KEY`]).
    pub batches: Vec<OutBatch>,
}

/// Rows of one epoch, in the order they came.
#[derive(Debug)]
struct Group {
    epoch: Epoch,
    batches: VecDeque<OutBatch>,
    /// No more rows will join this group.
    ended: bool,
    /// Steps handed out so far.
    steps: u64,
}

/// What the front group does next.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Needs more rows, or the end of its epoch.
    Wait,
    /// A step of the first full batches, the epoch's last or not.
    Full { last: bool },
    /// The epoch's last step: every row left, split evenly.
    Split,
    /// Rows left that make no step (`--drop-last`).
    Drop,
    /// Nothing left.
    Done,
}

/// Groups batches into steps (see the module docs).
#[derive(Debug)]
pub struct Stepper {
    schema: SchemaRef,
    devices: usize,
    batch_size: usize,
    drop_last: bool,
    groups: VecDeque<Group>,
    /// Steps cut whole before they came (`--global-batch-size`), in order.
    formed: VecDeque<Step>,
    /// Batches dropped (`--drop-last`), not yet taken.
    dropped: Vec<OutBatch>,
    /// A worker of a master's world: the world rank of each device, which
    /// every batch of the steps formed here says ([`RANK_KEY`]).
    world_ranks: Option<Vec<u32>>,
}

impl Stepper {
    /// A stepper for `devices` devices and batches of `batch_size` rows.
    pub fn new(schema: SchemaRef, devices: usize, batch_size: usize, drop_last: bool) -> Self {
        Stepper {
            schema,
            devices: devices.max(1),
            batch_size: batch_size.max(1),
            drop_last,
            groups: VecDeque::new(),
            formed: VecDeque::new(),
            dropped: Vec::new(),
            world_ranks: None,
        }
    }

    /// Device `i` trains world rank `ranks[i]`: each batch of the steps
    /// formed here says so (steps cut whole already say it themselves).
    pub fn set_world_ranks(&mut self, ranks: &[u32]) {
        self.world_ranks = Some(ranks.to_vec());
    }

    /// Adds a step cut whole already (global batches): it goes as it is.
    pub fn push_step(&mut self, step: Step) {
        self.formed.push_back(step);
    }

    /// Adds batches dropped whole already (global batches, `--drop-last`).
    pub fn push_dropped(&mut self, batches: Vec<OutBatch>) {
        self.dropped.extend(batches);
    }

    /// Adds a batch from the batcher. A batch of another epoch than the
    /// rows before it ends their epoch.
    pub fn push(&mut self, out: OutBatch) {
        if out.data.num_rows() == 0 {
            return;
        }
        match self.groups.back_mut() {
            Some(group) if !group.ended && group.epoch == out.epoch => {
                group.batches.push_back(out);
            }
            back => {
                if let Some(group) = back {
                    group.ended = true;
                }
                self.groups.push_back(Group {
                    epoch: out.epoch,
                    batches: VecDeque::from([out]),
                    ended: false,
                    steps: 0,
                });
            }
        }
        self.settle();
    }

    /// No more rows of the epochs held will come: their last steps can go.
    pub fn end_epoch(&mut self) {
        for group in &mut self.groups {
            group.ended = true;
        }
        self.settle();
    }

    /// Whether rows wait for the end of their epoch (or more rows).
    pub fn open(&self) -> bool {
        self.groups.iter().any(|g| !g.ended)
    }

    /// Batches held.
    pub fn held(&self) -> usize {
        let formed: usize = self.formed.iter().map(|s| s.batches.len()).sum();
        formed + self.groups.iter().map(|g| g.batches.len()).sum::<usize>()
    }

    /// Whether nothing is held (dropped batches not taken aside).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.formed.is_empty() && self.dropped.is_empty()
    }

    /// Whether [`Stepper::next_step`] has a step to give.
    pub fn ready(&self) -> bool {
        !self.formed.is_empty()
            || self
                .groups
                .front()
                .is_some_and(|g| matches!(self.plan(g), Plan::Full { .. } | Plan::Split))
    }

    /// The next step, if one is ready.
    pub fn next_step(&mut self) -> Result<Option<Step>, ArrowError> {
        if let Some(step) = self.formed.pop_front() {
            return Ok(Some(step));
        }
        let Some(group) = self.groups.front() else {
            return Ok(None);
        };
        let plan = self.plan(group);
        let (n, schema) = (self.devices, self.schema.clone());
        let Some(group) = self.groups.front_mut() else {
            return Ok(None);
        };
        let (batches, last) = match plan {
            Plan::Full { last } => {
                let full = self.batch_size;
                let mut taken = Vec::with_capacity(n);
                let mut kept = VecDeque::with_capacity(group.batches.len());
                for out in group.batches.drain(..) {
                    if taken.len() < n && out.data.num_rows() == full {
                        taken.push(out);
                    } else {
                        kept.push_back(out);
                    }
                }
                group.batches = kept;
                (taken, last)
            }
            Plan::Split => {
                let all: Vec<OutBatch> = group.batches.drain(..).collect();
                (split_even(&schema, all, n, group.epoch)?, true)
            }
            Plan::Wait | Plan::Drop | Plan::Done => return Ok(None),
        };
        let step = group.steps;
        group.steps += 1;
        let epoch = group.epoch;
        let ranks = self.world_ranks.as_deref().unwrap_or_default();
        let batches = batches
            .into_iter()
            .enumerate()
            .map(|(device, out)| {
                let out = tag(out, step, last)?;
                match ranks.get(device) {
                    Some(&rank) => with_rank(out, rank),
                    None => Ok(out),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.settle();
        Ok(Some(Step { epoch, batches }))
    }

    /// Forgets the rows of `attempt` (its lease was lost). Returns how many
    /// rows were dropped.
    pub fn drop_attempt(&mut self, attempt: AttemptId) -> Result<usize, ArrowError> {
        let mut dropped = 0;
        for step in &mut self.formed {
            for out in &mut step.batches {
                let rows = out.data.num_rows();
                let schema = out.data.schema();
                let kept = batcher::without(out.clone(), |a| a == attempt)?;
                let kept = kept.unwrap_or_else(|| OutBatch {
                    data: RecordBatch::new_empty(schema),
                    epoch: out.epoch,
                    provenance: Vec::new(),
                });
                dropped += rows - kept.data.num_rows();
                *out = kept;
            }
        }
        for group in &mut self.groups {
            let mut kept = VecDeque::with_capacity(group.batches.len());
            for out in group.batches.drain(..) {
                let rows = out.data.num_rows();
                if let Some(out) = batcher::without(out, |a| a == attempt)? {
                    dropped += rows - out.data.num_rows();
                    kept.push_back(out);
                } else {
                    dropped += rows;
                }
            }
            group.batches = kept;
        }
        self.settle();
        Ok(dropped)
    }

    /// Forgets everything held (the worker is stopping).
    pub fn clear(&mut self) {
        self.groups.clear();
        self.formed.clear();
    }

    /// The batches dropped since last asked (`--drop-last`): their rows are
    /// consumed without reaching a trainer.
    pub fn take_dropped(&mut self) -> Vec<OutBatch> {
        std::mem::take(&mut self.dropped)
    }

    /// Removes finished groups from the front, dropping what `--drop-last` drops.
    fn settle(&mut self) {
        while let Some(group) = self.groups.front() {
            match self.plan(group) {
                Plan::Done => {}
                Plan::Drop => {
                    if let Some(group) = self.groups.front_mut() {
                        self.dropped.extend(group.batches.drain(..));
                    }
                }
                Plan::Wait | Plan::Full { .. } | Plan::Split => return,
            }
            self.groups.pop_front();
        }
    }

    fn plan(&self, group: &Group) -> Plan {
        let n = self.devices;
        let full = group
            .batches
            .iter()
            .filter(|b| b.data.num_rows() == self.batch_size)
            .count();
        if !group.ended {
            // One full step stays behind until the epoch's end is known.
            return if full >= 2 * n {
                Plan::Full { last: false }
            } else {
                Plan::Wait
            };
        }
        let rows: usize = group.batches.iter().map(|b| b.data.num_rows()).sum();
        let steps = full / n;
        let rest = rows - steps * n * self.batch_size;
        match (self.drop_last, steps, rest) {
            (_, 0, 0) => Plan::Done,
            (true, 0, _) => Plan::Drop,
            (true, k, _) | (false, k, 0) => Plan::Full { last: k == 1 },
            // The rest makes a step of its own, split evenly.
            (false, k, r) if r >= n || k == 0 => {
                if k >= 1 {
                    Plan::Full { last: false }
                } else {
                    Plan::Split
                }
            }
            // Fewer rows than devices: they join the last full step.
            (false, k, _) => {
                if k >= 2 {
                    Plan::Full { last: false }
                } else {
                    Plan::Split
                }
            }
        }
    }
}

/// `all` cut into `n` batches whose sizes differ by at most one row, the
/// larger ones first.
fn split_even(
    schema: &SchemaRef,
    all: Vec<OutBatch>,
    n: usize,
    epoch: Epoch,
) -> Result<Vec<OutBatch>, ArrowError> {
    let mut pending: VecDeque<_> = all.iter().flat_map(batcher::runs).collect();
    let mut rows: usize = pending.iter().map(|(b, _)| b.num_rows()).sum();
    let (each, extra) = (rows / n, rows % n);
    let mut out = Vec::with_capacity(n);
    for device in 0..n {
        let want = each + usize::from(device < extra);
        let (data, provenance) = batcher::take_in_order(schema, &mut pending, &mut rows, want)?;
        out.push(OutBatch {
            data,
            epoch,
            provenance,
        });
    }
    Ok(out)
}

/// `out` with its epoch and step in its schema's metadata (see [`EPOCH_KEY`]).
pub(crate) fn tag(out: OutBatch, step: u64, last: bool) -> Result<OutBatch, ArrowError> {
    let schema = out.data.schema();
    let mut metadata: HashMap<String, String> = schema.metadata().clone();
    metadata.insert(EPOCH_KEY.to_string(), out.epoch.0.to_string());
    metadata.insert(STEP_KEY.to_string(), step.to_string());
    if last {
        metadata.insert(EPOCH_END_KEY.to_string(), out.epoch.0.to_string());
    }
    let tagged = Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata));
    let rows = RecordBatchOptions::new().with_row_count(Some(out.data.num_rows()));
    let data = RecordBatch::try_new_with_options(tagged, out.data.columns().to_vec(), &rows)?;
    Ok(OutBatch { data, ..out })
}

/// `out` saying it is for the device of world rank `rank` ([`RANK_KEY`]).
pub(crate) fn with_rank(out: OutBatch, rank: u32) -> Result<OutBatch, ArrowError> {
    let schema = out.data.schema();
    let mut metadata = schema.metadata().clone();
    metadata.insert(RANK_KEY.to_string(), rank.to_string());
    let tagged = Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata));
    let data = out.data.with_schema(tagged)?;
    Ok(OutBatch { data, ..out })
}

#[cfg(test)]
#[path = "stepper_tests.rs"]
mod tests;
