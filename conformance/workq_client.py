"""A small blocking workq client over one TCP socket, and the workq reply framing.

workq-protocol.txt is the contract; where it is wrong the reference server's bytes are
(../shared/reference/README.md: every success line starts with ``+``). A reply is one of:

- ``+OK\\r\\n``;
- ``-<ERROR>[ <text>]\\r\\n`` (``-CLIENT-ERROR <text>``, ``-SERVER-ERROR <text>``,
  ``-NOT-FOUND``, ``-TIMEOUT``);
- ``+OK <n>\\r\\n`` followed by n entries, each opened by a head line whose field count tells
  its kind (names and ids never contain spaces):

  * ``<id> <name> <ttr> <size>`` (lease): then ``size`` payload bytes and CRLF;
  * ``<id> <success> <size>`` (result, run): then ``size`` result bytes and CRLF;
  * ``<id-or-name> <key-count>`` (inspect): then ``key-count`` lines ``<key> <value>``.

Payloads and results may contain CRLF: they are cut by their size, never at a line end.
``split_reply`` cuts one such frame from a buffer; ``Client`` sends commands and parses the
replies into ``Job``, ``Result`` and inspect entries, raising ``WorkqError`` subclasses that
carry the exact error line. All protocol durations (TTR, TTL, wait timeouts) are in
milliseconds, as on the wire; socket timeouts are in seconds.
"""

from __future__ import annotations

import datetime as _dt
import re
import socket
from dataclasses import dataclass
from typing import Iterable

__all__ = [
    "split_reply",
    "WorkqError",
    "ClientError",
    "ServerError",
    "NotFound",
    "TimedOut",
    "Job",
    "Result",
    "Client",
    "format_time",
    "parse_inspect",
]

_OK_N = re.compile(rb"\+OK (\d+)\Z")
_MAX_ENTRIES = 1_000_000   # bound on one frame's announced entry count


def split_reply(buf: bytes | bytearray) -> tuple[bytes | None, int, bool]:
    """Cut one reply frame from the start of ``buf``.

    Returns ``(frame, consumed, bad)`` with the contract of ``conformance.framing.split_frame``:
    ``frame`` is None (and ``consumed`` 0) while ``buf`` holds no complete frame yet; ``bad`` is
    True when the frame is malformed (a payload not followed by CRLF, or an entry head of no
    known kind) and reading should stop. A line that is neither ``+...`` nor ``-...`` (e.g. a
    key line beyond an entry's announced key count) is a frame of its own.
    """
    eol = buf.find(b"\r\n")
    if eol < 0:
        return None, 0, False
    m = _OK_N.match(bytes(buf[:eol]))
    pos = eol + 2
    if m is None:
        return bytes(buf[:pos]), pos, False
    n = int(m.group(1))
    if n > _MAX_ENTRIES:
        return bytes(buf[:pos]), pos, True
    for _ in range(n):
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None, 0, False
        head = bytes(buf[pos:eol]).split(b" ")
        pos = eol + 2
        if len(head) == 2 and head[1].isdigit():          # inspect entry: key lines
            for _ in range(int(head[1])):
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    return None, 0, False
                pos = eol + 2
        elif len(head) in (3, 4) and head[-1].isdigit():  # result / lease entry: sized body
            end = pos + int(head[-1]) + 2
            if len(buf) < end:
                return None, 0, False
            if buf[end - 2:end] != b"\r\n":
                return bytes(buf[:end]), end, True
            pos = end
        else:
            return bytes(buf[:pos]), pos, True
    return bytes(buf[:pos]), pos, False


# ------------------------------------------------------------------------------ errors
class WorkqError(Exception):
    """An error reply. ``line``: the exact reply line without CRLF (e.g.
    ``b"-CLIENT-ERROR Duplicate job"``); ``str(err)`` is the text after the error word."""

    def __init__(self, text: str = "", line: bytes = b"") -> None:
        super().__init__(text)
        self.line = line


