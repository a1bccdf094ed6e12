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


def warm_up():
    """Start-up that would otherwise fall on the first batch: pyarrow imports numpy
    and pandas the first time it turns an array into numpy (0.3 s of CPU here),
    as `import torch` is start-up for the torch lines."""
    import pyarrow as pa
    pa.array([0]).to_numpy(zero_copy_only=True)
