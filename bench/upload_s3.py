"""Copy a local dataset directory into an S3 bucket (the moto emulator for the bench).

    python upload_s3.py DIR s3://bucket/prefix

Uses boto3 with AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION
from the environment; creates the bucket when missing; skips objects already there
with the same size.
"""
import os
import sys
from urllib.parse import urlparse

import boto3


def main():
    src, dst = sys.argv[1], urlparse(sys.argv[2])
    bucket, prefix = dst.netloc, dst.path.strip("/")
    s3 = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"),
                      region_name=os.environ.get("AWS_REGION", "us-east-1"))
    if bucket not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
        s3.create_bucket(Bucket=bucket)
    have = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        have.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    n = 0
    for d, _, files in os.walk(src):
        for f in sorted(files):
            path = os.path.join(d, f)
            key = "/".join(x for x in [prefix, os.path.relpath(path, src)] if x)
            if have.get(key) == os.path.getsize(path):
                continue
            s3.upload_file(path, bucket, key)
            n += 1
    print(f"uploaded {n} objects to s3://{bucket}/{prefix}", file=sys.stderr)


if __name__ == "__main__":
    main()
