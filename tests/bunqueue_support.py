"""Helpers of the bunqueue integration tests (test_bunqueue_*.py): a small blocking client over a
real socket, frame builders, and server starters.

Wire format (bunqueue-tcp-protocol.txt, "Wire Format"): every frame is a 4-byte big-endian length
and that many bytes of MessagePack, both ways. MessagePack ext type 0 is JavaScript `undefined`
(msgpackr writes `d4 00 00`); replies decode it to the sentinel `UNDEF` here, so a test can tell
an absent value (`UNDEF`) from nil (`None`). `UNDEF` can also be sent.

    c = BQ(port)
    c.call("PUSH", queue="q", data={"a": 1})       # -> {"ok": True, "id": "...", "reqId": ...}
    c.send({"cmd": "Ping", "reqId": "a"}, {...})   # several frames in ONE write
    c.recv_n(2)                                    # the next two frames, in arrival order

The command tests (test_bunqueue_push.py, _pull_ack, _query, _control, _monitoring) check
every bunqueue command over a real socket against jobgate: reply shapes (keys, values, wire types
where they matter) and error strings. Contract: ../shared/specs/bunqueue-tcp-protocol.txt; where
it is silent, bunqueue 2.9.5 (../shared/reference/bunqueue-golden.json and its sources);
jobgate's deliberate differences are in docs/bunqueue.md. A case where jobgate answers otherwise
than the reference, without being a documented difference, is marked `xbug()` (strict xfail) with
the reference's reply in the reason; `jobgate_only()` skips a jobgate choice in reference mode.
One server per module (tests/conftest.py `bq_server`); every test uses fresh queue names
(`qname()`). JOBGATE_BQ_REFERENCE=1 runs the same tests against the real bunqueue server. Their
reply helpers are at the end of this file: `OK`, `err()`, `counts()`, `keys()`, `job()` and the
Job key lists.

`bq_server_start()` starts jobgate (tests/support.Server with bunqueue=True), or the reference
bunqueue server when JOBGATE_BQ_REFERENCE=1 (tests/bunqueue_real.py; used to check what these
tests expect, never in CI).
"""
from __future__ import annotations

import itertools
import os
import socket
import struct
import time
import uuid

import msgpack
import pytest

MAX_FRAME = 64 * 1024 * 1024


class _Undefined:
    """JavaScript `undefined` (MessagePack ext type 0)."""

    __slots__ = ()
    _inst = None

    def __new__(cls):
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "UNDEF"

    def __bool__(self) -> bool:
        return False


#: What ext type 0 decodes to (and what encodes as `d4 00 00`).
UNDEF = _Undefined()


def _ext_hook(code: int, data: bytes):
    if code == 0:
        return UNDEF
    return msgpack.ExtType(code, data)


def _default(obj):
    if obj is UNDEF:
        return msgpack.ExtType(0, b"\x00")
    raise TypeError(f"cannot pack {obj!r}")


def pack(obj) -> bytes:
    """MessagePack of `obj`: str as str, bytes as bin, UNDEF as ext 0."""
    return msgpack.packb(obj, use_bin_type=True, default=_default)


def unpack(body: bytes):
    """The value of one MessagePack body (ext 0 -> UNDEF; map keys of any type)."""
    return msgpack.unpackb(body, raw=False, ext_hook=_ext_hook, strict_map_key=False)


def frame_raw(body: bytes) -> bytes:
    """`body` with its 4-byte big-endian length prefix."""
    return struct.pack(">I", len(body)) + body


def frame(obj) -> bytes:
    """One frame carrying `obj`."""
    return frame_raw(pack(obj))


