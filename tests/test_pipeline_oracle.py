"""The test oracle of the pipeline metrics (tests/pipeline_oracle.py) against the definitions of
docs/pipeline.md "Metric definitions", one definition at a time on hand-written histories; and
the driven history (tests/pipeline_history.py) through a real server, whose rows the oracle
reads back and whose final depth it must agree on with the server's own counts.
"""
from __future__ import annotations

from collections import Counter
from fractions import Fraction

import greenstalk

from .pipeline_history import CROSS_BODY, QUEUES, drive_history
from .pipeline_oracle import (COLUMNS, ENQUEUE, nearest_rank, oracle_metrics, oracle_summary,
                              read_events)

M = 60_000        # 1m window, ms
T = 20_717 * 86_400_000   # 2026-09-21 00:00 UTC: a day (and hour, minute) boundary, ms


class History:
    """Hand-written job_events rows: `h(job, event, at, dialect=..., queue=..., attempt=...)`
    appends one with the next id; `h.rows` is the list."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def __call__(self, job: int, event: str, at: int, dialect: str = "beanstalk",
                 queue: str = "q", attempt: int = 0) -> None:
        self.rows.append({"id": len(self.rows) + 1, "job_id": job, "uid": None, "queue": queue,
                          "dialect": dialect, "event": event, "at_ms": T + at,
                          "attempt": attempt, "priority": 0, "payload_size": 1, "worker": None,
                          "error": None})


def test_completed_is_complete_or_a_delete_right_after_a_reserve():
    h = History()
    h(1, "put", 0), h(1, "reserve", 10, attempt=1), h(1, "delete", 20, attempt=1)   # yes
    h(2, "put", 0), h(2, "delete", 30)                                              # no
    h(3, "add", 0, "workq"), h(3, "reserve", 5, "workq", attempt=1)
    h(3, "complete", 9, "workq", attempt=1)                                         # yes
    h(4, "put", 0), h(4, "reserve", 1, attempt=1), h(4, "bury", 2, attempt=1)
    h(4, "delete", 3)                                                               # no
    h(5, "run", 0, "workq"), h(5, "reserve", 1, "workq", attempt=1)
    h(5, "complete", 2, "workq", attempt=1), h(5, "delete", 3, "jobgate", attempt=1)   # once
    m = oracle_metrics(h.rows, M)
    assert m[("q", "beanstalk", T)]["completed"] == 1
    assert m[("q", "workq", T)]["completed"] == 2
    assert m[("q", "beanstalk", T)]["throughput_per_s"] == 1 / 60
    assert m[("q", "beanstalk", T)]["buried"] == 1 and m[("q", "beanstalk", T)]["failed"] == 1
    assert m[("q", "beanstalk", T)]["depth"] == 0 and m[("q", "workq", T)]["depth"] == 0


def test_depth_follows_bury_kick_dlq_across_windows():
    h = History()
    h(1, "put", 0), h(1, "reserve", 1, attempt=1)              # window 0: +1
    h(1, "bury", M + 1, attempt=1)                              # window 1: -1
    h(1, "kick", 2 * M + 1, attempt=1)                          # window 2: +1
    h(1, "reserve", 3 * M + 1, attempt=2), h(1, "delete", 3 * M + 2, attempt=2)   # 3: -1
    h(2, "put", 1)                                              # stays ready
    h(3, "push", 2, "bunqueue"), h(3, "reserve", 3, "bunqueue", attempt=1)
    h(3, "fail", M + 2, "bunqueue", attempt=1), h(3, "dlq", M + 2, "bunqueue", attempt=1)
    h(3, "retry", 2 * M + 2, "bunqueue", attempt=1)             # counted again
    m = oracle_metrics(h.rows, M)
    assert [m[("q", "beanstalk", T + k * M)]["depth"] for k in range(4)] == [2, 1, 2, 1]
    assert [m[("q", "bunqueue", T + k * M)]["depth"] for k in range(3)] == [1, 0, 1]
    assert m[("q", "bunqueue", T + M)]["failed"] == 1 and m[("q", "bunqueue", T + M)]["buried"] == 1
    assert m[("q", "beanstalk", T + M)]["failed"] == 1      # the bury; the kick leaves it
    assert m[("q", "beanstalk", T + 2 * M)]["failed"] == 0
    s = oracle_summary(h.rows)
    assert s[("q", "beanstalk")]["depth"] == 1 and s[("q", "bunqueue")]["depth"] == 1


def test_depth_of_a_job_whose_history_starts_late():
    """Retention pruned its put: its first event counts from 0 (a reserve: +1, then -1)."""
    h = History()
    h(7, "reserve", 0, attempt=1), h(7, "complete", 5, "workq", attempt=1)
    m = oracle_metrics(h.rows, M)
    assert m[("q", "beanstalk", T)]["depth"] == 0
    assert m[("q", "beanstalk", T)]["wait_max_ms"] is None      # no ENQUEUE: no wait
    assert m[("q", "beanstalk", T)]["run_max_ms"] == 5


def test_wait_counts_only_the_first_reserve_and_includes_the_delay():
    h = History()
    h(1, "put", M - 1000), h(1, "ready", M - 500, "jobgate")     # a delayed put
    h(1, "reserve", M + 500, attempt=1)                          # wait 1500, in window 1
    h(1, "release", M + 600, attempt=1)
    h(1, "reserve", M + 2500, attempt=2), h(1, "delete", M + 2600, attempt=2)
    m = oracle_metrics(h.rows, M)
    w0, w1 = m[("q", "beanstalk", T)], m[("q", "beanstalk", T + M)]
    assert w0["wait_p50_ms"] is None and w0["enqueued"] == 1
    assert (w1["wait_p50_ms"], w1["wait_max_ms"], w1["started"]) == (1500, 1500, 2)
    assert w1["retry_rate"] == 0.5
    assert (w1["run_p50_ms"], w1["run_max_ms"]) == (100, 100)


def test_run_lands_in_the_window_of_the_event_that_ends_it():
    h = History()
    h(1, "add", 0, "workq"), h(1, "reserve", M - 400, "workq", attempt=1)
    h(1, "complete", M + 600, "workq", attempt=1)
    h(2, "add", 0, "workq"), h(2, "reserve", 10, "workq", attempt=1)
    h(2, "timeout", 810, "jobgate", attempt=1)                   # run 800
    h(2, "fail", 810, "jobgate", attempt=1), h(2, "dlq", 810, "jobgate", attempt=1)   # no run
    m = oracle_metrics(h.rows, M)
    w0, w1 = m[("q", "workq", T)], m[("q", "workq", T + M)]
    assert (w0["run_p50_ms"], w0["run_max_ms"], w0["started"]) == (800, 800, 2)
    assert (w1["run_p50_ms"], w1["started"], w1["completed"]) == (1000, 0, 1)
    assert w1["timeout_rate"] is None and w1["retry_rate"] is None
    assert (w0["timed_out"], w0["failed"], w0["buried"], w0["timeout_rate"]) == (1, 1, 1, 0.5)


def test_every_event_counts_under_the_producers_dialect():
    h = History()
    h(1, "push", 0, "bunqueue", "b"), h(1, "reserve", 1, "bunqueue", "b", 1)
    h(1, "timeout", 300, "jobgate", "b", 1), h(1, "fail", 300, "jobgate", "b", 1)
    h(1, "dlq", 300, "jobgate", "b", 1)
    h(2, "push", 0, "bunqueue", "b"), h(2, "reserve", 5, "beanstalk", "b", 1)
    h(2, "delete", 6, "beanstalk", "b", 1)                       # cross-dialect completion
    h(3, "ttl-evict", 9, "jobgate", "b")                         # no producer in the data
    m = oracle_metrics(h.rows, M)
    assert set(m) == {("b", "bunqueue", T), ("b", "jobgate", T)}
    b = m[("b", "bunqueue", T)]
    assert (b["enqueued"], b["started"], b["completed"], b["timed_out"], b["failed"],
            b["buried"]) == (2, 2, 1, 1, 1, 1)
    assert b["failure_rate"] == 0.5 and b["depth"] == 0
    assert m[("b", "jobgate", T)]["depth"] == 0
    assert m[("b", "jobgate", T)]["enqueued"] == 0


def test_failed_counts_each_failed_attempt_once_buries_included():
    """failed: `fail` and `bury` events, and a `dlq` that is not the second event of a final
    `fail` (a Discard); a kick or retry afterwards does not undo it."""
    h = History()
    h(1, "put", 0), h(1, "reserve", 1, attempt=1), h(1, "bury", 2, attempt=1)   # failed
    h(1, "kick", 3), h(1, "reserve", 4, attempt=2), h(1, "delete", 5, attempt=2)  # completed
    h(2, "add", 0, "workq"), h(2, "reserve", 1, "workq", attempt=1)
    h(2, "fail", 2, "workq", attempt=1)                                           # failed
    h(2, "reserve", 3, "workq", attempt=2)
    h(2, "fail", 4, "workq", attempt=2), h(2, "dlq", 4, "workq", attempt=2)      # once
    h(3, "push", 0, "bunqueue"), h(3, "reserve", 1, "bunqueue", attempt=1)
    h(3, "dlq", 2, "bunqueue", attempt=1)                                         # Discard
    h(3, "retry", 3, "bunqueue", attempt=1)                                       # still 1
    h(4, "push", 0, "bunqueue"), h(4, "dlq", 1, "bunqueue")            # Discard of a waiting job
    h(5, "push", 0, "bunqueue"), h(5, "reserve", 1, "bunqueue", attempt=1)
    h(5, "timeout", 9, "jobgate", attempt=1), h(5, "fail", 9, "jobgate", attempt=1)
    h(5, "dlq", 9, "jobgate", attempt=1)                               # lock expiry: once
    h(6, "put", 0), h(6, "reserve", 1, attempt=1), h(6, "release", 2, attempt=1)  # not failed
    h(6, "reserve", 3, attempt=2), h(6, "timeout", 4, "jobgate", attempt=2)       # not failed
    m = oracle_metrics(h.rows, M)
    b, w, q = (m[("q", d, T)] for d in ("beanstalk", "workq", "bunqueue"))
    assert (b["failed"], b["buried"], b["completed"], b["failure_rate"]) == (1, 1, 1, 0.5)
    assert (w["failed"], w["buried"], w["failure_rate"]) == (2, 1, 1.0)
    assert (q["failed"], q["buried"], q["timed_out"]) == (3, 3, 1)
    assert oracle_summary(h.rows)[("q", "beanstalk")]["failed"] == 1


def test_nearest_rank_uses_exact_fractions():
    ten = list(range(10, 0, -1))                                 # unsorted on purpose
    assert nearest_rank(ten, Fraction(9, 10)) == 9               # rank ceil(9) = 9, not 10
    assert nearest_rank(ten, Fraction(1, 2)) == 5
    assert nearest_rank(ten, Fraction(99, 100)) == 10
    assert nearest_rank([1, 2, 3, 4], Fraction(1, 2)) == 2
    assert nearest_rank(list(range(1, 31)), Fraction(9, 10)) == 27
    assert nearest_rank(list(range(1, 101)), Fraction(99, 100)) == 99
    assert nearest_rank([42], Fraction(1, 2)) == 42
    assert nearest_rank([], Fraction(1, 2)) is None
    h = History()
    for j in range(1, 11):                                       # waits 10, 20, ..., 100
        h(j, "put", 0), h(j, "reserve", 10 * j, attempt=1)
    w = oracle_metrics(h.rows, M)[("q", "beanstalk", T)]
    assert (w["wait_p50_ms"], w["wait_p90_ms"], w["wait_p99_ms"], w["wait_max_ms"]) == (
        50, 90, 100, 100)


def test_rates_are_null_without_a_denominator_and_sla_is_strict():
    h = History()
    h(1, "put", 0), h(1, "reserve", 60_000, attempt=1)            # wait 60 s: not a breach
    h(2, "put", 0), h(2, "reserve", 60_001, attempt=1)            # 60.001 s: a breach
    h(3, "put", 0, queue="idle")
    m = oracle_metrics(h.rows, 3_600_000)
    idle = m[("idle", "beanstalk", T)]
    assert [idle[c] for c in ("retry_rate", "timeout_rate", "failure_rate", "wait_p50_ms",
                              "run_max_ms", "throughput_per_s")] == [None] * 5 + [0.0]
    assert list(idle) == list(COLUMNS)
    assert m[("q", "beanstalk", T)]["sla_breaches"] == 1
    assert oracle_metrics(h.rows, 3_600_000, 60_001)[("q", "beanstalk", T)]["sla_breaches"] == 0
    assert oracle_summary(h.rows, 10_000)[("q", "beanstalk")]["sla_breaches"] == 2


def test_summary_throughput_over_the_whole_span_of_at_least_one_second():
    h = History()
    h(1, "put", 0), h(1, "reserve", 1, attempt=1), h(1, "delete", 2, attempt=1)
    h(2, "put", 3, queue="other")
    assert oracle_summary(h.rows)[("q", "beanstalk")]["throughput_per_s"] == 1.0   # span 1 s
    h(3, "put", 4000, queue="other")                              # span 4 s
    s = oracle_summary(h.rows)
    assert s[("q", "beanstalk")]["throughput_per_s"] == 0.25
    assert s[("other", "beanstalk")]["depth"] == 2
    assert oracle_summary([]) == {}


# ------------------------------------------------------------------ the driven history
def test_driven_history_rows_and_oracle(tmp_path, servers):
    url = f"sqlite:///{tmp_path}/jobgate.db"
    s = servers(url, workq=True, bunqueue=True)
    info = drive_history(s)
    g = greenstalk.Client(("127.0.0.1", s.port))       # the server's own counts, per queue
    live = {q: sum(int(g.stats_tube(q)[f"current-jobs-{k}"])
                   for k in ("ready", "delayed", "reserved")) for q in QUEUES}
    g.close()
    s.stop()
    rows = read_events(url)

    assert [r["id"] for r in rows] == sorted({r["id"] for r in rows})
    assert {r["queue"] for r in rows} == set(QUEUES) == set(info["queues"])
    assert {r["dialect"] for r in rows} == {"beanstalk", "workq", "bunqueue", "jobgate"}
    producers = Counter(r["dialect"] for r in rows if r["event"] in ENQUEUE)
    assert producers == Counter(info["jobs"]) and sum(producers.values()) >= 300
    events = Counter((r["dialect"], r["event"]) for r in rows)
    for de in [("beanstalk", "bury"), ("beanstalk", "kick"), ("beanstalk", "release"),
               ("beanstalk", "abandon"), ("bunqueue", "abandon"), ("workq", "fail"),
               ("bunqueue", "fail"), ("workq", "dlq"), ("bunqueue", "dlq"),
               ("jobgate", "timeout"), ("jobgate", "ready"), ("jobgate", "dlq"),
               ("workq", "schedule"), ("workq", "run")]:
        assert events[de] > 0, de
    cross = [(r["event"], r["dialect"]) for r in rows if r["uid"] == info["cross_uid"]]
    assert cross == [("push", "bunqueue"), ("reserve", "beanstalk"), ("delete", "beanstalk")]
    assert any(r["payload_size"] == len(CROSS_BODY) for r in rows if r["uid"] == info["cross_uid"])

    summary = oracle_summary(rows)
    by_dialect: dict[str, Counter] = {}
    for (q, d), v in summary.items():
        by_dialect.setdefault(d, Counter()).update(
            {c: v[c] for c in ("completed", "failed", "timed_out", "buried", "depth")})
        assert v["wait_max_ms"] is None or v["wait_max_ms"] >= 0
        assert v["run_max_ms"] is None or v["run_max_ms"] >= 0
    assert set(by_dialect) == {"beanstalk", "workq", "bunqueue"}     # timers: producers'
    for d, c in by_dialect.items():
        assert c["completed"] > 0 and c["timed_out"] > 0 and c["buried"] > 0 and c["depth"] > 0, d
    assert all(c["failed"] > 0 for c in by_dialect.values())     # beanstalk: its buries
    assert summary[("pl-shared", "bunqueue")]["completed"] >= 1       # the cross-dialect job
    assert all(summary[k]["retry_rate"] for k in [("pl/odd", "beanstalk"), ("pl-mail", "workq"),
                                                  ("pl-reports", "bunqueue")])
    # the final depth per queue is what the server itself holds: ready + delayed + reserved
    assert {q: sum(v["depth"] for (qq, _), v in summary.items() if qq == q)
            for q in QUEUES} == live
    # the windows add up to the summary; the last window's depth is the final depth
    windows = oracle_metrics(rows, M)
    for key, v in summary.items():
        mine = sorted((k for k in windows if k[:2] == key), key=lambda k: k[2])
        for c in ("enqueued", "started", "completed", "failed", "timed_out", "buried",
                  "sla_breaches"):
            assert sum(windows[k][c] for k in mine) == v[c], (key, c)
        assert windows[mine[-1]]["depth"] == v["depth"]
