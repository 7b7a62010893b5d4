"""Jobs that lose their worker (docs/bunqueue.md "PULL / PULLB", "Connection close";
bunqueue-tcp-protocol.txt "Connection Lifecycle", "JobHeartbeat"): a closed connection returns
what it pulled to waiting without counting an attempt; a lock (lockTtl) that passes with no
JobHeartbeat / ExtendLock is released (stallCount + 1, the old token refused); heartbeats keep
the job active.

The server runs in the test process on a manual clock (tests/inproc.py): where a lock has to
run out, the test moves the clock (`advance`) instead of sleeping; waits poll the job state and
never assert how fast something happened.

Against the reference (JOBGATE_BQ_REFERENCE=1) `advance` sleeps, and two tests are skipped:
bunqueue 2.9.5 accepts a late ACK with the expired lock's token while the job waits again (it
completes the job), and a job pulled without `owner` has no lock there, so lockTtl does not
release it.
"""
from __future__ import annotations

import time

import pytest

from .bunqueue_support import OK, bq_clocked_start, job, qname, reference_mode, wait_until


@pytest.fixture(scope="module")
def bq_server(tmp_path_factory):
    """This module's server: in-process on a manual clock (the `bq` fixture connects to it)."""
    s = bq_clocked_start(tmp_path_factory.mktemp("bqclock"))
    yield s
    s.stop()


@pytest.fixture
def advance(bq_server):
    """`advance(ms)`: let `ms` ms pass on the server's clock."""
    return bq_server.advance


def _waiting(c, id) -> bool:
    return c.state(id) == "waiting"


# =============================================================== connection closes
def test_closed_connection_returns_its_job_without_an_attempt(bq):
    worker, c = bq(), bq()
    q = qname()
    id = c.push(q, 1)
    assert worker.pull(q)["job"]["id"] == id
    assert c.state(id) == "active"
    worker.close()
    assert wait_until(lambda: _waiting(c, id))
    j = job(c, id)
    assert j["attempts"] == 0 and j["stallCount"] == 0
    assert c.counts(q)["waiting"] == 1 and c.counts(q)["active"] == 0
    assert c.pull(q)["job"]["id"] == id


def test_closed_connection_keeps_earlier_attempts(bq):
    worker, c = bq(), bq()
    q = qname()
    id = c.push(q, 1, backoff=0)
    c.pull(q)
    c.ok("FAIL", id=id, error="first")
    assert worker.pull(q)["job"]["id"] == id
    worker.close()
    assert wait_until(lambda: _waiting(c, id))
    assert job(c, id)["attempts"] == 1


def test_closed_connection_releases_locked_and_batch_jobs(bq):
    worker, c = bq(), bq()
    q = qname()
    ids = [c.push(q, i) for i in range(4)]
    r = worker.ok("PULLB", queue=q, count=3, owner="w", lockTtl=30000)
    old = dict(zip((j["id"] for j in r["jobs"]), r["tokens"]))
    assert list(old) == ids[:3]
    mine = c.pull(q, owner="other")                 # held by a connection that stays
    assert mine["job"]["id"] == ids[3]
    worker.close()
    assert wait_until(lambda: all(_waiting(c, i) for i in ids[:3]))
    assert c.state(ids[3]) == "active"
    assert [job(c, i)["attempts"] for i in ids[:3]] == [0, 0, 0]
    # the tokens of the closed connection are gone: a new pull gets new ones
    r2 = c.ok("PULLB", queue=q, count=3, owner="w2")
    for j, tok in zip(r2["jobs"], r2["tokens"]):
        assert tok != old[j["id"]]
        assert c.call("ACK", id=j["id"], token=old[j["id"]]) == \
            {"ok": False, "error": f"Invalid or expired lock token for job {j['id']}"}
        assert c.call("ACK", id=j["id"], token=tok)["ok"] is True
    assert c.call("ACK", id=ids[3], token=mine["token"])["ok"] is True


def test_closed_connection_with_a_waiting_pull_takes_no_job(bq):
    worker, c = bq(), bq()
    q = qname()
    worker.send({"cmd": "PULL", "queue": q, "timeout": 10000, "reqId": "w"})
    assert worker.quiet(0.2)
    worker.close()
    time.sleep(0.2)
    id = c.push(q, 1)
    assert c.state(id) == "waiting"
    assert c.pull(q)["job"]["id"] == id


