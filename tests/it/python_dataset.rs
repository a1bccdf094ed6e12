//! `sluice_trainer.Dataset`: a Python process that owns its training loop runs
//! sluice as its child (`--attach`) and iterates the batches. Every id once per
//! epoch (as Arrow batches, torch tensors and numpy arrays); an exception in the
//! loop stops sluice; a SIGKILL of the Python process takes sluice with it, and a
//! rerun with `state=` and checkpoints leaves every id in the model exactly once;
//! sluice's errors arrive as `SluiceError` with its one-line message; two Python
//! processes are the workers of one distributed job; `torchrun` ranks train DDP in
//! lockstep (equal steps, equal parameters), and so do the processes of a
//! `TorchDistributor` on a Spark `local-cluster[2,1,1024]`.
//!
//! The scenarios are `tests/trainers/dataset_loop.py`, run with the package from
//! `python/sluice_trainer` and `SLUICE_BINARY` naming the binary under test.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::cluster::{clean_finish, wait_exit, Job, TOKEN};
use crate::common::{expected_dataset, fixture, python, run, Run, SLUICE};

/// A file of the repository.
fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `python tests/trainers/dataset_loop.py ARGS` with the package importable and
/// this build of sluice as the Dataset's child.
fn loop_command(args: &[&str]) -> Command {
    let mut command = Command::new(python());
    command
        .arg(repo("tests/trainers/dataset_loop.py"))
        .args(args)
        .env("PYTHONPATH", repo("python/sluice_trainer"))
        .env("SLUICE_BINARY", SLUICE)
        .env_remove("RUST_LOG");
    command
}

fn run_loop(args: &[&str]) -> Run {
    run(&mut loop_command(args))
}

