//! The job's state on an object store (S3, GCS, Azure or HDFS), where files
//! cannot be appended to: each group commit is one new object in a numbered
//! log, created only if absent, so two masters of one job cannot both write.
//!
//! ```text
//! STATE/job.json              the job (created once, never replaced)
//! STATE/log/000000000000.json {"commands": [...]}  one group commit
//! STATE/log/000000000001.json {"snapshot": {...}}  the whole queue after the slots before it
//! STATE/head.json             {"slot": n}: the latest snapshot, where loading starts
//! ```
//!
//! A slot is written with `PutMode::Create`: when two masters run on the same
//! state (a zombie after a network partition, or a second master started by
//! mistake), the first to write a slot wins and the other stops at its next
//! write, before it answers anyone. Stores without conditional writes get a
//! warning and plain writes: then one master per job is the operator's duty.

use std::future::Future;
use std::sync::Arc;

use connectors::store::Location;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use tokio::runtime::Handle;
use tracing::{info, warn};

use super::journal::{Damage, Journal, JournalError, Loaded};
use crate::queue::{Command, Queue};

/// Log objects between snapshots: loading reads at most this many objects.
const OBJECTS_PER_SNAPSHOT: u64 = 1_000;
/// Log objects read at once while loading.
const READ_AHEAD: usize = 16;

/// One log object.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Record {
    Commands(Vec<Command>),
    Snapshot(Box<Queue>),
}

/// [`Record`] borrowing what it writes.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
enum RecordRef<'a> {
    Commands(&'a [Command]),
    Snapshot(&'a Queue),
}

/// Where loading starts.
#[derive(Debug, Serialize, Deserialize)]
struct Head {
    slot: u64,
}

/// The numbered log of a state location on an object store.
pub struct ObjectLog {
    location: Location,
    next: u64,
    since_snapshot: u64,
    conditional: bool,
    loaded: Option<Loaded>,
    handle: Handle,
}

impl std::fmt::Debug for ObjectLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectLog")
            .field("location", &self.location.url())
            .field("next", &self.next)
            .finish()
    }
}

impl ObjectLog {
    /// Reads the log of `location` from its latest snapshot on.
    pub async fn open(location: Location) -> Result<ObjectLog, JournalError> {
        let head = match read(&location, &head_path(&location)).await? {
            Some(bytes) => {
                serde_json::from_slice::<Head>(&bytes)
                    .map_err(|e| corrupt(&location, &head_path(&location), e))?
                    .slot
            }
            None => 0,
        };
        let slots = list_slots(&location, head).await?;
        let mut loaded = Loaded::default();
        let mut expect = head;
        let mut reads = futures::stream::iter(slots.iter().copied())
            .map(|slot| {
                let location = &location;
                async move {
                    let path = slot_path(location, slot);
                    let bytes = read(location, &path)
                        .await?
                        .ok_or_else(|| missing(location, &path))?;
                    serde_json::from_slice::<Record>(&bytes)
                        .map(|record| (slot, record))
                        .map_err(|e| corrupt(location, &path, e))
                }
            })
            .buffered(READ_AHEAD);
        while let Some((slot, record)) = reads.try_next().await? {
            if slot != expect {
                // Slots are created in order; a gap means objects were removed by hand.
                return Err(missing(&location, &slot_path(&location, expect)));
            }
            expect = slot + 1;
            match record {
                Record::Commands(commands) => loaded.commands.extend(commands),
                Record::Snapshot(queue) => {
                    loaded.base = Some(*queue);
                    loaded.commands.clear();
                }
            }
        }
        drop(reads);
        info!(state = %location.url(), from = head, slots = slots.len(), "state log read");
        Ok(ObjectLog {
            next: expect,
            since_snapshot: expect - head,
            conditional: true,
            loaded: Some(loaded),
            handle: Handle::current(),
            location,
        })
    }

    /// Writes the next slot, refusing to replace one another master wrote.
    async fn put_slot(&mut self, record: RecordRef<'_>) -> Result<u64, JournalError> {
        let slot = self.next;
        let path = slot_path(&self.location, slot);
        let bytes = serde_json::to_vec(&record).map_err(|e| JournalError::Io {
            path: self.location.display(&path),
            cause: e.into(),
        })?;
        if create(&self.location, &path, bytes, &mut self.conditional).await? {
            self.next += 1;
            self.since_snapshot += 1;
            Ok(slot)
        } else {
            Err(JournalError::Taken {
                location: self.location.display(&path),
            })
        }
    }

