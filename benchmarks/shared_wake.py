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
import socket
import subprocess
import sys
import tempfile
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Conn:
    """A minimal blocking beanstalk connection."""

    def __init__(self, port: int) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise EOFError("closed")
            self.buf += d
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def cmd(self, data: bytes) -> bytes:
        self.s.sendall(data)
        return self.line()

    def body(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self.buf += self.s.recv(65536)
        b, self.buf = self.buf[:n], self.buf[n + 2:]
        return b


def start_node(url: str, cfg: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--listen",
                          f"beanstalk=127.0.0.1:{port}", "--database", url, "--config", cfg,
                          "--log-level", "warning"], cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=REPO))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            c = Conn(port)
            c.s.sendall(b"list-tubes\r\n")
            c.line()
            c.s.close()
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit("node did not start")


def pct(vals: list, q: float) -> float:
    v = sorted(vals)
    return v[min(len(v) - 1, int(q * len(v)))]


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
    ap.add_argument("--pg", default=os.environ.get(
        "JOBGATE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
        help="an admin URL of the PostgreSQL server (a database is created and dropped)")
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    import sqlalchemy as sa
    name = "jobgate_wake_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(args.pg, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.make_url(args.pg).set(database=name).render_as_string(hide_password=False)
    procs = []
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("database:\n  mode: shared\n  poll_interval_ms: 60000\n")
            cfg = f.name
        a, pa = start_node(url, cfg)
        procs.append(a)
        b, pb = start_node(url, cfg)
        procs.append(b)
        worker = Conn(pb)
        cases = {"cross-node (put on A, reserve on B)": Conn(pa),
                 "same node (put and reserve on B)": Conn(pb)}
        for c in cases.values():
            c.cmd(b"use default\r\n")
        measure(cases["cross-node (put on A, reserve on B)"], worker, 20)   # warm-up
        print(f"| case | rounds | p50 ms | p90 ms | p99 ms | max ms |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for label, prod in cases.items():
            lat = measure(prod, worker, args.rounds)
            print(f"| {label} | {len(lat)} | {pct(lat, .5):.2f} | {pct(lat, .9):.2f} | "
                  f"{pct(lat, .99):.2f} | {max(lat):.2f} |")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        with admin.connect() as c:
            c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
