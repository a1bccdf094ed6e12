//! What the object stores (S3, GCS, Azure) share: reading `scheme://bucket/path`
//! URLs, the retry and timeout budget, and the error for a store that cannot be built.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use object_store::path::Path;
use object_store::{BackoffConfig, ClientConfigKey, RetryConfig};

use crate::error::{Error, Result};

/// A parsed object store URL: `scheme://authority/path`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct BucketUrl<'a> {
    /// The scheme as written (`s3`, `s3a`, `gs`, `az`, `abfss`, ...).
    pub scheme: &'a str,
    /// The bucket, or for Azure `container` or `container@account.host`.
    pub authority: &'a str,
    /// The dataset root inside the bucket (empty for the whole bucket).
    pub root: Path,
}

impl BucketUrl<'_> {
    /// How paths in this bucket are shown: `scheme://authority`, no credentials.
    pub fn base(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }
}

/// Splits `url` into scheme, authority and root path.
///
/// The path is kept as written (not percent-decoded) so that Hive partition
/// directories such as `k=a%3Ab` name the same keys as the listing returns.
pub(super) fn parse(url: &str) -> Result<BucketUrl<'_>> {
    let invalid = |reason: &str| Error::InvalidUrl {
        url: redact(url),
        reason: reason.to_string(),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid("expected scheme://bucket/path"))?;
    if rest.contains(['?', '#']) {
        return Err(invalid("query strings and fragments are not supported"));
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() {
        return Err(invalid("no bucket or container name"));
    }
    let root = Path::parse(path.trim_matches('/')).map_err(|e| invalid(&e.to_string()))?;
    Ok(BucketUrl {
        scheme,
        authority,
        root,
    })
}

/// How long one try of an object store request may take: to connect, and
/// in all (connecting, sending, and the whole answer). Process-wide: the
/// command sets them once, before its first request ([`set_timeouts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting to the store (default 5 s).
    pub connect: Duration,
    /// One try of a request, answer included (default 30 s).
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: DEFAULT_CONNECT_TIMEOUT,
            request: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// The default connect timeout of object store requests.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default timeout of one try of an object store request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Tries of a request start within this time of the first (see [`retry_config`]).
pub const RETRY_WINDOW: Duration = Duration::from_secs(10);
/// The longest wait between two tries of a request.
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);

static TIMEOUTS: RwLock<Timeouts> = RwLock::new(Timeouts {
    connect: DEFAULT_CONNECT_TIMEOUT,
    request: DEFAULT_REQUEST_TIMEOUT,
});

/// Sets the timeouts of the object stores opened from now on (S3, GCS,
/// Azure).
pub fn set_timeouts(timeouts: Timeouts) {
    match TIMEOUTS.write() {
        Ok(mut t) => *t = timeouts,
        Err(poisoned) => *poisoned.into_inner() = timeouts,
    }
}

/// The timeouts stores are opened with.
pub fn timeouts() -> Timeouts {
    match TIMEOUTS.read() {
        Ok(t) => *t,
        Err(poisoned) => *poisoned.into_inner(),
    }
}

impl Timeouts {
    /// The longest a request that gets no answer takes to fail: tries start
    /// within [`RETRY_WINDOW`] of the first, at most [`RETRY_BACKOFF_MAX`]
    /// apart, and each gives up after the request timeout.
    pub fn worst_request(&self) -> Duration {
        RETRY_WINDOW + RETRY_BACKOFF_MAX + self.request
    }

    /// The client settings (object_store's `ClientConfigKey`s) for these
    /// timeouts, as the builders' string values.
    pub(super) fn client_config(&self) -> [(ClientConfigKey, String); 2] {
        let ms = |d: Duration| format!("{}ms", d.as_millis().max(1));
        [
            (ClientConfigKey::ConnectTimeout, ms(self.connect)),
            (ClientConfigKey::Timeout, ms(self.request)),
        ]
    }
}

