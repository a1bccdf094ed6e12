"""sluice's side of the PyTorch comparison: an exec trainer that receives each batch
through the `sluice_trainer` package as a dict of torch tensors (numeric columns
zero-copy from the Arrow buffers, nulls filled; the 26 categorical hex strings hashed
into int64 buckets, vectorised), touches every tensor, and acknowledges it. Run by

    sluice train DATA --exec "python bench/peers/sluice_torch.py" --devices 2

so it is measured as the DataLoader peer is: batches of tensors reaching the training
loop, no model (examples/torch/train_ctr.py, measured beside it, adds a real step).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "sluice_trainer"))

import sluice_trainer  # noqa: E402
from _timing import report_timing, warm_up  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--buckets", type=int, default=1 << 20,
                    help="hash buckets of categorical columns")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    rows = 0
    checksum = 0
    warm_up()
    first = None
    for tensors in sluice_trainer.torch_batches(hash_buckets=args.buckets, nulls="fill"):
        if first is None:
            first = time.time()
        for t in tensors.values():
            checksum += int(t.numel())
        rows += len(next(iter(tensors.values())))
    now = time.time()
    report_timing(sluice_trainer.device, rows, first if first is not None else now, now)
    print(f"sluice_torch device {sluice_trainer.device}: {rows} rows, {checksum} values",
          file=sys.stderr)


if __name__ == "__main__":
    main()
