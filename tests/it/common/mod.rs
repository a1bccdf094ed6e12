//! Helpers shared by the integration tests: where the generated fixtures live,
//! what Spark counted in them (`expected.json`), running the `sluice` binary and
//! reading its JSON.
//!
//! Each test file includes this with `mod common;` and uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod cluster;
pub mod proxy;

/// The `sluice` binary Cargo built for these tests.
pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// Env var naming the fixtures directory (set by `tests/run.sh`).
pub const FIXTURES_ENV: &str = "SLUICE_FIXTURES";

/// The directory `tests/fixtures/make_fixtures.py` wrote: `$SLUICE_FIXTURES`, or
/// `<crate>/tests/data/generated` when unset. Panics when it holds no `expected.json`:
/// tests never skip for lack of fixtures.
pub fn fixtures_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = match std::env::var_os(FIXTURES_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/generated"),
        };
        let expected = dir.join("expected.json");
        if !expected.is_file() {
            panic!(
                "no fixtures: {} is missing. Run `tests/run.sh` (it generates the Spark \
                 fixtures with tests/fixtures/make_fixtures.py and sets {FIXTURES_ENV}), \
                 or point {FIXTURES_ENV} at a directory that script generated.",
                expected.display()
            );
        }
        dir
    })
}

/// The whole of `expected.json`.
pub fn expected() -> &'static Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED.get_or_init(|| {
        let path = fixtures_dir().join("expected.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        parse_json(&text, &path.display().to_string())
    })
}

/// Every dataset entry of `expected.json`, by name (`"csv_plain"`, `"bad/bad_gzip"`).
pub fn expected_datasets() -> &'static serde_json::Map<String, Value> {
    expected()["datasets"]
        .as_object()
        .expect("expected.json has no `datasets` object")
}

/// One dataset's entry in `expected.json`; panics if the fixtures lack it.
pub fn expected_dataset(name: &str) -> &'static Value {
    expected_datasets()
        .get(name)
        .unwrap_or_else(|| panic!("expected.json has no dataset `{name}`; regenerate the fixtures"))
}

/// Path of a fixture (a dataset name or any path relative to the fixtures directory).
pub fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

/// A finished run of some command: exit status and output as text.
pub struct Run {
    /// The command line, for messages.
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Panics (showing the output) unless the command exited 0; returns self.
    #[track_caller]
    pub fn success(self) -> Self {
        assert!(self.status.success(), "command failed: {self}");
        self
    }

    /// Panics (showing the output) if the command exited 0; returns self.
    #[track_caller]
    pub fn failure(self) -> Self {
        assert!(
            !self.status.success(),
            "command should have failed but exited 0: {self}"
        );
        self
    }

    /// The value of `KEY` in stdout's `KEY=value` lines (what the service
    /// scripts' `start` commands print); panics, showing the output, when
    /// there is none.
    #[track_caller]
    pub fn printed(&self, key: &str) -> String {
        self.stdout
            .lines()
            .filter_map(|line| line.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, value)| value.to_string())
            .unwrap_or_else(|| panic!("no {key}= printed: {self}"))
    }

    /// stdout parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        parse_json(&self.stdout, &format!("stdout of `{}`", self.command))
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command, self.status, self.stdout, self.stderr
        )
    }
}

/// A `Command` for the sluice binary with a predictable environment (no `RUST_LOG`,
/// so stderr holds only what sluice itself prints).
pub fn sluice_command<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(SLUICE);
    cmd.args(args).env_remove("RUST_LOG");
    cmd
}

/// Runs the sluice binary with these arguments and waits for it.
pub fn sluice<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run(&mut sluice_command(args))
}

/// Runs any command (stdin closed, output captured) and waits for it.
pub fn run(cmd: &mut Command) -> Run {
    let command = describe(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
    Run {
        command,
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A command line as text, for messages.
pub fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A JSON file a fixture script wrote (`relative` to the fixtures), parsed;
/// the panic names the script that writes it.
#[track_caller]
pub fn fixture_json(relative: &str, script: &str) -> Value {
    let path = fixtures_dir().join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}): run tests/run.sh (it runs tests/fixtures/{script})",
            path.display()
        )
    });
    parse_json(&text, &path.display().to_string())
}

/// Parses JSON text; `what` names its origin in the panic message.
#[track_caller]
pub fn parse_json(text: &str, what: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} is not JSON ({e}):\n{text}"))
}

