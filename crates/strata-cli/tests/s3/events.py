"""Change-capture driver (tests/events.rs): a fixed sequence of mixed S3
operations, resumable across server crashes.

Op i belongs to group i // 10, done in bucket ev{group % 4} by thread
group % 4, so each bucket's ops run in order on one thread. Within a group:
    i % 10 in 0-5, 9: PutObject k{i} (body "op{i}")
    i % 10 == 6:      CopyObject k{i-3} -> c{i}
    i % 10 == 7:      DeleteObject k{i-4}
    i % 10 == 8:      PutObjectTagging k{i-8}
Every op is logged as "A i" before it is sent and "K i" once acknowledged
("E i" if the server refused it). A run resumes after the last op each
thread attempted (an op cut off by a crash is not retried) and exits 3 when
the server is gone, 0 when every op was attempted.

`list OUT` writes every key the buckets hold now, one "bucket/key" a line.

Env: STRATA_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; argv: run LOG TOTAL | list OUT
"""

import os
import sys
import threading

import boto3
import botocore.exceptions
from botocore.client import Config

THREADS = 4


def client():
    cfg = Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10, max_pool_connections=THREADS)
    return boto3.client("s3", endpoint_url=os.environ["STRATA_S3"], region_name="us-east-1", config=cfg)


def bucket(i):
    return f"ev{(i // 10) % THREADS}"


def run(s3, i):
    b, kind = bucket(i), i % 10
    if kind == 6:
        s3.copy_object(Bucket=b, Key=f"c{i}", CopySource={"Bucket": b, "Key": f"k{i - 3}"})
    elif kind == 7:
        s3.delete_object(Bucket=b, Key=f"k{i - 4}")
    elif kind == 8:
        s3.put_object_tagging(Bucket=b, Key=f"k{i - 8}", Tagging={"TagSet": [{"Key": "op", "Value": str(i)}]})
    else:
        s3.put_object(Bucket=b, Key=f"k{i}", Body=f"op{i}".encode())


def main(path, total):
    attempted = set()
    if os.path.exists(path):
        for line in open(path):
            tag, _, n = line.strip().partition(" ")
            if tag == "A":
                attempted.add(int(n))
    s3 = client()
    try:
        for t in range(THREADS):
            try:
                s3.create_bucket(Bucket=f"ev{t}")
            except botocore.exceptions.ClientError as e:
                if e.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
                    raise
    except (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionClosedError, botocore.exceptions.ReadTimeoutError):
        sys.exit(3)
    log = open(path, "a")
    lock = threading.Lock()
    gone = []

    def note(line):
        with lock:
            log.write(line + "\n")
            log.flush()

    def worker(t):
        ops = [i for i in range(total) if (i // 10) % THREADS == t]
        last = max((i for i in ops if i in attempted), default=-1)
        for i in ops:
            if i <= last:
                continue
            note(f"A {i}")
            try:
                run(s3, i)
            except botocore.exceptions.ClientError as e:
                if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500) >= 500:
                    gone.append(t)
                    return
                note(f"E {i}")
                continue
            except Exception:
                # The server died (connection refused, reset or cut short).
                gone.append(t)
                return
            note(f"K {i}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    sys.exit(3 if gone else 0)


def list_keys(out):
    s3 = client()
    with open(out, "w") as f:
        for t in range(THREADS):
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=f"ev{t}"):
                for o in page.get("Contents", []):
                    f.write(f"ev{t}/{o['Key']}\n")


if __name__ == "__main__":
    if sys.argv[1] == "list":
        list_keys(sys.argv[2])
    else:
        main(sys.argv[2], int(sys.argv[3]))
