//! An Iceberg REST catalog client (the Iceberg REST spec): `GET /v1/config`
//! for the prefix, `GET /v1/{prefix}/namespaces/{ns}/tables/{table}` for the
//! current metadata file and vended storage credentials, and the listings
//! that name close matches when a table is not there. Auth is a bearer token
//! or OAuth2 client credentials exchanged at the token endpoint; a token got
//! so is exchanged again before it expires (a job runs for longer than a
//! token lives: the table is loaded again to refresh vended credentials, and
//! a followed table is asked at every poll), and once more when the catalog
//! refuses it.

use connectors::Report;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::{Client, RequestBuilder, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::{close_matches, store_url, CatalogError, CatalogTable, TableName};
use crate::config::CatalogOptions;
use crate::percent::encode;

/// How long connecting to the catalog may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request to the catalog may take, answer included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The storage option prefixes of the load-table response's `config` that
/// are vended credentials or settings of the table's store.
const STORAGE_PREFIXES: [&str; 4] = ["s3.", "adls.", "gcs.", "client."];
/// The namespace level separator in URLs (the unit separator, encoded).
const NAMESPACE_SEPARATOR: &str = "%1F";

/// A connected REST catalog: its base URL, prefix and token.
pub struct RestCatalog {
    /// The URI as given, for messages.
    uri: String,
    /// Where `/v1/...` paths start.
    base: String,
    /// The `{prefix}` path segment(s) from the catalog's config, if any.
    prefix: Option<String>,
    /// The bearer token sent, and when to exchange it again.
    token: Mutex<Option<Token>>,
    /// The client credentials, when the token is exchanged for them.
    grant: Option<Grant>,
    client: Client,
}

/// A bearer token, and when a new one is due (a token from client
/// credentials whose answer said how long it lives).
struct Token {
    value: String,
    renew_at: Option<Instant>,
}

/// OAuth2 client credentials and the endpoint that exchanges them.
struct Grant {
    endpoint: String,
    id: String,
    secret: String,
}

#[derive(Deserialize, Default)]
struct ConfigResponse {
    #[serde(default)]
    defaults: BTreeMap<String, String>,
    #[serde(default)]
    overrides: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    /// Seconds the token lives, when the endpoint says.
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct LoadTableResponse {
    #[serde(rename = "metadata-location")]
    metadata_location: Option<String>,
    #[serde(default)]
    metadata: Value,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default, rename = "storage-credentials")]
    storage_credentials: Vec<StorageCredential>,
}

#[derive(Deserialize)]
struct StorageCredential {
    #[serde(default)]
    config: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct ListTables {
    #[serde(default)]
    identifiers: Vec<Identifier>,
}

#[derive(Deserialize)]
struct Identifier {
    #[serde(default)]
    namespace: Vec<String>,
    name: String,
}

#[derive(Deserialize)]
struct ListNamespaces {
    #[serde(default)]
    namespaces: Vec<Vec<String>>,
}

impl RestCatalog {
    /// Reads the credentials, gets a token where client credentials are
    /// given, and reads the catalog's config.
    pub async fn connect(uri: &str, options: &CatalogOptions) -> Result<RestCatalog, CatalogError> {
        let client = Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| CatalogError::Unreachable {
                catalog: uri.to_string(),
                reason: Report(&e).to_string(),
            })?;
        let mut catalog = RestCatalog {
            uri: uri.to_string(),
            base: uri.trim_end_matches('/').to_string(),
            prefix: None,
            token: Mutex::new(None),
            grant: None,
            client,
        };
        if let Some(path) = &options.catalog_token_file {
            catalog.set_token(Token {
                value: read_secret("--catalog-token-file", path)?,
                renew_at: None,
            });
        }
        let mut config = None;
        if let Some(path) = &options.catalog_credential_file {
            let secret = read_secret("--catalog-credential-file", path)?;
            let (id, secret) = secret
                .split_once(':')
                .ok_or_else(|| CatalogError::Credentials {
                    option: "--catalog-credential-file",
                    path: path.display().to_string(),
                    reason: "it must hold client_id:client_secret".to_string(),
                })?;
            // The token endpoint may be named by the config, which may be
            // readable without a token.
            let open = catalog.config().await.ok();
            let endpoint = open
                .as_ref()
                .and_then(|c| {
                    c.overrides
                        .get("oauth2-server-uri")
                        .or(c.defaults.get("oauth2-server-uri"))
                })
                .cloned()
                .unwrap_or_else(|| format!("{}/v1/oauth/tokens", catalog.base));
            let grant = Grant {
                endpoint,
                id: id.to_string(),
                secret: secret.to_string(),
            };
            let token = catalog.exchange(&grant).await?;
            catalog.set_token(token);
            catalog.grant = Some(grant);
            config = open;
        }
        let config = match config {
            Some(config) => config,
            None => catalog.config().await?,
        };
        let setting = |key: &str| {
            config
                .overrides
                .get(key)
                .or(config.defaults.get(key))
                .cloned()
        };
        if let Some(uri) = config.overrides.get("uri") {
            catalog.base = uri.trim_end_matches('/').to_string();
        }
        catalog.prefix = setting("prefix").filter(|p| !p.is_empty());
        Ok(catalog)
    }

