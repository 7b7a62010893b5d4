"""Shared helpers of the server tests (test_server_*.py): subprocess and raw-socket helpers,
reply framing and reading until EOF or quiet.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from .support import ROOT, Raw, stop_process


HOST = "127.0.0.1"


# ------------------------------------------------------------------------------ helpers

def _env() -> dict:
    return dict(os.environ, PYTHONPATH=ROOT)


class Proc:
    """A server subprocess started with an arbitrary argv (jobgate or jobgate-beanstalkd),
    `env`: variables added to the environment.

    `wait_tcp(port)` / `wait_unix(path)` wait until it accepts; `stop()` sends SIGTERM and
    returns (returncode, stdout, stderr); `kill()` sends SIGKILL. Always stopped by `procs`.
    """

    def __init__(self, argv: list[str], env: dict | None = None) -> None:
        self.argv = argv
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=dict(_env(), **(env or {})),
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.out = self.err = b""

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            out, err = self.proc.communicate()
            raise RuntimeError(f"server exited with {self.proc.returncode}: "
                               f"{err.decode(errors='replace')}")

    def wait_tcp(self, port: int, timeout: float = 15.0) -> float:
        """Wait until HOST:port accepts; returns seconds since the process was started."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                socket.create_connection((HOST, port), timeout=0.5).close()
                return time.monotonic() - self.started
            except OSError:
                time.sleep(0.005)
        raise RuntimeError(f"{HOST}:{port} not listening after {timeout}s")

    def wait_unix(self, path: str, timeout: float = 15.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.connect(path)
                return time.monotonic() - self.started
            except OSError:
                time.sleep(0.005)
        raise RuntimeError(f"unix:{path} not listening after {timeout}s")

    def stop(self, sig=signal.SIGTERM, timeout: float = 20.0):
        out, err = stop_process(self.proc, timeout, sig)
        self.out += out or b""
        self.err += err or b""
        return self.proc.returncode, self.out, self.err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def serve_argv(*flags: str) -> list[str]:
    """`jobgate serve FLAGS` run from this checkout."""
    return [sys.executable, "-m", "gateway.cli", "serve", *flags]


def run_cli(argv: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run a command that is expected to exit by itself (bad config, -v, -h)."""
    return subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, timeout=timeout)


def unix_raw(path: str, timeout: float = 5.0) -> Raw:
    """A Raw client connected to a unix socket."""
    r = Raw.__new__(Raw)
    r.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    r.sock.settimeout(timeout)
    r.sock.connect(path)
    r.buf = b""
    return r


def stats_dict(r: Raw, cmd: bytes = b"stats\r\n") -> dict:
    frame = r.cmd(cmd)
    assert frame.startswith(b"OK "), frame
    body = frame.split(b"\r\n", 1)[1][:-2].decode()
    out = {}
    for line in body.splitlines()[1:]:
        k, _, v = line.partition(": ")
        out[k] = v
    return out


def wait_until(pred, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout}s")


def read_eof(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Read until the peer closes; returns what was read (fails on timeout)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            d = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not d:
            return data
        data += d


def no_reply(r: Raw, wait: float = 0.3) -> bool:
    """True when nothing arrives on `r` within `wait` seconds (the connection stays open)."""
    if r.buf:
        return False
    r.sock.settimeout(wait)
    try:
        d = r.sock.recv(65536)
    except (socket.timeout, TimeoutError):
        return True
    finally:
        r.sock.settimeout(5.0)
    r.buf += d
    return False


def waiting(r: Raw) -> int:
    return int(stats_dict(r)["current-waiting"])


def send_unfinished(socks: list, size: int) -> int:
    """Send `size - 1` bytes of zeros on each non-blocking socket of `socks` (each an
    unfinished command whose header was sent: its last byte never comes), 1 MiB at a time,
    until every one is sent or 2 s pass without progress (the server stops reading: its
    buffer budget). Returns how many bytes were sent in all."""
    import time
    chunk = b"\x00" * (1 << 20)
    left = [size - 1] * len(socks)
    last = time.monotonic()
    while any(left) and time.monotonic() - last < 2:
        for i, c in enumerate(socks):
            try:
                n = c.send(chunk[:min(len(chunk), left[i])]) if left[i] else 0
            except BlockingIOError:
                n = 0
            if n:
                left[i] -= n
                last = time.monotonic()
        time.sleep(0.001)
    return sum(size - 1 - x for x in left)

