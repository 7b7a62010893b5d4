"""Start and stop a server process on a free 127.0.0.1 port.

Every process started here is stopped here: SIGKILL by PID, then wait. Nothing is killed by
name. All durations are seconds.
"""

from __future__ import annotations

import os
import shlex
import signal as _signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

__all__ = [
    "HOST",
    "BEANSTALKD",
    "beanstalkd_cmd",
    "jobgate_cmd",
    "jobgate_workq_cmd",
    "free_port",
    "ServerError",
    "ServerProcess",
    "parse_cmd_template",
]

HOST = "127.0.0.1"
BEANSTALKD = "/usr/bin/beanstalkd"


def beanstalkd_cmd(port: int, flags: tuple[str, ...] = (), binary: str = BEANSTALKD) -> list[str]:
    """argv for the reference server: ``beanstalkd -l 127.0.0.1 -p PORT [flags]``."""
    return [binary, "-l", HOST, "-p", str(port), *flags]


def jobgate_cmd(port: int, flags: tuple[str, ...] = ()) -> list[str]:
    """argv for jobgate's beanstalkd-compatible CLI (accepts beanstalkd's flags)."""
    return [sys.executable, "-m", "gateway.beanstalkd_cli", "-l", HOST, "-p", str(port), *flags]


def jobgate_workq_cmd(port: int, flags: tuple[str, ...] = ()) -> list[str]:
    """argv for jobgate serving only the workq dialect on ``HOST:port``, jobs in a SQLite file
    ``jobgate.db`` in the working directory (run it with ``fresh_cwd``), durability commit.
    ``flags`` are appended (more ``jobgate serve`` options)."""
    return [sys.executable, "-m", "gateway.cli", "serve", "--listen", f"workq={HOST}:{port}",
            "--database", "sqlite:///jobgate.db", "--durability", "commit",
            "--log-level", "warning", *flags]


def parse_cmd_template(template: str):
    """Turn a shell-like template with ``{port}`` and ``{flags}`` placeholders into a function
    ``(port: int, flags: tuple[str, ...]) -> list[str]``. ``{flags}`` expands to separate
    arguments; if absent, flags are appended at the end."""
    words = shlex.split(template)

    def build(port: int, flags: tuple[str, ...] = ()) -> list[str]:
        out: list[str] = []
        used_flags = False
        for w in words:
            if w == "{flags}":
                out.extend(flags)
                used_flags = True
            else:
                out.append(w.replace("{port}", str(port)).replace("{host}", HOST))
        if not used_flags:
            out.extend(flags)
        return out

    return build


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (Linux), or the IANA
    dynamic range elsewhere."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 49152, 65535


#: ports this process handed out lately (free_port never hands one out twice while it is here)
_RECENT_MAX = 4096
_recent: dict = {}


