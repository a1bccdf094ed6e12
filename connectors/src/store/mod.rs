//! Stores: from a URL or bare path to an `ObjectStore` and the path inside it.
//!
//! Every backend lives in its own module and is reached only through
//! [`open`]; the reading code never assumes a local filesystem.

mod azure;
mod cloud;
mod gcs;
pub mod gssapi;
mod hdfs;
mod hdfs_open;
pub mod kerberos;
mod local;
pub(crate) mod pinned;
mod s3;
pub mod settings;
mod vended;

pub use cloud::{
    set_timeouts, timeouts, Timeouts, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT,
};
pub use hdfs::HdfsStoreBuilder;
pub(crate) use local::Oddity;
pub use vended::{refresh_delay, set_vended, vended_expiry_ms};

use std::sync::Arc;

use object_store::path::Path;
use object_store::ObjectStore;

use crate::error::{Error, Result};

/// A dataset location: the store that holds it and the path of its root.
#[derive(Clone, Debug)]
pub struct Location {
    /// The store holding the data.
    pub store: Arc<dyn ObjectStore>,
    /// The root of the dataset inside the store.
    pub root: Path,
    /// How paths of this store are shown to users (`file://`, `s3://bucket`, ...).
    base: String,
    /// Where reads of its files are kept for later epochs (`--cache`).
    cache: Option<Arc<crate::cache::Cache>>,
    /// The locations of every source of a job that mixes several, by the
    /// index a split names (`Split::source`); empty for one source.
    sources: Arc<Vec<Location>>,
}

impl Location {
    /// Builds a location from its parts; `base` prefixes every displayed path.
    pub fn new(store: Arc<dyn ObjectStore>, root: Path, base: impl Into<String>) -> Self {
        Location {
            store,
            root,
            base: base.into(),
            cache: None,
            sources: Arc::default(),
        }
    }

    /// This location as the first of several sources, `all` (itself first):
    /// a split is read from the source it names.
    pub fn with_sources(mut self, all: Vec<Location>) -> Location {
        self.sources = Arc::new(all);
        self
    }

    /// The location of source `index` (this one when it has no sources).
    pub fn of_source(&self, index: u32) -> &Location {
        self.sources.get(index as usize).unwrap_or(self)
    }

    /// Whether this is the local filesystem (never cached: it is local).
    pub fn is_local(&self) -> bool {
        matches!(Scheme::of(&self.base), Ok(Scheme::Local))
    }

    /// Whether every source read through this location is on the local
    /// filesystem (this one, or each of its sources): nothing to cache.
    pub fn is_all_local(&self) -> bool {
        match self.sources.is_empty() {
            true => self.is_local(),
            false => self.sources.iter().all(Location::is_local),
        }
    }

    /// This location with the reads of its splits' files kept in `cache`,
    /// each of its sources' too; the local filesystem as it is.
    pub fn with_cache(mut self, cache: Arc<crate::cache::Cache>) -> Location {
        if !self.sources.is_empty() {
            let sources = self
                .sources
                .iter()
                .map(|source| source.clone().with_cache(cache.clone()))
                .collect();
            self.sources = Arc::new(sources);
        }
        if !self.is_local() {
            self.cache = Some(cache);
        }
        self
    }

    /// The cache reads go through, when there is one (of any source).
    pub fn cache(&self) -> Option<&Arc<crate::cache::Cache>> {
        self.cache
            .as_ref()
            .or_else(|| self.sources.iter().find_map(|s| s.cache.as_ref()))
    }

    /// The cache's key of `split`'s file, `None` when it is never cached
    /// (a local file, or one planned without an entity tag or time).
    pub fn cache_key(&self, split: &crate::split::Split) -> Option<crate::cache::FileKey> {
        let at = self.of_source(split.source);
        if at.is_local() {
            return None;
        }
        crate::cache::FileKey::of(&at.base, split)
    }

    /// The user-facing URL of `path` in this store (never carries credentials).
    pub fn display(&self, path: &Path) -> String {
        format!("{}/{}", self.base, path)
    }

    /// The URL every path of this store starts with (`file://`, `s3://bucket`,
    /// `hdfs://nn:8020`): which filesystem or bucket this is.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The user-facing URL of the dataset root.
    pub fn url(&self) -> String {
        self.display(&self.root)
    }

