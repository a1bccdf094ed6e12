//! The S3 store (`s3://bucket/path`, and Hadoop's `s3a://` for the same thing).
//!
//! Configured the way the AWS tools are: `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` or
//! `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT`) for S3-compatible
//! servers, `AWS_ALLOW_HTTP`, web identity and container credentials. With no
//! credentials at all, requests are sent unsigned (public buckets); instance
//! profile credentials are used only when `AWS_METADATA_ENDPOINT` is set.

use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};

use super::settings::{self, Shape};
use super::{cloud, vended, Location};
use crate::error::Result;

/// Opens an `s3://` or `s3a://` URL.
pub(super) fn open(url: &str) -> Result<Location> {
    let parsed = cloud::parse(url)?;
    if parsed.authority.contains('@') {
        return Err(cloud::credentials_in_url(
            url,
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead",
        ));
    }
    cloud::check_name(url, parsed.authority, "bucket")?;
    settings::check_s3_env()?;
    let (_, vended_options) = vended::vended();
    check_vended(&vended_options)?;
    let builder = vended_settings(
        AmazonS3Builder::from_env().with_bucket_name(parsed.authority),
        &vended_options,
    );
    let mut builder = configure(builder);
    if let Some(first) = vended::s3_credential(&vended_options) {
        let provider = vended::Vended::new("S3", None, |o, _| vended::s3_credential(o), first);
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

/// Checks the settings a catalog vended that become part of requests.
fn check_vended(options: &[(String, String)]) -> Result<()> {
    for (key, value) in options {
        let shape = match key.as_str() {
            "s3.endpoint" => Shape::Url,
            "s3.region" | "client.region" => Shape::Region,
            "s3.access-key-id" | "s3.secret-access-key" | "s3.session-token" => Shape::Secret,
            _ => continue,
        };
        if !value.is_empty() {
            settings::check(&format!("{key} (vended by the catalog)"), value, shape)?;
        }
    }
    Ok(())
}

/// Applies the storage settings a catalog vended for the table (Iceberg's
/// `s3.*` keys; an empty one is none) over what the environment configured; its credentials are
/// a provider of their own, read again on each request.
fn vended_settings(mut builder: AmazonS3Builder, options: &[(String, String)]) -> AmazonS3Builder {
    for (key, value) in options.iter().filter(|(_, v)| !v.is_empty()) {
        let config = match key.as_str() {
            "s3.endpoint" => AmazonS3ConfigKey::Endpoint,
            "s3.region" | "client.region" => AmazonS3ConfigKey::Region,
            "s3.path-style-access" => {
                let virtual_hosted = if value == "true" { "false" } else { "true" };
                builder = builder
                    .with_config(AmazonS3ConfigKey::VirtualHostedStyleRequest, virtual_hosted);
                continue;
            }
            _ => continue,
        };
        builder = builder.with_config(config, value);
    }
    builder
}

/// Applies sluice's rules on top of what the environment configured: the retry
/// budget and timeouts, HTTP for an explicit `http://` endpoint, and unsigned requests when
/// no credentials are configured.
fn configure(builder: AmazonS3Builder) -> AmazonS3Builder {
    let endpoint = builder
        .get_config_value(&AmazonS3ConfigKey::S3Endpoint)
        .or_else(|| builder.get_config_value(&AmazonS3ConfigKey::Endpoint));
    let anonymous = !has_credentials(&builder);
    let mut builder = builder.with_retry(cloud::retry_config());
    for (key, value) in cloud::timeouts().client_config() {
        builder = builder.with_config(AmazonS3ConfigKey::Client(key), value);
    }
    if cloud::is_http(endpoint.as_deref()) {
        builder = builder.with_allow_http(true);
    }
    if anonymous {
        builder = builder.with_skip_signature(true);
    }
    builder
}

/// Whether any source of credentials is configured (keys, web identity,
/// container credentials, or an explicit instance metadata endpoint).
fn has_credentials(builder: &AmazonS3Builder) -> bool {
    let set = |key: AmazonS3ConfigKey| builder.get_config_value(&key).is_some();
    set(AmazonS3ConfigKey::AccessKeyId)
        || set(AmazonS3ConfigKey::SecretAccessKey)
        || set(AmazonS3ConfigKey::WebIdentityTokenFile)
        || set(AmazonS3ConfigKey::ContainerCredentialsRelativeUri)
        || set(AmazonS3ConfigKey::ContainerCredentialsFullUri)
        || set(AmazonS3ConfigKey::MetadataEndpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3a_is_s3_and_the_base_keeps_the_scheme() {
        let loc = open("s3a://some-bucket/out/dt=2024-01-01/").expect("opens without a network");
        assert_eq!(loc.root.as_ref(), "out/dt=2024-01-01");
        assert_eq!(loc.url(), "s3a://some-bucket/out/dt=2024-01-01");
    }

    #[test]
    fn credentials_in_the_url_are_refused() {
        let err = open("s3://key:secret@bucket/x").expect_err("refused");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn no_credentials_means_unsigned_requests() {
        let builder = configure(AmazonS3Builder::new().with_bucket_name("b"));
        assert_eq!(
            builder.get_config_value(&AmazonS3ConfigKey::SkipSignature),
            Some("true".to_string())
        );
        let keyed = configure(
            AmazonS3Builder::new()
                .with_bucket_name("b")
                .with_access_key_id("AKID")
                .with_secret_access_key("SECRET"),
        );
        assert_eq!(
            keyed.get_config_value(&AmazonS3ConfigKey::SkipSignature),
            Some("false".to_string())
        );
    }
}
