"""sluice in Apache Airflow: an operator that trains, a deferrable sensor that
waits for output, and OpenLineage facets (`pip install 'sluice[airflow]'`).

    from sluice_trainer.airflow import SluiceOutputSensor, SluiceTrainOperator

    wait = SluiceOutputSensor(task_id="wait", source="/data/clicks/dt={{ ds }}")
    train = SluiceTrainOperator(
        task_id="train",
        source="/data/clicks/dt={{ ds }}",
        devices=2,
        state="/var/lib/sluice/clicks/{{ ds }}",
        extra_args=["--model", "logistic", "--label", "label", "--features", "f1,f2",
                    "--epochs", "3", "--output", "/models/clicks-{{ ds }}.json"],
    )
    wait >> train

`SluiceTrainOperator` runs `sluice train SOURCE` (or `sluice run JOB.toml` with
`job_file=`), writes sluice's log lines into the task log as they come, and
returns the run's summary (the `--summary-json` object: `rows`, `tasks_done`,
`tasks_failed`, ...), which Airflow keeps as the task's XCom `return_value`.
sluice's exit code decides what happens to the task:

    0         success
    2         tasks failed: the task fails (`SluiceTasksFailed`, not retried),
              naming each failed file; with `allow_failed_tasks=True` it
              succeeds with a warning
    3         the job's state or lock is held by another run: retryable error
    130, 143  sluice was stopped by a signal after committing what was
              acknowledged: retryable error (with `state`, the retry resumes)
    64        usage error: the task fails at once (`AirflowFailException`)
    other     error, with sluice's one-line message: retryable error

`on_kill` (a task marked failed, a timeout, a worker shutting down) sends
sluice one SIGTERM: the trainers finish the batches they hold within the
grace, what they acknowledged is committed and leases are handed back; sluice
is killed if it has not exited after the grace plus `kill_margin`. sluice also
gets SIGTERM if the task's process dies (PR_SET_PDEATHSIG). With `state` set,
every try runs the same command on the same state: a retry resumes the job,
and each row is trained once across tries.

`SluiceOutputSensor` waits until a source is ready: a directory's `_SUCCESS`
(`sluice ls --json` says `complete`), a Delta version or Iceberg snapshot
other than (for Delta: newer than) `after_version`, or new partitions for a
job file (`sluice run JOB --dry-run --json` lists some under `new`). It is
deferrable: the waiting happens in the triggerer (`SluiceOutputTrigger`, an
async loop around the same commands); `mode="reschedule"` pokes from a worker
slot instead, freeing it between pokes.

Both find the `sluice` binary the same way: `sluice_binary=` when given, else
`$SLUICE_BINARY`, else the one the `sluice-train` wheel installed, else `sluice` on
the PATH.
"""

import asyncio
import collections
import ctypes
import ctypes.util
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from datetime import timedelta
from urllib.parse import urlparse

from ._binary import SluiceNotFound, find_sluice_bin

try:  # Airflow 3: the Task SDK.
    from airflow.sdk import BaseOperator, BaseSensorOperator, PokeReturnValue
except ImportError:  # Airflow 2.10
    from airflow.models import BaseOperator
    from airflow.sensors.base import BaseSensorOperator, PokeReturnValue

try:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # Airflow 2.10
    from airflow.exceptions import AirflowException, AirflowFailException

from airflow.triggers.base import BaseTrigger, TriggerEvent

__all__ = [
    "SluiceExitError", "SluiceOutputSensor", "SluiceOutputTrigger", "SluiceTasksFailed",
    "SluiceTrainOperator", "SluiceUsageError", "sluice_binary",
]

