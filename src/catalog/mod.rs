//! Tables by name: a source given as `db.table` is looked up in a catalog
//! (`--catalog`): a Hive Metastore (`thrift://`) or an Iceberg REST catalog
//! (`http(s)://`), which says where the table is, in which format, and (for
//! Hive) which partitions it has. What the catalog answers becomes the URL
//! the rest of sluice reads, and the storage credentials it vends.

pub(crate) mod hive;
pub(crate) mod rest;
pub(crate) mod sasl;
pub mod thrift;

use connectors::Report;
use std::fmt;

use crate::config::CatalogOptions;

/// The kind of catalog a `--catalog` URI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogKind {
    /// `thrift://HOST:PORT`: a Hive Metastore.
    Hive,
    /// `http(s)://HOST:PORT[/PATH]`: an Iceberg REST catalog.
    IcebergRest,
}

impl CatalogKind {
    /// The kind of catalog `uri` names.
    pub fn of(uri: &str) -> Result<CatalogKind, CatalogError> {
        let scheme = uri.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        let kind = match scheme.as_deref() {
            Some("thrift") => CatalogKind::Hive,
            Some("http" | "https") => CatalogKind::IcebergRest,
            _ => return Err(CatalogError::InvalidUri {
                uri: uri.to_string(),
                reason: "use thrift://HOST:PORT for a Hive Metastore or http(s)://HOST:PORT for an Iceberg REST catalog".to_string(),
            }),
        };
        // A host with a space, a port past 65535: refused here, not found
        // unreachable after a lookup.
        match connectors::store::settings::url_problem(uri, &[]) {
            Some(reason) => Err(CatalogError::InvalidUri {
                uri: uri.to_string(),
                reason,
            }),
            None => Ok(kind),
        }
    }
}

/// A table name split into its namespace and its own name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    /// The namespace levels (the database, for Hive); may be empty.
    pub namespace: Vec<String>,
    /// The table's own name.
    pub table: String,
}

impl TableName {
    /// Parses `table`, `db.table` or `ns1.ns2.table`.
    pub fn parse(name: &str) -> Result<TableName, CatalogError> {
        let invalid = |reason: &str| CatalogError::InvalidName {
            name: name.to_string(),
            reason: reason.to_string(),
        };
        if name.contains("://") || name.contains('/') {
            return Err(invalid(
                "with --catalog the source is a table name (db.table), not a path or URL",
            ));
        }
        let parts: Vec<&str> = name.split('.').collect();
        if parts.iter().any(|p| p.trim().is_empty()) {
            return Err(invalid("every part of a table name must be non-empty"));
        }
        let (table, namespace) = parts.split_last().ok_or_else(|| invalid("empty name"))?;
        Ok(TableName {
            namespace: namespace.iter().map(|s| s.to_string()).collect(),
            table: table.to_string(),
        })
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for level in &self.namespace {
            write!(f, "{level}.")?;
        }
        f.write_str(&self.table)
    }
}

/// A table as its catalog describes it. Its `Debug` names the vended
/// storage options' keys, never their values.
#[derive(Clone)]
pub struct CatalogTable {
    /// The catalog's URI as given (never with credentials).
    pub catalog: String,
    /// The table's full name.
    pub name: String,
    /// The table's format as `ls` shows it (`iceberg`, `delta`, `parquet`...).
    pub format: String,
    /// The table's location (its root directory).
    pub location: String,
    /// What sluice reads: the current metadata file of an Iceberg table, else
    /// the table's location.
    pub read_url: String,
    /// The storage options the catalog vended (`s3.access-key-id`...): used
    /// to open the store, never shown.
    pub storage: Vec<(String, String)>,
    /// A Hive table's partition columns: (name, Hive type).
    pub partition_keys: Vec<(String, String)>,
    /// A Hive table's partitions as the metastore lists them (`None`: the
    /// table is not partitioned).
    pub partitions: Option<Vec<HivePartition>>,
    /// A Hive text or CSV SerDe table's row format (its SerDe's delimiter,
    /// escape, quote and null text, and the table's columns): how its lines
    /// are split; for a SequenceFile or RCFile table, how its values or
    /// fields are read.
    pub text: Option<connectors::format::DelimitedText>,
    /// An RCFile table whose fields are LazyBinary (`LazyBinaryColumnarSerDe`),
    /// not text (`ColumnarSerDe`).
    pub binary_columnar: bool,
}

impl fmt::Debug for CatalogTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let storage: Vec<&str> = self.storage.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("CatalogTable")
            .field("catalog", &self.catalog)
            .field("name", &self.name)
            .field("format", &self.format)
            .field("location", &self.location)
            .field("read_url", &self.read_url)
            .field("storage_keys", &storage)
            .field("partition_keys", &self.partition_keys)
            .field("partitions", &self.partitions.as_ref().map(Vec::len))
            .field("text", &self.text)
            .field("binary_columnar", &self.binary_columnar)
            .finish()
    }
}

