//! `sluice worker`: a worker's link to its master and how it leaves.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use super::heading;
use super::value::{form, parse_duration};
use super::{rule, OptionError};

/// How a worker reaches its master, names itself and stops; with
/// [`super::TrainerOptions`] and [`super::PipelineOptions`] they make a
/// `sluice worker` command.
#[derive(Debug, Clone, PartialEq, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct WorkerOptions {
    /// The master's URL, e.g. http://sluice-master:7070.
    #[arg(long, help_heading = heading::DISTRIBUTED)]
    pub master: String,
    /// Keep retrying an unreachable master this long before giving up.
    #[arg(long, default_value = "5m", value_parser = parse_duration, help = "Retry an unreachable master this long", long_help, help_heading = heading::DISTRIBUTED)]
    #[serde(deserialize_with = "form::duration")]
    pub patience: Duration,
    /// Trust this PEM CA certificate for an https:// master (besides the system's roots).
    #[arg(long, value_name = "PEM", help = "Trust this PEM CA for an https:// master", long_help, help_heading = heading::DISTRIBUTED)]
    pub ca_file: Option<PathBuf>,
    /// On SIGTERM or SIGINT (pre-emption), how long the trainers may take to
    /// finish the batches they hold before the worker hands its tasks back and
    /// exits (keep it under the pod's terminationGracePeriodSeconds, 30 s by
    /// default). A second signal exits at once.
    #[arg(long, default_value = "20s", value_parser = parse_duration, help = "Time trainers get to finish on SIGTERM/SIGINT", long_help, help_heading = heading::STATE)]
    #[serde(deserialize_with = "form::duration")]
    pub grace: Duration,
    /// The worker's name on the status page, in `sluice status` and in /metrics (default: host name and pid, e.g. node-7-4121).
    #[arg(long, help = "The worker's name on the status page and metrics", long_help, help_heading = heading::DISTRIBUTED)]
    pub name: Option<String>,
    /// Exit with this code when a signal stopped the worker before the job was over (default 130, as every command; e.g. 143 under a Kubernetes Job or as a Spark task, or 0 where a pre-empted worker must not count as failed).
    #[arg(long, value_name = "CODE", default_value_t = crate::exit_codes::INTERRUPTED, help = "Exit code when a signal stopped the worker", long_help, help_heading = heading::STATE, hide_short_help = true)]
    pub stopped_exit_code: u8,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            master: String::new(),
            patience: Duration::from_secs(300),
            ca_file: None,
            grace: Duration::from_secs(20),
            name: None,
            stopped_exit_code: crate::exit_codes::INTERRUPTED,
        }
    }
}

impl WorkerOptions {
    /// Checks every rule, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        rule(
            !self.master.trim().is_empty(),
            "master",
            "name the master's URL, e.g. http://sluice-master:7070",
        )?;
        check_master_url(&self.master)?;
        if let Some(name) = &self.name {
            rule(
                !name.trim().is_empty() && !name.chars().any(char::is_control),
                "name",
                "must be printable and not empty",
            )?;
        }
        Ok(())
    }
}

/// Refuses a master URL that is not `http://` or `https://` with a host:
/// `127.0.0.1:7071` would otherwise be retried as an unreachable master for
/// the whole `--patience`.
pub fn check_master_url(url: &str) -> Result<(), OptionError> {
    let url = url.trim();
    let refused = |reason: String| OptionError {
        option: "master",
        value: Some(url.to_string()),
        reason,
    };
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(refused(format!(
            "no scheme: write http://{url} (https://{url} for a master with --tls-cert)"
        )));
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(refused(format!(
            "unknown scheme `{scheme}`: a master is http://HOST:PORT or https://HOST:PORT"
        )));
    }
    match reqwest::Url::parse(url) {
        Ok(parsed) if parsed.host_str().is_some_and(|h| !h.is_empty()) => Ok(()),
        Ok(_) => Err(refused("no host: write http://HOST:PORT".to_string())),
        Err(e) => Err(refused(format!("not a URL ({e})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_url_needs_its_scheme_and_host() {
        assert!(check_master_url("http://127.0.0.1:7071").is_ok());
        assert!(check_master_url("HTTPS://sluice-master:7070/").is_ok());
        let err = check_master_url("127.0.0.1:7071").expect_err("no scheme");
        assert_eq!(
            err.to_string(),
            "invalid option --master 127.0.0.1:7071: no scheme: write http://127.0.0.1:7071 (https://127.0.0.1:7071 for a master with --tls-cert)"
        );
        // Read as a URL of scheme `localhost` by URL parsers.
        let err = check_master_url("localhost:7071").expect_err("no scheme");
        assert!(
            err.to_string().contains("write http://localhost:7071"),
            "{err}"
        );
        let err = check_master_url("ftp://host:7071").expect_err("ftp");
        assert!(err.to_string().contains("unknown scheme `ftp`"), "{err}");
        let err = check_master_url("http://").expect_err("no host");
        assert!(err.to_string().contains("--master http://"), "{err}");
    }
}
