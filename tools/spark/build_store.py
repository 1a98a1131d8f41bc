#!/usr/bin/env python3
"""Builds a Strata read-only store version on Spark (Spock section 4.2.1).

The output is byte-identical to `strata kv build` for the same input and
ring (docs/formats.md, "Read-only store chunk files" and ".metadata"):

  spark-submit tools/spark/build_store.py --store NAME --input PATH --out DIR \\
      [--ring ring.json | --partitions P --chunks C] [--format csv|jsonl|parquet] \\
      [--key-field key] [--value-field value]

With --ring (from `strata kv ring export|plan`), every record goes to each
replica of its partition and DIR gets one folder per node, node-<id>/, each
with its chunk files and .metadata. Without it, DIR is one single-node
version, as `strata kv build --partitions P --chunks C` writes it.

The job is Voldemort's: the map side hashes every key with MD5 and routes it
through the ring to its (partition, replica, chunk) buckets; the shuffle
groups buckets and sorts each by (8-byte digest prefix, raw key); each task
writes whole chunks, computing their CRC32C as it goes; the driver writes
the chunks no record reached and every node's .metadata. DIR must be on a
filesystem every executor and the driver share (local mode: any directory).

Input: Parquet (string, binary and integer columns), CSV with a header row,
or JSON Lines (strings are their UTF-8 bytes, other JSON values their compact
text with object keys in input order, null refused). A duplicate key fails
the build, naming it.
"""

import argparse
import json
import os
import struct
import sys

import crc32c
from pyspark.sql import SparkSession, functions as F, types as T

INDEX_MAGIC = b"STRKVIDX"
DATA_MAGIC = b"STRKVDAT"
FORMAT_VERSION = 1
ENTRY_BYTES = 16
DATA_HEADER = DATA_MAGIC + struct.pack("<H", FORMAT_VERSION) + b"\0" * 6


def index_header(entries):
    return INDEX_MAGIC + struct.pack("<HHIQ", FORMAT_VERSION, ENTRY_BYTES, 0, entries)


def ring_checksum(table):
    crc = crc32c.crc32c(struct.pack("<I", len(table)))
    for nodes in table:
        crc = crc32c.crc32c(struct.pack("<I", len(nodes)), value=crc)
        for n in nodes:
            crc = crc32c.crc32c(struct.pack("<I", n), value=crc)
    return crc


def chunk_name(partition, replica, chunk):
    return f"{partition}_{replica}_{chunk}"


def as_bytes(df, name):
    """The column `name` as raw bytes, as the Rust builder reads it."""
    field = next((f for f in df.schema.fields if f.name == name), None)
    if field is None:
        sys.exit(f"error: no column {name!r} in the input")
    t = field.dataType
    if isinstance(t, T.BinaryType):
        return F.col(name)
    if isinstance(t, T.StringType):
        return F.encode(F.col(name), "UTF-8")
    if isinstance(t, (T.IntegerType, T.LongType, T.ShortType, T.ByteType)):
        return F.encode(F.col(name).cast("string"), "UTF-8")
    sys.exit(f"error: column {name!r} is {t.simpleString()}; use a string, binary or integer column")


def read_input(spark, path, fmt, key_field, value_field):
    if fmt is None:
        ext = os.path.splitext(path)[1].lstrip(".")
        fmt = {"csv": "csv", "jsonl": "jsonl", "ndjson": "jsonl", "json": "jsonl", "parquet": "parquet", "pq": "parquet"}.get(ext)
        if fmt is None:
            sys.exit(f"error: input format {ext!r}: use csv, jsonl or parquet")
    if fmt == "parquet":
        df = spark.read.parquet(path)
    elif fmt == "csv":
        # RFC 4180 as the csv crate reads it: "" escapes a quote, fields may
        # span lines, an empty field is the empty string (never null).
        df = (
            spark.read.option("header", True)
            .option("escape", '"')
            .option("multiLine", True)
            .option("nullValue", "\u0000strata-no-null\u0000")
            .option("emptyValue", "")
            .csv(path)
        )
        # The csv crate reads an empty field as the empty string; Spark as null.
        df = df.select(*[F.coalesce(F.col(c), F.lit("")).alias(c) for c in df.columns])
    elif fmt == "jsonl":
        lines = spark.read.text(path).where(F.trim(F.col("value")) != "")
        df = lines.select(
            F.get_json_object("value", f"$.{key_field}").alias(key_field),
            F.get_json_object("value", f"$.{value_field}").alias(value_field),
        )
    else:
        sys.exit(f"error: input format {fmt!r}: use csv, jsonl or parquet")
    return df.select(as_bytes(df, key_field).alias("k"), as_bytes(df, value_field).alias("v"))


