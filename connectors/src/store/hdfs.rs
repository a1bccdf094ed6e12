//! The HDFS store (`hdfs://` and `viewfs://` URLs), over the native Rust client.
//!
//! The client reads `core-site.xml` and `hdfs-site.xml` from `HADOOP_CONF_DIR`
//! (else `HADOOP_HOME/etc/hadoop`), so HA nameservices and viewfs mount tables
//! resolve as they do for Hadoop's own client. With simple authentication the
//! user is `HADOOP_USER_NAME`, else the login name; where `core-site.xml` says
//! `hadoop.security.authentication=kerberos`, the client authenticates with the
//! Kerberos ticket cache (`kinit`, or a keytab login: see [`super::kerberos`]) or
//! a delegation token file (`HADOOP_TOKEN_FILE_LOCATION`), and protects RPC and
//! block transfers at the level the cluster asks for. A refusal is explained in
//! one line by [`super::kerberos::KerberosError`].
//!
//! The first request of a store checks that the namenode answers, bounded by
//! [`DEFAULT_CONNECT_TIMEOUT`]: an unknown host, a refused connection or a silent
//! address fail in seconds with the URL in the message instead of hanging.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use hdfs_native::file::FileReader;
use hdfs_native::{Client, ClientBuilder, HdfsError};
use hdfs_native_object_store::HdfsObjectStore;
use object_store::path::Path;
#[allow(deprecated)]
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOpts, PutOptions, PutPayload, PutResult,
    RenameOptions, Result as StoreResult,
};
use tokio::sync::OnceCell;

use super::hdfs_open::OpenFiles;
use super::kerberos::{self, KerberosError};
use super::Location;
use crate::error::{Error, Result};

/// How long the first contact with the namenode may take (DNS, TCP connect and
/// one metadata call) before the store gives up.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// Name of this store in `object_store` errors.
const STORE: &str = "HDFS";

/// Why the namenode behind a URL could not be used.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    /// The client failed before an answer: unknown host, refused connection, ...
    #[error("cannot connect to the namenode of {url}: {cause}")]
    Failed {
        /// `scheme://authority` of the store.
        url: String,
        /// What the client said.
        cause: HdfsError,
    },
    /// The namenode asks for Kerberos, and the login failed (the Kerberos
    /// error names the store and what to do).
    #[error("cannot log in to the namenode: {0}")]
    Kerberos(KerberosError),
    /// No answer in time (a silent address, a firewall dropping packets).
    #[error("no answer from the namenode of {url} within {timeout:?}")]
    TimedOut {
        /// `scheme://authority` of the store.
        url: String,
        /// The bound that was exceeded.
        timeout: Duration,
    },
}

/// An `hdfs://` or `viewfs://` URL cut into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HdfsUrl {
    /// `hdfs://authority` (scheme lowercased): the store's identity and display base.
    base: String,
    /// The path inside the filesystem, as written (HDFS names are not URL-encoded).
    path: String,
}

impl HdfsUrl {
    /// Splits `url`; the authority (namenode `host:port` or a nameservice) is required.
    fn parse(url: &str) -> Result<HdfsUrl> {
        let invalid = |reason: &str| Error::InvalidUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("expected hdfs://HOST[:PORT]/PATH"))?;
        let scheme = scheme.to_ascii_lowercase();
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(invalid(
                "no namenode or nameservice: write hdfs://HOST:PORT/PATH or hdfs://NAMESERVICE/PATH",
            ));
        }
        if authority.contains('@') {
            return Err(invalid(
                "user names in the url are not supported; set HADOOP_USER_NAME",
            ));
        }
        if path.contains(['?', '#']) {
            return Err(invalid("query strings and fragments are not supported"));
        }
        Ok(HdfsUrl {
            base: format!("{scheme}://{authority}"),
            path: path.to_string(),
        })
    }
}

/// The namenode's RPC port when an `hdfs://` URL names none, as in Hadoop
/// (`fs.defaultFS = hdfs://namenode` means port 8020).
pub const DEFAULT_NAMENODE_PORT: u16 = 8020;

