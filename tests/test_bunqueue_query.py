"""bunqueue queries over a real socket against jobgate: GetJob / GetState / GetResult, counts,
GetJobs, GetCountsPerPriority, GetJobByCustomId, Progress / GetProgress and WaitJob.

Contract, reference mode and conventions of these command tests: tests/bunqueue_support.py.
"""
from __future__ import annotations

from .bunqueue_support import (COUNT_KEYS, JOB_KEYS, OK, UNDEF, counts, err, job, jobgate_only,
                               keys, qname)


# ========================================================================= queries
def test_get_job_state_result_of_unknown_ids(bq):
    c = bq()
    assert c.call("GetJob", id="nope") == err("Job not found")
    assert c.call("GetState", id="nope") == {"ok": True, "id": "nope", "state": "unknown"}
    assert c.call("GetState", id=5) == {"ok": True, "id": 5, "state": "unknown"}
    assert c.call("GetResult", id="nope") == {"ok": True, "id": "nope", "result": UNDEF}
    assert c.call("GetJobByCustomId", customId="nope") == err("Job not found")
    assert c.call("GetProgress", id="nope") == err("Job not found")


def test_get_result_of_unfinished_and_failed_jobs(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, maxAttempts=1)
    assert c.call("GetResult", id=id) == {"ok": True, "id": id, "result": UNDEF}
    c.pull(q)
    c.ok("FAIL", id=id, error="e")
    assert c.call("GetResult", id=id) == {"ok": True, "id": id, "result": UNDEF}


def test_get_job_counts_shape(bq):
    c = bq()
    q = qname()
    c.push(q, 1)
    c.push(q, 2, priority=5)
    c.push(q, 3, delay=60000)
    c.push(q, 4, priority=-3)
    r = c.call("GetJobCounts", queue=q)
    assert list(r) == ["ok", "counts"] and list(r["counts"]) == COUNT_KEYS
    assert r["counts"] == counts(waiting=2, prioritized=1, delayed=1)
    assert c.counts(qname("never")) == counts()


def test_count_is_jobs_still_to_run(bq):
    """Count as the reference counts (docs/bunqueue.md): waiting + prioritized + delayed;
    active, completed and failed jobs are not counted."""
    c = bq()
    q = qname()
    for i in range(5):
        c.push(q, i, maxAttempts=1)
    c.push(q, 9, delay=60000)
    a = c.pull(q)["job"]["id"]
    b = c.pull(q)["job"]["id"]
    c.pull(q)
    c.ok("ACK", id=a)
    c.ok("FAIL", id=b)
    c.push(q, 7, priority=3)
    assert c.counts(q) == counts(waiting=2, prioritized=1, delayed=1, active=1, completed=1,
                                 failed=1)
    assert c.call("Count", queue=q) == {"ok": True, "count": 4}
    assert c.call("Count", queue=qname("never")) == {"ok": True, "count": 0}


def test_get_jobs_filters_and_pages(bq):
    c = bq()
    q = qname()
    ids = [c.push(q, i) for i in range(4)]
    d = c.push(q, 9, delay=60000)
    c.pull(q)
    r = c.call("GetJobs", queue=q)
    assert list(r) == ["ok", "jobs"] and [j["id"] for j in r["jobs"]] == ids + [d]
    assert [j["id"] for j in c.call("GetJobs", queue=q, limit=2, offset=1)["jobs"]] == ids[1:3]
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="active")["jobs"]] == ids[:1]
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="delayed")["jobs"]] == [d]
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="waiting")["jobs"]] == ids[1:]
    assert c.call("GetJobs", queue=q, state="completed") == {"ok": True, "jobs": []}
    assert c.call("GetJobs", queue=qname("never")) == {"ok": True, "jobs": []}


def test_get_jobs_waiting_excludes_prioritized(bq):
    c = bq()
    q = qname()
    w = c.push(q, 1)
    p = c.push(q, 2, priority=5)
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="prioritized")["jobs"]] == [p]
    assert [j["id"] for j in c.call("GetJobs", queue=q, state="waiting")["jobs"]] == [w]


