"""sluice's side of the all-numeric comparison: an exec trainer that wraps every column
of each batch as a numpy array (no copy: sluice filled the nulls with --fill-nulls),
touches it, and acknowledges the batch. Run by

    sluice train DATA --fill-nulls 0 --exec "python bench/peers/sluice_numpy.py [--pipe]"

With --pipe the batches come on stdin (the plain Arrow stream); by default in shared
memory.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "sluice_trainer"))

import sluice_trainer  # noqa: E402


def report_timing(rows, first, last):
    """One line on stderr for bench/measure.py --trainer-timing: this trainer's rows and
    the wall-clock times of its first and last batch (one write, so the lines of
    several trainers sharing stderr do not interleave)."""
    line = json.dumps({"trainer_timing": {"device": sluice_trainer.device, "rows": rows,
                                          "first": first, "last": last}})
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--pipe", action="store_true", help="read batches from stdin")
    args = ap.parse_args()
    rows = values = 0
    first = None
    for batch in sluice_trainer.batches(shared_memory=not args.pipe):
        if first is None:
            first = time.time()
        for column in batch.columns:
            values += len(column.to_numpy(zero_copy_only=True))
        rows += batch.num_rows
    report_timing(rows, first if first is not None else time.time(), time.time())
    print(f"sluice_numpy device {sluice_trainer.device}: {rows} rows, {values} values",
          file=sys.stderr)


if __name__ == "__main__":
    main()
