"""Storage faults are survived, not fatal (issue 15, item 1; docs/operations.md "Storage faults").

Real faults only: PostgreSQL backends terminated with pg_terminate_backend, PostgreSQL cut off
behind a TCP proxy (an outage or a partition as jobgate sees it), a COMMIT whose answer is lost
after PostgreSQL executed it, and a SQLite database on a tmpfs that fills up. Each test asserts:
every acknowledged job is stored, nothing is delivered twice, the clients' exact error replies,
and that the server still serves every dialect afterwards, without a restart.
"""
from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from .bunqueue_support import BQ
from .fault_support import PgProxy, SmallDisk, can_mount
from .server_support import run_cli, serve_argv
from .support import Raw, Server, free_port
from .test_durability import assert_stored
from .workq_support import WorkqRaw, add_cmd, new_uid

OUT_OF_MEMORY = b"OUT_OF_MEMORY\r\n"
WORKQ_DOWN = b"-SERVER-ERROR Storage unavailable\r\n"


def put(r: Raw, body: bytes, tube: bytes = b"") -> bytes:
    if tube:
        r.send(b"use %s\r\n" % tube)
        assert r.reply() == b"USING %s\r\n" % tube
    r.send(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
    return r.reply()


def until(pred, what: str, timeout: float = 30.0):
    """Poll `pred()` (returns a truthy value when done) until it holds; fails after `timeout`
    s naming `what`. A wait for a state, not a timing assertion."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Probes:
    """Puts on fresh connections until one is refused with OUT_OF_MEMORY: a put that raced
    with the failing commit is held (no reply yet) and stays open in `held`, to be answered
    once storage is back (`settle()` returns their acknowledged ids -> bodies)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.held: list = []

    def refused(self) -> bool:
        c = Raw(self.port, timeout=60)
        body = b"probe%d" % len(self.held)
        c.send(b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body))
        c.sock.settimeout(0.3)
        try:
            rep = c.reply()
        except TimeoutError:
            c.sock.settimeout(60)
            self.held.append((c, body))
            return False
        c.close()
        assert rep == OUT_OF_MEMORY, rep
        return True

    def settle(self) -> dict:
        out = {}
        for c, body in self.held:
            rep = c.reply()
            assert rep.startswith(b"INSERTED "), rep
            out[int(rep.split()[1])] = body
            c.close()
        return out


def drain_ids(port: int, tube: bytes = b"default") -> list[int]:
    """Reserve every ready job of `tube` (and delete it); the ids in delivery order."""
    r = Raw(port)
    r.send(b"watch %s\r\n" % tube)
    r.reply()
    ids = []
    while True:
        r.send(b"reserve-with-timeout 0\r\n")
        rep = r.reply()
        if rep == b"TIMED_OUT\r\n":
            break
        assert rep.startswith(b"RESERVED "), rep
        j = int(rep.split()[1])
        ids.append(j)
        r.send(b"delete %d\r\n" % j)
        assert r.reply() == b"DELETED\r\n"
    r.close()
    return ids


def serves_every_dialect(s: Server, tag: str) -> None:
    """A put, an add and a PUSH are acknowledged and readable through every listener."""
    r = Raw(s.port)
    rep = put(r, b"after-" + tag.encode(), b"after")
    assert rep.startswith(b"INSERTED "), rep
    r.close()
    w = WorkqRaw(s.workq_port)
    assert w.cmd(add_cmd(new_uid(), "after", b"w")) == b"+OK\r\n"
    w.close()
    b = BQ(s.bunqueue_port)
    assert b.call("PUSH", queue="after", data={"t": tag})["ok"] is True
    b.sock.close()
    r = Raw(s.port)
    r.send(b"stats-tube after\r\n")
    assert b"current-jobs-ready: 3\n" in r.reply()   # all three, through beanstalk
    r.close()


def database_of(url: str) -> str:
    return sa.make_url(url).database


