"""Durability: what a client was told is stored survives kill -9 (DESIGN.md, "Storage and
durability"), on SQLite and on PostgreSQL (the `db_url` fixture runs each test on both).

Each test runs real `jobgate serve` subprocesses on one database: the first is killed with
SIGKILL right after the last acknowledged reply (Server.kill), a second one starts on the same
database and is inspected over raw sockets. `buffered` and `memory` durability get smoke tests.
"""
from __future__ import annotations

import os
import threading

import greenstalk

from .support import Raw

N = 10_000


def body_of(i: int) -> bytes:
    """A distinct body per job, with bytes that must survive storage unaltered."""
    return b"job-%05d:" % i + bytes([i % 256, (i * 7) % 256, 0, 13, 10]) + b"\r\n" * (i % 3)


def stats_of(r: Raw, cmd: bytes = b"stats\r\n") -> dict:
    frame = r.cmd(cmd)
    assert frame.startswith(b"OK "), frame
    body = frame.split(b"\r\n", 1)[1][:-2].decode()
    return dict(line.split(": ", 1) for line in body.splitlines()[1:])


def pipeline(r: Raw, cmds: list[bytes], batch: int = 500) -> list[bytes]:
    """Send `cmds` in batches of `batch` per write and return every reply frame, in order."""
    out = []
    for i in range(0, len(cmds), batch):
        chunk = cmds[i:i + batch]
        r.send(b"".join(chunk))
        out.extend(r.reply() for _ in chunk)
    return out


# ============================================================================ kill -9, 10,000

def test_10000_acknowledged_puts_survive_kill9(db_url, servers):
    s = servers(db_url, durability="commit")
    c = greenstalk.Client(("127.0.0.1", s.port), encoding=None, use="durable")
    try:
        ids = [c.put(body_of(i), priority=1000 + (i % 5), ttr=60) for i in range(N)]
    finally:
        c.close()
    s.kill()  # right after the last INSERTED
    assert s.proc.returncode == -9
    assert ids == list(range(ids[0], ids[0] + N))

    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port, timeout=30)
    try:
        st = stats_of(r, b"stats-tube durable\r\n")
        assert st["current-jobs-ready"] == str(N)
        assert st["total-jobs"] == str(N)
        assert stats_of(r)["current-jobs-ready"] == str(N)
        # every job, every body: reserve them all (reservations are not stored: cheap)
        assert r.cmd(b"watch durable\r\n") == b"WATCHING 2\r\n"
        frames = pipeline(r, [b"reserve-with-timeout 0\r\n"] * N)
        got = {}
        for f in frames:
            head, rest = f.split(b"\r\n", 1)
            word, jid, size = head.split(b" ")
            assert word == b"RESERVED", f[:60]
            got[int(jid)] = rest[:-2]
            assert len(rest) - 2 == int(size)
        expected = {jid: body_of(i) for i, jid in enumerate(ids)}
        missing = sorted(set(expected) - set(got))
        assert not missing, f"{len(missing)} acknowledged jobs lost, first {missing[:10]}"
        bad = [jid for jid in expected if got[jid] != expected[jid]]
        assert not bad, f"{len(bad)} bodies altered, first {bad[:10]}"
        # priority order survived: all pri 1000 first (FIFO), then 1001, ...
        order = [int(f.split(b" ", 2)[1]) for f in frames]
        assert order == sorted(ids, key=lambda j: ((j - ids[0]) % 5, j))
        assert r.cmd(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
        # ids continue after the highest
        assert r.cmd(b"put 0 0 60 1\r\nn\r\n") == b"INSERTED %d\r\n" % (ids[-1] + 1)
    finally:
        r.close()


def test_pipelined_puts_survive_kill9(db_url, servers):
    """Raw pipelining: 5,000 puts in writes of 500; every INSERTED reply is a committed job."""
    s = servers(db_url, durability="commit")
    r = Raw(s.port, timeout=30)
    n = 5000
    replies = pipeline(r, [b"put 0 0 60 %d\r\n%s\r\n" % (len(body_of(i)), body_of(i))
                           for i in range(n)])
    s.kill()
    r.close()
    ids = [int(x.split()[1]) for x in replies]
    assert all(x.startswith(b"INSERTED ") for x in replies)
    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port, timeout=30)
    try:
        assert stats_of(r)["current-jobs-ready"] == str(n)
        found = pipeline(r, [b"peek %d\r\n" % j for j in ids])
        for i, (jid, f) in enumerate(zip(ids, found)):
            b = body_of(i)
            assert f == b"FOUND %d %d\r\n%s\r\n" % (jid, len(b), b), (jid, f[:60])
    finally:
        r.close()


