//! A job of `--global-batch-size` cut into lanes ([`crate::queue::Lanes`]):
//! its splits cut where a lane ends and where a lane's window would
//! overflow, and the lanes given to its queue, whose epochs lease in their
//! windows' sequence.
//!
//! Lanes need every row known before the job starts: a job whose rows are
//! counted only as they are read (text files), kept by a row filter or a
//! `--split`/`--sample`/`--limit`/`--epoch-rows`, or followed keeps one lane
//! (the epoch's windows in its seeded task order). A job mixing several
//! sources cuts each source's rows into the lanes, so that every lane holds
//! its share of each, and interleaves them within each lane by weight.

use connectors::Split;

use super::PlanError;
use crate::protocol::spec::GlobalSpec;
use crate::queue::{cut_lanes, lane_count, Interleave, Lanes};
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
        && spec.plan.sources.iter().all(|p| p.filter.is_none())
        && spec.follow.is_none()
        && spec.select.keeps_all()
        && spec
            .splits
            .iter()
            .all(|s| s.rows.is_some() && (s.window.is_none() || !spec.plan.sources.is_empty()));
    let count = lane_count(global.size);
    if !whole || count <= 1 || spec.splits.is_empty() {
        return match global.world {
            Some(world) if world > 1 => Err(PlanError::World {
                reason: format!(
                    "{world} ranks cannot share a job whose rows are not all known before it starts \
                     (a row filter, --split, --sample, --limit or --epoch-rows, --follow, or files \
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
    let lanes = match job.queue.interleave.take() {
        Some(mix) => cut_mixed(&mut job.spec.splits, count, window_rows, mix),
        None => cut_one(&mut job.spec.splits, count, window_rows),
    };
    tracing::debug!(
        lanes = count,
        tasks = job.spec.splits.len(),
        window_rows,
        "global batches read in lanes"
    );
    job.queue.interleave = lanes.mix.clone();
    job.queue.lanes = Some(lanes);
    Ok(())
}

/// `splits` cut into `count` lanes of their rows in planning order.
fn cut_one(splits: &mut Vec<Split>, count: u32, window_rows: u64) -> Lanes {
    let rows: Vec<u64> = splits.iter().map(|s| s.rows.unwrap_or(0)).collect();
    let cut = cut_lanes(&rows, count, window_rows);
    *splits = cut
        .iter()
        .filter_map(|&(split, start, end)| piece(splits.get(split as usize)?, start, end))
        .collect();
    Lanes {
        count,
        window_rows,
        rows: cut.iter().map(|&(_, start, end)| end - start).collect(),
        group: cut.iter().map(|&(split, _, _)| split).collect(),
        ..Lanes::default()
    }
}

/// The splits of a job mixing several sources cut source by source, each
/// source's rows (in planning order) into `count` lanes; the tasks listed
/// lane by lane, and within a lane source by source, each lane's sources
/// taking turns by `mix`'s paces.
fn cut_mixed(splits: &mut Vec<Split>, count: u32, window_rows: u64, mix: Interleave) -> Lanes {
    let sources = splits.iter().map(|s| s.source).max().map_or(0, |m| m + 1);
    // (lane, source, the piece's split as planned, its rows [start, end))
    let mut pieces: Vec<(u32, u32, u32, u64, u64)> = Vec::new();
    for source in 0..sources {
        let own: Vec<u32> = (0..splits.len() as u32)
            .filter(|&i| splits[i as usize].source == source)
            .collect();
        let rows: Vec<u64> = own
            .iter()
            .map(|&i| splits[i as usize].rows.unwrap_or(0))
            .collect();
        let cut = cut_lanes(&rows, count, window_rows);
        let of_source = Lanes {
            count,
            window_rows,
            rows: cut.iter().map(|&(_, start, end)| end - start).collect(),
            ..Lanes::default()
        };
        for (&(at, start, end), lane) in cut.iter().zip(of_source.lane_of()) {
            pieces.push((lane, source, own[at as usize], start, end));
        }
    }
    pieces.sort_by_key(|&(lane, source, _, _, _)| (lane, source));
    let lanes = Lanes {
        count,
        window_rows,
        rows: pieces.iter().map(|&(_, _, _, s, e)| e - s).collect(),
        group: pieces.iter().map(|&(_, _, split, _, _)| split).collect(),
        lane: pieces.iter().map(|&(lane, _, _, _, _)| lane).collect(),
        mix: Some(Interleave {
            source: pieces.iter().map(|&(_, source, _, _, _)| source).collect(),
            rows: pieces
                .iter()
                .map(|&(_, _, _, s, e)| (e - s).max(1))
                .collect(),
            pace: mix.pace,
        }),
    };
    *splits = pieces
        .iter()
        .filter_map(|&(_, _, split, start, end)| piece(splits.get(split as usize)?, start, end))
        .collect();
    lanes
}

/// Rows `[start, end)` of `split` (of its window, where it has one): the
/// split itself when they are all of it.
fn piece(split: &Split, start: u64, end: u64) -> Option<Split> {
    let rows = split.rows?;
    let base = split.window.map_or(0, |(first, _)| first);
    Some(if start == 0 && end == rows {
        split.clone()
    } else {
        Split {
            rows: Some(end - start),
            window: Some((base + start, base + end)),
            ..split.clone()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epoch::Epoch;

    fn split(source: u32, rows: u64) -> Split {
        let mut split: Split = serde_json::from_value(serde_json::json!({
            "path": format!("s{source}"), "size": 1, "format": "parquet", "codec": "none",
            "partition_dir": "", "partition_values": [], "range": "whole", "rows": rows,
        }))
        .expect("a split");
        split.source = source;
        split
    }

    #[test]
    fn each_lane_of_a_mixed_job_holds_its_share_of_every_source_interleaved_by_weight() {
        // Source 0: 3,000 rows (its first split a window of a larger file),
        // source 1: 1,000, weighted 3 to 1; 4 lanes.
        let mut first = split(0, 1000);
        first.window = Some((500, 1500));
        let mut splits = vec![first];
        splits.extend((0..8).map(|_| split(0, 250)));
        splits.extend((0..4).map(|_| split(1, 250)));
        let mix = Interleave {
            source: splits.iter().map(|s| s.source).collect(),
            rows: splits.iter().map(|s| s.rows.unwrap_or(0)).collect(),
            pace: vec![3, 1],
        };
        let lanes = cut_mixed(&mut splits, 4, 100, mix);
        assert_eq!(lanes.lane_rows(), vec![1000; 4]);
        let of = |lane: u32, source: u32| -> u64 {
            (0..splits.len())
                .filter(|&t| lanes.lane[t] == lane && splits[t].source == source)
                .map(|t| lanes.rows[t])
                .sum()
        };
        for lane in 0..4u32 {
            assert_eq!((of(lane, 0), of(lane, 1)), (750, 250), "lane {lane}");
        }
        // A piece of a window counts from the window's start.
        let cut: Vec<_> = splits.iter().filter_map(|s| s.window).collect();
        assert_eq!(cut, [(500, 1250), (1250, 1500)]);
        // Within each lane the sources take turns: source 1's task comes
        // between source 0's, in every epoch (lane 0's source 0 is one task).
        for epoch in [Epoch(0), Epoch(1)] {
            let order = lanes.order(7, epoch);
            for lane in 1..4u32 {
                let sources: Vec<u32> = order
                    .iter()
                    .filter(|&&t| lanes.lane[t as usize] == lane)
                    .map(|&t| splits[t as usize].source)
                    .collect();
                let at = sources.iter().position(|&s| s == 1);
                assert!(
                    at.is_some_and(|i| i > 0 && i + 1 < sources.len()),
                    "lane {lane}: {sources:?}"
                );
            }
        }
    }
}