def test_get_counts_per_priority(bq):
    c = bq()
    q = qname()
    for p in (0, 5, 5, -2, 0):
        c.push(q, 1, priority=p)
    r = c.call("GetCountsPerPriority", queue=q)
    assert r["ok"] is True and r["queue"] == q
    assert {int(k): v for k, v in r["counts"].items()} == {0: 2, 5: 2, -2: 1}


def test_get_counts_per_priority_like_the_reference(bq):
    c = bq()
    q = qname()
    for p in (0, 5, 5):
        c.push(q, 1, priority=p)
    c.push(q, 1, delay=60000)
    assert c.call("GetCountsPerPriority", queue=q) == \
        {"ok": True, "queue": q, "counts": {"0": 2, "5": 2}}


def test_get_job_by_custom_id_shape(bq):
    """49 keys: the Job, returnvalue and failedReason, no state (golden 'GetJobByCustomId')."""
    c = bq()
    cid = "cid-" + qname()
    c.push(qname(), 1, jobId=cid)
    assert keys(c.call("GetJobByCustomId", customId=cid)["job"]) == \
        keys(JOB_KEYS + ["returnvalue", "failedReason"])


# ======================================================================== progress
def test_progress_and_get_progress(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("GetProgress", id=id) == {"ok": True, "progress": 0, "message": None}
    assert c.call("Progress", id=id, progress=30) == OK
    assert c.call("GetProgress", id=id) == {"ok": True, "progress": 30, "message": None}
    assert c.call("Progress", id=id, progress=50, message="half") == OK
    assert c.call("GetProgress", id=id) == {"ok": True, "progress": 50, "message": "half"}
    j = job(c, id)
    assert j["progress"] == 50 and j["progressMessage"] == "half"


def test_progress_errors(bq):
    c = bq()
    id = c.push(qname(), 1)
    assert c.call("Progress", id=id, progress=10) == \
        err("Job is not active (current state: waiting)")
    assert c.call("Progress", id="nope", progress=10) == err("Job not found")


def test_get_progress_of_a_waiting_job(bq):
    c = bq()
    id = c.push(qname(), 1)
    assert c.call("GetProgress", id=id) == err("Job is not active (current state: waiting)")


@jobgate_only("the reference clamps progress to 0..100 and accepts any value")
def test_progress_validation(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("Progress", id=id, progress=101) == err("progress must be at most 100")
    assert c.call("Progress", id=id, progress="x") == err("progress must be a number")
    assert c.call("Progress", id=id) == err("progress is required")


# ========================================================================= WaitJob
def test_wait_job_immediate_when_completed(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    c.ok("ACK", id=id, result={"r": 7})
    assert c.call("WaitJob", id=id, timeout=100) == {"ok": True, "completed": True,
                                                     "result": {"r": 7}}


def test_wait_job_waits_then_completes(bq):
    w, worker = bq(), bq()
    q = qname()
    id = w.push(q, 1)
    w.send({"cmd": "WaitJob", "id": id, "timeout": 5000, "reqId": "w"})
    assert w.quiet(0.2)
    worker.pull(q)
    worker.ok("ACK", id=id, result=[1, 2])
    assert w.recv_reply("w", timeout=10) == {"ok": True, "completed": True, "result": [1, 2],
                                             "reqId": "w"}


def test_wait_job_times_out(bq):
    c = bq()
    id = c.push(qname(), 1)
    assert c.call("WaitJob", id=id, timeout=200) == {"ok": True, "completed": False}
    assert c.call("WaitJob", id="nope", timeout=100) == err("Job not found")


def test_wait_job_of_a_failed_job(bq):
    w, worker = bq(), bq()
    q = qname()
    id = w.push(q, 1, maxAttempts=1)
    w.send({"cmd": "WaitJob", "id": id, "timeout": 5000, "reqId": "wf"})
    worker.pull(q)
    worker.ok("FAIL", id=id, error="bad")
    r = w.recv_reply("wf", timeout=10)
    assert r["ok"] is True and r["completed"] is False


def test_wait_job_timeout_validation(bq):
    c = bq(timeout=1.5)
    id = c.push(qname(), 1)
    assert c.call("WaitJob", id=id, timeout=-1) == err("timeout must be at least 0")
    assert c.call("WaitJob", id=id, timeout=600001) == err("timeout must be at most 600000")
