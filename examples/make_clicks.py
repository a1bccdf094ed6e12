#!/usr/bin/env python3
"""Regenerate examples/clicks: a small real Spark output bundled with sluice.

Usage:
    python examples/make_clicks.py [OUTDIR]        (default: examples/clicks)

Writes about 6000 rows of a toy click-through dataset with pyspark in local mode:
snappy Parquet, partitionBy("dt") over two dates, two part files per date, Spark's
_SUCCESS kept and the .crc checksum siblings removed to keep the repository small.

Columns: id (long, 0..n-1), f1..f4 (double, rounded to 2 decimals so Parquet
dictionary-encodes them), label (int 0/1).  The label is drawn from a logistic
model, P(label=1) = sigmoid(4 * (1.5*f1 - 1.0*f2 + 0.8*f3 - 0.3)); f4 is pure
noise.  The best possible classifier scores about 93% accuracy, so a logistic
regression trained through sluice should get close to that.

Needs pyspark, pyarrow, pandas and numpy (e.g. the venv used by
tests/fixtures/make_fixtures.py).
"""

import os
import sys
import tempfile
import time
import warnings

ROWS_PER_DAY = (2900, 3100)
DAYS = ("2024-03-01", "2024-03-02")
WEIGHTS = (1.5, -1.0, 0.8, 0.0)
BIAS = -0.3
SHARPNESS = 4.0
SEED = 2024


def make_frame():
    """The rows as a pandas DataFrame (deterministic for a given SEED)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(SEED)
    n = sum(ROWS_PER_DAY)
    x = np.round(rng.normal(size=(n, 4)), 2)
    z = x @ np.array(WEIGHTS) + BIAS
    p = 1.0 / (1.0 + np.exp(-SHARPNESS * z))
    label = (rng.random(n) < p).astype(np.int32)
    dt = np.repeat(np.array(DAYS), ROWS_PER_DAY)
    return pd.DataFrame({
        "id": np.arange(n, dtype=np.int64),
        "f1": x[:, 0], "f2": x[:, 1], "f3": x[:, 2], "f4": x[:, 3],
        "label": label,
        "dt": dt,
    }), float(np.mean((z > 0) == (label == 1)))


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.abspath(argv[1]) if len(argv) > 1 else os.path.join(here, "clicks")

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    from pyspark.sql import SparkSession

    pdf, bayes_acc = make_frame()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sluice-clicks-") as tmp:
        log4j = os.path.join(tmp, "log4j2.properties")
        with open(log4j, "w") as f:  # errors only, no start-up chatter
            f.write("rootLogger.level = error\n"
                    "rootLogger.appenderRef.stderr.ref = console\n"
                    "appender.console.type = Console\n"
                    "appender.console.name = console\n"
                    "appender.console.target = SYSTEM_ERR\n"
                    "appender.console.layout.type = PatternLayout\n"
                    "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n"
                    "logger.native.name = org.apache.hadoop.util.NativeCodeLoader\n"
                    "logger.native.level = off\n")
        spark = (SparkSession.builder
                 .master("local[2]")
                 .appName("sluice-example-clicks")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.session.timeZone", "UTC")
                 .config("spark.driver.extraJavaOptions",
                         f"-Dlog4j2.configurationFile=file:{log4j}")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            df = spark.createDataFrame(pdf).repartition(2)  # two files per date
            (df.write.mode("overwrite")
             .option("compression", "snappy")
             .partitionBy("dt")
             .parquet(out))
            back = spark.read.parquet(out)
            counts = dict(sorted((r["dt"].isoformat(), r["count"])
                                 for r in back.groupBy("dt").count().collect()))
        finally:
            spark.stop()

    # Checksum siblings (.part-*.crc, ._SUCCESS.crc) only bloat the repository.
    removed = 0
    for dirpath, _dirs, files in os.walk(out):
        for f in files:
            if f.startswith(".") and f.endswith(".crc"):
                os.remove(os.path.join(dirpath, f))
                removed += 1

    size = sum(os.path.getsize(os.path.join(d, f))
               for d, _, fs in os.walk(out) for f in fs)
    print(f"wrote {out}: {counts} rows, {size / 1024:.0f} KiB, "
          f"{removed} .crc files removed, best accuracy {bayes_acc:.3f}, "
          f"{time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
