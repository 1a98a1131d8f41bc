"""Strata's S3 API driven by real clients: boto3 and the aws CLI.

Run by crates/strata-cli/tests/s3.rs against a real `strata server`, with:
  STRATA_S3        the S3 endpoint (http://127.0.0.1:PORT)
  STRATA_URL       the node's own HTTP endpoint (admin API)
  STRATA_BIN       the strata binary (for `strata key` / `strata bucket`)
  AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY   an admin key
  STRATA_S3_DOMAIN a base domain the server takes virtual-host requests for
  STRATA_DATA      the server's data directory (to look for plaintext on disk)
"""

import base64
import concurrent.futures
import datetime
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
import zlib

import boto3
import botocore
from botocore.client import Config
from botocore.exceptions import ClientError

S3 = os.environ["STRATA_S3"]
ADMIN = os.environ["STRATA_URL"]
BIN = os.environ["STRATA_BIN"]
AK = os.environ["AWS_ACCESS_KEY_ID"]
SK = os.environ["AWS_SECRET_ACCESS_KEY"]
DOMAIN = os.environ["STRATA_S3_DOMAIN"]
PORT = S3.rsplit(":", 1)[1]

# Virtual-host-style requests go to BUCKET.DOMAIN: resolve that to loopback
# in this process (no DNS needed).
_getaddrinfo = socket.getaddrinfo


def _resolve(host, *args, **kwargs):
    if isinstance(host, str) and (host == DOMAIN or host.endswith("." + DOMAIN)):
        host = "127.0.0.1"
    return _getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _resolve


def client(ak=AK, sk=SK, **config):
    cfg = Config(retries={"max_attempts": 1}, **config)
    return boto3.client("s3", endpoint_url=S3, aws_access_key_id=ak, aws_secret_access_key=sk, region_name="us-east-1", config=cfg)


def anonymous():
    return boto3.client("s3", endpoint_url=S3, region_name="us-east-1", config=Config(signature_version=botocore.UNSIGNED, retries={"max_attempts": 1}))


