//! The settings an object store reads besides its URL (the environment's
//! `AWS_*`, `GOOGLE_*`, `AZURE_*`, emulator and proxy variables, the options
//! a catalog vended), checked before any client is built: a malformed one is
//! refused naming it ([`Error::InvalidSetting`]), where object_store would
//! ignore it, fail later saying nothing of it, or panic on the first request
//! (an endpoint without a scheme, a region with a space).
//!
//! Variables are read as object_store's `from_env` reads them (a name with
//! the store's prefix that parses as one of its configuration keys), so each
//! alias is checked too.

use std::str::FromStr;

use object_store::aws::AmazonS3ConfigKey;
use object_store::azure::AzureConfigKey;
use object_store::gcp::GoogleConfigKey;
use object_store::ClientConfigKey;

use crate::error::{Error, Result};

/// How a setting's value must look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// An `http://` or `https://` URL with a host (an endpoint).
    Url,
    /// `HOST[:PORT]` without a scheme (a metadata server's host).
    Host,
    /// `HOST[:PORT]` or an `http(s)://` URL (an emulator's host).
    HostOrUrl,
    /// A proxy: `HOST:PORT` or an `http`, `https`, `socks5` or `socks5h` URL.
    Proxy,
    /// The path of a URL on a fixed host (`/v2/credentials/...`).
    UriPath,
    /// A region (`us-east-1`): letters, digits, `-`, `_` and `.`.
    Region,
    /// A name that becomes part of a host name or path (a bucket, an
    /// account, a tenant): letters, digits, `-`, `_` and `.`.
    Name,
    /// A credential sent in a header: printable ASCII without spaces. Its
    /// value is never shown.
    Secret,
    /// `true` or `false` (also `1`/`0`, `yes`/`no`, `on`/`off`, `y`/`n`).
    Bool,
    /// Any text that is not empty (a file's path, a key's JSON).
    Text,
}

/// The variables every object store's HTTP client reads for its proxy (an
/// empty one means none).
const PROXY_VARS: [&str; 6] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Checks the environment an S3 store is built from.
pub(super) fn check_s3_env() -> Result<()> {
    check_env::<AmazonS3ConfigKey>("AWS_", s3_shape, &[])
}

/// Checks the environment a GCS store is built from.
pub(super) fn check_gcs_env() -> Result<()> {
    check_env::<GoogleConfigKey>(
        "GOOGLE_",
        gcs_shape,
        &[
            ("STORAGE_EMULATOR_HOST", Shape::HostOrUrl),
            ("GCE_METADATA_HOST", Shape::Host),
            ("GCE_METADATA_ROOT", Shape::Host),
            ("GCE_METADATA_IP", Shape::Host),
            ("SERVICE_ACCOUNT", Shape::Text),
        ],
    )
}

/// Checks the environment an Azure store is built from.
pub(super) fn check_azure_env() -> Result<()> {
    check_env::<AzureConfigKey>(
        "AZURE_",
        azure_shape,
        &[
            ("AZURITE_BLOB_STORAGE_URL", Shape::Url),
            ("IDENTITY_ENDPOINT", Shape::Url),
        ],
    )
}

/// Checks the variables named `PREFIX...` that parse as a key `K` (shaped
/// by `shape`), the `extra` ones, and the proxy variables.
fn check_env<K: FromStr>(
    prefix: &str,
    shape: fn(&K) -> Shape,
    extra: &[(&str, Shape)],
) -> Result<()> {
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str() else {
            continue;
        };
        let shape = if name.starts_with(prefix) {
            match name.to_ascii_lowercase().parse::<K>() {
                Ok(key) => shape(&key),
                Err(_) => continue,
            }
        } else if let Some((_, shape)) = extra.iter().find(|(n, _)| *n == name) {
            *shape
        } else if PROXY_VARS.contains(&name) {
            if value.is_empty() {
                continue;
            }
            Shape::Proxy
        } else {
            continue;
        };
        let Some(value) = value.to_str() else {
            return Err(invalid(name, None, "is not UTF-8 text"));
        };
        check(name, value, shape)?;
    }
    Ok(())
}

/// Checks the setting `name` (as the user knows it: a variable, a key
/// of a catalog's) of `value` against `shape`.
pub fn check(name: &str, value: &str, shape: Shape) -> Result<()> {
    match problem(value, shape) {
        None => Ok(()),
        Some(reason) => {
            let shown = (shape != Shape::Secret).then_some(value);
            Err(invalid(name, shown, &reason))
        }
    }
}