impl HdfsUrl {
    /// `hdfs://HOST/PATH` as Hadoop reads it: `hdfs://HOST:8020/PATH`, unless
    /// HOST is a nameservice of the configuration (an HA pair) or the URL is
    /// `viewfs://` (a mount table).
    fn with_default_port(mut self, settings: &HadoopSettings) -> HdfsUrl {
        let Some(authority) = self.base.strip_prefix("hdfs://") else {
            return self;
        };
        // The port follows the last `:` outside an IPv6 literal's brackets.
        let host_end = authority.rfind(']').map_or(0, |i| i + 1);
        if authority[host_end..].contains(':') || settings.is_nameservice(authority) {
            return self;
        }
        self.base = format!("hdfs://{authority}:{DEFAULT_NAMENODE_PORT}");
        self
    }
}

/// Opens an `hdfs://` or `viewfs://` URL: a store for its authority, rooted at its path.
pub(super) fn open(url: &str) -> Result<Location> {
    HdfsStoreBuilder::new(url).build()
}

/// Builds the HDFS store of one URL.
#[derive(Debug, Clone)]
pub struct HdfsStoreBuilder {
    url: String,
    connect_timeout: Duration,
    config: Vec<(String, String)>,
    config_dir: Option<String>,
}

impl HdfsStoreBuilder {
    /// A builder for `url` (`hdfs://HOST:PORT/PATH`, `hdfs://NAMESERVICE/PATH`, `viewfs://...`).
    pub fn new(url: impl Into<String>) -> Self {
        HdfsStoreBuilder {
            url: url.into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            config: Vec::new(),
            config_dir: None,
        }
    }

    /// Bounds the first contact with the namenode (default 20 s, `DEFAULT_CONNECT_TIMEOUT`).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Reads `core-site.xml` and `hdfs-site.xml` from `dir` instead of `HADOOP_CONF_DIR`.
    pub fn with_config_dir(mut self, dir: impl Into<String>) -> Self {
        self.config_dir = Some(dir.into());
        self
    }

    /// Sets a Hadoop configuration key, over what the configuration files say.
    pub fn with_config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.push((key.into(), value.into()));
        self
    }

    /// Builds the store and the dataset location of the URL. Does no I/O beyond
    /// reading the Hadoop configuration files; the namenode is first contacted by
    /// the first request.
    pub fn build(self) -> Result<Location> {
        let settings = HadoopSettings::read(self.config_dir.as_deref(), &self.config);
        let parsed = HdfsUrl::parse(&self.url)?.with_default_port(&settings);
        let root = Path::parse(&parsed.path).map_err(|e| Error::InvalidUrl {
            url: self.url.clone(),
            reason: e.to_string(),
        })?;
        let mut client = ClientBuilder::new()
            .with_url(parsed.base.clone())
            .with_config(self.config.clone());
        if let Some(dir) = self.config_dir.clone() {
            client = client.with_config_dir(dir);
        }
        let security = Security::of(&settings);
        let client = client.build().map_err(|e| Error::InvalidUrl {
            url: self.url.clone(),
            reason: crate::error::one_line(&e.to_string()),
        })?;
        let store = HdfsStore {
            inner: HdfsObjectStore::new(client.clone()),
            client,
            probe_path: format!("/{root}"),
            base: parsed.base.clone(),
            connect_timeout: self.connect_timeout,
            connected: Arc::new(OnceCell::new()),
            security,
            open: Arc::default(),
        };
        Ok(Location::new(Arc::new(store), root, parsed.base))
    }
}

/// The `hdfs-native` object store, with a bounded first contact and errors that
/// name the namenode.
#[derive(Debug, Clone)]
struct HdfsStore {
    inner: HdfsObjectStore,
    /// The same client, for the connection check.
    client: Client,
    /// The path asked about by the connection check (the dataset root).
    probe_path: String,
    /// `hdfs://authority`.
    base: String,
    connect_timeout: Duration,
    /// The outcome of the connection check, made once and shared by all clones.
    connected: Arc<OnceCell<std::result::Result<(), Arc<ConnectError>>>>,
    /// What the client configuration says about Kerberos.
    security: Security,
    /// Block locations of the files read, shared by all clones.
    open: Arc<OpenFiles>,
}

/// The client configuration's security settings, as far as errors need them.
#[derive(Debug, Clone, Copy, Default)]
struct Security {
    /// `hadoop.security.authentication` is `kerberos`.
    kerberos: bool,
    /// `dfs.data.transfer.protection` is set.
    data_protection: bool,
}

