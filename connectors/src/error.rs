//! Errors of the connectors crate: one public enum, each variant naming what failed.

use std::sync::Arc;

/// What went wrong while finding or reading a dataset.
///
/// Every variant carries the URL or path of the thing that failed so that a
/// one-line message is enough for a user to act on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The URL could not be understood or names a store that is not supported.
    #[error("invalid url {url}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// Nothing exists at the path.
    #[error("no such path: {path}")]
    NotFound {
        /// The missing path.
        path: String,
    },
    /// The path is a directory with nothing in it.
    #[error("{path} is an empty directory: it exists but holds no data files")]
    EmptyDir {
        /// The directory.
        path: String,
    },
    /// A symbolic link among the data whose target does not exist.
    #[error("broken symbolic link {path}: its target {target} does not exist; restore the target or remove the link")]
    DanglingLink {
        /// The link.
        path: String,
        /// Where it points.
        target: String,
    },
    /// The store refused to let us read the path.
    #[error("permission denied reading {path}: {cause}")]
    PermissionDenied {
        /// The path that could not be read.
        path: String,
        /// The store's error: a foreign error, told in the message.
        cause: Arc<object_store::Error>,
    },
    /// The bucket or container a URL names does not exist.
    #[error("no such {noun} {bucket} (listing {url})")]
    NoSuchBucket {
        /// `bucket` or `container`.
        noun: &'static str,
        /// The bucket as a URL (`s3://name`).
        bucket: String,
        /// The URL being listed.
        url: String,
    },
    /// The store for a URL could not be set up (credentials, endpoint, options).
    #[error("cannot set up the store for {url}: {cause}")]
    StoreConfig {
        /// The URL as given.
        url: String,
        /// The store builder's error: a foreign error, told in the message.
        cause: Arc<object_store::Error>,
    },
    /// Any other failure of the store while listing or reading.
    #[error("cannot read {path}: {cause}")]
    Store {
        /// The path being read.
        path: String,
        /// The store's error: a foreign error, told in the message.
        cause: Arc<object_store::Error>,
    },
    /// A data file that cannot be decoded.
    #[error("corrupt or unreadable {format} file {path}: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// The format it was read as.
        format: String,
        /// What the decoder said.
        reason: String,
    },
    /// A `--filter` whose computation fails on a row of a file (an overflow,
    /// a division by zero, a malformed string cast in ANSI mode), where
    /// Spark's query fails too.
    #[error("{what} fails on a row of {path}: {reason} (Spark fails the query on this row too)")]
    FilterFailed {
        /// The file.
        path: String,
        /// The expression, as `--filter `EXPR`` or `--columns `EXPR AS name``.
        what: String,
        /// What failed.
        reason: String,
    },
    /// A data file that changed since the dataset was planned (its size, entity
    /// tag or modification time differ): it is not read, and reading it again
    /// does not help.
    #[error("{path} changed since the job was planned ({reason}): restore the file as it was, or plan the job again (run it without --state, or with a new one)")]
    Changed {
        /// The file.
        path: String,
        /// What differs.
        reason: String,
    },
    /// The directory layout breaks a rule (mixed partition depths, conflicting columns).
    #[error("bad layout in {path}: {reason}")]
    Layout {
        /// The dataset root.
        path: String,
        /// The rule that was broken.
        reason: String,
    },
    /// Two files disagree on the type of a column.
    #[error(
        "schema clash on column `{column}`: {left_type} in {left} but {right_type} in {right}"
    )]
    SchemaClash {
        /// The column.
        column: String,
        /// The first file.
        left: String,
        /// Its type there.
        left_type: String,
        /// The second file.
        right: String,
        /// Its type there.
        right_type: String,
    },
    /// The files are of several formats, or of none we know.
    #[error("cannot tell the format of {path}: {reason}")]
    Format {
        /// The file or dataset.
        path: String,
        /// What is ambiguous.
        reason: String,
    },
    /// A file holds what sluice does not read as rows (pickled or
    /// Java-serialized objects).
    #[error("{path} holds objects, not rows: {reason}")]
    NotRows {
        /// The file.
        path: String,
        /// What it holds, and what to do instead.
        reason: String,
    },
    /// A requested column does not exist.
    #[error("unknown column `{column}` in {path}; columns are: {available}")]
    UnknownColumn {
        /// The column asked for.
        column: String,
        /// The dataset.
        path: String,
        /// Comma-separated list of the columns there are.
        available: String,
    },
    /// A Delta or Iceberg table whose log cannot be read, or that uses a
    /// feature sluice does not read.
    #[error("cannot read the {kind} table {path}: {reason}")]
    Table {
        /// `delta` or `iceberg`.
        kind: &'static str,
        /// The table's root (or the metadata file).
        path: String,
        /// What failed.
        reason: String,
    },
    /// A version of a table that does not exist (time travel past either end,
    /// an unknown snapshot id).
    #[error("no such version of the {kind} table {path}: {reason}")]
    NoSuchVersion {
        /// `delta` or `iceberg`.
        kind: &'static str,
        /// The table's root.
        path: String,
        /// What was asked and what there is.
        reason: String,
    },
    /// A Structured Streaming file sink whose `_spark_metadata` log cannot be
    /// read: a batch file missing, a line that is not what Spark writes, a
    /// file in another store.
    #[error("bad streaming sink log {path}{}: {reason}", at_line(.line))]
    SinkLog {
        /// The batch file (or the log directory).
        path: String,
        /// The 1-based line, when one line is at fault.
        line: Option<usize>,
        /// What is wrong.
        reason: String,
    },
    /// A setting a store reads besides its URL (an environment variable, an
    /// option a catalog vended) is malformed; found before any client is
    /// built. The value is shown unless it is a credential.
    #[error("invalid {name}{}: {reason}", .value.as_ref().map(|v| format!("={v}")).unwrap_or_default())]
    InvalidSetting {
        /// The variable or key, as the user knows it.
        name: String,
        /// Its value as shown (quoted, escaped), `None` for credentials.
        value: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// A caller-supplied option is invalid.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option name.
        option: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A `--where` partition filter that cannot be used on this dataset.
    // transparent: every FilterError names the flag (`--where`) and the
    // expression, which is all the context a caller has; a prefix would
    // only repeat them.
    #[error(transparent)]
    Filter(#[from] crate::filter::FilterError),
    /// A `--filter` row filter that does not parse or fit the dataset.
    // transparent: every RowFilterError names the flag (`--filter: ...`)
    // and the expression, which is all the context a caller has; a prefix
    // would only repeat them.
    #[error(transparent)]
    RowFilter(#[from] crate::row_filter::RowFilterError),
}

/// The broad kind of an [`Error`], for callers that decide by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Missing path, or a directory with nothing in it.
    NotFound,
    /// Access refused.
    PermissionDenied,
    /// Bad data in a file.
    Corrupt,
    /// Bad request by the caller (URL, option, column).
    Invalid,
    /// Layout or schema problems of the dataset as a whole.
    Dataset,
    /// Store or network failures.
    Store,
}

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } | Error::EmptyDir { .. } | Error::NoSuchBucket { .. } => {
                ErrorKind::NotFound
            }
            Error::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            Error::Corrupt { .. } | Error::FilterFailed { .. } => ErrorKind::Corrupt,
            Error::InvalidUrl { .. }
            | Error::UnknownColumn { .. }
            | Error::InvalidOption { .. }
            | Error::InvalidSetting { .. }
            | Error::Filter(_)
            | Error::RowFilter(_)
            | Error::StoreConfig { .. } => ErrorKind::Invalid,
            Error::Layout { .. }
            | Error::DanglingLink { .. }
            | Error::SchemaClash { .. }
            | Error::Format { .. }
            | Error::NotRows { .. }
            | Error::Table { .. }
            | Error::SinkLog { .. }
            | Error::Changed { .. } => ErrorKind::Dataset,
            Error::NoSuchVersion { .. } => ErrorKind::NotFound,
            Error::Store { .. } => ErrorKind::Store,
        }
    }

    /// Whether the store refused this process's login (Kerberos: no ticket, an
    /// expired one, an unreachable KDC): reading again does not help, and every
    /// other read of the store fails the same way until the login is fixed.
    pub fn is_login(&self) -> bool {
        let cause: &(dyn std::error::Error + 'static) = match self {
            Error::Store { cause, .. }
            | Error::PermissionDenied { cause, .. }
            | Error::StoreConfig { cause, .. } => cause.as_ref(),
            _ => return false,
        };
        let mut source = Some(cause);
        while let Some(e) = source {
            if e.is::<KerberosError>() {
                return true;
            }
            source = e.source();
        }
        false
    }

    /// Whether this failure can only happen again, on any worker (a file
    /// changed since planning): no further attempt of the task is worth
    /// making.
    pub fn is_for_good(&self) -> bool {
        matches!(self, Error::Changed { .. })
    }

    /// Whether reading again later may succeed where this read failed: the
    /// file is missing or refused for now (moved away, permissions being
    /// fixed, a listing that is ahead of the store), the connection failed or
    /// timed out, or the store answered 5xx, 429 or 408. Decoding errors
    /// (corrupt data, bad magic, a schema that does not match), bad requests
    /// and a refused login ([`Error::is_login`]) are not: waiting does not
    /// change them.
    pub fn is_transient(&self) -> bool {
        if self.is_login() {
            return false;
        }
        match self {
            Error::NotFound { .. } | Error::PermissionDenied { .. } => true,
            Error::Store { cause: source, .. } => store_is_transient(source),
            Error::InvalidUrl { .. }
            | Error::EmptyDir { .. }
            | Error::DanglingLink { .. }
            | Error::NoSuchBucket { .. }
            | Error::StoreConfig { .. }
            | Error::Corrupt { .. }
            | Error::FilterFailed { .. }
            | Error::Changed { .. }
            | Error::Layout { .. }
            | Error::SchemaClash { .. }
            | Error::Format { .. }
            | Error::NotRows { .. }
            | Error::UnknownColumn { .. }
            | Error::Table { .. }
            | Error::NoSuchVersion { .. }
            | Error::SinkLog { .. }
            | Error::Filter(_)
            | Error::RowFilter(_)
            | Error::InvalidOption { .. }
            | Error::InvalidSetting { .. } => false,
        }
    }

    /// Maps an object store error on `path` to the right variant.
    pub fn from_store(path: impl Into<String>, source: object_store::Error) -> Self {
        let path = path.into();
        match source {
            object_store::Error::NotFound { .. } => Error::NotFound { path },
            // Only a read of a split asks for a file as planned.
            object_store::Error::Precondition { source, .. } => Error::Changed {
                path,
                reason: one_line(&source.to_string()),
            },
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Error::PermissionDenied {
                path,
                cause: Arc::new(source),
            },
            other => {
                let status = http_status(&other);
                if status == Some(404) {
                    return Error::NotFound { path };
                }
                if is_permission_io(&other) || matches!(status, Some(401 | 403)) {
                    return Error::PermissionDenied {
                        path,
                        cause: Arc::new(other),
                    };
                }
                Error::Store {
                    path,
                    cause: Arc::new(other),
                }
            }
        }
    }

    /// The error for listing `url` in `bucket` (`s3://name`) when the store
    /// answered that there is no such thing: the bucket itself is missing,
    /// since listing a missing prefix of an existing bucket finds nothing.
    pub fn no_such_bucket(bucket: &str, url: impl Into<String>) -> Self {
        let noun = match bucket.split_once("://") {
            Some(("az" | "abfs" | "abfss", _)) => "container",
            _ => "bucket",
        };
        Error::NoSuchBucket {
            noun,
            bucket: bucket.to_string(),
            url: url.into(),
        }
    }

    /// A decoding error in `path` read as `format`.
    pub fn corrupt(
        path: impl Into<String>,
        format: impl Into<String>,
        reason: impl ToString,
    ) -> Self {
        Error::Corrupt {
            path: path.into(),
            format: format.into(),
            reason: one_line(&reason.to_string()),
        }
    }
}

