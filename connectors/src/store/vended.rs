//! Storage credentials a catalog vended for the table being read (the
//! `config` of an Iceberg REST load-table answer, and its
//! `storage-credentials`), in Iceberg's FileIO keys:
//!
//! - S3: `s3.access-key-id`, `s3.secret-access-key`, `s3.session-token`
//!   (expiring at `s3.session-token-expires-at-ms`), `s3.endpoint`,
//!   `s3.region` or `client.region`, `s3.path-style-access`;
//! - ADLS: `adls.sas-token.ACCOUNT_HOST` (a SAS token for that account,
//!   expiring at `adls.sas-token-expires-at-ms.ACCOUNT_HOST`), `adls.token`
//!   (a bearer token), `adls.auth.shared-key.account.name` and `.key`;
//! - GCS: `gcs.oauth2.token` (expiring at `gcs.oauth2.token-expires-at`),
//!   `gcs.service.host`.
//!
//! They apply over the environment to every store opened from now on, and
//! the credentials are read again on each request (through a
//! [`CredentialProvider`]), so that credentials the catalog vends anew
//! before the old ones expire ([`set_vended`]) reach stores already open.
//! They are secrets: never logged or shown (the providers' `Debug` says
//! only what kind they are).

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use object_store::aws::AwsCredential;
use object_store::azure::AzureCredential;
use object_store::gcp::GcpCredential;
use object_store::CredentialProvider;

/// The vended options in force, and a generation counted up on each change.
static VENDED: RwLock<(u64, Vec<(String, String)>)> = RwLock::new((0, Vec::new()));

/// The longest a refresh is made ahead of the expiry.
const MAX_LEAD: Duration = Duration::from_secs(5 * 60);
/// How long to wait before trying again after a refresh failed.
const RETRY: Duration = Duration::from_secs(10);
/// The shortest wait between two loads (a catalog that vends credentials
/// expiring at once is not asked again and again).
const MIN_WAIT: Duration = Duration::from_secs(1);

/// Sets the storage options a catalog vended (replacing those before).
pub fn set_vended(options: Vec<(String, String)>) {
    let mut guard = match VENDED.write() {
        Ok(v) => v,
        Err(poisoned) => poisoned.into_inner(),
    };
    guard.0 += 1;
    guard.1 = options;
}

