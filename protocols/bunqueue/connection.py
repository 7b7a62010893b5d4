"""One bunqueue connection over the connection contract (protocols/contract.py): frames in,
replies out in completion order (bunqueue-tcp-protocol.txt "Pipelining"). Sans-IO.

Per read: every complete frame is run in order; a reply is handed to the transport at once
(durable when the command mutated: it goes out after the commit). Commands that wait (PULL with
a timeout, WaitJob) answer later through `deliver`, and so do event frames. At most
MAX_IN_FLIGHT commands of one connection wait at once; further frames are held (and reading
pauses) until one of them has answered (backpressure, the reference's semaphore). A frame over
the size limit gets one error frame, then the connection closes (reference behaviour). End of
input: the frames already read are still run, then the connection closes; closing returns the
connection's active jobs to waiting without counting an attempt.
"""
from __future__ import annotations

from collections import deque

from .codec import UNDEFINED, FrameReader, TooLarge, frame, pack
from .info import BunqueueInfo
from .session import Session

#: Commands of one connection that may wait at the same time (the reference's semaphore).
MAX_IN_FLIGHT = 50


class Connection:
    """The push-style session of one bunqueue connection (see the module docstring)."""

    __slots__ = ("transport", "reader", "session", "_pending", "_paused", "_eof", "_done",
                 "_scheduled")

    def __init__(self, info: BunqueueInfo, transport) -> None:
        self.transport = transport
        self.reader = FrameReader(info.max_frame)
        self.session = Session(info, self._deliver, transport.defer,
                               getattr(transport, "principal", None))
        self._pending: deque = deque()
        self._paused = False
        self._eof = False
        self._done = False
        self._scheduled = False

    def data_received(self, data: bytes) -> None:
        """Bytes from the peer: cut into frames and run them."""
        if self._done:
            return
        for body in self.reader.feed(data):
            if body.__class__ is TooLarge:
                self._run()
                self.transport.send(frame(pack({"ok": False, "error": body.error,
                                                "reqId": UNDEFINED})))
                self._finish()
                return
            self._pending.append(body)
        self._run()

    def eof_received(self) -> None:
        """No more input: run what was read, then close."""
        self._eof = True
        if not self._pending:
            self._finish()

    def connection_lost(self) -> None:
        """The connection is gone: withdraw its waits, return its jobs to waiting."""
        self._done = True
        self._pending.clear()
        self.session.close()

    def partial_input(self) -> int:
        """Bytes of an unfinished frame held (the contract's optional method: half-sent
        timeout and buffer budget; bounded by max_frame + 4)."""
        return self.reader.buffered()

    def handshake_pending(self) -> bool:
        """True until the connection has authenticated, when the server needs Auth (the
        contract's optional method: closed after the dialect's auth_timeout_s)."""
        return not self.session.authed

    def pause_writing(self) -> None:
        """The peer does not read: hold event frames (the feed buffer bounds them)."""
        self.session.write_paused = True

    def resume_writing(self) -> None:
        self.session.write_paused = False
        self.session.send_events()

    # ---------------------------------------------------------------- running
    def _run(self) -> None:
        s = self.session
        t = self.transport
        pending = self._pending
        while pending and len(s.waits) < MAX_IN_FLIGHT and not self._done:
            r = s.handle(pending.popleft())
            if r is not None:
                t.send(r, s.need_commit)
                s.need_commit = False
        if pending:
            if not self._paused:
                self._paused = True
                t.pause_reading()
        else:
            if self._paused:
                self._paused = False
                t.resume_reading()
            if self._eof:
                self._finish()

    def _deliver(self, data: bytes, need_commit: bool) -> None:
        """A late reply or an event frame (may be called inside an engine operation)."""
        if self._done:
            return
        self.transport.send(data, need_commit)
        if self._pending and not self._scheduled:   # a waiting command answered: a slot
            self._scheduled = True
            self.transport.defer(self._resume)

    def _resume(self) -> None:
        self._scheduled = False
        if not self._done:
            self._run()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self.transport.close()


def connect(info: BunqueueInfo, transport) -> Connection:
    """The session factory of the bunqueue registration."""
    return Connection(info, transport)