/// Whether a store error other than not found or permission denied may pass:
/// connection and I/O errors, timeouts, and HTTP 5xx, 429 and 408. Other
/// HTTP 4xx answers and requests the store cannot serve at all stay errors.
fn store_is_transient(err: &object_store::Error) -> bool {
    match err {
        object_store::Error::Generic { .. } => match (http_status(err), hdfs_error(err)) {
            (Some(status), _) => status >= 500 || status == 429 || status == 408,
            (None, Some(hdfs)) => hdfs_is_transient(hdfs),
            (None, None) => true,
        },
        object_store::Error::NotFound { .. }
        | object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => true,
        _ => false,
    }
}

/// The HDFS client's error underneath a store error, if any.
fn hdfs_error(err: &object_store::Error) -> Option<&hdfs_native::HdfsError> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(hdfs) = e.downcast_ref::<hdfs_native::HdfsError>() {
            return Some(hdfs);
        }
        source = e.source();
    }
    None
}

/// Whether an HDFS failure may pass: I/O and block transfer errors, blocks
/// no datanode serves for now, the namenode's exceptions. A block whose
/// checksum does not match (corrupt data), a bad path or argument, a feature
/// the client lacks and a refused login do not.
fn hdfs_is_transient(err: &hdfs_native::HdfsError) -> bool {
    use hdfs_native::HdfsError as H;
    match err {
        H::IOError(_)
        | H::DataTransferError(_)
        | H::FileNotFound(_)
        | H::BlocksNotFound(_)
        | H::OperationFailed(_)
        | H::InternalError(_)
        | H::RPCError(..)
        | H::FatalRPCError(..) => true,
        H::ChecksumError
        | H::InvalidPath(_)
        | H::InvalidArgument(_)
        | H::UrlParseError(_)
        | H::AlreadyExists(_)
        | H::IsADirectoryError(_)
        | H::UnsupportedErasureCodingPolicy(_)
        | H::ErasureCodingError(_)
        | H::UnsupportedFeature(_)
        | H::InvalidRPCResponse(_)
        | H::SASLError(_)
        | H::GSSAPIError(..)
        | H::NoSASLMechanism
        | H::XmlParseError(_) => false,
    }
}