def error_of(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError(f"{fn.__name__} succeeded; an error was expected")


def strata(*args):
    out = subprocess.run([BIN, *args, "--server", ADMIN], check=True, capture_output=True, text=True)
    return out.stdout


def admin_get(path):
    """GETs `path` of the node's HTTP port, signed (SigV4) with the admin key."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method="GET", url=f"{ADMIN}{path}")
    SigV4Auth(Credentials(AK, SK), "s3", "us-east-1").add_auth(req)
    return urllib.request.urlopen(urllib.request.Request(req.url, headers=dict(req.headers.items())))


def live_blobs():
    parts = json.load(admin_get("/admin/partitions"))
    n = 0
    for p in parts:
        blobs = json.load(admin_get(f"/admin/partitions/{p['partition']}/blobs"))
        n += sum(1 for b in blobs if b["state"] == "live")
    return n


def aws(*args, check=True, ak=AK, sk=SK):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ak, AWS_SECRET_ACCESS_KEY=sk, AWS_DEFAULT_REGION="us-east-1", AWS_MAX_ATTEMPTS="1")
    exe = os.path.join(os.path.dirname(sys.executable), "aws")
    r = subprocess.run([exe, "--endpoint-url", S3, *args], env=env, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"aws {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def md5(b):
    return hashlib.md5(b).hexdigest()


def data_holds(needle):
    """Whether any file of the server's data directory holds `needle`."""
    for root, _, files in os.walk(os.environ["STRATA_DATA"]):
        for name in files:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    if needle in f.read():
                        return True
            except OSError:
                pass
    return False


class Buckets(unittest.TestCase):
    def test_lifecycle_of_a_bucket(self):
        s3 = client()
        s3.create_bucket(Bucket="b-life")
        self.assertIn("b-life", [b["Name"] for b in s3.list_buckets()["Buckets"]])
        s3.head_bucket(Bucket="b-life")
        self.assertEqual(error_of(s3.create_bucket, Bucket="b-life"), ("BucketAlreadyOwnedByYou", 409))
        self.assertEqual(error_of(s3.head_bucket, Bucket="b-missing")[1], 404)
        s3.put_object(Bucket="b-life", Key="k", Body=b"x")
        self.assertEqual(error_of(s3.delete_bucket, Bucket="b-life"), ("BucketNotEmpty", 409))
        # Never versioned (rclone asks before it purges), until suspended, as on S3.
        self.assertNotIn("Status", s3.get_bucket_versioning(Bucket="b-life"))
        s3.put_bucket_versioning(Bucket="b-life", VersioningConfiguration={"Status": "Suspended"})
        self.assertEqual(s3.get_bucket_versioning(Bucket="b-life")["Status"], "Suspended")
        self.assertEqual(error_of(s3.get_bucket_versioning, Bucket="b-missing"), ("NoSuchBucket", 404))
        self.assertEqual(error_of(s3.put_bucket_versioning, Bucket="b-missing", VersioningConfiguration={"Status": "Enabled"}), ("NoSuchBucket", 404))
        # Suspended, a delete leaves a null delete marker, which keeps the bucket from being empty until it goes too.
        self.assertTrue(s3.delete_object(Bucket="b-life", Key="k")["DeleteMarker"])
        self.assertEqual(error_of(s3.delete_bucket, Bucket="b-life"), ("BucketNotEmpty", 409))
        s3.delete_object(Bucket="b-life", Key="k", VersionId="null")
        s3.delete_bucket(Bucket="b-life")
        self.assertNotIn("b-life", [b["Name"] for b in s3.list_buckets()["Buckets"]])
        self.assertEqual(error_of(s3.delete_bucket, Bucket="b-life"), ("NoSuchBucket", 404))

    def test_deleting_a_bucket_aborts_its_uploads(self):
        s3 = client()
        s3.create_bucket(Bucket="b-uploads")
        base = live_blobs()
        up = s3.create_multipart_upload(Bucket="b-uploads", Key="big")["UploadId"]
        s3.upload_part(Bucket="b-uploads", Key="big", UploadId=up, PartNumber=1, Body=b"p" * 1000)
        self.assertEqual(live_blobs(), base + 1)
        s3.delete_bucket(Bucket="b-uploads")
        self.assertNotIn("b-uploads", [b["Name"] for b in s3.list_buckets()["Buckets"]])
        self.assertEqual(live_blobs(), base, "the aborted upload's part was not freed")
        self.assertEqual(error_of(s3.list_parts, Bucket="b-uploads", Key="big", UploadId=up)[1], 404)

    def test_invalid_bucket_names_are_refused(self):
        s3 = client()
        # botocore checks names client-side too; send raw requests instead.
        for bad in ["UPPER", "a", "bad_underscore", "-dash", "x" * 64, "foo-.bar", "foo.-bar", "sthree-x", "name-s3alias", "xn--abc"]:
            r = signed("PUT", f"/{bad}")
            self.assertEqual(r.status, 400, bad)
            self.assertIn(b"<Code>InvalidBucketName</Code>", r.body, bad)
        self.assertNotIn("UPPER", [b["Name"] for b in s3.list_buckets()["Buckets"]])


class Objects(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s3 = client()
        cls.s3.create_bucket(Bucket="objects")

    def test_put_get_head_with_metadata_and_etag(self):
        body = os.urandom(100_000)
        r = self.s3.put_object(Bucket="objects", Key="dir/a.bin", Body=body, ContentType="application/x-test", Metadata={"Color": "blue", "n": "1"})
        self.assertEqual(r["ETag"], f'"{md5(body)}"')
        g = self.s3.get_object(Bucket="objects", Key="dir/a.bin")
        self.assertEqual(g["Body"].read(), body)
        self.assertEqual(g["ContentType"], "application/x-test")
        self.assertEqual(g["Metadata"], {"color": "blue", "n": "1"})
        self.assertEqual(g["ETag"], f'"{md5(body)}"')
        h = self.s3.head_object(Bucket="objects", Key="dir/a.bin")
        self.assertEqual(h["ContentLength"], len(body))
        self.assertEqual(h["Metadata"], {"color": "blue", "n": "1"})
        # Past 256 KiB the MD5 is computed beside the write, in batches of frames.
        big = os.urandom(3_000_001)
        self.assertEqual(self.s3.put_object(Bucket="objects", Key="dir/big.bin", Body=big)["ETag"], f'"{md5(big)}"')
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="dir/big.bin")["Body"].read(), big)
        empty = self.s3.put_object(Bucket="objects", Key="empty", Body=b"")
        self.assertEqual(empty["ETag"], f'"{md5(b"")}"')
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="empty")["Body"].read(), b"")

    def test_ranges(self):
        body = bytes(range(256)) * 40
        self.s3.put_object(Bucket="objects", Key="r", Body=body)
        for rng, want in [("bytes=2-4", body[2:5]), ("bytes=10000-", body[10000:]), ("bytes=-7", body[-7:]), ("bytes=0-999999", body)]:
            g = self.s3.get_object(Bucket="objects", Key="r", Range=rng)
            self.assertEqual(g["Body"].read(), want, rng)
            self.assertEqual(g["ResponseMetadata"]["HTTPStatusCode"], 206, rng)
        self.assertEqual(error_of(self.s3.get_object, Bucket="objects", Key="r", Range="bytes=20000-"), ("InvalidRange", 416))

    def test_conditional_requests(self):
        self.s3.put_object(Bucket="objects", Key="c", Body=b"conditional")
        tag = f'"{md5(b"conditional")}"'
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="c", IfMatch=tag)["Body"].read(), b"conditional")
        self.assertEqual(error_of(self.s3.get_object, Bucket="objects", Key="c", IfMatch='"0000"'), ("PreconditionFailed", 412))
        self.assertEqual(error_of(self.s3.get_object, Bucket="objects", Key="c", IfNoneMatch=tag)[1], 304)
        # A 304 carries the validators a cache refreshes its copy with.
        head = self.s3.head_object(Bucket="objects", Key="c")
        for ask in [dict(IfNoneMatch=tag), dict(IfModifiedSince=head["LastModified"])]:
            try:
                self.s3.get_object(Bucket="objects", Key="c", **ask)
                self.fail(f"a GET with {ask} answered 200")
            except ClientError as e:
                h = e.response["ResponseMetadata"]["HTTPHeaders"]
                self.assertEqual((e.response["ResponseMetadata"]["HTTPStatusCode"], h.get("etag")), (304, tag), ask)
                self.assertEqual(h.get("last-modified"), head["ResponseMetadata"]["HTTPHeaders"]["last-modified"], ask)
        future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
        past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
        self.assertEqual(error_of(self.s3.get_object, Bucket="objects", Key="c", IfModifiedSince=future)[1], 304)
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="c", IfModifiedSince=past)["Body"].read(), b"conditional")
        self.assertEqual(error_of(self.s3.get_object, Bucket="objects", Key="c", IfUnmodifiedSince=past), ("PreconditionFailed", 412))
        # If-None-Match: * on a put refuses to overwrite.
        self.assertEqual(error_of(self.s3.put_object, Bucket="objects", Key="c", Body=b"new", IfNoneMatch="*"), ("PreconditionFailed", 412))
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="c")["Body"].read(), b"conditional")

    def test_conditional_writes_swap_atomically(self):
        tag = self.s3.put_object(Bucket="objects", Key="cas", Body=b"v1")["ETag"]
        self.assertEqual(error_of(self.s3.put_object, Bucket="objects", Key="cas", Body=b"x", IfMatch='"0000"'), ("PreconditionFailed", 412))
        self.assertEqual(error_of(self.s3.put_object, Bucket="objects", Key="cas-none", Body=b"x", IfMatch=tag), ("NoSuchKey", 404))
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="cas")["Body"].read(), b"v1")
        # Eight writers swap from the same ETag at once: exactly one wins,
        # and the losers' bodies are freed.
        base = live_blobs()

        def swap(i):
            try:
                self.s3.put_object(Bucket="objects", Key="cas", Body=f"writer {i}".encode(), IfMatch=tag)
                return i
            except ClientError as e:
                self.assertEqual(e.response["Error"]["Code"], "PreconditionFailed")
                return None

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            won = [i for i in pool.map(swap, range(8)) if i is not None]
        self.assertEqual(len(won), 1, won)
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="cas")["Body"].read(), f"writer {won[0]}".encode())
        self.assertEqual(live_blobs(), base)
        self.assertEqual(error_of(self.s3.put_object, Bucket="objects", Key="cas", Body=b"x", IfMatch=tag, IfNoneMatch="*")[1], 400)

    def test_bad_input_changes_nothing(self):
        self.s3.put_object(Bucket="objects", Key="keep", Body=b"original")
        wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
        self.assertEqual(error_of(self.s3.put_object, Bucket="objects", Key="keep", Body=b"replacement", ContentMD5=wrong), ("BadDigest", 400))
        right = base64.b64encode(hashlib.md5(b"replacement").digest()).decode()
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="keep")["Body"].read(), b"original")
        self.s3.put_object(Bucket="objects", Key="keep2", Body=b"replacement", ContentMD5=right)
        self.assertEqual(error_of(self.s3.put_object, Bucket="objects", Key="k" * 1025, Body=b"x"), ("KeyTooLongError", 400))
        self.s3.put_object(Bucket="objects", Key="k" * 1024, Body=b"x")
        self.assertEqual(error_of(self.s3.put_object, Bucket="no-such-bucket", Key="k", Body=b"x"), ("NoSuchBucket", 404))
        self.assertEqual(error_of(self.s3.get_object, Bucket="objects", Key="missing"), ("NoSuchKey", 404))

    def test_standard_headers_are_stored_and_returned(self):
        s3, b = self.s3, "objects"
        expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        std = dict(CacheControl="max-age=3600", ContentDisposition='attachment; filename="r.txt"', ContentEncoding="gzip", ContentLanguage="fr-CA", Expires=expires)
        got = lambda r: (r["CacheControl"], r["ContentDisposition"], r["ContentEncoding"], r["ContentLanguage"], r["Expires"])
        want = ("max-age=3600", 'attachment; filename="r.txt"', "gzip", "fr-CA", expires)
        s3.put_object(Bucket=b, Key="std/put", Body=b"x", **std)
        self.assertEqual(got(s3.get_object(Bucket=b, Key="std/put")), want)
        self.assertEqual(got(s3.head_object(Bucket=b, Key="std/put")), want)
        # A copy keeps them; a copy that replaces metadata takes the request's.
        s3.copy_object(Bucket=b, Key="std/copy", CopySource=f"{b}/std/put")
        self.assertEqual(got(s3.head_object(Bucket=b, Key="std/copy")), want)
        s3.copy_object(Bucket=b, Key="std/replaced", CopySource=f"{b}/std/put", MetadataDirective="REPLACE", CacheControl="no-store")
        h = s3.head_object(Bucket=b, Key="std/replaced")
        self.assertEqual((h["CacheControl"], "ContentDisposition" in h, "Expires" in h), ("no-store", False, False))
        # A multipart upload's object gets the headers its upload was created with.
        up = s3.create_multipart_upload(Bucket=b, Key="std/mp", **std)["UploadId"]
        e = s3.upload_part(Bucket=b, Key="std/mp", UploadId=up, PartNumber=1, Body=b"part")["ETag"]
        s3.complete_multipart_upload(Bucket=b, Key="std/mp", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e}]})
        self.assertEqual(got(s3.head_object(Bucket=b, Key="std/mp")), want)
        # response-* parameters override them in one answer only.
        r = s3.get_object(Bucket=b, Key="std/put", ResponseCacheControl="no-cache", ResponseContentType="text/csv", ResponseContentDisposition="inline")
        self.assertEqual((r["CacheControl"], r["ContentType"], r["ContentDisposition"]), ("no-cache", "text/csv", "inline"))
        self.assertEqual(s3.head_object(Bucket=b, Key="std/put")["CacheControl"], "max-age=3600")
        # aws-chunked describes the upload only; the aws CLI's options land.
        s3.put_object(Bucket=b, Key="std/plain", Body=b"y")
        self.assertNotIn("CacheControl", s3.head_object(Bucket=b, Key="std/plain"))
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"site")
            f.flush()
            aws("s3", "cp", f.name, f"s3://{b}/std/cli", "--cache-control", "public, max-age=60", "--content-language", "de")
        h = s3.head_object(Bucket=b, Key="std/cli")
        self.assertEqual((h["CacheControl"], h["ContentLanguage"]), ("public, max-age=60", "de"))

    def test_answers_carry_request_ids(self):
        ok = self.s3.put_object(Bucket="objects", Key="rid", Body=b"x")["ResponseMetadata"]
        self.assertRegex(ok["HTTPHeaders"]["x-amz-request-id"], "^[0-9A-F]{16}$")
        try:
            self.s3.get_object(Bucket="objects", Key="rid-missing")
            self.fail("a GET of a missing key succeeded")
        except ClientError as e:
            rid = e.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
            self.assertNotEqual(rid, ok["HTTPHeaders"]["x-amz-request-id"])
        # The error document names it too, from s3s's own errors (a bad
        # bucket name) as from Strata's.
        for path in ["/objects/rid-missing", "/Bad_Name"]:
            r = signed("GET", path)
            self.assertGreaterEqual(r.status, 400)
            self.assertRegex(r.body.decode(), "<RequestId>[0-9A-F]{16}</RequestId></Error>", path)

    def test_conditional_deletes(self):
        s3, b = self.s3, "objects"
        tag = s3.put_object(Bucket=b, Key="cond-del", Body=b"12345")["ETag"]
        self.assertEqual(error_of(s3.delete_object, Bucket=b, Key="cond-del", IfMatch='"0000"'), ("PreconditionFailed", 412))
        self.assertEqual(error_of(s3.delete_object, Bucket=b, Key="cond-del", IfMatchSize=4), ("PreconditionFailed", 412))
        past = datetime.datetime(2001, 1, 1, tzinfo=datetime.timezone.utc)
        self.assertEqual(error_of(s3.delete_object, Bucket=b, Key="cond-del", IfMatchLastModifiedTime=past), ("PreconditionFailed", 412))
        self.assertEqual(s3.get_object(Bucket=b, Key="cond-del")["Body"].read(), b"12345")
        modified = s3.head_object(Bucket=b, Key="cond-del")["LastModified"]
        s3.delete_object(Bucket=b, Key="cond-del", IfMatch=tag, IfMatchSize=5, IfMatchLastModifiedTime=modified)
        self.assertEqual(error_of(s3.head_object, Bucket=b, Key="cond-del")[1], 404)
        self.assertEqual(error_of(s3.delete_object, Bucket=b, Key="cond-del", IfMatch=tag), ("NoSuchKey", 404))

    def test_sse_c_objects_are_encrypted_at_rest_and_need_their_key(self):
        s3, b = self.s3, "objects"
        key, other = os.urandom(32), os.urandom(32)
        marker = b"SSE-C-PLAINTEXT-" + os.urandom(8).hex().encode()
        body = marker * 40000  # 960 KB: several sealed segments
        ck = dict(SSECustomerAlgorithm="AES256", SSECustomerKey=key)
        r = s3.put_object(Bucket=b, Key="sse/c", Body=body, **ck)
        self.assertEqual(r["SSECustomerAlgorithm"], "AES256")
        self.assertEqual(r["SSECustomerKeyMD5"], base64.b64encode(hashlib.md5(key).digest()).decode())
        self.assertNotEqual(r["ETag"].strip('"'), md5(body), "an SSE-C ETag must not be the plaintext's MD5")
        self.assertFalse(data_holds(marker), "the plaintext of an SSE-C object is on disk")
        self.assertEqual(s3.get_object(Bucket=b, Key="sse/c", **ck)["Body"].read(), body)
        got = s3.get_object(Bucket=b, Key="sse/c", Range="bytes=65530-200000", **ck)
        self.assertEqual(got["Body"].read(), body[65530:200001])
        self.assertEqual(got["SSECustomerKeyMD5"], r["SSECustomerKeyMD5"])
        # Without its key, or with another, nothing is read.
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="sse/c"), ("InvalidRequest", 400))
        self.assertEqual(error_of(s3.head_object, Bucket=b, Key="sse/c")[1], 400)
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="sse/c", SSECustomerAlgorithm="AES256", SSECustomerKey=other), ("AccessDenied", 403))
        self.assertEqual(s3.head_object(Bucket=b, Key="sse/c", **ck)["ContentLength"], len(body))
        # Bad keys: S3's errors, and nothing stored.
        bad = [
            (dict(SSECustomerAlgorithm="AES256", SSECustomerKey=os.urandom(16)), ("InvalidArgument", 400)),
            # (Given an MD5, boto3 sends the key as given: base64 already.)
            (dict(SSECustomerAlgorithm="AES256", SSECustomerKey=base64.b64encode(key).decode(), SSECustomerKeyMD5=base64.b64encode(hashlib.md5(other).digest()).decode()), ("InvalidArgument", 400)),
            (dict(SSECustomerAlgorithm="AES128", SSECustomerKey=key), ("InvalidEncryptionAlgorithmError", 400)),
        ]
        for ask, want in bad:
            self.assertEqual(error_of(s3.put_object, Bucket=b, Key="sse/bad", Body=b"x", **ask), want, ask)
        self.assertEqual(error_of(s3.head_object, Bucket=b, Key="sse/bad")[1], 404)
        # A plain object refuses a customer key.
        s3.put_object(Bucket=b, Key="sse/plain", Body=b"plain")
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="sse/plain", **ck), ("InvalidRequest", 400))
        # Copy: the source's key opens it, the copy is encrypted as asked.
        self.assertEqual(error_of(s3.copy_object, Bucket=b, Key="sse/copy", CopySource={"Bucket": b, "Key": "sse/c"})[1], 400)
        s3.copy_object(Bucket=b, Key="sse/copy", CopySource={"Bucket": b, "Key": "sse/c"}, CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=key, SSECustomerAlgorithm="AES256", SSECustomerKey=other)
        self.assertEqual(s3.get_object(Bucket=b, Key="sse/copy", SSECustomerAlgorithm="AES256", SSECustomerKey=other)["Body"].read(), body)
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="sse/copy", **ck), ("AccessDenied", 403))

    def test_sse_c_multipart_uploads(self):
        s3, b = self.s3, "objects"
        key = os.urandom(32)
        ck = dict(SSECustomerAlgorithm="AES256", SSECustomerKey=key)
        up = s3.create_multipart_upload(Bucket=b, Key="sse/mp", **ck)["UploadId"]
        p1, p2 = os.urandom(5 * 1024 * 1024 + 3), os.urandom(70000)
        part = dict(Bucket=b, Key="sse/mp", UploadId=up)
        self.assertEqual(error_of(s3.upload_part, PartNumber=1, Body=p1, **part)[1], 400)
        e1 = s3.upload_part(PartNumber=1, Body=p1, **part, **ck)["ETag"]
        # A part copied from a plain object is sealed under the upload's key.
        s3.put_object(Bucket=b, Key="sse/src", Body=p2)
        e2 = s3.upload_part_copy(PartNumber=2, CopySource={"Bucket": b, "Key": "sse/src"}, **part, **ck)["CopyPartResult"]["ETag"]
        s3.complete_multipart_upload(MultipartUpload={"Parts": [{"ETag": e1, "PartNumber": 1}, {"ETag": e2, "PartNumber": 2}]}, **part)
        whole = p1 + p2
        self.assertEqual(s3.get_object(Bucket=b, Key="sse/mp", **ck)["Body"].read(), whole)
        edge = len(p1)
        self.assertEqual(s3.get_object(Bucket=b, Key="sse/mp", Range=f"bytes={edge - 100}-{edge + 99}", **ck)["Body"].read(), whole[edge - 100 : edge + 100])
        self.assertEqual(s3.get_object(Bucket=b, Key="sse/mp", PartNumber=2, **ck)["Body"].read(), p2)
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="sse/mp")[1], 400)
        self.assertFalse(data_holds(p1[1000:1064]), "an SSE-C part is on disk in the clear")
        # The aws CLI's SSE-C options round-trip too.
        with tempfile.TemporaryDirectory() as d:
            src, out, keyfile = os.path.join(d, "src"), os.path.join(d, "out"), os.path.join(d, "key")
            with open(src, "wb") as f:
                f.write(whole[:300000])
            with open(keyfile, "wb") as f:
                f.write(key)
            aws("s3", "cp", src, f"s3://{b}/sse/cli-c", "--sse-c", "AES256", "--sse-c-key", f"fileb://{keyfile}")
            self.assertNotEqual(aws("s3", "cp", f"s3://{b}/sse/cli-c", out, check=False).returncode, 0)
            aws("s3", "cp", f"s3://{b}/sse/cli-c", out, "--sse-c", "AES256", "--sse-c-key", f"fileb://{keyfile}")
            with open(out, "rb") as f:
                self.assertEqual(f.read(), whole[:300000])

    def test_sse_s3_and_sse_kms(self):
        s3, b = self.s3, "objects"
        marker = b"SSE-S3-PLAINTEXT-" + os.urandom(8).hex().encode()
        body = marker * 5000
        r = s3.put_object(Bucket=b, Key="sse/s3", Body=body, ServerSideEncryption="AES256")
        self.assertEqual(r["ServerSideEncryption"], "AES256")
        self.assertEqual(r["ETag"].strip('"'), md5(body), "an SSE-S3 object's ETag is its MD5, as on S3")
        got = s3.get_object(Bucket=b, Key="sse/s3")
        self.assertEqual((got["Body"].read(), got["ServerSideEncryption"]), (body, "AES256"))
        self.assertEqual(s3.head_object(Bucket=b, Key="sse/s3")["ServerSideEncryption"], "AES256")
        self.assertFalse(data_holds(marker), "the plaintext of an SSE-S3 object is on disk")
        # SSE-KMS with a key of the key store, made and listed by `strata kms`.
        kid = "app-" + os.urandom(3).hex()
        self.assertEqual(error_of(s3.put_object, Bucket=b, Key="sse/kms", Body=b"x", ServerSideEncryption="aws:kms", SSEKMSKeyId=kid), ("KMS.NotFoundException", 400))
        self.assertEqual(error_of(s3.head_object, Bucket=b, Key="sse/kms")[1], 404)
        strata("kms", "create", kid, "--description", "test key")
        self.assertIn(kid, strata("kms", "list"))
        self.assertIn("strata-sse-s3", strata("kms", "list"), "SSE-S3's key is made on first use")
        r = s3.put_object(Bucket=b, Key="sse/kms", Body=body, ServerSideEncryption="aws:kms", SSEKMSKeyId=kid)
        self.assertEqual((r["ServerSideEncryption"], r["SSEKMSKeyId"]), ("aws:kms", kid))
        self.assertNotEqual(r["ETag"].strip('"'), md5(body))
        self.assertEqual(s3.get_object(Bucket=b, Key="sse/kms")["Body"].read(), body)
        # A disabled key opens nothing until it is enabled again.
        strata("kms", "disable", kid)
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="sse/kms"), ("KMS.DisabledException", 400))
        strata("kms", "enable", kid)
        self.assertEqual(s3.get_object(Bucket=b, Key="sse/kms")["Body"].read(), body)
        self.assertEqual(error_of(s3.put_object, Bucket=b, Key="sse/bad", Body=b"x", ServerSideEncryption="AES512"), ("InvalidArgument", 400))
        # The aws CLI's --sse.
        with tempfile.NamedTemporaryFile() as f:
            f.write(body)
            f.flush()
            aws("s3", "cp", f.name, f"s3://{b}/sse/cli", "--sse", "AES256")
        self.assertEqual(s3.head_object(Bucket=b, Key="sse/cli")["ServerSideEncryption"], "AES256")
        self.assertEqual(s3.get_object(Bucket=b, Key="sse/cli")["Body"].read(), body)

    def test_bucket_default_encryption(self):
        s3, b = self.s3, "default-sse-" + os.urandom(2).hex()
        s3.create_bucket(Bucket=b)
        self.assertEqual(error_of(s3.get_bucket_encryption, Bucket=b), ("ServerSideEncryptionConfigurationNotFoundError", 404))
        rule = lambda alg, **kw: {"Rules": [{"ApplyServerSideEncryptionByDefault": dict(SSEAlgorithm=alg, **kw)}]}
        # Bad input: S3's codes, nothing stored.
        self.assertEqual(error_of(s3.put_bucket_encryption, Bucket=b, ServerSideEncryptionConfiguration=rule("aws:kms", KMSMasterKeyID="no-such-key")), ("KMS.NotFoundException", 400))
        self.assertEqual(error_of(s3.put_bucket_encryption, Bucket=b, ServerSideEncryptionConfiguration=rule("AES512"))[1], 400)
        self.assertEqual(error_of(s3.put_bucket_encryption, Bucket=b, ServerSideEncryptionConfiguration=rule("AES256", KMSMasterKeyID="x"))[1], 400)
        self.assertEqual(error_of(s3.get_bucket_encryption, Bucket=b)[0], "ServerSideEncryptionConfigurationNotFoundError")
        s3.put_bucket_encryption(Bucket=b, ServerSideEncryptionConfiguration=rule("AES256"))
        got = s3.get_bucket_encryption(Bucket=b)["ServerSideEncryptionConfiguration"]["Rules"][0]
        self.assertEqual(got["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"], "AES256")
        # A write that asks for nothing is encrypted as the bucket says: put, copy, multipart.
        marker = b"DEFAULT-SSE-PLAINTEXT-" + os.urandom(8).hex().encode()
        body = marker * 3000
        r = s3.put_object(Bucket=b, Key="plain-request", Body=body)
        self.assertEqual(r["ServerSideEncryption"], "AES256")
        self.assertEqual(s3.get_object(Bucket=b, Key="plain-request")["Body"].read(), body)
        s3.copy_object(Bucket=b, Key="copied", CopySource={"Bucket": b, "Key": "plain-request"})
        self.assertEqual(s3.head_object(Bucket=b, Key="copied")["ServerSideEncryption"], "AES256")
        up = s3.create_multipart_upload(Bucket=b, Key="parted")
        self.assertEqual(up["ServerSideEncryption"], "AES256")
        e = s3.upload_part(Bucket=b, Key="parted", UploadId=up["UploadId"], PartNumber=1, Body=body)["ETag"]
        s3.complete_multipart_upload(Bucket=b, Key="parted", UploadId=up["UploadId"], MultipartUpload={"Parts": [{"ETag": e, "PartNumber": 1}]})
        self.assertEqual(s3.get_object(Bucket=b, Key="parted")["Body"].read(), body)
        self.assertFalse(data_holds(marker), "a default-encrypted object's plaintext is on disk")
        # A request's own choice wins over the default.
        kid = "bucket-default-" + os.urandom(3).hex()
        strata("kms", "create", kid)
        s3.put_bucket_encryption(Bucket=b, ServerSideEncryptionConfiguration=rule("aws:kms", KMSMasterKeyID=kid))
        r = s3.put_object(Bucket=b, Key="kms-default", Body=b"k")
        self.assertEqual((r["ServerSideEncryption"], r["SSEKMSKeyId"]), ("aws:kms", kid))
        self.assertEqual(s3.put_object(Bucket=b, Key="own-choice", Body=b"o", ServerSideEncryption="AES256")["ServerSideEncryption"], "AES256")
        s3.delete_bucket_encryption(Bucket=b)
        self.assertEqual(error_of(s3.get_bucket_encryption, Bucket=b)[1], 404)
        self.assertNotIn("ServerSideEncryption", s3.put_object(Bucket=b, Key="after", Body=b"a"))
        self.assertEqual(s3.get_object(Bucket=b, Key="kms-default")["Body"].read(), b"k", "objects keep the encryption they were written with")

    def test_unsigned_and_streaming_payloads(self):
        r = signed("PUT", "/objects/unsigned", body=b"not hashed", payload_hash="UNSIGNED-PAYLOAD")
        self.assertEqual(r.status, 200)
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="unsigned")["Body"].read(), b"not hashed")
        r = signed("PUT", "/objects/lying", body=b"signed body", send=b"other body!")
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(error_of(self.s3.head_object, Bucket="objects", Key="lying")[1], 404)
        data = os.urandom(300_000)
        r = streaming_put("/objects/streamed", data)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="streamed")["Body"].read(), data)
        r = streaming_put("/objects/streamed-bad", data, tamper=True)
        self.assertEqual(r.status, 403, r.body)
        self.assertIn(b"SignatureDoesNotMatch", r.body)
        self.assertEqual(error_of(self.s3.head_object, Bucket="objects", Key="streamed-bad")[1], 404)

    def test_additional_checksums_are_checked(self):
        data = b"checked bytes " * 5000
        for algo in ["CRC32", "SHA1", "SHA256"]:
            r = self.s3.put_object(Bucket="objects", Key=f"sum-{algo}", Body=data, ChecksumAlgorithm=algo)
            self.assertIn(f"Checksum{algo}", r, algo)
            self.assertEqual(self.s3.get_object(Bucket="objects", Key=f"sum-{algo}")["Body"].read(), data)
        crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        self.assertEqual(self.s3.put_object(Bucket="objects", Key="sum-given", Body=data, ChecksumCRC32=crc)["ChecksumCRC32"], crc)
        wrong = base64.b64encode(b"\0\0\0\0").decode()
        self.assertEqual(error_of(self.s3.put_object, Bucket="objects", Key="sum-bad", Body=data, ChecksumCRC32=wrong), ("BadDigest", 400))
        self.assertEqual(error_of(self.s3.head_object, Bucket="objects", Key="sum-bad")[1], 404)
        # CRC32C (botocore needs its CRT for it): as a header, by hand.
        c = crc32c(data)
        r = signed("PUT", "/objects/sum-crc32c", body=data, headers={"x-amz-checksum-crc32c": c})
        self.assertEqual(r.status, 200, r.body)
        r = signed("PUT", "/objects/sum-crc32c-bad", body=data, headers={"x-amz-checksum-crc32c": crc})
        self.assertEqual(r.status, 400, r.body)
        # In a trailer after an aws-chunked body, as SDKs send it over TLS.
        r = trailer_put("/objects/sum-trailer", data, "x-amz-checksum-crc32", crc)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.s3.get_object(Bucket="objects", Key="sum-trailer")["Body"].read(), data)
        r = trailer_put("/objects/sum-trailer-bad", data, "x-amz-checksum-crc32", wrong)
        self.assertEqual(r.status, 400, r.body)
        self.assertIn(b"BadDigest", r.body)
        self.assertEqual(error_of(self.s3.head_object, Bucket="objects", Key="sum-trailer-bad")[1], 404)
        # A part with a wrong checksum is refused; the upload goes on.
        up = self.s3.create_multipart_upload(Bucket="objects", Key="sum-parts")["UploadId"]
        self.assertEqual(
            error_of(self.s3.upload_part, Bucket="objects", Key="sum-parts", UploadId=up, PartNumber=1, Body=data, ChecksumCRC32=wrong), ("BadDigest", 400)
        )
        self.assertNotIn("Parts", self.s3.list_parts(Bucket="objects", Key="sum-parts", UploadId=up))
        self.s3.abort_multipart_upload(Bucket="objects", Key="sum-parts", UploadId=up)

    def test_checksums_are_stored_and_returned_when_asked(self):
        data = b"kept with its checksum " * 3000
        sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
        crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        self.s3.put_object(Bucket="objects", Key="kept-sum", Body=data, ChecksumSHA256=sha, Metadata={"color": "blue"})
        got = self.s3.get_object(Bucket="objects", Key="kept-sum", ChecksumMode="ENABLED")
        self.assertEqual(got["ChecksumSHA256"], sha)
        self.assertEqual(got["Body"].read(), data)
        self.assertEqual(got["Metadata"], {"color": "blue"}, "stored checksums are not user metadata")
        head = self.s3.head_object(Bucket="objects", Key="kept-sum", ChecksumMode="ENABLED")
        self.assertEqual(head["ChecksumSHA256"], sha)
        self.assertEqual(head["Metadata"], {"color": "blue"})
        # Only when asked, and never for a range.
        self.assertNotIn("ChecksumSHA256", self.s3.head_object(Bucket="objects", Key="kept-sum"))
        ranged = self.s3.get_object(Bucket="objects", Key="kept-sum", ChecksumMode="ENABLED", Range="bytes=0-9")
        self.assertNotIn("ChecksumSHA256", ranged)
        # A copy holds the same bytes, so it keeps the checksum, even with new metadata.
        self.s3.copy_object(Bucket="objects", Key="kept-sum-copy", CopySource="objects/kept-sum", MetadataDirective="REPLACE", Metadata={"color": "red"})
        head = self.s3.head_object(Bucket="objects", Key="kept-sum-copy", ChecksumMode="ENABLED")
        self.assertEqual((head["ChecksumSHA256"], head["Metadata"]), (sha, {"color": "red"}))
        # What boto3 sends by default (CRC32) comes back, and boto3 checks it on download.
        self.s3.put_object(Bucket="objects", Key="kept-crc", Body=data, ChecksumAlgorithm="CRC32")
        got = self.s3.get_object(Bucket="objects", Key="kept-crc", ChecksumMode="ENABLED")
        self.assertEqual(got["ChecksumCRC32"], crc)
        self.assertEqual(got["Body"].read(), data)
        # No checksum sent, none stored.
        signed("PUT", "/objects/no-sum", body=data)
        self.assertNotIn("ChecksumCRC32", self.s3.head_object(Bucket="objects", Key="no-sum", ChecksumMode="ENABLED"))
        # A client cannot forge a stored checksum through x-amz-meta-*: the
        # name is not a valid header name, so the request is refused whole.
        r = signed("PUT", "/objects/forged-sum", body=data, headers={"x-amz-meta-/checksum-sha256": "Zm9yZ2Vk"})
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(error_of(self.s3.head_object, Bucket="objects", Key="forged-sum")[1], 404)

    def test_object_tags(self):
        s3 = self.s3
        s3.put_object(Bucket="objects", Key="tagged", Body=b"t" * 1000, Tagging="project=blue%20sky&tier=hot", Metadata={"color": "blue"})
        want = [{"Key": "project", "Value": "blue sky"}, {"Key": "tier", "Value": "hot"}]
        self.assertEqual(sorted(s3.get_object_tagging(Bucket="objects", Key="tagged")["TagSet"], key=lambda t: t["Key"]), want)
        got = s3.get_object(Bucket="objects", Key="tagged")
        self.assertEqual((got["TagCount"], got["Metadata"]), (2, {"color": "blue"}), "tags are not user metadata")
        etag = got["ETag"]
        # Replaced in place: same bytes, same ETag.
        s3.put_object_tagging(Bucket="objects", Key="tagged", Tagging={"TagSet": [{"Key": "tier", "Value": "cold"}]})
        self.assertEqual(s3.get_object_tagging(Bucket="objects", Key="tagged")["TagSet"], [{"Key": "tier", "Value": "cold"}])
        head = s3.head_object(Bucket="objects", Key="tagged")
        self.assertEqual((head["ETag"], head["Metadata"]), (etag, {"color": "blue"}))
        self.assertEqual(s3.get_object(Bucket="objects", Key="tagged")["Body"].read(), b"t" * 1000)
        s3.delete_object_tagging(Bucket="objects", Key="tagged")
        self.assertEqual(s3.get_object_tagging(Bucket="objects", Key="tagged")["TagSet"], [])
        self.assertNotIn("TagCount", s3.get_object(Bucket="objects", Key="tagged"))
        # S3's rules; a refused tagging changes nothing.
        s3.put_object_tagging(Bucket="objects", Key="tagged", Tagging={"TagSet": [{"Key": "keep", "Value": "me"}]})
        too_many = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]}
        self.assertEqual(error_of(s3.put_object_tagging, Bucket="objects", Key="tagged", Tagging=too_many), ("InvalidTag", 400))
        twice = {"TagSet": [{"Key": "a", "Value": "1"}, {"Key": "a", "Value": "2"}]}
        self.assertEqual(error_of(s3.put_object_tagging, Bucket="objects", Key="tagged", Tagging=twice), ("InvalidTag", 400))
        self.assertEqual(error_of(s3.put_object, Bucket="objects", Key="bad-tags", Body=b"x", Tagging="aws:x=1"), ("InvalidTag", 400))
        self.assertEqual(error_of(s3.head_object, Bucket="objects", Key="bad-tags")[1], 404)
        self.assertEqual(s3.get_object_tagging(Bucket="objects", Key="tagged")["TagSet"], [{"Key": "keep", "Value": "me"}])
        self.assertEqual(error_of(s3.get_object_tagging, Bucket="objects", Key="no-such"), ("NoSuchKey", 404))
        self.assertEqual(error_of(s3.put_object_tagging, Bucket="objects", Key="no-such", Tagging={"TagSet": []}), ("NoSuchKey", 404))
        # Copies keep the source's tags unless told to replace them.
        s3.copy_object(Bucket="objects", Key="tagged-copy", CopySource="objects/tagged")
        self.assertEqual(s3.get_object_tagging(Bucket="objects", Key="tagged-copy")["TagSet"], [{"Key": "keep", "Value": "me"}])
        s3.copy_object(Bucket="objects", Key="tagged-copy2", CopySource="objects/tagged", TaggingDirective="REPLACE", Tagging="new=1")
        self.assertEqual(s3.get_object_tagging(Bucket="objects", Key="tagged-copy2")["TagSet"], [{"Key": "new", "Value": "1"}])
        # Multipart uploads take tags at creation.
        up = s3.create_multipart_upload(Bucket="objects", Key="tagged-mp", Tagging="mp=yes")["UploadId"]
        e = s3.upload_part(Bucket="objects", Key="tagged-mp", UploadId=up, PartNumber=1, Body=b"m" * 100)["ETag"]
        s3.complete_multipart_upload(Bucket="objects", Key="tagged-mp", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e}]})
        self.assertEqual(s3.get_object_tagging(Bucket="objects", Key="tagged-mp")["TagSet"], [{"Key": "mp", "Value": "yes"}])
        # And the aws CLI's s3api.
        out = json.loads(aws("s3api", "get-object-tagging", "--bucket", "objects", "--key", "tagged-mp").stdout)
        self.assertEqual(out["TagSet"], [{"Key": "mp", "Value": "yes"}])

    def test_reads_racing_overwrites_see_old_or_new(self):
        s3w, s3r = client(), client()
        values = [f"version {i}".encode() * 100 for i in range(300)]
        s3w.put_object(Bucket="objects", Key="racy", Body=values[0])
        stop = []

        def writer():
            for v in values[1:]:
                s3w.put_object(Bucket="objects", Key="racy", Body=v)
            stop.append(True)

        t = concurrent.futures.ThreadPoolExecutor(1).submit(writer)
        reads = 0
        while not stop:
            got = s3r.get_object(Bucket="objects", Key="racy")["Body"].read()
            self.assertIn(got, values)
            reads += 1
        t.result()
        self.assertGreater(reads, 10)

    def test_a_streaming_read_survives_an_overwrite(self):
        # 30 MiB: chunked; the reader pauses after 1 MiB, so most chunks are
        # fetched after the overwrite and delete have happened.
        old, new = os.urandom(30 << 20), os.urandom(30 << 20)
        self.s3.put_object(Bucket="objects", Key="streaming", Body=old)
        r = self.s3.get_object(Bucket="objects", Key="streaming")["Body"]
        first = r.read(1 << 20)
        self.s3.put_object(Bucket="objects", Key="streaming", Body=new)
        self.s3.delete_object(Bucket="objects", Key="streaming")
        self.assertEqual(first + r.read(), old)

    def test_overwrite_and_delete_free_the_old_blobs(self):
        s3 = client()
        s3.create_bucket(Bucket="frees")
        base = live_blobs()
        s3.put_object(Bucket="frees", Key="k", Body=b"one")
        self.assertEqual(live_blobs(), base + 1)
        s3.put_object(Bucket="frees", Key="k", Body=b"two")
        self.assertEqual(live_blobs(), base + 1)
        self.assertEqual(s3.get_object(Bucket="frees", Key="k")["Body"].read(), b"two")
        s3.delete_object(Bucket="frees", Key="k")
        self.assertEqual(live_blobs(), base)
        self.assertEqual(error_of(s3.get_object, Bucket="frees", Key="k"), ("NoSuchKey", 404))

    def test_delete_objects_and_copy(self):
        for k in ["d/1", "d/2", "d/3"]:
            self.s3.put_object(Bucket="objects", Key=k, Body=k.encode())
        r = self.s3.delete_objects(Bucket="objects", Delete={"Objects": [{"Key": "d/1"}, {"Key": "d/2"}, {"Key": "d/never"}]})
        self.assertEqual(sorted(d["Key"] for d in r["Deleted"]), ["d/1", "d/2", "d/never"])
        r = self.s3.delete_objects(Bucket="objects", Delete={"Objects": [{"Key": "d/3"}], "Quiet": True})
        self.assertNotIn("Deleted", r)
        self.assertEqual(self.s3.list_objects_v2(Bucket="objects", Prefix="d/")["KeyCount"], 0)
        self.s3.put_object(Bucket="objects", Key="src", Body=b"copy me", ContentType="text/plain", Metadata={"a": "1"})
        r = self.s3.copy_object(Bucket="objects", Key="dst", CopySource={"Bucket": "objects", "Key": "src"})
        self.assertEqual(r["CopyObjectResult"]["ETag"], f'"{md5(b"copy me")}"')
        g = self.s3.get_object(Bucket="objects", Key="dst")
        self.assertEqual((g["Body"].read(), g["ContentType"], g["Metadata"]), (b"copy me", "text/plain", {"a": "1"}))
        self.s3.copy_object(Bucket="objects", Key="dst2", CopySource="objects/src", MetadataDirective="REPLACE", Metadata={"b": "2"}, ContentType="text/x")
        g = self.s3.get_object(Bucket="objects", Key="dst2")
        self.assertEqual((g["ContentType"], g["Metadata"]), ("text/x", {"b": "2"}))
        self.assertEqual(error_of(self.s3.copy_object, Bucket="objects", Key="x", CopySource="objects/nope"), ("NoSuchKey", 404))
        # Copying an object onto itself must change something (S3 refuses it otherwise).
        self.assertEqual(error_of(self.s3.copy_object, Bucket="objects", Key="src", CopySource="objects/src"), ("InvalidRequest", 400))
        self.s3.copy_object(Bucket="objects", Key="src", CopySource="objects/src", MetadataDirective="REPLACE", Metadata={"c": "3"}, ContentType="text/plain")
        self.assertEqual(self.s3.head_object(Bucket="objects", Key="src")["Metadata"], {"c": "3"})


