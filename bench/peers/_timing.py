"""The timing line sluice's exec trainers in the bench print for
bench/measure.py --trainer-timing."""
import json
import sys


def report_timing(device, rows, first, last):
    """One line on stderr: this trainer's rows and the wall-clock times of its first
    and last batch (one write, so the lines of several trainers sharing stderr do not
    interleave)."""
    line = json.dumps({"trainer_timing": {"device": device, "rows": rows,
                                          "first": first, "last": last}})
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