/// What is wrong with `value` as a `shape`, if anything.
pub(super) fn problem(value: &str, shape: Shape) -> Option<String> {
    if value.is_empty() {
        return Some("is empty: unset it, or give it a value".to_string());
    }
    match shape {
        Shape::Url => url_problem(value, &["http", "https"]),
        Shape::Host if value.contains("://") => {
            Some("is a host (HOST or HOST:PORT), without a scheme".to_string())
        }
        Shape::Host => url_problem(&format!("http://{value}"), &[]),
        Shape::HostOrUrl if !value.contains("://") => url_problem(&format!("http://{value}"), &[]),
        Shape::HostOrUrl => url_problem(value, &["http", "https"]),
        Shape::Proxy if !value.contains("://") => url_problem(&format!("http://{value}"), &[]),
        Shape::Proxy => url_problem(value, &["http", "https", "socks5", "socks5h"]),
        Shape::UriPath => match value.starts_with('/') {
            false => Some("is the path of a URL: it starts with /".to_string()),
            true => value
                .chars()
                .find(|c| !uri_char(*c))
                .map(|c| format!("holds {c:?}, which a URL cannot")),
        },
        Shape::Region | Shape::Name => value
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .map(|c| format!("holds {c:?}: only letters, digits, '-', '_' and '.' are allowed")),
        Shape::Secret => value
            .chars()
            .any(|c| !c.is_ascii_graphic())
            .then(|| "holds a space, a control character or a character that is not ASCII, which a request header cannot".to_string()),
        Shape::Bool => {
            let known = [
                "1", "true", "on", "yes", "y", "0", "false", "off", "no", "n",
            ];
            (!known.contains(&value.to_ascii_lowercase().as_str()))
                .then(|| "is not true or false".to_string())
        }
        Shape::Text => None,
    }
}

/// What is wrong with `value` as a URL of one of `schemes` (any, when
/// empty) with a host, as an HTTP client takes it, if anything.
pub fn url_problem(value: &str, schemes: &[&str]) -> Option<String> {
    if let Some(c) = value.chars().find(|c| !uri_char(*c)) {
        return Some(match c {
            ' ' => "holds a space, which a URL cannot".to_string(),
            c if !c.is_ascii() => format!(
                "holds {c:?}, which is not ASCII: write a host name in its ASCII form (xn--...)"
            ),
            c => format!("holds {c:?}, which a URL cannot"),
        });
    }
    let Some((scheme, _)) = value.split_once("://") else {
        return Some(match schemes {
            ["http", "https"] => {
                "has no scheme: write http://HOST:PORT or https://HOST".to_string()
            }
            _ => format!(
                "has no scheme: write {}://HOST:PORT",
                schemes.first().unwrap_or(&"http")
            ),
        });
    };
    let scheme = scheme.to_ascii_lowercase();
    if !schemes.is_empty() && !schemes.contains(&scheme.as_str()) {
        return Some(format!(
            "has the scheme {scheme}: use {}",
            schemes.join(" or ")
        ));
    }
    match url::Url::parse(value) {
        Err(e) => Some(e.to_string()),
        Ok(url) if url.host_str().is_none_or(str::is_empty) => Some("has no host".to_string()),
        Ok(_) => None,
    }
}

/// Whether `c` may appear in a URL as written (unreserved, reserved or `%`).
fn uri_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~:/?#[]@!$&'()*+,;=%".contains(c)
}

/// The error for the setting `name`, its value shown where given.
fn invalid(name: &str, shown: Option<&str>, reason: &str) -> Error {
    Error::InvalidSetting {
        name: name.to_string(),
        value: shown.map(|v| format!("{v:?}")),
        reason: reason.to_string(),
    }
}

/// The shape of an HTTP client setting.
fn client_shape(key: &ClientConfigKey) -> Shape {
    match key {
        ClientConfigKey::AllowHttp
        | ClientConfigKey::AllowInvalidCertificates
        | ClientConfigKey::Http1Only
        | ClientConfigKey::Http2Only
        | ClientConfigKey::Http2KeepAliveWhileIdle
        | ClientConfigKey::RandomizeAddresses => Shape::Bool,
        ClientConfigKey::ProxyUrl => Shape::Proxy,
        _ => Shape::Text,
    }
}

/// The shape of an S3 setting.
fn s3_shape(key: &AmazonS3ConfigKey) -> Shape {
    use AmazonS3ConfigKey as K;
    match key {
        K::AccessKeyId | K::SecretAccessKey | K::Token => Shape::Secret,
        K::Region | K::DefaultRegion => Shape::Region,
        K::Bucket => Shape::Name,
        K::Endpoint
        | K::S3Endpoint
        | K::MetadataEndpoint
        | K::ContainerCredentialsFullUri
        | K::StsEndpoint => Shape::Url,
        K::ContainerCredentialsRelativeUri => Shape::UriPath,
        K::ImdsV1Fallback
        | K::VirtualHostedStyleRequest
        | K::UnsignedPayload
        | K::SkipSignature
        | K::DisableTagging
        | K::S3Express
        | K::RequestPayer => Shape::Bool,
        K::Client(client) => client_shape(client),
        _ => Shape::Text,
    }
}

