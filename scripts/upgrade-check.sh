#!/usr/bin/env bash
# An upgrade in place, checked: the BEFORE build consumes part of a stream
# (with producer duplicates and bad records) into a Redis, is stopped as a
# rolling upgrade stops it (SIGTERM), and the AFTER build takes over the same
# Redis and consumer group and drains the rest; then every board key is
# compared with a reference: the AFTER build alone, from the start of the
# same topic, into a Redis of its own. Equal boards: every score counted
# exactly once across the upgrade. And the BEFORE build alone, from the
# start, into a Redis of its own, must leave the same bytes as the AFTER
# build alone: the AFTER build keeps every existing board's encoding (no
# migration). Use:
#   scripts/upgrade-check.sh BEFORE_DIR AFTER_DIR
# where each directory holds a release `rankflow` and `rankflow-tools` (as for
# scripts/bench-compare.sh). UPGRADE_EVENTS (default 60000).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
before=$(cd "$1" && pwd); after=$(cd "$2" && pwd)
events=${UPGRADE_EVENTS:-60000}
. scripts/lib.sh
scratch upgrade

redis_at() { # PORT: a Redis of its own
  redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/redis-$1.log" 2>&1 &
  pids+=($!)
  wait_port "$1"
}
live=$(free_port); reference=$(free_port); old_ref=$(free_port); hport=$(free_port)
start_kafka
redis_at "$live"; redis_at "$reference"; redis_at "$old_ref"

config="$dir/rankflow.toml"
sed -e "s|^brokers = .*|brokers = \"127.0.0.1:$kport\"|" -e "s|^listen = .*|listen = \"127.0.0.1:$hport\"|" \
  -e 's|^group_id = .*|group_id = "upgrade"|' config/demo.toml >"$config"
export RANKFLOW_REDIS__URL="redis://127.0.0.1:$live"
"$after/rankflow" create-topics --config "$config" >/dev/null
"$after/rankflow-tools" produce --config "$config" --count "$events" --dup-ratio 0.05 --bad-ratio 0.01 --seed 11 >/dev/null

consumed() { curl -s "127.0.0.1:$hport/metrics" | awk '/^rankflow_records_consumed_total/ {s+=$2} END {print s+0}'; }
lag() { curl -s "127.0.0.1:$hport/metrics" | awk '/^rankflow_consumer_lag\{/ {s+=$2; n++} END {print (n ? s : -1)}'; }
run() { # BIN LOG: a worker, in the background
  RUST_LOG=info,librdkafka=warn "$1/rankflow" run --config "$config" 2>"$dir/$2.log" &
  worker=$!; pids+=($worker)
  wait_port "$hport"
}
# Drained: at least $1 records consumed (default 1), no lag, and nothing
# more consumed for three seconds (the lag gauges come with librdkafka's
# statistics, so a fresh worker's read 0 before its first fetch).
drained() {
  local last=-1 still=0
  for _ in $(seq 1 600); do
    local now; now=$(consumed)
    if [ "$now" -ge "${1:-1}" ] && [ "$(lag)" = "0" ] && [ "$now" = "$last" ]; then
      still=$((still + 1)); [ "$still" -ge 3 ] && return 0
    else
      still=0
    fi
    last=$now; sleep 1
  done
  echo "upgrade: the worker never drained the topic" >&2; exit 1
}

# The build before takes about half the stream, and is stopped.
run "$before" before
for _ in $(seq 1 600); do [ "$(consumed)" -ge $((events / 2)) ] && break; sleep 0.1; done
echo "upgrade: the build before consumed $(consumed) of $events records; stopping it (SIGTERM)"
kill -TERM "$worker"; wait "$worker" || true
# The build after takes over the same group and Redis, and drains the rest.
run "$after" after
drained
echo "upgrade: the build after drained the rest ($(consumed) records consumed by it)"
kill -TERM "$worker"; wait "$worker" || true
# The reference: the build after alone, from the start, into its own Redis.
export RANKFLOW_REDIS__URL="redis://127.0.0.1:$reference" RANKFLOW_KAFKA__GROUP_ID=upgrade-reference
run "$after" reference
drained "$events"
echo "upgrade: the reference consumed $(consumed) records"
kill -TERM "$worker"; wait "$worker" || true
# The build before alone, from the start, into its own Redis.
export RANKFLOW_REDIS__URL="redis://127.0.0.1:$old_ref" RANKFLOW_KAFKA__GROUP_ID=upgrade-before-alone
run "$before" before-alone
drained "$events"
echo "upgrade: the build before alone consumed $(consumed) records"
kill -TERM "$worker"; wait "$worker" || true

# Every board key (sorted sets; rolling boards and the scheduler's due jobs
# apart: they run on a clock), with its scores.
boards() {
  for key in $(redis-cli -p "$1" --scan --pattern 'lb:*' | sort); do
    case "$key" in *:r:*|*_roll*|*'{.sched}'*) continue ;; esac
    [ "$(redis-cli -p "$1" type "$key")" = zset ] || continue
    echo "$key $(redis-cli -p "$1" zrange "$key" 0 -1 withscores | tr '\n' ' ' | md5sum | cut -c1-12) $(redis-cli -p "$1" zcard "$key")"
  done
}
boards "$live" >"$dir/live.txt"; boards "$reference" >"$dir/reference.txt"; boards "$old_ref" >"$dir/before.txt"
if ! diff "$dir/reference.txt" "$dir/live.txt"; then
  echo "upgrade: FAILED: the boards differ from the reference's (above: < reference, > upgraded)" >&2
  exit 1
fi
if ! diff "$dir/before.txt" "$dir/reference.txt"; then
  echo "upgrade: FAILED: the build after encodes boards otherwise than the build before (< before, > after)" >&2
  exit 1
fi
echo "upgrade: the build before alone left the same bytes as the build after alone"
echo "upgrade: the boards after the upgrade equal the reference's: $(wc -l <"$dir/live.txt") sorted sets," \
  "$(awk '{s+=$3} END {print s}' "$dir/live.txt") entries"
