//! Tables by name in a Kerberized Hive Metastore: the standalone metastore
//! 4.0.1 with SASL on (`hive.metastore.sasl.enabled`), its principal
//! `hive/localhost` in a MiniKdc (tests/services/hive-metastore.sh
//! start-secure), serving a copy of the metastore Spark registered the
//! catalog fixtures in (tests/fixtures/make_catalogs.py): the tables point at
//! the files Spark wrote. Trained with a keytab login and with a ticket cache,
//! at each quality of protection the metastore can ask for (privacy,
//! integrity, authentication); each Kerberos failure is one line, in HDFS's
//! words.
//!
//! Never skipped: when the metastore or its KDC cannot start, every test here
//! fails.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::common::{
    assert_one_line_error, copy_dir, fixtures_dir, recorded_ids, recorder, run, sluice_command, Run,
};
use crate::object_stores::service::services_root;
use serde_json::Value;

/// The table trained: partitioned, one partition outside the table's root.
const TABLE: &str = "web.clicks";

/// How a sluice process authenticates.
enum Auth<'a> {
    /// The ticket cache at this path (filled by `kinit`, or empty).
    Cache(&'a Path),
    /// `--keytab --principal`, with an empty ticket cache.
    Keytab,
}

/// A Kerberized metastore as `hive-metastore.sh start-secure` reports it.
struct Metastore {
    uri: String,
    krb5_config: String,
    keytab: String,
    principal: String,
    protection: String,
    /// Ticket caches.
    scratch: tempfile::TempDir,
}

/// A copy of the metastore database the fixtures' tables are registered in,
/// for the metastore of `protection` (Derby serves one process), one per
/// version of the fixtures under this run's state root, made once.
fn database_copy(protection: &str) -> PathBuf {
    let bytes =
        std::fs::read(fixtures_dir().join("catalogs/expected.json")).expect("expected.json");
    // FNV-1a: a name that changes with the fixtures.
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let data = services_root().join(format!("hive-metastore-kerberos-{protection}-{hash:016x}"));
    if !data.join("metastore_db").is_dir() {
        let source = Path::new(expected()["dir"].as_str().expect("hive.dir")).join("metastore_db");
        let partial = PathBuf::from(format!("{}.{}", data.display(), std::process::id()));
        copy_dir(&source, &partial.join("metastore_db"));
        for lock in ["db.lck", "dbex.lck"] {
            let _ = std::fs::remove_file(partial.join("metastore_db").join(lock));
        }
        // Another process may have made it meanwhile: either copy will do.
        if std::fs::rename(&partial, &data).is_err() {
            let _ = std::fs::remove_dir_all(&partial);
        }
    }
    data
}

/// `bash hive-metastore.sh` for the metastore of `protection`: under this
/// run's state root (`SLUICE_SERVICES`), with its KDC, on a port free when
/// this process first asked for one for `protection`, so that runs beside
/// each other never meet.
fn script(protection: &str) -> Command {
    static PORTS: Mutex<BTreeMap<String, u16>> = Mutex::new(BTreeMap::new());
    let port = *PORTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(protection.to_string())
        .or_insert_with(|| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("a free port")
        });
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/hive-metastore.sh"))
        .env("SLUICE_SERVICES", services_root())
        .env("SLUICE_HIVE_METASTORE_PORT", port.to_string());
    cmd
}

/// `catalogs/expected.json`'s Hive part, written by make_catalogs.py.
fn expected() -> &'static Value {
    &crate::catalogs::expected()["hive"]
}

impl Metastore {
    /// Starts (or finds) the metastore asking for `protection`, on a copy of
    /// the fixtures' database (it stops when this process exits, or with
    /// [`Metastore::stop`]).
    fn start(protection: &str) -> Metastore {
        let scratch = tempfile::tempdir().expect("tempdir");
        let data = database_copy(protection);
        let out = run(script(protection)
            .args(["start-secure", "--protection", protection])
            .env("SLUICE_HIVE_METASTORE_DIR", &data)
            .env(
                "SLUICE_HIVE_METASTORE_EXIT_WITH",
                std::process::id().to_string(),
            ));
        assert!(
            out.status.success(),
            "the Kerberized metastore did not start: {out}"
        );
        Metastore {
            uri: out.printed("SLUICE_HIVE_METASTORE_URI"),
            krb5_config: out.printed("KRB5_CONFIG"),
            keytab: out.printed("SLUICE_KEYTAB"),
            principal: out.printed("SLUICE_PRINCIPAL"),
            protection: protection.to_string(),
            scratch,
        }
    }

