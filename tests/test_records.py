"""The keyed record tables (migration 0007: cron schedules, queue settings, webhooks): written
through the journal in the same transaction as job changes, read back with load_records, on a
real SQLite file and on PostgreSQL (conftest `store`: skipped without JOBGATE_TEST_PG_URL)."""
from __future__ import annotations

from core.clock import ManualClock
from core.journal import Journal


def test_records_replace_and_delete(store):
    j = Journal(ManualClock())
    j.put_record("cron_schedules", "nightly", {"name": "nightly", "queue": "q",
                                               "next_run_ms": 1000, "executions": 0,
                                               "spec": b"\x80"})
    j.put_record("queue_settings", "q", {"queue": "q", "spec": b"\x81\xa1c\x03"})
    assert j.pending and j.has_unwritten()
    store.write(j.take(1))
    assert store.load_records("cron_schedules") == [
        {"name": "nightly", "queue": "q", "next_run_ms": 1000, "executions": 0, "spec": b"\x80"}]
    # the last change of a key within a batch wins; a row replaces the stored one
    j.put_record("cron_schedules", "nightly", {"name": "nightly", "queue": "q",
                                               "next_run_ms": 2000, "executions": 1,
                                               "spec": b"\x80"})
    j.put_record("cron_schedules", "nightly", {"name": "nightly", "queue": "q",
                                               "next_run_ms": 3000, "executions": 2,
                                               "spec": b"\x80"})
    j.put_record("queue_settings", "q", None)
    b = j.take(1)
    assert len(b.records) == 2
    store.write(b)
    assert [r["next_run_ms"] for r in store.load_records("cron_schedules")] == [3000]
    assert store.load_records("queue_settings") == []
    assert not j.has_unwritten()
