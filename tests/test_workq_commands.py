"""workq over real sockets: every command, inspect, pipelining and split reads.

One real `jobgate serve` subprocess (SQLite, durability commit, a workq listener) is shared by
the whole module; tests use distinct queue names and ids. Expected bytes come from the golden
transcript of the reference server (../shared/reference/workq-golden.txt) except where jobgate
deliberately differs: `inspect server` announces `server 3`, inspect leaves out a payload holding
CR/LF, `lease <name> 0` returns a ready job, lease over several names takes the best job, and ids
of the form jobgate derives for other dialects' jobs are refused as `Duplicate job`.
Every error line and hostile input: test_workq_errors.py.
"""
from __future__ import annotations

import time

import pytest

from .server_support import wait_until
from .workq_support import (NOT_FOUND, OK, TIMEOUT, add_cmd, complete_cmd, err,
                            fail_cmd, lease_frame, new_uid, parse_entries, result_frame, run_cmd,
                            schedule_cmd, server_keys, steady_clients, uid_n)


@pytest.fixture
def c(wq_conns):
    return wq_conns()


# ================================================================== every command
def test_duplicate_job_and_duplicate_result(c):
    u = uid_n(1, "33333333")
    assert c.cmd(add_cmd(u, "dup", b"pong", priority=10)) == OK
    assert c.cmd(add_cmd(u, "dup", b"pong")) == err("Duplicate job")
    assert c.cmd(add_cmd(u.upper(), "other")) == err("Duplicate job")     # any spelling
    assert c.cmd(schedule_cmd(u, "dup", "2030-01-01T00:00:00Z")) == err("Duplicate job")
    assert c.cmd(run_cmd(u, "dup", wait=100)) == err("Duplicate job")
    assert c.cmd(complete_cmd(u, b"pong")) == OK
    assert c.cmd(complete_cmd(u, b"pong")) == err("Duplicate result")
    assert c.cmd(fail_cmd(u, b"x")) == err("Duplicate result")
    assert c.cmd(b"result %s 1000\r\n" % u.encode()) == result_frame(u, True, b"pong")


@pytest.mark.parametrize("cmd", ["add", "schedule", "run"])
def test_derived_uid_is_refused(c, cmd):
    """Deviation 7: the uids jobgate derives for other dialects' jobs cannot be taken."""
    u = "6a6f6267-6174-4000-8000-0000000f0002"
    req = {"add": add_cmd(u, "derived"), "run": run_cmd(u, "derived", wait=100),
           "schedule": schedule_cmd(u, "derived", "2030-01-01T00:00:00Z")}[cmd]
    assert c.cmd(req) == err("Duplicate job")
    assert c.inspect_job(u) is None


def test_job_lifecycle_add_lease_complete_result_delete(c):
    u = new_uid()
    assert c.cmd(add_cmd(u, "life", b"pong", priority=10, max_attempts=3, max_fails=1)) == OK
    j = c.inspect_job(u)
    assert list(j) == ["name", "ttr", "ttl", "payload-size", "payload", "max-attempts",
                       "attempts", "max-fails", "fails", "priority", "state", "created", "id"]
    assert (j["id"], j["name"], j["ttr"], j["ttl"], j["payload-size"], j["payload"]) == (
        u, "life", "1000", "60000", "4", "pong")
    assert (j["max-attempts"], j["attempts"], j["max-fails"], j["fails"], j["priority"],
            j["state"]) == ("3", "0", "1", "0", "10", "0")
    assert c.cmd(b"result %s 0\r\n" % u.encode()) == TIMEOUT
    assert c.cmd(b"lease life 1000\r\n") == lease_frame(u, "life", 1000, b"pong")
    assert (c.inspect_job(u)["state"], c.inspect_job(u)["attempts"]) == ("4", "1")
    assert c.cmd(complete_cmd(u, b"done")) == OK
    assert c.inspect_job(u)["state"] == "1"
    assert c.cmd(b"result %s 1000\r\n" % u.encode()) == result_frame(u, True, b"done")
    assert c.cmd(b"delete %s\r\n" % u.encode()) == OK
    assert c.cmd(b"delete %s\r\n" % u.encode()) == NOT_FOUND
    assert c.cmd(b"result %s 0\r\n" % u.encode()) == NOT_FOUND


