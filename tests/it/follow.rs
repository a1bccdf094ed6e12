//! `--follow`: a job that trains what its source commits while it runs.
//!
//! The partition tests present real Spark output (the `parquet_partitioned`
//! fixture, `partitionBy("country", "city")`) one country at a time, as an
//! hourly ETL or `partitionBy` appends would: each country's files first, its
//! marker after. The streaming tests run a real Structured Streaming query
//! (tests/fixtures/stream_writer.py) beside sluice.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    copy_dir, count_lines, fixture, parse_json, python, recorded_ids, wait_until, SLUICE,
};

/// The countries of the fixture, as their directories are named.
fn countries() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixture("parquet_partitioned"))
        .expect("list fixture")
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("country="))
        .collect();
    names.sort();
    names
}

/// Ids of the fixture's rows under `country`.
pub(crate) fn ids_of(country: &str) -> Vec<i64> {
    let out = Command::new(python())
        .args([
            "-c",
            "import sys, pyarrow.dataset as ds; \
             t = ds.dataset(sys.argv[1], format='parquet').to_table(columns=['id']); \
             print('\\n'.join(str(i) for i in t.column('id').to_pylist()))",
        ])
        .arg(fixture("parquet_partitioned").join(country))
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().expect("id"))
        .collect()
}

/// Copies one country's files (no marker) into the followed directory.
fn land(root: &Path, country: &str) {
    copy_dir(
        &fixture("parquet_partitioned").join(country),
        &root.join(country),
    );
}

/// The `--exec` command of tests/trainers/record_ids.py into `out`.
fn recorder(out: &Path) -> String {
    common::recorder(out, "--sleep 0.01")
}

fn follow_train(root: &Path, state: &Path, out: &Path, extra: &[&str]) -> Child {
    follow_train_as(root, state, &recorder(out), "50", extra)
}

/// `sluice train ROOT --follow` training with `exec` in batches of `batch` rows.
fn follow_train_as(root: &Path, state: &Path, exec: &str, batch: &str, extra: &[&str]) -> Child {
    Command::new(SLUICE)
        .arg("train")
        .arg(root)
        .args(["--follow", "--poll", "200ms", "--state"])
        .arg(state)
        .args(["--exec", exec, "--batch-size", batch, "-q"])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice train --follow")
}

fn finish(mut child: Child, what: &str) -> (std::process::ExitStatus, String) {
    let status = common::cluster::wait_exit(&mut child, what);
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    (status, err)
}

#[track_caller]
fn assert_once(counts: &std::collections::HashMap<i64, u32>, want: &[i64], what: &str) {
    let dups: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(dups.is_empty(), "{what}: ids trained twice: {dups:?}");
    let missing: Vec<_> = want
        .iter()
        .filter(|i| !counts.contains_key(i))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "{what}: ids never trained: {missing:?}");
    assert_eq!(
        counts.len(),
        want.len(),
        "{what}: ids that are not in the data"
    );
}

/// `--idle-exit` counts from when the job has nothing to do: a trainer
/// busy for longer than it with what was taken keeps the job following,
/// and a partition committed just after that is trained too.
#[test]
fn a_followed_job_busy_training_is_not_idle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("clicks");
    let state = dir.path().join("state");
    let out = dir.path().join("ids");
    std::fs::create_dir_all(&out).expect("mkdir");
    let countries = countries();
    land(&root, &countries[0]);
    std::fs::write(root.join(&countries[0]).join("_SUCCESS"), b"").expect("marker");
    let mut want = ids_of(&countries[0]);
    // Batches of 10 rows, 0.25 s each: the first country takes longer to
    // train than the 2 s of --idle-exit.
    let exec = common::recorder(&out, "--sleep 0.25");
    let child = follow_train_as(&root, &state, &exec, "10", &["--idle-exit", "2s"]);
    let started = Instant::now();
    wait_until(
        "the first country trained",
        Duration::from_secs(120),
        || count_lines(&out, "ids-") >= want.len() as u64,
    );
    let busy = started.elapsed();
    assert!(
        busy > Duration::from_secs(2),
        "training the first country took {busy:?}: not longer than --idle-exit"
    );
    land(&root, &countries[1]);
    std::fs::write(root.join(&countries[1]).join("_SUCCESS"), b"").expect("marker");
    want.extend(ids_of(&countries[1]));
    let (status, err) = finish(child, "sluice train --follow --idle-exit 2s");
    assert!(status.success(), "exit {status}: {err}");
    assert_once(
        &recorded_ids(&out, "ids-"),
        &want,
        "busy, then a new partition",
    );
}