/// Checks the error contract of the CLI: a failed run whose stderr is exactly one
/// line, starting `sluice: `, containing every string in `mentions`, and no panic.
#[track_caller]
pub fn assert_one_line_error(run: &Run, mentions: &[&str]) {
    assert!(
        !run.status.success(),
        "should have failed but exited 0: {run}"
    );
    assert!(!run.stderr.contains("panicked"), "sluice panicked: {run}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr should be exactly one line: {run}");
    assert!(
        lines[0].starts_with("sluice: "),
        "stderr should start with `sluice: `: {run}"
    );
    for m in mentions {
        assert!(lines[0].contains(m), "stderr should mention `{m}`: {run}");
    }
}

/// The Python of the test venv: `$SLUICE_PYTHON`, else `~/.cache/sluice/venv/bin/python`.
pub fn python() -> String {
    std::env::var("SLUICE_PYTHON")
        .unwrap_or_else(|_| format!("{}/.cache/sluice/venv/bin/python", env!("HOME")))
}

/// JVM options of the Spark drivers and executors the tests start from
/// [`python`]'s venv: `SLUICE_SPARK_JAVA_OPTIONS` (tests/run.sh sets it to
/// what `tests/fixtures/spark_cds.py --options` prints: C1 only, the serial
/// GC and the venv's class archive), else the first two.
pub fn spark_java_options() -> String {
    std::env::var("SLUICE_SPARK_JAVA_OPTIONS")
        .unwrap_or_else(|_| "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC".to_string())
}

/// Panics, saying how to install it, unless PyTorch (with `torch.distributed`)
/// imports in [`python`].
/// Checked once per test run: an import of torch takes seconds of CPU.
#[track_caller]
pub fn require_torch() {
    static CHECKED: OnceLock<Result<(), String>> = OnceLock::new();
    let checked = CHECKED.get_or_init(|| {
        let check = run(Command::new(python()).args(["-c", "import torch.distributed"]));
        if check.status.success() {
            Ok(())
        } else {
            Err(format!(
                "PyTorch is missing from {}: install it with `{} -m pip install -r \
                 tests/requirements-torch.txt` (.ci/run does)\n{check}",
                python(),
                python()
            ))
        }
    });
    if let Err(why) = checked {
        panic!("{why}");
    }
}

/// The `--exec` command of a trainer that records the ids it is handed into `dir`
/// (tests/trainers/record_ids.py), with `extra` options.
pub fn recorder(dir: &Path, extra: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/record_ids.py");
    format!(
        "{} {} --out {} {extra}",
        python(),
        script.display(),
        dir.display()
    )
}

/// How often each id was recorded in the files of `dir` whose names start with `prefix`.
pub fn recorded_ids(dir: &Path, prefix: &str) -> std::collections::HashMap<i64, u32> {
    let mut counts = std::collections::HashMap::new();
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.starts_with(prefix) {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        for line in text.lines() {
            let id: i64 = line
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{}: `{line}` is not an id: {e}", path.display()));
            *counts.entry(id).or_insert(0) += 1;
        }
    }
    counts
}

/// Checks that ids `0..rows` each arrived exactly once and nothing else did.
#[track_caller]
pub fn assert_exactly_once(counts: &std::collections::HashMap<i64, u32>, rows: u64, what: &str) {
    let dups: Vec<_> = counts.iter().filter(|(_, &c)| c > 1).take(5).collect();
    assert!(
        dups.is_empty(),
        "{what}: ids delivered more than once: {dups:?}"
    );
    let missing: Vec<i64> = (0..rows as i64)
        .filter(|i| !counts.contains_key(i))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: ids never delivered: {missing:?}"
    );
    assert_eq!(counts.len() as u64, rows, "{what}: unexpected extra ids");
}

/// Copies a directory tree (a fixture to damage or to change).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The `--exec` command of tests/trainers/ack_log.py, logging into `out`
/// what it was handed and what it acknowledged.
pub fn ack_log(out: &Path, sleep: f64) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/ack_log.py");
    format!(
        "{} {} --out {} --sleep {sleep}",
        python(),
        script.display(),
        out.display()
    )
}

/// Lines (ids) in the files of `dir` starting with `prefix`, without parsing.
pub fn count_lines(dir: &Path, prefix: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(prefix) {
            if let Ok(text) = std::fs::read_to_string(entry.path()) {
                n += text.lines().count() as u64;
            }
        }
    }
    n
}