# sluice's exit codes, as src/exit_codes.rs defines them. A test compares these
# lines with that file, both ways: keep one `EXIT_NAME = code` per line, NAME
# as sluice names it, and no other such line here.
EXIT_DONE = 0
EXIT_ERROR = 1
EXIT_TASKS_FAILED = 2
EXIT_HELD = 3
EXIT_USAGE = 64
EXIT_INTERRUPTED = 130
# Not one of sluice's: 128 + SIGTERM, what a shell (a wrapper script run as the
# binary) reports for a sluice that SIGTERM ended before sluice could handle it.
_KILLED_BY_SIGTERM = 143
# Stopped by a signal after committing what was acknowledged.
_STOPPED = (EXIT_INTERRUPTED, _KILLED_BY_SIGTERM)
# sluice train's default --grace.
DEFAULT_GRACE_S = 20.0
# Stderr lines kept for error messages.
_TAIL_LINES = 50


class SluiceExitError(AirflowException):
    """sluice exited with a code that a retry may fix (3, 130, 143, 1, a
    signal); Airflow retries the task while it has retries left."""

    def __init__(self, message, exit_code=None, summary=None):
        super().__init__(message)
        self.exit_code = exit_code
        self.summary = summary


class SluiceTasksFailed(AirflowFailException):
    """The job ran to its end but some of its tasks failed (exit 2): `failed`
    lists them (`file`, `reason`, ...). Not retried: a rerun on the same
    state fails them again (`--retry-failed` reads them again)."""

    def __init__(self, message, summary):
        super().__init__(message)
        self.exit_code = EXIT_TASKS_FAILED
        self.summary = summary
        self.failed = list((summary or {}).get("tasks_failed") or [])


class SluiceUsageError(AirflowFailException):
    """sluice refused its command line or job file (exit 64): not retried."""

    def __init__(self, message):
        super().__init__(message)
        self.exit_code = EXIT_USAGE


def sluice_binary(explicit=None):
    """The `sluice` binary: `explicit` when given, else `$SLUICE_BINARY`, else
    the one the `sluice-train` wheel installed, else `sluice` on the PATH.
    Raises `AirflowFailException` naming what is missing."""
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise AirflowFailException(f"sluice_binary={explicit} is not an executable file")
    try:
        return find_sluice_bin()
    except SluiceNotFound as e:
        raise AirflowFailException(str(e)) from e


def _die_with_parent(sig):
    """A `preexec_fn` that has the kernel send `sig` to the child when the
    thread that started it dies, however it dies; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    parent = os.getpid()

    def hook():
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the prctl
            os.kill(os.getpid(), int(sig))

    return hook


def _seconds(duration, default):
    """Seconds in a sluice duration (`20s`, `1m 30s`, `500ms`, `2h`, a number),
    or `default` when it cannot be read."""
    if duration is None:
        return default
    if isinstance(duration, (int, float)):
        return float(duration)
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    total, number = 0.0, ""
    text = str(duration).replace(" ", "")
    i = 0
    try:
        while i < len(text):
            if text[i].isdigit() or text[i] == ".":
                number += text[i]
                i += 1
                continue
            unit = "ms" if text.startswith("ms", i) else text[i]
            if unit not in units or not number:
                return default
            total += float(number) * units[unit]
            number = ""
            i += len(unit)
        if number:
            total += float(number)
    except ValueError:
        return default
    return total


def _flag_value(args, flag):
    """The value of `--flag V` or `--flag=V` in a list of arguments (the last one)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
    return value


def _local_path(location):
    """A local path for a path or `file://` URL, else None."""
    parsed = urlparse(str(location))
    if parsed.scheme == "file":
        return parsed.path
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return str(location)
    return None


def _first_error(lines):
    """sluice's one-line error (`sluice: ...`) among its stderr lines, else the
    command line parser's (`error: ...`, followed by the usage), else the last line."""
    for line in reversed(lines):
        if line.startswith("sluice: "):
            return line[len("sluice: "):]
    for line in lines:
        if line.startswith("error: "):
            return line[len("error: "):]
    lines = [line for line in lines if line.strip()]
    return lines[-1] if lines else ""


