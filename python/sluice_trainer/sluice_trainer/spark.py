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

It fails fast and says why: fewer task slots than workers is an error naming
both numbers before anything starts; a worker that fails by its own error (its
trainer kept failing, a usage error) has the driver cancel the stage rather
than Spark run it again, and that error is the first line of the failure
(logged as soon as it is known, then raised). Worker output reaches the
executor's log line by line. The master's temporary state is removed however
train() ends (SIGTERM of the driver included).

Needs: the `sluice-train` wheel installed on the driver and the executors (or
`sluice=` naming a binary present on all of them), at least `num_workers` task
slots at once, and dynamic allocation off (Spark's rule for barrier stages).
The token reaches the executors inside the stage's closure: on a shared
cluster, turn on `spark.authenticate` and `spark.network.crypto.enabled`.
"""

import collections
import ctypes
import ctypes.util
import hmac
import json
import logging
import os
import re
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
from ._protocol import TOKEN_ENV

__all__ = ["SluiceSparkError", "check_slots", "train", "write_summary"]

# Why the job failed is logged here (ERROR) as soon as it is known, before the
# master is stopped (whose own lines would otherwise come first), then raised.
_log = logging.getLogger(__name__)

# Flags the launcher sets itself (`listen` is train()'s own parameter).
_RESERVED = {"state", "token-file", "master", "name", "exec", "help", "version"}
# How long the master may take to listen.
_MASTER_START_S = 120
# How long a task whose worker failed for good waits for the driver to cancel
# the stage before it fails the task itself (Spark would then run it again).
_FATAL_WAIT_S = 60
# Lines of a failed worker's output kept for the error message.
_TAIL_LINES = 20


class SluiceSparkError(RuntimeError):
    """The job did not end: the master or a worker failed, Spark gave up, or the
    application has fewer task slots than workers.

    `summary` holds what was known when it failed (the master's status, `error`,
    `exit_code`, `spark_tasks`), or None when nothing had started.
    """

    def __init__(self, message, summary=None):
        super().__init__(message)
        self.summary = summary


def train(path, num_workers, exec, *, spark=None, state=None, sluice=None, port=0,
          listen=None, advertise_host=None, name="spark", summary_json=None,
          slots_timeout=60, **options):
    """Trains on `path` with `num_workers` sluice workers running as Spark tasks.

    path            the output directory (file://, hdfs://, s3://, gs://, az:// ...)
    num_workers     tasks of the barrier stage, one `sluice worker` each
    exec            the trainer command each worker starts per device (`--exec`)
    spark           the SparkSession (default: the active one, or a new one)
    state           the master's `--state` (a directory on the driver or an object
                    store URL); default a fresh temporary directory, removed
                    however train() ends. Give one to resume a job whose driver died.
    sluice          the binary on the driver and executors (default: the one the
                    `sluice` wheel installed, found on each machine)
    port            the master's port on the driver (default: a free one)
    listen          the master's `--listen` address, HOST or HOST:PORT (default
                    0.0.0.0:PORT); the workers reach it at HOST unless
                    `advertise_host` says otherwise
    advertise_host  the driver's address as executors reach it (default: the
                    `listen` host, else spark.driver.host)
    name            worker names are NAME-<partition>: a worker started again for
                    the same partition resumes that name's last checkpoint
    summary_json    a file to write the summary to as JSON (also when the job
                    fails: then with `error`)
    slots_timeout   seconds to wait for executors to register until the
                    application has `num_workers` task slots (when its
                    configuration does not already say it never will)
    **options       flags of `sluice master` / `sluice worker`

    Returns the summary: the master's final status (`sluice status --json`: queue,
    rows_committed, rows_total, failed, workers) with `exit_code` (the master's:
    0 every task done, 2 some failed) and `spark_tasks` (one dict per task of the
    stage attempt that finished: partition, task_attempt_id, host, worker, pid,
    exit_code, seconds).

    Raises `SluiceSparkError` when the job does not end; its message's first
    line says why: fewer task slots than workers (both numbers), a worker's own
    error (e.g. its trainer kept failing; the stage is then not run again, as
    a rerun cannot fix it), the master's exit, or Spark giving up.
    """
    if num_workers < 1:
        raise ValueError("num_workers must be at least 1")
    bind_host, port = _listen_address(listen, port)
    binary = sluice or find_sluice_bin()
    # The master serves until the stage is over (then it is stopped): a worker
    # of a stage attempt that starts late still hears "job over" from it.
    options.setdefault("linger", "24h")
    # A worker stopped by a signal (a pre-empted container) fails its task, so
    # that Spark runs the stage again instead of ending it early.
    options.setdefault("stopped_exit_code", 143)
    stopped_code = _int(options["stopped_exit_code"], None)
    master_args, worker_args = _route(binary, options)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()
    sc = spark.sparkContext
    try:
        _check_slots(sc, num_workers, slots_timeout)
    except SluiceSparkError as e:
        e.summary = {"error": str(e), "exit_code": None, "spark_tasks": []}
        _log.error("%s", e)
        write_summary(summary_json, e.summary)
        raise

    token = secrets.token_hex(24)
    host = (advertise_host or (None if _wildcard(bind_host) else bind_host)
            or sc.getConf().get("spark.driver.host") or socket.getfqdn())
    url = f"http://{_url_host(host)}:{port}"
    # Where the driver itself reaches the master.
    local = _local_host(bind_host)
    own_state = state is None
    if own_state:
        state = tempfile.mkdtemp(prefix="sluice-state-")
    group = f"sluice-{port}-{secrets.token_hex(4)}"
    summary = {}
    master = None
    reports = None
    restore = _stop_on_sigterm()
    try:
        env = {**os.environ, TOKEN_ENV: token}
        master_cmd = [binary, "master", str(path), "--listen",
                      f"{_url_host(bind_host)}:{port}", "--state", str(state), *master_args]
        # The master's stdout is the driver's stderr: the driver's stdout is
        # left to the summary.
        master = subprocess.Popen(master_cmd, env=env, stdin=subprocess.DEVNULL, stdout=2,
                                  preexec_fn=_die_with_parent(signal.SIGTERM))
        _wait_listening(local, port, master)
        reports = _Reports(bind_host, token, lambda: sc.cancelJobGroup(group))
        conf = {
            "binary": sluice, "url": url, "token": token, "exec": exec,
            "args": worker_args, "name": name, "stopped_exit_code": stopped_code,
            "reports": (host, reports.port),
        }
        stop = threading.Event()
        watcher = threading.Thread(target=_watch_master, args=(master, sc, group, stop),
                                   daemon=True)
        watcher.start()
        stage_over = False
        try:
            tasks = _run_stage(sc, group, f"sluice: {num_workers} workers on {path}",
                               num_workers, conf)
            stage_over = True
        except Exception as e:
            stage_over = True
            if master.poll() is None:
                summary.update(_status(binary, local, port, env) or {})
            fatal = reports.first()
            if fatal is not None:
                message = (
                    f"sluice worker {fatal['worker']} (Spark task {fatal['task']} on "
                    f"{fatal['host']}) failed: {fatal['cause']}\n"
                    "the stage was cancelled, not run again: a rerun cannot fix a "
                    "worker's own error")
                if fatal.get("tail"):
                    message += "\nits last lines:\n" + "\n".join(fatal["tail"])
                error = SluiceSparkError(message, summary)
                summary["error"] = message.splitlines()[0]
                raise error from None
            code = master.poll()
            if code is not None:
                message = (f"sluice master exited with code {code} before the job was "
                           "over (its messages are on the driver's stderr)")
            else:
                message = f"the Spark stage of the sluice workers failed: {_spark_cause(e)}"
            summary["error"] = message
            raise SluiceSparkError(message, summary) from e
        finally:
            stop.set()
            if not stage_over:
                # Interrupted (SIGTERM, Ctrl-C): the workers stop with their tasks.
                _quietly(sc.cancelJobGroup, group)
        status = _status(binary, local, port, env)
        summary.update(status or {})
        summary["exit_code"] = _stop(master)
        summary["spark_tasks"] = sorted(tasks, key=lambda t: t["partition"])
        job_over = bool(status and status.get("queue", {}).get("job_over"))
        if not job_over or summary["exit_code"] not in (0, 2):
            message = (f"the workers ended but the job is not over (master exit code "
                       f"{summary['exit_code']})")
            summary["error"] = message
            raise SluiceSparkError(message, summary)
        return summary
    except SluiceSparkError as e:
        e.summary = summary
        _log.error("%s", e)
        raise
    except (KeyboardInterrupt, SystemExit) as e:
        how = "SIGTERM" if isinstance(e, SystemExit) else "Ctrl-C"
        summary.setdefault("error", f"stopped by {how} before the job was over")
        _log.error("stopped by %s before the job was over: the stage is cancelled and the "
                   "master stopped", how)
        raise
    finally:
        if master is not None:
            code = _stop(master)
            summary.setdefault("exit_code", code)
        summary.setdefault("spark_tasks", [])
        if reports is not None:
            reports.close()
        if own_state:
            shutil.rmtree(state, ignore_errors=True)
        restore()
        write_summary(summary_json, summary)


def _run_stage(sc, group, description, num_workers, conf):
    """Runs the barrier stage of the workers in job group `group`; the task
    dicts. The Spark job runs in a thread of its own while this (the caller's)
    thread waits in short steps, so that a SIGTERM or Ctrl-C of the driver is
    acted on at once rather than when the job ends."""
    done = threading.Event()
    outcome = {}

    def run():
        try:
            sc.setJobGroup(group, description, interruptOnCancel=True)
            rdd = sc.parallelize(range(num_workers), num_workers)
            # Spark never runs a failed barrier *result* stage again (it may have
            # committed output), but it does run a failed barrier shuffle map stage
            # again (spark.stage.maxConsecutiveAttempts): the shuffle behind the
            # workers' stage makes it one.
            workers = rdd.barrier().mapPartitions(lambda it: _worker_task(conf, it))
            outcome["tasks"] = workers.repartition(1).collect()
        except BaseException as e:
            outcome["error"] = e
        finally:
            _quietly(sc.setLocalProperty, "spark.jobGroup.id", None)
            done.set()

    threading.Thread(target=run, name="sluice-stage", daemon=True).start()
    while not done.wait(0.2):
        pass
    if "error" in outcome:
        raise outcome["error"]
    return outcome["tasks"]


def _stop(master):
    """Stops the master (SIGTERM, then SIGKILL after 30 s); its exit code."""
    if master.poll() is None:
        master.send_signal(signal.SIGTERM)
        try:
            return master.wait(timeout=30)
        except subprocess.TimeoutExpired:
            master.kill()
    return master.wait()


def _quietly(call, *args):
    """Calls into the JVM, which may already be gone (Ctrl-C reaches it too)."""
    try:
        call(*args)
    except Exception:
        pass


def write_summary(path, summary):
    """Writes `summary` as JSON to the file `path` (whole or not at all: through a
    temporary file renamed into place); nothing when `path` is empty."""
    if not path:
        return
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(summary, f)
        f.write("\n")
    os.replace(tmp, path)


def _stop_on_sigterm():
    """Makes SIGTERM raise SystemExit(143) in the driver while train() runs, so
    that its cleanup (master stopped, stage cancelled, temporary state removed)
    runs; returns what puts the previous handler back. Only from the main
    thread, and only where SIGTERM still has its default action."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return lambda: None

        def on_sigterm(signum, _frame):
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, on_sigterm)
    except (ValueError, OSError):
        return lambda: None

    def restore():
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):
            pass

    return restore


