//! Tables by name (`--catalog`): an Iceberg REST catalog (the reference
//! server, tests/services/iceberg-rest.sh) and a Hive Metastore 4.0.1
//! (tests/services/hive-metastore.sh) serving tables Spark wrote through
//! them (tests/fixtures/make_catalogs.py). `ls` counts what Spark counts, `train`
//! delivers Spark's ids, the table's current snapshot is the catalog's (not a
//! stray newer metadata file), and a wrong name, a wrong or dead catalog and
//! a refused token are one-line errors.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::common::{
    assert_one_line_error, fixture_json, parse_json, recorded_ids, recorder, sluice,
};
use serde_json::Value;

/// A port of 127.0.0.1 free now, for a catalog this test process starts:
/// two test runs on one machine never meet on a fixed one.
fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port().to_string())
        .expect("a free port")
}

/// Writes `login` (`client:secret`) to a file in `dir` for
/// `--catalog-credential-file`; returns its path.
fn credential_file(dir: &Path, login: &str) -> String {
    let path = dir.join("credential");
    std::fs::write(&path, format!("{login}\n")).expect("write credential");
    path.display().to_string()
}

/// `catalogs/expected.json`, written by tests/fixtures/make_catalogs.py.
pub(crate) fn expected() -> &'static Value {
    static EXPECTED: OnceLock<Value> = OnceLock::new();
    EXPECTED.get_or_init(|| fixture_json("catalogs/expected.json", "make_catalogs.py"))
}

/// The REST catalog over the fixtures' state, started once for this test
/// binary (it stops when the binary exits); its URI.
fn rest_catalog() -> &'static str {
    static URI: OnceLock<String> = OnceLock::new();
    URI.get_or_init(|| {
        let dir = expected()["rest"]["dir"].as_str().expect("rest.dir");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/iceberg-rest.sh");
        let out = Command::new(script)
            .arg("start")
            .env("SLUICE_ICEBERG_REST_DIR", dir)
            .env("SLUICE_ICEBERG_REST_PORT", free_port())
            .env(
                "SLUICE_SERVICES",
                crate::object_stores::service::services_root(),
            )
            .env(
                "SLUICE_ICEBERG_REST_EXIT_WITH",
                std::process::id().to_string(),
            )
            .output()
            .expect("run tests/services/iceberg-rest.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "iceberg-rest.sh start failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("SLUICE_ICEBERG_REST_URL="))
            .expect("iceberg-rest.sh printed its URL")
            .to_string()
    })
}

/// The metastore over the fixtures' state, started once for this test
/// binary (it stops when the binary exits); its URI.
fn hive_metastore() -> &'static str {
    static URI: OnceLock<String> = OnceLock::new();
    URI.get_or_init(|| {
        let dir = expected()["hive"]["dir"].as_str().expect("hive.dir");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/hive-metastore.sh");
        let out = Command::new(script)
            .arg("start")
            .env("SLUICE_HIVE_METASTORE_DIR", dir)
            .env("SLUICE_HIVE_METASTORE_PORT", free_port())
            .env(
                "SLUICE_SERVICES",
                crate::object_stores::service::services_root(),
            )
            .env(
                "SLUICE_HIVE_METASTORE_EXIT_WITH",
                std::process::id().to_string(),
            )
            .output()
            .expect("run tests/services/hive-metastore.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "hive-metastore.sh start failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("SLUICE_HIVE_METASTORE_URI="))
            .expect("hive-metastore.sh printed its URI")
            .to_string()
    })
}

fn hive_table(name: &str) -> &'static Value {
    &expected()["hive"]["tables"][name]
}

fn rest_table(name: &str) -> &'static Value {
    &expected()["rest"]["tables"][name]
}

fn ids_of(value: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> = value
        .as_array()
        .expect("an id list")
        .iter()
        .map(|v| v.as_i64().expect("an integer id"))
        .collect();
    ids.sort();
    ids
}

/// `sluice ls NAME --catalog URI --json` and extra arguments.
fn ls(name: &str, catalog: &str, extra: &[&str]) -> common::Run {
    let mut args = vec!["ls", name, "--catalog", catalog, "--json"];
    args.extend_from_slice(extra);
    sluice(&args)
}

