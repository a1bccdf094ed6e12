//! The headings options are grouped under in `-h` and `--help`, the same
//! for every command that has the option.

/// Where the data is: the URL, its table version, the catalog, readiness.
pub const SOURCE: &str = "Source";
/// How files are read: formats, splits, read-ahead, retries.
pub const READING: &str = "Reading";
/// Which rows are trained: columns, partitions, splits, samples.
pub const ROWS: &str = "Rows";
/// Epochs, devices, batches, shuffling and the built-in models.
pub const TRAINING: &str = "Training";
/// External trainers (`--exec`) and what their batches look like.
pub const TRAINERS: &str = "Trainers";
/// The job's state, resuming it, stopping it.
pub const STATE: &str = "State and resume";
/// Following a source as it grows.
pub const FOLLOW: &str = "Following";
/// A master and its workers: addresses, TLS, tokens.
pub const DISTRIBUTED: &str = "Distributed";
/// Logging in to stores and catalogs, and their timeouts.
pub const ACCESS: &str = "Stores and login";
/// What the command writes: models, summaries, JSON.
pub const OUTPUT: &str = "Output";
/// Progress and log lines.
pub const LOGGING: &str = "Logging";
