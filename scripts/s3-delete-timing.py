#!/usr/bin/env python3
"""How long a DeleteObjects of 1,000 keys takes against an S3 endpoint:
writes 1,000 one-byte objects (32 at a time), then deletes them in one
request, three times. Needs boto3 (./scripts/test.sh installs it in
target/pyenv).

    target/pyenv/bin/python scripts/s3-delete-timing.py ENDPOINT ACCESS_KEY SECRET_KEY

`strata server` prints an admin key when it starts.
"""
import concurrent.futures
import sys
import time

import boto3
from botocore.client import Config


def main():
    url, ak, sk = sys.argv[1:4]
    s3 = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id=ak, aws_secret_access_key=sk, region_name="us-east-1", config=Config(max_pool_connections=32)
    )
    bucket = "delete-timing"
    s3.create_bucket(Bucket=bucket)
    for rnd in range(3):
        keys = [f"r{rnd}/{i:05d}" for i in range(1000)]
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=b"x"), keys))
        t = time.perf_counter()
        r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
        print(f"DeleteObjects of 1,000 keys: {time.perf_counter() - t:.3f} s ({len(r.get('Errors', []))} errors)")
    s3.delete_bucket(Bucket=bucket)


if __name__ == "__main__":
    main()
