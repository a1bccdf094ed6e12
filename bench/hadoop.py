#!/usr/bin/env python3
"""Hadoop's formats, side by side with their own readers, on this machine.

    bench/hadoop.py [--rows N] [--sluice PATH] [--tf-python PY] [--json OUT]

Writes, with real writers, into a temporary directory:
  - N (IntWritable, Text) records as block-compressed SequenceFiles
    (`rdd.saveAsSequenceFile`, DefaultCodec), 4 part files;
  - N `tf.train.Example` records (an int64 `id`, a float list, a bytes
    `text`) as TFRecord files, with TensorFlow's `tf.io.TFRecordWriter`
    (when --tf-python names a Python with TensorFlow);
  - 400 rows of 0.5 MiB binary values, as SequenceFiles (BytesWritable) and
    as Parquet (`df.write.parquet`).
Then times, best of --repeat:
  - `sluice train DIR --model none` (the release binary) against Spark's
    `sc.sequenceFile(DIR).count()` in a warm session (the JVM's start left
    out), and against `tf.data.TFRecordDataset` parsing every Example;
  - the peak RSS of `sluice train` over the 0.5 MiB rows with
    `--batch-bytes 8MiB` and without, against the bound
    read-ahead + devices x (2 x batch bytes) + 100 MB.
Prints one line per figure and writes them as JSON with --json.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))

LARGE_ROWS = 400
LARGE_BYTES = 512 * 1024


def run_sluice(sluice, args):
    """Runs sluice; its wall time and peak RSS (bytes)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sluice] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode()
    if status != 0:
        raise SystemExit(f"sluice {' '.join(args)} failed: {err}")
    return wall, usage.ru_maxrss * 1024


def best(times):
    return min(times)


def write_spark(spark, out, rows):
    sc = spark.sparkContext
    seq = os.path.join(out, "seq")
    sc.parallelize(range(rows), 4).map(lambda i: (i, f"row {i} " + "x" * (i % 64))) \
        .saveAsSequenceFile(seq, compressionCodecClass="org.apache.hadoop.io.compress.DefaultCodec")
    large_seq = os.path.join(out, "large_seq")
    payload = lambda i: bytearray([i % 251]) * LARGE_BYTES
    sc.parallelize(range(LARGE_ROWS), 4).map(lambda i: (i, payload(i))).saveAsSequenceFile(large_seq)
    large_pq = os.path.join(out, "large_parquet")
    spark.createDataFrame(
        sc.parallelize(range(LARGE_ROWS), 4).map(lambda i: (i, bytes(payload(i)))), "id long, blob binary"
    ).write.parquet(large_pq)
    return seq, large_seq, large_pq


def spark_count(spark, path, repeat):
    sc = spark.sparkContext
    sc.sequenceFile(path).count()  # warm the session
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        n = sc.sequenceFile(path).count()
        times.append(time.perf_counter() - start)
    return best(times), n


TF_WRITE = r"""
import sys, tensorflow as tf
out, rows, files = sys.argv[1], int(sys.argv[2]), 4
for f in range(files):
    with tf.io.TFRecordWriter(f"{out}/part-{f:05d}.tfrecord") as w:
        for i in range(f, rows, files):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i * 0.5, 1.0, 2.0, 3.0])),
                "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"row {i}".encode()])),
            }))
            w.write(ex.SerializeToString())
"""

TF_READ = r"""
import glob, sys, time, tensorflow as tf
files = sorted(glob.glob(sys.argv[1] + "/*.tfrecord"))
spec = {"id": tf.io.FixedLenFeature([], tf.int64), "x": tf.io.FixedLenFeature([4], tf.float32),
        "text": tf.io.FixedLenFeature([], tf.string)}
def count():
    ds = tf.data.TFRecordDataset(files).batch(1024).map(lambda b: tf.io.parse_example(b, spec))
    return sum(int(tf.shape(b["id"])[0]) for b in ds)
count()
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter(); n = count(); times.append(time.perf_counter() - start)
print(min(times), n)
"""


def tfrecord(tf_python, sluice, out, rows, repeat):
    path = os.path.join(out, "tfrecord")
    os.makedirs(path)
    subprocess.run([tf_python, "-c", TF_WRITE, path, str(rows)], check=True,
                   stderr=subprocess.DEVNULL)
    line = subprocess.run([tf_python, "-c", TF_READ, path, str(repeat)], check=True,
                          capture_output=True, text=True).stdout.split()
    tf_time, n = float(line[0]), int(line[1])
    ours = best([run_sluice(sluice, ["train", path, "--model", "none", "--quiet"])[0]
                 for _ in range(repeat)])
    return {"rows": n, "tf_data_s": tf_time, "sluice_s": ours, "ratio": tf_time / ours}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--sluice", default=os.path.join(HERE, "..", "target", "release", "sluice"))
    p.add_argument("--tf-python")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args()
    from spark_session import spark_session
    work = tempfile.mkdtemp(prefix="sluice-bench-hadoop-")
    results = {}
    try:
        os.makedirs(os.path.join(work, "spark"))
        spark = spark_session(os.path.join(work, "spark"), "sluice-bench-hadoop")
        seq, large_seq, large_pq = write_spark(spark, work, args.rows)
        spark_s, n = spark_count(spark, seq, args.repeat)
        ours = best([run_sluice(args.sluice, ["train", seq, "--model", "none", "--quiet"])[0]
                     for _ in range(args.repeat)])
        results["sequencefile"] = {"rows": n, "spark_count_s": spark_s, "sluice_s": ours,
                                   "ratio": spark_s / ours}
        print(f"sequencefile ({n} rows, block zlib): Spark count {spark_s:.2f} s, "
              f"sluice train --model none {ours:.2f} s: {spark_s / ours:.2f}x")
        spark.stop()
        if args.tf_python:
            t = tfrecord(args.tf_python, args.sluice, work, args.rows, args.repeat)
            results["tfrecord"] = t
            print(f"tfrecord ({t['rows']} Examples): tf.data {t['tf_data_s']:.2f} s, "
                  f"sluice {t['sluice_s']:.2f} s: {t['ratio']:.2f}x")
        read_ahead = 64 * 1024 * 1024
        for name, path in (("sequencefile", large_seq), ("parquet", large_pq)):
            for batch_bytes in (None, 8 * 1024 * 1024):
                extra = ["--read-ahead", "64MiB", "--batch-size", "1024"]
                if batch_bytes:
                    extra += ["--batch-bytes", str(batch_bytes)]
                _, rss = run_sluice(args.sluice, ["train", path, "--model", "none", "--quiet"] + extra)
                bound = read_ahead + 2 * (batch_bytes or LARGE_ROWS * LARGE_BYTES) + 100_000_000
                key = f"large_{name}_{'batch_bytes' if batch_bytes else 'rows'}"
                results[key] = {"peak_rss": rss, "bound": bound}
                print(f"{LARGE_ROWS} rows of 0.5 MiB, {name}, "
                      f"{'--batch-bytes 8MiB' if batch_bytes else '--batch-size 1024 only'}: "
                      f"peak RSS {rss / 2**20:.0f} MiB (bound {bound / 2**20:.0f} MiB)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
