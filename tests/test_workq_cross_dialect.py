"""One job, two dialects: a real greenstalk client and a real workq socket on the same server.

A workq name is a beanstalk tube; a beanstalk job is addressed through workq by the uid derived
from its id (`6a6f6267-6174-4hhh-8hhh-hhhhhhhhhhhh`, the 72-bit id in hex). Priorities: workq
p <-> beanstalk pri 2^31 - p, clamped to each range. States: failed = buried, completed is gone
for beanstalk (docs/mapping.md, docs/workq.md). One `jobgate serve` subprocess (SQLite,
durability commit, beanstalk and workq listeners) is shared by the module; every test uses its
own tubes, and nothing is ever put into `default`.
"""
from __future__ import annotations

import greenstalk
import pytest

from .support import ADDR_HOST
from .workq_support import (NOT_FOUND, OK, TIMEOUT, add_cmd, complete_cmd,
                            fail_cmd, lease_frame, new_uid, parse_entries, result_frame)

PRI_MID = 2**31


def derived(jid: int) -> str:
    """The workq uid of beanstalk job `jid` (docs/mapping.md)."""
    h = "%018x" % jid
    return f"6a6f6267-6174-4{h[:3]}-8{h[3:6]}-{h[6:]}"


@pytest.fixture
def wq(wq_conns):
    """A raw workq connection."""
    return wq_conns()


@pytest.fixture
def bean(wq_server):
    """`bean(tube)`: a greenstalk client (bytes bodies) using and watching only `tube`."""
    clients: list[greenstalk.Client] = []

    def open_one(tube: str, watch: str | None = None) -> greenstalk.Client:
        c = greenstalk.Client((ADDR_HOST, wq_server.port), encoding=None, use=tube,
                              watch=watch or tube)
        clients.append(c)
        return c
    yield open_one
    for c in clients:
        c.close()


# ================================================================= workq -> beanstalk
def test_workq_add_reserved_by_beanstalk(wq, bean):
    u = new_uid()
    body = b"\x00pay\r\nload\xff"
    assert wq.cmd(add_cmd(u, "xd-add", body, ttr=1500, priority=10)) == OK
    g = bean("xd-add")
    job = g.reserve(timeout=2)
    assert job.body == body
    st = g.stats_job(job)
    assert (st["tube"], st["state"], st["pri"], st["reserves"]) == (
        "xd-add", "reserved", PRI_MID - 10, 1)
    j = wq.inspect_job(u)
    assert (j["state"], j["attempts"]) == ("4", "1")   # a beanstalk reserve is an attempt
    assert wq.cmd(b"lease xd-add 0\r\n") == TIMEOUT    # held by the beanstalk client
    g.delete(job)
    assert wq.inspect_job(u) is None
    with pytest.raises(greenstalk.NotFoundError):
        g.stats_job(job.id)


def test_workq_ttr_in_beanstalk_seconds(wq, bean):
    # Observed: stats-job shows the workq TTR in whole seconds rounded UP (ceil), so a
    # sub-second TTR shows 1, never 0: 200 -> 1, 1000 -> 1, 1001 -> 2, 1500 -> 2, 2000 -> 2.
    g = bean("xd-ttr")
    for ttr, secs in [(200, 1), (1000, 1), (1001, 2), (1500, 2), (2000, 2),
                      (86_400_000, 86_400)]:
        assert wq.cmd(add_cmd(new_uid(), "xd-ttr", ttr=ttr)) == OK
        job = g.peek_ready()
        assert g.stats_job(job)["ttr"] == secs, ttr
        g.delete(job)


def test_workq_priorities_seen_by_beanstalk(wq, bean):
    jobs = [(b"p0", 0), (b"p10", 10), (b"min", -2147483648), (b"max", 2147483647)]
    for body, p in jobs:
        assert wq.cmd(add_cmd(new_uid(), "xd-wpri", body, priority=p)) == OK
    g = bean("xd-wpri")
    seen = []
    for _ in jobs:
        job = g.reserve(timeout=2)
        seen.append((job.body, g.stats_job(job)["pri"]))
        g.delete(job)
    # highest workq priority first; 2^31 + 2^31 is clamped to beanstalk's 2^32 - 1
    assert seen == [(b"max", 1), (b"p10", PRI_MID - 10), (b"p0", PRI_MID),
                    (b"min", 2**32 - 1)]


def test_workq_final_fail_is_buried_and_kick_revives_it(wq, bean):
    u = new_uid()
    assert wq.cmd(add_cmd(u, "xd-fail", b"f")) == OK
    assert wq.cmd(b"lease xd-fail 0\r\n") == lease_frame(u, "xd-fail", 1000, b"f")
    assert wq.cmd(fail_cmd(u, b"bad")) == OK
    g = bean("xd-fail")
    job = g.peek_buried()
    assert job.body == b"f"
    assert g.stats_job(job)["state"] == "buried"
    assert g.stats_tube("xd-fail")["current-jobs-buried"] == 1
    assert g.kick(10) == 1
    j = wq.inspect_job(u)
    assert (j["state"], j["attempts"], j["fails"]) == ("3", "1", "1")
    assert wq.cmd(b"result %s 0\r\n" % u.encode()) == TIMEOUT    # the result was dropped
    assert wq.cmd(b"lease xd-fail 0\r\n") == lease_frame(u, "xd-fail", 1000, b"f")
    assert wq.cmd(complete_cmd(u, b"ok")) == OK
    assert wq.cmd(b"result %s 0\r\n" % u.encode()) == result_frame(u, True, b"ok")


