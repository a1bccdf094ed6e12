//! Job files (`sluice run JOB.toml`): a scheduled pipeline's `source`, `state`
//! and lock, and any option of `sluice train` as a key of the same name
//! (`batch-size = 256`, or `batch_size`). Each key deserializes into the
//! options struct that owns it, the one clap fills from the same flag, so a
//! job file and the command line cannot drift apart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::value::{field_names, form};
use super::{
    CatalogOptions, FollowOptions, KerberosOptions, MixConfig, MixOptions, OnRewrite, OptionError,
    PipelineOptions, ReadOptions, SelectOptions, SourceTable, StoreOptions, TablesError,
    TrainConfig, TrainOptions, TrainerOptions,
};

/// How long a lock lives without being refreshed, unless the job file says otherwise.
pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(600);

/// The keys of the job itself; every other key is an option of `sluice train`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct JobKeys {
    /// The source URL, possibly with `*` in path segments.
    pub source: String,
    /// The state location (a directory or object store URL).
    pub state: String,
    /// Lifetime of the job's lock between refreshes.
    #[serde(deserialize_with = "form::duration")]
    pub lock_ttl: Duration,
    /// What a run does when a table's commits rewrote data already trained.
    pub on_rewrite: OnRewrite,
}

impl Default for JobKeys {
    fn default() -> Self {
        JobKeys {
            source: String::new(),
            state: String::new(),
            lock_ttl: DEFAULT_LOCK_TTL,
            on_rewrite: OnRewrite::Fail,
        }
    }
}

/// A job file, read and validated.
#[derive(Debug, Clone, Deserialize)]
pub struct JobFile {
    /// The job file's own path.
    #[serde(skip)]
    pub path: PathBuf,
    /// Source, state and lock.
    #[serde(flatten)]
    pub job: JobKeys,
    /// The training job and its queue.
    #[serde(flatten)]
    pub train: TrainOptions,
    /// The device threads and their trainer.
    #[serde(flatten)]
    pub trainer: TrainerOptions,
    /// The pipeline between readers and trainers.
    #[serde(flatten)]
    pub pipeline: PipelineOptions,
    /// How the data is read.
    #[serde(flatten)]
    pub read: ReadOptions,
    /// Following the source as it grows (`follow = true`).
    #[serde(flatten)]
    pub follow: FollowOptions,
    /// The rows trained (`split`, `split-key`, `take`, `sample`, `limit`).
    #[serde(flatten)]
    pub select: SelectOptions,
    /// A keytab login for HDFS.
    #[serde(flatten)]
    pub kerberos: KerberosOptions,
    /// Object store timeouts.
    #[serde(flatten)]
    pub store: StoreOptions,
    /// The catalog a table-name `source` is looked up in (`catalog = "thrift://..."`).
    #[serde(flatten)]
    pub catalog: CatalogOptions,
    /// How several sources are mixed (`epoch-rows`, `source-column`).
    #[serde(flatten)]
    pub mix: MixOptions,
    /// The `[[source]]` tables, when the job has several sources (`source`
    /// is then the first one's URL).
    #[serde(skip)]
    pub sources: Vec<SourceTable>,
    /// The mix of the `[[source]]` tables, validated.
    #[serde(skip)]
    pub mixed: Option<MixConfig>,
}

