//! sluice on Kerberized HDFS: a MiniKdc and a MiniDFSCluster with Kerberos
//! authentication, block access tokens and SASL protection of RPC and block
//! transfers (`tests/services/hdfs.sh start-secure`), data put in by Hadoop's own
//! client. Every check runs under privacy; authentication and integrity get a
//! listing and a keytab-only training each. Tickets live 60 s; the renewal
//! test has a cluster of its own, whose namenode it restarts mid-job.
//!
//! Never skipped: when a cluster cannot start, every test here fails.

use crate::common;
use crate::object_stores::service::services_root;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::common::cluster::{clean_finish, signal, undelivered, wait_exit, Job};
use crate::common::{
    assert_exactly_once, assert_one_line_error, fixture, recorded_ids, recorder, run,
    sluice_command, Run,
};
use serde_json::Value;

/// How a sluice process authenticates.
enum Auth<'a> {
    /// The ticket cache at this path (filled by `kinit`, or empty).
    Cache(&'a Path),
    /// `--keytab --principal`, with an empty ticket cache.
    Keytab,
    /// `HADOOP_TOKEN_FILE_LOCATION`, with an empty ticket cache.
    Token(&'a Path),
}

/// A running secure cluster, as `hdfs.sh start-secure` reports it.
struct Secure {
    url: String,
    conf_dir: String,
    krb5_config: String,
    keytab: String,
    principal: String,
    /// Ticket caches and token files of the tests.
    scratch: tempfile::TempDir,
    protection: String,
    /// A cluster of one test's own: `hdfs.sh`'s state root
    /// (`SLUICE_SERVICES`; its namenode listens on a port free when it
    /// started). It stops when dropped.
    own: Option<PathBuf>,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/hdfs.sh")
}

impl Secure {
    /// Starts (or finds) the cluster of `protection`; it stops when this process exits.
    fn start(protection: &str) -> Secure {
        Secure::start_in(protection, None)
    }

    /// Starts a cluster of `protection` for one test alone (`name`), under
    /// this run's state root, its namenode on a free port; it
    /// stops when dropped, or when this process exits.
    fn start_own(protection: &str, name: &str) -> Secure {
        let services = services_root().join(format!("own-{name}"));
        Secure::start_in(protection, Some(services))
    }

    fn start_in(protection: &str, own: Option<PathBuf>) -> Secure {
        let out = run(hdfs_sh(&own)
            .args(["start-secure", "--protection", protection])
            .env("SLUICE_HDFS_EXIT_WITH", std::process::id().to_string()));
        assert!(out.status.success(), "the secure HDFS did not start: {out}");
        Secure {
            url: out.printed("SLUICE_HDFS_URL"),
            conf_dir: out.printed("HADOOP_CONF_DIR"),
            krb5_config: out.printed("KRB5_CONFIG"),
            keytab: out.printed("SLUICE_KEYTAB"),
            principal: out.printed("SLUICE_PRINCIPAL"),
            scratch: tempfile::tempdir().expect("tempdir"),
            protection: protection.to_string(),
            own,
        }
    }

    /// Restarts the namenode (same port, same data) and waits until it serves:
    /// every client connects, and authenticates, anew.
    fn restart_namenode(&self) {
        let out = run(hdfs_sh(&self.own).args([
            "restart-namenode-secure",
            "--protection",
            &self.protection,
        ]));
        assert!(out.status.success(), "the namenode did not restart: {out}");
    }

    fn privacy() -> &'static Secure {
        static CLUSTER: OnceLock<Secure> = OnceLock::new();
        CLUSTER.get_or_init(|| Secure::start("privacy"))
    }

    /// The client environment of this cluster on `cmd`, authenticating by `auth`
    /// only (nothing inherited from the test's own environment).
    fn env<'c>(&self, cmd: &'c mut Command, auth: &Auth) -> &'c mut Command {
        let empty = self.scratch.path().join("no-ticket");
        cmd.env("HADOOP_CONF_DIR", &self.conf_dir)
            .env("KRB5_CONFIG", &self.krb5_config)
            .env_remove("KRB5_CLIENT_KTNAME")
            .env_remove("HADOOP_TOKEN_FILE_LOCATION")
            .env_remove("HADOOP_USER_NAME")
            .env("KRB5CCNAME", format!("FILE:{}", empty.display()));
        match auth {
            Auth::Cache(path) => cmd.env("KRB5CCNAME", format!("FILE:{}", path.display())),
            Auth::Keytab => cmd.args(["--keytab", &self.keytab, "--principal", &self.principal]),
            Auth::Token(file) => cmd.env("HADOOP_TOKEN_FILE_LOCATION", file),
        }
    }

    /// `sluice ARGS` on this cluster, authenticated by `auth`.
    fn sluice(&self, args: &[&str], auth: &Auth) -> Run {
        let mut cmd = sluice_command(args);
        run(self.env(&mut cmd, auth))
    }

    /// `hdfs.sh TOOL ARGS` (Hadoop's own client) as the cluster's user.
    fn hadoop(&self, args: &[&str]) -> Run {
        let out = run(Command::new("bash")
            .arg(script())
            .args(args)
            .env("HADOOP_CONF_DIR", &self.conf_dir)
            .env("KRB5_CONFIG", &self.krb5_config)
            .env("SLUICE_KEYTAB", &self.keytab)
            .env("SLUICE_PRINCIPAL", &self.principal));
        assert!(out.status.success(), "hdfs.sh {args:?} failed: {out}");
        out
    }

    /// The fixture `dataset`, put once into this cluster by Hadoop's client; its URL.
    fn data(&self, dataset: &str) -> String {
        let url = format!("{}/sluice-tests/{dataset}-{}", self.url, std::process::id());
        static PUTS: Mutex<()> = Mutex::new(());
        let _one_at_a_time = PUTS.lock().unwrap_or_else(|e| e.into_inner());
        let marker = self.scratch.path().join(format!("put-{dataset}"));
        if !marker.exists() {
            let local = fixture(dataset);
            self.hadoop(&["put", local.to_str().expect("utf-8"), &url]);
            std::fs::write(&marker, "").expect("marker");
        }
        url
    }

    /// A ticket cache filled by `kinit` from the keytab, living `lifetime`.
    fn kinit(&self, name: &str, lifetime: &str) -> PathBuf {
        let cache = self.scratch.path().join(name);
        let out = run(Command::new("kinit")
            .args(["-l", lifetime, "-kt", &self.keytab, &self.principal])
            .env("KRB5_CONFIG", &self.krb5_config)
            .env("KRB5CCNAME", format!("FILE:{}", cache.display())));
        assert!(out.status.success(), "kinit failed: {out}");
        cache
    }

    /// A delegation token file from Hadoop's `hdfs fetchdt`.
    fn fetchdt(&self) -> PathBuf {
        static FETCH: Mutex<()> = Mutex::new(());
        let _one_at_a_time = FETCH.lock().unwrap_or_else(|e| e.into_inner());
        let file = self.scratch.path().join("token");
        if !file.exists() {
            let path = file.to_str().expect("utf-8");
            self.hadoop(&["fetchdt", "--renewer", "sluice", path]);
        }
        file
    }
}