/// The Hadoop client configuration as far as sluice reads it itself: the
/// settings of `core-site.xml` and `hdfs-site.xml`, then the overrides.
#[derive(Debug, Clone, Default)]
struct HadoopSettings(Vec<(String, String)>);

impl HadoopSettings {
    /// Reads `core-site.xml` and `hdfs-site.xml` where the client does
    /// (`dir`, else `HADOOP_CONF_DIR`, else `HADOOP_HOME/etc/hadoop`), then `overrides`.
    fn read(dir: Option<&str>, overrides: &[(String, String)]) -> HadoopSettings {
        let dir = dir
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HADOOP_CONF_DIR").map(Into::into))
            .or_else(|| {
                std::env::var_os("HADOOP_HOME")
                    .map(|home| std::path::PathBuf::from(home).join("etc/hadoop"))
            });
        let mut settings: Vec<(String, String)> = Vec::new();
        for file in ["core-site.xml", "hdfs-site.xml"] {
            let Some(text) = dir
                .as_ref()
                .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
            else {
                continue;
            };
            let Ok(doc) = roxmltree::Document::parse(&text) else {
                continue;
            };
            for property in doc.descendants().filter(|n| n.has_tag_name("property")) {
                let child = |tag: &str| {
                    property
                        .children()
                        .find(|c| c.has_tag_name(tag))
                        .and_then(|c| c.text())
                        .map(|t| t.trim().to_string())
                };
                if let (Some(name), Some(value)) = (child("name"), child("value")) {
                    settings.push((name, value));
                }
            }
        }
        settings.extend(overrides.iter().cloned());
        HadoopSettings(settings)
    }

    /// The value of `key`: the last one set.
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `name` is a nameservice of the configuration (an HA pair of
    /// namenodes), not a host.
    fn is_nameservice(&self, name: &str) -> bool {
        self.get(&format!("dfs.ha.namenodes.{name}")).is_some()
            || self
                .get("dfs.nameservices")
                .is_some_and(|all| all.split(',').any(|n| n.trim() == name))
    }
}

impl Security {
    /// What `settings` say about security.
    fn of(settings: &HadoopSettings) -> Security {
        Security {
            kerberos: settings
                .get("hadoop.security.authentication")
                .is_some_and(|v| v.eq_ignore_ascii_case("kerberos")),
            data_protection: settings
                .get("dfs.data.transfer.protection")
                .is_some_and(|v| !v.is_empty()),
        }
    }
}

/// Whether an error of the client comes from authentication (GSSAPI, SASL, or
/// the Kerberos library itself).
fn is_kerberos(err: &HdfsError) -> bool {
    match err {
        HdfsError::GSSAPIError(..) | HdfsError::SASLError(_) | HdfsError::NoSASLMechanism => true,
        HdfsError::OperationFailed(message) => message.contains("libgssapi"),
        _ => false,
    }
}

impl HdfsStore {
    /// Waits until the namenode has answered once; the error of a failed check
    /// is returned to every later request too.
    async fn ready(&self) -> StoreResult<()> {
        let outcome = self
            .connected
            .get_or_init(|| async {
                let call = self.client.get_file_info(&self.probe_path);
                match tokio::time::timeout(self.connect_timeout, call).await {
                    Err(_) => Err(Arc::new(ConnectError::TimedOut {
                        url: self.base.clone(),
                        timeout: self.connect_timeout,
                    })),
                    // Only transport failures mean the namenode is unreachable;
                    // "not found", permission and RPC errors came from it.
                    Ok(Err(source @ HdfsError::IOError(_))) => {
                        Err(Arc::new(ConnectError::Failed {
                            url: self.base.clone(),
                            cause: source,
                        }))
                    }
                    Ok(Err(err)) if is_kerberos(&err) => {
                        Err(Arc::new(ConnectError::Kerberos(self.kerberos_error(&err))))
                    }
                    Ok(_) => Ok(()),
                }
            })
            .await;
        outcome.clone().map_err(|e| object_store::Error::Generic {
            store: STORE,
            source: Box::new(SharedError(e)),
        })
    }
}

/// A connection error shared by every request that found the namenode unreachable.
#[derive(Debug)]
struct SharedError(Arc<ConnectError>);

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &*self.0 {
            // Told in the message, yet visible to callers asking whether a
            // login failed.
            ConnectError::Kerberos(e) => Some(e),
            other => other.source(),
        }
    }
}

