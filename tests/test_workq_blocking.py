"""workq's blocking commands over real sockets: lease, result and run with real (short)
timeouts, answered from other connections.

One real `jobgate serve` subprocess (SQLite, durability commit, a workq listener) is shared by
the module; tests use distinct queue names and ids. Timing assertions are only lower bounds
("a 300 ms wait did not answer before 250 ms") and generous upper bounds (the socket timeout).
Reference behaviour: ../shared/reference/workq-golden.txt ("lease", "run", "result blocking");
jobgate differs on purpose in one place here: every concurrent result waiter gets the result.
"""
from __future__ import annotations

import time

import pytest

from .server_support import stats_dict, wait_until
from .support import Raw, Server
from .workq_support import (NOT_FOUND, OK, TIMEOUT, add_cmd, complete_cmd,
                            fail_cmd, lease_frame, new_uid, result_frame, run_cmd, server_keys,
                            steady_clients)


def timed(c, data: bytes) -> tuple[bytes, float]:
    """Send `data`, read one reply; returns (reply, seconds it took)."""
    t0 = time.monotonic()
    r = c.cmd(data)
    return r, time.monotonic() - t0


# ===================================================================== lease
def test_waiting_lease_gets_a_job_added_on_another_connection(wq_conns):
    worker, producer = wq_conns(), wq_conns()
    u = new_uid()
    worker.send(b"lease bl-wait 5000\r\n")
    assert worker.silent_for(0.2)                      # nothing to lease yet: it waits
    assert producer.cmd(add_cmd(u, "bl-wait", b"hello", ttr=2500)) == OK
    assert worker.reply() == lease_frame(u, "bl-wait", 2500, b"hello")
    assert producer.inspect_job(u)["state"] == "4"


def test_waiting_lease_over_several_names(wq_conns):
    worker, producer = wq_conns(), wq_conns()
    u = new_uid()
    worker.send(b"lease bl-m1 bl-m2 bl-m3 5000\r\n")
    assert worker.silent_for(0.2)
    assert producer.cmd(add_cmd(u, "bl-m3", b"third")) == OK
    assert worker.reply() == lease_frame(u, "bl-m3", 1000, b"third")
    worker.send(b"lease bl-m1 bl-m2 bl-m3 5000\r\n")
    assert worker.silent_for(0.1)
    v = new_uid()
    assert producer.cmd(add_cmd(v, "bl-m1", b"first")) == OK
    assert worker.reply() == lease_frame(v, "bl-m1", 1000, b"first")


def test_lease_timeout(wq_conns):
    c = wq_conns()
    r, took = timed(c, b"lease bl-empty 300\r\n")
    assert r == TIMEOUT and took >= 0.25
    r, took = timed(c, b"lease bl-empty 0\r\n")
    assert r == TIMEOUT
    # the queue was named, nothing else happened: the connection goes on
    assert c.cmd(b"inspect queue bl-empty\r\n") == (
        b"+OK 1\r\nbl-empty 2\r\nready-len 0\r\nscheduled-len 0\r\n")


def _waiting(server: Server) -> int:
    """Waiting reserves/leases of every dialect (beanstalk `stats` current-waiting)."""
    r = Raw(server.port)
    try:
        return int(stats_dict(r)["current-waiting"])
    finally:
        r.close()


def test_waiting_leases_are_served_in_arrival_order(wq_server, wq_conns):
    first, second, producer = wq_conns(), wq_conns(), wq_conns()
    first.send(b"lease bl-fifo 5000\r\n")
    wait_until(lambda: _waiting(wq_server) == 1, what="the first lease to wait")
    second.send(b"lease bl-fifo 5000\r\n")
    wait_until(lambda: _waiting(wq_server) == 2, what="the second lease to wait")
    a, b = new_uid(), new_uid()
    assert producer.cmd(add_cmd(a, "bl-fifo", b"a")) == OK
    assert first.reply() == lease_frame(a, "bl-fifo", 1000, b"a")
    assert second.silent_for(0.1)
    assert producer.cmd(add_cmd(b, "bl-fifo", b"b")) == OK
    assert second.reply() == lease_frame(b, "bl-fifo", 1000, b"b")


def test_disconnected_lease_waiter_does_not_swallow_a_job(wq_conns):
    gone, producer, worker = wq_conns(), wq_conns(), wq_conns()
    gone.send(b"lease bl-gone 5000\r\n")
    assert gone.silent_for(0.1)
    before = steady_clients(producer)
    gone.close()
    # the server has seen the close once it no longer counts the connection
    wait_until(lambda: int(server_keys(producer)["active-clients"]) == before - 1,
               what="the closed connection to be dropped")
    u = new_uid()
    assert producer.cmd(add_cmd(u, "bl-gone", b"kept")) == OK
    assert worker.cmd(b"lease bl-gone 1000\r\n") == lease_frame(u, "bl-gone", 1000, b"kept")
    assert producer.inspect_job(u)["attempts"] == "1"


