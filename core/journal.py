"""The mutation journal: what the single writer flushes to storage in batches (group commit).

The journal is the first sink of the engine's event feed (core/events.py): every transition
reaches `on_events()`, which appends its history rows and marks the job dirty. `take()` closes
the open batch into a `Batch` of the storage port's named operations (core/storage.py; row
snapshots made on the event-loop thread, so the writer thread never reads live objects) and
opens the next. `committed` is the number of the last batch whose transaction committed; a
reply that must be durable waits until `committed >= commit_mark()` as it was when the reply
was produced (see gateway/writer.py).

Coalescing: a job touched several times in one batch is written once with its final state; a job
created and deleted within one batch is never written to the jobs table (its events still are).
Which operation writes a job's row follows from its final state: deleted -> delete_jobs; not yet
stored -> insert_jobs; reserved with a lease kept across restarts (core/leases.py) ->
record_reservations; finished (a result) -> record_results; otherwise -> move_states.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import msgpack

from .leases import token_str
from .model import DELAYED, DELETED, RESERVED, TOKEN_REQUIRED

_pack_extras = msgpack.Packer(use_bin_type=True).pack


def dedup_text(key) -> str | None:
    """The `jobs.dedup_key` text of dedup key `key` (a bunqueue uniqueKey, migration 0011): a
    str as is (unless it starts with "#"), None as None, any other value as "#" and the hex of
    its MessagePack (5 and "5" are two keys in memory, so they are two here)."""
    if key is None or (key.__class__ is str and not key.startswith("#")):
        return key
    return "#" + _pack_extras(key).hex()


def _text(error) -> str | None:
    """A failure's text for the history (its first 1000 bytes), or None when empty."""
    if not error:
        return None
    if error.__class__ is str:
        error = error.encode("utf-8", "replace")
    return error[:1000].decode("utf-8", "replace")


@dataclass
class Batch:
    """One group commit: the rows of each named storage operation (core/storage.py), tuples
    in the column orders of core.schema.

    number: batch sequence number (1, 2, ...); queues: (name, created_ms) of queues first used;
    inserts: new job rows with zero counters (JOB_NEW_COLUMNS); inserts_full: new job rows with
    counters, a result or a lease (JOB_INSERT_COLUMNS); moves: JOB_UPDATE_COLUMNS + id;
    reservations: JOB_UPDATE_COLUMNS + LEASE_COLUMNS + id; results: JOB_UPDATE_COLUMNS +
    RESULT_COLUMNS + id; payloads: (payload, payload_fmt, id) rows of payloads replaced in place;
    deletes: job ids (ints); events: job_events rows (EVENT_COLUMNS); next_id: the next job id to
    hand out (stored in jobgate_meta); payload_bytes: bytes of the payloads written (inserted or
    replaced), so the writer can tell a big commit from a usual one; records: (table, key, row
    dict | None) of the keyed record tables (core.schema.RECORD_TABLES: cron schedules, queue
    settings, webhooks), the last change per key: a row replaces the stored one, None deletes.
    """

    number: int
    queues: list = field(default_factory=list)
    inserts: list = field(default_factory=list)
    inserts_full: list = field(default_factory=list)
    moves: list = field(default_factory=list)
    reservations: list = field(default_factory=list)
    results: list = field(default_factory=list)
    payloads: list = field(default_factory=list)
    deletes: list = field(default_factory=list)
    events: list = field(default_factory=list)
    next_id: int = 0
    payload_bytes: int = 0
    records: list = field(default_factory=list)
    leases: tuple = ((), ())   # shared mode: (ids, wall ms deadlines) of reserved rows written

    @property
    def updates(self) -> list:
        """Every job row updated in place (moves, reservations and results)."""
        return self.moves + self.reservations + self.results


