//! `sluice ls` and `sluice train` on object stores served by real local emulators:
//! S3 (moto), GCS (fake-gcs-server) and Azure Blob (Azurite), each started by its
//! script in tests/services. Real Spark output is uploaded key by key; every store
//! must list it exactly as the local copy lists and deliver every id exactly once.
//! Errors: a refused connection fails fast naming the URL, a missing bucket is
//! named, wrong credentials are "permission denied" (S3 on a moto instance that
//! enforces signatures, Azure with a wrong key; fake-gcs-server checks no
//! credentials, so GCS has no such case); an endpoint that accepts connections
//! and never answers fails within the request timeout's bound; S3 part files
//! deleted while the last task is read are waited for (`--read-retry`). A
//! missing emulator fails the tests.

pub(crate) mod cloud;
use crate::common;
pub(crate) mod http;
pub(crate) mod service;

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::cluster::{
    clean_finish, signal, stderr_of, undelivered, wait_exit, Job, Master, TOKEN,
};
use crate::common::{
    assert_exactly_once, assert_one_line_error, expected_dataset, fixture, recorded_ids, recorder,
    run, sluice, sluice_command, table_ids, table_version, Run,
};
use cloud::{Cloud, Kind};
use object_store::path::Path as KeyPath;
use object_store::{ObjectStoreExt, PutPayload};
use serde_json::Value;
use service::Service;

/// The datasets every store must serve: Hive-partitioned Parquet (escaped and
/// non-ASCII partition values, nulls) and gzip CSV.
const DATASETS: [&str; 2] = ["parquet_partitioned", "csv_gzip"];

/// How long a failing request may take: a refused connection with the retry budget.
const FAIL_FAST: Duration = Duration::from_secs(20);

// ------------------------------------------------------------------ helpers

