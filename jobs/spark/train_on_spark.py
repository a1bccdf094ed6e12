#!/usr/bin/env python3
"""Trains on a Spark output with sluice workers running as Spark tasks.

    spark-submit --master yarn --num-executors 8 --executor-cores 1 \\
        jobs/spark/train_on_spark.py hdfs://nn:8020/warehouse/clicks/dt=2026-11-29 \\
        --workers 8 --exec 'python train.py' -- --epochs 3 --batch-size 8192

`sluice master` runs on the driver, one `sluice worker` in each task of a barrier
stage on the executors (see sluice_trainer.spark). Options after `--` are flags
of `sluice master` or `sluice worker` (`--epochs 3`, `--allow-incomplete`), each
passed to whichever accepts it. Prints the job's summary as JSON on stdout and
exits with the master's exit code (0: every task done, 2: some failed).

Needs the `sluice` wheel (binary and sluice_trainer) on the driver and the
executors, e.g. in the cluster's Python environment or the executor image.
"""

import argparse
import json
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
    args = ap.parse_args(words)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"sluice {args.url}").getOrCreate()
    try:
        summary = sluice_spark.train(
            args.url, args.workers, args.exec_command, spark=spark, state=args.state,
            sluice=args.sluice, name=args.name, **sluice_options(rest))
    except sluice_spark.SluiceSparkError as e:
        print(f"train_on_spark.py: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(json.dumps(summary))
    return summary["exit_code"]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