class Journal:
    """Collects mutations for the writer. Not thread-safe: used only on the event-loop thread.

    `on_pending` (callable or None) is called when the open batch receives its first record.
    `history=False` skips the job_events rows.
    """

    def __init__(self, clock, history: bool = True) -> None:
        self.clock = clock
        self.history = history
        self.dirty: dict[int, object] = {}
        self.events: list = []
        self.pending = False
        self.open_batch = 1
        self.committed = 0
        self.on_pending = None
        self.records = 0
        self.known_queues: set[str] = set()
        self.new_queues: list = []
        self.payload_changed: set[int] = set()
        self.keyed: dict = {}
        self.specs: dict = {}   # (table, key) -> (key column, int): put_int, packed at take

    def put_record(self, table: str, key: str, row: dict | None) -> None:
        """Store (`row`, a dict of the table's columns, key included) or delete (None) the
        record `key` of keyed table `table` (core.schema.RECORD_TABLES) with the next commit,
        in the same transaction as the job changes made before the next `take()`: a cron
        schedule's new next_run_ms commits together with the job it fired."""
        k = (table, key)
        self.keyed[k] = row
        if self.specs:
            self.specs.pop(k, None)
        if not self.pending:
            self.pending = True
            if self.on_pending is not None:
                self.on_pending()

    def put_int(self, table: str, key_column: str, key: str, value: int) -> None:
        """Store the record {key_column: key, "spec": `value` packed with MessagePack} of
        keyed table `table` with the next commit, as put_record does, but packed when the
        batch is taken: once per batch however often it changes (glide-mq's id counter, set
        by every addJob). `value`: an int MessagePack encodes (-2**63 <= value < 2**64; the
        caller checks)."""
        k = (table, key)
        self.specs[k] = (key_column, value)
        if self.keyed:
            self.keyed.pop(k, None)
        if not self.pending:
            self.pending = True
            if self.on_pending is not None:
                self.on_pending()

    def queue_seen(self, name: str) -> None:
        """Record the first job of queue `name` in this process (queues table, idempotent)."""
        self.known_queues.add(name)
        self.new_queues.append((name, self.clock.wall_ms()))

    def on_events(self, job, events: tuple, prev: str, dialect: str, durable: bool = True,
                  worker: str | None = None, error=None, at: int = 0) -> None:
        """The feed's sink: `job` changed through `events` (put, reserve, release, ...) via
        `dialect`.

        `durable=False` writes only the history events, not the job row, and does not start a
        commit: a beanstalk reservation is not stored, because reserved jobs come back ready
        after a restart anyway; its event rides with the next commit (the writer flushes lone
        events within a second). `at`: the events' wall-clock ms. `worker`: the connection or
        lock owner that caused it, when known; `error`: the failure's text (str or bytes), on
        `fail` events. The history row also carries the job's uid, priority and payload size.
        """
        if self.history:
            for ev in events:
                self.events.append((job.id, job.queue, dialect, ev, at, job.reserves, job.uid,
                                    job.priority, len(job.payload), worker,
                                    _text(error) if ev == "fail" else None))
        self.records += len(events)
        if not durable:
            return
        self.dirty[job.id] = job
        if not self.pending:
            self.pending = True
            if self.on_pending is not None:
                self.on_pending()

    def mark(self, job) -> None:
        """Note a change that is not a history event (e.g. reserved -> ready after a restart)."""
        self.dirty[job.id] = job
        if not self.pending:
            self.pending = True
            if self.on_pending is not None:
                self.on_pending()

    def payload_replaced(self, job) -> None:
        """Note that `job.payload` / `job.fmt` changed (bunqueue Update); the row is rewritten."""
        self.payload_changed.add(job.id)
        self.mark(job)

    def has_unwritten(self) -> bool:
        """True when anything (rows or lone history events) waits for the writer."""
        return (self.pending or bool(self.events) or bool(self.dirty) or bool(self.keyed)
                or bool(self.specs))

    def commit_mark(self) -> int:
        """The batch number that must be committed before a reply that depends on every
        mutation made so far may go out (committed >= this: nothing to wait for)."""
        return self.open_batch if self.pending else self.open_batch - 1

    def take(self, next_id: int) -> Batch:
        """Close the open batch into a Batch of row snapshots and open the next one."""
        b = Batch(self.open_batch, next_id=next_id)
        self.open_batch += 1
        now_mono = self.clock.monotonic_ms()
        now_wall = self.clock.wall_ms()
        ins, full, dels = b.inserts, b.inserts_full, b.deletes
        size = 0
        for job in self.dirty.values():
            st = job.state
            if st is DELETED:
                if job.in_db:
                    dels.append(job.id)
                    job.in_db = 0
                continue
            ready_at = now_wall + (job.ready_at - now_mono) if st is DELAYED else None
            m = job.more   # the rarely set fields (core/records.py), read once: not per field
            x = job.ext
            ext = None if x is None else _pack_extras(x)
            if m is None:
                exp = None
            else:
                exp = now_wall + (m.expires_at - now_mono) if m.expires_at else None
            leased = st is RESERVED and job.lease_mode == TOKEN_REQUIRED
            if job.in_db:
                upd = (st, job.priority, ready_at, job.delay_ms, job.ttr_ms, job.reserves,
                       job.timeouts, job.releases, job.buries, job.kicks, job.fails, exp, ext)
                if leased:
                    b.reservations.append(upd + (token_str(job.token), job.owner.name,
                                                 now_wall + (job.deadline - now_mono), job.id))
                elif job.result is not None:
                    b.results.append(upd + (job.result, 1 if job.result_ok else 0, job.id))
                else:
                    b.moves.append(upd + (job.id,))
                if job.id in self.payload_changed:
                    b.payloads.append((job.payload, job.fmt, job.id))
                    size += len(job.payload)
            else:
                job.in_db = b.number
                size += len(job.payload)
                if m is None:
                    row = (job.id, job.uid, job.queue, job.payload, job.priority, st,
                           job.created_ms, ready_at, job.delay_ms, job.ttr_ms, job.dialect,
                           0, None, 0, 0, 0, 0, ext,
                           None if ext is None else dedup_text(x.get("uniqueKey")))
                    counted = job.reserves
                else:
                    row = (job.id, job.uid, job.queue, job.payload, job.priority, st,
                           job.created_ms, ready_at, job.delay_ms, job.ttr_ms, job.dialect,
                           m.ttl_ms, exp, m.max_attempts, m.max_fails, m.sched_ms, m.fmt, ext,
                           None if ext is None else dedup_text(x.get("uniqueKey")))
                    counted = (job.reserves or m.timeouts or m.releases or m.buries or m.kicks
                               or m.fails or m.result is not None)
                if counted:
                    full.append(row + (job.reserves, job.timeouts, job.releases, job.buries,
                                       job.kicks, job.fails, job.result,
                                       1 if job.result_ok else 0)
                                + ((token_str(job.token), job.owner.name,
                                    now_wall + (job.deadline - now_mono)) if leased
                                   else (None, None, None)))
                else:
                    ins.append(row)
        b.payload_bytes = size
        b.events = self.events
        self.events = []
        if self.new_queues:
            b.queues, self.new_queues = self.new_queues, []
        if self.keyed:
            b.records = [(t, k, row) for (t, k), row in self.keyed.items()]
            self.keyed = {}
        if self.specs:
            b.records += [(t, k, {col: k, "spec": _pack_extras(v)})
                          for (t, k), (col, v) in self.specs.items()]
            self.specs = {}
        self.dirty = {}
        if self.payload_changed:
            self.payload_changed = set()
        self.pending = False
        return b


