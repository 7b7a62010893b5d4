"""Helpers for tests: run a real jobgate server in a subprocess on 127.0.0.1, talk raw beanstalk.

Everything here uses real sockets and real processes; every process started is stopped.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid

from conformance.servers import free_port  # noqa: F401  (one port picker for all tests)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADDR_HOST = "127.0.0.1"  # where every test server listens


def wait_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 15.0) -> None:
    """Wait until 127.0.0.1:port accepts connections. Raises RuntimeError on timeout/exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.01)
    raise RuntimeError(f"port {port} not listening after {timeout}s")


def wait_serving(port: int, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    """Wait until the beanstalk listener on 127.0.0.1:port answers a command. A jobgate
    server listens before it has locked and recovered its database (gateway/listen.py), so
    accepting a connection no longer means it is serving; an answer does. Raises RuntimeError
    when the process exits or the time is up."""
    wait_port(port, proc, timeout)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"list-tubes\r\n")
            buf = b""
            while not buf.endswith(b"\n\r\n"):
                d = s.recv(4096)
                if not d:
                    raise OSError("connection closed")
                buf += d
    except OSError as e:
        raise RuntimeError(f"server on port {port} did not answer ({e}; exit status "
                           f"{None if proc is None else proc.poll()})") from None


def stop_process(proc: subprocess.Popen, timeout: float = 20, sig=signal.SIGTERM):
    """Send `sig` (SIGTERM) to `proc` if it runs, wait up to `timeout` s, then SIGKILL;
    returns its (stdout, stderr) bytes."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


class Server:
    """A jobgate server subprocess: `jobgate serve` with the given database and durability.
    The constructor returns once the server answers (it holds its database and recovered).

    Attributes: port (beanstalk), workq_port (None unless `workq`), bunqueue_port (None unless
    `bunqueue`), proc, url. `stop()` sends
    SIGTERM and waits; `kill()` sends SIGKILL.
    """

    def __init__(self, url: str | None, durability: str = "commit", port: int | None = None,
                 extra: list[str] | None = None, cwd: str | None = None, workq: bool = False,
                 workq_port: int | None = None, bunqueue: bool = False,
                 bunqueue_port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = url
        args = [sys.executable, "-m", "gateway.cli", "serve", "--listen",
                f"beanstalk=127.0.0.1:{self.port}", "--durability", durability,
                "--log-level", "warning"]
        self.workq_port = None
        if workq or workq_port:
            self.workq_port = workq_port or free_port()
            args += ["--listen", f"workq=127.0.0.1:{self.workq_port}"]
        self.bunqueue_port = None
        if bunqueue or bunqueue_port:
            self.bunqueue_port = bunqueue_port or free_port()
            args += ["--listen", f"bunqueue=127.0.0.1:{self.bunqueue_port}"]
        if url:
            args += ["--database", url]
        args += extra or []
        env = dict(os.environ, PYTHONPATH=ROOT)
        self.proc = subprocess.Popen(args, cwd=cwd or ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        try:
            wait_serving(self.port, self.proc)
            if self.workq_port:
                wait_port(self.workq_port, self.proc)
            if self.bunqueue_port:
                wait_port(self.bunqueue_port, self.proc)
        except RuntimeError:
            out, err = self.stop()
            raise RuntimeError(f"server did not start: {err.decode(errors='replace')}")

    def stop(self, timeout: float = 20):
        """SIGTERM, wait; returns (stdout, stderr) bytes."""
        return stop_process(self.proc, timeout)

    def kill(self) -> None:
        """SIGKILL now and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


class Raw:
    """A raw beanstalk connection with a reply-frame reader (bytes in, bytes out)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("connection closed")
        self.buf += d

    def reply(self) -> bytes:
        """One reply frame: a line, plus the body for RESERVED/FOUND/OK."""
        while b"\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n")
        line = self.buf[:i]
        parts = line.split(b" ")
        n = 0
        if parts[0] in (b"RESERVED", b"FOUND") and len(parts) == 3:
            n = int(parts[2]) + 2
        elif parts[0] == b"OK" and len(parts) == 2:
            n = int(parts[1]) + 2
        while len(self.buf) < i + 2 + n:
            self._fill()
        frame, self.buf = self.buf[:i + 2 + n], self.buf[i + 2 + n:]
        return frame

    def cmd(self, data: bytes) -> bytes:
        """Send one command and return its reply frame."""
        self.send(data)
        return self.reply()

    def close(self) -> None:
        self.sock.close()


def pg_admin_url() -> str | None:
    """JOBGATE_TEST_PG_URL (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test) or None."""
    return os.environ.get("JOBGATE_TEST_PG_URL") or None


def make_pg_database(admin_url: str) -> tuple[str, callable]:
    """Create a fresh database on the server of `admin_url`; returns (its URL, drop function)."""
    import sqlalchemy as sa
    name = "jobgate_t_" + uuid.uuid4().hex[:12]
    # no pooled connection kept: a test may restart PostgreSQL before the drop
    eng = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with eng.connect() as c:
        c.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)

    def drop() -> None:
        with eng.connect() as c:
            c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        eng.dispose()
    return url, drop
