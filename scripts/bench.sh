#!/usr/bin/env bash
# Runs the benchmarks on a local stack: starts redis-server and Apache Kafka
# (scripts/kafka.sh) on free ports in a temporary directory, builds rankflow in release mode, runs
# `rankflow-tools bench pipeline` (ceilings, store path, end to end, latency,
# memory), `rankflow-tools bench read` (read API on a 1,000,000-member board),
# `rankflow-tools bench league` (a league board's cost, one round settled),
# `bench changes` (what notify_top costs), the reads-at-scale and live
# stream benches, what TLS costs the store path (`bench tls`), what reading
# Avro and Protobuf costs the worker against JSON (`bench formats`), and the
# latency run against librdkafka's mock cluster, and stops everything.
# Sizes: BENCH_EVENTS (default 1000000), BENCH_MEMBERS (default 1000000),
# BENCH_ROUNDS (rounds of the Redis ceiling and store-path rows, and of the
# broker ceiling and end-to-end rows, default 3);
# latency run: BENCH_LATENCY_RATE (default 5000 events/s) for
# BENCH_LATENCY_SECONDS (default 30).
# The Redis it starts is its own, so the benchmarks may wipe it (--wipe-redis)
# between one command and the next.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
scripts/setup.sh --test >/dev/null  # Java, Maven and Kafka's jars, too
cargo build --release --quiet
bin=$PWD/target/release/rankflow-tools

. scripts/lib.sh
scratch bench

rport=$(free_port); tport=$(free_port)
# Certificates for Redis's TLS port (the same server: `bench tls` compares its two ports).
deploy/tls/make-certs.sh "$dir/tls" >/dev/null
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --maxmemory-policy noeviction --dir "$dir" \
  --tls-port "$tport" --tls-cert-file "$dir/tls/redis.crt" --tls-key-file "$dir/tls/redis.key" --tls-ca-cert-file "$dir/tls/ca.crt" --tls-auth-clients yes \
  >"$dir/redis.log" 2>&1 &
pids+=($!)
start_kafka
# A replica of it, for the reads from replicas.
rrport=$(free_port)
redis-server --port "$rrport" --bind 127.0.0.1 --save "" --appendonly no --replicaof 127.0.0.1 "$rport" --dir "$dir" >"$dir/replica.log" 2>&1 &
pids+=($!)
wait_port "$rport"; wait_port "$rrport"; wait_port "$tport"

echo "machine: $(nproc) cores, $(free -g | awk '/Mem/ {print $2}') GiB, $(redis-server --version | awk '{print $3}'), Apache Kafka $(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' scripts/kafka/pom.xml | head -1) (KRaft, one node)"
"$bin" bench --wipe-redis pipeline --brokers "127.0.0.1:$kport" --redis "redis://127.0.0.1:$rport" --events "${BENCH_EVENTS:-1000000}" --rate "${BENCH_LATENCY_RATE:-5000}" --seconds "${BENCH_LATENCY_SECONDS:-30}" \
  --broker-pid "$broker_pid" --rounds "${BENCH_ROUNDS:-3}"
# TLS: the store path through the same Redis's TLS port (mutual TLS) against
# its plain port, BENCH_TLS_EVENTS (default 200000) events a round, alternated.
"$bin" bench --wipe-redis tls --redis "redis://127.0.0.1:$rport" --tls-redis "rediss://127.0.0.1:$tport" --ca-file "$dir/tls/ca.crt" \
  --cert-file "$dir/tls/client.crt" --key-file "$dir/tls/client.key" --events "${BENCH_TLS_EVENTS:-200000}" --rounds "${BENCH_ROUNDS:-3}"
