//! A followed job's position in its source (`--follow`), and the record of
//! each batch of splits the job took while it ran: what the journal keeps,
//! so that a restarted job serves the same splits and resumes following
//! where it was.

use connectors::Split;
use serde::{Deserialize, Serialize};

use crate::queue::Growth;

/// Where a followed job is in its source: what it has taken so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FollowPosition {
    /// A Spark Structured Streaming file sink: the newest batch of its log taken.
    Sink {
        /// The batch id (`None`: no batch committed yet).
        batch: Option<u64>,
    },
    /// A Delta table (version) or an Iceberg table (snapshot id).
    Table {
        /// The Delta version or Iceberg snapshot id taken (`None`: none yet).
        version: Option<i64>,
    },
    /// Partition directories of an output directory: the ones taken by
    /// this step (relative paths like `dt=2026-11-29`; the union over the
    /// start and every growth is what the job holds).
    Partitions {
        /// Partition directories taken.
        taken: Vec<String>,
    },
    /// A job that mixes several sources (`sluice train A B --follow`): each
    /// source's position, by the source's index.
    Sources {
        /// Each source's position.
        each: Vec<FollowPosition>,
    },
}

impl FollowPosition {
    /// What a person reads: `batch 12`, `version 7`, `3 partitions`.
    pub fn describe(&self) -> String {
        match self {
            FollowPosition::Sink { batch: Some(b) } => format!("batch {b}"),
            FollowPosition::Sink { batch: None } => "no batch yet".to_string(),
            FollowPosition::Table { version: Some(v) } => format!("version {v}"),
            FollowPosition::Table { version: None } => "no version yet".to_string(),
            FollowPosition::Partitions { taken } => match taken.as_slice() {
                [one] => one.clone(),
                many => format!("{} partitions", many.len()),
            },
            FollowPosition::Sources { each } => each
                .iter()
                .map(FollowPosition::describe)
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// What one growth of a followed job took: journaled with the queue's
/// [`crate::queue::Command::Grow`] as its record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FollowStep {
    /// The splits added, in split order.
    pub splits: Vec<Split>,
    /// Where the job is in its source after this step.
    pub position: FollowPosition,
    /// When the source committed what was taken (milliseconds since the
    /// epoch), when the source says: the time of the sink's log file, the
    /// table's commit, the partition's marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_ms: Option<i64>,
    /// When the job saw it (milliseconds since the epoch).
    pub seen_ms: u64,
    /// Rows taken, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

impl FollowStep {
    /// The step a growth of the queue recorded (`None` for a record this
    /// version cannot read).
    pub fn of(growth: &Growth) -> Option<FollowStep> {
        serde_json::from_value(growth.record.clone()).ok()
    }
}

/// A followed job's position and lag, as the status page, `sluice status
/// --json` and `/metrics` show them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FollowStatus {
    /// The job still takes what its source commits (not closed by
    /// `--follow-until` or `--idle-exit`).
    pub open: bool,
    /// The newest position taken (`batch 12`, `version 7`, `dt=2026-12-01`).
    pub seen: String,
    /// The newest position whose rows are all trained, and every one before it.
    pub trained: Option<String>,
    /// Rows taken and not yet trained (known row counts only).
    pub lag_rows: u64,
    /// How long the oldest untrained step has waited since it was seen
    /// (0 when everything taken is trained).
    pub lag_seconds: f64,
    /// Steps taken while following (batches, versions, partition sets).
    pub steps: usize,
}

/// Where a followed job stands in its source after its start (`start`, the
/// job spec's position) and its growths: the newest position, and every
/// partition directory taken.
pub fn position_of(
    start: Option<&FollowPosition>,
    grown: &[Growth],
) -> (FollowPosition, std::collections::BTreeSet<String>) {
    let mut taken = std::collections::BTreeSet::new();
    let mut position = start
        .cloned()
        .unwrap_or(FollowPosition::Partitions { taken: Vec::new() });
    if let FollowPosition::Partitions { taken: names } = &position {
        taken.extend(names.iter().cloned());
    }
    for growth in grown {
        if let Some(step) = FollowStep::of(growth) {
            if let FollowPosition::Partitions { taken: names } = &step.position {
                taken.extend(names.iter().cloned());
            }
            position = step.position;
        }
    }
    (position, taken)
}

/// [`position_of`] of source `index` of a followed job of several sources
/// (whose positions are [`FollowPosition::Sources`]).
pub fn source_position_of(
    start: Option<&FollowPosition>,
    grown: &[Growth],
    index: usize,
) -> (FollowPosition, std::collections::BTreeSet<String>) {
    let own = |position: &FollowPosition| match position {
        FollowPosition::Sources { each } => each.get(index).cloned(),
        _ => None,
    };
    let start = start.and_then(own);
    let steps: Vec<Growth> = grown
        .iter()
        .filter_map(|growth| {
            let step = FollowStep::of(growth)?;
            let record = serde_json::to_value(FollowStep {
                position: own(&step.position)?,
                ..step
            })
            .ok()?;
            Some(Growth {
                record,
                ..growth.clone()
            })
        })
        .collect();
    position_of(start.as_ref(), &steps)
}
