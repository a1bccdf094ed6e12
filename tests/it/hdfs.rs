//! `sluice ls` and `sluice train` over a real HDFS: a MiniDFSCluster started by
//! `tests/services/hdfs.sh`, holding Spark fixtures uploaded through sluice's own
//! HDFS store and a job that real Spark wrote straight into HDFS. The answers must
//! equal those for the same data on local disk, and every id must arrive once.
//!
//! Never skipped: when the cluster cannot start, every test here fails.

use crate::common;
use crate::object_stores::service::services_root;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::{
    assert_exactly_once, assert_one_line_error, fixture, run, sluice_command, Run,
};
use connectors::store::HdfsStoreBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};
use serde_json::Value;

/// Taken for writing by the test that puts the namenode in safe mode, for
/// reading by every other test of the plain cluster.
static SAFE_MODE: RwLock<()> = RwLock::new(());

/// Held by each test of the HA cluster: one of them restarts its datanode.
static HA: Mutex<()> = Mutex::new(());

/// A running MiniDFSCluster, as `tests/services/hdfs.sh` reports it.
struct Cluster {
    /// `hdfs://127.0.0.1:PORT` or `hdfs://ns`.
    url: String,
    /// The client configuration directory (`HADOOP_CONF_DIR`).
    conf_dir: String,
}

impl Cluster {
    /// Starts the cluster (or finds it running) with `hdfs.sh COMMAND`; panics
    /// with the script's output when it cannot. A cluster this process starts
    /// stops when the process exits (`SLUICE_HDFS_EXIT_WITH`); one started
    /// earlier, by `tests/run.sh`, is left running.
    fn start(command: &str, url_key: &str) -> Cluster {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/hdfs.sh");
        let out = run(Command::new("bash")
            .arg(&script)
            .arg(command)
            .env("SLUICE_SERVICES", services_root())
            .env("SLUICE_HDFS_EXIT_WITH", std::process::id().to_string()));
        assert!(
            out.status.success(),
            "the HDFS test service did not start: {out}"
        );
        Cluster {
            url: out.printed(url_key),
            conf_dir: out.printed("HADOOP_CONF_DIR"),
        }
    }

    /// The plain cluster (one namenode on 127.0.0.1, on a port free when it
    /// started), shared by the
    /// tests; the guard keeps the safe-mode test from running meanwhile.
    fn plain() -> (&'static Cluster, RwLockReadGuard<'static, ()>) {
        let shared = SAFE_MODE.read().unwrap_or_else(|e| e.into_inner());
        (Cluster::plain_cluster(), shared)
    }

    fn plain_cluster() -> &'static Cluster {
        static CLUSTER: OnceLock<Cluster> = OnceLock::new();
        CLUSTER.get_or_init(|| Cluster::start("start", "SLUICE_HDFS_URL"))
    }

    /// The HA cluster (nameservice `ns`, two namenodes, the first active).
    fn ha() -> &'static Cluster {
        static CLUSTER: OnceLock<Cluster> = OnceLock::new();
        CLUSTER.get_or_init(|| Cluster::start("start-ha", "SLUICE_HDFS_HA_URL"))
    }

    /// A fresh directory URL for one test (the cluster outlives test runs).
    fn fresh_dir(&self, name: &str) -> String {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        format!(
            "{}/sluice-tests/{name}-{}-{nanos}",
            self.url,
            std::process::id()
        )
    }

    /// `sluice ARGS` with this cluster's client configuration.
    fn sluice(&self, args: &[&str]) -> Run {
        run(sluice_command(args).env("HADOOP_CONF_DIR", &self.conf_dir))
    }

    /// Copies the local directory `src` to the HDFS directory `url` through
    /// sluice's HDFS store (every file, markers and hidden files included).
    fn upload(&self, src: &Path, url: &str) {
        let location = HdfsStoreBuilder::new(url)
            .with_config_dir(self.conf_dir.clone())
            .build()
            .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
        let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
        for (relative, file) in files_under(src) {
            let bytes = std::fs::read(&file)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
            let target = ObjectPath::parse(format!("{}/{relative}", location.root))
                .unwrap_or_else(|e| panic!("bad path {relative}: {e}"));
            runtime
                .block_on(location.store.put(&target, PutPayload::from(bytes)))
                .unwrap_or_else(|e| panic!("cannot upload {relative} to {url}: {e}"));
        }
    }
}