/// Options of `sluice train` a job file cannot set, and why.
const REFUSED: [(&str, &str); 9] = [
    (
        "attach",
        "sluice_trainer.Dataset passes it to the sluice it starts as its child",
    ),
    (
        "table-version",
        "a job on a table trains each new version as it comes; use `sluice train --table-version` to read an old one",
    ),
    (
        "version",
        "a table's version is `table-version` now, and a job file cannot set it: a job on a table trains each new version as it comes",
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
    (
        "weights",
        "a job file gives each source its weight in its own table: [[source]] with url and weight",
    ),
];

/// Keys of a mix that need `[[source]]` tables.
const MIX_KEYS: [&str; 2] = ["epoch-rows", "source-column"];

/// A job file that is unreadable or invalid; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum JobFileError {
    /// The file cannot be read.
    #[error("cannot read job file {path}: {cause}")]
    Read {
        /// The job file.
        path: String,
        /// The failure.
        cause: std::io::Error,
    },
    /// The file is not TOML.
    #[error("job file {path} is not valid TOML")]
    Toml {
        /// The job file.
        path: String,
        /// The parser's error.
        #[source]
        source: Box<toml::de::Error>,
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
    #[error("job file {path}: unknown key `{key}` (keys are source, state, lock-ttl, on-rewrite and the long options of `sluice train`)")]
    UnknownKey {
        /// The job file.
        path: String,
        /// The key.
        key: String,
    },
    /// A key that a job file cannot set.
    #[error("job file {path}: key `{key}` cannot be set in a job file: {why}")]
    Refused {
        /// The job file.
        path: String,
        /// The key.
        key: String,
        /// Why not.
        why: &'static str,
    },
    /// One option given twice, once with `_` and once with `-`.
    #[error("job file {path}: key `{key}` is given twice (also as `{other}`)")]
    Twice {
        /// The job file.
        path: String,
        /// The key.
        key: String,
        /// Its other spelling.
        other: String,
    },
    /// A key whose value does not fit its option.
    #[error("job file {path}: key `{key}` (--{option})")]
    BadKey {
        /// The job file.
        path: String,
        /// The key as written.
        key: String,
        /// The option it sets.
        option: String,
        /// What the value does not fit.
        #[source]
        source: Box<toml::de::Error>,
    },
    /// The `[[source]]` tables make no mix.
    #[error("job file {path}")]
    Sources {
        /// The job file.
        path: String,
        /// What is wrong.
        #[source]
        source: TablesError,
    },
    /// The options together break a rule of `sluice train`.
    #[error("job file {path}")]
    Invalid {
        /// The job file.
        path: String,
        /// The rule broken.
        #[source]
        source: OptionError,
    },
}

/// The structs a job file's keys deserialize into: each one's keys, and a
/// check that a one-key table deserializes into it.
type Owner = (
    fn() -> &'static [&'static str],
    fn(toml::Table) -> Result<(), toml::de::Error>,
);

fn check<T: DeserializeOwned>(table: toml::Table) -> Result<(), toml::de::Error> {
    table.try_into::<T>().map(drop)
}

const OWNERS: [Owner; 11] = [
    (field_names::<MixOptions>, check::<MixOptions>),
    (field_names::<SelectOptions>, check::<SelectOptions>),
    (field_names::<FollowOptions>, check::<FollowOptions>),
    (field_names::<JobKeys>, check::<JobKeys>),
    (field_names::<TrainOptions>, check::<TrainOptions>),
    (field_names::<TrainerOptions>, check::<TrainerOptions>),
    (field_names::<PipelineOptions>, check::<PipelineOptions>),
    (field_names::<ReadOptions>, check::<ReadOptions>),
    (field_names::<KerberosOptions>, check::<KerberosOptions>),
    (field_names::<StoreOptions>, check::<StoreOptions>),
    (field_names::<CatalogOptions>, check::<CatalogOptions>),
];