# ------------------------------------------------------------------ PostgreSQL
def test_lost_commit_answer_is_resolved_without_writing_twice(pg_url):
    """PostgreSQL executes a COMMIT but its answer never arrives (the connection drops): the
    writer's retry reads the commit sequence back on a fresh connection, finds the batch
    stored and does not write it again; the put is acknowledged exactly once."""
    proxy = PgProxy()
    s = Server(proxy.url(database_of(pg_url)), workq=True, bunqueue=True)
    try:
        r = Raw(s.port)
        assert put(r, b"before").startswith(b"INSERTED ")
        proxy.lose_commit_answer()
        rep = put(r, b"unknown-outcome")
        assert proxy.lost_commits == 1
        assert rep.startswith(b"INSERTED "), rep
        j = int(rep.split()[1])
        eng = sa.create_engine(pg_url)
        with eng.connect() as c:
            assert c.exec_driver_sql("SELECT count(*) FROM jobs WHERE id = %s", (j,)).scalar() == 1
            # written once: one 'put' history row, not two
            assert c.exec_driver_sql("SELECT count(*) FROM job_events WHERE job_id = %s AND "
                                     "event = 'put'", (j,)).scalar() == 1
        eng.dispose()
        assert put(r, b"after").startswith(b"INSERTED ")
        serves_every_dialect(s, "lost-commit")
        r.close()
    finally:
        out, err = s.stop()
        proxy.close()
    assert s.proc.returncode == 0, err
    assert b"Traceback" not in err, err


def test_database_cut_off_is_answered_with_server_errors_and_recovers(pg_url):
    """PostgreSQL unreachable (every connection cut, new ones refused): the put caught in the
    failing batch waits; later commands that need a commit get each dialect's server error;
    reads and reserves of jobs already stored keep working; once PostgreSQL is back the held
    put is acknowledged and everything works again, without a restart."""
    proxy = PgProxy()
    s = Server(proxy.url(database_of(pg_url)), workq=True, bunqueue=True)
    try:
        r = Raw(s.port)
        stored = put(r, b"stored")
        assert stored.startswith(b"INSERTED ")
        stored_id = int(stored.split()[1])
        proxy.cut()
        held = Raw(s.port, timeout=60)
        held.send(b"put 0 0 60 4\r\nheld\r\n")     # its batch fails: no reply yet
        # the writer retries at once, then declares storage unavailable: puts are refused
        probes = Probes(s.port)
        until(probes.refused, "puts refused with OUT_OF_MEMORY")
        other = Raw(s.port)
        assert put(other, b"refused") == OUT_OF_MEMORY
        other.send(b"delete %d\r\n" % stored_id)
        assert other.reply() == b"INTERNAL_ERROR\r\n"         # as beanstalkd's failed walwrite
        other.send(b"delete 999999\r\n")
        assert other.reply() == b"NOT_FOUND\r\n"
        other.send(b"kick 10\r\n")
        assert other.reply() == b"KICKED 0\r\n"
        w = WorkqRaw(s.workq_port)
        assert w.cmd(add_cmd(new_uid(), "q", b"w")) == WORKQ_DOWN
        b = BQ(s.bunqueue_port)
        rep = b.call("PUSH", queue="bq", data={"x": 1})
        assert rep == {"ok": False, "error": "Storage unavailable"}
        # reads and reserves of stored jobs keep working
        other.send(b"peek %d\r\n" % stored_id)
        assert other.reply() == b"FOUND %d 6\r\nstored\r\n" % stored_id
        other.send(b"reserve-with-timeout 0\r\n")
        assert other.reply() == b"RESERVED %d 6\r\nstored\r\n" % stored_id
        other.send(b"release %d 0 0\r\n" % stored_id)
        assert other.reply() == OUT_OF_MEMORY
        other.send(b"stats-job %d\r\n" % stored_id)
        assert b"state: reserved" in other.reply()
        proxy.heal()
        rep = held.reply()                  # the held put, acknowledged once it is stored
        assert rep.startswith(b"INSERTED "), rep
        held_id = int(rep.split()[1])
        raced = probes.settle()
        until(lambda: put(other, b"back").startswith(b"INSERTED "), "puts accepted again")
        other.send(b"delete %d\r\n" % stored_id)
        assert other.reply() == b"DELETED\r\n"
        assert_stored(other, {held_id: b"held", **raced})
        serves_every_dialect(s, "cut")
        for c in (r, held, other, w):
            c.close()
        b.sock.close()
    finally:
        out, err = s.stop()
        proxy.close()
    assert s.proc.returncode == 0, err
    log = err.decode()
    assert log.count("storage unavailable") == 1, log      # each state change logged once
    assert log.count("storage available again") == 1, log