/// A sluice command with no cloud settings inherited from the environment,
/// then `env` (what points it at the emulator).
fn sluice_with(args: &[&str], env: &[(&str, String)]) -> Command {
    let mut cmd = sluice_command(args);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if ["AWS_", "GOOGLE_", "AZURE_", "AZURITE_", "GCE_"]
            .iter()
            .any(|p| key.starts_with(p))
            || key == "STORAGE_EMULATOR_HOST"
        {
            cmd.env_remove(key.as_ref());
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// `sluice ls --json` of the local fixture.
fn local_listing(dataset: &str) -> Value {
    let dir = fixture(dataset);
    sluice(["ls", "--json", dir.to_str().expect("utf-8 fixture path")])
        .success()
        .json()
}

/// Checks that a store's listing says what the local copy's says.
#[track_caller]
fn assert_same_listing(local: &Value, remote: &Value, what: &str) {
    for key in [
        "complete",
        "format",
        "rows",
        "files",
        "bytes",
        "tasks",
        "schema",
        "partitions",
        "in_flight",
    ] {
        assert_eq!(
            remote[key], local[key],
            "{what}: `{key}` differs from the local copy's"
        );
    }
}

/// Lists `url` and compares with the local copy of `dataset`.
fn check_ls(url: &str, env: &[(&str, String)], dataset: &str) {
    let remote = run(&mut sluice_with(&["ls", "--json", url], env))
        .success()
        .json();
    assert_same_listing(&local_listing(dataset), &remote, url);
    assert_eq!(
        remote["rows"].as_u64(),
        expected_dataset(dataset)["rows"].as_u64(),
        "{url}: rows differ from Spark's count"
    );
}

/// Trains on `url` with recording exec trainers; every id must arrive once.
fn check_train(url: &str, env: &[(&str, String)], dataset: &str) {
    let ids = tempfile::tempdir().expect("tempdir");
    let exec = recorder(ids.path(), "");
    let out = run(&mut sluice_with(
        &[
            "train",
            url,
            "--exec",
            &exec,
            "--devices",
            "2",
            "--batch-size",
            "97",
            "--quiet",
        ],
        env,
    ));
    let out = out.success();
    let rows = expected_dataset(dataset)["rows"]
        .as_u64()
        .unwrap_or_else(|| panic!("no row count for {dataset}: {out}"));
    assert_exactly_once(&recorded_ids(ids.path(), "ids-"), rows, url);
}

/// Uploads the datasets to a new bucket; returns the bucket.
fn upload_datasets(cloud: &Cloud) -> String {
    let bucket = cloud.new_bucket("data");
    for dataset in DATASETS {
        cloud.upload(&bucket, &fixture(dataset), dataset);
    }
    bucket
}

/// The conformance suite every object store passes: `ls` as local, `train`
/// delivering every id once, also for a dataset that fills a whole bucket.
fn conformance(cloud: &Cloud, bucket: &str) {
    let env = cloud.env();
    for dataset in DATASETS {
        let url = cloud.url(bucket, dataset);
        check_ls(&url, &env, dataset);
        check_train(&url, &env, dataset);
    }
    let whole = cloud.new_bucket("whole");
    cloud.upload(&whole, &fixture("csv_gzip"), "");
    check_ls(&cloud.url(&whole, ""), &env, "csv_gzip");
}

/// Runs `sluice ls` expecting a failure; returns the run and how long it took.
fn ls_failing(url: &str, env: &[(&str, String)]) -> (Run, Duration) {
    let start = Instant::now();
    let out = run(&mut sluice_with(&["ls", url], env));
    (out, start.elapsed())
}

/// A port on 127.0.0.1 where nothing listens.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// Checks the error of listing a bucket that does not exist: one line naming
/// it, `mentions` included.
fn check_missing_bucket(cloud: &Cloud, mentions: &str) {
    let url = cloud.url("no-such-bucket-here", "out");
    let (out, took) = ls_failing(&url, &cloud.env());
    assert_one_line_error(&out, &[mentions, &url]);
    assert!(took < FAIL_FAST, "took {took:?}: {out}");
}

// ------------------------------------------------------------------ tests

#[test]
fn s3_lists_and_trains_like_the_local_copy_and_ignores_markers() {
    let s3 = Cloud::start(Kind::S3);
    let bucket = upload_datasets(&s3);
    conformance(&s3, &bucket);

    // Directory markers as S3A, EMR and consoles leave them: `dir/` keys and
    // `dir_$folder$` keys, next to real partitions and for an empty one.
    let store = s3.store(&bucket);
    for dir in ["", "country=BR/", "country=BR/city=New York/", "year=2024/"] {
        s3.put_marker_dir(&bucket, &format!("parquet_partitioned/{dir}"));
    }
    let folders = [
        "parquet_partitioned/year=2024_$folder$",
        "parquet_partitioned/country=BR_$folder$",
        "parquet_partitioned_$folder$",
    ];
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            for key in folders {
                let path = KeyPath::parse(key).expect("valid key");
                store
                    .put(&path, PutPayload::default())
                    .await
                    .unwrap_or_else(|e| panic!("cannot write {key}: {e}"));
            }
        });
    let url = s3.url(&bucket, "parquet_partitioned");
    check_ls(&url, &s3.env(), "parquet_partitioned");
    check_train(&url, &s3.env(), "parquet_partitioned");

    // s3a:// is the same store; with no credentials requests go unsigned, which
    // a bucket whose policy lets anyone read serves.
    let s3a = format!("s3a://{bucket}/csv_gzip");
    check_ls(&s3a, &s3.env(), "csv_gzip");
    s3.make_public(&bucket);
    let anonymous: Vec<_> = s3
        .env()
        .into_iter()
        .filter(|(k, _)| !k.contains("ACCESS_KEY"))
        .collect();
    check_ls(&s3a, &anonymous, "csv_gzip");
}

#[test]
fn a_delta_table_on_s3_reads_its_live_rows_and_old_versions() {
    let s3 = Cloud::start(Kind::S3);
    let bucket = s3.new_bucket("delta");
    s3.upload(&bucket, &fixture("tables/delta/dv"), "warehouse/dv");
    let url = s3.url(&bucket, "warehouse/dv");
    for (index, flag) in [(-1isize, None), (1, Some("1"))] {
        let version = table_version("delta/dv", index);
        let mut ls = vec!["ls", url.as_str(), "--json"];
        let mut train = vec![
            "train",
            url.as_str(),
            "--devices",
            "2",
            "--batch-size",
            "97",
            "--quiet",
        ];
        if let Some(v) = flag {
            ls.extend(["--table-version", v]);
            train.extend(["--table-version", v]);
        }
        let listing = run(&mut sluice_with(&ls, &s3.env())).success().json();
        assert_eq!(
            listing["rows"], version["count"],
            "delta/dv on s3: {listing}"
        );
        assert_eq!(listing["table"]["version"], version["version"], "{listing}");
        let ids = tempfile::tempdir().expect("tempdir");
        let exec = recorder(ids.path(), "");
        train.extend(["--exec", exec.as_str()]);
        run(&mut sluice_with(&train, &s3.env())).success();
        assert_eq!(
            recorded_ids(ids.path(), "ids-"),
            table_ids(version),
            "delta/dv version {} on s3: every live id once, no deleted one",
            version["version"]
        );
    }
}