def kill9_while_producing(s, producers: int, per_write: int, enough: int) -> dict[int, bytes]:
    """`producers` connections each write `per_write` puts at a time and wait for their
    INSERTED replies (per_write=1: unpipelined); once `enough` puts are acknowledged the
    server is killed with SIGKILL. Returns every acknowledged id -> body; fails on any
    error reply."""
    acked: dict[int, bytes] = {}
    lock = threading.Lock()
    reached = threading.Event()
    errors: list = []

    def producer(k: int) -> None:
        try:
            r = Raw(s.port, timeout=30)
        except OSError as e:  # pragma: no cover - reported below
            errors.append(e)
            return
        try:
            for batch in range(10_000 // per_write):  # bounded; the kill ends it much sooner
                bodies = [b"p%d-%d-%d" % (k, batch, j) for j in range(per_write)]
                r.send(b"".join(b"put 0 0 60 %d\r\n%s\r\n" % (len(b), b) for b in bodies))
                for b in bodies:
                    rep = r.reply()
                    assert rep.startswith(b"INSERTED "), rep
                    with lock:
                        acked[int(rep.split()[1])] = b
                        if len(acked) >= enough:
                            reached.set()
        except (EOFError, OSError):
            return  # the server was killed mid-stream
        except AssertionError as e:
            errors.append(e)
        finally:
            r.close()

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(producers)]
    for t in threads:
        t.start()
    reached.wait(60)
    s.kill()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    with lock:
        snapshot = dict(acked)
    assert len(snapshot) >= enough
    return snapshot


def assert_stored(r: Raw, snapshot: dict[int, bytes]) -> None:
    """Every acknowledged job of `snapshot` (id -> body) is there with its body."""
    ids = sorted(snapshot)
    found = pipeline(r, [b"peek %d\r\n" % j for j in ids])
    lost = [j for j, f in zip(ids, found) if f == b"NOT_FOUND\r\n"]
    assert not lost, f"{len(lost)} acknowledged jobs lost after kill -9, first {lost[:10]}"
    for j, f in zip(ids, found):
        b = snapshot[j]
        assert f == b"FOUND %d %d\r\n%s\r\n" % (j, len(b), b)


def test_acknowledged_puts_survive_kill9_under_concurrent_load(db_url, servers):
    """Four producers pipeline puts; kill -9 while they run; every acknowledged id is stored
    with its body (unacknowledged ones may or may not be)."""
    s = servers(db_url, durability="commit")
    snapshot = kill9_while_producing(s, producers=4, per_write=50, enough=3000)
    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port, timeout=30)
    try:
        assert_stored(r, snapshot)
        total = int(stats_of(r)["current-jobs-ready"])
        assert total >= len(snapshot)
        # ids continue after everything ever handed out
        top = max(snapshot)
        rep = r.cmd(b"put 0 0 60 1\r\nz\r\n")
        assert int(rep.split()[1]) > top
    finally:
        r.close()


def test_kill9_under_32_unpipelined_producers(db_url, servers):
    """32 connections each put one job and wait for INSERTED before the next (the worker's
    traffic, whose puts the writer gathers into shared batches); kill -9 while they run:
    every acknowledged job is stored with its body."""
    s = servers(db_url, durability="commit")
    snapshot = kill9_while_producing(s, producers=32, per_write=1, enough=2000)
    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port, timeout=30)
    try:
        assert_stored(r, snapshot)
    finally:
        r.close()


# ======================================================================= states across kill -9

