//! `--keytab FILE --principal NAME`: a Kerberos login for Kerberized HDFS,
//! shared by every command that reads or writes HDFS (and job files, as keys).

use std::path::PathBuf;

use clap::Args;
use connectors::store::kerberos::{login_with_keytab, KerberosError, KeytabLogin};
use serde::Deserialize;

use super::heading;
use super::{rule, OptionError};

/// How to log in to a Kerberized HDFS. Without these, the Kerberos ticket cache
/// (`kinit`) or a delegation token file (`HADOOP_TOKEN_FILE_LOCATION`) is used.
#[derive(Debug, Clone, Default, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct KerberosOptions {
    /// Log in to Kerberized HDFS, and a Kerberized Hive Metastore (--catalog thrift://...), from this keytab (needs --principal); sluice renews the ticket itself for as long as it runs.
    #[arg(long, value_name = "FILE", requires = "principal", help = "Log in to Kerberized HDFS from this keytab", long_help, help_heading = heading::ACCESS)]
    pub keytab: Option<PathBuf>,
    /// The Kerberos principal of --keytab (user@REALM, or user in the default realm).
    #[arg(long, value_name = "NAME", requires = "keytab", help = "The principal of --keytab (user@REALM)", long_help, help_heading = heading::ACCESS)]
    pub principal: Option<String>,
}

impl KerberosOptions {
    /// Checks that the keytab and the principal come together.
    pub fn validate(&self) -> Result<(), OptionError> {
        rule(
            self.keytab.is_some() == self.principal.is_some(),
            if self.keytab.is_some() {
                "keytab"
            } else {
                "principal"
            },
            "--keytab and --principal go together: the login needs both",
        )
    }

    /// Logs in from the keytab, if one was given; the login lasts as long as the
    /// value returned. Sets the process's Kerberos environment: call it before
    /// other threads start (it is refused otherwise).
    pub fn login(&self) -> Result<Option<KeytabLogin>, KerberosError> {
        let (Some(keytab), Some(principal)) = (&self.keytab, &self.principal) else {
            return Ok(None);
        };
        let login = login_with_keytab(keytab, principal)?;
        tracing::debug!(principal = %login.principal, "logged in from keytab");
        Ok(Some(login))
    }
}
