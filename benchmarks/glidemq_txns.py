#!/usr/bin/env python3
"""How many PostgreSQL transactions a glide-mq addJob costs on a jobgate server (shared mode or
not): one RESP connection writes pipelined `FCALL glidemq_addJob` (100 per write, library v93's
21-argument form) for --duration seconds against a running server, then prints jobs/s and
the database's committed transactions per job (pg_stat_database.xact_commit before and after;
the server's own background statements count too). Never part of the tests.

    # a shared-mode node on a fresh database, then the load
    psql -h 127.0.0.1 -U postgres -d test -c 'DROP DATABASE IF EXISTS txn' -c 'CREATE DATABASE txn'
    .venv/bin/python -m gateway.cli serve --listen glidemq=127.0.0.1:16380 \\
        --database postgresql+psycopg://postgres@127.0.0.1:5432/txn --database-mode shared &
    .venv/bin/python benchmarks/glidemq_txns.py --port 16380 --database txn
    kill %1

docs/scaling.md, "glide-mq across nodes" (the look-ahead of a connection's addJobs).
"""
from __future__ import annotations

import argparse
import socket
import time

import hiredis
import psycopg
from glidemq_client import encode

EXTRA = (0, "", "", 0)
LIBRARY = "#!lua name=glidemq\n-- jobgate answers the glidemq functions natively\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True, help="the glidemq listener's port")
    ap.add_argument("--database", required=True, help="the server's database name")
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test",
                    help="where to read pg_stat_database (default: %(default)s)")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds (default 5)")
    ap.add_argument("--pipeline", type=int, default=100, help="addJobs per write (100)")
    a = ap.parse_args()
    sock = socket.create_connection(("127.0.0.1", a.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = hiredis.Reader()

    def replies(n: int) -> list:
        out = []
        while len(out) < n:
            r = reader.gets()
            if r is False:
                reader.feed(sock.recv(1 << 20))
                continue
            if isinstance(r, hiredis.ReplyError):
                raise SystemExit(f"the server answered {r}")
            out.append(r)
        return out
    sock.sendall(encode("FUNCTION", "LOAD", "REPLACE", LIBRARY))
    replies(1)
    p = "glide:{txn}"
    one = encode("FCALL", "glidemq_addJob", 4, f"{p}:id", f"{p}:stream", f"{p}:scheduled",
                  f"{p}:events", "job", "x" * 100, "{}", int(time.time() * 1000), 0, 0, "", 0,
                  "", 0, 0, 0, 0, 0, 0, 0, "", *EXTRA)
    batch = one * a.pipeline
    sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = %s"
    with psycopg.connect(a.pg, autocommit=True) as pg:
        x0 = pg.execute(sql, (a.database,)).fetchone()[0]
        end = time.monotonic() + a.duration
        jobs = 0
        while time.monotonic() < end:
            sock.sendall(batch)
            replies(a.pipeline)
            jobs += a.pipeline
        time.sleep(1.0)   # the statistics collector's delay
        x1 = pg.execute(sql, (a.database,)).fetchone()[0]
    print(f"{jobs / a.duration:,.0f} jobs/s, {(x1 - x0) / jobs:.2f} transactions per job "
          f"({x1 - x0} for {jobs} jobs)")


if __name__ == "__main__":
    main()
