"""glide-mq producers on several nodes of one PostgreSQL (issue 19; docs/scaling.md "glide-mq
across nodes"): job ids taken from a counter every node shares, custom ids checked across
nodes, key reads of jobs and queues that other nodes hold or that wait in the database, pause
and resume on every node, flows. Real node processes on one fresh database, real RESP
sockets (and redis-py, a real client), beanstalk workers.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import threading

import greenstalk
import hiredis
import psycopg
import redis

from .bunqueue_support import wait_until
from .resp_support import (LIBRARY_STANDIN, RespConn, add_job_args, dedup_keys, job_keys,
                           meta_keys, now_ms)
from .shared_support import bean, rows


def _exec(url: str, sql: str) -> None:
    """Run statement `sql` on database `url` (autocommit)."""
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as c:
        c.execute(sql)


def _conn(node) -> RespConn:
    c = RespConn(node.glide_port)
    assert c.call("FUNCTION", "LOAD", "REPLACE", LIBRARY_STANDIN) == b"glidemq"
    return c


def _state(c: RespConn, q: str, gid) -> bytes | None:
    return c.call("HGET", f"glide:{{{q}}}:job:{gid.decode() if isinstance(gid, bytes) else gid}",
                  "state")


def _drain(node, tube: str, n: int) -> list[bytes]:
    """Reserve and delete `n` jobs of `tube` through beanstalk on `node`: their bodies."""
    b = bean(node, tube)
    out = []
    for _ in range(n):
        j = b.reserve(timeout=5)
        out.append(j.body)
        b.delete(j)
    b.close()
    return out


def test_ids_are_unique_across_nodes(nodes):
    """Producers on two nodes, one after the other, pipelined and from threads at once: every
    id is a distinct number, one connection's ids increase, and each job exists once."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    ids = []
    for i in range(10):
        ids.append(ca.add_job("gq", data=f'{{"a":{i}}}'))
        ids.append(cb.add_job("gq", data=f'{{"b":{i}}}'))
    assert ids[:2] == [b"1", b"2"]   # the counter starts as one Redis's
    # pipelined: 50 addJobs in one write, answered in order
    ca.send(*[("FCALL", "glidemq_addJob", 4, *job_keys("gq"), *add_job_args(data=f'"p{i}"'))
              for i in range(50)])
    piped = [ca.reply() for _ in range(50)]
    assert [int(x) for x in piped] == sorted(int(x) for x in piped)
    ids += piped
    got = []

    def produce(node, k):
        c = _conn(node)
        for i in range(40):
            got.append(c.add_job("gq", data=f'"t{k}-{i}"'))
        c.close()
    ts = [threading.Thread(target=produce, args=(n, k)) for k, n in enumerate((a, b, a, b))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ids += got
    assert all(x.isdigit() for x in ids)
    assert len(set(ids)) == len(ids) == 20 + 50 + 160
    # the id key reads the shared counter, on either node
    assert ca.call("GET", "glide:{gq}:id") == cb.call("GET", "glide:{gq}:id") == b"230"
    # each id names one job, readable on either node, and a worker gets every job once
    assert _state(cb, "gq", ids[0]) == _state(ca, "gq", ids[-1]) == b"waiting"
    bodies = _drain(a, "gq", len(ids))
    assert len(set(bodies)) == len(ids)
    assert len(rows(nodes.url, "SELECT id FROM jobs WHERE queue = 'gq'")) == len(ids)


def test_custom_ids_across_nodes(nodes):
    """A custom id stored through one node is a duplicate on the other, even once its job
    left the node's memory; a numeric custom id moves the shared counter up."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    assert ca.add_job("cq", custom_id="order-1") == b"order-1"
    assert cb.add_job("cq", custom_id="order-1") == b"duplicate"
    assert ca.add_job("cq", custom_id="order-1") == b"duplicate"
    assert cb.add_job("other", custom_id="order-1") == b"order-1"   # per queue
    assert ca.add_job("cq", custom_id="500") == b"500"
    assert cb.add_job("cq") == b"501"
    assert ca.add_job("cq") == b"502"
    assert cb.add_job("cq", custom_id="500") == b"duplicate"
    # one job per id in the database
    r = rows(nodes.url, "SELECT uid FROM jobs WHERE queue = 'cq' ORDER BY uid")
    assert [u for (u,) in r] == ["glide:{cq}:500", "glide:{cq}:501", "glide:{cq}:502",
                                 "glide:{cq}:order-1"]


def test_reads_see_every_node(nodes):
    """Jobs added through a and b read the same through either node (HGETALL, HGET, EXISTS,
    XLEN, ZCARD): waiting in the database, active on a worker of a, completed there."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    j1 = ca.add_job("rq", data='{"x":1}')
    j2 = cb.add_job("rq", data='{"x":2}')
    ca.add_job("rq", data='{"x":3}', delay=60_000, ts=now_ms())
    for c in (ca, cb):
        h = c.call("HGETALL", f"glide:{{rq}}:job:{j1.decode()}")
        d = dict(zip(h[::2], h[1::2]))
        assert d[b"id"] == j1 and d[b"data"] == b'{"x":1}' and d[b"state"] == b"waiting"
        assert c.call("EXISTS", f"glide:{{rq}}:job:{j2.decode()}", "glide:{rq}:job:99") == 1
        assert c.call("XLEN", "glide:{rq}:stream") == 2
        assert c.call("ZCARD", "glide:{rq}:scheduled") == 1
        # a job that exists nowhere reads as nil (the nil reply once never came)
        assert c.call("HGET", "glide:{rq}:job:999", "state") is None
    # a worker on a holds j1 (active: still in the stream), then completes it
    w = bean(a, "rq")
    job = w.reserve(timeout=5)
    assert job.body == b'{"x":1}'
    assert wait_until(lambda: _state(cb, "rq", j1) == b"active", timeout=5)
    w.delete(job)
    assert wait_until(lambda: _state(cb, "rq", j1) == b"completed", timeout=5)
    assert cb.call("ZCARD", "glide:{rq}:completed") == 1
    assert cb.call("XLEN", "glide:{rq}:stream") == 1
    # redis-py, a real client, on b
    r = redis.Redis(port=b.glide_port)
    assert r.hget(f"glide:{{rq}}:job:{j2.decode()}", "state") == b"waiting"
    assert r.zcard("glide:{rq}:completed") == 1
    r.close()


def test_the_id_key_reads_the_counter_without_writing_it(nodes):
    """GET of a queue's id key on a shared node reads the shared counter and writes nothing:
    a queue no node added to reads nil and leaves no counter row (it upserted one, n = 0,
    before); after addJobs on b it reads b's last id on a, in a pipeline right behind an
    addJob on a too."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    assert ca.call("GET", "glide:{fresh}:id") is None
    assert rows(nodes.url, "SELECT key FROM jobgate_meta WHERE key LIKE 'ctr:%%'") == []
    for _ in range(3):
        cb.add_job("cq")
    assert ca.call("GET", "glide:{cq}:id") == b"3"
    assert len(rows(nodes.url, "SELECT key FROM jobgate_meta WHERE key LIKE 'ctr:%%'")) == 1
    # pipelined: the read waits for the take of the addJob before it
    keys = job_keys("cq")
    ca.send(["FCALL", "glidemq_addJob", len(keys), *keys, *add_job_args()],
            ["GET", "glide:{cq}:id"])
    assert ca.reply() == b"4" and ca.reply() == b"4"


def test_pause_and_resume_on_every_node(nodes):
    """glidemq_pause through a holds a beanstalk worker on b back; resume through b lets a
    worker on a take the job."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    ca.add_job("pq", data='"first"')
    assert ca.fcall("glidemq_pause", meta_keys("pq"), []) == 1
    wb = bean(b, "pq")
    try:
        wb.reserve(timeout=1)
        raise AssertionError("a paused queue gave a job")
    except greenstalk.TimedOutError:
        pass
    assert cb.fcall("glidemq_resume", meta_keys("pq"), []) == 1
    assert _drain(a, "pq", 1) == [b'"first"']
    wb.close()


def _dd(c: RespConn, q: str, did: str, mode: str, ttl: int = 0, **kw):
    """glidemq_dedup of dedup id `did` in `mode` (ttl ms) with addJob's arguments `kw`."""
    return c.fcall("glidemq_dedup", dedup_keys(q), [did, str(ttl), mode, *add_job_args(**kw)])


def test_dedup_simple_across_nodes(nodes):
    """A simple dedup id used through a skips on b while its job waits in the database and
    while a worker of b holds it; once that worker completed it, a adds a new job."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    first = _dd(ca, "dq", "d1", "simple", data='"one"')
    assert first == b"1"
    assert _dd(cb, "dq", "d1", "simple", data='"two"') == b"skipped"
    w = bean(b, "dq")
    job = w.reserve(timeout=5)
    assert job.body == b'"one"'
    assert _dd(ca, "dq", "d1", "simple") == b"skipped"   # active on b
    w.delete(job)
    assert wait_until(lambda: _state(ca, "dq", first) == b"completed", timeout=5)
    again = _dd(ca, "dq", "d1", "simple", data='"three"')
    assert again not in (b"skipped", first) and again.isdigit()
    assert _dd(cb, "dq", "d1", "simple") == b"skipped"
    assert _drain(b, "dq", 1) == [b'"three"']
    w.close()


def test_dedup_throttle_across_nodes(nodes):
    """A throttle window opened through a holds on b; a timestamp past it adds."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    t = now_ms()
    assert _dd(ca, "tq", "t1", "throttle", ttl=60_000, ts=t) == b"1"
    assert _dd(cb, "tq", "t1", "throttle", ttl=60_000, ts=t + 1_000) == b"skipped"
    assert _dd(cb, "tq", "t1", "throttle", ttl=60_000, ts=t + 70_000) == b"3"


def test_dedup_debounce_across_nodes(nodes):
    """A delayed job debounced through a, sent again through b, is replaced there: the first
    is gone from the database, the second waits; an active one is kept (skipped)."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    t = now_ms()
    first = _dd(ca, "bq", "b1", "debounce", delay=60_000, ts=t, data='"old"')
    assert first == b"1"
    second = _dd(cb, "bq", "b1", "debounce", delay=60_000, ts=t + 10, data='"new"')
    assert second == b"2"
    assert _state(ca, "bq", first) is None and _state(ca, "bq", second) == b"delayed"
    assert [u for (u,) in rows(nodes.url, "SELECT uid FROM jobs WHERE queue = 'bq'")] == \
        ["glide:{bq}:2"]
    # an active job is kept
    third = _dd(ca, "bq", "b2", "debounce", data='"run"')
    w = bean(b, "bq")
    job = w.reserve(timeout=5)
    assert job.body == b'"run"'
    assert _dd(ca, "bq", "b2", "debounce", data='"later"') == b"skipped"
    assert _state(cb, "bq", third) == b"active"
    w.close()


def _flow(c, parent_q, children, custom=""):
    ks = job_keys(parent_q)
    args = ["parent", "{}", "{}", now_ms(), 0, 0, 0, len(children), custom]
    for q, name in children:
        ks += job_keys(q)
        args += [name, '"c"', "{}", 0, 0, 0, f"glide:{{{q}}}", parent_q, ""]
    args += [0]
    return c.call("FCALL", "glidemq_addFlow", len(ks), *ks, *args)


def test_a_flow_across_nodes(nodes):
    """A flow added through a takes its ids from the shared counters (b's jobs before it
    count); its children completed by a worker on b release the parent, which a worker on
    b then gets; the same custom parent id through b is a duplicate."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    assert cb.add_job("fp") == b"1"
    assert cb.add_job("fc") == b"1"
    assert _flow(ca, "fp", [("fc", "x"), ("fc", "y")], custom="P") == b'["P","2","3"]'
    assert _flow(cb, "fp", [("fc", "z")], custom="P") == b'["duplicate"]'
    assert _state(cb, "fp", "P") == b"waiting-children"
    # b's worker takes fc's three jobs (1 first), completing them
    assert len(_drain(b, "fc", 3)) == 3
    assert wait_until(lambda: _state(ca, "fp", "P") == b"waiting", timeout=10)
    got = sorted(_drain(b, "fp", 2))
    assert got == [b"{}", b"{}"]   # fp:1 and the parent P


def test_a_storage_outage_answers_an_error_and_changes_nothing(nodes):
    """The counter's statement fails (the database refuses writes to jobgate_meta for a
    moment): addJob answers an error, creates nothing, and works again afterwards."""
    (a,) = nodes(1, glide=True)
    ca = _conn(a)
    assert ca.add_job("oq") == b"1"
    _exec(nodes.url, "ALTER TABLE jobgate_meta ADD CONSTRAINT jg_test_no CHECK "
          "(key NOT LIKE 'ctr:%' OR value < 2) NOT VALID")
    r = ca.add_job("oq")
    assert isinstance(r, hiredis.ReplyError) and "storage unavailable" in str(r)
    _exec(nodes.url, "ALTER TABLE jobgate_meta DROP CONSTRAINT jg_test_no")
    assert ca.add_job("oq") == b"2"
    assert len(rows(nodes.url, "SELECT id FROM jobs WHERE queue = 'oq'")) == 2


def test_a_huge_numeric_custom_id_leaves_the_counter(nodes):
    """A numeric custom id beyond a bigint is created and leaves the shared counter (it
    moved it into an overflow before: every later addJob of the queue failed)."""
    (a,) = nodes(1, glide=True)
    c = _conn(a)
    for big in (str(2**63 - 1), "1" + "0" * 25):
        assert c.add_job("ovq", custom_id=big) == big.encode()
    assert c.add_job("ovq") == b"1"
    assert c.add_job("ovq", custom_id="77") == b"77"
    assert c.add_job("ovq") == b"78"


def test_malformed_calls_never_take_a_node_s_own_ids(nodes):
    """An addJob with fewer arguments than the spec's (padded, as Lua reads them) and an
    addFlow whose numChildren reads as a float take their ids from the shared counter, as
    every call does (they took the node's own counter's before: id 1 twice)."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    assert ca.add_job("fq") == b"1"
    assert cb.call("FCALL", "glidemq_addJob", 4, *job_keys("fq"), "n", "{}", "{}") == b"2"
    ks = job_keys("fq")
    assert cb.call("FCALL", "glidemq_addFlow", len(ks), *ks, "parent", "{}", "{}", now_ms(),
                   0, 0, 0, "0.0", "", 0) == b'["3"]'


def test_a_glide_pause_counts_once(nodes):
    """One glidemq_pause is one pause in beanstalk's cmd-pause-tube (it counted two)."""
    (a,) = nodes(1, glide=True)
    c = _conn(a)
    c.add_job("pq")
    assert c.fcall("glidemq_pause", meta_keys("pq"), []) == 1
    g = bean(a, "pq")
    assert g.stats_tube("pq")["cmd-pause-tube"] == 1
    g.close()


def test_a_scoped_client_touches_no_other_queue(pg_url, tmp_path):
    """A connection whose token allows `ok*` only: an addJob to another queue answers
    NOPERM and moves no counter; reads of another queue's keys read as missing, as on one
    server; its own queue works."""
    cfg = tmp_path / "scoped.yaml"
    cfg.write_text("database: {mode: shared, poll_interval_ms: 60000}\n"
                   "access:\n  principals:\n    - {token: s3cret, queues: ['ok*'], name: t}\n"
                   "listeners:\n  beanstalk: {open: true}\n  glidemq: {open: true}\n")
    from .support import Server, free_port
    gport = free_port()
    s = Server(pg_url, extra=["--config", str(cfg), "--listen", f"glidemq=127.0.0.1:{gport}"])
    try:
        c = RespConn(gport)
        assert c.call("AUTH", "s3cret") == b"OK"
        assert c.call("FUNCTION", "LOAD", "REPLACE", LIBRARY_STANDIN) == b"glidemq"
        r = c.add_job("secret", custom_id=str(10**17))
        assert isinstance(r, hiredis.ReplyError) and str(r).startswith("NOPERM")
        assert rows(pg_url, "SELECT key FROM jobgate_meta WHERE key LIKE 'ctr:%%'") == []
        assert c.call("XLEN", "glide:{secret}:stream") == 0
        assert c.call("GET", "glide:{secret}:id") is None
        assert c.call("EXISTS", "glide:{secret}:job:1", "glide:{ok1}:job:1") == 0
        assert c.add_job("ok1") == b"1"
        assert c.call("EXISTS", "glide:{secret}:job:1", "glide:{ok1}:job:1") == 1
        assert c.call("XLEN", "glide:{ok1}:stream") == 1
    finally:
        s.stop()


def test_valkey_glide_clients_on_two_nodes(nodes):
    """valkey-glide (the client glide-mq's is a fork of), one per node: a pipeline of
    addJobs (glide-mq's addBulk) through each, a custom id through both, and a read of the
    other node's job (RESP3)."""
    from glide import Batch

    from .test_glidemq_clients import _glide_run
    a, b = nodes(2, glide=True)

    def bulk(node, tag: str, custom: str):
        async def body(c):
            assert await c.function_load(LIBRARY_STANDIN, replace=True) == b"glidemq"
            batch = Batch(is_atomic=False)
            for i in range(20):
                batch.fcall("glidemq_addJob", keys=job_keys("vq"),
                            arguments=add_job_args("n", f'"{tag}{i}"'))
            ids = await c.exec(batch, raise_on_error=True)
            dup = await c.fcall("glidemq_addJob", keys=job_keys("vq"),
                                arguments=add_job_args("n", "{}", custom_id=custom))
            state = await c.custom_command(["HGET", "glide:{vq}:job:1", "state"])
            return ids, dup, state
        return _glide_run(node.glide_port, 3, body)[0]
    ids_a, dup_a, _ = bulk(a, "a", "same")
    ids_b, dup_b, state = bulk(b, "b", "same")
    assert dup_a == b"same" and dup_b == b"duplicate"
    assert len(set(ids_a + ids_b)) == 40 and state == b"waiting"
    assert len(_drain(a, "vq", 41)) == 41


def test_a_pipeline_takes_its_ids_together(nodes):
    """One write of addJobs on two queues, with custom ids (one stored through the other
    node, one twice in the write, a numeric one) and a malformed call between them: each
    answers as one at a time would, and ids stay unique with the other node's."""
    a, b = nodes(2, glide=True)
    ca, cb = _conn(a), _conn(b)
    assert cb.add_job("p1", custom_id="taken") == b"taken"
    assert cb.add_job("p1") == b"1"
    calls = [("p1", {}), ("p2", {}), ("p1", {"custom_id": "taken"}),
             ("p1", {"custom_id": "c1"}), ("p1", {"custom_id": "c1"}), ("p1", {}),
             ("p2", {"custom_id": "40"}), ("p2", {})]
    cmds = [("FCALL", "glidemq_addJob", 4, *job_keys(q), *add_job_args(**kw))
            for q, kw in calls]
    cmds.insert(3, ("FCALL", "glidemq_addJob", 2, "x", "y"))   # too few keys
    ca.send(*cmds)
    got = [ca.reply() for _ in cmds]
    assert isinstance(got[3], hiredis.ReplyError)
    del got[3]
    # as a single server answers them, one at a time
    assert got == [b"2", b"1", b"duplicate", b"c1", b"duplicate", b"3", b"40", b"41"]
    assert cb.add_job("p1") == b"4" and cb.add_job("p2") == b"42"
    n = len(rows(nodes.url, "SELECT id FROM jobs WHERE queue IN ('p1', 'p2')"))
    assert n == 2 + 6 + 2
