"""Peer: pyarrow.dataset (Arrow C++'s scanner), the reference reader.

    python pyarrow_dataset.py PATH_OR_S3_URL [--batch-size 8192] [--threads 2]

Scans every Parquet file to record batches of at most --batch-size rows, all columns,
with Arrow's CPU pool set to --threads. s3:// URLs use pyarrow's S3 filesystem with
AWS_ENDPOINT_URL / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION from the
environment. Prints one JSON line: rows, batches, seconds (open to last batch).
"""
import argparse
import json
import os
import time
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs


def filesystem(url):
    if not url.startswith(("s3://", "s3a://")):
        return None, url
    u = urlparse(url)
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")
    kw = dict(
        access_key=os.environ.get("AWS_ACCESS_KEY_ID"),
        secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
        region=os.environ.get("AWS_REGION", "us-east-1"),
    )
    if endpoint:
        e = urlparse(endpoint)
        kw.update(endpoint_override=e.netloc, scheme=e.scheme)
    return pafs.S3FileSystem(**kw), u.netloc + u.path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    pa.set_cpu_count(a.threads)
    t0 = time.perf_counter()
    fs, path = filesystem(a.path)
    dataset = ds.dataset(path, format="parquet", filesystem=fs, exclude_invalid_files=False,
                         ignore_prefixes=["_", "."])
    rows = batches = cells = 0
    for batch in dataset.to_batches(batch_size=a.batch_size, use_threads=True):
        # Touch every column of every batch.
        cells += sum(len(c) - c.null_count + c.null_count for c in batch.columns)
        rows += batch.num_rows
        batches += 1
    seconds = time.perf_counter() - t0
    assert cells == rows * len(dataset.schema)
    print(json.dumps({"rows": rows, "batches": batches, "seconds": seconds,
                      "pyarrow": pa.__version__, "threads": a.threads}))


if __name__ == "__main__":
    main()
