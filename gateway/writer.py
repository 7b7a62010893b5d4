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

Storage faults are survived (issue 15): a failed commit is retried on a fresh connection at
once, then with backoff (RETRY_DELAYS_S) for as long as it takes; the batch and every reply
waiting for it stay held meanwhile, so nothing is acknowledged before it is stored and no reply
is sent twice. A retry first resolves a commit whose outcome is unknown (core/storage.py,
`write(verify=True)`). When the retry at once fails too, storage is declared unavailable
(`Port.set_storage_state`): sessions answer commands that need a commit with their dialect's
server error until a commit succeeds again. Each change is logged once. Only a failure that
retrying cannot cure stops the server: another server took the database's lock (StoreLocked),
or an error that is not the database's (a bug).

`before_commit` (tests only): a callable run before each batch is written (on the writer
thread when there is one), to make a commit slow or observe it without touching the database.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time

import anyio

from core.api import StoreLocked

from .logs import event
from .metrics import BATCH_ROWS, COMMIT_SECONDS, Buckets

log = logging.getLogger("jobgate.writer")

#: Seconds before each retry of a failed commit: the first at once (a terminated connection is
#: replaced without anyone noticing), then doubling up to 2 s for as long as storage fails.
RETRY_DELAYS_S = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0)

#: Payload bytes from which a batch is committed on a worker thread even when commits run on
#: the loop (`thread=False`): a few MiB of SQLite writes take tens of ms (issue 15: a big frame
#: must not stall the loop).
BIG_BATCH = 1 << 20
#: ... or from this many job and history rows (a 10,000-job PUSHB is 20,000 rows: ~40 ms of
#: SQLite work on the loop).
BIG_BATCH_ROWS = 2000


def _big(batch) -> bool:
    """True for a batch worth a worker thread when commits run on the loop."""
    return (batch.payload_bytes >= BIG_BATCH
            or len(batch.inserts) + len(batch.inserts_full) + len(batch.moves)
            + len(batch.events) >= BIG_BATCH_ROWS)


def batch_rows(batch) -> int:
    """Rows a batch writes: job rows inserted, updated or deleted plus job_events rows (the
    jobgate_commit_batch_size of docs/metrics.md)."""
    return (len(batch.inserts) + len(batch.inserts_full) + len(batch.moves)
            + len(batch.reservations) + len(batch.results) + len(batch.deletes)
            + len(batch.events))


def _retryable(error: BaseException) -> bool:
    """A database or OS error (connection lost, disk full, failover, timeout) is retried; a
    lost database lock or any other exception (a bug) is not."""
    if isinstance(error, StoreLocked):
        return False
    if isinstance(error, OSError):
        return True
    try:
        import sqlalchemy.exc
    except ImportError:  # pragma: no cover - a store without SQLAlchemy
        return False
    return isinstance(error, sqlalchemy.exc.SQLAlchemyError)


def _cause(error: BaseException) -> str:
    """One line naming a storage failure (the driver's first line)."""
    orig = getattr(error, "orig", None) or error
    text = str(orig).strip().splitlines()
    return f"{orig.__class__.__name__}: {text[0] if text else ''}".strip()