/// Every file under `root`, with its path relative to `root` (`/`-separated).
fn files_under(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let relative = path
                    .strip_prefix(root)
                    .expect("under root")
                    .to_str()
                    .expect("utf-8 fixture path")
                    .to_string();
                out.push((relative, path));
            }
        }
    }
    assert!(!out.is_empty(), "no files under {}", root.display());
    out
}

fn python() -> String {
    std::env::var("SLUICE_PYTHON")
        .unwrap_or_else(|_| format!("{}/.cache/sluice/venv/bin/python", env!("HOME")))
}

/// `sluice ls --json` output without the one key that names the location.
fn ls_json(run: Run) -> Value {
    let mut json = run.success().json();
    json.as_object_mut()
        .expect("ls --json prints an object")
        .remove("url");
    json
}

/// Trains on `url` with exec trainers that record ids; returns how often each id came.
fn train_ids(cluster: &Cluster, url: &str, devices: &str, extra: &[&str]) -> HashMap<i64, u32> {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/record_ids.py");
    let exec = format!(
        "{} {} --out {}",
        python(),
        script.display(),
        out_dir.path().display()
    );
    let mut args = vec![
        "train",
        url,
        "--exec",
        &exec,
        "--devices",
        devices,
        "--batch-size",
        "97",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    cluster.sluice(&args).success();
    let mut counts = HashMap::new();
    for entry in std::fs::read_dir(out_dir.path()).expect("ids dir") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.starts_with("ids-") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("ids file");
        for line in text.lines() {
            let id: i64 = line.trim().parse().expect("id is a number");
            *counts.entry(id).or_insert(0) += 1;
        }
    }
    counts
}

fn expected_rows(dataset: &str) -> u64 {
    common::expected_dataset(dataset)["rows"]
        .as_u64()
        .unwrap_or_else(|| panic!("no row count for {dataset} in expected.json"))
}

#[test]
fn ls_over_hdfs_equals_ls_of_the_same_files_on_disk() {
    let (cluster, _shared) = Cluster::plain();
    for dataset in [
        "parquet_partitioned",
        "escaped",
        "parquet_row_groups",
        "csv_plain",
        "orc",
        "text_bz2_big",
    ] {
        let local = fixture(dataset);
        let url = cluster.fresh_dir(dataset);
        cluster.upload(&local, &url);
        let on_disk = ls_json(common::sluice([
            "ls",
            "--json",
            local.to_str().expect("utf-8"),
        ]));
        let on_hdfs = ls_json(cluster.sluice(&["ls", "--json", &url]));
        assert_eq!(
            on_hdfs, on_disk,
            "{dataset}: ls differs between HDFS and disk"
        );
        assert_eq!(on_hdfs["rows"].as_u64(), Some(expected_rows(dataset)));
    }
}

#[test]
fn a_delta_table_on_hdfs_reads_its_live_rows_and_old_versions() {
    let (cluster, _shared) = Cluster::plain();
    let url = cluster.fresh_dir("delta-dv");
    cluster.upload(&fixture("tables/delta/dv"), &url);
    for (index, flag) in [(-1isize, None), (1, Some("1"))] {
        let version = common::table_version("delta/dv", index);
        let mut args = vec!["ls", url.as_str(), "--json"];
        if let Some(v) = flag {
            args.extend(["--table-version", v]);
        }
        let listing = cluster.sluice(&args).success().json();
        assert_eq!(
            listing["rows"], version["count"],
            "delta/dv on hdfs: {listing}"
        );
        assert_eq!(listing["table"]["version"], version["version"], "{listing}");
        let extra: Vec<&str> = flag.map(|v| vec!["--table-version", v]).unwrap_or_default();
        let ids = train_ids(cluster, &url, "2", &extra);
        assert_eq!(
            ids,
            common::table_ids(version),
            "delta/dv version {} on hdfs: every live id once, no deleted one",
            version["version"]
        );
    }
}