/// The shape of a GCS setting.
fn gcs_shape(key: &GoogleConfigKey) -> Shape {
    use GoogleConfigKey as K;
    match key {
        K::Bucket => Shape::Name,
        K::BaseUrl => Shape::Url,
        K::SkipSignature => Shape::Bool,
        K::Client(client) => client_shape(client),
        _ => Shape::Text,
    }
}

/// The shape of an Azure setting.
fn azure_shape(key: &AzureConfigKey) -> Shape {
    use AzureConfigKey as K;
    match key {
        K::AccessKey | K::ClientSecret | K::SasKey | K::Token | K::FabricSessionToken => {
            Shape::Secret
        }
        K::AccountName
        | K::ContainerName
        | K::ClientId
        | K::AuthorityId
        | K::ObjectId
        | K::FabricClusterIdentifier => Shape::Name,
        K::AuthorityHost | K::Endpoint | K::MsiEndpoint | K::FabricTokenServiceUrl => Shape::Url,
        K::FabricWorkloadHost => Shape::HostOrUrl,
        K::UseEmulator
        | K::UseFabricEndpoint
        | K::UseAzureCli
        | K::SkipSignature
        | K::DisableTagging => Shape::Bool,
        K::Client(client) => client_shape(client),
        _ => Shape::Text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(value: &str, shape: Shape) -> String {
        check("VAR", value, shape)
            .expect_err(&format!("{value:?} as {shape:?} refused"))
            .to_string()
    }

    #[test]
    fn endpoints_are_urls_with_a_scheme_a_host_and_a_port_that_is_one() {
        for good in [
            "http://127.0.0.1:9300",
            "https://s3.example.com",
            "HTTP://h:1/p",
        ] {
            assert!(check("VAR", good, Shape::Url).is_ok(), "{good}");
        }
        assert!(refused("127.0.0.1:9300", Shape::Url).contains("no scheme"));
        assert!(refused("http://127.0.0.1:99999", Shape::Url).contains("port"));
        assert!(refused("http://a b:1", Shape::Url).contains("space"));
        assert!(refused("http://läke:1", Shape::Url).contains("not ASCII"));
        assert!(refused("ftp://h", Shape::Url).contains("http or https"));
        assert!(refused("", Shape::Url).contains("empty"));
        assert!(refused("http://", Shape::Url).contains("host"));
    }

    #[test]
    fn hosts_proxies_and_paths_have_their_own_rules() {
        assert!(check("VAR", "127.0.0.1:4443", Shape::HostOrUrl).is_ok());
        assert!(check("VAR", "http://127.0.0.1:4443", Shape::HostOrUrl).is_ok());
        assert!(refused("h:99999", Shape::HostOrUrl).contains("port"));
        assert!(check("VAR", "metadata.internal", Shape::Host).is_ok());
        assert!(refused("http://metadata", Shape::Host).contains("without a scheme"));
        assert!(check("VAR", "proxy.corp:3128", Shape::Proxy).is_ok());
        assert!(check("VAR", "socks5h://proxy:1080", Shape::Proxy).is_ok());
        assert!(refused("proxy:3128x", Shape::Proxy).contains("port"));
        assert!(check("VAR", "/v2/credentials/x", Shape::UriPath).is_ok());
        assert!(refused("v2/x", Shape::UriPath).contains("starts with /"));
    }

    #[test]
    fn names_regions_and_booleans_are_plain_words() {
        assert!(check("VAR", "eu-west-1", Shape::Region).is_ok());
        assert!(refused("eu west", Shape::Region).contains("' '"));
        assert!(refused("wëst", Shape::Name).contains("'ë'"));
        assert!(check("VAR", "Yes", Shape::Bool).is_ok());
        assert!(refused("maybe", Shape::Bool).contains("true or false"));
    }

    #[test]
    fn a_secret_is_never_shown() {
        let message = refused("key with spaces", Shape::Secret);
        assert!(!message.contains("key with"), "{message}");
        assert!(message.contains("VAR"), "{message}");
        let shown = refused("a b", Shape::Region);
        assert!(shown.contains("VAR=\"a b\""), "{shown}");
    }

    #[test]
    fn every_message_is_one_line() {
        let message = refused("http://a\nb", Shape::Url);
        assert!(!message.contains('\n'), "{message}");
    }
}