class SluiceTrainOperator(BaseOperator):
    """Trains with sluice: `sluice train SOURCE` or, with `job_file`, `sluice run JOB`.

    source              the data: a directory, a Delta or Iceberg table, any store URL
    exec                the trainer command each device thread starts (`--exec`)
    devices             device threads (`--devices`)
    state               `--state DIR`: the job's journal. Give one per logical date
                        (`/var/lib/sluice/clicks/{{ ds }}`): a retry runs the same
                        command on it and resumes, every row trained once across tries
    job_file            a job file instead of `source` (`sluice run JOB.toml --json`):
                        source, state and options are the file's
    extra_args          further arguments, a list (`["--epochs", "3", "--output", PATH]`)
    sluice_binary       the binary (default: `$SLUICE_BINARY`, else the wheel's, else PATH)
    allow_failed_tasks  exit 2 (some tasks failed) succeeds with a warning instead of
                        failing the task
    grace               `--grace` for `sluice train` (default sluice's, 20s); with a job
                        file, set it to the file's `grace` so `on_kill` waits as long
    kill_margin         seconds `on_kill` waits past the grace before SIGKILL (default 10)
    env                 variables added to sluice's environment (credentials, SLUICE_TOKEN)
    cwd                 sluice's working directory

    Returns the summary: for `sluice train`, the `--summary-json` object (`rows`,
    `batches`, `tasks_done`, `tasks_failed`, `seconds`, `table`, ...; for a job found
    already finished in `state`, the summary of the run that finished it, with
    `already_finished: true`); for `sluice run`, the run's summary (`{"rows": 0, ...}`
    when nothing was new) with the whole `--json` report under `run`.
    """

    template_fields = ("source", "exec", "devices", "state", "job_file", "extra_args",
                       "sluice_binary", "env")
    template_fields_renderers = {"extra_args": "py", "env": "json"}
    ui_color = "#d6eaf8"

    def __init__(self, *, source=None, exec=None, devices=None, state=None, job_file=None,
                 extra_args=None, sluice_binary=None, allow_failed_tasks=False, grace=None,
                 kill_margin=10.0, env=None, cwd=None, **kwargs):
        super().__init__(**kwargs)
        if (source is None) == (job_file is None):
            raise ValueError("SluiceTrainOperator takes one of source= (sluice train) "
                             "and job_file= (sluice run)")
        if job_file is not None and (exec is not None or devices is not None
                                     or state is not None):
            raise ValueError("with job_file=, exec, devices and state are keys of the "
                             "job file, not arguments")
        self.source = source
        self.exec = exec
        self.devices = devices
        self.state = state
        self.job_file = job_file
        self.extra_args = list(extra_args or [])
        self.sluice_binary = sluice_binary
        self.allow_failed_tasks = allow_failed_tasks
        self.grace = grace
        self.kill_margin = kill_margin
        self.env = env
        self.cwd = cwd
        self._proc = None
        self._term_sent = False
        self._kill_timer = None
        self._summary = None
        self._report = None
        self._exit_code = None

    # -- the command ---------------------------------------------------------

    def _command(self, binary, summary_path):
        """The command line, and the summary file sluice writes (train only)."""
        extra = [str(a) for a in self.extra_args]
        if self.job_file is not None:
            cmd = [binary, "run", str(self.job_file)]
            if "--json" not in extra:
                cmd.append("--json")
            return cmd + extra, None
        cmd = [binary, "train", str(self.source)]
        if self.exec is not None:
            cmd += ["--exec", str(self.exec)]
        if self.devices is not None:
            cmd += ["--devices", str(self.devices)]
        if self.state is not None:
            cmd += ["--state", str(self.state)]
        if self.grace is not None and _flag_value(extra, "--grace") is None:
            cmd += ["--grace", str(self.grace)]
        given = _flag_value(extra, "--summary-json")
        if given is not None:
            summary_path = given
        else:
            cmd += ["--summary-json", summary_path]
        return cmd + extra, summary_path

    def _grace_seconds(self):
        given = _flag_value([str(a) for a in self.extra_args], "--grace")
        return _seconds(given if given is not None else self.grace, DEFAULT_GRACE_S)

    # -- running -------------------------------------------------------------

    def execute(self, context):
        binary = sluice_binary(self.sluice_binary)
        with tempfile.TemporaryDirectory(prefix="sluice-airflow-") as tmp:
            cmd, summary_path = self._command(binary, os.path.join(tmp, "summary.json"))
            code, stdout, tail = self._run(cmd)
            summary = self._read_summary(summary_path, stdout, code)
        self._summary = summary
        self._exit_code = code
        return self._outcome(code, summary, tail)

    def _run(self, cmd):
        """Runs sluice, logging its stderr (and, for train, stdout) line by line.
        Returns (exit code, stdout when captured, the last stderr lines)."""
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (self.env or {}).items()})
        self.log.info("running %s", shlex.join(cmd))
        self._term_sent = False
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, cwd=self.cwd,
            # Signals are sluice's from this operator only (one SIGTERM: a second
            # one would stop it at once), and it drains if this process dies.
            start_new_session=True, preexec_fn=_die_with_parent(signal.SIGTERM))
        self._proc = proc
        capture = self.job_file is not None
        out_lines = []

        def pump_stdout():
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace")
                if capture:
                    out_lines.append(line)
                else:
                    self.log.info("%s", line.rstrip("\n"))

        reader = threading.Thread(target=pump_stdout, daemon=True)
        reader.start()
        tail = collections.deque(maxlen=_TAIL_LINES)
        try:
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                tail.append(line)
                self.log.info("%s", line)
            code = proc.wait()
        except BaseException:
            # A timeout (AirflowTaskTimeout), SIGINT from the supervisor: stop
            # sluice as on_kill does and wait for it before going on.
            self._terminate(proc)
            try:
                proc.wait(timeout=self._grace_seconds() + self.kill_margin + 5)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
        finally:
            if self._kill_timer is not None:
                self._kill_timer.cancel()
        reader.join(timeout=10)
        self._proc = None
        return code, "".join(out_lines), list(tail)

    def _terminate(self, proc):
        """One SIGTERM to sluice, then SIGKILL once the grace and the margin passed."""
        if proc.poll() is not None or self._term_sent:
            return
        self._term_sent = True
        wait = self._grace_seconds() + self.kill_margin
        self.log.warning("sending SIGTERM to sluice (pid %d): it drains and commits within "
                         "its grace; SIGKILL in %.0fs if it has not exited", proc.pid, wait)
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return

        def kill():
            if proc.poll() is None:
                self.log.error("sluice (pid %d) did not exit %.0fs after SIGTERM: SIGKILL",
                               proc.pid, wait)
                proc.kill()

        self._kill_timer = threading.Timer(wait, kill)
        self._kill_timer.daemon = True
        self._kill_timer.start()

    def on_kill(self):
        proc = self._proc
        if proc is not None:
            self._terminate(proc)

    def _read_summary(self, summary_path, stdout, code):
        if self.job_file is not None:
            try:
                report = json.loads(stdout) if stdout.strip() else None
            except ValueError:
                self.log.warning("sluice run --json printed no JSON report: %s", stdout[:500])
                report = None
            if not isinstance(report, dict):
                return None
            self._report = report
            summary = dict(report.get("summary") or {"rows": 0, "tasks_failed": []})
            summary["run"] = {k: v for k, v in report.items() if k != "summary"}
            return summary
        if summary_path and os.path.isfile(summary_path):
            with open(summary_path, encoding="utf-8") as f:
                try:
                    return json.load(f)
                except ValueError:
                    self.log.warning("%s is not JSON", summary_path)
                    return None
        if code == EXIT_DONE and self.state is not None:
            # The job was found finished in its state (an earlier try did it):
            # sluice trained nothing and wrote no summary; the state keeps the
            # summary of the run that finished it.
            local = _local_path(self.state)
            finished = os.path.join(local, "finished.json") if local else None
            if finished and os.path.isfile(finished):
                with open(finished, encoding="utf-8") as f:
                    try:
                        summary = json.load(f)
                    except ValueError:
                        summary = None
                if isinstance(summary, dict):
                    summary["already_finished"] = True
                    return summary
        return None

    def _outcome(self, code, summary, tail):
        what = "sluice run" if self.job_file is not None else "sluice train"
        if code == EXIT_DONE:
            rows = (summary or {}).get("rows")
            self.log.info("%s done: %s rows trained", what, rows)
            return summary
        if code == EXIT_TASKS_FAILED:
            failed = list((summary or {}).get("tasks_failed") or [])
            if failed:
                named = "; ".join(f"{t.get('file')} ({t.get('reason')})" for t in failed)
                message = f"{what}: {len(failed)} task(s) failed: {named}"
            else:  # sluice run stopped by a table rewrite, or no summary
                message = f"{what} exited 2: {_first_error(tail)}"
            if self.allow_failed_tasks:
                self.log.warning("%s (allow_failed_tasks: the task succeeds)", message)
                return summary
            raise SluiceTasksFailed(message, summary)
        if code == EXIT_USAGE:
            raise SluiceUsageError(f"{what}: usage error: {_first_error(tail)}")
        if code == EXIT_HELD:
            raise SluiceExitError(
                f"{what} exited 3, another run holds the job's state or lock: "
                f"{_first_error(tail)}", code, summary)
        if code in _STOPPED:
            resume = " the next try resumes from its state" if (
                self.state is not None or self.job_file is not None) else ""
            raise SluiceExitError(
                f"{what} was stopped by a signal (exit {code}) after committing what was "
                f"acknowledged;{resume or ' without state= a retry trains from the start'}",
                code, summary)
        if code < 0:
            raise SluiceExitError(
                f"{what} was killed by {signal.Signals(-code).name}", code, summary)
        raise SluiceExitError(f"{what} failed (exit {code}): {_first_error(tail)}",
                              code, summary)

    # -- OpenLineage ---------------------------------------------------------

    def get_openlineage_facets_on_complete(self, task_instance):
        """Input: the source (its table version when it is a table), one per
        partition trained for a job file; output: the model file (`--output`);
        run facet `sluice`: rows trained and failed tasks."""
        return _operator_lineage(self)

    def get_openlineage_facets_on_failure(self, task_instance):
        """As on completion, with what is known of the failed run."""
        return _operator_lineage(self)