#[test]
fn partitions_are_taken_once_each_as_their_marker_appears() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("clicks");
    let state = dir.path().join("state");
    let out = dir.path().join("ids");
    std::fs::create_dir_all(&out).expect("mkdir");
    let countries = countries();
    assert!(
        countries.len() >= 4,
        "the fixture has countries: {countries:?}"
    );
    // The ids are read before the job starts: once it is idle, each step
    // below must reach its marker within --idle-exit, a Python start
    // included in none of them.
    let [first, early, appended, late] = [0, 1, 2, 3].map(|i| ids_of(&countries[i]));
    // Hourly-ETL style: each country written on its own, with its own _SUCCESS.
    land(&root, &countries[0]);
    std::fs::write(root.join(&countries[0]).join("_SUCCESS"), b"").expect("marker");
    let mut want = first;
    let child = follow_train(&root, &state, &out, &["--idle-exit", "6s"]);
    wait_until(
        "the first country trained",
        Duration::from_secs(120),
        || count_lines(&out, "ids-") >= want.len() as u64,
    );
    // Files without a marker are not taken, however long they sit there.
    land(&root, &countries[1]);
    std::thread::sleep(Duration::from_millis(1500));
    let counts = recorded_ids(&out, "ids-");
    assert!(
        !early.iter().any(|i| counts.contains_key(i)),
        "rows of a partition without its marker were trained"
    );
    std::fs::write(root.join(&countries[1]).join("_SUCCESS"), b"").expect("marker");
    want.extend(early);
    // `partitionBy` appends: the data lands in new partition directories and
    // only the root's _SUCCESS is written, after them.
    land(&root, &countries[2]);
    std::fs::write(root.join("_SUCCESS"), b"").expect("root marker");
    want.extend(appended);
    wait_until("three countries trained", Duration::from_secs(120), || {
        count_lines(&out, "ids-") >= want.len() as u64
    });
    // A later append: its files are newer than the root marker until it is
    // written again.
    land(&root, &countries[3]);
    std::thread::sleep(Duration::from_millis(1500));
    let counts = recorded_ids(&out, "ids-");
    assert!(
        !late.iter().any(|i| counts.contains_key(i)),
        "rows of an append taken before the root's _SUCCESS was written again"
    );
    std::fs::write(root.join("_SUCCESS"), b"").expect("root marker again");
    want.extend(late);
    let (status, err) = finish(child, "sluice train --follow");
    assert!(status.success(), "exit {status}: {err}");
    assert_once(&recorded_ids(&out, "ids-"), &want, "followed partitions");
    // Closed at --idle-exit: the same command follows on from there, and
    // trains nothing twice.
    let again = common::run(
        Command::new(SLUICE)
            .arg("train")
            .arg(&root)
            .args(["--follow", "--idle-exit", "1s", "--state"])
            .arg(&state)
            .args(["--exec", &recorder(&out), "--batch-size", "50", "-q"]),
    );
    assert!(again.status.success(), "rerun: {}", again.stderr);
    assert_once(
        &recorded_ids(&out, "ids-"),
        &want,
        "followed partitions, rerun",
    );
}