    fn privacy() -> &'static Metastore {
        static METASTORE: OnceLock<Metastore> = OnceLock::new();
        METASTORE.get_or_init(|| Metastore::start("privacy"))
    }

    fn stop(&self) {
        let out =
            run(script(&self.protection).args(["stop-secure", "--protection", &self.protection]));
        assert!(out.status.success(), "{out}");
    }

    /// `sluice ARGS`, authenticated by `auth` only (nothing inherited from
    /// the test's own environment).
    fn sluice(&self, args: &[&str], auth: &Auth) -> Run {
        let mut cmd = sluice_command(args);
        let empty = self.scratch.path().join("no-ticket");
        cmd.env("KRB5_CONFIG", &self.krb5_config)
            .env_remove("KRB5_CLIENT_KTNAME")
            .env_remove("HADOOP_TOKEN_FILE_LOCATION")
            .env_remove("SLUICE_CATALOG")
            .env("KRB5CCNAME", format!("FILE:{}", empty.display()));
        match auth {
            Auth::Cache(path) => cmd.env("KRB5CCNAME", format!("FILE:{}", path.display())),
            Auth::Keytab => cmd.args(["--keytab", &self.keytab, "--principal", &self.principal]),
        };
        run(&mut cmd)
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

    /// Trains `TABLE` by name with recording trainers; how often each id arrived.
    fn train_ids(&self, auth: &Auth, extra: &[&str]) -> HashMap<i64, u32> {
        let ids = tempfile::tempdir().expect("tempdir");
        let exec = recorder(ids.path(), "");
        let mut args = vec![
            "train",
            TABLE,
            "--catalog",
            &self.uri,
            "--exec",
            &exec,
            "--devices",
            "2",
            "-q",
        ];
        args.extend_from_slice(extra);
        self.sluice(&args, auth).success();
        recorded_ids(ids.path(), "ids-")
    }

    /// The security layer a listing negotiated, from its debug log.
    fn negotiated_qop(&self, auth: &Auth) -> String {
        let out = self
            .sluice(&["ls", TABLE, "--catalog", &self.uri, "-v"], auth)
            .success();
        out.stderr
            .lines()
            .find(|l| l.contains("SASL/GSSAPI negotiated"))
            .and_then(|l| l.split("qop=").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no SASL negotiation logged: {out}"))
            .to_string()
    }
}

/// Spark's ids of `TABLE`, each once.
fn assert_every_row_once(ids: &HashMap<i64, u32>, what: &str) {
    let mut want: Vec<i64> = expected()["tables"][TABLE]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_i64().expect("id"))
        .collect();
    want.sort();
    let twice: Vec<_> = ids.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "{what}: ids delivered twice: {twice:?}");
    let mut got: Vec<i64> = ids.keys().copied().collect();
    got.sort();
    assert_eq!(got, want, "{what}: the ids trained are not Spark's");
}

#[test]
fn privacy_trains_every_row_with_a_keytab_and_with_a_ticket_cache() {
    let hms = Metastore::privacy();
    let listed = hms
        .sluice(
            &["ls", TABLE, "--catalog", &hms.uri, "--json"],
            &Auth::Keytab,
        )
        .success()
        .json();
    assert_eq!(
        listed["rows"],
        expected()["tables"][TABLE]["count"],
        "{listed}"
    );
    assert_eq!(listed["catalog"]["table"], TABLE, "{listed}");
    let ids = hms.train_ids(&Auth::Keytab, &[]);
    assert_every_row_once(&ids, "keytab");

    let ticket = hms.kinit("ticket", "10m");
    let ids = hms.train_ids(&Auth::Cache(&ticket), &[]);
    assert_every_row_once(&ids, "ticket cache");
    // Every message was encrypted: the metastore asked for privacy.
    assert_eq!(hms.negotiated_qop(&Auth::Cache(&ticket)), "auth-conf");

    // The principal named, with the default's pattern and with the realm.
    let named = format!("hive/localhost@{}", realm(&hms.principal));
    for principal in ["hive/_HOST@REALM", named.as_str()] {
        let ids = hms.train_ids(&Auth::Keytab, &["--catalog-principal", principal]);
        assert_every_row_once(&ids, principal);
    }
}

