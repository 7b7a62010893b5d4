"""Helpers of the workq tests (test_workq_*.py): a raw-socket workq client that reads one
complete reply frame, command builders, inspect-frame parsing, and a sans-IO connection
(Parser feeding a Session) for tests on a ManualClock.

Reply frames (workq-protocol.txt; every success line starts with `+`):
- `-...\\r\\n` (an error) and `+OK\\r\\n`: one line;
- `+OK <n>\\r\\n` then n entries, each recognised by its head line:
  `<id> <name> <ttr> <size>` (lease) or `<id> <ok> <size>` (result, run): a payload of size bytes
  and CRLF follow; `<id-or-name> <key-count>` (inspect): key-count `<key> <value>` lines follow.
"""
from __future__ import annotations

import socket
import time
import uuid

from protocols.workq import CLOSE, Parser, QUIT, Session, WAIT, WorkqInfo

OK = b"+OK\r\n"
NOT_FOUND = b"-NOT-FOUND\r\n"
TIMEOUT = b"-TIMEOUT\r\n"


def err(msg: str) -> bytes:
    """b"-CLIENT-ERROR <msg>\\r\\n"."""
    return b"-CLIENT-ERROR " + msg.encode() + b"\r\n"


def new_uid() -> str:
    """A fresh random UUIDv4 in canonical lower-case form (distinct per test, per call)."""
    return str(uuid.uuid4())


def uid_n(n: int, prefix: str = "11111111") -> str:
    """A fixed, readable UUIDv4: `<prefix>-1111-4111-8111-<n as 12 hex digits>`."""
    return f"{prefix}-1111-4111-8111-{n:012x}"


def add_cmd(uid: str, name: str, payload: bytes = b"x", ttr: int = 1000, ttl: int = 60_000,
            **flags) -> bytes:
    """`add` with its payload; flags as keywords, `max_attempts=3` -> `-max-attempts=3`."""
    return _with_payload(b"add %s %s %d %d" % (uid.encode(), name.encode(), ttr, ttl),
                         payload, flags)


def schedule_cmd(uid: str, name: str, time: str, payload: bytes = b"x", ttr: int = 1000,
                 ttl: int = 60_000, **flags) -> bytes:
    """`schedule` with its payload (`time` as 2006-01-02T15:04:05Z)."""
    return _with_payload(b"schedule %s %s %d %d %s" % (uid.encode(), name.encode(), ttr, ttl,
                                                       time.encode()), payload, flags)


def run_cmd(uid: str, name: str, payload: bytes = b"x", ttr: int = 1000, wait: int = 1000,
            **flags) -> bytes:
    """`run` with its payload."""
    return _with_payload(b"run %s %s %d %d" % (uid.encode(), name.encode(), ttr, wait),
                         payload, flags)


def complete_cmd(uid: str, result: bytes = b"") -> bytes:
    """`complete <id> <size>` with its result."""
    return b"complete %s %d\r\n%s\r\n" % (uid.encode(), len(result), result)


def fail_cmd(uid: str, result: bytes = b"") -> bytes:
    """`fail <id> <size>` with its result."""
    return b"fail %s %d\r\n%s\r\n" % (uid.encode(), len(result), result)


def _with_payload(head: bytes, payload: bytes, flags: dict) -> bytes:
    for k, v in flags.items():
        head += b" -%s=%d" % (k.replace("_", "-").encode(), v)
    return head + b" %d\r\n%s\r\n" % (len(payload), payload)


def lease_frame(uid: str, name: str, ttr: int, payload: bytes) -> bytes:
    """The exact reply to a lease that got this job."""
    return b"+OK 1\r\n%s %s %d %d\r\n%s\r\n" % (uid.encode(), name.encode(), ttr, len(payload),
                                                payload)


def result_frame(uid: str, ok: bool, result: bytes) -> bytes:
    """The exact reply to a result / run that got this result."""
    return b"+OK 1\r\n%s %d %d\r\n%s\r\n" % (uid.encode(), 1 if ok else 0, len(result), result)


def parse_entries(frame: bytes) -> list[tuple[str, dict]]:
    """An inspect reply -> [(id or name, {key: value str})] in order; asserts the framing
    (the announced counts match what follows, nothing is left over)."""
    lines = frame.split(b"\r\n")
    assert lines[-1] == b"", frame[-40:]
    head = lines[0].split(b" ")
    assert head[0] == b"+OK" and len(head) == 2, lines[0]
    out = []
    i = 1
    for _ in range(int(head[1])):
        ident, count = lines[i].split(b" ")
        keys = {}
        for line in lines[i + 1:i + 1 + int(count)]:
            k, _, v = line.partition(b" ")
            assert k not in keys, (k, frame)
            keys[k.decode()] = v.decode(errors="replace")
        assert len(keys) == int(count), frame
        out.append((ident.decode(), keys))
        i += 1 + int(count)
    assert i == len(lines) - 1, frame
    return out


def parse_job(frame: bytes) -> dict:
    """An `inspect job` reply -> its {key: value} dict (with the id under "id")."""
    entries = parse_entries(frame)
    assert len(entries) == 1, frame
    ident, keys = entries[0]
    return dict(keys, id=ident)


