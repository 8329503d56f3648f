#!/usr/bin/env bash
# Works around a tansu 0.6 defect wherever rankflow starts tansu (the test
# harness, scripts/demo.sh, scripts/bench.sh): its sqlite schema has no index
# on header(topition, offset_id), and every fetch looks up each fetched
# record's headers, so once any topic holds records with headers (rankflow's
# dead letters carry five) every fetch scans the whole header table and the
# broker stalls (148 s against 14 s for 400,000 records). The index changes
# no behaviour; sqlite allows creating it from another process while the
# broker runs. Waits (up to 30 s) for tansu to create its schema first.
#
#   scripts/tansu-index.sh path/to/broker.db
set -euo pipefail
db=$1
exec python3 - "$db" <<'PY'
import sqlite3, sys, time
db = sys.argv[1]
deadline = time.time() + 30
while True:
    try:
        c = sqlite3.connect(db, timeout=10)
        if c.execute("select 1 from sqlite_master where type = 'table' and name = 'header'").fetchone():
            c.execute("create index if not exists header_topition_offset on header (topition, offset_id)")
            c.commit()
            c.close()
            break
        c.close()
    except sqlite3.OperationalError as e:
        if time.time() > deadline:
            sys.exit(f"tansu-index: {db}: {e}")
    if time.time() > deadline:
        sys.exit(f"tansu-index: {db}: tansu created no header table within 30 s")
    time.sleep(0.1)
PY