    async fn snapshot_async(&mut self, queue: &Queue) -> Result<(), JournalError> {
        let slot = self.put_slot(RecordRef::Snapshot(queue)).await?;
        let head = serde_json::to_vec(&Head { slot }).map_err(|e| JournalError::Io {
            path: self.location.display(&head_path(&self.location)),
            cause: e.into(),
        })?;
        let path = head_path(&self.location);
        self.location
            .store
            .put(&path, PutPayload::from(head))
            .await
            .map_err(|source| store_err(&self.location, &path, source))?;
        self.since_snapshot = 0;
        // Older slots are no longer read; removing them is housekeeping.
        let old: Vec<object_store::Result<Path>> = list_slots(&self.location, 0)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|s| *s < slot)
            .map(|s| Ok(slot_path(&self.location, s)))
            .collect();
        let mut deleted = self
            .location
            .store
            .delete_stream(futures::stream::iter(old).boxed());
        while let Some(result) = deleted.next().await {
            if let Err(e) = result {
                warn!(error = %e, "could not remove an old state log object");
                break;
            }
        }
        Ok(())
    }
}

impl Journal for ObjectLog {
    fn append(&mut self, commands: &[Command]) -> Result<(), JournalError> {
        if commands.is_empty() {
            return Ok(());
        }
        self.block_on_self(|log| Box::pin(log.put_slot(RecordRef::Commands(commands))))
            .map(|_| ())
    }

    fn load(&mut self) -> Result<Loaded, JournalError> {
        Ok(self.loaded.take().unwrap_or_default())
    }

    fn snapshot(&mut self, queue: Arc<Queue>) -> Result<(), JournalError> {
        self.block_on_self(|log| Box::pin(log.snapshot_async(&queue)))
    }

    fn wants_snapshot(&self) -> bool {
        self.since_snapshot >= OBJECTS_PER_SNAPSHOT
    }

    fn describe(&self) -> String {
        self.location.url()
    }
}

type BoxFut<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + 'a>>;

impl ObjectLog {
    /// Runs a future borrowing the log to completion from synchronous code,
    /// inside the runtime (on a blocking-capable thread) or outside it.
    fn block_on_self<'a, T>(&'a mut self, f: impl FnOnce(&'a mut ObjectLog) -> BoxFut<'a, T>) -> T {
        let handle = self.handle.clone();
        let fut = f(self);
        match Handle::try_current() {
            Ok(_) => tokio::task::block_in_place(|| handle.block_on(fut)),
            Err(_) => handle.block_on(fut),
        }
    }
}

/// Reads `job.json` (or any small object) of a state location; `None` when absent.
pub async fn read(location: &Location, path: &Path) -> Result<Option<Vec<u8>>, JournalError> {
    match location.store.get(path).await {
        Ok(got) => got
            .bytes()
            .await
            .map(|b| Some(b.to_vec()))
            .map_err(|source| store_err(location, path, source)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(source) => Err(store_err(location, path, source)),
    }
}

/// Whether `path` exists (a metadata request: `job.json` may be large).
pub async fn exists(location: &Location, path: &Path) -> Result<bool, JournalError> {
    match location.store.head(path).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(source) => Err(store_err(location, path, source)),
    }
}

/// Creates `path` unless it exists; false when it did. Stores without
/// conditional writes fall back to a plain write (with a warning, once).
pub async fn create(
    location: &Location,
    path: &Path,
    bytes: Vec<u8>,
    conditional: &mut bool,
) -> Result<bool, JournalError> {
    let payload = PutPayload::from(bytes);
    if *conditional {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match location.store.put_opts(path, payload.clone(), opts).await {
            Ok(_) => return Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => return Ok(false),
            Err(object_store::Error::NotImplemented { .. })
            | Err(object_store::Error::NotSupported { .. }) => {
                warn!(state = %location.url(), "this store has no conditional writes: run one master per job");
                *conditional = false;
            }
            Err(source) => return Err(store_err(location, path, source)),
        }
    }
    location
        .store
        .put(path, payload)
        .await
        .map(|_| true)
        .map_err(|source| store_err(location, path, source))
}