#[test]
fn gcs_lists_and_trains_like_the_local_copy() {
    let gcs = Cloud::start(Kind::Gcs);
    let bucket = upload_datasets(&gcs);
    conformance(&gcs, &bucket);
}

#[test]
fn azure_lists_and_trains_like_the_local_copy_under_every_url_form() {
    let azure = Cloud::start(Kind::Azure);
    let bucket = upload_datasets(&azure);
    conformance(&azure, &bucket);
    for url in [
        format!("abfs://{bucket}/csv_gzip"),
        format!(
            "abfss://{bucket}@{}.dfs.core.windows.net/csv_gzip",
            cloud::AZURITE_ACCOUNT
        ),
    ] {
        check_ls(&url, &azure.env(), "csv_gzip");
    }
}

#[test]
fn a_missing_bucket_is_named() {
    check_missing_bucket(
        &Cloud::start(Kind::S3),
        "no such bucket s3://no-such-bucket-here",
    );
    check_missing_bucket(
        &Cloud::start(Kind::Azure),
        "no such container az://no-such-bucket-here",
    );
    // fake-gcs-server answers a listing of a missing bucket with HTTP 500 (real
    // GCS: 404, which maps as for the others); its message still names it.
    check_missing_bucket(
        &Cloud::start(Kind::Gcs),
        "no bucket named no-such-bucket-here",
    );
}

#[test]
fn a_refused_connection_fails_fast_naming_the_url() {
    for kind in [Kind::S3, Kind::Gcs, Kind::Azure] {
        let endpoint = format!("http://127.0.0.1:{}", closed_port());
        let url = format!("{}://bucket/out/dt=2024-01-01", kind.scheme());
        let (out, took) = ls_failing(&url, &kind.env(&endpoint));
        assert_one_line_error(&out, &[&url]);
        assert!(took < FAIL_FAST, "{kind:?} took {took:?}: {out}");

        // train fails the same way, before any trainer starts.
        let start = Instant::now();
        let out = run(&mut sluice_with(
            &["train", &url, "--model", "none", "--quiet"],
            &kind.env(&endpoint),
        ));
        assert_one_line_error(&out, &[&url]);
        assert!(start.elapsed() < FAIL_FAST, "{kind:?} train: {out}");
    }
}

/// A port on 127.0.0.1 where a server accepts connections and never answers;
/// it holds what it accepted until the returned guard is dropped.
fn silent_port() -> (u16, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = listener.local_addr().expect("local addr").port();
    let holder = std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            match stream {
                Ok(stream) => held.push(stream),
                Err(_) => return,
            }
        }
    });
    (port, holder)
}

#[test]
fn a_store_that_never_answers_fails_within_the_request_timeout() {
    // Each try gives up after --request-timeout; tries start within 10 s of
    // the first: the README's bound is 12 s plus the request timeout.
    let (port, _holder) = silent_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let url = "s3://bucket/out/dt=2024-01-01";
    let start = Instant::now();
    let out = run(&mut sluice_with(
        &[
            "train",
            url,
            "--model",
            "none",
            "--quiet",
            "--request-timeout",
            "1s",
            "--read-retry",
            "0",
        ],
        &Kind::S3.env(&endpoint),
    ));
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(1), "{out}");
    assert_one_line_error(&out, &[url, &endpoint]);
    assert!(took < FAIL_FAST, "took {took:?}: {out}");
}

