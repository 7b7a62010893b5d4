"""The single storage writer: group commit of journal batches (DESIGN.md, durability).

With a writer thread (`jobgate-writer`, the default for PostgreSQL) one thread owns the storage
connection and commits one closed batch at a time; the event loop keeps reading, parsing and
answering meanwhile, and the next batch gathers every mutation made by every connection while
the previous one commits (psycopg and SQLite release the GIL while they wait on the database).
Without it (the default for SQLite, `database.writer_thread`) the commit runs on the loop after
each iteration: a SQLite commit is CPU work under the GIL, and handing it to a thread measured
slower in every cell (docs/performance.md, issue 14). A reply that must be durable waits until
every mutation made before it has committed: connections hold such replies (gateway/runner.py)
and are called back on the loop after each commit (`on_commit`); `durable()` is the same wait
for a coroutine. `flush()` waits until everything recorded so far is committed (shutdown).

`before_commit` (tests only): a callable run before each batch is written (on the writer
thread when there is one), to make a commit slow or observe it without touching the database.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading

import anyio

from .logs import event

log = logging.getLogger("jobgate.writer")


class Writer:
    """Owns the journal -> store flushing (see the module docstring). `run()` is a task; it
    raises the storage error if a commit fails, which stops the server rather than
    acknowledge something that is not stored (held replies are never sent).

    `persistence`: core.api.Persistence (the journal); `store`: core.api.StorePort.
    `idle_flush_s`: lone history events (no job row pending) are written within this many
    seconds. `thread=False`: commit on the event loop instead (each commit then runs after the
    loop iteration that made the batch; config `database.writer_thread`). The hand-off is a
    queue to the thread and `call_soon_threadsafe` back: no task or future per commit, and the
    next batch starts the moment the previous one is done.
    """

    def __init__(self, persistence, store, thread: bool = True) -> None:
        self.persistence = persistence
        self.thread = thread
        self.store = store
        self._committed = anyio.Event()
        self._failed = anyio.Event()
        self._error: BaseException | None = None
        persistence.set_on_pending(self._on_pending)
        self.batches = 0
        self.idle_flush_s = 1.0
        self.before_commit = None
        self._listeners: set = set()
        self._busy = False          # a batch is on the writer thread
        self._scheduled = False
        self._loop = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = None

    def on_commit(self, fn) -> None:
        """Call `fn()` (on the event loop) after every commit until off_commit(fn)."""
        self._listeners.add(fn)

    def off_commit(self, fn) -> None:
        self._listeners.discard(fn)

    # ------------------------------------------------------------ event loop
    def _on_pending(self) -> None:
        """The journal's open batch got its first record: start a commit once the current
        loop iteration has run (so that everything read in it joins the batch)."""
        if not self._busy and not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._start)

    def _start(self) -> None:
        self._scheduled = False
        p = self.persistence
        if self._busy or self._error is not None or not p.has_unwritten():
            return
        self._busy = True
        batch = p.take()
        if self.thread:
            self._queue.put(batch)
            return
        self._done(batch, self._commit(batch))

    def _commit(self, batch):
        """Write `batch` (the test hook first); returns the exception or None."""
        try:
            hook = self.before_commit
            if hook is not None:
                hook(batch)
            self.store.write(batch)
        except Exception as e:  # handed to _done, which stops the server
            return e
        return None

    def _done(self, batch, error) -> None:
        """On the loop: `batch` was committed (error: its exception, the server stops)."""
        self._busy = False
        if error is not None:
            log.error("storage commit failed; stopping", exc_info=error,
                      extra={"fields": {"batch": batch.number}})
            self._error = error
            self._failed.set()
            return
        p = self.persistence
        p.done(batch)
        self.batches += 1
        ev, self._committed = self._committed, anyio.Event()
        ev.set()
        for fn in list(self._listeners):
            fn()
        if p.pending:      # what was done while this batch committed
            if self.thread:
                self._start()        # goes to the thread now
            else:
                self._on_pending()   # after this loop iteration, as any new batch

    # ---------------------------------------------------------- writer thread
    def _main(self) -> None:
        q = self._queue
        loop = self._loop
        while True:
            batch = q.get()
            if batch is None:
                return
            error = self._commit(batch)
            try:
                loop.call_soon_threadsafe(self._done, batch, error)
            except RuntimeError:   # the loop is closed: the server is gone
                return

    # ------------------------------------------------------------------ task
    async def run(self) -> None:
        """Start the writer thread and flush until cancelled (call flush() first to drain).
        Raises the storage error of a failed commit."""
        self._loop = asyncio.get_running_loop()
        if self.thread:
            self._thread = threading.Thread(target=self._main, name="jobgate-writer",
                                            daemon=True)
            self._thread.start()
        try:
            self._start()
            while True:
                with anyio.move_on_after(self.idle_flush_s):
                    await self._failed.wait()
                if self._error is not None:
                    raise self._error
                self._start()      # lone history events
        finally:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join(30)

    async def durable(self) -> None:
        """Wait until every mutation recorded before this call is committed. Raises the
        storage error when a commit failed."""
        p = self.persistence
        need = p.commit_mark()
        while p.committed < need:
            if self._error is not None:
                raise self._error
            await self._committed.wait()

    async def flush(self) -> None:
        """Wait until the journal is empty and committed (shutdown)."""
        p = self.persistence
        if p.has_unwritten() and not p.pending:
            p.force_pending()
        self._start()
        await self.durable()
        event(log, "flushed", committed=p.committed, batches=self.batches)
