//! A cache of remote files on local disk (`--cache DIR`, `--cache-size`), so
//! that later epochs read what the first fetched.
//!
//! Each file is kept whole under a name derived from its identity: the
//! store's URL of it, its size and the entity tag and modification time it
//! was planned with ([`crate::FileStamp`]). A file rewritten in the store
//! gets a new identity and is fetched again; a file planned without a stamp
//! (only a size to know it by) is never cached. Entries are written under a
//! temporary name, synced and renamed ([`entry`]), and every block is checked
//! against its checksum when read: a torn or damaged entry is removed and
//! the file fetched again, never served.
//!
//! Which files are kept is [`policy`]'s rule (keep what fits, never evict
//! the job's own files for each other); the size counted is the cached
//! files' bytes (each entry adds a few bytes of checksums and its identity). Several processes may share a
//! directory: admissions and evictions happen under an exclusive lock of
//! `DIR/.lock`, and a temporary entry's name carries its writer's process id
//! and size, so others count it and remove it only once that process is gone.

mod entry;
pub mod policy;
pub(crate) mod store;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, ObjectStore};
use tracing::warn;

use crate::split::Split;
use entry::{Entry, Writer};
use policy::{admit, Admission, Held};

/// The suffix of a whole entry.
const ENTRY: &str = "entry";
/// The suffix of an entry being written.
const TEMP: &str = "tmp";
/// Bytes of a download gathered before they are written out.
const WRITE_CHUNK: usize = 8 << 20;
/// A file the cache does not keep is fetched whole, once per read of a
/// split, up to this size (a small file's footer and column chunks in one
/// request, not each fetched apart); larger ones range by range.
pub(crate) const WHOLE_IN_MEMORY: u64 = 8 << 20;

/// What [`Cache::read`] got.
pub(crate) enum Read {
    /// The range asked for.
    Range(Bytes),
    /// The whole file, not kept: the reader holds it for its later ranges.
    Whole(Bytes),
}

/// A cache directory that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot use cache directory {dir}: {cause}")]
pub struct CacheError {
    /// The directory.
    pub dir: PathBuf,
    /// What the system said.
    pub cause: io::Error,
}

/// Who a cached file is: what names its entry and what the entry must say.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileKey {
    identity: String,
    name: String,
    size: u64,
}

impl FileKey {
    /// The key of `split`'s file in the store shown as `base`; `None` for a
    /// file planned without an entity tag or modification time, which the
    /// cache could not tell from a rewritten one of the same size.
    pub fn of(base: &str, split: &Split) -> Option<FileKey> {
        if split.stamp.is_empty() || split.size == 0 {
            return None;
        }
        let identity = format!(
            "{base}/{}|{}|{}|{}",
            split.path,
            split.size,
            split.stamp.e_tag.as_deref().unwrap_or("-"),
            split
                .stamp
                .modified_ns
                .map_or_else(|| "-".to_string(), |ns| ns.to_string())
        );
        let name = format!(
            "{:016x}{:016x}",
            fnv(&identity, 0xcbf2_9ce4_8422_2325),
            fnv(&identity, 0x6c62_272e_07bb_0142)
        );
        Some(FileKey {
            identity,
            name,
            size: split.size,
        })
    }