#[test]
fn a_follower_killed_at_ten_random_moments_resumes_nothing_skipped_nothing_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("clicks");
    let state = dir.path().join("state");
    let out = dir.path().join("ids");
    std::fs::create_dir_all(&out).expect("mkdir");
    let countries = countries();
    let mut want = Vec::new();
    let take = |country: &str, want: &mut Vec<i64>| {
        land(&root, country);
        std::fs::write(root.join(country).join("_SUCCESS"), b"").expect("marker");
        want.extend(ids_of(country));
    };
    take(&countries[0], &mut want);
    let checkpointer =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/checkpoint_ids.py");
    let exec = format!(
        "{} {} --out {} --every 3 --sleep 0.01",
        python(),
        checkpointer.display(),
        out.display()
    );
    let start = |extra: &[&str]| {
        Command::new(SLUICE)
            .arg("train")
            .arg(&root)
            .args(["--follow", "--poll", "200ms", "--state"])
            .arg(&state)
            .args(["--exec", &exec, "--batch-size", "40", "-q"])
            .args(extra)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start")
    };
    // Ten SIGKILLs at random moments, while the partitions land one by one
    // (a kill may fall on a growth being journaled, a checkpoint being
    // written, or a follower just started).
    let mut moments = common::Moments(common::seed());
    let mut next = 1;
    let mut child = start(&[]);
    for k in 0..10 {
        std::thread::sleep(Duration::from_millis(moments.next_ms(0, 800)));
        if k % 2 == 0 && next < countries.len() {
            take(&countries[next], &mut want);
            next += 1;
        }
        let after = moments.next_ms(100, 1_500);
        std::thread::sleep(Duration::from_millis(after));
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        eprintln!(
            "kill {k} after {after} ms: {} rows applied so far",
            count_lines(&out, "ids-")
        );
        // The final models of the killed run are not the job's.
        for e in std::fs::read_dir(&out).expect("list").flatten() {
            if e.file_name().to_string_lossy().starts_with("final-") {
                std::fs::remove_file(e.path()).expect("rm");
            }
        }
        child = start(&[]);
    }
    for country in &countries[next..] {
        take(country, &mut want);
    }
    // Ends once the source stays still.
    let _ = child.kill();
    let _ = child.wait();
    for e in std::fs::read_dir(&out).expect("list").flatten() {
        if e.file_name().to_string_lossy().starts_with("final-") {
            std::fs::remove_file(e.path()).expect("rm");
        }
    }
    let (status, err) = finish(start(&["--idle-exit", "3s"]), "the last follower");
    assert!(status.success(), "exit {status}: {err}");
    let model = common::final_model(&out);
    let counts: std::collections::HashMap<i64, u32> =
        model.into_iter().map(|(id, n)| (id, n as u32)).collect();
    assert_once(&counts, &want, "the model over ten killed followers");
}

#[test]
fn follow_refuses_epochs_and_a_bad_follow_until() {
    let run = common::sluice([
        "train",
        "/nonexistent",
        "--follow",
        "--epochs",
        "2",
        "--model",
        "none",
    ]);
    common::assert_one_line_error(&run, &["--follow", "--epochs"]);
    let run = common::sluice(["train", "/x", "--follow", "--follow-until", "soon"]);
    assert!(!run.status.success());
    assert!(run.stderr.contains("soon"), "{}", run.stderr);
}