/// The retry budget of every object store request: a few quick retries, so a
/// refused connection or unknown host fails in seconds, not minutes: tries
/// start within [`RETRY_WINDOW`] of the first (at most 4), each bounded by
/// the [`Timeouts`]. With the default 5 s connect timeout an unreachable host
/// fails in about 10 s; a store that accepts connections and never answers
/// fails a request within [`Timeouts::worst_request`].
pub(super) fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: RETRY_BACKOFF_MAX,
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: RETRY_WINDOW,
    }
}

/// Whether a configured endpoint is plain HTTP (an emulator or a private
/// S3-compatible server); choosing such an endpoint allows HTTP for it.
pub(super) fn is_http(endpoint: Option<&str>) -> bool {
    endpoint.is_some_and(|e| e.trim().to_ascii_lowercase().starts_with("http://"))
}

/// Whether a boolean setting reads as true the way object_store parses it
/// (`true`, `1`, `yes`, `on`, `y`, any case).
pub(super) fn truthy(value: Option<String>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.to_ascii_lowercase().as_str(),
            "true" | "1" | "yes" | "on" | "y"
        )
    })
}

/// Whether an environment variable is set to something non-empty.
pub(super) fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// The error for a URL carrying credentials (`s3://key:secret@bucket`); the
/// message shows the URL with them blanked out.
pub(super) fn credentials_in_url(url: &str, hint: &str) -> Error {
    Error::InvalidUrl {
        url: redact(url),
        reason: format!("credentials in the url are not supported; {hint}"),
    }
}

/// `url` with a `user:password@` part blanked out (`container@account` stays).
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority = rest.split('/').next().unwrap_or_default();
    match authority.rsplit_once('@') {
        Some((user, _)) if user.contains(':') => {
            format!("{scheme}://***{}", &rest[user.len()..])
        }
        _ => url.to_string(),
    }
}

/// Checks the bucket, container or account `name` of `url` (its `noun`):
/// a name with a space or a character that is not ASCII would make no
/// valid request.
pub(super) fn check_name(url: &str, name: &str, noun: &str) -> Result<()> {
    match super::settings::problem(name, super::settings::Shape::Name) {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidUrl {
            url: redact(url),
            reason: format!("the {noun} name {reason}"),
        }),
    }
}

/// The error for a builder that refused its configuration.
pub(super) fn config_error(url: &str, source: object_store::Error) -> Error {
    Error::StoreConfig {
        url: url.to_string(),
        cause: Arc::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_bucket_and_root_and_keeps_escapes() {
        let u = parse("s3a://bucket/out/k=a%3Ab/").expect("valid");
        assert_eq!(u.scheme, "s3a");
        assert_eq!(u.authority, "bucket");
        assert_eq!(u.root.as_ref(), "out/k=a%3Ab");
        assert_eq!(u.base(), "s3a://bucket");
        assert_eq!(parse("gs://b").expect("bucket only").root, Path::default());
    }

    #[test]
    fn refuses_urls_without_bucket_or_with_queries() {
        assert!(parse("s3:///x").is_err());
        assert!(parse("s3://b/x?versionId=1").is_err());
        assert!(parse("s3://b/a//b").is_err());
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("s3://k:s@b/x"), "s3://***@b/x");
        assert_eq!(
            redact("abfs://c@a.dfs.core.windows.net/x"),
            "abfs://c@a.dfs.core.windows.net/x"
        );
        let err = parse("s3://k:secret@b/x?y").expect_err("query refused");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn timeouts_become_client_settings_object_store_parses() {
        let timeouts = Timeouts {
            connect: Duration::from_millis(1500),
            request: Duration::from_secs(2),
        };
        let config = timeouts.client_config();
        assert_eq!(
            config[0],
            (ClientConfigKey::ConnectTimeout, "1500ms".into())
        );
        assert_eq!(config[1], (ClientConfigKey::Timeout, "2000ms".into()));
        assert_eq!(timeouts.worst_request(), Duration::from_secs(14));
    }

    #[test]
    fn http_endpoints_are_recognised() {
        assert!(is_http(Some("HTTP://127.0.0.1:9000")));
        assert!(!is_http(Some("https://s3.example.com")));
        assert!(!is_http(None));
    }
}