impl JobFile {
    /// Reads and validates a job file.
    pub fn load(path: &Path) -> Result<JobFile, JobFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| JobFileError::Read {
            path: path.display().to_string(),
            cause: source,
        })?;
        JobFile::parse(path, &text)
    }

    /// Validates the text of a job file; `path` names it in messages and
    /// anchors relative local paths of `source` and `state`.
    pub fn parse(path: &Path, text: &str) -> Result<JobFile, JobFileError> {
        let shown = path.display().to_string();
        let raw: toml::Table = toml::from_str(text).map_err(|source| JobFileError::Toml {
            path: shown.clone(),
            source: Box::new(source),
        })?;
        let mut table = toml::Table::new();
        let mut spelled = std::collections::HashMap::new();
        let mut sources = Vec::new();
        for (key, value) in raw {
            let option = key.replace('_', "-");
            if let (true, toml::Value::Array(tables)) = (option == "source", &value) {
                sources = source_tables(tables).map_err(|source| JobFileError::Sources {
                    path: shown.clone(),
                    source: source.into(),
                })?;
                spelled.insert(option, key);
                continue;
            }
            if let Some((_, why)) = REFUSED.iter().find(|(k, _)| *k == option) {
                return Err(JobFileError::Refused {
                    path: shown,
                    key,
                    why,
                });
            }
            let Some((_, check)) = OWNERS
                .iter()
                .find(|(keys, _)| keys().contains(&option.as_str()))
            else {
                return Err(JobFileError::UnknownKey { path: shown, key });
            };
            // One key at a time, so that a value that does not fit is named.
            let mut one = toml::Table::new();
            one.insert(option.clone(), value.clone());
            check(one).map_err(|source| JobFileError::BadKey {
                path: shown.clone(),
                key: key.clone(),
                option: option.clone(),
                source: Box::new(source),
            })?;
            if let Some(other) = spelled.insert(option.clone(), key.clone()) {
                return Err(JobFileError::Twice {
                    path: shown,
                    key,
                    other,
                });
            }
            table.insert(option, value);
        }
        let mut file: JobFile = table.try_into().map_err(|source| JobFileError::Toml {
            path: shown.clone(),
            source: Box::new(source),
        })?;
        let anchor = path.parent().unwrap_or(Path::new("."));
        file.take_sources(sources, anchor, &shown, |key| spelled.contains_key(key))?;
        file.job.state = anchored(anchor, &file.job.state);
        file.path = path.to_path_buf();
        let invalid = |source| JobFileError::Invalid {
            path: shown.clone(),
            source,
        };
        file.validate().map_err(invalid)?;
        Ok(file)
    }

    /// Sets the job's source: the `source` key, or the `[[source]]` tables
    /// `sources` and their mix (`given`: whether a key was in the file);
    /// relative local paths taken from `anchor`; `shown` names the file.
    fn take_sources(
        &mut self,
        sources: Vec<SourceTable>,
        anchor: &Path,
        shown: &str,
        given: impl Fn(&str) -> bool,
    ) -> Result<(), JobFileError> {
        let urls: Vec<String> = sources
            .iter()
            .filter_map(|t| t.url.as_deref())
            .map(|url| match self.catalog.is_set() {
                true => url.to_string(),
                false => anchored(anchor, url),
            })
            .collect();
        if let Some(first) = urls.first() {
            self.job.source = first.clone();
        }
        let path = shown.to_string();
        for (value, key) in [(&self.job.source, "source"), (&self.job.state, "state")] {
            if value.is_empty() {
                return Err(JobFileError::Missing { path, key });
            }
        }
        if !sources.is_empty() {
            let mix = self
                .mix
                .config_tables(&sources, &urls)
                .map_err(|source| JobFileError::Sources { path, source })?;
            self.mixed = Some(mix);
            self.sources = sources;
            return Ok(());
        }
        if let Some(key) = MIX_KEYS.iter().find(|k| given(k)) {
            return Err(JobFileError::Refused {
                path,
                key: key.to_string(),
                why: "it mixes several sources: give them as [[source]] tables with url and weight",
            });
        }
        if !self.catalog.is_set() {
            self.job.source = anchored(anchor, &self.job.source);
        }
        Ok(())
    }

    /// Checks every rule of every option, naming the first option that breaks one.
    pub fn validate(&self) -> Result<(), OptionError> {
        crate::config::rule(
            !self.job.lock_ttl.is_zero(),
            "lock-ttl",
            "must be more than 0",
        )?;
        self.kerberos.validate()?;
        self.store.validate()?;
        self.train_config().map(drop)
    }

    /// The training each run of the job does, on the job's whole source.
    pub fn train_config(&self) -> Result<TrainConfig, OptionError> {
        crate::config::train::TrainParts {
            train: &self.train,
            trainer: &self.trainer,
            pipeline: &self.pipeline,
            read: &self.read,
            follow: &self.follow,
            select: &self.select,
        }
        .config(self.job.source.clone(), None)?
        .with_mix(self.mixed.clone())
    }
}

