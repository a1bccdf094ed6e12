//! Job files (`sluice run JOB.toml`): `source`, `state` and any `sluice train` long option as a key of the
//! same name. The train keys become flags parsed by `sluice train`'s own parser and
//! validated by its own rules, so a job file and the command line cannot drift apart.

use std::path::Path;

use clap::{Args, FromArgMatches};

use connectors::error::one_line;

use super::kerberos::KerberosArgs;
use super::parse_duration;
use super::train::TrainArgs;
use crate::config::TrainConfig;
use crate::schedule::job::{Job, OnRewrite, DEFAULT_LOCK_TTL};

/// Keys of the job itself; every other key is a `sluice train` option.
const JOB_KEYS: [&str; 5] = ["source", "state", "lock-ttl", "allow-empty", "on-rewrite"];

/// Train options a job file cannot set, and why.
const REFUSED: [(&str, &str); 7] = [
    (
        "version",
        "a job on a table trains each new version as it comes; use `sluice train --version` to read an old one",
    ),
    (
        "snapshot-id",
        "a job on a table trains each new snapshot as it comes; use `sluice train --snapshot-id` to read an old one",
    ),
    (
        "timestamp",
        "a job on a table trains each new version as it comes; use `sluice train --timestamp` to read an old one",
    ),
    (
        "wait-success",
        "a job trains the partitions that are complete when it runs; use `sluice train --wait-success` for one output",
    ),
    (
        "allow-incomplete",
        "a job trains only complete partitions and lists the others as waiting",
    ),
    (
        "checkpoint-every",
        "a job's runs keep no queue state; each run continues from the model the last one saved",
    ),
    ("help", "is not an option of a job"),
];

/// A job file that is unreadable or invalid; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum JobFileError {
    /// The file cannot be read.
    #[error("cannot read job file {path}: {source}")]
    Read {
        /// The job file.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("job file {path} is not valid TOML: {message}")]
    Toml {
        /// The job file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A required key is absent.
    #[error("job file {path} has no `{key}` key")]
    Missing {
        /// The job file.
        path: String,
        /// The key.
        key: &'static str,
    },
    /// A key that is neither a job key nor a `sluice train` option.
    #[error("job file {path}: unknown key `{key}` (keys are source, state, lock-ttl, allow-empty, on-rewrite and the long options of `sluice train`)")]
    UnknownKey {
        /// The job file.
        path: String,
        /// The key.
        key: String,
    },
    /// A key whose value does not fit.
    #[error("job file {path}: key `{key}` {reason}")]
    BadKey {
        /// The job file.
        path: String,
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The options, read as `sluice train` flags, are invalid.
    #[error("job file {path}: {message}")]
    Invalid {
        /// The job file.
        path: String,
        /// The parser's or validator's message.
        message: String,
    },
}

/// Reads and validates a job file: the job, and the Kerberos login its
/// `keytab` and `principal` keys ask for.
pub fn load(path: &Path) -> Result<(Job, KerberosArgs), JobFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| JobFileError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(path, &text)
}

/// Validates the text of a job file; `path` names it in messages and anchors
/// relative local paths of `source` and `state`.
pub fn parse(path: &Path, text: &str) -> Result<(Job, KerberosArgs), JobFileError> {
    {
        let shown = path.display().to_string();
        let table: toml::Table = toml::from_str(text).map_err(|e| JobFileError::Toml {
            path: shown.clone(),
            message: one_line(&e.to_string()),
        })?;
        let mut source = None;
        let mut state = None;
        let mut lock_ttl = DEFAULT_LOCK_TTL;
        let mut allow_empty = false;
        let mut on_rewrite = OnRewrite::default();
        let mut flags = Vec::new();
        let options = train_options();
        for (raw_key, value) in &table {
            let key = raw_key.replace('_', "-");
            let bad = |reason: &str| JobFileError::BadKey {
                path: shown.clone(),
                key: raw_key.clone(),
                reason: reason.to_string(),
            };
            match key.as_str() {
                "source" => {
                    source = Some(string_value(value).ok_or_else(|| bad("must be a string"))?)
                }
                "state" => {
                    state = Some(string_value(value).ok_or_else(|| bad("must be a string"))?)
                }
                "lock-ttl" => {
                    let text =
                        scalar(value).ok_or_else(|| bad("must be a duration like \"10m\""))?;
                    lock_ttl = parse_duration(&text).map_err(|e| bad(&e))?;
                    if lock_ttl.is_zero() {
                        return Err(bad("must be more than 0"));
                    }
                }
                "on-rewrite" => {
                    let text = string_value(value)
                        .ok_or_else(|| bad("must be \"skip\", \"retrain\" or \"fail\""))?;
                    on_rewrite = text.parse().map_err(|e: String| bad(&e))?;
                }
                "allow-empty" => {
                    allow_empty = value
                        .as_bool()
                        .ok_or_else(|| bad("is a switch: write true or false"))?
                }
                _ => flags.extend(flag(&options, &key, value).map_err(|e| match e {
                    FlagError::Unknown => JobFileError::UnknownKey {
                        path: shown.clone(),
                        key: raw_key.clone(),
                    },
                    FlagError::Bad(reason) => bad(&reason),
                })?),
            }
        }
        let source = source.ok_or(JobFileError::Missing {
            path: shown.clone(),
            key: "source",
        })?;
        let state = state.ok_or(JobFileError::Missing {
            path: shown.clone(),
            key: "state",
        })?;
        let anchor = path.parent().unwrap_or(Path::new("."));
        let source = anchored(anchor, &source);
        let state = anchored(anchor, &state);
        let (train, kerberos) =
            train_config(&source, flags).map_err(|message| JobFileError::Invalid {
                path: shown.clone(),
                message,
            })?;
        let job = Job {
            path: path.to_path_buf(),
            source,
            state,
            lock_ttl,
            allow_empty,
            on_rewrite,
            train,
        };
        Ok((job, kerberos))
    }
}

/// The long options of `sluice train`, with whether each takes a value.
fn train_options() -> Vec<(String, bool)> {
    let command = TrainArgs::augment_args(clap::Command::new("train"));
    command
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            Some((long.to_string(), a.get_action().takes_values()))
        })
        .collect()
}

