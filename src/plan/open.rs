//! A job's sources opened: one dataset, several mixed by weight, or the
//! first committed data of a followed source (or of each of several).

use connectors::{Dataset, Location};

use super::{warn_not_read, JobKind, PlanError, PlanRequest};
use crate::follow::several::{first_datasets, FirstOfAll};
use crate::follow::First;
use crate::protocol::follow::FollowPosition;

/// What a job's sources hold once opened.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per job
pub enum Sources {
    /// The data to plan the job of.
    Found {
        /// The sources' splits, as one dataset.
        dataset: Dataset,
        /// Several sources: each one's read plan and URL.
        mixed: Option<crate::mix::Mixed>,
        /// A followed job: where the data stands in its source(s).
        position: Option<FollowPosition>,
    },
    /// A followed source held nothing until `--idle-exit` or
    /// `--follow-until` ended the wait for it: the job has nothing to do.
    Ended,
}

impl PlanRequest {
    /// Opens the job's sources at `location` (the first source's): a
    /// followed job waits for their first committed data; output that is
    /// not followed is checked finished ([`PlanRequest::check_finished`]).
    /// Output waited for by `--wait-success` is opened by the caller.
    pub async fn open(&self, location: &Location) -> Result<Sources, PlanError> {
        let columns = self.columns.as_deref();
        match (&self.follow, &self.mix) {
            (Some(follow), Some(mix)) => {
                let FirstOfAll::Found(datasets, position) =
                    first_datasets(mix, &self.dataset, follow)
                        .await
                        .map_err(PlanError::read("wait for the sources' first data"))?
                else {
                    return Ok(Sources::Ended);
                };
                if self.kind == JobKind::Train {
                    warn_not_read(&datasets);
                }
                let (dataset, mixed) = self.mix_opened(mix, datasets).await?;
                Ok(Sources::Found {
                    dataset,
                    mixed: Some(mixed),
                    position: Some(position),
                })
            }
            (Some(follow), None) => {
                let first = crate::follow::first_dataset(
                    location,
                    &self.dataset,
                    follow,
                    self.table.as_ref(),
                )
                .await
                .map_err(PlanError::read("wait for the source's first data"))?;
                let First::Found(dataset, position) = first else {
                    return Ok(Sources::Ended);
                };
                if self.kind == JobKind::Train {
                    warn_not_read(std::slice::from_ref(&dataset));
                }
                Ok(Sources::Found {
                    dataset,
                    mixed: None,
                    position: Some(position),
                })
            }
            (None, Some(mix)) => {
                let (dataset, mixed) =
                    crate::mix::open(mix, &self.dataset, columns, self.batch_rows, |dataset| {
                        self.check_finished(dataset)
                    })
                    .await?;
                Ok(Sources::Found {
                    dataset,
                    mixed: Some(mixed),
                    position: None,
                })
            }
            (None, None) => {
                let dataset = Dataset::open(location.clone(), self.dataset.clone())
                    .await
                    .map_err(PlanError::read("open the source"))?;
                self.check_finished(&dataset)?;
                Ok(Sources::Found {
                    dataset,
                    mixed: None,
                    position: None,
                })
            }
        }
    }

    /// The sources of `mix` opened as `datasets` (in the order of the
    /// sources), made one dataset: their columns checked to agree, each
    /// one's filter bound to its own (see [`crate::mix::finish`]).
    pub async fn mix_opened(
        &self,
        mix: &crate::config::MixConfig,
        datasets: Vec<Dataset>,
    ) -> Result<(Dataset, crate::mix::Mixed), PlanError> {
        let columns = self.columns.as_deref();
        Ok(crate::mix::finish(mix, datasets, columns, self.batch_rows).await?)
    }
}