def _slice() -> tuple[int, int]:
    """(index, count): the share of the port range this process picks from. Under pytest-xdist
    (PYTEST_XDIST_WORKER "gw<i>", PYTEST_XDIST_WORKER_COUNT n) worker i takes the ports p with
    (p - bottom) % n == i (bottom: the range's first port), so that two workers never pick one
    port; else (0, 1)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        return int(worker[2:]) % int(count), int(count)
    return 0, 1


def _picking() -> tuple | None:
    """(bottom, top, index, count, slots, keep): free_port picks the ports bottom + index +
    count * k, k < slots, of [bottom, top) and avoids its last `keep` picks; None when the
    kernel's ephemeral range leaves no 2,000 ports outside it."""
    low, high = _ephemeral_range()
    if low - 10000 >= 2000:
        bottom, top = 10000, low
    elif 65535 - high >= 2000:
        bottom, top = high + 1, 65536
    else:
        return None
    index, count = _slice()
    slots = (top - bottom - index) // count
    keep = max(1, min(_RECENT_MAX, slots // 2))   # the rest of the slice stays pickable
    return bottom, top, index, count, slots, keep


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, taken from outside the kernel's
    ephemeral range (ports 10000 and up, below it).

    A port from ``bind(0)`` lies inside that range, so in the moment between choosing it and
    the server binding it, any outgoing connection on the machine (a client, a database pool)
    may get it as its local port, and a readiness probe connecting to a port nobody listens on
    yet may connect to itself: the server then fails with "address already in use" (seen in
    CI). Ports below the range are never handed out implicitly. A random pick is checked by a
    plain bind (which also refuses a port in TIME_WAIT) and is never one this process handed
    out among its last picks (4,096, or half its slice when that is smaller): a test that
    picks several ports before its servers bind them (a node's listeners) cannot get one
    twice (seen in CI). Parallel test workers pick from disjoint slices of the range
    (_slice). Raises OSError when no port is free.
    """
    import random
    picking = _picking()
    if picking is None:                     # no room outside the range: the kernel's pick
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            return s.getsockname()[1]
    bottom, _top, index, count, slots, keep = picking
    for _ in range(400):
        port = bottom + index + count * random.randrange(slots)
        if port in _recent:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
        _recent[port] = None
        while len(_recent) > keep:
            del _recent[next(iter(_recent))]
        return port
    raise OSError("no free TCP port found outside the ephemeral range")


class ServerError(RuntimeError):
    """The server process did not come up (exited early or never accepted)."""


@dataclass
class ServerProcess:
    """A server process listening on ``HOST:port``; use as a context manager.

    ``argv_for(port, flags)`` builds the command line. ``start_timeout``: seconds to wait for
    the port to accept connections. ``settle``: seconds to wait after the readiness probe
    connection is closed, so the server has processed that close before the scenario runs.
    ``cwd``/``env``: for the child process. ``fresh_cwd``: run the child in a new empty
    temporary directory (removed on stop), so files it writes cannot leak into the next run.
    ``probe``: bytes sent on the readiness connection, whose first answer (or the server
    closing it) shows that the server runs commands: a server that binds before it recovers
    (jobgate, issue 14) accepts connections into the kernel's backlog before it serves them, so
    a connect alone would start the scenario while the server still starts (its first replies
    then miss their read windows). beanstalk's `quit` is counted in no stats field.
    """

    argv_for: object
    flags: tuple[str, ...] = ()
    start_timeout: float = 20.0
    settle: float = 0.1
    cwd: str | None = None
    env: dict | None = None
    fresh_cwd: bool = False
    probe: bytes | None = None
    port: int = 0
    proc: subprocess.Popen | None = None
    argv: list[str] = field(default_factory=list)
    _log: object = None
    _tmpdir: object = None

    def start(self, attempts: int = 3) -> "ServerProcess":
        """Start on a fresh free port; retry with a new port if the process exits early
        (e.g. the port got taken). Raises ServerError when it cannot come up."""
        last = ""
        for _ in range(attempts):
            self.port = free_port()
            self.argv = list(self.argv_for(self.port, self.flags))  # type: ignore[operator]
            self._log = tempfile.TemporaryFile()
            cwd = self.cwd
            if self.fresh_cwd:
                self._tmpdir = tempfile.TemporaryDirectory(prefix="conformance-srv-")
                cwd = self._tmpdir.name
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=self.env,
            )
            ok, last = self._wait_ready()
            if ok:
                return self
            self.stop()
        raise ServerError(f"{shlex.join(self.argv)}: {last}")

    def _wait_ready(self) -> tuple[bool, str]:
        deadline = time.monotonic() + self.start_timeout
        assert self.proc is not None
        delay = 0.01
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False, f"exited with {self.proc.returncode}: {self.output()[-2000:]!r}"
            try:
                probe = socket.create_connection((HOST, self.port), timeout=1.0)
            except OSError:
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                continue
            if self.probe:
                try:
                    probe.settimeout(max(0.1, deadline - time.monotonic()))
                    probe.sendall(self.probe)
                    probe.recv(1)        # an answer, or EOF: the server serves
                except OSError:
                    pass
            probe.close()
            time.sleep(self.settle)
            if self.proc.poll() is not None:
                return False, f"exited with {self.proc.returncode}: {self.output()[-2000:]!r}"
            return True, ""
        return False, f"port {self.port} did not accept within {self.start_timeout:g}s"

    def send_signal(self, signum: int = _signal.SIGUSR1) -> None:
        """Deliver ``signum`` to the server process (by PID)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signum)

    def output(self) -> str:
        """What the process wrote to stdout/stderr so far (decoded, lossy)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def stop(self) -> None:
        """SIGKILL the process by PID and wait for it (idempotent)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.kill(self.proc.pid, _signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self._log is not None:
            try:
                self._log.close()
            except OSError:
                pass
            self._log = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