/// The value Hive stores for a null partition value.
const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

/// The Arrow type of a Hive column type (partition columns are primitive).
fn hive_type(ty: &str) -> arrow::datatypes::DataType {
    use arrow::datatypes::DataType;
    let base = ty
        .split('(')
        .next()
        .unwrap_or(ty)
        .trim()
        .to_ascii_lowercase();
    match base.as_str() {
        "tinyint" => DataType::Int8,
        "smallint" => DataType::Int16,
        "int" | "integer" => DataType::Int32,
        "bigint" => DataType::Int64,
        "float" => DataType::Float32,
        "double" | "decimal" => DataType::Float64,
        "boolean" => DataType::Boolean,
        "date" => DataType::Date32,
        _ => DataType::Utf8,
    }
}

/// The Arrow type a Hive text table's column is read as: its primitive
/// types parsed from the text, anything else (structs, arrays, maps) kept
/// as the text itself.
pub(crate) fn hive_column_type(ty: &str) -> arrow::datatypes::DataType {
    use arrow::datatypes::{DataType, TimeUnit};
    let lower = ty.trim().to_ascii_lowercase();
    let base = lower.split('(').next().unwrap_or(&lower).trim();
    match base {
        "decimal" | "numeric" => {
            let args = lower
                .split_once('(')
                .and_then(|(_, rest)| rest.strip_suffix(')'));
            let (precision, scale) = match args.and_then(|a| a.split_once(',')) {
                Some((p, s)) => (p.trim().parse().ok(), s.trim().parse().ok()),
                None => (args.and_then(|p| p.trim().parse().ok()), Some(0)),
            };
            // Hive's bare `decimal` is decimal(10,0).
            DataType::Decimal128(precision.unwrap_or(10), scale.unwrap_or(0))
        }
        "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, None),
        "string" | "varchar" | "char" | "binary" => DataType::Utf8,
        _ => hive_type(base),
    }
}

/// One partition of a Hive table, as the metastore lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HivePartition {
    /// Its values, aligned with the table's partition columns.
    pub values: Vec<String>,
    /// Its location (anywhere: not necessarily under the table's).
    pub location: String,
}

impl CatalogTable {
    /// Makes `options` read the table as its catalog describes it: the
    /// metastore's partitions (not a listing of the root) and its format.
    pub fn apply(&self, options: &mut connectors::DatasetOptions) {
        if options.format.is_none() && !matches!(self.format.as_str(), "iceberg" | "delta") {
            options.format = self.format.parse().ok();
            // Text and CSV SerDe tables: lines split as their SerDe splits
            // them; SequenceFile values and RCFile fields likewise.
            if let Some(text) = &self.text {
                if matches!(self.format.as_str(), "text" | "csv") {
                    options.format = Some(connectors::Format::Text);
                }
                options.format_options.delimited = Some(text.clone());
                options.format_options.binary_columnar = self.binary_columnar;
            }
        }
        let Some(partitions) = &self.partitions else {
            return;
        };
        let fields = self
            .partition_keys
            .iter()
            .map(|(name, ty)| arrow::datatypes::Field::new(name, hive_type(ty), true))
            .collect();
        options.catalog_partitions = Some(connectors::CatalogPartitions {
            fields,
            partitions: partitions
                .iter()
                .map(|p| connectors::CatalogPartition {
                    url: p.location.clone(),
                    values: p
                        .values
                        .iter()
                        .map(|v| (v != HIVE_NULL).then(|| v.clone()))
                        .collect(),
                })
                .collect(),
        });
    }

    /// The partitions whose location is not under the table's.
    pub fn outside_root(&self) -> Vec<&HivePartition> {
        let root = format!("{}/", self.location.trim_end_matches('/'));
        self.partitions
            .iter()
            .flatten()
            .filter(|p| !p.location.starts_with(&root))
            .collect()
    }

    /// The identity of the source in job state: the catalog and the table,
    /// not where the table's files happen to be now.
    pub fn identity(&self) -> String {
        format!("{}#{}", self.catalog, self.name)
    }

    /// The table as a job refers to it: looked up again in the catalog
    /// `options` name, identified by [`Self::identity`].
    pub fn table_ref(&self, options: &CatalogOptions) -> crate::config::TableRef {
        crate::config::TableRef {
            catalog: options.clone(),
            name: self.name.clone(),
            identity: self.identity(),
            vended: !self.storage.is_empty(),
        }
    }
}

