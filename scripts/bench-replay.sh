#!/usr/bin/env bash
# What the apply script's interpreter costs Redis, apart from the commands it
# makes: captures with MONITOR the commands of `rankflow-tools bench store`
# (the bare writes, and the store path's script calls with the commands each
# made), then replays them on a fresh Redis four ways (scripts/replay.py):
#   bare    the bare writes
#   script  the apply script's calls, as sent
#   native  each call's commands without a script (MULTI/EXEC per call)
#   thin    each call's commands through a Lua script that only runs them
# and prints Redis's main-thread CPU per event of each and its rate against
# the bare writes' in the same round, in rounds, then each one's median. The
# replays must leave Redis in the same state (DEBUG DIGEST), or it stops.
# BENCH_EVENTS (default 100000), BENCH_ROUNDS (default 3), BENCH_BIN (another
# build's rankflow-tools), BENCH_CALLGRIND=1: also instructions per event,
# Redis under valgrind's callgrind (about 50x slower). With
# REPLAY_WITHOUT_MARKERS=1, native and thin leave out the dedupe markers'
# commands (the digest check is then skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if [ -n "${BENCH_BIN:-}" ]; then
  bin=$BENCH_BIN
else
  cargo build --release --quiet -p rankflow-tools
  bin=$PWD/target/release/rankflow-tools
fi
events=${BENCH_EVENTS:-100000}
rounds=${BENCH_ROUNDS:-3}
replay="python3 $PWD/scripts/replay.py"

. scripts/lib.sh
scratch replay
cat src/scripts/markers.lua src/scripts/apply.lua >"$dir/apply.lua"

redis() { # PORT [redis-server prefix...]: starts a Redis of its own on PORT
  local port=$1; shift
  "$@" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --enable-debug-command local \
    --dir "$dir" >>"$dir/redis-$port.log" 2>&1 &
  pids+=($!)
  wait_port "$port"
}

# The capture.
port=$(free_port)
redis "$port"
redis-cli -p "$port" monitor >"$dir/monitor.txt" 2>/dev/null &
pids+=($!)
sleep 0.5
"$bin" bench --wipe-redis store --redis "redis://127.0.0.1:$port" --events "$events" --rounds 1 >"$dir/bench.out" 2>&1
sleep 1
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
# Phases start with FLUSHDB: the bare writes, the store path, the store path without dense indexes.
flushes=($(grep -n '"FLUSHDB"' "$dir/monitor.txt" | cut -d: -f1))
sed -n "$((flushes[0] + 1)),$((flushes[1] - 1))p" "$dir/monitor.txt" | grep -v '"INFO"' >"$dir/bare.trace"
sed -n "${flushes[1]},$((flushes[2] - 1))p" "$dir/monitor.txt" >"$dir/store.trace"
rm "$dir/monitor.txt"

trace_of() { if [ "$1" = bare ]; then echo "$dir/bare.trace"; else echo "$dir/store.trace"; fi; }

# The replays must agree on what they leave (the bare writes leave their own).
port=$(free_port)
redis "$port"
digest=""
for mode in script native thin; do
  $replay "$port" "$mode" "$(trace_of $mode)" "$dir/apply.lua"
  d=$(redis-cli -p "$port" debug digest)
  [ -z "$digest" ] || [ "$d" = "$digest" ] || [ "${REPLAY_WITHOUT_MARKERS:-}" = 1 ] || { echo "replay: $mode left another state than script ($d, $digest)" >&2; exit 1; }
  digest=$d
done

cpu() { redis-cli -p "$port" info cpu | awk -F: '/used_cpu_(user|sys)_main_thread/ {s += $2} END {printf "%.6f", s}'; }
echo "Redis main-thread CPU per event, $events events ($(nproc) cores, $(redis-server --version | awk '{print $3}')),"
echo "and the bare writes' CPU against each in the same round (a rate relative to theirs):"
for round in $(seq 1 "$rounds"); do
  for mode in bare script native thin; do
    redis-cli -p "$port" script flush >/dev/null
    a=$(cpu)
    $replay "$port" "$mode" "$(trace_of $mode)" "$dir/apply.lua"
    echo "$round $mode $a $(cpu)" >>"$dir/cpu.txt"
  done
done
python3 - "$dir/cpu.txt" "$events" <<'PY'
import statistics, sys
rounds = {}
for line in open(sys.argv[1]):
    r, mode, a, b = line.split()
    rounds.setdefault(r, {})[mode] = (float(b) - float(a)) / int(sys.argv[2]) * 1e6
ratios = {}
for r, us in rounds.items():
    cells = []
    for mode, t in us.items():
        ratio = us["bare"] / t
        ratios.setdefault(mode, []).append(ratio)
        cells.append(f"{mode} {t:.1f} µs {ratio:.2f}x")
    print(f"round {r}: " + ", ".join(cells))
print("median of the rounds' ratios: " + ", ".join(f"{m} {statistics.median(v):.2f}x" for m, v in ratios.items()))
PY

if [ "${BENCH_CALLGRIND:-0}" = 1 ]; then
  command -v valgrind >/dev/null || { echo "BENCH_CALLGRIND needs valgrind" >&2; exit 1; }
  echo "Redis instructions per event, $events events (callgrind):"
  for mode in bare script native thin; do
    port=$(free_port)
    redis "$port" valgrind --tool=callgrind --callgrind-out-file="$dir/cg-$mode.out" --instr-atstart=no
    vg=${pids[-1]}
    for _ in $(seq 1 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
    callgrind_control --instr=on "$vg" >/dev/null 2>&1
    callgrind_control -z "$vg" >/dev/null 2>&1
    $replay "$port" "$mode" "$(trace_of $mode)" "$dir/apply.lua"
    callgrind_control -d "$vg" >/dev/null 2>&1
    total=$(grep -hE '^(summary|totals):' "$dir"/cg-"$mode".out.* | head -1 | awk '{print $2}')
    echo "- $mode: $((total / events))"
    kill "$vg" 2>/dev/null || true
  done
fi
