#!/usr/bin/env python3
"""Training from a sluice job inside Spark: a `TorchDistributor` function.

    sluice master /data/clicks --listen 0.0.0.0:7070 --state /data/state &
    python examples/dataset/torch_distributor.py http://DRIVER:7070 \
        --token-file /etc/sluice/token --num-processes 2 --master-url 'local-cluster[2,1,1024]'

`TorchDistributor(...).run(train, ...)` starts `train` in each Spark task with a
torch.distributed group set up; each makes `sluice_trainer.Dataset(master=...)`, so
the tasks share the job's data (each row once per epoch) instead of each reading a
static shard. The `sluice` binary must be on the executors' PATH (the `sluice` wheel
puts it there) or named by SLUICE_BINARY.
"""

import argparse


def train(master, token_file, features, label, batch_size):
    """Runs in each Spark task: one DDP rank, one sluice worker. Returns
    (rank, steps, rows)."""
    import torch
    import torch.distributed as dist

    import sluice_trainer

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(len(features), 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ds = sluice_trainer.Dataset(master=master, token_file=token_file,
                                name=f"spark-rank-{rank}", batch_size=batch_size)
    steps = rows = 0
    for t in ds.torch(columns=features + [label], nulls="fill"):
        x = torch.stack([t[f].float() for f in features], dim=1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(x).squeeze(1), t[label].float())
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        rows += len(t[label])
    dist.destroy_process_group()
    return rank, steps, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("master")
    ap.add_argument("--token-file")
    ap.add_argument("--features", default="x1,x2")
    ap.add_argument("--label", default="label")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--num-processes", type=int, default=2)
    ap.add_argument("--master-url", default="local-cluster[2,1,1024]")
    args = ap.parse_args()

    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master(args.master_url).getOrCreate()
    result = TorchDistributor(num_processes=args.num_processes, local_mode=False,
                              use_gpu=False).run(
        train, args.master, args.token_file, args.features.split(","), args.label,
        args.batch_size)
    print(result)
    spark.stop()


if __name__ == "__main__":
    main()