#[test]
fn s3_part_files_away_while_the_last_task_is_read_are_waited_for() {
    // Three part files, one task read at a time by a slow trainer: once it
    // has its first rows the part objects are deleted, so the later tasks'
    // reads find nothing (404) until they are uploaded again.
    let s3 = Cloud::start(Kind::S3);
    let bucket = s3.new_bucket("outage");
    let dataset = "separable";
    s3.upload(&bucket, &fixture(dataset), dataset);
    let dir = tempfile::tempdir().expect("tempdir");
    let ids = dir.path().join("ids");
    std::fs::create_dir(&ids).expect("ids dir");
    let log = dir.path().join("stderr.log");
    let trainer = recorder(&ids, "--sleep 0.02");
    let url = s3.url(&bucket, dataset);
    let mut child = sluice_with(
        &[
            "train",
            &url,
            "--quiet",
            "--devices",
            "1",
            "--prefetch",
            "1",
            "--batch-size",
            "20",
            "--exec",
            &trainer,
            "--read-retry",
            "60s",
        ],
        &s3.env(),
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&log).expect("stderr file"))
    .spawn()
    .expect("start sluice train");
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    common::wait_until("the trainer's first rows", FAIL_FAST * 3, || {
        common::count_lines(&ids, "ids-") > 0
    });
    let parts: Vec<KeyPath> = std::fs::read_dir(fixture(dataset))
        .expect("list fixture")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".parquet"))
        .map(|name| KeyPath::parse(format!("{dataset}/{name}")).expect("key"))
        .collect();
    assert!(parts.len() >= 3, "{parts:?}");
    let store = s3.store(&bucket);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            for part in &parts {
                store
                    .delete(part)
                    .await
                    .unwrap_or_else(|e| panic!("cannot delete {part}: {e}"));
            }
        });
    common::wait_until("a read waiting to be tried again", FAIL_FAST * 3, || {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "sluice ended while the files were away: {}",
            stderr()
        );
        stderr().contains("reading again after a wait")
    });
    std::thread::sleep(Duration::from_secs(3));
    s3.upload(&bucket, &fixture(dataset), dataset);
    let status = wait_exit(&mut child, "train");
    assert!(status.success(), "{}", stderr());
    let rows = expected_dataset(dataset)["rows"].as_u64().expect("rows");
    assert_exactly_once(&recorded_ids(&ids, "ids-"), rows, "S3, after the outage");
}

#[test]
fn wrong_s3_credentials_are_permission_denied() {
    // A moto instance of its own: enforcing signatures is server-wide.
    let port = closed_port().to_string();
    let moto = Service::start(
        "s3",
        "s3-auth",
        &[("SLUICE_S3_NAME", "s3-auth"), ("SLUICE_S3_PORT", &port)],
    );
    let reset = |count: &str| {
        let url = format!("{}/moto-api/reset-auth", moto.endpoint);
        let answer = http::request("POST", &url, &[], count.as_bytes());
        assert_eq!(answer.status, 200, "reset-auth: {}", answer.body);
    };
    reset("inf");
    let answer = http::request("PUT", &format!("{}/guarded", moto.endpoint), &[], b"");
    assert!(answer.status < 300, "create bucket: {}", answer.body);
    reset("0");
    let url = "s3://guarded/out";
    let (out, took) = ls_failing(url, &Kind::S3.env(&moto.endpoint));
    assert_one_line_error(&out, &["permission denied", url]);
    assert!(took < FAIL_FAST, "took {took:?}: {out}");
}

#[test]
fn a_wrong_azure_key_is_permission_denied() {
    let azure = Cloud::start(Kind::Azure);
    let bucket = azure.new_bucket("guarded");
    let mut env = azure.env();
    // A well-formed key that is not the account's.
    env.push((
        "AZURE_STORAGE_ACCOUNT_KEY",
        "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ==".to_string(),
    ));
    let url = azure.url(&bucket, "out");
    let (out, took) = ls_failing(&url, &env);
    assert_one_line_error(&out, &["permission denied", &url]);
    assert!(took < FAIL_FAST, "took {took:?}: {out}");
}

#[test]
fn object_store_urls_keep_no_credentials() {
    let out = sluice(["ls", "s3://AKID:SECRET@bucket/out"]);
    assert_one_line_error(&out, &["credentials in the url"]);
    assert!(!out.stderr.contains("AKID:SECRET"), "{out}");
}

// ------------------------------------------------- the master's state on a store

/// A distributed job over `dataset` on `cloud`, its state under a new bucket.
fn job_on(cloud: &Cloud, dataset: &str, epochs: u32) -> (Job, String) {
    let bucket = cloud.new_bucket("job");
    cloud.upload(&bucket, &fixture(dataset), dataset);
    let mut job = Job::new(dataset, epochs);
    job.state = cloud.url(&bucket, "state/clicks");
    job.env = cloud
        .env()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    (job, cloud.url(&bucket, dataset))
}

