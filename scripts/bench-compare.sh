#!/usr/bin/env bash
# Compares two builds on this host, alternated: the store path
# (`rankflow-tools bench store`) and the end-to-end drain (`rankflow-tools
# bench pipeline`, whose latency run is cut to BENCH_LATENCY_SECONDS,
# default 5). Use:
#   scripts/bench-compare.sh BEFORE_DIR AFTER_DIR
# where each directory holds a release `rankflow` and `rankflow-tools`
# (for example `git worktree add ../before REV`, then
# `CARGO_TARGET_DIR=... cargo build --release` there, and copy the two).
# Sizes: BENCH_EVENTS (default 400000), BENCH_STORE_EVENTS (default
# 200000), BENCH_STORE_ROUNDS and BENCH_E2E_ROUNDS (alternations of each,
# default BENCH_ROUNDS, default 3; each run is one round of its rows).
# Each run gets a fresh Redis (and broker).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
before=$(cd "$1" && pwd); after=$(cd "$2" && pwd)
. scripts/lib.sh
scratch compare

start_redis() {
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --maxmemory-policy noeviction --dir "$dir" >"$dir/redis-$rport.log" 2>&1 &
  redis_pid=$!; pids+=($redis_pid)
  wait_port "$rport"
}
stop() { kill "$@" 2>/dev/null || true; wait "$@" 2>/dev/null || true; }

echo "machine: $(nproc) cores, $(redis-server --version | awk '{print $3}'); before: $before; after: $after"
for round in $(seq 1 "${BENCH_STORE_ROUNDS:-${BENCH_ROUNDS:-3}}"); do
  for build in before after; do
    bin=${!build}
    start_redis
    echo "== round $round, $build: store path"
    "$bin/rankflow-tools" bench --wipe-redis store --redis "redis://127.0.0.1:$rport" \
      --events "${BENCH_STORE_EVENTS:-200000}" --rounds 1 | grep -E "store path|ceiling"
    stop "$redis_pid"
  done
done
for round in $(seq 1 "${BENCH_E2E_ROUNDS:-${BENCH_ROUNDS:-3}}"); do
  for build in before after; do
    bin=${!build}
    start_redis; start_kafka
    echo "== round $round, $build: end to end"
    "$bin/rankflow-tools" bench --wipe-redis pipeline --brokers "127.0.0.1:$kport" --redis "redis://127.0.0.1:$rport" \
      --events "${BENCH_EVENTS:-400000}" --seconds "${BENCH_LATENCY_SECONDS:-5}" --broker-pid "$broker_pid" --rounds 1 \
      | grep -E "ceiling|store path|end to end|drain"
    stop "$redis_pid"; stop_kafka
  done
done
