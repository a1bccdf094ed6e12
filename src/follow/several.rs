//! Following several sources at once (`sluice train A B --weights 3,1
//! --follow`): each source is followed as it would be alone (its own
//! follower, position, `where` and `filter`), and what any of them commits
//! becomes tasks of the one job, each split naming its source. What one
//! look finds in several sources is interleaved by their weights; the job's
//! position is every source's ([`FollowPosition::Sources`]), so a resumed
//! job follows each source on from where it was.

use std::collections::BTreeSet;
use std::time::SystemTime;

use connectors::{Dataset, DatasetOptions, Split};
use tracing::warn;

use super::dirs::DirWatch;
use super::{first_dataset, nothing_yet, Ends, First, FollowError, Follower, Found, Watch};
use crate::config::{FollowConfig, MixConfig};
use crate::protocol::follow::{source_position_of, FollowPosition};
use crate::queue::Interleave;

/// Rows taken for a split whose rows are not known, per byte of it (its
/// place in the interleaving only).
const BYTES_PER_ROW: u64 = 64;

/// What the start of a followed job of several sources found.
pub enum FirstOfAll {
    /// Each source's first data, in the order of the sources, and where
    /// the job stands in each.
    Found(Vec<Dataset>, FollowPosition),
    /// `--idle-exit` or `--follow-until` ended the wait for a source.
    Ended,
}

/// Waits for the first data of every source of `mix` in turn (see
/// [`first_dataset`]): the job starts once each holds something.
pub async fn first_datasets(
    mix: &MixConfig,
    options: &DatasetOptions,
    config: &FollowConfig,
) -> Result<FirstOfAll, connectors::Error> {
    let mut datasets = Vec::with_capacity(mix.sources.len());
    let mut each = Vec::with_capacity(mix.sources.len());
    for source in &mix.sources {
        let location = connectors::store::open(&source.url)?;
        let own = source.options(options)?;
        match first_dataset(&location, &own, config, None).await? {
            First::Found(dataset, position) => {
                datasets.push(dataset);
                each.push(position);
            }
            First::Ended => return Ok(FirstOfAll::Ended),
        }
    }
    Ok(FirstOfAll::Found(
        datasets,
        FollowPosition::Sources { each },
    ))
}

impl Follower {
    /// The follower of a followed job of the sources of `mix` where its
    /// state left it, as [`Follower::resume`] for one source.
    pub async fn resume_several(
        state: &crate::state::MasterState,
        mix: &MixConfig,
        options: &DatasetOptions,
        config: FollowConfig,
        started: SystemTime,
    ) -> Result<(Follower, u32, Ends), connectors::Error> {
        let mut several = Vec::with_capacity(mix.sources.len());
        let mut positions = Vec::with_capacity(mix.sources.len());
        let grown = state.queue().grown();
        for (index, source) in mix.sources.iter().enumerate() {
            let (position, taken) = source_position_of(state.spec.follow.as_ref(), grown, index);
            let location = connectors::store::open(&source.url)?;
            let own = source.options(options)?;
            let plan = state
                .spec
                .plan
                .of_source(u32::try_from(index).unwrap_or(u32::MAX));
            several.push(Follower::new(location, own, plan, config, &position, taken).await?);
            positions.push(position);
        }
        let Some(first) = several.first() else {
            return Err(connectors::Error::Layout {
                path: String::new(),
                reason: "several sources: none given".to_string(),
            });
        };
        let follower = Follower {
            location: first.location.clone(),
            options: options.clone(),
            plan: state.spec.plan.clone(),
            config,
            watch: Watch::Partitions(DirWatch::new(BTreeSet::new())),
            local: None,
            unknown_columns: BTreeSet::new(),
            table: None,
            several,
            positions,
            weights: mix.sources.iter().map(|s| s.weight).collect(),
        };
        let ends = Ends {
            until: config.until.map(|u| u.deadline(started)),
            idle_exit: config.idle_exit,
        };
        Ok((follower, state.spec.splits.len() as u32, ends))
    }

    /// Looks at every source once: what any committed since its position,
    /// each split naming its source, interleaved by the sources' weights.
    /// A source that cannot be read now is skipped until the next look.
    pub(super) async fn poll_several(&mut self) -> Result<Option<Found>, FollowError> {
        let mut splits: Vec<Split> = Vec::new();
        let mut committed_ms: Option<i64> = None;
        let mut failed = None;
        for (index, follower) in self.several.iter_mut().enumerate() {
            let found = match Box::pin(follower.poll()).await {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(FollowError::Connector { source: e, .. })
                    if e.is_transient() || nothing_yet(&e) =>
                {
                    warn!(source = %follower.location.url(), error = %connectors::Report(&e), "following: cannot read this source now; trying again");
                    continue;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let source = u32::try_from(index).unwrap_or(u32::MAX);
            splits.extend(found.splits.into_iter().map(|mut s| {
                s.source = source;
                s
            }));
            if let Some(position) = self.positions.get_mut(index) {
                *position = found.position;
            }
            committed_ms = committed_ms.max(found.committed_ms);
        }
        if splits.is_empty() {
            return match failed {
                Some(e) => Err(e),
                None => Ok(None),
            };
        }
        if let Some(e) = failed {
            // What the other sources gave is taken; the failure comes back
            // at the next look.
            warn!(error = %connectors::Report(&e), "following: a source failed; taking what the others committed first");
        }
        Ok(Some(Found {
            splits: interleaved(splits, &self.weights),
            position: FollowPosition::Sources {
                each: self.positions.clone(),
            },
            committed_ms,
        }))
    }
}

/// `splits` of several sources in an order where each source goes at the
/// pace of its weight (see [`Interleave`]).
fn interleaved(splits: Vec<Split>, weights: &[f64]) -> Vec<Split> {
    let most = weights
        .iter()
        .copied()
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let mix = Interleave {
        source: splits.iter().map(|s| s.source).collect(),
        rows: splits
            .iter()
            .map(|s| s.rows.unwrap_or(s.size / BYTES_PER_ROW).max(1))
            .collect(),
        pace: weights
            .iter()
            .map(|w| ((w / most) * 1_000_000.0).round().max(1.0) as u64)
            .collect(),
    };
    let order = mix.arrange((0..u32::try_from(splits.len()).unwrap_or(u32::MAX)).collect());
    let mut slots: Vec<Option<Split>> = splits.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|i| slots.get_mut(i as usize).and_then(Option::take))
        .collect()
}
