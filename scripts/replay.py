"""Replays Redis commands captured by MONITOR, for scripts/bench-replay.sh.

usage: replay.py PORT MODE TRACE [SCRIPT]

TRACE is MONITOR's output for one phase of `rankflow-tools bench store`.
MODE says how its commands reach Redis:
  bare    the client's own commands (the bare writes), 7,000 to a pipeline
  script  the apply script's calls as they were sent (SCRIPT: its source,
          loaded first)
  native  each call's commands as the script made them, without the
          script: one MULTI/EXEC per call
  thin    each call's commands through a Lua script that only runs them
The parsed trace is cached beside TRACE (TRACE.MODE.pickle).
REPLAY_WITHOUT_MARKERS=1 leaves out the commands on dedupe marker keys
(`_seen`), in every mode but script: what the markers' commands cost.
"""

import hashlib
import os
import pickle
import socket
import sys

ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", '"': b'"', "\\": b"\\"}

# A script that runs the commands it is given and decides nothing: ARGV is,
# per command, its argument count and then its arguments.
THIN = b"""local i, n = 1, #ARGV
while i <= n do
  local k = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + k))
  i = i + k + 1
end
return 0"""


def parse(line):
    """A MONITOR line's arguments (quoted, with sdscatrepr's escapes), as bytes."""
    i = line.index("] ") + 2
    out = []
    while i < len(line):
        if line[i] != '"':
            i += 1
            continue
        i += 1
        arg = bytearray()
        while line[i] != '"':
            if line[i] == "\\":
                if line[i + 1] == "x":
                    arg.append(int(line[i + 2 : i + 4], 16))
                    i += 4
                else:
                    arg += ESCAPES[line[i + 1]]
                    i += 2
            else:
                arg += line[i].encode("latin-1")
                i += 1
        out.append(bytes(arg))
        i += 1
    return out


def load(trace, bare):
    """The trace as (call, its commands) pairs; for bare, (None, a pipeline's commands)."""
    cache = f"{trace}.{'bare' if bare else 'calls'}.pickle"
    if os.path.exists(cache):
        with open(cache, "rb") as f:
            return pickle.load(f)
    groups = []
    with open(trace, encoding="latin-1") as f:
        if bare:
            cmds = [parse(line.rstrip("\n")) for line in f]
            groups = [(None, cmds[i : i + 7000]) for i in range(0, len(cmds), 7000)]
        else:
            for line in f:
                if "[0 lua]" in line:
                    groups[-1][1].append(parse(line.rstrip("\n")))
                elif '"EVALSHA"' in line:
                    groups.append((parse(line.rstrip("\n")), []))
    with open(cache, "wb") as f:
        pickle.dump(groups, f)
    return groups


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.rd = self.sock.makefile("rb")

    def send(self, cmds):
        """Sends commands in one write and reads their replies; an error reply stops the run."""
        out = []
        for args in cmds:
            out.append(b"*%d\r\n" % len(args))
            for a in args:
                out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        for _ in cmds:
            self.reply()

    def reply(self):
        line = self.rd.readline()
        kind = line[:1]
        if kind == b"-":
            sys.exit(f"replay: Redis answered {line[:200]!r}")
        if kind == b"$" and int(line[1:]) >= 0:
            self.rd.read(int(line[1:]) + 2)
        elif kind == b"*":
            for _ in range(max(int(line[1:]), 0)):
                self.reply()


def main():
    port, mode, trace = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    groups = load(trace, mode == "bare")
    if os.environ.get("REPLAY_WITHOUT_MARKERS") == "1" and mode != "script":
        groups = [(call, [c for c in cmds if len(c) < 2 or b":_seen:" not in c[1]]) for call, cmds in groups]
    conn = Conn(port)
    if mode == "script":
        with open(sys.argv[4], "rb") as f:
            conn.send([[b"SCRIPT", b"LOAD", f.read()]])
    elif mode == "thin":
        conn.send([[b"SCRIPT", b"LOAD", THIN]])
    thin = hashlib.sha1(THIN).hexdigest().encode()
    conn.send([[b"FLUSHDB"]])
    for call, cmds in groups:
        if mode == "bare":
            conn.send(cmds)
        elif mode == "script":
            conn.send([call])
        elif mode == "native":
            conn.send([[b"MULTI"]] + cmds + [[b"EXEC"]])
        elif mode == "thin":
            argv = []
            for c in cmds:
                argv.append(str(len(c)).encode())
                argv += c
            conn.send([[b"EVALSHA", thin, b"0"] + argv])
        else:
            sys.exit(f"replay: unknown mode {mode}")


if __name__ == "__main__":
    main()