/// A master following a directory while two workers train; one worker is
/// killed and a new one takes its place: every row once into the models.
#[test]
fn a_following_master_serves_new_partitions_to_its_workers_exactly_once() {
    use common::cluster;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("clicks");
    let countries = countries();
    let mut want = Vec::new();
    land(&root, &countries[0]);
    std::fs::write(root.join(&countries[0]).join("_SUCCESS"), b"").expect("marker");
    want.extend(ids_of(&countries[0]));
    let mut job = cluster::Job::new("parquet_partitioned", 1);
    job.lease_timeout = "3s".to_string();
    job.linger = "1s".to_string();
    job.master_args = ["--follow", "--poll", "200ms", "--idle-exit", "8s"]
        .map(String::from)
        .to_vec();
    let mut master = job.start_master(&root);
    let checkpointer =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/checkpoint_ids.py");
    let worker = |name: &str| {
        let out = job.ids.join(name);
        std::fs::create_dir_all(&out).expect("mkdir");
        let exec = format!(
            "{} {} --out {} --every 3 --sleep 0.02",
            python(),
            checkpointer.display(),
            out.display()
        );
        job.worker_command(&exec)
            .args(["--name", name, "--batch-size", "40", "-q"])
            .spawn()
            .expect("worker")
    };
    let mut w1 = worker("w1");
    let mut w2 = worker("w2");
    for country in &countries[1..3] {
        land(&root, country);
        std::fs::write(root.join(country).join("_SUCCESS"), b"").expect("marker");
        want.extend(ids_of(country));
    }
    wait_until("w1 trains", Duration::from_secs(120), || {
        count_lines(&job.ids.join("w1"), "ids-") >= 200
    });
    w1.kill().expect("SIGKILL w1");
    let _ = w1.wait();
    let status = job.status();
    let follow = &status["follow"];
    assert!(
        follow.is_object(),
        "status --json has no follow object: {status}"
    );
    assert!(follow["seen"].is_string(), "{follow}");
    let metrics = job.metrics();
    assert!(
        cluster::metric(&metrics, "sluice_follow_lag_seconds").is_some(),
        "/metrics lacks the follow lag:\n{metrics}"
    );
    land(&root, &countries[3]);
    std::fs::write(root.join(&countries[3]).join("_SUCCESS"), b"").expect("marker");
    want.extend(ids_of(&countries[3]));
    let mut w1 = worker("w1");
    for (w, what) in [(&mut w1, "restarted w1"), (&mut w2, "w2")] {
        let status = cluster::wait_exit(w, what);
        assert!(status.success(), "{what} failed");
    }
    cluster::clean_finish(&mut master);
    let mut model = common::final_model(&job.ids.join("w1"));
    for (id, n) in common::final_model(&job.ids.join("w2")) {
        *model.entry(id).or_insert(0) += n;
    }
    let counts: std::collections::HashMap<i64, u32> =
        model.into_iter().map(|(id, n)| (id, n as u32)).collect();
    assert_once(&counts, &want, "the models of a followed distributed job");
}

/// One Spark streaming query at a time: two JVMs beside the followers
/// would starve a 2-core machine.
static SPARK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Where the streaming tests keep a sink, its query's checkpoint and the ids
/// Spark's reader returned.
struct Stream {
    sink: PathBuf,
    checkpoint: PathBuf,
    ids: PathBuf,
}

impl Stream {
    fn new(dir: &Path) -> Stream {
        Stream {
            sink: dir.join("sink"),
            checkpoint: dir.join("checkpoint"),
            ids: dir.join("spark-ids.json"),
        }
    }

    /// Starts the query (`python`: the venv's, `format`: parquet or delta).
    fn start(&self, python: &str, format: &str, batches: u32) -> Child {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stream_writer.py");
        Command::new(python)
            .arg(script)
            .arg(&self.sink)
            .arg(&self.checkpoint)
            .args(["--format", format, "--batches", &batches.to_string()])
            .args(["--rows-per-second", "60", "--trigger", "1 second"])
            .arg("--ids-out")
            .arg(&self.ids)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the streaming query")
    }

    /// The ids Spark's reader returned once the query stopped.
    fn spark_ids(&self) -> Vec<i64> {
        let text = std::fs::read_to_string(&self.ids).expect("spark ids");
        serde_json::from_str(&text).expect("ids json")
    }
}

fn wait_stream(mut writer: Child) {
    let (status, err) = {
        // A Spark application: its JVM starts slowly beside the other tests.
        let status = common::cluster::wait_exit_within(
            &mut writer,
            "the streaming query",
            Duration::from_secs(300),
        );
        let mut err = String::new();
        if let Some(mut e) = writer.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        (status, err)
    };
    assert!(status.success(), "the streaming query failed: {err}");
}