def qname(prefix: str = "q") -> str:
    """A fresh queue name (tests share one server per module)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


_rids = itertools.count(1)


class BQ:
    """A blocking bunqueue connection.

    `call(cmd, **fields)` sends one command with a fresh string reqId and returns the reply
    whose reqId matches, without that reqId (event frames and other replies that arrive
    first are kept in `self.events` / `self.pending`). `send(*objs)` writes several frames
    in one write; `recv()` / `recv_n(n)` read frames in arrival order (pending ones first).
    """

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""
        self.pending: list = []   # replies read while looking for another reqId
        self.events: list = []    # unsolicited {type: event} frames

    # ------------------------------------------------------------------ output
    def send(self, *objs) -> None:
        """Frame every object and write them all with one sendall."""
        self.sock.sendall(b"".join(frame(o) for o in objs))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    # ------------------------------------------------------------------- input
    def _fill(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout if timeout is not None else self.timeout)
        d = self.sock.recv(1 << 20)
        if not d:
            raise EOFError("connection closed by the server")
        self.buf += d

    def recv_frame(self, timeout: float | None = None) -> bytes:
        """The next frame body from the socket (no decoding)."""
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return body
            self._fill(timeout)

    def recv(self, timeout: float | None = None):
        """The next frame (pending replies first), decoded."""
        if self.pending:
            return self.pending.pop(0)
        return unpack(self.recv_frame(timeout))

    def recv_n(self, n: int, timeout: float | None = None) -> list:
        """The next `n` frames, in arrival order."""
        return [self.recv(timeout) for _ in range(n)]

    def recv_reply(self, rid, timeout: float | None = None):
        """The reply carrying reqId `rid`; events and other replies are put aside."""
        for i, r in enumerate(self.pending):
            if isinstance(r, dict) and r.get("reqId") == rid:
                return self.pending.pop(i)
        while True:
            r = unpack(self.recv_frame(timeout))
            if isinstance(r, dict) and r.get("type") == "event" and "reqId" not in r:
                self.events.append(r)
            elif isinstance(r, dict) and r.get("reqId") == rid:
                return r
            else:
                self.pending.append(r)

    def call(self, cmd: str, **fields) -> dict:
        """Send {cmd, **fields, reqId: <fresh str>} and return its reply without the reqId
        (the reply is found by it; a command with a `timeout` field in ms gets that much
        longer to answer)."""
        rid = f"t{next(_rids)}"
        self.send(dict(cmd=cmd, **fields, reqId=rid))
        r = self.recv_reply(rid, self.wait_for(fields))
        del r["reqId"]
        return r

    def wait_for(self, fields: dict) -> float:
        """Socket timeout for a command: the default, plus its own `timeout` (ms) if any."""
        t = fields.get("timeout")
        return self.timeout + (t / 1000 if isinstance(t, (int, float)) and t > 0 else 0)

    __call__ = call

    def ok(self, cmd: str, **fields) -> dict:
        """`call` that asserts ok: true."""
        r = self.call(cmd, **fields)
        assert r.get("ok") is True, (cmd, fields, r)
        return r

    def push(self, queue: str, data=None, **opts) -> str:
        """PUSH, assert ok, return the job id."""
        return self.ok("PUSH", queue=queue, data={} if data is None else data, **opts)["id"]

    def pull(self, queue: str, **opts):
        """PULL (no wait unless `timeout`), return the whole reply."""
        return self.ok("PULL", queue=queue, **opts)

    def state(self, id: str) -> str:
        return self.ok("GetState", id=id)["state"]

    def counts(self, queue: str) -> dict:
        return self.ok("GetJobCounts", queue=queue)["counts"]

    def count(self, queue: str) -> int:
        return self.ok("Count", queue=queue)["count"]

    def expect_eof(self, timeout: float = 5.0) -> None:
        """Assert that the server closes the connection (nothing more arrives)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "connection not closed"
            try:
                self._fill(left)
            except EOFError:
                return
            except ConnectionResetError:
                return
            except socket.timeout:
                raise AssertionError("connection not closed") from None
            assert len(self.buf) == 0, f"unexpected bytes before EOF: {self.buf[:80]!r}"

    def quiet(self, wait: float = 0.2) -> bool:
        """True when nothing arrives within `wait` seconds (no pending replies)."""
        if self.pending or self.buf:
            return False
        self.sock.settimeout(wait)
        try:
            d = self.sock.recv(65536)
        except socket.timeout:
            return True
        finally:
            self.sock.settimeout(self.timeout)
        if d:
            self.buf += d
        return False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Connections:
    """Opens BQ connections to one port; `close_all()` closes every one (fixture teardown)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.opened: list[BQ] = []

    def open(self, timeout: float = 5.0) -> BQ:
        c = BQ(self.port, timeout=timeout)
        self.opened.append(c)
        return c

    def close_all(self) -> None:
        for c in self.opened:
            c.close()
        self.opened.clear()


# ---------------------------------------------------------------------------- servers
def reference_mode() -> bool:
    """True when JOBGATE_BQ_REFERENCE=1: the fixtures run the real bunqueue server instead."""
    return os.environ.get("JOBGATE_BQ_REFERENCE") == "1"


class _RefAdapter:
    """The reference server with the attributes of tests/support.Server."""

    def __init__(self, token=None, rate_limit=None) -> None:
        from .bunqueue_real import BunqueueServer
        self.real = BunqueueServer(token=token, rate_limit=rate_limit)
        self.bunqueue_port = self.real.port
        self.port = None
        self.workq_port = None

    def stop(self):
        self.real.stop()
        return b"", b""

    def advance(self, ms: int) -> None:
        """The reference runs on the real clock: let `ms` ms pass."""
        time.sleep(ms / 1000)


def bq_clocked_start(tmp_dir):
    """A jobgate server in this process on a manual clock (tests/inproc.py) with beanstalk,
    workq and bunqueue listeners (SQLite file in `tmp_dir`); `advance(ms)` moves its clock.
    In reference mode, the real bunqueue server, whose `advance(ms)` sleeps."""
    if reference_mode():
        return _RefAdapter()
    from .inproc import InProcServer
    s = InProcServer(f"sqlite:///{tmp_dir}/jobgate.db")
    s.bunqueue_port = s.ports["bunqueue"]
    s.port_beanstalk = s.ports["beanstalk"]
    return s


#: beanstalk and workq listeners marked `open` (their addresses come from --listen): a server
#: with bunqueue tokens refuses to start without it (docs/operations.md, "TLS and access")
OPEN_LISTENERS_YAML = "listeners:\n  beanstalk: {open: true}\n  workq: {open: true}\n"


def bq_server_start(tmp_dir, *, token: str | None = None, rate_limit: int | None = None,
                    workq: bool = False):
    """A jobgate server with beanstalk and bunqueue listeners (SQLite file in `tmp_dir`,
    durability commit); `token` / `rate_limit` go into a YAML config. In reference mode, the
    real bunqueue server (no beanstalk / workq)."""
    if reference_mode():
        return _RefAdapter(token, rate_limit)
    from .support import Server
    extra = []
    lines = []
    if token is not None:
        lines.append(f"  auth_tokens: [{token}]")
    if rate_limit is not None:
        lines.append(f"  rate_limit: {rate_limit}")
    if lines:
        cfg = os.path.join(str(tmp_dir), "bunqueue.yaml")
        with open(cfg, "w") as f:
            f.write("bunqueue:\n" + "\n".join(lines) + "\n")
            if token is not None:   # tokens on: beanstalk and workq must be marked open
                f.write(OPEN_LISTENERS_YAML)
        extra = ["--config", cfg]
    return Server(f"sqlite:///{tmp_dir}/jobgate.db", bunqueue=True, workq=workq, extra=extra)


def wait_until(pred, timeout: float = 3.0, step: float = 0.02) -> bool:
    """Poll `pred()` until it is true or `timeout` s pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


