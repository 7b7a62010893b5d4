"""bunqueue and the other dialects on one engine (docs/mapping.md "bunqueue"; DESIGN.md "The
canonical model"), with a real greenstalk client for beanstalk and raw sockets for workq.

- data: a str `data` is stored as its UTF-8 bytes, anything else as its MessagePack encoding;
  a payload from another dialect reads as a str when it is UTF-8, else as bin;
- ids: a beanstalk job is addressed by its derived uid 6a6f6267-6174-4000-8000-<id hex>, a workq
  job by its UUID;
- priority: rank = -priority (bunqueue) = pri - 2^31 (beanstalk); clamped to +-1,000,000;
- state: beanstalk's buried = bunqueue's failed (the DLQ) and back (kick / RetryDlq).
"""
from __future__ import annotations

import greenstalk
import msgpack
import pytest

from .bunqueue_support import UNDEF, qname, reference_mode
from .workq_support import add_cmd, new_uid, result_frame

pytestmark = pytest.mark.skipif(reference_mode(), reason="jobgate only: several dialects")

MID = 2 ** 31


def derived_uid(beanstalk_id: int) -> str:
    return f"6a6f6267-6174-4000-8000-{beanstalk_id:012x}"


# ================================================================ bunqueue -> beanstalk
@pytest.mark.parametrize("data", ["héllo wörld", "", "plain"])
def test_push_str_data_reaches_beanstalk_as_utf8(bq, gsq, data):
    c = bq()
    q = qname()
    id = c.push(q, data)
    g = gsq(q)
    job = g.reserve(timeout=2)
    assert job.body == data.encode("utf-8")
    assert c.state(id) == "active"
    g.delete(job)
    assert c.state(id) == "unknown"


@pytest.mark.parametrize("data", [{"a": 1, "b": [1, 2]}, 42, [1, "x"], None, True, 1.5,
                                  b"\x00\x01bin"], ids=repr)
def test_push_other_data_reaches_beanstalk_as_msgpack(bq, gsq, data):
    c = bq()
    q = qname()
    c.ok("PUSH", queue=q, data=data)
    g = gsq(q)
    job = g.reserve(timeout=2)
    assert job.body == msgpack.packb(data, use_bin_type=True)
    assert msgpack.unpackb(job.body, raw=False) == data
    g.delete(job)


def test_beanstalk_release_and_bunqueue_sees_it_waiting(bq, gsq):
    c = bq()
    q = qname()
    id = c.push(q, "x")
    g = gsq(q)
    job = g.reserve(timeout=2)
    g.release(job, priority=MID)                  # the same rank as bunqueue's 0
    assert c.state(id) == "waiting"
    assert c.pull(q)["job"]["id"] == id


# ================================================================ beanstalk -> bunqueue
def test_greenstalk_put_then_pull_and_ack(bq, gsq):
    c = bq()
    q = qname()
    g = gsq(q)
    bid = g.put(b"plain text", priority=MID)
    r = c.pull(q)
    j = r["job"]
    assert j["id"] == derived_uid(bid) and j["queue"] == q
    assert j["data"] == "plain text" and j["priority"] == 0
    assert c.state(j["id"]) == "active"
    assert c.call("ACK", id=j["id"], result={"x": 1}) == {"ok": True, "id": UNDEF}
    assert c.state(j["id"]) == "completed"
    assert c.call("GetResult", id=j["id"])["result"] == {"x": 1}
    with pytest.raises(greenstalk.NotFoundError):   # completed: gone for beanstalk
        g.stats_job(bid)


def test_greenstalk_put_then_pull_with_owner(bq, gsq):
    c = bq()
    q = qname()
    g = gsq(q)
    bid = g.put(b"owned")
    r = c.pull(q, owner="w")
    id = r["job"]["id"]
    assert id == derived_uid(bid)
    assert c.call("ACK", id=id) == {"ok": False, "error": f"Lock token required for job {id}"}
    assert c.call("ACK", id=id, token=r["token"]) == {"ok": True, "id": UNDEF}


def test_greenstalk_binary_body_reads_as_bin(bq, gsq):
    c = bq()
    q = qname()
    gsq(q).put(b"\xff\x00\xfe")
    j = c.pull(q)["job"]
    assert j["data"] == b"\xff\x00\xfe"
    assert isinstance(j["data"], bytes)


