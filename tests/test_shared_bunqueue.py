"""bunqueue across nodes in shared mode (issue 19, item 4). Locks presented on another node
(docs/scaling.md "Locks presented on another node", core/shared_calls.py,
protocols/bunqueue/forward.py): a bunqueue Worker's pool of connections may reach several
nodes, so a job pulled through node a is heartbeated, extended, given progress, ACKed and
FAILed through node b, which forwards each command to a and answers with a's reply; tokens
are checked where the lock is; a job no node holds gets the single server's error. Counts
(docs/mapping.md "Shared mode"): GetJobCounts and Count on any node span every node. A job's
log and progress, and a job by custom id, are read and written through any node. Real
node processes on one fresh PostgreSQL database, real bunqueue sockets.

Needs JOBGATE_TEST_PG_URL (skipped with a clear reason without it).
"""
from __future__ import annotations

import time
import uuid

from .bunqueue_support import BQ, OK
from .shared_support import metric, rows


def test_lock_upkeep_and_ack_through_another_node(nodes):
    """Pulled on a with a lock; on b: heartbeat, lock extension and progress go through, a
    wrong or missing token gets the lock errors, the ACK with the token completes the job
    (a sees it completed at once: a answered after its commit), and a second ACK finds no
    active job anywhere."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    jid = qa.push("lk", {"n": 1})
    r = qa.pull("lk", owner="w", lockTtl=60_000)
    assert r["job"]["id"] == jid
    tok = r["token"]
    assert qb.call("JobHeartbeat", id=jid, token=tok) == {"ok": True, "data": {"ok": True}}
    assert qb.call("ExtendLock", id=jid, token=tok, duration=120_000) == OK
    assert qb.call("ExtendLock", id=jid, token="bad", duration=1000) == \
        {"ok": False, "error": "Lock not found or invalid token"}
    assert qb.call("Progress", id=jid, progress=40) == OK
    assert qa.call("GetProgress", id=jid)["progress"] == 40
    assert qb.call("ACK", id=jid) == {"ok": False, "error": f"Lock token required for job {jid}"}
    assert qb.call("ACK", id=jid, token="nope") == \
        {"ok": False, "error": f"Invalid or expired lock token for job {jid}"}
    assert qb.call("ACK", id=jid, token=tok, result={"sum": 3}) == OK
    assert qa.state(jid) == "completed"
    assert qb.call("GetResult", id=jid)["result"] == {"sum": 3}
    assert rows(nodes.url, "SELECT state, node FROM jobs WHERE uid = %s", (jid,)) == \
        [("completed", None)]
    assert qb.call("ACK", id=jid, token=tok) == \
        {"ok": False, "error": f"Job not found or not in processing state: {jid}"}
    assert qb.call("ACK", id="no-such-job") == \
        {"ok": False, "error": "Job not found or not in processing state: no-such-job"}


def test_fail_and_batches_through_another_node(nodes):
    """FAIL of a job pulled on a, sent to b, sends it to the DLQ (its last attempt); a batch
    pulled with PULLB on a is heartbeated and ACKed with ACKB through b."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    fid = qa.push("lkf", {"n": 1}, maxAttempts=1)
    tok = qa.pull("lkf", owner="w", lockTtl=60_000)["token"]
    assert qb.call("FAIL", id=fid, token=tok, error="bad input") == OK
    assert qa.state(fid) == "failed"

    ids = [qa.push("lkb", {"i": i}) for i in range(3)]
    got = qa.ok("PULLB", queue="lkb", count=3, owner="o", lockTtl=60_000)
    assert [j["id"] for j in got["jobs"]] == ids
    toks = got["tokens"]
    assert qb.call("JobHeartbeatB", ids=ids, tokens=toks) == \
        {"ok": True, "data": {"ok": True, "count": 3}}
    assert qb.call("ACKB", ids=ids, tokens=toks) == OK
    assert [qa.state(i) for i in ids] == ["completed"] * 3