/// Trains on `name` with a recording trainer; the ids delivered, sorted, and
/// how many were delivered more than once.
fn train_ids(name: &str, catalog: &str, extra: &[&str]) -> (Vec<i64>, usize) {
    let out = tempfile::tempdir().expect("tempdir");
    let exec = recorder(out.path(), "");
    let mut args = vec![
        "train",
        name,
        "--catalog",
        catalog,
        "--exec",
        &exec,
        "--devices",
        "2",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    sluice(&args).success();
    let counts = recorded_ids(out.path(), "ids-");
    let twice = counts.values().filter(|&&n| n > 1).count();
    let mut ids: Vec<i64> = counts.into_keys().collect();
    ids.sort();
    (ids, twice)
}

#[test]
fn rest_ls_counts_what_spark_counts_from_the_current_snapshot() {
    let catalog = rest_catalog();
    for name in ["ads.clicks", "ads.events"] {
        let listed = ls(name, catalog, &[]).success().json();
        let want = rest_table(name)["count"].as_u64().expect("count");
        assert_eq!(listed["rows"].as_u64(), Some(want), "{name}: {listed}");
        assert_eq!(listed["catalog"]["table"], name);
        assert_eq!(listed["catalog"]["format"], "iceberg");
        assert_eq!(listed["table"]["kind"], "iceberg");
    }
    // The stray metadata file numbered above the current one is what a
    // listing of the directory reads; the catalog's pointer is not.
    let events = rest_table("ads.events");
    let stray = events["stray_count"].as_u64().expect("stray_count");
    assert_ne!(stray, events["count"].as_u64().expect("count"));
    let location = ls("ads.events", catalog, &[]).success().json()["catalog"]["location"]
        .as_str()
        .expect("location")
        .to_string();
    let by_dir = sluice(["ls", location.as_str(), "--json"]).success().json();
    assert_eq!(
        by_dir["rows"].as_u64(),
        Some(stray),
        "the directory reads the stray file"
    );
}

#[test]
fn rest_train_delivers_exactly_sparks_ids() {
    let catalog = rest_catalog();
    for name in ["ads.clicks", "ads.events"] {
        let (ids, twice) = train_ids(name, catalog, &[]);
        assert_eq!(twice, 0, "{name}: ids delivered twice");
        assert_eq!(ids, ids_of(&rest_table(name)["ids"]), "{name}");
    }
}

#[test]
fn rest_catalog_from_the_environment_and_with_client_credentials() {
    let catalog = rest_catalog();
    let run = common::run(
        common::sluice_command(["ls", "ads.clicks", "--json"]).env("SLUICE_CATALOG", catalog),
    )
    .success();
    assert_eq!(run.json()["rows"], rest_table("ads.clicks")["count"]);
    // The reference server's token endpoint grants any client a token.
    let dir = tempfile::tempdir().expect("tempdir");
    let credential = credential_file(dir.path(), "trainer:s3cret");
    let run = ls(
        "ads.clicks",
        catalog,
        &["--catalog-credential-file", &credential],
    )
    .success();
    assert_eq!(run.json()["rows"], rest_table("ads.clicks")["count"]);
    assert!(!run.stderr.contains("s3cret"), "{run}");
}

#[test]
fn rest_wrong_names_are_one_line_errors_naming_close_matches() {
    let catalog = rest_catalog();
    let run = ls("ads.clickz", catalog, &[]);
    assert_one_line_error(&run, &[catalog, "ads.clickz", "ads.clicks"]);
    assert_eq!(run.status.code(), Some(64), "{run}");
    let run = ls("adz.clicks", catalog, &[]);
    assert_one_line_error(&run, &[catalog, "namespace `adz`", "ads"]);
    let run = ls("clicks", catalog, &[]);
    assert_one_line_error(&run, &["clicks", "namespace.table"]);
    let run = ls("ads.clicks", "ftp://127.0.0.1:1", &[]);
    assert_one_line_error(&run, &["--catalog", "\"ftp://127.0.0.1:1\"", "thrift://"]);
}

#[test]
fn a_catalog_that_is_down_fails_at_once() {
    // A port nothing listens on: taken, then let go.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let uri = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let run = ls("ads.clicks", &uri, &[]);
    assert_one_line_error(&run, &[&uri, "cannot be reached"]);
    assert_eq!(run.status.code(), Some(1), "{run}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

/// The request line and headers a client sent on `stream` (up to the blank
/// line, 16 KiB at most, 5 s at most): one `read` may return only the start
/// of them on a loaded machine. Empty if the client sent nothing.
fn read_head(stream: &mut std::net::TcpStream) -> String {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A catalog that refuses every token, as a real one does once a token has
/// expired (the reference server checks none): answers 401 with an Iceberg
/// error body to each request, for a bounded number of requests.
fn refusing_catalog() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let uri = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { continue };
            let _ = read_head(&mut stream);
            let body = r#"{"error":{"message":"Token expired","type":"NotAuthorizedException","code":401}}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    uri
}

#[test]
fn an_expired_token_is_a_one_line_error() {
    let uri = refusing_catalog();
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "expired-token-value\n").expect("write token");
    let token = token.display().to_string();
    let run = ls("ads.clicks", &uri, &["--catalog-token-file", &token]);
    assert_one_line_error(
        &run,
        &[&uri, "refused the credentials", "401", "Token expired"],
    );
    assert!(!run.stderr.contains("expired-token-value"), "{run}");
}

/// A REST catalog that vends storage credentials with every table it
/// loads: `metadata_location` as the table's current metadata, the secrets
/// below, and an expiry `expires_in_ms` from each answer. Counts the loads.
fn vending_catalog(
    metadata_location: Arc<Mutex<String>>,
    extra: serde_json::Map<String, Value>,
    expires_in_ms: i64,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let (uri, loads, _) = vending_catalog_with(metadata_location, extra, expires_in_ms, None);
    (uri, loads)
}

/// [`vending_catalog`], and with `token_life` an OAuth2 token endpoint
/// (`/v1/oauth/tokens`) whose tokens live that long: a table load with a
/// token older than that is refused (401), as a real catalog refuses an
/// expired token. Also counts the tokens granted and the loads refused.
fn vending_catalog_with(
    metadata_location: Arc<Mutex<String>>,
    extra: serde_json::Map<String, Value>,
    expires_in_ms: i64,
    token_life: Option<Duration>,
) -> (
    String,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<[std::sync::atomic::AtomicUsize; 2]>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let uri = format!("http://{}", listener.local_addr().expect("addr"));
    let loads = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = loads.clone();
    // [tokens granted, loads refused]
    let tokens = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let granted = tokens.clone();
    std::thread::spawn(move || {
        let mut issued: std::collections::HashMap<String, Instant> = Default::default();
        for stream in listener.incoming().take(2000) {
            let Ok(mut stream) = stream else { continue };
            let request = read_head(&mut stream);
            if request.is_empty() {
                // A client that went away before it asked anything.
                continue;
            }
            let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
            let bearer = request
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("authorization")
                        .then(|| value.trim().trim_start_matches("Bearer ").to_string())
                })
                .unwrap_or_default();
            if let (Some(life), true) = (token_life, path == "/v1/oauth/tokens") {
                let n = granted[0].fetch_add(1, Ordering::SeqCst);
                let token = format!("granted-token-{n}");
                issued.insert(token.clone(), Instant::now());
                let body = serde_json::json!({
                    "access_token": token,
                    "token_type": "bearer",
                    "expires_in": life.as_secs(),
                })
                .to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                continue;
            }
            let expired = token_life.is_some_and(|life| {
                path != "/v1/config" && issued.get(&bearer).is_none_or(|at| at.elapsed() > life)
            });
            if expired {
                granted[1].fetch_add(1, Ordering::SeqCst);
                let body = r#"{"error":{"message":"Token expired","type":"NotAuthorizedException","code":401}}"#;
                let _ = write!(
                    stream,
                    "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                continue;
            }
            let body = if path == "/v1/config" {
                r#"{"defaults":{},"overrides":{}}"#.to_string()
            } else {
                counted.fetch_add(1, Ordering::SeqCst);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock")
                    .as_millis() as i64;
                let mut config = serde_json::Map::new();
                for (k, v) in [
                    ("s3.access-key-id", "AKIAVENDEDKEYID"),
                    ("s3.secret-access-key", "vended-s3-secret-value"),
                    ("s3.session-token", "vended-s3-session-token"),
                    (
                        "adls.sas-token.acct.dfs.core.windows.net",
                        "sv=1&sig=vended-sas-sig",
                    ),
                    ("gcs.oauth2.token", "vended-gcs-oauth-token"),
                ] {
                    config.insert(k.to_string(), Value::from(v));
                }
                config.insert(
                    "s3.session-token-expires-at-ms".to_string(),
                    Value::from((now + expires_in_ms).to_string()),
                );
                config.extend(extra.clone());
                let metadata_location = metadata_location
                    .lock()
                    .map(|m| m.clone())
                    .unwrap_or_default();
                serde_json::json!({
                    "metadata-location": metadata_location,
                    "metadata": {"location": "s3://vended/ads/clicks"},
                    "config": config,
                })
                .to_string()
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (uri, loads, tokens)
}

/// The current metadata file of `ads.clicks` as Spark left it.
fn current_metadata(clicks: &Value) -> String {
    clicks["metadata_location"]
        .as_str()
        .expect("metadata_location")
        .to_string()
}

/// The metadata file (a `file://` URL) of Spark's first append to
/// `ads.clicks`: ids 0..18.
fn first_append_metadata(clicks: &Value) -> String {
    let dir = Path::new(clicks["location"].as_str().expect("location")).join("metadata");
    let first = std::fs::read_dir(&dir)
        .expect("list metadata")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("00001-"))
        })
        .expect("the first append's metadata file");
    format!("file://{}", first.display())
}

/// Whether `text` shows any of the vending catalog's secrets.
fn shows_a_secret(text: &str) -> bool {
    [
        "AKIAVENDEDKEYID",
        "vended-s3-secret-value",
        "vended-s3-session-token",
        "vended-sas-sig",
        "vended-gcs-oauth-token",
    ]
    .iter()
    .any(|s| text.contains(s))
}

#[test]
fn vended_credentials_are_refreshed_before_they_expire_and_never_shown() {
    use std::sync::atomic::Ordering;
    let clicks = rest_table("ads.clicks");
    let metadata = current_metadata(clicks);
    // Each answer's credentials expire three seconds later: loaded again
    // about every 1.5 s while the job runs.
    let (uri, loads) = vending_catalog(Arc::new(Mutex::new(metadata)), Default::default(), 3_000);
    let run = common::run(
        common::sluice_command(["ls", "ads.clicks", "--catalog", &uri, "--json"])
            .env("RUST_LOG", "debug"),
    )
    .success();
    assert_eq!(run.json()["rows"], clicks["count"], "{run}");
    assert!(!shows_a_secret(&run.stdout), "{}", run.stdout);
    assert!(!shows_a_secret(&run.stderr), "{}", run.stderr);
    let before = loads.load(Ordering::SeqCst);
    let out = tempfile::tempdir().expect("tempdir");
    let exec = recorder(out.path(), "--sleep 4");
    let run = common::run(
        common::sluice_command([
            "train",
            "ads.clicks",
            "--catalog",
            &uri,
            "--exec",
            &exec,
            "--devices",
            "1",
            "--batch-size",
            "30",
        ])
        .env("RUST_LOG", "sluice=debug"),
    )
    .success();
    assert!(!shows_a_secret(&run.stdout), "{}", run.stdout);
    assert!(!shows_a_secret(&run.stderr), "{}", run.stderr);
    assert!(
        loads.load(Ordering::SeqCst) - before >= 2,
        "the table was not loaded again before its credentials expired: {run}"
    );
    assert!(
        run.stderr.contains("vended storage credentials refreshed"),
        "{run}"
    );
}

/// Client credentials: the token the catalog grants lives 2 s, the vended
/// storage credentials 3 s, and the job runs for longer than both. The
/// table is loaded again with a token exchanged again, never one refused.
#[test]
fn a_token_from_client_credentials_is_exchanged_again_before_it_expires() {
    use std::sync::atomic::Ordering;
    let clicks = rest_table("ads.clicks");
    let metadata = current_metadata(clicks);
    let (uri, loads, tokens) = vending_catalog_with(
        Arc::new(Mutex::new(metadata)),
        Default::default(),
        3_000,
        Some(Duration::from_secs(2)),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let credential = credential_file(dir.path(), "trainer:client-s3cret");
    let exec = recorder(dir.path(), "--sleep 5");
    let run = common::run(
        common::sluice_command([
            "train",
            "ads.clicks",
            "--catalog",
            &uri,
            "--catalog-credential-file",
            &credential,
            "--exec",
            &exec,
            "--devices",
            "1",
            "--batch-size",
            "30",
        ])
        .env("RUST_LOG", "sluice=debug"),
    )
    .success();
    assert!(!run.stderr.contains("client-s3cret"), "{run}");
    assert!(!run.stderr.contains("granted-token-"), "{run}");
    assert!(
        loads.load(Ordering::SeqCst) >= 3,
        "the table was not loaded again while the job ran: {run}"
    );
    assert!(
        tokens[0].load(Ordering::SeqCst) >= 2,
        "the token was never exchanged again: {run}"
    );
    assert_eq!(
        tokens[1].load(Ordering::SeqCst),
        0,
        "a load was refused for an expired token: {run}"
    );
    assert!(
        !run.stderr
            .contains("cannot refresh the vended storage credentials"),
        "{run}"
    );
}

#[test]
fn a_store_refusing_vended_credentials_never_shows_them() {
    // Nothing listens at the vended endpoint.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut extra = serde_json::Map::new();
    extra.insert(
        "s3.endpoint".to_string(),
        Value::from(format!("http://127.0.0.1:{port}")),
    );
    extra.insert("client.region".to_string(), Value::from("us-east-1"));
    let (uri, _) = vending_catalog(
        Arc::new(Mutex::new(
            "s3://vended/ads/clicks/metadata/00001-x.metadata.json".to_string(),
        )),
        extra,
        3_600_000,
    );
    let run = common::run(
        common::sluice_command(["ls", "ads.clicks", "--catalog", &uri, "--json"])
            .env("RUST_LOG", "debug"),
    );
    assert!(!run.status.success(), "{run}");
    assert!(run.stdout.trim().is_empty(), "{run}");
    assert!(!shows_a_secret(&run.stderr), "{}", run.stderr);
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("sluice: "), "{run}");
    assert!(last.contains("s3://vended/ads/clicks"), "{run}");
}

#[test]
fn where_keeps_the_directory_partitions_that_match() {
    let dataset = common::expected_dataset("parquet_partitioned");
    let rows = dataset["partitions"].as_object().expect("partitions");
    let values = dataset["partition_values"]
        .as_object()
        .expect("partition_values");
    let want: u64 = rows
        .iter()
        .filter(|(dir, _)| {
            let v = &values[dir.as_str()];
            v["country"] == "BR" && !v["city"].is_null()
        })
        .map(|(_, n)| n.as_u64().expect("rows"))
        .sum();
    assert!(want > 0);
    let dir = common::fixture("parquet_partitioned").display().to_string();
    let listed = sluice([
        "ls",
        dir.as_str(),
        "--json",
        "--where",
        "country = 'BR' AND NOT (city IS NULL)",
    ])
    .success()
    .json();
    assert_eq!(listed["rows"].as_u64(), Some(want), "{listed}");
    let run = sluice(["ls", dir.as_str(), "--where", "label = 1"]);
    assert_one_line_error(
        &run,
        &["`label` is not a partition column", "country, city"],
    );
    assert_eq!(run.status.code(), Some(64), "{run}");
}

/// `--where` on Iceberg tables by name keeps what Spark's `WHERE` keeps,
/// pruned on the manifests' partition tuples: `ls` rows and `train` ids.
fn iceberg_where_matches_spark(name: &str, catalog: &str, expected: &Value) {
    let cases = expected["where"].as_object().expect("where");
    assert!(!cases.is_empty(), "{name}: no where cases");
    for (filter, want) in cases {
        let want = ids_of(want);
        let listed = ls(name, catalog, &["--where", filter]).success().json();
        assert_eq!(
            listed["rows"].as_u64(),
            Some(want.len() as u64),
            "{name} --where {filter}: {listed}"
        );
    }
    let (filter, want) = cases.iter().next().expect("a case");
    let (ids, twice) = train_ids(name, catalog, &["--where", filter]);
    assert_eq!(twice, 0, "{name} --where {filter}: ids delivered twice");
    assert_eq!(ids, ids_of(want), "{name}: train --where {filter}");
}

#[test]
fn rest_where_keeps_what_sparks_where_keeps() {
    let catalog = rest_catalog();
    for name in ["ads.clicks", "ads.logs"] {
        iceberg_where_matches_spark(name, catalog, rest_table(name));
    }
}

#[test]
fn where_on_an_iceberg_table_in_the_metastore_keeps_what_sparks_where_keeps() {
    let hms = hive_metastore();
    let name = "web.clicks_iceberg";
    let listed = ls(name, hms, &[]).success().json();
    assert_eq!(listed["catalog"]["format"], "iceberg", "{listed}");
    assert_eq!(listed["rows"], hive_table(name)["count"], "{listed}");
    iceberg_where_matches_spark(name, hms, hive_table(name));
}

#[test]
fn where_on_an_iceberg_transform_or_data_column_is_refused_by_name() {
    let catalog = rest_catalog();
    // ads.logs is partitioned by country, days(ts) and bucket(4, id).
    let run = ls("ads.logs", catalog, &["--where", "ts >= '2026-11-02'"]);
    assert_one_line_error(&run, &["--where", "`ts`", "day(ts)", "country"]);
    assert_eq!(run.status.code(), Some(64), "{run}");
    let run = ls(
        "ads.logs",
        catalog,
        &["--where", "country = 'BR' AND id = 3"],
    );
    assert_one_line_error(&run, &["`id`", "bucket[4](id)"]);
    let run = ls("ads.logs", catalog, &["--where", "n = 3"]);
    assert_one_line_error(&run, &["`n` is not a partition column", "country"]);
    assert_eq!(run.status.code(), Some(64), "{run}");
    let run = ls("ads.events", catalog, &["--where", "n = 3"]);
    assert_one_line_error(&run, &["`n` is not a partition column"]);
}

/// Runs the job file on `name` in `catalog` (with `extra` keys) twice: the
/// first run's report and ids, the second run's report, and the recorded source.
fn run_twice(name: &str, catalog: &str, extra: &str) -> (Value, Vec<i64>, usize, Value, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ids = dir.path().join("ids");
    std::fs::create_dir(&ids).expect("mkdir");
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "source = \"{name}\"\ncatalog = \"{catalog}\"\nstate = \"state\"\nexec = \"{}\"\n{extra}",
            recorder(&ids, "")
        ),
    )
    .expect("write job");
    let job = job.display().to_string();
    let first = sluice(["run", job.as_str(), "--json"]).success().json();
    let counts = recorded_ids(&ids, "ids-");
    let twice = counts.values().filter(|&&n| n > 1).count();
    let mut got: Vec<i64> = counts.into_keys().collect();
    got.sort();
    let second = sluice(["run", job.as_str(), "--json"]).success().json();
    let trained = std::fs::read_to_string(dir.path().join("state/trained.json")).expect("state");
    let trained = parse_json(&trained, "trained.json");
    (first, got, twice, second, trained["source"].clone())
}