#[test]
fn a_job_file_names_the_catalog_principal() {
    let hms = Metastore::privacy();
    let dir = tempfile::tempdir().expect("tempdir");
    let ids = dir.path().join("ids");
    std::fs::create_dir(&ids).expect("mkdir");
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "source = \"{TABLE}\"\ncatalog = \"{}\"\ncatalog-principal = \"hive/_HOST@REALM\"\n\
             keytab = \"{}\"\nprincipal = \"{}\"\nstate = \"{}\"\nexec = \"{}\"\n",
            hms.uri,
            hms.keytab,
            hms.principal,
            dir.path().join("state").display(),
            recorder(&ids, "")
        ),
    )
    .expect("write job");
    let mut cmd = sluice_command(["run", job.to_str().expect("utf-8"), "--json"]);
    let empty = hms.scratch.path().join("no-ticket-job");
    cmd.env("KRB5_CONFIG", &hms.krb5_config)
        .env("KRB5CCNAME", format!("FILE:{}", empty.display()));
    let report = run(&mut cmd).success().json();
    assert_eq!(
        report["rows"],
        expected()["tables"][TABLE]["count"],
        "{report}"
    );
    assert_every_row_once(&recorded_ids(&ids, "ids-"), "job file");
}

#[test]
fn integrity_and_authentication_train_every_row_at_their_layer() {
    for (protection, qop) in [("integrity", "auth-int"), ("authentication", "auth")] {
        let hms = Metastore::start(protection);
        assert_eq!(hms.negotiated_qop(&Auth::Keytab), qop, "{protection}");
        let ids = hms.train_ids(&Auth::Keytab, &[]);
        assert_every_row_once(&ids, protection);
        hms.stop();
    }
}

fn realm(principal: &str) -> &str {
    principal.split_once('@').expect("a realm").1
}

/// Checks a failed run says, in one line, all of `mentions`, and nothing of
/// the keytab's keys.
fn fails_with(hms: &Metastore, run: &Run, mentions: &[&str]) {
    assert_one_line_error(run, mentions);
    let keytab = std::fs::read(&hms.keytab).expect("keytab");
    // The last bytes of the keytab are a key; no 8 of them in a row are shown.
    let key = &keytab[keytab.len() - 16..];
    let shown = format!("{}{}", run.stdout, run.stderr);
    for window in key.windows(8) {
        let hex: String = window.iter().map(|b| format!("{b:02x}")).collect();
        assert!(!shown.contains(&hex), "a key is shown: {run}");
    }
}

#[test]
fn each_kerberos_failure_is_one_line_in_hdfss_words() {
    let hms = Metastore::privacy();
    let ls = |auth: &Auth, extra: &[&str]| {
        let mut args = vec!["ls", TABLE, "--catalog", hms.uri.as_str()];
        args.extend_from_slice(extra);
        hms.sluice(&args, auth)
    };
    let scratch = hms.scratch.path();

    // No ticket at all: what HDFS says, naming the metastore.
    let none = scratch.join("none");
    let out = ls(&Auth::Cache(&none), &[]);
    fails_with(
        hms,
        &out,
        &["no Kerberos ticket for", &hms.uri, "kinit", "--keytab"],
    );
    // Likewise with the principal named (no plain call first).
    let out = ls(
        &Auth::Cache(&none),
        &["--catalog-principal", "hive/_HOST@REALM"],
    );
    fails_with(hms, &out, &["no Kerberos ticket for", &hms.uri]);

    // A ticket that has expired.
    let short = hms.kinit("short", "5s");
    std::thread::sleep(Duration::from_secs(7));
    let out = ls(&Auth::Cache(&short), &[]);
    fails_with(hms, &out, &["has expired", "kinit", "--keytab"]);

    // A principal the KDC does not know.
    let out = ls(&Auth::Keytab, &["--catalog-principal", "hive/nohost@REALM"]);
    let wrong = format!("hive/nohost@{}", realm(&hms.principal));
    fails_with(
        hms,
        &out,
        &[
            "Kerberos authentication to",
            "not found in Kerberos database",
            &wrong,
            "--catalog-principal",
        ],
    );

    // A principal the KDC knows, but not the metastore's.
    let other = format!("hdfs/localhost@{}", realm(&hms.principal));
    let out = ls(&Auth::Keytab, &["--catalog-principal", &other]);
    fails_with(hms, &out, &["refused the SASL negotiation"]);
}
