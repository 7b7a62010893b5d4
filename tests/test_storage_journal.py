"""What the journal writes to SQL storage, on a real SQLite file and a real PostgreSQL database
(the db_url fixture runs each test on both).

Journal coalescing, the job_events history, pruning, batches larger than the 500-row multi-row
INSERT chunk, failed batches, and the queues table.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from core import schema
from core.model import BURIED
from core.records import Owner
from core.storage import Store

from .storage_support import W0, count, event_rows, job_rows, Node, restart, stored_next_id


# --------------------------------------------------------------------------- coalescing
def test_put_and_delete_in_one_batch_never_hit_jobs_table(store):
    a = Node()
    keep = a.put(body=b"keep")
    gone = a.put(body=b"gone")
    o = Owner("workq")
    a.engine.reserve_job(o, gone.id)
    a.engine.release(o, gone.id, 0, 0)
    a.engine.delete(None, gone.id, "workq")
    bt = a.flush(store)
    assert [r[0] for r in bt.inserts] == [keep.id]
    assert bt.inserts_full == [] and bt.updates == [] and bt.deletes == []
    assert set(job_rows(store)) == {keep.id}
    assert [(r[0], r[2], r[3]) for r in event_rows(store)] == [
        (keep.id, "beanstalk", "put"), (gone.id, "beanstalk", "put"),
        (gone.id, "workq", "reserve"), (gone.id, "workq", "release"),
        (gone.id, "workq", "delete")]


def test_job_changed_many_times_in_a_batch_is_written_once(store):
    a = Node()
    j = a.put()
    a.flush(store)
    o = Owner("beanstalk")
    for _ in range(5):
        a.engine.reserve_job(o, j.id)
        a.engine.release(o, j.id, 4, 0)
    a.engine.reserve_job(o, j.id)
    a.engine.bury(o, j.id, 9)
    bt = a.flush(store)
    assert len(bt.updates) == 1 and bt.inserts == [] and bt.inserts_full == []
    assert len(bt.events) == 12
    r = job_rows(store)[j.id]
    assert (r["state"], r["priority"], r["reserves"], r["releases"], r["buries"]) == \
           (BURIED, 9, 6, 5, 1)


def test_reservations_alone_write_no_job_rows(store):
    a = Node()
    j = a.put()
    k = a.put()
    a.flush(store)
    before = job_rows(store)
    o = Owner("beanstalk")
    assert a.engine.reserve(o, ["default"], 0, None) is j
    assert a.engine.reserve(o, ["default"], 0, None) is k
    assert a.engine.touch(o, j.id)
    assert not a.journal.pending and a.journal.dirty == {}
    assert a.journal.has_unwritten()  # the lone events still go out
    bt = a.flush(store)
    assert bt.inserts == [] and bt.inserts_full == [] and bt.updates == [] and bt.deletes == []
    assert [e[3] for e in bt.events] == ["reserve", "reserve"]
    assert job_rows(store) == before
    assert [r[3] for r in event_rows(store)] == ["put", "put", "reserve", "reserve"]


def test_history_off_writes_no_events(store):
    a = Node(history=False)
    o = Owner("beanstalk")
    j = a.put()
    a.engine.reserve_job(o, j.id)
    a.engine.delete(o, j.id)
    k = a.put()
    a.flush(store)
    assert count(store, schema.job_events) == 0
    assert set(job_rows(store)) == {k.id}


# --------------------------------------------------------------------------- history
def test_job_events_for_every_transition(store):
    a = Node()
    e = a.engine
    w = Owner("workq")
    j = a.put("jobs", pri=1, ttr=3000, dialect="beanstalk")
    jid = j.id
    a.flush(store)
    a.step(10)
    assert e.reserve(w, ["jobs"], 0, None) is j                   # W0+10   reserve 1
    a.step(10)
    e.release(w, jid, 1, 0)                                       # W0+20   release 1
    a.step(10)
    e.reserve(w, ["jobs"], 0, None)                               # W0+30   reserve 2
    a.step(3000)                                                  # W0+3030 timeout 2
    e.reserve(w, ["jobs"], 0, None)                               # W0+3030 reserve 3
    a.flush(store)
    a.step(10)
    e.bury(w, jid, 2)                                             # W0+3040 bury 3
    a.step(10)
    e.kick("jobs", 1, "bunqueue")                                 # W0+3050 kick 3
    e.reserve(w, ["jobs"], 0, None)                               # W0+3050 reserve 4
    e.release(w, jid, 1, 500)                                     # W0+3050 release 4
    a.step(500)                                                   # W0+3550 ready 4
    e.reserve_job(w, jid)                                         # W0+3550 reserve 5
    e.release_owner(w)                                            # W0+3550 abandon 5
    a.step(1)
    e.kick_job(jid, "beanstalk")  # ready: not kickable, no event
    e.delete(None, jid, "beanstalk")                              # W0+3551 delete 5
    a.flush(store)
    assert event_rows(store) == [
        (jid, "jobs", "beanstalk", "put", W0, 0),
        (jid, "jobs", "workq", "reserve", W0 + 10, 1),
        (jid, "jobs", "workq", "release", W0 + 20, 1),
        (jid, "jobs", "workq", "reserve", W0 + 30, 2),
        (jid, "jobs", "jobgate", "timeout", W0 + 3030, 2),
        (jid, "jobs", "workq", "reserve", W0 + 3030, 3),
        (jid, "jobs", "workq", "bury", W0 + 3040, 3),
        (jid, "jobs", "bunqueue", "kick", W0 + 3050, 3),
        (jid, "jobs", "workq", "reserve", W0 + 3050, 4),
        (jid, "jobs", "workq", "release", W0 + 3050, 4),
        (jid, "jobs", "jobgate", "ready", W0 + 3550, 4),
        (jid, "jobs", "workq", "reserve", W0 + 3550, 5),
        (jid, "jobs", "workq", "abandon", W0 + 3550, 5),
        (jid, "jobs", "beanstalk", "delete", W0 + 3551, 5),
    ]
    assert job_rows(store) == {}


def _events_over_time(store, n_batches=10, per_batch=7):
    """n_batches batches, one per second from W0, each with per_batch put events."""
    a = Node()
    for i in range(n_batches):
        for _ in range(per_batch):
            a.put()
        a.flush(store)
        a.step(1000)
    return a


@pytest.mark.parametrize("chunk", [50_000, 3])
def test_prune_events_removes_exactly_the_older_rows(store, chunk):
    assert store.prune_events(W0 + 10**9, chunk=chunk) == 0  # empty table
    _events_over_time(store)
    assert count(store, schema.job_events) == 70
    assert store.prune_events(W0, chunk=chunk) == 0  # nothing older than the first row
    assert count(store, schema.job_events) == 70
    assert store.prune_events(W0 + 1, chunk=chunk) == 7
    assert store.prune_events(W0 + 5000, chunk=chunk) == 28
    rows = event_rows(store)
    assert len(rows) == 35 and min(r[4] for r in rows) == W0 + 5000
    assert store.prune_events(W0 + 5000, chunk=chunk) == 0
    assert store.prune_events(W0 + 4500, chunk=chunk) == 0
    assert store.prune_events(W0 + 9000, chunk=chunk) == 28
    assert [r[4] for r in event_rows(store)] == [W0 + 9000] * 7
    # the newest row always stays, so SQLite never hands its id out again
    assert store.prune_events(W0 + 9001, chunk=chunk) == 6
    assert count(store, schema.job_events) == 1
    # the job rows are not touched
    assert len(job_rows(store)) == 70


def test_prune_events_single_row(store):
    a = Node()
    a.put()
    a.flush(store)
    assert store.prune_events(W0) == 0
    assert store.prune_events(W0 + 1) == 0   # the newest row always stays
    ids = lambda: [r[0] for r in store.engine.connect().execute(  # noqa: E731
        sa.select(schema.job_events.c.id))]
    (first,) = ids()
    a.step(5000)
    a.put()
    a.flush(store)
    assert store.prune_events(W0 + 5000) == 1
    (second,) = ids()
    assert second > first   # ids only grow, as `jobgate export`'s watermark needs


# --------------------------------------------------------------------------- large batches
def test_large_batches_cross_the_insert_chunk(store):
    a = Node()
    e = a.engine
    o = Owner("beanstalk")
    N = 1234
    plain = [a.put(pri=i % 17, body=b"p\x00%d\r\n" % i) for i in range(N)]
    counted = [a.put(queue="q2", body=b"c%d" % i) for i in range(N)]
    for j in counted:
        e.reserve_job(o, j.id)
        e.release(o, j.id, 5, 0)
    b1 = a.flush(store)
    assert len(b1.inserts) == N and len(b1.inserts_full) == N and len(b1.events) == 3 * N + N
    rows = job_rows(store)
    assert len(rows) == 2 * N
    assert all(rows[j.id]["payload"] == b"p\x00%d\r\n" % i for i, j in enumerate(plain))
    assert all(rows[j.id]["releases"] == 1 and rows[j.id]["reserves"] == 1 for j in counted)
    assert stored_next_id(store) == 2 * N + 1

    for j in plain:  # updates
        e.reserve_job(o, j.id)
        e.bury(o, j.id, 1)
    b2 = a.flush(store)
    assert len(b2.updates) == N
    assert sum(1 for r in job_rows(store).values() if r["state"] == BURIED) == N

    for j in counted:  # deletes, more than 500 ids
        e.delete(None, j.id, "beanstalk")
    b3 = a.flush(store)
    assert len(b3.deletes) == N
    assert set(job_rows(store)) == {j.id for j in plain}
    assert count(store, schema.job_events) == 4 * N + 2 * N + N

    b, n = restart(store, W0 + 1)
    assert n == N
    assert list(b.engine.queues["default"].buried) == [j.id for j in plain]
    assert b.engine.next_id == 2 * N + 1
    assert store.prune_events(W0 + 1) == 7 * N - 1   # the newest row stays


# --------------------------------------------------------------------------- atomicity
def test_failed_batch_writes_nothing_and_the_store_recovers(store):
    a = Node()
    first = a.put(uid="dup", dialect="workq")
    a.flush(store)
    a.step(1000)
    good = a.put(body=b"good")
    a.put(queue=None, dialect="workq")  # violates NOT NULL (queues.name, jobs.queue)
    a.engine.delete(None, first.id, "workq")
    bad = a.journal.take(a.engine.next_id)
    assert bad.inserts and bad.deletes == [first.id] and len(bad.events) == 3
    with pytest.raises(sa.exc.IntegrityError):
        store.write(bad)
    # one transaction per batch: nothing of it is visible
    assert set(job_rows(store)) == {first.id}
    assert [r[3] for r in event_rows(store)] == ["put"]
    assert stored_next_id(store) == 2
    # the writer connection was replaced: the next batch commits
    a.step(1000)
    later = a.put(body=b"later")
    a.flush(store)
    assert set(job_rows(store)) == {first.id, later.id}
    assert stored_next_id(store) == later.id + 1
    assert good.id not in job_rows(store)


# --------------------------------------------------------------------------- queues table
def queue_rows(store: Store) -> dict[str, int]:
    with store.engine.connect() as c:
        return dict(c.execute(sa.select(schema.queues.c.name, schema.queues.c.created_ms)).all())


def test_queues_recorded_on_first_use(store):
    a = Node()
    a.put("a")
    a.put("b")
    a.put("a")
    bt = a.flush(store)
    assert bt.queues == [("a", W0), ("b", W0)]
    a.step(1000)
    a.put("a")
    a.put("default")
    bt = a.flush(store)
    assert bt.queues == [("default", W0 + 1000)]
    assert queue_rows(store) == {"a": W0, "b": W0, "default": W0 + 1000}
    # after a restart the first put of a known queue is written again and changes nothing
    b, _ = restart(store, W0 + 5000)
    b.put("a")
    b.put("c")
    bt = b.flush(store)
    assert sorted(bt.queues) == [("a", W0 + 5000), ("c", W0 + 5000)]
    assert queue_rows(store) == {"a": W0, "b": W0, "default": W0 + 1000, "c": W0 + 5000}
