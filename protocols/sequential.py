"""A push-style session (protocols/contract.py) for dialects that answer one command at a time,
in order: beanstalk and workq. Sans-IO: bytes in through `data_received`, replies out through
the transport.

The dialect provides a parser (`feed(bytes) -> list of commands`, optionally `buffered() ->
int`: bytes of an unfinished command it holds) and a handler with
`handle(cmd) -> bytes | wait | quit`, `has_reply()`, `take_reply()`, `cancel_wait() -> bytes |
None`, `close()`, and the attributes `on_wake` (set here) and `need_commit` (set by the handler
when its reply must wait for the commit; cleared here).

Behaviour (unchanged from the gateway's former text loop):

- Commands run in arrival order; a reply that needs the commit is sent with durable=True.
- A command that must wait (reserve, lease, result, run) stops the run. Bytes that arrive
  meanwhile are held, at most WAIT_STASH_MAX (then reading pauses: backpressure); once the wait
  is answered, the held commands run.
- End of input while a command waits withdraws the wait (the dialect's timeout reply: beanstalk
  TIMED_OUT, workq -TIMEOUT); the commands behind it are still answered, a later command that
  would wait is answered at once as withdrawn, then the connection closes.
- quit (or a parser's CLOSE) closes the connection after the replies before it.
- While the peer does not read its replies (pause_writing), no further command runs; they run
  once it reads again (resume_writing).
"""
from __future__ import annotations

from collections import deque

#: While a command waits, at most this many bytes of the client's further input are held
#: (then reading pauses until the wait is answered: backpressure, not unbounded memory).
WAIT_STASH_MAX = 1 << 20


class Sequential:
    """Runs `handler` over `parser` for one connection (see the module docstring).

    `wait` / `quit`: the handler's markers; `on_end()`: called once when the connection ends,
    before `handler.close()` (beanstalk counts a put whose body never came).
    """

    __slots__ = ("parser", "handler", "transport", "wait", "quit", "on_end", "_pending",
                 "_stash", "_stash_size", "_waiting", "_eof", "_done", "_closed", "_paused",
                 "_scheduled", "_wpaused", "_buffered")

    def __init__(self, parser, handler, transport, wait, quit, on_end=None) -> None:
        self.parser = parser
        self.handler = handler
        self.transport = transport
        self.wait = wait
        self.quit = quit
        self.on_end = on_end
        self._pending: deque = deque()
        self._stash: list = []
        self._stash_size = 0
        self._waiting = False
        self._eof = False
        self._done = False      # quit, or input ended and everything was answered
        self._closed = False    # connection_lost
        self._paused = False
        self._scheduled = False
        self._wpaused = False   # the peer does not read its replies: run nothing more
        self._buffered = getattr(parser, "buffered", None)
        handler.on_wake = self._woken

    def ahead(self) -> deque:
        """The parsed commands waiting behind the running one, in order (read them, do not
        change them): a handler may prepare for them (glide-mq's addJobs in shared mode
        take their ids together: protocols/resp/shared.py)."""
        return self._pending

    # ------------------------------------------------------------- contract
    def data_received(self, data: bytes) -> None:
        """Bytes from the peer."""
        if self._done or self._closed:
            return
        if self._waiting:
            self._stash.append(data)
            self._stash_size += len(data)
            if self._stash_size >= WAIT_STASH_MAX and not self._paused:
                self._paused = True
                self.transport.pause_reading()
            return
        self._pending.extend(self.parser.feed(data))
        self._run()

    def eof_received(self) -> None:
        """The peer sends no more (half-close or gone)."""
        if self._done or self._closed:
            return
        self._eof = True
        if not self._waiting:
            self._run()       # what is left, unless writing is paused; then it closes
            return
        r = self.handler.cancel_wait()
        if r is not None:     # withdrawn: its reply, then the commands behind it
            self._waiting = False
            self._send(r)
            self._run()
        # else the answer is already there: _resume (scheduled by _woken) sends it

    def connection_lost(self) -> None:
        """The connection is gone: end the handler (its waits and reservations go)."""
        if self._closed:
            return
        self._closed = True
        self._waiting = False
        if self.on_end is not None:
            self.on_end()
        self.handler.close()

    def partial_input(self) -> int:
        """Bytes of an unfinished command (line or body) the parser holds: the contract's
        optional method for the half-sent timeout and the buffer budget. Input held while a
        command waits (at most WAIT_STASH_MAX, then reading pauses) is not counted: it may be
        complete commands."""
        b = self._buffered
        return b() if b is not None else 0

    def pause_writing(self) -> None:
        """The peer does not read its replies: stop running commands (the rest of what was
        read stays parsed and waits; the runner pauses reading), so one read cannot produce
        unbounded output (a `peek` answers up to 64 KiB for 8 bytes)."""
        self._wpaused = True

    def resume_writing(self) -> None:
        """The peer read its replies: run what waits, soon."""
        self._wpaused = False
        if not self._scheduled:
            self._scheduled = True
            self.transport.defer(self._resume)

    # ------------------------------------------------------------- running
    def _send(self, reply: bytes) -> None:
        h = self.handler
        self.transport.send(reply, h.need_commit)
        h.need_commit = False

    def _run(self) -> None:
        h = self.handler
        t = self.transport
        pending = self._pending
        while True:
            while pending:
                if self._wpaused:
                    return
                r = h.handle(pending.popleft())
                if r.__class__ is bytes:
                    if r:
                        t.send(r, h.need_commit)
                        h.need_commit = False
                    continue
                if r is self.quit:
                    pending.clear()
                    self._finish()
                    return
                if self._eof:          # input already ended: the command cannot wait
                    w = h.cancel_wait()
                    if w is None and not h.has_reply():
                        self._waiting = True   # its answer comes later (a database read)
                        return
                    self._send(w if w is not None else h.take_reply())
                    continue
                self._waiting = True
                return
            if not self._stash:
                break
            data = b"".join(self._stash)
            self._stash = []
            self._stash_size = 0
            if self._paused:
                self._paused = False
                t.resume_reading()
            pending.extend(self.parser.feed(data))
        if self._eof:
            self._finish()

    def _woken(self) -> None:
        """The engine answered the waiting command (inside another command): resume soon."""
        if not self._scheduled:
            self._scheduled = True
            self.transport.defer(self._resume)

    def _resume(self) -> None:
        self._scheduled = False
        if self._closed or self._done or self._wpaused:
            return
        if not self._waiting:     # after resume_writing: run what was read meanwhile
            self._run()
            return
        if not self.handler.has_reply():
            return
        self._waiting = False
        self._send(self.handler.take_reply())
        self._run()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self.transport.close()