    /// The file's size.
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// FNV-1a of `text` from `basis`: a name for an entry (its identity is kept
/// in it and checked, so two identities of one name only miss).
fn fnv(text: &str, basis: u64) -> u64 {
    text.bytes().fold(basis, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What the cache did, for status, metrics and the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    /// Bytes served from the cache.
    pub hit_bytes: u64,
    /// Bytes fetched from the store by reads through the cache.
    pub fetched_bytes: u64,
    /// Bytes the cache directory holds (as last counted).
    pub bytes: u64,
}

/// A cache directory opened by this process. See the module docs.
pub struct Cache {
    dir: PathBuf,
    capacity: u64,
    /// Names of the entries of the current job's files.
    job: Mutex<HashSet<String>>,
    /// Names of the entries this process knows are there.
    present: Mutex<HashSet<String>>,
    /// Entries opened, their trailers checked.
    opened: Mutex<HashMap<String, Arc<Entry>>>,
    /// One download per file at a time.
    flights: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    hit_bytes: AtomicU64,
    fetched_bytes: AtomicU64,
    bytes: AtomicU64,
    /// Changes whenever `present` does.
    generation: AtomicU64,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("dir", &self.dir)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// `mutex` locked, whether or not a holder panicked.
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Cache {
    /// Opens (creating it if need be) the cache directory `dir`, holding at
    /// most `capacity` bytes.
    pub fn open(dir: &Path, capacity: u64) -> Result<Arc<Cache>, CacheError> {
        let fail = |source| CacheError {
            dir: dir.to_path_buf(),
            cause: source,
        };
        crate::private::create_dir(dir, "cache directory").map_err(fail)?;
        let cache = Cache {
            dir: dir.to_path_buf(),
            capacity,
            job: Mutex::default(),
            present: Mutex::default(),
            opened: Mutex::default(),
            flights: Mutex::default(),
            hit_bytes: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        };
        let held = cache.locked_scan(true).map_err(fail)?;
        *locked(&cache.present) = held.iter().map(|h| h.name.clone()).collect();
        Ok(Arc::new(cache))
    }

    /// Tells the cache which files the current job reads: only entries of
    /// other files are evicted to make room.
    pub fn set_job<'a>(&self, keys: impl IntoIterator<Item = &'a FileKey>) {
        *locked(&self.job) = keys.into_iter().map(|k| k.name.clone()).collect();
    }

    /// Whether the file of `key` is (as far as this process knows) cached.
    pub fn holds(&self, key: &FileKey) -> bool {
        locked(&self.present).contains(&key.name)
    }

    /// A number that changes whenever what [`Cache::holds`] says may have.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// What the cache did so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hit_bytes: self.hit_bytes.load(Ordering::Relaxed),
            fetched_bytes: self.fetched_bytes.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An entry's file: its name and the cached file's size (which the
    /// directory's bytes are counted by, without opening the entries).
    fn entry_path(&self, name: &str, size: u64) -> PathBuf {
        self.dir.join(format!("{name}.{size}.{ENTRY}"))
    }

    fn mark(&self, name: &str, present: bool) {
        let mut set = locked(&self.present);
        let changed = if present {
            set.insert(name.to_string())
        } else {
            set.remove(name)
        };
        if changed {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Bytes `range` of the file of `key` at `path` in `store`: from the
    /// cache when it holds them, else fetched (the whole file, kept, when
    /// the cache admits it; only the range when not).
    pub(crate) async fn read(
        self: &Arc<Self>,
        store: &dyn ObjectStore,
        path: &ObjectPath,
        key: &FileKey,
        range: Range<u64>,
    ) -> object_store::Result<Read> {
        if let Some(bytes) = self.hit(key, range.clone()).await {
            return Ok(Read::Range(bytes));
        }
        let flight = {
            let mut flights = locked(&self.flights);
            flights.entry(key.name.clone()).or_default().clone()
        };
        let _one = flight.lock().await;
        if let Some(bytes) = self.hit(key, range.clone()).await {
            return Ok(Read::Range(bytes));
        }
        let this = self.clone();
        let name = key.name.clone();
        let incoming = key.size;
        let writer = tokio::task::spawn_blocking(move || this.reserve(&name, incoming))
            .await
            .map_err(|source| object_store::Error::JoinError { source })?;
        let writer = match writer {
            Ok(Some(writer)) => writer,
            Ok(None) => return self.fetch_uncached(store, path, key, range).await,
            Err(e) => {
                warn!(dir = %self.dir.display(), error = %e, "cache not written");
                return self.fetch_uncached(store, path, key, range).await;
            }
        };
        self.download(store, path, key, writer).await?;
        match self.hit_counted(key, range.clone(), false).await {
            Some(bytes) => Ok(Read::Range(bytes)),
            None => self.fetch_uncached(store, path, key, range).await,
        }
    }

    /// A file not kept: whole when small (see [`WHOLE_IN_MEMORY`]), else
    /// only `range`.
    async fn fetch_uncached(
        &self,
        store: &dyn ObjectStore,
        path: &ObjectPath,
        key: &FileKey,
        range: Range<u64>,
    ) -> object_store::Result<Read> {
        if key.size <= WHOLE_IN_MEMORY {
            let whole = self.fetch_range(store, path, 0..key.size).await?;
            return Ok(Read::Whole(whole));
        }
        self.fetch_range(store, path, range).await.map(Read::Range)
    }

    /// Only `range`, fetched and not kept.
    async fn fetch_range(
        &self,
        store: &dyn ObjectStore,
        path: &ObjectPath,
        range: Range<u64>,
    ) -> object_store::Result<Bytes> {
        let got = store
            .get_opts(path, GetOptions::new().with_range(Some(range)))
            .await?
            .bytes()
            .await?;
        self.fetched_bytes
            .fetch_add(got.len() as u64, Ordering::Relaxed);
        Ok(got)
    }

    /// The whole file fetched into `writer` and put in place.
    async fn download(
        &self,
        store: &dyn ObjectStore,
        path: &ObjectPath,
        key: &FileKey,
        writer: Writer,
    ) -> object_store::Result<()> {
        let mut writer = Some(writer);
        let result = self.download_into(store, path, key, &mut writer).await;
        if let Some(w) = writer.take() {
            match result {
                Ok(()) => {
                    let identity = key.identity.clone();
                    let target = self.entry_path(&key.name, key.size);
                    let done =
                        tokio::task::spawn_blocking(move || w.finish(&identity, &target)).await;
                    match done {
                        Ok(Ok(())) => {
                            self.bytes.fetch_add(key.size, Ordering::Relaxed);
                            self.mark(&key.name, true);
                        }
                        Ok(Err(e)) => {
                            warn!(dir = %self.dir.display(), error = %e, "cache entry not written")
                        }
                        Err(e) => warn!(error = %e, "cache entry not written"),
                    }
                }
                Err(_) => w.abandon(),
            }
        }
        result
    }

    async fn download_into(
        &self,
        store: &dyn ObjectStore,
        path: &ObjectPath,
        key: &FileKey,
        writer: &mut Option<Writer>,
    ) -> object_store::Result<()> {
        let mut stream = store.get_opts(path, GetOptions::new()).await?.into_stream();
        let mut pending: Vec<Bytes> = Vec::new();
        let mut pending_len = 0;
        loop {
            let chunk = stream.next().await.transpose()?;
            let end = chunk.is_none();
            if let Some(chunk) = chunk {
                self.fetched_bytes
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                pending_len += chunk.len();
                pending.push(chunk);
            }
            if pending_len >= WRITE_CHUNK || (end && pending_len > 0) {
                let Some(mut w) = writer.take() else {
                    return Ok(());
                };
                let chunks = std::mem::take(&mut pending);
                pending_len = 0;
                let written = tokio::task::spawn_blocking(move || {
                    let result = chunks.iter().try_for_each(|c| w.write(c));
                    (w, result)
                })
                .await
                .map_err(|source| object_store::Error::JoinError { source })?;
                let (w, result) = written;
                if let Err(e) = result {
                    warn!(dir = %self.dir.display(), error = %e, "cache entry not written");
                    w.abandon();
                    return Ok(());
                }
                *writer = Some(w);
            }
            if end {
                break;
            }
        }
        let written = writer.as_ref().map_or(key.size, Writer::written);
        if written != key.size {
            return Err(object_store::Error::Generic {
                store: "cache",
                source: format!("{} bytes fetched of {path}, {} expected", written, key.size)
                    .into(),
            });
        }
        Ok(())
    }

    /// `range` of the file from the cache, counted as a hit.
    async fn hit(self: &Arc<Self>, key: &FileKey, range: Range<u64>) -> Option<Bytes> {
        self.hit_counted(key, range, true).await
    }

    /// `range` of the file from the cache when it holds it whole and sound;
    /// a damaged entry is removed.
    async fn hit_counted(
        self: &Arc<Self>,
        key: &FileKey,
        range: Range<u64>,
        count: bool,
    ) -> Option<Bytes> {
        let this = self.clone();
        let key_owned = key.clone();
        let read = tokio::task::spawn_blocking(move || this.read_entry(&key_owned, range));
        let bytes = read.await.ok()??;
        if count {
            self.hit_bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        Some(bytes)
    }

    fn read_entry(&self, key: &FileKey, range: Range<u64>) -> Option<Bytes> {
        let entry = match self.open_entry(key) {
            Ok(Some(entry)) => entry,
            Ok(None) => return None,
            Err(e) => {
                self.discard(key, &e);
                return None;
            }
        };
        match entry.read(range) {
            Ok(bytes) => Some(Bytes::from(bytes)),
            Err(e) => {
                self.discard(key, &e);
                None
            }
        }
    }

    /// The entry of `key`, opened once per process; `None` when there is none.
    fn open_entry(&self, key: &FileKey) -> Result<Option<Arc<Entry>>, entry::EntryError> {
        if let Some(entry) = locked(&self.opened).get(&key.name) {
            return Ok(Some(entry.clone()));
        }
        let path = self.entry_path(&key.name, key.size);
        match Entry::open(&path, &key.identity, key.size) {
            Ok(entry) => {
                // Last used now: entries of no current job go oldest first.
                if let Ok(file) = File::options().write(true).open(&path) {
                    let _ = file.set_modified(std::time::SystemTime::now());
                }
                let entry = Arc::new(entry);
                locked(&self.opened).insert(key.name.clone(), entry.clone());
                self.mark(&key.name, true);
                Ok(Some(entry))
            }
            Err(entry::EntryError::Io { cause: source, .. })
                if source.kind() == io::ErrorKind::NotFound =>
            {
                self.mark(&key.name, false);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Removes a damaged entry: the file is fetched again.
    fn discard(&self, key: &FileKey, error: &entry::EntryError) {
        warn!(error = %error, "cache entry removed; the file is fetched again");
        locked(&self.opened).remove(&key.name);
        let path = self.entry_path(&key.name, key.size);
        if std::fs::remove_file(&path).is_ok() {
            let _ = self
                .bytes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                    Some(b.saturating_sub(key.size))
                });
        }
        self.mark(&key.name, false);
    }

    /// Room for an entry of `incoming` bytes named `name`, under the
    /// directory's lock: a writer for it, or `None` when the cache keeps
    /// what it holds instead.
    fn reserve(&self, name: &str, incoming: u64) -> io::Result<Option<Writer>> {
        let lock = self.lock()?;
        let held = self.scan()?;
        let decision = admit(self.capacity, &held, incoming);
        let writer = match decision {
            Admission::Refuse => None,
            Admission::Admit { evict } => {
                for gone in &evict {
                    if let Some(h) = held.iter().find(|h| &h.name == gone) {
                        let _ = std::fs::remove_file(self.entry_path(gone, h.bytes));
                    }
                    locked(&self.opened).remove(gone);
                    self.mark(gone, false);
                }
                let temp = self
                    .dir
                    .join(format!("{name}.{}.{incoming}.{TEMP}", std::process::id()));
                Some(Writer::create(temp)?)
            }
        };
        drop(lock);
        Ok(writer)
    }

    /// The directory's lock, held until dropped.
    fn lock(&self) -> io::Result<File> {
        let path = self.dir.join(".lock");
        let file =
            crate::private::file_options(File::options().create(true).truncate(false).write(true))
                .open(&path)?;
        crate::private::tighten_file(&file, &path, "cache lock");
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(file)
    }

    /// [`Cache::scan`] under the directory's lock; `tighten` makes the
    /// entries an older build left readable by others private first.
    fn locked_scan(&self, tighten: bool) -> io::Result<Vec<Held>> {
        let _lock = self.lock()?;
        if tighten {
            for item in std::fs::read_dir(&self.dir)? {
                let item = item?;
                if item.file_type()?.is_file() {
                    crate::private::tighten_path(&item.path(), "cache entry");
                }
            }
        }
        self.scan()
    }

    /// What the directory holds: whole entries, and entries being written
    /// by live processes (counted at their final size, never evicted);
    /// those of processes gone are removed. Counts the bytes held.
    fn scan(&self) -> io::Result<Vec<Held>> {
        let job = locked(&self.job).clone();
        let mut held = Vec::new();
        for item in std::fs::read_dir(&self.dir)? {
            let item = item?;
            let file_name = item.file_name();
            let Some(file_name) = file_name.to_str() else {
                continue;
            };
            let parts: Vec<&str> = file_name.split('.').collect();
            match parts[..] {
                [name, size, ENTRY] => {
                    let (Ok(size), Ok(meta)) = (size.parse::<u64>(), item.metadata()) else {
                        continue;
                    };
                    let used = meta
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_secs());
                    held.push(Held {
                        name: name.to_string(),
                        bytes: size,
                        in_job: job.contains(name),
                        used,
                    });
                }
                [_, pid, size, TEMP] => {
                    let (Ok(pid), Ok(size)) = (pid.parse::<u32>(), size.parse::<u64>()) else {
                        continue;
                    };
                    if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
                        held.push(Held {
                            name: file_name.to_string(),
                            bytes: size,
                            in_job: true,
                            used: u64::MAX,
                        });
                    } else {
                        let _ = std::fs::remove_file(item.path());
                    }
                }
                _ => {}
            }
        }
        let whole: u64 = held
            .iter()
            .filter(|h| h.used != u64::MAX)
            .map(|h| h.bytes)
            .sum();
        self.bytes.store(whole, Ordering::Relaxed);
        Ok(held)
    }
}

#[cfg(test)]
mod tests;
