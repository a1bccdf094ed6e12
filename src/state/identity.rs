//! A job's identity: the options that decide what is trained, recorded in
//! `job.json` when a state is created and compared whenever it is opened
//! again, so that a state is resumed only by the job that wrote it.

use std::collections::BTreeMap;
use std::fmt::Display;

use connectors::DatasetOptions;
use serde::{Deserialize, Serialize};

/// The option naming the dataset (the positional URL).
pub const DATASET: &str = "dataset";

/// Options that decide what a job trains, by long flag name ([`DATASET`] for
/// the URL), each with its value as shown to people; `None` when not given.
/// An option missing from a recorded identity (a state written before it was
/// recorded) is not checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Identity {
    options: BTreeMap<String, Option<String>>,
    /// The options in the order they were added, the order they are compared in.
    #[serde(skip)]
    order: Vec<String>,
}

/// An option whose value differs from the recorded one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// How to name the option to people: `--epochs`, or `the dataset`.
    pub option: String,
    /// The recorded value.
    pub recorded: String,
    /// The value given now.
    pub given: String,
}

impl Identity {
    /// Adds an option that has a value.
    pub fn with(self, option: &str, value: impl Display) -> Identity {
        self.with_opt(option, Some(value))
    }

    /// Adds an option that may not have been given.
    pub fn with_opt(mut self, option: &str, value: Option<impl Display>) -> Identity {
        let value = value.map(|v| v.to_string());
        if self.options.insert(option.to_string(), value).is_none() {
            self.order.push(option.to_string());
        }
        self
    }

    /// Whether no option is recorded (a state written before they were).
    pub fn is_empty(&self) -> bool {
        self.options.is_empty()
    }

    /// Adds the options that say how the dataset is read.
    pub fn with_dataset(self, options: &DatasetOptions) -> Identity {
        let format = &options.format_options;
        self.with_opt("format", options.format)
            .with("partition-strings", !options.infer_partition_types)
            .with("split-size", options.split_size)
            .with(
                "csv-header",
                match format.csv_header {
                    Some(header) => header.to_string(),
                    None => "from the data".to_string(),
                },
            )
            .with("csv-delimiter", char::from(format.csv_delimiter))
            .with("text-key-value", format.text_key_value)
            .with_opt(
                "where",
                options.partition_filter.as_ref().map(|f| f.as_str()),
            )
            .with_opt("filter", options.row_filter.as_ref().map(|f| f.as_str()))
            .with_opt(
                "timezone",
                (!options.timezone.is_utc()).then(|| options.timezone.name()),
            )
            .with_opt(
                "table-version",
                (!options.table_version.is_latest())
                    .then(|| format!("{:?}", options.table_version)),
            )
    }

    /// Adds the options that choose the rows trained (`--split`, `--split-key`,
    /// `--take`, `--sample`, `--limit`).
    pub fn with_select(self, select: &crate::config::SelectOptions) -> Identity {
        self.with_opt("split", select.split.as_ref())
            .with_opt("split-key", select.split_key.as_ref())
            .with_opt("take", select.take.as_ref())
            .with_opt("sample", select.sample)
            .with_opt("limit", select.limit)
    }

    /// Adds `option` from `value` unless it is recorded already (to fill in
    /// what older states hold elsewhere).
    pub fn or_with(self, option: &str, value: impl Display) -> Identity {
        if self.options.contains_key(option) {
            return self;
        }
        self.with(option, value)
    }

    /// The first option given now (in the order they were added) whose value
    /// differs from the one recorded; options `recorded` does not hold are not
    /// compared.
    pub fn first_change(&self, recorded: &Identity) -> Option<Change> {
        self.order.iter().find_map(|option| {
            let given = self.options.get(option)?;
            let before = recorded.options.get(option)?;
            (before != given).then(|| Change {
                option: if option == DATASET {
                    "the dataset".to_string()
                } else {
                    format!("--{option}")
                },
                recorded: shown(before),
                given: shown(given),
            })
        })
    }
}

fn shown(value: &Option<String>) -> String {
    match value {
        Some(v) => v.clone(),
        None => "not given".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_option_is_named_with_both_values() {
        let recorded = Identity::default()
            .with(DATASET, "file:///d")
            .with("epochs", 1)
            .with_opt("label", None::<&str>);
        let same = recorded.clone();
        assert_eq!(same.first_change(&recorded), None);
        let more = recorded.clone().with("epochs", 2);
        assert_eq!(
            more.first_change(&recorded),
            Some(Change {
                option: "--epochs".to_string(),
                recorded: "1".to_string(),
                given: "2".to_string(),
            })
        );
        let other = recorded.clone().with(DATASET, "file:///e");
        let change = other.first_change(&recorded).expect("a change");
        assert_eq!(change.option, "the dataset");
        let label = recorded.clone().with("label", "y");
        let change = label.first_change(&recorded).expect("a change");
        assert_eq!(
            (change.recorded.as_str(), change.given.as_str()),
            ("not given", "y")
        );
    }

    #[test]
    fn options_not_recorded_are_not_checked() {
        let old: Identity = serde_json::from_str(r#"{"epochs":"1"}"#).expect("json");
        let now = Identity::default()
            .with("epochs", 1)
            .with("batch-size", 64)
            .with_opt("features", Some("f1,f2"));
        assert_eq!(now.first_change(&old), None);
        let filled = old.or_with("epochs", 5).or_with("seed", 3);
        assert_eq!(
            now.with("seed", 4).first_change(&filled).map(|c| c.option),
            Some("--seed".to_string())
        );
    }
}
