"""Accepting connections on a listening socket without dying or going quiet when the process
runs out of descriptors (issue 15, item 2).

Why not `loop.create_server`: measured on uvloop 0.23 (libuv), an `accept()` that fails with
EMFILE/ENFILE makes libuv close its reserve descriptor and accept-and-close every connection in
the backlog, silently (the clients see a bare close, nothing is logged), and when that reserve
descriptor cannot be re-opened uvloop's listen callback gets the error and closes the listening
handle for good (uvloop/handles/streamserver.pyx `__uv_streamserver_on_listen` ->
`_fatal_error` -> `_close()`), again without a log line. The standard asyncio loop logs every
failed attempt through the exception handler and retries after 1 s. Neither is what an operator
wants, so jobgate accepts itself on both loops: `accept()` on a non-blocking socket when the
loop reports it readable, the accepted socket handed to `loop.connect_accepted_socket` (the
same transports and protocols as before). A resource error (EMFILE, ENFILE, ENOBUFS, ENOMEM)
stops accepting for a back-off delay (50 ms doubling to 1 s) and is logged once per episode,
with the count of failed attempts when accepting works again: the connections that could not
be accepted wait in the kernel's listen backlog and are served once descriptors are free,
nothing is dropped by jobgate.
"""
from __future__ import annotations

import errno
import logging
import socket

from .logs import event

log = logging.getLogger("jobgate")

#: errors of accept() that mean "out of a resource": back off, retry later
RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: connections accepted per readiness callback before the loop serves others
BATCH = 64
#: back-off after a resource error: first delay and the most it doubles to (s)
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0


class Acceptor:
    """Accepts on listening socket `sock` (bound and listening; made non-blocking here) and
    serves each connection with `factory()` (an asyncio.Protocol factory) through
    `loop.connect_accepted_socket(factory, conn, ssl=ssl)`; `handshake_timeout` (s, None:
    asyncio's 60 s) bounds a TLS handshake, so a client that opens TLS and stalls is dropped as
    a half-sent command is. `name`: the listener, for the log.
    `close()` stops accepting and closes `sock`. Attributes: `failures` (accept attempts
    failed in the current episode, 0 when accepting works), `episodes` (resource-error
    episodes so far)."""

    def __init__(self, loop, sock: socket.socket, factory, name: str, ssl=None,
                 handshake_timeout: float | None = None) -> None:
        self.loop = loop
        self.tls_args = {} if ssl is None or not handshake_timeout else {
            "ssl_handshake_timeout": handshake_timeout}
        self.sock = sock
        self.factory = factory
        self.name = name
        self.ssl = ssl
        self.failures = 0
        self.episodes = 0
        self._delay = BACKOFF_FIRST_S
        self._retry = None
        self._closed = False
        self._tasks: set = set()
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        sock = self.sock
        for _ in range(BATCH):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:     # the peer gave up before we accepted
                continue
            except OSError as e:
                if e.errno in RESOURCE_ERRORS:
                    self._back_off(e)
                    return
                if e.errno in (errno.EPROTO, errno.EPERM, errno.ETIMEDOUT, errno.ENETDOWN,
                               errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ECONNRESET):
                    continue                   # that one connection failed: go on
                self._back_off(e)              # unexpected: never fatal, retried later
                return
            if self.failures:
                event(log, "accepting again", listener=self.name, failed_attempts=self.failures)
                self.failures = 0
                self._delay = BACKOFF_FIRST_S
            self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        try:
            coro = self.loop.connect_accepted_socket(self.factory, conn, ssl=self.ssl,
                                                     **self.tls_args)
        except Exception:
            conn.close()
            log.exception("could not serve an accepted connection")
            return
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            event(log, "accepted connection failed", level=logging.WARNING, listener=self.name,
                  error=repr(task.exception()))

    def _back_off(self, e: OSError) -> None:
        if not self.failures:
            self.episodes += 1
            event(log, "accept failed, backing off", level=logging.WARNING, listener=self.name,
                  error=errno.errorcode.get(e.errno, str(e.errno)), detail=e.strerror,
                  note="connections wait in the listen backlog; see limits in "
                       "docs/operations.md")
        self.failures += 1
        self.loop.remove_reader(self.sock.fileno())
        self._retry = self.loop.call_later(self._delay, self._resume)
        self._delay = min(self._delay * 2, BACKOFF_MAX_S)

    def _resume(self) -> None:
        self._retry = None
        if not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._readable)
            self._readable()

    def close(self) -> None:
        """Stop accepting and close the listening socket (connections stay)."""
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        else:
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
