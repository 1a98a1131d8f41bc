#!/usr/bin/env bash
# `strata bench s3` against MinIO: installs the pinned MinIO below with
# `go install` (the Go module proxy serves it; Go 1.24 or later is needed),
# builds Strata in release mode, and prints one table. Arguments are passed
# on to `strata bench s3` (for example --seconds 8 or --sizes 4KiB,1MiB).
set -euo pipefail
cd "$(dirname "$0")/.."

MINIO_MODULE=github.com/minio/minio
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c   # the module proxy's latest on 2026-11-23
MINIO_BIN="$PWD/target/minio/$MINIO_VERSION/minio"

if [ ! -x "$MINIO_BIN" ]; then
    if ! command -v go >/dev/null 2>&1; then
        echo "error: Go is needed to install MinIO (go install $MINIO_MODULE@$MINIO_VERSION)" >&2
        exit 1
    fi
    echo "installing MinIO $MINIO_VERSION with go install (a few minutes the first time)..." >&2
    GOBIN="$(dirname "$MINIO_BIN")" GOFLAGS=-mod=mod go install "$MINIO_MODULE@$MINIO_VERSION"
fi
cargo build --release --locked -p strata-cli
exec target/release/strata bench s3 --minio "$MINIO_BIN" "$@"
