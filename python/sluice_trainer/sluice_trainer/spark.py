"""sluice workers as the tasks of a Spark barrier stage.

On whatever cluster a Spark application was submitted to (YARN, Kubernetes,
standalone), the way `TorchDistributor` and Horovod-on-Spark run training::

    from sluice_trainer import spark

    summary = spark.train("hdfs://nn:8020/warehouse/clicks/dt=2026-11-29",
                          num_workers=8, exec="python train.py",
                          epochs=3, batch_size=8192, lease_timeout="60s")

starts `sluice master` on the driver and one `sluice worker` in each of the
`num_workers` tasks of a barrier stage (so they start together, and a failed
task restarts them all), hands them the master's URL and a fresh job token,
and returns the job's summary once the master says the job is over. Every
other keyword is a flag of `sluice master` or `sluice worker` (`batch_size=8192`
is `--batch-size 8192`, `allow_incomplete=True` is `--allow-incomplete`, a
list is comma-joined), routed to whichever of the two accepts it.

When an executor dies, Spark runs the stage again; the master takes back the
dead workers' leases after `lease_timeout` and the new workers resume each task
at its committed row offset, so no acknowledged row is trained on twice. A
`sluice worker` dies with the Python task that started it (`PR_SET_PDEATHSIG`),
so a task Spark kills leaves nothing training behind it.

Needs: the `sluice` wheel installed on the driver and the executors (or
`sluice=` naming a binary present on all of them), at least `num_workers` task
slots at once, and dynamic allocation off (Spark's rule for barrier stages).
The token reaches the executors inside the stage's closure: on a shared
cluster, turn on `spark.authenticate` and `spark.network.crypto.enabled`.
"""

import ctypes
import ctypes.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from ._binary import find_sluice_bin

__all__ = ["SluiceSparkError", "train"]

# Flags the launcher sets itself.
_RESERVED = {"listen", "state", "token-file", "master", "name", "exec", "help", "version"}
# How long the master may take to listen.
_MASTER_START_S = 120


class SluiceSparkError(RuntimeError):
    """The job did not end: the master or a worker failed, or Spark gave up."""


def train(path, num_workers, exec, *, spark=None, state=None, sluice=None, port=0,
          advertise_host=None, name="spark", **options):
    """Trains on `path` with `num_workers` sluice workers running as Spark tasks.

    path            the output directory (file://, hdfs://, s3://, gs://, az:// ...)
    num_workers     tasks of the barrier stage, one `sluice worker` each
    exec            the trainer command each worker starts per device (`--exec`)
    spark           the SparkSession (default: the active one, or a new one)
    state           the master's `--state` (a directory on the driver or an object
                    store URL); default a fresh temporary directory, removed when
                    the job is over. Give one to resume a job whose driver died.
    sluice          the binary on the driver and executors (default: the one the
                    `sluice` wheel installed, found on each machine)
    port            the master's port on the driver (default: a free one)
    advertise_host  the driver's address as executors reach it (default:
                    spark.driver.host)
    name            worker names are NAME-<partition>: a worker started again for
                    the same partition resumes that name's last checkpoint
    **options       flags of `sluice master` / `sluice worker`

    Returns the summary: the master's final status (`sluice status --json`: queue,
    rows_committed, rows_total, failed, workers) with `exit_code` (the master's:
    0 every task done, 2 some failed) and `spark_tasks` (one dict per task of the
    stage attempt that finished: partition, task_attempt_id, host, worker, pid,
    exit_code, seconds).
    Raises `SluiceSparkError` when the job does not end.
    """
    if num_workers < 1:
        raise ValueError("num_workers must be at least 1")
    binary = sluice or find_sluice_bin()
    # The master serves until the stage is over (then it is stopped): a worker
    # of a stage attempt that starts late still hears "job over" from it.
    options.setdefault("linger", "24h")
    # A worker stopped by a signal (a pre-empted container) fails its task, so
    # that Spark runs the stage again instead of ending it early.
    options.setdefault("stopped_exit_code", 143)
    master_args, worker_args = _route(binary, options)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()
    sc = spark.sparkContext
    token = secrets.token_hex(24)
    port = port or _free_port()
    host = advertise_host or sc.getConf().get("spark.driver.host") or socket.getfqdn()
    url = f"http://{_url_host(host)}:{port}"
    own_state = state is None
    if own_state:
        state = tempfile.mkdtemp(prefix="sluice-state-")

    env = dict(os.environ, SLUICE_TOKEN=token)
    master_cmd = [binary, "master", str(path), "--listen", f"0.0.0.0:{port}",
                  "--state", str(state), *master_args]
    master = subprocess.Popen(master_cmd, env=env, stdin=subprocess.DEVNULL,
                              preexec_fn=_die_with_parent(signal.SIGTERM))
    group = f"sluice-{port}-{secrets.token_hex(4)}"
    try:
        _wait_listening(port, master)
        conf = {
            "binary": sluice, "url": url, "token": token, "exec": exec,
            "args": worker_args, "name": name,
        }
        stop = threading.Event()
        watcher = threading.Thread(target=_watch_master, args=(master, sc, group, stop),
                                   daemon=True)
        watcher.start()
        sc.setJobGroup(group, f"sluice: {num_workers} workers on {path}",
                       interruptOnCancel=True)
        try:
            rdd = sc.parallelize(range(num_workers), num_workers)
            # Spark never runs a failed barrier *result* stage again (it may have
            # committed output), but it does run a failed barrier shuffle map stage
            # again (spark.stage.maxConsecutiveAttempts): the shuffle behind the
            # workers' stage makes it one.
            workers = rdd.barrier().mapPartitions(lambda it: _worker_task(conf, it))
            tasks = workers.repartition(1).collect()
        except Exception as e:
            code = master.poll()
            if code is not None:
                raise SluiceSparkError(
                    f"sluice master exited with code {code} before the job was over "
                    f"(its messages are on the driver's stderr); state: {state}") from e
            raise SluiceSparkError(f"the Spark stage of the sluice workers failed: {e}") from e
        finally:
            stop.set()
            sc.setLocalProperty("spark.jobGroup.id", None)
        status = _status(binary, port, env)
        summary = dict(status or {})
        if master.poll() is None:
            master.send_signal(signal.SIGTERM)
        try:
            summary["exit_code"] = master.wait(timeout=60)
        except subprocess.TimeoutExpired:
            master.kill()
            summary["exit_code"] = master.wait()
        summary["spark_tasks"] = sorted(tasks, key=lambda t: t["partition"])
        job_over = bool(status and status.get("queue", {}).get("job_over"))
        if not job_over or summary["exit_code"] not in (0, 2):
            raise SluiceSparkError(
                f"the workers ended but the job is not over (master exit code "
                f"{summary['exit_code']}); state: {state}")
        if own_state:
            shutil.rmtree(state, ignore_errors=True)
        return summary
    finally:
        if master.poll() is None:
            master.send_signal(signal.SIGTERM)
            try:
                master.wait(timeout=30)
            except subprocess.TimeoutExpired:
                master.kill()
                master.wait()


