"""workq scenarios from the golden transcript that take real time: TTR expiry and
max-attempts (TTR 200 ms), TTL eviction (300 ms), schedule (+2 s), run (with and without a
worker on a second connection) and blocking result (one waiter, two waiters: W5).

Sleeps are short multiples of the golden timeouts; a blocking command is first watched for a
quiet period (no answer yet: a lower bound on the wait), then its answer is read with a
generous deadline. Schedule times are rendered when the step runs (relative to now).
"""

from __future__ import annotations

from .scenario import sleep, window
from .workq_scenarios_common import (CE, NOT_FOUND, OK, TIMEOUT, U, at, entry, jobs, leased,
                                     queue, result, scenario, timed, waits, wq, wq_read,
                                     wq_window)

__all__ = ["SCENARIOS"]

_TTR_PASSES = 0.5   # seconds: well past a 200 ms TTR


def _inspect(n: int) -> bytes:
    return b"inspect job " + U(n) + b"\r\n"


TTR_FAIL = scenario(
    "golden-ttr-max-attempts-1",
    "TTR 200 ms with max-attempts=1: after the TTR the job is failed (state 2) with an empty "
    "failure result.",
    wq("A", b"add " + U(21) + b" ttrq 200 60000 1 -max-attempts=1\r\nx\r\n", OK,
       label="add ttr=200 max-attempts=1"),
    wq("A", b"lease ttrq 100\r\n", leased(U(21), "ttrq", 200, b"x"), label="lease"),
    sleep(_TTR_PASSES),
    wq("A", _inspect(21), jobs(entry(U(21), "ttrq", ttr=200, max_attempts=1, attempts=1,
                                     state=2)),
       label="after TTR: state 2 (FAILED), attempts 1"),
    wq("A", b"result " + U(21) + b" 0\r\n", result(U(21), False, b""),
       label="result of TTR-failed job (empty failure result)"),
)

TTR_REQUEUE = scenario(
    "golden-ttr-requeue",
    "TTR 200 ms, unlimited attempts: after the TTR the job is pending (state 3) and leased "
    "again (attempts 2); a complete after the second TTR still succeeds.",
    wq("A", b"add " + U(22) + b" ttrq2 200 60000 1\r\nx\r\n", OK,
       label="add ttr=200 unlimited attempts"),
    wq("A", b"lease ttrq2 100\r\n", leased(U(22), "ttrq2", 200, b"x"), label="lease"),
    sleep(_TTR_PASSES),
    wq("A", _inspect(22), jobs(entry(U(22), "ttrq2", ttr=200, attempts=1, state=3)),
       label="after TTR: state 3 (PENDING), attempts 1"),
    wq("A", b"lease ttrq2 100\r\n", leased(U(22), "ttrq2", 200, b"x"), label="lease again"),
    wq("A", _inspect(22), jobs(entry(U(22), "ttrq2", ttr=200, attempts=2, state=4)),
       label="state 4, attempts 2"),
    sleep(_TTR_PASSES),
    wq("A", b"complete " + U(22) + b" 0\r\n\r\n", OK, label="complete late-but-valid"),
)

TTR_TWICE = scenario(
    "golden-ttr-max-attempts-2",
    "TTR 200 ms with max-attempts=2: leased twice, both leases time out, the job is failed.",
    wq("A", b"add " + U(23) + b" ttrq3 200 60000 1 -max-attempts=2\r\nx\r\n", OK,
       label="add ttr=200 max-attempts=2"),
    wq("A", b"lease ttrq3 100\r\n", leased(U(23), "ttrq3", 200, b"x"), label="lease #1"),
    sleep(_TTR_PASSES),
    wq("A", b"lease ttrq3 100\r\n", leased(U(23), "ttrq3", 200, b"x"), label="lease #2"),
    sleep(_TTR_PASSES),
    wq("A", _inspect(23), jobs(entry(U(23), "ttrq3", ttr=200, max_attempts=2, attempts=2,
                                     state=2)),
       label="after 2 timeouts: FAILED"),
)

TTL = scenario(
    "golden-ttl",
    "TTL 300 ms: the job is there at first, gone (inspect and result NOT-FOUND) after it.",
    wq("A", b"add " + U(24) + b" ttlq 1000 300 1\r\nx\r\n", OK, label="add ttl=300"),
    wq("A", _inspect(24), jobs(entry(U(24), "ttlq", ttl=300)),
       label="inspect before the TTL (still there)"),
    sleep(0.6),
    wq("A", _inspect(24), NOT_FOUND, label="after TTL: NOT-FOUND"),
    wq("A", b"result " + U(24) + b" 0\r\n", NOT_FOUND, label="result after TTL"),
)

