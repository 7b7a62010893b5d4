"""glide-mq durability: a job whose addJob reply arrived survives kill -9 (DESIGN.md "Storage and
durability"; protocols/resp/session.py: replies to write commands wait for the commit), on
SQLite and on PostgreSQL (the `db_url` fixture runs each test on both; PostgreSQL is skipped
without JOBGATE_TEST_PG_URL).

Each test runs a real `jobgate serve` subprocess (tests/resp_support.GlideServer), kills it
with SIGKILL, starts a second one on the same database and inspects it over bunqueue (PULLB
gives each job's glide id `glide:{Q}:<id>` and its data), beanstalk and RESP:

- every acknowledged job is there once, with its bytes; none is there twice;
- the per-queue id counter goes on after the restart (no acknowledged id is handed out
  again), custom ids stay taken, the loaded library stays loaded (state.py);
- dedup records, flow dependencies, pauses and delays (producer clock) survive.
"""
from __future__ import annotations

import threading

import greenstalk
import pytest

from .bunqueue_support import BQ
from .resp_support import (GlideServer, RespConn, add_job_args, dedup_keys, job_keys,
                           load_library, meta_keys, now_ms)


@pytest.fixture
def gservers(tmp_path):
    """`gservers(url, **kw)` starts a GlideServer; every one is stopped (or reaped) at
    teardown."""
    started: list[GlideServer] = []

    def start(url, **kw) -> GlideServer:
        s = GlideServer(url, tmp_path / f"s{len(started)}", **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        if s.alive():
            s.kill()


QUEUES = ("dur-a", "dur-b")


def body_of(k: int, n: int) -> bytes:
    """A distinct body per job (producer k, job n), some not UTF-8, CR LF inside."""
    tail = b"\xff\x00" if n % 7 == 0 else b""
    return b'{"p":%d,"n":%d}\r\n' % (k, n) + tail


def custom_of(k: int, n: int) -> str:
    """Every 25th job of a producer carries a custom id."""
    return f"c-{k}-{n}" if n % 25 == 0 else ""


def kill9_while_adding(s: GlideServer, producers: int, per_write: int, enough: int) -> dict:
    """`producers` RESP connections each pipeline `per_write` FCALL glidemq_addJob per write
    (producer k on queue QUEUES[k % 2]) and read the replies; once `enough` are acknowledged
    the server gets SIGKILL. Returns {(queue, id): body} of every acknowledged job; fails on
    any reply that is not an id."""
    acked: dict = {}
    lock = threading.Lock()
    reached = threading.Event()
    errors: list = []

    def producer(k: int) -> None:
        q = QUEUES[k % 2]
        try:
            c = RespConn(s.glide_port, timeout=30)
        except OSError as e:
            errors.append(e)
            return
        try:
            for batch in range(100_000 // per_write):   # bounded; the kill ends it sooner
                jobs = [(body_of(k, n), custom_of(k, n))
                        for n in range(batch * per_write, (batch + 1) * per_write)]
                c.send(*[["FCALL", "glidemq_addJob", 4, *job_keys(q),
                          *add_job_args("d", b, custom_id=cid)] for b, cid in jobs])
                for b, cid in jobs:
                    rep = c.reply()
                    ok = isinstance(rep, bytes) and (rep == cid.encode() if cid
                                                      else rep.isdigit())
                    if not ok:
                        errors.append(AssertionError(f"addJob answered {rep!r}"))
                        return
                    with lock:
                        assert (q, rep) not in acked, (q, rep)
                        acked[(q, rep)] = b
                        if len(acked) >= enough:
                            reached.set()
        except (EOFError, OSError):
            return                                        # killed mid-stream
        finally:
            c.close()

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(producers)]
    for t in threads:
        t.start()
    reached.wait(120)
    s.kill()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    with lock:
        snapshot = dict(acked)
    assert len(snapshot) >= enough
    return snapshot


def pull_all(port: int, q: str) -> list:
    """Every job of queue `q` through bunqueue PULLB: [(glide id bytes, data bytes)]."""
    c = BQ(port, timeout=30)
    out = []
    prefix = f"glide:{{{q}}}:"
    try:
        while True:
            jobs = c.ok("PULLB", queue=q, count=1000)["jobs"]
            if not jobs:
                return out
            for j in jobs:
                assert j["id"].startswith(prefix), j["id"]
                d = j["data"]
                out.append((j["id"][len(prefix):].encode(),
                            d.encode() if isinstance(d, str) else d))
    finally:
        c.close()


def test_acknowledged_addjobs_survive_kill9_under_pipelined_load(db_url, gservers):
    s = gservers(db_url, bunqueue=True)
    c = RespConn(s.glide_port)
    load_library(c)
    c.close()
    snapshot = kill9_while_adding(s, producers=4, per_write=50, enough=3000)

    s2 = gservers(db_url, bunqueue=True)
    c = RespConn(s2.glide_port, timeout=30)
    # the library stays loaded (no FUNCTION LOAD after the restart)
    assert c.fcall("glidemq_version", [], []) == b"93"
    recovered: dict = {}
    bodies: list = []
    for q in QUEUES:
        for gid, data in pull_all(s2.bunqueue_port, q):
            assert (q, gid) not in recovered, f"job {q}/{gid} twice"
            recovered[(q, gid)] = data
            bodies.append(data)
    lost = sorted(k for k in snapshot if k not in recovered)
    assert not lost, f"{len(lost)} acknowledged jobs lost after kill -9, first {lost[:10]}"
    altered = [k for k in snapshot if recovered[k] != snapshot[k]]
    assert not altered, f"{len(altered)} jobs with other bytes, first {altered[:5]}"
    assert len(set(bodies)) == len(bodies), "a job was stored twice"
    # the per-queue counter goes on: no id handed out before the kill comes back
    for q in QUEUES:
        top = max(int(gid) for (qq, gid) in recovered if qq == q and gid.isdigit())
        new = [c.add_job(q, "after", b"after-%d" % i) for i in range(3)]
        assert all(n.isdigit() and int(n) > top for n in new), (q, top, new)
        assert len(set(new)) == 3
    # acknowledged custom ids stay taken
    customs = [(q, gid) for (q, gid) in snapshot if not gid.isdigit()]
    assert customs
    for q, gid in customs[:20]:
        assert c.add_job(q, "again", b"x", custom_id=gid.decode()) == b"duplicate"
    c.close()


def test_dedup_flow_pause_and_delay_survive_kill9(db_url, gservers):
    s = gservers(db_url, bunqueue=True)
    c = RespConn(s.glide_port)
    load_library(c)
    ts = now_ms()
    # a dedup record whose job is still waiting
    assert c.fcall("glidemq_dedup", dedup_keys("dk-dedup"),
                   ["k", "0", "simple"] + add_job_args("d", b"first")) == b"1"
    # a flow: the parent waits for its child
    keys = job_keys("dk-parent") + job_keys("dk-child")
    argv = ["parent", "parent-data", "{}", str(ts), "0", "0", "0", "1", "",
            "child", "child-data", "{}", "0", "0", "0", "glide:{dk-child}", "dk-parent", "",
            "0"]
    assert c.fcall("glidemq_addFlow", keys, argv) == b'["1","1"]'
    # a paused queue with a ready job
    assert c.add_job("dk-paused", "p", b"paused-job") == b"1"
    assert c.fcall("glidemq_pause", meta_keys("dk-paused"), []) == 1
    # a delayed job due in an hour of the producer's clock
    assert c.add_job("dk-delay", "l", b"later", ts=ts, delay=3_600_000) == b"1"
    c.close()
    s.kill()

    s2 = gservers(db_url, bunqueue=True)
    c = RespConn(s2.glide_port)
    g = greenstalk.Client(("127.0.0.1", s2.port), encoding=None)
    try:
        assert c.fcall("glidemq_dedup", dedup_keys("dk-dedup"),
                       ["k", "0", "simple"] + add_job_args("d", b"second")) == b"skipped"
        # the parent still waits; completing the child releases it
        g.watch("dk-parent")
        g.ignore("default")
        with pytest.raises(greenstalk.TimedOutError):
            g.reserve(timeout=0)
        g.watch("dk-child")
        g.ignore("dk-parent")
        child = g.reserve(timeout=0)
        assert child.body == b"child-data"
        g.delete(child)
        g.watch("dk-parent")
        g.ignore("dk-child")
        assert g.reserve(timeout=0).body == b"parent-data"
        # still paused
        st = g.stats_tube("dk-paused")
        assert st["pause"] > 0 and st["current-jobs-ready"] == 1, st
        g.watch("dk-paused")
        g.ignore("dk-parent")
        with pytest.raises(greenstalk.TimedOutError):
            g.reserve(timeout=0)
        assert c.fcall("glidemq_resume", meta_keys("dk-paused"), []) == 1
        assert g.reserve(timeout=0).body == b"paused-job"
        # still delayed, due at the producer's timestamp + 1 h
        st = g.stats_tube("dk-delay")
        assert st["current-jobs-delayed"] == 1
        g.use("dk-delay")
        job = g.peek_delayed()
        left = g.stats_job(job)["time-left"]
        assert 3_600 - (now_ms() - ts) // 1000 - 2 <= left <= 3_600, left
    finally:
        g.close()
        c.close()