enum FlagError {
    Unknown,
    Bad(String),
}

/// The flag a key and value stand for (none for a switch set to false).
fn flag(
    options: &[(String, bool)],
    key: &str,
    value: &toml::Value,
) -> Result<Option<String>, FlagError> {
    if let Some((_, why)) = REFUSED.iter().find(|(k, _)| *k == key) {
        return Err(FlagError::Bad(format!(
            "cannot be set in a job file: {why}"
        )));
    }
    if JOB_KEYS.contains(&key) {
        return Err(FlagError::Unknown);
    }
    let Some((_, takes_value)) = options.iter().find(|(long, _)| long == key) else {
        return Err(FlagError::Unknown);
    };
    if !takes_value {
        return match value {
            toml::Value::Boolean(true) => Ok(Some(format!("--{key}"))),
            toml::Value::Boolean(false) => Ok(None),
            _ => Err(FlagError::Bad(
                "is a switch: write true or false".to_string(),
            )),
        };
    }
    let text = match value {
        toml::Value::Array(items) => {
            let parts: Option<Vec<String>> = items.iter().map(scalar).collect();
            parts
                .ok_or_else(|| FlagError::Bad("must list strings or numbers".to_string()))?
                .join(",")
        }
        other => scalar(other)
            .ok_or_else(|| FlagError::Bad("must be a string, a number or a list".to_string()))?,
    };
    Ok(Some(format!("--{key}={text}")))
}

/// A string, integer, float or boolean as text.
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn string_value(value: &toml::Value) -> Option<String> {
    value.as_str().map(str::to_string).filter(|s| !s.is_empty())
}

/// A relative local path taken from the job file's directory; URLs and absolute paths unchanged.
fn anchored(dir: &Path, location: &str) -> String {
    let local = location.strip_prefix("file://").unwrap_or(location);
    if location.contains("://") && !location.starts_with("file://")
        || Path::new(local).is_absolute()
    {
        return location.to_string();
    }
    dir.join(local).display().to_string()
}

/// Parses the flags with `sluice train`'s parser and validates them into a configuration.
fn train_config(source: &str, flags: Vec<String>) -> Result<(TrainConfig, KerberosArgs), String> {
    let command = TrainArgs::augment_args(clap::Command::new("sluice-run").no_binary_name(true));
    let argv = std::iter::once(source.to_string()).chain(flags);
    let matches = command
        .try_get_matches_from(argv)
        .map_err(|e| clap_message(&e))?;
    let args = TrainArgs::from_arg_matches(&matches).map_err(|e| clap_message(&e))?;
    let kerberos = args.kerberos.clone();
    let config = args
        .into_config()
        .map_err(|e| one_line(&format!("{e:#}")))?;
    Ok((config, kerberos))
}