# ===================================================================== result
def test_result_blocks_until_completed_on_another_connection(wq_conns):
    waiter, worker, producer = wq_conns(), wq_conns(), wq_conns()
    u = new_uid()
    assert producer.cmd(add_cmd(u, "br-res")) == OK
    waiter.send(b"result %s 5000\r\n" % u.encode())
    assert waiter.silent_for(0.2)
    assert worker.cmd(b"lease br-res 1000\r\n") == lease_frame(u, "br-res", 1000, b"x")
    assert waiter.silent_for(0.1)                      # leased is not finished
    assert worker.cmd(complete_cmd(u, b"done")) == OK
    assert waiter.reply() == result_frame(u, True, b"done")


def test_two_concurrent_result_waiters_both_get_the_result(wq_conns):
    """Deviation 5: the reference answers one waiter and times the other out."""
    w1, w2, worker = wq_conns(), wq_conns(), wq_conns()
    u = new_uid()
    assert worker.cmd(add_cmd(u, "br-two")) == OK
    w1.send(b"result %s 5000\r\n" % u.encode())
    w2.send(b"result %s 5000\r\n" % u.encode())
    assert w1.silent_for(0.2) and w2.silent_for(0.01)
    assert worker.cmd(fail_cmd(u, b"bad")) == OK       # max-fails 0: failed at once
    assert w1.reply() == result_frame(u, False, b"bad")
    assert w2.reply() == result_frame(u, False, b"bad")


def test_result_timeout(wq_conns):
    c = wq_conns()
    u = new_uid()
    assert c.cmd(add_cmd(u, "br-timeout")) == OK
    r, took = timed(c, b"result %s 300\r\n" % u.encode())
    assert r == TIMEOUT and took >= 0.25
    assert c.cmd(b"result %s 0\r\n" % u.encode()) == TIMEOUT
    assert c.inspect_job(u)["state"] == "0"            # waiting changed nothing


# ===================================================================== run
def test_run_without_worker_times_out_and_the_job_is_gone(wq_conns):
    c = wq_conns()
    u = new_uid()
    r, took = timed(c, run_cmd(u, "brun-none", b"ping", ttr=1000, wait=300))
    assert r == TIMEOUT and took >= 0.25
    assert c.cmd(b"result %s 0\r\n" % u.encode()) == NOT_FOUND
    assert c.inspect_job(u) is None
    assert c.cmd(b"lease brun-none 0\r\n") == TIMEOUT


@pytest.mark.parametrize("finish, ok", [(complete_cmd, True), (fail_cmd, False)])
def test_run_answered_by_a_worker(wq_conns, finish, ok):
    client, worker = wq_conns(), wq_conns()
    u = new_uid()
    q = "brun-" + ("ok" if ok else "fail")
    client.send(run_cmd(u, q, b"ping", ttr=2000, wait=5000, priority=3))
    assert client.silent_for(0.1)
    assert worker.cmd(b"lease %s 5000\r\n" % q.encode()) == lease_frame(u, q, 2000, b"ping")
    j = worker.inspect_job(u)
    assert (j["state"], j["priority"], j["attempts"]) == ("4", "3", "1")
    assert worker.cmd(finish(u, b"pong" if ok else b"bad")) == OK
    assert client.reply() == result_frame(u, ok, b"pong" if ok else b"bad")
    # a run's job is deleted once it has answered
    assert client.cmd(b"result %s 0\r\n" % u.encode()) == NOT_FOUND
    assert worker.inspect_job(u) is None


def test_run_leased_but_never_completed_times_out_at_the_ttr_deadline(wq_conns):
    client, worker = wq_conns(), wq_conns()
    u = new_uid()
    worker.send(b"lease brun-ttr 5000\r\n")            # a worker is already waiting
    assert worker.silent_for(0.1)
    t0 = time.monotonic()
    client.send(run_cmd(u, "brun-ttr", b"x", ttr=600, wait=200))
    assert worker.reply() == lease_frame(u, "brun-ttr", 600, b"x")
    assert client.reply() == TIMEOUT
    took = time.monotonic() - t0
    assert took >= 0.55, f"answered after {took:.3f} s: before the TTR deadline"
    assert worker.inspect_job(u) is None
    assert worker.cmd(complete_cmd(u, b"late")) == NOT_FOUND


def test_run_whose_client_disconnects_deletes_its_job(wq_conns):
    client, other = wq_conns(), wq_conns()
    u = new_uid()
    client.send(run_cmd(u, "brun-gone", b"x", wait=5000))
    wait_until(lambda: other.inspect_job(u) is not None, what="the run's job")
    assert client.silent_for(0.1)
    assert other.inspect_job(u)["state"] == "0"
    client.close()
    wait_until(lambda: other.inspect_job(u) is None, what="the run's job to be deleted")
    assert other.cmd(b"lease brun-gone 0\r\n") == TIMEOUT