def test_beanstalk_job_is_visible_to_bunqueue_queries(bq, gsq):
    c = bq()
    q = qname()
    g = gsq(q)
    bid = g.put(b"q", delay=60)
    uid = derived_uid(bid)
    assert c.state(uid) == "delayed"
    j = c.call("GetJob", id=uid)["job"]
    assert j["id"] == uid and j["data"] == "q" and j["maxAttempts"] == 1
    g.kick_job(bid)
    assert c.state(uid) == "prioritized"           # greenstalk pri 65536 -> priority 1,000,000
    assert c.counts(q)["prioritized"] == 1


def test_bunqueue_fail_of_a_beanstalk_job_buries_it(bq, gsq):
    c = bq()
    q = qname()
    g = gsq(q)
    bid = g.put(b"f")
    uid = c.pull(q)["job"]["id"]
    assert c.call("FAIL", id=uid, error="bad") == {"ok": True, "id": UNDEF}
    assert c.state(uid) == "failed"                  # maxAttempts 1 for a beanstalk put
    assert g.stats_job(bid)["state"] == "buried"
    assert g.kick(1) == 1
    assert c.state(uid) == "prioritized"


def test_beanstalk_reserved_job_is_active_and_ackable(bq, gsq):
    """bunqueue's ACK acts on any active job, including one a beanstalk client reserved
    (docs/mapping.md); the beanstalk client's delete then answers NOT_FOUND."""
    c = bq()
    q = qname()
    g = gsq(q)
    bid = g.put(b"r")
    job = g.reserve(timeout=2)
    uid = derived_uid(bid)
    assert c.state(uid) == "active"
    assert c.call("ACK", id=uid) == {"ok": True, "id": UNDEF}
    with pytest.raises(greenstalk.NotFoundError):
        g.delete(job)


# ======================================================================= priorities
@pytest.mark.parametrize("priority", [1000000, 5, 1, 0, -5, -1000000])
def test_bunqueue_priority_as_beanstalk_pri(bq, gsq, priority):
    c = bq()
    q = qname()
    c.push(q, "p", priority=priority)
    g = gsq(q)
    job = g.reserve(timeout=2)
    assert g.stats_job(job)["pri"] == MID - priority
    g.delete(job)


@pytest.mark.parametrize("pri,priority", [(MID, 0), (MID - 7, 7), (MID + 7, -7),
                                          (1024, 1000000), (0, 1000000),
                                          (2 ** 32 - 1, -1000000)])
def test_beanstalk_pri_as_bunqueue_priority(bq, gsq, pri, priority):
    c = bq()
    q = qname()
    bid = gsq(q).put(b"p", priority=pri)
    assert c.call("GetJob", id=derived_uid(bid))["job"]["priority"] == priority
    assert {int(k): v for k, v in c.ok("GetCountsPerPriority", queue=q)["counts"].items()} == \
        {priority: 1}


def test_mixed_dialects_are_served_in_one_priority_order(bq, gsq):
    c = bq()
    q = qname()
    g = gsq(q)
    order = []
    order.append(("bq", c.push(q, "b5", priority=5)))
    order.append(("bs", g.put(b"s3", priority=MID - 3)))
    order.append(("bq", c.push(q, "b0")))
    order.append(("bs", g.put(b"s0", priority=MID)))       # same rank as b0: FIFO after it
    order.append(("bq", c.push(q, "bm2", priority=-2)))
    ids = [x if kind == "bq" else derived_uid(x) for kind, x in order]
    assert [c.pull(q)["job"]["id"] for _ in ids] == ids


def test_beanstalk_reserve_order_follows_bunqueue_priority(bq, gsq):
    c = bq()
    q = qname()
    low = c.push(q, "low", priority=-10)
    high = c.push(q, "high", priority=10)
    g = gsq(q)
    first = g.reserve(timeout=2)
    second = g.reserve(timeout=2)
    assert (first.body, second.body) == (b"high", b"low")
    assert c.state(high) == c.state(low) == "active"


# ============================================================================ DLQ
def test_beanstalk_buried_job_is_in_the_dlq(bq, gsq):
    c = bq()
    q = qname()
    g = gsq(q)
    bid = g.put(b"bury me")
    g.bury(g.reserve(timeout=2))
    uid = derived_uid(bid)
    assert c.state(uid) == "failed"
    assert c.counts(q)["failed"] == 1
    d = c.call("Dlq", queue=q)
    assert [j["id"] for j in d["jobs"]] == [uid] and d["jobs"][0]["data"] == "bury me"
    assert c.call("RetryDlq", queue=q) == {"ok": True, "count": 1}
    assert g.stats_job(bid)["state"] == "ready"
    assert g.reserve(timeout=2).id == bid


