"""Adding a dialect is one package and one registry line (docs/architecture.md, "Adding a
dialect"): a toy dialect registered at run time is served on real sockets by the one connection
runner, configured from YAML and `--listen`, listed in the CLI's help, and reaches jobs through
the port only; nothing in gateway/ names it.

The toy protocol, `echo`: lines `put <queue> <text>` (answers `ID <n>`), `take <queue>`
(waits for a job, answers `JOB <n> <text>`), anything else is echoed back `ECHO <line>`.
"""
from __future__ import annotations

import socket

import pytest

from core.api import WAITING
from gateway import cli, config, registry
from protocols.contract import Option, Registration
from protocols.sequential import Sequential

from .inproc import InProcServer
from .support import ROOT

WAIT, QUIT = object(), object()


class LineParser:
    """bytes -> complete lines (the sans-IO half)."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\r\n")
        return lines


class EchoSession:
    """The handler protocols/sequential.py drives: one command at a time."""

    def __init__(self, state) -> None:
        self.port, self.prefix = state
        self.owner = self.port.new_owner("echo", margin=False)
        self.on_wake = None
        self.need_commit = False
        self._reply = None

    def handle(self, line: bytes):
        words = line.split(b" ", 2)
        if words[0] == b"put" and len(words) == 3:
            id = self.port.put(words[1].decode(), words[2], 0, 0, 60_000, "echo")
            self.need_commit = True
            return b"ID %d\r\n" % id
        if words[0] == b"take" and len(words) == 2:
            r = self.port.reserve(self.owner, [words[1].decode()], None, self._got)
            return WAIT if r is WAITING else b"JOB %d %s\r\n" % (r.id, r.payload)
        if line == b"quit":
            return QUIT
        return self.prefix + line + b"\r\n"

    def _got(self, r) -> None:
        self._reply = b"JOB %d %s\r\n" % (r.id, r.payload)
        self.on_wake()

    def has_reply(self) -> bool:
        return self._reply is not None

    def take_reply(self) -> bytes:
        r, self._reply = self._reply, None
        return r

    def cancel_wait(self):
        self.port.cancel_wait(self.owner)
        return b"GONE\r\n"

    def close(self) -> None:
        self.port.release_owner(self.owner)


ECHO = Registration(
    name="echo",
    default_port=7777,
    make_state=lambda port, options, context: (port, b"ECHO " * options["repeat"]),
    session_factory=lambda state, transport: Sequential(LineParser(), EchoSession(state),
                                                        transport, WAIT, QUIT),
    options_path=("echo",),
    options=(Option("repeat", "int", 1, 1, 3, "how many times to say ECHO"),),
    summary="a toy protocol for this test",
)


@pytest.fixture
def with_echo(monkeypatch):
    """The registry with the echo dialect added: the one line a new dialect needs."""
    monkeypatch.setitem(registry.DIALECTS, "echo", ECHO)


def _cmd(sock, data: bytes) -> bytes:
    sock.sendall(data)
    out = b""
    while not out.endswith(b"\r\n"):
        out += sock.recv(4096)
    return out


def test_a_registered_dialect_is_configured_and_served_by_the_one_runner(with_echo, tmp_path):
    cfg = config.from_dict({"listeners": {"echo": {"port": 0}}, "echo": {"repeat": 2}})
    assert [lst.dialect for lst in cfg.listeners] == ["echo"] and cfg.option("echo", "repeat") == 2
    assert config.parse_listen_flag("echo=127.0.0.1:7001").port == 7001
    with pytest.raises(config.ConfigError, match="echo.repeat"):
        config.from_dict({"echo": {"repeat": 9}})
    s = InProcServer(f"sqlite:///{tmp_path}/j.db", dialects=("echo", "beanstalk"),
                     echo={"repeat": 2})
    try:
        a = socket.create_connection(("127.0.0.1", s.ports["echo"]), timeout=5)
        b = socket.create_connection(("127.0.0.1", s.ports["echo"]), timeout=5)
        assert _cmd(a, b"hello\r\n") == b"ECHO ECHO hello\r\n"
        b.sendall(b"take jobs\r\n")                      # waits, on the engine's waiter
        assert _cmd(a, b"put jobs first\r\n") == b"ID 1\r\n"
        assert _cmd(b, b"") == b"JOB 1 first\r\n"
        # the same queue is a beanstalk tube: the canonical model, not the dialect's
        beanstalk = socket.create_connection(("127.0.0.1", s.ports["beanstalk"]), timeout=5)
        assert _cmd(beanstalk, b"stats-job 1\r\n").startswith(b"OK ")
        a.close()
        b.close()
        beanstalk.close()
    finally:
        s.stop()


def test_the_cli_help_lists_the_registered_dialects(with_echo, capsys):
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())   # as printed, without the wrapping
    assert "echo (7777: a toy protocol for this test)" in out
    assert "beanstalk (11300" in out and "bunqueue (6789" in out and "workq (9922" in out
    assert "glidemq (6380" in out


def test_registry_is_light_and_exports_stay_reachable():
    """The command line binds its sockets right after reading the config (gateway/listen.py),
    so importing the registry must not load the dialects' sessions, the engine or msgpack;
    the packages' names still import on first use."""
    import subprocess
    import sys
    code = ("import sys, gateway.cli; "
            "print(sorted(m for m in sys.modules if m.startswith(('protocols.', 'core.')) "
            "or m in ('msgpack', 'sqlalchemy', 'anyio', 'aiohttp')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                         text=True, cwd=ROOT).stdout
    assert eval(out) == ["protocols.beanstalk", "protocols.bunqueue", "protocols.contract",
                         "protocols.http", "protocols.resp", "protocols.workq"]
    from protocols import beanstalk, bunqueue, workq
    from protocols.bunqueue import codec
    assert bunqueue.MAX_FRAME == codec.MAX_FRAME
    assert beanstalk.Parser.__module__ == "protocols.beanstalk.parser"
    assert workq.connect.__module__ == "protocols.workq.session"
    assert bunqueue.FrameReader is codec.FrameReader
