"""Shared mode (issue 19): regressions found by the third review (of `reach`, take_over and
the workq id check), on real node processes (tests/shared_support.py); each failed before
its fix. The docstrings tell what went wrong. The short sleeps order commands sent on
different connections (nothing is timed by them). Needs JOBGATE_TEST_PG_URL."""
from __future__ import annotations

import time

from core.model import derived_uid

from .shared_support import bean
from .workq_support import WorkqRaw


def test_result_wait_of_a_uidless_job_survives_its_spill(nodes):
    """A workq `result` waiting (on the node holding it) for a beanstalk job, named by its
    derived uid: when the job leaves the node (released, spilled), take_over waits for it
    through the database by that uid, which no row has (beanstalk rows have uid NULL), so
    the wait answers -NOT-FOUND at once. A single server (and main before b88e575: held
    back) answers -TIMEOUT at the wait's deadline."""
    (a,) = nodes(1)
    c = bean(a, "dq")
    jid = c.put(b"x")
    job = c.reserve(timeout=5)
    assert job.id == jid
    uid = derived_uid(jid)
    w = WorkqRaw(a.workq_port, timeout=10)
    w.send(b"result %s 1500\r\n" % uid.encode())   # waits on a: the job is here, reserved
    time.sleep(0.3)   # let the wait register before the release (order, not timing)
    t0 = time.monotonic()
    c.release(job)
    assert w.reply() == b"-TIMEOUT\r\n"
    assert time.monotonic() - t0 > 1.0


def test_a_command_about_a_job_whose_spill_is_being_committed_finds_it(nodes):
    """Job X, active on a, is moved back to waiting (MoveToWait): a's next commit gives it
    back (spill: out of the engine at once, its row written by the commit). While that
    commit is in flight (held here by a row lock another session takes on X's row), a
    ChangePriority of X on a does not find X in the engine, and `reach` (a plain query, not
    settled) sees X's row still held by a: it neither takes it nor names a holder, so a
    answers `Job not found` for a job that exists (a single server changes it)."""
    import sqlalchemy as sa

    from .bunqueue_support import BQ

    (a,) = nodes(1)
    w, c = BQ(a.bunqueue_port), BQ(a.bunqueue_port, timeout=10)
    q = "spw"
    x = w.push(q, {"n": 1})
    tok = w.pull(q, owner="w", lockTtl=60_000, timeout=1000)["token"]
    eng = sa.create_engine(nodes.url, poolclass=sa.pool.NullPool)
    ext = eng.connect()
    try:
        ext.exec_driver_sql("SELECT 1 FROM jobs WHERE uid = %s FOR UPDATE", (x,))
        w.send({"cmd": "MoveToWait", "id": x, "token": tok, "reqId": "mv"})
        assert _writer_blocked(eng), "a's commit never waited for the row lock"
        c.send({"cmd": "ChangePriority", "id": x, "priority": 7, "reqId": "cp"})
        try:
            early = c.recv_reply("cp", 2.0)
        except TimeoutError:
            early = None
    finally:
        ext.rollback()
        ext.close()
    r = early if early is not None else c.recv_reply("cp")
    r.pop("reqId", None)
    assert r.get("ok") is True, r
    assert w.recv_reply("mv")["ok"] is True


def _writer_blocked(eng) -> bool:
    """True once a session of the test database waits for a lock (polled up to 5 s)."""
    deadline = time.monotonic() + 5
    with eng.connect() as mon:
        while time.monotonic() < deadline:
            n = mon.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()").scalar()
            mon.commit()
            if n:
                return True
            time.sleep(0.02)
    return False


def test_a_workq_id_added_twice_on_one_node_during_its_commit_is_a_duplicate(nodes):
    """workq `add U` on a; while the commit that inserts U's row is in flight (held here by
    a lock on a's commit mark row), another connection's `add U` on a: U left the engine at
    that commit's take (spill) and its row is not visible yet, so uids_taken_global (a plain
    query) finds nothing and a second job with id U is put. A single server answers
    Duplicate job; afterwards two rows have uid U."""
    import sqlalchemy as sa

    from .workq_support import add_cmd, new_uid

    (a,) = nodes(1)
    c1, c2 = WorkqRaw(a.workq_port, timeout=10), WorkqRaw(a.workq_port, timeout=10)
    c1.cmd(add_cmd(new_uid(), "dup", b"warm"))   # the node's id block and commit mark exist
    eng = sa.create_engine(nodes.url, poolclass=sa.pool.NullPool)
    ext = eng.connect()
    uid = new_uid()
    try:
        ext.exec_driver_sql("SELECT 1 FROM jobgate_meta WHERE key LIKE 'commit_seq:%%' "
                            "FOR UPDATE")
        c1.send(add_cmd(uid, "dup", b"one"))
        assert _writer_blocked(eng), "a's commit never waited for the lock"
        c2.send(add_cmd(uid, "dup", b"two"))
        time.sleep(0.5)   # c2's check runs while the commit is held (order, not timing)
    finally:
        ext.rollback()
        ext.close()
    assert c1.reply() == b"+OK\r\n"
    assert c2.reply() == b"-CLIENT-ERROR Duplicate job\r\n"
    with eng.connect() as m:
        assert m.exec_driver_sql("SELECT count(*) FROM jobs WHERE uid = %s", (uid,)).scalar() == 1


def test_workq_complete_of_a_beanstalk_job_in_the_database(nodes):
    """workq `complete` names any job by its uid, a beanstalk job by its derived uid, in any
    state (a single server completes a ready one). A ready beanstalk job waits in the
    database (spilled): `reach` looks rows up by uid only, beanstalk rows have none, so the
    job is neither taken nor located and the node answers -NOT-FOUND."""
    (a,) = nodes(1)
    c = bean(a, "dq2")
    jid = c.put(b"x")
    w = WorkqRaw(a.workq_port, timeout=10)
    assert w.cmd(b"complete %s 2\r\nok\r\n" % derived_uid(jid).encode()) == b"+OK\r\n"


def test_reserve_job_of_an_id_past_bigint(nodes):
    """beanstalk `reserve-job <id>` accepts any u64; in shared mode the id goes to the
    database (reach_ids): a single server answers NOT_FOUND for an id it never handed out."""
    import socket
    (a,) = nodes(1)
    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    try:
        s.sendall(b"reserve-job 18446744073709551615\r\nreserve-job 9223372036854775807\r\n")
        buf = b""
        while buf.count(b"\r\n") < 2:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    assert buf == b"NOT_FOUND\r\nNOT_FOUND\r\n"
