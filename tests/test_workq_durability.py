"""workq durability: what a client was told is stored (`+OK`) survives kill -9, on SQLite and
PostgreSQL (the `db_url` fixture runs each test on both), as tests/test_durability.py checks
for beanstalk (DESIGN.md, "Storage and durability"; docs/workq.md, "Durability").

Each test runs real `jobgate serve` subprocesses on one database: the first is killed with
SIGKILL right after the last acknowledged reply, a second one starts on the same database and
is inspected over raw workq sockets.
"""
from __future__ import annotations

import time


from .server_support import wait_until
from .workq_support import (OK, TIMEOUT, WorkqRaw, add_cmd, complete_cmd, fail_cmd,
                            lease_frame, new_uid, parse_entries, result_frame, schedule_cmd)

N = 10_000


def payload_of(i: int) -> bytes:
    """A distinct payload per job, with bytes that must survive storage unaltered."""
    return b"wq-%05d:" % i + bytes([i % 256, (i * 7) % 256, 0, 13, 10]) + b"\r\n" * (i % 3)


def pipeline(c: WorkqRaw, cmds: list[bytes], batch: int = 500) -> list[bytes]:
    """Send `cmds` in writes of `batch` commands and return every reply frame, in order."""
    out = []
    for i in range(0, len(cmds), batch):
        chunk = cmds[i:i + batch]
        c.send(b"".join(chunk))
        out.extend(c.reply() for _ in chunk)
    return out


def test_10000_pipelined_adds_survive_kill9(db_url, servers):
    s = servers(db_url, workq=True)
    c = WorkqRaw(s.workq_port, timeout=30)
    uids = [new_uid() for _ in range(N)]
    replies = pipeline(c, [add_cmd(u, "durable", payload_of(i), ttr=60_000, ttl=3_600_000,
                                   priority=i % 5) for i, u in enumerate(uids)])
    s.kill()                                           # right after the last +OK
    c.close()
    assert s.proc.returncode == -9
    assert replies == [OK] * N

    s2 = servers(db_url, workq=True)
    c = WorkqRaw(s2.workq_port, timeout=30)
    try:
        assert c.cmd(b"inspect queue durable\r\n") == (
            b"+OK 1\r\ndurable 2\r\nready-len %d\r\nscheduled-len 0\r\n" % N)
        # every job: inspect (100 per page) in serve order, then lease them all
        pages = pipeline(c, [b"inspect jobs durable %d 100\r\n" % off
                             for off in range(0, N, 100)], batch=20)
        listed = [e for p in pages for e in parse_entries(p)]
        order = sorted(range(N), key=lambda i: (-(i % 5), i))   # priority desc, then FIFO
        assert [ident for ident, _ in listed] == [uids[i] for i in order]
        for i, (_, keys) in zip(order, listed):
            assert (keys["payload-size"], keys["priority"], keys["ttl"], keys["state"]) == (
                str(len(payload_of(i))), str(i % 5), "3600000", "0")
        frames = pipeline(c, [b"lease durable 0\r\n"] * N)
        lost = [uids[i] for i, f in zip(order, frames) if f == TIMEOUT]
        assert not lost, f"{len(lost)} acknowledged jobs lost, first {lost[:5]}"
        bad = [uids[i] for i, f in zip(order, frames)
               if f != lease_frame(uids[i], "durable", 60_000, payload_of(i))]
        assert not bad, f"{len(bad)} jobs altered, first {bad[:5]}"
        assert c.cmd(b"lease durable 0\r\n") == TIMEOUT
    finally:
        c.close()


def _utc(seconds_from_now: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds_from_now))