def _listen_address(listen, port):
    """(host, port) the master binds to, from `listen` (HOST, HOST:PORT,
    [V6]:PORT) and `port`; a port of 0 or none is a free one."""
    host = "0.0.0.0"
    if listen:
        listen = str(listen).strip()
        given = None
        if listen.startswith("["):
            close = listen.find("]")
            if close < 0:
                raise ValueError(f"listen={listen!r}: no ']' after the IPv6 address")
            host, rest = listen[1:close], listen[close + 1:]
            if rest:
                if not rest.startswith(":"):
                    raise ValueError(f"listen={listen!r}: expected [HOST]:PORT")
                given = rest[1:]
        elif listen.count(":") == 1:
            host, given = listen.split(":")
        else:
            host = listen
        host = host or "0.0.0.0"
        if given is not None:
            if not given.isdigit() or int(given) > 65535:
                raise ValueError(f"listen={listen!r}: the port {given!r} is not a port number")
            given = int(given)
            if given and port and given != port:
                raise ValueError(f"listen={listen!r} and port={port} name different ports")
            port = given or port
    return host, port or _free_port(host)


def _wildcard(host):
    return host in ("", "0.0.0.0", "::")


def _local_host(bind_host):
    """Where the driver reaches a master bound to `bind_host`."""
    if bind_host == "::":
        return "::1"
    if _wildcard(bind_host):
        return "127.0.0.1"
    return bind_host


