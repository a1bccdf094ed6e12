//! The master's API against clients that lie or misbehave: a real `sluice
//! master` on real Spark output, spoken to in raw HTTP. Offsets and row counts
//! outside a split, reports on another worker's lease, bodies sent without the
//! token, connections that stall half-way, and weak or exposed tokens.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::cluster::{self, signal, stderr_of, TOKEN};
use crate::common::{assert_one_line_error, describe, fixture, sluice_command, Run};
use serde_json::{json, Value};

/// A master started by a test, killed when the test ends.
struct Master {
    process: cluster::Master,
    port: u16,
}

impl Master {
    /// A master on fixture `dataset` with its state in `state`; leases last a
    /// minute, so a slow test machine never lets one lapse.
    fn start(dataset: &str, state: &Path, epochs: u32) -> Master {
        let mut cmd = master_command(dataset, state, 0);
        cmd.args(["--epochs", &epochs.to_string()])
            .env("SLUICE_TOKEN", TOKEN);
        Master::listening(cmd)
    }

    /// Starts `cmd` and waits until it listens.
    fn listening(cmd: std::process::Command) -> Master {
        let mut process = cluster::Master::spawn(cmd);
        let port = process.wait_listening();
        Master { process, port }
    }

    /// Kills the master and returns what it wrote to stderr.
    fn kill(mut self) -> String {
        signal(&self.process, libc::SIGKILL);
        let _ = self.process.wait();
        stderr_of(&mut self.process)
    }

    /// A POST with the job token and a JSON body.
    fn post(&self, path: &str, body: &Value) -> Answer {
        post(
            self.port,
            path,
            Some(TOKEN),
            "application/json",
            &body.to_string(),
        )
    }

    /// A GET with the job token, answered 200 with JSON.
    fn get(&self, path: &str) -> Value {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Authorization: Bearer {TOKEN}\r\n\r\n"
        );
        let answer = exchange(self.port, &request);
        assert_eq!(answer.status, 200, "GET {path}: {}", answer.body);
        answer.json()
    }

    /// Registers a worker.
    fn register(&self) -> Worker {
        let answer = self.post("/v1/register", &json!({}));
        assert_eq!(answer.status, 200, "register: {}", answer.body);
        let reply = answer.json();
        Worker {
            id: reply["worker"].as_u64().expect("worker id"),
            secret: reply["secret"].as_str().unwrap_or_default().to_string(),
        }
    }

    /// Leases up to `max` tasks for `worker`: (attempt, split, epoch) each.
    fn lease(&self, worker: &Worker, max: usize) -> Vec<(u64, usize, u64)> {
        let answer = self.post("/v1/lease", &worker.body(json!({ "max": max })));
        assert_eq!(answer.status, 200, "lease: {}", answer.body);
        let reply = answer.json();
        let tasks = reply["ok"]["tasks"].as_array().cloned().unwrap_or_default();
        tasks
            .iter()
            .map(|t| {
                let field = |name: &str| t[name].as_u64().expect(name);
                (field("attempt"), field("split") as usize, field("epoch"))
            })
            .collect()
    }

    /// The queue's counts.
    fn queue(&self) -> Value {
        self.get("/v1/status")["queue"].clone()
    }
}

