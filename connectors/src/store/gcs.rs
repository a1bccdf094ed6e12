//! The Google Cloud Storage store (`gs://bucket/path`).
//!
//! Credentials come from `GOOGLE_APPLICATION_CREDENTIALS`, `GOOGLE_SERVICE_ACCOUNT`
//! (a key file), `GOOGLE_SERVICE_ACCOUNT_KEY` (the key itself) or gcloud's
//! application default credentials file. The endpoint is `GOOGLE_BASE_URL`, or
//! `STORAGE_EMULATOR_HOST` (as Google's client libraries read it) for an
//! emulator such as fake-gcs-server, which is then used without credentials.
//! With no credentials at all, requests are sent unsigned (public buckets); VM
//! metadata credentials are used only when `GCE_METADATA_HOST` is set.

use std::sync::Arc;

use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::{ClientConfigKey, StaticCredentialProvider};

use super::settings::{self, Shape};
use super::{cloud, vended, Location};
use crate::error::Result;

/// The variable Google's client libraries read to reach a storage emulator.
const EMULATOR_HOST: &str = "STORAGE_EMULATOR_HOST";

/// Where gcloud keeps application default credentials, under `$HOME`.
const ADC_FILE: &str = ".config/gcloud/application_default_credentials.json";

/// Opens a `gs://` URL.
pub(super) fn open(url: &str) -> Result<Location> {
    let parsed = cloud::parse(url)?;
    if parsed.authority.contains('@') {
        return Err(cloud::credentials_in_url(
            url,
            "set GOOGLE_APPLICATION_CREDENTIALS instead",
        ));
    }
    cloud::check_name(url, parsed.authority, "bucket")?;
    settings::check_gcs_env()?;
    let emulator = std::env::var(EMULATOR_HOST).ok().filter(|h| !h.is_empty());
    let (_, vended_options) = vended::vended();
    let mut builder = GoogleCloudStorageBuilder::from_env().with_bucket_name(parsed.authority);
    // The endpoint a catalog vended (Iceberg's `gcs.service.host`).
    if let Some((_, host)) = vended_options
        .iter()
        .find(|(k, v)| k == "gcs.service.host" && !v.is_empty())
    {
        settings::check("gcs.service.host (vended by the catalog)", host, Shape::Url)?;
        builder = builder.with_base_url(host.trim_end_matches('/'));
    }
    let mut builder = configure(builder, emulator.as_deref());
    if let Some(first) = vended::gcs_credential(&vended_options) {
        let provider = vended::Vended::new("GCS", None, |o, _| vended::gcs_credential(o), first);
        builder = builder
            .with_credentials(Arc::new(provider))
            .with_skip_signature(false);
    }
    let store = builder.build().map_err(|e| cloud::config_error(url, e))?;
    Ok(Location::new(
        Arc::new(store),
        parsed.root.clone(),
        parsed.base(),
    ))
}

/// Applies sluice's rules on top of what the environment configured: the
/// emulator endpoint, the retry budget and timeouts, HTTP for an explicit `http://`
/// endpoint, and unsigned requests when no credentials are configured.
fn configure(
    builder: GoogleCloudStorageBuilder,
    emulator: Option<&str>,
) -> GoogleCloudStorageBuilder {
    let mut builder = builder.with_retry(cloud::retry_config());
    for (key, value) in cloud::timeouts().client_config() {
        builder = builder.with_config(GoogleConfigKey::Client(key), value);
    }
    let mut anonymous = !has_credentials(&builder);
    if builder
        .get_config_value(&GoogleConfigKey::BaseUrl)
        .is_none()
    {
        if let Some(host) = emulator {
            builder = builder.with_base_url(&emulator_url(host));
            anonymous = true;
        }
    }
    if cloud::is_http(
        builder
            .get_config_value(&GoogleConfigKey::BaseUrl)
            .as_deref(),
    ) {
        builder = builder.with_config(GoogleConfigKey::Client(ClientConfigKey::AllowHttp), "true");
    }
    if anonymous {
        // object_store fetches a token for uploads even when skipping signatures;
        // an empty static one keeps it away from the VM metadata server.
        let token = StaticCredentialProvider::new(GcpCredential {
            bearer: String::new(),
        });
        builder = builder
            .with_skip_signature(true)
            .with_credentials(Arc::new(token));
    }
    builder
}

/// `STORAGE_EMULATOR_HOST` as a base URL: `host:port` means plain HTTP.
fn emulator_url(host: &str) -> String {
    let host = host.trim().trim_end_matches('/');
    if host.contains("://") {
        host.to_string()
    } else {
        format!("http://{host}")
    }
}

/// Whether any source of credentials is configured (a key, a key file,
/// application default credentials, or an explicit metadata server).
fn has_credentials(builder: &GoogleCloudStorageBuilder) -> bool {
    let set = |key: GoogleConfigKey| builder.get_config_value(&key).is_some();
    set(GoogleConfigKey::ServiceAccount)
        || set(GoogleConfigKey::ServiceAccountKey)
        || set(GoogleConfigKey::ApplicationCredentials)
        || cloud::env_set("GCE_METADATA_HOST")
        || std::env::var_os("HOME")
            .is_some_and(|home| std::path::Path::new(&home).join(ADC_FILE).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulator_host_becomes_an_unsigned_http_base_url() {
        let builder = configure(
            GoogleCloudStorageBuilder::new().with_bucket_name("b"),
            Some("127.0.0.1:4443"),
        );
        assert_eq!(
            builder.get_config_value(&GoogleConfigKey::BaseUrl),
            Some("http://127.0.0.1:4443".to_string())
        );
        assert_eq!(
            builder.get_config_value(&GoogleConfigKey::SkipSignature),
            Some("true".to_string())
        );
        assert_eq!(
            builder.get_config_value(&GoogleConfigKey::Client(ClientConfigKey::AllowHttp)),
            Some("true".to_string())
        );
    }

    #[test]
    fn an_explicit_base_url_wins_over_the_emulator_variable() {
        let builder = configure(
            GoogleCloudStorageBuilder::new()
                .with_bucket_name("b")
                .with_base_url("https://gcs.example.com"),
            Some("127.0.0.1:4443"),
        );
        assert_eq!(
            builder.get_config_value(&GoogleConfigKey::BaseUrl),
            Some("https://gcs.example.com".to_string())
        );
    }
}
