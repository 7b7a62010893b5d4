"""Lease tokens (core/leases.py): issued by the engine for every reservation in every dialect,
honoured across dialects, kept across a restart where bunqueue keeps them (a lock: a PULL with
`owner`); and one server per database (core/storage.py `Store.lock`).

- A kill -9 restart on SQLite and PostgreSQL keeps a bunqueue lock: the job is still active, its
  token still finishes it and a wrong or missing one is refused; a pull without `owner` and a
  beanstalk reservation come back waiting, as before.
- The stored lease keeps its deadline: a restart does not extend it (engine-level, manual clock).
- A job reserved through beanstalk is renewed and acknowledged through bunqueue with the token
  the engine issued for that reservation (in-process server on a manual clock, real sockets).
- A second server on a database another server holds refuses to start with a message naming it
  (SQLite: at once; PostgreSQL: after its lock wait), and starts once the first is gone.
"""
from __future__ import annotations

import greenstalk
import pytest

from core.api import TOKEN_REQUIRED, ManualClock, Port
from core.model import derived_uid
from core.storage import Store
from migrations import upgrade

from .bunqueue_support import BQ, OK, qname
from .server_support import Proc, serve_argv
from .support import free_port, wait_serving


def _err(msg: str) -> dict:
    return {"ok": False, "error": msg}


# ------------------------------------------------------------------ restart
def test_a_bunqueue_lock_survives_kill9_and_other_leases_do_not(db_url, servers):
    s = servers(db_url, bunqueue=True)
    c = BQ(s.bunqueue_port, timeout=10)
    q = qname("lease")
    locked = c.push(q, "locked")
    r = c.pull(q, owner="worker-1", lockTtl=600_000)
    assert r["job"]["id"] == locked
    tok = r["token"]
    free = c.push(q, "no owner")
    assert c.pull(q)["job"]["id"] == free
    g = greenstalk.Client(("127.0.0.1", s.port), use=q, watch=q)
    bid = g.put("beanstalk")
    assert g.reserve(timeout=1).id == bid
    c.push(qname("other"), 1)      # its reply waits for a commit that holds the lease rows too
    s.kill()
    g.close()

    s2 = servers(db_url, bunqueue=True)
    c = BQ(s2.bunqueue_port, timeout=10)
    assert c.state(locked) == "active"                          # the lock is kept ...
    assert c.call("ACK", id=locked) == _err(f"Lock token required for job {locked}")
    assert c.call("ACK", id=locked, token="stale") == \
        _err(f"Invalid or expired lock token for job {locked}")
    assert c.call("JobHeartbeat", id=locked, token=tok) == {"ok": True, "data": {"ok": True}}
    assert c.call("ACK", id=locked, token=tok, result="after restart") == OK
    assert c.call("GetResult", id=locked)["result"] == "after restart"
    assert c.state(free) == "waiting"                           # ... a pull without owner not
    # nor a beanstalk reservation (greenstalk's default pri 65536 is a negative rank:
    # "prioritized", the waiting state of a job with priority > 0 in bunqueue's terms)
    assert c.state(derived_uid(bid)) == "prioritized"
    g = greenstalk.Client(("127.0.0.1", s2.port), watch=q)
    assert g.stats_job(bid)["state"] == "ready"
    g.close()


def test_a_stored_lease_keeps_its_deadline_across_a_restart(db_url):
    """The lease's end is stored as wall time: a node restarted 40 s later holds the lock for
    the 20 s left of its 60 s, then the lock expires as usual (a stall counted)."""
    store = Store(db_url)
    try:
        upgrade(store.engine)
        clock = ManualClock(1_700_000_000_000)
        a = Port.create(clock)
        a.set_policy("bunqueue", _bunqueue_policy())
        o = a.new_owner("bunqueue", margin=False)
        id = a.put("q", b"x", 0, 0, 60_000, "bunqueue", "lease-1", max_fails=3, event="push")
        (r,) = a.reserve_many(o, "q", 1, TOKEN_REQUIRED, 60_000, "w")
        store.write(a.persistence.take())

        b = Port.create(ManualClock(1_700_000_000_000 + 40_000))
        b.set_policy("bunqueue", _bunqueue_policy())
        assert b.restore(store) == 1
        v = b.job(id)
        assert (v.state, v.lease.token, v.lease.owner, v.lease.left_ms) == (
            "reserved", r.token(), "w", 20_000)
        b.clock.advance(19_999)
        b.tick()
        assert b.job(id).state == "reserved"
        b.clock.advance(1)
        b.tick()
        v = b.job(id)
        assert (v.state, v.timeouts, v.fails, v.lease) == ("ready", 1, 1, None)
    finally:
        store.close()


