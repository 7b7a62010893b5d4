"""The running server over raw sockets: timing semantics (TTR, DEADLINE_SOON, timeouts, pause),
drain mode and stop signals.

Every server here is a real subprocess on 127.0.0.1, stopped by the fixture that started it.
Sleeps only appear where the behaviour under test is itself about time (TTR, delays, pauses,
timeouts).
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from .support import Raw, Server
from .server_support import no_reply, stats_dict, wait_until, waiting


# ============================================================================ TTR, timing

class TestTimeouts:
    def test_ttr_expires_while_reserving_connection_idles(self, raws):
        """beanstalkd 1.12 keeps the job reserved while its connection is idle (issues #380,
        #262); jobgate must release it at TTR (docs/beanstalk.md D3)."""
        a, b = raws(), raws()
        assert a.cmd(b"put 0 0 1 3\r\nttr\r\n") == b"INSERTED 1\r\n"
        assert a.cmd(b"reserve\r\n") == b"RESERVED 1 3\r\nttr\r\n"
        # a now stays idle; b watches the job come back

        def ready():
            st = stats_dict(b, b"stats-job 1\r\n")
            return st if st["state"] == "ready" else None
        st = wait_until(ready, timeout=5, what="job 1 ready again after its 1 s TTR")
        assert st["timeouts"] == "1" and st["reserves"] == "1"
        assert stats_dict(b)["job-timeouts"] == "1"
        assert b.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 3\r\nttr\r\n"
        # the old owner lost it
        assert a.cmd(b"delete 1\r\n") == b"NOT_FOUND\r\n"
        assert b.cmd(b"delete 1\r\n") == b"DELETED\r\n"

    def test_ttr_expiry_wakes_waiting_reserver(self, raws):
        a, b = raws(), raws()
        a.cmd(b"put 0 0 1 1\r\nx\r\n")
        t0 = time.monotonic()
        assert a.cmd(b"reserve\r\n") == b"RESERVED 1 1\r\nx\r\n"
        assert b.cmd(b"reserve-with-timeout 10\r\n") == b"RESERVED 1 1\r\nx\r\n"
        assert time.monotonic() - t0 >= 0.9  # functional: it had to wait for the TTR
        st = stats_dict(b, b"stats-job 1\r\n")
        assert (st["state"], st["reserves"], st["timeouts"]) == ("reserved", "2", "1")

    def test_deadline_soon_immediate(self, raws):
        a = raws()
        a.cmd(b"put 0 0 1 3\r\nttr\r\n")
        assert a.cmd(b"reserve\r\n") == b"RESERVED 1 3\r\nttr\r\n"
        assert a.cmd(b"reserve\r\n") == b"DEADLINE_SOON\r\n"
        assert a.cmd(b"reserve-with-timeout 5\r\n") == b"DEADLINE_SOON\r\n"
        assert a.cmd(b"reserve-with-timeout 0\r\n") == b"DEADLINE_SOON\r\n"
        # after the TTR the job is ready again and the same connection reserves it anew
        st = wait_until(lambda: (lambda d: d if d["state"] == "ready" else None)(
            stats_dict(a, b"stats-job 1\r\n")), what="job 1 timed out")
        assert (st["timeouts"], st["reserves"]) == ("1", "1")
        assert a.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 3\r\nttr\r\n"
        # a ready job is still handed out in the margin (DEADLINE_SOON only when none is ready)
        a.cmd(b"put 0 0 60 1\r\ny\r\n")
        assert a.cmd(b"reserve\r\n") == b"RESERVED 2 1\r\ny\r\n"

    def test_deadline_soon_while_waiting_then_touch(self, raws):
        a = raws()
        a.cmd(b"put 0 0 3 1\r\nq\r\n")
        t0 = time.monotonic()
        assert a.cmd(b"reserve\r\n") == b"RESERVED 1 1\r\nq\r\n"
        assert a.cmd(b"reserve\r\n") == b"DEADLINE_SOON\r\n"
        assert time.monotonic() - t0 >= 1.9  # functional: it waited for the margin (TTR-1 s)
        assert a.cmd(b"touch 1\r\n") == b"TOUCHED\r\n"
        st = stats_dict(a, b"stats-job 1\r\n")
        assert st["state"] == "reserved" and st["time-left"] == "2" and st["timeouts"] == "0"
        assert a.cmd(b"delete 1\r\n") == b"DELETED\r\n"

    def test_deadline_soon_for_reserve_job(self, raws):
        a = raws()
        a.cmd(b"put 0 100 1 1\r\nd\r\n")
        assert a.cmd(b"reserve-job 1\r\n") == b"RESERVED 1 1\r\nd\r\n"
        assert a.cmd(b"reserve-with-timeout 5\r\n") == b"DEADLINE_SOON\r\n"

    def test_waiting_reserve_gets_job_before_deadline_soon(self, raws):
        a, b = raws(), raws()
        a.cmd(b"put 0 0 5 1\r\nq\r\n")
        assert a.cmd(b"reserve\r\n") == b"RESERVED 1 1\r\nq\r\n"
        a.send(b"reserve\r\n")
        wait_until(lambda: waiting(b) == 1, what="a waiting")
        assert b.cmd(b"put 0 0 60 2\r\nhi\r\n") == b"INSERTED 2\r\n"
        assert a.reply() == b"RESERVED 2 2\r\nhi\r\n"

    def test_reserve_with_timeout(self, raws):
        a, b = raws(), raws()
        assert a.cmd(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
        t0 = time.monotonic()
        assert a.cmd(b"reserve-with-timeout 1\r\n") == b"TIMED_OUT\r\n"
        assert time.monotonic() - t0 >= 0.9  # functional: the timeout is a timeout
        a.send(b"reserve-with-timeout 10\r\n")
        wait_until(lambda: waiting(b) == 1, what="a waiting")
        assert b.cmd(b"put 5 0 60 4\r\nwake\r\n") == b"INSERTED 1\r\n"
        assert a.reply() == b"RESERVED 1 4\r\nwake\r\n"
        assert waiting(b) == 0
        st = stats_dict(b)
        assert st["cmd-reserve-with-timeout"] == "3" and st["current-workers"] == "1"

    def test_delayed_job_becomes_ready(self, raws):
        a = raws()
        a.cmd(b"put 0 1 60 1\r\nd\r\n")
        assert a.cmd(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
        assert a.cmd(b"reserve-with-timeout 5\r\n") == b"RESERVED 1 1\r\nd\r\n"

    def test_pause_tube_with_waiting_reserver(self, raws):
        a, b = raws(), raws()
        b.send(b"reserve\r\n")
        wait_until(lambda: waiting(a) == 1, what="b waiting")
        t0 = time.monotonic()
        assert a.cmd(b"pause-tube default 1\r\n") == b"PAUSED\r\n"
        assert a.cmd(b"put 0 0 60 1\r\np\r\n") == b"INSERTED 1\r\n"
        assert b.reply() == b"RESERVED 1 1\r\np\r\n"
        assert time.monotonic() - t0 >= 0.9  # functional: served after the pause, not before

    def test_unpause_serves_waiter(self, raws):
        a, b = raws(), raws()
        assert a.cmd(b"pause-tube default 3600\r\n") == b"PAUSED\r\n"
        a.cmd(b"put 0 0 60 1\r\np\r\n")
        b.send(b"reserve\r\n")
        wait_until(lambda: waiting(a) == 1, what="b waiting")
        assert no_reply(b, 0.2)
        assert a.cmd(b"pause-tube default 0\r\n") == b"PAUSED\r\n"
        assert b.reply() == b"RESERVED 1 1\r\np\r\n"


# ======================================================================= drain mode (SIGUSR1)

def test_drain_mode(server, raws):
    a, b = raws(), raws()
    assert a.cmd(b"put 0 0 60 5\r\nbefor\r\n") == b"INSERTED 1\r\n"
    assert stats_dict(a)["draining"] == "false"
    os.kill(server.proc.pid, signal.SIGUSR1)
    wait_until(lambda: stats_dict(a)["draining"] == "true", what="draining: true")
    # the body is consumed, even one that looks like commands
    body = b"use evil\r\nput 0 0 60 1\r\nx"
    a.send(b"put 0 0 60 %d\r\n%s\r\nlist-tube-used\r\n" % (len(body), body))
    assert a.reply() == b"DRAINING\r\n"
    assert a.reply() == b"USING default\r\n"
    # a big body too, and the next command still parses
    big = bytes(range(256)) * 200
    a.send(b"put 0 0 60 %d\r\n%s\r\nlist-tube-used\r\n" % (len(big), big))
    assert a.reply() == b"DRAINING\r\n"
    assert a.reply() == b"USING default\r\n"
    # everything else works
    assert b.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 5\r\nbefor\r\n"
    assert b.cmd(b"release 1 0 0\r\n") == b"RELEASED\r\n"
    assert b.cmd(b"peek-ready\r\n") == b"FOUND 1 5\r\nbefor\r\n"
    assert b.cmd(b"use other\r\n") == b"USING other\r\n"
    assert b.cmd(b"put 0 0 60 1\r\nz\r\n") == b"DRAINING\r\n"
    st = stats_dict(b)
    assert st["draining"] == "true" and st["total-jobs"] == "1"
    assert st["current-jobs-ready"] == "1"
    assert b.cmd(b"delete 1\r\n") == b"DELETED\r\n"
    server.proc.send_signal(signal.SIGTERM)  # a draining server still stops cleanly
    assert server.proc.wait(20) == 0


# ================================================================================== signals

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_exits_zero_and_flushes(sqlite_url, sig):
    s = Server(sqlite_url, durability="commit")
    try:
        r = Raw(s.port)
        for i in range(50):
            r.send(b"put 0 0 60 4\r\n%04d\r\n" % i)
        for i in range(50):
            assert r.reply() == b"INSERTED %d\r\n" % (i + 1)
        r.cmd(b"reserve\r\n")  # a reservation at shutdown comes back ready
        s.proc.send_signal(sig)
        assert s.proc.wait(20) == 0
        r.close()
    finally:
        s.stop()
    s2 = Server(sqlite_url, durability="commit")
    try:
        r = Raw(s2.port)
        st = stats_dict(r)
        assert st["current-jobs-ready"] == "50"
        assert r.cmd(b"peek 50\r\n") == b"FOUND 50 4\r\n0049\r\n"
        r.close()
    finally:
        s2.stop()


def test_sigterm_with_partial_put_exits_zero(server, raws):
    a, ctl = raws(), raws()
    a.send(b"put 0 0 60 100\r\nonly part of the body")
    assert ctl.cmd(b"put 0 0 60 4\r\nkept\r\n") == b"INSERTED 1\r\n"
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(20) == 0
    s2 = Server(server.url)
    try:
        r = Raw(s2.port)
        assert stats_dict(r)["current-jobs-ready"] == "1"
        assert r.cmd(b"peek 1\r\n") == b"FOUND 1 4\r\nkept\r\n"
        r.close()
    finally:
        s2.stop()


def test_sigterm_with_waiting_clients_exits_zero(server, raws):
    a, ctl = raws(), raws()
    a.send(b"reserve\r\n")
    wait_until(lambda: waiting(ctl) == 1, what="a waiting")
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(20) == 0