def test_fail_gives_failed_state_and_result(c):
    u = new_uid()
    assert c.cmd(add_cmd(u, "failq")) == OK
    assert c.cmd(b"lease failq 1000\r\n") == lease_frame(u, "failq", 1000, b"x")
    assert c.cmd(fail_cmd(u, b"oops")) == OK
    j = c.inspect_job(u)
    assert (j["state"], j["fails"], j["attempts"]) == ("2", "1", "1")
    assert c.cmd(b"lease failq 0\r\n") == TIMEOUT
    assert c.cmd(b"result %s 0\r\n" % u.encode()) == result_frame(u, False, b"oops")


def test_id_spellings_are_one_canonical_id(c):
    base = new_uid()
    forms = [base.upper(), "{%s}" % base, "urn:uuid:%s" % base, base.replace("-", "")]
    assert c.cmd(add_cmd(forms[0], "ids")) == OK
    for f in forms[1:]:
        assert c.cmd(add_cmd(f, "ids")) == err("Duplicate job")
        assert c.inspect_job(f)["id"] == base
    assert c.cmd(b"lease ids 0\r\n") == lease_frame(base, "ids", 1000, b"x")
    assert c.cmd(complete_cmd(forms[2], b"r")) == OK
    assert c.cmd(b"result %s 0\r\n" % forms[1].encode()) == result_frame(base, True, b"r")


def test_limits_accepted_and_flag_quirks(c):
    u, w, x = new_uid(), new_uid(), new_uid()
    name = "l" * 255
    assert c.cmd(add_cmd(u, name, ttr=86_400_000, ttl=2_592_000_000, priority=-2147483648,
                         max_attempts=255, max_fails=255)) == OK
    j = c.inspect_job(u)
    assert (j["name"], j["ttr"], j["ttl"], j["priority"], j["max-attempts"],
            j["max-fails"]) == (name, "86400000", "2592000000", "-2147483648", "255", "255")
    # an unknown flag is ignored; `-priority=7=9` means 7; runs of spaces separate arguments
    assert c.cmd(b"add  %s   quirks  1000  60000  1 -foo=1 -priority=7=9\r\nx\r\n"
                 % w.encode()) == OK
    assert c.inspect_job(w)["priority"] == "7"
    assert c.cmd(add_cmd(x, "quirks", priority=2147483647)) == OK
    assert c.cmd(b"lease quirks 0\r\n") == lease_frame(x, "quirks", 1000, b"x")


def test_lease_order_and_zero_timeout(c):
    ids = [new_uid() for _ in range(3)]
    c.send(add_cmd(ids[0], "order", b"p0") + add_cmd(ids[1], "order", b"p10", priority=10)
           + add_cmd(ids[2], "order", b"p-5", priority=-5))
    assert [c.reply() for _ in range(3)] == [OK] * 3
    c.send(b"lease order 100\r\n" * 3)
    assert [c.reply() for _ in range(3)] == [
        lease_frame(ids[1], "order", 1000, b"p10"), lease_frame(ids[0], "order", 1000, b"p0"),
        lease_frame(ids[2], "order", 1000, b"p-5")]
    # deviation 4: `lease <name> 0` is a poll that returns a ready job
    z = new_uid()
    assert c.cmd(add_cmd(z, "zero") + b"lease zero 0\r\n") == OK
    assert c.reply() == lease_frame(z, "zero", 1000, b"x")
    assert c.cmd(b"lease zero 0\r\n") == TIMEOUT


def test_lease_over_several_names_takes_the_best(c):
    """Deviation 8: the highest priority across the names, then the oldest."""
    a, b1, b2, cc = (new_uid() for _ in range(4))
    for u, q, p in [(a, "multi-a", 1), (b1, "multi-b", 5), (cc, "multi-c", 5), (b2, "multi-b", 0)]:
        assert c.cmd(add_cmd(u, q, q.encode(), priority=p)) == OK
    got = [c.cmd(b"lease multi-a multi-b multi-c 100\r\n") for _ in range(4)]
    assert got == [lease_frame(b1, "multi-b", 1000, b"multi-b"),
                   lease_frame(cc, "multi-c", 1000, b"multi-c"),
                   lease_frame(a, "multi-a", 1000, b"multi-a"),
                   lease_frame(b2, "multi-b", 1000, b"multi-b")]


