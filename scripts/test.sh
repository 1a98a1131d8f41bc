#!/usr/bin/env bash
# The whole test suite, runnable on a fresh machine of this project's kind:
# checks the toolchain, installs what the tests need, then format, lints and
# every test (unit, property, crash and real-process API tests).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo not found. Strata needs Rust 1.95 (rust-version in Cargo.toml)." >&2
    exit 1
fi
# The full-disk test mounts a small tmpfs (util-linux's mount; root, as on CI).
if ! command -v mount >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq mount
fi

# The Spark builder's test runs tools/spark/build_store.py with spark-submit
# in local mode: Java 17 and PySpark in a virtual environment under target/.
# The S3 tests drive the server with boto3 and the aws CLI from the same
# environment.
if ! command -v java >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless
fi
# `strata bench-rw`'s test measures the read-write stores beside Redis and
# etcd from Debian's packages.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v etcd >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq redis-server etcd-server
fi
# The S3 browser test drives Debian's headless Chromium with Selenium.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver
fi
export STRATA_PYENV="${STRATA_PYENV:-$PWD/target/pyenv}"
if ! "$STRATA_PYENV/bin/python" -c 'import pyspark, crc32c, boto3, awscli, selenium' >/dev/null 2>&1; then
    python3 -m venv "$STRATA_PYENV"
    "$STRATA_PYENV/bin/pip" install -q --disable-pip-version-check -r tools/spark/requirements.txt -r crates/strata-cli/tests/s3/requirements.txt
fi

if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --all -- --check
else
    echo "warning: rustfmt is not installed; skipping the format check" >&2
fi
if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --workspace --all-targets --locked -- -D warnings
else
    echo "warning: clippy is not installed; skipping lints" >&2
fi
cargo test --workspace --locked "$@"