def test_partition_postgresql_did_not_notice_is_recovered_from(pg_url):
    """A partition: jobgate's connections are gone but PostgreSQL still has their sessions,
    one of them holding the database's advisory lock. Once the network is back, jobgate sees
    that the lock's holder is its own lost session (its application_name), ends it, takes the
    lock again and goes on; it does not mistake itself for another server and stop."""
    proxy = PgProxy()
    s = Server(proxy.url(database_of(pg_url)), workq=True, bunqueue=True)
    try:
        r = Raw(s.port, timeout=60)
        assert put(r, b"before").startswith(b"INSERTED ")
        proxy.partition()
        probes = Probes(s.port)
        until(probes.refused, "puts refused with OUT_OF_MEMORY")
        proxy.heal()
        raced = probes.settle()
        until(lambda: put(r, b"back").startswith(b"INSERTED "), "puts accepted again")
        assert_stored(r, raced)
        assert s.proc.poll() is None
        serves_every_dialect(s, "partition")
        r.close()
    finally:
        out, err = s.stop()
        proxy.close()
    assert s.proc.returncode == 0, err
    assert b"lost the database's lock" not in err, err


def test_terminated_backends_mid_load_lose_nothing(pg_url):
    """pg_terminate_backend on every connection of the server, five times while four
    producers put: the server keeps running, every acknowledged put is stored, nothing is
    delivered twice, the advisory lock is held again (a second server is refused) and every
    dialect serves."""
    s = Server(pg_url, workq=True, bunqueue=True)
    acked: dict[int, bytes] = {}
    replies: list[bytes] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list = []

    def producer(k: int) -> None:
        try:
            r = Raw(s.port, timeout=60)
            n = 0
            while not stop.is_set():
                body = b"p%d-%d" % (k, n)
                n += 1
                rep = put(r, body)
                with lock:
                    replies.append(rep)
                    if rep.startswith(b"INSERTED "):
                        acked[int(rep.split()[1])] = body
            r.close()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    name = database_of(pg_url)
    try:
        terminated = 0
        base = 0
        for _ in range(5):
            # 200 puts acknowledged since the last termination: the server has committed on
            # a new session, which this round terminates (counting from the round's start
            # instead let a loaded machine's round come while the server was reconnecting)
            until(lambda: len(acked) > base + 200, "puts acknowledged")
            with admin.connect() as c:
                terminated += c.exec_driver_sql(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                    "datname = %s AND pid <> pg_backend_pid()", (name,)).scalar() and 1
            base = len(acked)
        n = len(acked)
        until(lambda: len(acked) > n + 200, "puts acknowledged after the last termination")
        stop.set()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert terminated == 5
        # a put during the reconnect may be refused, never anything else
        assert all(rep.startswith(b"INSERTED ") or rep == OUT_OF_MEMORY for rep in replies)
        r = Raw(s.port)
        assert_stored(r, acked)
        ids = drain_ids(s.port)
        assert len(ids) == len(set(ids)), "a job was delivered twice"
        assert set(acked) <= set(ids)
        # the advisory lock was taken again: a second server on the database is refused
        second = run_cli(serve_argv("--listen", f"beanstalk=127.0.0.1:{free_port()}",
                                    "--database", pg_url), timeout=60)
        assert second.returncode == 1, second.stderr
        assert b"another jobgate server is using" in second.stderr
        serves_every_dialect(s, "terminated")
        r.close()
    finally:
        stop.set()
        out, err = s.stop()
        admin.dispose()
    assert s.proc.returncode == 0, err
    assert b"Traceback" not in err, err


