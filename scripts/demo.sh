#!/usr/bin/env bash
# One command from a fresh clone to a running demo, with nothing to install
# but Redis: installs redis-server if missing, starts it (port 16379) under
# .demo/, builds rankflow, and runs `rankflow demo` on config/demo.toml: a
# Kafka-protocol broker inside the process (librdkafka's mock cluster), sample
# events (with a few producer duplicates and bad records), the worker, the
# read API and the leaderboard page on 127.0.0.1:9898. Then it shows a few
# boards through the API.
#
#   scripts/demo.sh          run, show the boards, keep running until Ctrl-C
#   scripts/demo.sh --once   run, show the boards, stop everything
#
# For a real broker instead: RANKFLOW_KAFKA__BROKERS=host:9092 scripts/demo.sh
# The samples as Avro or Protobuf (Schema Registry wire format): DEMO_FORMAT=avro scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
once=0; [ "${1:-}" = "--once" ] && once=1
count="${DEMO_EVENTS:-20000}"
dir=.demo
mkdir -p "$dir"

scripts/setup.sh
echo "demo: building rankflow"
# The demo profile (Cargo.toml): dependencies unoptimised, for a quick first build.
cargo build --quiet --profile demo --bin rankflow
bin=target/demo/rankflow

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

RUST_LOG="${RUST_LOG:-info,librdkafka=warn}" "$bin" demo --config config/demo.toml --events "$count" --seed "$RANDOM" --format "${DEMO_FORMAT:-json}" \
  2>"$dir/rankflow.log" &
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
show "/v1/boards/best_match/top?limit=3&rank=competition"
show "/v1/boards/laps/top?period=daily&split=monza&limit=3"
sleep 3 # the scheduler's first refresh of the rolling board
show "/v1/boards/points/top?period=last7d&limit=3"
echo
echo "== metrics (excerpt)"
curl -s localhost:9898/metrics | grep -E '^rankflow_(events_applied|events_duplicate|dead_letters|records_consumed)_total' | grep -v ' 0$' | sort
echo
echo "The leaderboard page: http://127.0.0.1:9898/   Redis keys: redis-cli -p 16379 --scan --pattern 'lb:*' | sort | head"
if [ "$once" = 1 ]; then exit 0; fi
echo "The demo keeps running. Ctrl-C stops everything."
wait
