"""The Python hand-off, side by side in one run: `sluice train --model none` against the
same run feeding Python trainers, as ratios of rows/s (issue 41, item 3).

    python3 bench/handoff.py SLUICE_BIN DATA [--python PY] [--reps 5] [--cpus 0,1]
                             [--only none,numpy,numpy_pyarrow,torch,none_1,dataset_torch]
                             [--before OLD_CHECKOUT/bench/peers]

Each repetition runs every reader once, in turn, so that a busy machine slows them
alike; the report is the median rows/s of each and the median of the per-repetition
ratios (with their range):

    none            sluice train DATA --model none --devices 2
    numpy           2 exec trainers, `sluice_trainer.numpy_batches()` (shared memory):
                    numeric columns as numpy views, strings as offsets + bytes
    numpy_pyarrow   2 exec trainers, `batches(shared_memory=True)` wrapping each
                    column themselves with pyarrow (`to_numpy`, `buffers()`)
    torch           2 exec trainers, `torch_batches()` (--hash-buckets, --fill-nulls)
    none_1          sluice train DATA --model none --devices 1
    dataset_torch   `Dataset(...).torch()`: one process, sluice its child

The trainers' rows/s are from their own first batch to their last (bench/measure.py
--trainer-timing: interpreter start-up and `import torch` are not counted); sluice's
from its summary. Only the standard library: runs under any python3.
"""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import run_once, trainer_span  # noqa: E402,F401

BATCH = 8192
BUCKETS = 1 << 20


def readers(sluice, data, py, summary, peers):
    """name -> (command, trainer_timing, base reader for the ratio)."""
    train = [sluice, "train", data, "--batch-size", str(BATCH), "--quiet",
             "--summary-json", summary]
    return {
        "none": (train + ["--model", "none", "--devices", "2"], False, None),
        "numpy": (train + ["--devices", "2", "--fill-nulls", "0", "--exec",
                           f"{py} {peers}/sluice_numpy.py"], True, "none"),
        "numpy_pyarrow": (train + ["--devices", "2", "--fill-nulls", "0", "--exec",
                                   f"{py} {peers}/sluice_numpy.py --pyarrow"], True, "none"),
        "torch": (train + ["--devices", "2", "--fill-nulls", "0", "--hash-buckets",
                           str(BUCKETS), "--exec", f"{py} {peers}/sluice_torch.py"],
                  True, "none"),
        "none_1": (train + ["--model", "none", "--devices", "1"], False, None),
        "dataset_torch": ([py, os.path.join(peers, "sluice_dataset_torch.py"), data,
                           "--batch-size", str(BATCH), "--buckets", str(BUCKETS),
                           "--summary-json", summary], True, "none_1"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("sluice")
    ap.add_argument("data")
    ap.add_argument("--python", default=sys.executable, help="the trainers' interpreter")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--only", default="none,numpy,numpy_pyarrow,torch,none_1,dataset_torch")
    ap.add_argument("--before", metavar="PEERS",
                    help="also the trainers of another bench/peers directory (an older "
                    "checkout's, its sluice_trainer beside it), as NAME@before")
    a = ap.parse_args()
    summary = os.path.join(tempfile.mkdtemp(), "summary.json")
    table = readers(a.sluice, a.data, a.python, summary, os.path.join(HERE, "peers"))
    chosen = [name for name in a.only.split(",") if name]
    if a.before:
        old = readers(a.sluice, a.data, a.python, summary, os.path.abspath(a.before))
        for name in list(chosen):
            if table[name][2] is not None and name != "numpy":
                table[name + "@before"] = old[name]
                chosen.append(name + "@before")
    unknown = [name for name in chosen if name not in table]
    if unknown:
        sys.exit(f"handoff.py: unknown reader {', '.join(unknown)}; known: {', '.join(table)}")
    env = dict(os.environ, SLUICE_BINARY=a.sluice)
    rates = {name: [] for name in chosen}
    for rep in range(a.reps):
        for name in chosen:
            cmd, timed, _ = table[name]
            r = run_once(cmd, env, a.cpus, summary, timed)
            if "error" in r:
                sys.exit(f"handoff.py: {name} failed: {r['error']}")
            rates[name].append(r["rows"] / r["seconds"])
            print(f"rep {rep + 1} {name}: {r['rows']} rows, {rates[name][-1] / 1e6:.2f} M rows/s",
                  file=sys.stderr)
    print(f"| reader | M rows/s (median of {a.reps}) | ratio to --model none (median, range) |")
    print("|---|---|---|")
    for name in chosen:
        base = table[name][2]
        line = f"| {name} | {statistics.median(rates[name]) / 1e6:.2f} |"
        if base in rates:
            ratios = [x / y for x, y in zip(rates[name], rates[base])]
            line += (f" {statistics.median(ratios):.2f}× of {base} "
                     f"({min(ratios):.2f}–{max(ratios):.2f}) |")
        else:
            line += " |"
        print(line)


if __name__ == "__main__":
    main()
