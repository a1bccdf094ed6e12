//! A job of `--global-batch-size` cut into lanes ([`crate::queue::Lanes`]):
//! its splits cut where a lane ends and where a lane's window would
//! overflow, and the lanes given to its queue, whose epochs lease in their
//! windows' sequence.
//!
//! Lanes need every row known before the job starts: a job whose rows are
//! counted only as they are read (text files), kept by a row filter or a
//! `--split`/`--sample`/`--limit`, mixed from several sources or followed
//! keeps one lane (the epoch's windows in its seeded task order).

use connectors::Split;

use super::PlanError;
use crate::protocol::spec::GlobalSpec;
use crate::queue::{cut_lanes, lane_count, Lanes};
use crate::state::JobRecord;

/// Rows per step and per window of a job of `--global-batch-size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalBatches {
    /// Rows per step (`G`).
    pub size: u64,
    /// Rows per window of `--shuffle global`.
    pub window: u64,
    /// Ranks of a master's world (`--world-size`); `None` for `sluice train`.
    pub world: Option<u32>,
}

/// Cuts `job` into the lanes of `global` where its rows allow (see the
/// module docs); leaves it as it is where they do not.
pub(super) fn apply(job: &mut JobRecord, global: &GlobalBatches) -> Result<(), PlanError> {
    if global.world.is_some() {
        job.spec.global = Some(GlobalSpec {
            size: global.size,
            window: global.window,
            world: None,
            lanes: None,
        });
    }
    let spec = &job.spec;
    let whole = spec.plan.filter.is_none()
        && spec.plan.sources.is_empty()
        && spec.follow.is_none()
        && spec.select.keeps_all()
        && spec
            .splits
            .iter()
            .all(|s| s.rows.is_some() && s.window.is_none());
    let count = lane_count(global.size);
    if !whole || count <= 1 || spec.splits.is_empty() {
        return match global.world {
            Some(world) if world > 1 => Err(PlanError::World {
                reason: format!(
                    "{world} ranks cannot share a job whose rows are not all known before it starts \
                     (a row filter, --split, --sample or --limit, several sources, --follow, or files \
                     that record no row count): one worker reads every row; use --world-size 1"
                ),
            }),
            _ => Ok(()),
        };
    }
    if let Some(world) = global.world.filter(|w| count % w != 0) {
        return Err(PlanError::World {
            reason: format!(
                "{world} ranks cannot share the {count} lanes a global batch of {} rows is cut into; \
                 use a world size that divides {count}",
                global.size
            ),
        });
    }
    let window_rows = (global.window / u64::from(count)).max(1);
    let rows: Vec<u64> = spec.splits.iter().map(|s| s.rows.unwrap_or(0)).collect();
    let cut = cut_lanes(&rows, count, window_rows);
    let splits = cut
        .iter()
        .filter_map(|&(split, start, end)| piece(spec.splits.get(split as usize)?, start, end))
        .collect::<Vec<Split>>();
    job.queue.lanes = Some(Lanes {
        count,
        window_rows,
        rows: cut.iter().map(|&(_, start, end)| end - start).collect(),
        group: cut.iter().map(|&(split, _, _)| split).collect(),
    });
    tracing::debug!(
        lanes = count,
        tasks = splits.len(),
        window_rows,
        "global batches read in lanes"
    );
    job.spec.splits = splits;
    Ok(())
}

/// Rows `[start, end)` of `split`: the split itself when they are all of it.
fn piece(split: &Split, start: u64, end: u64) -> Option<Split> {
    let rows = split.rows?;
    Some(if start == 0 && end == rows {
        split.clone()
    } else {
        Split {
            rows: Some(end - start),
            window: Some((start, end)),
            ..split.clone()
        }
    })
}
