"""sluice's side of the all-numeric comparison: an exec trainer that wraps every column
of each batch as a numpy array (no copy: sluice filled the nulls with --fill-nulls),
touches it, and acknowledges the batch. Run by

    sluice train DATA --fill-nulls 0 --exec "python bench/peers/sluice_numpy.py [--pipe]"

With --pipe the batches come on stdin (the plain Arrow stream); by default in shared
memory.
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
    ap.add_argument("--pipe", action="store_true", help="read batches from stdin")
    args = ap.parse_args()
    rows = values = 0
    warm_up()
    first = None
    for batch in sluice_trainer.batches(shared_memory=not args.pipe):
        if first is None:
            first = time.time()
        for column in batch.columns:
            values += len(column.to_numpy(zero_copy_only=True))
        rows += batch.num_rows
    now = time.time()
    report_timing(sluice_trainer.device, rows, first if first is not None else now, now)
    print(f"sluice_numpy device {sluice_trainer.device}: {rows} rows, {values} values",
          file=sys.stderr)


if __name__ == "__main__":
    main()
