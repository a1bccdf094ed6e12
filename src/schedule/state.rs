//! A job's state location (a local directory or any object store URL) and the
//! record of what it trained: `trained.json`, the partitions trained with their rows
//! and the run that trained them, and where the model checkpoint of the last
//! successful run lives.
//!
//! Every object is written whole by one atomic put. `trained.json` is written only
//! with a conditional put (created if absent, replaced only if unchanged since it was
//! read) where the store supports one; otherwise the job's lock alone guards it.

use std::collections::BTreeMap;

use connectors::Location;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

/// The record's object name inside the state location.
pub const TRAINED: &str = "trained.json";

/// The format of `trained.json` this build writes; a newer one is refused.
pub const TRAINED_FORMAT: u32 = 1;

/// Errors of a scheduled job's state store (`trained.json`, the lock, the model checkpoints).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The location cannot be opened.
    #[error("state {url}")]
    Open {
        /// The state URL.
        url: String,
        /// The failure.
        #[source]
        source: Box<connectors::Error>,
    },
    /// A read, write or delete failed.
    #[error("state {path}: {cause}")]
    Store {
        /// The object.
        path: String,
        /// The failure.
        cause: object_store::Error,
    },
    /// `trained.json` is not what sluice writes.
    #[error("state {path} is damaged: {cause}")]
    Damaged {
        /// The object.
        path: String,
        /// What the JSON parser found.
        cause: serde_json::Error,
    },
    /// `trained.json` was written by a newer sluice, in a format this one cannot read.
    #[error("state {path} was written by a newer sluice (format {found}); this sluice reads formats up to {supported}: run the job with that sluice or a newer one")]
    Newer {
        /// The object.
        path: String,
        /// Its format.
        found: u32,
        /// The newest this build reads ([`TRAINED_FORMAT`]).
        supported: u32,
    },
    /// Another writer changed `trained.json` since this run read it.
    #[error("state {path} was changed by another run while this one trained; nothing was recorded (its partitions are trained again next time)")]
    Conflict {
        /// The object.
        path: String,
    },
    /// The state records the partitions of a job that trains other rows.
    #[error("state {state} records partitions trained with {recorded}, not with {given}; give this job a state of its own")]
    OtherRows {
        /// The state URL.
        state: String,
        /// The rows it records.
        recorded: String,
        /// This job's rows.
        given: String,
    },
    /// The state belongs to a job with another source.
    #[error("state {state} records partitions of {recorded}, not of {source_url}; give this job a state of its own")]
    OtherSource {
        /// The state URL.
        state: String,
        /// The source it records.
        recorded: String,
        /// This job's source.
        source_url: String,
    },
}

/// A partition trained by an earlier run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainedPartition {
    /// Rows in the partition's files when trained (from footers; `None` for text).
    pub rows: Option<u64>,
    /// The run that trained it.
    pub run: String,
    /// When that run finished (RFC 3339, UTC).
    pub trained_at: String,
}

/// One successful run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunRecord {
    /// The run's id.
    pub run: String,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// When it finished.
    pub finished_at: String,
    /// The partitions it trained.
    pub partitions: Vec<String>,
    /// Rows its trainers acknowledged, over all epochs.
    pub rows: u64,
    /// On a table with `on-rewrite = "skip"`: rows in the files that commits
    /// removing or rewriting rows added, which this run did not train.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_rewritten_rows: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The content of `trained.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Trained {
    /// Format version.
    pub version: u32,
    /// The job's source, as in the job file.
    pub source: String,
    /// Trained partitions by their name below the source's base.
    pub partitions: BTreeMap<String, TrainedPartition>,
    /// A job of several sources (`[[source]]` tables): each source's
    /// trained partitions, by the source's URL, each kept apart.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, BTreeMap<String, TrainedPartition>>,
    /// Successful runs, oldest first.
    pub runs: Vec<RunRecord>,
    /// The model checkpoint of the last successful run: a prefix inside the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// When the source is a Delta or Iceberg table: the version (snapshot)
    /// trained up to. The next run trains what was added after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TrainedTable>,
    /// The rows the job trains when not all (`split`, `take`, `sample`,
    /// `limit`, as [`crate::config::SelectOptions::describe`] writes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<String>,
}

/// The table version a job has trained up to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainedTable {
    /// Delta or Iceberg.
    pub kind: connectors::table::TableKind,
    /// The Delta version or Iceberg snapshot id trained up to.
    pub version: i64,
    /// The run that trained it.
    pub run: String,
}

/// `trained.json` as read, with the version a conditional write must match.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The record (empty when the state is new).
    pub trained: Trained,
    /// `None` when `trained.json` does not exist yet.
    pub version: Option<UpdateVersion>,
}

/// The state location of one job.
#[derive(Debug, Clone)]
pub struct StateStore {
    /// Where it lives.
    pub location: Location,
}

impl StateStore {
    /// Opens the state location at `url` (nothing needs to exist yet).
    pub fn open(url: &str) -> Result<StateStore, StoreError> {
        let location = connectors::store::open(url).map_err(|source| StoreError::Open {
            url: url.to_string(),
            source: Box::new(source),
        })?;
        Ok(StateStore { location })
    }

    /// The path of `name` inside the state.
    pub fn path(&self, name: &str) -> Path {
        name.split('/')
            .filter(|p| !p.is_empty())
            .fold(self.location.root.clone(), |path, part| path.join(part))
    }

    fn store_error(&self, path: &Path, source: object_store::Error) -> StoreError {
        StoreError::Store {
            path: self.location.display(path),
            cause: source,
        }
    }