impl Drop for Secure {
    fn drop(&mut self) {
        if self.own.is_some() {
            let _ = run(hdfs_sh(&self.own).args(["stop-secure", "--protection", &self.protection]));
        }
    }
}

/// `bash hdfs.sh`, for the shared clusters or a test's own (`Secure::own`).
fn hdfs_sh(own: &Option<PathBuf>) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(script());
    match own {
        Some(services) => cmd.env("SLUICE_SERVICES", services),
        None => cmd.env("SLUICE_SERVICES", services_root()),
    };
    cmd
}

/// `sluice ls --json` without the key naming the location.
fn ls_json(run: Run) -> Value {
    let mut json = run.success().json();
    json.as_object_mut().expect("object").remove("url");
    json
}

fn expected_rows(dataset: &str) -> u64 {
    common::expected_dataset(dataset)["rows"]
        .as_u64()
        .unwrap_or_else(|| panic!("no row count for {dataset}"))
}

/// `sluice train` with recording trainers; how often each id arrived.
fn train_ids(cluster: &Secure, url: &str, auth: &Auth, extra: &[&str]) -> HashMap<i64, u32> {
    let ids = tempfile::tempdir().expect("tempdir");
    let exec = recorder(ids.path(), "");
    let mut args = vec!["train", url, "--exec", &exec, "--devices", "2", "-q"];
    args.extend_from_slice(extra);
    cluster.sluice(&args, auth).success();
    recorded_ids(ids.path(), "ids-")
}

