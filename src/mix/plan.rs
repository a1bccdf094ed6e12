//! How a mixed job's splits become tasks: cut into windows of rows small
//! enough that the sources' tasks interleave finely, passed over as often as
//! `--epoch-rows` asks of each source, and interleaved in each epoch's order
//! by each source's pace (see [`crate::queue::Interleave`]).
//!
//! A window is a quarter of a batch (at least [`MIN_TASK_ROWS`] rows), so a
//! window of ten batches holds some forty tasks and each source's share of it
//! is within a few points of its weight. Splits whose rows are not known
//! (text files) or that a `--filter` reads stay whole (a window of a
//! filtered split would read the rows before it again to find its start);
//! with `--epoch-rows` a filtered split's rows are those its filter keeps,
//! counted when the job is planned ([`super::count_kept`]).

use connectors::Split;

use super::{MixError, Mixed};
use crate::config::MixConfig;
use crate::protocol::epoch_rows::EpochRows;
use crate::queue::Interleave;
use crate::state::master_state::JobRecord;

/// The fewest rows of a window.
pub const MIN_TASK_ROWS: u64 = 64;

/// The rows of a window for batches of `batch_size` rows: a quarter of one.
/// (`sluice master`, which does not know its workers' batches, cuts windows
/// of [`MASTER_TASK_ROWS`].)
pub fn task_rows(batch_size: usize) -> u64 {
    (batch_size as u64 / 4).max(MIN_TASK_ROWS)
}

/// The rows of a window that `sluice master` cuts: a quarter of a batch of
/// 1,024 rows.
pub const MASTER_TASK_ROWS: u64 = 256;

/// Rows taken for a split whose rows are not known, per byte of it: an
/// estimate only its place in the interleaving depends on.
const BYTES_PER_ROW: u64 = 64;

/// Makes `job` (built on the combined dataset) the mixed job of `mix`: every
/// source's plan, names and column, its splits cut and passed over, the rows
/// each epoch takes, and the interleaving of its queue; windows hold
/// `task_rows` rows.
pub fn apply(
    job: &mut JobRecord,
    mixed: &Mixed,
    mix: &MixConfig,
    task_rows: u64,
) -> Result<(), MixError> {
    job.spec.sources = mixed.urls.clone();
    let plan = &mut job.spec.plan;
    plan.sources = mixed.plans.clone();
    plan.source_names = mix.sources.iter().map(|s| s.name.clone()).collect();
    plan.source_column = mix.source_column.clone();
    let filtered = |s: &Split| {
        mixed
            .plans
            .get(s.source as usize)
            .is_some_and(|p| p.filter.is_some())
    };
    let splits: Vec<Split> = std::mem::take(&mut job.spec.splits)
        .into_iter()
        .flat_map(|s| {
            if filtered(&s) {
                vec![s]
            } else {
                windows(s, task_rows)
            }
        })
        .collect();
    let count = mix.sources.len();
    let (splits, passes) = match mix.epoch_rows {
        Some(rows) => {
            let (splits, plan) = passes(splits, mix, rows, job.queue.seed)?;
            job.spec.select.epoch_rows = Some(plan);
            (splits, true)
        }
        None => (splits, false),
    };
    job.queue.interleave = Some(interleave(&splits, mix, count, passes));
    job.spec.splits = splits;
    Ok(())
}

/// `split` cut into windows of `rows` rows (the last may be longer, by less
/// than half a window); whole when its rows are not known.
fn windows(split: Split, rows: u64) -> Vec<Split> {
    let Some(total) = split.rows else {
        return vec![split];
    };
    if total < rows * 2 || split.window.is_some() {
        return vec![split];
    }
    let count = (total + rows / 2) / rows;
    (0..count)
        .map(|i| {
            let start = i * rows;
            let end = if i + 1 == count { total } else { start + rows };
            Split {
                rows: Some(end - start),
                window: Some((start, end)),
                ..split.clone()
            }
        })
        .collect()
}

/// The splits of every pass over each source that `--epoch-rows rows` asks
/// for, and which rows of each an epoch takes.
fn passes(
    splits: Vec<Split>,
    mix: &MixConfig,
    rows: u64,
    seed: u64,
) -> Result<(Vec<Split>, EpochRows), MixError> {
    let shares = mix.shares();
    let mut plan = EpochRows {
        seed,
        ..EpochRows::default()
    };
    let mut out = Vec::new();
    for (index, source) in mix.sources.iter().enumerate() {
        let own: Vec<&Split> = splits
            .iter()
            .filter(|s| s.source as usize == index)
            .collect();
        let mut firsts = Vec::with_capacity(own.len());
        let mut have = 0u64;
        for split in &own {
            let Some(n) = split.rows else {
                // Found when the sources were opened (`super::finish`),
                // the file shown whole; kept for a plan made otherwise.
                return Err(MixError::UnknownRows {
                    name: source.name.clone(),
                    path: split.path.clone(),
                });
            };
            firsts.push(have);
            have += n;
        }
        let share = shares.get(index).copied().unwrap_or_default();
        let taken = (rows as f64 * share).round() as u64;
        let count = if have == 0 {
            1
        } else {
            taken.div_ceil(have).max(1)
        };
        let source_index = u32::try_from(index).unwrap_or(u32::MAX);
        for pass in 0..count {
            let pass = u32::try_from(pass).unwrap_or(u32::MAX);
            for (split, first) in own.iter().zip(&firsts) {
                out.push((*split).clone());
                plan.splits.push((source_index, *first, pass));
            }
        }
        plan.sources.push((have, taken));
    }
    Ok((out, plan))
}

/// How the splits' sources interleave: with `--epoch-rows` (`passes`) each
/// source spreads over the whole epoch (its pace is its rows read, of which
/// it trains its share); without, each source goes at the pace of its weight.
fn interleave(splits: &[Split], mix: &MixConfig, count: usize, passes: bool) -> Interleave {
    let rows: Vec<u64> = splits
        .iter()
        .map(|s| s.rows.unwrap_or(s.size / BYTES_PER_ROW).max(1))
        .collect();
    let source: Vec<u32> = splits.iter().map(|s| s.source).collect();
    let pace: Vec<u64> = if passes {
        let mut read = vec![0u64; count];
        for (s, r) in source.iter().zip(&rows) {
            if let Some(total) = read.get_mut(*s as usize) {
                *total += r;
            }
        }
        read.into_iter().map(|r| r.max(1)).collect()
    } else {
        mix.relative_weights()
            .into_iter()
            .map(|r| (r * 1_000_000.0).round().max(1.0) as u64)
            .collect()
    };
    Interleave { source, rows, pace }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_is_cut_into_windows_of_its_rows() {
        let split: Split = serde_json::from_str(
            r#"{"path":"p","size":1,"format":"parquet","codec":"none",
            "partition_dir":"","partition_values":[],"range":"whole","rows":1000}"#,
        )
        .expect("a split");
        let cut = windows(split, 300);
        let spans: Vec<_> = cut.iter().map(|s| s.window).collect();
        assert_eq!(spans, [Some((0, 300)), Some((300, 600)), Some((600, 1000))]);
        assert_eq!(cut.iter().filter_map(|s| s.rows).sum::<u64>(), 1000);
    }
}
