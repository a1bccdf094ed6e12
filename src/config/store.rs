//! `--connect-timeout`, `--request-timeout`: how long object store requests
//! (S3, GCS, Azure) may take, shared by every command that reads a store
//! (and job files, as keys).

use std::time::Duration;

use clap::Args;
use connectors::store::Timeouts;
use serde::Deserialize;

use super::heading;
use super::value::{form, parse_duration};
use super::{rule, OptionError};

/// Timeouts of one try of an object store request; a request is tried
/// again on a timeout, the tries starting within 10 s of the first, so a
/// store that accepts connections and never answers fails a request within
/// 12 s plus `request_timeout`.
#[derive(Debug, Clone, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct StoreOptions {
    /// Object stores (S3, GCS, Azure): how long connecting may take (e.g. 5s).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, help = "Object stores: how long connecting may take", long_help, help_heading = heading::ACCESS, hide_short_help = true)]
    #[serde(deserialize_with = "form::duration")]
    pub connect_timeout: Duration,
    /// Object stores (S3, GCS, Azure): how long one try of a request may take, answer included (e.g. 30s). A request that times out is tried again while within 10 s of its first try, so a store that accepts connections and never answers fails it within 12 s plus this.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, help = "Object stores: how long one try may take", long_help, help_heading = heading::ACCESS, hide_short_help = true)]
    #[serde(deserialize_with = "form::duration")]
    pub request_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        let defaults = Timeouts::default();
        StoreOptions {
            connect_timeout: defaults.connect,
            request_timeout: defaults.request,
        }
    }
}

impl StoreOptions {
    /// Checks every rule, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        rule(
            !self.connect_timeout.is_zero(),
            "connect-timeout",
            "must be more than 0",
        )?;
        rule(
            !self.request_timeout.is_zero(),
            "request-timeout",
            "must be more than 0",
        )
    }

    /// Makes these the timeouts of every object store the process opens
    /// from now on: call it before the first request.
    pub fn apply(&self) -> Result<(), OptionError> {
        self.validate()?;
        connectors::store::set_timeouts(Timeouts {
            connect: self.connect_timeout,
            request: self.request_timeout,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_object_stores_and_zero_is_refused() {
        let defaults = StoreOptions::default();
        assert_eq!(defaults.connect_timeout, Duration::from_secs(5));
        assert_eq!(defaults.request_timeout, Duration::from_secs(30));
        assert!(defaults.validate().is_ok());
        let zero = StoreOptions {
            request_timeout: Duration::ZERO,
            ..defaults
        };
        let err = zero.validate().expect_err("zero refused");
        assert!(err.to_string().contains("--request-timeout"), "{err}");
    }
}
