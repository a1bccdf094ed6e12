#!/usr/bin/env python3
"""The follow benchmark: how long a micro-batch that Spark commits takes to reach a
trainer under `sluice train --follow`.

A Structured Streaming query (rate source, `--rows-per-second`, a micro-batch every
`--trigger`) writes into a Parquet file sink (`--format parquet`) or a Delta table
(`--format delta`: `--writer-python` names the Python that has delta-spark) in a
local directory (the tests' tests/fixtures/stream_writer.py), while `sluice train SINK --follow` feeds a Python exec trainer that notes
when each batch reaches it. After `--batches` micro-batches with rows the query
stops, sluice ends at `--idle-exit`, and for every committed micro-batch the
latency is measured from Spark's commit (the time of the log file that commits it:
`_spark_metadata/N` or `_delta_log/N.json`) to the first of its rows inside the
trainer. Prints p50, p90, p99 and max, and writes them (with every latency) to
`--out` as JSON.

    follow_latency.py --sluice target/release/sluice --format parquet --batches 110 \\
        [--poll 1s] [--inotify on|off] --out bench/results/follow-parquet.json
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TRAINER = r'''
import os, sys, time
import pyarrow as pa, pyarrow.ipc
out = open(sys.argv[1], "a")
ack = os.fdopen(int(os.environ["SLUICE_ACK_FD"]), "w")
reader = pa.ipc.open_stream(sys.stdin.buffer)
for batch in reader:
    now = time.time()
    ids = batch.column(batch.schema.get_field_index("id")).to_pylist()
    out.write("%.6f %s\n" % (now, " ".join(map(str, ids))))
    out.flush()
    ack.write("ack\n")
    ack.flush()
'''


def commits_parquet(sink):
    """(commit time, ids) per batch of a file sink's log."""
    import pyarrow.parquet as pq

    log = os.path.join(sink, "_spark_metadata")
    entries = []
    for path in glob.glob(os.path.join(log, "*")):
        name = os.path.basename(path)
        stem = name[:-len(".compact")] if name.endswith(".compact") else name
        if stem.isdigit():
            entries.append((int(stem), path))
    entries.sort()
    seen = set()
    out = []
    for batch, path in entries:
        files = []
        with open(path) as f:
            lines = f.read().splitlines()[1:]
        for line in lines:
            status = json.loads(line)
            p = status["path"]
            if status.get("action", "add") == "add" and p not in seen:
                seen.add(p)
                files.append(p.replace("file://", "").replace("file:", ""))
        ids = []
        for p in files:
            ids.extend(pq.read_table(p, columns=["id"]).column("id").to_pylist())
        if ids:
            out.append((batch, os.stat(path).st_mtime, ids))
    return out


def commits_delta(sink):
    import pyarrow.parquet as pq

    out = []
    for path in sorted(glob.glob(os.path.join(sink, "_delta_log", "*.json"))):
        version = int(os.path.basename(path)[:-5])
        ids = []
        with open(path) as f:
            for line in f:
                action = json.loads(line)
                if "add" in action:
                    p = os.path.join(sink, action["add"]["path"])
                    ids.extend(pq.read_table(p, columns=["id"]).column("id").to_pylist())
        if ids:
            out.append((version, os.stat(path).st_mtime, ids))
    return out


def percentile(values, q):
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", required=True)
    p.add_argument("--format", default="parquet", choices=["parquet", "delta"])
    p.add_argument("--batches", type=int, default=110)
    p.add_argument("--rows-per-second", type=int, default=200)
    p.add_argument("--trigger", default="1 second")
    p.add_argument("--poll", default="1s")
    p.add_argument("--inotify", default="on", choices=["on", "off"])
    p.add_argument("--idle-exit", default="10s")
    p.add_argument("--out", required=True)
    p.add_argument("--writer-python", default=sys.executable,
                   help="the Python that runs the streaming query (with delta-spark for --format delta)")
    a = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="sluice-follow-bench-") as tmp:
        sink = os.path.join(tmp, "sink")
        checkpoint = os.path.join(tmp, "checkpoint")
        arrivals = os.path.join(tmp, "arrivals.txt")
        trainer = os.path.join(tmp, "trainer.py")
        with open(trainer, "w") as f:
            f.write(TRAINER)
        env = dict(os.environ)
        env.pop("RUST_LOG", None)
        if a.inotify == "off":
            env["SLUICE_INOTIFY"] = "off"
        follower = subprocess.Popen(
            [a.sluice, "train", sink, "--follow", "--poll", a.poll, "--idle-exit", a.idle_exit,
             "--state", os.path.join(tmp, "state"), "--batch-size", "100000", "-q",
             "--exec", f"{sys.executable} {trainer} {arrivals}"],
            env=env, stderr=subprocess.PIPE, text=True)
        writer = subprocess.run(
            [a.writer_python, os.path.join(ROOT, "tests", "fixtures", "stream_writer.py"),
             sink, checkpoint, "--format", a.format, "--batches", str(a.batches),
             "--rows-per-second", str(a.rows_per_second), "--trigger", a.trigger,
             "--ids-out", os.path.join(tmp, "spark-ids.json")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if writer.returncode != 0:
            print(f"the streaming query failed: {writer.stderr[-2000:]}", file=sys.stderr)
            return 1
        _, err = follower.communicate(timeout=600)
        if follower.returncode != 0:
            print(f"sluice failed ({follower.returncode}): {err}", file=sys.stderr)
            return 1
        first = {}
        with open(arrivals) as f:
            for line in f:
                t, *ids = line.split()
                for i in ids:
                    first.setdefault(int(i), float(t))
        commits = commits_parquet(sink) if a.format == "parquet" else commits_delta(sink)
        latencies = []
        for _, committed, ids in commits:
            arrived = [first[i] for i in ids if i in first]
            if len(arrived) != len(ids):
                print(f"rows of a batch never reached the trainer", file=sys.stderr)
                return 1
            latencies.append(min(arrived) - committed)
        # The first commit(s) may predate the follower's start-up: leave out
        # batches committed before the follower's first look.
        latencies = latencies[2:]
        result = {
            "format": a.format, "poll": a.poll, "inotify": a.inotify,
            "batches": len(latencies),
            "p50_s": percentile(latencies, 0.5), "p90_s": percentile(latencies, 0.9),
            "p99_s": percentile(latencies, 0.99), "max_s": max(latencies),
            "mean_s": statistics.mean(latencies), "latencies_s": latencies,
        }
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"{a.format} poll={a.poll} inotify={a.inotify}: {len(latencies)} batches, "
              f"p50 {result['p50_s']*1000:.0f} ms, p90 {result['p90_s']*1000:.0f} ms, "
              f"p99 {result['p99_s']*1000:.0f} ms, max {result['max_s']*1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
