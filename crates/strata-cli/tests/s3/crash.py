"""Crash test for the S3 path: `write` puts objects from 8 threads until the
server dies, recording each acknowledged key; `verify` reads every recorded
key back from the restarted server and checks every byte.

Env: STRATA_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; argv: write|verify FILE
"""

import concurrent.futures
import hashlib
import os
import sys
import threading

import boto3
from botocore.client import Config


def client():
    cfg = Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10, max_pool_connections=8)
    return boto3.client("s3", endpoint_url=os.environ["STRATA_S3"], region_name="us-east-1", config=cfg)


def content(key):
    # Sizes from 1 KiB to 6 MiB: small puts, streamed ones and chunked ones.
    seed = hashlib.sha256(key.encode()).digest()
    size = [1024, 70_000, 300_000, 6 << 20][seed[0] % 4]
    out = bytearray()
    block = seed
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 64
    return bytes(out[:size])


def write(path):
    s3 = client()
    s3.create_bucket(Bucket="crash")
    lock = threading.Lock()
    acked = open(path, "a")

    def worker(t):
        i = 0
        while True:
            key = f"t{t}/obj{i}"
            try:
                s3.put_object(Bucket="crash", Key=key, Body=content(key))
            except Exception:
                return i
            with lock:
                acked.write(key + "\n")
                acked.flush()
            i += 1

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        done = sum(pool.map(worker, range(8)))
    print(f"{done} puts acknowledged before the server died")


def verify(path):
    s3 = client()
    keys = [k for k in open(path).read().split("\n") if k]
    bad = []
    for key in keys:
        body = s3.get_object(Bucket="crash", Key=key)["Body"].read()
        if body != content(key):
            bad.append(key)
    print(f"{len(keys) - len(bad)} passed, {len(bad)} failed")
    if bad or not keys:
        sys.exit(1)


if __name__ == "__main__":
    {"write": write, "verify": verify}[sys.argv[1]](sys.argv[2])
