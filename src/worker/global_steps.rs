//! `--global-batch-size G`: the epoch's order of `--shuffle global` cut into
//! global batches.
//!
//! The windows of an epoch, each permuted, are one sequence of positions (a
//! row committed before this run keeps its position, so that a resumed run
//! counts as an uninterrupted one). Step `k` of the epoch is positions
//! `[kG, (k+1)G)`, across windows; its `W` ranks (`--devices` of the one
//! worker) get the `W` equal slices of it in rank order. The epoch's last
//! step holds what is left, `R < G` positions, and rank `r` gets positions
//! `[rR/W, (r+1)R/W)` of it (sizes differ by at most one row), or it is
//! dropped with `--drop-last`. Neither `W` nor timing changes which rows a
//! step holds or their order: the same seed and data give the same global
//! batches on any number of devices.
//!
//! A step whose positions were all committed before is skipped (its number
//! kept); one that was partly committed goes out with the rest of its rows.

use crate::epoch::Epoch;
use std::collections::{HashSet, VecDeque};

use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::dealt::{Dealt, Picked};
use crate::queue::AttemptId;
use crate::worker::batcher::OutBatch;
use crate::worker::stepper::{tag, with_rank, Step};
use crate::worker::Provenance;

/// What cutting the next global batch gave.
#[derive(Debug)]
pub enum Cut {
    /// A step: one batch per rank, tagged with its epoch and step.
    Step(Step),
    /// The epoch's last partial step, dropped (`--drop-last`): its rows
    /// are consumed without reaching a trainer.
    Dropped(Vec<OutBatch>),
}

/// Cuts the dealt windows into global batches (see the module docs).
#[derive(Debug)]
pub(crate) struct GlobalSteps {
    /// Rows per global batch (`G`).
    size: u64,
    /// Ranks sharing each step (`W`, a divisor of `G`).
    ranks: u64,
    drop_last: bool,
    /// Rows each lane gives a step (`G / L`; `G` without lanes).
    chunk: u64,
    /// The lanes this worker cuts, in order (`[0]` without lanes): rank
    /// after rank, each rank's lanes ascending.
    lanes: Vec<u32>,
    /// Whether each rank's slice is whole lanes (`W` divides the lanes).
    by_lane: bool,
    /// A master's job of `--world-size`: the world rank of each slice, in
    /// slice order (each batch says its rank,
    /// [`crate::trainer::protocol::RANK_KEY`]).
    world_ranks: Option<Vec<u32>>,
    /// The epoch being cut, and its next step.
    at: Option<(Epoch, u64)>,
}

/// One position of a step: (window in the dealing queue, batch, row), or
/// `None` when its row was committed before (or its lease was lost).
type Pick = Option<(usize, u32, u32)>;

impl GlobalSteps {
    /// Steps of `size` rows for `ranks` ranks.
    pub(super) fn new(size: u64, ranks: usize, drop_last: bool) -> Self {
        let size = size.max(1);
        GlobalSteps {
            size,
            ranks: (ranks as u64).max(1),
            drop_last,
            chunk: size,
            lanes: vec![0],
            by_lane: false,
            world_ranks: None,
            at: None,
        }
    }

    /// Steps of `G / count` rows from each of lanes `mine` of `count`
    /// ([`crate::queue::Lanes`]), in that order: the ranks' slices of a
    /// step are whole lanes where their number divides the lanes', rank
    /// `r` taking the `r`-th of `W` equal parts of `mine`.
    pub(super) fn with_lanes(mut self, count: u32, mine: Vec<u32>) -> Self {
        let count = u64::from(count.max(1));
        self.chunk = (self.size / count).max(1);
        let held = mine.len() as u64;
        self.by_lane = held > 0 && held % self.ranks == 0;
        self.lanes = mine;
        self
    }

    /// Each batch says its rank of the world: slice `i`'s is `ranks[i]`.
    pub(super) fn with_world_ranks(mut self, ranks: Vec<u32>) -> Self {
        self.world_ranks = Some(ranks);
        self
    }

    /// The lanes cut, in order (`[0]` without lanes).
    pub(super) fn lanes(&self) -> &[u32] {
        &self.lanes
    }

    /// Positions a lane's windows must still hold to cut a step now, beyond
    /// which no further window of it is needed.
    pub(super) fn wanted(&self) -> u64 {
        self.chunk + 1
    }