#[test]
fn run_by_name_trains_each_hive_partition_once() {
    let hms = hive_metastore();
    let (first, ids, twice, second, source) = run_twice("web.clicks", hms, "");
    assert_eq!(first["rows"], hive_table("web.clicks")["count"], "{first}");
    assert_eq!(ids, ids_of(&hive_table("web.clicks")["ids"]));
    assert_eq!(twice, 0);
    assert_eq!(second["rows"], 0, "{second}");
    assert_eq!(second["trained_before"], 3, "{second}");
    assert_eq!(source, format!("{hms}#web.clicks"));
    // `where` in the job file: only the partitions it keeps.
    // Partition dt=2026-11-04 lies outside the table's root.
    let filter = "dt >= '2026-11-02'";
    let want = &hive_table("web.clicks")["where"][filter];
    assert!(!ids_of(want).is_empty());
    let (_, ids, _, _, _) = run_twice("web.clicks", hms, &format!("where = \"{filter}\"\n"));
    assert_eq!(ids, ids_of(want), "where = {filter}");
}

#[test]
fn run_by_name_with_where_on_an_iceberg_table() {
    let catalog = rest_catalog();
    let filter = "dt IN ('2026-11-01', '2026-11-03')";
    let want = ids_of(&rest_table("ads.clicks")["where"][filter]);
    assert!(!want.is_empty());
    let (first, ids, twice, second, source) =
        run_twice("ads.clicks", catalog, &format!("where = \"{filter}\"\n"));
    assert_eq!(first["rows"], want.len(), "{first}");
    assert_eq!(ids, want, "where = {filter}");
    assert_eq!(twice, 0);
    assert_eq!(second["rows"], 0, "{second}");
    assert_eq!(source, format!("{catalog}#ads.clicks"));
}