/// The vended storage options in force and their generation.
pub(super) fn vended() -> (u64, Vec<(String, String)>) {
    match VENDED.read() {
        Ok(v) => v.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

fn get<'a>(options: &'a [(String, String)], key: &str) -> Option<&'a str> {
    options
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// The earliest time, in milliseconds since the epoch, at which a vended
/// credential expires: the `*expires-at-ms*`, `*expires-at*` and
/// `expiration-time` keys (milliseconds, or an RFC 3339 time).
pub fn vended_expiry_ms(options: &[(String, String)]) -> Option<i64> {
    options
        .iter()
        .filter(|(key, _)| {
            let key = key.to_ascii_lowercase();
            key.contains("expires-at") || key.ends_with("expiration-time")
        })
        .filter_map(|(_, value)| parse_time_ms(value))
        .min()
}

fn parse_time_ms(value: &str) -> Option<i64> {
    let value = value.trim();
    value.parse::<i64>().ok().or_else(|| {
        chrono::DateTime::parse_from_rfc3339(value)
            .ok()
            .map(|t| t.timestamp_millis())
    })
}

/// How long to wait before loading the table's credentials again, for
/// credentials expiring at `expiry_ms`, now `now_ms`, after `failures`
/// failed attempts: half the time left, at most five minutes, before the
/// expiry, and at least a second; [`RETRY`] after a failure.
pub fn refresh_delay(expiry_ms: i64, now_ms: i64, failures: u32) -> Duration {
    if failures > 0 {
        return RETRY;
    }
    let left = Duration::from_millis(expiry_ms.saturating_sub(now_ms).max(0) as u64);
    let lead = (left / 2).min(MAX_LEAD);
    (left - lead).max(MIN_WAIT)
}

/// The S3 credentials of the vended options, when they hold a key pair.
pub(super) fn s3_credential(options: &[(String, String)]) -> Option<AwsCredential> {
    Some(AwsCredential {
        key_id: get(options, "s3.access-key-id")?.to_string(),
        secret_key: get(options, "s3.secret-access-key")?.to_string(),
        token: get(options, "s3.session-token").map(str::to_string),
    })
}

/// The account an `adls.*.ACCOUNT_HOST` key names (`acct` of
/// `acct.dfs.core.windows.net`).
fn account_of(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// The accounts the vended options hold SAS tokens for.
pub(super) fn adls_sas_accounts(options: &[(String, String)]) -> Vec<String> {
    options
        .iter()
        .filter_map(|(k, _)| k.strip_prefix("adls.sas-token."))
        .map(|host| account_of(host).to_string())
        .collect()
}

/// The Azure credential the vended options hold for `account`: its SAS
/// token, else a bearer token (`adls.token`).
pub(super) fn azure_credential(
    options: &[(String, String)],
    account: Option<&str>,
) -> Option<AzureCredential> {
    let sas = options.iter().find_map(|(k, v)| {
        let host = k.strip_prefix("adls.sas-token.")?;
        let matches = account.is_none_or(|a| account_of(host).eq_ignore_ascii_case(a));
        (matches && !v.is_empty()).then_some(v)
    });
    if let Some(sas) = sas {
        let pairs = url::form_urlencoded::parse(sas.trim_start_matches('?').as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        return Some(AzureCredential::SASToken(pairs));
    }
    get(options, "adls.token").map(|t| AzureCredential::BearerToken(t.to_string()))
}

/// The GCS credential of the vended options (an OAuth2 access token).
pub(super) fn gcs_credential(options: &[(String, String)]) -> Option<GcpCredential> {
    get(options, "gcs.oauth2.token").map(|t| GcpCredential {
        bearer: t.to_string(),
    })
}

/// Finds a store's credential in the vended options (for an account, Azure).
pub(super) type ReadCredential<C> = fn(&[(String, String)], Option<&str>) -> Option<C>;

/// A credential read from the vended options on each request, so that a
/// refresh reaches stores already open; the last one read stays in use if
/// a later refresh holds none.
pub(super) struct Vended<C> {
    read: ReadCredential<C>,
    account: Option<String>,
    kind: &'static str,
    cached: Mutex<Option<(u64, Arc<C>)>>,
}

impl<C> Vended<C> {
    /// A provider of the credential `read` finds for `account` (Azure).
    pub(super) fn new(
        kind: &'static str,
        account: Option<String>,
        read: ReadCredential<C>,
        first: C,
    ) -> Self {
        let (generation, _) = vended();
        Vended {
            read,
            account,
            kind,
            cached: Mutex::new(Some((generation, Arc::new(first)))),
        }
    }

    fn current(&self) -> Option<Arc<C>> {
        let mut cached = match self.cached.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (generation, options) = vended();
        match cached.as_ref() {
            Some((seen, credential)) if *seen == generation => return Some(credential.clone()),
            _ => {}
        }
        match (self.read)(&options, self.account.as_deref()) {
            Some(fresh) => {
                let fresh = Arc::new(fresh);
                *cached = Some((generation, fresh.clone()));
                Some(fresh)
            }
            None => cached.as_ref().map(|(_, c)| c.clone()),
        }
    }
}

impl<C> std::fmt::Debug for Vended<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "vended {} credentials", self.kind)
    }
}

