"""systemd's notification protocol (gateway/notify.py, sd_notify(3)): the real server
subprocesses (`jobgate serve`, `jobgate-beanstalkd`) with `$NOTIFY_SOCKET` naming a datagram
socket this test binds in the service manager's place.

READY=1 only once recovery is done and the listeners answer; WATCHDOG=1 every WATCHDOG_USEC/2
when asked (and not when `$WATCHDOG_PID` names another process); STOPPING=1 after SIGTERM;
the abstract namespace (`@name`); a server that cannot notify still serves. Every wait is a
socket timeout, never a sleep.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import sys
import uuid

import pytest

from gateway.notify import Notifier, notify_address, watchdog_interval

from .server_support import HOST, serve_argv, stats_dict
from .support import Raw, free_port


def beanstalkd_argv(*flags: str) -> list[str]:
    return [sys.executable, "-m", "gateway.beanstalkd_cli", *flags]


class Manager:
    """The service manager's end of `$NOTIFY_SOCKET`: a datagram socket bound at `address` (a
    path, or "\\0name" in the abstract namespace). Messages are dicts of their KEY=VALUE
    lines; `log` keeps every one received, in order."""

    def __init__(self, address: str, timeout: float = 20.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(timeout)
        self.log: list[dict] = []

    @staticmethod
    def _parse(data: bytes) -> dict:
        return dict(line.split("=", 1) for line in data.decode().split("\n"))

    def next(self) -> dict:
        """The next message; socket.timeout when none comes within the timeout."""
        m = self._parse(self.sock.recv(4096))
        self.log.append(m)
        return m

    def until(self, key: str, value: str | None = None) -> dict:
        """Read until a message holding `key` (with `value`, when given); returns it."""
        while True:
            m = self.next()
            if key in m and (value is None or m[key] == value):
                return m

    def pending(self) -> list[dict]:
        """The messages queued now, without waiting."""
        out = []
        timeout = self.sock.gettimeout()
        self.sock.settimeout(0.0)     # with a timeout set, Python would wait for readiness
        try:
            while True:
                try:
                    data = self.sock.recv(4096)
                except BlockingIOError:
                    return out
                out.append(self._parse(data))
                self.log.append(out[-1])
        finally:
            self.sock.settimeout(timeout)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def managers(short_tmp):
    """`managers()` binds a Manager at a fresh path in a short directory (returns it and the
    `$NOTIFY_SOCKET` value); `managers(abstract=True)` one in the abstract namespace."""
    made: list[Manager] = []

    def make(abstract: bool = False) -> tuple[Manager, str]:
        name = f"jg-notify-{uuid.uuid4().hex[:12]}"
        if abstract:
            m, env = Manager("\0" + name), "@" + name
        else:
            path = os.path.join(short_tmp, name)
            m, env = Manager(path), path
        made.append(m)
        return m, env
    yield make
    for m in made:
        m.close()


def _finish(p, timeout: float = 20.0):
    """Wait for a process that was told to stop; returns (returncode, stderr)."""
    out, err = p.proc.communicate(timeout=timeout)
    return p.proc.returncode, err.decode(errors="replace")


# ============================================================================ pure parts


def test_notify_socket_forms():
    assert notify_address("/run/systemd/notify") == "/run/systemd/notify"
    assert notify_address("@jobgate/notify") == "\0jobgate/notify"
    # sd_notify ignores what is neither an absolute path nor @name; vsock is not supported
    for value in (None, "", "@", "relative/notify", "./notify", "vsock:2:1234", " /x"):
        assert notify_address(value) is None, value


def test_watchdog_interval_is_half_of_watchdog_usec_for_this_process_only():
    assert watchdog_interval({"WATCHDOG_USEC": "200000"}, 42) == 0.1
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, 42) == 15.0
    for env in ({}, {"WATCHDOG_USEC": ""}, {"WATCHDOG_USEC": "0"}, {"WATCHDOG_USEC": "-5"},
                {"WATCHDOG_USEC": "1e6"}, {"WATCHDOG_USEC": " 100"},
                {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "43"},
                {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": ""},
                {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "forty-two"}):
        assert watchdog_interval(env, 42) is None, env
    # no socket, no watchdog: WATCHDOG_USEC alone asks for nothing
    assert Notifier.from_env({"WATCHDOG_USEC": "200000"}, 42).watchdog_s is None
    assert not Notifier.from_env({}, 42).send("READY=1")


def test_send_never_blocks_on_a_manager_that_does_not_read(managers):
    m, env = managers()
    n = Notifier.from_env({"NOTIFY_SOCKET": env})
    try:
        took = [n.send(f"STATUS=message {i}") for i in range(20_000)]
    finally:
        n.close()
    # the kernel's queue fills (net.unix.max_dgram_qlen): the rest is dropped, not waited for
    assert took[0] and not all(took)
    assert m.next() == {"STATUS": "message 0"}
    assert len(m.pending()) == took.count(True) - 1


# ================================================================ the server, notifying


def test_ready_only_after_recovery_and_answering_then_stopping(procs, managers, short_tmp):
    port = free_port()
    url = f"sqlite:///{short_tmp}/jobgate.db"
    argv = serve_argv("--listen", f"beanstalk={HOST}:{port}", "--database", url,
                      "--log-level", "warning")
    m, env = managers()
    p = procs(argv, {"NOTIFY_SOCKET": env})
    first = m.next()                      # sent once the listener is bound
    assert first["STATUS"].startswith("recovering"), first
    ready = m.until("READY", "1")
    assert ready["STATUS"] == f"serving beanstalk {HOST}:{port}; 0 jobs recovered", ready
    r = Raw(port)
    jobs = 500
    r.send(b"".join(b"put 0 0 60 3\r\njob\r\n" for _ in range(jobs)))
    for i in range(1, jobs + 1):
        assert r.reply() == b"INSERTED %d\r\n" % i
    r.close()
    p.proc.send_signal(signal.SIGTERM)
    stopping = m.until("STOPPING", "1")
    assert stopping["STATUS"].startswith("stopping"), stopping
    rc, err = _finish(p)
    assert rc == 0, err
    assert [k for msg in m.log for k in msg if k in ("READY", "STOPPING")] == ["READY",
                                                                             "STOPPING"]

    # again, on the stored jobs: a client connects while the server recovers (the listener is
    # bound before STATUS=recovering is sent) and its first reply can only be read once
    # READY=1 is already in the manager's queue; by then the stored jobs are all back
    m2, env2 = managers()
    p2 = procs(argv, {"NOTIFY_SOCKET": env2})
    assert m2.next()["STATUS"].startswith("recovering")
    r = Raw(port, timeout=20)
    r.send(b"stats\r\n")
    readable, _, _ = select.select([r.sock], [], [], 20)
    assert readable, "no reply within 20 s"
    queued = m2.pending()
    assert any(msg.get("READY") == "1" for msg in queued), (m2.log, "READY=1 not sent "
                                                           "before the first reply")
    ready = next(msg for msg in m2.log if msg.get("READY") == "1")
    assert ready["STATUS"] == f"serving beanstalk {HOST}:{port}; {jobs} jobs recovered"
    frame = r.reply()
    assert frame.startswith(b"OK ") and b"\ncurrent-jobs-ready: %d\n" % jobs in frame, frame
    p2.proc.send_signal(signal.SIGUSR1)   # drain mode shows in `systemctl status`
    assert m2.until("STATUS")["STATUS"].startswith("draining")
    assert r.cmd(b"put 0 0 60 1\r\nx\r\n") == b"DRAINING\r\n"
    r.close()
    p2.proc.send_signal(signal.SIGTERM)
    m2.until("STOPPING", "1")
    rc, err = _finish(p2)
    assert rc == 0, err


def test_no_ready_when_recovery_fails(procs, managers, short_tmp):
    """READY=1 must mean recovered: a second server on a database another one holds exits
    with status 1 and never says READY=1 (nor does a server whose port is taken)."""
    url = f"sqlite:///{short_tmp}/jobgate.db"
    port = free_port()
    m, env = managers()
    holder = procs(serve_argv("--listen", f"beanstalk={HOST}:{port}", "--database", url,
                              "--log-level", "warning"), {"NOTIFY_SOCKET": env})
    m.until("READY", "1")
    m2, env2 = managers()
    second = procs(serve_argv("--listen", f"beanstalk={HOST}:{free_port()}", "--database",
                              url, "--log-level", "warning"), {"NOTIFY_SOCKET": env2})
    rc, err = _finish(second)
    assert rc == 1 and "another jobgate server" in err, (rc, err)
    sent = m2.pending()      # everything it sent is queued by now: it has exited
    assert sent and sent[0]["STATUS"].startswith("recovering"), sent
    assert not any("READY" in msg for msg in sent), sent
    m3, env3 = managers()
    taken = procs(serve_argv("--listen", f"beanstalk={HOST}:{port}", "--durability",
                             "memory"), {"NOTIFY_SOCKET": env3})
    rc, err = _finish(taken)
    assert rc == 3, (rc, err)
    assert m3.pending() == []
    holder.proc.send_signal(signal.SIGTERM)
    m.until("STOPPING", "1")
    assert _finish(holder)[0] == 0


def test_watchdog_pings_every_half_interval_and_only_for_its_pid(procs, managers,
                                                                 record_property):
    usec = 200_000
    # `other` is told the watchdog belongs to another process (this test's): it never pings
    m_other, env_other = managers()
    other = procs(serve_argv("--listen", f"beanstalk={HOST}:{free_port()}", "--durability",
                             "memory"),
                  {"NOTIFY_SOCKET": env_other, "WATCHDOG_USEC": str(usec),
                   "WATCHDOG_PID": str(os.getpid())})
    m_other.until("READY", "1")
    m, env = managers()
    p = procs(serve_argv("--listen", f"beanstalk={HOST}:{free_port()}", "--durability",
                         "memory"), {"NOTIFY_SOCKET": env, "WATCHDOG_USEC": str(usec)})
    m.until("READY", "1")
    assert not any("WATCHDOG" in msg for msg in m.log), m.log   # none before READY=1
    import time
    seen = []
    while len(seen) < 4:
        assert m.next() == {"WATCHDOG": "1"}
        seen.append(time.monotonic())
    # recorded, not asserted (timing goals belong in benchmarks/): the period is usec/2
    record_property("watchdog_period_ms",
                    [round((b - a) * 1000) for a, b in zip(seen, seen[1:])])
    # three periods of `p` went by since `other` was ready: it would have pinged by now
    other.proc.send_signal(signal.SIGTERM)
    m_other.until("STOPPING", "1")
    assert not any("WATCHDOG" in msg for msg in m_other.log), m_other.log
    assert _finish(other)[0] == 0
    p.proc.send_signal(signal.SIGTERM)
    m.until("STOPPING", "1")
    rc, err = _finish(p)
    assert rc == 0, err


def test_beanstalkd_flags_and_abstract_notify_socket(procs, managers, short_tmp):
    """A unit written for beanstalkd runs jobgate-beanstalkd with beanstalkd's flags; it
    notifies too (harmless under Type=simple), here on an abstract socket (`@name`)."""
    port = free_port()
    m, env = managers(abstract=True)
    p = procs(beanstalkd_argv("-l", HOST, "-p", str(port), "-b", short_tmp, "-f", "0",
                              "-z", "1024", "-V"), {"NOTIFY_SOCKET": env})
    ready = m.until("READY", "1")
    assert ready["STATUS"] == f"serving beanstalk {HOST}:{port}; 0 jobs recovered"
    r = Raw(port)
    st = stats_dict(r)
    assert st["max-job-size"] == "1024" and st["version"] == '"1.12"'
    assert r.cmd(b"put 0 0 60 1025\r\n" + b"x" * 1025 + b"\r\n") == b"JOB_TOO_BIG\r\n"
    assert r.cmd(b"put 0 0 60 2\r\nok\r\n") == b"INSERTED 1\r\n"
    r.close()
    p.proc.send_signal(signal.SIGTERM)
    m.until("STOPPING", "1")
    rc, err = _finish(p)
    assert rc == 0, err
    assert os.path.exists(os.path.join(short_tmp, "jobgate.db"))


@pytest.mark.parametrize("kind", ["missing", "regular-file", "stream-socket", "too-long",
                                  "relative", "vsock", "bare-at"])
def test_a_server_that_cannot_notify_still_serves(procs, short_tmp, kind):
    logged = 1    # "cannot notify the service manager", once, for an address that fails
    if kind == "missing":
        value = os.path.join(short_tmp, "nobody-here")
    elif kind == "regular-file":
        value = os.path.join(short_tmp, "file")
        open(value, "w").close()
    elif kind == "stream-socket":
        value = os.path.join(short_tmp, "stream")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(value)
        listener.listen()
    elif kind == "too-long":
        value = "/" + "x" * 200
    else:   # forms sd_notify ignores: nothing is sent, nothing logged
        value = {"relative": "notify.sock", "vsock": "vsock:2:9999", "bare-at": "@"}[kind]
        logged = 0
    port = free_port()
    p = procs(serve_argv("--listen", f"beanstalk={HOST}:{port}", "--durability", "memory",
                         "--log-level", "warning"),
              {"NOTIFY_SOCKET": value, "WATCHDOG_USEC": "200000"})
    p.wait_tcp(port)
    r = Raw(port)
    assert r.cmd(b"put 0 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
    assert r.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 2\r\nhi\r\n"
    r.close()
    rc, _, err = p.stop()
    assert rc == 0, err
    assert err.decode().count("cannot notify the service manager") == logged, err
    assert b"Traceback" not in err
    if kind == "stream-socket":
        listener.close()
