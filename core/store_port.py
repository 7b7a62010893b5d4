"""The storage port without its implementation: `StorePort` (the named operations the engine
needs from storage), `Loaded` and `StoreLocked`. Importing this costs nothing (no SQLAlchemy),
so a memory-only server never loads the SQL stack (issue 14: start-up in milliseconds);
core/storage.py is the SQL implementation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol


class StoreLocked(Exception):
    """Another jobgate server holds the database (message names the database and what to do)."""


@dataclass
class Loaded:
    """What `Store.load()` returns: job rows (dicts, by id; an iterator when streamed) and the
    next id to hand out (at least the highest stored id + 1 once the rows are consumed)."""

    jobs: object
    next_id: int


class StorePort(Protocol):
    """The named operations of a job store (one implementation per storage model).

    Writes happen in `write(batch)`: one transaction that applies, in this order,
    note_queues, insert_jobs, set_next_id, move_states, record_reservations, record_results,
    replace_payloads, delete_jobs, append_history, write_records (rows: core.journal.Batch). A failure raises
    sqlalchemy.exc.SQLAlchemyError and nothing of the batch is stored.
    """

    def write(self, batch) -> None:
        """Commit one core.journal.Batch in a single transaction."""

    def scan_jobs(self, chunk: int = 10_000) -> Iterator[dict]:
        """Every live job row (a dict per job, by id), streamed `chunk` rows at a time."""

    def load_next_id(self) -> int:
        """The stored next job id (1 on an empty database)."""

    def load_records(self, table: str) -> list[dict]:
        """Every row of keyed record table `table` (core.schema.RECORD_TABLES: cron_schedules,
        queue_settings, webhooks) as a dict of its columns."""

    def prune_events(self, before_ms: int, chunk: int = 50_000) -> int:
        """Delete history rows older than `before_ms` (wall ms); returns how many."""

    def lock(self, wait_s: float = 5.0) -> None:
        """Hold the database for this server until close(); raises StoreLocked."""

    def close(self) -> None:
        """Release the lock and every connection."""
