"""A scratch redis-server for the RESP codec tests: the reference the codec is compared with
(Redis 7.0, as the glide-mq golden). Skips when redis-server is not installed. It never touches
the shared Redis on 6379: it listens on a free port with no persistence and is stopped after."""
from __future__ import annotations

import shutil
import socket
import subprocess

import hiredis
import pytest

from tests.support import free_port, stop_process, wait_port

SENTINEL = b"*2\r\n$4\r\nECHO\r\n$11\r\nend-of-case\r\n"
SENTINEL_REPLY = b"$11\r\nend-of-case\r\n"


@pytest.fixture(scope="module")
def redis_port():
    """Port of a scratch redis-server (module scope), stopped by PID afterwards."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        yield port
    finally:
        stop_process(proc)


def roundtrip(port: int, data: bytes, closes: bool) -> bytes:
    """Everything redis-server answers to `data` on a fresh connection: read to the close if
    `closes` (a protocol error), else to the reply of a sentinel ECHO sent after `data`."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data if closes else data + SENTINEL)
        got = b""
        while closes or not got.endswith(SENTINEL_REPLY):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    return got if closes else got[:-len(SENTINEL_REPLY)]


class RawConnection:
    """One connection to redis-server; `call(*args)` sends a command and returns the raw bytes
    of its one reply (hiredis says when the reply is complete)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def call(self, *args) -> bytes:
        args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        self.sock.sendall(b"*%d\r\n" % len(args)
                          + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
        reader, raw = hiredis.Reader(), b""
        while True:
            chunk = self.sock.recv(65536)
            assert chunk, "redis-server closed the connection"
            raw += chunk
            reader.feed(chunk)
            if reader.gets() is not False:
                return raw

    def close(self) -> None:
        self.sock.close()
