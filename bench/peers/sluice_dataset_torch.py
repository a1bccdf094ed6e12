"""sluice's `Dataset` side of the PyTorch comparison: one Python process owns the loop,
with `sluice train DATA --attach ...` as its child, and receives each batch as a dict of
torch tensors (categoricals hashed and nulls filled in Rust, batches in shared memory),
touches every tensor and acknowledges it — what bench/peers/sluice_torch.py does as an
exec trainer. Run by

    python bench/peers/sluice_dataset_torch.py DATA --batch-size B --summary-json F

with SLUICE_BINARY naming the binary; prints the trainer_timing line of _timing.py.
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
    ap.add_argument("data")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--buckets", type=int, default=1 << 20)
    ap.add_argument("--summary-json")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    ds = sluice_trainer.Dataset(args.data, batch_size=args.batch_size,
                                hash_buckets=args.buckets, fill_nulls=0,
                                summary_json=args.summary_json)
    rows = checksum = 0
    warm_up()
    first = None
    for tensors in ds.torch():
        if first is None:
            first = time.time()
        for t in tensors.values():
            checksum += int(t.numel())
        rows += len(next(iter(tensors.values())))
    now = time.time()
    report_timing(0, rows, first if first is not None else now, now)
    print(f"sluice_dataset_torch: {rows} rows, {checksum} values", file=sys.stderr)


if __name__ == "__main__":
    main()