#[test]
fn a_streaming_file_sink_is_followed_across_two_kills_every_id_once_into_the_model() {
    let _spark = SPARK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let stream = Stream::new(dir.path());
    let state = dir.path().join("state");
    let out = dir.path().join("ids");
    std::fs::create_dir_all(&out).expect("mkdir");
    let writer = stream.start(&python(), "parquet", 10);
    let checkpointer =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainers/checkpoint_ids.py");
    let exec = format!(
        "{} {} --out {} --every 2 --sleep 0.01",
        python(),
        checkpointer.display(),
        out.display()
    );
    let start = |extra: &[&str]| {
        Command::new(SLUICE)
            .arg("train")
            .arg(&stream.sink)
            .args(["--follow", "--state"])
            .arg(&state)
            .args(["--exec", &exec, "--batch-size", "25", "-q"])
            .args(extra)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start")
    };
    // Started before the query wrote anything: it waits for the first batch.
    let mut follower = start(&[]);
    let began = Instant::now();
    for kill in 0..2u64 {
        wait_until("rows trained", Duration::from_secs(120), || {
            count_lines(&out, "ids-") >= 30 * (kill + 1)
        });
        std::thread::sleep(Duration::from_millis(700 * (kill + 1)));
        follower.kill().expect("SIGKILL");
        let _ = follower.wait();
        for e in std::fs::read_dir(&out).expect("list").flatten() {
            if e.file_name().to_string_lossy().starts_with("final-") {
                std::fs::remove_file(e.path()).expect("rm");
            }
        }
        follower = start(&[]);
    }
    wait_stream(writer);
    let _ = follower.kill();
    let _ = follower.wait();
    for e in std::fs::read_dir(&out).expect("list").flatten() {
        if e.file_name().to_string_lossy().starts_with("final-") {
            std::fs::remove_file(e.path()).expect("rm");
        }
    }
    let (status, err) = finish(start(&["--idle-exit", "3s"]), "the last follower");
    assert!(status.success(), "exit {status}: {err}");
    let want = stream.spark_ids();
    assert!(want.len() >= 100, "the query wrote {} rows", want.len());
    let counts: std::collections::HashMap<i64, u32> = common::final_model(&out)
        .into_iter()
        .map(|(id, n)| (id, n as u32))
        .collect();
    assert_once(&counts, &want, "the model followed from a streaming sink");
    let _ = began;
    let _ = parse_json;
}

#[test]
fn a_delta_streaming_sink_is_followed_every_id_once() {
    let _spark = SPARK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let stream = Stream::new(dir.path());
    let state = dir.path().join("state");
    let out = dir.path().join("ids");
    std::fs::create_dir_all(&out).expect("mkdir");
    let tables_python = std::env::var("SLUICE_TABLES_VENV")
        .map(|v| format!("{v}/bin/python"))
        .unwrap_or_else(|_| format!("{}/.cache/sluice/venv-tables/bin/python", env!("HOME")));
    let writer = stream.start(&tables_python, "delta", 6);
    let start = |extra: &[&str]| {
        Command::new(SLUICE)
            .arg("train")
            .arg(&stream.sink)
            .args(["--follow", "--state"])
            .arg(&state)
            .args(["--exec", &recorder(&out), "--batch-size", "25", "-q"])
            .args(extra)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start")
    };
    let follower = start(&[]);
    wait_stream(writer);
    // Stopped by SIGTERM (drained: what the trainer acknowledged is
    // committed), then resumed until the table stays still.
    common::cluster::signal(&follower, libc::SIGTERM);
    let (status, err) = finish(follower, "sluice train --follow on Delta, stopped");
    assert_eq!(status.code(), Some(130), "{err}");
    let (status, err) = finish(start(&["--idle-exit", "2s"]), "the resumed follower");
    assert!(status.success(), "exit {status}: {err}");
    let want = stream.spark_ids();
    assert!(want.len() >= 60, "the query wrote {} rows", want.len());
    assert_once(&recorded_ids(&out, "ids-"), &want, "a followed Delta sink");
}