/// Polls `ready` until it holds, first every 10 ms, then less often (up to
/// every 100 ms, so that costly checks leave the machine to the processes
/// under test); panics naming `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    let mut pause = Duration::from_millis(10);
    while !ready() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// A copy of fixture `dataset` (Parquet) in `dir`/data whose row group `rg` has a damaged
/// page header in every column: the footer is intact, so the file plans, and
/// the read fails at that row group. Returns the part file, its pristine bytes
/// and the ids of the damaged row group.
pub fn damaged_parquet_copy(
    dataset: &str,
    dir: &Path,
    rg: usize,
) -> (PathBuf, Vec<u8>, std::ops::Range<i64>) {
    let data = dir.join("data");
    copy_dir(&fixture(dataset), &data);
    let part = std::fs::read_dir(&data)
        .expect("list")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .expect("a parquet part file");
    let probe = format!(
        "import pyarrow.parquet as pq\n\
         m = pq.ParquetFile({part:?}).metadata\n\
         rg = m.row_group({rg})\n\
         first = sum(m.row_group(i).num_rows for i in range({rg}))\n\
         print(first, first + rg.num_rows)\n\
         for c in range(rg.num_columns):\n    print(rg.column(c).data_page_offset)\n",
        part = part.display().to_string()
    );
    let out = Command::new(python())
        .args(["-c", &probe])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    let range: Vec<i64> = lines
        .next()
        .expect("rows line")
        .split_whitespace()
        .map(|n| n.parse().expect("row"))
        .collect();
    let pristine = std::fs::read(&part).expect("read part");
    let mut broken = pristine.clone();
    for offset in lines.map(|l| l.trim().parse::<usize>().expect("offset")) {
        for b in &mut broken[offset..offset + 24] {
            *b = 0xFF;
        }
    }
    std::fs::write(&part, &broken).expect("damage");
    (part, pristine, range[0]..range[1])
}

/// Checks a run over a copy made by [`damaged_parquet_copy`] whose damage stayed:
/// it exited 2 naming `part`, no id arrived twice, every row before the damage
/// arrived and none of the damaged row group did. Returns the ids.
#[track_caller]
pub fn assert_damaged_run(
    status: ExitStatus,
    stderr: &str,
    part: &Path,
    ids_dir: &Path,
    bad: &std::ops::Range<i64>,
) -> std::collections::HashMap<i64, u32> {
    assert_eq!(status.code(), Some(2), "a failed task exits 2: {stderr}");
    let name = part.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(stderr.contains(name), "the error names {name}: {stderr}");
    let ids = recorded_ids(ids_dir, "ids-");
    let twice: Vec<_> = ids.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(twice.is_empty(), "ids served twice: {twice:?}");
    let missing: Vec<i64> = (0..bad.start)
        .filter(|i| !ids.contains_key(i))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "rows before the damage never arrived: {missing:?}"
    );
    assert!(
        bad.clone().all(|i| !ids.contains_key(&i)),
        "rows of the damaged row group arrived"
    );
    ids
}

/// The whole of `tables/expected.json` (written by tests/fixtures/make_tables.py).
pub fn tables_expected() -> &'static Value {
    static TABLES: OnceLock<Value> = OnceLock::new();
    TABLES.get_or_init(|| {
        let path = fixtures_dir().join("tables/expected.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}; tests/run.sh writes it with tests/fixtures/make_tables.py",
                path.display()
            )
        });
        parse_json(&text, &path.display().to_string())
    })
}

/// The directory of a table entry of `tables/expected.json`.
pub fn table_dir(table: &Value) -> PathBuf {
    fixtures_dir().join("tables").join(
        table["path"]
            .as_str()
            .expect("a table entry without `path`"),
    )
}

/// One version of a table in `tables/expected.json`: `name` is `delta/dv`,
/// `iceberg/appends`...; `index` counts versions from the first (negative:
/// from the last).
pub fn table_version(name: &str, index: isize) -> &'static Value {
    let all = tables_expected();
    let versions = all["tables"][name]["versions"]
        .as_array()
        .unwrap_or_else(|| panic!("tables/expected.json has no table {name}"));
    let i = if index < 0 {
        versions.len() as isize + index
    } else {
        index
    };
    versions
        .get(i as usize)
        .unwrap_or_else(|| panic!("{name} has no version #{index}"))
}