/// `sluice master` on fixture `dataset`, listening on `port` (0: any free
/// port), without a token.
fn master_command(dataset: &str, state: &Path, port: u16) -> std::process::Command {
    let mut cmd = sluice_command(["master".as_ref(), fixture(dataset).as_os_str()]);
    cmd.args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--state")
        .arg(state)
        .args(["--lease-timeout", "60s", "--linger", "3s"])
        .env_remove("SLUICE_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// A worker as the master named it.
struct Worker {
    id: u64,
    secret: String,
}

impl Worker {
    /// `fields` with this worker's id and secret added.
    fn body(&self, mut fields: Value) -> Value {
        fields["worker"] = json!(self.id);
        fields["secret"] = json!(self.secret);
        fields
    }
}

/// An HTTP answer.
struct Answer {
    status: u16,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The kind of refusal of a 409 answer (`not_yours`, `wrong_rows`...).
    fn refusal(&self) -> String {
        assert_eq!(self.status, 409, "expected a refusal: {}", self.body);
        self.json()["refused"]["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// Sends one raw request on a fresh connection and reads the answer.
fn exchange(port: u16, request: &str) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    stream.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the answer");
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Answer { status, body }
}

/// A POST of `body` as `content_type`, with `token` when given.
fn post(port: u16, path: &str, token: Option<&str>, content_type: &str, body: &str) -> Answer {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{auth}\
         Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    exchange(port, &request)
}

/// Rows of split `split` as the master's plan has them (Parquet footers).
fn split_rows(master: &Master, split: usize) -> u64 {
    master.get("/v1/job")["splits"][split]["rows"]
        .as_u64()
        .expect("parquet splits have row counts")
}

#[test]
fn offsets_and_row_counts_outside_the_split_are_refused() {
    let state = tempfile::tempdir().expect("tempdir");
    let master = Master::start("parquet_small_files", &state.path().join("state"), 1);
    let worker = master.register();
    let (attempt, split, _) = master.lease(&worker, 1)[0];
    let rows = split_rows(&master, split);
    let commit = |offset: u64| {
        master.post(
            "/v1/commit",
            &worker.body(json!({ "attempt": attempt, "offset": offset })),
        )
    };
    let finish = |rows: u64| {
        master.post(
            "/v1/finish",
            &worker.body(json!({ "attempt": attempt, "rows": rows })),
        )
    };
    for offset in [u64::MAX, rows + 1] {
        let refused = commit(offset);
        assert_eq!(refused.refusal(), "offset_past_end", "{}", refused.body);
    }
    for wrong in [7, rows - 1, rows + 1, u64::MAX] {
        let refused = finish(wrong);
        assert_eq!(refused.refusal(), "wrong_rows", "{}", refused.body);
        assert!(refused.body.contains(&rows.to_string()), "{}", refused.body);
    }
    let queue = master.queue();
    assert_eq!(
        (queue["leased"].as_u64(), queue["rows_done"].as_u64()),
        (Some(1), Some(0)),
        "refusals change nothing: {queue}"
    );
    assert_eq!(commit(rows).status, 200, "the last row may be committed");
    assert_eq!(finish(rows).status, 200);
    let queue = master.queue();
    assert_eq!(queue["rows_done"].as_u64(), Some(rows), "{queue}");
}

#[test]
fn malformed_row_ranges_are_a_bad_request() {
    let state = tempfile::tempdir().expect("tempdir");
    let master = Master::start("parquet_small_files", &state.path().join("state"), 1);
    let worker = master.register();
    let (attempt, _, _) = master.lease(&worker, 1)[0];
    let commit = |offset: u64, ranges: Value| {
        master.post(
            "/v1/commit",
            &worker.body(json!({ "attempt": attempt, "offset": offset, "ranges": ranges })),
        )
    };
    for (offset, ranges) in [
        (0, json!([[500, 100]])),
        (0, json!([[5, 5]])),
        (10, json!([[5, 20]])),
        (0, json!([[1, 4], [3, 6]])),
    ] {
        let answer = commit(offset, ranges.clone());
        assert_eq!(
            answer.status, 400,
            "offset {offset}, {ranges}: {}",
            answer.body
        );
        assert!(answer.body.contains("row range"), "{}", answer.body);
    }
    let checkpoint = master.post(
        "/v1/checkpoint",
        &worker.body(json!({
            "id": "1",
            "pieces": [{ "epoch": 0, "split": 0, "start": 9, "end": 2 }],
        })),
    );
    assert_eq!(checkpoint.status, 400, "{}", checkpoint.body);
    let queue = master.queue();
    assert_eq!(queue["rows_committed"].as_u64(), Some(0), "{queue}");
    assert_eq!(
        commit(0, json!([[1, 2]])).status,
        200,
        "a well-formed range"
    );
}

#[test]
fn rows_learned_at_a_first_finish_are_enforced_after_a_restart() {
    // CSV has no row counts in any footer: the first finish of each split
    // teaches the master, and the journal keeps it across a restart.
    let state = tempfile::tempdir().expect("tempdir");
    let state = state.path().join("state");
    let master = Master::start("csv_plain", &state, 2);
    let worker = master.register();
    let first = master.lease(&worker, 100);
    assert!(!first.is_empty());
    for (attempt, _, epoch) in &first {
        assert_eq!(*epoch, 0);
        let body = worker.body(json!({ "attempt": attempt, "rows": 123 }));
        assert_eq!(master.post("/v1/finish", &body).status, 200);
    }
    master.kill();
    let master = Master::start("csv_plain", &state, 2);
    let second = master.lease(&worker, 100);
    assert_eq!(
        second.len(),
        first.len(),
        "the worker's secret survived too"
    );
    for (attempt, _, epoch) in &second {
        assert_eq!(*epoch, 1);
        let commit = worker.body(json!({ "attempt": attempt, "offset": 124 }));
        let refused = master.post("/v1/commit", &commit);
        assert_eq!(refused.refusal(), "offset_past_end", "{}", refused.body);
        let wrong = worker.body(json!({ "attempt": attempt, "rows": 7 }));
        let refused = master.post("/v1/finish", &wrong);
        assert_eq!(refused.refusal(), "wrong_rows", "{}", refused.body);
        let right = worker.body(json!({ "attempt": attempt, "rows": 123 }));
        assert_eq!(master.post("/v1/finish", &right).status, 200);
    }
    assert_eq!(master.queue()["job_over"], json!(true));
}

#[test]
fn a_worker_cannot_report_on_another_workers_lease() {
    let state = tempfile::tempdir().expect("tempdir");
    let master = Master::start("parquet_small_files", &state.path().join("state"), 1);
    let owner = master.register();
    let other = master.register();
    let (attempt, split, _) = master.lease(&owner, 1)[0];
    let rows = split_rows(&master, split);
    let reports = [
        ("/v1/commit", json!({ "attempt": attempt, "offset": 1 })),
        ("/v1/finish", json!({ "attempt": attempt, "rows": rows })),
        ("/v1/fail", json!({ "attempt": attempt, "reason": "x" })),
    ];
    for (path, fields) in &reports {
        let refused = master.post(path, &other.body(fields.clone()));
        assert_eq!(refused.refusal(), "not_yours", "{path}: {}", refused.body);
    }
    // Naming the owner takes the owner's secret: a heartbeat claiming to be
    // the owner (and holding nothing) would otherwise take its lease back.
    let impostor = Worker {
        id: owner.id,
        secret: other.secret.clone(),
    };
    let beat = impostor.body(json!({ "rows": 0, "held": [] }));
    let refused = master.post("/v1/heartbeat", &beat);
    assert_eq!(refused.refusal(), "wrong_secret", "{}", refused.body);
    let (path, fields) = &reports[0];
    let refused = master.post(path, &impostor.body(fields.clone()));
    assert_eq!(refused.refusal(), "wrong_secret", "{}", refused.body);
    // The owner's lease is intact: still leased, and its own reports go through.
    assert_eq!(master.queue()["leased"].as_u64(), Some(1));
    let beat = owner.body(json!({ "rows": 0, "held": [attempt] }));
    let answer = master.post("/v1/heartbeat", &beat);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["ok"]["lost"], json!([]));
    for (path, fields) in &reports[..2] {
        let answer = master.post(path, &owner.body(fields.clone()));
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
}

#[test]
fn the_token_is_checked_before_the_body_is_read() {
    let state = tempfile::tempdir().expect("tempdir");
    let master = Master::start("parquet_small_files", &state.path().join("state"), 1);
    let malformed = [
        ("text/plain", "not json at all"),
        ("application/json", "{\"attempt\": "),
        ("application/json", "{\"unexpected\": true}"),
    ];
    for path in [
        "/v1/lease",
        "/v1/heartbeat",
        "/v1/commit",
        "/v1/finish",
        "/v1/fail",
    ] {
        for (content_type, body) in malformed {
            for token in [None, Some("wrong-token-of-some-length")] {
                let answer = post(master.port, path, token, content_type, body);
                assert_eq!(
                    answer.status, 401,
                    "{path} {content_type} {body}: {}",
                    answer.body
                );
                assert!(!answer.body.contains("attempt"), "{}", answer.body);
            }
        }
    }
    // An authorized client with a bad body learns why, in one line.
    let answer = post(
        master.port,
        "/v1/commit",
        Some(TOKEN),
        "text/plain",
        "{\"attempt\": ",
    );
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.body.trim().lines().count(), 1, "{}", answer.body);
    assert!(
        answer.body.starts_with("bad request body"),
        "{}",
        answer.body
    );
}

/// Reads from `stream` until the master closes it; the time that took, or
/// `None` if it was still open after `limit`.
fn closed_within(mut stream: TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    stream.set_read_timeout(Some(limit)).expect("read timeout");
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None
            }
            Err(_) => return Some(start.elapsed()), // reset: closed too
        }
    }
}

