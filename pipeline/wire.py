"""A small blocking bunqueue client for the fan-out: length-prefixed MessagePack frames (4-byte
big-endian length, then a map; ../shared/specs bunqueue "Framing"), pipelined PUSHB batches
matched to replies by reqId, and reconnection with resend on connection loss.

Resending is safe because every job carries a `jobId`: the server answers a push of an existing
jobId with that job's id and creates nothing (bunqueue "jobId deduplication").
"""
from __future__ import annotations

import socket
import struct
import time

import msgpack

#: The most bytes a reply frame may announce before the client gives up on the connection.
MAX_REPLY = 64 * 1024 * 1024


class PushError(RuntimeError):
    """The server stayed unreachable after every reconnection attempt, or it broke the
    protocol (a reply without our reqId, a frame over MAX_REPLY)."""


class PushClient:
    """PUSHB batches to one bunqueue endpoint, up to `window` batches in flight.

    host, port: the jobgate (or bunqueue) server; token: sent with Auth first when given;
    timeout_s: socket timeout in seconds; retries: reconnection attempts per loss (backoff
    0.2 s doubling). Counters: `pushed` (jobs the server accepted), `errors` (jobs of batches
    it refused), `reconnects`, and `samples` (the first error replies)."""

    def __init__(self, host: str, port: int, token: str | None = None, window: int = 8,
                 timeout_s: float = 30.0, retries: int = 5) -> None:
        self.addr = (host, port)
        self.token = token
        self.window = window
        self.timeout_s = timeout_s
        self.retries = retries
        self.pending: dict[str, tuple[str, list]] = {}   # reqId -> (queue, jobs), send order
        self.seq = 0
        self.sock: socket.socket | None = None
        self.buf = b""
        self.pushed = self.errors = self.reconnects = 0
        self.samples: list[str] = []

    # -------------------------------------------------------------- connection
    def _connect(self) -> None:
        self.sock = socket.create_connection(self.addr, timeout=self.timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        if self.token is not None:
            self._send({"cmd": "Auth", "token": self.token, "reqId": "auth"})
            r = self._read()
            if not r.get("ok"):
                raise PushError(f"Auth refused: {r.get('error')}")

    def _reconnect(self, why: Exception) -> None:
        """Reconnect and resend every batch still waiting for its reply."""
        self.close()
        delay = 0.2
        for _ in range(self.retries):
            time.sleep(delay)
            delay *= 2
            try:
                self._connect()
                self.reconnects += 1
                for rid, (queue, jobs) in list(self.pending.items()):
                    self._send({"cmd": "PUSHB", "queue": queue, "jobs": jobs, "reqId": rid})
                return
            except OSError:
                self.close()
        raise PushError(f"{self.addr[0]}:{self.addr[1]} unreachable after {self.retries} "
                        f"attempts ({why})")

    def _send(self, msg: dict) -> None:
        body = msgpack.packb(msg, use_bin_type=True)
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def _read(self) -> dict:
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                if n > MAX_REPLY:
                    raise PushError(f"reply frame of {n} bytes")
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return msgpack.unpackb(body, raw=False)
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionResetError("server closed the connection")
            self.buf += chunk

    # -------------------------------------------------------------- pushing
    def push(self, queue: str, jobs: list[dict]) -> None:
        """Queue one PUSHB of `jobs` (bunqueue job option maps, each with data and jobId);
        reads replies first while `window` batches are in flight."""
        if self.sock is None:
            self._with_retry(self._connect)
        self.seq += 1
        rid = f"fanout-{self.seq}"
        self.pending[rid] = (queue, jobs)
        self._with_retry(lambda: self._send({"cmd": "PUSHB", "queue": queue, "jobs": jobs,
                                             "reqId": rid}))
        while len(self.pending) >= self.window:
            self._with_retry(self._take_reply)

    def flush(self) -> None:
        """Wait for every reply."""
        while self.pending:
            self._with_retry(self._take_reply)

    def _with_retry(self, fn) -> None:
        try:
            fn()
        except OSError as e:   # includes timeouts and resets; the pending batches are resent
            self._reconnect(e)

    def _take_reply(self) -> None:
        r = self._read()
        rid = r.get("reqId")
        if rid not in self.pending:
            raise PushError(f"reply for an unknown request: {r!r:.200}")
        _, jobs = self.pending.pop(rid)
        if r.get("ok"):
            self.pushed += len(jobs)
        else:
            self.errors += len(jobs)
            if len(self.samples) < 5:
                self.samples.append(str(r.get("error")))

    def close(self) -> None:
        """Close the socket (pending batches stay pending)."""
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None