    /// This location with reads of `split`'s file checked against its plan
    /// (see [`pinned`]): a file changed since planning is never read.
    pub(crate) fn pinned(&self, split: &crate::split::Split) -> Location {
        let tags = match Scheme::of(&self.base) {
            Ok(Scheme::Local) => pinned::Tags::Local,
            _ => pinned::Tags::Tagged,
        };
        let pinned: Arc<dyn ObjectStore> =
            Arc::new(pinned::Pinned::new(self.store.clone(), split, tags));
        let store = match (&self.cache, self.cache_key(split)) {
            (Some(cache), Some(key)) => Arc::new(crate::cache::store::Cached::new(
                pinned,
                cache.clone(),
                key,
                split,
            )),
            _ => pinned,
        };
        Location {
            store,
            root: self.root.clone(),
            base: self.base.clone(),
            cache: self.cache.clone(),
            sources: Arc::default(),
        }
    }

    /// The filesystem path of `path` when this is the local store.
    pub(crate) fn local_path(&self, path: &Path) -> Option<std::path::PathBuf> {
        match Scheme::of(&self.base) {
            Ok(Scheme::Local) => local::filesystem_path(path),
            _ => None,
        }
    }

    /// The filesystem path of the root when this is the local store (a
    /// watcher of local directories needs it).
    pub fn local_dir(&self) -> Option<std::path::PathBuf> {
        self.local_path(&self.root)
    }

    /// What the directory `dir` of the local store holds that an object listing
    /// hides or misreports (dangling links, FIFOs); nothing for other stores.
    pub(crate) async fn oddities(&self, dir: &Path) -> Result<Vec<Oddity>> {
        let Some(fs_dir) = self.local_path(dir) else {
            return Ok(Vec::new());
        };
        let found = tokio::task::spawn_blocking(move || local::oddities(&fs_dir)).await;
        let io = match found {
            Ok(Ok(found)) => return Ok(found),
            Ok(Err(e)) => e,
            Err(e) => std::io::Error::other(e),
        };
        Err(Error::from_store(
            self.display(dir),
            object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(io),
            },
        ))
    }

    /// The bucket or container holding the data (`s3://bucket`, `az://container`),
    /// or `None` for filesystems, where a missing root is just a missing directory.
    pub fn bucket(&self) -> Option<&str> {
        match Scheme::of(&self.base) {
            Ok(Scheme::S3 | Scheme::Gcs | Scheme::Azure) => Some(&self.base),
            _ => None,
        }
    }
}

/// The filesystem path a location names when it is local: a bare path as
/// it is, a `file://` URL (the scheme in any case, as everywhere) without
/// its scheme; `None` for any other scheme. The one `file://` rule.
pub fn local_path_of(location: &str) -> Option<&str> {
    match location.split_once("://") {
        None => Some(location),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("file") => Some(rest),
        Some(_) => None,
    }
}

/// The URL schemes sluice understands, and whether each is available yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `file://` or a bare path.
    Local,
    /// `hdfs://` and `viewfs://`.
    Hdfs,
    /// `s3://` and `s3a://`.
    S3,
    /// `gs://`.
    Gcs,
    /// `az://`, `abfs://`, `abfss://`.
    Azure,
}

impl Scheme {
    /// Every store, as `sluice version --json` lists them.
    pub const ALL: [Scheme; 5] = [
        Scheme::Local,
        Scheme::Hdfs,
        Scheme::S3,
        Scheme::Gcs,
        Scheme::Azure,
    ];

    /// The scheme users write first for the store (`file`, `hdfs`, `s3`, `gs`, `az`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Local => "file",
            Scheme::Hdfs => "hdfs",
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Azure => "az",
        }
    }

    /// Parses the scheme of `url`; a string without `://` is a local path.
    pub fn of(url: &str) -> Result<Scheme> {
        let Some((scheme, _)) = url.split_once("://") else {
            return Ok(Scheme::Local);
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => Ok(Scheme::Local),
            "hdfs" | "viewfs" => Ok(Scheme::Hdfs),
            "s3" | "s3a" => Ok(Scheme::S3),
            "gs" => Ok(Scheme::Gcs),
            "az" | "abfs" | "abfss" => Ok(Scheme::Azure),
            other => Err(Error::InvalidUrl {
                url: url.to_string(),
                reason: format!("unknown scheme `{other}` (use file, hdfs, s3, gs or az)"),
            }),
        }
    }
}

/// Opens the store behind `url` and returns the dataset location in it.
pub fn open(url: &str) -> Result<Location> {
    match Scheme::of(url)? {
        Scheme::Local => local::open(url),
        Scheme::Hdfs => hdfs::open(url),
        Scheme::S3 => s3::open(url),
        Scheme::Gcs => gcs::open(url),
        Scheme::Azure => azure::open(url),
    }
}