# ===================================================================== lock expiry
@pytest.mark.skipif(reference_mode(), reason="the reference takes the late ACK (docstring)")
def test_expired_lock_is_released(bq, advance):
    worker, c = bq(), bq()
    q = qname()
    id = c.push(q, 1)
    tok = worker.pull(q, owner="w", lockTtl=300)["token"]
    advance(300)
    assert wait_until(lambda: _waiting(c, id), timeout=5)
    assert job(c, id)["stallCount"] == 1
    assert worker.call("ACK", id=id, token=tok) == \
        {"ok": False, "error": f"Job not found or not in processing state: {id}"}
    r = c.pull(q, owner="w2", lockTtl=30000)
    assert r["job"]["id"] == id and r["job"]["stallCount"] == 1 and r["token"] != tok
    assert worker.call("ACK", id=id, token=tok) == \
        {"ok": False, "error": f"Invalid or expired lock token for job {id}"}
    assert worker.call("FAIL", id=id, token=tok) == \
        {"ok": False, "error": f"Invalid or expired lock token for job {id}"}
    hb = worker.call("JobHeartbeat", id=id, token=tok)
    assert hb.get("ok") is False or hb["data"]["ok"] is False    # refused (see commands)
    assert c.call("ACK", id=id, token=r["token"]) == OK
    assert c.state(id) == "completed"


@pytest.mark.skipif(reference_mode(), reason="no lock without owner in the reference")
def test_expired_lock_without_owner_is_released(bq, advance):
    worker, c = bq(), bq()
    q = qname()
    id = c.push(q, 1)
    worker.pull(q, lockTtl=300)
    advance(300)
    assert wait_until(lambda: _waiting(c, id), timeout=5)
    assert job(c, id)["stallCount"] == 1
    assert worker.call("ACK", id=id) == \
        {"ok": False, "error": f"Job not found or not in processing state: {id}"}


def test_job_heartbeat_keeps_the_lock(bq, advance):
    worker, c = bq(), bq()
    q = qname()
    id = c.push(q, 1)
    tok = worker.pull(q, owner="w", lockTtl=400)["token"]
    for _ in range(6):                      # 0.9 s in all: more than twice the lock TTL
        advance(150)
        assert worker.call("JobHeartbeat", id=id, token=tok) == \
            {"ok": True, "data": {"ok": True}}
    assert c.state(id) == "active" and job(c, id)["stallCount"] == 0
    assert worker.call("ACK", id=id, token=tok, result="done")["ok"] is True
    assert c.call("GetResult", id=id)["result"] == "done"


def test_job_heartbeat_batch_keeps_the_locks(bq, advance):
    worker, c = bq(), bq()
    q = qname()
    ids = [c.push(q, i) for i in range(3)]
    toks = worker.ok("PULLB", queue=q, count=3, owner="w", lockTtl=400)["tokens"]
    for _ in range(6):
        advance(150)
        assert worker.call("JobHeartbeatB", ids=ids, tokens=toks) == \
            {"ok": True, "data": {"ok": True, "count": 3}}
    assert [c.state(i) for i in ids] == ["active"] * 3
    assert worker.call("ACKB", ids=ids, tokens=toks)["ok"] is True


def test_extend_lock_keeps_the_job_active(bq, advance):
    worker, c = bq(), bq()
    q = qname()
    id = c.push(q, 1)
    tok = worker.pull(q, owner="w", lockTtl=300)["token"]
    assert worker.call("ExtendLock", id=id, token=tok, duration=10000) == OK
    advance(800)                             # well past the first 300 ms
    assert c.state(id) == "active" and job(c, id)["stallCount"] == 0
    assert worker.call("ACK", id=id, token=tok)["ok"] is True


def test_heartbeat_with_a_wrong_token_does_not_keep_the_lock(bq, advance):
    worker, c = bq(), bq()
    q = qname()
    id = c.push(q, 1)
    worker.pull(q, owner="w", lockTtl=300)
    for _ in range(3):
        advance(100)
        r = worker.call("JobHeartbeat", id=id, token="not-the-token")
        assert r.get("ok") is False or r["data"]["ok"] is False
    assert wait_until(lambda: _waiting(c, id), timeout=5)
    assert job(c, id)["stallCount"] == 1


def test_expired_lock_counts_an_attempt(bq, advance):
    worker, c = bq(), bq()
    q = qname()
    id = c.push(q, 1)
    worker.pull(q, owner="w", lockTtl=300)
    advance(300)
    assert wait_until(lambda: _waiting(c, id), timeout=5)
    assert job(c, id)["attempts"] == 1


def test_expired_lock_at_the_last_attempt_dead_letters(bq, advance):
    worker, c = bq(), bq()
    q = qname()
    id = c.push(q, 1, maxAttempts=1)
    worker.pull(q, owner="w", lockTtl=300)
    advance(300)
    assert wait_until(lambda: c.state(id) != "active", timeout=5)
    assert c.state(id) == "failed"
    (e,) = c.call("Dlq", queue=q)["entries"]
    assert e["job"]["id"] == id and e["reason"] == "max_attempts_exceeded"
