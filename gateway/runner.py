"""The one connection runner: an asyncio.Protocol per accepted connection, for every dialect
(DESIGN.md, "Networking"; the contract: protocols/contract.py).

`data_received` feeds the dialect's session; everything the session sends while handling one
read goes out with one write (pipelining costs no extra syscalls). A reply sent `durable` is
held until the writer has committed every mutation made before it (durability `commit`), and
whatever the session sends after it waits behind it, so replies never overtake each other.
Flow control both ways: the session may pause reading (input it cannot run yet), and when the
peer does not read its replies (asyncio's pause_writing), reading pauses too and the session is
told, so a slow reader cannot make the server buffer without bound.

Limits (gateway/limits.py): after each read the session's optional `partial_input()` (bytes of
an unfinished command or frame) is reported to the server's buffer budget when it changed; the
server-wide sweep reads `rx`, `born`, `partial` and the marks below to close idle, half-sent
and unauthenticated connections, and the budget may pause reading (`budget_pause`).
"""
from __future__ import annotations

import asyncio
import socket
from collections import deque

#: Replies gathered while handling one read go out as one write, but once they pass this many
#: bytes they are written at once, so that a peer that does not read is noticed (asyncio calls
#: pause_writing from inside write) before one read's replies grow without bound.
FLUSH_AT = 256 * 1024