def test_bunqueue_dlq_job_is_kicked_by_beanstalk(bq, gsq):
    c = bq()
    q = qname()
    id = c.push(q, "dead", maxAttempts=1)
    c.pull(q)
    c.ok("FAIL", id=id, error="boom")
    assert c.state(id) == "failed"
    g = gsq(q)
    assert g.stats_tube(q)["current-jobs-buried"] == 1
    assert g.kick(10) == 1
    assert c.state(id) == "waiting"
    assert c.call("Dlq", queue=q)["jobs"] == []
    job = g.reserve(timeout=2)
    assert job.body == b"dead"
    g.delete(job)
    assert c.state(id) == "unknown"


def test_bunqueue_discard_is_kickable(bq, gsq):
    c = bq()
    q = qname()
    id = c.push(q, {"d": 1})
    c.ok("Discard", id=id)
    g = gsq(q)
    assert g.stats_tube(q)["current-jobs-buried"] == 1
    assert g.kick(1) == 1
    assert c.pull(q)["job"]["id"] == id


# ================================================================= pause across
def test_pause_is_shared(bq, gsq):
    c = bq()
    q = qname()
    g = gsq(q)
    g.pause_tube(q, 60)
    assert c.call("IsPaused", queue=q) == {"ok": True, "paused": True}
    c.push(q, 1)
    assert c.call("PULL", queue=q) == {"ok": True, "job": None}
    g.pause_tube(q, 0)
    assert c.call("IsPaused", queue=q) == {"ok": True, "paused": False}
    c.ok("Pause", queue=q)
    with pytest.raises(greenstalk.TimedOutError):
        g.reserve(timeout=0)
    c.ok("Resume", queue=q)
    g.delete(g.reserve(timeout=2))


# ============================================================================ workq
def test_workq_add_then_pull_and_ack_then_workq_result(bq, wq):
    c = bq()
    w = wq()
    q = qname()
    uid = new_uid()
    assert w.cmd(add_cmd(uid, q, b"wq payload")) == b"+OK\r\n"
    j = c.pull(q)["job"]
    assert j["id"] == uid and j["data"] == "wq payload" and j["queue"] == q
    assert c.state(uid) == "active"
    assert c.call("ACK", id=uid, result={"k": 1}) == {"ok": True, "id": UNDEF}
    # the ACK result is kept as MessagePack (docs/mapping.md); workq reads those bytes
    assert w.cmd(b"result %s 1000\r\n" % uid.encode()) == \
        result_frame(uid, True, msgpack.packb({"k": 1}))


def test_workq_result_of_a_str_ack_result(bq, wq):
    c = bq()
    w = wq()
    q = qname()
    uid = new_uid()
    w.cmd(add_cmd(uid, q, b"p"))
    c.pull(q)
    c.ok("ACK", id=uid, result="done")
    assert w.cmd(b"result %s 1000\r\n" % uid.encode()) == \
        result_frame(uid, True, msgpack.packb("done"))


def test_workq_result_waits_for_a_bunqueue_ack(bq, wq):
    c = bq()
    w = wq()
    q = qname()
    uid = new_uid()
    w.cmd(add_cmd(uid, q, b"p"))
    w.send(b"result %s 5000\r\n" % uid.encode())
    c.pull(q)
    c.ok("ACK", id=uid, result=[1, 2])
    assert w.reply() == result_frame(uid, True, msgpack.packb([1, 2]))


def test_workq_complete_is_a_bunqueue_result(bq, wq):
    c = bq()
    w = wq()
    q = qname()
    uid = new_uid()
    w.cmd(add_cmd(uid, q, b"p"))
    c.pull(q)
    assert w.cmd(b"complete %s 4\r\nwqok\r\n" % uid.encode()) == b"+OK\r\n"
    assert c.state(uid) == "completed"
    assert c.call("GetResult", id=uid)["result"] == "wqok"
    assert c.call("WaitJob", id=uid, timeout=100) == \
        {"ok": True, "completed": True, "result": "wqok"}


def test_bunqueue_push_is_leased_by_workq(bq, wq):
    c = bq()
    w = wq()
    q = qname()
    id = c.push(q, "for workq")
    assert w.cmd(b"lease %s 1000\r\n" % q.encode()) == \
        b"+OK 1\r\n%s %s 30000 9\r\nfor workq\r\n" % (id.encode(), q.encode())
    assert c.state(id) == "active"


def test_workq_completes_a_bunqueue_job_it_leased(bq, wq):
    c = bq()
    w = wq()
    q = qname()
    id = c.push(q, "for workq")
    w.cmd(b"lease %s 1000\r\n" % q.encode())
    assert w.cmd(b"complete %s 2\r\nok\r\n" % id.encode()) == b"+OK\r\n"
    assert c.call("GetResult", id=id)["result"] == "ok"