# -- the sensor and its trigger ----------------------------------------------

def _check_command(binary, source=None, job_file=None, extra_args=()):
    if job_file is not None:
        return [binary, "run", str(job_file), "--dry-run", "--json", "--allow-empty",
                *map(str, extra_args)]
    return [binary, "ls", str(source), "--json", *map(str, extra_args)]


# Errors of `sluice ls` that mean "not written yet": keep waiting.
_NOT_YET = ("no such path", "is an empty directory")


def _readiness(code, stdout, stderr, source=None, job_file=None, after_version=None):
    """What one check found: ("ready", info), ("waiting", why), ("error", message)
    or ("usage", message)."""
    error = _first_error([l for l in stderr.splitlines() if l.strip()])
    if code == EXIT_USAGE:
        return "usage", error
    if job_file is not None:
        if code == EXIT_HELD:
            return "waiting", f"the job's lock is held: {error}"
        if code != EXIT_DONE:
            return "error", f"sluice run {job_file} --dry-run failed (exit {code}): {error}"
        try:
            report = json.loads(stdout)
        except ValueError:
            return "error", f"sluice run --dry-run --json printed no JSON: {stdout[:300]}"
        new = report.get("new") or []
        if not new:
            waiting = ", ".join(f"{w.get('path')} ({w.get('reason')})"
                                for w in report.get("waiting") or [])
            return "waiting", (f"nothing new for {job_file} (matched {report.get('matched')}, "
                               f"trained before {report.get('trained_before')}"
                               f"{'; waiting: ' + waiting if waiting else ''})")
        info = {k: report.get(k) for k in ("job", "source", "state", "new", "waiting", "table")}
        return "ready", info
    if code != EXIT_DONE:
        if any(s in error for s in _NOT_YET):
            return "waiting", error
        return "error", f"sluice ls {source} failed (exit {code}): {error}"
    try:
        listing = json.loads(stdout)
    except ValueError:
        return "error", f"sluice ls --json printed no JSON: {stdout[:300]}"
    info = {k: listing.get(k) for k in ("url", "complete", "format", "rows", "files", "bytes",
                                        "table")}
    table = listing.get("table")
    if after_version is not None:
        if not table:
            return "error", (f"{listing.get('url')} is not a Delta or Iceberg table "
                             "(after_version is for tables)")
        version = table.get("version")
        if table.get("kind") == "delta":
            newer = int(version) > int(after_version)
        else:
            newer = str(version) != str(after_version)
        if not newer:
            return "waiting", (f"{listing.get('url')}: {table.get('kind')} version {version}, "
                               f"waiting for one after {after_version}")
        return "ready", info
    if not listing.get("complete"):
        in_flight = listing.get("in_flight") or []
        return "waiting", (f"{listing.get('url')} has no _SUCCESS yet"
                           f"{' (in flight: ' + ', '.join(in_flight) + ')' if in_flight else ''}")
    return "ready", info