# ---------------------------------------------------------------------- SQLite
def test_sqlite_disk_full_recovers_when_space_is_freed(tmp_path):
    """SQLite on a small tmpfs that fills up mid-load: puts are refused with OUT_OF_MEMORY
    (what beanstalkd answers when its binlog cannot grow), the put caught in the failing
    commit waits, and once space is freed the server recovers by itself: the held put is
    acknowledged, nothing acknowledged is lost, every dialect serves."""
    why = can_mount()
    if why:
        pytest.skip(why)
    disk = SmallDisk(str(tmp_path / "small"), 8 * 1024 * 1024)
    s = None
    try:
        s = Server(f"sqlite:///{disk.path}/jobgate.db", workq=True, bunqueue=True)
        disk.fill(leave=256 * 1024)
        r = Raw(s.port, timeout=60)
        acked: dict[int, bytes] = {}
        body = b"z" * 4000
        refused = False
        held_body = None
        # one put at a time until the disk is full: the first put whose commit fails waits
        # (held); a second connection then sees the refusal
        other = Raw(s.port)
        for i in range(2000):
            b_i = body + b"%d" % i
            r.send(b"put 0 0 60 %d\r\n%s\r\n" % (len(b_i), b_i))
            r.sock.settimeout(2)
            try:
                rep = r.reply()
            except TimeoutError:
                held_body = b_i
                break
            finally:
                r.sock.settimeout(60)
            assert rep.startswith(b"INSERTED "), rep
            acked[int(rep.split()[1])] = b_i
        assert held_body is not None, "the disk never filled up"
        probes = Probes(s.port)
        until(probes.refused, "puts refused with OUT_OF_MEMORY")
        refused = True
        w = WorkqRaw(s.workq_port)
        assert w.cmd(add_cmd(new_uid(), "q", b"w")) == WORKQ_DOWN
        bq = BQ(s.bunqueue_port)
        assert bq.call("PUSH", queue="bq", data={}) == {"ok": False,
                                                        "error": "Storage unavailable"}
        disk.free()
        rep = r.reply()
        assert rep.startswith(b"INSERTED "), rep
        acked[int(rep.split()[1])] = held_body
        acked.update(probes.settle())
        until(lambda: put(other, b"back").startswith(b"INSERTED "), "puts accepted again")
        assert refused
        assert_stored(other, acked)
        ids = drain_ids(s.port)
        assert len(ids) == len(set(ids))
        assert set(acked) <= set(ids)
        serves_every_dialect(s, "disk")
        for c in (r, other, w):
            c.close()
        bq.sock.close()
    finally:
        if s is not None:
            out, err = s.stop()
        disk.unmount()
    assert s.proc.returncode == 0, err
    log = err.decode()
    assert log.count("storage unavailable") == 1, log
    assert "storage available again" in log


def _pg_service():
    """(cluster version, name) of the local PostgreSQL that JOBGATE_TEST_PG_URL points to,
    when this test may stop and start it; else the reason it may not."""
    import os
    import shutil
    if not os.environ.get("JOBGATE_TEST_PG_RESTART"):
        return "stopping the shared PostgreSQL needs JOBGATE_TEST_PG_RESTART=1 (.ci/run sets it)"
    if os.geteuid() != 0 or not shutil.which("pg_ctlcluster") or not os.path.isdir(
            "/etc/postgresql"):
        return "needs root and Debian's pg_ctlcluster to restart the local PostgreSQL"
    versions = sorted(os.listdir("/etc/postgresql"))
    return (versions[-1], "main") if versions else "no local PostgreSQL cluster"


def _pg_ctl(svc, action: str) -> None:
    import subprocess
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", svc[0], svc[1], action,
                    *(["-m", "fast"] if action == "stop" else [])],
                   check=True, capture_output=True, timeout=60)


@pytest.mark.serial   # every other test's PostgreSQL goes down with it: `make test` runs it alone
def test_postgresql_service_stop_and_start(pg_url):
    """The local PostgreSQL itself is stopped (fast shutdown: every session terminated, then
    connections refused) and started again: jobgate refuses what needs a commit meanwhile,
    keeps serving reads, and recovers by itself with nothing acknowledged lost."""
    svc = _pg_service()
    if isinstance(svc, str):
        pytest.skip(svc)
    s = Server(pg_url, workq=True, bunqueue=True)
    started = True
    try:
        r = Raw(s.port)
        acked = {}
        for i in range(50):
            rep = put(r, b"before%d" % i)
            acked[int(rep.split()[1])] = b"before%d" % i
        _pg_ctl(svc, "stop")
        started = False
        probes = Probes(s.port)
        until(probes.refused, "puts refused with OUT_OF_MEMORY")
        w = WorkqRaw(s.workq_port)
        assert w.cmd(add_cmd(new_uid(), "q", b"w")) == WORKQ_DOWN
        w.close()
        j = min(acked)
        r.send(b"peek %d\r\n" % j)
        assert r.reply() == b"FOUND %d %d\r\n%s\r\n" % (j, len(acked[j]), acked[j])
        _pg_ctl(svc, "start")
        started = True
        acked.update(probes.settle())
        until(lambda: put(r, b"back").startswith(b"INSERTED "), "puts accepted again", 60)
        assert_stored(r, acked)
        serves_every_dialect(s, "restart")
        r.close()
    finally:
        if not started:
            _pg_ctl(svc, "start")
        out, err = s.stop()
    assert s.proc.returncode == 0, err
    assert b"storage available again" in err, err
