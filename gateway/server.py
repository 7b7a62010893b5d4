"""The server runtime: builds the engine port and storage from a Config and runs the listeners,
the timer task, the writer and signal handling on one event loop (anyio orchestrates, uvloop
where available; connections are gateway.runner.Runner protocols).

Start: the command-line entry points bind the listening sockets first (gateway/listen.py), so a
client may connect at once; then the store is locked (one server per database:
core.api.StoreLocked), migrated when its schema is not current (migrations.upgrade_if_needed:
one version read otherwise), every stored job is loaded, and only then are connections
accepted (the early ones waited in the kernel's backlog; their commands are answered now).
Without pre-bound sockets each configured listener is bound here.

Limits (gateway/limits.py, gateway/accept.py): the soft open-files limit is raised to the hard
one and max_connections capped below it; listeners accept through gateway.accept.Acceptor
(resource errors back off, never fatal); one sweep task closes idle, half-sent and
unauthenticated connections.

Signals: SIGUSR1 puts the server in drain mode (puts answer DRAINING); SIGTERM / SIGINT stop
accepting, end the connections, flush the journal and return (exit status 0).

Service manager: `run()` speaks systemd's notification protocol when `$NOTIFY_SOCKET` is set
(gateway/notify.py): READY=1 once recovery is done and every listener accepts, WATCHDOG=1 from
the event loop when asked, STOPPING=1 when it stops. In-process servers (Runtime without run())
send nothing.
"""
from __future__ import annotations

import asyncio
import logging
import signal

import anyio

from core.api import Port, StoreLocked, SystemClock
from protocols.contract import Context

from . import registry
from .config import Config
from .logs import event
from .runner import Runner

log = logging.getLogger("jobgate")