class SluiceOutputTrigger(BaseTrigger):
    """Polls `sluice ls --json` (or `sluice run JOB --dry-run --json`) every
    `poll_interval` seconds in the triggerer until the source is ready; fires one
    event: `{"status": "ready", "info": {...}}`, or `"error"` / `"usage"` with a
    `message`."""

    def __init__(self, source=None, job_file=None, after_version=None, extra_args=(),
                 sluice_binary=None, poll_interval=10.0, env=None):
        super().__init__()
        self.source = source
        self.job_file = job_file
        self.after_version = after_version
        self.extra_args = list(extra_args or [])
        self.sluice_binary = sluice_binary
        self.poll_interval = float(poll_interval)
        self.env = env

    def serialize(self):
        return ("sluice_trainer.airflow.SluiceOutputTrigger", {
            "source": self.source, "job_file": self.job_file,
            "after_version": self.after_version, "extra_args": self.extra_args,
            "sluice_binary": self.sluice_binary, "poll_interval": self.poll_interval,
            "env": self.env,
        })

    async def run(self):
        try:
            binary = sluice_binary(self.sluice_binary)
        except AirflowException as e:
            yield TriggerEvent({"status": "usage", "message": str(e)})
            return
        cmd = _check_command(binary, self.source, self.job_file, self.extra_args)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (self.env or {}).items()})
        last = None
        while True:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env)
            try:
                out, err = await proc.communicate()
            except asyncio.CancelledError:
                if proc.returncode is None:
                    proc.kill()
                raise
            status, detail = _readiness(
                proc.returncode, out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"), self.source, self.job_file,
                self.after_version)
            if status == "ready":
                self.log.info("ready: %s", self.job_file or self.source)
                yield TriggerEvent({"status": "ready", "info": detail})
                return
            if status != "waiting":
                yield TriggerEvent({"status": status, "message": detail})
                return
            if detail != last:
                self.log.info("waiting: %s", detail)
                last = detail
            await asyncio.sleep(self.poll_interval)


