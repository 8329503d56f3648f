#!/usr/bin/env bash
# Installs what rankflow's demo and tests need and is missing on a Debian
# machine with Rust: redis-server and redis-cli (apt), the C toolchain pieces
# and libraries librdkafka's build uses (apt: OpenSSL for TLS and SASL,
# libcurl for OAUTHBEARER's OIDC); with --kafka, Java 17 and Maven for
# Apache Kafka (scripts/kafka.sh); with --test, those and what only the
# tests use: Apache Kafka's jars (fetched by Maven, once), Chromium for the page test,
# openssl and socat (and kafka-python) for the secure-connection tests,
# nginx for the cache-in-front test,
# confluent-kafka's serializers for the event-format tests, and the offline
# validators of the compose file, alert rules and Kubernetes manifests.
# Safe to run again: it installs only what is missing.
set -euo pipefail
tests=0; kafka=0
case "${1:-}" in --test) tests=1; kafka=1 ;; --kafka) kafka=1 ;; esac

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "setup: need root (or sudo) to run: $*" >&2; exit 1
  fi
}

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v make >/dev/null || missing+=(make)
command -v cc >/dev/null || missing+=(gcc)
command -v g++ >/dev/null || missing+=(g++)
command -v perl >/dev/null || missing+=(perl)
command -v curl >/dev/null || missing+=(curl)
command -v pkg-config >/dev/null || missing+=(pkg-config)
# librdkafka built with TLS, SASL (SCRAM, OAUTHBEARER) and OIDC: OpenSSL's and libcurl's headers.
[ -e /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
[ -e /usr/include/x86_64-linux-gnu/curl/curl.h ] || [ -e /usr/include/curl/curl.h ] || missing+=(libcurl4-openssl-dev)
# python3: free ports in the scripts.
command -v python3 >/dev/null || missing+=(python3)
if [ "$kafka" = 1 ]; then
  # Apache Kafka (scripts/kafka.sh): a Java 17 runtime, and Maven to fetch its jars.
  command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
fi
if [ "$tests" = 1 ]; then
  # Offline validation of docker-compose.yml and the alert rules (tests/operations.rs).
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v promtool >/dev/null || missing+=(prometheus)
  # The leaderboard page in a real headless browser (tests/page.rs), and a
  # terminal for the progress bars (tests/demo.rs).
  command -v chromium >/dev/null || missing+=(chromium)
  command -v tmux >/dev/null || missing+=(tmux)
  # Secure connections (tests/secure*.rs): certificates made by openssl;
  # HTTPS in front of the tests' own Schema Registry (socat).
  command -v openssl >/dev/null || missing+=(openssl)
  command -v socat >/dev/null || missing+=(socat)
  # A reverse-proxy cache in front of the read API (tests/browsers.rs, the cache benchmark).
  [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || missing+=(nginx)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} with apt-get"
  as_root apt-get update -qq
  # Only promtool is wanted from the prometheus package, and nginx is started by the tests: keep apt from starting services.
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null && as_root chmod +x "$policy"
    trap 'as_root rm -f "$policy"' EXIT
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if [ "$tests" = 1 ] && ! { command -v clippy-driver && cargo fmt --version; } >/dev/null 2>&1; then
  # The test command checks formatting and clippy's lints.
  echo "setup: adding rustup's clippy and rustfmt components"
  rustup component add clippy rustfmt
fi
if [ "$tests" = 1 ] && ! command -v kubernetes-validate >/dev/null; then
  # The Kubernetes manifests, validated offline against the Kubernetes schemas (tests/deploy.rs).
  echo "setup: installing kubernetes-validate from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate
fi
if [ "$tests" = 1 ] && ! python3 -c 'import kafka' 2>/dev/null; then
  # A Kafka client that is not rankflow (nor librdkafka), reading topics back over TLS (tests/read_topic.py).
  echo "setup: installing kafka-python from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check kafka-python
fi
if [ "$tests" = 1 ] && ! python3 -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf' 2>/dev/null; then
  # Confluent's own Avro and Protobuf serializers frame the records the format tests read (tests/serialize.py).
  echo "setup: installing confluent-kafka (with its Avro, Protobuf and Schema Registry parts) from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check "confluent-kafka[avro,protobuf,schemaregistry]"
fi
if [ "$tests" = 0 ]; then
  echo "setup: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')"
  exit 0
fi
# Apache Kafka's jars, fetched by Maven into scripts/kafka.sh's cache (once).
kafka=$("$(dirname "$0")/kafka.sh" fetch)
echo "setup: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), Apache Kafka's jars in $kafka"