def test_states_survive_kill9(db_url, servers):
    s = servers(db_url, durability="commit")
    a = Raw(s.port)
    b = Raw(s.port)
    seq = [
        (a, b"use st\r\n", b"USING st\r\n"),
        (a, b"watch st\r\n", b"WATCHING 2\r\n"),
        (a, b"ignore default\r\n", b"WATCHING 1\r\n"),
        (a, b"put 100 0 60 5\r\nready\r\n", b"INSERTED 1\r\n"),
        (a, b"put 100 0 60 7\r\ndeleted\r\n", b"INSERTED 2\r\n"),
        (a, b"put 100 0 60 6\r\nburied\r\n", b"INSERTED 3\r\n"),
        (a, b"put 100 100 60 7\r\ndelayed\r\n", b"INSERTED 4\r\n"),
        (a, b"put 100 0 60 8\r\nreserved\r\n", b"INSERTED 5\r\n"),
        (a, b"put 100 0 60 8\r\nreleased\r\n", b"INSERTED 6\r\n"),
        (a, b"put 100 1 60 5\r\nsoon!\r\n", b"INSERTED 7\r\n"),
        (a, b"put 100 0 60 6\r\nkicked\r\n", b"INSERTED 8\r\n"),
        (a, b"put 100 0 60 7\r\nhighest\r\n", b"INSERTED 9\r\n"),
        (a, b"delete 2\r\n", b"DELETED\r\n"),
        (a, b"reserve-job 3\r\n", b"RESERVED 3 6\r\nburied\r\n"),
        (a, b"bury 3 42\r\n", b"BURIED\r\n"),
        (a, b"reserve-job 6\r\n", b"RESERVED 6 8\r\nreleased\r\n"),
        (a, b"release 6 7 100\r\n", b"RELEASED\r\n"),
        (a, b"reserve-job 8\r\n", b"RESERVED 8 6\r\nkicked\r\n"),
        (a, b"bury 8 0\r\n", b"BURIED\r\n"),
        (a, b"kick-job 8\r\n", b"KICKED\r\n"),
        (a, b"delete 9\r\n", b"DELETED\r\n"),  # the highest id is gone: ids must not reuse it
        (b, b"use st\r\n", b"USING st\r\n"),
        (b, b"reserve-job 5\r\n", b"RESERVED 5 8\r\nreserved\r\n"),
    ]
    for conn, cmd, want in seq:
        assert conn.cmd(cmd) == want, cmd
    s.kill()  # right after the last reply; b still holds job 5
    a.close()
    b.close()

    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port)
    try:
        assert r.cmd(b"use st\r\n") == b"USING st\r\n"
        st = stats_of(r, b"stats-tube st\r\n")
        assert (st["current-jobs-ready"], st["current-jobs-buried"], st["current-jobs-delayed"],
                st["current-jobs-reserved"]) in (("3", "1", "3", "0"), ("4", "1", "2", "0"))
        assert r.cmd(b"peek 1\r\n") == b"FOUND 1 5\r\nready\r\n"
        assert r.cmd(b"peek 2\r\n") == b"NOT_FOUND\r\n"  # deleted stays deleted
        assert r.cmd(b"peek 9\r\n") == b"NOT_FOUND\r\n"
        j3 = stats_of(r, b"stats-job 3\r\n")  # buried stays buried, with its bury priority
        assert (j3["state"], j3["pri"], j3["buries"]) == ("buried", "42", "1")
        assert r.cmd(b"peek-buried\r\n") == b"FOUND 3 6\r\nburied\r\n"
        j4 = stats_of(r, b"stats-job 4\r\n")  # delayed keeps its delay
        assert (j4["state"], j4["delay"], j4["pri"]) == ("delayed", "100", "100")
        assert 80 <= int(j4["time-left"]) <= 99
        j5 = stats_of(r, b"stats-job 5\r\n")  # reserved comes back ready
        assert j5["state"] == "ready" and j5["tube"] == '"st"'
        j6 = stats_of(r, b"stats-job 6\r\n")  # released with delay: delayed, new priority
        assert (j6["state"], j6["pri"], j6["delay"], j6["releases"]) == ("delayed", "7", "100", "1")
        j8 = stats_of(r, b"stats-job 8\r\n")
        assert (j8["state"], j8["kicks"], j8["buries"]) == ("ready", "1", "1")
        # ids continue after the highest ever handed out (9), even though 9 was deleted
        assert r.cmd(b"put 0 0 60 3\r\nnew\r\n") == b"INSERTED 10\r\n"
        # the 1 s delayed job becomes ready (its deadline was kept, possibly already past)
        assert r.cmd(b"watch st\r\n") == b"WATCHING 2\r\n"
        assert r.cmd(b"ignore default\r\n") == b"WATCHING 1\r\n"
        got = []
        for _ in range(5):  # ready now: 1, 5, 8, 10 and (within its second) 7
            rep = r.cmd(b"reserve-with-timeout 5\r\n")
            assert rep.startswith(b"RESERVED "), rep
            got.append(int(rep.split()[1]))
        assert sorted(got) == [1, 5, 7, 8, 10]
        assert got[:2] == [8, 10]  # pri 0 (8 was buried with pri 0) before pri 100
        assert r.cmd(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    finally:
        r.close()


def test_deletes_are_durable_at_scale(db_url, servers):
    """Put 2,000, delete every other one, kill -9: exactly the other half is left."""
    s = servers(db_url, durability="commit")
    r = Raw(s.port, timeout=30)
    n = 2000
    ins = pipeline(r, [b"put 0 0 60 4\r\n%04d\r\n" % i for i in range(n)])
    ids = [int(x.split()[1]) for x in ins]
    dels = pipeline(r, [b"delete %d\r\n" % j for j in ids[::2]])
    assert set(dels) == {b"DELETED\r\n"}
    # bury some of the rest
    for j in ids[1:200:2]:
        assert r.cmd(b"reserve-job %d\r\n" % j).startswith(b"RESERVED %d " % j)
        assert r.cmd(b"bury %d 0\r\n" % j) == b"BURIED\r\n"
    s.kill()
    r.close()
    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port, timeout=30)
    try:
        st = stats_of(r)
        assert st["current-jobs-ready"] == str(n // 2 - 100)
        assert st["current-jobs-buried"] == "100"
        peeks = pipeline(r, [b"peek %d\r\n" % j for j in ids])
        for i, (j, p) in enumerate(zip(ids, peeks)):
            if i % 2 == 0:
                assert p == b"NOT_FOUND\r\n", j
            else:
                assert p == b"FOUND %d 4\r\n%04d\r\n" % (j, i), j
    finally:
        r.close()


def test_kill9_twice_in_a_row(db_url, servers):
    """A restarted server is itself durable: put, kill, restart, put, kill, restart."""
    s = servers(db_url, durability="commit")
    r = Raw(s.port)
    assert r.cmd(b"put 0 0 60 3\r\none\r\n") == b"INSERTED 1\r\n"
    s.kill()
    r.close()
    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port)
    assert r.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 3\r\none\r\n"
    assert r.cmd(b"put 0 0 60 3\r\ntwo\r\n") == b"INSERTED 2\r\n"
    assert r.cmd(b"delete 1\r\n") == b"DELETED\r\n"
    s2.kill()
    r.close()
    s3 = servers(db_url, durability="commit")
    r = Raw(s3.port)
    try:
        assert r.cmd(b"peek 1\r\n") == b"NOT_FOUND\r\n"
        assert r.cmd(b"peek 2\r\n") == b"FOUND 2 3\r\ntwo\r\n"
        assert r.cmd(b"put 0 0 60 5\r\nthree\r\n") == b"INSERTED 3\r\n"
    finally:
        r.close()


