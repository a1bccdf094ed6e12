#!/usr/bin/env python3
"""Trains on a Spark output with sluice workers running as Spark tasks.

    spark-submit --master yarn --num-executors 8 --executor-cores 1 \\
        jobs/spark/train_on_spark.py hdfs://nn:8020/warehouse/clicks/dt=2026-11-29 \\
        --workers 8 --exec 'python train.py' -- --epochs 3 --batch-size 8192

`sluice master` runs on the driver, one `sluice worker` in each task of a barrier
stage on the executors (see sluice_trainer.spark). Options after `--` are flags
of `sluice master` or `sluice worker` (`--epochs 3`, `--allow-incomplete`), each
passed to whichever accepts it. Prints the job's summary as JSON on stdout
(and to --summary-json FILE) and exits with the master's exit code (0: every
task done, 2: some failed), or 1 when the job did not end (the first line on
stderr says why; the summary then has `error`), 143 on SIGTERM.

spark-submit merges its Python driver's stderr into its own stdout; where its
stderr can be written without clobbering it (a pipe, a terminal, a file opened
for appending), this script sends its log lines (and the master's) there, so
that stdout holds the summary alone (`| jq` works).

Needs the `sluice` wheel (binary and sluice_trainer) on the driver and the
executors, e.g. in the cluster's Python environment or the executor image.
"""

import argparse
import json
import logging
import os
import stat
import sys

from sluice_trainer import spark as sluice_spark


def sluice_options(words):
    """`--batch-size 8192 --allow-incomplete` -> {"batch_size": "8192", "allow_incomplete": True}."""
    options = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or len(word) == 2:
            raise SystemExit(f"train_on_spark.py: expected a --flag after --, got {word!r}")
        key, eq, value = word[2:].partition("=")
        key = key.replace("-", "_")
        if eq:
            options[key] = value
            i += 1
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            options[key] = words[i + 1]
            i += 2
        else:
            options[key] = True
            i += 1
    return options


def _stderr_apart_from_stdout():
    """Under spark-submit, fd 1 and fd 2 of this process are one pipe that the
    JVM (our parent) copies to its stdout. Points fd 2 at the JVM's own stderr
    instead, where opening it again cannot overwrite what the JVM writes: a
    pipe, a terminal, or a file the JVM appends to."""
    if not sys.platform.startswith("linux"):
        return
    try:
        out, err = os.fstat(1), os.fstat(2)
        if (out.st_dev, out.st_ino) != (err.st_dev, err.st_ino) or not stat.S_ISFIFO(err.st_mode):
            return
        parent = os.getppid()
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            if b"org.apache.spark.deploy.SparkSubmit" not in f.read():
                return
        target = f"/proc/{parent}/fd/2"
        mode = os.stat(target).st_mode
        if stat.S_ISREG(mode):
            with open(f"/proc/{parent}/fdinfo/2") as f:
                flags = next((int(line.split()[1], 8) for line in f
                              if line.startswith("flags:")), 0)
            if not flags & os.O_APPEND:
                return
        elif not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
            return
        fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    except (OSError, ValueError, StopIteration):
        return
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)


def main(argv):
    words = argv[1:]
    rest = []
    if "--" in words:
        at = words.index("--")
        words, rest = words[:at], words[at + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", help="the output directory to train on")
    ap.add_argument("--workers", type=int, required=True, help="sluice workers (Spark tasks)")
    ap.add_argument("--exec", required=True, dest="exec_command",
                    help="the trainer command each worker starts per device")
    ap.add_argument("--state", help="the master's --state (default: a temporary directory)")
    ap.add_argument("--sluice", help="the sluice binary on driver and executors "
                    "(default: the one the wheel installed)")
    ap.add_argument("--name", default="spark", help="worker names are NAME-<partition>")
    ap.add_argument("--listen", help="the master's --listen address, HOST or HOST:PORT "
                    "(default 0.0.0.0 and a free port)")
    ap.add_argument("--summary-json", metavar="FILE",
                    help="also write the summary to FILE (also when the job fails)")
    ap.add_argument("--slots-timeout", type=float, default=60, metavar="SECONDS",
                    help="how long to wait for executors with --workers task slots")
    args = ap.parse_args(words)
    _stderr_apart_from_stdout()
    # The launcher logs why the job failed as soon as it knows, before it
    # stops the master: that line is the first of the failure on stderr.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("train_on_spark.py: %(message)s"))
    log = logging.getLogger("sluice_trainer")
    log.addHandler(handler)
    log.setLevel(logging.WARNING)
    log.propagate = False

    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    # Too few task slots for the workers fails here, before the SparkContext
    # (and the executors) start; train() checks again once they have.
    SparkContext._ensure_initialized()
    try:
        sluice_spark.check_slots(SparkConf(), args.workers)
    except sluice_spark.SluiceSparkError as e:
        print(f"train_on_spark.py: {e}", file=sys.stderr, flush=True)
        summary = {"error": str(e), "exit_code": None, "spark_tasks": []}
        if args.summary_json:
            sluice_spark.write_summary(args.summary_json, summary)
        print(json.dumps(summary), flush=True)
        return 1
    spark = SparkSession.builder.appName(f"sluice {args.url}").getOrCreate()
    try:
        summary = sluice_spark.train(
            args.url, args.workers, args.exec_command, spark=spark, state=args.state,
            sluice=args.sluice, name=args.name, listen=args.listen,
            summary_json=args.summary_json, slots_timeout=args.slots_timeout,
            **sluice_options(rest))
    except sluice_spark.SluiceSparkError as e:
        # train() logged the message already.
        if e.summary is not None:
            print(json.dumps(e.summary), flush=True)
        return 1
    except (TypeError, ValueError) as e:
        print(f"train_on_spark.py: {e}", file=sys.stderr, flush=True)
        return 64
    except KeyboardInterrupt:
        return 130
    except SystemExit as e:
        # SIGTERM (train() turns it into SystemExit(143) to clean up).
        return e.code
    finally:
        spark.stop()
    print(json.dumps(summary), flush=True)
    return summary["exit_code"]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
