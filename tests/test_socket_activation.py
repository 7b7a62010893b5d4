"""systemd socket activation for jobgate-beanstalkd (gateway/listen.py inherited_fds/adopt,
sd_listen_fds(3)), as beanstalkd 1.12 does it: Debian ships beanstalkd.socket next to
beanstalkd.service, so a beanstalkd unit whose ExecStart runs jobgate-beanstalkd is handed
the listening socket as fd 3 with $LISTEN_FDS / $LISTEN_PID.

The test plays systemd: it binds the socket, and a small launcher puts it on fd 3 and sets
$LISTEN_PID to its own pid before exec'ing jobgate-beanstalkd (the pid stays across exec).
Readiness is READY=1 on a $NOTIFY_SOCKET this test binds (a socket timeout, no sleeps).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from gateway.listen import LISTEN_FDS_START, inherited_fds

from .support import ROOT, Raw, free_port, stop_process

HOST = "127.0.0.1"

# puts the given fds on 3, 4, ... (through high numbers first: a source may sit on a target),
# sets LISTEN_PID to this pid and LISTEN_FDS to their count, and execs jobgate-beanstalkd
LAUNCHER = """
import os, sys
fds = [int(x) for x in sys.argv[1].split(",")]
high = [os.dup(fd) for fd in fds]
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)
    os.set_inheritable(3 + i, True)
os.environ.update(LISTEN_PID=os.environ.get("TEST_LISTEN_PID") or str(os.getpid()),
                  LISTEN_FDS=str(len(fds)))
os.execv(sys.executable, [sys.executable, "-m", "gateway.beanstalkd_cli", *sys.argv[2:]])
"""


class Activated:
    """jobgate-beanstalkd started with `socks` passed as systemd would; `notify`: the
    Manager-side datagram socket. stop() sends SIGTERM to its PID."""

    def __init__(self, socks, flags, tmp, listen_pid: str | None = None) -> None:
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path = os.path.join(tmp, "notify")
        self.notify.bind(path)
        self.notify.settimeout(20)
        env = dict(os.environ, PYTHONPATH=ROOT, NOTIFY_SOCKET=path)
        env.pop("TEST_LISTEN_PID", None)
        if listen_pid is not None:
            env["TEST_LISTEN_PID"] = listen_pid
        fds = [s.fileno() for s in socks]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, ",".join(map(str, fds)), *flags], cwd=ROOT,
            env=env, pass_fds=fds, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def ready(self) -> str:
        """Wait for READY=1; returns its STATUS text."""
        while True:
            lines = self.notify.recv(4096).decode().split("\n")
            if "READY=1" in lines:
                return next(x[7:] for x in lines if x.startswith("STATUS="))

    def stop(self):
        out, err = stop_process(self.proc, 20, signal.SIGTERM)
        self.notify.close()
        return self.proc.returncode, err.decode(errors="replace")


@pytest.fixture
def activated(short_tmp):
    started: list[Activated] = []

    def start(socks, flags, listen_pid=None) -> Activated:
        a = Activated(socks, flags, short_tmp, listen_pid)
        started.append(a)
        return a
    yield start
    for a in started:
        if a.proc.poll() is None:
            a.stop()


def _tcp_listener() -> socket.socket:
    s = socket.socket()
    s.bind((HOST, 0))
    s.listen(16)
    return s


def test_inherited_fds_reads_and_clears_the_variables():
    env = {"LISTEN_PID": "42", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "a:b", "OTHER": "x"}
    assert inherited_fds(env, 42) == [LISTEN_FDS_START, LISTEN_FDS_START + 1]
    assert env == {"OTHER": "x"}          # children do not inherit them
    for env in ({"LISTEN_PID": "41", "LISTEN_FDS": "1"}, {"LISTEN_FDS": "1"},
                {"LISTEN_PID": "42"}, {"LISTEN_PID": "42", "LISTEN_FDS": "-1"},
                {"LISTEN_PID": "x", "LISTEN_FDS": "1"}, {}):
        assert inherited_fds(env, 42) == [], env
        assert not any(k.startswith("LISTEN_") for k in env)


def test_serves_the_inherited_tcp_socket_and_ignores_l_and_p(activated, short_tmp):
    listener = _tcp_listener()
    port = listener.getsockname()[1]
    unused = free_port()
    a = activated([listener], ["-l", HOST, "-p", str(unused), "-b", short_tmp])
    listener.close()                      # systemd keeps its copy; the server has its own
    assert a.ready() == f"serving beanstalk {HOST}:{port}; 0 jobs recovered"
    r = Raw(port)
    assert r.cmd(b"put 0 0 60 9\r\nactivated\r\n") == b"INSERTED 1\r\n"
    assert r.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 9\r\nactivated\r\n"
    r.close()
    with pytest.raises(ConnectionRefusedError):   # -p was not bound
        socket.create_connection((HOST, unused), timeout=5).close()
    rc, err = a.stop()
    assert rc == 0, err
    assert f"inherited listen fd; ignoring option: -l {HOST}" in err, err
    assert f"inherited listen fd; ignoring option: -p {unused}" in err, err
    assert os.path.exists(os.path.join(short_tmp, "jobgate.db"))


def test_serves_an_inherited_unix_socket_and_only_the_first_of_two(activated, short_tmp):
    path = os.path.join(short_tmp, "b.sock")
    first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    first.bind(path)
    first.listen(16)
    second = _tcp_listener()
    a = activated([first, second], [])
    first.close()
    assert a.ready() == f"serving beanstalk unix:{path}; 0 jobs recovered"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(10)
        c.connect(path)
        c.sendall(b"list-tube-used\r\n")
        assert c.recv(64) == b"USING default\r\n"
    rc, err = a.stop()
    assert rc == 0, err
    assert "inherited more than one listen socket; ignoring all but the first" in err, err
    second.close()


def test_an_inherited_fd_that_is_not_a_listening_socket_stops_the_start(activated):
    dgram = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dgram.bind((HOST, 0))
    a = activated([dgram], [])
    out, err = a.proc.communicate(timeout=30)
    assert a.proc.returncode == 3, err
    assert err.decode().strip() == ("jobgate-beanstalkd: inherited fd 3 is not a TCP or unix "
                                    "listening socket")
    dgram.close()


def test_sockets_meant_for_another_pid_are_left_alone(activated):
    listener = _tcp_listener()
    port = free_port()
    a = activated([listener], ["-l", HOST, "-p", str(port)], listen_pid="1")
    assert a.ready() == f"serving beanstalk {HOST}:{port}; 0 jobs recovered"
    r = Raw(port)
    assert r.cmd(b"list-tube-used\r\n") == b"USING default\r\n"
    r.close()
    rc, err = a.stop()
    assert rc == 0 and "inherited" not in err, err
    listener.close()
