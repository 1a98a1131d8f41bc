"""Named blobs on a cluster: every node serves S3 (metadata members and a
learner alike).

A PUT acknowledged by one node is visible to a GET, HEAD and LIST on every
other node right after it (the replicated name index waits for a Raft read
index before reading). Env: STRATA_S3_ENDPOINTS (comma-separated),
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; argv: check | after-kill
"""

import os
import random
import sys

import boto3
from botocore.client import Config
from botocore.exceptions import ClientError

endpoints = os.environ["STRATA_S3_ENDPOINTS"].split(",")
clients = [boto3.client("s3", endpoint_url=e, region_name="us-east-1", config=Config(retries={"max_attempts": 1})) for e in endpoints]
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAILED:", what)


def body(key, round_):
    return f"{key} round {round_} ".encode() * 50


mode = sys.argv[1]
rng = random.Random(7)
if mode == "check":
    clients[0].create_bucket(Bucket="shared")
    for other in clients[1:]:
        check("shared" in [b["Name"] for b in other.list_buckets()["Buckets"]], "bucket visible on every node")
    for i in range(60):
        w, r = rng.sample(range(len(clients)), 2)
        key = f"k{i % 20}"
        data = body(key, i)
        clients[w].put_object(Bucket="shared", Key=key, Body=data)
        got = clients[r].get_object(Bucket="shared", Key=key)["Body"].read()
        check(got == data, f"read-after-write of {key} round {i}: wrote on node {w}, read on node {r}")
        listed = [o["Key"] for o in clients[rng.randrange(len(clients))].list_objects_v2(Bucket="shared")["Contents"]]
        check(key in listed, f"{key} listed right after its put")
    clients[1].delete_object(Bucket="shared", Key="k0")
    for c in clients:
        try:
            c.head_object(Bucket="shared", Key="k0")
            check(False, "deleted key still visible")
        except ClientError as e:
            check(e.response["ResponseMetadata"]["HTTPStatusCode"] == 404, "deleted key is 404 everywhere")
    # A multipart upload started on one node, parts on others, completed on a third.
    c0, c1, c2 = clients[0], clients[1], clients[2]
    up = c0.create_multipart_upload(Bucket="shared", Key="mp")["UploadId"]
    p1 = os.urandom(5 << 20)
    e1 = c1.upload_part(Bucket="shared", Key="mp", UploadId=up, PartNumber=1, Body=p1)["ETag"]
    e2 = c2.upload_part(Bucket="shared", Key="mp", UploadId=up, PartNumber=2, Body=b"end")["ETag"]
    c2.complete_multipart_upload(Bucket="shared", Key="mp", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    check(c0.get_object(Bucket="shared", Key="mp")["Body"].read() == p1 + b"end", "multipart across nodes")
    c0.put_object(Bucket="shared", Key="survivor", Body=b"written before a node died")
else:
    # One member is gone: the other two still commit, and every node left serves.
    for i, c in enumerate(clients):
        check(c.get_object(Bucket="shared", Key="survivor")["Body"].read() == b"written before a node died", f"read on node {i} with one member down")
        c.put_object(Bucket="shared", Key=f"after{i}", Body=b"after the kill")
        for other in clients:
            check(other.get_object(Bucket="shared", Key=f"after{i}")["Body"].read() == b"after the kill", f"write on node {i} with one member down")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