#[test]
fn stalled_connections_are_closed() {
    let state = tempfile::tempdir().expect("tempdir");
    let master = Master::start("parquet_small_files", &state.path().join("state"), 1);
    let limit = Duration::from_secs(30);
    let half = TcpStream::connect(("127.0.0.1", master.port)).expect("connect");
    (&half)
        .write_all(b"POST /v1/lease HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
        .expect("half a header");
    let silent = TcpStream::connect(("127.0.0.1", master.port)).expect("connect");
    let silent = std::thread::spawn(move || closed_within(silent, limit));
    let half = closed_within(half, limit);
    let silent = silent.join().expect("thread");
    assert!(
        half.is_some(),
        "a half-sent header held its connection past {limit:?}"
    );
    assert!(
        silent.is_some(),
        "a silent connection stayed open past {limit:?}"
    );
    // The master still serves.
    assert_eq!(master.queue()["leased"].as_u64(), Some(0));
}

/// Waits up to `limit` for `child` to exit; kills it if it does not.
fn exit_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_short_token_stops_the_master_at_start() {
    let state = tempfile::tempdir().expect("tempdir");
    let short = "tiny-token";
    let mut cmd = master_command("parquet_small_files", &state.path().join("state"), 0);
    cmd.env("SLUICE_TOKEN", short).stdout(Stdio::piped());
    let command = describe(&cmd);
    let mut child = cmd.spawn().expect("start master");
    let status = exit_within(&mut child, Duration::from_secs(30))
        .expect("a master with a 10-byte token went on serving");
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    let run = Run {
        command,
        status,
        stdout,
        stderr: stderr_of(&mut child),
    };
    assert_one_line_error(&run, &["token", "16"]);
    assert!(!run.stderr.contains(short), "{run}");
}

#[test]
fn a_token_file_others_can_read_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let token = "file-token-0a9b8c7d6e5f4a3b";
    let warnings = |mode: u32| {
        let file = dir.path().join(format!("token-{mode:o}"));
        std::fs::write(&file, format!("{token}\n")).expect("token file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let state = dir.path().join(format!("state-{mode:o}"));
        let mut cmd = master_command("parquet_small_files", &state, 0);
        cmd.arg("--token-file").arg(&file);
        let master = Master::listening(cmd);
        let registered = post(
            master.port,
            "/v1/register",
            Some(token),
            "application/json",
            "{}",
        );
        assert_eq!(registered.status, 200, "the file's token works");
        (file, master.kill())
    };
    let (file, log) = warnings(0o644);
    assert!(
        log.contains(&file.display().to_string()) && log.contains("readable by other users"),
        "no warning about {}: {log}",
        file.display()
    );
    assert!(!log.contains(token), "the token reached the log: {log}");
    let (file, log) = warnings(0o600);
    assert!(
        !log.contains("readable by other users"),
        "a private {} was warned about: {log}",
        file.display()
    );
}

/// A worker's trainer hunts for the job token wherever a process of the same
/// user can look (tests/trainers/token_hunt.sh: environments, command lines,
/// the file a `--token-file` names, the descriptor a `--token-fd` names, every
/// descriptor it may open), with the token given by `--token-file`,
/// `--token-fd` and `SLUICE_TOKEN`: it finds it nowhere, or, for
/// `--token-file` where the kernel cannot hide the file, the worker said so at
/// start. Run as root, the worker runs as `nobody` (root reads everything).
#[test]
fn trainers_find_the_job_token_nowhere() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let open = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod")
    };
    open(dir.path(), 0o755);
    // The data where any user may read it (the worker may run as nobody).
    let data = dir.path().join("data");
    common::copy_dir(&fixture("parquet_small_files"), &data);
    open(&data, 0o755);
    for part in std::fs::read_dir(&data).expect("list").flatten() {
        open(&part.path(), 0o644);
    }
    let mut cmd = sluice_command(["master".as_ref(), data.as_os_str()]);
    cmd.args(["--listen", "127.0.0.1:0", "--state"])
        .arg(dir.path().join("state"))
        // A worker whose trainer failed leaves its leases to lapse: the next
        // one waits this long for them.
        .args(["--lease-timeout", "3s"])
        .env("SLUICE_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let master = Master::listening(cmd);
    // SAFETY: geteuid only reads this process's credentials.
    let as_nobody = unsafe { libc::geteuid() } == 0;
    let own = |path: &Path| {
        if as_nobody {
            std::os::unix::fs::chown(path, Some(65534), Some(65534)).expect("chown");
        }
    };
    let binary = dir.path().join("sluice");
    if std::fs::hard_link(common::SLUICE, &binary).is_err() {
        std::fs::copy(common::SLUICE, &binary).expect("copy sluice");
    }
    let hunt = dir.path().join("token_hunt.sh");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/token_hunt.sh");
    std::fs::copy(script, &hunt).expect("copy the hunt");
    open(&hunt, 0o755);
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).expect("token file");
    open(&token, 0o600);
    own(&token);
    for how in ["--token-file", "--token-fd", "SLUICE_TOKEN"] {
        let out = dir.path().join(how.trim_start_matches('-'));
        std::fs::create_dir(&out).expect("mkdir");
        own(&out);
        let given = match how {
            "--token-file" => format!("--token-file {}", token.display()),
            "--token-fd" => format!("--token-fd 9 9<{}", token.display()),
            _ => String::new(),
        };
        let line = format!(
            "exec {} worker --master http://127.0.0.1:{} --exec 'sh {} {}' --exec-restarts 0 -q {given}",
            binary.display(),
            master.port,
            hunt.display(),
            out.display()
        );
        let mut cmd = if as_nobody {
            let mut cmd = std::process::Command::new("setpriv");
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            cmd.arg("sh");
            cmd
        } else {
            std::process::Command::new("sh")
        };
        cmd.args(["-c", &line])
            .env_remove("SLUICE_TOKEN")
            .env_remove("RUST_LOG");
        if how == "SLUICE_TOKEN" {
            cmd.env("SLUICE_TOKEN", TOKEN);
        }
        let run = cmd.output().expect("run the worker");
        assert!(
            !run.status.success(),
            "{how}: the trainer exits without acknowledging"
        );
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            out.join("done").exists(),
            "{how}: the hunt did not run: {stderr}"
        );
        let found = std::fs::read(out.join("found.txt")).expect("found.txt");
        let leaked = String::from_utf8_lossy(&found).contains(TOKEN);
        let warned = stderr.contains("trainers run as the same user can read --token-file");
        // Where the file cannot be hidden, the worker says so instead.
        if !(how == "--token-file" && warned) {
            assert!(!leaked, "{how}: the trainer found the token: {stderr}");
        }
        if how != "--token-file" {
            assert!(!warned, "{how}: {stderr}");
        }
    }
}