/// Keys under the job's state prefix.
fn state_keys(cloud: &Cloud, job: &Job) -> Vec<String> {
    let (bucket, prefix) = job
        .state
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .expect("state url");
    let store = cloud.store(bucket);
    let prefix = KeyPath::parse(prefix).expect("prefix");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            use futures::TryStreamExt;
            store
                .list(Some(&prefix))
                .map_ok(|m| m.location.to_string())
                .try_collect()
                .await
                .expect("list state")
        })
}

/// A POST to the master's API with the job token; the HTTP status.
fn post(port: u16, path: &str, body: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args(["-H", "Content-Type: application/json", "-d", body])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_master_with_its_state_on_s3_survives_restarts() {
    let s3 = Cloud::start(Kind::S3);
    let (job, data) = job_on(&s3, "parquet_small_files", 2);
    let mut master = job.start_master(&data);
    let mut workers: Vec<_> = (0..3).map(|_| job.start_worker("")).collect();
    let mut committed = 0;
    for _ in 0..2 {
        // Killed once more rows were committed since its start.
        common::wait_until("more rows committed", Duration::from_secs(90), || {
            let now = job
                .try_status()
                .and_then(|s| s["queue"]["rows_committed"].as_u64())
                .unwrap_or(0);
            now > committed && {
                committed = now;
                true
            }
        });
        signal(&master, libc::SIGKILL);
        let _ = master.wait();
        master = job.start_master(&data);
    }
    clean_finish(&mut master);
    for w in &mut workers {
        assert!(wait_exit(w, "worker").success(), "a worker failed");
    }
    let ids = recorded_ids(&job.ids, "ids-");
    undelivered(&ids, job.rows(), job.epochs);
    // Beyond the rows in flight at the two kills, nothing is served twice:
    // at most the tasks three workers held (prefetch 2 each) per kill.
    let extra: u64 = ids.values().map(|&c| u64::from(c - job.epochs)).sum();
    assert!(
        extra < job.rows(),
        "{extra} duplicate deliveries: more than the work in flight"
    );
    let keys = state_keys(&s3, &job);
    assert!(
        keys.iter().any(|k| k.ends_with("state/clicks/job.json"))
            && keys.iter().any(|k| k.contains("state/clicks/log/")),
        "the state lives in the bucket: {keys:?}"
    );
}

#[test]
fn two_masters_cannot_both_own_a_job_on_a_store() {
    // S3 and Azure refuse a create over an existing object (If-None-Match: *).
    // fake-gcs-server has no XML upload API, which object_store writes GCS
    // objects with, so the master's state cannot be put on it here.
    for kind in [Kind::S3, Kind::Azure] {
        let cloud = Cloud::start(kind);
        let (job, data) = job_on(&cloud, "csv_gzip", 1);
        let mut first = job.start_master(&data);
        // A second master on the same state (a zombie's successor, or a mistake).
        let mut second = Master::spawn(job.master_command(&data, 0));
        let port = second.wait_listening();
        assert_eq!(post(port, "/v1/register", "{}"), "200", "{kind:?}: second");
        // The first master's next write finds its slot taken: it stops before answering.
        let answer = post(job.port(), "/v1/register", "{}");
        assert_ne!(answer, "200", "{kind:?}: a stale master answered a change");
        let status = wait_exit(&mut first, "first master");
        let err = stderr_of(&mut first);
        assert_eq!(
            status.code(),
            Some(3),
            "{kind:?}: a master fenced off by another exits 3: {err}"
        );
        assert!(
            err.contains("written by another master") && err.contains(&job.state),
            "{kind:?}: {err}"
        );
        // The second goes on serving.
        assert_eq!(post(port, "/v1/register", "{}"), "200", "{kind:?}");
        signal(&second, libc::SIGKILL);
        let _ = second.wait();
    }
}

/// Trains on `url` with two devices and a logging trainer, to a summary file.
fn train_logged(url: &str, env: &[(&str, String)], out: &std::path::Path, sleep: f64) -> Command {
    let summary = out.join("summary.json");
    let mut cmd = sluice_with(
        &[
            "train",
            url,
            "--exec",
            &common::ack_log(out, sleep),
            "--devices",
            "2",
            "--batch-size",
            "100",
            "--quiet",
            "--summary-json",
            summary.to_str().expect("utf8"),
        ],
        env,
    );
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    cmd
}

#[test]
fn s3_read_errors_in_the_middle_of_a_task_repeat_no_row() {
    let s3 = Cloud::start(Kind::S3);
    let env = s3.env();
    let rows = expected_dataset("parquet_row_groups")["rows"]
        .as_u64()
        .expect("rows");

    // A row group that stays unreadable: its task fails (exit 2), the rows
    // before it arrive once, none twice.
    let dir = tempfile::tempdir().expect("tempdir");
    let (part, _, bad) = common::damaged_parquet_copy("parquet_row_groups", dir.path(), 5);
    let bucket = s3.new_bucket("damaged");
    s3.upload(&bucket, &dir.path().join("data"), "out");
    let out = dir.path().join("ids");
    std::fs::create_dir(&out).expect("mkdir");
    let run = train_logged(&s3.url(&bucket, "out"), &env, &out, 0.0)
        .output()
        .expect("train");
    let stderr = String::from_utf8_lossy(&run.stderr);
    common::assert_damaged_run(run.status, &stderr, &part, &out, &bad);

    // An object repaired while the rows before the damage are still on their
    // way to the trainers is one changed since planning (its entity tag is
    // another): its task fails at once naming it (a repair is taken with
    // `--retry-failed`, tests/crash_loops.rs), and no row arrives twice.
    let dir = tempfile::tempdir().expect("tempdir");
    let (part, pristine, _) = common::damaged_parquet_copy("parquet_row_groups", dir.path(), 1);
    let bucket = s3.new_bucket("flaky");
    s3.upload(&bucket, &dir.path().join("data"), "out");
    let out = dir.path().join("ids");
    std::fs::create_dir(&out).expect("mkdir");
    let mut child = train_logged(&s3.url(&bucket, "out"), &env, &out, 0.05)
        .spawn()
        .expect("train");
    common::wait_until("the first batch", Duration::from_secs(60), || {
        common::count_lines(&out, "ids-") > 0
    });
    let repaired = dir.path().join("repaired");
    std::fs::create_dir(&repaired).expect("mkdir");
    let name = part.file_name().expect("name");
    std::fs::write(repaired.join(name), &pristine).expect("write");
    s3.upload(&bucket, &repaired, "out");
    let status = wait_exit(&mut child, "train");
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(2), "a failed task exits 2: {stderr}");
    let name = name.to_string_lossy();
    assert!(
        stderr.lines().any(|l| l.contains("failed task")
            && l.contains(name.as_ref())
            && l.contains("changed since the job was planned")),
        "the task fails naming the object as changed: {stderr}"
    );
    let ids = recorded_ids(&out, "ids-");
    assert!(
        !ids.is_empty(),
        "the rows before the damage arrive: {stderr}"
    );
    assert!(
        ids.values().all(|&n| n == 1),
        "S3, an object repaired mid-run: an id twice"
    );
    assert!(ids.len() as u64 <= rows);
}