/// An exception the namenode answered with, without the server's stack trace
/// (Hadoop appends it to the message).
#[derive(Debug, thiserror::Error)]
#[error("{class}: {message}")]
struct RemoteException {
    /// The exception's simple class name (`AccessControlException`).
    class: String,
    /// The first line of its message.
    message: String,
}

impl RemoteException {
    /// From the class and message of an RPC error.
    fn new(class: &str, message: &str) -> Self {
        let message = message.split("\n\tat ").next().unwrap_or_default();
        // Collapsed to one line, the trace starts at the first " at a.b.C.m(".
        let message = match message.find(" at org.apache.hadoop.") {
            Some(end) => &message[..end],
            None => message,
        };
        RemoteException {
            class: class.rsplit('.').next().unwrap_or(class).to_string(),
            message: message.trim().to_string(),
        }
    }
}

impl HdfsStore {
    /// What a failed authentication means, in words a person can act on.
    fn kerberos_error(&self, err: &HdfsError) -> KerberosError {
        match err {
            HdfsError::OperationFailed(_) => KerberosError::LibraryMissing {
                url: self.base.clone(),
            },
            other => kerberos::diagnose(&self.base, &crate::error::one_line(&other.to_string())),
        }
    }

    /// [`classify`], and authentication failures explained: Kerberos, and
    /// datanodes refusing a client that does not protect block transfers.
    fn classify(&self, path: &Path, err: object_store::Error) -> object_store::Error {
        let explained = match &err {
            object_store::Error::Generic { source, .. } => match source.downcast_ref::<HdfsError>()
            {
                Some(e) if is_kerberos(e) => Some(self.kerberos_error(e)),
                Some(HdfsError::DataTransferError(_))
                    if self.security.kerberos && !self.security.data_protection =>
                {
                    Some(KerberosError::Protection {
                        url: self.base.clone(),
                    })
                }
                _ => None,
            },
            _ => None,
        };
        match explained {
            Some(e) => object_store::Error::Generic {
                store: STORE,
                source: Box::new(e),
            },
            None => classify(path, err),
        }
    }
}

/// Shortens the namenode's exceptions to one readable line and turns permission
/// exceptions into `PermissionDenied`, so that callers can tell them apart.
fn classify(path: &Path, err: object_store::Error) -> object_store::Error {
    let object_store::Error::Generic { store, source } = err else {
        return err;
    };
    let remote = match source.downcast_ref::<HdfsError>() {
        Some(HdfsError::RPCError(class, message) | HdfsError::FatalRPCError(class, message)) => {
            RemoteException::new(class, message)
        }
        _ => return object_store::Error::Generic { store, source },
    };
    if remote.class == "AccessControlException" {
        object_store::Error::PermissionDenied {
            path: path.to_string(),
            source: Box::new(remote),
        }
    } else {
        object_store::Error::Generic {
            store,
            source: Box::new(remote),
        }
    }
}

