# Helpers the bench scripts source: a scratch directory of their own, the
# processes they start (stopped, and the directory removed, on exit), an
# Apache Kafka broker, free loopback ports and waiting for one to open.
# Use: . scripts/lib.sh; scratch NAME (sets $dir); pids+=($!) per process;
# start_kafka (sets $kport and $broker_pid), stop_kafka.

pids=()
dir=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -z "$dir" ] || { stop_kafka; rm -rf "$dir"; }
}
trap cleanup EXIT
scratch() { dir=$(mktemp -d "/tmp/rankflow-$1-XXXXXX"); }
# A free port no higher than 55535: a Redis Cluster node also listens on its
# port + 10000, and refuses to start above that (about one free port in five
# is higher, with the default range of ephemeral ports).
free_port() {
  python3 -c '
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p <= 55535:
        print(p); break'
}
wait_port() { for _ in $(seq 1 150); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.2; done; echo "port $1 never opened" >&2; exit 1; }
# A one-node Apache Kafka (scripts/kafka.sh) of this script's own, in
# $dir/kafka: its client port in $kport and its process in $broker_pid.
start_kafka() {
  local bootstrap
  bootstrap=$(scripts/kafka.sh start --dir "$dir/kafka" --watch $$ | tail -1)
  kport=${bootstrap##*:}
  broker_pid=$(cat "$dir/kafka/node-1/pid")
}
# Stops it and removes its data (a next start_kafka begins empty).
stop_kafka() {
  [ -d "$dir/kafka" ] || return 0
  scripts/kafka.sh stop --dir "$dir/kafka" >/dev/null 2>&1 || true
  rm -rf "$dir/kafka"
}
