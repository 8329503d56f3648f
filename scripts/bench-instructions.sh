#!/usr/bin/env bash
# Counts the instructions Redis executes per event in each phase of
# `rankflow-tools bench store` (Redis ceiling, store path, store path without dense
# indexes), by running redis-server under valgrind's callgrind. Unlike CPU
# time, instruction counts do not move with the load of a shared machine, so
# two versions of the apply script can be compared run against run. They
# weigh cache misses at nothing, though: a change that saves instructions
# must still show in `rankflow-tools bench store`'s times.
# Size: BENCH_EVENTS (default 20000; callgrind runs Redis about 50x slower).
# BENCH_CACHE_SIM=1 also simulates the caches and reports estimated cycles
# per event (instructions + 10 per first-level miss + 100 per last-level
# miss, callgrind's usual weights), which a change in memory use shows in.
# BENCH_BIN: another build's rankflow-tools to count (say a copy of the one
# before a change), instead of building this tree's.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
if [ -n "${BENCH_BIN:-}" ]; then
  bin=$BENCH_BIN
else
  cargo build --release --quiet
  bin=$PWD/target/release/rankflow-tools
fi
events=${BENCH_EVENTS:-20000}

dir=$(mktemp -d /tmp/rankflow-instr-XXXXXX)
vg=""
cleanup() { [ -n "$vg" ] && kill "$vg" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sim=""; [ -n "${BENCH_CACHE_SIM:-}" ] && sim="--cache-sim=yes"
valgrind --tool=callgrind $sim --callgrind-out-file="$dir/cg.out" --instr-atstart=no \
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >"$dir/valgrind.log" 2>&1 &
vg=$!
for _ in $(seq 1 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done

# Counting runs from here; each dump closes a phase and starts the next count.
callgrind_control --instr=on "$vg" >/dev/null 2>&1
callgrind_control -z "$vg" >/dev/null 2>&1
"$bin" bench store --redis "redis://127.0.0.1:$port" --events "$events" --rounds 1 >"$dir/bench.out" 2>&1 &
bench=$!
wait_for() { until grep -q "$1" "$dir/bench.out"; do kill -0 "$bench" 2>/dev/null || { cat "$dir/bench.out" >&2; exit 1; }; sleep 0.05; done; }
wait_for "store path ("
callgrind_control -d "$vg" >/dev/null 2>&1
wait_for "dense_rank = false ("
callgrind_control -d "$vg" >/dev/null 2>&1
wait "$bench"
callgrind_control -d "$vg" >/dev/null 2>&1

totals=()
for f in $(ls -tr "$dir"/cg.out.*); do
  totals+=("$(grep -E '^(summary|totals):' "$f" | head -1 | awk '{print $2}')")
done
echo "Redis instructions per event ($events events; each phase includes the FLUSHDB that starts it):"
echo "- Redis ceiling: bare pipelined writes: $((totals[0] / events))"
echo "- rankflow store path: $((totals[1] / events))"
echo "- rankflow store path, dense_rank = false: $((totals[2] / events))"
if [ -n "$sim" ]; then
  # The event names (callgrind: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw) and their totals.
  cycles=()
  for f in $(ls -tr "$dir"/cg.out.*); do
    cycles+=("$(awk '/^events:/ { for (i = 2; i <= NF; i++) name[i] = $i }
      /^(summary|totals):/ { for (i = 2; i <= NF; i++) v[name[i]] = $i
        printf "%.0f", v["Ir"] + 10 * (v["I1mr"] + v["D1mr"] + v["D1mw"]) + 100 * (v["ILmr"] + v["DLmr"] + v["DLmw"]); exit }' "$f")")
  done
  echo "Estimated Redis cycles per event (instructions + 10 per L1 miss + 100 per last-level miss):"
  echo "- Redis ceiling: bare pipelined writes: $((cycles[0] / events))"
  echo "- rankflow store path: $((cycles[1] / events))"
  echo "- rankflow store path, dense_rank = false: $((cycles[2] / events))"
fi