_SCHED = b"schedule " + U(25) + b" sched 1000 60000 %s 1\r\ns\r\n"
_PAST = b"schedule " + U(26) + b" sched2 1000 60000 %s 1\r\ns\r\n"
_PAST_TTL = b"schedule " + U(27) + b" sched2 1000 5000 %s 1\r\ns\r\n"
_FRACTION = b"schedule " + U(27) + b" sched2 1000 5000 %s 1\r\ns\r\n"

SCHEDULE = scenario(
    "golden-schedule",
    "schedule 2 s ahead (inspect scheduled-jobs and queue, a lease before the time times out, "
    "a waiting lease gets it at the time), in the past (ready at once; refused when time + "
    "TTL has passed), time syntax, argument count.",
    timed(wq("A", _SCHED % b"<now+2s>", OK, label="schedule +2s"), at(2, _SCHED)),
    wq("A", b"inspect scheduled-jobs sched 0 10\r\n",
       jobs(entry(U(25), "sched", payload=b"s", time=b"2026-11-22T02:42:48Z")),
       label="inspect scheduled-jobs"),
    wq("A", b"inspect queue sched\r\n", b"+OK 1\r\n" + queue("sched", 0, 1),
       label="inspect queue sched"),
    wq("A", b"lease sched 100\r\n", TIMEOUT, label="lease before time -> TIMEOUT"),
    wq("A", b"lease sched 3000\r\n", leased(U(25), "sched", 1000, b"s"),
       label="lease waits until scheduled time", timeout=5.0),
    timed(wq("A", _PAST % b"<now-10s>", OK,
             label="schedule in past with ttl long -> accepted, immediately ready"),
          at(-10, _PAST)),
    wq("A", b"lease sched2 100\r\n", leased(U(26), "sched2", 1000, b"s"),
       label="lease past-scheduled"),
    timed(wq("A", _PAST_TTL % b"<now-10s>", CE("Invalid Time"),
             label="schedule where time+ttl in past -> Invalid Time"), at(-10, _PAST_TTL)),
    wq("A", _PAST_TTL % b"2030-01-01T00:00:00+00:00", CE("Invalid Time"),
       label="schedule bad time format"),
    # The transcript used 2030-01-01T00:00:00.5Z; a time a year ahead keeps the case valid.
    timed(wq("A", _FRACTION % b"<now+1y>.5Z", OK, label="schedule time with fraction"),
          at(365 * 86400, _FRACTION, frac=b".5")),
    wq("A", b"schedule " + U(27) + b" sched2 1000 5000 1\r\ns\r\n",
       CE("Invalid command args") + CE("Unknown command"), label="schedule wrong argc"),
)

RUN_ALONE = scenario(
    "golden-run-no-worker",
    "run without a worker times out after its wait-timeout and leaves no job behind; run's "
    "argument errors; a run id that an add already took.",
    waits("A", b"run " + U(28) + b" runq 1000 200 4\r\nping\r\n", 0.1, TIMEOUT,
          label="run with no worker -> TIMEOUT after wait"),
    wq("A", b"result " + U(28) + b" 0\r\n", NOT_FOUND,
       label="result after run timeout (job cleaned up)"),
    wq("A", b"run " + U(31) + b" runq 1000 200 1 -priority=1 -x=2\r\nx\r\n",
       CE("Invalid command args"), label="run with 2 flags"),
    waits("A", b"run " + U(31) + b" runq 1000 100 1 -max-attempts=1\r\nx\r\n", 0.05, TIMEOUT,
          label="run with -max-attempts flag only (ignored) and no worker"),
    wq("A", b"run " + U(32) + b" runq 1000 abc 1\r\nx\r\n", CE("Invalid wait timeout"),
       label="run bad wait-timeout"),
    wq("A", b"run " + U(32) + b" runq 0 100 1\r\nx\r\n", CE("Invalid TTR"), label="run ttr 0"),
    wq("A", b"add " + U(9) + b" ping 1000 2592000000 1\r\nx\r\n", OK,
       label="setup: add ttl 2592000000 ok"),
    wq("A", b"run " + U(9) + b" runq 1000 100 1\r\nx\r\n", CE("Duplicate job"),
       label="run duplicate of existing add id"),
)

