#!/usr/bin/env bash
# Apache Kafka for the change-capture tests: `scripts/kafka.sh fetch` puts a
# broker's jars (from Maven Central, through Debian's Maven) under
# target/kafka/<version>/libs and prints that directory; the tests start a
# KRaft broker from them with Debian's Java 17 (tests/events.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' scripts/kafka/pom.xml)
libs="$PWD/target/kafka/$version/libs"
case "${1:-fetch}" in
  fetch)
    if [ ! -f "$libs/kafka_2.13-$version.jar" ]; then
      command -v mvn >/dev/null || { echo "kafka.sh: mvn is missing (Debian: apt-get install maven)" >&2; exit 1; }
      mvn -q -B -f scripts/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$libs.tmp" >&2
      rm -rf "$libs" && mv "$libs.tmp" "$libs"
    fi
    echo "$libs"
    ;;
  *)
    echo "usage: scripts/kafka.sh fetch" >&2
    exit 2
    ;;
esac