#[test]
fn run_by_name_trains_the_table_once_and_records_catalog_and_table() {
    let catalog = rest_catalog();
    let dir = tempfile::tempdir().expect("tempdir");
    let ids = dir.path().join("ids");
    std::fs::create_dir(&ids).expect("mkdir");
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "source = \"ads.clicks\"\ncatalog = \"{catalog}\"\nstate = \"state\"\nexec = \"{}\"\n",
            recorder(&ids, "")
        ),
    )
    .expect("write job");
    let job = job.display().to_string();
    let first = sluice(["run", job.as_str(), "--json"]).success().json();
    assert_eq!(first["rows"], rest_table("ads.clicks")["count"], "{first}");
    let counts = recorded_ids(&ids, "ids-");
    let mut got: Vec<i64> = counts.keys().copied().collect();
    got.sort();
    assert_eq!(got, ids_of(&rest_table("ads.clicks")["ids"]));
    assert!(counts.values().all(|&n| n == 1), "an id trained twice");
    let second = sluice(["run", job.as_str(), "--json"]).success().json();
    assert_eq!(second["rows"], 0, "{second}");
    let trained = std::fs::read_to_string(dir.path().join("state/trained.json")).expect("state");
    let trained = parse_json(&trained, "trained.json");
    assert_eq!(trained["source"], format!("{catalog}#ads.clicks"));
}