/// Whether an object store error is, underneath, an I/O permission error
/// (the local store reports those as generic errors).
fn is_permission_io(err: &object_store::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::PermissionDenied;
        }
        source = e.source();
    }
    false
}

/// The HTTP status of a cloud store error that object_store reports as generic
/// (listings, for one). Its request error type is private, so the status is
/// read from the message it renders: `... non-2xx status code: 403 Forbidden ...`.
fn http_status(err: &object_store::Error) -> Option<u16> {
    const MARK: &str = "status code: ";
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        let text = e.to_string();
        if let Some(at) = text.find(MARK) {
            let digits: String = text[at + MARK.len()..].chars().take(3).collect();
            return digits.parse().ok();
        }
        source = e.source();
    }
    None
}

/// The error of a store read that failed underneath a decoder's error (the
/// decoder's reader wraps it in an I/O error), so that a decoder reading
/// through the store does not report a store failure as corrupt data.
pub(crate) fn store_error_within(err: &(dyn std::error::Error + 'static)) -> Option<Error> {
    let mut source = Some(err);
    while let Some(e) = source {
        if let Some(found) = e.downcast_ref::<Error>() {
            return Some(found.clone());
        }
        let wrapped = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<Error>());
        if let Some(found) = wrapped {
            return Some(found.clone());
        }
        source = e.source();
    }
    None
}

