#!/usr/bin/env bash
# rclone against Strata's S3 API, unchanged: installs the pinned rclone below
# with `go install` (the Go module proxy serves it), starts a single-node
# `strata server` in a temporary directory, and drives it the ways rclone
# users do: copy with multipart uploads, check, server-side copies (multipart
# copy past the cutoff), a streamed upload of unknown size, ranged reads,
# sync with deletes, purge, versioned buckets (--s3-versions,
# --s3-version-at, cleanup-hidden) and SSE-C with a customer key (multipart
# and ranged reads included). Exits non-zero on the first difference.
# Not part of ./scripts/test.sh: building rclone takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

RCLONE_MODULE=github.com/rclone/rclone
RCLONE_VERSION=v1.68.2
RCLONE="$PWD/target/rclone/$RCLONE_VERSION/rclone"

if [ ! -x "$RCLONE" ]; then
    command -v go >/dev/null 2>&1 || { echo "error: Go is needed to install rclone" >&2; exit 1; }
    echo "installing rclone $RCLONE_VERSION with go install (a few minutes the first time)..." >&2
    GOBIN="$(dirname "$RCLONE")" GOFLAGS=-mod=mod go install "$RCLONE_MODULE@$RCLONE_VERSION"
fi
cargo build --release --locked -p strata-cli

work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
target/release/strata server --data-dir "$work/data" --listen "127.0.0.1:$port" --s3-listen "127.0.0.1:$((port + 1))" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 50); do grep -q AWS_SECRET_ACCESS_KEY "$work/server.log" && break; sleep 0.1; done
key=$(grep -o 'AWS_ACCESS_KEY_ID=[^ ]*' "$work/server.log" | cut -d= -f2)
secret=$(grep -o 'AWS_SECRET_ACCESS_KEY=[^ ]*' "$work/server.log" | cut -d= -f2-)

export RCLONE_CONFIG_ST_TYPE=s3 RCLONE_CONFIG_ST_PROVIDER=Other RCLONE_CONFIG_ST_REGION=us-east-1
export RCLONE_CONFIG_ST_ENDPOINT="http://127.0.0.1:$((port + 1))" RCLONE_CONFIG_ST_ACCESS_KEY_ID="$key" RCLONE_CONFIG_ST_SECRET_ACCESS_KEY="$secret"
export RCLONE_CONFIG="$work/rclone.conf"   # none: the remote comes from the environment
# Any error rclone logs fails the run, even one it works around (it
# carried on past a missing GetBucketVersioning, for example).
r() {
    "$RCLONE" --log-level ERROR "$@" 2>"$work/rclone.err" || { cat "$work/rclone.err" >&2; exit 1; }
    if [ -s "$work/rclone.err" ]; then cat "$work/rclone.err" >&2; exit 1; fi
}
step() { echo "== $*" >&2; }
# A failed check says which line it was on.
trap 'echo "rclone-s3.sh: check failed at line $LINENO" >&2' ERR

src="$work/src"
mkdir -p "$src/a/b"
head -c 1000 /dev/urandom >"$src/small.bin"
head -c 12000000 /dev/urandom >"$src/a/mid.bin"
head -c 30000000 /dev/urandom >"$src/a/b/big.bin"
echo hello >"$src/a/b/x.txt"

step "copy (multipart above 5 MiB) and check"
r mkdir st:rclone-test
r copy "$src" st:rclone-test/dir --s3-upload-cutoff 5M --s3-chunk-size 5M
r check "$src" st:rclone-test/dir
step "server-side copies: one CopyObject, one multipart copy (UploadPartCopy)"
r copyto st:rclone-test/dir/a/mid.bin st:rclone-test/copies/mid.bin
r copyto st:rclone-test/dir/a/b/big.bin st:rclone-test/copies/big.bin --s3-copy-cutoff 5M
[ "$(r cat st:rclone-test/copies/big.bin | md5sum)" = "$(md5sum <"$src/a/b/big.bin")" ]
[ "$(r cat st:rclone-test/copies/mid.bin | md5sum)" = "$(md5sum <"$src/a/mid.bin")" ]
step "a streamed upload of unknown size, and a ranged read"
head -c 7000000 /dev/urandom >"$work/streamed.bin"
r rcat st:rclone-test/streamed.bin --streaming-upload-cutoff 1M --s3-chunk-size 5M <"$work/streamed.bin"
[ "$(r cat st:rclone-test/streamed.bin | md5sum)" = "$(md5sum <"$work/streamed.bin")" ]
[ "$(r cat st:rclone-test/dir/a/mid.bin --offset 1000 --count 50 | md5sum)" = "$(dd if="$src/a/mid.bin" bs=1 skip=1000 count=50 status=none | md5sum)" ]
step "sync with a deletion and a change"
rm "$src/a/mid.bin"
echo changed >"$src/a/b/x.txt"
r sync "$src" st:rclone-test/dir
r check "$src" st:rclone-test/dir
step "purge"
r purge st:rclone-test
[ -z "$(r lsd st:)" ]