def _worker_task(conf, _partition):
    """One task of the barrier stage: runs `sluice worker` until it exits."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    partition = ctx.partitionId()
    attempt = ctx.taskAttemptId()
    binary = conf["binary"] or find_sluice_bin()
    worker = f"{conf['name']}-{partition}"
    cmd = [binary, "worker", "--master", conf["url"], "--name", worker,
           "--exec", conf["exec"], *conf["args"]]
    env = dict(os.environ, SLUICE_TOKEN=conf["token"])
    started = time.time()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent(signal.SIGKILL))
        try:
            code = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    sys.stderr.write(text)
    sys.stderr.flush()
    if code != 0:
        tail = "\n".join(text.strip().splitlines()[-20:])
        raise SluiceSparkError(
            f"sluice worker {worker} (Spark task {attempt}) exited with code {code}:\n{tail}")
    yield {
        "partition": partition, "task_attempt_id": attempt, "host": socket.gethostname(),
        "worker": worker, "pid": proc.pid, "exit_code": code,
        "seconds": round(time.time() - started, 3),
    }


def _die_with_parent(sig):
    """A `preexec_fn` that has the kernel send `sig` to the child when its parent
    (this Python process) dies, however it dies; None where Linux's prctl is absent."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def hook():
        libc.prctl(pr_set_pdeathsig, int(sig), 0, 0, 0)
        # The parent died before the prctl: nothing would signal us.
        if os.getppid() != parent:
            os.kill(os.getpid(), int(sig))

    return hook


def _route(binary, options):
    """Splits keyword options into `sluice master` and `sluice worker` flags, by
    the flags each subcommand's `--help` lists."""
    master_flags = _flags(binary, "master")
    worker_flags = _flags(binary, "worker")
    master_args, worker_args = [], []
    for key, value in options.items():
        flag = key.replace("_", "-")
        if flag in _RESERVED:
            raise TypeError(f"train() sets --{flag} itself")
        if flag not in master_flags and flag not in worker_flags:
            raise TypeError(
                f"{key}: neither `sluice master` nor `sluice worker` has --{flag}")
        args = _flag_args(flag, value)
        if flag in master_flags:
            master_args += args
        if flag in worker_flags:
            worker_args += args
    return master_args, worker_args


def _flags(binary, subcommand):
    out = subprocess.run([binary, subcommand, "--help"], capture_output=True, text=True,
                         check=True).stdout
    flags = set()
    for line in out.splitlines():
        words = line.strip().replace(",", " ").split()
        for word in words[:2]:
            if word.startswith("--") and len(word) > 2:
                flags.add(word[2:].split("=")[0].split("[")[0])
    return flags


def _flag_args(flag, value):
    if value is None or value is False:
        return []
    if value is True:
        return [f"--{flag}"]
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return [f"--{flag}", str(value)]


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _url_host(host):
    return f"[{host}]" if ":" in host else host


def _wait_listening(port, master):
    deadline = time.monotonic() + _MASTER_START_S
    while True:
        code = master.poll()
        if code is not None:
            raise SluiceSparkError(
                f"sluice master exited with code {code} before it listened "
                "(its message is on the driver's stderr)")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SluiceSparkError(f"sluice master did not listen on port {port} "
                                   f"within {_MASTER_START_S}s")
        time.sleep(0.1)


def _watch_master(master, sc, group, stop):
    """Cancels the stage when the master exits before it ends: the workers would
    otherwise wait for it until their --patience runs out."""
    while not stop.wait(0.5):
        if master.poll() is not None:
            sc.cancelJobGroup(group)
            return


def _status(binary, port, env):
    """`sluice status --json` of the master, or None when it does not answer."""
    try:
        out = subprocess.run(
            [binary, "status", "--master", f"http://127.0.0.1:{port}", "--json"],
            env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        return json.loads(out.stdout)
    except ValueError:
        return None
