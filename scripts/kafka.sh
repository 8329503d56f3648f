#!/usr/bin/env bash
# Apache Kafka on this machine, in KRaft mode, with no Docker: its jars come
# from Maven Central through scripts/kafka/pom.xml (fetched once into a
# cache), each node runs as `java kafka.Kafka` in the background on loopback.
# For the demo against a real broker, the tests and the benchmarks.
#
#   scripts/kafka.sh start [--port P] [--dir D] [--nodes N]
#       Formats D (default .kafka/ in the checkout) the first time, then
#       starts every node of it that is not running and waits until each has
#       started. The last line of standard output is the bootstrap address:
#       127.0.0.1:P (comma-separated for several nodes; free ports if no
#       --port, P, P+1, ... if given). A directory already formatted keeps
#       its ports and data: `start` again restarts the nodes that stopped.
#   scripts/kafka.sh stop [--dir D]
#       Ends only what this script started in D (by the pids in it).
#   scripts/kafka.sh fetch
#       Only fetches the jars; prints their folder.
#
# More, for tests (all optional):
#   start --node K           only node K (1-based) of a formatted D
#   start --protocol PROTO   the client listener's security protocol
#                            (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
#   start --properties F     lines appended to every node's server.properties
#                            at format time (TLS files, SASL users, ...)
#   start --scram M:U:P      a SCRAM user (M = SCRAM-SHA-256 or -512) made at format
#   start --watch PID        stop the nodes and delete D once process PID ends
#   stop --node K [--kill]   only node K; --kill sends SIGKILL, not SIGTERM
#
# Environment: KAFKA_HEAP (each node's -Xmx, default 1g), RANKFLOW_KAFKA_CACHE
# (the jars' cache, default ~/.cache/rankflow).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

cmd=${1:-}; [ $# -gt 0 ] && shift
dir="$root/.kafka"; port=""; nodes=1; node=""; protocol=PLAINTEXT; props=""; watch=""; signal=TERM
scram=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --node) node=$2; shift 2 ;;
    --protocol) protocol=$2; shift 2 ;;
    --properties) props=$2; shift 2 ;;
    --scram) scram+=("$2"); shift 2 ;;
    --watch) watch=$2; shift 2 ;;
    --kill) signal=KILL; shift ;;
    *) echo "kafka.sh: unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# The jars of the pom's broker, copied by Maven into a cache named after the
# pom's contents (so a new version fetches anew). One fetch at a time.
fetch() {
  local cache key
  cache=${RANKFLOW_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rankflow}
  key=$(sha256sum "$here/kafka/pom.xml" | cut -c1-12)
  libs="$cache/kafka-$key/libs"
  mkdir -p "$cache"
  exec 9>"$cache/kafka-$key.lock"
  flock 9
  if [ ! -e "$libs/.complete" ]; then
    command -v mvn >/dev/null && command -v java >/dev/null || "$here/setup.sh" --kafka >&2
    echo "kafka.sh: fetching Apache Kafka's jars with Maven into $libs" >&2
    rm -rf "$libs"
    mvn -q -B -Dstyle.color=never -f "$here/kafka/pom.xml" dependency:copy-dependencies -DoutputDirectory="$libs" >&2
    touch "$libs/.complete"
  fi
  exec 9>&-
}

# java and its options (after fetch), to be followed by the class and its arguments.
jvm() {
  java=(java -Xms128m -Xmx"${KAFKA_HEAP:-1g}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
    -Dlog4j2.configurationFile="$here/kafka/log4j2.properties" -cp "$libs/*")
}

# `count` distinct free loopback ports, none above 55535 (as scripts/lib.sh).
free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
held, ports = [], []
while len(ports) < int(sys.argv[1]):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    held.append(s)
    if p <= 55535:
        ports.append(p)
print(" ".join(map(str, ports)))
PY
}