def test_job_counts_span_every_node(nodes):
    """GetJobCounts and Count on node b count the jobs of every node and of the database:
    waiting and prioritized jobs pushed on a, a delayed one, one active on a, one completed
    and one in the DLQ; the same figures on a."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    q = "cnt"
    done = qa.push(q, {"n": 0})
    assert qa.pull(q, timeout=1000)["job"]["id"] == done
    qa.ok("ACK", id=done)
    dead = qa.push(q, {"n": 1}, maxAttempts=1)
    assert qa.pull(q, timeout=1000)["job"]["id"] == dead
    qa.ok("FAIL", id=dead, error="x")
    active = qa.push(q, {"n": 2})
    assert qa.pull(q, timeout=1000)["job"]["id"] == active   # held by a
    for i in range(3):
        qa.push(q, {"w": i})
    qb.push(q, {"p": 1}, priority=5)
    qa.push(q, {"d": 1}, delay=600_000)
    want = {"waiting": 3, "prioritized": 1, "delayed": 1, "active": 1, "completed": 1,
            "failed": 1, "waiting-children": 0, "paused": 0}
    for c in (qb, qa):
        assert c.call("GetJobCounts", queue=q) == {"ok": True, "counts": want}
        assert c.call("Count", queue=q)["count"] == 5
    assert qb.call("GetJobCounts", queue="nothing-here")["counts"] == dict.fromkeys(want, 0)


def test_heartbeat_batch_of_a_pool_spread_over_two_nodes(nodes):
    """A Worker whose pool reaches nodes a and b pulls one job through each, then sends its
    JobHeartbeatB of every active job (as the bunqueue Worker does) over one connection: both
    locks must be renewed (count 2), whichever node gets the batch."""
    a, b, c = nodes(3)
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    j1 = qa.push("hbmix", {"n": 1})
    j2 = qa.push("hbmix", {"n": 2})
    r1 = qa.pull("hbmix", owner="w", lockTtl=60_000)
    r2 = qb.pull("hbmix", owner="w", lockTtl=60_000, timeout=2000)
    got = {r1["job"]["id"]: r1["token"], r2["job"]["id"]: r2["token"]}
    assert set(got) == {j1, j2}
    ids = [r1["job"]["id"], r2["job"]["id"]]
    toks = [got[i] for i in ids]
    # to b, which holds one of them: both renewed (the other through a)
    assert qb.call("JobHeartbeatB", ids=ids, tokens=toks)["data"]["count"] == 2
    # to c, which holds neither: each goes to its holder
    assert qc.call("JobHeartbeatB", ids=ids, tokens=toks)["data"]["count"] == 2


def test_field_error_of_a_command_about_an_unknown_job_is_answered(nodes):
    """ExtendLocks without `tokens` is a field error on a single server (docs/bunqueue.md);
    in shared mode, for a job no node holds, the command is looked up, then run here from
    the forward callback: the field error is answered (review finding)."""
    (a,) = nodes(1)
    q = BQ(a.bunqueue_port, timeout=8.0)
    r = q.call("ExtendLocks", ids=[str(uuid.uuid4())])
    assert r["ok"] is False and "ExtendLocks" in r["error"], r


def test_malformed_command_for_a_silent_holder_does_not_stop_the_node(nodes):
    """A job held by node a, which dies (kill -9: its row still names it until its lease
    ends). A client of node b sends ExtendLocks without `tokens` for that job: b forwards it,
    gets no reply, and after CALL_MS (5 s) runs the handler itself from Calls.expire(), on
    the shared link's timer task: b answers the field error and keeps serving (an exception
    there once ended the node: review finding)."""
    a, b = nodes(2)
    qa = BQ(a.bunqueue_port)
    jid = qa.push("silent", {"n": 1})
    assert qa.pull("silent", owner="w", lockTtl=120_000)["job"]["id"] == jid
    a.proc.kill()
    a.proc.wait()
    qb = BQ(b.bunqueue_port, timeout=10.0)
    try:
        r = qb.call("ExtendLocks", ids=[jid])
    except (TimeoutError, EOFError, OSError) as e:
        r = e
    try:
        b.proc.wait(timeout=3)
    except Exception:  # still running: the expected outcome
        pass
    alive = b.proc.poll() is None
    assert alive, f"node b exited ({b.proc.returncode}); reply {r!r}"
    assert isinstance(r, dict) and r["ok"] is False, r
    assert BQ(b.bunqueue_port).call("Ping")["ok"] is True


def test_ackb_and_extend_locks_split_over_nodes(nodes):
    """ACKB and ExtendLocks naming jobs of two nodes, sent to a third: each part runs where
    its lock is; ACKB answers ok when every part did, the counts add up."""
    a, b, c = nodes(3)
    qa, qb, qc = BQ(a.bunqueue_port), BQ(b.bunqueue_port), BQ(c.bunqueue_port)
    for i in range(2):
        qa.push("split", {"n": i})
    r1 = qa.pull("split", owner="w", lockTtl=60_000)
    r2 = qb.pull("split", owner="w", lockTtl=60_000, timeout=2000)
    ids = [r1["job"]["id"], r2["job"]["id"]]
    toks = [r1["token"], r2["token"]]
    assert qc.call("ExtendLocks", ids=ids, tokens=toks, durations=[90_000, 90_000]) == \
        {"ok": True, "count": 2}
    assert qc.call("ACKB", ids=ids, tokens=toks) == OK
    assert [qa.state(i) for i in ids] == ["completed", "completed"]


def test_job_changes_reach_jobs_waiting_in_the_database(nodes):
    """Jobs pushed on a wait in the database; on b: ChangePriority, Update, Promote of a
    delayed one, Cancel, Discard to the DLQ and MoveToWait of a job active on a all act as on
    one server (b takes the waiting rows, a runs the active one)."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    q = "chg"
    first = qa.push(q, {"n": 1})
    second = qa.push(q, {"n": 2})
    later = qa.push(q, {"n": 3}, delay=600_000)
    gone = qa.push(q, {"n": 4})
    dead = qa.push(q, {"n": 5})
    assert qb.call("ChangePriority", id=second, priority=10) == OK
    assert qb.call("Update", id=second, data={"n": 22}) == OK
    assert qb.call("Promote", id=later) == OK
    assert qb.call("Cancel", id=gone) == OK
    assert qb.call("Discard", id=dead) == OK
    assert qa.state(dead) == "failed" and qa.state(gone) == "unknown"
    pulled = qa.pull(q, owner="w", lockTtl=60_000, timeout=1000)
    r = pulled["job"]
    assert (r["id"], r["data"]) == (second, {"n": 22})          # priority 10 first
    assert qb.call("MoveToWait", id=second)["error"] == f"Lock token required for job {second}"
    assert qb.call("MoveToWait", id=second, token=pulled["token"]) == OK   # a moves it
    got = [qa.pull(q, timeout=1000)["job"]["id"] for _ in range(3)]
    assert sorted(got) == sorted([first, second, later])
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE uid = %s", (gone,)) == [(0,)]