def check_slots(conf, num_workers):
    """Raises SluiceSparkError, naming both numbers, when the Spark
    configuration `conf` (a SparkConf, before or after the SparkContext
    starts) gives fewer task slots than `num_workers`: `local[N]`,
    `local-cluster[N,C,M]`, or `spark.executor.instances` x
    `spark.executor.cores`, each divided by `spark.task.cpus`. Says nothing
    where the configuration does not tell (train() then also waits for the
    executors to register)."""
    expected, how = _expected_slots(conf, conf.get("spark.master", ""))
    if expected is not None and expected < num_workers:
        raise SluiceSparkError(
            f"num_workers={num_workers} needs {num_workers} Spark task slots at once "
            f"(one barrier stage), but the application has {expected} ({how}): "
            f"ask for more executors or cores, or pass num_workers={expected} or fewer")


def _check_slots(sc, num_workers, timeout):
    """Raises SluiceSparkError, naming both numbers, when the application has
    fewer task slots than `num_workers` (a barrier stage needs them all at
    once; Spark would otherwise wait for them silently), or when executors
    with that many have not registered within `timeout` seconds."""
    conf = sc.getConf()
    conf.set("spark.master", sc.master or "")
    check_slots(conf, num_workers)
    deadline = time.monotonic() + timeout
    while True:
        now = _registered_slots(sc)
        if now is None or now >= num_workers:
            return
        if time.monotonic() >= deadline:
            raise SluiceSparkError(
                f"num_workers={num_workers} needs {num_workers} Spark task slots at once "
                f"(one barrier stage), but the executors registered after {timeout}s "
                f"have {now}: ask for more executors or cores, or pass "
                f"num_workers={max(now, 1)} or fewer")
        time.sleep(0.5)