step "versioning: every version kept through overwrite and delete, listed, read back and cleaned up"
r mkdir st:rclone-versions
[ "$(r backend versioning st:rclone-versions Enabled)" = '"Enabled"' ]
[ "$(r backend versioning st:rclone-versions)" = '"Enabled"' ]
echo first >"$work/doc.txt"
r copyto "$work/doc.txt" st:rclone-versions/doc.txt
sleep 1.1
between=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
sleep 1.1
echo second >"$work/doc.txt"
r copyto "$work/doc.txt" st:rclone-versions/doc.txt
[ "$(r cat st:rclone-versions/doc.txt)" = second ]
[ "$(r cat --s3-version-at "$between" st:rclone-versions/doc.txt)" = first ]
old=$(r lsf --s3-versions st:rclone-versions | grep -v '^doc.txt$')
[ "$(echo "$old" | wc -l)" = 1 ] && [ -n "$old" ]
[ "$(r cat --s3-versions "st:rclone-versions/$old")" = first ]
r deletefile st:rclone-versions/doc.txt
[ -z "$(r lsf st:rclone-versions)" ]
[ "$(r lsf --s3-versions st:rclone-versions | wc -l)" = 2 ]
r backend cleanup-hidden st:rclone-versions
[ -z "$(r lsf --s3-versions st:rclone-versions)" ]
r rmdir st:rclone-versions

step "SSE-C: objects (one multipart) stored encrypted under the customer's key, unreadable without it"
ssec_key=$(head -c 32 /dev/urandom | base64)
ssec=(--s3-sse-customer-algorithm AES256 --s3-sse-customer-key-base64 "$ssec_key"
      --s3-sse-customer-key-md5 "$(echo "$ssec_key" | base64 -d | openssl md5 -binary | base64)")
secret="rclone SSE-C plaintext $RANDOM$RANDOM$RANDOM"
mkdir -p "$work/ssec"
for i in $(seq 2000); do echo "$secret"; done >"$work/ssec/text.txt"
head -c 12000000 /dev/urandom >"$work/ssec/big.bin"
r mkdir st:rclone-ssec
r copy "$work/ssec" st:rclone-ssec --s3-upload-cutoff 5M --s3-chunk-size 5M "${ssec[@]}"
[ "$(r cat st:rclone-ssec/text.txt "${ssec[@]}" | md5sum)" = "$(md5sum <"$work/ssec/text.txt")" ]
[ "$(r cat st:rclone-ssec/big.bin "${ssec[@]}" | md5sum)" = "$(md5sum <"$work/ssec/big.bin")" ]
[ "$(r cat st:rclone-ssec/big.bin --offset 5000000 --count 1000 "${ssec[@]}" | md5sum)" = "$(dd if="$work/ssec/big.bin" bs=1000 skip=5000 count=1 status=none | md5sum)" ]
# Without the key the read fails (rclone takes the refused HEAD for "no
# such file" and prints nothing): the plaintext must not come back.
if "$RCLONE" cat st:rclone-ssec/text.txt 2>/dev/null | grep -qF "$secret"; then echo "an SSE-C object was read without its key" >&2; exit 1; fi
if grep -rqF "$secret" "$work/data"; then echo "SSE-C plaintext found in the data directory" >&2; exit 1; fi
r purge st:rclone-ssec
echo "rclone $RCLONE_VERSION: every step passed" >&2