def test_get_jobs_lists_every_node(nodes):
    """GetJobs on b lists the queue's jobs wherever they are: waiting ones in the database,
    one active on a, a completed one; filtered by state, oldest or newest first, paged."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    q = "list"
    done = qa.push(q, {"n": 0})
    assert qa.pull(q, timeout=1000)["job"]["id"] == done
    qa.ok("ACK", id=done)
    active = qa.push(q, {"n": 1})
    assert qa.pull(q, owner="w", lockTtl=60_000, timeout=1000)["job"]["id"] == active
    waiting = [qa.push(q, {"n": i}) for i in range(2, 5)]
    urgent = qb.push(q, {"n": 9}, priority=3)

    def ids(**kw):
        r = qb.ok("GetJobs", queue=q, **kw)
        return [j["id"] for j in r["jobs"]]
    assert ids() == [done, active, *waiting, urgent]
    assert ids(asc=False, limit=2) == [urgent, waiting[-1]]
    assert ids(state="waiting") == waiting
    assert ids(state="prioritized") == [urgent]
    assert ids(state=["active", "completed"]) == [done, active]
    assert ids(state="waiting", offset=1, limit=1) == [waiting[1]]
    assert [j["state"] for j in qb.ok("GetJobs", queue=q, state="active")["jobs"]] == ["active"]


def test_logs_progress_and_custom_id_reads_through_another_node(nodes):
    """A job active on a: on b, AddLog goes to a (a Worker's `job.log()` over any pooled
    connection), GetLogs, GetProgress and GetJobByCustomId read it from its row, ClearLogs goes
    to a; a job waiting in the database gets a log line through b and a reads it; an unknown
    job gets the single server's answers on either node."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    jid = qa.push("lg", {"n": 1}, jobId="log-1")
    r = qa.pull("lg", owner="w", lockTtl=60_000)
    assert r["job"]["id"] == jid
    assert qb.call("AddLog", id=jid, message="step 1", level="warn") == \
        {"ok": True, "data": {"added": True}}
    for q in (qa, qb):
        logs = q.call("GetLogs", id=jid)["data"]
        assert logs["count"] == 1 and logs["logs"][0]["message"] == "step 1"
        assert logs["logs"][0]["level"] == "warn"
    assert qb.call("Progress", id=jid, progress=30, message="a third") == OK
    got = qb.call("GetProgress", id=jid)
    assert (got["progress"], got["message"]) == (30, "a third")
    assert qb.call("GetJobByCustomId", customId="log-1")["job"]["id"] == jid
    assert qb.call("ClearLogs", id=jid) == qa.call("ClearLogs", id="no-such-job")
    assert qa.call("GetLogs", id=jid)["data"]["count"] == 0
    waiting = qa.push("lg", {"n": 2})   # nobody holds it: in the database
    assert qb.call("AddLog", id=waiting, message="queued")["ok"] is True
    assert qa.call("GetLogs", id=waiting)["data"]["logs"][0]["message"] == "queued"
    assert qb.call("GetProgress", id=waiting) == qa.call("GetProgress", id=waiting)
    for name, fields in (("AddLog", {"message": "x"}), ("GetLogs", {}),
                         ("GetProgress", {})):
        assert qb.call(name, id="no-such-job", **fields) == \
            qa.call(name, id="no-such-job", **fields)
    assert qb.call("GetJobByCustomId", customId="nope") == \
        {"ok": False, "error": "Job not found"}