#[test]
fn hive_ls_counts_the_partitions_the_metastore_lists() {
    let hms = hive_metastore();
    for name in ["web.clicks", "web.views"] {
        let listed = ls(name, hms, &[]).success().json();
        let want = hive_table(name)["count"].as_u64().expect("count");
        assert_eq!(listed["rows"].as_u64(), Some(want), "{name}: {listed}");
        assert_eq!(listed["catalog"]["table"], name);
    }
    let clicks = hive_table("web.clicks");
    let listed = ls("web.clicks", hms, &[]).success().json();
    assert_eq!(listed["format"], "parquet");
    let outside = clicks["outside"].as_str().expect("outside");
    let marked: Vec<&str> = listed["catalog"]["outside_root"]
        .as_array()
        .expect("outside_root")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(marked.len(), 1, "{listed}");
    assert!(marked[0].ends_with(outside), "{marked:?}");
    let text = sluice(["ls", "web.clicks", "--catalog", hms])
        .success()
        .stdout;
    assert!(text.contains("outside the table root"), "{text}");
    // The dropped partition's directory is still there; the metastore does
    // not list it, so it is not read.
    let dropped = clicks["dropped_dir"].as_str().expect("dropped_dir");
    assert!(Path::new(dropped).is_dir(), "{dropped} should still exist");
    let views = ls("web.views", hms, &[]).success().json();
    assert_eq!(views["format"], "orc");
}

#[test]
fn an_iceberg_table_in_the_metastore_reads_its_metadata_location() {
    let hms = hive_metastore();
    let listed = ls("web.events", hms, &[]).success().json();
    assert_eq!(listed["catalog"]["format"], "iceberg", "{listed}");
    assert_eq!(listed["table"]["kind"], "iceberg", "{listed}");
    let events = hive_table("web.events");
    // Not the stray newer metadata file in the same directory.
    assert_eq!(listed["rows"], events["count"], "{listed}");
    let (ids, _) = train_ids("web.events", hms, &[]);
    assert_eq!(ids, ids_of(&events["ids"]));
}

#[test]
fn hive_train_delivers_exactly_sparks_ids() {
    let hms = hive_metastore();
    for name in ["web.clicks", "web.views"] {
        let (ids, twice) = train_ids(name, hms, &[]);
        assert_eq!(twice, 0, "{name}: ids delivered twice");
        assert_eq!(ids, ids_of(&hive_table(name)["ids"]), "{name}");
    }
}

#[test]
fn hive_where_keeps_what_sparks_where_keeps() {
    let hms = hive_metastore();
    for name in ["web.clicks", "web.views"] {
        let cases = hive_table(name)["where"].as_object().expect("where");
        for (filter, want) in cases {
            let listed = ls(name, hms, &["--where", filter]).success().json();
            let want = ids_of(want);
            assert_eq!(
                listed["rows"].as_u64(),
                Some(want.len() as u64),
                "{name} --where {filter}: {listed}"
            );
        }
    }
    // Partition dt=2026-11-04 lies outside the table's root.
    let filter = "dt >= '2026-11-02'";
    let want = &hive_table("web.clicks")["where"][filter];
    assert!(!ids_of(want).is_empty());
    let (ids, _) = train_ids("web.clicks", hms, &["--where", filter]);
    assert_eq!(ids, ids_of(want), "train --where {filter}");
    let run = ls("web.clicks", hms, &["--where", "n = 3"]);
    assert_one_line_error(&run, &["`n` is not a partition column", "dt"]);
}

/// The values of column `n` a recording trainer was handed for `name`:
/// how many were null, and the sum of the others.
fn column_n(name: &str, catalog: &str) -> (u64, i64) {
    let out = tempfile::tempdir().expect("tempdir");
    let exec = recorder(out.path(), "--column n");
    sluice([
        "train",
        name,
        "--catalog",
        catalog,
        "--exec",
        &exec,
        "--quiet",
    ])
    .success();
    let (mut nulls, mut sum) = (0, 0);
    for entry in std::fs::read_dir(out.path()).expect("list") {
        let path = entry.expect("entry").path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("ids-"))
        {
            continue;
        }
        for line in std::fs::read_to_string(&path).expect("read").lines() {
            match line.trim() {
                "None" => nulls += 1,
                v => sum += v.parse::<i64>().expect("an integer n"),
            }
        }
    }
    (nulls, sum)
}

#[test]
fn hive_text_tables_are_split_at_their_delimiters() {
    let hms = hive_metastore();
    // FIELDS TERMINATED BY ',' (partitioned), Hive's default ^A, and one
    // whose skip.header.line.count Spark does not apply (nor does sluice).
    for name in ["web.lines", "web.lines_default", "web.lines_header"] {
        let table = hive_table(name);
        let listed = ls(name, hms, &[]).success().json();
        assert_eq!(listed["format"], "text", "{name}: {listed}");
        assert_eq!(listed["rows"], table["count"], "{name}: {listed}");
        let (ids, twice) = train_ids(name, hms, &[]);
        assert_eq!(twice, 0, "{name}: ids delivered twice");
        assert_eq!(ids, ids_of(&table["ids"]), "{name}");
        // `\N` is null; the other fields parse as the column's type.
        let (nulls, sum) = column_n(name, hms);
        assert_eq!(Some(nulls), table["null_n"].as_u64(), "{name}: nulls in n");
        assert_eq!(Some(sum), table["sum_n"].as_i64(), "{name}: sum of n");
    }
    let cases = hive_table("web.lines")["where"].as_object().expect("where");
    for (filter, want) in cases {
        let listed = ls("web.lines", hms, &["--where", filter]).success().json();
        assert_eq!(
            listed["rows"].as_u64(),
            Some(ids_of(want).len() as u64),
            "web.lines --where {filter}: {listed}"
        );
    }
}

#[test]
fn a_csv_serde_table_keeps_quoted_separators_in_their_fields() {
    let hms = hive_metastore();
    let table = hive_table("web.csv_lines");
    let listed = ls("web.csv_lines", hms, &[]).success().json();
    assert_eq!(listed["catalog"]["format"], "csv", "{listed}");
    assert_eq!(listed["rows"], table["count"], "{listed}");
    let (ids, twice) = train_ids("web.csv_lines", hms, &[]);
    assert_eq!(twice, 0);
    assert_eq!(ids, ids_of(&table["ids"]));
    // `s` comes first and holds the separator and quotes.
    let out = tempfile::tempdir().expect("tempdir");
    let exec = recorder(out.path(), "--column s");
    sluice([
        "train",
        "web.csv_lines",
        "--catalog",
        hms,
        "--exec",
        &exec,
        "--quiet",
    ])
    .success();
    let mut got: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(out.path()).expect("list") {
        let path = entry.expect("entry").path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("ids-"))
        {
            let text = std::fs::read_to_string(&path).expect("read");
            got.extend(text.lines().map(str::to_string));
        }
    }
    got.sort();
    let want: Vec<String> = table["s"]
        .as_array()
        .expect("s")
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect();
    assert_eq!(got, want);
}