def test_complete_of_a_never_leased_job(c):
    u = new_uid()
    assert c.cmd(add_cmd(u, "nolease")) == OK
    assert c.cmd(complete_cmd(u, b"ok")) == OK
    assert c.cmd(b"result %s 0\r\n" % u.encode()) == result_frame(u, True, b"ok")
    assert c.cmd(b"lease nolease 0\r\n") == TIMEOUT


def test_inspect_payload_with_crlf_leaves_out_the_payload(c):
    """Deviation 3: key count 11 (12 with `time`), framing intact; lease gives it unaltered."""
    u, s = new_uid(), new_uid()
    body = b"a\r\nb\r\n"
    assert c.cmd(add_cmd(u, "crlf", body)) == OK
    assert c.cmd(schedule_cmd(s, "crlf", "2030-01-01T00:00:00Z", b"\n")) == OK
    j = c.inspect_job(u)
    assert "payload" not in j and len(j) == 11 + 1 and j["payload-size"] == "6"
    sj = c.inspect_job(s)
    assert "payload" not in sj and len(sj) == 12 + 1 and sj["time"] == "2030-01-01T00:00:00Z"
    assert c.cmd(b"lease crlf 0\r\n") == lease_frame(u, "crlf", 1000, body)


def test_inspect_server(wq_conns):
    a = wq_conns()
    frame = a.cmd(b"inspect server\r\n")
    assert frame.split(b"\r\n")[:2] == [b"+OK 1", b"server 3"]   # deviation 2: 3 keys follow
    keys = parse_entries(frame)[0][1]
    assert list(keys) == ["active-clients", "evicted-jobs", "started"]
    assert len(keys["started"]) == 20 and keys["started"].endswith("Z")
    n = steady_clients(a)
    b = wq_conns()
    wait_until(lambda: server_keys(a)["active-clients"] == str(n + 1), what="n + 1")
    b.close()
    wait_until(lambda: server_keys(a)["active-clients"] == str(n), what="back to n")


def _all_queues(c) -> list[tuple[str, dict]]:
    out, off = [], 0
    while True:
        page = parse_entries(c.cmd(b"inspect queues %d 100\r\n" % off))
        out += page
        if len(page) < 100:
            return out
        off += 100


def test_inspect_queues_and_queue(c):
    for q, n in [("iq-b", 2), ("iq-a", 1), ("iq-c", 0)]:
        for _ in range(n):
            assert c.cmd(add_cmd(new_uid(), q)) == OK
    assert c.cmd(schedule_cmd(new_uid(), "iq-c", "2030-01-01T00:00:00Z")) == OK
    assert c.cmd(b"lease iq-empty 0\r\n") == TIMEOUT        # a lease names a queue: it exists
    allq = _all_queues(c)
    names = [n for n, _ in allq]
    assert names == sorted(names) and "default" not in names
    i = names.index("iq-a")
    assert names[i:i + 4] == ["iq-a", "iq-b", "iq-c", "iq-empty"]
    assert [k for _, k in allq[i:i + 4]] == [
        {"ready-len": "1", "scheduled-len": "0"}, {"ready-len": "2", "scheduled-len": "0"},
        {"ready-len": "0", "scheduled-len": "1"}, {"ready-len": "0", "scheduled-len": "0"}]
    assert parse_entries(c.cmd(b"inspect queues %d 2\r\n" % (i + 1))) == allq[i + 1:i + 3]
    assert c.cmd(b"inspect queues 100000 10\r\n") == b"+OK 0\r\n"
    assert c.cmd(b"inspect queue iq-b\r\n") == b"+OK 1\r\niq-b 2\r\nready-len 2\r\nscheduled-len 0\r\n"
    assert c.cmd(b"inspect queue iq-empty\r\n") == (
        b"+OK 1\r\niq-empty 2\r\nready-len 0\r\nscheduled-len 0\r\n")


