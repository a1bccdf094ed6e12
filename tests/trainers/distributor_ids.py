#!/usr/bin/env python3
"""Test driver: `TorchDistributor(num_processes=2).run(fn)` on a local-cluster, each
process one `sluice_trainer.Dataset(master=...)` worker recording the ids it trains.

Usage:
    python tests/trainers/distributor_ids.py MASTER_URL TOKEN_FILE OUT

Each rank writes OUT/rank-<R>.json: {"ids": [...], "steps": N}.
"""

import json
import os
import sys


def train(master, token_file, out):
    import torch.distributed as dist

    import sluice_trainer

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = sluice_trainer.Dataset(master=master, token_file=token_file,
                                name=f"spark-rank-{rank}", batch_size=1000)
    ids, steps = [], 0
    for batch in ds:
        ids.extend(batch.column("id").to_pylist())
        steps += 1
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump({"ids": ids, "steps": steps}, f)
    dist.destroy_process_group()
    return steps


def main():
    master, token_file, out = sys.argv[1:4]
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    # Less JIT and GC work for three short-lived JVMs on a small machine, and
    # the venv's class archive (tests/fixtures/spark_cds.py), as
    # tests/it/spark_launcher.rs runs its local-cluster.
    jvm = os.environ.get("SLUICE_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.extraJavaOptions", jvm)
             .config("spark.executor.extraJavaOptions", jvm).getOrCreate())
    TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(
        train, master, token_file, out)
    spark.stop()


if __name__ == "__main__":
    main()