/// How often each id appears in `ids`.
fn counts(ids: impl IntoIterator<Item = i64>) -> HashMap<i64, u32> {
    let mut counts = HashMap::new();
    for id in ids {
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}

fn ids_file(out: &Path) -> HashMap<i64, u32> {
    let text = std::fs::read_to_string(out.join("ids.txt")).expect("ids.txt");
    counts(text.lines().map(|l| l.parse::<i64>().expect("an id")))
}

fn json_ids(path: &Path) -> Vec<i64> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let value: serde_json::Value = serde_json::from_str(&text).expect("json");
    value["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_i64().expect("an id"))
        .collect()
}

fn rows(name: &str) -> u64 {
    expected_dataset(name)["rows"].as_u64().expect("rows")
}

#[test]
fn a_plain_loop_gets_every_id_once_per_epoch_as_batches_tensors_and_arrays() {
    let name = "parquet_row_groups";
    let data = fixture(name);
    for mode in ["plain", "torch", "numpy"] {
        let out = tempfile::tempdir().expect("tempdir");
        let epochs = if mode == "plain" { "2" } else { "1" };
        run_loop(&[
            mode,
            data.to_str().expect("utf-8"),
            out.path().to_str().expect("utf-8"),
            "--epochs",
            epochs,
            "--batch-size",
            "512",
        ])
        .success();
        let ids = ids_file(out.path());
        let epochs: u32 = epochs.parse().expect("a number");
        assert_eq!(ids.len() as u64, rows(name), "{mode}: every id");
        assert!(
            ids.values().all(|&c| c == epochs),
            "{mode}: each id once per epoch"
        );
        if mode == "plain" {
            // In shared memory as exec trainers take it: lone record batch
            // messages of the stream's schema, never whole streams. The
            // protocol's "from then on": the first batches may come on the
            // pipe, sent before sluice read the loop's `shm message`; none after
            // the first one in shared memory.
            let forms = std::fs::read_to_string(out.path().join("forms.json")).expect("forms");
            let forms: serde_json::Value = serde_json::from_str(&forms).expect("json");
            let counts = forms["counts"].as_object().expect("counts");
            assert!(
                counts
                    .keys()
                    .all(|form| form == "message" || form == "None"),
                "{forms}"
            );
            let first_shared = forms["first_shared"]
                .as_u64()
                .expect("a batch in shared memory");
            if let Some(last_on_pipe) = forms["last_on_pipe"].as_u64() {
                assert!(last_on_pipe < first_shared, "{forms}");
            }
        }
    }
}

/// The ids a plain loop got, in order, with `shuffle="global"` and `seed`.
fn globally_shuffled(seed: &str) -> Vec<i64> {
    let out = tempfile::tempdir().expect("tempdir");
    run_loop(&[
        "plain",
        fixture("parquet_row_groups").to_str().expect("utf-8"),
        out.path().to_str().expect("utf-8"),
        "--batch-size",
        "512",
        "--option",
        "shuffle=global",
        "--option",
        "shuffle_window=5000",
        "--option",
        &format!("seed={seed}"),
        "--option",
        "split_size=64KiB",
    ])
    .success();
    let text = std::fs::read_to_string(out.path().join("ids.txt")).expect("ids.txt");
    text.lines()
        .map(|l| l.parse::<i64>().expect("an id"))
        .collect()
}

#[test]
fn shuffle_global_gives_a_loop_the_same_order_for_the_same_seed() {
    let first = globally_shuffled("3");
    let rows = rows("parquet_row_groups");
    assert_eq!(counts(first.iter().copied()).len() as u64, rows, "every id");
    assert_eq!(first.len() as u64, rows, "each id once");
    assert!(first.windows(2).any(|w| w[0] > w[1]), "ids in order");
    assert_eq!(
        globally_shuffled("3"),
        first,
        "the same seed, another order"
    );
    assert_ne!(
        globally_shuffled("4"),
        first,
        "another seed, the same order"
    );
}

#[test]
fn an_exception_in_the_loop_stops_sluice() {
    let out = tempfile::tempdir().expect("tempdir");
    let data = fixture("parquet_row_groups");
    run_loop(&[
        "raise",
        data.to_str().expect("utf-8"),
        out.path().to_str().expect("utf-8"),
    ])
    .success();
    let alive = std::fs::read_to_string(out.path().join("alive.txt")).expect("alive.txt");
    assert_eq!(alive, "no", "sluice outlived the loop that raised");
}

#[test]
fn a_sigkilled_loop_takes_sluice_with_it_and_a_rerun_trains_every_id_once_into_the_model() {
    let name = "parquet_row_groups";
    let data = fixture(name);
    let out = tempfile::tempdir().expect("tempdir");
    let state = out.path().join("state");
    let args = |kill: bool| {
        let mut args = vec![
            "model".to_string(),
            data.display().to_string(),
            out.path().display().to_string(),
            "--state".into(),
            state.display().to_string(),
            "--every".into(),
            "7".into(),
        ];
        if kill {
            args.extend(["--kill-after".into(), "40".into()]);
        }
        args
    };
    let first: Vec<String> = args(true);
    let killed = run_loop(&first.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed.status),
        Some(9),
        "the loop killed itself: {killed}"
    );
    // No sluice left that still holds the state.
    common::wait_until(
        "sluice to die with its parent",
        std::time::Duration::from_secs(10),
        || no_attached_sluice(&state),
    );
    let second: Vec<String> = args(false);
    run_loop(&second.iter().map(String::as_str).collect::<Vec<_>>()).success();
    let model = counts(json_ids(&out.path().join("final.json")));
    common::assert_exactly_once(&model, rows(name), "the model after a SIGKILL and a rerun");
}

/// Whether no process runs `sluice ... --attach` with `state` in its command line.
fn no_attached_sluice(state: &Path) -> bool {
    let state = state.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    !entries.flatten().any(|entry| {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        text.contains("--attach") && text.contains(&state)
    })
}

#[test]
fn sluice_errors_are_python_exceptions_with_sluice_s_message() {
    let script = "import sluice_trainer, sys\n\
                  try:\n\
                  \x20   for b in sluice_trainer.Dataset(sys.argv[1], split_key='nope', sample=0.1):\n\
                  \x20       pass\n\
                  except sluice_trainer.SluiceError as e:\n\
                  \x20   print('SluiceError:', e)\n";
    let data = fixture("parquet_row_groups");
    let out = run(Command::new(python())
        .args(["-c", script])
        .arg(&data)
        .env("PYTHONPATH", repo("python/sluice_trainer"))
        .env("SLUICE_BINARY", SLUICE))
    .success();
    let line = out.stdout.trim();
    assert!(
        line.starts_with("SluiceError: cannot choose the rows to train: --split-key nope")
            && !line.contains('\n'),
        "{out}"
    );
}

