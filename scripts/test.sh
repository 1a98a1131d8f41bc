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
# Debian packages the tests need, installed in one go where missing:
# - mount: the full-disk test mounts a small tmpfs (util-linux; root, as on CI);
# - Java 17: the Spark builder's test (spark-submit in local mode) and the
#   change-capture test's Kafka broker; Maven fetches the broker's jars;
# - Redis and etcd: `strata bench-rw`'s test measures the read-write stores
#   beside them;
# - Chromium and its driver: the S3 browser test drives them with Selenium.
missing=()
command -v mount >/dev/null 2>&1 || missing+=(mount)
# make: jemalloc (the binary's allocator) is built from source by its crate.
command -v make >/dev/null 2>&1 || missing+=(make)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}"
fi
# The Kafka broker's jars, from Maven Central (once; kept under target/).
./scripts/kafka.sh fetch >/dev/null
# PySpark, boto3, the aws CLI and Selenium in a virtual environment under target/.
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