# ---------------------------------------------------------------------------- reply helpers
#: The Job object as PULL sends it (bunqueue-golden.json step "PULL (no owner)"), in order.
JOB_KEYS = [
    "id", "queue", "name", "data", "createdAt", "runAt", "startedAt", "completedAt",
    "attempts", "backoff", "backoffConfig", "dependsOn", "childrenIds", "childrenCompleted",
    "tags", "progress", "progressMessage", "stacktrace", "repeat", "durable", "lastHeartbeat",
    "stallCount", "priority", "lifo", "maxAttempts", "removeOnComplete", "removeOnFail", "ttl",
    "timeout", "uniqueKey", "customId", "parentId", "groupId", "stallTimeout",
    "stackTraceLimit", "keepLogs", "sizeLimit", "failParentOnFailure",
    "removeDependencyOnFailure", "continueParentOnFailure", "ignoreDependencyOnFailure",
    "deduplicationTtl", "deduplicationExtend", "deduplicationReplace", "debounceId",
    "debounceTtl", "timeline"]
#: GetJob adds these three (step "GetJob (waiting)").
GETJOB_KEYS = JOB_KEYS + ["state", "returnvalue", "failedReason"]
COUNT_KEYS = ["waiting", "prioritized", "delayed", "active", "completed", "failed",
              "waiting-children", "paused"]
OK = {"ok": True, "id": UNDEF}   # the reply of commands that answer only ok (reference)


def err(msg: str) -> dict:
    return {"ok": False, "error": msg}


def counts(**nonzero) -> dict:
    c = {k: 0 for k in COUNT_KEYS}
    c.update({k.replace("_", "-"): v for k, v in nonzero.items()})
    return c


def keys(d: dict) -> list:
    """The keys of a reply map, sorted (msgpackr writes a JS object's insertion order; the
    client reads an object, so only the set of keys is compared)."""
    return sorted(d, key=str)


def job(c, id) -> dict:
    r = c.call("GetJob", id=id)
    assert r["ok"] is True, r
    return r["job"]


def jobgate_only(reason: str):
    return pytest.mark.skipif(reference_mode(), reason=f"jobgate choice: {reason}")


def xbug(reason: str):
    """A jobgate bug (strict xfail; the reason names the reference's answer)."""
    return pytest.mark.xfail(strict=True, reason=reason)
