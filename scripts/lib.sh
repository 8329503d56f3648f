# Helpers the bench scripts source: a scratch directory of their own, the
# processes they start (stopped, and the directory removed, on exit), free
# loopback ports and waiting for one to open.
# Use: . scripts/lib.sh; scratch NAME (sets $dir); pids+=($!) per process.

pids=()
dir=""
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -z "$dir" ] || rm -rf "$dir"; }
trap cleanup EXIT
scratch() { dir=$(mktemp -d "/tmp/rankflow-$1-XXXXXX"); }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 150); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.2; done; echo "port $1 never opened" >&2; exit 1; }