class SluiceOutputSensor(BaseSensorOperator):
    """Waits until a source is ready for training.

    source          a directory (ready once `_SUCCESS` is there: `sluice ls` says
                    `complete`), or a Delta/Iceberg table
    after_version   with a table source: ready once the table's version is newer than
                    this (Delta) or its current snapshot is another (Iceberg)
    job_file        instead of source: ready once `sluice run JOB --dry-run` lists new
                    partitions (or table versions) that no earlier run trained
    extra_args      further arguments of `sluice ls` (`["--format", "csv"]`) or
                    `sluice run`
    deferrable      wait in the triggerer (default, unless mode="reschedule"); else
                    poke every `poke_interval` (mode "poke" or "reschedule")
    sluice_binary   the binary (default: `$SLUICE_BINARY`, else the wheel's, else PATH)
    env             variables added to sluice's environment; they travel to the
                    triggerer with the trigger, stored in Airflow's database: give
                    secrets through the environment of the workers and triggerer

    Returns (XCom `return_value`) what was found: for a source `url`, `rows`,
    `files`, `bytes`, `format`, `table` (`{kind, version, timestamp_ms}`); for a job
    file the dry run's `new`, `waiting` and `table`. A source that does not exist yet
    or is an empty directory is waited for; any other error fails the task.
    """

    template_fields = ("source", "job_file", "after_version", "extra_args", "sluice_binary",
                       "env")
    ui_color = "#e8f8f5"

    def __init__(self, *, source=None, job_file=None, after_version=None, extra_args=None,
                 sluice_binary=None, deferrable=None, env=None, **kwargs):
        kwargs.setdefault("poke_interval", 10)
        super().__init__(**kwargs)
        if (source is None) == (job_file is None):
            raise ValueError("SluiceOutputSensor takes one of source= and job_file=")
        if after_version is not None and job_file is not None:
            raise ValueError("after_version is for a table source, not a job file")
        self.source = source
        self.job_file = job_file
        self.after_version = after_version
        self.extra_args = list(extra_args or [])
        self.sluice_binary = sluice_binary
        self.deferrable = (self.mode != "reschedule") if deferrable is None else deferrable
        self.env = env

    def _check(self):
        binary = sluice_binary(self.sluice_binary)
        cmd = _check_command(binary, self.source, self.job_file, self.extra_args)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (self.env or {}).items()})
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, env=env)
        return _readiness(out.returncode, out.stdout.decode("utf-8", "replace"),
                          out.stderr.decode("utf-8", "replace"), self.source,
                          self.job_file, self.after_version)

    def _settle(self, status, detail):
        if status == "ready":
            return detail
        if status == "usage":
            raise SluiceUsageError(f"sluice: usage error: {detail}")
        if status == "error":
            raise AirflowException(detail)
        return None

    def poke(self, context):
        status, detail = self._check()
        info = self._settle(status, detail)
        if info is None:
            self.log.info("waiting: %s", detail)
            return False
        return PokeReturnValue(is_done=True, xcom_value=info)

    def execute(self, context):
        if not self.deferrable:
            return super().execute(context)
        status, detail = self._check()
        info = self._settle(status, detail)
        if info is not None:
            return info
        self.log.info("waiting (deferred to the triggerer): %s", detail)
        self.defer(
            trigger=SluiceOutputTrigger(
                source=self.source, job_file=self.job_file, after_version=self.after_version,
                extra_args=self.extra_args, sluice_binary=self.sluice_binary,
                poll_interval=self.poke_interval, env=self.env),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context, event=None):
        """Where the task resumes once the trigger fired."""
        event = event or {}
        status = event.get("status")
        if status == "ready":
            self.log.info("ready: %s", self.job_file or self.source)
            return event.get("info")
        if status == "usage":
            raise SluiceUsageError(event.get("message"))
        raise AirflowException(event.get("message") or f"unexpected trigger event {event}")


