//! A scheduled job: its source, state, lock and the training it runs, as its
//! job file ([`crate::config::JobFile`], read by `sluice run`) describes it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::catalog::{CatalogError, CatalogTable};
pub use crate::config::OnRewrite;
use crate::config::{
    CatalogOptions, JobFile, JobFileError, KerberosOptions, StoreOptions, TrainConfig,
};

/// A parsed and validated job.
#[derive(Debug, Clone)]
pub struct Job {
    /// The job file.
    pub path: PathBuf,
    /// The source URL, possibly with `*` in path segments.
    pub source: String,
    /// The state location (a directory or object store URL).
    pub state: String,
    /// Lifetime of the job's lock between refreshes.
    pub lock_ttl: Duration,
    /// What a run does when a table's commits rewrote data already trained.
    pub on_rewrite: OnRewrite,
    /// The training options, validated as `sluice train` validates them.
    pub train: TrainConfig,
    /// How long the trainers may take to finish the batches they hold once
    /// a signal stopped a run (`grace`, as `sluice train --grace`).
    pub grace: Duration,
    /// The catalog `source` is a table name in, when it is one.
    pub catalog: CatalogOptions,
    /// The table the catalog named, once looked up ([`Job::lookup`]).
    pub table: Option<CatalogTable>,
}

impl Job {
    /// Reads the job file at `path`: the job, and the Kerberos login its
    /// `keytab` and `principal` keys ask for.
    pub fn load(path: &Path) -> Result<(Job, KerberosOptions), JobFileError> {
        Job::from_file(JobFile::load(path)?)
    }

    /// Reads the job file at `path`: the job, the Kerberos login and the
    /// object store timeouts its keys ask for (process-wide settings).
    pub fn load_with_store(
        path: &Path,
    ) -> Result<(Job, KerberosOptions, StoreOptions), JobFileError> {
        let file = JobFile::load(path)?;
        let store = file.store.clone();
        let (job, kerberos) = Job::from_file(file)?;
        Ok((job, kerberos, store))
    }

    /// Looks a table-name source up in the job's catalog (nothing to do for
    /// a path or URL): the run reads what the catalog names now.
    pub async fn lookup(&mut self) -> Result<(), CatalogError> {
        self.table = crate::catalog::lookup(&self.catalog, &self.source).await?;
        Ok(())
    }

    /// What the job's state records as its source: the catalog and table
    /// for a table name (where its files are may change), else the source.
    pub fn identity(&self) -> String {
        match &self.table {
            Some(table) => table.identity(),
            None => self.source.clone(),
        }
    }

    /// The job a parsed job file describes.
    pub fn from_file(file: JobFile) -> Result<(Job, KerberosOptions), JobFileError> {
        let train = file
            .train_config()
            .map_err(|source| JobFileError::Invalid {
                path: file.path.display().to_string(),
                source,
            })?;
        let job = Job {
            path: file.path,
            source: file.job.source,
            state: file.job.state,
            lock_ttl: file.job.lock_ttl,
            on_rewrite: file.job.on_rewrite,
            grace: file.train.grace,
            train,
            catalog: file.catalog,
            table: None,
        };
        Ok((job, file.kerberos))
    }
}
