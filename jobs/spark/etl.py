"""A small daily Spark ETL job: writes one day's clicks as the partition ROOT/dt=DAY.

This is the kind of job `sluice run` follows from cron and `submit_and_train.sh`
hands to `sluice train --wait-success`: each run overwrites one `dt=DAY`
directory (Parquet) and Spark's committer writes `_SUCCESS` there last.

Columns: id (long, unique over all days when --first-id is set per day), f1..f4
(double features) and label (0 or 1, separable from f1 and f2).

usage: spark-submit etl.py --out ROOT --day 2026-11-29 [--day ...]
                           [--rows N] [--first-id K] [--slow S] [--fail]

  --day DAY       a partition to write; repeat for several (ids continue across days)
  --rows N        rows per day (default 1000)
  --first-id K    id of the first row of the first day (default 0)
  --slow S        each write task sleeps S seconds before writing (a long job)
  --fail          crash the driver once the write is under way: the job ends
                  without _SUCCESS and leaves _temporary behind (for tests)
"""

import argparse
import os
import signal
import sys
import threading
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def crash_when_writing(target):
    """Kill the JVM driver (our parent) and exit once `target/_temporary` exists."""
    while not os.path.isdir(os.path.join(target, "_temporary")):
        time.sleep(0.05)
    time.sleep(0.5)
    print("etl: failing on purpose (--fail): killing the driver mid-write", file=sys.stderr)
    sys.stderr.flush()
    os.kill(os.getppid(), signal.SIGKILL)
    os._exit(3)


def day_frame(spark, first_id, rows, slow):
    df = (spark.range(first_id, first_id + rows, numPartitions=2)
          .withColumn("f1", (F.col("id") % 7) / 7.0)
          .withColumn("f2", (F.col("id") % 11) / 11.0)
          .withColumn("f3", (F.col("id") % 13) / 13.0)
          .withColumn("f4", F.lit(1.0))
          .withColumn("label", (F.col("f1") + F.col("f2") > 1.0).cast("int")))
    if slow > 0:
        def sleepy(rows_iter):
            time.sleep(slow)
            yield from rows_iter
        df = spark.createDataFrame(df.rdd.mapPartitions(sleepy), df.schema)
    return df


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="table root; days go to ROOT/dt=DAY")
    ap.add_argument("--day", action="append", required=True, help="day to write (repeatable)")
    ap.add_argument("--rows", type=int, default=1000, help="rows per day")
    ap.add_argument("--first-id", type=int, default=0, help="id of the first row")
    ap.add_argument("--slow", type=float, default=0.0, help="seconds each write task sleeps")
    ap.add_argument("--fail", action="store_true", help="crash the driver mid-write")
    args = ap.parse_args(argv[1:])

    spark = (SparkSession.builder
             .appName("sluice-etl-clicks")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    first = args.first_id
    for day in args.day:
        target = os.path.join(args.out, f"dt={day}")
        if args.fail:
            threading.Thread(target=crash_when_writing, args=(target,), daemon=True).start()
        day_frame(spark, first, args.rows, args.slow).write.mode("overwrite").parquet(target)
        print(f"etl: wrote {args.rows} rows (ids {first}..{first + args.rows - 1}) to {target}")
        first += args.rows
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
