#!/usr/bin/env bash
# The whole test suite, from a clean clone: installs what is missing
# (scripts/setup.sh), checks formatting, and runs every unit and integration
# test. It starts one Apache Kafka broker (scripts/kafka.sh) that the tests
# share, each with topics and groups of its own, and names it in
# TEST_KAFKA_BROKERS; a test that stops or kills a broker, or needs a
# cluster or a secured one, starts its own. Integration tests start their
# own redis-server on free ports. Any process a killed run left behind is
# ended on exit (they all carry "rankflow-test-" in their command line).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

scripts/setup.sh --test
kafka_dir=$(mktemp -d /tmp/rankflow-test-kafka-XXXXXX)
cleanup() {
  scripts/kafka.sh stop --dir "$kafka_dir" --kill >/dev/null 2>&1 || true
  rm -rf "$kafka_dir"
  pkill -f 'rankflow-test-' 2>/dev/null || true
}
trap cleanup EXIT

cargo fmt --all -- --check
# One build from scratch: incremental compilation's caches would only add
# gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
started=$(date +%s)
TEST_KAFKA_BROKERS=$(scripts/kafka.sh start --dir "$kafka_dir" --watch $$ | tail -1)
export TEST_KAFKA_BROKERS
echo "test: Apache Kafka at $TEST_KAFKA_BROKERS, started in $(($(date +%s) - started)) s"
# TEST_THREADS, not RANKFLOW_...: rankflow reads RANKFLOW_ variables as config.
cargo test --workspace --all-targets -- --test-threads "${TEST_THREADS:-2}"
