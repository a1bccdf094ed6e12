#!/usr/bin/env python3
"""Write a Criteo-like click dataset with PySpark (local mode, snappy Parquet).

Usage:
    python examples/torch/make_criteo.py --rows N [--partitions P] [--seed S] OUT

Columns, as in the Criteo display-advertising data:
    label     int, 0/1, about 25% positive
    I1..I13   bigint counts (heavy-tailed, some nulls)
    C1..C26   8-hex-digit strings (hashed category ids, skewed frequencies, some nulls)

The label is drawn from a logistic model of a few of the features (log-counts of I1,
I3, I6 and per-category effects of C1, C2, C3, C7), so a model that learns from the
features gets its log loss well below the entropy of the base rate; the other columns
are noise. The rows are computed by Spark itself (no Python per row) and written as
P part files under OUT with Spark's _SUCCESS, the way a Spark job hands its output
to sluice. Deterministic for given N, P and S. Prints one line of JSON describing
what it wrote.
"""

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

NUMERIC = 13
CATEGORICAL = 26
# Categories per C column: small ones (like Criteo's C6, C9) and large ones.
CARDINALITY = [60, 300, 2000, 50, 20, 10, 400, 80, 3, 5000, 800, 4000, 30,
               20, 3000, 4000, 10, 600, 900, 4, 5000, 15, 70, 3000, 40, 1000]
# Share of nulls per I column (Criteo's I12 is mostly missing).
NULL_SHARE = [0.05, 0.0, 0.2, 0.2, 0.03, 0.2, 0.04, 0.0, 0.04, 0.45, 0.04, 0.75, 0.2]
BIAS = -1.4
NUMERIC_WEIGHTS = {1: 0.6, 3: -0.5, 6: 0.4}     # on log1p(I_k), centred
CATEGORY_WEIGHTS = {1: 1.0, 2: 0.9, 3: 0.7, 7: 0.8}  # on a per-category effect in [-1, 1]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--rows", type=int, required=True, help="number of rows")
    ap.add_argument("--partitions", type=int, default=4,
                    help="part files to write (default 4)")
    ap.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    ap.add_argument("out", help="output directory (must not exist or be empty)")
    args = ap.parse_args(argv)
    if args.rows < 0 or args.partitions < 1:
        ap.error("--rows must be >= 0 and --partitions >= 1")
    return args


def spark_session(tmp):
    from pyspark.sql import SparkSession

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
             .appName("sluice-example-criteo")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.parquet.compression.codec", "snappy")
             .config("spark.driver.extraJavaOptions",
                     f"-Dlog4j2.configurationFile=file:{log4j} "
                     "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .config("spark.local.dir", tmp)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def frame(spark, rows, partitions, seed):
    """The dataset as a Spark DataFrame, computed by Spark expressions."""
    from pyspark.sql import functions as F

    # Stage 1: the random draws, materialised once per row (numeric values and the
    # category index of every C column).
    draws = [F.col("id")]
    for k in range(1, NUMERIC + 1):
        value = F.floor(F.exp(F.randn(seed * 1000 + k) * 1.3 + 1.2)).cast("bigint")
        if NULL_SHARE[k - 1] > 0:
            value = F.when(F.rand(seed * 1000 + 100 + k) < NULL_SHARE[k - 1], None) \
                .otherwise(value)
        draws.append(value.alias(f"I{k}"))
    for k in range(1, CATEGORICAL + 1):
        # pow(u, 3): a few categories are frequent, most are rare.
        index = F.floor(F.pow(F.rand(seed * 1000 + 200 + k), 3) * CARDINALITY[k - 1])
        draws.append(index.cast("int").alias(f"c{k}"))
    draws.append(F.rand(seed * 1000 + 999).alias("u"))
    base = spark.range(0, rows, 1, partitions).select(*draws)

    # Stage 2: deterministic functions of the draws.
    logit = F.lit(BIAS)
    for k, weight in NUMERIC_WEIGHTS.items():
        logit = logit + weight * (F.log1p(F.coalesce(F.col(f"I{k}"), F.lit(0))) - 1.2)
    for k, weight in CATEGORY_WEIGHTS.items():
        effect = (F.pmod(F.xxhash64(F.lit(k), F.col(f"c{k}")), F.lit(9)) - 4) / 4.0
        logit = logit + weight * effect
    label = (F.col("u") < 1.0 / (1.0 + F.exp(-logit))).cast("int").alias("label")
    columns = [label] + [F.col(f"I{k}") for k in range(1, NUMERIC + 1)]
    for k in range(1, CATEGORICAL + 1):
        digest = F.xxhash64(F.lit(f"C{k}"), F.col(f"c{k}"), F.lit(seed))
        text = F.lower(F.substring(F.lpad(F.hex(digest), 16, "0"), 1, 8))
        if k % 5 == 0:  # a few columns with missing values, as in Criteo
            text = F.when(F.col(f"c{k}") % 17 == 3, None).otherwise(text)
        columns.append(text.alias(f"C{k}"))
    return base.select(*columns)


def describe(out, started):
    """Rows, positive share and files of what Spark wrote (read back with pyarrow)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = sorted(f for f in os.listdir(out) if f.startswith("part-"))
    rows = positive = 0
    for name in files:
        labels = pq.read_table(os.path.join(out, name), columns=["label"])["label"]
        rows += len(labels)
        positive += pc.sum(labels).as_py() or 0
    return {
        "out": out, "rows": rows, "positive_share": positive / rows if rows else None,
        "files": len(files), "seconds": round(time.monotonic() - started, 1),
    }


def main(argv):
    args = parse_args(argv)
    out = os.path.abspath(args.out)
    if os.path.isdir(out) and os.listdir(out):
        print(f"make_criteo: {out} exists and is not empty", file=sys.stderr)
        return 2
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sluice-criteo-") as tmp:
        spark = spark_session(tmp)
        try:
            df = frame(spark, args.rows, args.partitions, args.seed)
            df.write.mode("overwrite").parquet(out)
        finally:
            spark.stop()
    print(json.dumps(describe(out, started)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