#: Allocations between two young-generation collections (CPython's default is 700). A
#: 10,000-job PUSHB allocates a few hundred thousand objects; at the default the collections it
#: triggers, older generations included, stalled the loop for 60-140 ms (docs/performance.md,
#: "Loop stalls", issue 15); at this value the worst ping stayed under 40 ms.
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Fewer cyclic-GC passes on the event loop, and none over what recovery loaded: the
    restored jobs move to the permanent generation (gc.freeze; they are still freed by
    reference counting when deleted). Process-wide: `run()` calls it once the store is
    recovered."""
    import gc
    gc.collect()
    gc.freeze()
    _, g1, g2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, g1, g2)


class Runtime:
    """One jobgate server process. `await run(ready=callback)` serves until a stop signal.

    `ready(addresses)` (optional) is called once every listener is bound. `port`: the engine
    port; `states`: dialect name -> its server-wide state; `connections`: open client
    connections, every dialect, at most `max_connections` (limits.max_connections capped by the
    open-files limit: gateway/limits.py); `limits`: the timeouts and the buffer budget. Raises
    core.api.StoreLocked when another server holds the database,
    gateway.startup.StartupError when the database cannot be reached or used (its `status` is
    the exit status).
    """

    def __init__(self, config: Config, clock=None, version: str = "1.12",
                 sockets=None) -> None:
        self.config = config
        self.sockets = sockets
        self.clock = clock or SystemClock()
        self.store = None
        self.writer = None
        db_path = None
        if config.durability != "memory":
            from .startup import open_database   # checked, locked, migrated (StartupError)
            self.store = open_database(config.database_url, config.sqlite_synchronous,
                                       mode=config.database_mode,
                                       idle_in_transaction_ms=config.idle_in_transaction_ms)
            if self.store.is_sqlite:
                import sqlalchemy as sa
                db_path = sa.make_url(config.database_url).database
        self.port = Port.create(self.clock, durable=self.store is not None,
                                history=config.history_enabled)
        self.restored = 0
        self.shared = None   # gateway.shared.SharedLink on a node in shared mode
        if config.database_mode == "shared" and self.store is not None:
            from .shared import SharedLink
            self.shared = SharedLink(self.port, self.store, config.poll_interval_ms, self.clock,
                                     config.flow_sweep_ms)
        self.port.set_webhook_allow(config.webhook_allow)
        if self.store is not None:
            self.restored = self.port.restore(self.store)
            self.port.restore_webhooks(self.store)
        from .webhooks import Delivery
        self.webhooks = Delivery(self.port, config)   # started by run() (gateway/webhooks.py)
        from .access import build_access, prepare
        prepare(config)   # done by the CLI already; here for servers built in-process
        self.access = build_access(config)   # None: no access control (the default)
        context = Context(version, db_path, self.access)
        self.states = {name: reg.make_state(self.port, config.options[name], context)
                       for name, reg in registry.DIALECTS.items()}
        # a reply that must be durable waits for the commit (durability: commit)
        self.durable_replies = config.durability == "commit"
        self.connections = 0
        self.live: set = set()
        # per dialect: open connections and accepted since start (gateway/runner.py; the
        # self-serving http listener counts its own: `served`)
        self.conn_open: dict = {}
        self.conn_total: dict = {}
        self.served: list = []   # (dialect, server) of the self-serving listeners
        from .metrics import FeedMetrics
        self.feed_metrics = FeedMetrics()   # the feed's counters for /metrics (docs/metrics.md)
        # counted only when /metrics can be scraped (an http listener): in memory mode the
        # sink alone would turn the event feed on (+4 µs per put/reserve/delete in-process)
        if any(lst.dialect == "http" for lst in config.listeners):
            self.port.observe(self.feed_metrics.record)
        self._exporter = None
        from .limits import Limits, connection_cap, raise_nofile
        self.nofile = raise_nofile()
        self.max_connections = connection_cap(config.max_connections, self.nofile[0])
        self.limits = Limits(self)
        self.refused = 0          # connections refused in the current over-limit episode
        self._stop = None
        self._tick = None
        self.addresses: list[str] = []
        self.lost_lock = None   # StoreLocked when another server took the database
        self.notifier = None    # gateway.notify.Notifier, set by run(): the service manager

    async def _ticker(self) -> None:
        p = self.port
        clock = self.clock

        def wake():
            self._tick.set()
        p.set_wakeup(wake)
        while True:
            self._tick = anyio.Event()
            p.tick()
            due = p.next_due()
            delay = 3600.0 if due is None else max(0, due - clock.monotonic_ms()) / 1000
            with anyio.move_on_after(delay):
                await self._tick.wait()

    def wake(self) -> None:
        """Run the timers now (the clock was moved: tests with a ManualClock)."""
        if self._tick is not None:
            self._tick.set()

    async def _retention(self) -> None:
        """Prune job_events older than history.retention_days: min(60 s, the interval) after
        start, then every history.prune_interval_s seconds (default hourly); in shared mode
        only while this node leads."""
        import anyio.to_thread
        days = self.config.history_retention_days
        every = self.config.history_prune_interval_s
        await anyio.sleep(min(60, every))
        while True:
            if self.shared is not None and not self.shared.leader:
                await anyio.sleep(every)   # shared mode: the leader prunes (docs/scaling.md)
                continue
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
        failing = False
        while True:
            await anyio.sleep(1.0)
            try:
                await anyio.to_thread.run_sync(self.store.checkpoint)
                failing = False
            except Exception as e:  # retried in a second; the WAL only grows meanwhile
                if not failing:      # logged once per episode (a full disk: every second)
                    log.error("WAL checkpoint failed; retrying every second",
                              extra={"fields": {"cause": str(e).splitlines()[0]}})
                failing = True

    async def _lock_keeper(self) -> None:
        """PostgreSQL: every second check that the session holding the database's advisory lock
        is alive and take the lock again when it was lost (a terminated backend, a failover,
        idle_session_timeout: the query also keeps the session from idling out). Another
        server holding it by then stops this one (StoreLocked), as at start."""
        import anyio.to_thread
        while True:
            await anyio.sleep(1.0)
            try:
                await anyio.to_thread.run_sync(self.store.ensure_lock)
            except StoreLocked as e:
                log.error("lost the database's lock to another server; stopping",
                          extra={"fields": {"cause": str(e)}})
                self.lost_lock = e
                self.stop()
                return
            except Exception:  # unreachable now: the writer's retries report the outage
                log.debug("lock check failed", exc_info=True)

    async def _signals(self) -> None:
        from .listen import stop_requested
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGUSR1) as sigs:
            early = stop_requested()
            if early is not None:    # caught during start-up (gateway/listen.py)
                event(log, "stopping", signal=signal.Signals(early).name)
                self._stop.set()
                return
            async for s in sigs:
                if s == signal.SIGUSR1:
                    self.port.set_draining(True)
                    event(log, "drain mode on")
                    if self.notifier is not None:
                        self.notifier.status("draining: puts answer DRAINING")
                    continue
                event(log, "stopping", signal=signal.Signals(s).name)
                self._stop.set()
                return

    def refusing(self, on: bool) -> None:
        """A connection was refused at max_connections (`on`), or accepted again after some
        were: logged once per episode, not per connection."""
        if on:
            if not self.refused:
                event(log, "connection limit reached: refusing connections",
                      level=logging.WARNING, max_connections=self.max_connections)
            self.refused += 1
        else:
            event(log, "accepting connections again", refused=self.refused)
            self.refused = 0

    async def _listen(self, lst, sock=None):
        """Serve listener `lst` on `sock` (bound beforehand: gateway/listen.py), or bind it
        now. Returns (gateway.accept.Acceptor, "host:port" or "unix:/path")."""
        from .accept import Acceptor
        loop = asyncio.get_running_loop()
        reg = registry.get(lst.dialect)
        state = self.states[lst.dialect]

        def factory():
            return Runner(self, reg, state, lst)
        if sock is None:
            from .listen import bind_one
            sock = bind_one(lst.host, lst.port, lst.unix)
        if lst.unix:
            addr = f"unix:{lst.unix}"
        else:
            host, port = sock.getsockname()[:2]
            addr = f"{host}:{port}"
        if reg.serve is not None:   # a listener serving its own connections (contract.py)
            from protocols.contract import ServeHooks
            hooks = ServeHooks(self.wait_durable, lst.ssl_context, addr, self.metrics_text)
            srv = await reg.serve(state, sock, hooks)
            self.served.append((lst.dialect, srv))
            return srv, addr
        # a TLS handshake gets the dialect's half-sent timeout (the command has not even begun)
        hs = self.config.options.get(lst.dialect, {}).get("half_sent_timeout_s") or None
        return Acceptor(loop, sock, factory, f"{lst.dialect} {addr}", ssl=lst.ssl_context,
                        handshake_timeout=hs), addr

    async def wait_durable(self) -> None:
        """Return once every mutation made so far is committed (durability `commit` with
        storage; at once otherwise): what a self-serving listener awaits before answering
        a mutation (protocols/contract.py ServeHooks)."""
        if not self.durable_replies or self.writer is None:
            return
        port = self.port
        need = port.commit_mark()
        if need <= port.committed():
            return
        done = asyncio.Event()

        def check():
            if port.committed() >= need:
                done.set()
        self.writer.on_commit(check)
        try:
            await done.wait()
        finally:
            self.writer.off_commit(check)

    async def metrics_text(self) -> tuple:
        """The Prometheus exposition of this server: (body bytes, content type); what `GET
        /metrics` answers (gateway/metrics_export.py, docs/metrics.md; in shared mode the job
        counts are read from the database first). prometheus_client is imported on the first
        scrape."""
        if self._exporter is None:
            from .metrics_export import Exporter
            self._exporter = Exporter(self)
        return await self._exporter.scrape()

    def stop(self) -> None:
        """Stop serving (what SIGTERM does); callable from the event loop's thread."""
        if self._stop is not None:
            self._stop.set()

    async def run(self, ready=None, signals: bool = True) -> None:
        """Serve until SIGTERM/SIGINT (or stop()); then stop accepting, end the connections,
        flush storage and return. `signals=False`: no signal handlers (a server on a thread)."""
        from .writer import Writer
        self._stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            if self.store is not None:
                wt = self.config.writer_thread
                self.writer = Writer(self.port.persistence, self.store,
                                     thread=wt == "on" or (wt == "auto"
                                                           and not self.store.is_sqlite),
                                     port=self.port)
                tg.start_soon(self.writer.run)
                if self.shared is not None:
                    tg.start_soon(self.shared.run)
                if self.config.history_retention_days > 0:
                    tg.start_soon(self._retention)
                if self.store.is_sqlite:
                    tg.start_soon(self._checkpointer)
                else:
                    tg.start_soon(self._lock_keeper)
            tg.start_soon(self._ticker)
            tg.start_soon(self.limits.run)
            self.webhooks.start()
            if signals:
                tg.start_soon(self._signals)
            servers = []
            try:
                socks = self.sockets or [None] * len(self.config.listeners)
                for lst, sock in zip(self.config.listeners, socks):
                    srv, addr = await self._listen(lst, sock)
                    servers.append(srv)
                    self.addresses.append(addr)
                    event(log, "listening", dialect=lst.dialect, address=addr,
                          tls=lst.ssl_context is not None)
                if ready is not None:
                    ready(self.addresses)
                if self.notifier is not None:   # recovered (__init__) and accepting: ready
                    where = ", ".join(f"{lst.dialect} {a}"
                                      for lst, a in zip(self.config.listeners, self.addresses))
                    self.notifier.ready(f"serving {where}; {self.restored} jobs recovered")
                    tg.start_soon(self.notifier.watchdog)
                await self._stop.wait()
            finally:
                if self.notifier is not None:
                    self.notifier.stopping("stopping: ending connections, flushing storage")
                for srv in servers:
                    if hasattr(srv, "aclose"):   # a self-serving listener (contract.py)
                        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                            await srv.aclose()
                    else:
                        srv.close()
                for conn in list(self.live):
                    conn.shutdown()
                self.webhooks.stop()
            if self.writer is not None and self.lost_lock is None:
                with anyio.move_on_after(30):
                    await self.writer.flush()
                if self.shared is not None:   # flow notes of the last changes, then their
                    await self.shared.settle()   # parents' changes (docs/scaling.md)
                    with anyio.move_on_after(30):
                        await self.writer.flush()
                if not self.writer.settled:
                    # storage stayed unavailable: these mutations were never acknowledged
                    log.error("stopping while storage is unavailable: the last uncommitted "
                              "mutations (never acknowledged to a client) are not stored",
                              extra={"fields": {"cause": self.port.storage_down}})
            tg.cancel_scope.cancel()
        if self.shared is not None:
            self.shared.join()   # its last statement commits before the rows are given back
        if self.store is not None:
            try:
                self.store.checkpoint("TRUNCATE")
            except Exception:  # the data is committed either way; only the WAL stays long
                log.exception("final WAL checkpoint failed")
            self.store.close()
        event(log, "stopped")
        if self.lost_lock is not None:
            raise self.lost_lock