def _bunqueue_policy():
    from protocols.bunqueue.info import BUNQUEUE_POLICY
    return BUNQUEUE_POLICY


# ------------------------------------------------------------- cross-dialect
def test_a_beanstalk_reservation_is_renewed_and_acked_through_bunqueue_with_its_token(clocked):
    q = qname("x")
    g = greenstalk.Client(("127.0.0.1", clocked.ports["beanstalk"]), use=q, watch=q)
    bq = BQ(clocked.ports["bunqueue"])
    bid = g.put("cross", ttr=2)
    job = g.reserve(timeout=1)
    uid = derived_uid(bid)
    tok = clocked.call(lambda: clocked.port.job(bid).lease.token)
    assert tok and clocked.call(lambda: clocked.port.job(bid).lease.owner).startswith("beanstalk#")
    clocked.advance(1500)
    # a wrong token is refused; the right one renews the lease for another TTR (2 s)
    assert bq.call("JobHeartbeat", id=uid, token="not-it") == \
        _err("Job not found or not active (or invalid token)")
    assert bq.call("JobHeartbeat", id=uid, token=tok) == {"ok": True, "data": {"ok": True}}
    clocked.advance(1000)              # 2.5 s after the reserve: alive only thanks to the renewal
    assert bq.state(uid) == "active"
    assert g.stats_job(bid)["state"] == "reserved"
    assert bq.call("ACK", id=uid, token="not-it") == \
        _err(f"Invalid or expired lock token for job {uid}")
    assert bq.call("ACK", id=uid, token=tok, result={"by": "bunqueue"}) == OK
    assert bq.state(uid) == "completed"
    with pytest.raises(greenstalk.NotFoundError):   # beanstalk sees a finished job as gone
        g.delete(job)
    g.close()
    bq.close()


def test_a_token_is_void_once_its_reservation_ends(clocked):
    """A token names one reservation: after a release and a new reserve, the old one is
    refused and the new one works (beanstalk reserves, bunqueue presents)."""
    q = qname("y")
    g = greenstalk.Client(("127.0.0.1", clocked.ports["beanstalk"]), use=q, watch=q)
    bq = BQ(clocked.ports["bunqueue"])
    bid = g.put("again", ttr=60)
    g.release(g.reserve(timeout=1))
    old = clocked.call(lambda: clocked.port.job(bid).lease)
    assert old is None
    first = g.reserve(timeout=1)
    t1 = clocked.call(lambda: clocked.port.job(bid).lease.token)
    g.release(first)
    g.reserve(timeout=1)
    t2 = clocked.call(lambda: clocked.port.job(bid).lease.token)
    assert t1 != t2
    uid = derived_uid(bid)
    assert bq.call("ACK", id=uid, token=t1) == \
        _err(f"Invalid or expired lock token for job {uid}")
    assert bq.call("ACK", id=uid, token=t2) == OK
    g.close()
    bq.close()


# ---------------------------------------------------------- one server only
def test_a_second_server_on_the_same_database_refuses_to_start(db_url, servers, procs):
    first = servers(db_url)
    port = free_port()
    second = procs(serve_argv("--listen", f"beanstalk=127.0.0.1:{port}", "--database", db_url,
                              "--log-level", "warning"))
    code = second.proc.wait(30)
    _, _, err = second.stop()
    err = err.decode()
    assert code == 1, err
    assert "another jobgate server is using" in err
    assert "Traceback" not in err
    with greenstalk.Client(("127.0.0.1", first.port)) as g:   # the first one still serves
        assert g.put("still here") == 1
    first.stop()
    third = servers(db_url)                                    # and once it is gone, one can
    with greenstalk.Client(("127.0.0.1", third.port)) as g:
        assert g.reserve(timeout=1).body == "still here"


def test_jobgate_beanstalkd_with_one_binlog_dir_twice_refuses_too(tmp_path, procs):
    d = str(tmp_path)
    p1, p2 = free_port(), free_port()
    import sys
    argv = [sys.executable, "-m", "gateway.beanstalkd_cli", "-l", "127.0.0.1", "-b", d]
    first = procs(argv + ["-p", str(p1)])
    wait_serving(p1, first.proc)    # it holds the database (listening alone does not say so)
    second = procs(argv + ["-p", str(p2)])
    assert second.proc.wait(30) == 1
    _, _, err = second.stop()
    assert "another jobgate server is using" in err.decode()
    assert first.proc.poll() is None
