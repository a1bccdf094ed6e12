//! Emulator fixtures: a service started by its script in tests/services, shared
//! by the tests of this binary that use it, and stopped when the last of them
//! drops it — unless it was already running (started by tests/run.sh), in which
//! case whoever started it stops it.
//!
//! Services live under a state root of their own run's: `$SLUICE_SERVICES`
//! (tests/run.sh makes one per run), or else one of this test process's, and
//! listen on ports chosen free when they start. Two runs on one machine never
//! stop, or use, each other's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::common::{describe, run};

/// One running emulator, as seen by one test.
pub struct Service {
    /// The script under tests/services (`s3`, `gcs`, `azure`).
    script: &'static str,
    /// The instance name: its state directory under `$SLUICE_SERVICES`.
    instance: String,
    /// Extra environment for the script (ports, instance name).
    env: Vec<(String, String)>,
    /// Where it answers, as printed by the script.
    pub endpoint: String,
}

/// Users of each running instance, and whether this process started it.
struct Users {
    count: usize,
    owned: bool,
    endpoint: String,
}

static RUNNING: Mutex<Option<HashMap<String, Users>>> = Mutex::new(None);

impl Service {
    /// Starts `tests/services/<script>.sh` (idempotent) and waits until it answers;
    /// panics with the script's output when it cannot. `env` names the instance
    /// and port for scripts that take them.
    pub fn start(script: &'static str, instance: &str, env: &[(&str, &str)]) -> Service {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        let running = running.get_or_insert_with(HashMap::new);
        if let Some(users) = running.get_mut(instance) {
            users.count += 1;
            return Service {
                script,
                instance: instance.to_string(),
                env,
                endpoint: users.endpoint.clone(),
            };
        }
        let owned = !already_running(instance);
        let out = run(&mut script_command(script, &env, "start"));
        assert!(
            out.status.success(),
            "cannot start the {script} emulator (tests never skip a missing service; \
             install it with `{} install`): {out}",
            script_path(script).display()
        );
        let endpoint = out
            .stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("the {script} script printed no endpoint: {out}"))
            .trim()
            .to_string();
        running.insert(
            instance.to_string(),
            Users {
                count: 1,
                owned,
                endpoint: endpoint.clone(),
            },
        );
        Service {
            script,
            instance: instance.to_string(),
            env,
            endpoint,
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        let Some(users) = running.as_mut().and_then(|r| r.get_mut(&self.instance)) else {
            return;
        };
        users.count -= 1;
        if users.count > 0 {
            return;
        }
        let owned = users.owned;
        if let Some(r) = running.as_mut() {
            r.remove(&self.instance);
        }
        if owned {
            let mut cmd = script_command(self.script, &self.env, "stop");
            let out = run(&mut cmd);
            if !out.status.success() {
                eprintln!("cannot stop {}: {out}", describe(&cmd));
            }
        }
    }
}

fn script_path(script: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/services")
        .join(format!("{script}.sh"))
}

fn script_command(script: &str, env: &[(String, String)], action: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(script_path(script))
        .arg(action)
        .env("SLUICE_SERVICES", services_root())
        // What this process starts goes with it, however it ends.
        .env("SLUICE_SERVICE_EXIT_WITH", std::process::id().to_string());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The state root of this run's services: `$SLUICE_SERVICES` where the run
/// set one (tests/run.sh), else one of this process's own under the temp
/// directory, so that a test run started alone shares nothing with another.
pub fn services_root() -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        std::env::var_os("SLUICE_SERVICES")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                std::env::temp_dir().join(format!("sluice-services-{}", std::process::id()))
            })
    })
    .clone()
}

/// Whether the instance's state says it runs already (its pid is alive and it
/// was seen ready), in which case the one who started it will stop it.
fn already_running(instance: &str) -> bool {
    let state = services_root().join(instance);
    let Ok(pid) = std::fs::read_to_string(state.join("pid")) else {
        return false;
    };
    state.join("ready").is_file() && Path::new("/proc").join(pid.trim()).exists()
}
