//! The job's lock: an object `lock.json` in the state location naming the run that
//! holds it (run id, host, pid) and when it expires. It is created only if absent,
//! refreshed by the running job every third of its lifetime (the TTL), and taken
//! over by a new run once it expired, or at once when its holder was a process on
//! this host that no longer lives. A run killed with SIGKILL therefore blocks the
//! next run on its host not at all, and on other hosts for at most one TTL.

use connectors::Report;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{PutMode, UpdateVersion};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tracing::{debug, warn};

use super::state::{now_text, StateStore, StoreError};
use crate::host::{host_name, process_alive, process_start};
use crate::wall::wall_millis;

/// The lock's object name inside the state location.
pub const LOCK: &str = "lock.json";

/// Errors taking or keeping the lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// A live run holds it.
    #[error("another run of this job is still going (run {}, pid {} on {}, since {}; its lock {path} expires in {}s unless refreshed); not starting", .holder.run, .holder.pid, .holder.host, .holder.acquired_at, .holder.expires_in)]
    Held {
        /// The lock object.
        path: String,
        /// Who holds it.
        holder: Box<Holder>,
    },
    /// Another run took the lock over while this one ran (it was not refreshed in time).
    #[error("lost the lock {path} to run {run} while training; nothing was recorded")]
    Lost {
        /// The lock object.
        path: String,
        /// The run that holds it now.
        run: String,
    },
    /// Reading or writing the lock failed.
    #[error("cannot {doing} the lock of this job")]
    State {
        /// What was being done (`read`, `create`, `take over`).
        doing: &'static str,
        /// The store's failure, naming the lock object (boxed: it is large).
        #[source]
        source: Box<StoreError>,
    },
}

impl LockError {
    /// The error of the lock's store, which failed while `doing` (`read`).
    fn store(doing: &'static str) -> impl FnOnce(StoreError) -> LockError {
        move |source| LockError::State {
            doing,
            source: Box::new(source),
        }
    }
}

/// The run holding a lock, as a refusal names it.
#[derive(Debug, Clone)]
pub struct Holder {
    /// Its run id.
    pub run: String,
    /// Its pid.
    pub pid: u32,
    /// Its host.
    pub host: String,
    /// When it took the lock.
    pub acquired_at: String,
    /// Seconds until the lock expires.
    pub expires_in: u64,
}

/// What the lock object says.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LockInfo {
    /// The holding run.
    pub run: String,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its process start time (Linux clock ticks since boot), to tell a reused pid.
    #[serde(default)]
    pub pid_start: Option<u64>,
    /// When it took the lock (RFC 3339).
    pub acquired_at: String,
    /// When the lock lapses unless refreshed (milliseconds since the Unix epoch).
    pub expires_unix_ms: u64,
}

/// A held lock, refreshed in the background until released.
pub struct Lock {
    state: StateStore,
    path: Path,
    info: LockInfo,
    /// Keeps a refresh and the release apart.
    busy: Arc<Mutex<()>>,
    lost: Arc<AtomicBool>,
    refresher: tokio::task::JoinHandle<()>,
}

impl Lock {
    /// Takes the lock of the job whose state is `state` for `run`, or says who holds it.
    pub async fn acquire(state: &StateStore, run: &str, ttl: Duration) -> Result<Lock, LockError> {
        let path = state.path(LOCK);
        let info = LockInfo {
            run: run.to_string(),
            host: host_name(),
            pid: std::process::id(),
            pid_start: process_start(std::process::id()),
            acquired_at: now_text(),
            expires_unix_ms: wall_millis() + ttl.as_millis() as u64,
        };
        if !create(state, &path, &info).await? {
            take_over(state, &path, &info).await?;
        }
        let busy = Arc::new(Mutex::new(()));
        let lost = Arc::new(AtomicBool::new(false));
        let refresher = tokio::spawn(refresh(
            state.clone(),
            path.clone(),
            info.clone(),
            ttl,
            busy.clone(),
            lost.clone(),
        ));
        Ok(Lock {
            state: state.clone(),
            path,
            info,
            busy,
            lost,
            refresher,
        })
    }

