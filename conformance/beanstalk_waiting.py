"""Scenarios about reservers that wait: who gets a job put, released or un-paused while
connections wait, what a waiting connection does with pipelined commands, and the waiting
counters. Expected replies recorded from beanstalkd 1.12."""

from __future__ import annotations

from .beanstalk_replies import stats, stats_tube
from .scenario import Scenario, read, send, send_window, steps, window

__all__ = ["SCENARIOS"]

DEADLINE_SOON_TIMEOUT_ZERO = Scenario(
    "deadline-soon-timeout-zero",
    doc="Inside the safety margin with nothing ready, reserve-with-timeout 0 and 1 answer "
        "DEADLINE_SOON at once (not TIMED_OUT).",
    steps=steps(
        send("A", b"put 0 0 1 1\r\nx\r\nreserve\r\nreserve-with-timeout 0\r\nreserve-with-timeout 1\r\n",
             b"INSERTED 1\r\n", b"RESERVED 1 1\r\nx\r\n", b"DEADLINE_SOON\r\n", b"DEADLINE_SOON\r\n",
             label="put ttr 1, reserve, reserve-with-timeout 0 and 1"),
        send("A", b"delete 1\r\n", b"DELETED\r\n", label="delete"),
    ),
)

TWO_WAITERS_ONE_JOB = Scenario(
    "two-waiters-one-job",
    doc="Two reserve-with-timeout 1 waiters, one job: the first waiter gets it, the other "
        "times out.",
    steps=steps(
        send_window("A", b"reserve-with-timeout 1\r\n", 0.1, label="A: reserve-with-timeout 1"),
        send_window("B", b"reserve-with-timeout 1\r\n", 0.1, label="B: reserve-with-timeout 1"),
        send("C", b"put 0 0 60 1\r\nx\r\n", b"INSERTED 1\r\n", label="C: put"),
        read("A", b"RESERVED 1 1\r\nx\r\n", timeout=1.0, label="A: gets it"),
        window("B", 0.3, label="B: still waiting"),
        read("B", b"TIMED_OUT\r\n", timeout=1.5, label="B: TIMED_OUT"),
    ),
)

PAUSED_ONE_OF_TWO = Scenario(
    "paused-one-of-two-tubes",
    doc="A reserver watching a paused and an unpaused tube gets the job of the unpaused one, "
        "even at a worse priority; nothing else while the other is paused.",
    steps=steps(
        send("A", b"watch p\r\nwatch q\r\nignore default\r\n", b"WATCHING 2\r\n", b"WATCHING 3\r\n",
             b"WATCHING 2\r\n", label="A: watch p, q"),
        send("B", b"use p\r\npause-tube p 2\r\nput 0 0 60 1\r\nx\r\nuse q\r\nput 5 0 60 1\r\ny\r\n",
             b"USING p\r\n", b"PAUSED\r\n", b"INSERTED 1\r\n", b"USING q\r\n", b"INSERTED 2\r\n",
             label="B: pause p, put into p (pri 0) and q (pri 5)"),
        send("A", b"reserve-with-timeout 0\r\nreserve-with-timeout 0\r\n", b"RESERVED 2 1\r\ny\r\n",
             b"TIMED_OUT\r\n", label="A: gets q's job, then TIMED_OUT"),
        send("B", b"stats\r\n", stats(current_jobs_urgent=1, current_jobs_ready=1,
                                      current_jobs_reserved=1, cmd_put=2,
                                      cmd_reserve_with_timeout=2, cmd_use=2, cmd_watch=2,
                                      cmd_ignore=1, cmd_stats=1, cmd_pause_tube=1, total_jobs=2,
                                      current_tubes=3, current_connections=2,
                                      current_producers=1, current_workers=1,
                                      total_connections=3), label="B: stats"),
    ),
)

PIPELINED_AFTER_RESERVE = Scenario(
    "pipelined-after-blocking-reserve",
    doc="Commands pipelined behind a waiting reserve are answered after it returns, in order.",
    steps=steps(
        send_window("A", b"reserve\r\nlist-tube-used\r\n", 0.3, label="A: reserve + list-tube-used"),
        send("B", b"put 0 0 60 1\r\nx\r\n", b"INSERTED 1\r\n", label="B: put"),
        read("A", b"RESERVED 1 1\r\nx\r\n", b"USING default\r\n", label="A: both replies"),
    ),
)

RELEASE_TO_WAITER = Scenario(
    "release-to-waiter",
    doc="A released job goes straight to a waiting reserver; a job released with delay 1 goes "
        "to it when the delay ends.",
    steps=steps(
        send("A", b"put 0 0 60 1\r\nx\r\nreserve\r\n", b"INSERTED 1\r\n", b"RESERVED 1 1\r\nx\r\n",
             label="A: put, reserve"),
        send_window("B", b"reserve\r\n", 0.2, label="B: reserve waits"),
        send("A", b"release 1 0 0\r\n", b"RELEASED\r\n", label="A: release"),
        read("B", b"RESERVED 1 1\r\nx\r\n", label="B: gets it"),
        send("A", b"stats\r\n", stats(current_jobs_reserved=1, cmd_put=1, cmd_reserve=2,
                                      cmd_release=1, cmd_stats=1, total_jobs=1,
                                      current_connections=2, current_producers=1,
                                      current_workers=2, total_connections=3), label="A: stats"),
        send_window("A", b"reserve\r\n", 0.2, label="A: reserve waits"),
        send("B", b"release 1 0 1\r\n", b"RELEASED\r\n", label="B: release with delay 1"),
        window("A", 0.5, label="A: nothing during the delay"),
        read("A", b"RESERVED 1 1\r\nx\r\n", timeout=1.5, label="A: gets it after the delay"),
    ),
)

WAITING_COUNTERS = Scenario(
    "waiting-counters",
    doc="A connection waiting on three tubes counts once in stats current-waiting and once in "
        "each tube's current-waiting.",
    steps=steps(
        send_window("A", b"watch a\r\nwatch b\r\nreserve\r\n", 0.2, b"WATCHING 2\r\n",
                    b"WATCHING 3\r\n", label="A: watch a, b; reserve"),
        send("B", b"stats\r\nstats-tube a\r\nstats-tube default\r\n",
             stats(cmd_reserve=1, cmd_watch=2, cmd_stats=1, current_tubes=3,
                   current_connections=2, current_workers=1, current_waiting=1,
                   total_connections=3),
             stats_tube("a", watching=1, waiting=1),
             stats_tube("default", using=2, watching=2, waiting=1), label="B: stats"),
    ),
)

SCENARIOS: tuple[Scenario, ...] = (
    DEADLINE_SOON_TIMEOUT_ZERO, TWO_WAITERS_ONE_JOB, PAUSED_ONE_OF_TWO, PIPELINED_AFTER_RESERVE,
    RELEASE_TO_WAITER, WAITING_COUNTERS,
)
