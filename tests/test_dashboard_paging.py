"""The dashboard's job listing: Port.job_page (core/paging.py), keyset pages by id with a state
filter, against the engine directly (tests/engine_support.py), including after deletes, the
lazy compaction of the id index and recovery."""
from __future__ import annotations

import pytest

from core.api import Port
from core.clock import ManualClock
from core.engine import Engine
from core.records import Owner

from .engine_support import T0, put


@pytest.fixture
def e():
    return Engine(ManualClock(T0))


def ids(p):
    return [v.id for v in p[0]]


def walk(port, queue, state=None, limit=7):
    """Every id by following `after` cursors from the first page."""
    out, after = [], None
    while True:
        views, _, more = port.job_page(queue, state, after=after, limit=limit)
        out += [v.id for v in views]
        if not more:
            return out
        after = views[-1].id


def walk_back(port, queue, state=None, limit=7):
    """Every id by following `before` cursors from the last page."""
    out, before = [], 1 << 62
    while True:
        views, more, _ = port.job_page(queue, state, before=before, limit=limit)
        out = [v.id for v in views] + out
        if not more:
            return out
        before = views[0].id


def test_pages_forward_and_back(e):
    port = Port.of(e)
    js = [put(e, "q").id for _ in range(30)]
    put(e, "other")
    p = port.job_page("q", limit=10)
    assert ids(p) == js[:10] and p[1:] == (False, True)
    p = port.job_page("q", after=js[9], limit=10)
    assert ids(p) == js[10:20] and p[1:] == (True, True)
    p = port.job_page("q", before=1 << 62, limit=10)   # the last page
    assert ids(p) == js[20:] and p[1:] == (True, False)
    p = port.job_page("q", before=js[20], limit=10)
    assert ids(p) == js[10:20] and p[1:] == (True, True)
    p = port.job_page("q", before=js[3], limit=10)   # fewer than a page before
    assert ids(p) == js[:3] and p[1:] == (False, True)
    assert walk(port, "q") == js == walk_back(port, "q")
    assert port.job_page("nope") is None


def test_state_filters_dense_and_sparse(e):
    port = Port.of(e)
    o = Owner("beanstalk")
    all_ = [put(e, "q").id for _ in range(200)]
    buried = all_[5::40]   # 5 of 200: sparse (read from the buried dict)
    for i in buried:
        e.reserve_job(o, i)
        e.bury(o, i, 0)
    delayed = [put(e, "q", delay=5000).id for _ in range(3)]
    reserved = [i for i in all_[100:151] if i not in buried]   # 50 of 203: walked
    for i in reserved:
        assert e.reserve_job(o, i) is not None
    ready = [i for i in all_ if i not in buried and i not in reserved]
    assert walk(port, "q", "buried") == buried == walk_back(port, "q", "buried")
    assert walk(port, "q", "delayed") == delayed
    assert walk(port, "q", "reserved") == reserved == walk_back(port, "q", "reserved")
    assert walk(port, "q", "ready") == ready == walk_back(port, "q", "ready")
    assert walk(port, "q", "completed") == []
    assert walk(port, "q") == all_ + delayed
    views, before, after = port.job_page("q", "buried", after=buried[1], limit=2)
    assert [v.id for v in views] == buried[2:4] and before and after
    assert all(v.state == "buried" for v in views)


def test_failed_filter(e):
    port = Port.of(e)
    a, b, c = (put(e, "q").id for _ in range(3))
    o = Owner("beanstalk")
    e.reserve_job(o, a)
    e.bury(o, a, 0)
    port.dead_letter(b, b"boom", "bunqueue")
    assert ids(port.job_page("q", "failed")) == [b]
    assert ids(port.job_page("q", "buried")) == [a, b]
    assert port.failed_count("q") == 1
    assert ids(port.job_page("q", "ready")) == [c]


def test_after_deletes_and_compaction(e):
    port = Port.of(e)
    js = [put(e, "q").id for _ in range(6000)]
    for i in js[:3000]:
        assert port.remove(i, "test")
    q = e.queues["q"]
    assert len(q.ids) == 6000 and q.ids_dead == 3000   # not yet: 3000 <= 6000 / 2 + 1024
    for i in js[3000:4100]:
        assert port.remove(i, "test")
    assert len(q.ids) < 6000 and q.ids_dead < 1024   # compacted in passing
    assert q.ids == sorted(q.ids)
    assert walk(port, "q", limit=500) == js[4100:]
    for i in js[4100::2]:
        port.remove(i, "test")
    left = js[4101::2]
    assert walk(port, "q", limit=100) == left == walk_back(port, "q", limit=100)
    p = port.job_page("q", after=js[4100], limit=3)   # the cursor itself is gone
    assert ids(p) == left[:3] and p[1] is False
    p = port.job_page("q", before=js[4102], limit=3)
    assert ids(p) == left[:1] and p[1:] == (False, True)
    new = put(e, "q").id
    assert walk(port, "q", limit=100) == left + [new]