class ClientError(WorkqError):
    """``-CLIENT-ERROR <text>``: the command was malformed or refused (``ClientError("Duplicate
    job")``)."""


class ServerError(WorkqError):
    """``-SERVER-ERROR <text>``, or a reply this client cannot parse."""


class NotFound(WorkqError):
    """``-NOT-FOUND``: no job (or queue) with that id (name)."""


class TimedOut(WorkqError):
    """``-TIMEOUT``: the wait-timeout (or a run's TTR) passed without an answer."""


def _raise_for(line: bytes) -> None:
    """Raise the exception of an error reply line (without CRLF)."""
    word, _, text = line.partition(b" ")
    t = text.decode("latin-1")
    if word == b"-CLIENT-ERROR":
        raise ClientError(t, line)
    if word == b"-NOT-FOUND":
        raise NotFound(t, line)
    if word == b"-TIMEOUT":
        raise TimedOut(t, line)
    raise ServerError(t or line.decode("latin-1"), line)


# ------------------------------------------------------------------------------ values
@dataclass(frozen=True)
class Job:
    """A leased job: ``id`` (UUID text), ``name``, ``ttr`` (ms), ``payload`` (bytes)."""

    id: str
    name: str
    ttr: int
    payload: bytes


@dataclass(frozen=True)
class Result:
    """A job result: ``id``, ``success`` (True for complete, False for fail or a TTR-failed
    job), ``result`` (bytes)."""

    id: str
    success: bool
    result: bytes


