//! A job spec: what the master hands every worker (the dataset, its splits and
//! how to read them). Written once to the state location so that a restarted
//! master serves exactly the same splits.

use connectors::{ReadPlan, Split};
use serde::{Deserialize, Serialize};

/// Everything a worker needs besides its own trainer options.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSpec {
    /// The dataset URL (opened by each worker with its own credentials).
    pub url: String,
    /// The splits, indexed by the queue's split numbers.
    pub splits: Vec<Split>,
    /// How to read every split.
    pub plan: ReadPlan,
    /// Epochs of the job: the queue's, as workers see them (the spec is
    /// built with its queue, `state::JobRecord::build`).
    pub epochs: u32,
    /// Seed of task order, the queue's (workers seed their shuffle buffers
    /// from it).
    pub seed: u64,
    /// The master's lease timeout, as served to workers (not recorded in the
    /// state: the queue's settings hold it there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_timeout_ms: Option<u64>,
    /// The last complete checkpoint of the worker that asked, by its name
    /// (served to workers, not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_checkpoint: Option<String>,
    /// The Delta or Iceberg table version the splits were planned from, when
    /// the dataset is a table: recorded with the job so that a resumed job
    /// reports (and reads) the version it started on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<connectors::TableInfo>,
    /// A followed job (`--follow`): where it was in its source when it
    /// started (the splits above are what it found there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<super::follow::FollowPosition>,
    /// The rows trained (`--split`, `--sample`, `--limit`); all when absent.
    #[serde(default, skip_serializing_if = "super::select::Selection::keeps_all")]
    pub select: super::select::Selection,
    /// The table by name the job reads, when its source was one: a worker
    /// asks that catalog itself for the storage credentials it vends (the
    /// master never hands out its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_table: Option<CatalogSource>,
    /// The URLs of every source of a job that mixes several, by the index
    /// a split names (`url` is the first); empty for one source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// `--global-batch-size` of a master's job: every worker cuts the same
    /// global batches, each its ranks' slices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalSpec>,
}

/// The global batches of a master's job, as its workers are told of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalSpec {
    /// Rows per step across the world (`G`).
    pub size: u64,
    /// Rows of a window of the global shuffle (`--shuffle-window`).
    pub window: u64,
    /// Ranks of the world (`--world-size`), as the master serves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<u32>,
    /// The lanes the job's rows are cut into ([`crate::queue::Lanes`]),
    /// as the master serves them; `None`: one lane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lanes: Option<crate::queue::Lanes>,
}

/// A table by name, as workers are told of it: no credential, no path of
/// the master's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogSource {
    /// The catalog's URI (without any user or password it was given with).
    pub catalog: String,
    /// The table's full name.
    pub name: String,
    /// Whether the catalog vended storage credentials for it to the master.
    pub vended: bool,
}