/// Lists and trains `dataset` on the cluster of `protection`: ls equals the
/// local answer; training with a keytab alone delivers every id once.
fn lists_and_trains_with_a_keytab(cluster: &Secure, dataset: &str) {
    let url = cluster.data(dataset);
    let local = ls_json(common::sluice([
        "ls",
        "--json",
        fixture(dataset).to_str().expect("utf-8"),
    ]));
    let remote = ls_json(cluster.sluice(&["ls", "--json", &url], &Auth::Keytab));
    assert_eq!(remote, local, "{dataset}: ls differs from the local answer");
    let ids = train_ids(cluster, &url, &Auth::Keytab, &[]);
    assert_exactly_once(&ids, expected_rows(dataset), &format!("{dataset}, keytab"));
}

#[test]
fn privacy_lists_and_trains_with_a_ticket_a_keytab_and_a_delegation_token() {
    let cluster = Secure::privacy();
    lists_and_trains_with_a_keytab(cluster, "parquet_partitioned");
    let url = cluster.data("parquet_partitioned");
    let rows = expected_rows("parquet_partitioned");

    let ticket = cluster.kinit("ticket", "10m");
    let listed = ls_json(cluster.sluice(&["ls", "--json", &url], &Auth::Cache(&ticket)));
    assert_eq!(listed["rows"].as_u64(), Some(rows), "ls with a ticket");
    let ids = train_ids(cluster, &url, &Auth::Cache(&ticket), &[]);
    assert_exactly_once(&ids, rows, "ticket from kinit");

    // A worker without Kerberos: a token Hadoop's `hdfs fetchdt` wrote.
    let token = cluster.fetchdt();
    let ids = train_ids(cluster, &url, &Auth::Token(&token), &[]);
    assert_exactly_once(&ids, rows, "delegation token alone");
}

#[test]
fn integrity_and_authentication_list_and_train_with_a_keytab() {
    for protection in ["integrity", "authentication"] {
        let cluster = Secure::start(protection);
        lists_and_trains_with_a_keytab(&cluster, "csv_gzip");
        let out = run(Command::new("bash").arg(script()).args([
            "stop-secure",
            "--protection",
            protection,
        ]));
        assert!(out.status.success(), "{out}");
    }
}

/// Creates a file when dropped, also when the test fails: the trainers wait for it.
struct OpenGate(PathBuf);