def format_time(when: _dt.datetime | float) -> str:
    """A schedule time on the wire: ``2006-01-02T15:04:05Z`` (UTC, whole seconds). ``when`` is a
    datetime (naive = UTC) or seconds since the epoch."""
    if not isinstance(when, _dt.datetime):
        when = _dt.datetime.fromtimestamp(float(when), _dt.timezone.utc)
    elif when.tzinfo is not None:
        when = when.astimezone(_dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _b(v: str | bytes) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode()


def _flags(**kw: int | None) -> bytes:
    return b"".join(b" -%s=%d" % (k.replace("_", "-").encode(), v)
                    for k, v in kw.items() if v is not None)


# ------------------------------------------------------------------------------ client
class Client:
    """One blocking workq connection. Use as a context manager or call ``close()``.

    ``timeout``: seconds allowed for connecting and for each reply beyond the command's own
    wait (a ``lease``/``result`` waits up to its wait-timeout in ms, a ``run`` up to its
    wait-timeout plus its TTR, before this allowance starts).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 9922, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()

    def close(self) -> None:
        """Close the socket (idempotent)."""
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -------------------------------------------------------------------- raw I/O
    def read_reply(self, wait_ms: int = 0) -> bytes:
        """Read one full reply frame (see ``split_reply``), waiting up to ``wait_ms``
        milliseconds plus ``timeout`` seconds. Raises ``socket.timeout`` or ``ConnectionError``
        (server closed the connection), ``ServerError`` for a malformed frame."""
        self.sock.settimeout(wait_ms / 1000.0 + self.timeout)
        while True:
            frame, used, bad = split_reply(self._buf)
            if frame is not None:
                del self._buf[:used]
                if bad:
                    raise ServerError("malformed reply frame", frame)
                return frame
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("workq server closed the connection")
            self._buf += chunk

    def raw(self, data: bytes, wait_ms: int = 0) -> bytes:
        """Send ``data`` as is and return the next full reply frame, unparsed (the escape
        hatch for anything the typed methods do not cover). ``wait_ms``: how long (ms) the
        command may block on the server, added to the read allowance."""
        self.sock.sendall(data)
        return self.read_reply(wait_ms)

    def _call(self, data: bytes, wait_ms: int = 0) -> bytes:
        """Send a command; return its success reply frame, or raise the error reply's
        exception."""
        frame = self.raw(data, wait_ms)
        if frame.startswith(b"-"):
            _raise_for(frame[:-2])
        return frame

    def _ok(self, data: bytes) -> None:
        frame = self._call(data)
        if frame != b"+OK\r\n":
            raise ServerError("unexpected reply", frame)

    # -------------------------------------------------------------------- clients
    def add(self, id: str, name: str, ttr: int, ttl: int, payload: bytes, *,
            priority: int | None = None, max_attempts: int | None = None,
            max_fails: int | None = None) -> None:
        """Enqueue a job. ``ttr``: time to run in ms (1..86,400,000); ``ttl``: time to live in
        ms from now; ``priority``: int32, higher first; ``max_attempts`` / ``max_fails``:
        0..255 (0 = unlimited)."""
        self._ok(b"add %s %s %d %d %d%s\r\n%s\r\n" % (
            _b(id), _b(name), ttr, ttl, len(payload),
            _flags(priority=priority, max_attempts=max_attempts, max_fails=max_fails), payload))

    def schedule(self, id: str, name: str, ttr: int, ttl: int, when, payload: bytes, *,
                 priority: int | None = None, max_attempts: int | None = None,
                 max_fails: int | None = None) -> None:
        """Enqueue a job that becomes ready at ``when`` (datetime, epoch seconds, or a
        ``2006-01-02T15:04:05Z`` string). ``ttr`` and ``ttl`` in ms; ``ttl`` counts from
        ``when``."""
        t = when if isinstance(when, (str, bytes)) else format_time(when)
        self._ok(b"schedule %s %s %d %d %s %d%s\r\n%s\r\n" % (
            _b(id), _b(name), ttr, ttl, _b(t), len(payload),
            _flags(priority=priority, max_attempts=max_attempts, max_fails=max_fails), payload))

    def run(self, id: str, name: str, ttr: int, timeout: int, payload: bytes, *,
            priority: int | None = None) -> Result:
        """Enqueue a job and block until a worker finishes it: up to ``timeout`` ms for a
        worker to lease it, then up to ``ttr`` ms for its result. Raises TimedOut."""
        frame = self._call(b"run %s %s %d %d %d%s\r\n%s\r\n" % (
            _b(id), _b(name), ttr, timeout, len(payload), _flags(priority=priority), payload),
            timeout + ttr)
        return _parse_result(frame)

    def result(self, id: str, timeout: int = 0) -> Result:
        """The result of a finished job, waiting up to ``timeout`` ms for it to finish.
        Raises TimedOut (not finished in time) or NotFound."""
        return _parse_result(self._call(b"result %s %d\r\n" % (_b(id), timeout), timeout))

    # -------------------------------------------------------------------- workers
    def lease(self, names: str | Iterable[str], timeout: int = 0) -> Job:
        """Lease a job from one name or any of several, waiting up to ``timeout`` ms.
        The lease lasts the job's TTR (ms, ``Job.ttr``). Raises TimedOut."""
        ns = [names] if isinstance(names, (str, bytes)) else list(names)
        frame = self._call(b"lease %s %d\r\n" % (b" ".join(_b(n) for n in ns), timeout),
                           timeout)
        head, body = _one_entry(frame)
        f = head.split(b" ")
        if len(f) != 4:
            raise ServerError("unexpected lease reply", frame)
        return Job(f[0].decode(), f[1].decode(), int(f[2]), body)

    def complete(self, id: str, result: bytes = b"") -> None:
        """Mark a job completed with ``result`` (from any connection)."""
        self._ok(b"complete %s %d\r\n%s\r\n" % (_b(id), len(result), result))

    def fail(self, id: str, result: bytes = b"") -> None:
        """Report a failed attempt with ``result``; the job is retried while max-fails allows
        (jobgate) or failed for good."""
        self._ok(b"fail %s %d\r\n%s\r\n" % (_b(id), len(result), result))

    def delete(self, id: str) -> None:
        """Delete a job in any state. Raises NotFound."""
        self._ok(b"delete %s\r\n" % _b(id))

    # -------------------------------------------------------------------- inspect
    def inspect_job(self, id: str) -> tuple[str, dict[str, str]]:
        """``(id, {key: value})`` of one job (keys: name, ttr, ttl, payload-size, payload,
        max-attempts, attempts, max-fails, fails, priority, state, created[, time])."""
        return self._inspect(b"inspect job %s\r\n" % _b(id))[0]

    def inspect_jobs(self, name: str, offset: int = 0, limit: int = 10) -> list:
        """Ready jobs of queue ``name``, ``limit`` (1..100) from ``offset``."""
        return self._inspect(b"inspect jobs %s %d %d\r\n" % (_b(name), offset, limit))

    def inspect_scheduled_jobs(self, name: str, offset: int = 0, limit: int = 10) -> list:
        """Scheduled (not yet ready) jobs of queue ``name``."""
        return self._inspect(b"inspect scheduled-jobs %s %d %d\r\n" % (_b(name), offset, limit))

    def inspect_queue(self, name: str) -> tuple[str, dict[str, str]]:
        """``(name, {"ready-len": ..., "scheduled-len": ...})``."""
        return self._inspect(b"inspect queue %s\r\n" % _b(name))[0]

    def inspect_queues(self, offset: int = 0, limit: int = 10) -> list:
        """Queues in name order, ``limit`` (1..100) from ``offset``."""
        return self._inspect(b"inspect queues %d %d\r\n" % (offset, limit))

    def inspect_server(self) -> tuple[str, dict[str, str]]:
        """``("server", {"active-clients": ..., "evicted-jobs": ..., "started": ...})``."""
        return self._inspect(b"inspect server\r\n")[0]

    def _inspect(self, data: bytes) -> list[tuple[str, dict[str, str]]]:
        """Entries of an inspect reply, honouring each entry's key-count. Values are str
        decoded as latin-1 (``.encode("latin-1")`` gives the bytes back)."""
        return parse_inspect(self._call(data))


def _entries_start(frame: bytes) -> tuple[int, int]:
    """(announced entry count, offset after the ``+OK <n>`` line) of a frame."""
    eol = frame.find(b"\r\n")
    m = _OK_N.match(frame[:eol])
    if m is None:
        raise ServerError("unexpected reply", frame)
    return int(m.group(1)), eol + 2


def _one_entry(frame: bytes) -> tuple[bytes, bytes]:
    """(head line, sized body) of a one-entry lease/result frame."""
    n, pos = _entries_start(frame)
    if n != 1:
        raise ServerError("expected one entry", frame)
    eol = frame.find(b"\r\n", pos)
    head = frame[pos:eol]
    size = int(head.rsplit(b" ", 1)[1])
    return head, frame[eol + 2:eol + 2 + size]


def _parse_result(frame: bytes) -> Result:
    head, body = _one_entry(frame)
    f = head.split(b" ")
    if len(f) != 3 or f[1] not in (b"0", b"1"):
        raise ServerError("unexpected result reply", frame)
    return Result(f[0].decode(), f[1] == b"1", body)


def parse_inspect(frame: bytes) -> list[tuple[str, dict[str, str]]]:
    """Parse an inspect reply frame into ``[(id-or-name, {key: value}), ...]``, reading
    exactly each entry's announced key count."""
    n, pos = _entries_start(frame)
    out = []
    for _ in range(n):
        eol = frame.find(b"\r\n", pos)
        name, _, count = frame[pos:eol].partition(b" ")
        pos = eol + 2
        keys: dict[str, str] = {}
        for _ in range(int(count)):
            eol = frame.find(b"\r\n", pos)
            k, _, v = frame[pos:eol].partition(b" ")
            keys[k.decode("latin-1")] = v.decode("latin-1")
            pos = eol + 2
        out.append((name.decode("latin-1"), keys))
    return out