def test_ids_never_reused_after_kill9(db_url, servers):
    """The highest job created and deleted in one pipelined write (one group commit) still
    moves the id counter: after kill -9 the next put gets a new id."""
    s = servers(db_url, durability="commit")
    r = Raw(s.port)
    assert r.cmd(b"put 0 0 60 1\r\na\r\n") == b"INSERTED 1\r\n"
    r.send(b"put 0 0 60 1\r\nx\r\ndelete 2\r\nput 0 0 60 1\r\ny\r\ndelete 3\r\n")
    assert [r.reply() for _ in range(4)] == [b"INSERTED 2\r\n", b"DELETED\r\n",
                                             b"INSERTED 3\r\n", b"DELETED\r\n"]
    s.kill()
    r.close()
    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port)
    try:
        assert r.cmd(b"peek 2\r\n") == b"NOT_FOUND\r\n"
        assert r.cmd(b"put 0 0 60 1\r\nb\r\n") == b"INSERTED 4\r\n"
    finally:
        r.close()


def test_large_binary_bodies_and_odd_tube_names_survive_kill9(db_url, servers):
    s = servers(db_url, durability="commit")
    r = Raw(s.port, timeout=30)
    big = bytes(range(256)) * 255 + bytes(range(255))  # 65535 bytes, every byte value
    cases = [(b"a+/;.$_()-", big), (b"x" * 200, big[::-1]), (b"default", b""),
             (b"bin", b"\x00\r\n\xff" * 1000)]
    ids = []
    for tube, body in cases:
        assert r.cmd(b"use %s\r\n" % tube) == b"USING %s\r\n" % tube
        rep = r.cmd(b"put 4294967295 0 4294967295 %d\r\n%s\r\n" % (len(body), body))
        assert rep.startswith(b"INSERTED ")
        ids.append(int(rep.split()[1]))
    s.kill()
    r.close()
    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port, timeout=30)
    try:
        for jid, (tube, body) in zip(ids, cases):
            assert r.cmd(b"peek %d\r\n" % jid) == b"FOUND %d %d\r\n%s\r\n" % (jid, len(body), body)
            st = stats_of(r, b"stats-job %d\r\n" % jid)
            assert (st["tube"], st["pri"], st["ttr"]) == ('"%s"' % tube.decode(), "4294967295",
                                                          "4294967295")
    finally:
        r.close()


