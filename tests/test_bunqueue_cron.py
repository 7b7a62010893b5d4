"""bunqueue Cron, CronGet, CronDelete, CronList over the wire (issue 16 item 1;
protocols/bunqueue/handlers_cron.py over core/cron.py; docs/bunqueue.md "Cron (issue 16)").

- On a real in-process server with a manual clock (`clocked`): the reference's replies and
  error texts, the job a run creates as bunqueue PULL and a greenstalk client (beanstalk) see
  it on the same queue, and a workq lease of it.
- On a real `jobgate serve` subprocess with a SQLite file, then PostgreSQL: kill -9 while a schedule fires every
  50 ms, twice, and the stored runs (executions) always equal the stored jobs: no run lost, none
  doubled (a run's job and the schedule's row are in one transaction).
"""
from __future__ import annotations

import re
import time

import greenstalk
import msgpack
import pytest
import sqlalchemy as sa

from core import schema

from .bunqueue_support import BQ, OK, qname
from .workq_support import WorkqRaw

GOLDEN_KEYS = ["name", "jobName", "queue", "schedule", "repeatEvery", "nextRun", "executions",
               "maxLimit", "timezone", "priority"]


@pytest.fixture
def bq(clocked):
    c = BQ(clocked.ports["bunqueue"], timeout=10)
    yield c
    c.sock.close()


def test_cron_replies_as_the_reference(clocked, bq):
    now = clocked.clock.wall_ms()
    r = bq.call("Cron", name="nightly", queue="cq", data={"c": 1}, schedule="30 9 * * *",
                timezone="America/New_York", maxLimit=5, priority=3, jobName="report")
    assert r["ok"] is True and list(r["cron"]) == GOLDEN_KEYS
    c = r["cron"]
    assert (c["name"], c["jobName"], c["queue"], c["schedule"], c["repeatEvery"],
            c["executions"], c["maxLimit"], c["timezone"], c["priority"]) == (
        "nightly", "report", "cq", "30 9 * * *", None, 0, 5, "America/New_York", 3)
    assert isinstance(c["nextRun"], float) and now < c["nextRun"] <= now + 86_400_000
    r = bq.call("Cron", name="every", queue="cq", data=1, repeatEvery=3_600_000)
    assert r["cron"]["nextRun"] == float(now + 3_600_000) and r["cron"]["repeatEvery"] == 3_600_000
    assert [x["name"] for x in bq.call("CronList")["crons"]] == ["nightly", "every"]
    assert bq.call("CronGet", name="every")["cron"] == r["cron"]
    # same name: an update (priority back to 0, maxLimit none, executions kept)
    u = bq.call("Cron", name="nightly", queue="cq", data={"c": 2}, schedule="0 10 * * *",
                timezone="Europe/Rome")["cron"]
    assert (u["maxLimit"], u["priority"], u["timezone"], u["jobName"]) == (
        None, 0, "Europe/Rome", "default")
    assert bq.call("CronDelete", name="nightly") == OK      # {ok: true, id: undefined}
    assert bq.call("CronDelete", name="nightly") == {"ok": False, "error": "Cron job not found"}
    assert bq.call("CronGet", name="nightly") == {"ok": False, "error": "Cron job not found"}
    assert [x["name"] for x in bq.call("CronList")["crons"]] == ["every"]


@pytest.mark.parametrize("fields, error", [
    ({"schedule": "nope"}, "Invalid cron expression: Cron expression must have 5 fields, or 6 "
                           "fields with leading seconds"),
    ({"schedule": "61 * * * *"}, "Invalid cron expression: Invalid cron expression: value out "
                                 "of range for field"),
    ({"schedule": "0 * * * *", "timezone": "Mars/Olympus"},
     "Invalid cron expression: Bun.cron: unknown time zone 'Mars/Olympus'"),
    ({"schedule": "0 0 30 2 *"}, "Invalid cron expression: Cron expression has no future "
                                 "occurrences"),
    ({}, "Cron job must have either schedule or repeatEvery"),
    ({"repeatEvery": 0}, "Cron repeatEvery must be a positive safe integer number of "
                         "milliseconds"),
    ({"repeatEvery": 1.5}, "Cron repeatEvery must be a positive safe integer number of "
                           "milliseconds"),
    ({"repeatEvery": "1000"}, "Cron repeatEvery must be a positive safe integer number of "
                              "milliseconds"),
    ({"repeatEvery": 1000, "jobName": ""}, "Job name must be a non-empty string of at most "
                                           "256 characters"),
    ({"repeatEvery": 1000, "queue": None}, "Internal server error"),
    ({"repeatEvery": 1000, "name": "n" * 257}, "Cron job name too long (max 256 characters)"),
    ({"repeatEvery": 1000, "queue": "q" * 257}, "Queue name too long (max 256 characters)"),
    ({"schedule": "0 * * * *", "timezone": "a" * 5000},
     "Invalid cron expression: Bun.cron: unknown time zone '" + "a" * 5000 + "'"),
    ({"repeatEvery": 1000, "data": "x" * (10 * 1024 * 1024 + 1)}, "Job data too large (max 10MB)"),
    ({"schedule": "1," * 600 + "1 * * * *"}, "Invalid cron expression: Invalid cron "
                                             "expression: unrecognized field syntax"),
])
def test_hostile_cron_commands_get_the_reference_errors(bq, fields, error):
    cmd = {"name": "bad", "queue": "cq", "data": 1}
    cmd.update(fields)
    cmd = {k: v for k, v in cmd.items() if v is not None}
    assert bq.call("Cron", **cmd) == {"ok": False, "error": error}
    assert bq.call("CronList")["crons"] == []