class WorkqRaw:
    """A raw workq connection: `send(bytes)`, `reply()` reads one complete reply frame,
    `cmd(bytes)` does both; `inspect_job(uid)` returns the job's keys or None (-NOT-FOUND)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        """Write all of `data`."""
        self.sock.sendall(data)

    def _fill(self) -> None:
        d = self.sock.recv(1 << 20)
        if not d:
            raise EOFError("connection closed by the server")
        self.buf += d

    def _line(self, start: int) -> int:
        """Index of the CRLF ending the line that starts at `start` (reads as needed)."""
        while True:
            i = self.buf.find(b"\r\n", start)
            if i >= 0:
                return i
            self._fill()

    def _need(self, end: int) -> None:
        while len(self.buf) < end:
            self._fill()

    def reply(self) -> bytes:
        """Read and return exactly one reply frame (see the module doc)."""
        i = self._line(0)
        head = self.buf[:i]
        pos = i + 2
        if head.startswith(b"+OK "):
            for _ in range(int(head[4:])):
                j = self._line(pos)
                parts = self.buf[pos:j].split(b" ")
                pos = j + 2
                if len(parts) in (3, 4):      # lease / result entry: payload + CRLF
                    pos += int(parts[-1]) + 2
                    self._need(pos)
                elif len(parts) == 2:        # inspect entry: key lines
                    for _ in range(int(parts[1])):
                        pos = self._line(pos) + 2
                else:
                    raise AssertionError(f"unexpected entry head {parts!r}")
        elif not (head == b"+OK" or head.startswith(b"-")):
            raise AssertionError(f"unexpected reply line {head!r}")
        frame, self.buf = self.buf[:pos], self.buf[pos:]
        return frame

    def cmd(self, data: bytes) -> bytes:
        """Send one command and return its reply frame."""
        self.send(data)
        return self.reply()

    def inspect_job(self, uid: str) -> dict | None:
        """`inspect job <uid>` -> {key: value} (id under "id"), or None on -NOT-FOUND."""
        r = self.cmd(b"inspect job %s\r\n" % uid.encode())
        if r == b"-NOT-FOUND\r\n":
            return None
        return parse_job(r)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the server closes the connection (EOF or reset) within `timeout` s,
        whatever it sent before; False if it is still open then."""
        self.sock.settimeout(timeout)
        try:
            while True:
                d = self.sock.recv(1 << 20)
                if not d:
                    return True
                self.buf += d
        except (ConnectionResetError, BrokenPipeError):
            return True
        except (socket.timeout, TimeoutError):
            return False
        finally:
            self.sock.settimeout(5.0)

    def silent_for(self, seconds: float) -> bool:
        """True when nothing arrives within `seconds` (the connection stays open)."""
        if self.buf:
            return False
        self.sock.settimeout(seconds)
        try:
            d = self.sock.recv(65536)
        except (socket.timeout, TimeoutError):
            return True
        finally:
            self.sock.settimeout(5.0)
        self.buf += d
        return False

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()


class Connections:
    """Opens WorkqRaw connections to one port with `open()`; `close_all()` closes them."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.opened: list[WorkqRaw] = []

    def open(self) -> WorkqRaw:
        """A new connection (closed by close_all)."""
        c = WorkqRaw(self.port)
        self.opened.append(c)
        return c

    def close_all(self) -> None:
        """Close every connection opened here."""
        for c in self.opened:
            c.close()


def server_keys(c: WorkqRaw) -> dict:
    """`inspect server` -> {key: value}."""
    (ident, keys), = parse_entries(c.cmd(b"inspect server\r\n"))
    assert ident == "server"
    return keys


def steady_clients(c: WorkqRaw, timeout: float = 10.0) -> int:
    """`inspect server` active-clients once two readings 100 ms apart agree: connections just
    opened or closed by the client may not be accepted / dropped by the server yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        x = server_keys(c)["active-clients"]
        time.sleep(0.1)
        if server_keys(c)["active-clients"] == x:
            return int(x)
    raise AssertionError(f"active-clients not steady within {timeout} s")


WAITING = "<WAIT>"


class SansIO:
    """One workq connection without sockets: a Parser feeding a Session on `info`
    (a WorkqInfo). `feed(bytes)` returns the replies in order; a command that must wait
    yields WAITING, and its answer, once the engine calls back, is appended to `woken`."""

    def __init__(self, info: WorkqInfo) -> None:
        self.parser = Parser()
        self.session = Session(info)
        self.woken: list = []
        self.session.on_wake = lambda: self.woken.append(self.session.take_reply())

    def feed(self, data: bytes) -> list:
        """Feed `data`; run every complete command; return the replies (bytes or WAITING)."""
        out = []
        for item in self.parser.feed(data):
            r = self.session.handle(item)
            assert item is not CLOSE and r is not QUIT, "connection closed"
            out.append(WAITING if r is WAIT else r)
        return out

    def one(self, data: bytes) -> bytes:
        """Feed one command that answers at once; return its reply."""
        out = self.feed(data)
        assert len(out) == 1 and out[0] is not WAITING, out
        return out[0]

    def job(self, uid: str) -> dict | None:
        """`inspect job` -> {key: value} or None on -NOT-FOUND."""
        r = self.one(b"inspect job %s\r\n" % uid.encode())
        return None if r == b"-NOT-FOUND\r\n" else parse_job(r)

    def close(self) -> None:
        """End the connection as the gateway does."""
        self.session.close()
