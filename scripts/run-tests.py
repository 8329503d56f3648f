#!/usr/bin/env python3
"""Runs the suite's test binaries, several at a time, and prints each one's time.

    cargo test --workspace --all-targets --no-run --message-format=json-render-diagnostics \
        | scripts/run-tests.py --jobs 3 --test-threads 2

Reads cargo's build messages on stdin (the test executables it built), runs
each from its package's directory as `cargo test` would, `--jobs` at a time,
the slowest first (the times of the last run, kept in
target/test-times.tsv; on a first run, the ones known to be slow), and
prints every failing binary's output whole. At the end: a table of every
binary's time, slowest first, and the failures. Exit status 1 if any failed.

Most of the suite's time is spent waiting (for brokers to start, workers to
be killed and restarted, records to arrive), not computing: binaries run
side by side finish sooner on two cores than one after another.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

# Known slow binaries, started first when no earlier run's times are at hand.
SLOW_FIRST = ["faults", "kafka_faults", "lost_data", "failover", "history", "secure", "exactly_once",
              "moderation", "live_ops", "secure_refusals", "sharded", "league_faults", "formats"]


def executables(lines):
    """(name, path, package directory) of every test executable cargo built."""
    out = []
    for line in lines:
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        kind = target["kind"][0]
        name = target["name"] if kind == "test" else f"{target['name']} ({kind})"
        out.append((name, msg["executable"], os.path.dirname(msg["manifest_path"])))
    return out


def order(tests, times_path):
    """The slowest first: by the last run's times, else SLOW_FIRST then the rest."""
    times = {}
    if os.path.exists(times_path):
        with open(times_path) as f:
            for line in f:
                name, _, secs = line.rstrip("\n").rpartition("\t")
                try:
                    times[name] = float(secs)
                except ValueError:
                    pass
    rank = {n: len(SLOW_FIRST) - i for i, n in enumerate(SLOW_FIRST)}
    return sorted(tests, key=lambda t: (times.get(t[0], 0.0), rank.get(t[0], 0)), reverse=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--test-threads", type=int, default=2)
    ap.add_argument("--times", default="target/test-times.tsv")
    args = ap.parse_args()

    tests = order(executables(sys.stdin), args.times)
    if not tests:
        print("run-tests: cargo built no test executable", file=sys.stderr)
        return 1
    queue = list(tests)
    lock = threading.Lock()
    results = {}  # name -> (seconds, exit code)
    logs = tempfile.mkdtemp(prefix="rankflow-test-logs-")
    started = time.monotonic()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                name, exe, cwd = queue.pop(0)
            log = os.path.join(logs, name.replace(" ", "_").replace("(", "").replace(")", "") + ".log")
            t0 = time.monotonic()
            with open(log, "wb") as out:
                rc = subprocess.call([exe, "--test-threads", str(args.test_threads)], cwd=cwd,
                                     stdout=out, stderr=subprocess.STDOUT)
            secs = time.monotonic() - t0
            with open(log, "rb") as f:
                text = f.read().decode(errors="replace")
            with lock:
                results[name] = (secs, rc)
                summary = [l for l in text.splitlines() if l.startswith("test result:")]
                print(f"test: {name}: {'ok' if rc == 0 else 'FAILED'} in {secs:.0f} s"
                      f" ({summary[-1][len('test result: '):] if summary else 'no summary'})", flush=True)
                if rc != 0:
                    print(f"---- output of {name} ----\n{text}---- end of {name} ----", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    wall = time.monotonic() - started
    print(f"\ntest: {len(results)} binaries in {wall:.0f} s ({args.jobs} at a time), slowest first:")
    for name, (secs, rc) in sorted(results.items(), key=lambda r: -r[1][0]):
        print(f"  {secs:6.0f} s  {name}{'  FAILED' if rc else ''}")
    os.makedirs(os.path.dirname(args.times) or ".", exist_ok=True)
    with open(args.times, "w") as f:
        for name, (secs, _) in results.items():
            f.write(f"{name}\t{secs:.1f}\n")
    failed = sorted(n for n, (_, rc) in results.items() if rc != 0)
    if failed:
        print(f"test: {len(failed)} failed: {', '.join(failed)}")
        return 1
    print("test: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
