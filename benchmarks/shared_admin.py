"""Latency of beanstalk's global commands across shared-mode nodes (issue 19, item 4).

Two `jobgate serve --database-mode shared` nodes on one fresh PostgreSQL database (created and
dropped here). Node A fills tube `t` with --jobs ready jobs and --jobs/10 delayed ones, and
--tubes other tubes with 10 jobs each (pipelined puts); then, on node B, each command runs
--rounds times, one at a time, and its round-trip time is recorded: `stats` and `list-tubes`
(a scan of the jobs table), `stats-tube t`, `peek-ready`, `peek-delayed`, `stats-job <id>`
of a job A stored, `kick 1` (a delayed job), `pause-tube t 0`, and `put` + `delete <id>` of a
job put on A (the delete crosses nodes). Reports p50/p90/p99/max per command.

    .venv/bin/python benchmarks/shared_admin.py --jobs 10000 --rounds 200
    .venv/bin/python benchmarks/shared_admin.py --jobs 100000 --rounds 50

Run from the repository root with the project's virtualenv. Nothing here is part of the test
suite.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared_common import Conn, pct, pg_option, shared_nodes  # noqa: E402


def reply(c: Conn) -> bytes:
    """One reply line, and its body when it has one (OK / FOUND / RESERVED)."""
    ln = c.line()
    w = ln.split()
    if w and w[0] in (b"OK", b"FOUND", b"RESERVED"):
        c.body(int(w[-1]))
    return ln


def fill(c: Conn, tube: str, n: int, delay: int = 0) -> list:
    """Put `n` jobs in `tube` with pipelined batches of 500; their ids."""
    c.cmd(b"use %s\r\n" % tube.encode())
    ids = []
    left = n
    while left:
        k = min(500, left)
        c.s.sendall(b"put 1024 %d 60 10\r\n0123456789\r\n" % delay * k)
        for _ in range(k):
            ln = c.line()
            assert ln.startswith(b"INSERTED"), ln
            ids.append(int(ln.split()[1]))
        left -= k
    return ids


def timed(c: Conn, data: bytes, rounds: int, check=None) -> list:
    out = []
    for i in range(rounds):
        d = data(i) if callable(data) else data
        t0 = time.perf_counter()
        c.s.sendall(d)
        ln = reply(c)
        out.append((time.perf_counter() - t0) * 1000)
        if check is not None:
            assert check(ln), (d, ln)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pg_option(ap)
    ap.add_argument("--jobs", type=int, default=10_000, help="ready jobs in tube t")
    ap.add_argument("--tubes", type=int, default=100, help="other tubes (10 jobs each)")
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    with shared_nodes(args.pg, "jobgate_admin_") as (pa, pb):
        ca, cb = Conn(pa), Conn(pb)
        ready = fill(ca, "t", args.jobs)
        fill(ca, "t", max(args.jobs // 10, args.rounds + 1), delay=3600)
        for i in range(args.tubes):
            fill(ca, f"o{i}", 10)
        ca.cmd(b"use t\r\n")
        cb.cmd(b"use t\r\n")
        rows = args.jobs + max(args.jobs // 10, args.rounds + 1) + 10 * args.tubes
        ok = (lambda ln: ln.startswith(b"OK"))
        found = (lambda ln: ln.startswith(b"FOUND"))
        cases = [
            ("stats", b"stats\r\n", ok),
            ("list-tubes", b"list-tubes\r\n", ok),
            ("stats-tube t", b"stats-tube t\r\n", ok),
            ("peek-ready", b"peek-ready\r\n", found),
            ("peek-delayed", b"peek-delayed\r\n", found),
            ("stats-job <id of A>", lambda i: b"stats-job %d\r\n" % ready[i], ok),
            ("kick 1 (delayed)", b"kick 1\r\n", lambda ln: ln == b"KICKED 1"),
            ("pause-tube t 0", b"pause-tube t 0\r\n", lambda ln: ln == b"PAUSED"),
        ]
        print(f"jobs rows: {rows}, tubes: {args.tubes + 1}, rounds: {args.rounds}\n")
        print("| command on node B | p50 ms | p90 ms | p99 ms | max ms |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for label, data, check in cases:
            timed(cb, data, 5, check)   # warm-up
            lat = timed(cb, data, args.rounds, check)
            print(f"| {label} | {pct(lat, .5):.2f} | {pct(lat, .9):.2f} | {pct(lat, .99):.2f} "
                  f"| {max(lat):.2f} |")
        mine = fill(ca, "t", args.rounds)   # ready jobs of A, deleted on B
        lat = timed(cb, lambda i: b"delete %d\r\n" % mine[i], args.rounds,
                    lambda ln: ln == b"DELETED")
        print(f"| delete <ready job of A> | {pct(lat, .5):.2f} | {pct(lat, .9):.2f} | "
              f"{pct(lat, .99):.2f} | {max(lat):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
