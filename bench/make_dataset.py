"""Write a Criteo-like click log with real Spark: the benchmark's dataset.

    python bench/make_dataset.py OUT_DIR --rows 4000000 [--files 24] [--numeric]
                                 [--row-group-bytes N]

Columns as in the Criteo display-advertising logs: `label` (int, ~26% ones),
`I1`..`I13` (int counts with long tails, each with its own share of nulls) and
`C1`..`C26` (8-hex-digit hashed categories with Criteo's per-column cardinalities,
capped by the row count, drawn with a skew so that a few values are frequent, some
null). Everything is built with Spark SQL expressions over `range` (no Python UDF),
so 4M rows take a minute or two on 2 cores. Written as snappy Parquet, one part file
per range partition (no shuffle), as a Spark job leaves it (`_SUCCESS` included).
Deterministic for a given --rows/--files.
"""
import argparse
import math
import os
import shutil
import sys
import time

# Distinct values per categorical column in the Criteo Kaggle set (C1..C26).
CRITEO_CARDINALITY = [
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
]
# Share of nulls per integer column (I1..I13), roughly Criteo's.
INT_NULLS = [0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.22]
# Largest value per integer column (long tail: exp(uniform * log(max))).
INT_MAX = [5800, 257000, 65000, 970, 23000000, 431000, 56000, 6000, 29000, 11, 230, 4000, 7400]
# Share of nulls per categorical column (Criteo leaves some empty).
CAT_NULLS = [0.0, 0.0, 0.03, 0.03, 0.0, 0.12, 0.0, 0.0, 0.0, 0.03, 0.0, 0.03, 0.0,
             0.0, 0.0, 0.03, 0.0, 0.0, 0.44, 0.44, 0.03, 0.76, 0.0, 0.03, 0.44, 0.44]


def columns(rows):
    cols = ["cast(rand(1) < 0.26 as int) as label"]
    for i in range(13):
        seed = 100 + i
        value = f"cast(floor(exp(rand({seed}) * {math.log(INT_MAX[i] + 1):.6f})) - 1 as int)"
        if INT_NULLS[i] > 0:
            value = f"case when rand({seed + 50}) < {INT_NULLS[i]} then null else {value} end"
        cols.append(f"{value} as I{i + 1}")
    for j in range(26):
        seed = 200 + j
        card = max(2, min(CRITEO_CARDINALITY[j], rows))
        # pow(u, 3) piles the draws on small ids: a few values are frequent, the tail long.
        ident = f"cast(floor(pow(rand({seed}), 3) * {card}) as bigint)"
        value = f"lower(substr(lpad(hex(xxhash64({j}, {ident})), 16, '0'), 1, 8))"
        if CAT_NULLS[j] > 0:
            value = f"case when rand({seed + 50}) < {CAT_NULLS[j]} then null else {value} end"
        cols.append(f"{value} as C{j + 1}")
    return cols


def numeric_columns():
    """All-numeric rows of the same width: label, I1..I13 as above (nulls included),
    F1..F26 doubles (no nulls) where the categorical columns were."""
    cols = columns(1)[:14]
    for j in range(26):
        cols.append(f"round(randn({300 + j}), 6) as F{j + 1}")
    return cols


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--files", type=int, default=24)
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--numeric", action="store_true",
                    help="all-numeric columns (label, I1..I13, F1..F26) instead of strings")
    ap.add_argument("--row-group-bytes", type=int,
                    help="Parquet row groups of about N bytes (parquet.block.size; "
                    "Spark's default is 128 MiB: one row group per file here)")
    a = ap.parse_args()

    from pyspark.sql import SparkSession

    t0 = time.time()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sluice-bench-criteo")
        .config("spark.driver.memory", a.driver_memory)
        .config("spark.sql.parquet.compression.codec", "snappy")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tmp = a.out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    chosen = numeric_columns() if a.numeric else columns(a.rows)
    df = spark.range(0, a.rows, 1, a.files).selectExpr(*chosen)
    writer = df.write.mode("overwrite")
    if a.row_group_bytes:
        writer = writer.option("parquet.block.size", a.row_group_bytes)
    writer.parquet(tmp)
    spark.stop()
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    parts = [f for f in os.listdir(a.out) if f.endswith(".parquet")]
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in parts)
    print(f"wrote {a.rows} rows in {len(parts)} files, {size / 1e6:.1f} MB, "
          f"in {time.time() - t0:.0f} s: {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