impl HdfsStore {
    /// A range of a file, read through its kept block locations (see
    /// [`super::hdfs_open`]): one round trip to the namenode for the
    /// file's status, then the datanodes.
    async fn get_range_open(&self, location: &Path, options: GetOptions) -> StoreResult<GetResult> {
        let path = format!("/{}", location.as_ref());
        if let Some(kept) = self.open.kept(&path) {
            // The status and the first bytes side by side; the bytes count
            // only if the file is still the one the locations are of.
            let range = byte_range(&options, kept.size)?;
            let mut stream = self.range_stream(location, &path, &kept.reader, &range);
            let (meta, first) = futures::join!(self.head(location), stream.next());
            let meta = meta?;
            // A first chunk that failed (a block moved, its access token
            // expired) is asked for again below with fresh locations.
            let served = !matches!(first, Some(Err(_)));
            if kept.matches(&meta) && served {
                options.check_preconditions(&meta)?;
                let payload = stream::iter(first).chain(stream).boxed();
                return Ok(GetResult {
                    payload: GetResultPayload::Stream(payload),
                    meta,
                    range,
                    attributes: Default::default(),
                });
            }
            if !served {
                tracing::debug!(%path, "kept block locations failed; asking the namenode again");
            }
            self.open.forget(&path);
        }
        let fail = |e: HdfsError| self.classify(location, native_error(e));
        let (meta, reader) = futures::join!(self.head(location), self.client.read(&path));
        let (meta, reader) = (meta?, Arc::new(reader.map_err(fail)?));
        if reader.file_length() as u64 != meta.size {
            // The file changed between the two answers: read it the plain way.
            let result = self.inner.get_opts(location, options).await;
            return result.map_err(|e| self.classify(location, e));
        }
        self.open.keep(&path, &meta, reader.clone());
        options.check_preconditions(&meta)?;
        let range = byte_range(&options, meta.size)?;
        let payload = self.range_stream(location, &path, &reader, &range);
        Ok(GetResult {
            payload: GetResultPayload::Stream(payload),
            meta,
            range,
            attributes: Default::default(),
        })
    }

    /// The bytes `range` of the file through `reader`; a failure drops the
    /// kept locations, so that the next read asks the namenode again.
    fn range_stream(
        &self,
        location: &Path,
        path: &str,
        reader: &FileReader,
        range: &Range<u64>,
    ) -> BoxStream<'static, StoreResult<Bytes>> {
        let this = self.clone();
        let (at, path) = (location.clone(), path.to_string());
        reader
            .read_range_stream(range.start as usize, (range.end - range.start) as usize)
            .map(move |chunk| {
                chunk.map_err(|e| {
                    this.open.forget(&path);
                    this.classify(&at, native_error(e))
                })
            })
            .boxed()
    }
}

/// The bytes a ranged read asks for, in a file of `size` bytes.
fn byte_range(options: &GetOptions, size: u64) -> StoreResult<Range<u64>> {
    match &options.range {
        Some(range) => range
            .as_range(size)
            .map_err(|e| object_store::Error::Generic {
                store: STORE,
                source: Box::new(e),
            }),
        None => Ok(0..size),
    }
}

/// Tries of a put the namenode refuses because a block is not replicated
/// yet (Hadoop's client tries `addBlock` 5 times too).
const NOT_REPLICATED_TRIES: u32 = 5;
/// The first wait before such a try, doubled after each.
const NOT_REPLICATED_FIRST_WAIT: Duration = Duration::from_millis(400);

/// Whether `err` is the namenode's `NotReplicatedYetException`: a block of
/// the file written is not yet on enough datanodes.
fn not_replicated_yet(err: &object_store::Error) -> bool {
    let object_store::Error::Generic { source, .. } = err else {
        return false;
    };
    matches!(
        source.downcast_ref::<HdfsError>(),
        Some(HdfsError::RPCError(class, _)) if class.ends_with("NotReplicatedYetException")
    )
}

/// An error of the native client as `hdfs-native-object-store` gives it
/// (what [`HdfsStore::classify`] explains).
fn native_error(err: HdfsError) -> object_store::Error {
    match err {
        HdfsError::FileNotFound(path) => object_store::Error::NotFound {
            path: path.clone(),
            source: Box::new(HdfsError::FileNotFound(path)),
        },
        err => object_store::Error::Generic {
            store: STORE,
            source: Box::new(err),
        },
    }
}

impl fmt::Display for HdfsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HdfsStore({})", self.base)
    }
}

