//! `sluice train`: the single-machine job's flags, filling the options of
//! [`crate::config`] that the job is built from.

use std::path::PathBuf;

use clap::Args;

use crate::config::heading;
use crate::config::train::TrainParts;
use crate::config::{
    CatalogOptions, FollowOptions, KerberosOptions, MixOptions, OptionError, PipelineOptions,
    ReadOptions, SelectOptions, StoreOptions, TrainConfig, TrainOptions, TrainerOptions,
};

/// Arguments of `sluice train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The output directory: a path, file://, hdfs://, s3://, gs:// or az:// URL; with --catalog, a table name (db.table).
    #[arg(help = "The output directory (a path or URL), or a table name", long_help, help_heading = heading::SOURCE, display_order = 0)]
    pub url: String,
    /// More sources, mixed with the first (see --weights, --epoch-rows).
    #[arg(value_name = "URL", help = "More sources, mixed with the first (--weights)", long_help, help_heading = heading::SOURCE, display_order = 1, hide_short_help = true)]
    pub more: Vec<String>,
    /// How several sources are mixed.
    #[command(flatten)]
    pub mix: MixOptions,
    /// The rows trained.
    #[command(flatten)]
    pub select: SelectOptions,
    /// How to read the dataset.
    #[command(flatten)]
    pub read: ReadOptions,
    /// The pipeline between readers and trainers.
    #[command(flatten)]
    pub pipeline: PipelineOptions,
    /// Keep the job's journal in this local directory (a path or file:// URL); run the same command again after a crash to resume. For state on an object store or HDFS, use `sluice master --state URL`.
    #[arg(long, help = "Keep the job's state here to resume it", long_help, help_heading = heading::STATE, display_order = 0)]
    pub state: Option<PathBuf>,
    /// Following the source as it grows.
    #[command(flatten)]
    pub follow: FollowOptions,
    /// Kerberos login for HDFS.
    #[command(flatten)]
    pub kerberos: KerberosOptions,
    /// Object store timeouts.
    #[command(flatten)]
    pub store: StoreOptions,
    /// The catalog a table name is looked up in.
    #[command(flatten)]
    pub catalog: CatalogOptions,
    /// The job and its queue.
    #[command(flatten)]
    pub train: TrainOptions,
    /// The device threads and their trainer.
    #[command(flatten)]
    pub trainer: TrainerOptions,
}

impl TrainArgs {
    /// With --catalog, looks the table up and reads what the catalog names.
    pub async fn resolve_catalog(
        &mut self,
    ) -> Result<Option<crate::catalog::CatalogTable>, crate::catalog::CatalogError> {
        let table = crate::catalog::lookup(&self.catalog, &self.url).await?;
        if let Some(table) = &table {
            self.url = table.read_url.clone();
        }
        for url in &mut self.more {
            if let Some(more) = crate::catalog::lookup(&self.catalog, url).await? {
                *url = more.read_url;
            }
        }
        Ok(table)
    }

    /// Validates the options into the job's configuration.
    pub fn into_config(self) -> Result<TrainConfig, OptionError> {
        let mut urls = vec![self.url.clone()];
        urls.extend(self.more.iter().cloned());
        let mix = self.mix.config(&urls)?;
        TrainParts {
            train: &self.train,
            trainer: &self.trainer,
            pipeline: &self.pipeline,
            read: &self.read,
            follow: &self.follow,
            select: &self.select,
        }
        .config(self.url, self.state)?
        .with_mix(mix)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Train {
        #[command(flatten)]
        args: TrainArgs,
    }

    #[test]
    fn flags_left_out_give_the_options_defaults() {
        // clap's defaults and the structs' `Default` (a job file's defaults) agree.
        let parsed = Train::parse_from(["train", "/data"]).args;
        assert_eq!(parsed.train, TrainOptions::default());
        assert_eq!(parsed.trainer, TrainerOptions::default());
        assert_eq!(parsed.pipeline, PipelineOptions::default());
        assert_eq!(parsed.read, ReadOptions::default());
        assert_eq!(parsed.select, SelectOptions::default());
        assert_eq!(parsed.kerberos, KerberosOptions::default());
    }
}