#[async_trait::async_trait]
impl<C: Send + Sync + 'static> CredentialProvider for Vended<C> {
    type Credential = C;

    async fn get_credential(&self) -> object_store::Result<Arc<C>> {
        self.current().ok_or_else(|| object_store::Error::Generic {
            store: self.kind,
            source: "the catalog vended no credentials for this store".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn s3_keys_make_a_credential() {
        let vended = options(&[
            ("s3.access-key-id", "AKIA"),
            ("s3.secret-access-key", "SECRET"),
            ("s3.session-token", "TOKEN"),
        ]);
        let c = s3_credential(&vended).expect("a credential");
        assert_eq!(
            (c.key_id.as_str(), c.secret_key.as_str(), c.token.as_deref()),
            ("AKIA", "SECRET", Some("TOKEN"))
        );
        assert!(s3_credential(&options(&[("s3.access-key-id", "AKIA")])).is_none());
    }

    #[test]
    fn adls_sas_tokens_are_chosen_by_account() {
        let vended = options(&[
            ("adls.sas-token.other.dfs.core.windows.net", "sv=1&sig=x"),
            (
                "adls.sas-token.acct.dfs.core.windows.net",
                "?sv=2024&sig=a%2Bb",
            ),
            ("adls.token", "BEARER"),
        ]);
        match azure_credential(&vended, Some("acct")) {
            Some(AzureCredential::SASToken(pairs)) => assert_eq!(
                pairs,
                [
                    ("sv".to_string(), "2024".to_string()),
                    ("sig".to_string(), "a+b".to_string())
                ]
            ),
            other => panic!("expected acct's SAS token, got {other:?}"),
        }
        match azure_credential(&vended, Some("third")) {
            Some(AzureCredential::BearerToken(t)) => assert_eq!(t, "BEARER"),
            other => panic!("expected the bearer token, got {other:?}"),
        }
        assert_eq!(adls_sas_accounts(&vended), ["other", "acct"]);
        assert!(azure_credential(&[], Some("acct")).is_none());
    }

    #[test]
    fn gcs_tokens_are_bearer_credentials() {
        let vended = options(&[("gcs.oauth2.token", "ya29.x"), ("gcs.project-id", "p")]);
        assert_eq!(
            gcs_credential(&vended).map(|c| c.bearer),
            Some("ya29.x".to_string())
        );
        assert!(gcs_credential(&options(&[("gcs.project-id", "p")])).is_none());
    }

    #[test]
    fn the_earliest_expiry_counts() {
        let vended = options(&[
            ("s3.session-token-expires-at-ms", "1800000000000"),
            (
                "adls.sas-token-expires-at-ms.acct.dfs.core.windows.net",
                "1700000000000",
            ),
            ("gcs.oauth2.token-expires-at", "1900000000000"),
            ("s3.access-key-id", "1"),
        ]);
        assert_eq!(vended_expiry_ms(&vended), Some(1_700_000_000_000));
        let rfc = options(&[("expiration-time", "2026-12-03T12:00:00Z")]);
        assert_eq!(vended_expiry_ms(&rfc), Some(1_796_299_200_000));
        assert_eq!(vended_expiry_ms(&options(&[("s3.endpoint", "x")])), None);
    }

    #[test]
    fn refreshes_come_before_the_expiry() {
        let minute = 60_000;
        // An hour left: five minutes ahead.
        assert_eq!(
            refresh_delay(60 * minute, 0, 0),
            Duration::from_secs(55 * 60)
        );
        // Four minutes left: half of it ahead.
        assert_eq!(refresh_delay(4 * minute, 0, 0), Duration::from_secs(120));
        // Expired already: after the shortest wait; after a failure: a short wait.
        assert_eq!(refresh_delay(0, minute, 0), MIN_WAIT);
        assert_eq!(refresh_delay(1_000, 0, 0), MIN_WAIT);
        assert_eq!(refresh_delay(60 * minute, 0, 1), RETRY);
    }

    #[test]
    fn providers_never_show_their_secrets() {
        let p = Vended::new(
            "S3",
            None,
            |o, _| s3_credential(o),
            AwsCredential {
                key_id: "AKIA".into(),
                secret_key: "SECRET".into(),
                token: None,
            },
        );
        let shown = format!("{p:?}");
        assert!(
            !shown.contains("SECRET") && !shown.contains("AKIA"),
            "{shown}"
        );
    }
}