def _registered_slots(sc):
    """Tasks the registered executors can run at once (Spark's own count for
    barrier stages), or None where the JVM does not say."""
    try:
        jsc = sc._jsc.sc()
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception:
        return None


def _expected_slots(conf, master):
    """(task slots the application's configuration gives, how), or (None, None)
    where it does not say (executors still to be granted by the cluster)."""
    task_cpus = _int(conf.get("spark.task.cpus"), 1)
    per = f"spark.task.cpus={task_cpus}"
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master)
    if m:
        cores = (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1) or 1)
        return cores // task_cpus, f"{master}: {cores} cores, {per}"
    m = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", master)
    if m:
        executors, cores = int(m.group(1)), int(m.group(2))
        return (executors * (cores // task_cpus),
                f"{master}: {executors} executors of {cores} core{'s' if cores != 1 else ''}, {per}")
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        return None, None
    instances = _int(conf.get("spark.executor.instances"), None)
    cores = _int(conf.get("spark.executor.cores"), None)
    if cores is None and (master.startswith("yarn") or master.startswith("k8s://")):
        cores = 1
    if instances is None or cores is None:
        return None, None
    return (instances * (cores // task_cpus),
            f"spark.executor.instances={instances}, spark.executor.cores={cores}, {per}")


def _int(text, default):
    try:
        return int(text)
    except (TypeError, ValueError):
        return default


def _spark_cause(e):
    """The line of a Spark failure that says why, rather than where (the Py4J
    call and its Java stack)."""
    lines = [line.strip() for line in str(e).splitlines()]
    for line in lines:
        at = line.find("SluiceSparkError: ")
        if at >= 0:
            return line[at + len("SluiceSparkError: "):]
    for line in lines:
        if "Job aborted" in line or "cancelled" in line:
            return line
    return next((line for line in lines if line and not line.startswith("An error occurred")),
                lines[0] if lines else repr(e))


class _Reports:
    """Where the tasks tell the driver that their worker failed for good (its
    own error, not a signal): the driver then cancels the stage, which Spark
    would otherwise run again. One JSON line per connection, with the job's
    token; the first report is the job's cause."""

    def __init__(self, host, token, on_report):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._server = socket.create_server((host, 0), family=family)
        self.port = self._server.getsockname()[1]
        self._token = token
        self._on_report = on_report
        self._reports = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def first(self):
        with self._lock:
            return self._reports[0] if self._reports else None

    def close(self):
        try:
            self._server.close()
        except OSError:
            pass

    def _serve(self):
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn):
        with conn:
            try:
                conn.settimeout(10)
                data = b""
                while b"\n" not in data and len(data) < 1 << 20:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                report = json.loads(data.split(b"\n", 1)[0])
                token = str(report.pop("token", ""))
                if not hmac.compare_digest(token.encode(), self._token.encode()):
                    return
                with self._lock:
                    self._reports.append(report)
                    first = len(self._reports) == 1
                conn.sendall(b"ok\n")
            except (OSError, ValueError, AttributeError):
                return
        if first:
            self._on_report()


def _report_fatal(conf, report):
    """Sends a task's report to the driver; whether the driver took it."""
    try:
        with socket.create_connection(tuple(conf["reports"]), timeout=10) as s:
            s.sendall(json.dumps(dict(report, token=conf["token"])).encode() + b"\n")
            return s.recv(16).startswith(b"ok")
    except OSError:
        return False


def _worker_task(conf, _partition):
    """One task of the barrier stage: runs `sluice worker` until it exits, its
    output passed on to the task's stderr (the executor's log) line by line."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    partition = ctx.partitionId()
    attempt = ctx.taskAttemptId()
    binary = conf["binary"] or find_sluice_bin()
    worker = f"{conf['name']}-{partition}"
    cmd = [binary, "worker", "--master", conf["url"], "--name", worker,
           "--exec", conf["exec"], *conf["args"]]
    env = {**os.environ, TOKEN_ENV: conf["token"]}
    started = time.time()
    tail = collections.deque(maxlen=_TAIL_LINES)
    cause = None
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent(signal.SIGKILL))
    try:
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            sys.stderr.write(line)
            sys.stderr.flush()
            line = line.rstrip("\n")
            tail.append(line)
            if line.startswith("sluice: "):
                cause = line[len("sluice: "):]
        code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    host = socket.gethostname()
    if code != 0:
        text = "\n".join(tail)
        if code > 0 and code != conf["stopped_exit_code"]:
            # The worker's own error (its trainer kept failing, a usage error):
            # running the stage again would fail the same way. The driver
            # cancels the stage; this task waits to be killed with it.
            cause = cause or f"exited with code {code}"
            report = {"worker": worker, "task": attempt, "host": host, "exit_code": code,
                      "cause": cause, "tail": [t for t in tail if t != f"sluice: {cause}"]}
            if _report_fatal(conf, report):
                time.sleep(_FATAL_WAIT_S)
            raise SluiceSparkError(
                f"sluice worker {worker} (Spark task {attempt}) failed: {cause}\n{text}")
        raise SluiceSparkError(
            f"sluice worker {worker} (Spark task {attempt}) was stopped (exit code {code}); "
            f"Spark runs the stage again:\n{text}")
    yield {
        "partition": partition, "task_attempt_id": attempt, "host": host,
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


def _free_port(host="0.0.0.0"):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _url_host(host):
    return f"[{host}]" if ":" in host else host


def _wait_listening(host, port, master):
    deadline = time.monotonic() + _MASTER_START_S
    while True:
        code = master.poll()
        if code is not None:
            raise SluiceSparkError(
                f"sluice master exited with code {code} before it listened "
                "(its message is on the driver's stderr)")
        try:
            with socket.create_connection((host, port), timeout=1):
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


def _status(binary, host, port, env):
    """`sluice status --json` of the master, or None when it does not answer."""
    try:
        out = subprocess.run(
            [binary, "status", "--master", f"http://{_url_host(host)}:{port}", "--json"],
            env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        return json.loads(out.stdout)
    except ValueError:
        return None
