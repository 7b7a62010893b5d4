"""jobgate under greenstalk, a real beanstalk client library users have.

Every test runs a real `jobgate serve` subprocess (SQLite, durability commit: the `server`
fixture) on 127.0.0.1 and talks to it over real sockets through the client's public API. Values
and types are asserted as the client returns them (greenstalk: its own `key: value` parser, ints
where the text is an integer, quotes stripped).
"""
from __future__ import annotations

import os
import threading
import time

import greenstalk
import pytest

from .server_support import wait_until
from .support import ADDR_HOST


@pytest.fixture
def gsb(server):
    """A greenstalk client with bytes bodies (encoding=None)."""
    c = greenstalk.Client((ADDR_HOST, server.port), encoding=None)
    yield c
    c.close()


def _job_state_gs(c, jid):
    return c.stats_job(jid)["state"]


def _wait_stat(c, key: str, value, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.stats()[key] == value:
            return
        time.sleep(0.02)
    raise AssertionError(f"stats {key} never became {value!r}")


# ============================================================================ greenstalk

class TestGreenstalk:
    def test_put_reserve_delete(self, gs):
        a = gs.put("hello")
        b = gs.put("world")
        assert isinstance(a, int) and b == a + 1
        job = gs.reserve(timeout=1)
        assert (job.id, job.body) == (a, "hello")
        gs.delete(job)
        job2 = gs.reserve(timeout=1)
        assert (job2.id, job2.body) == (b, "world")
        gs.delete(job2.id)
        with pytest.raises(greenstalk.NotFoundError):
            gs.delete(a)
        with pytest.raises(greenstalk.NotFoundError):
            gs.stats_job(a)
        with pytest.raises(greenstalk.TimedOutError):
            gs.reserve(timeout=0)

    def test_unicode_body_roundtrip(self, gs):
        body = "grüße, 世界 \u2603"
        jid = gs.put(body)
        assert gs.peek(jid).body == body
        assert gs.reserve(timeout=1).body == body

    def test_use_watch_ignore(self, server):
        with greenstalk.Client((ADDR_HOST, server.port), use="prod", watch=["w1", "w2"]) as c:
            assert c.using() == "prod"
            assert sorted(c.watching()) == ["w1", "w2"]
            assert c.watch("w3") == 3
            assert c.watch("w3") == 3
            assert c.ignore("w3") == 2
            assert c.ignore("w1") == 1
            with pytest.raises(greenstalk.NotIgnoredError):
                c.ignore("w2")
            assert c.watching() == ["w2"]
            jid = c.put("to prod")
            tubes = c.tubes()
            assert "prod" in tubes and "default" in tubes and "w2" in tubes
            # the consumer watches w2 only: the job in prod is not reserved
            with pytest.raises(greenstalk.TimedOutError):
                c.reserve(timeout=0)
            c.watch("prod")
            job = c.reserve(timeout=1)
            assert job.id == jid and job.body == "to prod"
            assert c.stats_job(job)["tube"] == "prod"
            c.delete(job)

    def test_default_tube_after_connect(self, gs):
        assert gs.using() == "default"
        assert gs.watching() == ["default"]
        assert gs.tubes() == ["default"]

    def test_release_with_delay(self, gs):
        jid = gs.put("later", priority=5)
        job = gs.reserve(timeout=1)
        gs.release(job, priority=7, delay=1)
        st = gs.stats_job(jid)
        assert st["state"] == "delayed"
        assert st["delay"] == 1 and st["pri"] == 7 and st["releases"] == 1
        assert st["time-left"] in (0, 1)
        assert gs.peek_delayed().id == jid
        with pytest.raises(greenstalk.TimedOutError):
            gs.reserve(timeout=0)
        # a functional timeout: the delay expires within the reserve's 5 s
        job = gs.reserve(timeout=5)
        assert job.id == jid
        st = gs.stats_job(jid)
        assert (st["state"], st["reserves"], st["releases"]) == ("reserved", 2, 1)
        gs.release(job)  # greenstalk default priority 2**16, no delay
        st = gs.stats_job(jid)
        assert (st["state"], st["pri"], st["delay"], st["releases"]) == ("ready", 65536, 0, 2)

    def test_bury_kick(self, gs):
        ids = [gs.put(f"b{i}") for i in range(3)]
        for _ in ids:
            gs.bury(gs.reserve(timeout=1), priority=9)
        assert gs.peek_buried().id == ids[0]
        st = gs.stats_job(ids[1])
        assert (st["state"], st["pri"], st["buries"]) == ("buried", 9, 1)
        assert gs.stats_tube("default")["current-jobs-buried"] == 3
        assert gs.kick(2) == 2
        assert gs.peek_buried().id == ids[2]
        assert [gs.stats_job(i)["state"] for i in ids] == ["ready", "ready", "buried"]
        assert gs.stats_job(ids[0])["kicks"] == 1
        assert gs.kick(10) == 1
        assert gs.kick(10) == 0
        with pytest.raises(greenstalk.NotFoundError):
            gs.peek_buried()

    def test_kick_prefers_buried_then_delayed(self, gs):
        d = gs.put("delayed", delay=100)
        gs.put("to bury")
        gs.bury(gs.reserve(timeout=1))
        assert gs.kick(10) == 1  # only the buried one
        assert gs.stats_job(d)["state"] == "delayed"
        assert gs.kick(10) == 1  # now the delayed one
        st = gs.stats_job(d)
        assert (st["state"], st["kicks"]) == ("ready", 1)

    def test_kick_job(self, gs):
        delayed = gs.put("d", delay=100)
        buried = gs.put("b")
        gs.bury(gs.reserve_job(buried))
        ready = gs.put("r")
        gs.kick_job(delayed)
        gs.kick_job(greenstalk.Job(buried, "b"))
        assert _job_state_gs(gs, delayed) == "ready"
        assert _job_state_gs(gs, buried) == "ready"
        with pytest.raises(greenstalk.NotFoundError):
            gs.kick_job(ready)
        with pytest.raises(greenstalk.NotFoundError):
            gs.kick_job(10**9)
        reserved = gs.reserve_job(ready)
        with pytest.raises(greenstalk.NotFoundError):
            gs.kick_job(reserved)

    def test_reserve_job(self, gs):
        a = gs.put("a")
        b = gs.put("b", delay=100)
        job = gs.reserve_job(b)
        assert (job.id, job.body) == (b, "b")
        assert gs.stats_job(b)["state"] == "reserved"
        with pytest.raises(greenstalk.NotFoundError):
            gs.reserve_job(b)
        with pytest.raises(greenstalk.NotFoundError):
            gs.reserve_job(10**9)
        assert gs.reserve(timeout=0).id == a

    def test_peeks(self, gs):
        with pytest.raises(greenstalk.NotFoundError):
            gs.peek_ready()
        with pytest.raises(greenstalk.NotFoundError):
            gs.peek_delayed()
        with pytest.raises(greenstalk.NotFoundError):
            gs.peek_buried()
        with pytest.raises(greenstalk.NotFoundError):
            gs.peek(1)
        low = gs.put("low", priority=100)
        high = gs.put("high", priority=1)
        gs.put("high too", priority=1)
        d1 = gs.put("d1", delay=50)
        gs.put("d2", delay=10)
        d3 = gs.put("d3", delay=5)
        assert gs.peek_ready().id == high
        assert gs.peek_delayed().id == d3
        assert gs.peek(low).body == "low"
        assert gs.peek(d1).body == "d1"
        gs.use("other")
        with pytest.raises(greenstalk.NotFoundError):
            gs.peek_ready()  # peek-ready looks at the used tube only
        assert gs.peek(low).id == low  # peek <id> looks everywhere

    def test_stats_types_and_values(self, server, gs):
        gs.put("x")
        gs.put("y", delay=100)
        st = gs.stats()
        expected_keys = set(greenstalk.Stats.__annotations__)
        assert expected_keys <= set(st), expected_keys - set(st)
        for k, t in greenstalk.Stats.__annotations__.items():
            if t is int:
                assert isinstance(st[k], int), (k, st[k])
        assert st["current-jobs-ready"] == 1
        assert st["current-jobs-delayed"] == 1
        assert st["cmd-put"] == 2
        assert st["total-jobs"] == 2
        assert st["max-job-size"] == 65535
        assert st["current-connections"] == 1
        assert st["current-producers"] == 1
        assert st["pid"] == server.proc.pid
        assert st["version"] == "1.12"
        assert st["draining"] == "false"
        assert isinstance(st["hostname"], str) and st["hostname"]
        assert isinstance(st["os"], str)
        assert isinstance(st["platform"], str)
        assert isinstance(st["rusage-utime"], str) and float(st["rusage-utime"]) >= 0
        assert isinstance(st["id"], (str, int))
        assert st["cmd-stats"] == 1

    def test_stats_job(self, gs):
        jid = gs.put("job", priority=42, ttr=30)
        st = gs.stats_job(jid)
        assert set(st) == set(greenstalk.StatsJob.__annotations__)
        assert st["id"] == jid and isinstance(st["id"], int)
        assert st["tube"] == "default"
        assert st["state"] == "ready"
        assert (st["pri"], st["ttr"], st["delay"], st["time-left"], st["file"]) == (42, 30, 0, 0, 0)
        assert (st["reserves"], st["timeouts"], st["releases"], st["buries"], st["kicks"]) == \
            (0, 0, 0, 0, 0)
        assert isinstance(st["age"], int) and st["age"] >= 0
        gs.reserve(timeout=1)
        st = gs.stats_job(jid)
        assert st["state"] == "reserved" and st["reserves"] == 1
        assert st["time-left"] in (28, 29)

    def test_stats_tube(self, server, gs):
        gs.use("tt")
        gs.put("a", priority=0)
        gs.put("b", priority=5000)
        gs.put("c", delay=100)
        gs.watch("tt")
        gs.ignore("default")
        gs.bury(gs.reserve(timeout=1))
        st = gs.stats_tube("tt")
        assert set(st) == set(greenstalk.StatsTube.__annotations__)
        assert st["name"] == "tt"
        assert st["current-jobs-urgent"] == 0  # the urgent one got buried
        assert st["current-jobs-ready"] == 1
        assert st["current-jobs-delayed"] == 1
        assert st["current-jobs-buried"] == 1
        assert st["current-jobs-reserved"] == 0
        assert st["total-jobs"] == 3
        assert st["current-using"] == 1 and st["current-watching"] == 1
        assert st["current-waiting"] == 0
        assert (st["pause"], st["pause-time-left"], st["cmd-pause-tube"]) == (0, 0, 0)
        with pytest.raises(greenstalk.NotFoundError):
            gs.stats_tube("no-such-tube")

    def test_pause_tube(self, server, gs):
        gs.use("p")
        gs.watch("p")
        gs.ignore("default")
        jid = gs.put("paused job")
        gs.pause_tube("p", 2)
        st = gs.stats_tube("p")
        assert st["pause"] == 2 and st["pause-time-left"] in (0, 1) and st["cmd-pause-tube"] == 1
        with pytest.raises(greenstalk.TimedOutError):
            gs.reserve(timeout=0)
        assert gs.peek_ready().id == jid  # peek ignores the pause
        job = gs.reserve(timeout=10)  # waits for the pause to end
        assert job.id == jid
        st = gs.stats_tube("p")
        assert st["pause"] == 0 and st["pause-time-left"] == 0
        with pytest.raises(greenstalk.NotFoundError):
            gs.pause_tube("never-seen", 1)

    def test_pause_tube_zero_unpauses(self, gs):
        jid = gs.put("x")
        gs.pause_tube("default", 3600)
        with pytest.raises(greenstalk.TimedOutError):
            gs.reserve(timeout=0)
        gs.pause_tube("default", 0)
        assert gs.reserve(timeout=0).id == jid

    def test_touch(self, clocked):
        """On the in-process server's manual clock (tests/inproc.py): 1.3 s pass exactly."""
        gs = greenstalk.Client((ADDR_HOST, clocked.ports["beanstalk"]))
        self._clocked_touch(clocked, gs)
        gs.close()

    def _clocked_touch(self, clocked, gs):
        jid = gs.put("t", ttr=3)
        job = gs.reserve(timeout=1)
        clocked.advance(1300)
        assert gs.stats_job(jid)["time-left"] == 1
        gs.touch(job)
        assert gs.stats_job(jid)["time-left"] == 2
        with greenstalk.Client((ADDR_HOST, clocked.ports["beanstalk"])) as other:
            with pytest.raises(greenstalk.NotFoundError):
                other.touch(job)
        gs.delete(job)
        with pytest.raises(greenstalk.NotFoundError):
            gs.touch(job)

    def test_deadline_soon(self, gs):
        gs.put("short", ttr=1)
        job = gs.reserve(timeout=1)
        with pytest.raises(greenstalk.DeadlineSoonError):
            gs.reserve(timeout=5)
        gs.delete(job)

    def test_reserve_with_timeout_gets_job_put_later(self, server, gs):
        got = {}

        def consumer():
            with greenstalk.Client((ADDR_HOST, server.port)) as c:
                try:
                    got["job"] = c.reserve(timeout=10)
                except Exception as e:  # reported below
                    got["err"] = e

        t = threading.Thread(target=consumer)
        t.start()
        _wait_stat(gs, "current-waiting", 1)
        jid = gs.put("wake up")
        t.join(15)
        assert not t.is_alive()
        assert "err" not in got, got.get("err")
        assert got["job"].id == jid and got["job"].body == "wake up"

    def test_reserve_timeout_expires(self, gs):
        t0 = time.monotonic()
        with pytest.raises(greenstalk.TimedOutError):
            gs.reserve(timeout=1)
        assert time.monotonic() - t0 >= 0.9  # functional: it did wait for the timeout

    def test_binary_bodies(self, gsb):
        bodies = [bytes(range(256)), b"", b"\r\n", b"a\r\nput 0 0 1 1\r\nx\r\n", b"\x00" * 1000,
                  b"\xff" * 65535]
        ids = [gsb.put(b) for b in bodies]
        for jid, b in zip(ids, bodies):
            assert gsb.peek(jid).body == b
        for jid, b in zip(ids, bodies):
            job = gsb.reserve(timeout=1)
            assert job.id == jid and job.body == b
            gsb.delete(job)

    def test_job_too_big(self, gsb):
        with pytest.raises(greenstalk.JobTooBigError):
            gsb.put(b"x" * 65536)
        assert gsb.put(b"still works") > 0

    def test_many_jobs_fifo_and_priority(self, gs):
        n = 2000
        ids = [gs.put(f"job-{i}", priority=1000) for i in range(n)]
        urgent = gs.put("urgent", priority=0)
        assert ids == list(range(ids[0], ids[0] + n))
        assert gs.stats()["current-jobs-ready"] == n + 1
        assert gs.reserve(timeout=0).id == urgent
        for i, jid in enumerate(ids):
            job = gs.reserve(timeout=0)
            assert (job.id, job.body) == (jid, f"job-{i}")
            gs.delete(job)
        st = gs.stats()
        assert st["current-jobs-ready"] == 0 and st["current-jobs-reserved"] == 1
        assert st["cmd-delete"] == n

    def test_cross_connection_ownership(self, server, gs):
        jid = gs.put("mine")
        job = gs.reserve(timeout=1)
        with greenstalk.Client((ADDR_HOST, server.port)) as other:
            for op in (lambda: other.delete(jid), lambda: other.release(job),
                       lambda: other.bury(job), lambda: other.touch(job)):
                with pytest.raises(greenstalk.NotFoundError):
                    op()
            assert other.stats_job(jid)["state"] == "reserved"
        gs.delete(job)

    def test_unix_socket_client(self, tmp_path, sqlite_url):
        from .support import Server
        path = str(tmp_path / "gs.sock")
        s = Server(sqlite_url, extra=["--listen", f"beanstalk=unix:{path}"])
        try:
            # two --listen flags: the TCP one Server waits on, and the unix socket, which may
            # be bound a moment after the TCP one accepts
            wait_until(lambda: os.path.exists(path), what=f"unix socket {path}")
            with greenstalk.Client(path) as c:
                jid = c.put("over unix")
                assert c.reserve(timeout=1).id == jid
        finally:
            s.stop()


def test_64_workers_and_64_producers_exactly_once(server):
    """The worker's traffic, many connections at once: 64 greenstalk producers put 40 jobs each
    (each put awaited) while 64 greenstalk workers reserve and delete on the same tube. Every
    job is delivered exactly once and deleted; nothing is left behind."""
    producers, workers, per = 64, 64, 40
    total = producers * per
    seen: list[str] = []
    lock = threading.Lock()
    errors: list = []
    done = threading.Event()

    def produce(k: int) -> None:
        try:
            with greenstalk.Client((ADDR_HOST, server.port), use="fleet") as c:
                for i in range(per):
                    c.put(f"{k}-{i}", ttr=120)
        except Exception as e:  # reported below
            errors.append(e)

    def work() -> None:
        try:
            with greenstalk.Client((ADDR_HOST, server.port), watch="fleet") as c:
                while not done.is_set():
                    try:
                        job = c.reserve(timeout=1)
                    except greenstalk.TimedOutError:
                        continue
                    c.delete(job)
                    with lock:
                        seen.append(job.body)
                        if len(seen) >= total:
                            done.set()
        except Exception as e:  # reported below
            errors.append(e)
            done.set()

    threads = ([threading.Thread(target=work) for _ in range(workers)]
               + [threading.Thread(target=produce, args=(k,)) for k in range(producers)])
    for t in threads:
        t.start()
    done.wait(120)
    done.set()
    for t in threads:
        t.join(30)
    assert not errors, errors[:3]
    assert len(seen) == total and len(set(seen)) == total, (len(seen), len(set(seen)))
    assert set(seen) == {f"{k}-{i}" for k in range(producers) for i in range(per)}
    with greenstalk.Client((ADDR_HOST, server.port)) as c:
        st = c.stats()   # the tube itself went away with its last client, as in beanstalkd
        assert (st["current-jobs-ready"], st["current-jobs-reserved"], st["total-jobs"],
                st["cmd-delete"]) == (0, 0, total, total)