/// A catalog that could not answer, or a name it does not know.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The `--catalog` value is no catalog URI.
    #[error("invalid --catalog (or SLUICE_CATALOG) {uri:?}: {reason}")]
    InvalidUri {
        /// The URI as given.
        uri: String,
        /// Why it was refused.
        reason: String,
    },
    /// The source is no table name.
    #[error("invalid table name `{name}`: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// A credential file that cannot be used.
    #[error("cannot use {option} {path}: {reason}")]
    Credentials {
        /// `--catalog-token-file` or `--catalog-credential-file`.
        option: &'static str,
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The catalog did not answer.
    #[error("catalog {catalog} cannot be reached: {reason}")]
    Unreachable {
        /// The catalog.
        catalog: String,
        /// What failed.
        reason: String,
    },
    /// The catalog refused the credentials.
    #[error("catalog {catalog} refused the credentials (HTTP {status}): {reason}; check --catalog-token-file or --catalog-credential-file (an expired token must be renewed)")]
    Unauthorized {
        /// The catalog.
        catalog: String,
        /// 401 or 403.
        status: u16,
        /// The catalog's message.
        reason: String,
    },
    /// No such namespace (database).
    #[error("catalog {catalog} has no namespace `{namespace}`{}", close_list(.close))]
    NoSuchNamespace {
        /// The catalog.
        catalog: String,
        /// The namespace asked for.
        namespace: String,
        /// Names close to it.
        close: Vec<String>,
    },
    /// No such table.
    #[error("catalog {catalog} has no table `{name}`{}", close_list(.close))]
    NoSuchTable {
        /// The catalog.
        catalog: String,
        /// The table asked for.
        name: String,
        /// Names close to it.
        close: Vec<String>,
    },
    /// Kerberos authentication to a Kerberized Hive Metastore failed (the
    /// same words as HDFS's).
    #[error("cannot log in to catalog {catalog} with Kerberos")]
    Kerberos {
        /// The catalog.
        catalog: String,
        /// Why Kerberos failed, naming the metastore and what to do.
        #[source]
        source: connectors::store::kerberos::KerberosError,
    },
    /// A metastore that turned a plain call down (so it asks for SASL), and
    /// Kerberos authentication to it failed.
    #[error("catalog {catalog} closed the connection on a plain Thrift call, so it requires SASL (Kerberos, hive.metastore.sasl.enabled)")]
    KerberosAsked {
        /// The catalog.
        catalog: String,
        /// Why Kerberos failed.
        source: connectors::store::kerberos::KerberosError,
    },
    /// An answer sluice cannot use.
    #[error("catalog {catalog}: {reason}")]
    Protocol {
        /// The catalog.
        catalog: String,
        /// What was wrong.
        reason: String,
    },
}

impl CatalogError {
    /// Whether running again as is cannot help: a wrong name or URI.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            CatalogError::InvalidUri { .. }
                | CatalogError::InvalidName { .. }
                | CatalogError::NoSuchNamespace { .. }
                | CatalogError::NoSuchTable { .. }
        )
    }
}

fn close_list(close: &[String]) -> String {
    if close.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {}?)", close.join(", "))
    }
}

/// Looks `name` up in the catalog `options` name.
pub async fn resolve(options: &CatalogOptions, name: &str) -> Result<CatalogTable, CatalogError> {
    resolve_keeping(options, name).await.map(|(table, _)| table)
}

/// Looks `name` up; the REST catalog it came from too, to load it again.
async fn resolve_keeping(
    options: &CatalogOptions,
    name: &str,
) -> Result<(CatalogTable, Option<(rest::RestCatalog, TableName)>), CatalogError> {
    let uri = options.catalog.as_deref().unwrap_or_default().trim();
    let parsed = TableName::parse(name)?;
    let (table, catalog) = match CatalogKind::of(uri)? {
        CatalogKind::IcebergRest => {
            let catalog = rest::RestCatalog::connect(uri, options).await?;
            let table = catalog.load(&parsed).await?;
            (table, Some((catalog, parsed)))
        }
        CatalogKind::Hive => (
            hive::load(uri, &parsed, options.catalog_principal.as_deref()).await?,
            None,
        ),
    };
    tracing::debug!(
        catalog = %table.catalog,
        table = %table.name,
        format = %table.format,
        location = %table.location,
        "table found in the catalog"
    );
    Ok((table, catalog))
}

/// The table `source` names when `options` give a catalog (`None` when
/// they do not: the source is a path or URL). The storage options the
/// catalog vended are set for every store opened from now on, and loaded
/// again before they expire.
pub async fn lookup(
    options: &CatalogOptions,
    source: &str,
) -> Result<Option<CatalogTable>, CatalogError> {
    if !options.is_set() {
        return Ok(None);
    }
    let (table, catalog) = resolve_keeping(options, source).await?;
    tracing::info!(
        catalog = %table.catalog,
        table = %table.name,
        format = %table.format,
        location = %table.location,
        "table found in the catalog"
    );
    connectors::store::set_vended(table.storage.clone());
    if let Some((catalog, name)) = catalog {
        keep_fresh(catalog, name, &table.storage);
    }
    Ok(Some(table))
}