# Event formats: BENCH_FORMAT_EVENTS (default 200000) records drained as JSON, Avro and Protobuf, rounds alternated.
"$bin" bench --wipe-redis formats --brokers "127.0.0.1:$kport" --redis "redis://127.0.0.1:$rport" --events "${BENCH_FORMAT_EVENTS:-200000}" --rounds "${BENCH_ROUNDS:-3}"
"$bin" bench --wipe-redis read --redis "redis://127.0.0.1:$rport" --members "${BENCH_MEMBERS:-1000000}" --samples "${BENCH_SAMPLES:-5000}"
# Leagues: Redis time per event on a league board against the same board
# without one over BENCH_LEAGUE_EVENTS (default 500000: about 3.5 league
# events per player), and one round of BENCH_LEAGUE_PLAYERS (default 100000)
# settled by the real binary.
"$bin" bench --wipe-redis league --brokers "127.0.0.1:$kport" --redis "redis://127.0.0.1:$rport" --events "${BENCH_LEAGUE_EVENTS:-500000}" --players "${BENCH_LEAGUE_PLAYERS:-100000}" --rounds "${BENCH_ROUNDS:-3}"
# Rank changes: Redis time per event with notify_top = 100 against the same
# boards without it, BENCH_CHANGES_EVENTS (default 200000) events for
# 100,000 and for 1,000 players.
"$bin" bench --wipe-redis changes --redis "redis://127.0.0.1:$rport" --events "${BENCH_CHANGES_EVENTS:-200000}" --rounds "${BENCH_ROUNDS:-3}"
# Score integrity: Redis time per event with the rules on against off on
# the same BENCH_INTEGRITY_EVENTS (default 200000), and the review listing's
# latency with BENCH_HELD (default 100000) held events.
"$bin" bench --wipe-redis integrity --redis "redis://127.0.0.1:$rport" --events "${BENCH_INTEGRITY_EVENTS:-200000}" --held "${BENCH_HELD:-100000}" --rounds "${BENCH_ROUNDS:-3}"
# Team boards: Redis time per event on a team board against the same board
# without team, BENCH_TEAMS_EVENTS (default 200000) events, and a team's
# read, the top of teams and a player's read with BENCH_TEAMS (default
# 10000) teams of 50.
"$bin" bench --wipe-redis teams --redis "redis://127.0.0.1:$rport" --events "${BENCH_TEAMS_EVENTS:-200000}" --teams "${BENCH_TEAMS:-10000}" --rounds "${BENCH_ROUNDS:-3}"
# Ranking by two columns: Redis time per event, memory per member and top
# and player reads against a board of one score fed the same
# BENCH_COLUMNS_EVENTS (default 200000) events.
"$bin" bench --wipe-redis columns --redis "redis://127.0.0.1:$rport" --events "${BENCH_COLUMNS_EVENTS:-200000}" --rounds "${BENCH_ROUNDS:-3}"
# Reads at scale: read capacity (HTTP against the same commands through
# redis-rs, then an open loop at half capacity), and reads while
# BENCH_DRAIN_EVENTS (default 400000) drain: calls unbounded in time, the
# default max_call_time, and reads on the replica.
"$bin" bench --wipe-redis capacity --redis "redis://127.0.0.1:$rport" --members "${BENCH_MEMBERS:-1000000}"
"$bin" bench --wipe-redis drain-reads --brokers "127.0.0.1:$kport" --redis "redis://127.0.0.1:$rport" --replica "redis://127.0.0.1:$rrport" --events "${BENCH_DRAIN_EVENTS:-400000}"
# Reads through a cache: 50 clients reading one top 100 from rankflow alone
# and through nginx with deploy/nginx/rankflow-cache.conf (skipped without
# nginx), and the answer's bytes plain, gzip and br.
if [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null; then
  "$bin" bench --wipe-redis cache --redis "redis://127.0.0.1:$rport"
else
  echo "bench: nginx is not installed (scripts/setup.sh --test installs it): the cache benchmark is skipped"
fi
# Live streams: BENCH_LIVE_CLIENTS (default 1000) streams of one top, the
# server's memory and CPU per stream and Redis's reads meanwhile.
"$bin" bench --wipe-redis live --brokers "127.0.0.1:$kport" --redis "redis://127.0.0.1:$rport" --clients "${BENCH_LIVE_CLIENTS:-1000}"
# The latency run again, against librdkafka's mock cluster (an in-memory
# broker inside the bench process) instead of Apache Kafka: rankflow's own share
# of the latency, with a broker that is not the bottleneck.
"$bin" bench --wipe-redis latency --brokers mock --redis "redis://127.0.0.1:$rport" --rate "${BENCH_LATENCY_RATE:-5000}" --seconds "${BENCH_LATENCY_SECONDS:-30}"