impl Drop for OpenGate {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

#[test]
fn a_keytab_login_renews_where_an_expired_ticket_fails() {
    // A cluster of its own: its namenode restarts mid-job.
    let cluster = Secure::start_own("privacy", "restarted-namenode");
    // 40 files of 50 rows: a few are read ahead before the trainers start, the
    // rest are opened (a namenode call each) after the restart.
    let dataset = "parquet_small_files";
    let url = cluster.data(dataset);
    let scratch = cluster.scratch.path();
    let go = scratch.join("go");
    let ticket = cluster.kinit("ticket-30s", "30s");
    let expired_at = Instant::now() + Duration::from_secs(30);
    // The same job twice at once, its trainers held until the namenode restarted
    // after the first tickets expired: one job with the kinit ticket alone (it
    // cannot renew), one logged in from the keytab alone.
    let job = |auth: &Auth, ids: &Path| {
        let gate = format!("while [ ! -e {} ]; do sleep 0.2; done; ", go.display());
        let exec = format!("{gate}{}", recorder(ids, ""));
        let args = [
            "train",
            &url,
            "--exec",
            &exec,
            "--devices",
            "1",
            "--prefetch",
            "1",
            "--batch-size",
            "50",
            "-q",
        ];
        let mut cmd = sluice_command(args);
        run(cluster.env(&mut cmd, auth))
    };
    let (ticket_ids, keytab_ids) = (scratch.join("ids-ticket"), scratch.join("ids-keytab"));
    for dir in [&ticket_ids, &keytab_ids] {
        std::fs::create_dir_all(dir).expect("ids dir");
    }
    let (with_ticket, with_keytab) = std::thread::scope(|s| {
        let with_ticket = s.spawn(|| job(&Auth::Cache(&ticket), &ticket_ids));
        let with_keytab = s.spawn(|| job(&Auth::Keytab, &keytab_ids));
        let open = OpenGate(go.clone());
        let wait = expired_at.saturating_duration_since(Instant::now());
        std::thread::sleep(wait + Duration::from_secs(3));
        cluster.restart_namenode();
        drop(open);
        (
            with_ticket.join().expect("ticket job"),
            with_keytab.join().expect("keytab job"),
        )
    });
    let rows = expected_rows(dataset);
    // The ticket expired before the namenode came back: its job stops at the
    // first file it opens after the restart, saying why in one line.
    assert_one_line_error(&with_ticket, &["has expired", "kinit", "--keytab"]);
    let read = recorded_ids(&ticket_ids, "ids-").len() as u64;
    assert!(
        read < rows,
        "the ticket job read every file before the restart: {with_ticket}"
    );
    // The keytab login got new tickets for the new connection: every id arrives once.
    with_keytab.success();
    let ids = recorded_ids(&keytab_ids, "ids-");
    assert_exactly_once(&ids, rows, "keytab job across a namenode restart");
}

#[test]
fn a_master_and_two_workers_with_state_on_secure_hdfs_survive_a_master_restart() {
    let cluster = Secure::privacy();
    let data = cluster.data("csv_gzip");
    let token = cluster.fetchdt();
    let mut job = Job::new("csv_gzip", 2);
    job.lease_timeout = "10s".to_string();
    job.state = format!("{}/sluice-tests/state-{}", cluster.url, std::process::id());
    let empty = cluster.scratch.path().join("no-ticket");
    job.env = vec![
        ("HADOOP_CONF_DIR".into(), cluster.conf_dir.clone()),
        ("KRB5_CONFIG".into(), cluster.krb5_config.clone()),
        ("KRB5CCNAME".into(), format!("FILE:{}", empty.display())),
    ];
    let login = [
        "--keytab",
        &cluster.keytab,
        "--principal",
        &cluster.principal,
    ];
    job.master_args = login.iter().map(|s| s.to_string()).collect();
    let mut master = job.start_master(&data);
    // One worker logs in with the keytab, the other holds only a delegation token.
    let keytab_worker = job.start_worker_with("", &login);
    let exec = recorder(&job.ids, "--sleep 0.08");
    // What the token worker says goes to a file, shown if it fails.
    let token_log = cluster.scratch.path().join("token-worker.log");
    let log_file = std::fs::File::create(&token_log).expect("token worker's log");
    let token_worker = job
        .worker_command(&exec)
        .env("HADOOP_TOKEN_FILE_LOCATION", &token)
        .args(["--batch-size", "40", "--prefetch", "2", "-q"])
        .stderr(log_file)
        .spawn()
        .expect("start worker");
    // Killed once rows were committed.
    common::wait_until("rows committed", Duration::from_secs(90), || {
        job.try_status()
            .and_then(|s| s["queue"]["rows_committed"].as_u64())
            .is_some_and(|rows| rows > 0)
    });
    signal(&master, libc::SIGKILL);
    let _ = master.wait();
    master = job.start_master(&data);
    clean_finish(&mut master);
    for (mut worker, what, log) in [
        (keytab_worker, "keytab worker", None),
        (token_worker, "token worker", Some(&token_log)),
    ] {
        let status = wait_exit(&mut worker, what);
        let said = log
            .and_then(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default();
        assert!(status.success(), "the {what} failed ({status}): {said}");
    }
    undelivered(&recorded_ids(&job.ids, "ids-"), job.rows(), job.epochs);
}

/// Runs `cmd` and checks it fails within 30 s with one line naming all of `mentions`.
fn fails_with(cmd: &mut Command, mentions: &[&str]) {
    let started = Instant::now();
    let out = run(cmd);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took too long: {out}"
    );
    assert_one_line_error(&out, mentions);
}

#[test]
fn each_kerberos_failure_is_one_line_saying_what_to_do() {
    let cluster = Secure::privacy();
    let url = cluster.data("csv_gzip");
    let ls = |auth: &Auth| {
        let mut cmd = sluice_command(["ls", &url]);
        cluster.env(&mut cmd, auth);
        cmd
    };
    let scratch = cluster.scratch.path();

    // No ticket at all.
    let none = scratch.join("none");
    fails_with(
        &mut ls(&Auth::Cache(&none)),
        &["no Kerberos ticket", "kinit", "--keytab"],
    );

    // A ticket that has expired.
    let short = cluster.kinit("short", "5s");
    std::thread::sleep(Duration::from_secs(7));
    fails_with(&mut ls(&Auth::Cache(&short)), &["expired", "kinit"]);

    // A keytab that does not hold the principal.
    let mut cmd = ls(&Auth::Cache(&none));
    cmd.args([
        "--keytab",
        &cluster.keytab,
        "--principal",
        "etl@EXAMPLE.COM",
    ]);
    fails_with(
        &mut cmd,
        &[
            "holds no key for principal etl@EXAMPLE.COM",
            &cluster.principal,
        ],
    );

    // A realm no KDC is known for (the same keytab, its realm renamed).
    let mut keytab = std::fs::read(&cluster.keytab).expect("keytab");
    let realm = cluster
        .principal
        .split_once('@')
        .expect("realm")
        .1
        .as_bytes();
    assert_eq!(
        realm.len(),
        "NOWHERE.ORG".len(),
        "a realm of the same length"
    );
    let at = keytab
        .windows(realm.len())
        .position(|w| w == realm)
        .expect("the keytab names its realm");
    keytab[at..at + realm.len()].copy_from_slice(b"NOWHERE.ORG");
    let nowhere = scratch.join("nowhere.keytab");
    std::fs::write(&nowhere, keytab).expect("write keytab");
    let mut cmd = ls(&Auth::Cache(&none));
    cmd.args([
        "--keytab",
        nowhere.to_str().expect("utf-8"),
        "--principal",
        "sluice@NOWHERE.ORG",
    ]);
    fails_with(
        &mut cmd,
        &["cannot get a Kerberos ticket", "NOWHERE.ORG", "KRB5_CONFIG"],
    );

    // The KDC does not answer.
    let conf = std::fs::read_to_string(&cluster.krb5_config).expect("krb5.conf");
    let dead = conf
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("kdc =") {
                "    kdc = 127.0.0.1:1"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let dead_conf = scratch.join("dead-krb5.conf");
    std::fs::write(&dead_conf, dead).expect("write krb5.conf");
    let mut cmd = ls(&Auth::Keytab);
    cmd.env("KRB5_CONFIG", &dead_conf);
    fails_with(
        &mut cmd,
        &["cannot get a Kerberos ticket", "Cannot contact any KDC"],
    );

    // The cluster protects block transfers; this client's configuration does not.
    let unprotected = scratch.join("unprotected-conf");
    std::fs::create_dir_all(&unprotected).expect("conf dir");
    for file in ["core-site.xml", "hdfs-site.xml"] {
        let text = std::fs::read_to_string(Path::new(&cluster.conf_dir).join(file)).expect("conf");
        let text = text.replace(
            "<name>dfs.data.transfer.protection</name>",
            "<name>unused</name>",
        );
        std::fs::write(unprotected.join(file), text).expect("write conf");
    }
    let mut cmd = sluice_command(["train", &url, "--model", "none", "-q"]);
    cluster
        .env(&mut cmd, &Auth::Keytab)
        .env("HADOOP_CONF_DIR", &unprotected);
    fails_with(
        &mut cmd,
        &["dfs.data.transfer.protection", "refused the block transfer"],
    );

    // No MIT Kerberos library: the dynamic loader finds a broken one first.
    let libdir = scratch.join("lib");
    std::fs::create_dir_all(&libdir).expect("lib dir");
    std::fs::write(libdir.join("libgssapi_krb5.so.2"), "not a library").expect("fake lib");
    let ticket = cluster.kinit("ticket-nolib", "10m");
    let mut cmd = ls(&Auth::Cache(&ticket));
    cmd.env("LD_LIBRARY_PATH", &libdir);
    fails_with(
        &mut cmd,
        &["libgssapi_krb5.so.2", "libgssapi-krb5-2", "krb5-libs"],
    );
}
