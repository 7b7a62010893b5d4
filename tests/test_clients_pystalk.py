"""jobgate under pystalk, a real beanstalk client library users have (and next to greenstalk).

Every test runs a real `jobgate serve` subprocess (SQLite, durability commit: the `server`
fixture) on 127.0.0.1 and talks to it over real sockets through the client's public API. Values
and types are asserted as the client returns them (pystalk: PyYAML).
"""
from __future__ import annotations

import greenstalk
import pytest
from pystalk import BeanstalkClient, BeanstalkError

from .support import ADDR_HOST, Raw


@pytest.fixture
def ps(server):
    """A pystalk client (bytes bodies) with a socket timeout so a hang fails instead of blocking."""
    c = BeanstalkClient(ADDR_HOST, server.port, socket_timeout=10)
    yield c
    c.close()


# ============================================================================== pystalk

class TestPystalk:
    def test_put_reserve_delete(self, ps):
        status, jid = ps.put_job("hello")
        assert status == b"INSERTED" and isinstance(jid, int)
        job = ps.reserve_job(1)
        assert job.job_id == jid and job.job_data == b"hello"
        ps.delete_job(job)
        with pytest.raises(BeanstalkError) as e:
            ps.delete_job(jid)
        assert e.value.message == "NOT_FOUND"
        with pytest.raises(BeanstalkError) as e:
            ps.reserve_job(0)
        assert e.value.message == "TIMED_OUT"

    def test_auto_decode(self, server):
        c = BeanstalkClient(ADDR_HOST, server.port, socket_timeout=10, auto_decode=True)
        try:
            c.put_job("żółw")
            assert c.reserve_job(1).job_data == "żółw"
        finally:
            c.close()

    def test_tubes_watch_ignore(self, ps):
        _, a = ps.put_job_into("alpha", b"in alpha")
        _, b = ps.put_job_into("beta", b"in beta")
        assert ps.current_tube == "default"
        assert set(ps.list_tubes()) >= {"default", "alpha", "beta"}
        ps.watch("beta")  # pystalk ignores default on the first watch
        assert ps.watchlist == {"beta"}
        assert ps.reserve_job(1).job_id == b
        ps.watch("alpha")
        ps.ignore("beta")
        assert ps.reserve_job(1).job_id == a
        with ps.using("gamma") as inserter:
            _, g = inserter.put_job(b"in gamma")
        assert ps.current_tube == "default"
        assert ps.stats_job(g)["tube"] == "gamma"

    def test_release_bury_kick(self, ps):
        _, jid = ps.put_job(b"x", pri=10)
        job = ps.reserve_job(1)
        assert ps.release_job(job, pri=20, delay=100) == b"RELEASED"
        st = ps.stats_job(jid)
        assert st["state"] == "delayed" and st["pri"] == 20 and st["delay"] == 100
        ps.kick_job(jid)
        job = ps.reserve_job(1)
        assert ps.bury_job(job, pri=30) == b"BURIED"
        assert ps.peek_buried().job_id == jid
        assert ps.kick_jobs(5) == (b"KICKED", 1)
        st = ps.stats_job(jid)
        assert (st["state"], st["pri"], st["kicks"], st["buries"], st["releases"]) == \
            ("ready", 30, 2, 1, 1)
        with pytest.raises(BeanstalkError) as e:
            ps.kick_job(jid)
        assert e.value.message == "NOT_FOUND"

    def test_iterators(self, ps):
        ids = [ps.put_job(f"r{i}")[1] for i in range(5)]
        dids = [ps.put_job(f"d{i}", delay=100 + i)[1] for i in range(2)]
        assert ps.peek_ready().job_id == ids[0]
        assert ps.peek_delayed().job_id == dids[0]
        got = [j.job_id for j in ps.reserve_iter()]
        assert got == ids
        for jid in got:
            ps.bury_job(jid)
        assert ps.peek_buried().job_id == ids[0]
        # peek_*_iter loops while the peek finds something: with no state change it would spin,
        # so only check the first item and that an empty state ends immediately
        assert list(ps.peek_ready_iter()) == []

    def test_stats_types(self, server, ps):
        ps.put_job(b"x")
        st = ps.stats()
        assert isinstance(st, dict)
        assert st["current-jobs-ready"] == 1 and isinstance(st["current-jobs-ready"], int)
        assert st["pid"] == server.proc.pid
        # YAML: a quoted version stays a string ("1.12", not the float 1.12)
        assert st["version"] == "1.12"
        assert st["draining"] is False
        assert isinstance(st["hostname"], str) and st["hostname"]
        assert isinstance(st["os"], str)  # unquoted '#...' would be a YAML comment -> None
        assert isinstance(st["platform"], str)
        assert isinstance(st["rusage-utime"], float)
        assert isinstance(st["uptime"], int)
        assert st["max-job-size"] == 65535
        assert st["binlog-max-size"] == 10485760

    def test_stats_job_and_tube(self, ps):
        _, jid = ps.put_job_into("ptube", b"x", pri=3, ttr=45)
        sj = ps.stats_job(jid)
        assert sj == {**sj, "id": jid, "tube": "ptube", "state": "ready", "pri": 3, "ttr": 45,
                      "delay": 0, "reserves": 0, "file": 0}
        assert all(isinstance(sj[k], int) for k in sj if k not in ("tube", "state"))
        st = ps.stats_tube("ptube")
        assert st["name"] == "ptube"
        assert st["current-jobs-ready"] == 1 and st["current-jobs-urgent"] == 1
        assert st["total-jobs"] == 1
        with pytest.raises(BeanstalkError) as e:
            ps.stats_tube("nonexistent")
        assert e.value.message == "NOT_FOUND"

    def test_numeric_looking_tube_name_is_string(self, ps):
        # stats-tube quotes the name, so PyYAML keeps "123" a string and "1.5" not a float
        for name in ("123", "1.5"):
            ps.put_job_into(name, b"x")
            st = ps.stats_tube(name)
            assert st["name"] == name
            _, jid = ps.put_job_into(name, b"y")
            assert ps.stats_job(jid)["tube"] == name

    def test_pause_unpause(self, ps):
        _, jid = ps.put_job(b"p")
        assert ps.pause_tube("default", 3600) == b"PAUSED"
        with pytest.raises(BeanstalkError) as e:
            ps.reserve_job(0)
        assert e.value.message == "TIMED_OUT"
        assert ps.stats_tube("default")["pause"] == 3600
        assert ps.unpause_tube("default") == b"PAUSED"
        assert ps.reserve_job(1).job_id == jid

    def test_binary_and_large(self, ps):
        body = bytes(range(256)) * 200  # 51200 bytes
        _, jid = ps.put_job(body)
        job = ps.reserve_job(1)
        assert job.job_id == jid and job.job_data == body
        with pytest.raises(BeanstalkError) as e:
            ps.put_job(b"z" * 70000)
        assert e.value.message == "JOB_TOO_BIG"

    def test_many_jobs(self, ps):
        n = 1000
        ids = [ps.put_job(b"%d" % i)[1] for i in range(n)]
        for i, jid in enumerate(ids):
            job = ps.reserve_job(0)
            assert job.job_id == jid and job.job_data == b"%d" % i
            ps.delete_job(job)
        assert ps.stats()["current-jobs-ready"] == 0

    def test_greenstalk_and_pystalk_share_jobs(self, server, ps):
        with greenstalk.Client((ADDR_HOST, server.port), encoding=None) as g:
            jid = g.put(b"from greenstalk", priority=7)
            job = ps.reserve_job(1)
            assert job.job_id == jid and job.job_data == b"from greenstalk"
            ps.release_job(job, pri=8)
            j2 = g.reserve(timeout=1)
            assert j2.id == jid
            assert g.stats_job(jid)["pri"] == 8


def test_raw_and_client_agree_on_stats_framing(server, gs):
    """The client's parse agrees with the raw bytes: OK <n> counts the YAML exactly."""
    r = Raw(server.port)
    try:
        frame = r.cmd(b"stats\r\n")
        head, body = frame.split(b"\r\n", 1)
        assert int(head.split()[1]) == len(body) - 2
        assert body.startswith(b"---\n") and body.endswith(b"\n\r\n")
        assert gs.stats()["current-connections"] == 2
    finally:
        r.close()