/// Slot numbers at or after `from`, in order.
async fn list_slots(location: &Location, from: u64) -> Result<Vec<u64>, JournalError> {
    let dir = log_dir(location);
    let offset = slot_path(location, from.saturating_sub(1));
    let listing = if from == 0 {
        location.store.list(Some(&dir))
    } else {
        location.store.list_with_offset(Some(&dir), &offset)
    };
    let metas: Vec<_> = listing
        .try_collect()
        .await
        .map_err(|source| store_err(location, &dir, source))?;
    let mut slots: Vec<u64> = metas
        .iter()
        .filter_map(|m| m.location.filename())
        .filter_map(|name| name.strip_suffix(".json"))
        .filter_map(|n| n.parse::<u64>().ok())
        .filter(|n| *n >= from)
        .collect();
    slots.sort_unstable();
    Ok(slots)
}

fn log_dir(location: &Location) -> Path {
    location.root.clone().join("log")
}

fn slot_path(location: &Location, slot: u64) -> Path {
    log_dir(location).join(format!("{slot:012}.json"))
}

fn head_path(location: &Location) -> Path {
    location.root.clone().join("head.json")
}

fn store_err(location: &Location, path: &Path, source: object_store::Error) -> JournalError {
    JournalError::Store {
        location: location.display(path),
        cause: source,
    }
}

fn corrupt(location: &Location, path: &Path, e: serde_json::Error) -> JournalError {
    JournalError::Corrupt {
        path: location.display(path),
        line: 1,
        damage: Damage::Json(e),
    }
}

fn missing(location: &Location, path: &Path) -> JournalError {
    JournalError::Corrupt {
        path: location.display(path),
        line: 0,
        damage: Damage::MissingObject,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{QueueConfig, Reply, WorkerId};
    use object_store::local::LocalFileSystem;

    fn location(dir: &std::path::Path) -> Location {
        let store = LocalFileSystem::new_with_prefix(dir).expect("local store");
        Location::new(Arc::new(store), Path::from("jobs/one"), "test://")
    }

    fn commands(queue: &mut Queue, now: u64) -> Vec<Command> {
        let register = Command::Register {
            now,
            secret: None,
            name: None,
        };
        let worker = match queue.apply(&register) {
            Reply::Register(w) => w,
            other => panic!("{other:?}"),
        };
        let lease = Command::Lease {
            now,
            worker,
            max: 2,
        };
        queue.apply(&lease);
        vec![register, lease]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn snapshots_and_slots_rebuild_the_same_queue() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut queue = Queue::new(10, QueueConfig::default()).expect("queue");
        let mut log = ObjectLog::open(location(dir.path())).await.expect("open");
        for round in 0..3 {
            log.append(&commands(&mut queue, round)).expect("append");
        }
        log.snapshot(Arc::new(queue.clone())).expect("snapshot");
        log.append(&commands(&mut queue, 9))
            .expect("append after snapshot");

        let mut again = ObjectLog::open(location(dir.path())).await.expect("reopen");
        let loaded = again.load().expect("load");
        let mut rebuilt = loaded.base.expect("the snapshot is the base");
        assert_eq!(loaded.commands.len(), 2, "only the slot after the snapshot");
        for c in &loaded.commands {
            rebuilt.apply(c);
        }
        assert_eq!(rebuilt, queue);
        assert_eq!(
            list_slots(&again.location, 0).await.expect("list"),
            vec![3, 4],
            "slots before the snapshot are removed"
        );
        assert!(matches!(
            queue.apply(&Command::Heartbeat {
                now: 10,
                worker: WorkerId(1),
                cached: None,
            }),
            Reply::Heartbeat(_)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_writer_of_a_slot_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut queue = Queue::new(4, QueueConfig::default()).expect("queue");
        let mut first = ObjectLog::open(location(dir.path())).await.expect("open");
        let mut second = ObjectLog::open(location(dir.path())).await.expect("open");
        second
            .append(&commands(&mut queue, 1))
            .expect("second writes slot 0");
        match first.append(&commands(&mut queue, 2)) {
            Err(JournalError::Taken { location }) => {
                assert!(
                    location.ends_with("jobs/one/log/000000000000.json"),
                    "{location}"
                )
            }
            other => panic!("the stale writer was not refused: {other:?}"),
        }
    }
}
