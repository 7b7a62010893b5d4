"""The server runtime: builds engine + storage from a Config and runs listeners, the timer task,
the writer and signal handling on one event loop (anyio, uvloop where available).

Signals: SIGUSR1 puts the server in drain mode (puts answer DRAINING); SIGTERM / SIGINT stop
accepting, flush the journal and return (exit status 0).
"""
from __future__ import annotations

import logging
import os
import signal
import socket

import anyio

from core.clock import SystemClock
from core.engine import Engine
from protocols.beanstalk import ServerInfo
from protocols.bunqueue import BunqueueInfo
from protocols.workq import WorkqInfo

from . import beanstalk_conn, bunqueue_conn, workq_conn
from .config import Config
from .logs import event

log = logging.getLogger("jobgate")


async def _no_wait() -> None:
    return None


_SERVE = {"beanstalk": beanstalk_conn.serve, "workq": workq_conn.serve,
          "bunqueue": bunqueue_conn.serve}


class Runtime:
    """One jobgate server process. `await run(ready=callback)` serves until a stop signal.

    `ready(addresses)` (optional) is called once every listener is bound.
    """

    def __init__(self, config: Config, clock=None, version: str = "1.12") -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.store = None
        self.writer = None
        journal = None
        if config.durability != "memory":
            from core.journal import Journal
            from core.storage import Store
            self.store = Store(config.database_url, config.sqlite_synchronous)
            self.store.migrate()
            journal = Journal(self.clock, history=config.history_enabled)
        self.engine = Engine(self.clock, journal)
        self.restored = 0
        if self.store is not None:
            from core.recovery import restore
            self.restored = restore(self.engine, self.store.load())
        self.beanstalk_info = ServerInfo(self.engine, config.beanstalk_max_job_size, version)
        self.workq_info = WorkqInfo(self.engine)
        self.bunqueue_info = BunqueueInfo(self.engine, config.bunqueue_auth_tokens,
                                          config.bunqueue_rate_limit,
                                          self.store.engine.url.database
                                          if self.store is not None and self.store.is_sqlite
                                          else None)
        self.connections = 0   # open client connections, every dialect (limits.max_connections)
        self.durable = _no_wait
        self._stop = None
        self._tick = None
        self.addresses: list[str] = []

    async def _ticker(self) -> None:
        e = self.engine
        clock = self.clock

        def wake():
            self._tick.set()
        e.wakeup = wake
        while True:
            self._tick = anyio.Event()
            e.tick()
            due = e.next_due()
            delay = 3600.0 if due is None else max(0, due - clock.monotonic_ms()) / 1000
            with anyio.move_on_after(delay):
                await self._tick.wait()

    async def _retention(self) -> None:
        """Prune job_events older than history.retention_days: min(60 s, the interval) after
        start, then every history.prune_interval_s seconds (default hourly)."""
        import anyio.to_thread
        days = self.config.history_retention_days
        every = self.config.history_prune_interval_s
        await anyio.sleep(min(60, every))
        while True:
            before = self.clock.wall_ms() - days * 86_400_000
            try:
                n = await anyio.to_thread.run_sync(self.store.prune_events, before)
                event(log, "history pruned", rows=n, retention_days=days)
            except Exception:  # a failed prune must not stop the server; it retries later
                log.exception("history pruning failed")
            await anyio.sleep(every)

    async def _checkpointer(self) -> None:
        """SQLite: a PASSIVE WAL checkpoint every second on a worker thread, so commits on the
        event loop never pay for one (core.storage.Store.checkpoint)."""
        import anyio.to_thread
        while True:
            await anyio.sleep(1.0)
            try:
                await anyio.to_thread.run_sync(self.store.checkpoint)
            except Exception:  # retried in a second; the WAL only grows meanwhile
                log.exception("WAL checkpoint failed")

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGUSR1) as sigs:
            async for s in sigs:
                if s == signal.SIGUSR1:
                    self.engine.draining = True
                    event(log, "drain mode on")
                    continue
                event(log, "stopping", signal=signal.Signals(s).name)
                self._stop.set()
                return

    async def _listen(self, lst):
        if lst.unix:
            try:
                os.unlink(lst.unix)
            except FileNotFoundError:
                pass
            return await anyio.create_unix_listener(lst.unix)
        return await anyio.create_tcp_listener(local_host=lst.host, local_port=lst.port)

    def _handler(self, serve):
        async def handle(stream) -> None:
            try:
                sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except Exception:  # pragma: no cover - best effort
                pass
            await serve(stream, self)
        return handle

    async def run(self, ready=None) -> None:
        """Serve until SIGTERM/SIGINT; then stop accepting, flush storage and return."""
        from .writer import Writer
        self._stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            if self.store is not None:
                self.writer = Writer(self.engine.journal, self.store, self.engine)
                if self.config.durability == "commit":
                    self.durable = self.writer.durable
                tg.start_soon(self.writer.run)
                if self.config.history_retention_days > 0:
                    tg.start_soon(self._retention)
                if self.store.is_sqlite:
                    tg.start_soon(self._checkpointer)
            tg.start_soon(self._ticker)
            tg.start_soon(self._signals)
            listeners = []
            for lst in self.config.listeners:
                listeners.append(await self._listen(lst))
            async with anyio.create_task_group() as serving:
                for lst, l in zip(self.config.listeners, listeners):
                    serving.start_soon(l.serve, self._handler(_SERVE[lst.dialect]))
                    if lst.unix:
                        addr = f"unix:{lst.unix}"
                    else:
                        host, port = l.extra(anyio.abc.SocketAttribute.local_address)[:2]
                        addr = f"{host}:{port}"
                    self.addresses.append(addr)
                    event(log, "listening", dialect=lst.dialect, address=addr)
                if ready is not None:
                    ready(self.addresses)
                await self._stop.wait()
                serving.cancel_scope.cancel()
            if self.writer is not None:
                with anyio.move_on_after(30):
                    await self.writer.flush()
            tg.cancel_scope.cancel()
        if self.store is not None:
            try:
                self.store.checkpoint("TRUNCATE")
            except Exception:  # the data is committed either way; only the WAL stays long
                log.exception("final WAL checkpoint failed")
            self.store.close()
        event(log, "stopped")


def run(config: Config, ready=None, version: str = "1.12") -> Runtime:
    """Build a Runtime for `config` and serve on the best available event loop."""
    rt = Runtime(config, version=version)
    try:
        import uvloop  # noqa: F401
        backend_options = {"use_uvloop": True}
    except ImportError:  # pragma: no cover - platform without uvloop
        backend_options = {}
    anyio.run(rt.run, ready, backend="asyncio", backend_options=backend_options)
    return rt
