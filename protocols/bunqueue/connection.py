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

Hostile clients (docs/bunqueue.md "Hostile clients"): while Auth is required and not done, the
frame limit is `pre_auth_max_frame` (frames are cut one at a time then, so a frame after a
pipelined Auth gets the full limit) and `handshake_pending()` is True (the gateway closes a
connection that stays so past `auth_timeout_s`). A command whose work comes in slices (a frame
over bulk.BIG_FRAME, a big PUSHB) runs one slice per loop iteration (`transport.defer`); the
connection's next frames wait for its reply, so replies keep their order.
"""
from __future__ import annotations

from collections import deque
from types import GeneratorType

from .codec import UNDEFINED, FrameReader, TooLarge, frame, pack
from .info import BunqueueInfo
from .session import Session

#: Commands of one connection that may wait at the same time (the reference's semaphore).
MAX_IN_FLIGHT = 50


class Connection:
    """The push-style session of one bunqueue connection (see the module docstring)."""

    __slots__ = ("transport", "reader", "session", "info", "_pending", "_paused", "_eof",
                 "_done", "_scheduled", "_task")

    def __init__(self, info: BunqueueInfo, transport) -> None:
        self.transport = transport
        self.info = info
        self.session = Session(info, self._deliver, transport.defer,
                               getattr(transport, "principal", None))
        self.reader = FrameReader(info.max_frame if self.session.authed
                                  else info.pre_auth_max_frame)
        self._pending: deque = deque()
        self._paused = False
        self._eof = False
        self._done = False
        self._scheduled = False
        self._task = None       # the generator of a command running in slices

    def data_received(self, data: bytes) -> None:
        """Bytes from the peer: cut into frames and run them."""
        if self._done:
            return
        if not self.session.authed:
            self._pre_auth(data)
            return
        for body in self.reader.feed(data):
            if body.__class__ is TooLarge:
                self._too_large(body)
                return
            self._pending.append(body)
        self._run()

    def _pre_auth(self, data: bytes) -> None:
        """Before Auth: one frame at a time under the small limit, until Auth succeeds."""
        r = self.reader
        items = r.feed(data, 1)
        while items:
            body = items[0]
            if body.__class__ is TooLarge:
                self._too_large(body)
                return
            self._pending.append(body)
            self._run()
            if self._done or self._pending or self._task is not None:
                return   # the rest stays in the reader until _run has caught up
            if self.session.authed:
                r.limit = self.info.max_frame
                self.data_received(b"")
                return
            items = r.feed(b"", 1)

    def _too_large(self, body: TooLarge) -> None:
        self._run()
        self.transport.send(frame(pack({"ok": False, "error": body.error,
                                        "reqId": UNDEFINED})))
        self._finish()

    def handshake_pending(self) -> bool:
        """True while Auth is required and not done (the gateway's auth deadline)."""
        return not self.session.authed and not self._done

    def handshake_timeout_s(self) -> float:
        """Seconds a connection may stay handshake_pending (option auth_timeout_s; 0: none)."""
        return self.info.auth_timeout_s

    def partial_input(self) -> int:
        """Bytes of an unfinished frame held (the gateway's half-sent frame timeout)."""
        return self.reader.buffered()

    def eof_received(self) -> None:
        """No more input: run what was read, then close."""
        self._eof = True
        if not self._pending and self._task is None:
            self._finish()

    def connection_lost(self) -> None:
        """The connection is gone: withdraw its waits, return its jobs to waiting. A command
        running in slices stops where it is (jobs of a PUSHB created so far stay)."""
        self._done = True
        self._task = None
        self._pending.clear()
        self.session.close()

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
        while pending and len(s.waits) < MAX_IN_FLIGHT and not self._done \
                and self._task is None:
            r = s.handle(pending.popleft())
            if r.__class__ is GeneratorType:
                r = self._start(r)
            if r is not None:
                t.send(r, s.need_commit)
                s.need_commit = False
        if pending or self._task is not None:
            if not self._paused:
                self._paused = True
                t.pause_reading()
        else:
            if self._paused:
                self._paused = False
                t.resume_reading()
            if self._eof:
                self._finish()

    def _start(self, task):
        """Run the first slice of a steps command: its reply when that was all, else None
        (the rest runs from _step)."""
        try:
            next(task)
        except StopIteration as stop:
            return stop.value
        self._task = task
        self.transport.defer(self._step)
        return None

    def _step(self) -> None:
        """One more slice of the running steps command; its reply after the last."""
        task = self._task
        if task is None or self._done:
            return
        try:
            next(task)
        except StopIteration as stop:
            self._task = None
            s = self.session
            if stop.value is not None:
                self.transport.send(stop.value, s.need_commit)
                s.need_commit = False
            self._run()
            if not self._done and not self._pending and self._task is None \
                    and self.reader.buffered():
                self.data_received(b"")   # frames held back before Auth
            return
        self.transport.defer(self._step)

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
