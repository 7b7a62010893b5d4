"""Issue 16, the commands besides cron, limits, webhooks and flows, over the bunqueue wire:
MoveToWait, PromoteJobs, ChangeDelay, ClearLogs, TrimEvents, ExtendLocks, the queue form of
Metrics and the Prometheus text (docs/bunqueue.md, "Commands and fixes (issue 16)").

Expected replies are bunqueue 2.9.5's (its handlers in infrastructure/server/handlers/advanced/
jobs.js, management.js, monitoring/operations.js, measured on the real server):
JOBGATE_BQ_REFERENCE=1 runs this file against it. The moves are engine transitions, so a
promoted or re-queued job is at once reservable through beanstalk (jobgate only).
"""
from __future__ import annotations

import threading
import time

import greenstalk
import pytest

from .bunqueue_support import OK, UNDEF, err, job, jobgate_only, qname

MISSING = "00000000-0000-7000-8000-000000000000"


# ===================================================================== MoveToWait
def test_move_to_wait_of_an_active_job_checks_its_lock_and_makes_it_waiting(bq):
    c = bq()
    q = qname()
    id = c.push(q, {"a": 1})
    tok = c.pull(q, owner="w1")["token"]
    assert c.call("MoveToWait", id=id) == err(f"Lock token required for job {id}")
    assert c.call("MoveToWait", id=id, token="bad") == \
        err(f"Invalid or expired lock token for job {id}")
    assert c.state(id) == "active"
    assert c.call("MoveToWait", id=id, token=tok) == OK
    assert c.state(id) == "waiting"
    j = job(c, id)
    assert j["startedAt"] is None and j["attempts"] == 0 and j["stallCount"] == 0
    assert c.call("ACK", id=id, token=tok)["ok"] is False     # the lock went with it
    assert c.pull(q)["job"]["id"] == id