# ========================================================================= buffered and memory

def test_buffered_durability_clean_stop(db_url, servers):
    s = servers(db_url, durability="buffered")
    r = Raw(s.port, timeout=30)
    n = 3000
    ins = pipeline(r, [b"put 0 0 60 %d\r\n%s\r\n" % (len(body_of(i)), body_of(i))
                       for i in range(n)])
    assert all(x.startswith(b"INSERTED ") for x in ins)
    assert r.cmd(b"delete 1\r\n") == b"DELETED\r\n"
    r.close()
    out, err = s.stop()  # SIGTERM: flush, then exit 0
    assert s.proc.returncode == 0, err
    s2 = servers(db_url, durability="commit")
    r = Raw(s2.port, timeout=30)
    try:
        assert stats_of(r)["current-jobs-ready"] == str(n - 1)
        assert r.cmd(b"peek 1\r\n") == b"NOT_FOUND\r\n"
        b = body_of(n - 1)
        assert r.cmd(b"peek %d\r\n" % n) == b"FOUND %d %d\r\n%s\r\n" % (n, len(b), b)
    finally:
        r.close()


def test_buffered_durability_acknowledges_and_serves(db_url, servers):
    s = servers(db_url, durability="buffered")
    with greenstalk.Client(("127.0.0.1", s.port), encoding=None) as c:
        ids = [c.put(b"b%d" % i) for i in range(200)]
        for i, jid in enumerate(ids):
            job = c.reserve(timeout=1)
            assert (job.id, job.body) == (jid, b"b%d" % i)
            c.delete(job)
        assert c.stats()["current-jobs-ready"] == 0


def test_memory_durability_smoke(tmp_path, servers):
    s = servers(None, durability="memory", cwd=str(tmp_path))
    with greenstalk.Client(("127.0.0.1", s.port), encoding=None) as c:
        ids = [c.put(b"m%d" % i) for i in range(500)]
        assert ids == list(range(1, 501))
        job = c.reserve(timeout=1)
        c.bury(job)
        assert c.stats_job(job.id)["state"] == "buried"
    out, err = s.stop()
    assert s.proc.returncode == 0, err
    # memory mode touches no database
    assert not any(name.startswith("jobgate.db") for name in os.listdir(tmp_path))
    s2 = servers(None, durability="memory", cwd=str(tmp_path))
    with greenstalk.Client(("127.0.0.1", s2.port), encoding=None) as c:
        assert c.stats()["current-jobs-ready"] == 0
        assert c.put(b"again") == 1