# ================================================================= beanstalk -> workq
def test_beanstalk_put_leased_and_completed_through_workq(wq, bean):
    g = bean("xd-put")
    jid = g.put(b"bean\x00", priority=100, ttr=10)
    du = derived(jid)
    assert wq.cmd(b"lease xd-put 0\r\n") == lease_frame(du, "xd-put", 10_000, b"bean\x00")
    j = wq.inspect_job(du)
    assert (j["name"], j["ttr"], j["ttl"], j["priority"], j["state"], j["attempts"]) == (
        "xd-put", "10000", "0", str(PRI_MID - 100), "4", "1")
    assert g.stats_job(jid)["state"] == "reserved"
    assert wq.cmd(complete_cmd(du, b"res")) == OK
    with pytest.raises(greenstalk.NotFoundError):      # completed: gone for beanstalk
        g.peek(jid)
    with pytest.raises(greenstalk.NotFoundError):
        g.stats_job(jid)
    assert wq.inspect_job(du)["state"] == "1"
    assert wq.cmd(b"result %s 0\r\n" % du.encode()) == result_frame(du, True, b"res")
    assert wq.cmd(b"lease xd-put 0\r\n") == TIMEOUT


def test_beanstalk_bury_is_failed_for_workq(wq, bean):
    g = bean("xd-bury")
    jid = g.put(b"b")
    g.bury(g.reserve(timeout=2))
    j = wq.inspect_job(derived(jid))
    assert (j["state"], j["attempts"], j["fails"]) == ("2", "1", "0")
    assert wq.cmd(b"lease xd-bury 0\r\n") == TIMEOUT
    g.kick_job(jid)
    assert wq.inspect_job(derived(jid))["state"] == "3"


def test_beanstalk_priorities_seen_by_workq(wq, bean):
    g = bean("xd-bpri")
    ids = {b"b1024": g.put(b"b1024", priority=1024), b"bmax": g.put(b"bmax", priority=2**32 - 1),
           b"b0": g.put(b"b0", priority=0)}
    w = new_uid()
    assert wq.cmd(add_cmd(w, "xd-bpri", b"wmax", priority=2147483647)) == OK
    listed = parse_entries(wq.cmd(b"inspect jobs xd-bpri 0 10\r\n"))
    # beanstalk pri 0 is rank -2^31, workq 2147483647 is -2^31 + 1: both show 2147483647
    assert [(k["payload"], k["priority"]) for _, k in listed] == [
        ("b0", "2147483647"), ("wmax", "2147483647"), ("b1024", "2147482624"),
        ("bmax", "-2147483647")]
    assert [i for i, _ in listed] == [derived(ids[b"b0"]), w, derived(ids[b"b1024"]),
                                      derived(ids[b"bmax"])]
    for ident, keys in listed:
        assert wq.cmd(b"lease xd-bpri 0\r\n") == lease_frame(
            ident, "xd-bpri", int(keys["ttr"]), keys["payload"].encode())


def test_workq_acts_on_jobs_a_beanstalk_client_reserved(wq, bean):
    g = bean("xd-res")
    first, second = g.put(b"one"), g.put(b"two")
    job = g.reserve(timeout=2)
    assert job.id == first
    assert wq.cmd(b"delete %s\r\n" % derived(first).encode()) == OK
    with pytest.raises(greenstalk.NotFoundError):
        g.delete(job)
    with pytest.raises(greenstalk.NotFoundError):
        g.stats_job(first)
    assert wq.inspect_job(derived(first)) is None
    job = g.reserve(timeout=2)
    assert job.id == second
    assert wq.cmd(complete_cmd(derived(second), b"done")) == OK
    with pytest.raises(greenstalk.NotFoundError):
        g.delete(job)
    assert wq.cmd(b"result %s 0\r\n" % derived(second).encode()) == (
        result_frame(derived(second), True, b"done"))
    assert wq.cmd(add_cmd(derived(second), "xd-res")) == b"-CLIENT-ERROR Duplicate job\r\n"


def test_derived_uid_of_a_missing_job_is_not_found(wq, bean):
    jid = bean("xd-gone").put(b"x")
    assert wq.cmd(b"delete %s\r\n" % derived(jid).encode()) == OK
    assert wq.cmd(b"inspect job %s\r\n" % derived(jid).encode()) == NOT_FOUND
    assert wq.cmd(b"result %s 0\r\n" % derived(jid + 1000).encode()) == NOT_FOUND


# ================================================================= queues
def _all_queue_names(wq) -> list[str]:
    names, off = [], 0
    while True:
        page = parse_entries(wq.cmd(b"inspect queues %d 100\r\n" % off))
        names += [n for n, _ in page]
        if len(page) < 100:
            return names
        off += 100


def test_inspect_queues_shows_tubes_with_beanstalk_jobs_not_unused_ones(wq, bean):
    g = bean("xd-tube", watch="xd-watched")        # uses xd-tube, watches xd-watched only
    bean("default")                                # a client on default, with no job there
    g.put(b"1")
    g.put(b"2", delay=3600)
    assert wq.cmd(b"inspect queue xd-tube\r\n") == (
        b"+OK 1\r\nxd-tube 2\r\nready-len 1\r\nscheduled-len 1\r\n")
    assert wq.cmd(b"inspect queue default\r\n") == NOT_FOUND
    assert wq.cmd(b"inspect queue xd-watched\r\n") == NOT_FOUND
    names = _all_queue_names(wq)
    assert "xd-tube" in names and "default" not in names and "xd-watched" not in names
    assert names == sorted(names)
    delayed, = parse_entries(wq.cmd(b"inspect scheduled-jobs xd-tube 0 10\r\n"))
    assert (delayed[1]["payload"], delayed[1]["state"]) == ("2", "0") and "time" in delayed[1]
