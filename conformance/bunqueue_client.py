"""A blocking bunqueue connection for the conformance suite (split from
conformance/bunqueue_wire.py): frames out, frames in, EOF detection."""
from __future__ import annotations

import socket
import struct
import time
from typing import Any

from .bunqueue_wire import MAX_FRAME, Annotated, WireError, annotate, frame

class Client:
    """A blocking bunqueue connection: send dicts (or ``RawBytes``), receive frames.

    ``timeout``: seconds a receive may wait. ``recv_frame`` returns a frame body, or raises
    ``EOFError`` when the server closed the connection (``socket.timeout`` when nothing came).
    """

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = bytearray()

    def send(self, obj: Any) -> None:
        """Send one frame (a dict, or ``RawBytes`` as they are)."""
        self.sock.sendall(frame(obj))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_many(self, objs: list) -> None:
        """All frames in one write (pipelining)."""
        self.sock.sendall(b"".join(frame(o) for o in objs))

    def send_split(self, obj: Any, cuts: tuple[int, ...] = (2, 9), pause: float = 0.05) -> None:
        """One frame in several writes, cut at byte offsets ``cuts``, ``pause`` s apart."""
        data = frame(obj)
        edges = [0, *[c for c in cuts if 0 < c < len(data)], len(data)]
        for i, (a, b) in enumerate(zip(edges, edges[1:])):
            if i:
                time.sleep(pause)
            self.sock.sendall(data[a:b])

    def _fill(self, timeout: float | None) -> None:
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed by server")
        self.buf += chunk

    def recv_frame(self, timeout: float | None = None) -> bytes:
        """The next frame body. ``timeout`` (s) applies to each wait for bytes."""
        while len(self.buf) < 4:
            self._fill(timeout)
        n = struct.unpack(">I", self.buf[:4])[0]
        if n > MAX_FRAME + 16:
            raise WireError(f"reply frame header announces {n} bytes")
        while len(self.buf) < 4 + n:
            self._fill(timeout)
        body = bytes(self.buf[4:4 + n])
        del self.buf[:4 + n]
        return body

    def recv(self, timeout: float | None = None) -> Annotated:
        """The next frame, decoded with its wire types."""
        return annotate(self.recv_frame(timeout))

    def wait_eof(self, timeout: float = 5.0) -> bytes:
        """Read until the server closes; returns whatever bytes came first (b"" = clean EOF).
        Raises ``socket.timeout`` if the connection is still open after ``timeout`` s."""
        extra = bytes(self.buf)
        self.buf.clear()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("connection still open")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return extra
            if not chunk:
                return extra
            extra += chunk

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
