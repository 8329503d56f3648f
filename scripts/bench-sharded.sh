#!/usr/bin/env bash
# The sharded-board benchmark: starts a local Redis Cluster of 3 primaries
# (redis-server processes on free ports, joined with redis-cli --cluster
# create) in a temporary directory, builds the tools in release mode, runs
# `rankflow-tools bench sharded` (one board's writes unsharded and sharded
# over the primaries, each primary's CPU share, merged reads on a board of
# BENCH_MEMBERS members sharded 8 ways), and stops everything. With
# `rows`: `rankflow-tools bench sharded-rows` instead (merged reads of a
# sharded board ranked by two columns against a sharded board of one score).
# Sizes: BENCH_SHARDED_EVENTS (default 300000), BENCH_MEMBERS (default
# 1000000), BENCH_SAMPLES (default 2000); BENCH_NO_BUILD=1 runs the tools as built.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
scripts/setup.sh >/dev/null
[ -n "${BENCH_NO_BUILD:-}" ] || cargo build --release --quiet -p rankflow-tools
bin=$PWD/target/release/rankflow-tools

. scripts/lib.sh
scratch cluster

nodes=()
for i in 1 2 3; do
  port=$(free_port)
  mkdir -p "$dir/$i"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --maxmemory-policy noeviction \
    --cluster-enabled yes --cluster-config-file nodes.conf --dir "$dir/$i" >"$dir/$i/redis.log" 2>&1 &
  pids+=($!)
  wait_port "$port"
  nodes+=("127.0.0.1:$port")
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log"
for n in "${nodes[@]}"; do
  until redis-cli -p "${n##*:}" cluster info | grep -q cluster_state:ok; do sleep 0.2; done
done

echo "machine: $(nproc) cores, $(free -g | awk '/Mem/ {print $2}') GiB, $(redis-server --version | awk '{print $3}'), a Redis Cluster of 3 primaries"
if [ "${1:-}" = rows ]; then
  "$bin" bench --wipe-redis sharded-rows --redis "redis://${nodes[0]}" --members "${BENCH_MEMBERS:-1000000}" \
    --samples "${BENCH_SAMPLES:-2000}"
else
  "$bin" bench --wipe-redis sharded --redis "redis://${nodes[0]}" --events "${BENCH_SHARDED_EVENTS:-300000}" \
    --members "${BENCH_MEMBERS:-1000000}" --samples "${BENCH_SAMPLES:-2000}"
fi
