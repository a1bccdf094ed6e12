//! The steps of an epoch on one trainer process, when they are known before
//! the epoch starts: every task's row count is known from the files' footers,
//! and nothing decided at read time (a `--filter` on data columns, a selection by
//! key, bytes per batch, a shuffle window's cut) changes which rows there are
//! or where batches end. Trainers get the number as `sluice.epoch_steps` on
//! every batch, or `sluice.epoch_steps_unknown` saying why not.

use connectors::read::ReadPlan;
use connectors::Split;

use super::pipeline_config::PipelineConfig;

/// The steps of each epoch on one process, or why they are not known.
pub type EpochSteps = Result<u64, String>;

/// The steps of an epoch of `splits` read by `plan` under `config`, on each
/// of this worker's processes.
pub fn epoch_steps(splits: &[Split], plan: &ReadPlan, config: &PipelineConfig) -> EpochSteps {
    layout_known(plan, config)?;
    let mut rows = 0u64;
    for split in splits {
        let Some(n) = split.rows else {
            return Err(format!(
                "{}: its rows are counted only as it is read ({:?} files record no row count)",
                split.path, split.format
            ));
        };
        rows += n;
    }
    if let Some((at, kept)) = config.select.limit {
        let before: u64 = splits.iter().take(at as usize).filter_map(|s| s.rows).sum();
        rows = rows.min(before + kept);
    }
    if let (Some(size), Some(lanes)) = (config.global_batch_size, &config.lanes) {
        return Ok(lane_steps(&lanes.lane_rows(), size, config.drop_last));
    }
    if let Some(size) = config.global_batch_size {
        // Steps of G rows across the devices, the last one short (or dropped).
        let size = size.max(1);
        return Ok(if config.drop_last {
            rows / size
        } else {
            rows.div_ceil(size)
        });
    }
    Ok(steps_of(
        rows,
        config.batch_size as u64,
        config.devices as u64,
        config.lockstep,
        config.drop_last,
    ))
}

/// Steps of `size` rows taking `size / L` rows of each of `L` lanes of
/// `lane_rows` rows: as many as the longest lane gives (the last ones short),
/// or with `drop_last` the full ones only, as many as the shortest gives.
fn lane_steps(lane_rows: &[u64], size: u64, drop_last: bool) -> u64 {
    let chunk = (size / (lane_rows.len() as u64).max(1)).max(1);
    let steps = lane_rows.iter().map(|&rows| {
        if drop_last {
            rows / chunk
        } else {
            rows.div_ceil(chunk)
        }
    });
    if drop_last {
        steps.min().unwrap_or(0)
    } else {
        steps.max().unwrap_or(0)
    }
}

/// Ok when nothing but the rows' count decides the steps; else why not.
fn layout_known(plan: &ReadPlan, config: &PipelineConfig) -> Result<(), String> {
    if config.follow {
        return Err("the job follows its source (--follow): its data has no end".into());
    }
    if !config.only_worker && config.world.is_none() {
        return Err("the workers of a master share an epoch's tasks as they lease them".into());
    }
    let global = config.global_batch_size.is_some();
    if config.devices > 1 && !config.lockstep && !global {
        return Err(format!(
            "{} devices without --lockstep take batches as each is free",
            config.devices
        ));
    }
    if config.batch_bytes.is_some() {
        return Err("--batch-bytes cuts batches by their bytes as they are read".into());
    }
    if config.shuffle_window.is_some() && !global {
        return Err(
            "--shuffle global without --global-batch-size cuts each window's rows into batches of its own"
                .into(),
        );
    }
    if !plan.sources.is_empty() && config.lanes.is_none() {
        return Err("a job that mixes several sources takes their rows by weight".into());
    }
    let select = &config.select;
    if select.range.is_some() || select.sample.is_some() || select.epoch_rows.is_some() {
        return Err(
            "--split, --sample and --epoch-rows keep rows by their keys as they are read".into(),
        );
    }
    if let Some(filter) = &plan.filter {
        // A filter on partition columns only left out the files of the
        // partitions it rejects, and keeps every row of the others.
        let on_partitions = filter.columns().iter().all(|c| {
            plan.partition_fields
                .iter()
                .any(|f| f.name().eq_ignore_ascii_case(c))
        });
        if !on_partitions {
            return Err(format!(
                "--filter {:?}: the rows it keeps are counted only as they are read",
                filter.as_str()
            ));
        }
    }
    Ok(())
}

/// The steps of an epoch of `rows` rows in batches of `batch_size` over
/// `devices` processes: without lockstep (one process) every batch is a step,
/// the last one short; under lockstep as [`super::stepper`] cuts them (full
/// steps, then the rows left split evenly as a step of their own, or folded
/// into the last full step when fewer than the devices, or dropped with
/// `--drop-last`).
pub fn steps_of(rows: u64, batch_size: u64, devices: u64, lockstep: bool, drop_last: bool) -> u64 {
    let batch_size = batch_size.max(1);
    if !lockstep {
        return rows.div_ceil(batch_size);
    }
    let devices = devices.max(1);
    let full = rows / batch_size;
    let steps = full / devices;
    let rest = rows - steps * devices * batch_size;
    match (drop_last, steps, rest) {
        (true, k, _) | (false, k, 0) => k,
        (false, k, r) if r >= devices || k == 0 => k + 1,
        (false, k, _) => k,
    }
}

#[cfg(test)]
mod tests {
    use super::{lane_steps, steps_of};

    #[test]
    fn lanes_of_unequal_rows_step_as_long_as_the_longest_or_the_shortest_full() {
        // G = 8 over 4 lanes: 2 rows of each lane per step.
        assert_eq!(lane_steps(&[4, 4, 4, 4], 8, false), 2);
        assert_eq!(lane_steps(&[3, 4, 4, 5], 8, false), 3);
        assert_eq!(lane_steps(&[3, 4, 4, 5], 8, true), 1);
        assert_eq!(lane_steps(&[], 8, false), 0);
    }

    #[test]
    fn one_process_counts_its_short_batch() {
        assert_eq!(steps_of(1200, 100, 1, false, false), 12);
        assert_eq!(steps_of(240, 100, 1, false, false), 3);
        assert_eq!(steps_of(0, 100, 1, false, false), 0);
    }

    #[test]
    fn lockstep_splits_or_folds_or_drops_the_rest() {
        // 2 full steps of 2 x 100, then 50 rows split over 2 devices.
        assert_eq!(steps_of(450, 100, 2, true, false), 3);
        assert_eq!(steps_of(450, 100, 2, true, true), 2);
        // One row left for 2 devices: folded into the last full step.
        assert_eq!(steps_of(401, 100, 2, true, false), 2);
        assert_eq!(steps_of(400, 100, 2, true, false), 2);
        // Fewer rows than a step: one step, split evenly.
        assert_eq!(steps_of(3, 100, 2, true, false), 1);
        assert_eq!(steps_of(3, 100, 2, true, true), 0);
    }
}