/// The `[[source]]` tables of a job file, each with its `url`.
fn source_tables(tables: &[toml::Value]) -> Result<Vec<SourceTable>, super::SourceTableError> {
    let mut out = Vec::with_capacity(tables.len());
    for (index, value) in tables.iter().enumerate() {
        let fail = |reason: String| super::SourceTableError {
            index: index + 1,
            name: None,
            reason,
        };
        let table: SourceTable = value.clone().try_into().map_err(|e: toml::de::Error| {
            fail(format!(
                "{} (a source is a table of url, weight, where, filter)",
                e.message().trim()
            ))
        })?;
        match table.url.as_deref() {
            None | Some("") => return Err(fail("has no `url`".to_string())),
            Some(_) => out.push(table),
        }
    }
    Ok(out)
}

/// A relative local path taken from the job file's directory; URLs and absolute paths unchanged.
fn anchored(dir: &Path, location: &str) -> String {
    match connectors::store::local_path_of(location) {
        Some(local) if !Path::new(local).is_absolute() => dir.join(local).display().to_string(),
        _ => location.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{ModelKind, TrainerChoice};
    use connectors::Report;

    fn parse(text: &str) -> Result<JobFile, JobFileError> {
        JobFile::parse(Path::new("/jobs/clicks.toml"), text)
    }

    const BASE: &str = "source = \"/a\"\nstate = \"/b\"\n";

    #[test]
    fn keys_deserialize_into_the_options_of_their_flags() {
        let file = parse(
            r#"
            source = "hdfs://nn/warehouse/clicks/dt=*"
            state = "s3://bucket/sluice/clicks"
            model = "logistic"
            label = "label"
            features = ["f1", "f2"]
            batch-size = 256
            read_ahead = "16MiB"
            cache = "/mnt/nvme/sluice"
            cache-size = "2GiB"
            epochs = 2
            quiet = true
            lock_ttl = "2m"
            allow-empty = true
            ignore-corrupt-files = true
            on-rewrite = "retrain"
            "#,
        )
        .expect("valid job");
        assert_eq!(file.job.source, "hdfs://nn/warehouse/clicks/dt=*");
        assert_eq!(file.job.state, "s3://bucket/sluice/clicks");
        assert_eq!(file.job.lock_ttl, Duration::from_secs(120));
        assert!(file.train.allow_empty);
        assert_eq!(file.job.on_rewrite, OnRewrite::Retrain);
        assert_eq!(file.trainer.model, ModelKind::Logistic);
        assert_eq!(file.pipeline.batch_size, 256);
        assert_eq!(file.pipeline.read_ahead, Some(16 * 1024 * 1024));
        let train = file.train_config().expect("valid");
        assert_eq!(
            train.cache,
            Some(crate::config::CacheConfig {
                dir: "/mnt/nvme/sluice".into(),
                size: 2 * 1024 * 1024 * 1024,
            })
        );
        assert!(train.dataset.ignore_corrupt_files);
        assert!(train.allow_empty);
        assert_eq!(train.batch_size, 256);
        assert_eq!(train.epochs, 2);
        assert!(!train.progress);
        match &train.trainer {
            TrainerChoice::Model(m) => {
                assert!(m.logistic);
                assert_eq!(m.features, vec!["f1", "f2"]);
            }
            other => panic!("unexpected trainer {other:?}"),
        }
    }

    #[test]
    fn lists_are_arrays_or_comma_separated_strings() {
        let file = parse(&format!(
            "{BASE}columns = \"id, x1\"\ndevice-ids = [0, 1]\nhash-buckets = 1000\n"
        ))
        .expect("valid");
        assert_eq!(file.train.columns, Some(vec!["id".into(), "x1".into()]));
        assert_eq!(file.trainer.device_ids, Some(vec!["0".into(), "1".into()]));
        assert_eq!(file.trainer.device_count(), 2);
        assert_eq!(
            file.pipeline.hash_buckets,
            Some(crate::trainer::HashBuckets::All(1000))
        );
    }

    #[test]
    fn keytab_and_principal_are_keys_that_go_together() {
        let file = parse(&format!(
            "{BASE}keytab = \"/etc/security/a.keytab\"\nprincipal = \"a@R\""
        ))
        .expect("valid job");
        assert_eq!(
            file.kerberos.keytab.as_deref(),
            Some(Path::new("/etc/security/a.keytab"))
        );
        assert_eq!(file.kerberos.principal.as_deref(), Some("a@R"));
        let alone = parse(&format!("{BASE}keytab = \"/k\"")).expect_err("needs a principal");
        assert!(
            Report(&alone).to_string().contains("--principal"),
            "{alone}"
        );
    }

    #[test]
    fn trainer_timeout_is_a_key_with_a_default_and_off() {
        let timeout = |extra: &str| {
            let text = format!("{BASE}exec = \"x\"\n{extra}");
            match parse(&text)
                .expect("valid job")
                .train_config()
                .expect("valid")
                .trainer
            {
                TrainerChoice::Exec { timeout, .. } => timeout,
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
        let bad = parse(&format!("{BASE}trainer_timeout = \"soon\"\n"));
        let text = bad.expect_err("must fail").to_string();
        assert!(
            text.contains("`trainer_timeout`") && text.contains("--trainer-timeout"),
            "{text}"
        );
    }

    #[test]
    fn the_example_job_file_is_valid() {
        let text = include_str!("../../jobs/clicks.toml");
        let file = JobFile::parse(Path::new("jobs/clicks.toml"), text).expect("jobs/clicks.toml");
        assert_eq!(
            file.job.source,
            "hdfs://namenode:8020/warehouse/clicks/dt=*"
        );
        assert_eq!(file.job.lock_ttl, DEFAULT_LOCK_TTL);
        assert!(!file.train.allow_empty);
        assert_eq!(file.job.on_rewrite, OnRewrite::Fail);
        assert!(!file.train.ignore_corrupt_files);
    }

    #[test]
    fn relative_local_paths_start_at_the_job_file() {
        let file = parse("source = \"data/dt=*\"\nstate = \"/var/lib/x\"\n").expect("valid");
        assert_eq!(file.job.source, "/jobs/data/dt=*");
        assert_eq!(file.job.state, "/var/lib/x");
    }

    #[test]
    fn bad_keys_are_named_with_the_file() {
        let err =
            |extra: &str| Report(&parse(&format!("{BASE}{extra}")).expect_err(extra)).to_string();
        let unknown = err("batchsize = 3\n");
        assert!(
            unknown.contains("`batchsize`") && unknown.contains("/jobs/clicks.toml"),
            "{unknown}"
        );
        let bad = parse(&format!("{BASE}batch-size = \"x\"\n")).expect_err("x");
        let chain = format!(
            "{bad}: {}",
            std::error::Error::source(&bad).expect("source")
        );
        assert!(
            chain.contains("`batch-size`")
                && chain.contains("--batch-size")
                && chain.contains("invalid type: string \"x\""),
            "{chain}"
        );
        let bad = Report(&bad).to_string();
        let invalid = err("epochs = 0\n");
        assert!(invalid.contains("--epochs"), "{invalid}");
        let missing = Report(&parse("source = \"/a\"\n").unwrap_err()).to_string();
        assert!(missing.contains("`state`"), "{missing}");
        let refused = err("wait-success = \"1h\"\n");
        assert!(refused.contains("wait-success"), "{refused}");
        let refused = err("checkpoint_every = 10\n");
        assert!(refused.contains("no queue state"), "{refused}");
        let refused = err("weights = [3, 1]\n");
        assert!(refused.contains("[[source]]"), "{refused}");
        let twice = err("batch-size = 3\nbatch_size = 4\n");
        assert!(twice.contains("twice"), "{twice}");
        let ttl = err("lock-ttl = 0\n");
        assert!(ttl.contains("--lock-ttl"), "{ttl}");
        let rewrite = err("on-rewrite = \"sometimes\"\n");
        assert!(rewrite.contains("`on-rewrite`"), "{rewrite}");
        let toml = parse("source = \"/a\"\nstate =\n").expect_err("not TOML");
        assert!(std::error::Error::source(&toml).is_some(), "{toml}");
        for message in [unknown, bad, invalid, twice, rewrite] {
            assert!(!message.contains('\n'), "{message}");
        }
    }

    #[test]
    fn every_train_flag_is_a_job_file_key_or_refused() {
        // The keys a job file takes are the long options of the structs clap
        // fills for `sluice train`.
        use clap::Args;
        let mut command = clap::Command::new("train");
        command = TrainOptions::augment_args(command);
        command = TrainerOptions::augment_args(command);
        command = PipelineOptions::augment_args(command);
        command = ReadOptions::augment_args(command);
        command = KerberosOptions::augment_args(command);
        command = FollowOptions::augment_args(command);
        command = CatalogOptions::augment_args(command);
        command = SelectOptions::augment_args(command);
        command = crate::config::MixOptions::augment_args(command);
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let refused = REFUSED.iter().any(|(k, _)| *k == long);
            let owned = OWNERS.iter().any(|(keys, _)| keys().contains(&long));
            assert!(refused || owned, "--{long} is no job file key");
        }
    }

    #[test]
    fn a_table_name_in_a_catalog_with_a_partition_filter() {
        let text = "source = \"ads.clicks\"\nstate = \"state\"\ncatalog = \"thrift://hms:9083\"\nwhere = \"dt >= '2026-11-01'\"\n";
        let file = JobFile::parse(Path::new("/jobs/job.toml"), text).expect("valid job");
        // A table name is no path to anchor at the job file.
        assert_eq!(file.job.source, "ads.clicks");
        assert_eq!(file.catalog.catalog.as_deref(), Some("thrift://hms:9083"));
        let filter = file.read.partition_filter.as_ref().expect("where");
        assert_eq!(filter.as_str(), "dt >= '2026-11-01'");
        let bad = "source = \"/d\"\nstate = \"s\"\nwhere = \"dt >\"\n";
        let err = JobFile::parse(Path::new("/jobs/job.toml"), bad).expect_err("bad filter");
        assert!(err.to_string().contains("where"), "{err}");
    }

    #[test]
    fn a_row_filter_is_the_key_filter() {
        let text =
            "source = \"/d\"\nstate = \"s\"\nfilter = \"label IS NOT NULL AND country = 'US'\"\n";
        let file = JobFile::parse(Path::new("/jobs/job.toml"), text).expect("valid job");
        let options = file.read.dataset_options(false).expect("valid options");
        let filter = options.row_filter.as_ref().expect("filter");
        assert_eq!(filter.as_str(), "label IS NOT NULL AND country = 'US'");
        let bad = "source = \"/d\"\nstate = \"s\"\nfilter = \"label IS\"\n";
        let err = JobFile::parse(Path::new("/jobs/job.toml"), bad).expect_err("bad filter");
        assert!(err.to_string().contains("--filter"), "{err}");
    }

    #[test]
    fn csv_header_is_a_key_given_or_left_to_the_data() {
        let header = |extra: &str| {
            let file = parse(&format!("{BASE}{extra}")).expect("valid job");
            let options = file.read.dataset_options(false).expect("valid options");
            options.format_options.csv_header
        };
        assert_eq!(header("csv-header = true\n"), Some(true));
        assert_eq!(header("csv-header = false\n"), Some(false));
        assert_eq!(header(""), None);
        let both = parse(&format!("{BASE}csv-header = true\ncsv-no-header = true\n"))
            .expect_err("contradicting");
        assert!(Report(&both).to_string().contains("csv-header"), "{both}");
    }

    #[test]
    fn the_rows_trained_are_keys() {
        let file = parse(&format!(
            "{BASE}split = \"train=0.9,valid=0.1\"\nsplit-key = \"id\"\ntake = \"valid\"\nlimit = 10\n"
        ))
        .expect("valid job");
        let train = file.train_config().expect("valid");
        assert_eq!(train.select.limit, Some(10));
        assert_eq!(train.select.take.as_deref(), Some("valid"));
        assert!(train
            .select
            .describe()
            .is_some_and(|d| d.contains("split=train=0.9,valid=0.1")));
        let unknown = parse(&format!(
            "{BASE}split = \"train=0.9,valid=0.1\"\nsplit-key = \"id\"\ntake = \"test\"\n"
        ));
        assert!(unknown.is_err_and(|e| Report(&e).to_string().contains("--take")));
        let attach = parse(&format!("{BASE}attach = \"5,6\"\n"));
        assert!(attach.is_err_and(|e| Report(&e).to_string().contains("Dataset")));
    }

    #[test]
    fn shuffle_and_its_window_are_keys() {
        let file = parse(&format!(
            "{BASE}shuffle = \"global\"\nshuffle-window = 5000\n"
        ))
        .expect("valid job");
        assert_eq!(file.pipeline.shuffle, super::super::ShuffleMode::Global);
        let train = file.train_config().expect("valid");
        assert_eq!(train.shuffle_window, Some(5000));
        let defaults = parse(BASE)
            .expect("valid job")
            .train_config()
            .expect("valid");
        assert_eq!(defaults.shuffle_window, None);
        let bad = parse(&format!("{BASE}shuffle = \"rows\"\n"));
        assert!(bad.is_err_and(|e| Report(&e).to_string().contains("shuffle")));
    }

    #[test]
    fn global_batch_size_is_a_key_the_devices_must_divide() {
        let file = parse(&format!(
            "{BASE}shuffle = \"global\"\nglobal-batch-size = 1536\n"
        ))
        .expect("valid job");
        let train = file.train_config().expect("valid");
        assert_eq!(train.global_batch_size, Some(1536));
        let uneven = parse(&format!(
            "{BASE}shuffle = \"global\"\nglobal-batch-size = 1000\ndevices = 3\n"
        ));
        assert!(uneven.is_err_and(|e| Report(&e).to_string().contains("3 equal slices")));
    }

    #[test]
    fn read_retry_and_store_timeouts_are_keys() {
        let file = parse(&format!(
            "{BASE}read-retry = \"30s\"\nrequest-timeout = \"5s\"\nconnect_timeout = \"2s\"\n"
        ))
        .expect("valid job");
        assert_eq!(file.pipeline.read_retry, Duration::from_secs(30));
        assert_eq!(file.store.request_timeout, Duration::from_secs(5));
        assert_eq!(file.store.connect_timeout, Duration::from_secs(2));
        let train = file.train_config().expect("valid");
        assert_eq!(train.read_retry, Duration::from_secs(30));
        let defaults = parse(BASE).expect("valid job");
        assert_eq!(defaults.pipeline.read_retry, Duration::from_secs(120));
        let zero = parse(&format!("{BASE}request-timeout = \"0s\"\n"));
        assert!(
            zero.is_err_and(|e| Report(&e).to_string().contains("--request-timeout")),
            "a zero timeout is refused"
        );
    }

    #[test]
    fn source_tables_make_a_mix_with_each_sources_own_filters() {
        let file = parse(
            "state = \"/s\"\nepoch-rows = 100\n\
             [[source]]\nurl = \"data/clicks/dt=*\"\nweight = 3\nfilter = \"label = 1\"\n\
             [[source]]\nurl = \"/data/views\"\nwhere = \"dt > '2026-11-01'\"\n",
        )
        .expect("valid job");
        assert_eq!(file.job.source, "/jobs/data/clicks/dt=*");
        let mix = file.train_config().expect("valid").mix.expect("a mix");
        let names: Vec<&str> = mix.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["clicks", "views"]);
        assert_eq!(mix.sources[0].weight, 3.0);
        assert_eq!(mix.sources[1].weight, 1.0);
        assert!(mix.sources[0].row_filter.is_some() && mix.sources[0].partition_filter.is_none());
        assert!(mix.sources[1].partition_filter.is_some() && mix.sources[1].row_filter.is_none());
        assert_eq!(mix.epoch_rows, Some(100));
        assert!(mix.describe().contains("filter(label = 1)"));
        let none = Report(&parse("state = \"/s\"\nsource = []\n").expect_err("no source"));
        assert!(none.to_string().contains("`source`"), "{none}");
    }
}