/// A part object changed on S3 between the job's planning (its master's
/// start) and its reading: shrunk, grown, or rewritten with the same size
/// and other ids. Its task fails at once, naming the object as changed since
/// planning; no row of it reaches a trainer.
#[test]
fn an_s3_part_file_changed_since_planning_fails_its_task_at_once_naming_it() {
    use common::PartChange;
    let s3 = Cloud::start(Kind::S3);
    let dataset = "csv_plain";
    let part = common::first_csv_part(&fixture(dataset));
    let name = part
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let planned = std::fs::read(&part).expect("read part");
    for change in PartChange::ALL {
        let (job, url) = job_on(&s3, dataset, 1);
        let mut master = job.start_master(&url);
        let bucket = url
            .strip_prefix("s3://")
            .and_then(|rest| rest.split('/').next())
            .expect("bucket");
        let store = s3.store(bucket);
        let key = KeyPath::parse(format!("{dataset}/{name}")).expect("key");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(store.put(&key, PutPayload::from(change.apply(&planned))))
            .unwrap_or_else(|e| panic!("cannot change {key}: {e}"));
        let started = Instant::now();
        let mut worker = job.start_worker("--sleep 0");
        let status = wait_exit(&mut worker, "worker");
        let master_status = wait_exit(&mut master, "master");
        let took = started.elapsed();
        let log = master.log();
        assert!(
            took < Duration::from_secs(60),
            "{change:?}: took {took:?}: {log}"
        );
        assert!(status.success(), "{change:?}: the worker failed");
        assert_eq!(master_status.code(), Some(2), "{change:?}: {log}");
        let failed: Vec<&str> = log.lines().filter(|l| l.contains("failed task")).collect();
        assert!(!failed.is_empty(), "{change:?}: no failed task: {log}");
        for line in &failed {
            assert!(
                line.contains(&format!("s3://{bucket}/{dataset}/{name}"))
                    && line.contains("changed since the job was planned"),
                "{change:?}: {line}"
            );
        }
        let ids = job.recorded_ids();
        let rows = expected_dataset(dataset)["rows"].as_i64().expect("rows");
        let foreign: Vec<_> = ids
            .keys()
            .filter(|&&id| !(0..rows).contains(&id))
            .take(5)
            .collect();
        assert!(
            foreign.is_empty(),
            "{change:?}: ids from no planned row: {foreign:?}"
        );
        assert!(ids.values().all(|&n| n == 1), "{change:?}: an id twice");
    }
}

