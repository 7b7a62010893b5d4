"""SQL storage (core.storage, core.journal, core.recovery) on a real SQLite file and a real
PostgreSQL database (the db_url fixture runs each test on both).

Schema through Alembic (migrations.upgrade, as the gateway runs it, and `jobgate migrate`), and an Engine + Journal + Store
round trip and restart (core.recovery.restore). What the journal writes (coalescing, history,
large batches) is in test_storage_journal.py.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from core import schema
from core.model import BURIED, DELAYED, READY, RESERVED
from core.records import Job, Owner
from core.storage import Store
from migrations import HEAD, upgrade

from .support import ROOT
from .storage_support import W0, event_rows, job_rows, Node, restart, stored_next_id


BEAN = -(2**31)  # canonical rank of beanstalk priority 0

PAYLOADS = [
    b"a\x00b\r\nc",
    b"\r\n",
    b"\x00",
    b"",
    bytes(range(256)),
    b"\r\n\r\n\x00\xff" * 1000,
    "h\u00e9llo \u2603".encode(),
]


def check_schema(url: str) -> None:
    eng = sa.create_engine(url)
    try:
        insp = sa.inspect(eng)
        names = set(insp.get_table_names())
        assert {"jobs", "queues", "job_events", "jobgate_meta", "alembic_version"} <= names
        for t in schema.metadata.sorted_tables:
            cols = {c["name"] for c in insp.get_columns(t.name)}
            assert cols == {c.name for c in t.columns}, t.name
        assert insp.get_pk_constraint("jobs")["constrained_columns"] == ["id"]
        # no secondary index on jobs: uid uniqueness is the engine's (migration 0002); the
        # shared mode's come with its first node (core/shared_store.py SHARED_INDEXES)
        assert insp.get_indexes("jobs") == []
        with eng.connect() as c:
            assert c.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [(HEAD,)]
            meta = c.exec_driver_sql("SELECT key, value FROM jobgate_meta").all()
            assert sorted(meta) == [("commit_seq", 0), ("next_id", 1)]
    finally:
        eng.dispose()


# --------------------------------------------------------------------------- schema
def test_migrate_creates_schema_and_is_idempotent(db_url):
    s = Store(db_url)
    try:
        upgrade(s.engine)
        check_schema(db_url)
        upgrade(s.engine)
        upgrade(s.engine)
        check_schema(db_url)  # still one version row, one meta row
        assert s.load().jobs == [] and s.load().next_id == 1
    finally:
        s.close()


def test_migrate_keeps_existing_data(store, db_url):
    n = Node()
    j = n.put(body=b"keep")
    n.flush(store)
    upgrade(store.engine)
    assert job_rows(store)[j.id]["payload"] == b"keep"
    assert stored_next_id(store) == 2


def test_sqlite_uses_wal(sqlite_url):
    s = Store(sqlite_url)
    try:
        upgrade(s.engine)
        with s.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    finally:
        s.close()
    s = Store(sqlite_url, sqlite_synchronous="full")
    try:
        with s.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    finally:
        s.close()
    with pytest.raises(ValueError):
        Store(sqlite_url, sqlite_synchronous="sometimes")


def test_sqlite_checkpoints_are_manual(sqlite_url, tmp_path):
    """No automatic WAL checkpoint inside a commit; checkpoint() copies the frames, TRUNCATE
    empties the WAL, and the data reads back the same."""
    s = Store(sqlite_url)
    try:
        upgrade(s.engine)
        with s.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
        n = Node()
        for _ in range(5):
            for i in range(5000):
                n.engine.put("q", b"x" * 100, 0, 0, 60_000, "beanstalk")
            n.flush(s)
        # SQLite's default would have checkpointed (and restarted the WAL) past 1000 frames
        busy, frames, done = s.checkpoint()
        assert busy == 0 and frames > 1000 and done == frames
        s.checkpoint("TRUNCATE")
        assert (tmp_path / "jobgate.db-wal").stat().st_size == 0
        assert len(job_rows(s)) == 25000
        with pytest.raises(ValueError):
            s.checkpoint("SOMETIMES")
    finally:
        s.close()


def test_checkpoint_is_a_no_op_on_postgresql(pg_url):
    s = Store(pg_url)
    try:
        upgrade(s.engine)
        assert s.checkpoint() is None
    finally:
        s.close()


def test_cli_migrate(db_url, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cmd = [sys.executable, "-m", "gateway.cli", "migrate", "--database", db_url]
    for _ in range(2):  # idempotent
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        assert b"up to date" in p.stdout
    check_schema(db_url)
    assert list(cwd.iterdir()) == []  # used --database, not the default ./jobgate.db
    # the migrated database is usable by a Store without migrating again
    s = Store(db_url)
    try:
        n = Node()
        n.put(body=b"after cli")
        n.flush(s)
        assert [r["payload"] for r in s.load().jobs] == [b"after cli"]
    finally:
        s.close()


# --------------------------------------------------------------------------- round trip
def test_round_trip_and_restart(store):
    a = Node()
    e = a.engine
    o = Owner("beanstalk")
    e.attach("tube1", "watching")
    j1 = a.put(pri=10, body=b"a\x00b\r\nc")
    j2 = a.put("tube1", delay=10_000, body=b"\x00\x00")
    j3 = a.put(body=b"to bury")
    j4 = a.put(ttr=7000, body=b"reserved\r\n", dialect="workq", uid="u-4")
    j5 = a.put(pri=8)
    j6 = a.put(body=b"deleted")
    j7 = a.put()
    j8 = a.put(pri=BEAN + 5, dialect="bunqueue", uid="u-8")
    assert e.reserve_job(o, j4.id) is j4  # put + reserve in one batch: row says reserved
    b1 = a.flush(store)
    assert len(b1.inserts) == 7 and len(b1.inserts_full) == 1
    assert job_rows(store)[j4.id]["state"] == RESERVED

    a.step(1000)
    e.reserve_job(o, j3.id)
    e.bury(o, j3.id, 7)
    e.reserve_job(o, j5.id)
    e.release(o, j5.id, 3, 0)
    e.delete(None, j6.id, "beanstalk")
    e.reserve_job(o, j7.id)
    e.release(o, j7.id, 0, 20_000)  # ready at T+21000
    e.reserve_job(o, j8.id)
    e.bury(o, j8.id, BEAN + 5)
    e.kick("default", 1, "beanstalk")  # kicks j3 (buried first), not j8
    e.reserve_job(o, j3.id)
    e.bury(o, j3.id, 7)  # j3 buried again: buries 2, kicks 1
    a.step(2000)  # now W0 + 3000
    b2 = a.flush(store)
    assert b2.deletes == [j6.id]
    assert {u[-1] for u in b2.updates} == {j3.id, j5.id, j7.id, j8.id}

    rows = job_rows(store)
    assert set(rows) == {1, 2, 3, 4, 5, 7, 8}
    assert rows[j2.id]["state"] == DELAYED and rows[j2.id]["ready_at_ms"] == W0 + 10_000
    assert rows[j7.id]["state"] == DELAYED and rows[j7.id]["ready_at_ms"] == W0 + 21_000
    assert rows[j3.id]["state"] == BURIED and rows[j8.id]["state"] == BURIED
    assert rows[j1.id]["ready_at_ms"] is None
    assert stored_next_id(store) == 9

    # the server stops; it starts again 2 s later
    b, n = restart(store, W0 + 5000)
    e2 = b.engine
    assert n == 7
    assert set(e2.jobs) == {1, 2, 3, 4, 5, 7, 8}
    assert e2.peek(j6.id) is None
    got = {j.id: j for j in e2.jobs.values()}
    for old in (j1, j2, j3, j4, j5, j7, j8):
        new = got[old.id]
        assert (new.queue, new.payload, new.priority, new.ttr_ms, new.uid, new.dialect,
                new.created_ms) == (old.queue, old.payload, old.priority, old.ttr_ms, old.uid,
                                    old.dialect, old.created_ms)
        assert (new.reserves, new.timeouts, new.releases, new.buries, new.kicks) == \
               (old.reserves, old.timeouts, old.releases, old.buries, old.kicks), old.id
    assert got[j1.id].payload == b"a\x00b\r\nc"
    assert (got[j3.id].reserves, got[j3.id].buries, got[j3.id].kicks) == (2, 2, 1)
    assert (got[j5.id].releases, got[j5.id].priority) == (1, 3)
    assert got[j7.id].delay_ms == 20_000
    # states: reserved -> ready, buried stay buried (id order), delayed stay delayed
    assert {i: j.state for i, j in got.items()} == {
        1: READY, 2: DELAYED, 3: BURIED, 4: READY, 5: READY, 7: DELAYED, 8: BURIED}
    assert got[j4.id].owner is None and e2.n_reserved == 0
    q, t1 = e2.queues["default"], e2.queues["tube1"]
    assert (q.n_ready, q.n_delayed, len(q.buried), q.n_reserved) == (3, 1, 2, 0)
    assert list(q.buried) == [j3.id, j8.id]
    assert (t1.n_delayed, t1.total_jobs, q.total_jobs, e2.total_jobs) == (1, 1, 6, 7)
    # ids continue
    assert e2.next_id == 9
    assert b.put().id == 9
    # ready order: priority, then id
    o2 = Owner("beanstalk")
    order = []
    while isinstance(r := e2.reserve(o2, ["default"], 0, None), Job):
        order.append(r.id)
    assert order == [4, 9, 5, 1]  # pri 0 (4, 9), 3 (5), 10 (1)
    # delayed keep their wall-clock deadline: j2 at W0+10000 (5 s from now), j7 at W0+21000
    b.step(4999)
    assert got[j2.id].state is DELAYED
    b.step(1)
    assert got[j2.id].state is READY
    b.step(10_999)
    assert got[j7.id].state is DELAYED
    b.step(1)
    assert got[j7.id].state is READY


def test_restore_marks_reserved_rows_and_batch_numbers(store):
    a = Node()
    o = Owner("beanstalk")
    j = a.put()
    a.engine.reserve_job(o, j.id)
    a.flush(store)
    assert job_rows(store)[j.id]["state"] == RESERVED
    b, _ = restart(store, W0 + 10)
    assert b.journal.open_batch == 2 and b.journal.committed == 1
    assert list(b.journal.dirty) == [j.id]
    assert b.journal.events == []  # not a history event
    bt = b.flush(store)
    assert bt.number == 2 and bt.inserts == [] and bt.inserts_full == []
    assert [u[-1] for u in bt.updates] == [j.id]
    row = job_rows(store)[j.id]
    assert row["state"] == READY and row["reserves"] == 1


def test_restored_delayed_job_past_its_deadline_is_ready_at_first_tick(store):
    a = Node()
    j = a.put(delay=5000)
    a.flush(store)
    b, _ = restart(store, W0 + 60_000)
    k = b.engine.peek(j.id)
    assert k.state is DELAYED
    b.engine.tick()
    assert k.state is READY
    b.flush(store)
    assert job_rows(store)[j.id]["state"] == READY
    assert [ev[3] for ev in event_rows(store)] == ["put", "ready"]


def test_restored_jobs_keep_being_journaled(store):
    a = Node()
    j = a.put()
    a.flush(store)
    b, _ = restart(store, W0 + 100)
    o = Owner("beanstalk")
    assert b.engine.reserve(o, ["default"], 0, None).id == j.id
    b.engine.bury(o, j.id, 0)
    bt = b.flush(store)
    assert bt.inserts == [] and len(bt.updates) == 1  # an update, not a second insert
    assert job_rows(store)[j.id]["state"] == BURIED
    c, _ = restart(store, W0 + 200)
    assert c.engine.peek(j.id).state is BURIED
    assert c.engine.delete(None, j.id, "beanstalk")
    bt = c.flush(store)
    assert bt.deletes == [j.id]
    assert job_rows(store) == {}


def test_ids_continue_after_newest_deleted_in_a_later_batch(store):
    a = Node()
    for _ in range(5):
        a.put()
    a.flush(store)
    a.engine.delete(None, 4, "beanstalk")
    a.engine.delete(None, 5, "beanstalk")
    a.flush(store)
    assert set(job_rows(store)) == {1, 2, 3}
    b, n = restart(store, W0 + 1)
    assert n == 3 and b.engine.next_id == 6
    assert b.put().id == 6


def test_ids_continue_when_every_job_was_deleted(store):
    a = Node()
    for _ in range(3):
        a.put()
    a.flush(store)
    for i in (1, 2, 3):
        a.engine.delete(None, i, "beanstalk")
    a.flush(store)
    assert job_rows(store) == {}
    b, n = restart(store, W0 + 1)
    assert n == 0 and b.put().id == 4


def test_ids_continue_after_jobs_put_and_deleted_in_one_batch(store):
    """Regression: next_id was stored only with inserts, so ids of jobs put and deleted within
    one batch (coalesced away) were handed out again after a restart."""
    a = Node()
    for _ in range(3):
        a.put()
    a.flush(store)
    j = a.put()  # id 4: INSERTED 4 went to a client
    a.engine.delete(None, j.id, "beanstalk")
    a.flush(store)
    assert stored_next_id(store) == 5
    b, _ = restart(store, W0 + 1)
    assert b.engine.next_id == 5
    assert b.put().id == 5
    # the same across a second generation, with a store object that has never written
    k = b.put()
    b.engine.delete(None, k.id, "beanstalk")
    s2 = Store(store.url)
    try:
        b.flush(s2)
        assert stored_next_id(s2) == 7
        c, _ = restart(s2, W0 + 2)
        assert c.put().id == 7
    finally:
        s2.close()


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_binary_payloads_round_trip(store, payload):
    a = Node()
    j = a.put(body=payload)
    o = Owner("beanstalk")
    k = a.put(body=payload)
    a.engine.reserve_job(o, k.id)  # the inserts_full path
    a.flush(store)
    assert job_rows(store)[j.id]["payload"] == payload
    b, _ = restart(store, W0 + 1)
    assert b.engine.peek(j.id).payload == payload
    assert b.engine.peek(k.id).payload == payload
    assert type(b.engine.peek(j.id).payload) is bytes


def test_extreme_priorities_round_trip(store):
    a = Node()
    pris = [-(2**63), BEAN, -1, 0, 2**31 - 1, 2**63 - 1]
    ids = [a.put(pri=p).id for p in pris]
    a.flush(store)
    b, _ = restart(store, W0 + 1)
    assert [b.engine.peek(i).priority for i in ids] == pris


def test_migration_head_and_the_cheap_startup_check(tmp_path):
    """migrations.HEAD is Alembic's head (a new migration must bump it), and start-up's check
    migrates an empty database once, then only reads the version."""
    from alembic.script import ScriptDirectory

    import migrations
    assert ScriptDirectory.from_config(migrations.config()).get_current_head() == migrations.HEAD
    eng = sa.create_engine(f"sqlite:///{tmp_path}/fresh.db")
    try:
        assert migrations.current(eng) is None
        assert migrations.upgrade_if_needed(eng) is True
        assert migrations.current(eng) == migrations.HEAD
        assert migrations.upgrade_if_needed(eng) is False
    finally:
        eng.dispose()
    check_schema(f"sqlite:///{tmp_path}/fresh.db")