#[async_trait]
#[allow(deprecated)]
impl ObjectStore for HdfsStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> StoreResult<PutResult> {
        self.ready().await?;
        // The namenode refuses the next block of a file (or its completion)
        // while the previous block is not yet on enough datanodes; Hadoop's
        // client waits and asks again (`dfs.client.block.write.
        // locateFollowingBlock.retries`, 400 ms doubling). A put is written
        // to a hidden temporary file and renamed into place, so it is written
        // again whole: the refused attempt's temporary file stays hidden.
        let mut wait = NOT_REPLICATED_FIRST_WAIT;
        let mut tries = 1;
        loop {
            let result = self
                .inner
                .put_opts(location, payload.clone(), opts.clone())
                .await;
            match result {
                Err(e) if tries < NOT_REPLICATED_TRIES && not_replicated_yet(&e) => {
                    tracing::debug!(%location, tries, "a block not replicated yet: written again");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    tries += 1;
                }
                result => return result.map_err(|e| self.classify(location, e)),
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOpts,
    ) -> StoreResult<Box<dyn MultipartUpload>> {
        self.ready().await?;
        let result = self.inner.put_multipart_opts(location, opts).await;
        result.map_err(|e| self.classify(location, e))
    }

    /// Reads (or, with `head`, describes) a file; a directory is `NotFound`,
    /// which the listing relies on to tell a file root from a directory root.
    async fn get_opts(&self, location: &Path, options: GetOptions) -> StoreResult<GetResult> {
        self.ready().await?;
        if !options.head && options.range.is_some() && options.version.is_none() {
            return self.get_range_open(location, options).await;
        }
        let result = self.inner.get_opts(location, options).await;
        let mut result = result.map_err(|e| self.classify(location, e))?;
        // Block transfers fail while the body streams: explain those too.
        if let GetResultPayload::Stream(stream) = result.payload {
            let this = self.clone();
            let path = location.clone();
            result.payload = GetResultPayload::Stream(
                stream
                    .map(move |chunk| chunk.map_err(|e| this.classify(&path, e)))
                    .boxed(),
            );
        }
        Ok(result)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> StoreResult<Vec<Bytes>> {
        self.ready().await?;
        let result = self.inner.get_ranges(location, ranges).await;
        result.map_err(|e| self.classify(location, e))
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, StoreResult<Path>>,
    ) -> BoxStream<'static, StoreResult<Path>> {
        let this = self.clone();
        stream::once(async move {
            match this.ready().await {
                Ok(()) => this.inner.delete_stream(locations),
                Err(e) => stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, StoreResult<ObjectMeta>> {
        let this = self.clone();
        let prefix = prefix.cloned();
        stream::once(async move {
            match this.ready().await {
                Ok(()) => this.inner.list(prefix.as_ref()),
                Err(e) => stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    /// One directory: files as objects, subdirectories as common prefixes; an
    /// absent directory lists as empty.
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> StoreResult<ListResult> {
        self.ready().await?;
        let result = self.inner.list_with_delimiter(prefix).await;
        result.map_err(|e| self.classify(prefix.unwrap_or(&Path::default()), e))
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> StoreResult<()> {
        self.ready().await?;
        let result = self.inner.copy_opts(from, to, options).await;
        result.map_err(|e| self.classify(from, e))
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> StoreResult<()> {
        self.ready().await?;
        let result = self.inner.rename_opts(from, to, options).await;
        result.map_err(|e| self.classify(from, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    #[test]
    fn only_the_namenodes_not_replicated_yet_is_written_again() {
        let rpc = |class: &str| object_store::Error::Generic {
            store: STORE,
            source: Box::new(HdfsError::RPCError(
                class.to_string(),
                "refused".to_string(),
            )),
        };
        assert!(not_replicated_yet(&rpc(
            "org.apache.hadoop.hdfs.server.namenode.NotReplicatedYetException"
        )));
        assert!(!not_replicated_yet(&rpc(
            "org.apache.hadoop.security.AccessControlException"
        )));
        assert!(!not_replicated_yet(&object_store::Error::NotFound {
            path: "a".into(),
            source: "gone".into(),
        }));
    }

    #[test]
    fn urls_split_into_base_and_literal_path() {
        let u = HdfsUrl::parse("HDFS://nn1:8020/warehouse/dt=a%3Ab").expect("valid");
        assert_eq!(u.base, "hdfs://nn1:8020");
        assert_eq!(u.path, "/warehouse/dt=a%3Ab");
        let u = HdfsUrl::parse("viewfs://cluster").expect("valid");
        assert_eq!(u.base, "viewfs://cluster");
        assert_eq!(u.path, "/");
    }

    #[test]
    fn a_host_without_a_port_is_port_8020_as_in_hadoop() {
        let none = HadoopSettings::default();
        let base = |url: &str, settings: &HadoopSettings| {
            HdfsUrl::parse(url)
                .expect(url)
                .with_default_port(settings)
                .base
        };
        assert_eq!(
            base("hdfs://namenode/warehouse/clicks", &none),
            "hdfs://namenode:8020"
        );
        assert_eq!(base("HDFS://namenode", &none), "hdfs://namenode:8020");
        assert_eq!(base("hdfs://[::1]/x", &none), "hdfs://[::1]:8020");
        for kept in [
            "hdfs://nn:9000/x",
            "hdfs://[::1]:9000/x",
            "viewfs://cluster/x",
        ] {
            assert_eq!(base(kept, &none), HdfsUrl::parse(kept).expect(kept).base);
        }
        // A nameservice (an HA pair of namenodes) is a name, not a host.
        let ha = HadoopSettings(vec![
            ("dfs.nameservices".to_string(), "prod, test".to_string()),
            ("dfs.ha.namenodes.backup".to_string(), "nn1,nn2".to_string()),
        ]);
        assert_eq!(base("hdfs://prod/x", &ha), "hdfs://prod");
        assert_eq!(base("hdfs://test/x", &ha), "hdfs://test");
        assert_eq!(base("hdfs://backup/x", &ha), "hdfs://backup");
        assert_eq!(base("hdfs://namenode/x", &ha), "hdfs://namenode:8020");
        // What the location shows and reads: the path is kept.
        let loc = HdfsStoreBuilder::new("hdfs://127.0.0.1/warehouse/x")
            .with_config_dir("/nonexistent")
            .build()
            .expect("opens without I/O");
        assert_eq!(loc.url(), "hdfs://127.0.0.1:8020/warehouse/x");
    }

    #[test]
    fn urls_without_authority_or_with_a_user_are_refused() {
        for bad in [
            "hdfs:///warehouse/x",
            "hdfs://alice@nn:8020/x",
            "hdfs://nn/x?op=1",
        ] {
            let err = HdfsUrl::parse(bad).expect_err(bad);
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn locations_display_full_urls() {
        let loc = open("hdfs://127.0.0.1:9000/warehouse/x").expect("opens without I/O");
        assert_eq!(loc.url(), "hdfs://127.0.0.1:9000/warehouse/x");
        let file = Path::from("warehouse/x/part-0.parquet");
        assert_eq!(
            loc.display(&file),
            "hdfs://127.0.0.1:9000/warehouse/x/part-0.parquet"
        );
    }

    #[test]
    fn access_control_exceptions_are_permission_denied() {
        let denied = object_store::Error::Generic {
            store: "HdfsObjectStore",
            source: Box::new(HdfsError::RPCError(
                "org.apache.hadoop.security.AccessControlException".to_string(),
                "Permission denied: user=nobody, access=READ_EXECUTE \
                 at org.apache.hadoop.hdfs.server.namenode.FSPermissionChecker.check(X.java:1)"
                    .to_string(),
            )),
        };
        let path = Path::from("private/x");
        let err = classify(&path, denied);
        assert!(
            matches!(err, object_store::Error::PermissionDenied { .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.ends_with(
                "AccessControlException: Permission denied: user=nobody, access=READ_EXECUTE"
            ),
            "{text}"
        );
        let other = object_store::Error::Generic {
            store: "HdfsObjectStore",
            source: Box::new(HdfsError::ChecksumError),
        };
        let err = classify(&path, other);
        assert!(matches!(err, object_store::Error::Generic { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_refused_connection_fails_fast_naming_the_namenode() {
        let loc = open("hdfs://127.0.0.1:1/x").expect("opens without I/O");
        let started = std::time::Instant::now();
        let err = loc.store.list_with_delimiter(Some(&loc.root)).await;
        let err = err.expect_err("nothing listens on port 1");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(err.to_string().contains("hdfs://127.0.0.1:1"), "{err}");
    }

    #[tokio::test]
    async fn a_silent_namenode_is_bounded_by_the_connect_timeout() {
        // A listening socket that never answers: the RPC handshake stalls.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let loc = HdfsStoreBuilder::new(format!("hdfs://127.0.0.1:{port}/x"))
            .with_connect_timeout(Duration::from_millis(300))
            .build()
            .expect("opens without I/O");
        let err = loc.store.head(&loc.root).await.expect_err("no answer");
        assert!(err.to_string().contains("no answer"), "{err}");
        drop(listener);
    }
}