/// Every row `sluice train NAME --catalog URI` hands a trainer, every
/// column, as tests/trainers/row_dump.py writes them, sorted by id.
fn trained_rows(name: &str, catalog: &str, extra: &[&str]) -> Vec<Value> {
    let out = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/row_dump.py");
    let exec = format!(
        "{} {} --out {}",
        common::python(),
        script.display(),
        out.path().display()
    );
    let mut args = vec![
        "train",
        name,
        "--catalog",
        catalog,
        "--exec",
        &exec,
        "--devices",
        "2",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    sluice(&args).success();
    let mut rows: Vec<Value> = Vec::new();
    for entry in std::fs::read_dir(out.path()).expect("list trainer output") {
        let path = entry.expect("list trainer output").path();
        let text = std::fs::read_to_string(&path).expect("read rows");
        rows.extend(text.lines().map(|line| parse_json(line, "a dumped row")));
    }
    rows.sort_by_key(|r| r["id"].as_i64());
    rows
}

/// Hive's older formats by name: what Spark SQL wrote through
/// LazyBinaryColumnarSerDe (its RCFile default), ColumnarSerDe with
/// zlib-compressed columns, and LazySimpleSerDe rows in a SequenceFile.
const OLD_FORMAT_TABLES: [(&str, &str); 3] = [
    ("web.rc_logs", "rcfile"),
    ("web.rc_text", "rcfile"),
    ("web.seq_lines", "sequencefile"),
];

/// What `ls` says of an RCFile table's files besides their format.
fn rcfile_detail(name: &str) -> Option<&'static str> {
    match name {
        "web.rc_logs" => Some("binary columnar"),
        "web.rc_text" => Some("columnar, deflate"),
        _ => None,
    }
}

#[test]
fn rcfile_and_sequencefile_tables_train_by_name_as_spark_reads_them() {
    let hms = hive_metastore();
    assert_eq!(
        hive_table("web.rc_text")["compressed"],
        true,
        "zlib columns"
    );
    for (name, format) in OLD_FORMAT_TABLES {
        let table = hive_table(name);
        let listed = ls(name, hms, &[]).success().json();
        assert_eq!(listed["format"], format, "{name}: {listed}");
        assert_eq!(listed["catalog"]["format"], format, "{name}: {listed}");
        assert_eq!(listed["rows"], table["count"], "{name}: {listed}");
        let (ids, twice) = train_ids(name, hms, &[]);
        assert_eq!(twice, 0, "{name}: ids delivered twice");
        assert_eq!(ids, ids_of(&table["ids"]), "{name}");
        if let Some(detail) = rcfile_detail(name) {
            assert_eq!(listed["format_detail"], detail, "{name}: {listed}");
            let text = sluice(["ls", name, "--catalog", hms]).success().stdout;
            assert!(text.contains(&format!("rcfile ({detail})")), "{text}");
        }
        // Every value of every row Spark wrote (web.rc_logs: its first 60).
        let want = table["rows"].as_array().expect("rows");
        let last = want.last().and_then(|r| r["id"].as_i64()).expect("an id");
        let got: Vec<Value> = trained_rows(name, hms, &[])
            .into_iter()
            .filter(|r| r["id"].as_i64().is_some_and(|id| id <= last))
            .collect();
        assert_eq!(got.len(), want.len(), "{name}");
        for (got, want) in got.iter().zip(want) {
            assert_eq!(got, want, "{name}");
        }
    }
}

#[test]
fn rcfile_splits_start_and_end_at_sync_markers() {
    let hms = hive_metastore();
    let table = hive_table("web.rc_logs");
    let whole = ls("web.rc_logs", hms, &[]).success().json();
    let cut = ls("web.rc_logs", hms, &["--split-size", "3000"])
        .success()
        .json();
    let (whole_tasks, cut_tasks) = (whole["tasks"].as_u64(), cut["tasks"].as_u64());
    assert!(
        cut_tasks > whole_tasks.map(|n| n + 20),
        "{whole_tasks:?} then {cut_tasks:?}"
    );
    let (ids, twice) = train_ids("web.rc_logs", hms, &["--split-size", "3000"]);
    assert_eq!(twice, 0, "ids delivered twice");
    assert_eq!(ids, ids_of(&table["ids"]));
}

#[test]
fn where_and_filter_on_rcfile_and_sequencefile_tables_keep_what_spark_keeps() {
    let hms = hive_metastore();
    for name in ["web.rc_logs", "web.seq_lines"] {
        let cases = hive_table(name)["where"].as_object().expect("where");
        for (filter, want) in cases {
            let listed = ls(name, hms, &["--where", filter]).success().json();
            let want = ids_of(want);
            assert_eq!(
                listed["rows"].as_u64(),
                Some(want.len() as u64),
                "{name} --where {filter}: {listed}"
            );
        }
        let filter = "dt >= '2026-11-02'";
        let (ids, _) = train_ids(name, hms, &["--where", filter]);
        assert_eq!(
            ids,
            ids_of(&hive_table(name)["where"][filter]),
            "{name} --where {filter}"
        );
    }
    // Data columns, typed by the table: a row filter.
    let cases = hive_table("web.rc_logs")["filter"]
        .as_object()
        .expect("filter");
    for (filter, want) in cases {
        let (ids, twice) = train_ids("web.rc_logs", hms, &["--filter", filter]);
        assert_eq!(twice, 0);
        assert_eq!(ids, ids_of(want), "--filter {filter}");
    }
}