class Listing(unittest.TestCase):
    N = 10_000

    @classmethod
    def setUpClass(cls):
        cls.s3 = client(max_pool_connections=16)
        cls.s3.create_bucket(Bucket="many")
        keys = [f"dir{i % 10}/sub{i % 7}/obj{i:05d}" for i in range(cls.N)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: cls.s3.put_object(Bucket="many", Key=k, Body=k.encode()), keys))
        cls.keys = sorted(keys)

    def test_paging_v2_gives_every_key_once_in_order(self):
        got, pages = [], 0
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket="many", PaginationConfig={"PageSize": 1000}):
            got.extend(o["Key"] for o in page.get("Contents", []))
            pages += 1
        self.assertEqual(got, self.keys)
        self.assertEqual(pages, 10)
        small = self.s3.list_objects_v2(Bucket="many", MaxKeys=3)
        self.assertTrue(small["IsTruncated"])
        self.assertEqual([o["Key"] for o in small["Contents"]], self.keys[:3])
        nxt = self.s3.list_objects_v2(Bucket="many", MaxKeys=3, ContinuationToken=small["NextContinuationToken"])
        self.assertEqual([o["Key"] for o in nxt["Contents"]], self.keys[3:6])
        after = self.s3.list_objects_v2(Bucket="many", MaxKeys=2, StartAfter=self.keys[100])
        self.assertEqual([o["Key"] for o in after["Contents"]], self.keys[101:103])
        # MaxKeys=0 answers an empty, complete page, as S3 does.
        none = self.s3.list_objects_v2(Bucket="many", MaxKeys=0)
        self.assertEqual((none["KeyCount"], none["IsTruncated"], "NextContinuationToken" in none), (0, False, False))
        # The owner is named when asked for (version 1 always names it).
        self.assertNotIn("Owner", small["Contents"][0])
        owned = self.s3.list_objects_v2(Bucket="many", MaxKeys=3, FetchOwner=True)
        self.assertTrue(all(o["Owner"]["ID"] for o in owned["Contents"]), owned["Contents"])
        self.assertTrue(all(o["Owner"]["ID"] for o in self.s3.list_objects(Bucket="many", MaxKeys=3)["Contents"]))

    def test_versions_of_a_never_versioned_bucket(self):
        # Each object is its one version, "null" and latest, as S3 lists a
        # bucket that was never versioned.
        got = []
        for page in self.s3.get_paginator("list_object_versions").paginate(Bucket="many", Prefix="dir3/", PaginationConfig={"PageSize": 250}):
            got.extend((v["Key"], v["VersionId"], v["IsLatest"]) for v in page.get("Versions", []))
            self.assertEqual(page.get("DeleteMarkers", []), [])
        self.assertEqual(got, [(k, "null", True) for k in self.keys if k.startswith("dir3/")])
        top = self.s3.list_object_versions(Bucket="many", Delimiter="/")
        self.assertEqual(len(top["CommonPrefixes"]), 10)

    def test_emptying_a_bucket_through_its_versions(self):
        s3 = self.s3
        s3.create_bucket(Bucket="to-empty")
        for n in range(30):
            s3.put_object(Bucket="to-empty", Key=f"k{n}", Body=b"x")
        self.assertEqual(s3.get_object(Bucket="to-empty", Key="k1", VersionId="null")["Body"].read(), b"x")
        self.assertEqual(error_of(s3.get_object, Bucket="to-empty", Key="k1", VersionId="3HL4kqtJlcpXroDTDmJ"), ("InvalidArgument", 400))
        self.assertEqual(error_of(s3.delete_object, Bucket="to-empty", Key="k1", VersionId="3HL4kqtJlcpXroDTDmJ"), ("InvalidArgument", 400))
        # boto3's idiom (Terraform's force_destroy does the same): delete every version, then the bucket.
        boto3.resource("s3", endpoint_url=S3, aws_access_key_id=AK, aws_secret_access_key=SK, region_name="us-east-1").Bucket("to-empty").object_versions.delete()
        self.assertEqual(s3.list_objects_v2(Bucket="to-empty")["KeyCount"], 0)
        s3.delete_bucket(Bucket="to-empty")

    def test_a_versioned_bucket_keeps_every_version(self):
        s3, b = client(), "versioned"
        s3.create_bucket(Bucket=b)
        base = live_blobs()
        self.assertNotIn("Status", s3.get_bucket_versioning(Bucket=b))
        self.assertEqual(error_of(s3.put_bucket_versioning, Bucket=b, VersioningConfiguration={"Status": "Sometimes"}), ("MalformedXML", 400))
        self.assertNotIn("Status", s3.get_bucket_versioning(Bucket=b), "a refused configuration changes nothing")
        s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
        self.assertEqual(s3.get_bucket_versioning(Bucket=b)["Status"], "Enabled")
        v1 = s3.put_object(Bucket=b, Key="k", Body=b"one")["VersionId"]
        v2 = s3.put_object(Bucket=b, Key="k", Body=b"two")["VersionId"]
        self.assertNotEqual(v1, v2)
        self.assertEqual(live_blobs(), base + 2, "an overwrite keeps the old version's bytes")
        got = s3.get_object(Bucket=b, Key="k")
        self.assertEqual((got["Body"].read(), got["VersionId"]), (b"two", v2))
        self.assertEqual(s3.get_object(Bucket=b, Key="k", VersionId=v1)["Body"].read(), b"one")
        self.assertEqual(s3.head_object(Bucket=b, Key="k", VersionId=v1)["ContentLength"], 3)
        # A delete adds a delete marker: the key reads as absent, its versions stay.
        d = s3.delete_object(Bucket=b, Key="k")
        self.assertTrue(d["DeleteMarker"])
        marker = d["VersionId"]
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="k"), ("NoSuchKey", 404))
        self.assertEqual(s3.get_object(Bucket=b, Key="k", VersionId=v2)["Body"].read(), b"two")
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="k", VersionId=marker)[1], 405)
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="k", VersionId="0" * 32), ("NoSuchVersion", 404))
        self.assertEqual(s3.list_objects_v2(Bucket=b)["KeyCount"], 0)
        listed = s3.list_object_versions(Bucket=b)
        self.assertEqual([(v["VersionId"], v["IsLatest"]) for v in listed["Versions"]], [(v2, False), (v1, False)])
        self.assertEqual([(m["VersionId"], m["IsLatest"]) for m in listed["DeleteMarkers"]], [(marker, True)])
        # A conditional delete in a versioned bucket adds a marker too, keeping the version.
        s3.put_object(Bucket=b, Key="cond", Body=b"kept")
        tag = s3.head_object(Bucket=b, Key="cond")["ETag"]
        s3.delete_object(Bucket=b, Key="cond", IfMatch=tag)
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="cond"), ("NoSuchKey", 404))
        kept = [v for v in s3.list_object_versions(Bucket=b, Prefix="cond")["Versions"]]
        self.assertEqual(len(kept), 1)
        self.assertEqual(s3.get_object(Bucket=b, Key="cond", VersionId=kept[0]["VersionId"])["Body"].read(), b"kept")
        for v in [kept[0]["VersionId"]] + [m["VersionId"] for m in s3.list_object_versions(Bucket=b, Prefix="cond").get("DeleteMarkers", [])]:
            s3.delete_object(Bucket=b, Key="cond", VersionId=v)
        # Restored by a copy of an old version: a new current version.
        c = s3.copy_object(Bucket=b, Key="k", CopySource={"Bucket": b, "Key": "k", "VersionId": v1})
        self.assertEqual(c["CopySourceVersionId"], v1)
        v3 = c["VersionId"]
        self.assertEqual(s3.get_object(Bucket=b, Key="k")["Body"].read(), b"one")
        # A version deleted by id is gone for good, and its blob freed.
        d = s3.delete_object(Bucket=b, Key="k", VersionId=v2)
        self.assertEqual((d["VersionId"], d.get("DeleteMarker", False)), (v2, False))
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="k", VersionId=v2), ("NoSuchVersion", 404))
        self.assertEqual(live_blobs(), base + 2)
        # Paging through versions one at a time gives each once, newest first.
        seen, kw = [], {}
        while True:
            page = s3.list_object_versions(Bucket=b, MaxKeys=1, **kw)
            seen += [v["VersionId"] for v in page.get("Versions", [])] + [m["VersionId"] for m in page.get("DeleteMarkers", [])]
            if not page["IsTruncated"]:
                break
            kw = dict(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
        self.assertEqual(seen, [v3, marker, v1])
        # A multipart upload's object is a version too.
        up = s3.create_multipart_upload(Bucket=b, Key="mp")["UploadId"]
        e = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=1, Body=b"p")["ETag"]
        done = s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up, MultipartUpload={"Parts": [{"ETag": e, "PartNumber": 1}]})
        self.assertEqual(s3.head_object(Bucket=b, Key="mp", VersionId=done["VersionId"])["ContentLength"], 1)
        # Suspended: new writes are the one "null" version, replacing each other.
        s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
        self.assertEqual(s3.get_bucket_versioning(Bucket=b)["Status"], "Suspended")
        self.assertEqual(s3.put_object(Bucket=b, Key="k", Body=b"n1")["VersionId"], "null")
        s3.put_object(Bucket=b, Key="k", Body=b"n2")
        ids = [v["VersionId"] for v in s3.list_object_versions(Bucket=b, Prefix="k")["Versions"]]
        self.assertEqual(ids, ["null", v3, v1])
        # A bucket holding versions is not empty; emptied through its versions (boto3's idiom, Terraform's force_destroy), it goes.
        self.assertEqual(error_of(s3.delete_bucket, Bucket=b), ("BucketNotEmpty", 409))
        boto3.resource("s3", endpoint_url=S3, aws_access_key_id=AK, aws_secret_access_key=SK, region_name="us-east-1").Bucket(b).object_versions.delete()
        self.assertEqual(s3.list_object_versions(Bucket=b).get("Versions", []), [])
        # Every version's blob is freed, but the multipart object's composite
        # and its part: a replaced chunked blob is retired with a TTL, for
        # readers that opened it, not deleted at once.
        self.assertEqual(live_blobs(), base + 2, "every version's blob is freed")
        s3.delete_bucket(Bucket=b)

    def test_object_lock(self):
        s3, b = client(), "locked" + os.urandom(2).hex()
        now = datetime.datetime.now(datetime.timezone.utc)
        soon, later = now + datetime.timedelta(seconds=4), now + datetime.timedelta(days=1)
        # Object lock on a bucket that has none: S3's errors, nothing changes.
        unl = "unlocked" + os.urandom(2).hex()
        s3.create_bucket(Bucket=unl)
        self.assertEqual(error_of(s3.put_object, Bucket=unl, Key="k", Body=b"x", ObjectLockLegalHoldStatus="ON"), ("InvalidRequest", 400))
        s3.put_object(Bucket=unl, Key="k", Body=b"x")
        self.assertEqual(error_of(s3.put_object_legal_hold, Bucket=unl, Key="k", LegalHold={"Status": "ON"}), ("InvalidRequest", 400))
        self.assertEqual(error_of(s3.get_object_lock_configuration, Bucket=unl), ("ObjectLockConfigurationNotFoundError", 404))
        self.assertEqual(error_of(s3.put_object_lock_configuration, Bucket=unl, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"}), ("InvalidBucketState", 409))
        # A bucket made with object lock keeps versions, and cannot be suspended.
        s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
        self.assertEqual(s3.get_bucket_versioning(Bucket=b)["Status"], "Enabled")
        self.assertEqual(error_of(s3.put_bucket_versioning, Bucket=b, VersioningConfiguration={"Status": "Suspended"}), ("InvalidBucketState", 409))
        self.assertEqual(error_of(s3.put_object, Bucket=b, Key="c", Body=b"x", ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=now - datetime.timedelta(days=1)), ("InvalidArgument", 400))
        self.assertEqual(error_of(s3.head_object, Bucket=b, Key="c")[1], 404)
        # COMPLIANCE: no one deletes the version before its date, not even bypassing governance, nor shortens it.
        v = s3.put_object(Bucket=b, Key="c", Body=b"kept", ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=soon)["VersionId"]
        h = s3.head_object(Bucket=b, Key="c")
        self.assertEqual(h["ObjectLockMode"], "COMPLIANCE")
        self.assertEqual(error_of(s3.delete_object, Bucket=b, Key="c", VersionId=v, BypassGovernanceRetention=True), ("AccessDenied", 403))
        self.assertEqual(error_of(s3.put_object_retention, Bucket=b, Key="c", VersionId=v, Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later}, BypassGovernanceRetention=True), ("AccessDenied", 403))
        self.assertEqual(s3.get_object(Bucket=b, Key="c", VersionId=v)["Body"].read(), b"kept")
        # A plain delete only adds a marker: the retained version stays readable.
        self.assertTrue(s3.delete_object(Bucket=b, Key="c")["DeleteMarker"])
        self.assertEqual(s3.get_object(Bucket=b, Key="c", VersionId=v)["Body"].read(), b"kept")
        # GOVERNANCE: deleted only when bypassed.
        g = s3.put_object(Bucket=b, Key="g", Body=b"g", ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=later)["VersionId"]
        self.assertEqual(s3.get_object_retention(Bucket=b, Key="g")["Retention"]["Mode"], "GOVERNANCE")
        self.assertEqual(error_of(s3.delete_object, Bucket=b, Key="g", VersionId=g), ("AccessDenied", 403))
        s3.delete_object(Bucket=b, Key="g", VersionId=g, BypassGovernanceRetention=True)
        # A legal hold: no date, held until lifted.
        l = s3.put_object(Bucket=b, Key="l", Body=b"l")["VersionId"]
        s3.put_object_legal_hold(Bucket=b, Key="l", LegalHold={"Status": "ON"})
        self.assertEqual(s3.get_object_legal_hold(Bucket=b, Key="l")["LegalHold"]["Status"], "ON")
        self.assertEqual(error_of(s3.delete_object, Bucket=b, Key="l", VersionId=l, BypassGovernanceRetention=True), ("AccessDenied", 403))
        s3.put_object_legal_hold(Bucket=b, Key="l", LegalHold={"Status": "OFF"})
        s3.delete_object(Bucket=b, Key="l", VersionId=l)
        # A default retention applies to new objects.
        s3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
        self.assertEqual(s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]["Rule"]["DefaultRetention"], {"Mode": "GOVERNANCE", "Days": 1})
        d = s3.put_object(Bucket=b, Key="d", Body=b"d")["VersionId"]
        self.assertEqual(s3.head_object(Bucket=b, Key="d")["ObjectLockMode"], "GOVERNANCE")
        self.assertEqual(error_of(s3.delete_object, Bucket=b, Key="d", VersionId=d), ("AccessDenied", 403))
        s3.delete_object(Bucket=b, Key="d", VersionId=d, BypassGovernanceRetention=True)
        self.assertEqual(error_of(s3.put_object_lock_configuration, Bucket=b, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE"}}}), ("MalformedXML", 400))
        # After its date the COMPLIANCE version goes like any other.
        time.sleep(max(0.0, (soon - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) + 0.5)
        s3.delete_object(Bucket=b, Key="c", VersionId=v)
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="c", VersionId=v), ("NoSuchVersion", 404))

    def test_cors_rules_and_preflight(self):
        s3, b = client(), "cors-" + os.urandom(2).hex()
        s3.create_bucket(Bucket=b)
        self.assertEqual(error_of(s3.get_bucket_cors, Bucket=b), ("NoSuchCORSConfiguration", 404))
        # Bad rules: S3's errors, nothing stored.
        for rules, want in [
            ([{"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}], ("InvalidRequest", 400)),
            ([{"AllowedOrigins": ["http://*.*"], "AllowedMethods": ["GET"]}], ("InvalidRequest", 400)),
        ]:
            self.assertEqual(error_of(s3.put_bucket_cors, Bucket=b, CORSConfiguration={"CORSRules": rules}), want, rules)
        self.assertEqual(error_of(s3.get_bucket_cors, Bucket=b), ("NoSuchCORSConfiguration", 404))
        rules = [
            {"AllowedOrigins": ["https://app.example.com"], "AllowedMethods": ["PUT", "GET"], "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600},
            {"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]},
        ]
        s3.put_bucket_cors(Bucket=b, CORSConfiguration={"CORSRules": rules})
        got = s3.get_bucket_cors(Bucket=b)["CORSRules"]
        self.assertEqual([r["AllowedMethods"] for r in got], [["PUT", "GET"], ["GET"]])

        def preflight(origin, method, headers=None):
            h = {"Origin": origin, "Access-Control-Request-Method": method}
            if headers:
                h["Access-Control-Request-Headers"] = headers
            req = urllib.request.Request(f"{S3}/{b}/file.txt", method="OPTIONS", headers=h)
            try:
                with urllib.request.urlopen(req) as r:
                    return r.status, r.headers
            except urllib.error.HTTPError as e:
                return e.code, e.headers

        status, h = preflight("https://app.example.com", "PUT", "content-type, x-amz-date")
        self.assertEqual(status, 200)
        self.assertEqual(h["Access-Control-Allow-Origin"], "https://app.example.com")
        self.assertIn("PUT", h["Access-Control-Allow-Methods"])
        self.assertEqual(h["Access-Control-Max-Age"], "600")
        self.assertEqual(preflight("https://evil.example.com", "PUT")[0], 403)
        status, h = preflight("https://anyone.test", "GET")
        self.assertEqual((status, h["Access-Control-Allow-Origin"]), (200, "*"))
        self.assertEqual(preflight("https://anyone.test", "DELETE")[0], 403)
        # The actual cross-origin request's answer carries the rule's headers.
        s3.put_object(Bucket=b, Key="file.txt", Body=b"hi", ACL="private")
        url = s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "file.txt"})
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Origin": "https://app.example.com"})) as r:
            self.assertEqual(r.headers["Access-Control-Allow-Origin"], "https://app.example.com")
            self.assertEqual(r.headers["Access-Control-Expose-Headers"], "ETag")
        with urllib.request.urlopen(urllib.request.Request(url)) as r:
            self.assertIsNone(r.headers["Access-Control-Allow-Origin"], "no Origin, no CORS headers")
        s3.delete_bucket_cors(Bucket=b)
        self.assertEqual(preflight("https://app.example.com", "GET")[0], 403)

    def test_bucket_tags_and_ownership(self):
        s3, b = client(), "tagged-" + os.urandom(2).hex()
        s3.create_bucket(Bucket=b)
        self.assertEqual(error_of(s3.get_bucket_tagging, Bucket=b), ("NoSuchTagSet", 404))
        s3.put_bucket_tagging(Bucket=b, Tagging={"TagSet": [{"Key": "team", "Value": "storage"}, {"Key": "env", "Value": "test"}]})
        self.assertEqual(sorted((t["Key"], t["Value"]) for t in s3.get_bucket_tagging(Bucket=b)["TagSet"]), [("env", "test"), ("team", "storage")])
        too_many = [{"Key": f"k{i}", "Value": "v"} for i in range(51)]
        self.assertEqual(error_of(s3.put_bucket_tagging, Bucket=b, Tagging={"TagSet": too_many}), ("InvalidTag", 400))
        self.assertEqual(len(s3.get_bucket_tagging(Bucket=b)["TagSet"]), 2, "a refused tag set changes nothing")
        s3.delete_bucket_tagging(Bucket=b)
        self.assertEqual(error_of(s3.get_bucket_tagging, Bucket=b), ("NoSuchTagSet", 404))
        # No ownership controls: ACLs enabled. BucketOwnerEnforced turns them off.
        self.assertEqual(error_of(s3.get_bucket_ownership_controls, Bucket=b), ("OwnershipControlsNotFoundError", 404))
        s3.put_bucket_ownership_controls(Bucket=b, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
        own = s3.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"]["Rules"]
        self.assertEqual(own, [{"ObjectOwnership": "BucketOwnerEnforced"}])
        self.assertEqual(error_of(s3.put_object, Bucket=b, Key="k", Body=b"x", ACL="public-read"), ("AccessControlListNotSupported", 400))
        self.assertEqual(error_of(s3.get_object, Bucket=b, Key="k")[0], "NoSuchKey", "a refused ACL stores nothing")
        s3.put_object(Bucket=b, Key="k", Body=b"x", ACL="bucket-owner-full-control")
        self.assertEqual(error_of(s3.put_bucket_acl, Bucket=b, ACL="public-read"), ("AccessControlListNotSupported", 400))
        bad = {"Rules": [{"ObjectOwnership": "Everyone"}]}
        self.assertEqual(error_of(s3.put_bucket_ownership_controls, Bucket=b, OwnershipControls=bad)[1], 400)
        s3.put_bucket_ownership_controls(Bucket=b, OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"}]})
        self.assertEqual(s3.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"]["Rules"], [{"ObjectOwnership": "ObjectWriter"}])
        s3.delete_bucket_ownership_controls(Bucket=b)
        self.assertEqual(error_of(s3.get_bucket_ownership_controls, Bucket=b), ("OwnershipControlsNotFoundError", 404))
        s3.delete_object(Bucket=b, Key="k")
        s3.delete_bucket(Bucket=b)
        enforced = "enforced-" + os.urandom(2).hex()
        self.assertEqual(error_of(s3.create_bucket, Bucket=enforced, ACL="public-read", ObjectOwnership="BucketOwnerEnforced"), ("InvalidBucketAclWithObjectOwnership", 400))
        self.assertEqual(error_of(s3.head_bucket, Bucket=enforced)[1], 404, "a refused bucket is not created")

    def test_acls(self):
        s3, b = client(), "acl-" + os.urandom(2).hex()
        s3.create_bucket(Bucket=b)
        s3.put_object(Bucket=b, Key="private", Body=b"mine")
        s3.put_object(Bucket=b, Key="shared", Body=b"everyone's", ACL="public-read")
        anon = anonymous()
        # An object ACL lets anyone read that object, and only that one.
        self.assertEqual(anon.get_object(Bucket=b, Key="shared")["Body"].read(), b"everyone's")
        self.assertEqual(urllib.request.urlopen(f"{S3}/{b}/shared").read(), b"everyone's")
        self.assertEqual(error_of(anon.get_object, Bucket=b, Key="private")[1], 403)
        self.assertEqual(error_of(anon.list_objects_v2, Bucket=b)[1], 403)
        grants = s3.get_object_acl(Bucket=b, Key="shared")["Grants"]
        self.assertEqual(sorted(g["Permission"] for g in grants), ["FULL_CONTROL", "READ"])
        self.assertTrue(any(g["Grantee"].get("URI", "").endswith("/AllUsers") for g in grants))
        self.assertEqual([g["Permission"] for g in s3.get_object_acl(Bucket=b, Key="private")["Grants"]], ["FULL_CONTROL"])
        s3.put_object_acl(Bucket=b, Key="shared", ACL="private")
        self.assertEqual(error_of(anon.get_object, Bucket=b, Key="shared")[1], 403)
        self.assertEqual(s3.get_object(Bucket=b, Key="shared")["Body"].read(), b"everyone's", "an ACL change keeps the bytes")
        # A key with no grant on the bucket: what ACLs name it for, no more.
        made = json.loads(strata("key", "create", "--name", "acl-reader", "--json"))
        ak, sk = made["access_key_id"], made["secret_access_key"]
        other = client(ak=ak, sk=sk)
        self.assertEqual(error_of(other.get_object, Bucket=b, Key="private")[1], 403)
        s3.put_object_acl(Bucket=b, Key="private", GrantRead=f'id="{ak}"')
        self.assertEqual(other.get_object(Bucket=b, Key="private")["Body"].read(), b"mine")
        self.assertEqual(error_of(other.get_object_acl, Bucket=b, Key="private")[1], 403, "READ is not READ_ACP")
        self.assertEqual(error_of(other.put_object, Bucket=b, Key="new", Body=b"x")[1], 403)
        self.assertEqual(error_of(other.list_objects_v2, Bucket=b)[1], 403)
        # The bucket's ACL: authenticated-read lets every key list; WRITE by body lets it put and delete.
        s3.put_bucket_acl(Bucket=b, ACL="authenticated-read")
        self.assertEqual(sorted(o["Key"] for o in other.list_objects_v2(Bucket=b)["Contents"]), ["private", "shared"])
        self.assertEqual(error_of(anon.list_objects_v2, Bucket=b)[1], 403, "anonymous is not authenticated")
        owner = s3.get_bucket_acl(Bucket=b)["Owner"]
        policy = {
            "Owner": owner,
            "Grants": [
                {"Grantee": {"Type": "CanonicalUser", "ID": owner["ID"]}, "Permission": "FULL_CONTROL"},
                {"Grantee": {"Type": "CanonicalUser", "ID": ak}, "Permission": "WRITE"},
                {"Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"}, "Permission": "READ"},
            ],
        }
        s3.put_bucket_acl(Bucket=b, AccessControlPolicy=policy)
        got = s3.get_bucket_acl(Bucket=b)["Grants"]
        self.assertEqual(sorted(g["Permission"] for g in got), ["FULL_CONTROL", "READ", "WRITE"])
        other.put_object(Bucket=b, Key="by-acl", Body=b"written through WRITE")
        other.delete_object(Bucket=b, Key="shared")
        self.assertEqual(sorted(o["Key"] for o in anon.list_objects_v2(Bucket=b)["Contents"]), ["by-acl", "private"])
        self.assertEqual(error_of(anon.get_object, Bucket=b, Key="by-acl")[1], 403, "listing a bucket is not reading its objects")
        self.assertEqual(error_of(other.put_bucket_acl, Bucket=b, ACL="public-read-write")[1], 403, "WRITE is not WRITE_ACP")
        # Anonymous writes need public-read-write.
        self.assertEqual(error_of(anon.put_object, Bucket=b, Key="anon", Body=b"x")[1], 403)
        s3.put_bucket_acl(Bucket=b, ACL="public-read-write")
        anon.put_object(Bucket=b, Key="anon", Body=b"x")
        self.assertEqual(s3.get_object(Bucket=b, Key="anon")["Body"].read(), b"x")
        # Bad input: S3's codes, nothing changed.
        before = s3.get_bucket_acl(Bucket=b)["Grants"]
        self.assertEqual(error_of(s3.put_bucket_acl, Bucket=b, GrantRead='id="no-such-key"'), ("InvalidArgument", 400))
        self.assertEqual(error_of(s3.put_bucket_acl, Bucket=b, GrantRead='emailAddress="a@example.com"'), ("UnresolvableGrantByEmailAddress", 400))
        self.assertEqual(error_of(s3.put_bucket_acl, Bucket=b, ACL="private", GrantRead=f'id="{ak}"'), ("InvalidRequest", 400))
        self.assertEqual(error_of(s3.put_object_acl, Bucket=b, Key="private", ACL="log-delivery-write")[1], 400)
        self.assertEqual(error_of(s3.put_object_acl, Bucket=b, Key="missing", ACL="private"), ("NoSuchKey", 404))
        bad = {"Owner": owner, "Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": ak}, "Permission": "EVERYTHING"}]}
        self.assertEqual(error_of(s3.put_bucket_acl, Bucket=b, AccessControlPolicy=bad)[1], 400)
        self.assertEqual(s3.get_bucket_acl(Bucket=b)["Grants"], before)
        # A copy gets the ACL its request asks, not its source's; the aws CLI's --acl works.
        s3.copy_object(Bucket=b, Key="copy", CopySource={"Bucket": b, "Key": "private"})
        self.assertEqual([g["Permission"] for g in s3.get_object_acl(Bucket=b, Key="copy")["Grants"]], ["FULL_CONTROL"])
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"via the cli")
            f.flush()
            aws("s3", "cp", f.name, f"s3://{b}/cli", "--acl", "public-read")
        self.assertEqual(anon.get_object(Bucket=b, Key="cli")["Body"].read(), b"via the cli")
        # A multipart upload's ACL is the completed object's.
        up = s3.create_multipart_upload(Bucket=b, Key="mp", ACL="public-read")["UploadId"]
        e = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=1, Body=b"parted")["ETag"]
        s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up, MultipartUpload={"Parts": [{"ETag": e, "PartNumber": 1}]})
        self.assertEqual(anon.get_object(Bucket=b, Key="mp")["Body"].read(), b"parted")

    def test_bucket_policies(self):
        s3, b = client(), "pol-" + os.urandom(2).hex()
        s3.create_bucket(Bucket=b)
        for k in ("open/a", "secret/b"):
            s3.put_object(Bucket=b, Key=k, Body=k.encode())
        made = json.loads(strata("key", "create", "--name", "policy-subject", "--json"))
        ak, sk = made["access_key_id"], made["secret_access_key"]
        strata("key", "grant", ak, b, "readwrite")
        other = client(ak=ak, sk=sk)
        self.assertEqual(other.get_object(Bucket=b, Key="secret/b")["Body"].read(), b"secret/b")
        self.assertEqual(error_of(s3.get_bucket_policy, Bucket=b), ("NoSuchBucketPolicy", 404))
        # Malformed policies: S3's MalformedPolicy, nothing stored.
        for bad in ["{not json", json.dumps({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:Teleport", "Resource": f"arn:aws:s3:::{b}/*"}]})]:
            self.assertEqual(error_of(s3.put_bucket_policy, Bucket=b, Policy=bad), ("MalformedPolicy", 400))
        self.assertEqual(error_of(s3.get_bucket_policy, Bucket=b), ("NoSuchBucketPolicy", 404))
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Deny", "Principal": {"AWS": [f"arn:aws:iam::000000000000:user/{ak}"]}, "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{b}/secret/*"},
                {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{b}/open/*"},
                {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{b}/*", "Condition": {"NotIpAddress": {"aws:SourceIp": "127.0.0.0/8"}}},
            ],
        }
        s3.put_bucket_policy(Bucket=b, Policy=json.dumps(policy))
        self.assertEqual(json.loads(s3.get_bucket_policy(Bucket=b)["Policy"]), policy)
        # The Deny holds for that key, whatever its grant; the others keep theirs.
        self.assertEqual(error_of(other.get_object, Bucket=b, Key="secret/b"), ("AccessDenied", 403))
        self.assertEqual(error_of(other.head_object, Bucket=b, Key="secret/b")[1], 403)
        self.assertEqual(other.get_object(Bucket=b, Key="open/a")["Body"].read(), b"open/a")
        self.assertEqual(s3.get_object(Bucket=b, Key="secret/b")["Body"].read(), b"secret/b")
        # The Allow lets anyone read open/, nothing else.
        self.assertEqual(anonymous().get_object(Bucket=b, Key="open/a")["Body"].read(), b"open/a")
        self.assertEqual(error_of(anonymous().get_object, Bucket=b, Key="secret/b")[1], 403)
        self.assertEqual(error_of(anonymous().put_object, Bucket=b, Key="open/x", Body=b"x")[1], 403)
        # From 127.0.0.1, inside 127.0.0.0/8, puts go on; a policy that denies that range stops them.
        other.put_object(Bucket=b, Key="open/c", Body=b"c")
        policy["Statement"][2]["Condition"] = {"IpAddress": {"aws:SourceIp": ["127.0.0.0/8", "::1/128"]}}
        s3.put_bucket_policy(Bucket=b, Policy=json.dumps(policy))
        self.assertEqual(error_of(other.put_object, Bucket=b, Key="open/d", Body=b"d"), ("AccessDenied", 403))
        self.assertEqual(error_of(s3.put_object, Bucket=b, Key="open/d", Body=b"d"), ("AccessDenied", 403), "an explicit Deny binds admin keys too")
        # An admin key can still change the policy; without it, the grants decide again.
        s3.delete_bucket_policy(Bucket=b)
        self.assertEqual(error_of(s3.get_bucket_policy, Bucket=b), ("NoSuchBucketPolicy", 404))
        self.assertEqual(other.get_object(Bucket=b, Key="secret/b")["Body"].read(), b"secret/b")
        self.assertEqual(error_of(anonymous().get_object, Bucket=b, Key="open/a")[1], 403)
        other.put_object(Bucket=b, Key="open/d", Body=b"d")

    def test_browser_post_uploads(self):
        # SigV4 forms (boto3 signs presigned POSTs with SigV2 unless told).
        s3, b = client(signature_version="s3v4"), "posts-" + os.urandom(2).hex()
        s3.create_bucket(Bucket=b)

        def post(fields, data, filename="photo.jpg"):
            boundary = "----strata" + os.urandom(8).hex()
            parts = []
            for k, v in fields.items():
                parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode() + data + b"\r\n")
            parts.append(f"--{boundary}--\r\n".encode())
            req = urllib.request.Request(f"{S3}/{b}", data=b"".join(parts), method="POST", headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
            try:
                with urllib.request.urlopen(req) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        conditions = [["starts-with", "$key", "uploads/"], ["content-length-range", 1, 1000]]
        form = s3.generate_presigned_post(Bucket=b, Key="uploads/a.bin", Conditions=conditions, ExpiresIn=300)
        status, _ = post(form["fields"], b"posted bytes")
        self.assertEqual(status, 204)
        self.assertEqual(s3.get_object(Bucket=b, Key="uploads/a.bin")["Body"].read(), b"posted bytes")
        # Conditions that fail, an expired policy, a forged signature: refused, nothing stored.
        status, body = post(form["fields"], b"x" * 2000)
        self.assertEqual(status, 400, body)
        self.assertIn(b"<Code>EntityTooLarge</Code>", body, "over the policy's content-length-range, as S3 answers")
        outside = s3.generate_presigned_post(Bucket=b, Key="elsewhere/a.bin", Conditions=conditions, ExpiresIn=300)
        status, body = post(outside["fields"], b"x")
        self.assertEqual(status, 403, body)
        self.assertIn(b"<Code>AccessDenied</Code>", body, "a key outside the policy's starts-with")
        expired = s3.generate_presigned_post(Bucket=b, Key="uploads/late.bin", Conditions=conditions, ExpiresIn=-60)
        status, body = post(expired["fields"], b"x")
        self.assertEqual(status, 403, body)
        self.assertIn("x-amz-signature", form["fields"])
        forged = dict(form["fields"], **{"x-amz-signature": "0" * 64})
        status, body = post(forged, b"forged")
        self.assertEqual(status, 403, body)
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])]
        self.assertEqual(keys, ["uploads/a.bin"])
        # ${filename}: the key takes the uploaded file's name; a 201 answer names the stored key.
        named = s3.generate_presigned_post(
            Bucket=b, Key="uploads/${filename}", Fields={"success_action_status": "201"}, Conditions=conditions + [{"success_action_status": "201"}], ExpiresIn=300
        )
        status, body = post(named["fields"], b"a picture", filename="cat & dog.jpg")
        self.assertEqual(status, 201, body)
        self.assertIn(b"<Key>uploads/cat &amp; dog.jpg</Key>", body)
        self.assertEqual(s3.get_object(Bucket=b, Key="uploads/cat & dog.jpg")["Body"].read(), b"a picture")
        # The form's ACL field is the object's ACL.
        public = s3.generate_presigned_post(Bucket=b, Key="uploads/public.txt", Fields={"acl": "public-read"}, Conditions=conditions + [{"acl": "public-read"}], ExpiresIn=300)
        status, body = post(public["fields"], b"for everyone")
        self.assertEqual(status, 204, body)
        self.assertEqual(anonymous().get_object(Bucket=b, Key="uploads/public.txt")["Body"].read(), b"for everyone")

    def test_aws_cli_versioning(self):
        s3, b = client(), "versioned-cli"
        s3.create_bucket(Bucket=b)
        aws("s3api", "put-bucket-versioning", "--bucket", b, "--versioning-configuration", "Status=Enabled")
        self.assertIn("Enabled", aws("s3api", "get-bucket-versioning", "--bucket", b).stdout)
        with tempfile.NamedTemporaryFile() as f:
            for body in (b"a", b"bb"):
                f.seek(0)
                f.write(body)
                f.flush()
                aws("s3", "cp", f.name, f"s3://{b}/x")
        listed = json.loads(aws("s3api", "list-object-versions", "--bucket", b).stdout)
        self.assertEqual(sorted(v["Size"] for v in listed["Versions"]), [1, 2])
        for v in listed["Versions"]:
            aws("s3api", "delete-object", "--bucket", b, "--key", "x", "--version-id", v["VersionId"])
        s3.delete_bucket(Bucket=b)

    def test_delimiters_give_common_prefixes(self):
        top = self.s3.list_objects_v2(Bucket="many", Delimiter="/")
        self.assertEqual([p["Prefix"] for p in top["CommonPrefixes"]], [f"dir{i}/" for i in range(10)])
        self.assertNotIn("Contents", top)
        sub = self.s3.list_objects_v2(Bucket="many", Prefix="dir3/", Delimiter="/")
        self.assertEqual(sorted(p["Prefix"] for p in sub["CommonPrefixes"]), sorted({f"dir3/sub{i % 7}/" for i in range(3, self.N, 10)}))
        # Paging through common prefixes two at a time.
        seen = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket="many", Delimiter="/", PaginationConfig={"PageSize": 2}):
            seen.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
        self.assertEqual(seen, [f"dir{i}/" for i in range(10)])
        leaf = self.s3.list_objects_v2(Bucket="many", Prefix="dir3/sub3/", Delimiter="/")
        self.assertEqual([o["Key"] for o in leaf["Contents"]], [k for k in self.keys if k.startswith("dir3/sub3/")])

    def test_list_objects_v1_with_markers(self):
        got = []
        for page in self.s3.get_paginator("list_objects").paginate(Bucket="many", Prefix="dir1/", PaginationConfig={"PageSize": 300}):
            got.extend(o["Key"] for o in page.get("Contents", []))
        self.assertEqual(got, [k for k in self.keys if k.startswith("dir1/")])
        v1 = self.s3.list_objects(Bucket="many", Delimiter="/", Prefix="dir2/")
        self.assertEqual(len(v1["CommonPrefixes"]), 7)

    def test_aws_cli_lists_them_too(self):
        r = aws("s3", "ls", "s3://many/dir4/", "--recursive")
        self.assertEqual(len(r.stdout.strip().splitlines()), self.N // 10)
        r = aws("s3api", "list-objects-v2", "--bucket", "many", "--prefix", "dir5/", "--delimiter", "/")
        self.assertEqual(len(json.loads(r.stdout)["CommonPrefixes"]), 7)


class Multipart(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s3 = client()
        cls.s3.create_bucket(Bucket="multi")

    def test_100_mb_upload_file_and_download(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "src.bin")
            data = os.urandom(100 * 1024 * 1024)
            with open(src, "wb") as f:
                f.write(data)
            cfg = boto3.s3.transfer.TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20, max_concurrency=4)
            self.s3.upload_file(src, "multi", "big.bin", Config=cfg)
            h = self.s3.head_object(Bucket="multi", Key="big.bin")
            self.assertEqual(h["ContentLength"], len(data))
            parts = [data[i : i + (8 << 20)] for i in range(0, len(data), 8 << 20)]
            want = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + f"-{len(parts)}"
            self.assertEqual(h["ETag"], f'"{want}"')
            dst = os.path.join(d, "dst.bin")
            self.s3.download_file("multi", "big.bin", dst, Config=cfg)
            with open(dst, "rb") as f:
                self.assertEqual(hashlib.md5(f.read()).digest(), hashlib.md5(data).digest())
            g = self.s3.get_object(Bucket="multi", Key="big.bin", Range=f"bytes={(8 << 20) - 5}-{(8 << 20) + 4}")
            self.assertEqual(g["Body"].read(), data[(8 << 20) - 5 : (8 << 20) + 5])
            # The aws CLI: a 100 MB multipart upload of its own, and back.
            aws("s3", "cp", src, "s3://multi/cli.bin")
            aws("s3", "cp", "s3://multi/cli.bin", dst)
            with open(dst, "rb") as f:
                self.assertEqual(hashlib.md5(f.read()).digest(), hashlib.md5(data).digest())

    def test_low_level_operations_and_their_errors(self):
        s3 = self.s3
        up = s3.create_multipart_upload(Bucket="multi", Key="parts", ContentType="text/x", Metadata={"m": "v"})["UploadId"]
        five = 5 << 20
        p1, p2, p3 = os.urandom(five), os.urandom(five), b"tail"
        # Out of order uploads, and a part replaced.
        e3 = s3.upload_part(Bucket="multi", Key="parts", UploadId=up, PartNumber=3, Body=p3)["ETag"]
        s3.upload_part(Bucket="multi", Key="parts", UploadId=up, PartNumber=1, Body=b"to be replaced")
        e1 = s3.upload_part(Bucket="multi", Key="parts", UploadId=up, PartNumber=1, Body=p1)["ETag"]
        e2 = s3.upload_part(Bucket="multi", Key="parts", UploadId=up, PartNumber=2, Body=p2)["ETag"]
        listed = s3.list_parts(Bucket="multi", Key="parts", UploadId=up)
        self.assertEqual([(p["PartNumber"], p["Size"]) for p in listed["Parts"]], [(1, five), (2, five), (3, 4)])
        paged = s3.list_parts(Bucket="multi", Key="parts", UploadId=up, MaxParts=2)
        self.assertTrue(paged["IsTruncated"])
        self.assertIn(up, [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="multi")["Uploads"]])
        parts = [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}, {"PartNumber": 3, "ETag": e3}]
        self.assertEqual(
            error_of(s3.complete_multipart_upload, Bucket="multi", Key="parts", UploadId=up, MultipartUpload={"Parts": [parts[1], parts[0], parts[2]]}),
            ("InvalidPartOrder", 400),
        )
        bad = [parts[0], {"PartNumber": 2, "ETag": e3}, parts[2]]
        self.assertEqual(error_of(s3.complete_multipart_upload, Bucket="multi", Key="parts", UploadId=up, MultipartUpload={"Parts": bad}), ("InvalidPart", 400))
        missing = parts + [{"PartNumber": 4, "ETag": e3}]
        self.assertEqual(error_of(s3.complete_multipart_upload, Bucket="multi", Key="parts", UploadId=up, MultipartUpload={"Parts": missing}), ("InvalidPart", 400))
        self.assertEqual(
            error_of(s3.complete_multipart_upload, Bucket="multi", Key="parts", UploadId="0" * 32, MultipartUpload={"Parts": parts}), ("NoSuchUpload", 404)
        )
        # Nothing changed: the upload still completes.
        r = s3.complete_multipart_upload(Bucket="multi", Key="parts", UploadId=up, MultipartUpload={"Parts": parts})
        self.assertTrue(r["ETag"].endswith('-3"'))
        g = s3.get_object(Bucket="multi", Key="parts")
        self.assertEqual(g["Body"].read(), p1 + p2 + p3)
        self.assertEqual((g["ContentType"], g["Metadata"]), ("text/x", {"m": "v"}))
        self.assertNotIn(up, [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="multi").get("Uploads", [])])
        self.assertEqual(error_of(s3.upload_part, Bucket="multi", Key="parts", UploadId=up, PartNumber=1, Body=b"x"), ("NoSuchUpload", 404))

    def test_parts_copied_from_objects(self):
        s3, five = self.s3, 5 << 20
        data = os.urandom(2 * five + 1000)
        s3.put_object(Bucket="multi", Key="copy-src", Body=data)
        up = s3.create_multipart_upload(Bucket="multi", Key="copied")["UploadId"]
        src = {"Bucket": "multi", "Key": "copy-src"}
        r1 = s3.upload_part_copy(Bucket="multi", Key="copied", UploadId=up, PartNumber=1, CopySource=src, CopySourceRange=f"bytes=0-{five - 1}")
        self.assertEqual(r1["CopyPartResult"]["ETag"], f'"{md5(data[:five])}"')
        r2 = s3.upload_part_copy(Bucket="multi", Key="copied", UploadId=up, PartNumber=2, CopySource=src, CopySourceRange=f"bytes={five}-{len(data) - 1}")
        # Bad input changes nothing: a reversed range, one past the end,
        # an unmet condition, a missing source, an unknown upload.
        for rng in ["bytes=9-3", f"bytes=0-{len(data)}", "0-5", "bytes=a-b"]:
            self.assertEqual(error_of(s3.upload_part_copy, Bucket="multi", Key="copied", UploadId=up, PartNumber=3, CopySource=src, CopySourceRange=rng), ("InvalidArgument", 400), rng)
        self.assertEqual(
            error_of(s3.upload_part_copy, Bucket="multi", Key="copied", UploadId=up, PartNumber=3, CopySource=src, CopySourceIfMatch='"0000"'), ("PreconditionFailed", 412)
        )
        self.assertEqual(error_of(s3.upload_part_copy, Bucket="multi", Key="copied", UploadId=up, PartNumber=3, CopySource="multi/nope"), ("NoSuchKey", 404))
        self.assertEqual(error_of(s3.upload_part_copy, Bucket="multi", Key="copied", UploadId="0" * 32, PartNumber=1, CopySource=src), ("NoSuchUpload", 404))
        self.assertEqual([p["PartNumber"] for p in s3.list_parts(Bucket="multi", Key="copied", UploadId=up)["Parts"]], [1, 2])
        parts = [{"PartNumber": 1, "ETag": r1["CopyPartResult"]["ETag"]}, {"PartNumber": 2, "ETag": r2["CopyPartResult"]["ETag"]}]
        s3.complete_multipart_upload(Bucket="multi", Key="copied", UploadId=up, MultipartUpload={"Parts": parts})
        self.assertEqual(s3.get_object(Bucket="multi", Key="copied")["Body"].read(), data)
        # Managed copies of objects past the multipart threshold copy parts.
        cfg = boto3.s3.transfer.TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=5 << 20)
        s3.copy(src, "multi", "copied-by-boto3", Config=cfg)
        self.assertTrue(s3.head_object(Bucket="multi", Key="copied-by-boto3")["ETag"].endswith('-3"'))
        self.assertEqual(s3.get_object(Bucket="multi", Key="copied-by-boto3")["Body"].read(), data)
        aws("s3", "cp", "s3://multi/copy-src", "s3://multi/copied-by-cli")
        self.assertEqual(s3.get_object(Bucket="multi", Key="copied-by-cli")["Body"].read(), data)

    def test_small_parts_and_abort(self):
        s3 = self.s3
        base = live_blobs()
        up = s3.create_multipart_upload(Bucket="multi", Key="small")["UploadId"]
        e1 = s3.upload_part(Bucket="multi", Key="small", UploadId=up, PartNumber=1, Body=b"too small")["ETag"]
        e2 = s3.upload_part(Bucket="multi", Key="small", UploadId=up, PartNumber=2, Body=b"last")["ETag"]
        parts = [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]
        self.assertEqual(error_of(s3.complete_multipart_upload, Bucket="multi", Key="small", UploadId=up, MultipartUpload={"Parts": parts}), ("EntityTooSmall", 400))
        self.assertEqual(error_of(s3.head_object, Bucket="multi", Key="small")[1], 404)
        self.assertEqual(error_of(s3.upload_part, Bucket="multi", Key="small", UploadId=up, PartNumber=10001, Body=b"x")[1], 400)
        s3.abort_multipart_upload(Bucket="multi", Key="small", UploadId=up)
        self.assertEqual(live_blobs(), base)
        self.assertEqual(error_of(s3.abort_multipart_upload, Bucket="multi", Key="small", UploadId=up), ("NoSuchUpload", 404))

    def test_get_and_head_by_part_number(self):
        s3 = self.s3
        p1, p2 = os.urandom(5 << 20), os.urandom(1 << 20)
        up = s3.create_multipart_upload(Bucket="multi", Key="by-part")["UploadId"]
        e1 = s3.upload_part(Bucket="multi", Key="by-part", UploadId=up, PartNumber=1, Body=p1)["ETag"]
        e2 = s3.upload_part(Bucket="multi", Key="by-part", UploadId=up, PartNumber=2, Body=p2)["ETag"]
        parts = [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]
        s3.complete_multipart_upload(Bucket="multi", Key="by-part", UploadId=up, MultipartUpload={"Parts": parts})
        total = len(p1) + len(p2)
        g = s3.get_object(Bucket="multi", Key="by-part", PartNumber=2)
        self.assertEqual((g["Body"].read(), g["ContentRange"], g["PartsCount"]), (p2, f"bytes {len(p1)}-{total - 1}/{total}", 2))
        self.assertEqual(s3.get_object(Bucket="multi", Key="by-part", PartNumber=1)["Body"].read(), p1)
        h = s3.head_object(Bucket="multi", Key="by-part", PartNumber=1)
        self.assertEqual((h["ContentLength"], h["ContentRange"]), (len(p1), f"bytes 0-{len(p1) - 1}/{total}"))
        self.assertEqual(error_of(s3.get_object, Bucket="multi", Key="by-part", PartNumber=3), ("InvalidPartNumber", 416))
        self.assertEqual(error_of(s3.get_object, Bucket="multi", Key="by-part", PartNumber=1, Range="bytes=0-9")[1], 400)
        # An object from one PUT is its own part 1.
        s3.put_object(Bucket="multi", Key="one-put", Body=b"single")
        self.assertEqual(s3.get_object(Bucket="multi", Key="one-put", PartNumber=1)["Body"].read(), b"single")
        self.assertEqual(error_of(s3.get_object, Bucket="multi", Key="one-put", PartNumber=2)[1], 416)

    def test_object_attributes(self):
        s3 = self.s3
        sizes = [5 << 20, 5 << 20, 3]
        up = s3.create_multipart_upload(Bucket="multi", Key="attrs")["UploadId"]
        parts = []
        for n, size in enumerate(sizes, 1):
            e = s3.upload_part(Bucket="multi", Key="attrs", UploadId=up, PartNumber=n, Body=os.urandom(size))["ETag"]
            parts.append({"PartNumber": n, "ETag": e})
        tag = s3.complete_multipart_upload(Bucket="multi", Key="attrs", UploadId=up, MultipartUpload={"Parts": parts})["ETag"]
        everything = ["ETag", "ObjectSize", "StorageClass", "ObjectParts", "Checksum"]
        a = s3.get_object_attributes(Bucket="multi", Key="attrs", ObjectAttributes=everything)
        self.assertEqual((a["ETag"].strip('"'), a["ObjectSize"], a["StorageClass"]), (tag.strip('"'), sum(sizes), "STANDARD"))
        self.assertEqual(a["ObjectParts"]["TotalPartsCount"], 3)
        self.assertEqual([(p["PartNumber"], p["Size"]) for p in a["ObjectParts"]["Parts"]], list(enumerate(sizes, 1)))
        page = s3.get_object_attributes(Bucket="multi", Key="attrs", ObjectAttributes=["ObjectParts"], MaxParts=2)["ObjectParts"]
        self.assertEqual((len(page["Parts"]), page["IsTruncated"], page["NextPartNumberMarker"]), (2, True, 2))
        rest = s3.get_object_attributes(Bucket="multi", Key="attrs", ObjectAttributes=["ObjectParts"], MaxParts=2, PartNumberMarker=2)["ObjectParts"]
        self.assertEqual(([p["PartNumber"] for p in rest["Parts"]], rest["IsTruncated"]), ([3], False))
        # Only what was asked; a single PUT has no parts; a stored checksum is returned.
        s3.put_object(Bucket="multi", Key="attrs-one", Body=b"one", ChecksumAlgorithm="SHA256")
        one = s3.get_object_attributes(Bucket="multi", Key="attrs-one", ObjectAttributes=["ObjectSize", "Checksum", "ObjectParts"])
        self.assertEqual((one["ObjectSize"], "ETag" in one, "ObjectParts" in one), (3, False, False))
        self.assertEqual(one["Checksum"]["ChecksumSHA256"], base64.b64encode(hashlib.sha256(b"one").digest()).decode())
        self.assertEqual(error_of(s3.get_object_attributes, Bucket="multi", Key="nope", ObjectAttributes=["ETag"])[1], 404)

    def test_a_retried_completion_answers_as_the_first(self):
        s3 = self.s3
        up = s3.create_multipart_upload(Bucket="multi", Key="retried", Metadata={"m": "1"})["UploadId"]
        e = s3.upload_part(Bucket="multi", Key="retried", UploadId=up, PartNumber=1, Body=b"only part")["ETag"]
        done = dict(Bucket="multi", Key="retried", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e}]})
        first = s3.complete_multipart_upload(**done)["ETag"]
        self.assertEqual(s3.complete_multipart_upload(**done)["ETag"], first)
        self.assertEqual(s3.head_object(Bucket="multi", Key="retried")["Metadata"], {"m": "1"})
        # Another upload's id, or the same once the key holds another object, is unknown.
        self.assertEqual(error_of(s3.complete_multipart_upload, **dict(done, UploadId="0" * 32))[0], "NoSuchUpload")
        s3.put_object(Bucket="multi", Key="retried", Body=b"newer")
        self.assertEqual(error_of(s3.complete_multipart_upload, **done)[0], "NoSuchUpload")
        self.assertEqual(s3.get_object(Bucket="multi", Key="retried")["Body"].read(), b"newer")


class Auth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s3 = client()
        cls.s3.create_bucket(Bucket="private")
        cls.s3.put_object(Bucket="private", Key="k", Body=b"secret data")

    def test_bad_signatures_and_unknown_keys(self):
        self.assertEqual(error_of(client(sk="wrong" * 8).get_object, Bucket="private", Key="k"), ("SignatureDoesNotMatch", 403))
        self.assertEqual(error_of(client(ak="SKNOSUCHKEY000000000").get_object, Bucket="private", Key="k"), ("InvalidAccessKeyId", 403))
        self.assertEqual(error_of(anonymous().get_object, Bucket="private", Key="k"), ("AccessDenied", 403))
        self.assertEqual(error_of(client(sk="wrong" * 8).put_object, Bucket="private", Key="k", Body=b"overwrite"), ("SignatureDoesNotMatch", 403))
        self.assertEqual(self.s3.get_object(Bucket="private", Key="k")["Body"].read(), b"secret data")

    def test_signatures_scoped_to_another_region_or_service_are_refused(self):
        # The signature itself is valid (s3s checks it with the region the
        # request names); the scope must still be this server's.
        other = boto3.client("s3", endpoint_url=S3, aws_access_key_id=AK, aws_secret_access_key=SK, region_name="eu-west-1", config=Config(retries={"max_attempts": 1}))
        self.assertEqual(error_of(other.get_object, Bucket="private", Key="k"), ("AuthorizationHeaderMalformed", 400))
        self.assertEqual(error_of(other.put_object, Bucket="private", Key="k", Body=b"overwrite"), ("AuthorizationHeaderMalformed", 400))
        self.assertEqual(self.s3.get_object(Bucket="private", Key="k")["Body"].read(), b"secret data")
        v4 = boto3.client("s3", endpoint_url=S3, aws_access_key_id=AK, aws_secret_access_key=SK, region_name="eu-west-1", config=Config(signature_version="s3v4"))
        url = v4.generate_presigned_url("get_object", Params={"Bucket": "private", "Key": "k"}, ExpiresIn=60)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url)
        self.assertEqual(e.exception.code, 400)
        self.assertIn(b"AuthorizationHeaderMalformed", e.exception.read())

    def test_presigned_urls_last_at_most_seven_days(self):
        v4 = client(signature_version="s3v4")
        week = v4.generate_presigned_url("get_object", Params={"Bucket": "private", "Key": "k"}, ExpiresIn=7 * 24 * 3600)
        self.assertEqual(urllib.request.urlopen(week).read(), b"secret data")
        longer = v4.generate_presigned_url("get_object", Params={"Bucket": "private", "Key": "k"}, ExpiresIn=7 * 24 * 3600 + 1)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(longer)
        self.assertEqual(e.exception.code, 400)
        self.assertIn(b"AuthorizationQueryParametersError", e.exception.read())
        put = v4.generate_presigned_url("put_object", Params={"Bucket": "private", "Key": "late"}, ExpiresIn=30 * 24 * 3600)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(put, data=b"x", method="PUT"))
        self.assertEqual(e.exception.code, 400)
        self.assertEqual(error_of(self.s3.head_object, Bucket="private", Key="late"), ("404", 404))

    def test_presigned_urls(self):
        v4 = client(signature_version="s3v4")
        url = v4.generate_presigned_url("get_object", Params={"Bucket": "private", "Key": "k"}, ExpiresIn=60)
        self.assertIn("X-Amz-Signature=", url)
        self.assertEqual(urllib.request.urlopen(url).read(), b"secret data")
        sig = url.split("X-Amz-Signature=")[1][:64]
        tampered = url.replace(sig, ("0" if sig[0] != "0" else "1") + sig[1:])
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(tampered)
        self.assertEqual(e.exception.code, 403)
        self.assertIn(b"SignatureDoesNotMatch", e.exception.read())
        put = v4.generate_presigned_url("put_object", Params={"Bucket": "private", "Key": "via-url"}, ExpiresIn=60)
        urllib.request.urlopen(urllib.request.Request(put, data=b"uploaded", method="PUT")).read()
        self.assertEqual(self.s3.get_object(Bucket="private", Key="via-url")["Body"].read(), b"uploaded")
        short = v4.generate_presigned_url("get_object", Params={"Bucket": "private", "Key": "k"}, ExpiresIn=1)
        time.sleep(2.5)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(short)
        self.assertEqual(e.exception.code, 403)
        self.assertIn(b"AccessDenied", e.exception.read())
        out = aws("s3", "presign", "s3://private/k", "--expires-in", "60").stdout.strip()
        self.assertEqual(urllib.request.urlopen(out).read(), b"secret data")

    def test_keys_and_grants(self):
        made = json.loads(strata("key", "create", "--name", "reader", "--json"))
        ak, sk = made["access_key_id"], made["secret_access_key"]
        self.assertIn(ak, strata("key", "list"))
        self.assertNotIn(sk, strata("key", "list", "--json"))
        other = client(ak=ak, sk=sk)
        self.assertEqual(error_of(other.get_object, Bucket="private", Key="k"), ("AccessDenied", 403))
        self.assertEqual(other.list_buckets()["Buckets"], [])
        strata("key", "grant", ak, "private", "read")
        self.assertEqual(other.get_object(Bucket="private", Key="k")["Body"].read(), b"secret data")
        self.assertEqual([b["Name"] for b in other.list_buckets()["Buckets"]], ["private"])
        self.assertEqual(error_of(other.put_object, Bucket="private", Key="k2", Body=b"x"), ("AccessDenied", 403))
        self.assertEqual(error_of(other.delete_object, Bucket="private", Key="k"), ("AccessDenied", 403))
        # Copying out of a bucket needs read on it, into one needs write.
        other.create_bucket(Bucket="readers-own")
        other.copy_object(Bucket="readers-own", Key="copy", CopySource="private/k")
        self.assertEqual(error_of(other.copy_object, Bucket="private", Key="copy", CopySource="readers-own/copy"), ("AccessDenied", 403))
        strata("key", "grant", ak, "private", "readwrite")
        other.put_object(Bucket="private", Key="k2", Body=b"now allowed")
        strata("key", "grant", ak, "private", "none")
        self.assertEqual(error_of(other.get_object, Bucket="private", Key="k2"), ("AccessDenied", 403))
        # The admin reads the other key's bucket; a deleted key stops working.
        self.assertEqual(self.s3.get_object(Bucket="readers-own", Key="copy")["Body"].read(), b"secret data")
        strata("key", "delete", ak)
        self.assertEqual(error_of(other.get_object, Bucket="readers-own", Key="copy"), ("InvalidAccessKeyId", 403))
        # A key that expires stops working on the S3 port too.
        brief = json.loads(strata("key", "create", "--name", "brief", "--expires-in", "2", "--json"))
        short_lived = client(ak=brief["access_key_id"], sk=brief["secret_access_key"])
        short_lived.list_buckets()
        time.sleep(2.5)
        self.assertEqual(error_of(short_lived.list_buckets)[0], "ExpiredToken")

    def test_public_buckets_allow_anonymous_reads_only(self):
        self.s3.create_bucket(Bucket="open")
        self.s3.put_object(Bucket="open", Key="page.html", Body=b"<p>hi</p>", ContentType="text/html")
        anon = anonymous()
        self.assertEqual(error_of(anon.get_object, Bucket="open", Key="page.html"), ("AccessDenied", 403))
        strata("bucket", "public", "open")
        self.assertEqual(anon.get_object(Bucket="open", Key="page.html")["Body"].read(), b"<p>hi</p>")
        self.assertEqual(urllib.request.urlopen(f"{S3}/open/page.html").read(), b"<p>hi</p>")
        self.assertEqual([o["Key"] for o in anon.list_objects_v2(Bucket="open")["Contents"]], ["page.html"])
        self.assertEqual(error_of(anon.put_object, Bucket="open", Key="x", Body=b"x"), ("AccessDenied", 403))
        self.assertEqual(error_of(anon.delete_object, Bucket="open", Key="page.html"), ("AccessDenied", 403))
        grants = self.s3.get_bucket_acl(Bucket="open")["Grants"]
        self.assertTrue(any(g["Grantee"].get("URI", "").endswith("AllUsers") for g in grants))
        # A bucket ACL replaces the switch: private is private again.
        self.s3.put_bucket_acl(Bucket="open", ACL="private")
        self.assertEqual(error_of(anon.get_object, Bucket="open", Key="page.html"), ("AccessDenied", 403))
        self.assertEqual(error_of(anon.list_objects_v2, Bucket="open"), ("AccessDenied", 403))


class Lifecycle(unittest.TestCase):
    def test_expiration_rules_map_onto_blob_ttls(self):
        s3 = client()
        s3.create_bucket(Bucket="aging")
        s3.put_object(Bucket="aging", Key="logs/old", Body=b"written before the rule")
        s3.put_object(Bucket="aging", Key="keep/x", Body=b"not covered")
        rules = {"Rules": [{"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 1}}]}
        s3.put_bucket_lifecycle_configuration(Bucket="aging", LifecycleConfiguration=rules)
        got = s3.get_bucket_lifecycle_configuration(Bucket="aging")["Rules"]
        self.assertEqual((got[0]["ID"], got[0]["Expiration"]["Days"], got[0]["Filter"]["Prefix"]), ("logs", 1, "logs/"))
        s3.put_object(Bucket="aging", Key="logs/new", Body=b"x")
        # The blob behind the name carries the expiry as its TTL.
        for key in ["logs/new", "logs/old"]:
            self.assertIn("expiry-date", s3.head_object(Bucket="aging", Key=key).get("Expiration", ""), key)
        self.assertNotIn("Expiration", s3.head_object(Bucket="aging", Key="keep/x"))
        # A date rule already past expires the objects at once.
        midnight = datetime.datetime.now(datetime.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        past = {"Rules": [{"ID": "gone", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Date": midnight}}]}
        s3.put_bucket_lifecycle_configuration(Bucket="aging", LifecycleConfiguration=past)
        self.assertEqual(error_of(s3.get_object, Bucket="aging", Key="logs/old"), ("NoSuchKey", 404))
        self.assertEqual([o["Key"] for o in s3.list_objects_v2(Bucket="aging")["Contents"]], ["keep/x"])
        s3.delete_bucket_lifecycle(Bucket="aging")
        self.assertEqual(error_of(s3.get_bucket_lifecycle_configuration, Bucket="aging"), ("NoSuchLifecycleConfiguration", 404))
        bad = {"Rules": [{"ID": "t", "Status": "Enabled", "Filter": {"Prefix": ""}, "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}]}
        self.assertEqual(error_of(s3.put_bucket_lifecycle_configuration, Bucket="aging", LifecycleConfiguration=bad)[1], 501)

    def test_aws_cli_lifecycle(self):
        aws("s3", "mb", "s3://aging-cli")
        doc = json.dumps({"Rules": [{"ID": "all", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": 30}}]})
        aws("s3api", "put-bucket-lifecycle-configuration", "--bucket", "aging-cli", "--lifecycle-configuration", doc)
        out = json.loads(aws("s3api", "get-bucket-lifecycle-configuration", "--bucket", "aging-cli").stdout)
        self.assertEqual(out["Rules"][0]["Expiration"]["Days"], 30)


    def test_expiration_never_destroys_a_version_or_a_retained_object(self):
        # Lifecycle rules used to give blobs TTLs in versioned and locked
        # buckets too, so every version went, COMPLIANCE retention or not.
        s3 = client()
        s3.create_bucket(Bucket="aging-locked", ObjectLockEnabledForBucket=True)
        until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
        locked = s3.put_object(Bucket="aging-locked", Key="k", Body=b"retained", ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=until)["VersionId"]
        s3.create_bucket(Bucket="aging-versioned")
        s3.put_object(Bucket="aging-versioned", Key="k", Body=b"before versioning")
        s3.put_bucket_lifecycle_configuration(Bucket="aging-versioned", LifecycleConfiguration={"Rules": [{"ID": "a", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": 1}}]})
        s3.put_bucket_versioning(Bucket="aging-versioned", VersioningConfiguration={"Status": "Enabled"})
        kept = s3.put_object(Bucket="aging-versioned", Key="k", Body=b"kept")["VersionId"]
        self.assertNotIn("Expiration", s3.head_object(Bucket="aging-versioned", Key="k"), "a version gets no expiry of its own")
        midnight = datetime.datetime.now(datetime.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        past = {"Rules": [{"ID": "gone", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Date": midnight}}]}
        for b in ["aging-locked", "aging-versioned"]:
            s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration=past)
        time.sleep(1)
        self.assertEqual(s3.get_object(Bucket="aging-locked", Key="k", VersionId=locked)["Body"].read(), b"retained")
        self.assertEqual(s3.get_object(Bucket="aging-versioned", Key="k", VersionId=kept)["Body"].read(), b"kept")
        older = [v["VersionId"] for v in s3.list_object_versions(Bucket="aging-versioned")["Versions"] if v["VersionId"] != kept]
        self.assertEqual(s3.get_object(Bucket="aging-versioned", Key="k", VersionId=older[0])["Body"].read(), b"before versioning")


class Addressing(unittest.TestCase):
    def test_virtual_host_style(self):
        vs3 = boto3.client(
            "s3",
            endpoint_url=f"http://{DOMAIN}:{PORT}",
            aws_access_key_id=AK,
            aws_secret_access_key=SK,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "virtual"}, retries={"max_attempts": 1}),
        )
        vs3.create_bucket(Bucket="vhost")
        vs3.put_object(Bucket="vhost", Key="a/b", Body=b"virtual")
        self.assertEqual(vs3.get_object(Bucket="vhost", Key="a/b")["Body"].read(), b"virtual")
        # The same object path-style.
        self.assertEqual(client().get_object(Bucket="vhost", Key="a/b")["Body"].read(), b"virtual")
        self.assertEqual([o["Key"] for o in vs3.list_objects_v2(Bucket="vhost")["Contents"]], ["a/b"])

    def test_aws_cli_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "f.txt")
            with open(src, "w") as f:
                f.write("from the aws cli")
            aws("s3", "mb", "s3://cli")
            aws("s3", "cp", src, "s3://cli/dir/f.txt")
            self.assertIn("dir/f.txt", aws("s3", "ls", "s3://cli", "--recursive").stdout)
            aws("s3", "cp", "s3://cli/dir/f.txt", os.path.join(d, "back.txt"))
            with open(os.path.join(d, "back.txt")) as f:
                self.assertEqual(f.read(), "from the aws cli")
            aws("s3", "rm", "s3://cli", "--recursive")
            aws("s3", "rb", "s3://cli")
            r = aws("s3", "ls", "s3://cli", check=False)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("NoSuchBucket", r.stderr)


class Notifications(unittest.TestCase):
    """S3 bucket notifications to a signed webhook (docs/events.md)."""

    def test_bucket_notifications_reach_a_signed_webhook_through_their_filters(self):
        import http.server
        import threading

        s3, b = client(), "notify-" + os.urandom(2).hex()
        target, secret = "hook-" + os.urandom(2).hex(), "s3cr3t-" + os.urandom(8).hex()
        posts, refused = [], []

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                # The first delivery is refused: the sender must retry it.
                if not refused:
                    refused.append(body)
                    self.send_response(503)
                    self.end_headers()
                    return
                posts.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        try:
            strata("events", "target", "add", target, "--webhook", f"http://127.0.0.1:{receiver.server_port}/events", "--secret", secret)
            s3.create_bucket(Bucket=b)
            arn = f"arn:strata:sqs:::{target}"
            prefix_suffix = {"Key": {"FilterRules": [{"Name": "prefix", "Value": "images/"}, {"Name": "suffix", "Value": ".jpg"}]}}
            config = {
                "QueueConfigurations": [
                    {"Id": "jpg-created", "QueueArn": arn, "Events": ["s3:ObjectCreated:*"], "Filter": prefix_suffix},
                    {"Id": "removed", "QueueArn": arn, "Events": ["s3:ObjectRemoved:Delete"]},
                ]
            }
            self.assertEqual(s3.get_bucket_notification_configuration(Bucket=b).get("QueueConfigurations", []), [])
            s3.put_bucket_notification_configuration(Bucket=b, NotificationConfiguration=config)
            # Bad input: S3's code, the configuration unchanged.
            bad = [
                {"QueueConfigurations": [{"QueueArn": "arn:strata:sqs:::no-such-target", "Events": ["s3:ObjectCreated:*"]}]},
                {"QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectMaybe:*"]}]},
                {"QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"], "Filter": {"Key": {"FilterRules": [{"Name": "middle", "Value": "x"}]}}}]},
                {"QueueConfigurations": [{"Id": "same", "QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}, {"Id": "same", "QueueArn": arn, "Events": ["s3:ObjectRemoved:*"]}]},
            ]
            for c in bad:
                self.assertEqual(error_of(s3.put_bucket_notification_configuration, Bucket=b, NotificationConfiguration=c), ("InvalidArgument", 400), c)
            got = s3.get_bucket_notification_configuration(Bucket=b)["QueueConfigurations"]
            self.assertEqual([(q["Id"], q["QueueArn"], q["Events"]) for q in got], [("jpg-created", arn, ["s3:ObjectCreated:*"]), ("removed", arn, ["s3:ObjectRemoved:Delete"])])
            self.assertEqual(got[0]["Filter"], prefix_suffix)
            self.assertEqual(error_of(s3.get_bucket_notification_configuration, Bucket="no-such-bucket-here"), ("NoSuchBucket", 404))
            # A target a notification names cannot be removed.
            r = subprocess.run([BIN, "events", "target", "remove", target, "--server", ADMIN], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(b, r.stderr)

            s3.put_object(Bucket=b, Key="images/a.jpg", Body=b"a")  # sent
            s3.put_object(Bucket=b, Key="images/b.png", Body=b"b")  # wrong suffix
            s3.put_object(Bucket=b, Key="docs/c.jpg", Body=b"c")  # wrong prefix
            s3.copy_object(Bucket=b, Key="images/d.jpg", CopySource={"Bucket": b, "Key": "images/a.jpg"})  # sent
            up = s3.create_multipart_upload(Bucket=b, Key="images/e.jpg")["UploadId"]
            etag = s3.upload_part(Bucket=b, Key="images/e.jpg", UploadId=up, PartNumber=1, Body=b"e" * 100)["ETag"]
            s3.complete_multipart_upload(Bucket=b, Key="images/e.jpg", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})  # sent
            s3.put_object_tagging(Bucket=b, Key="images/a.jpg", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})  # type not selected
            s3.delete_object(Bucket=b, Key="docs/c.jpg")  # sent
            s3.delete_object(Bucket=b, Key="images/b.png")  # sent
            want = [
                ("s3:ObjectCreated:Put", "images/a.jpg"),
                ("s3:ObjectCreated:Copy", "images/d.jpg"),
                ("s3:ObjectCreated:CompleteMultipartUpload", "images/e.jpg"),
                ("s3:ObjectRemoved:Delete", "docs/c.jpg"),
                ("s3:ObjectRemoved:Delete", "images/b.png"),
            ]

            def received():
                seen, out = set(), []
                for _, body in list(posts):
                    for e in json.loads(body):
                        if e["id"] not in seen:
                            seen.add(e["id"])
                            out.append(e)
                return out

            deadline = time.time() + 30
            while len(received()) < len(want) and time.time() < deadline:
                time.sleep(0.05)
            events = received()
            self.assertEqual([(e["type"], e["subject"]["key"]) for e in events], want)
            self.assertTrue(refused, "the first delivery was refused and retried")
            self.assertTrue(all(e["subject"]["bucket"] == b and e["who"] == AK and e["v"] == 1 for e in events), events)
            self.assertEqual(events[0]["subject"]["size"], 1)
            self.assertEqual([e["seq"] for e in events], sorted(e["seq"] for e in events))
            # Every POST is signed: HMAC-SHA256 over the timestamp and the body.
            for headers, body in posts:
                h = {k.lower(): v for k, v in headers.items()}
                mac = hmac.new(secret.encode(), h["x-strata-timestamp"].encode() + b"." + body, hashlib.sha256).hexdigest()
                self.assertEqual(h["x-strata-signature"], "v1=" + mac)
                forged = hmac.new(secret.encode(), h["x-strata-timestamp"].encode() + b"." + body + b" ", hashlib.sha256).hexdigest()
                self.assertNotEqual(h["x-strata-signature"], "v1=" + forged)
            # The target moves past every event, sent or filtered out.
            deadline = time.time() + 10
            while True:
                status = json.loads(strata("events", "status", "--json"))
                mine = [t for t in status["targets"] if t["target"] == target][0]
                if mine["delivered_seq"] == status["produced"] or time.time() > deadline:
                    break
                time.sleep(0.1)
            self.assertEqual((mine["delivered_seq"], mine["pending"]), (status["produced"], 0))
            self.assertGreaterEqual(mine["failures"], 1)
            self.assertNotIn(secret, json.dumps(status))
            # An empty configuration turns the notifications off; then the target can go.
            s3.put_bucket_notification_configuration(Bucket=b, NotificationConfiguration={})
            self.assertEqual(s3.get_bucket_notification_configuration(Bucket=b).get("QueueConfigurations", []), [])
            strata("events", "target", "remove", target)
            self.assertNotIn(target, [t["target"] for t in json.loads(strata("events", "status", "--json"))["targets"]])
        finally:
            receiver.shutdown()
            receiver.server_close()


class Metrics(unittest.TestCase):
    def test_s3_operations_are_counted(self):
        client().list_buckets()
        text = admin_get("/metrics").read().decode()
        self.assertIn('strata_s3_requests_total{op="ListBuckets",status="200"}', text)
        self.assertIn("strata_s3_objects ", text)


class Raw:
    def __init__(self, status, body):
        self.status, self.body = status, body


def signed(method, path, body=b"", payload_hash=None, headers=None, send=None):
    """A request signed by botocore's SigV4 signer but sent as is (no
    client-side validation); `payload_hash` is the x-amz-content-sha256 value
    signed (the body's SHA-256 unless given), `send` the bytes sent."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    h = {"x-amz-content-sha256": payload_hash or hashlib.sha256(body).hexdigest(), **(headers or {})}
    req = AWSRequest(method=method, url=f"{S3}{path}", data=body, headers=h)
    SigV4Auth(Credentials(AK, SK), "s3", "us-east-1").add_auth(req)
    prepared = req.prepare()
    data = body if send is None else send
    r = urllib.request.Request(prepared.url, data=data or None, method=method, headers={**dict(prepared.headers), "Content-Length": str(len(data))})
    try:
        with urllib.request.urlopen(r) as resp:
            return Raw(resp.status, resp.read())
    except urllib.error.HTTPError as e:
        return Raw(e.code, e.read())


def crc32c(data):
    """Base64 of the CRC32C (Castagnoli) of `data`, bit by bit."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return base64.b64encode((crc ^ 0xFFFFFFFF).to_bytes(4, "big")).decode()


def trailer_put(path, data, trailer, value):
    """A PUT of an aws-chunked body with an unsigned payload and a checksum
    trailer (STREAMING-UNSIGNED-PAYLOAD-TRAILER)."""
    body = f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n" + f"{trailer}:{value}\r\n\r\n".encode()
    headers = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data)), "x-amz-trailer": trailer}
    return signed("PUT", path, payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER", headers=headers, send=body)


def streaming_put(path, data, chunk=64 * 1024, tamper=False):
    """A PUT with a SigV4 streaming payload (STREAMING-AWS4-HMAC-SHA256-PAYLOAD):
    aws-chunked body, each chunk signed, chained from the seed signature."""
    import hmac

    def hm(key, msg):
        return hmac.new(key, msg.encode(), hashlib.sha256).digest()

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{stamp[:8]}/us-east-1/s3/aws4_request"
    key = hm(hm(hm(hm(("AWS4" + SK).encode(), stamp[:8]), "us-east-1"), "s3"), "aws4_request")
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)] + [b""]
    # The encoded length is needed before signing: compute it with dummy signatures.
    encoded_len = sum(len(f"{len(c):x};chunk-signature={'0' * 64}\r\n") + len(c) + 2 for c in chunks)
    headers = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data)), "x-amz-date": stamp}
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method="PUT", url=f"{S3}{path}", data=b"", headers={"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "Content-Length": str(encoded_len), **headers})
    auth = SigV4Auth(Credentials(AK, SK), "s3", "us-east-1")
    auth._timestamp = lambda: stamp  # noqa: E731 (botocore reads the time once per signing)
    req.context["timestamp"] = stamp
    auth.add_auth(req)
    prepared = req.prepare()
    prev = prepared.headers["Authorization"].split("Signature=")[1]
    stamp = prepared.headers["X-Amz-Date"]
    body = b""
    for i, c in enumerate(chunks):
        sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", stamp, scope, prev, hashlib.sha256(b"").hexdigest(), hashlib.sha256(c).hexdigest()])
        sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        if tamper and i == 1:
            sig = ("0" if sig[0] != "0" else "1") + sig[1:]
        body += f"{len(c):x};chunk-signature={sig}\r\n".encode() + c + b"\r\n"
        prev = sig
    assert len(body) == encoded_len
    hdrs = {k: v for k, v in prepared.headers.items()}
    r = urllib.request.Request(prepared.url, data=body, method="PUT", headers=hdrs)
    try:
        with urllib.request.urlopen(r) as resp:
            return Raw(resp.status, resp.read())
    except urllib.error.HTTPError as e:
        return Raw(e.code, e.read())


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], *sys.argv[1:]], exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