/// A job file with `follow = true`: `sluice run` follows the directory, and
/// a second run after the first was stopped goes on where it was.
#[test]
fn a_job_file_with_follow_runs_a_followed_job_that_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("clicks");
    let state = dir.path().join("state");
    let out = dir.path().join("ids");
    std::fs::create_dir_all(&out).expect("mkdir");
    let countries = countries();
    let mut want = Vec::new();
    for country in &countries[..2] {
        land(&root, country);
        std::fs::write(root.join(country).join("_SUCCESS"), b"").expect("marker");
        want.extend(ids_of(country));
    }
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "source = {:?}\nstate = {:?}\nexec = {:?}\nbatch-size = 50\nquiet = true\nfollow = true\npoll = \"200ms\"\nidle-exit = \"3s\"\n",
            root.display().to_string(),
            state.display().to_string(),
            recorder(&out)
        ),
    )
    .expect("write job file");
    let first = common::sluice(["run", job.to_str().expect("utf-8")]);
    assert!(first.status.success(), "first run: {}", first.stderr);
    land(&root, &countries[2]);
    std::fs::write(root.join(&countries[2]).join("_SUCCESS"), b"").expect("marker");
    want.extend(ids_of(&countries[2]));
    // The first run closed its job at --idle-exit: the next one follows on
    // from where it stopped.
    let second = common::sluice(["run", job.to_str().expect("utf-8")]);
    assert!(second.status.success(), "second run: {}", second.stderr);
    assert_once(&recorded_ids(&out, "ids-"), &want, "a followed job file");
    let refused = dir.path().join("pattern.toml");
    std::fs::write(
        &refused,
        format!(
            "source = \"{}/country=*\"\nstate = {:?}\nmodel = \"none\"\nfollow = true\n",
            root.display(),
            state.display().to_string()
        ),
    )
    .expect("write job file");
    let run = common::sluice(["run", refused.to_str().expect("utf-8")]);
    common::assert_one_line_error(&run, &["follow = true", "without `*`"]);
}

/// A copy of Iceberg table `name` (Hadoop catalog, real Spark commits) that
/// holds its first metadata version only; [`Iceberg::commit`] puts the
/// next one in place, as its writer would commit it.
struct Iceberg {
    dir: tempfile::TempDir,
    metadata: PathBuf,
    hold: PathBuf,
    versions: usize,
    name: &'static str,
}

impl Iceberg {
    fn new(name: &'static str) -> Iceberg {
        let dir = tempfile::tempdir().expect("tempdir");
        let table = dir.path().join("table");
        copy_dir(
            &common::table_dir(&common::tables_expected()["tables"][name]),
            &table,
        );
        let metadata = table.join("metadata");
        let hold = dir.path().join("hold");
        std::fs::create_dir_all(&hold).expect("mkdir");
        let versions = common::tables_expected()["tables"][name]["versions"]
            .as_array()
            .expect("versions")
            .len();
        for v in 2..=versions {
            let file = format!("v{v}.metadata.json");
            std::fs::rename(metadata.join(&file), hold.join(&file)).expect("hold back");
        }
        std::fs::write(metadata.join("version-hint.text"), "1").expect("hint");
        Iceberg {
            dir,
            metadata,
            hold,
            versions,
            name,
        }
    }

    fn table(&self) -> PathBuf {
        self.dir.path().join("table")
    }

    fn commit(&self, v: usize) {
        let file = format!("v{v}.metadata.json");
        std::fs::rename(self.hold.join(&file), self.metadata.join(&file)).expect("commit");
        std::fs::write(self.metadata.join("version-hint.text"), v.to_string()).expect("hint");
    }

    fn ids(&self, index: isize) -> Vec<i64> {
        common::table_ids(common::table_version(self.name, index))
            .into_keys()
            .collect()
    }
}

