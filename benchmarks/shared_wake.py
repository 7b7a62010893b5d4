"""Cross-node wake-up latency in shared mode (issue 19: target p99 <= 20 ms).

Two `jobgate serve --database-mode shared` nodes on one fresh PostgreSQL database (created and
dropped here), the claim poll set to a minute so that only LISTEN/NOTIFY can wake a reserver.
A beanstalk worker blocks in `reserve` on node B; a producer on node A (cross-node) or on
node B itself (same node, the baseline) puts one job; the latency is from just before the put
is written to the moment the worker's RESERVED line arrives. Then the worker deletes it and
waits again. Reports p50/p90/p99/max per case.

    .venv/bin/python benchmarks/shared_wake.py --rounds 300
    .venv/bin/python benchmarks/shared_wake.py --pg postgresql+psycopg://postgres@127.0.0.1:5432/test

Run from the repository root with the project's virtualenv (it uses SQLAlchemy to create the
database). Nothing here is part of the test suite.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared_common import Conn, pct, pg_option, shared_nodes  # noqa: E402


def measure(prod: Conn, worker: Conn, rounds: int) -> list:
    out = []
    for i in range(rounds):
        worker.s.sendall(b"reserve\r\n")
        time.sleep(0.002)   # the reserve is waiting before the put goes out
        t0 = time.perf_counter()
        r = prod.cmd(b"put 0 0 60 5\r\nhello\r\n")
        assert r.startswith(b"INSERTED"), r
        ln = worker.line()
        t1 = time.perf_counter()
        assert ln.startswith(b"RESERVED"), ln
        jid = ln.split()[1]
        worker.body(int(ln.split()[2]))
        assert worker.cmd(b"delete " + jid + b"\r\n") == b"DELETED"
        out.append((t1 - t0) * 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pg_option(ap)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    with shared_nodes(args.pg, "jobgate_wake_") as (pa, pb):
        worker = Conn(pb)
        cases = {"cross-node (put on A, reserve on B)": Conn(pa),
                 "same node (put and reserve on B)": Conn(pb)}
        for c in cases.values():
            c.cmd(b"use default\r\n")
        measure(cases["cross-node (put on A, reserve on B)"], worker, 20)   # warm-up
        print("| case | rounds | p50 ms | p90 ms | p99 ms | max ms |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for label, prod in cases.items():
            lat = measure(prod, worker, args.rounds)
            print(f"| {label} | {len(lat)} | {pct(lat, .5):.2f} | {pct(lat, .9):.2f} | "
                  f"{pct(lat, .99):.2f} | {max(lat):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