class Persistence:
    """The journal as the storage writer (gateway/writer.py) sees it.

    `take()` closes the open batch (a core.journal.Batch for StorePort.write) and opens the
    next; `done(batch)` records that it committed. `commit_mark()`: the batch that must be
    committed before a reply depending on everything done so far may go out; `committed`: the
    last committed batch. `pending`: a batch with job rows is open; `has_unwritten()`: anything
    (rows or lone history events) waits; `on_pending`: called when a batch opens.
    """

    def __init__(self, journal: Journal, engine) -> None:
        self._j = journal
        self._e = engine

    @property
    def pending(self) -> bool:
        return self._j.pending

    @property
    def committed(self) -> int:
        return self._j.committed

    def set_on_pending(self, fn) -> None:
        self._j.on_pending = fn

    def has_unwritten(self) -> bool:
        return self._j.has_unwritten()

    def commit_mark(self) -> int:
        return self._j.commit_mark()

    def take(self):
        sh = self._e.shared
        if sh is None:
            return self._j.take(self._e.next_id)
        sh.spill()   # shared mode: the jobs nobody here holds go back (core/shared.py)
        leases = sh.lease_rows(self._j.dirty.values())
        b = self._j.take(self._e.next_id)
        b.leases = leases
        return b

    def done(self, batch) -> None:
        self._j.committed = batch.number
        sh = self._e.shared
        if sh is not None and sh.settling:   # shared mode: queries waiting for this commit
            sh.committed(batch.number)

    def force_pending(self) -> None:
        """Open a batch even if only lone history events wait (shutdown flush)."""
        self._j.pending = True