def test_a_fired_job_is_an_ordinary_job_for_every_dialect(clocked, bq):
    q = qname("cron")
    bq.ok("Cron", name="tick", queue=q, data={"n": 7}, repeatEvery=1000, jobName="tick-job",
          priority=5, preventOverlap=False)
    gs = greenstalk.Client(("127.0.0.1", clocked.ports["beanstalk"]), encoding=None, use=q,
                           watch=q)
    try:
        with pytest.raises(greenstalk.TimedOutError):
            gs.reserve(timeout=0)
        clocked.advance(1000)
        j = gs.reserve(timeout=0)                          # beanstalk takes run 1
        assert msgpack.unpackb(j.body) == {"n": 7}
        gs.delete(j)
        clocked.advance(1000)
        r = bq.call("PULL", queue=q, timeout=0)            # bunqueue takes run 2
        assert (r["job"]["name"], r["job"]["data"], r["job"]["priority"]) == (
            "tick-job", {"n": 7}, 5)
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                            r["job"]["id"])                  # a UUIDv7, as the reference's
        clocked.advance(1000)
        w = WorkqRaw(clocked.ports["workq"])               # workq leases run 3
        w.send(f"lease {q} 1000\r\n".encode())
        assert w.reply().startswith(b"+OK 1")
        w.sock.close()
        c = bq.call("CronGet", name="tick")["cron"]
        assert c["executions"] == 3
        assert c["nextRun"] == float(clocked.clock.wall_ms() + 1000)
    finally:
        gs.close()


def test_prevent_overlap_by_default_keeps_one_unfinished_run(clocked, bq):
    q = qname("cron")
    bq.ok("Cron", name="ov", queue=q, data=1, repeatEvery=1000)
    for _ in range(3):
        clocked.advance(1000)
    assert bq.call("Count", queue=q)["count"] == 1
    assert bq.call("CronGet", name="ov")["cron"]["executions"] == 3


# ------------------------------------------------------------------ kill -9 (subprocess)
def _stored(url: str, queue: str) -> tuple[int, int, int]:
    """(jobs of `queue`, the schedule's stored executions, distinct job creation ms)."""
    e = sa.create_engine(url)
    try:
        with e.connect() as c:
            jobs = c.execute(sa.select(schema.jobs.c.created_ms)
                             .where(schema.jobs.c.queue == queue)).scalars().all()
            ex = c.execute(sa.select(schema.cron_schedules.c.executions)).scalar_one()
    finally:
        e.dispose()
    return len(jobs), ex, len(set(jobs))


def test_kill9_while_firing_neither_loses_nor_doubles_a_run(servers, db_url):
    q = qname("cronkill")
    s = servers(db_url, bunqueue=True)
    c = BQ(s.bunqueue_port, timeout=10)
    c.ok("Cron", name="fast", queue=q, data={"k": 1}, repeatEvery=50, preventOverlap=False)
    time.sleep(1.2)
    s.kill()
    c.sock.close()
    n1, ex1, distinct1 = _stored(db_url, q)
    assert n1 == ex1 and distinct1 == n1 and n1 >= 5, (n1, ex1)

    s2 = servers(db_url, bunqueue=True)
    c = BQ(s2.bunqueue_port, timeout=10)
    v = c.call("CronGet", name="fast")["cron"]
    assert v["executions"] >= ex1
    time.sleep(1.2)
    s2.kill()
    c.sock.close()
    n2, ex2, distinct2 = _stored(db_url, q)
    assert n2 == ex2 and distinct2 == n2 and n2 > n1, (n2, ex2)