/// Follows `name` while its versions are committed one at a time: each
/// snapshot's appended files are taken once, a compaction adds nothing.
fn follow_iceberg_versions(name: &'static str) {
    let table = Iceberg::new(name);
    let state = table.dir.path().join("state");
    let out = table.dir.path().join("ids");
    std::fs::create_dir_all(&out).expect("mkdir");
    let follower = Command::new(SLUICE)
        .arg("train")
        .arg(table.table())
        .args([
            "--follow",
            "--poll",
            "200ms",
            "--idle-exit",
            "3s",
            "--state",
        ])
        .arg(&state)
        .args(["--exec", &recorder(&out), "--batch-size", "50", "-q"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    for v in 2..=table.versions {
        let seen = table.ids(v as isize - 2).len() as u64;
        wait_until(
            "the last version's rows trained",
            Duration::from_secs(120),
            || count_lines(&out, "ids-") >= seen,
        );
        table.commit(v);
        std::thread::sleep(Duration::from_millis(400));
    }
    let (status, err) = finish(follower, "sluice train --follow on Iceberg");
    assert!(status.success(), "exit {status}: {err}");
    assert_once(&recorded_ids(&out, "ids-"), &table.ids(-1), name);
}

/// A commit that overwrote rows stops a followed job, naming the snapshot;
/// a job file's `on-rewrite = "skip"` trains the appends only and goes on.
#[test]
fn a_rewrite_of_a_followed_table_stops_the_job_unless_the_job_file_says_skip() {
    let table = Iceberg::new("iceberg/overwrite");
    let out = table.dir.path().join("ids");
    std::fs::create_dir_all(&out).expect("mkdir");
    let follower = Command::new(SLUICE)
        .arg("train")
        .arg(table.table())
        .args(["--follow", "--poll", "200ms", "--state"])
        .arg(table.dir.path().join("state"))
        .args(["--exec", &recorder(&out), "--batch-size", "50", "-q"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let first = table.ids(0);
    wait_until(
        "the first snapshot trained",
        Duration::from_secs(120),
        || count_lines(&out, "ids-") >= first.len() as u64,
    );
    table.commit(2);
    let (status, err) = finish(follower, "sluice train --follow on a rewritten table");
    assert_eq!(status.code(), Some(1), "{err}");
    let line = err.lines().last().unwrap_or_default();
    assert!(
        line.contains("overwrite") && line.contains("rewrote data") && line.contains("on-rewrite"),
        "{err}"
    );
    assert_once(
        &recorded_ids(&out, "ids-"),
        &first,
        "the snapshot before the rewrite",
    );

    // The same table from a job file with on-rewrite = "skip".
    let table = Iceberg::new("iceberg/overwrite");
    let out = table.dir.path().join("ids");
    std::fs::create_dir_all(&out).expect("mkdir");
    let job = table.dir.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "source = {:?}\nstate = {:?}\nexec = {:?}\nbatch-size = 50\nquiet = true\nfollow = true\npoll = \"200ms\"\nidle-exit = \"3s\"\non-rewrite = \"skip\"\n",
            table.table().display().to_string(),
            table.dir.path().join("state").display().to_string(),
            recorder(&out)
        ),
    )
    .expect("job file");
    let run = Command::new(SLUICE)
        .args(["run"])
        .arg(&job)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice run");
    wait_until(
        "the first snapshot trained",
        Duration::from_secs(120),
        || count_lines(&out, "ids-") >= first.len() as u64,
    );
    for v in 2..=table.versions {
        table.commit(v);
        std::thread::sleep(Duration::from_millis(400));
    }
    let (status, err) = finish(run, "sluice run, follow = true, on-rewrite = skip");
    assert!(status.success(), "exit {status}: {err}");
    // The later snapshots only overwrote and deleted: nothing was appended.
    assert_once(&recorded_ids(&out, "ids-"), &first, "appends only");
}

#[test]
fn an_iceberg_table_is_followed_snapshot_by_snapshot() {
    follow_iceberg_versions("iceberg/appends");
}

#[test]
fn a_compaction_of_a_followed_iceberg_table_trains_nothing_again() {
    follow_iceberg_versions("iceberg/compaction");
}