    /// Fails unless this run still holds the lock (checked in the store).
    pub async fn check(&self) -> Result<(), LockError> {
        let current = read(&self.state, &self.path).await?;
        match current {
            Some((holder, _)) if holder.run != self.info.run => Err(LockError::Lost {
                path: self.state.location.display(&self.path),
                run: holder.run,
            }),
            _ if self.lost.load(Ordering::SeqCst) => Err(LockError::Lost {
                path: self.state.location.display(&self.path),
                run: "unknown".to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Stops refreshing and deletes the lock if it is still this run's.
    pub async fn release(self) {
        self.refresher.abort();
        let _busy = self.busy.lock().await;
        match read(&self.state, &self.path).await {
            Ok(Some((holder, _))) if holder.run == self.info.run => {
                if let Err(e) = self.state.delete(&self.path).await {
                    warn!(error = %Report(&e), "cannot remove the lock; it lapses by itself");
                }
            }
            Ok(_) => {}
            Err(e) => {
                warn!(error = %Report(&e), "cannot read the lock to release it; it lapses by itself")
            }
        }
    }
}

/// Creates the lock object; `false` when one exists already.
async fn create(state: &StateStore, path: &Path, info: &LockInfo) -> Result<bool, LockError> {
    let text = serde_json::to_string_pretty(info).unwrap_or_default();
    match state.put(path, text.into(), PutMode::Create).await {
        Ok(()) => Ok(true),
        Err(StoreError::Store {
            cause: object_store::Error::AlreadyExists { .. },
            ..
        }) => Ok(false),
        Err(e) => Err(LockError::store("create")(e)),
    }
}

/// Takes over an existing lock if its holder is gone; else says who holds it.
async fn take_over(state: &StateStore, path: &Path, info: &LockInfo) -> Result<(), LockError> {
    let Some((holder, version)) = read(state, path).await? else {
        // Released in the meantime: try once more to create it.
        return match create(state, path, info).await? {
            true => Ok(()),
            false => Err(held(state, path, read(state, path).await?)),
        };
    };
    if let Some(reason) = stale(&holder) {
        warn!(run = %holder.run, pid = holder.pid, host = %holder.host, reason, "taking over the lock of a run that is gone");
        let text = serde_json::to_string_pretty(info).unwrap_or_default();
        state
            .put(path, text.clone().into(), PutMode::Update(version))
            .await
            .map_err(|e| match e {
                StoreError::Store {
                    cause: object_store::Error::Precondition { .. },
                    ..
                } => LockError::Held {
                    path: state.location.display(path),
                    holder: Box::new(Holder {
                        run: "another".to_string(),
                        pid: 0,
                        host: "another host".to_string(),
                        acquired_at: "just now".to_string(),
                        expires_in: 0,
                    }),
                },
                other => LockError::store("take over")(other),
            })?;
        return Ok(());
    }
    Err(held(state, path, Some((holder, version))))
}

fn held(state: &StateStore, path: &Path, holder: Option<(LockInfo, UpdateVersion)>) -> LockError {
    let holder = holder.map(|(h, _)| h);
    let holder = Holder {
        run: holder.as_ref().map(|h| h.run.clone()).unwrap_or_default(),
        pid: holder.as_ref().map(|h| h.pid).unwrap_or_default(),
        host: holder.as_ref().map(|h| h.host.clone()).unwrap_or_default(),
        acquired_at: holder
            .as_ref()
            .map(|h| h.acquired_at.clone())
            .unwrap_or_default(),
        expires_in: holder
            .map(|h| h.expires_unix_ms.saturating_sub(wall_millis()) / 1000)
            .unwrap_or_default(),
    };
    LockError::Held {
        path: state.location.display(path),
        holder: Box::new(holder),
    }
}

/// Why the holder is gone, or `None` while it may still run.
fn stale(holder: &LockInfo) -> Option<&'static str> {
    if holder.expires_unix_ms <= wall_millis() {
        return Some("its lock expired");
    }
    if holder.host == host_name() && !process_alive(holder.pid, holder.pid_start) {
        return Some("its process is no longer running on this host");
    }
    None
}

/// Reads the lock object; a damaged one reads as expired.
async fn read(
    state: &StateStore,
    path: &Path,
) -> Result<Option<(LockInfo, UpdateVersion)>, LockError> {
    let Some((bytes, version)) = state.get(path).await.map_err(LockError::store("read"))? else {
        return Ok(None);
    };
    let info = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        warn!(error = %Report(&e), "lock object is damaged; treating it as expired");
        LockInfo {
            run: "unknown".to_string(),
            host: String::new(),
            pid: 0,
            pid_start: None,
            acquired_at: String::new(),
            expires_unix_ms: 0,
        }
    });
    Ok(Some((info, version)))
}

/// Pushes the expiry forward every third of the TTL while the run lives.
async fn refresh(
    state: StateStore,
    path: Path,
    mut info: LockInfo,
    ttl: Duration,
    busy: Arc<Mutex<()>>,
    lost: Arc<AtomicBool>,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        let _busy = busy.lock().await;
        match read(&state, &path).await {
            Ok(Some((holder, v))) if holder.run == info.run => {
                info.expires_unix_ms = wall_millis() + ttl.as_millis() as u64;
                let text = serde_json::to_string_pretty(&info).unwrap_or_default();
                match state.put(&path, text.into(), PutMode::Update(v)).await {
                    Ok(()) => debug!("lock refreshed"),
                    Err(e) => warn!(error = %Report(&e), "cannot refresh the lock"),
                }
            }
            Ok(_) => {
                warn!("the lock was taken over by another run");
                lost.store(true, Ordering::SeqCst);
                return;
            }
            Err(e) => warn!(error = %Report(&e), "cannot read the lock to refresh it"),
        }
    }
}