/// The first line of a clap error, without its `error: ` prefix.
fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parse(text: &str) -> Result<Job, JobFileError> {
        super::parse(Path::new("/jobs/clicks.toml"), text).map(|(job, _)| job)
    }

    #[test]
    fn keys_become_train_options() {
        let job = parse(
            r#"
            source = "hdfs://nn/warehouse/clicks/dt=*"
            state = "s3://bucket/sluice/clicks"
            model = "logistic"
            label = "label"
            features = ["f1", "f2"]
            batch-size = 256
            epochs = 2
            quiet = true
            lock_ttl = "2m"
            allow-empty = true
            ignore-corrupt-files = true
            "#,
        )
        .expect("valid job");
        assert_eq!(job.source, "hdfs://nn/warehouse/clicks/dt=*");
        assert_eq!(job.state, "s3://bucket/sluice/clicks");
        assert_eq!(job.lock_ttl, Duration::from_secs(120));
        assert!(job.allow_empty);
        assert!(job.train.dataset.ignore_corrupt_files);
        assert_eq!(job.train.batch_size, 256);
        assert_eq!(job.train.epochs, 2);
        assert!(!job.train.progress);
        match &job.train.trainer {
            crate::config::TrainerChoice::Model(m) => {
                assert!(m.logistic);
                assert_eq!(m.features, vec!["f1", "f2"]);
            }
            other => panic!("unexpected trainer {other:?}"),
        }
    }

    #[test]
    fn keytab_and_principal_are_keys_that_go_together() {
        let base = "source = \"hdfs://nn/a\"\nstate = \"hdfs://nn/b\"\n";
        let (_, kerberos) = super::parse(
            Path::new("/jobs/clicks.toml"),
            &format!("{base}keytab = \"/etc/security/a.keytab\"\nprincipal = \"a@R\""),
        )
        .expect("valid job");
        assert_eq!(
            kerberos.keytab.as_deref(),
            Some(Path::new("/etc/security/a.keytab"))
        );
        assert_eq!(kerberos.principal.as_deref(), Some("a@R"));
        let alone = parse(&format!("{base}keytab = \"/k\"")).expect_err("needs a principal");
        assert!(alone.to_string().contains("required"), "{alone}");
    }

    #[test]
    fn trainer_timeout_is_a_key_with_a_default_and_off() {
        let timeout = |extra: &str| {
            let text = format!("source = \"/a\"\nstate = \"/b\"\nexec = \"x\"\n{extra}");
            match parse(&text).expect("valid job").train.trainer {
                crate::config::TrainerChoice::Exec { timeout, .. } => timeout,
                other => panic!("unexpected trainer {other:?}"),
            }
        };
        assert_eq!(timeout(""), Some(crate::trainer::DEFAULT_TRAINER_TIMEOUT));
        assert_eq!(
            timeout("trainer_timeout = \"30s\"\n"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(timeout("trainer_timeout = \"off\"\n"), None);
        assert_eq!(timeout("trainer-timeout = 0\n"), None);
        let bad = parse("source = \"/a\"\nstate = \"/b\"\ntrainer_timeout = \"soon\"\n");
        let text = bad.expect_err("must fail").to_string();
        assert!(text.contains("--trainer-timeout"), "{text}");
    }

    #[test]
    fn the_example_job_file_is_valid() {
        let text = include_str!("../../jobs/clicks.toml");
        let (job, _) = super::parse(Path::new("jobs/clicks.toml"), text).expect("jobs/clicks.toml");
        assert_eq!(job.source, "hdfs://namenode:8020/warehouse/clicks/dt=*");
        assert_eq!(job.lock_ttl, DEFAULT_LOCK_TTL);
        assert!(!job.allow_empty);
        assert!(!job.train.dataset.ignore_corrupt_files);
    }

    #[test]
    fn relative_local_paths_start_at_the_job_file() {
        let job = parse("source = \"data/dt=*\"\nstate = \"/var/lib/x\"\n").expect("valid");
        assert_eq!(job.source, "/jobs/data/dt=*");
        assert_eq!(job.state, "/var/lib/x");
    }

    #[test]
    fn bad_keys_are_named_with_the_file() {
        let unknown = parse("source = \"/a\"\nstate = \"/b\"\nbatchsize = 3\n").unwrap_err();
        let text = unknown.to_string();
        assert!(
            text.contains("`batchsize`") && text.contains("/jobs/clicks.toml"),
            "{text}"
        );
        let bad = parse("source = \"/a\"\nstate = \"/b\"\nbatch-size = \"x\"\n").unwrap_err();
        assert!(bad.to_string().contains("--batch-size"), "{bad}");
        let invalid = parse("source = \"/a\"\nstate = \"/b\"\nepochs = 0\n").unwrap_err();
        assert!(invalid.to_string().contains("--epochs"), "{invalid}");
        let missing = parse("source = \"/a\"\n").unwrap_err();
        assert!(missing.to_string().contains("`state`"), "{missing}");
        let refused =
            parse("source = \"/a\"\nstate = \"/b\"\nwait-success = \"1h\"\n").unwrap_err();
        assert!(refused.to_string().contains("wait-success"), "{refused}");
        let refused =
            parse("source = \"/a\"\nstate = \"/b\"\ncheckpoint_every = 10\n").unwrap_err();
        assert!(refused.to_string().contains("no queue state"), "{refused}");
    }
}