    /// Loads `name`: its current metadata file and the storage credentials
    /// vended for it.
    pub async fn load(&self, name: &TableName) -> Result<CatalogTable, CatalogError> {
        if name.namespace.is_empty() {
            return Err(CatalogError::InvalidName {
                name: name.to_string(),
                reason: "an Iceberg REST catalog names tables with their namespace: give namespace.table".to_string(),
            });
        }
        let url = format!(
            "{}/namespaces/{}/tables/{}",
            self.v1(),
            encode_namespace(&name.namespace),
            encode(&name.table)
        );
        let request = || {
            self.client
                .get(&url)
                .header("X-Iceberg-Access-Delegation", "vended-credentials")
        };
        let response = self.send(request).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Err(self.not_found(name).await);
        }
        let body = self.body(response).await?;
        if !status.is_success() {
            return Err(self.refused(status, &body));
        }
        let loaded: LoadTableResponse = serde_json::from_str(&body)
            .map_err(|e| self.protocol(format!("load table {name}: {e}")))?;
        let metadata_location = loaded.metadata_location.ok_or_else(|| {
            self.protocol(format!(
                "load table {name}: the answer has no metadata-location"
            ))
        })?;
        let location = loaded
            .metadata
            .get("location")
            .and_then(Value::as_str)
            .map(store_url)
            .unwrap_or_default();
        let mut storage: BTreeMap<String, String> = BTreeMap::new();
        for (key, value) in loaded.config.into_iter().chain(
            loaded
                .storage_credentials
                .into_iter()
                .flat_map(|c| c.config),
        ) {
            if STORAGE_PREFIXES.iter().any(|p| key.starts_with(p)) {
                storage.insert(key, value);
            }
        }
        tracing::debug!(keys = ?storage.keys().collect::<Vec<_>>(), "storage options vended by the catalog");
        Ok(CatalogTable {
            catalog: self.uri.clone(),
            name: name.to_string(),
            format: "iceberg".to_string(),
            location,
            read_url: store_url(&metadata_location),
            storage: storage.into_iter().collect(),
            partition_keys: Vec::new(),
            partitions: None,
            text: None,
            binary_columnar: false,
        })
    }

    /// The error for a table the catalog does not have: its namespace is
    /// missing (close namespaces named) or the table is (close tables named).
    async fn not_found(&self, name: &TableName) -> CatalogError {
        let namespaces = self
            .namespaces(&name.namespace[..name.namespace.len() - 1])
            .await;
        let namespace = name.namespace.join(".");
        if let Ok(namespaces) = &namespaces {
            if !namespaces.contains(&namespace) {
                return CatalogError::NoSuchNamespace {
                    catalog: self.uri.clone(),
                    namespace: namespace.clone(),
                    close: close_matches(&namespace, namespaces),
                };
            }
        }
        let close = match self.tables(&name.namespace).await {
            Ok(tables) => close_matches(&name.to_string(), &tables),
            Err(_) => Vec::new(),
        };
        CatalogError::NoSuchTable {
            catalog: self.uri.clone(),
            name: name.to_string(),
            close,
        }
    }

    /// The namespaces under `parent` (all levels joined with `.`).
    async fn namespaces(&self, parent: &[String]) -> Result<Vec<String>, CatalogError> {
        let mut url = format!("{}/namespaces", self.v1());
        if !parent.is_empty() {
            url = format!("{url}?parent={}", encode_namespace(parent));
        }
        let listed: ListNamespaces = self.get_json(&url).await?;
        Ok(listed.namespaces.into_iter().map(|n| n.join(".")).collect())
    }

    /// The tables of `namespace`, by full name.
    async fn tables(&self, namespace: &[String]) -> Result<Vec<String>, CatalogError> {
        let url = format!(
            "{}/namespaces/{}/tables",
            self.v1(),
            encode_namespace(namespace)
        );
        let listed: ListTables = self.get_json(&url).await?;
        Ok(listed
            .identifiers
            .into_iter()
            .map(|i| {
                TableName {
                    namespace: i.namespace,
                    table: i.name,
                }
                .to_string()
            })
            .collect())
    }

    async fn config(&self) -> Result<ConfigResponse, CatalogError> {
        self.get_json(&format!("{}/v1/config", self.base)).await
    }

    /// Exchanges client credentials for a token (RFC 6749 client
    /// credentials), due again at four fifths of the life it is given.
    async fn exchange(&self, grant: &Grant) -> Result<Token, CatalogError> {
        let endpoint = grant.endpoint.as_str();
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", grant.id.as_str()),
            ("client_secret", grant.secret.as_str()),
            ("scope", "catalog"),
        ];
        let asked = Instant::now();
        let request = self.client.post(endpoint).form(&form);
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let body = self.body(response).await?;
        if !status.is_success() {
            return Err(self.refused(status, &body));
        }
        let token: TokenResponse = serde_json::from_str(&body)
            .map_err(|e| self.protocol(format!("token endpoint {endpoint}: {e}")))?;
        let renew_at = token
            .expires_in
            .map(|secs| asked + Duration::from_millis(secs.saturating_mul(800)));
        Ok(Token {
            value: token.access_token,
            renew_at,
        })
    }

    fn set_token(&self, token: Token) {
        *self.token.lock().unwrap_or_else(|e| e.into_inner()) = Some(token);
    }

    /// The token to send: exchanged again first when it is due.
    async fn bearer(&self) -> Result<Option<String>, CatalogError> {
        let (value, due) = {
            let token = self.token.lock().unwrap_or_else(|e| e.into_inner());
            match token.as_ref() {
                Some(t) => (
                    Some(t.value.clone()),
                    t.renew_at.is_some_and(|at| Instant::now() >= at),
                ),
                None => (None, false),
            }
        };
        match (&self.grant, due) {
            (Some(grant), true) => {
                let token = self.exchange(grant).await?;
                let value = token.value.clone();
                self.set_token(token);
                tracing::debug!(catalog = %self.uri, "catalog token exchanged again before it expired");
                Ok(Some(value))
            }
            _ => Ok(value),
        }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, CatalogError> {
        let response = self.send(|| self.client.get(url)).await?;
        let status = response.status();
        let body = self.body(response).await?;
        if !status.is_success() {
            return Err(self.refused(status, &body));
        }
        serde_json::from_str(&body).map_err(|e| self.protocol(format!("{}: {e}", path_of(url))))
    }

    /// Sends the request `make` builds, with the token; a token from
    /// client credentials that the catalog refuses (401) is exchanged again
    /// and the request sent once more.
    async fn send(
        &self,
        make: impl Fn() -> RequestBuilder,
    ) -> Result<reqwest::Response, CatalogError> {
        let authed = |token: Option<String>| match token {
            Some(token) => make().bearer_auth(token),
            None => make(),
        };
        let response = authed(self.bearer().await?)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let Some(grant) = &self.grant else {
            return Ok(response);
        };
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        let token = self.exchange(grant).await?;
        let value = token.value.clone();
        self.set_token(token);
        tracing::debug!(catalog = %self.uri, "the catalog refused its token; exchanged again");
        authed(Some(value))
            .send()
            .await
            .map_err(|e| self.unreachable(e))
    }

    async fn body(&self, response: reqwest::Response) -> Result<String, CatalogError> {
        response.text().await.map_err(|e| self.unreachable(e))
    }

    fn v1(&self) -> String {
        match &self.prefix {
            Some(prefix) => format!("{}/v1/{}", self.base, prefix.trim_matches('/')),
            None => format!("{}/v1", self.base),
        }
    }

    fn unreachable(&self, e: reqwest::Error) -> CatalogError {
        let reason = if e.is_timeout() {
            format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())
        } else if e.is_connect() {
            "connection refused or no route (is the catalog running, and is the URI right?)"
                .to_string()
        } else {
            e.without_url().to_string()
        };
        CatalogError::Unreachable {
            catalog: self.uri.clone(),
            reason,
        }
    }

    /// The error for a non-2xx answer other than a missing table.
    fn refused(&self, status: StatusCode, body: &str) -> CatalogError {
        let message = error_message(body);
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return CatalogError::Unauthorized {
                catalog: self.uri.clone(),
                status: status.as_u16(),
                reason: message,
            };
        }
        self.protocol(format!("HTTP {status}: {message}"))
    }

    fn protocol(&self, reason: String) -> CatalogError {
        CatalogError::Protocol {
            catalog: self.uri.clone(),
            reason,
        }
    }
}