/// ` line N` for an error that names a line, else nothing.
fn at_line(line: &Option<usize>) -> String {
    line.map(|n| format!(", line {n}")).unwrap_or_default()
}

/// An error and its causes on one line: each cause after the error it
/// caused, joined by `: `, each message's whitespace collapsed.
///
/// The rule that makes this whole: an error that names what was being done
/// hands its cause on as its `source()` and does not repeat it in its own
/// message; an error from outside sluice (I/O, a store, a parser) is told in
/// the message of the error that met it and is not handed on, since such
/// errors often repeat their own causes. So no message appears twice.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut cause = Some(self.0);
        let mut first = true;
        while let Some(e) = cause {
            if !first {
                f.write_str(": ")?;
            }
            first = false;
            f.write_str(&one_line(&e.to_string()))?;
            cause = e.source();
        }
        Ok(())
    }
}

/// Collapses a multi-line message into one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Result with the connectors' [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The GSSAPI library the HDFS client loads.
pub const GSSAPI_LIBRARY: &str = "libgssapi_krb5.so.2";

/// Why Kerberos authentication failed, with what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum KerberosError {
    /// No ticket in the ticket cache, and no keytab or usable delegation token.
    #[error("no Kerberos ticket for {url}{token}: run `kinit PRINCIPAL`, or pass --keytab FILE --principal NAME ({detail})")]
    NoTicket {
        /// The store's `hdfs://authority`.
        url: String,
        /// `, and no delegation token for it in HADOOP_TOKEN_FILE_LOCATION=...` or empty.
        token: String,
        /// What MIT Kerberos said.
        detail: String,
    },
    /// The ticket in the cache has expired.
    #[error("the Kerberos ticket for {url} has expired: run `kinit` again, or pass --keytab FILE --principal NAME so that sluice logs in and renews by itself")]
    Expired {
        /// The store's `hdfs://authority`.
        url: String,
    },
    /// The KDC of the principal's realm is unknown or does not answer.
    #[error("cannot get a Kerberos ticket{what}: {detail}: check the principal's realm and its KDC in KRB5_CONFIG (default /etc/krb5.conf)")]
    Kdc {
        /// ` for hdfs://...` or ` for PRINCIPAL`.
        what: String,
        /// What MIT Kerberos said (`Cannot contact any KDC for realm 'X'`).
        detail: String,
    },
    /// Any other refusal, with the library's own words.
    #[error("Kerberos authentication to {url} failed: {detail}")]
    Other {
        /// The store's `hdfs://authority`, or the principal.
        url: String,
        /// What the HDFS client or MIT Kerberos said.
        detail: String,
    },
    /// `libgssapi_krb5.so.2` cannot be loaded.
    #[error("{url} uses Kerberos, and {GSSAPI_LIBRARY} (MIT Kerberos) cannot be loaded: install libgssapi-krb5-2 (Debian, Ubuntu) or krb5-libs (RHEL, Fedora)")]
    LibraryMissing {
        /// The store's `hdfs://authority`, or `the keytab login`.
        url: String,
    },
    /// The datanodes require SASL data-transfer protection this client was not configured for.
    #[error("the datanodes of {url} refused the block transfer: the cluster requires SASL data transfer protection and this client's configuration does not set dfs.data.transfer.protection; use the cluster's hdfs-site.xml in HADOOP_CONF_DIR")]
    Protection {
        /// The store's `hdfs://authority`.
        url: String,
    },
    /// The keytab cannot be read.
    #[error("cannot read keytab {path}: {cause}")]
    KeytabUnreadable {
        /// The keytab.
        path: String,
        /// The failure.
        cause: std::io::Error,
    },
    /// The keytab is not an MIT keytab (version 0x502).
    #[error("{path} is not a keytab: {reason}")]
    KeytabInvalid {
        /// The keytab.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The keytab holds no key of the principal.
    #[error("keytab {path} holds no key for principal {principal} (it holds: {holds})")]
    PrincipalNotInKeytab {
        /// The keytab.
        path: String,
        /// The principal asked for.
        principal: String,
        /// The principals it holds, comma-separated.
        holds: String,
    },
    /// Other threads run: the login would change the environment under them.
    #[error("the keytab login sets KRB5CCNAME and KRB5_CLIENT_KTNAME, which is only safe before other threads start ({threads} run)")]
    ThreadsRunning {
        /// The threads of the process.
        threads: usize,
    },
    /// The private directory of the login cannot be written.
    #[error("cannot prepare the keytab login in {path}: {cause}")]
    Private {
        /// The directory.
        path: String,
        /// The failure.
        cause: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cloud store error as object_store reports listings: generic, the
    /// HTTP status only in the rendered message of its source.
    fn generic(status: &str) -> object_store::Error {
        let inner: Box<dyn std::error::Error + Send + Sync> = format!(
            "Error performing GET http://127.0.0.1:1/b?list-type=2 in 2ms - Server \
             returned non-2xx status code: {status}: <Error/>"
        )
        .into();
        object_store::Error::Generic {
            store: "S3",
            source: inner,
        }
    }

    #[test]
    fn statuses_inside_generic_store_errors_decide_the_kind() {
        let kind = |status| Error::from_store("s3://b/x", generic(status)).kind();
        assert_eq!(kind("403 Forbidden"), ErrorKind::PermissionDenied);
        assert_eq!(kind("401 Unauthorized"), ErrorKind::PermissionDenied);
        assert_eq!(kind("404 Not Found"), ErrorKind::NotFound);
        assert_eq!(kind("503 Service Unavailable"), ErrorKind::Store);
    }

    #[test]
    fn only_a_refused_login_is_a_login_error() {
        let expired = object_store::Error::Generic {
            store: "HDFS",
            source: Box::new(KerberosError::Expired {
                url: "hdfs://nn:8020".to_string(),
            }),
        };
        assert!(Error::from_store("hdfs://nn:8020/x", expired).is_login());
        assert!(!Error::from_store("s3://b/x", generic("403 Forbidden")).is_login());
        assert!(!Error::from_store("s3://b/x", generic("503 Service Unavailable")).is_login());
    }

    #[test]
    fn missing_refused_unreachable_and_overloaded_reads_are_transient() {
        let transient = |e: Error| e.is_transient();
        assert!(transient(Error::NotFound {
            path: "file:///d/part-0.parquet".into()
        }));
        assert!(transient(Error::from_store(
            "s3://b/x",
            generic("403 Forbidden")
        )));
        assert!(transient(Error::from_store(
            "s3://b/x",
            generic("404 Not Found")
        )));
        for status in [
            "500 Internal Server Error",
            "503 Service Unavailable",
            "429 Too Many Requests",
            "408 Request Timeout",
        ] {
            assert!(
                transient(Error::from_store("s3://b/x", generic(status))),
                "{status}"
            );
        }
        // A connection refused, reset or timed out: I/O underneath, no status.
        let reset = object_store::Error::Generic {
            store: "S3",
            source: Box::new(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset by peer",
            )),
        };
        assert!(transient(Error::from_store("s3://b/x", reset)));
        let timeout: Box<dyn std::error::Error + Send + Sync> =
            "Error performing GET http://127.0.0.1:1/b/x in 2s - HTTP error: operation timed out"
                .into();
        let timeout = object_store::Error::Generic {
            store: "S3",
            source: timeout,
        };
        assert!(transient(Error::from_store("s3://b/x", timeout)));
    }

    #[test]
    fn corrupt_data_bad_requests_and_refused_logins_are_not_transient() {
        assert!(!Error::corrupt("file:///d/part-0.parquet", "parquet", "bad magic").is_transient());
        assert!(!Error::from_store("s3://b/x", generic("400 Bad Request")).is_transient());
        let unsupported = object_store::Error::NotSupported {
            source: "ranges".into(),
        };
        assert!(!Error::from_store("s3://b/x", unsupported).is_transient());
        let clash = Error::SchemaClash {
            column: "id".into(),
            left: "a".into(),
            left_type: "Int64".into(),
            right: "b".into(),
            right_type: "Utf8".into(),
        };
        assert!(!clash.is_transient());
        let expired = object_store::Error::Generic {
            store: "HDFS",
            source: Box::new(KerberosError::Expired {
                url: "hdfs://nn:8020".to_string(),
            }),
        };
        assert!(!Error::from_store("hdfs://nn:8020/x", expired).is_transient());
    }

    #[test]
    fn hdfs_failures_are_transient_unless_the_data_or_the_request_is_bad() {
        let hdfs = |e: hdfs_native::HdfsError| {
            Error::from_store(
                "hdfs://nn:8020/d/part-0.parquet",
                object_store::Error::Generic {
                    store: "HDFS",
                    source: Box::new(e),
                },
            )
        };
        let blocks = hdfs_native::HdfsError::BlocksNotFound("no datanode".into());
        assert!(hdfs(blocks).is_transient());
        let transfer = hdfs_native::HdfsError::DataTransferError("connection reset".into());
        assert!(hdfs(transfer).is_transient());
        assert!(!hdfs(hdfs_native::HdfsError::ChecksumError).is_transient());
        let unsupported = hdfs_native::HdfsError::UnsupportedFeature("x".into());
        assert!(!hdfs(unsupported).is_transient());
    }

    #[test]
    fn a_store_error_under_a_decoder_error_is_found() {
        let missing = Error::NotFound {
            path: "file:///d/part-0.orc".into(),
        };
        let io = std::io::Error::other(missing);
        let decoder = arrow::error::ArrowError::ExternalError(Box::new(io));
        let found = store_error_within(&decoder).expect("the store error");
        assert_eq!(found.kind(), ErrorKind::NotFound);
        assert!(found.is_transient());
        let bad = arrow::error::ArrowError::ParseError("bad magic".into());
        assert!(store_error_within(&bad).is_none());
    }

    #[test]
    fn a_missing_bucket_is_named_with_the_store_noun() {
        let s3 = Error::no_such_bucket("s3://b", "s3://b/out").to_string();
        assert_eq!(s3, "no such bucket s3://b (listing s3://b/out)");
        let az = Error::no_such_bucket("abfss://c@a.dfs.core.windows.net", "x").to_string();
        assert!(az.starts_with("no such container "), "{az}");
        assert_eq!(
            Error::no_such_bucket("gs://b", "gs://b/o").kind(),
            ErrorKind::NotFound
        );
    }
}
