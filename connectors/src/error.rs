//! Errors of the connectors crate: one public enum, each variant naming what failed.

use std::sync::Arc;

/// What went wrong while finding or reading a dataset.
///
/// Every variant carries the URL or path of the thing that failed so that a
/// one-line message is enough for a user to act on it.
#[derive(Debug, thiserror::Error)]
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
    /// The store refused to let us read the path.
    #[error("permission denied reading {path}: {source}")]
    PermissionDenied {
        /// The path that could not be read.
        path: String,
        /// The store's error.
        #[source]
        source: Arc<object_store::Error>,
    },
    /// Any other failure of the store while listing or reading.
    #[error("cannot read {path}: {source}")]
    Store {
        /// The path being read.
        path: String,
        /// The store's error.
        #[source]
        source: Arc<object_store::Error>,
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
    /// A caller-supplied option is invalid.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option name.
        option: String,
        /// Why it is invalid.
        reason: String,
    },
}

/// The broad kind of an [`Error`], for callers that decide by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Missing path.
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
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::InvalidUrl { .. }
            | Error::UnknownColumn { .. }
            | Error::InvalidOption { .. } => ErrorKind::Invalid,
            Error::Layout { .. } | Error::SchemaClash { .. } | Error::Format { .. } => {
                ErrorKind::Dataset
            }
            Error::Store { .. } => ErrorKind::Store,
        }
    }

    /// Maps an object store error on `path` to the right variant.
    pub fn from_store(path: impl Into<String>, source: object_store::Error) -> Self {
        let path = path.into();
        match source {
            object_store::Error::NotFound { .. } => Error::NotFound { path },
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Error::PermissionDenied {
                path,
                source: Arc::new(source),
            },
            other => {
                if is_permission_io(&other) {
                    return Error::PermissionDenied {
                        path,
                        source: Arc::new(other),
                    };
                }
                Error::Store {
                    path,
                    source: Arc::new(other),
                }
            }
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

/// Collapses a multi-line message into one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Result with the connectors' [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