/// Milliseconds since the epoch, now.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Loads the table again before its vended credentials expire, for as long
/// as the process runs, and sets what the catalog vends then (stores
/// already open read their credentials again on each request). A failed
/// load is logged (without a secret) and tried again shortly.
fn keep_fresh(catalog: rest::RestCatalog, name: TableName, storage: &[(String, String)]) {
    let Some(mut expiry) = connectors::store::vended_expiry_ms(storage) else {
        return;
    };
    tokio::spawn(async move {
        let mut failures = 0u32;
        loop {
            let wait = connectors::store::refresh_delay(expiry, now_ms(), failures);
            tokio::time::sleep(wait).await;
            match catalog.load(&name).await {
                Ok(table) => {
                    failures = 0;
                    connectors::store::set_vended(table.storage.clone());
                    let next = connectors::store::vended_expiry_ms(&table.storage);
                    tracing::info!(
                        table = %table.name,
                        keys = table.storage.len(),
                        expires_in_s = next.map(|e| (e - now_ms()) / 1000),
                        "vended storage credentials refreshed"
                    );
                    match next {
                        Some(next) => expiry = next,
                        None => return,
                    }
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(
                        table = %name,
                        error = %Report(&e),
                        expires_in_s = (expiry - now_ms()) / 1000,
                        "cannot refresh the vended storage credentials; trying again"
                    );
                }
            }
        }
    });
}

/// The names among `candidates` close to `wanted` (an edit or two apart, or
/// one holding the other), closest first, at most five.
pub fn close_matches(wanted: &str, candidates: &[String]) -> Vec<String> {
    let wanted_lower = wanted.to_lowercase();
    let limit = (wanted.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &String)> = candidates
        .iter()
        .filter_map(|c| {
            let lower = c.to_lowercase();
            let d = edit_distance(&wanted_lower, &lower);
            let related = lower.contains(&wanted_lower) || wanted_lower.contains(&lower);
            (d <= limit || related).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(5).map(|(_, c)| c.clone()).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// A URI a catalog gave for a file or directory, as sluice's stores take it:
/// Hadoop's `file:/path` becomes `file:///path`.
pub fn store_url(uri: &str) -> String {
    match uri.strip_prefix("file:") {
        Some(rest) if !rest.starts_with("//") => format!("file://{rest}"),
        _ => uri.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_into_namespace_and_table() {
        let n = TableName::parse("ns1.ns2.t").expect("valid");
        assert_eq!(n.namespace, ["ns1", "ns2"]);
        assert_eq!(n.table, "t");
        assert_eq!(n.to_string(), "ns1.ns2.t");
        assert!(TableName::parse("t").expect("valid").namespace.is_empty());
        assert!(TableName::parse("db..t").is_err());
        assert!(TableName::parse("/data/t").is_err());
    }

    #[test]
    fn close_matches_are_a_typo_away() {
        let names = ["clicks", "views", "click_stats"].map(String::from);
        assert_eq!(close_matches("clickz", &names), ["clicks"]);
        assert!(close_matches("orders", &names).is_empty());
    }

    #[test]
    fn hadoop_file_uris_gain_their_slashes() {
        assert_eq!(store_url("file:/tmp/t"), "file:///tmp/t");
        assert_eq!(store_url("file:///tmp/t"), "file:///tmp/t");
        assert_eq!(store_url("s3://b/t"), "s3://b/t");
    }

    #[test]
    fn a_table_never_shows_its_vended_secrets() {
        let table = CatalogTable {
            catalog: "http://rest".to_string(),
            name: "ads.clicks".to_string(),
            format: "iceberg".to_string(),
            location: "s3://b/t".to_string(),
            read_url: "s3://b/t/metadata/1.metadata.json".to_string(),
            storage: vec![
                ("s3.secret-access-key".to_string(), "SECRET-S3".to_string()),
                ("adls.sas-token.a".to_string(), "sig=SECRET-SAS".to_string()),
                ("gcs.oauth2.token".to_string(), "SECRET-GCS".to_string()),
            ],
            partition_keys: Vec::new(),
            partitions: None,
            text: None,
            binary_columnar: false,
        };
        let shown = format!("{table:?}");
        assert!(shown.contains("s3.secret-access-key"), "{shown}");
        assert!(!shown.contains("SECRET"), "{shown}");
    }

    #[test]
    fn schemes_choose_the_catalog() {
        assert_eq!(
            CatalogKind::of("thrift://h:9083").ok(),
            Some(CatalogKind::Hive)
        );
        assert_eq!(
            CatalogKind::of("https://h/api").ok(),
            Some(CatalogKind::IcebergRest)
        );
        assert!(CatalogKind::of("h:9083").is_err());
    }
}