    /// Reads `trained.json`; a new state reads as empty, for `source`.
    pub async fn load(&self, source: &str, rows: Option<&str>) -> Result<Loaded, StoreError> {
        let mut loaded = self.load_source(source).await?;
        let recorded = loaded.trained.rows.as_deref();
        if loaded.version.is_some() && recorded != rows {
            let shown = |rows: Option<&str>| rows.unwrap_or("every row").to_string();
            return Err(StoreError::OtherRows {
                state: self.location.url(),
                recorded: shown(recorded),
                given: shown(rows),
            });
        }
        loaded.trained.rows = rows.map(str::to_string);
        Ok(loaded)
    }

    async fn load_source(&self, source: &str) -> Result<Loaded, StoreError> {
        let path = self.path(TRAINED);
        let Some((bytes, version)) = self.get(&path).await? else {
            return Ok(Loaded {
                trained: Trained {
                    version: TRAINED_FORMAT,
                    source: source.to_string(),
                    ..Trained::default()
                },
                version: None,
            });
        };
        #[derive(Deserialize)]
        struct Format {
            #[serde(default)]
            version: u32,
        }
        let damaged = |e| StoreError::Damaged {
            path: self.location.display(&path),
            cause: e,
        };
        let found = serde_json::from_slice::<Format>(&bytes)
            .map_err(damaged)?
            .version;
        if found > TRAINED_FORMAT {
            return Err(StoreError::Newer {
                path: self.location.display(&path),
                found,
                supported: TRAINED_FORMAT,
            });
        }
        let trained: Trained = serde_json::from_slice(&bytes).map_err(damaged)?;
        if trained.source != source {
            return Err(StoreError::OtherSource {
                state: self.location.url(),
                recorded: trained.source,
                source_url: source.to_string(),
            });
        }
        Ok(Loaded {
            trained,
            version: Some(version),
        })
    }

    /// Writes `trained.json` if nobody changed it since `loaded` was read.
    pub async fn save(&self, loaded: &Loaded, trained: &Trained) -> Result<(), StoreError> {
        let path = self.path(TRAINED);
        let text = serde_json::to_string_pretty(trained).unwrap_or_default() + "\n";
        let mode = match &loaded.version {
            None => PutMode::Create,
            Some(version) => PutMode::Update(version.clone()),
        };
        match self.put(&path, text.clone().into(), mode).await {
            Err(StoreError::Store {
                cause:
                    object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
                ..
            }) => Err(StoreError::Conflict {
                path: self.location.display(&path),
            }),
            other => other,
        }
    }

    /// Reads an object with its version, `None` when absent.
    pub async fn get(&self, path: &Path) -> Result<Option<(Vec<u8>, UpdateVersion)>, StoreError> {
        let result = match self.location.store.get(path).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.store_error(path, e)),
        };
        let version = UpdateVersion {
            e_tag: result.meta.e_tag.clone(),
            version: result.meta.version.clone(),
        };
        let bytes = result
            .bytes()
            .await
            .map_err(|e| self.store_error(path, e))?;
        Ok(Some((bytes.to_vec(), version)))
    }

    /// Writes an object atomically with `mode`; a conditional update the store cannot
    /// do is done as a plain overwrite (the job's lock guards it).
    pub async fn put(
        &self,
        path: &Path,
        payload: PutPayload,
        mode: PutMode,
    ) -> Result<(), StoreError> {
        let store = &self.location.store;
        match store.put_opts(path, payload.clone(), mode.into()).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotImplemented { .. })
            | Err(object_store::Error::NotSupported { .. }) => store
                .put_opts(path, payload, PutMode::Overwrite.into())
                .await
                .map(|_| ())
                .map_err(|e| self.store_error(path, e)),
            Err(e) => Err(self.store_error(path, e)),
        }
    }

    /// Deletes an object; absence is no error.
    pub async fn delete(&self, path: &Path) -> Result<(), StoreError> {
        match self.location.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.store_error(path, e)),
        }
    }

    /// Every object below `prefix` (a name inside the state).
    pub async fn list(&self, prefix: &str) -> Result<Vec<Path>, StoreError> {
        let path = self.path(prefix);
        let listed: Result<Vec<_>, _> = self.location.store.list(Some(&path)).try_collect().await;
        match listed {
            Ok(objects) => Ok(objects.into_iter().map(|o| o.location).collect()),
            Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(self.store_error(&path, e)),
        }
    }

    /// Deletes every object below `prefix`.
    pub async fn delete_all(&self, prefix: &str) -> Result<(), StoreError> {
        for path in self.list(prefix).await? {
            self.delete(&path).await?;
        }
        Ok(())
    }
}

pub use crate::wall::now_text;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_record_of_a_newer_format_is_refused_naming_both() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = dir.path().to_str().expect("utf-8").to_string();
        let store = StateStore::open(&url).expect("open");
        let text = serde_json::json!({
            "version": TRAINED_FORMAT + 1,
            "source": "/data",
            "partitions": {},
            "runs": [],
        });
        std::fs::write(dir.path().join(TRAINED), text.to_string()).expect("write");
        let err = store.load("/data", None).await.expect_err("refused");
        assert!(matches!(err, StoreError::Newer { .. }), "{err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("format {}", TRAINED_FORMAT + 1)),
            "{message}"
        );
        assert!(
            message.contains(&format!("up to {TRAINED_FORMAT}")),
            "{message}"
        );
        // Today's format reads.
        let text = serde_json::json!({
            "version": TRAINED_FORMAT,
            "source": "/data",
            "partitions": {},
            "runs": [],
        });
        std::fs::write(dir.path().join(TRAINED), text.to_string()).expect("write");
        store.load("/data", None).await.expect("today's format");
    }
}