# -- OpenLineage ---------------------------------------------------------------

def _ol_name(location):
    """An OpenLineage dataset (namespace, name) for a path or URL, by the naming
    spec: `file` + absolute path, `hdfs://host:port` + path, `s3://bucket` + key."""
    text = str(location)
    parsed = urlparse(text)
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme == "file" else text
        return "file", os.path.abspath(path)
    if parsed.scheme in ("hdfs", "webhdfs", "viewfs"):
        return f"{parsed.scheme}://{parsed.netloc}", parsed.path or "/"
    return f"{parsed.scheme}://{parsed.netloc}", parsed.path.lstrip("/") or "/"


_FACETS = None


def _facet_classes():
    """The OpenLineage classes, made on first use (the client is only there with
    the OpenLineage provider)."""
    global _FACETS
    if _FACETS is None:
        import attr
        from openlineage.client.event_v2 import InputDataset, OutputDataset
        from openlineage.client.facet_v2 import (
            RunFacet, dataset_version_dataset, input_statistics_input_dataset)

        @attr.define
        class SluiceRunFacet(RunFacet):
            """What a sluice run trained: `rows`, `tasksDone`, the failed tasks
            (`file`, `reason`, `epoch`), its exit code."""

            rows: int = attr.field(default=0)
            tasksDone: int = attr.field(default=0)  # noqa: N815
            tasksFailed: list = attr.field(factory=list)  # noqa: N815
            exitCode: int = attr.field(default=None)  # noqa: N815
            alreadyFinished: bool = attr.field(default=False)  # noqa: N815
            _additional_skip_redact = ["rows", "tasksDone", "tasksFailed", "exitCode"]

            @staticmethod
            def _get_schema():
                return ("https://openlineage.io/spec/2-0-2/OpenLineage.json"
                        "#/$defs/RunFacet")

        _FACETS = {
            "InputDataset": InputDataset, "OutputDataset": OutputDataset,
            "Version": dataset_version_dataset.DatasetVersionDatasetFacet,
            "InputStatistics": input_statistics_input_dataset.InputStatisticsInputDatasetFacet,
            "SluiceRunFacet": SluiceRunFacet,
        }
    return _FACETS