_RUN_OK = "run with worker (worker completes 'pong')"
_RUN_FAIL = "run with worker failing"
_RUN_TTR = "run ttr=600 wait=200; worker leases but never completes -> TIMEOUT at ~TTR deadline"

RUN_WORKER = scenario(
    "golden-run-worker",
    "run answered by a worker on a second connection: completed ('pong'), failed ('bad'); "
    "the job is gone after it answered.",
    wq_window("A", b"run " + U(29) + b" runq 1000 2000 4 -priority=3\r\nping\r\n", 0.1,
              label=_RUN_OK),
    wq("B", b"lease runq 1000\r\n", leased(U(29), "runq", 1000, b"ping"),
       label="worker B: lease the run job"),
    wq("B", b"complete " + U(29) + b" 4\r\npong\r\n", OK, label="worker B: complete pong"),
    wq_read("A", result(U(29), True, b"pong"), label=_RUN_OK + " [reply]"),
    wq("A", b"result " + U(29) + b" 0\r\n", NOT_FOUND,
       label="result after successful run (job removed)"),
    wq_window("A", b"run " + U(30) + b" runq 1000 2000 4\r\nping\r\n", 0.1, label=_RUN_FAIL),
    wq("B", b"lease runq 1000\r\n", leased(U(30), "runq", 1000, b"ping"),
       label="worker B: lease the second run job"),
    wq("B", b"fail " + U(30) + b" 3\r\nbad\r\n", OK, label="worker B: fail bad"),
    wq_read("A", result(U(30), False, b"bad"), label=_RUN_FAIL + " [reply]"),
)

RUN_TTR = scenario(
    "golden-run-ttr",
    "run with TTR 600 ms whose worker leases and never answers: -TIMEOUT at the TTR, not at "
    "the 200 ms wait-timeout.",
    wq_window("A", b"run " + U(37) + b" runq2 600 200 1\r\nx\r\n", 0.05, label=_RUN_TTR),
    wq("B", b"lease runq2 1000\r\n", leased(U(37), "runq2", 600, b"x"),
       label="worker B: lease, never complete"),
    window("A", 0.3, label=_RUN_TTR + " [no answer past the wait-timeout, before the TTR]"),
    wq_read("A", TIMEOUT, label=_RUN_TTR + " [reply]"),
)

_BLOCKS = "result blocks until completed by another connection (~300ms)"

RESULT_WAIT = scenario(
    "golden-result-blocking",
    "result of an unfinished job: times out after 100 ms, at once with 0, and blocks until "
    "another connection completes the job.",
    wq("A", b"add " + U(33) + b" resq 1000 60000 1\r\nx\r\n", OK, label="add for result wait"),
    waits("A", b"result " + U(33) + b" 100\r\n", 0.05, TIMEOUT,
          label="result not yet processed, timeout 100 -> TIMEOUT"),
    wq("A", b"result " + U(33) + b" 0\r\n", TIMEOUT, label="result timeout 0 on unprocessed"),
    wq_window("A", b"result " + U(33) + b" 2000\r\n", 0.3, label=_BLOCKS),
    wq("B", b"complete " + U(33) + b" 4\r\ndone\r\n", OK, label="B: complete done"),
    wq_read("A", result(U(33), True, b"done"), label=_BLOCKS + " [reply]"),
)

TWO_WAITERS = "two concurrent 'result <id> 1000' waiters on 2 connections, then complete"
_DONE = result(U(34), True, b"done")

RESULT_TWO = scenario(
    "golden-result-two-waiters",
    "two connections wait for the same result, then a third completes the job: the "
    "reference answers one waiter and times the other out; jobgate answers both (W5).",
    wq("A", b"add " + U(34) + b" resq 1000 60000 1\r\nx\r\n", OK,
       label="add for double result wait"),
    wq_window("B", b"result " + U(34) + b" 1000\r\n", 0.1, label="c2: result 1000"),
    wq_window("C", b"result " + U(34) + b" 1000\r\n", 0.1, label="c3: result 1000"),
    wq("A", b"complete " + U(34) + b" 4\r\ndone\r\n", OK, label="complete with 2 waiters"),
    # Go hands a channel value to its longest-waiting receiver: the reference answers c2.
    wq_read("B", _DONE, label=TWO_WAITERS),
    wq_read("C", TIMEOUT, label=TWO_WAITERS + " (c3)"),
)

SCENARIOS = (TTR_FAIL, TTR_REQUEUE, TTR_TWICE, TTL, SCHEDULE, RUN_ALONE, RUN_WORKER, RUN_TTR,
             RESULT_WAIT, RESULT_TWO)