#[test]
fn an_rcfile_directory_without_its_table_reads_strings() {
    let table = hive_table("web.rc_text");
    let dir = table["location"].as_str().expect("location");
    let listed = sluice(["ls", dir, "--json"]).success().json();
    assert_eq!(listed["format"], "rcfile", "{listed}");
    assert_eq!(listed["rows"], table["count"], "{listed}");
    let schema: Vec<(&str, &str)> = listed["schema"]
        .as_array()
        .expect("schema")
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap_or(""),
                f["type"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(schema.len(), 9, "{listed}");
    assert_eq!(schema[0], ("_col0", "Utf8"));
    assert!(schema.iter().all(|(_, ty)| *ty == "Utf8"), "{schema:?}");
    // ColumnarSerDe's fields are text: the ids as Spark wrote them.
    let out = tempfile::tempdir().expect("tempdir");
    let exec = recorder(out.path(), "--column _col0");
    sluice(["train", dir, "--exec", &exec, "--quiet"]).success();
    let counts = recorded_ids(out.path(), "ids-");
    let mut ids: Vec<i64> = counts.keys().copied().collect();
    ids.sort();
    assert!(counts.values().all(|&n| n == 1));
    assert_eq!(ids, ids_of(&table["ids"]));
}

#[test]
fn a_metastore_that_requires_sasl_is_a_one_line_error_saying_so() {
    // A SASL (or framed) metastore reads a plain Thrift call as a bad
    // handshake and hangs up.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let uri = format!("thrift://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 5];
            let _ = stream.read_exact(&mut buf);
        }
    });
    let started = Instant::now();
    let run = ls("web.clicks", &uri, &[]);
    assert_one_line_error(&run, &[&uri, "SASL", "closed the connection"]);
    assert!(started.elapsed() < Duration::from_secs(10), "{run}");
}

#[test]
fn hive_wrong_names_are_one_line_errors_naming_close_matches() {
    let hms = hive_metastore();
    let run = ls("web.clickz", hms, &[]);
    assert_one_line_error(&run, &[hms, "web.clickz", "web.clicks"]);
    assert_eq!(run.status.code(), Some(64), "{run}");
    let run = ls("wbe.clicks", hms, &[]);
    assert_one_line_error(&run, &[hms, "namespace `wbe`", "web"]);
}

/// A `sluice train --follow` of `name` in `catalog` with a recording
/// trainer, running in the background; its stderr goes to `dir/stderr`.
fn follow(name: &str, catalog: &str, dir: &Path) -> std::process::Child {
    let ids = dir.join("ids");
    std::fs::create_dir_all(&ids).expect("mkdir");
    let exec = recorder(&ids, "");
    let stderr = std::fs::File::create(dir.join("stderr")).expect("stderr file");
    common::sluice_command([
        "train",
        name,
        "--catalog",
        catalog,
        "--follow",
        "--poll",
        "1s",
        "--exec",
        &exec,
        "--devices",
        "1",
        "--quiet",
    ])
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(stderr)
    .spawn()
    .expect("start sluice train --follow")
}