#[test]
fn train_over_hdfs_delivers_every_id_once() {
    let (cluster, _shared) = Cluster::plain();
    for (dataset, devices, extra) in [
        ("parquet_partitioned", "4", &[][..]),
        ("parquet_row_groups", "2", &["--split-size", "64KiB"][..]),
        ("csv_plain", "3", &["--split-size", "16KiB"][..]),
    ] {
        let url = cluster.fresh_dir(dataset);
        cluster.upload(&fixture(dataset), &url);
        let ids = train_ids(cluster, &url, devices, extra);
        assert_exactly_once(&ids, expected_rows(dataset), &format!("{dataset} on hdfs"));
    }
}

#[test]
fn a_job_spark_wrote_into_hdfs_lists_and_trains_like_its_local_twin() {
    let (cluster, _shared) = Cluster::plain();
    let url = cluster.fresh_dir("spark-clicks");
    let local = tempfile::tempdir().expect("tempdir");
    let twin = local.path().join("clicks");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spark_to_hdfs.py");
    let spark = run(Command::new(python())
        .arg(&script)
        .arg(&url)
        .arg(&twin)
        .env("HADOOP_CONF_DIR", &cluster.conf_dir))
    .success();
    let counted = spark.json();
    let rows = counted["rows"].as_u64().expect("spark counted rows");

    let on_hdfs = ls_json(cluster.sluice(&["ls", "--json", &url]));
    let on_disk = ls_json(common::sluice([
        "ls",
        "--json",
        twin.to_str().expect("utf-8"),
    ]));
    assert_eq!(on_hdfs["rows"].as_u64(), Some(rows), "rows Spark counted");
    assert_eq!(
        on_hdfs["complete"],
        Value::Bool(true),
        "Spark wrote _SUCCESS"
    );
    let per_partition: BTreeMap<String, u64> = on_hdfs["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            let path = p["path"].as_str().expect("path").to_string();
            (path, p["rows"].as_u64().expect("rows"))
        })
        .collect();
    let spark_partitions: BTreeMap<String, u64> =
        serde_json::from_value(counted["partitions"].clone()).expect("partition counts");
    assert_eq!(per_partition, spark_partitions, "rows per partition");
    for key in ["complete", "format", "rows", "files", "tasks", "schema"] {
        assert_eq!(
            on_hdfs[key], on_disk[key],
            "`{key}` differs from the local twin"
        );
    }
    let strip_bytes = |json: &Value| -> Vec<Value> {
        let mut parts = json["partitions"].as_array().expect("partitions").clone();
        for p in &mut parts {
            p.as_object_mut().expect("partition object").remove("bytes");
        }
        parts
    };
    assert_eq!(strip_bytes(&on_hdfs), strip_bytes(&on_disk), "partitions");

    let ids = train_ids(cluster, &url, "3", &[]);
    assert_exactly_once(&ids, rows, "spark job written to hdfs");
}

#[test]
fn a_refused_connection_fails_fast_with_one_line_naming_the_url() {
    let started = Instant::now();
    let out = run(&mut sluice_command(["ls", "hdfs://127.0.0.1:1/x"]));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_one_line_error(&out, &["hdfs://127.0.0.1:1", "refused"]);
}

#[test]
fn an_unknown_host_fails_with_one_line_naming_the_url() {
    let started = Instant::now();
    let out = run(&mut sluice_command([
        "ls",
        "hdfs://no-such-namenode.invalid:9000/x",
    ]));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert_one_line_error(&out, &["hdfs://no-such-namenode.invalid:9000"]);
}

#[test]
fn a_missing_path_and_a_file_root_are_reported_as_such() {
    let (cluster, _shared) = Cluster::plain();
    let missing = cluster.fresh_dir("missing");
    let out = cluster.sluice(&["ls", &missing]);
    assert_one_line_error(&out, &["no such path", &missing]);

    let url = cluster.fresh_dir("escaped");
    cluster.upload(&fixture("escaped"), &url);
    let file = format!("{url}/s=plain/part.parquet");
    let out = cluster.sluice(&["ls", &file]);
    assert_one_line_error(&out, &["not an output directory", &file]);
}

