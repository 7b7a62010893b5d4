"""Beanstalk reply framing and a blocking, deadline-bounded socket reader.

A beanstalk reply frame is one line ending in ``\\r\\n``; for ``RESERVED <id> <n>``,
``FOUND <id> <n>`` and ``OK <n>`` the line is followed by an n-byte body and ``\\r\\n``.
The reader never blocks past a deadline and every loop is bounded by that deadline (plus a
hard cap on iterations), so a silent or misbehaving server cannot hang the suite.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass
from typing import Callable

__all__ = [
    "END_OK",
    "END_SILENT",
    "END_EOF",
    "END_TIMEOUT",
    "END_BADFRAME",
    "END_RESET",
    "Outcome",
    "split_frame",
    "WireConn",
]

_BODY_LINE = re.compile(rb"^(?:RESERVED|FOUND) \d+ (\d+)$|^OK (\d+)$")

# How a read step ended.
END_OK = "ok"              # the requested number of frames arrived
END_SILENT = "silent"      # a listening window elapsed (frames may have arrived inside it)
END_EOF = "eof"            # the server closed the connection (read returned b"")
END_TIMEOUT = "timeout"    # the deadline passed before the requested frames arrived
END_BADFRAME = "badframe"  # a body was not followed by \r\n; reading stopped
END_RESET = "reset"        # the connection was reset / errored

_MAX_RECV = 1 << 20        # bytes per recv call
_MAX_LOOP = 100_000        # hard cap on recv iterations per read call


@dataclass(frozen=True)
class Outcome:
    """What one read step observed on one connection.

    ``frames``: complete reply frames, raw bytes each (line + optional body + CRLF).
    ``end``: one of the END_* strings above.
    ``tail``: bytes received after the last complete frame (an incomplete frame), usually b"".
    """

    frames: tuple[bytes, ...]
    end: str
    tail: bytes = b""

    def raw(self) -> bytes:
        """All bytes this step received, frames then tail, concatenated."""
        return b"".join(self.frames) + self.tail


def split_frame(buf: bytes | bytearray) -> tuple[bytes | None, int, bool]:
    """Try to cut one reply frame from the start of ``buf``.

    Returns ``(frame, consumed, bad)``: ``frame`` is the frame's bytes or None when ``buf``
    does not hold a complete frame yet; ``consumed`` is how many bytes of ``buf`` the frame
    used; ``bad`` is True when a body was not followed by ``\\r\\n`` (the frame then holds the
    line, the body and the two wrong bytes).
    """
    eol = buf.find(b"\r\n")
    if eol < 0:
        return None, 0, False
    line = bytes(buf[:eol])
    m = _BODY_LINE.match(line)
    if m is None:
        return bytes(buf[: eol + 2]), eol + 2, False
    size = int(m.group(1) or m.group(2))
    need = eol + 2 + size + 2
    if len(buf) < need:
        return None, 0, False
    frame = bytes(buf[:need])
    return frame, need, frame[-2:] != b"\r\n"


class WireConn:
    """One client TCP connection with a receive buffer that understands reply frames
    (beanstalk framing unless another ``splitter`` is given).

    All timeouts and windows are in seconds (float). Nothing here retries or reconnects.
    """

    def __init__(self, host: str, port: int, connect_timeout: float = 5.0,
                 splitter: Callable | None = None) -> None:
        """Connect to ``host:port`` (TCP); ``connect_timeout`` in seconds. ``splitter`` cuts
        one reply frame from a buffer with the contract of ``split_frame`` (the default:
        beanstalk framing); another dialect passes its own."""
        self.splitter = splitter or split_frame
        self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.eof = False
        self.error = False
        self.closed = False

    # -- sending -------------------------------------------------------------------------
    def send(self, data: bytes, timeout: float = 10.0) -> None:
        """Send all of ``data`` in one sendall call (one write, as far as the kernel allows);
        ``timeout`` in seconds for the whole call."""
        if data:
            self.sock.settimeout(timeout)
            self.sock.sendall(data)

    def shutdown_write(self) -> None:
        """Half-close: shutdown(SHUT_WR); the read side stays open."""
        self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Close the socket (idempotent)."""
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    # -- receiving -----------------------------------------------------------------------
    def _fill(self, deadline: float) -> bool:
        """Receive once, waiting at most until ``deadline`` (time.monotonic() seconds).

        Returns True if bytes arrived, False on deadline/EOF/error (flags set accordingly).
        """
        if self.eof or self.error or self.closed:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(_MAX_RECV)
        except socket.timeout:
            return False
        except OSError:
            self.error = True
            return False
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def _take_frames(self, frames: list[bytes], limit: int | None) -> bool:
        """Move complete frames from the buffer into ``frames`` (at most up to ``limit`` total).

        Returns True if a bad frame was found (reading must stop).
        """
        for _ in range(_MAX_LOOP):
            if limit is not None and len(frames) >= limit:
                return False
            frame, used, bad = self.splitter(self.buf)
            if frame is None:
                return False
            del self.buf[:used]
            frames.append(frame)
            if bad:
                return True
        return False

    def _finish(self, frames: list[bytes], end: str) -> Outcome:
        """Build the outcome of a read that did not end in END_OK; the incomplete tail is
        recorded and dropped from the buffer so the next step starts clean."""
        tail = bytes(self.buf)
        self.buf.clear()
        return Outcome(tuple(frames), end, tail)

    def read_frames(self, n: int, timeout: float) -> Outcome:
        """Read exactly ``n`` frames, waiting up to ``timeout`` seconds in total.

        The outcome's end is END_OK when n frames arrived; otherwise END_TIMEOUT / END_EOF /
        END_RESET / END_BADFRAME with whatever frames (and incomplete tail) did arrive.
        Bytes beyond the n-th frame stay buffered for the next read.
        """
        deadline = time.monotonic() + timeout
        frames: list[bytes] = []
        for _ in range(_MAX_LOOP):
            if self._take_frames(frames, n):
                return self._finish(frames, END_BADFRAME)
            if len(frames) >= n:
                return Outcome(tuple(frames), END_OK)
            if not self._fill(deadline):
                break
        if self.eof:
            return self._finish(frames, END_EOF)
        if self.error:
            return self._finish(frames, END_RESET)
        return self._finish(frames, END_TIMEOUT)

    def read_window(self, window: float) -> Outcome:
        """Collect every frame that arrives within ``window`` seconds (plus what is buffered).

        End is END_SILENT when the window elapsed, END_EOF / END_RESET if the connection ended
        inside it, END_BADFRAME on a framing error. ``frames`` is empty when the server was
        silent, which is what "expect no reply within T" checks.
        """
        deadline = time.monotonic() + window
        frames: list[bytes] = []
        for _ in range(_MAX_LOOP):
            if self._take_frames(frames, None):
                return self._finish(frames, END_BADFRAME)
            if not self._fill(deadline):
                break
        if self._take_frames(frames, None):
            return self._finish(frames, END_BADFRAME)
        if self.eof:
            return self._finish(frames, END_EOF)
        if self.error:
            return self._finish(frames, END_RESET)
        return self._finish(frames, END_SILENT)

    def read_eof(self, timeout: float) -> Outcome:
        """Read until the server closes the connection, at most ``timeout`` seconds.

        End is END_EOF when the close was seen, END_TIMEOUT otherwise; frames that arrived
        before the close are recorded too.
        """
        deadline = time.monotonic() + timeout
        frames: list[bytes] = []
        for _ in range(_MAX_LOOP):
            if self._take_frames(frames, None):
                return self._finish(frames, END_BADFRAME)
            if not self._fill(deadline):
                break
        self._take_frames(frames, None)
        if self.eof:
            return self._finish(frames, END_EOF)
        if self.error:
            # A reset after close is still "the server closed the connection" for a client
            # that only wants to know the connection is gone; keep it distinct anyway.
            return self._finish(frames, END_RESET)
        return self._finish(frames, END_TIMEOUT)

    def leftover(self) -> bytes:
        """Bytes already received (or readable right now) that no step consumed."""
        if not (self.eof or self.error or self.closed):
            self.sock.setblocking(False)
            try:
                for _ in range(64):
                    chunk = self.sock.recv(_MAX_RECV)
                    if not chunk:
                        self.eof = True
                        break
                    self.buf += chunk
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.error = True
            finally:
                if not self.closed:
                    self.sock.setblocking(True)
        out = bytes(self.buf)
        self.buf.clear()
        return out