def write_chunk(directory, name, rows):
    """Writes one chunk from (prefix, key, value) in order; returns its stats."""
    index = bytearray()
    records = collided = 0
    data_path = os.path.join(directory, name + ".data")
    with open(data_path, "wb") as data:
        data.write(DATA_HEADER)
        data_crc = crc32c.crc32c(DATA_HEADER)
        pos = len(DATA_HEADER)
        group_prefix, group, last_key = None, [], None

        def flush():
            nonlocal pos, data_crc, collided
            if group_prefix is None:
                return
            index.extend(group_prefix)
            index.extend(struct.pack("<Q", pos))
            body = struct.pack("<I", len(group)) + b"".join(group)
            data.write(body)
            data_crc = crc32c.crc32c(body, value=data_crc)
            pos += len(body)
            if len(group) > 1:
                collided += 1

        for prefix, key, value in rows:
            if prefix == group_prefix and key == last_key:
                raise ValueError(f"duplicate key {key!r}")
            if prefix != group_prefix:
                flush()
                group_prefix, group = prefix, []
            group.append(struct.pack("<II", len(key), len(value)) + key + value)
            last_key = key
            records += 1
        flush()
        data.flush()
        os.fsync(data.fileno())
    entries = len(index) // ENTRY_BYTES
    index_bytes = index_header(entries) + bytes(index)
    with open(os.path.join(directory, name + ".index"), "wb") as f:
        f.write(index_bytes)
        f.flush()
        os.fsync(f.fileno())
    return {
        "records": records,
        "collided": collided,
        "index": (len(index_bytes), crc32c.crc32c(index_bytes)),
        "data": (pos, data_crc),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--format", choices=["csv", "jsonl", "parquet"])
    ap.add_argument("--key-field", default="key")
    ap.add_argument("--value-field", default="value")
    ap.add_argument("--ring", help="ring file from `strata kv ring export|plan`")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=2)
    a = ap.parse_args(argv)

    if a.ring:
        with open(a.ring) as f:
            ring = json.load(f)
        if ring.get("format") != 1 or ring_checksum(ring["table"]) != ring["ring"]:
            sys.exit(f"error: {a.ring}: not a ring file of format 1, or its checksum does not match")
        store = ring["store"]
        if store["name"] != a.store:
            sys.exit(f"error: the ring file is for store {store['name']!r}, not {a.store!r}")
        table = ring["table"]
    else:
        store = {"name": a.store, "partitions": a.partitions, "replication": 1, "chunks": a.chunks}
        table = None
    P, R, C = store["partitions"], store["replication"], store["chunks"]
    if os.path.isdir(a.out) and os.listdir(a.out):
        sys.exit(f"error: {a.out} is not empty: a version is built into a new directory")

    def folder(p, r):
        return os.path.join(a.out, f"node-{table[p][r]}") if table else a.out

    os.makedirs(a.out, exist_ok=True)
    for node in sorted({n for row in table for n in row} if table else []):
        os.makedirs(os.path.join(a.out, f"node-{node}"), exist_ok=True)

    spark = SparkSession.builder.appName(f"strata-kv-build-{a.store}").getOrCreate()
    df = read_input(spark, a.input, a.format, a.key_field, a.value_field)
    nulls = df.where(F.col("k").isNull() | F.col("v").isNull()).limit(1).count()
    if nulls:
        sys.exit("error: a record has no key or no value (a null or missing field)")

    # MD5 as hex; the chunk from its first 4 bytes, the ring partition from
    # its last 8: (pos * P) >> 64 computed exactly in two 32-bit halves.
    h = F.md5(F.col("k"))
    word = lambda start: F.conv(F.substring(h, start, 8), 16, 10).cast("long")  # noqa: E731
    hi, lo = word(17), word(25)
    part = F.shiftright(hi * P + F.shiftright(lo * P, 32), 32)
    keyed = df.select(
        "k",
        "v",
        F.unhex(F.substring(h, 1, 16)).alias("prefix"),
        (word(1) % C).alias("c"),
        part.alias("p"),
    )
    replicas = spark.createDataFrame([(p, r) for p in range(P) for r in range(R)], "p long, r long")
    routed = keyed.join(F.broadcast(replicas), "p").withColumn("bucket", (F.col("p") * R + F.col("r")) * C + F.col("c"))
    buckets = P * R * C
    shuffled = routed.repartition(min(buckets, 256), "bucket").sortWithinPartitions("bucket", "prefix", "k")

    out_table = table

    def write_partition(rows):
        it = iter(rows)
        row = next(it, None)
        results = []
        while row is not None:
            bucket = row["bucket"]

            def same_bucket():
                nonlocal row
                while row is not None and row["bucket"] == bucket:
                    yield (bytes(row["prefix"]), bytes(row["k"]), bytes(row["v"]))
                    row = next(it, None)

            p, r, c = bucket // (R * C), (bucket // C) % R, bucket % C
            d = os.path.join(a.out, f"node-{out_table[p][r]}") if out_table else a.out
            st = write_chunk(d, chunk_name(p, r, c), same_bucket())
            results.append((bucket, st["records"], st["collided"], st["index"][0], st["index"][1], st["data"][0], st["data"][1]))
        return iter(results)

    try:
        stats = shuffled.select("bucket", "prefix", "k", "v").rdd.mapPartitions(write_partition).collect()
    except Exception as e:  # noqa: BLE001 - a task's error arrives wrapped
        text = str(e)
        dup = text[text.find("duplicate key") :].splitlines()[0] if "duplicate key" in text else None
        spark.stop()
        sys.exit(f"error: {dup}" if dup else f"error: the Spark job failed: {text[:2000]}")
    spark.stop()

    by_bucket = {s[0]: s for s in stats}
    folders = {}
    for bucket in range(buckets):
        p, r, c = bucket // (R * C), (bucket // C) % R, bucket % C
        d = folder(p, r)
        name = chunk_name(p, r, c)
        s = by_bucket.get(bucket)
        if s is None:
            st = write_chunk(d, name, [])
            s = (bucket, 0, 0, st["index"][0], st["index"][1], st["data"][0], st["data"][1])
        f = folders.setdefault(table[p][r] if table else None, {"files": [], "records": 0, "collided": 0, "dir": d})
        f["files"].append({"name": name + ".data", "bytes": s[5], "crc32c": s[6]})
        f["files"].append({"name": name + ".index", "bytes": s[3], "crc32c": s[4]})
        f["records"] += s[1]
        f["collided"] += s[2]

    records = 0
    for node, f in sorted(folders.items(), key=lambda x: -1 if x[0] is None else x[0]):
        files = sorted(f["files"], key=lambda x: x["name"].encode())
        crc = 0
        for x in files:
            crc = crc32c.crc32c(x["name"].encode() + struct.pack("<QI", x["bytes"], x["crc32c"]), value=crc)
        meta = {"format": 1, "store": {"name": store["name"], "partitions": P, "replication": R, "chunks": C}, "hash": "md5"}
        if node is not None:
            meta["node"] = node
            meta["ring"] = ring_checksum(table)
        meta.update({"records": f["records"], "collided_prefixes": f["collided"], "files": files, "checksum": crc})
        path = os.path.join(f["dir"], ".metadata")
        with open(path, "wb") as out:
            out.write(json.dumps(meta, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
            out.flush()
            os.fsync(out.fileno())
        records += f["records"]
    print(json.dumps({"store": a.store, "out": a.out, "buckets": buckets, "nodes": len(folders) if table else 0, "tuples": records}))


if __name__ == "__main__":
    main()
