#!/usr/bin/env bash
# The whole test suite, from a clean clone: installs what is missing
# (scripts/setup.sh), checks formatting, and runs every unit and integration
# test. Integration tests start their own redis-server and tansu broker on
# free ports and stop them; any process a killed run left behind is ended
# on exit (they all carry "rankflow-test-" in their command line).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

scripts/setup.sh --test
cleanup() { pkill -f 'rankflow-test-' 2>/dev/null || true; }
trap cleanup EXIT

cargo fmt --all -- --check
# One build from scratch: incremental compilation's caches would only add
# gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# TEST_THREADS, not RANKFLOW_...: rankflow reads RANKFLOW_ variables as config.
cargo test --workspace --all-targets -- --test-threads "${TEST_THREADS:-2}"