/// sluice can stop before the Dataset has said a word on the ack pipe (asked for
/// shared memory, declared checkpoints): the closed pipe must not hide sluice's
/// message. No real run stops that early on demand, so a stand-in binary fails
/// at once with sluice's kind of error line.
#[test]
fn a_sluice_that_stops_before_the_dataset_speaks_still_gives_its_message() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let binary = tmp.path().join("sluice");
    std::fs::write(
        &binary,
        "#!/bin/sh\necho 'sluice: --split-key nope: no such column' >&2\nexit 2\n",
    )
    .expect("write the stand-in");
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for checkpoints in ["False", "True"] {
        let script = format!(
            "import sluice_trainer, sys, time\n\
             try:\n\
             \x20   ds = sluice_trainer.Dataset(sys.argv[1], checkpoints={checkpoints})\n\
             \x20   for b in ds:\n\
             \x20       pass\n\
             except sluice_trainer.SluiceError as e:\n\
             \x20   print('SluiceError:', e)\n"
        );
        let out = run(Command::new(python())
            .args(["-c", &script])
            .arg(fixture("parquet_row_groups"))
            .env("PYTHONPATH", repo("python/sluice_trainer"))
            .env("SLUICE_BINARY", &binary))
        .success();
        assert_eq!(
            out.stdout.trim(),
            "SluiceError: --split-key nope: no such column",
            "checkpoints={checkpoints}: {out}"
        );
    }
}

/// Without a binary the Dataset says where it looked, the variable that names
/// one (`SLUICE_BINARY`, the one the code reads) and the package that carries it.
#[test]
fn a_missing_binary_is_named_with_the_variable_and_the_package_that_carry_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = "import sluice_trainer, sys\n\
                  try:\n\
                  \x20   sluice_trainer.Dataset(sys.argv[1])\n\
                  except sluice_trainer.SluiceNotFound as e:\n\
                  \x20   print(e)\n";
    let missing = tmp.path().join("no-such-sluice");
    let cases: [(Option<&Path>, &[&str]); 2] = [
        (None, &["pip install sluice-train", "SLUICE_BINARY"]),
        (Some(&missing), &["SLUICE_BINARY=", "no-such-sluice"]),
    ];
    for (binary, mentions) in cases {
        let mut command = Command::new(python());
        command
            .args(["-c", script])
            .arg(fixture("parquet_row_groups"))
            .env("PYTHONPATH", repo("python/sluice_trainer"))
            .env("PATH", tmp.path())
            .env_remove("SLUICE_BINARY");
        if let Some(binary) = binary {
            command.env("SLUICE_BINARY", binary);
        }
        let out = run(&mut command).success();
        for mention in mentions {
            assert!(out.stdout.contains(mention), "{mention}: {out}");
        }
        assert!(!out.stdout.contains("pip install sluice "), "{out}");
    }
}

#[test]
fn two_python_processes_are_the_workers_of_one_job() {
    let name = "parquet_row_groups";
    let job = Job::new(name, 2);
    let mut master = job.start_master(fixture(name));
    let url = job.url();
    let token = job.ids.join("token");
    std::fs::write(&token, TOKEN).expect("token file");
    let mut permissions = std::fs::metadata(&token).expect("token").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o600);
    std::fs::set_permissions(&token, permissions).expect("chmod");
    let script = "import sluice_trainer, sys\n\
                  ds = sluice_trainer.Dataset(master=sys.argv[1], token_file=sys.argv[2],\n\
                  \x20                           name=sys.argv[3], batch_size=300)\n\
                  with open(sys.argv[4], 'w') as f:\n\
                  \x20   for b in ds:\n\
                  \x20       f.write(''.join('%d\\n' % i for i in b.column('id').to_pylist()))\n";
    let workers: Vec<_> = (0..2)
        .map(|i| {
            Command::new(python())
                .args(["-c", script, &url])
                .arg(&token)
                .arg(format!("py-{i}"))
                .arg(job.ids.join(format!("ids-{i}.txt")))
                .env("PYTHONPATH", repo("python/sluice_trainer"))
                .env("SLUICE_BINARY", SLUICE)
                .env_remove("SLUICE_TOKEN")
                .spawn()
                .expect("python")
        })
        .collect();
    for (i, mut worker) in workers.into_iter().enumerate() {
        let status = wait_exit(&mut worker, &format!("python worker {i}"));
        assert!(status.success(), "python worker {i} failed");
    }
    clean_finish(&mut master);
    let counts = job.recorded_ids();
    common::cluster::undelivered(&counts, rows(name), 2);
    assert!(
        counts.values().all(|&c| c == 2),
        "each id once per epoch, across the two processes"
    );
}

