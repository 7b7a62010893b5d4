"""The single storage writer: group commit of journal batches (DESIGN.md, durability).

While one batch commits, the next one gathers on the event loop. A reply that must be durable
waits until every mutation made before it has committed: connections hold such replies
(gateway/runner.py) and are called back after each commit (`on_commit`); `durable()` is the
same wait for a coroutine. `flush()` waits until everything recorded so far is committed (used
at shutdown).
"""
from __future__ import annotations

import logging

import anyio
import anyio.to_thread

from .logs import event

log = logging.getLogger("jobgate.writer")


class Writer:
    """Owns the journal -> store flushing loop. `run()` is a task; it raises if a commit fails,
    which stops the server rather than acknowledge something that is not stored.

    `persistence`: core.api.Persistence (the journal); `store`: core.api.StorePort.
    """

    def __init__(self, persistence, store) -> None:
        self.persistence = persistence
        self.store = store
        self._pending = anyio.Event()
        self._committed = anyio.Event()
        persistence.set_on_pending(self._on_pending)
        self.batches = 0
        self.idle_flush_s = 1.0
        self.inline = store.is_sqlite
        self._listeners: set = set()

    def _on_pending(self) -> None:
        self._pending.set()

    def on_commit(self, fn) -> None:
        """Call `fn()` after every commit until off_commit(fn)."""
        self._listeners.add(fn)

    def off_commit(self, fn) -> None:
        self._listeners.discard(fn)

    async def run(self) -> None:
        """Flush batches forever (cancel to stop; call flush() first to drain)."""
        p = self.persistence
        while True:
            if not p.pending:
                self._pending = anyio.Event()
                with anyio.move_on_after(self.idle_flush_s):
                    await self._pending.wait()
                if not p.has_unwritten():
                    continue
            batch = p.take()
            try:
                if self.inline:
                    self.store.write(batch)
                else:
                    await anyio.to_thread.run_sync(self.store.write, batch, abandon_on_cancel=False)
            except Exception:
                log.exception("storage commit failed; stopping", extra={"fields": {
                    "batch": batch.number}})
                raise
            p.done(batch)
            self.batches += 1
            ev, self._committed = self._committed, anyio.Event()
            ev.set()
            for fn in list(self._listeners):
                fn()

    async def durable(self) -> None:
        """Wait until every mutation recorded before this call is committed."""
        p = self.persistence
        need = p.commit_mark()
        while p.committed < need:
            await self._committed.wait()

    async def flush(self) -> None:
        """Wait until the journal is empty and committed (shutdown)."""
        p = self.persistence
        if p.has_unwritten() and not p.pending:
            p.force_pending()
            self._pending.set()
        await self.durable()
        event(log, "flushed", committed=p.committed, batches=self.batches)