def test_results_counts_leases_schedules_and_ttls_survive_kill9(db_url, servers):
    s = servers(db_url, workq=True)
    c = WorkqRaw(s.workq_port)
    done, failed, retried, leased, sched, short, long_ = (new_uid() for _ in range(7))
    when = _utc(3600)
    steps = [
        (add_cmd(done, "st-done", b"d", ttl=600_000), OK),
        (b"lease st-done 0\r\n", lease_frame(done, "st-done", 1000, b"d")),
        (complete_cmd(done, b"\x00result\r\n"), OK),
        (add_cmd(failed, "st-fail", b"f", ttr=60_000, max_attempts=5), OK),
        (b"lease st-fail 0\r\n", lease_frame(failed, "st-fail", 60_000, b"f")),
        (fail_cmd(failed, b"broken"), OK),
        (add_cmd(retried, "st-retry", b"r", ttr=60_000, max_fails=3, max_attempts=9), OK),
        (b"lease st-retry 0\r\n", lease_frame(retried, "st-retry", 60_000, b"r")),
        (fail_cmd(retried, b"again"), OK),            # fails 1 < 3: pending
        (b"lease st-retry 0\r\n", lease_frame(retried, "st-retry", 60_000, b"r")),
        (add_cmd(leased, "st-lease", b"l", ttr=60_000, priority=-7), OK),
        (b"lease st-lease 0\r\n", lease_frame(leased, "st-lease", 60_000, b"l")),
        (schedule_cmd(sched, "st-sched", when, b"s", ttl=7_200_000, priority=3), OK),
        (add_cmd(short, "st-ttl", b"short", ttl=3000), OK),
        (add_cmd(long_, "st-ttl", b"long", ttl=2_592_000_000), OK),
    ]
    for cmd, want in steps:
        assert c.cmd(cmd) == want, cmd
    short_added = time.monotonic()
    s.kill()                                           # retried and leased are still leased
    c.close()
    # restart once the short TTL is over: its stored end must evict it at once, not 3 s
    # after the restart (which a TTL restarted at load would do)
    time.sleep(max(0.0, short_added + 3.2 - time.monotonic()))
    s2 = servers(db_url, workq=True)
    c = WorkqRaw(s2.workq_port)
    try:
        def job(u: str):
            j = c.inspect_job(u)
            return j and (j["state"], j["attempts"], j["fails"])
        assert job(done) == ("1", "1", "0")
        assert c.inspect_job(done)["ttl"] == "600000"
        assert c.cmd(b"result %s 0\r\n" % done.encode()) == result_frame(
            done, True, b"\x00result\r\n")
        assert job(failed) == ("2", "1", "1")
        assert c.cmd(b"result %s 0\r\n" % failed.encode()) == result_frame(failed, False,
                                                                          b"broken")
        # leased jobs come back pending with their attempts (and fails) counted
        assert job(retried) == ("3", "2", "1")
        r = c.inspect_job(retried)
        assert (r["max-fails"], r["max-attempts"]) == ("3", "9")
        assert job(leased) == ("3", "1", "0")
        assert c.inspect_job(leased)["priority"] == "-7"
        assert c.cmd(b"lease st-lease 0\r\n") == lease_frame(leased, "st-lease", 60_000, b"l")
        assert job(leased) == ("4", "2", "0")
        # the scheduled job is still scheduled, at the same time
        (ident, keys), = parse_entries(c.cmd(b"inspect scheduled-jobs st-sched 0 10\r\n"))
        assert (ident, keys["time"], keys["ttl"], keys["priority"], keys["state"]) == (
            sched, when, "7200000", "3", "0")
        assert c.cmd(b"inspect queue st-sched\r\n") == (
            b"+OK 1\r\nst-sched 2\r\nready-len 0\r\nscheduled-len 1\r\n")
        assert c.cmd(b"lease st-sched 0\r\n") == TIMEOUT
        # TTLs: the short one ended during the downtime, the long one is kept
        wait_until(lambda: c.inspect_job(short) is None, timeout=2,
                   what="the 3 s TTL job, over before the restart, to be evicted")
        (_, info), = parse_entries(c.cmd(b"inspect server\r\n"))
        assert info["evicted-jobs"] == "1"
        assert c.inspect_job(long_)["ttl"] == "2592000000"
        assert c.cmd(b"lease st-ttl 0\r\n") == lease_frame(long_, "st-ttl", 1000, b"long")
    finally:
        c.close()


def test_deletes_and_run_jobs_do_not_come_back_after_kill9(db_url, servers):
    s = servers(db_url, workq=True)
    c = WorkqRaw(s.workq_port)
    keep, gone, ran = new_uid(), new_uid(), new_uid()
    assert c.cmd(add_cmd(keep, "st-del", b"keep")) == OK
    assert c.cmd(add_cmd(gone, "st-del", b"gone")) == OK
    assert c.cmd(b"delete %s\r\n" % gone.encode()) == OK
    c.send(b"run %s st-run 1000 200 1\r\nx\r\n" % ran.encode())
    assert c.reply() == TIMEOUT                        # no worker: the run's job is deleted
    s.kill()
    c.close()
    s2 = servers(db_url, workq=True)
    c = WorkqRaw(s2.workq_port)
    try:
        assert c.inspect_job(gone) is None and c.inspect_job(ran) is None
        assert c.cmd(b"lease st-del 0\r\n") == lease_frame(keep, "st-del", 1000, b"keep")
        assert c.cmd(b"lease st-del st-run 0\r\n") == TIMEOUT
        assert c.cmd(add_cmd(gone, "st-del", b"new")) == OK   # its id is free again
    finally:
        c.close()