/// Waits (at most a minute) until the ids recorded in `dir/ids` are `want`;
/// fails naming what was recorded, and the follower's stderr.
fn wait_for_ids(dir: &Path, want: &[i64], child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let counts = recorded_ids(&dir.join("ids"), "ids-");
        let mut got: Vec<i64> = counts.keys().copied().collect();
        got.sort();
        assert!(
            counts.values().all(|&n| n == 1),
            "an id trained twice: {counts:?}"
        );
        if got == want {
            return;
        }
        let exited = child.try_wait().expect("try_wait");
        if exited.is_some() || Instant::now() > deadline {
            let _ = child.kill();
            let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
            panic!(
                "want ids {want:?}, got {got:?} (follower exited: {exited:?}); stderr:\n{stderr}"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Stops a follower as a scheduler does (SIGTERM), killing it if it lingers.
fn stop(child: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn follow_by_name_trains_each_snapshot_the_catalog_points_to() {
    let clicks = rest_table("ads.clicks");
    // Spark's first append (ids 0..18), then the table as it is now.
    let pointer = Arc::new(Mutex::new(first_append_metadata(clicks)));
    let (uri, _) = vending_catalog(pointer.clone(), Default::default(), 3_600_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = follow("ads.clicks", &uri, dir.path());
    let first_ids: Vec<i64> = (0..18).collect();
    wait_for_ids(dir.path(), &first_ids, &mut child);
    // Newer metadata files in the directory are not the catalog's pointer.
    std::thread::sleep(Duration::from_secs(3));
    wait_for_ids(dir.path(), &first_ids, &mut child);
    *pointer.lock().expect("pointer") = current_metadata(clicks);
    wait_for_ids(dir.path(), &ids_of(&clicks["ids"]), &mut child);
    stop(&mut child);
}

/// A job file with `follow = true` on a table by name: each `sluice run`
/// follows the snapshot the catalog points to until `idle-exit`, and the
/// next run follows on from its journal: every id once over both runs.
#[test]
fn a_job_file_follows_a_table_by_name_across_runs() {
    let clicks = rest_table("ads.clicks");
    // Spark's first append (ids 0..18), then the table as it is now.
    let pointer = Arc::new(Mutex::new(first_append_metadata(clicks)));
    let (uri, _) = vending_catalog(pointer.clone(), Default::default(), 3_600_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let ids = dir.path().join("ids");
    std::fs::create_dir(&ids).expect("mkdir");
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "source = \"ads.clicks\"\ncatalog = \"{uri}\"\nstate = \"state\"\nexec = \"{}\"\n\
             follow = true\npoll = \"500ms\"\nidle-exit = \"2s\"\n",
            recorder(&ids, "")
        ),
    )
    .expect("write job");
    let job = job.display().to_string();
    sluice(["run", job.as_str(), "--json"]).success();
    let counts = recorded_ids(&ids, "ids-");
    let mut got: Vec<i64> = counts.keys().copied().collect();
    got.sort();
    assert_eq!(
        got,
        (0..18).collect::<Vec<i64>>(),
        "the first snapshot's ids"
    );
    // The catalog moves on: the next run takes only what the new snapshot adds.
    *pointer.lock().expect("pointer") = current_metadata(clicks);
    sluice(["run", job.as_str(), "--json"]).success();
    let counts = recorded_ids(&ids, "ids-");
    assert!(
        counts.values().all(|&n| n == 1),
        "an id trained twice: {counts:?}"
    );
    let mut got: Vec<i64> = counts.into_keys().collect();
    got.sort();
    assert_eq!(got, ids_of(&clicks["ids"]));
}

/// Calls `method` of the metastore at `uri` on `web.follow`'s partition `dt`.
fn on_follow_partition(uri: &str, method: &str, dt: &str) {
    use sluice::catalog::thrift::{Arg, Connection};
    let port: u16 = uri
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    let mut conn =
        Connection::connect("127.0.0.1", port, Duration::from_secs(10)).expect("connect");
    let mut args = vec![
        Arg::Str(1, "web".into()),
        Arg::Str(2, "follow".into()),
        Arg::Strings(3, vec![dt.to_string()]),
    ];
    if method == "drop_partition" {
        args.push(Arg::Bool(4, false));
    }
    conn.call(method, &args).expect(method);
}

#[test]
fn follow_by_name_takes_the_partitions_the_metastore_adds() {
    let hms = hive_metastore();
    let table = hive_table("web.follow");
    let root = Path::new(table["location"].as_str().expect("location"));
    let added = "2026-11-02";
    let added_dir = root.join(format!("dt={added}"));
    // What an earlier run may have left.
    on_follow_partition(hms, "drop_partition", added);
    let _ = std::fs::remove_dir_all(&added_dir);
    // The table starts with no partition in the metastore (its one
    // partition's files stay): the follower waits for the first.
    on_follow_partition(hms, "drop_partition", "2026-11-01");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = follow("web.follow", hms, dir.path());
    std::thread::sleep(Duration::from_secs(2));
    wait_for_ids(dir.path(), &[], &mut child);
    on_follow_partition(hms, "append_partition", "2026-11-01");
    let mut want = ids_of(&table["ids"]);
    wait_for_ids(dir.path(), &want, &mut child);
    // A new partition, written as Hive writes one: its files, then the
    // metastore's record (web.clicks's dt=2026-11-03 holds ids 125..133).
    let source = Path::new(
        hive_table("web.clicks")["location"]
            .as_str()
            .expect("location"),
    )
    .join("dt=2026-11-03");
    std::fs::create_dir_all(&added_dir).expect("mkdir");
    for entry in std::fs::read_dir(&source).expect("list") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        if !name.starts_with('.') && !name.starts_with('_') {
            std::fs::copy(&path, added_dir.join(&name)).expect("copy");
        }
    }
    on_follow_partition(hms, "append_partition", added);
    want.extend(125..133);
    want.sort();
    wait_for_ids(dir.path(), &want, &mut child);
    stop(&mut child);
    on_follow_partition(hms, "drop_partition", added);
    let _ = std::fs::remove_dir_all(&added_dir);
}

/// The identity and spec URL recorded in `state/job.json`.
fn recorded_job(state: &Path) -> (Value, String) {
    let text = std::fs::read_to_string(state.join("job.json")).expect("job.json");
    let job = parse_json(&text, "job.json");
    let url = job["spec"]["url"].as_str().expect("spec.url").to_string();
    (job["identity"].clone(), url)
}

#[test]
fn state_by_name_records_catalog_and_table_and_the_url_read() {
    let catalog = rest_catalog();
    let clicks = rest_table("ads.clicks");
    let current = clicks["metadata_location"]
        .as_str()
        .expect("metadata_location");
    let current = current.trim_start_matches("file:").trim_start_matches("//");
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("train");
    let state_arg = state.display().to_string();
    let filter = "dt = '2026-11-02'";
    let train = |filter: &str| {
        sluice([
            "train",
            "ads.clicks",
            "--catalog",
            catalog,
            "--state",
            &state_arg,
            "--model",
            "none",
            "--quiet",
            "--where",
            filter,
        ])
    };
    train(filter).success();
    let (identity, url) = recorded_job(&state);
    assert_eq!(identity["dataset"], format!("{catalog}#ads.clicks"));
    assert_eq!(identity["where"], filter);
    assert!(url.ends_with(current), "{url} is not {current}");
    // Another filter is another job.
    let run = train("dt = '2026-11-03'");
    assert_one_line_error(&run, &["--where", "another --state"]);

    // The master records the same, and serves until stopped.
    let state = dir.path().join("master");
    let token = dir.path().join("token");
    std::fs::write(&token, "a-job-token-of-enough-bytes-0123456789").expect("token");
    let mut master = common::sluice_command([
        "master",
        "ads.clicks",
        "--catalog",
        catalog,
        "--state",
        &state.display().to_string(),
        "--token-file",
        &token.display().to_string(),
        "--listen",
        "127.0.0.1:0",
    ])
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("start sluice master");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !state.join("job.json").exists() {
        assert!(Instant::now() < deadline, "no job.json from the master");
        assert!(
            master.try_wait().expect("try_wait").is_none(),
            "the master exited"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop(&mut master);
    let (identity, url) = recorded_job(&state);
    assert_eq!(identity["dataset"], format!("{catalog}#ads.clicks"));
    assert!(url.ends_with(current), "{url} is not {current}");
}

/// A master on a table whose catalog vends storage credentials hands its
/// workers none of them: it names the catalog and the table in the job,
/// and each `sluice worker` asks the catalog itself (with its own login),
/// keeping what it is vended fresh for as long as it trains.
#[test]
fn remote_workers_get_vended_credentials_from_the_catalog_themselves() {
    use common::cluster;
    use std::sync::atomic::Ordering;
    let clicks = rest_table("ads.clicks");
    let metadata = current_metadata(clicks);
    let (uri, loads, tokens) = vending_catalog_with(
        Arc::new(Mutex::new(metadata)),
        Default::default(),
        3_000,
        Some(Duration::from_secs(60)),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let credential = credential_file(dir.path(), "worker:worker-s3cret");
    let mut job = cluster::Job::new("ads.clicks", 1);
    job.master_args = vec![
        "--catalog".to_string(),
        uri.clone(),
        "--catalog-credential-file".to_string(),
        credential.clone(),
    ];
    let mut master = job.start_master("ads.clicks");
    let before = loads.load(Ordering::SeqCst);
    let out = job.ids.join("w1");
    let mut worker = job
        .recording_worker(&out, "--sleep 2.5")
        .args(["--catalog-credential-file", &credential])
        .env("RUST_LOG", "sluice=debug")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start worker");
    let status = cluster::wait_exit(&mut worker, "worker");
    let log = cluster::stderr_of(&mut worker);
    assert!(status.success(), "worker failed: {log}");
    cluster::clean_finish(&mut master);
    let master_log = master.log();
    assert!(
        log.contains("storage credentials vended by the catalog"),
        "the worker did not ask the job's catalog: {log}"
    );
    assert!(
        log.contains("vended storage credentials refreshed"),
        "the worker did not keep its vended credentials fresh: {log}"
    );
    assert!(
        loads.load(Ordering::SeqCst) > before,
        "the catalog never heard from the worker"
    );
    assert_eq!(tokens[1].load(Ordering::SeqCst), 0, "a load was refused");
    for text in [&log, &master_log] {
        assert!(!shows_a_secret(text), "{text}");
        assert!(!text.contains("worker-s3cret"), "{text}");
    }
    let spec = std::fs::read_to_string(job.state_dir().join("job.json")).expect("job.json");
    assert!(
        !shows_a_secret(&spec),
        "the job's record holds a secret: {spec}"
    );
    let counts = job.recorded_ids();
    let mut got: Vec<i64> = counts.keys().copied().collect();
    got.sort();
    assert!(counts.values().all(|&n| n == 1), "an id trained twice");
    assert_eq!(got, ids_of(&clicks["ids"]));
}