    /// The next step of the windows in `dealing` (oldest first), if one can
    /// be cut: a full step once a position follows each lane's part of it
    /// (so that the last one is known), and the last one once `ended` says
    /// no window of a lane of the front window's epoch is to come.
    pub(super) fn next(
        &mut self,
        dealing: &mut VecDeque<Dealt>,
        ended: impl Fn(Epoch, u32) -> bool,
        dead: &HashSet<AttemptId>,
    ) -> Result<Option<Cut>, ArrowError> {
        loop {
            dealing.retain(|d| d.next < d.rows.len());
            let Some(epoch) = dealing.front().map(|d| d.epoch) else {
                return Ok(None);
            };
            let step = match self.at {
                Some((e, step)) if e == epoch => step,
                _ => 0,
            };
            let mut takes = Vec::with_capacity(self.lanes.len());
            let mut last = true;
            for &lane in &self.lanes {
                let left = left_in(dealing, epoch, lane);
                let over = ended(epoch, lane) || dealing.iter().any(|d| d.epoch != epoch);
                let take = if left > self.chunk || (over && left == self.chunk) {
                    self.chunk
                } else if over {
                    left
                } else {
                    return Ok(None);
                };
                last &= over && left == take;
                takes.push((lane, take));
            }
            let take: u64 = takes.iter().map(|(_, t)| t).sum();
            self.at = Some((epoch, step + 1));
            let mut picks = Vec::with_capacity(take as usize);
            let mut ends = Vec::with_capacity(takes.len());
            for &(lane, n) in &takes {
                picks.extend(take_positions(dealing, epoch, lane, n as usize, dead));
                ends.push(picks.len());
            }
            if picks.iter().all(Option::is_none) {
                // Committed before: the step keeps its number, and goes to no one.
                continue;
            }
            let slices = self.slices(&picks, &ends);
            if take < self.size && self.drop_last {
                let dropped = slices
                    .iter()
                    .map(|slice| gather(dealing, slice, epoch))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(Some(Cut::Dropped(dropped)));
            }
            let batches = slices
                .iter()
                .enumerate()
                .map(|(r, slice)| {
                    let out = tag(gather(dealing, slice, epoch)?, step, last)?;
                    match self.world_ranks.as_ref().and_then(|ranks| ranks.get(r)) {
                        Some(&rank) => with_rank(out, rank),
                        None => Ok(out),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Some(Cut::Step(Step { epoch, batches })));
        }
    }

    /// The positions of a step cut into one slice per rank: whole lanes
    /// where the ranks divide them (`ends`: where each lane's part ends),
    /// else `G / W` positions each in a full step and sizes within one row
    /// of each other in a last one.
    fn slices<'a>(&self, picks: &'a [Pick], ends: &[usize]) -> Vec<&'a [Pick]> {
        let w = self.ranks;
        if self.by_lane {
            let per = ends.len() / w as usize;
            return (0..w as usize)
                .map(|r| {
                    let from = if r == 0 { 0 } else { ends[r * per - 1] };
                    &picks[from..ends[(r + 1) * per - 1]]
                })
                .collect();
        }
        let n = picks.len() as u64;
        (0..w)
            .map(|r| &picks[(r * n / w) as usize..((r + 1) * n / w) as usize])
            .collect()
    }
}

/// Positions of `lane`'s windows of `epoch` not taken yet.
pub(super) fn left_in(dealing: &VecDeque<Dealt>, epoch: Epoch, lane: u32) -> u64 {
    dealing
        .iter()
        .filter(|d| d.epoch == epoch && d.lane == lane)
        .map(|d| (d.rows.len() - d.next) as u64)
        .sum()
}

/// Takes `n` positions from `lane`'s windows of `epoch`, oldest first.
fn take_positions(
    dealing: &mut VecDeque<Dealt>,
    epoch: Epoch,
    lane: u32,
    n: usize,
    dead: &HashSet<AttemptId>,
) -> Vec<Pick> {
    let mut picks = Vec::with_capacity(n);
    for (index, dealt) in dealing.iter_mut().enumerate() {
        if dealt.epoch != epoch || dealt.lane != lane {
            continue;
        }
        while picks.len() < n && dealt.next < dealt.rows.len() {
            let pick = dealt.rows[dealt.next]
                .filter(|&(b, _)| !dead.contains(&dealt.origin[b as usize].0))
                .map(|(b, r)| (index, b, r));
            picks.push(pick);
            dealt.next += 1;
        }
        if picks.len() == n {
            break;
        }
    }
    picks
}

/// The rows of `slice` as one batch of `epoch` (0 rows where all were
/// committed before), with where each came from.
fn gather(dealing: &VecDeque<Dealt>, slice: &[Pick], epoch: Epoch) -> Result<OutBatch, ArrowError> {
    let picked: Vec<Picked<'_>> = slice
        .iter()
        .flatten()
        .map(|&(d, b, r)| {
            let dealt = &dealing[d];
            (&dealt.batches[b as usize], dealt.origin[b as usize], r)
        })
        .collect();
    if let Some(out) = super::dealt::gather(&picked, epoch)? {
        return Ok(out);
    }
    let schema = dealing
        .iter()
        .find_map(|d| d.batches.first())
        .map(RecordBatch::schema)
        .ok_or_else(|| ArrowError::InvalidArgumentError("a step without rows".into()))?;
    Ok(OutBatch {
        data: RecordBatch::new_empty(schema),
        epoch,
        provenance: Provenance::new(),
    })
}
