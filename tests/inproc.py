"""A real jobgate server inside the test process, on a manual clock.

`InProcServer` runs gateway.server.Runtime on its own thread and event loop (uvloop, as in
production), with a core.api.ManualClock: real sockets on 127.0.0.1, a real SQLite file (or
PostgreSQL), the real dialects and connection runner. Time moves only when the test calls
`advance(ms)`, which moves the clock and runs every due timer on the server's thread before it
returns: tests of TTRs, locks, TTLs and delays need no sleep and cannot be flaky about timing.

`call(fn)` runs `fn()` on the server's thread and returns its result (to read the engine port,
which is single-threaded). Every server is stopped by `stop()` (fixtures do it).
"""
from __future__ import annotations

import concurrent.futures
import threading
import time

import anyio

from core.api import ManualClock
from gateway.config import Config, Listener
from gateway.server import Runtime


class InProcServer:
    """See the module docstring. `dialects`: the listeners to bind (port 0: free ports, read
    them from `ports[dialect]`); `url`: database URL (None: durability memory); `config`:
    extra Config attributes; `uvloop=False`: the standard asyncio loop (production takes uvloop
    when it is installed, the standard loop otherwise: both are tested); `wall_start_ms`: the clock's wall reading at start (default: now,
    so ids and timestamps look like today's)."""

    def __init__(self, url: str | None, dialects=("beanstalk", "workq", "bunqueue"),
                 wall_start_ms: int | None = None, uvloop: bool = True, **config) -> None:
        self.clock = ManualClock(int(time.time() * 1000) if wall_start_ms is None
                                 else wall_start_ms)
        cfg = Config()
        cfg.listeners = [Listener(d, "127.0.0.1", 0) for d in dialects]
        if url is None:
            cfg.durability = "memory"
        else:
            cfg.database_url = url
        cfg.log_level = "warning"
        for k, v in config.items():
            if k in cfg.options:
                cfg.options[k].update(v)
            else:
                setattr(cfg, k, v)
        self.runtime = Runtime(cfg, clock=self.clock)
        self.uvloop = uvloop
        self.port = self.runtime.port
        self.ports: dict = {}
        self._loop = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="jobgate-inproc", daemon=True)
        self._thread.start()
        if not self._ready.wait(15):
            raise RuntimeError("in-process server did not start")
        if self._error is not None:
            raise self._error
        for lst, addr in zip(cfg.listeners, self.runtime.addresses):
            self.ports[lst.dialect] = int(addr.rsplit(":", 1)[1])

    def _main(self) -> None:
        def ready(addresses):
            import asyncio
            self._loop = asyncio.get_running_loop()
            self._ready.set()
        try:
            anyio.run(self.runtime.run, ready, False, backend="asyncio",
                      backend_options={"use_uvloop": self.uvloop})
        except BaseException as e:  # pragma: no cover - surfaced by the constructor / stop
            self._error = e
            self._ready.set()

    def call(self, fn, timeout: float = 10.0):
        """Run `fn()` on the server's thread; returns its result (re-raises its error)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run():
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)
        self._loop.call_soon_threadsafe(run)
        return fut.result(timeout)

    def advance(self, ms: int) -> None:
        """Move the clock `ms` ms forward and run every timer due by then, on the server's
        thread; returns once they ran (the replies they cause are then on their way)."""
        def step():
            self.clock.advance(ms)
            self.port.tick()
            self.runtime.wake()
        self.call(step)

    def stop(self) -> None:
        """Stop serving (end connections, flush storage) and join the thread."""
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.runtime.stop)
        self._thread.join(30)
        if self._error is not None:
            raise self._error