def test_inspect_jobs_and_scheduled_jobs(c):
    a, b, s1, s2 = (new_uid() for _ in range(4))
    c.send(add_cmd(a, "insq", b"a") + add_cmd(b, "insq", b"b", priority=5)
           + schedule_cmd(s1, "insq", "2031-01-01T00:00:00Z", b"s1")
           + schedule_cmd(s2, "insq", "2030-01-01T00:00:00.5Z", b"s2", priority=9))
    assert [c.reply() for _ in range(4)] == [OK] * 4
    jobs = parse_entries(c.cmd(b"inspect jobs insq 0 10\r\n"))
    assert [i for i, _ in jobs] == [b, a]          # serve order: priority, then FIFO
    assert [k["payload"] for _, k in jobs] == ["b", "a"] and len(jobs[0][1]) == 12
    assert [i for i, _ in parse_entries(c.cmd(b"inspect jobs insq 1 10\r\n"))] == [a]
    assert [i for i, _ in parse_entries(c.cmd(b"inspect jobs insq 0 1\r\n"))] == [b]
    assert c.cmd(b"inspect jobs insq 5 10\r\n") == b"+OK 0\r\n"
    sched = parse_entries(c.cmd(b"inspect scheduled-jobs insq 0 10\r\n"))
    assert [i for i, _ in sched] == [s2, s1]       # soonest first
    assert [k["time"] for _, k in sched] == ["2030-01-01T00:00:00Z", "2031-01-01T00:00:00Z"]
    assert all(len(k) == 13 and k["state"] == "0" for _, k in sched)
    assert c.cmd(b"inspect queue insq\r\n") == b"+OK 1\r\ninsq 2\r\nready-len 2\r\nscheduled-len 2\r\n"
    assert c.cmd(b"inspect scheduled-jobs iq-empty-2 0 10\r\n") == NOT_FOUND
    # a time in the past whose TTL is not over yet: ready at once
    p = new_uid()
    past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 5))
    assert c.cmd(schedule_cmd(p, "sched-past", past, b"late")) == OK
    assert c.cmd(b"lease sched-past 0\r\n") == lease_frame(p, "sched-past", 1000, b"late")


# ================================================================== pipelining, split reads
def test_pipelined_commands_answer_in_order(c):
    a, b = new_uid(), new_uid()
    c.send(add_cmd(a, "pipe", b"one") + add_cmd(b, "pipe", b"two", priority=1)
           + b"lease pipe 100\r\nbogus\r\n" + complete_cmd(b, b"r2") + b"inspect queue pipe\r\n"
           + b"result %s 100\r\n" % b.encode() + b"lease pipe 100\r\n" + fail_cmd(a, b"r1")
           + b"result %s 0\r\n" % a.encode() + b"delete %s\r\n" % a.encode()
           + b"lease pipe 0\r\n")
    assert [c.reply() for _ in range(12)] == [
        OK, OK, lease_frame(b, "pipe", 1000, b"two"), err("Unknown command"), OK,
        b"+OK 1\r\npipe 2\r\nready-len 1\r\nscheduled-len 0\r\n", result_frame(b, True, b"r2"),
        lease_frame(a, "pipe", 1000, b"one"), OK, result_frame(a, False, b"r1"), OK, TIMEOUT]
    assert c.silent_for(0.1)


def test_commands_split_across_writes(c):
    """Partial lines wait for the rest; the CRLF after a payload may arrive split (dev. 6)."""
    u = new_uid()
    c.send(b"inspect ser")
    assert c.silent_for(0.2)
    c.send(b"ver\r\n")
    assert c.reply().startswith(b"+OK 1\r\nserver 3\r\n")
    data = add_cmd(u, "split", b"abc")
    c.send(data[:-1])
    assert c.silent_for(0.2)
    c.send(data[-1:])
    assert c.reply() == OK
    v = new_uid()
    for byte in (add_cmd(v, "split", b"\r\n") + b"inspect queue split\r\n"):
        c.send(bytes([byte]))                      # one byte per write (TCP may merge some)
    assert c.reply() == OK
    assert c.reply() == b"+OK 1\r\nsplit 2\r\nready-len 2\r\nscheduled-len 0\r\n"
    assert c.cmd(b"lease split 0\r\n") == lease_frame(u, "split", 1000, b"abc")
