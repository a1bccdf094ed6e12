#!/usr/bin/env python3
"""DistributedDataParallel over `torchrun`, each rank one worker of a sluice job.

    sluice master /data/clicks --listen 0.0.0.0:7070 --state /data/state --epochs 2 &
    SLUICE_TOKEN=... torchrun --nproc-per-node 2 examples/dataset/torchrun_ddp.py \
        http://127.0.0.1:7070 --features x1,x2 --label label

Every rank makes `sluice_trainer.Dataset(master=...)`: sluice runs as its child
(`sluice worker --attach ...`) and leases tasks from the master. Under the process
group `torchrun` starts, the Dataset is in lockstep: every rank gets one batch per
step and the same number of steps, so DDP never waits for a rank that is done. Each
rank prints its step count and a digest of the final parameters (equal on all).

The same global batches on any number of ranks, and a job resumed on fewer:

    sluice master /data/clicks --state /data/state --global-batch-size 1536 \
        --world-size 2 &
    SLUICE_TOKEN=... torchrun --nproc-per-node 2 examples/dataset/torchrun_ddp.py ...
    # killed mid-epoch (pre-empted); started again on one GPU:
    sluice master /data/clicks --state /data/state --global-batch-size 1536 \
        --world-size 1 &
    SLUICE_TOKEN=... torchrun --nproc-per-node 1 examples/dataset/torchrun_ddp.py ...

Each rank takes one rank of the master's world as its Dataset joins and trains its
slice of every step (768 rows of each 1536, then all 1536); the resumed job goes on
at the first step not committed, with the steps an uninterrupted run gives
(tests/it/global_world.rs runs this, 2 ranks killed, then 1).
"""

import argparse
import hashlib

import torch
import torch.distributed as dist

import sluice_trainer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("master")
    ap.add_argument("--token-file")
    ap.add_argument("--features", default="x1,x2")
    ap.add_argument("--label", default="label")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    features = args.features.split(",")

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank()
    device = (torch.device("cuda", rank % torch.cuda.device_count())
              if torch.cuda.is_available() else torch.device("cpu"))
    torch.manual_seed(0)
    model = torch.nn.Linear(len(features), 1).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)

    ds = sluice_trainer.Dataset(master=args.master, token_file=args.token_file,
                                name=f"rank-{rank}", batch_size=args.batch_size)
    steps = 0
    for t in ds.torch(columns=features + [args.label], nulls="fill"):
        x = torch.stack([t[f].float() for f in features], dim=1).to(device)
        y = t[args.label].float().to(device)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(ddp(x).squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    digest = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes()
                                     for p in model.parameters())).hexdigest()[:16]
    print(f"rank {rank}: {steps} steps, parameters {digest}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