def test_stats_and_counts_per_priority_span_every_node(nodes):
    """Jobs pushed on a and b (in the database), one delayed, one active on b, a flow parent
    waiting for its child: Stats on a counts every node's jobs, GetCountsPerPriority on either
    node the queue's waiting and delayed jobs on every node (not the waiting parent)."""
    a, b = nodes(2)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    qa.push("pc", {}, priority=5)
    qa.push("pc", {}, priority=5)
    qb.push("pc", {}, priority=1)
    qb.push("pc", {}, priority=5, delay=60_000)
    qb.push("pa", {})
    assert qb.pull("pa", owner="w", lockTtl=60_000)["job"] is not None
    flow = [{"id": "pk", "queue": "pk", "input": {"name": "k", "data": {
                "__parentId": "pp", "__parentQueue": "pc"}, "parentId": "pp"}},
            {"id": "pp", "queue": "pc", "input": {"name": "p", "data": {
                "__childrenIds": ["pk"]}, "dependsOn": ["pk"], "childrenIds": ["pk"]}}]
    qa.ok("PUSHF", jobs=flow)
    for q in (qa, qb):
        assert q.call("GetCountsPerPriority", queue="pc") == \
            {"ok": True, "queue": "pc", "counts": {"1": 1, "5": 3}}
    st = qa.call("Stats")["stats"]
    assert (st["waiting"], st["active"], st["delayed"], st["dlq"], st["completed"]) == \
        (4, 1, 2, 0, 0)   # waiting: 3 in pc, the child in pk; delayed: one, and the parent


