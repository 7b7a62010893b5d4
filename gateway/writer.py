"""The single storage writer: group commit of core.journal batches (DESIGN.md, durability).

While one batch commits on a worker thread, the next one gathers on the event loop. A reply that
must be durable awaits `durable()`: it returns once every mutation made before the call has
committed. `flush()` waits until everything recorded so far is committed (used at shutdown).
"""
from __future__ import annotations

import logging

import anyio
import anyio.to_thread

from .logs import event

log = logging.getLogger("jobgate.writer")


class Writer:
    """Owns the journal -> store flushing loop. `run()` is a task; it raises if a commit fails,
    which stops the server rather than acknowledge something that is not stored."""

    def __init__(self, journal, store, engine) -> None:
        self.journal = journal
        self.store = store
        self.engine = engine
        self._pending = anyio.Event()
        self._committed = anyio.Event()
        journal.on_pending = self._on_pending
        self.batches = 0
        self.idle_flush_s = 1.0
        self.inline = store.is_sqlite

    def _on_pending(self) -> None:
        self._pending.set()

    async def run(self) -> None:
        """Flush batches forever (cancel to stop; call flush() first to drain)."""
        j = self.journal
        while True:
            if not j.pending:
                self._pending = anyio.Event()
                with anyio.move_on_after(self.idle_flush_s):
                    await self._pending.wait()
                if not j.has_unwritten():
                    continue
            batch = j.take(self.engine.next_id)
            try:
                if self.inline:
                    self.store.write(batch)
                else:
                    await anyio.to_thread.run_sync(self.store.write, batch, abandon_on_cancel=False)
            except Exception:
                log.exception("storage commit failed; stopping", extra={"fields": {
                    "batch": batch.number}})
                raise
            j.committed = batch.number
            self.batches += 1
            ev, self._committed = self._committed, anyio.Event()
            ev.set()

    async def durable(self) -> None:
        """Wait until every mutation recorded before this call is committed."""
        j = self.journal
        need = j.open_batch if j.pending else j.open_batch - 1
        while j.committed < need:
            await self._committed.wait()

    async def flush(self) -> None:
        """Wait until the journal is empty and committed (shutdown)."""
        if self.journal.has_unwritten() and not self.journal.pending:
            self.journal.pending = True
            self._pending.set()
        await self.durable()
        event(log, "flushed", committed=self.journal.committed, batches=self.batches)