/// The ids of a table version from `tables/expected.json`, with how often
/// each is expected (once).
pub fn table_ids(version: &Value) -> std::collections::HashMap<i64, u32> {
    version["ids"]
        .as_array()
        .expect("a version without ids")
        .iter()
        .map(|v| (v.as_i64().expect("an integer id"), 1))
        .collect()
}

/// The union over devices of the newest model in the final-* files that
/// `tests/trainers/checkpoint_ids.py` wrote in `out`: id -> times trained.
/// Panics when there is none.
pub fn final_model(out: &Path) -> std::collections::HashMap<i64, u64> {
    // Per device, the final model holding the most batches: a trainer that
    // resumed from an earlier one's checkpoint supersedes it.
    let mut newest: std::collections::HashMap<u64, (u64, serde_json::Value)> =
        std::collections::HashMap::new();
    for entry in std::fs::read_dir(out).expect("list").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("final-") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("read final");
        let value = parse_json(&text, &name);
        let device = value["device"].as_u64().expect("device");
        let batches = value["batches"].as_u64().expect("batches");
        if newest.get(&device).is_none_or(|(b, _)| batches > *b) {
            newest.insert(device, (batches, value));
        }
    }
    assert!(!newest.is_empty(), "no trainer wrote its final model");
    let mut model = std::collections::HashMap::new();
    for (_, value) in newest.values() {
        for (id, n) in value["model"].as_object().expect("model") {
            *model.entry(id.parse::<i64>().expect("id")).or_insert(0) += n.as_u64().expect("count");
        }
    }
    model
}

/// Rows the trainers of `before` acknowledged (its `acked-*` files, see
/// tests/trainers/ack_log.py) that the trainers of `later` were handed again.
pub fn acked_then_served_again(before: &Path, later: &[PathBuf]) -> u64 {
    let acked: std::collections::HashSet<i64> =
        recorded_ids(before, "acked-").into_keys().collect();
    let mut again = 0;
    for dir in later {
        for (id, n) in recorded_ids(dir, "ids-") {
            if acked.contains(&id) {
                again += u64::from(n);
            }
        }
    }
    again
}

/// The seed of the kill moments: `SLUICE_KILL_SEED` to replay a failure, else
/// the clock. Printed either way.
pub fn seed() -> u64 {
    let seed = std::env::var("SLUICE_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("kill moments from SLUICE_KILL_SEED={seed}");
    seed
}

/// xorshift64*: enough randomness for kill moments, and replayable.
pub struct Moments(pub u64);

impl Moments {
    /// A number in `low..high`.
    pub fn next_ms(&mut self, low: u64, high: u64) -> u64 {
        let mut x = self.0.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        low + x.wrapping_mul(0x2545_F491_4F6C_DD1D) % (high - low)
    }
}

/// How a part file is changed between a job's planning and its reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartChange {
    /// Cut to half its size.
    Shrunk,
    /// Lines appended.
    Grown,
    /// Rewritten with the same size and other rows: every digit after the
    /// header line moved on by one, so each row names another id.
    SameSize,
}

impl PartChange {
    /// Every kind of change.
    pub const ALL: [PartChange; 3] = [PartChange::Shrunk, PartChange::Grown, PartChange::SameSize];

    /// The changed bytes of a CSV part file with a header line.
    pub fn apply(self, csv: &[u8]) -> Vec<u8> {
        match self {
            PartChange::Shrunk => csv[..csv.len() / 2].to_vec(),
            PartChange::Grown => {
                let header = csv.split(|&b| b == b'\n').next().unwrap_or_default();
                let mut grown = csv.to_vec();
                grown.extend_from_slice(&csv[header.len() + 1..]);
                grown
            }
            PartChange::SameSize => {
                let header = csv.iter().position(|&b| b == b'\n').map_or(0, |n| n + 1);
                let mut other = csv.to_vec();
                for b in &mut other[header..] {
                    if b.is_ascii_digit() {
                        *b = b'0' + (*b - b'0' + 1) % 10;
                    }
                }
                assert_eq!(other.len(), csv.len());
                other
            }
        }
    }
}

/// The first CSV part file of a directory (by name).
pub fn first_csv_part(dir: &Path) -> PathBuf {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    parts.sort();
    parts.into_iter().next().expect("a CSV part file")
}
