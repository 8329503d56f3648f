#!/usr/bin/env bash
# The whole test suite, from a clean clone: installs what is missing
# (scripts/setup.sh), checks formatting and clippy's lints (warnings are
# errors), and runs every unit and integration
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
  rm -rf "$kafka_dir" "$kafka_dir.out" "$kafka_dir.built"
  pkill -f 'rankflow-test-' 2>/dev/null || true
}
trap cleanup EXIT

# The broker starts while the code is checked and built.
scripts/kafka.sh start --dir "$kafka_dir" --watch $$ >"$kafka_dir.out" 2>&1 &
kafka_start=$!
cargo fmt --all -- --check
# One build from scratch: incremental compilation's caches would only add
# gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# What is held by habit is held here: no clippy warning in any target. The
# test build is clippy's build: clippy-driver compiles the workspace's own
# crates as rustc does, with clippy's lints and warnings as errors (what
# `cargo clippy --all-targets -- -D warnings` asks of it), so the code is
# compiled once, not checked and then built. (A plain `cargo test` after
# this rebuilds the workspace's crates, not their dependencies.)
RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)"
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# Cargo's messages name the test executables it built (diagnostics still go to the terminal).
cargo test --workspace --all-targets --no-run --message-format=json-render-diagnostics >"$kafka_dir.built"
wait "$kafka_start" || { cat "$kafka_dir.out" >&2; exit 1; }
TEST_KAFKA_BROKERS=$(tail -1 "$kafka_dir.out")
export TEST_KAFKA_BROKERS
echo "test: Apache Kafka at $TEST_KAFKA_BROKERS"
# Every test binary runs, even after one fails: TEST_JOBS of them at a time
# (most of the suite's time is waiting on brokers, kills and restarts, not
# computing), each with TEST_THREADS tests at a time, the slowest first;
# the time of each is printed at the end. (TEST_*, not RANKFLOW_...:
# rankflow reads RANKFLOW_ variables as config.)
# When a test fails, what the shared broker went through is printed too: its
# fences (each but the first grant to unfence follows one), its controller's
# slow events, its warnings and its JVM's pauses of 100 ms or more.
scripts/run-tests.py --jobs "${TEST_JOBS:-3}" --test-threads "${TEST_THREADS:-2}" <"$kafka_dir.built" || {
  echo "test: the shared broker's log (warnings, fences, slow events):"
  grep -v 'Performing controller activation' "$kafka_dir"/node-1/broker.log | grep -E '^\[' | tail -40 | cut -c1-400 || true
  echo "test: the shared broker's JVM pauses of 100 ms or more:"
  grep -hE 'Pause.* [0-9]{3,}\.[0-9]+ms' "$kafka_dir"/node-1/gc.log* | tail -20 || true
  exit 1
}
