"""Peer: Ray Data's `iter_torch_batches`, batches of torch tensors as a Ray training
loop takes them.

    python ray_torch.py PATH [--batch-size 8192] [--cpus 2] [--buckets N]

Starts a local Ray with --cpus CPUs, reads every Parquet file, and in `map_batches`
(Ray's workers) hashes the categorical string columns into --buckets int64 buckets
(sluice_trainer.hash_array, vectorised numpy: the hash sluice uses) and fills numeric
nulls with 0, as torch needs; then iterates `iter_torch_batches` of --batch-size rows.
Prints one JSON line: rows, batches, seconds (read_parquet to last batch; Ray's
start-up is reported as init_seconds).
"""
import argparse
import json
import logging
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "..", "python", "sluice_trainer")
sys.path.insert(0, PACKAGE)

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import ray  # noqa: E402


def tensor_ready(batch, buckets):
    import sluice_trainer
    columns = {}
    for name, col in zip(batch.column_names, batch.columns):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            columns[name] = pa.array(sluice_trainer.hash_array(col, buckets))
        else:
            columns[name] = pc.fill_null(col, 0)
    return pa.table(columns)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--buckets", type=int, default=1 << 20)
    a = ap.parse_args()
    t_init = time.perf_counter()
    ray.init(num_cpus=a.cpus, include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.path.abspath(PACKAGE)}})
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    init_seconds = time.perf_counter() - t_init
    path = os.path.abspath(a.path) if "://" not in a.path else a.path
    t0 = time.perf_counter()
    ds = ray.data.read_parquet(path, file_extensions=["parquet"]).map_batches(
        tensor_ready, batch_format="pyarrow", fn_kwargs={"buckets": a.buckets})
    rows = batches = 0
    for tensors in ds.iter_torch_batches(batch_size=a.batch_size, prefetch_batches=2):
        n = {t.shape[0] for t in tensors.values()}  # touch every column
        assert len(n) == 1
        rows += n.pop()
        batches += 1
    seconds = time.perf_counter() - t0
    print(json.dumps({"rows": rows, "batches": batches, "seconds": seconds,
                      "init_seconds": init_seconds, "ray": ray.__version__, "cpus": a.cpus}))
    ray.shutdown()


if __name__ == "__main__":
    main()