#[test]
fn another_users_private_directory_is_permission_denied() {
    let (cluster, _shared) = Cluster::plain();
    // tests/services/hdfs.sh creates /sluice-private, mode 700, owned by its user.
    let url = format!("{}/sluice-private", cluster.url);
    let out = run(sluice_command(["ls", &url])
        .env("HADOOP_CONF_DIR", &cluster.conf_dir)
        .env("HADOOP_USER_NAME", "sluice-nobody"));
    assert_one_line_error(&out, &["permission denied", &url]);
}

#[test]
fn a_viewfs_mount_lists_what_the_namenode_holds() {
    let (cluster, _shared) = Cluster::plain();
    let url = cluster.fresh_dir("escaped");
    cluster.upload(&fixture("escaped"), &url);
    // tests/services/hdfs.sh mounts viewfs://sluice/warehouse on /sluice-tests.
    let (_, name) = url
        .rsplit_once("/sluice-tests/")
        .expect("fresh dirs are under /sluice-tests");
    let view = format!("viewfs://sluice/warehouse/{name}");
    let on_hdfs = ls_json(cluster.sluice(&["ls", "--json", &url]));
    let through_view = ls_json(cluster.sluice(&["ls", "--json", &view]));
    assert_eq!(through_view, on_hdfs, "ls through viewfs");
    let missing = cluster.sluice(&["ls", &format!("{view}-missing")]);
    assert_one_line_error(&missing, &["no such path", "viewfs://sluice/warehouse/"]);
}

#[test]
fn an_ha_nameservice_resolves_through_hadoop_conf_dir() {
    let _alone = HA.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::ha();
    let url = cluster.fresh_dir("parquet_partitioned");
    cluster.upload(&fixture("parquet_partitioned"), &url);
    let on_disk = ls_json(common::sluice([
        "ls",
        "--json",
        fixture("parquet_partitioned").to_str().expect("utf-8"),
    ]));
    let on_hdfs = ls_json(cluster.sluice(&["ls", "--json", &url]));
    assert_eq!(on_hdfs, on_disk, "ls through the nameservice");
    let ids = train_ids(cluster, &url, "2", &[]);
    assert_exactly_once(&ids, expected_rows("parquet_partitioned"), "ha nameservice");
    let missing = format!("{url}-missing");
    let out = cluster.sluice(&["ls", &missing]);
    assert_one_line_error(&out, &["no such path", &missing]);
}

/// Runs Hadoop's DFSAdmin on the plain cluster.
fn dfsadmin(args: &[&str]) -> Run {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/hdfs.sh");
    run(Command::new("bash")
        .arg(&script)
        .env("SLUICE_SERVICES", services_root())
        .arg("dfsadmin")
        .args(args))
}

/// Leaves safe mode when dropped, so a failing assertion does not leave the
/// namenode read-only for the other tests.
struct SafeMode;

impl Drop for SafeMode {
    fn drop(&mut self) {
        let out = dfsadmin(&["-safemode", "leave"]);
        assert!(out.status.success() || std::thread::panicking(), "{out}");
    }
}

#[test]
fn a_namenode_in_safe_mode_serves_reads_and_refuses_state_writes_by_name() {
    let _alone = SAFE_MODE.write().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::plain_cluster();
    let url = cluster.fresh_dir("safe-mode");
    cluster.upload(&fixture("csv_plain"), &url);
    let entered = dfsadmin(&["-safemode", "enter"]);
    assert!(entered.stdout.contains("Safe mode is ON"), "{entered}");
    let _leave = SafeMode;

    // Reads go on: a namenode restarting (safe mode) still serves training.
    let listed = ls_json(cluster.sluice(&["ls", "--json", &url]));
    assert_eq!(listed["rows"].as_u64(), Some(expected_rows("csv_plain")));

    // The master's state cannot be written: one line naming it, at once.
    let state = cluster.fresh_dir("safe-mode-state");
    let started = Instant::now();
    let out = run(
        sluice_command(["master", &url, "--listen", "127.0.0.1:0", "--state", &state])
            .env("HADOOP_CONF_DIR", &cluster.conf_dir)
            .env("SLUICE_TOKEN", "safe-mode-token-3b8e6a1f"),
    );
    assert!(started.elapsed() < Duration::from_secs(30), "{out}");
    assert_one_line_error(&out, &[&state, "safe mode"]);
}