class Writer:
    """Owns the journal -> store flushing (see the module docstring). `run()` is a task; it
    raises only an error that retrying cannot cure (StoreLocked, a bug), which stops the server
    rather than acknowledge something that is not stored (held replies are never sent).
    `port` (core.api.Port, optional): told when storage becomes unavailable and available.

    `persistence`: core.api.Persistence (the journal); `store`: core.api.StorePort.
    `idle_flush_s`: lone history events (no job row pending) are written within this many
    seconds. `thread=False`: commit on the event loop instead (each commit then runs after the
    loop iteration that made the batch; config `database.writer_thread`). The hand-off is a
    queue to the thread and `call_soon_threadsafe` back: no task or future per commit, and the
    next batch starts the moment the previous one is done.
    """

    def __init__(self, persistence, store, thread: bool = True, port=None) -> None:
        self.persistence = persistence
        self.port = port
        self.failures = 0           # consecutive failed attempts of the current batch
        self.outages = 0
        self._down_since = None     # monotonic s when storage became unavailable
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
        #: histograms of committed batches (gateway/metrics.py; read by /metrics): rows per
        #: batch, and seconds the successful write took (store.write, on whichever thread)
        self.batch_rows = Buckets(BATCH_ROWS)
        self.commit_seconds = Buckets(COMMIT_SECONDS)
        self._took = 0.0    # s of the last write (one batch at a time: no race)

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
        self._dispatch(p.take(), False)

    def _dispatch(self, batch, verify: bool) -> None:
        """Commit `batch` where commits run: the writer thread, a worker thread for a big
        batch, or here on the loop (`verify`: a retry, see _commit)."""
        if self.thread:
            self._queue.put((batch, verify))
        elif _big(batch):
            self._off_loop(batch, verify)
        else:
            self._done(batch, self._commit(batch, verify))

    def _off_loop(self, batch, verify: bool) -> None:
        """Commit a big batch on a worker thread although commits run on the loop: writing
        megabytes of payload (a 64 MiB bunqueue job) would stall every connection (issue
        15); the loop serves meanwhile and `_done` runs on it afterwards."""
        fut = self._loop.run_in_executor(None, self._commit, batch, verify)
        fut.add_done_callback(lambda f: f.cancelled() or self._done(batch, f.result()))

    def _retry(self, batch) -> None:
        """On the loop: try `batch` again (fresh connection, outcome verified first)."""
        if self._error is None:
            self._dispatch(batch, True)

    def _failed_attempt(self, batch, error) -> None:
        """On the loop: a commit of `batch` failed; schedule its retry, or stop the server
        when retrying cannot help. The batch stays taken (`_busy`), so new mutations gather
        in the next one and every held reply keeps waiting."""
        if not _retryable(error):
            self._busy = False
            log.error("storage commit failed; stopping", exc_info=error,
                      extra={"fields": {"batch": batch.number}})
            self._error = error
            self._failed.set()
            return
        self.failures += 1
        n = self.failures
        if n >= 2 and self._down_since is None:
            self._down_since = time.monotonic()
            self.outages += 1
            cause = _cause(error)
            log.error("storage unavailable; retrying, commands that need a commit are refused",
                      extra={"fields": {"cause": cause, "batch": batch.number}})
            if self.port is not None:
                self.port.set_storage_state(cause)
        else:
            log.debug("storage commit attempt %d failed: %s", n, _cause(error))
        delay = RETRY_DELAYS_S[min(n - 1, len(RETRY_DELAYS_S) - 1)]
        self._loop.call_later(delay, self._retry, batch)

    def _commit(self, batch, verify: bool = False):
        """Write `batch` (the test hook first); returns the exception or None. `verify`: a
        retry, which first resolves an unknown outcome (core/storage.py)."""
        try:
            hook = self.before_commit
            if hook is not None:
                hook(batch)
            t0 = time.perf_counter()
            if verify:
                self.store.write(batch, verify=True)
            else:
                self.store.write(batch)
            self._took = time.perf_counter() - t0
        except Exception as e:  # handed to _done: retried, or the server stops
            return e
        return None

    def _done(self, batch, error) -> None:
        """On the loop: `batch` was committed (error: its exception; retried)."""
        if error is not None:
            self._failed_attempt(batch, error)
            return
        self._busy = False
        if self.failures:
            if self._down_since is not None:
                event(log, "storage available again", logging.WARNING, batch=batch.number,
                      attempts=self.failures + 1,
                      down_ms=round((time.monotonic() - self._down_since) * 1000))
                self._down_since = None
                if self.port is not None:
                    self.port.set_storage_state(None)
            self.failures = 0
        p = self.persistence
        p.done(batch)
        self.batches += 1
        self.batch_rows.observe(batch_rows(batch))
        self.commit_seconds.observe(self._took)
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
            item = q.get()
            if item is None:
                return
            batch, verify = item
            error = self._commit(batch, verify)
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

    @property
    def settled(self) -> bool:
        """True when everything recorded so far is committed (nothing taken or waiting)."""
        return not self._busy and not self.persistence.has_unwritten()

    @property
    def available(self) -> bool:
        """False while storage is unavailable (commits failing, retried)."""
        return self._down_since is None

    async def durable(self) -> None:
        """Wait until every mutation recorded before this call is committed (through any
        outage). Raises the error that stopped the writer, if one did."""
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