# Writes every node's server.properties and formats its store (once).
format() {
  local ports voters="" i client internal controller rf isr session
  read -r -a ports <<<"$(free_ports $((3 * nodes)))"
  rf=$nodes; isr=$(( nodes > 2 ? 2 : 1 )); session=$(( nodes > 1 ? 6000 : 30000 ))
  for i in $(seq 1 "$nodes"); do
    voters+="${voters:+,}$i@127.0.0.1:${ports[$((3 * i - 1))]}"
  done
  local bootstrap="" id
  # A cluster id as Kafka makes them (16 random bytes, base64url), without a JVM.
  id=$(python3 -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')
  local formats=()
  for i in $(seq 1 "$nodes"); do
    client=${ports[$((3 * i - 3))]}; internal=${ports[$((3 * i - 2))]}; controller=${ports[$((3 * i - 1))]}
    [ -n "$port" ] && client=$((port + i - 1))
    bootstrap+="${bootstrap:+,}127.0.0.1:$client"
    mkdir -p "$dir/node-$i"
    cat >"$dir/node-$i/server.properties" <<EOF
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listeners=CLIENT://127.0.0.1:$client,INTERNAL://127.0.0.1:$internal,CONTROLLER://127.0.0.1:$controller
advertised.listeners=CLIENT://127.0.0.1:$client,INTERNAL://127.0.0.1:$internal
listener.security.protocol.map=CLIENT:$protocol,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
log.dirs=$dir/node-$i/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=10
group.initial.rebalance.delay.ms=0
# Sessions as short as 1 s allowed (Kafka's least is 6 s by default): a
# consumer that wants a quick takeover after a crash may ask for one.
group.min.session.timeout.ms=1000
# A node that stops heartbeating is fenced by the controllers: in a cluster
# after 6 s (9 s by default), so leadership moves off a crashed node within
# seconds; a lone node has nowhere to move it, so only after 30 s (a fence
# takes leadership of every partition away and gives it back, which on a
# loaded machine stalled every group's coordinator for a minute).
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=$session
# Topics exist only when made (rankflow never relies on a producer or consumer creating one).
auto.create.topics.enable=false
EOF
    [ -z "$props" ] || cat "$props" >>"$dir/node-$i/server.properties"
    local args=(format -t "$id" -c "$dir/node-$i/server.properties")
    for s in "${scram[@]}"; do
      IFS=: read -r mech user pass <<<"$s"
      args+=(--add-scram "$mech=[name=$user,password=$pass]")
    done
    "${java[@]}" kafka.tools.StorageTool "${args[@]}" >"$dir/node-$i/format.log" 2>&1 &
    formats+=($!)
  done
  for i in $(seq 1 "$nodes"); do
    wait "${formats[$((i - 1))]}" || { cat "$dir/node-$i/format.log" >&2; exit 1; }
  done
  echo "$bootstrap" >"$dir/bootstrap"
}

running() { [ -s "$1/pid" ] && kill -0 "$(cat "$1/pid")" 2>/dev/null; }

start_node() {
  local n=$1
  running "$n" && return 0
  # The JVM's pauses go to gc.log beside broker.log (the first suspect of a stall).
  setsid "${java[@]}" -Xlog:gc:file="$n/gc.log":uptime,level:filecount=2,filesize=5m \
    kafka.Kafka "$n/server.properties" >>"$n/broker.log" 2>&1 </dev/null &
  echo $! >"$n/pid"
}

# Waits until node folder $1's broker says it started (90 s at most).
wait_started() {
  local n=$1 start
  start=$(cat "$n/broker.log.mark" 2>/dev/null || echo 0)
  for _ in $(seq 1 450); do
    tail -c +"$((start + 1))" "$n/broker.log" | grep -q 'Kafka Server started' && return 0
    running "$n" || { echo "kafka.sh: $n exited:" >&2; tail -20 "$n/broker.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "kafka.sh: $n did not start within 90 s:" >&2; tail -20 "$n/broker.log" >&2; exit 1
}

node_dirs() {
  if [ -n "$node" ]; then echo "$dir/node-$node"; else ls -d "$dir"/node-* 2>/dev/null || true; fi
}

case "$cmd" in
  fetch)
    fetch; echo "$libs" ;;
  start)
    fetch; jvm
    [ -s "$dir/bootstrap" ] || format
    for n in $(node_dirs); do
      running "$n" && continue
      touch "$n/broker.log"; stat -c %s "$n/broker.log" >"$n/broker.log.mark"
      start_node "$n"
    done
    for n in $(node_dirs); do wait_started "$n"; done
    if [ -n "$watch" ]; then
      (
        while kill -0 "$watch" 2>/dev/null; do sleep 1; done
        "$0" stop --dir "$dir" --kill >/dev/null 2>&1 || true
        rm -rf "$dir"
      ) </dev/null >/dev/null 2>&1 &
    fi
    cat "$dir/bootstrap" ;;
  stop)
    for n in $(node_dirs); do
      running "$n" || continue
      pid=$(cat "$n/pid")
      kill -s "$signal" "$pid"
      for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -s KILL "$pid" 2>/dev/null || true
      rm -f "$n/pid"
    done ;;
  *)
    echo "usage: scripts/kafka.sh start|stop|fetch [options] (see the top of $0)" >&2; exit 2 ;;
esac