#[test]
fn range_reads_span_blocks_see_a_rewritten_file_and_refuse_a_range_past_the_end() {
    let (cluster, _shared) = Cluster::plain();
    let file = OneFile::new(cluster, "ranges");
    // 2.5 blocks of the test cluster's 1 MiB, every byte telling its offset.
    let first: Vec<u8> = (0..2_621_440u32).map(|i| (i % 251) as u8).collect();
    file.put(&first);
    for range in [
        0..10,
        1_048_000..1_049_000,
        1_000_000..2_621_440,
        2_621_430..2_621_440,
    ] {
        let got = file
            .read(range.clone())
            .unwrap_or_else(|e| panic!("read {range:?}: {e}"));
        assert_eq!(
            &got[..],
            &first[range.start as usize..range.end as usize],
            "bytes {range:?}"
        );
    }
    // The same size, other bytes, written later: never the old ones.
    std::thread::sleep(Duration::from_millis(20));
    let second: Vec<u8> = first.iter().map(|b| b.wrapping_add(1)).collect();
    file.put(&second);
    let got = file
        .read(1_048_000..1_049_000)
        .expect("read after the rewrite");
    assert_eq!(
        &got[..],
        &second[1_048_000..1_049_000],
        "the rewritten bytes"
    );
    let past = file.read(2_621_440..2_621_450);
    assert!(past.is_err(), "a range past the end is an error: {past:?}");
}

#[test]
fn a_range_read_after_its_datanode_moved_asks_the_namenode_again() {
    let _alone = HA.lock().unwrap_or_else(|e| e.into_inner());
    let file = OneFile::new(Cluster::ha(), "moved");
    let bytes: Vec<u8> = (0..1_500_000u32).map(|i| (i % 253) as u8).collect();
    file.put(&bytes);
    // The first range keeps the file's block locations (the datanode's port).
    let got = file
        .read(10..1_000)
        .unwrap_or_else(|e| panic!("first read: {e}"));
    assert_eq!(&got[..], &bytes[10..1_000]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/hdfs.sh");
    let out = run(Command::new("bash")
        .arg(&script)
        .env("SLUICE_SERVICES", services_root())
        .arg("restart-datanode-ha"));
    assert!(out.status.success(), "the datanode did not restart: {out}");
    // The kept port answers no more: the read is asked for again, once, with
    // the locations the namenode gives now.
    let got = file
        .read(1_040_000..1_100_000)
        .unwrap_or_else(|e| panic!("read after the move: {e}"));
    assert_eq!(&got[..], &bytes[1_040_000..1_100_000]);
    let got = file
        .read(0..1_500_000)
        .unwrap_or_else(|e| panic!("a later read: {e}"));
    assert_eq!(&got[..], &bytes[..]);
}

/// One file of a fresh directory of `cluster`, written and read in ranges
/// through sluice's HDFS store.
struct OneFile {
    url: String,
    location: connectors::store::Location,
    path: ObjectPath,
    runtime: tokio::runtime::Runtime,
}

impl OneFile {
    fn new(cluster: &Cluster, name: &str) -> OneFile {
        let url = cluster.fresh_dir(name);
        let location = HdfsStoreBuilder::new(&url)
            .with_config_dir(cluster.conf_dir.clone())
            .build()
            .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
        let path = ObjectPath::parse(format!("{}/part-00000", location.root)).expect("path");
        let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
        OneFile {
            url,
            location,
            path,
            runtime,
        }
    }

    fn put(&self, bytes: &[u8]) {
        let payload = PutPayload::from(bytes.to_vec());
        self.runtime
            .block_on(self.location.store.put(&self.path, payload))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", self.url));
    }

    fn read(&self, range: std::ops::Range<u64>) -> object_store::Result<Vec<u8>> {
        let get = self.location.store.get_range(&self.path, range);
        self.runtime.block_on(get).map(|bytes| bytes.to_vec())
    }
}