class Runner(asyncio.Protocol):
    """One connection: `server` (gateway.server.Runtime), `reg` (its dialect's Registration),
    `state` (the dialect's server-wide state), `listener` (its gateway.config.Listener, or
    None). Implements the Transport of the contract; `principal` is the core.api.Principal
    bound when the connection is made (gateway/access.py; None: no access control)."""

    def __init__(self, server, reg, state, listener=None) -> None:
        self.server = server
        self.reg = reg
        self.state = state
        self.listener = listener
        self.principal = None
        self.session = None
        self.t = None
        self._batch = None
        self._batch_bytes = 0
        self._held: deque = deque()     # (commit mark needed, bytes)
        self._listening = False         # registered with the writer for commits
        self._closing = False
        self._lost = False
        self._session_pauses = 0
        self._write_paused = False
        self._reading = True
        self._budget_paused = False
        self._partial_fn = None
        # limits (gateway/limits.py): bytes received, start (server clock, ms), the partial
        # input last reported, and the sweep's marks
        self.rx = 0
        self.born = 0
        self.partial = 0
        self.idle_mark = 0
        self.idle_since = 0
        self.half_mark = None
        self.half_since = 0

    # --------------------------------------------------------- asyncio side
    def connection_made(self, transport) -> None:
        srv = self.server
        self.t = transport
        if srv.connections >= srv.max_connections:
            srv.refusing(True)
            if self.reg.refuse_reply:
                transport.write(self.reg.refuse_reply)
            self._lost = True
            transport.close()
            return
        if srv.refused:
            srv.refusing(False)
        srv.connections += 1
        srv.live.add(self)
        name = self.reg.name
        srv.conn_open[name] = srv.conn_open.get(name, 0) + 1
        srv.conn_total[name] = srv.conn_total.get(name, 0) + 1
        self.born = self.idle_since = srv.clock.monotonic_ms()
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # pragma: no cover - best effort
                pass
        access = getattr(srv, "access", None)
        if access is not None and self.listener is not None:
            from .access import connection_principal
            self.principal = connection_principal(access, self.listener, transport)
        self.session = self.reg.session_factory(self.state, self)
        self._partial_fn = getattr(self.session, "partial_input", None)

    def data_received(self, data: bytes) -> None:
        if self._lost:
            return
        self.rx += len(data)
        self._batch = out = []
        try:
            self.session.data_received(data)
        finally:
            self._batch = None
            self._flush(out)
        f = self._partial_fn
        if f is not None:
            p = f()
            if p != self.partial:
                self.server.limits.account(self, p)

    def eof_received(self):
        if not self._lost:
            self._batch = out = []
            try:
                self.session.eof_received()
            finally:
                self._batch = None
                self._flush(out)
        return True   # keep the write side open: replies to what was read still go out

    def connection_lost(self, exc) -> None:
        self._end()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()
        f = getattr(self.session, "pause_writing", None)
        if f is not None:
            f()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()
        f = getattr(self.session, "resume_writing", None)
        if f is not None and not self._lost:
            f()

    # ------------------------------------------------------ contract side
    def send(self, data: bytes, durable: bool = False) -> None:
        """Queue `data` for the peer (see protocols/contract.py)."""
        if self._lost:
            return
        srv = self.server
        if durable and srv.durable_replies:
            need = srv.port.commit_mark()
            if need > srv.port.committed():
                self._held.append((need, data))
                if not self._listening:
                    self._listening = True
                    srv.writer.on_commit(self._on_commit)
                return
        if self._held:
            self._held.append((0, data))
            return
        b = self._batch
        if b is not None:
            b.append(data)
            self._batch_bytes += len(data)
            if self._batch_bytes >= FLUSH_AT:
                self._batch_bytes = 0
                out = b"".join(b)
                b.clear()
                self.t.write(out)
        else:
            self.t.write(data)

    def close(self) -> None:
        """Close once everything sent so far is written."""
        self._closing = True
        if self._batch is None:
            self._maybe_close()

    def pause_reading(self) -> None:
        self._session_pauses += 1
        self._update_reading()

    def resume_reading(self) -> None:
        if self._session_pauses:
            self._session_pauses -= 1
        self._update_reading()

    def defer(self, fn) -> None:
        """Call `fn()` soon, from the event loop, with its sends batched into one write."""
        asyncio.get_running_loop().call_soon(self._deferred, fn)

    # ------------------------------------------------------------ internal
    def _deferred(self, fn) -> None:
        if self._lost:
            return
        self._batch = out = []
        try:
            fn()
        finally:
            self._batch = None
            self._flush(out)

    def _flush(self, out: list) -> None:
        self._batch_bytes = 0
        if out and not self._lost:
            self.t.write(b"".join(out) if len(out) > 1 else out[0])
        self._maybe_close()

    def _on_commit(self) -> None:
        """The writer committed a batch: send the held replies it made durable."""
        held = self._held
        done = self.server.port.committed()
        out = []
        while held and held[0][0] <= done:
            out.append(held.popleft()[1])
        if not held:
            self._listening = False
            self.server.writer.off_commit(self._on_commit)
        self._flush(out)

    def _maybe_close(self) -> None:
        if self._closing and not self._held and not self._lost and self.t is not None:
            self.t.close()
            # end the session now, not when asyncio reports connection_lost an iteration
            # later: as beanstalkd, a closed connection's tubes, reservations and counters are
            # gone before the next command of any other connection runs (what is written
            # already still goes out: close() flushes)
            self._end()

    def budget_pause(self, on: bool) -> None:
        """The buffer budget stops (`on`) or restarts reading this connection."""
        self._budget_paused = on
        self._update_reading()

    def paused_by_server(self) -> bool:
        """True while reading is paused by the session or the buffer budget (not by a peer
        that does not read its replies)."""
        return bool(self._session_pauses or self._budget_paused)

    def _update_reading(self) -> None:
        want = not (self._session_pauses or self._write_paused or self._budget_paused)
        if want != self._reading and not self._lost and self.t is not None:
            self._reading = want
            try:
                if want:
                    self.t.resume_reading()
                else:
                    self.t.pause_reading()
            except (RuntimeError, AttributeError):  # closing transport
                pass

    def _end(self) -> None:
        """The connection is gone (or the server stops): end the session once."""
        if self._lost:
            return
        self._lost = True
        srv = self.server
        if self._listening:
            self._listening = False
            srv.writer.off_commit(self._on_commit)
        self._held.clear()
        if self.session is not None:
            srv.connections -= 1
            srv.conn_open[self.reg.name] -= 1
            srv.live.discard(self)
            srv.limits.forget(self)
            self.session.connection_lost()

    def abort(self) -> None:
        """A limit closes this connection: drop it now, unsent replies included (the peer
        stopped sending or reading; waiting for a flush could wait forever)."""
        if self.t is not None and not self._lost:
            self.t.abort()

    def shutdown(self) -> None:
        """Server stop: end the session now (its reservations go back), drop the socket."""
        self._end()
        if self.t is not None:
            self.t.abort()
