"""The single storage writer: group commit of journal batches on its own thread (DESIGN.md,
durability).

One thread (`jobgate-writer`) owns the storage connection and commits one closed batch at a
time; the event loop keeps reading, parsing and answering meanwhile, and the next batch
gathers every mutation made by every connection while the previous one commits (SQLite and
psycopg release the GIL while they wait on the database). A reply that must be durable waits
until every mutation made before it has committed: connections hold such replies
(gateway/runner.py) and are called back on the loop after each commit (`on_commit`);
`durable()` is the same wait for a coroutine. `flush()` waits until everything recorded so far
is committed (used at shutdown).

`before_commit` (tests only): a callable run on the writer thread before each batch is written,
to make a commit slow or observe it without touching the database.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

import anyio

from .logs import event

log = logging.getLogger("jobgate.writer")


class Writer:
    """Owns the journal -> store flushing loop. `run()` is a task; it raises if a commit fails,
    which stops the server rather than acknowledge something that is not stored.

    `persistence`: core.api.Persistence (the journal); `store`: core.api.StorePort.
    `idle_flush_s`: lone history events (no job row pending) are written within this many
    seconds.
    """

    def __init__(self, persistence, store) -> None:
        self.persistence = persistence
        self.store = store
        self._pending = anyio.Event()
        self._committed = anyio.Event()
        persistence.set_on_pending(self._on_pending)
        self.batches = 0
        self.idle_flush_s = 1.0
        self.before_commit = None
        self._listeners: set = set()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="jobgate-writer")

    def _on_pending(self) -> None:
        self._pending.set()

    def on_commit(self, fn) -> None:
        """Call `fn()` (on the event loop) after every commit until off_commit(fn)."""
        self._listeners.add(fn)

    def off_commit(self, fn) -> None:
        self._listeners.discard(fn)

    def _write(self, batch) -> None:
        """On the writer thread: one batch, one transaction."""
        hook = self.before_commit
        if hook is not None:
            hook(batch)
        self.store.write(batch)

    async def run(self) -> None:
        """Flush batches forever (cancel to stop; call flush() first to drain)."""
        p = self.persistence
        try:
            while True:
                if not p.pending:
                    self._pending = anyio.Event()
                    with anyio.move_on_after(self.idle_flush_s):
                        await self._pending.wait()
                    if not p.has_unwritten():
                        continue
                batch = p.take()
                # the commit is not abandoned half-way when the server stops: wait for it
                with anyio.CancelScope(shield=True):
                    try:
                        await asyncio.wrap_future(self._thread.submit(self._write, batch))
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
        finally:
            self._thread.shutdown(wait=True)

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
