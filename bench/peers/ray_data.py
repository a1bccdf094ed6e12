"""Peer: Ray Data, `ray.data.read_parquet(...).iter_batches`.

    python ray_data.py PATH [--batch-size 8192] [--cpus 2]

Starts a local Ray with --cpus CPUs, reads every Parquet file and iterates batches of
--batch-size rows in Arrow format (no conversion), all columns. Prints one JSON line:
rows, batches, seconds (read_parquet to last batch; Ray's start-up is not counted, it
is reported as init_seconds).
"""
import argparse
import json
import logging
import os
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--cpus", type=int, default=2)
    a = ap.parse_args()
    t_init = time.perf_counter()
    ray.init(num_cpus=a.cpus, include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False, configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    init_seconds = time.perf_counter() - t_init
    path = os.path.abspath(a.path) if "://" not in a.path else a.path
    t0 = time.perf_counter()
    ds = ray.data.read_parquet(path, file_extensions=["parquet"])
    rows = batches = 0
    ncols = None
    for batch in ds.iter_batches(batch_size=a.batch_size, batch_format="pyarrow",
                                 prefetch_batches=2):
        cells = sum(len(c) for c in batch.columns)  # touch every column
        ncols = batch.num_columns
        assert cells == batch.num_rows * ncols
        rows += batch.num_rows
        batches += 1
    seconds = time.perf_counter() - t0
    print(json.dumps({"rows": rows, "batches": batches, "seconds": seconds,
                      "init_seconds": init_seconds, "ray": ray.__version__, "cpus": a.cpus}))
    ray.shutdown()


if __name__ == "__main__":
    main()