def _operator_lineage(op):
    from airflow.providers.openlineage.extractors import OperatorLineage

    c = _facet_classes()
    summary = op._summary or {}
    report = op._report or {}
    inputs = []

    def input_dataset(location, version=None, rows=None, files=None):
        namespace, name = _ol_name(location)
        facets = {}
        if version is not None:
            facets["version"] = c["Version"](datasetVersion=str(version))
        input_facets = {}
        if rows is not None:
            input_facets["inputStatistics"] = c["InputStatistics"](rowCount=rows,
                                                                   fileCount=files)
        return c["InputDataset"](namespace=namespace, name=name, facets=facets,
                                 inputFacets=input_facets)

    table = summary.get("table") or {}
    if op.job_file is not None:
        to = (report.get("table") or {}).get("to", table.get("version"))
        for part in report.get("new") or []:
            inputs.append(input_dataset(part.get("url") or part.get("path"),
                                        to if report.get("table") else None,
                                        part.get("rows"), part.get("files")))
    else:
        location = summary.get("url") or op.source
        inputs.append(input_dataset(location, table.get("version"),
                                    summary.get("rows"), None))
    outputs = []
    model = _flag_value([str(a) for a in op.extra_args], "--output")
    if model is None and op.job_file is not None:
        model = _job_file_key(op.job_file, "output")
    if model:
        if _local_path(model) is not None and not os.path.isabs(_local_path(model)):
            model = os.path.join(op.cwd or os.getcwd(), _local_path(model))
        namespace, name = _ol_name(model)
        outputs.append(c["OutputDataset"](namespace=namespace, name=name))
    failed = [{"file": t.get("file"), "reason": t.get("reason"), "epoch": t.get("epoch")}
              for t in summary.get("tasks_failed") or []]
    run_facets = {"sluice": c["SluiceRunFacet"](
        rows=int(summary.get("rows") or 0), tasksDone=int(summary.get("tasks_done") or 0),
        tasksFailed=failed, exitCode=op._exit_code,
        alreadyFinished=bool(summary.get("already_finished")))}
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


def _job_file_key(path, key):
    """A top-level key of a job file (TOML), or None when it cannot be read."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        try:
            import tomli as tomllib
        except ImportError:
            return None
    try:
        with open(path, "rb") as f:
            value = tomllib.load(f).get(key)
    except (OSError, ValueError):
        return None
    return None if value is None else str(value)
