#!/usr/bin/env bash
# One command from a fresh clone to a running demo: installs what is missing,
# starts redis-server (port 16379) and the tansu broker (port 19092) under
# .demo/, creates the topics, produces sample events (with a few producer
# duplicates and bad records), runs rankflow on config/demo.toml, and shows
# the boards through the HTTP API on 127.0.0.1:9898.
#
#   scripts/demo.sh          run, show the boards, keep running until Ctrl-C
#   scripts/demo.sh --once   run, show the boards, stop everything
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
once=0; [ "${1:-}" = "--once" ] && once=1
count="${DEMO_EVENTS:-20000}"
cfg=config/demo.toml
dir=.demo
mkdir -p "$dir"

scripts/setup.sh
echo "demo: building rankflow"
cargo build --quiet
bin=target/debug/rankflow
tools=target/debug/rankflow-tools

pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_all EXIT

port_open() { (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 150); do port_open "$1" && return 0; sleep 0.2; done
  echo "demo: $2 did not start on port $1 (see $dir/*.log)" >&2; exit 1
}

if port_open 16379; then echo "demo: redis already running on 16379"; else
  redis-server --port 16379 --bind 127.0.0.1 --dir "$PWD/$dir" --appendonly yes \
    --maxmemory-policy noeviction --save "" >"$dir/redis.log" 2>&1 &
  pids+=($!); wait_port 16379 redis-server
fi
if port_open 19092; then echo "demo: broker already running on 19092"; else
  (cd "$dir" && exec tansu broker --listener-url tcp://127.0.0.1:19092 \
    --advertised-listener-url tcp://127.0.0.1:19092 --storage-engine sqlite://broker.db) >"$dir/broker.log" 2>&1 &
  pids+=($!); wait_port 19092 tansu
  scripts/tansu-index.sh "$dir/broker.db"
fi

"$bin" create-topics --config "$cfg" --partitions 4
echo "demo: producing $count sample events"
"$tools" produce --config "$cfg" --count "$count" --seed "$RANDOM" --bad-ratio 0.01 --dup-ratio 0.02

RUST_LOG="${RUST_LOG:-info,librdkafka=warn}" "$bin" run --config "$cfg" >"$dir/rankflow.log" 2>&1 &
pids+=($!)
wait_port 9898 rankflow
echo "demo: rankflow is running (log: $dir/rankflow.log); waiting for it to catch up"
for _ in $(seq 1 120); do
  lag=$(curl -s localhost:9898/metrics | awk '/^rankflow_consumer_lag\{/ {s+=$2; n++} END {print (n ? s : -1)}')
  [ "$lag" = "0" ] && break
  sleep 1
done

show() { echo; echo "== GET $1"; curl -s "localhost:9898$1" | python3 -m json.tool; }
show "/v1/boards/points/top?period=weekly&limit=5"
show "/v1/boards/points/top?period=all_time&limit=5&rank=competition"
show "/v1/boards/laps/top?period=daily&split=monza&limit=3"
sleep 3 # the scheduler's first refresh of the rolling board
show "/v1/boards/points/top?period=last7d&limit=3"
echo
echo "== metrics (excerpt)"
curl -s localhost:9898/metrics | grep -E '^rankflow_(events_applied|events_duplicate|dead_letters|records_consumed)_total' | sort
echo
echo "Redis keys: redis-cli -p 16379 --scan --pattern 'lb:*' | sort | head"
if [ "$once" = 1 ]; then exit 0; fi
echo "The demo keeps running: try curl 'localhost:9898/v1/boards'. Ctrl-C stops everything."
wait