def test_move_to_wait_of_an_active_job_pulled_without_owner(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("MoveToWait", id=id) == OK
    assert c.state(id) == "waiting"


def test_move_to_wait_of_delayed_failed_and_waiting_jobs(bq):
    c = bq()
    q = qname()
    d = c.push(q, 2, delay=60_000)
    assert c.call("MoveToWait", id=d) == OK
    assert c.state(d) == "waiting"
    w = c.push(q, 3, priority=4)
    assert c.call("MoveToWait", id=w) == OK                   # prioritized: nothing to do
    assert c.state(w) == "prioritized"
    f = c.push(qname("f"), 4, maxAttempts=1)
    fq = job(c, f)["queue"]
    c.pull(fq)
    assert c.ok("FAIL", id=f, error="boom")
    assert c.state(f) == "failed"
    assert c.call("MoveToWait", id=f) == OK                   # out of the DLQ
    assert c.state(f) == "waiting"
    assert job(c, f)["attempts"] == 0


def test_move_to_wait_refuses_completed_and_unknown_jobs(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    assert c.call("ACK", id=id) == OK
    assert c.call("MoveToWait", id=id) == \
        err("Cannot move job from state 'completed' to waiting")
    assert c.call("MoveToWait", id=MISSING) == \
        err("Cannot move job from state 'unknown' to waiting")


# ==================================================================== PromoteJobs
def test_promote_jobs_promotes_the_oldest_delayed_jobs(bq):
    c = bq()
    q = qname()
    ids = [c.push(q, {"i": i}, delay=60_000) for i in range(4)]
    c.push(q, {"i": 9})
    assert c.call("PromoteJobs", queue=q, count=2) == {"ok": True, "count": 2}
    assert [c.state(i) for i in ids] == ["waiting", "waiting", "delayed", "delayed"]
    assert c.call("PromoteJobs", queue=q) == {"ok": True, "count": 2}
    assert [c.state(i) for i in ids] == ["waiting"] * 4
    assert c.call("PromoteJobs", queue=q) == {"ok": True, "count": 0}
    assert c.call("PromoteJobs", queue=qname("none")) == {"ok": True, "count": 0}
    d = c.push(q, 1, delay=60_000)
    assert c.call("PromoteJobs", queue=q, count=-1) == {"ok": True, "count": 0}
    assert c.call("PromoteJobs", queue=q, count=1.7) == {"ok": True, "count": 1}
    assert c.state(d) == "waiting"
    assert c.counts(q)["delayed"] == 0


# ==================================================================== ChangeDelay
def test_change_delay_of_waiting_delayed_and_active_jobs(bq):
    c = bq()
    q = qname()
    w = c.push(q, {})
    assert c.call("ChangeDelay", id=w, delay=5000) == OK
    assert c.state(w) == "delayed"
    j = job(c, w)
    assert 4900 <= j["runAt"] - j["createdAt"] <= 5200
    assert c.call("ChangeDelay", id=w, delay=0) == OK
    assert c.state(w) == "waiting"
    tok = c.pull(q, owner="o")["token"]
    assert c.call("ChangeDelay", id=w, delay=1000) == err(f"Lock token required for job {w}")
    assert c.call("ChangeDelay", id=w, delay=1000, token=tok) == OK
    assert c.state(w) == "delayed"
    assert job(c, w)["startedAt"] is None
    assert c.call("ChangeDelay", id=MISSING, delay=10) == \
        err("Job not found or cannot change delay")


def test_change_delay_of_a_finished_job(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1)
    c.pull(q)
    c.ok("ACK", id=id)
    assert c.call("ChangeDelay", id=id, delay=10) == err("Job not found or cannot change delay")


# ==================================================================== ClearLogs
def test_clear_logs_keeps_the_newest_entries(bq):
    c = bq()
    q = qname()
    id = c.push(q, {})
    for m in ("m1", "m2", "m3"):
        assert c.call("AddLog", id=id, message=m) == {"ok": True, "data": {"added": True}}
    assert c.call("ClearLogs", id=id, keepLogs=1) == OK
    logs = c.ok("GetLogs", id=id)["data"]
    assert logs["count"] == 1 and [x["message"] for x in logs["logs"]] == ["m3"]
    assert c.call("ClearLogs", id=id) == OK
    assert c.ok("GetLogs", id=id)["data"] == {"logs": [], "count": 0}
    assert c.call("ClearLogs", id=MISSING) == OK
    assert c.call("ClearLogs") == OK


# ==================================================================== TrimEvents
def test_trim_events_answers_removed_and_validates(bq):
    c = bq()
    q = qname()
    for i in range(3):
        c.push(q, i)
    r = c.ok("TrimEvents", queue=q, maxLength=1)
    assert r["data"]["removed"] >= 2                      # three pushes, at least
    assert c.ok("TrimEvents", queue=q, maxLength=1) == {"ok": True, "data": {"removed": 0}}
    assert c.ok("TrimEvents", queue=q, maxLength=0) == {"ok": True, "data": {"removed": 1}}
    assert c.call("TrimEvents", queue=q) == err("maxLength must be a non-negative safe integer")
    assert c.call("TrimEvents", queue=q, maxLength=-1) == \
        err("maxLength must be a non-negative safe integer")
    assert c.call("TrimEvents", maxLength=1) == err("Queue name is required")
    assert c.call("TrimEvents", queue="a b", maxLength=1) == \
        err("Queue name contains invalid characters")


# ==================================================================== ExtendLocks
def test_extend_locks_counts_the_locks_renewed(bq):
    c = bq()
    q = qname()
    x, y = c.push(q, 1), c.push(q, 2)
    r = c.ok("PULLB", queue=q, count=2, owner="o")
    assert sorted(j["id"] for j in r["jobs"]) == sorted([x, y])
    tokens = r["tokens"]
    ids = [j["id"] for j in r["jobs"]]
    assert c.call("ExtendLocks", ids=ids, tokens=tokens, durations=[1000, 2000]) == \
        {"ok": True, "count": 2}
    assert c.call("ExtendLocks", ids=[ids[0], MISSING], tokens=["bad", None],
                  durations=[1000, 2000]) == {"ok": True, "count": 0}
    assert c.call("ExtendLocks", ids=[ids[0]], tokens=[], durations=[]) == \
        {"ok": True, "count": 1}
    assert c.call("ExtendLocks")["ok"] is False


# ==================================================================== Metrics
def test_queue_metrics_count_completed_and_failed_jobs_per_minute(bq):
    c = bq()
    q = qname()
    a = c.push(q, 1)
    b = c.push(q, 2, maxAttempts=1)
    for _ in range(2):
        c.pull(q)
    c.ok("ACK", id=a)
    c.ok("FAIL", id=b, error="x")
    for kind in ("completed", "failed"):
        r = c.ok("Metrics", queue=q, type=kind)["data"]
        assert r["data"] == [1] and r["count"] == 1
        assert r["meta"]["count"] == 1 and r["meta"]["prevCount"] == 1
        assert isinstance(r["meta"]["prevTS"], float) and r["meta"]["prevTS"] > 1.7e12
    assert c.ok("Metrics", queue=q, type="completed", start=0, end=0)["data"]["data"] == [1]
    assert c.ok("Metrics", queue=q, type="completed", start=1)["data"]["data"] == []
    assert c.ok("Metrics", queue=qname("idle"), type="failed")["data"] == \
        {"meta": {"count": 0, "prevTS": 0, "prevCount": 0}, "data": [], "count": 0}
    assert c.call("Metrics", queue=q) == err("Metrics type must be 'completed' or 'failed'")
    assert c.call("Metrics", type="completed") == err("Metrics queue is required")
    assert c.call("Metrics", queue="a b", type="completed") == \
        err("Queue name contains invalid characters")
    assert c.call("Metrics", queue=q, type="completed", start=-1) == \
        err("start must be a non-negative safe integer")
    assert sorted(c.ok("Metrics")["metrics"]) == sorted(
        ["totalPushed", "totalPulled", "totalCompleted", "totalFailed", "avgLatencyMs",
         "avgProcessingMs", "memoryUsageMb", "sqliteSizeMb", "activeConnections"])


# ==================================================================== Prometheus
#: The reference's metrics (application/metricsExporter.js, prometheusOperationalMetrics.js), in
#: order, as bunqueue 2.9.5 wrote them in the extra golden (bunqueue_sqlite_database_size_bytes
#: only with a database file; the per-queue ones once a queue exists).
PROM_SERIES = [
    "bunqueue_jobs_waiting", "bunqueue_jobs_prioritized", "bunqueue_jobs_delayed",
    "bunqueue_jobs_active", "bunqueue_jobs_dlq", "bunqueue_jobs_completed",
    "bunqueue_jobs_pushed_total", "bunqueue_jobs_pulled_total", "bunqueue_jobs_completed_total",
    "bunqueue_jobs_failed_total", "bunqueue_uptime_seconds", "bunqueue_cron_jobs_registered",
    "bunqueue_workers_registered", "bunqueue_workers_active", "bunqueue_worker_active_jobs",
    "bunqueue_worker_concurrency_slots", "bunqueue_workers_processed_total",
    "bunqueue_workers_failed_total", "bunqueue_webhooks_registered", "bunqueue_webhooks_enabled",
    "bunqueue_storage_degraded", "bunqueue_storage_disk_full", "bunqueue_process_heap_used_bytes",
    "bunqueue_process_heap_total_bytes", "bunqueue_process_resident_memory_bytes",
    "bunqueue_sqlite_database_size_bytes", "bunqueue_queue_jobs_waiting",
    "bunqueue_queue_jobs_prioritized", "bunqueue_queue_jobs_delayed",
    "bunqueue_queue_jobs_active", "bunqueue_queue_jobs_dlq", "bunqueue_build_info",
    "process_cpu_seconds_total", "process_start_time_seconds", "process_resident_memory_bytes",
    "process_heap_bytes", "bunqueue_connections", "bunqueue_queue_metrics_exported",
    "bunqueue_queue_metrics_omitted", "bunqueue_backup_enabled",
    "bunqueue_backup_scheduler_running", "bunqueue_backup_in_progress",
    "bunqueue_backup_interval_seconds", "bunqueue_backup_retention",
    "bunqueue_backup_attempts_total", "bunqueue_backup_successes_total",
    "bunqueue_backup_failures_total", "bunqueue_backup_overlap_rejections_total",
    "bunqueue_backup_consecutive_failures", "bunqueue_backup_last_success_timestamp_seconds",
    "bunqueue_backup_last_failure_timestamp_seconds", "bunqueue_backup_last_duration_seconds",
    "bunqueue_backup_last_size_bytes", "bunqueue_push_duration_seconds",
    "bunqueue_pull_duration_seconds", "bunqueue_ack_duration_seconds"]


def test_prometheus_writes_the_reference_metrics_with_uptime(bq):
    c = bq()
    q = qname()
    c.push(q, 1)
    text = c.ok("Prometheus")["data"]["metrics"]
    assert text.endswith("\n")
    lines = text.split("\n")
    helps = [ln.split()[2] for ln in lines if ln.startswith("# HELP ")]
    assert [h for h in helps if h != "bunqueue_sqlite_database_size_bytes"] == \
        [h for h in PROM_SERIES if h != "bunqueue_sqlite_database_size_bytes"]
    assert "# HELP bunqueue_uptime_seconds Server uptime in seconds" in lines
    assert "# TYPE bunqueue_uptime_seconds gauge" in lines
    up = [ln for ln in lines if ln.startswith("bunqueue_uptime_seconds ")]
    assert len(up) == 1 and up[0].split()[1].isdigit()
    i = lines.index("# HELP bunqueue_jobs_delayed Number of delayed jobs")
    assert lines[i - 1] == ""                             # blocks separated by a blank line
    assert f'bunqueue_queue_jobs_waiting{{queue="{q}"}} 1' in lines
    assert 'bunqueue_build_info{bun_version="1.4.5",version="2.9.5"} 1' in lines
    assert 'bunqueue_push_duration_seconds_bucket{le="+Inf"}' in text
    # the reference's SQLite mode writes 21600 (its in-memory mode 0): backup is off either way
    assert "bunqueue_backup_enabled 0" in lines


# ==================================================================== cross-dialect
@jobgate_only("beanstalk listener")
def test_a_promoted_job_goes_to_a_waiting_beanstalk_reserve_at_once(bq, bq_server):
    c = bq()
    q = qname()
    id = c.push(q, "to beanstalk", delay=600_000)
    g = greenstalk.Client(("127.0.0.1", bq_server.port), use=q, watch=q)
    got = {}

    def reserve():
        got["job"] = g.reserve(timeout=10)
    t = threading.Thread(target=reserve)
    t.start()
    time.sleep(0.3)                                       # the reserve is waiting
    assert c.call("PromoteJobs", queue=q) == {"ok": True, "count": 1}
    t.join(10)
    assert got["job"].body == "to beanstalk"
    assert c.state(id) == "active"
    g.close()


@jobgate_only("beanstalk listener")
def test_move_to_wait_hands_the_job_to_beanstalk_and_change_delay_hides_it(bq, bq_server):
    c = bq()
    q = qname()
    id = c.push(q, "x")
    tok = c.pull(q, owner="w")["token"]
    g = greenstalk.Client(("127.0.0.1", bq_server.port), use=q, watch=q)
    with pytest.raises(greenstalk.TimedOutError):
        g.reserve(timeout=0)
    assert c.call("MoveToWait", id=id, token=tok) == OK
    b = g.reserve(timeout=1)
    assert b.body == "x"
    g.release(b)
    assert c.call("ChangeDelay", id=id, delay=600_000) == OK
    assert g.stats_job(b.id)["state"] == "delayed"
    assert c.call("MoveToWait", id=id) == OK
    assert g.stats_job(b.id)["state"] == "ready"
    g.close()


def test_replies_of_moves_have_no_extra_keys(bq):
    c = bq()
    q = qname()
    id = c.push(q, 1, delay=60_000)
    r = c.call("MoveToWait", id=id)
    assert r == {"ok": True, "id": UNDEF}


def test_prometheus_counts_cron_schedules_and_webhooks(bq):
    """bunqueue_cron_jobs_registered and bunqueue_webhooks_registered / _enabled count every
    schedule and webhook (the reference's CronScheduler and WebhookManager counts)."""
    c = bq()

    def gauges() -> dict:
        text = c.ok("Prometheus")["data"]["metrics"]
        return {ln.split()[0]: int(ln.split()[1]) for ln in text.split("\n")
                if ln.startswith(("bunqueue_cron_jobs_registered ", "bunqueue_webhooks_"))}

    before = gauges()
    q = qname()
    c.ok("Cron", name=f"{q}-nightly", queue=q, data=1, schedule="7 4 * * *")
    hid = c.ok("AddWebhook", url="https://example.com/hook", events=["job.completed"],
               queue=q)["data"]["webhookId"]
    c.ok("AddWebhook", url="https://example.com/hook2", events=["job.failed"], queue=q)
    c.ok("SetWebhookEnabled", id=hid, enabled=False)
    after = gauges()
    assert after["bunqueue_cron_jobs_registered"] == before["bunqueue_cron_jobs_registered"] + 1
    assert after["bunqueue_webhooks_registered"] == before["bunqueue_webhooks_registered"] + 2
    assert after["bunqueue_webhooks_enabled"] == before["bunqueue_webhooks_enabled"] + 1