/// The `error.message` of a REST error body (never its stack), else its start.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    match parsed
        .as_ref()
        .and_then(|v| v.pointer("/error/message"))
        .and_then(Value::as_str)
    {
        Some(message) => message.to_string(),
        None => body
            .chars()
            .take(200)
            .collect::<String>()
            .replace('\n', " "),
    }
}

/// A URL without its query, for messages.
fn path_of(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

/// Reads a secret file's first line; its content never appears in messages.
fn read_secret(option: &'static str, path: &Path) -> Result<String, CatalogError> {
    let text = std::fs::read_to_string(path).map_err(|e| CatalogError::Credentials {
        option,
        path: path.display().to_string(),
        reason: Report(&e).to_string(),
    })?;
    let secret = text.trim().to_string();
    if secret.is_empty() {
        return Err(CatalogError::Credentials {
            option,
            path: path.display().to_string(),
            reason: "the file is empty".to_string(),
        });
    }
    Ok(secret)
}

/// A namespace as one path segment: its levels joined by the unit separator.
fn encode_namespace(levels: &[String]) -> String {
    levels
        .iter()
        .map(|l| encode(l))
        .collect::<Vec<_>>()
        .join(NAMESPACE_SEPARATOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_one_segment() {
        assert_eq!(encode_namespace(&["a".into(), "b c".into()]), "a%1Fb%20c");
    }

    #[test]
    fn error_messages_leave_the_stack_out() {
        let body = r#"{"error":{"message":"Table does not exist: a.b","type":"NoSuchTableException","code":404,"stack":["x"]}}"#;
        assert_eq!(error_message(body), "Table does not exist: a.b");
    }
}