/// `tests/services/s3.sh ACTION` with its state under `root`; its output.
fn s3_script(root: &std::path::Path, action: &str) -> common::Run {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/s3.sh");
    common::run(
        Command::new("bash")
            .arg(script)
            .arg(action)
            .env("SLUICE_SERVICES", root)
            .env_remove("SLUICE_S3_PORT")
            .env_remove("SLUICE_S3_NAME")
            .env("SLUICE_SERVICE_EXIT_WITH", std::process::id().to_string()),
    )
}

/// Whether moto answers at `endpoint`.
fn moto_answers(endpoint: &str) -> bool {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-m", "5", "-w", "%{http_code}"])
        .arg(format!("{endpoint}/moto-api/"))
        .output()
        .expect("curl");
    !matches!(String::from_utf8_lossy(&out.stdout).as_ref(), "" | "000")
}

/// Two test runs on one machine (each with a state root of its own, as
/// tests/run.sh makes them) start their emulators at once: each gets its
/// own, on a port of its own, with data of its own, and stopping one leaves
/// the other up.
#[test]
fn two_runs_start_emulators_of_their_own_and_stop_only_theirs() {
    let roots = [
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    ];
    let started: Vec<common::Run> = std::thread::scope(|scope| {
        let runs: Vec<_> = roots
            .iter()
            .map(|root| scope.spawn(|| s3_script(root.path(), "start")))
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("start thread"))
            .collect()
    });
    let endpoints: Vec<String> = started
        .iter()
        .map(|run| {
            assert!(run.status.success(), "s3.sh start: {run}");
            run.stdout
                .lines()
                .last()
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .collect();
    assert_ne!(endpoints[0], endpoints[1], "one port for two runs");
    for endpoint in &endpoints {
        assert!(moto_answers(endpoint), "{endpoint} does not answer");
    }
    // Data of its own: a bucket made in one is not in the other.
    let made = http::request("PUT", &format!("{}/first-run", endpoints[0]), &[], b"");
    assert!(made.status < 300, "create bucket: {}", made.body);
    let other = http::request("GET", &format!("{}/first-run", endpoints[1]), &[], b"");
    assert_eq!(other.status, 404, "the second run sees the first's bucket");
    // A start again in the first run's root finds its own server.
    let again = s3_script(roots[0].path(), "start");
    assert_eq!(
        again.stdout.lines().last().map(str::trim),
        Some(endpoints[0].as_str())
    );

    let stopped = s3_script(roots[0].path(), "stop");
    assert!(stopped.status.success(), "s3.sh stop: {stopped}");
    assert!(
        !moto_answers(&endpoints[0]),
        "the first run's emulator still answers"
    );
    assert!(
        moto_answers(&endpoints[1]),
        "stopping the first run's emulator stopped the second's"
    );
    let stopped = s3_script(roots[1].path(), "stop");
    assert!(stopped.status.success(), "s3.sh stop: {stopped}");
    assert!(!moto_answers(&endpoints[1]));
}