def test_queue_gone_and_recreated(e):
    port = Port.of(e)
    a = put(e, "q").id
    port.remove(a, "test")
    assert port.job_page("q") is None   # an empty unreferenced queue goes
    b = put(e, "q").id
    assert ids(port.job_page("q")) == [b]


def test_put_many_indexed(e):
    port = Port.of(e)
    got = port.put_many("q", [(b"x", 0, f"u{i}", None) for i in range(10)], 1000, "bunqueue",
                        0, "push")
    assert walk(port, "q", limit=3) == got


def test_bad_arguments(e):
    port = Port.of(e)
    put(e, "q")
    for kw in ({"state": "nope"}, {"limit": 0}, {"after": 1, "before": 2}):
        with pytest.raises(ValueError):
            port.job_page("q", **kw)


def test_recovery_rebuilds_the_index(store):
    """After a restart (SQLite and PostgreSQL) pages come from the restored index."""
    from .storage_support import W0, Node, restart
    n = Node()
    js = [n.put("q").id for _ in range(20)]
    for i in js[::3]:
        n.engine.delete(None, i, "test", force=True)
    o = Owner("beanstalk")
    n.engine.reserve_job(o, js[4])
    n.engine.bury(o, js[4], 0)
    n.flush(store)
    m, _ = restart(store, W0 + 1000)
    port = Port.of(m.engine)
    left = [i for i in js if i not in js[::3]]
    assert walk(port, "q", limit=4) == left == walk_back(port, "q", limit=4)
    assert walk(port, "q", "buried") == [js[4]]


def test_drain_queue(e):
    port = Port.of(e)
    o = Owner("beanstalk")
    a, b, c, d = (put(e, "q").id for _ in range(4))
    late = put(e, "q", delay=1000).id
    e.reserve_job(o, b)
    e.reserve_job(o, c)
    e.bury(o, c, 0)
    sub = port.subscribe()
    assert port.drain_queue("q", "http") == 3   # a, d and the delayed one
    assert [(x.kind, x.job_id) for x in sub.take()] == [("drain", a), ("drain", d),
                                                        ("drain", late)]
    assert walk(port, "q") == [b, c]
    assert port.drain_queue("nope", "http") == 0


def test_count_events(e):
    """The dashboard's live view: a Counter counts events per (queue, kind), cleared by take;
    a scoped port counts the allowed queues only."""
    from core.access import Principal
    port = Port.of(e)
    c = port.count_events()
    scoped = port.scoped(Principal("p", "token", ("a",))).count_events()
    a = put(e, "a").id
    put(e, "b")
    o = Owner("beanstalk")
    e.reserve_job(o, a)
    e.delete(o, a)
    assert c.take() == {("a", "put"): 1, ("b", "put"): 1, ("a", "reserve"): 1,
                        ("a", "delete"): 1}
    assert c.take() == {}
    assert scoped.take() == {("a", "put"): 1, ("a", "reserve"): 1, ("a", "delete"): 1}
    c.close()
    scoped.close()
    assert not e.feed.counters and not e.feed.active   # memory mode: nothing listens now
    put(e, "a")
    assert c.take() == {}


def test_behind_the_cursor_is_looked_up_within_a_budget(e):
    """Another state clustered behind the cursor: the lookup of the side behind it stops after
    EXISTS_BUDGET ids and says "maybe" (True); the side read towards is exact."""
    from core.paging import EXISTS_BUDGET
    port = Port.of(e)
    ready = [put(e, "q").id for _ in range(100)]
    late = [put(e, "q", delay=60_000).id for _ in range(EXISTS_BUDGET + 10)]
    views, before, after = port.job_page("q", "ready", after=late[-1])
    assert views == [] and before is True and after is False   # could not tell: "maybe"
    views, before, after = port.job_page("q", "ready", before=1 << 63, limit=10)
    assert [v.id for v in views] == ready[-10:] and before and not after
    views, before, after = port.job_page("q", "delayed", after=late[4], limit=5)
    assert [v.id for v in views] == late[5:10] and before and after
