//! The Azure Blob Storage store: `az://container/path`, `abfs://container/path`
//! and Hadoop's `abfs[s]://container@account.dfs.core.windows.net/path`.
//!
//! Configured the way the Azure tools are: `AZURE_STORAGE_ACCOUNT_NAME`,
//! `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_SAS_TOKEN`, `AZURE_STORAGE_TOKEN`,
//! `AZURE_CLIENT_ID`/`AZURE_CLIENT_SECRET`/`AZURE_TENANT_ID`,
//! `AZURE_FEDERATED_TOKEN_FILE`, `AZURE_USE_AZURE_CLI`, `AZURE_STORAGE_ENDPOINT`;
//! `AZURE_STORAGE_USE_EMULATOR=true` talks to Azurite at
//! `AZURITE_BLOB_STORAGE_URL` (default `http://127.0.0.1:10000`) with its
//! well-known account. With no credentials at all, requests are sent unsigned
//! (public containers); managed identity is used only when `AZURE_MSI_ENDPOINT`
//! is set.

use std::sync::Arc;

use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::ClientConfigKey;

use super::{cloud, settings, vended, Location};
use crate::error::{Error, Result};

/// Opens an `az://`, `abfs://` or `abfss://` URL.
pub(super) fn open(url: &str) -> Result<Location> {
    let parsed = cloud::parse(url)?;
    let target = Target::parse(url, parsed.authority)?;
    cloud::check_name(url, target.container, "container")?;
    if let Some(account) = target.account {
        cloud::check_name(url, account, "account")?;
    }
    settings::check_azure_env()?;
    let mut builder = MicrosoftAzureBuilder::from_env().with_container_name(target.container);
    if let Some(account) = target.account {
        builder = builder.with_account(account);
    }
    if let Some(endpoint) = target.endpoint {
        if builder
            .get_config_value(&AzureConfigKey::Endpoint)
            .is_none()
        {
            builder = builder.with_endpoint(endpoint);
        }
    }
    let (_, vended_options) = vended::vended();
    if let Some((key, name)) = vended_options
        .iter()
        .find(|(k, v)| k == "adls.auth.shared-key.account.name" && !v.is_empty())
    {
        let key = format!("{key} (vended by the catalog)");
        settings::check(&key, name, settings::Shape::Name)?;
    }
    builder = vended_settings(builder, &vended_options);
    let account = builder.get_config_value(&AzureConfigKey::AccountName);
    let mut builder = configure(builder);
    if let Some(first) = vended::azure_credential(&vended_options, account.as_deref()) {
        let provider = vended::Vended::new("Azure", account, vended::azure_credential, first);
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

/// Applies the settings a catalog vended (Iceberg's `adls.*` keys): a shared
/// key for its account, and the account of the only SAS token vended when
/// the URL and the environment name none.
fn vended_settings(
    mut builder: MicrosoftAzureBuilder,
    options: &[(String, String)],
) -> MicrosoftAzureBuilder {
    let get = |key: &str| {
        options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let account = builder.get_config_value(&AzureConfigKey::AccountName);
    if let (Some(name), Some(key)) = (
        get("adls.auth.shared-key.account.name"),
        get("adls.auth.shared-key.account.key"),
    ) {
        if account
            .as_deref()
            .is_none_or(|a| a.eq_ignore_ascii_case(&name))
        {
            return builder.with_account(name).with_access_key(key);
        }
    }
    if account.is_none() {
        if let [only] = vended::adls_sas_accounts(options).as_slice() {
            builder = builder.with_account(only);
        }
    }
    builder
}

/// The container and, for Hadoop-style URLs, the account and its endpoint.
#[derive(Debug, PartialEq, Eq)]
struct Target<'a> {
    container: &'a str,
    account: Option<&'a str>,
    /// Set for clouds other than the public one (`core.chinacloudapi.cn`, ...).
    endpoint: Option<String>,
}

impl<'a> Target<'a> {
    /// Reads `container` or `container@account.dfs.<suffix>` (or `.blob.`).
    fn parse(url: &str, authority: &'a str) -> Result<Target<'a>> {
        let Some((container, host)) = authority.split_once('@') else {
            return Ok(Target {
                container: authority,
                account: None,
                endpoint: None,
            });
        };
        if container.contains(':') {
            return Err(cloud::credentials_in_url(
                url,
                "set AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN instead",
            ));
        }
        let (account, suffix) = host
            .split_once(".dfs.")
            .or_else(|| host.split_once(".blob."))
            .ok_or_else(|| Error::InvalidUrl {
                url: url.to_string(),
                reason: "expected container@account.dfs.core.windows.net".to_string(),
            })?;
        let endpoint =
            (suffix != "core.windows.net").then(|| format!("https://{account}.blob.{suffix}"));
        Ok(Target {
            container,
            account: Some(account),
            endpoint,
        })
    }
}

/// Applies sluice's rules on top of what the environment configured: the retry
/// budget and timeouts, HTTP for an explicit `http://` endpoint, and unsigned requests when
/// no credentials are configured outside the emulator.
fn configure(builder: MicrosoftAzureBuilder) -> MicrosoftAzureBuilder {
    let mut builder = builder.with_retry(cloud::retry_config());
    for (key, value) in cloud::timeouts().client_config() {
        builder = builder.with_config(AzureConfigKey::Client(key), value);
    }
    if cloud::is_http(
        builder
            .get_config_value(&AzureConfigKey::Endpoint)
            .as_deref(),
    ) {
        builder = builder.with_config(AzureConfigKey::Client(ClientConfigKey::AllowHttp), "true");
    }
    let emulator = cloud::truthy(builder.get_config_value(&AzureConfigKey::UseEmulator));
    if !emulator && !has_credentials(&builder) {
        builder = builder.with_skip_signature(true);
    }
    builder
}

/// Whether any source of credentials is configured (a key, a SAS token, a
/// bearer token, a service principal, workload identity, the Azure CLI, or an
/// explicit managed identity endpoint).
fn has_credentials(builder: &MicrosoftAzureBuilder) -> bool {
    let set = |key: AzureConfigKey| builder.get_config_value(&key).is_some();
    set(AzureConfigKey::AccessKey)
        || set(AzureConfigKey::SasKey)
        || set(AzureConfigKey::Token)
        || set(AzureConfigKey::ClientSecret)
        || set(AzureConfigKey::FederatedTokenFile)
        || set(AzureConfigKey::MsiEndpoint)
        || cloud::truthy(builder.get_config_value(&AzureConfigKey::UseAzureCli))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hadoop_urls_name_container_and_account() {
        let url = "abfss://data@acct.dfs.core.windows.net/out";
        let t = Target::parse(url, "data@acct.dfs.core.windows.net").expect("valid");
        assert_eq!(t.container, "data");
        assert_eq!(t.account, Some("acct"));
        assert_eq!(t.endpoint, None);
        let t = Target::parse(url, "data@acct.dfs.core.chinacloudapi.cn").expect("valid");
        assert_eq!(
            t.endpoint.as_deref(),
            Some("https://acct.blob.core.chinacloudapi.cn")
        );
        let t = Target::parse("az://data/out", "data").expect("valid");
        assert_eq!((t.container, t.account), ("data", None));
    }

    #[test]
    fn odd_hosts_and_passwords_are_refused() {
        assert!(Target::parse("abfs://c@example.com/x", "c@example.com").is_err());
        let err = Target::parse(
            "abfs://c:key@a.dfs.core.windows.net/x",
            "c:key@a.dfs.core.windows.net",
        )
        .expect_err("refused");
        assert!(!err.to_string().contains("key@"), "{err}");
    }

    #[test]
    fn emulator_keeps_signing_and_no_credentials_means_unsigned() {
        let emulated = configure(
            MicrosoftAzureBuilder::new()
                .with_container_name("c")
                .with_config(AzureConfigKey::UseEmulator, "1"),
        );
        assert_eq!(
            emulated.get_config_value(&AzureConfigKey::SkipSignature),
            Some("false".to_string())
        );
        let bare = configure(
            MicrosoftAzureBuilder::new()
                .with_container_name("c")
                .with_account("a"),
        );
        assert_eq!(
            bare.get_config_value(&AzureConfigKey::SkipSignature),
            Some("true".to_string())
        );
    }
}
