"""What the shared-mode benchmarks (shared_wake.py, shared_admin.py) share: a fresh
PostgreSQL database with N `jobgate serve --database-mode shared` nodes on it (`shared_nodes`,
created, started, stopped and dropped), a minimal blocking beanstalk connection (`Conn`) and
percentiles (`pct`). Standard library plus SQLAlchemy (the project's virtualenv)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager

from bench_servers import free_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def start_node(url: str, cfg: str, bunqueue_port: int | None = None
               ) -> tuple[subprocess.Popen, int]:
    port = free_port()
    extra = [] if bunqueue_port is None else ["--listen", f"bunqueue=127.0.0.1:{bunqueue_port}"]
    p = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--listen",
                          f"beanstalk=127.0.0.1:{port}", *extra, "--database", url,
                          "--config", cfg, "--log-level", "warning"], cwd=REPO,
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


def pg_option(ap) -> None:
    """Add --pg (an admin URL of the PostgreSQL server) to argparse parser `ap`."""
    ap.add_argument("--pg", default=os.environ.get(
        "JOBGATE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
        help="an admin URL of the PostgreSQL server (a database is created and dropped)")


def pct(vals: list, q: float) -> float:
    v = sorted(vals)
    return v[min(len(v) - 1, int(q * len(v)))]


@contextmanager
def shared_nodes(pg: str, prefix: str, n: int = 2, poll_ms: int = 60_000,
                 bunqueue: bool = False):
    """Yield the beanstalk ports of `n` shared-mode nodes (claim poll `poll_ms`) started one
    after the other on a fresh database `<prefix><random>` of the PostgreSQL server that
    admin URL `pg` names (with `bunqueue`: (beanstalk ports, bunqueue ports)); stop them and
    drop the database afterwards."""
    import sqlalchemy as sa
    name = prefix + uuid.uuid4().hex[:8]
    admin = sa.create_engine(pg, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.make_url(pg).set(database=name).render_as_string(hide_password=False)
    procs = []
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(f"database:\n  mode: shared\n  poll_interval_ms: {poll_ms}\n")
            cfg = f.name
        ports, bports = [], []
        for _ in range(n):
            bports.append(free_port() if bunqueue else None)
            p, port = start_node(url, cfg, bports[-1])
            procs.append(p)
            ports.append(port)
        yield (ports, bports) if bunqueue else ports
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