#[test]
fn torchrun_ranks_train_ddp_from_one_job_with_equal_steps_and_equal_parameters() {
    let name = "parquet_row_groups";
    let job = Job::new(name, 2);
    let mut master = job.start_master(fixture(name));
    let out = tempfile::tempdir().expect("tempdir");
    let mut torchrun = Command::new(python());
    torchrun
        .args([
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
        ])
        .arg(repo("tests/trainers/dataset_loop.py"))
        .args(["worker", &job.url()])
        .arg(out.path())
        .args(["--batch-size", "700"])
        .env("PYTHONPATH", repo("python/sluice_trainer"))
        .env("SLUICE_BINARY", SLUICE)
        .env("SLUICE_TOKEN", TOKEN)
        .env("OMP_NUM_THREADS", "1")
        .env_remove("RUST_LOG");
    let mut child = torchrun.spawn().expect("torchrun");
    let status = wait_exit(&mut child, "torchrun");
    assert!(status.success(), "torchrun failed");
    clean_finish(&mut master);
    let ranks: Vec<serde_json::Value> = (0..2)
        .map(|r| {
            let path = out.path().join(format!("rank-{r}.json"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            serde_json::from_str(&text).expect("json")
        })
        .collect();
    assert_eq!(
        ranks[0]["steps"], ranks[1]["steps"],
        "equal steps on both ranks"
    );
    assert_eq!(
        ranks[0]["params"], ranks[1]["params"],
        "DDP kept the replicas equal"
    );
    let ids = counts(
        ranks
            .iter()
            .flat_map(|r| r["ids"].as_array().expect("ids").clone())
            .map(|v| v.as_i64().expect("an id")),
    );
    common::cluster::undelivered(&ids, rows(name), 2);
    assert!(ids.values().all(|&c| c == 2), "every id once per epoch");
}

#[test]
fn a_torch_distributor_function_trains_every_id_once_from_dataset_workers() {
    let name = "parquet_row_groups";
    let job = Job::new(name, 1);
    let mut master = job.start_master(fixture(name));
    let token = job.ids.join("token");
    std::fs::write(&token, TOKEN).expect("token file");
    let mut permissions = std::fs::metadata(&token).expect("token").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o600);
    std::fs::set_permissions(&token, permissions).expect("chmod");
    let out = tempfile::tempdir().expect("tempdir");
    let mut driver = Command::new(python());
    driver
        .arg(repo("tests/trainers/distributor_ids.py"))
        .arg(job.url())
        .arg(&token)
        .arg(out.path())
        .env("PYSPARK_PYTHON", python())
        .env("PYSPARK_DRIVER_PYTHON", python())
        .env("PYTHONPATH", repo("python/sluice_trainer"))
        .env("SLUICE_BINARY", SLUICE)
        .env("OMP_NUM_THREADS", "1")
        .env_remove("SLUICE_TOKEN")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut driver, 0);
    let mut child = driver.spawn().expect("the TorchDistributor driver");
    // A local-cluster's JVMs take most of this on a small machine.
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > std::time::Duration::from_secs(300) {
            // SAFETY: kill(2) of the process group this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            panic!("the TorchDistributor driver did not finish within 300 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(status.success(), "the TorchDistributor driver failed");
    clean_finish(&mut master);
    let mut steps = Vec::new();
    let mut all = Vec::new();
    for rank in 0..2 {
        let path = out.path().join(format!("rank-{rank}.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        steps.push(value["steps"].as_u64().expect("steps"));
        all.extend(json_ids(&path));
    }
    assert_eq!(steps[0], steps[1], "equal steps in lockstep");
    common::assert_exactly_once(&counts(all), rows(name), "TorchDistributor's ranks");
}

/// A batch larger than one read of the pipe (64 KiB), written in pieces as a
/// busy sluice writes it, reaches the loop whole: the data pipe is read whole,
/// not cut at what one read returned.
#[test]
fn a_batch_larger_than_a_pipe_read_arrives_whole() {
    let script = r#"
import os, threading, time
import pyarrow as pa
from sluice_trainer.dataset import _WholeReads
batch = pa.record_batch([pa.array(range(200000))], names=["id"])
sink = pa.BufferOutputStream()
with pa.ipc.new_stream(sink, batch.schema) as writer:
    writer.write_batch(batch)
data = sink.getvalue().to_pybytes()
r, w = os.pipe()
def feed():
    for i in range(0, len(data), 50000):
        os.write(w, data[i:i + 50000])
        time.sleep(0.005)
    os.close(w)
threading.Thread(target=feed).start()
print(sum(b.num_rows for b in pa.ipc.open_stream(_WholeReads(r))))
"#;
    let out = run(Command::new(python())
        .args(["-c", script])
        .env("PYTHONPATH", repo("python/sluice_trainer")))
    .success();
    assert_eq!(out.stdout.trim(), "200000", "{out}");
}

/// `OUT/epochs.json` of the `epochs` scenario over `parquet_partitioned`,
/// 2 epochs of batches of 100 rows, with `extra` options.
fn epochs_seen(extra: &[&str]) -> Vec<serde_json::Value> {
    let out = tempfile::tempdir().expect("tempdir");
    let data = fixture("parquet_partitioned");
    let mut args = vec![
        "epochs",
        data.to_str().expect("utf-8"),
        out.path().to_str().expect("utf-8"),
        "--epochs",
        "2",
        "--batch-size",
        "100",
    ];
    args.extend_from_slice(extra);
    run_loop(&args).success();
    let text = std::fs::read_to_string(out.path().join("epochs.json")).expect("epochs.json");
    let value: serde_json::Value = serde_json::from_str(&text).expect("json");
    value.as_array().expect("epochs").clone()
}

/// Every batch of `epoch` is tagged with its index and its steps 0, 1, ...
fn assert_tagged(epoch: &serde_json::Value) -> usize {
    let index = epoch["index"].as_u64().expect("index");
    let batches = epoch["batches"].as_array().expect("batches");
    for (step, batch) in batches.iter().enumerate() {
        assert_eq!(batch[0].as_u64(), Some(index), "ds.epoch: {batch:?}");
        assert_eq!(batch[1].as_u64(), Some(step as u64), "ds.step: {batch:?}");
    }
    batches.len()
}

#[test]
fn a_loop_sees_each_epoch_its_batches_epoch_and_step_and_its_length() {
    let epochs = epochs_seen(&[]);
    assert_eq!(epochs.len(), 2, "{epochs:?}");
    let mut ids = Vec::new();
    for (index, epoch) in epochs.iter().enumerate() {
        assert_eq!(epoch["index"].as_u64(), Some(index as u64));
        let steps = assert_tagged(epoch);
        assert_eq!(
            epoch["len"].as_u64(),
            Some(steps as u64),
            "len(epoch): {epoch:?}"
        );
        for batch in epoch["batches"].as_array().expect("batches") {
            ids.extend(
                batch[3]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .filter_map(|v| v.as_i64()),
            );
        }
    }
    let rows = rows("parquet_partitioned");
    assert_eq!(ids.len() as u64, 2 * rows);
    assert!(
        counts(ids).values().all(|&c| c == 2),
        "each id once per epoch"
    );
}

#[test]
fn a_filter_decided_only_as_rows_are_read_makes_len_a_type_error_naming_it() {
    let epochs = epochs_seen(&["--option", "filter=x1 > 0.5"]);
    assert_eq!(epochs.len(), 2, "{epochs:?}");
    for epoch in &epochs {
        let steps = assert_tagged(epoch);
        assert!(steps > 0);
        let why = epoch["len"].as_str().expect("a TypeError's message");
        assert!(
            why.contains("--filter") && why.contains("x1 > 0.5"),
            "{why}"
        );
    }
}

#[test]
fn a_filter_on_partition_columns_only_keeps_len_known() {
    let epochs = epochs_seen(&["--option", "filter=country = 'US'"]);
    assert_eq!(epochs.len(), 2, "{epochs:?}");
    let all = epochs_seen(&[]);
    let all_steps = assert_tagged(&all[0]);
    for epoch in &epochs {
        let steps = assert_tagged(epoch);
        assert!(steps > 0 && steps < all_steps, "{steps} of {all_steps}");
        assert_eq!(
            epoch["len"].as_u64(),
            Some(steps as u64),
            "len(epoch) is the steps the filtered epoch yields: {epoch:?}"
        );
    }
}

#[test]
fn len_of_torch_iterable_is_the_steps_each_of_its_epochs_yields() {
    let out = tempfile::tempdir().expect("tempdir");
    let data = fixture("parquet_partitioned");
    run_loop(&[
        "torchlen",
        data.to_str().expect("utf-8"),
        out.path().to_str().expect("utf-8"),
        "--epochs",
        "2",
        "--batch-size",
        "100",
    ])
    .success();
    let text = std::fs::read_to_string(out.path().join("torchlen.json")).expect("json file");
    let value: serde_json::Value = serde_json::from_str(&text).expect("json");
    let steps = rows("parquet_partitioned").div_ceil(100);
    assert_eq!(value["len"].as_u64(), Some(steps), "{value}");
    assert_eq!(
        value["epochs"],
        serde_json::json!([steps, steps]),
        "{value}"
    );
}

#[test]
fn a_state_dict_loaded_into_a_new_dataset_resumes_with_every_row_once() {
    let out = tempfile::tempdir().expect("tempdir");
    let state = out.path().join("state");
    let data = fixture("parquet_partitioned");
    let common = [
        data.to_str().expect("utf-8"),
        out.path().to_str().expect("utf-8"),
        "--epochs",
        "2",
        "--batch-size",
        "100",
    ];
    let mut first = vec!["resume"];
    first.extend_from_slice(&common);
    first.extend_from_slice(&[
        "--state",
        state.to_str().expect("utf-8"),
        "--stop-after",
        "5",
    ]);
    run_loop(&first).success();
    let sd = out.path().join("sd.json");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sd).expect("sd.json")).expect("json");
    assert_eq!(saved["epoch"].as_u64(), Some(0), "{saved}");
    assert_eq!(saved["step"].as_u64(), Some(4), "{saved}");
    // A Dataset made without state= resumes from the one the state_dict names.
    let mut second = vec!["resume"];
    second.extend_from_slice(&common);
    second.extend_from_slice(&["--load", sd.to_str().expect("utf-8")]);
    run_loop(&second).success();
    let ids = ids_file(out.path());
    assert_eq!(ids.len() as u64, rows("parquet_partitioned"), "every id");
    assert!(ids.values().all(|&c| c == 2), "each id once per epoch");
}

#[test]
fn global_batches_give_a_loop_steps_of_g_rows_and_their_count() {
    let epochs = epochs_seen(&[
        "--option",
        "shuffle=global",
        "--option",
        "global_batch_size=96",
        "--option",
        "seed=5",
    ]);
    assert_eq!(epochs.len(), 2, "{epochs:?}");
    let total = rows("parquet_partitioned");
    for epoch in &epochs {
        let steps = assert_tagged(epoch);
        assert_eq!(
            steps as u64,
            total.div_ceil(96),
            "steps of 96 rows: {epoch:?}"
        );
        assert_eq!(
            epoch["len"].as_u64(),
            Some(steps as u64),
            "len(epoch): {epoch:?}"
        );
        let sizes: Vec<usize> = epoch["batches"]
            .as_array()
            .expect("batches")
            .iter()
            .map(|b| b[3].as_array().map_or(0, Vec::len))
            .collect();
        let (last, full) = sizes.split_last().expect("a batch");
        assert!(full.iter().all(|&n| n == 96), "{sizes:?}");
        assert_eq!(*last as u64, total - 96 * (steps as u64 - 1), "{sizes:?}");
    }
}