def run(config: Config, ready=None, version: str = "1.12", sockets=None) -> Runtime:
    """Build a Runtime for `config` and serve on the best available event loop (uvloop when
    installed). `sockets`: listening sockets bound beforehand, one per `config.listeners`
    (gateway/listen.py), so that clients could connect during recovery. Raises
    core.api.StoreLocked when another server holds the database, gateway.startup.StartupError
    when the database cannot be reached or used. With `$NOTIFY_SOCKET` set it tells systemd
    (gateway/notify.py): STATUS while recovering, READY=1 once serving, WATCHDOG=1 when asked,
    STOPPING=1 when stopping."""
    from .notify import Notifier
    notifier = Notifier.from_env()
    notifier.status("recovering: opening the database, loading the stored jobs")
    try:
        rt = Runtime(config, version=version, sockets=sockets)
    except BaseException:
        notifier.close()
        raise
    rt.notifier = notifier
    tune_gc()    # the server process only (in-process test servers keep the defaults)
    try:
        import uvloop  # noqa: F401 (anyio uses it)
        backend_options = {"use_uvloop": True}
    except ImportError:  # pragma: no cover - platform without uvloop
        backend_options = {}
    try:
        anyio.run(rt.run, ready, backend="asyncio", backend_options=backend_options)
    finally:
        notifier.close()
    return rt