def test_cron_schedules_are_read_and_deleted_on_any_node(nodes):
    """A schedule set on a: b lists and gets it as stored (its executions moved by the
    leader), b deletes it, and then no node has it and no more runs come."""
    a, b = nodes(2, poll_ms=200)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    qa.ok("Cron", name="every", queue="cq", data={"n": 1}, repeatEvery=200,
          preventOverlap=False)
    assert [c["name"] for c in qb.ok("CronList")["crons"]] == ["every"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and qb.ok("CronGet", name="every")["cron"][
            "executions"] < 2:
        time.sleep(0.1)
    assert qb.ok("CronGet", name="every")["cron"]["executions"] >= 2
    assert qb.call("CronDelete", name="every") == OK
    assert qa.ok("CronList")["crons"] == [] and qb.ok("CronList")["crons"] == []
    missing = qa.call("CronGet", name="every")
    assert missing["ok"] is False
    assert qb.call("CronDelete", name="every") == missing
    before = rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = 'cq'")[0][0]
    time.sleep(0.6)   # three intervals: a deleted schedule fires no more
    assert rows(nodes.url, "SELECT count(*) FROM jobs WHERE queue = 'cq'")[0][0] == before


def _limits(q, queue: str) -> dict:
    return q.ok("GetQueueLimits", queue=queue)["data"]["limits"]


def test_queue_settings_set_on_one_node_apply_on_every_node(nodes):
    """A concurrency limit set on a holds b's workers back too (b serves one active job, a
    second PULL on b waits); cleared on a, b's waiting PULL is served; a rate limit and its
    clearing reach b as well (docs/scaling.md "Queue settings across nodes")."""
    a, b = nodes(2, poll_ms=200, http=True)
    qa, qb = BQ(a.bunqueue_port), BQ(b.bunqueue_port)
    assert qa.call("SetConcurrency", queue="lim", limit=1) == OK
    assert qa.call("RateLimit", queue="rl", limit=5, duration=60_000) == OK
    def installed() -> bool:   # each change is announced after its own commit
        return (_limits(qb, "lim")["concurrencyLimit"] == 1
                and _limits(qb, "rl")["rateLimit"] == {"max": 5, "duration": 60_000})
    wait_for = time.monotonic() + 10
    while not installed() and time.monotonic() < wait_for:
        time.sleep(0.05)
    assert installed()
    first, second = qb.push("lim", {"n": 1}), qb.push("lim", {"n": 2})
    assert qb.pull("lim", owner="w", lockTtl=60_000)["job"]["id"] == first
    assert qb.pull("lim", owner="w", lockTtl=60_000, timeout=300)["job"] is None
    qb.send({"cmd": "PULL", "queue": "lim", "owner": "w", "lockTtl": 60_000,
             "timeout": 10_000, "reqId": "late"})
    assert qa.call("ClearConcurrency", queue="lim") == OK
    assert qb.recv_reply("late", 15)["job"]["id"] == second
    assert qa.call("RateLimitClear", queue="rl") == OK
    wait_for = time.monotonic() + 10
    while _limits(qb, "rl")["rateLimit"] is not None and \
            time.monotonic() < wait_for:
        time.sleep(0.05)
    assert _limits(qb, "rl")["rateLimit"] is None
    assert metric(b, "jobgate_shared_settings_installed_total") >= 4
    assert metric(a, "jobgate_shared_settings_installed_total") == 0
