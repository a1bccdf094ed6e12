//! `--catalog`, `--catalog-token-file`, `--catalog-credential-file`,
//! `--catalog-principal`: the catalog a source given as a table name
//! (`db.table`) is looked up in, shared by `ls`, `train`, `master` and job
//! files (as keys).

use std::path::PathBuf;

use super::heading;
use clap::Args;
use serde::Deserialize;

/// Where table names are looked up, and how to log in there.
#[derive(Debug, Clone, Default, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct CatalogOptions {
    /// Read the source as a table name (`table`, `db.table`, `ns1.ns2.table`) in this catalog: `thrift://HOST:PORT` (a Hive Metastore) or `http(s)://HOST:PORT[/PREFIX]` (an Iceberg REST catalog).
    #[arg(long, value_name = "URI", env = "SLUICE_CATALOG", help = "Read a table by name from this catalog", long_help, help_heading = heading::SOURCE)]
    pub catalog: Option<String>,
    /// Iceberg REST catalog: a file holding the bearer token every request carries.
    #[arg(long, value_name = "FILE", conflicts_with = "catalog_credential_file", help = "Iceberg REST catalog: bearer token file", long_help, help_heading = heading::ACCESS, hide_short_help = true)]
    pub catalog_token_file: Option<PathBuf>,
    /// Iceberg REST catalog: a file holding `client_id:client_secret`, exchanged for a token at the catalog's OAuth2 token endpoint.
    #[arg(long, value_name = "FILE", help = "Iceberg REST catalog: OAuth2 client file", long_help, help_heading = heading::ACCESS, hide_short_help = true)]
    pub catalog_credential_file: Option<PathBuf>,
    /// Kerberized Hive Metastore (SASL/GSSAPI): its service principal, default `hive/_HOST@REALM` (`_HOST`: the canonical name of the metastore's host; `REALM`: the default realm). Given, sluice always speaks SASL; without it, when the metastore turns a plain call down. The login is HDFS's: the ticket cache (`kinit`, `KRB5CCNAME`) or --keytab with --principal.
    #[arg(long, value_name = "PRINCIPAL", help = "Kerberized Hive Metastore: its principal [default: hive/_HOST@REALM]", long_help, help_heading = heading::ACCESS, hide_short_help = true)]
    pub catalog_principal: Option<String>,
}

impl CatalogOptions {
    /// Whether the source is a table name.
    pub fn is_set(&self) -> bool {
        self.catalog
            .as_deref()
            .is_some_and(|c| !c.trim().is_empty())
    }
}

/// How `sluice worker` logs in to the catalog of a job on a table by name:
/// the master names the catalog and the table, and a worker asks it for the
/// storage credentials it vends (the master hands out none of its own).
#[derive(Debug, Clone, Default, Args)]
pub struct WorkerCatalogOptions {
    /// A job on an Iceberg REST catalog's table whose catalog vends storage credentials: a file holding the bearer token this worker asks the catalog with.
    #[arg(long, value_name = "FILE", conflicts_with = "catalog_credential_file", help = "Catalog bearer token file (vended credentials)", long_help, help_heading = heading::ACCESS, hide_short_help = true)]
    pub catalog_token_file: Option<PathBuf>,
    /// A job on an Iceberg REST catalog's table whose catalog vends storage credentials: a file holding `client_id:client_secret` this worker exchanges for a token at the catalog.
    #[arg(long, value_name = "FILE", help = "Catalog OAuth2 client file (vended credentials)", long_help, help_heading = heading::ACCESS, hide_short_help = true)]
    pub catalog_credential_file: Option<PathBuf>,
}

impl WorkerCatalogOptions {
    /// The options that look `catalog` up with these credentials.
    pub fn for_catalog(&self, catalog: &str) -> CatalogOptions {
        CatalogOptions {
            catalog: Some(catalog.to_string()),
            catalog_token_file: self.catalog_token_file.clone(),
            catalog_credential_file: self.catalog_credential_file.clone(),
            catalog_principal: None,
        }
    }
}

/// A source given as a table name, once its catalog answered: where to look
/// it up again (a followed job asks the catalog on each poll, as the table's
/// current snapshot and partitions are the catalog's to say) and what
/// identifies it in a job's state (the catalog and the table, not where its
/// files are now).
#[derive(Debug, Clone, PartialEq)]
pub struct TableRef {
    /// The catalog and how to log in there.
    pub catalog: CatalogOptions,
    /// The table's full name as the catalog resolved it (`web.clicks`).
    pub name: String,
    /// `CATALOG#TABLE`.
    pub identity: String,
    /// Whether the catalog vended storage credentials with the table.
    pub vended: bool,
}
