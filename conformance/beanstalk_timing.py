"""Scenarios beyond the golden transcript that depend on the server's clock (TTR, delays,
timeouts, pauses) or on the order of waiting reservers.

Timings are short (TTR 1-4 s) and every check leaves at least 0.3 s of margin on each side of
the server-side deadline it observes.
"""

from __future__ import annotations

from .beanstalk_replies import stats, stats_job, stats_tube
from .scenario import Scenario, Step, read, send, send_window, sleep, steps, window

__all__ = ["SCENARIOS", "waiters_scenario"]

NF = b"NOT_FOUND\r\n"

def _stats_idle_ttr(expired: bool) -> bytes:
    """stats seen by B in ttr-expiry-idle-reserver past the TTR (expired or not)."""
    if expired:
        return stats(current_jobs_urgent=1, current_jobs_ready=1, cmd_put=1, cmd_reserve=1,
                     cmd_stats=1, cmd_stats_job=2, cmd_list_tube_used=4, job_timeouts=1,
                     total_jobs=1, current_connections=2, current_producers=1,
                     current_workers=1, total_connections=3)
    return stats(current_jobs_reserved=1, cmd_put=1, cmd_reserve=1, cmd_stats=1,
                 cmd_stats_job=2, cmd_list_tube_used=4, total_jobs=1, current_connections=2,
                 current_producers=1, current_workers=1, total_connections=3)


TTR_EXPIRY_IDLE = Scenario(
    "ttr-expiry-idle-reserver",
    doc="A job's TTR passes while its reserver stays idle and a second connection keeps "
        "working. 1.12 usually keeps the job reserved (its timer check drops the reserving "
        "connection when it runs in the deadline's exact microsecond, which its busy-wait "
        "before a deadline makes likely) until the reserver sends a command; sometimes it "
        "does release it. jobgate always releases it at TTR (D3). Afterwards both agree.",
    steps=steps(
        send("A", b"put 0 0 1 1\r\na\r\nreserve\r\n", b"INSERTED 1\r\n", b"RESERVED 1 1\r\na\r\n",
             label="A: put ttr 1, reserve"),
        send("B", b"stats-job 1\r\n", stats_job(1, "default", "reserved", ttr=1, reserves=1),
             label="B: stats-job 1 reserved"),
        [s for i in range(4) for s in (
            sleep(0.3, label=f"B works: pause {i + 1}"),
            send("B", b"list-tube-used\r\n", b"USING default\r\n", label=f"B works: command {i + 1}"),
        )],
        sleep(0.3, label="B works: pause 5"),
        send("B", b"stats-job 1\r\n", stats_job(1, "default", "reserved", ttr=1, reserves=1),
             alt=((stats_job(1, "default", "ready", ttr=1, reserves=1, timeouts=1),),),
             label="B: stats-job 1 past its TTR"),
        send("B", b"stats\r\n", _stats_idle_ttr(False), alt=((_stats_idle_ttr(True),),),
             label="B: stats past the TTR"),
        send("A", b"list-tube-used\r\n", b"USING default\r\n",
             label="A: any command re-arms A's timer"),
        sleep(0.2),
        send("B", b"stats-job 1\r\n", stats_job(1, "default", "ready", ttr=1, reserves=1,
                                                timeouts=1), label="B: stats-job 1 ready"),
        send("B", b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n", label="B: reserve it"),
        send("A", b"delete 1\r\n", NF, label="A: delete -> NOT_FOUND (B owns it)"),
        send("B", b"delete 1\r\n", b"DELETED\r\n", label="B: delete"),
    ),
)

TTR_STALE_TIMER = Scenario(
    "ttr-stale-timer",
    doc="beanstalkd 1.12 bug (upstream #380/#262): after DEADLINE_SOON ends a "
        "reserve-with-timeout, the connection keeps its pending timeout; it then ticks before "
        "its other job's deadline, is dropped from the timer heap and the job stays reserved "
        "past its TTR until that connection sends something. jobgate releases it at TTR (D3).",
    steps=steps(
        send("A", b"put 0 0 2 1\r\na\r\nput 0 0 4 1\r\nb\r\nreserve\r\nreserve\r\n", b"INSERTED 1\r\n",
             b"INSERTED 2\r\n", b"RESERVED 1 1\r\na\r\n", b"RESERVED 2 1\r\nb\r\n",
             label="A: put ttr 2 and ttr 4, reserve both"),
        send_window("A", b"reserve-with-timeout 2\r\n", 0.5,
                    label="A: reserve-with-timeout 2 (waits for the margin of job 1)"),
        read("A", b"DEADLINE_SOON\r\n", timeout=1.5, label="A: DEADLINE_SOON after ~1s"),
        send("A", b"delete 1\r\n", b"DELETED\r\n", label="A: delete job 1; A stays idle now"),
        send("B", b"stats-job 2\r\n", stats_job(2, "default", "reserved", ttr=4, reserves=1),
             label="B: stats-job 2 reserved"),
        sleep(4.0, label="wait until ~1s past job 2's TTR"),
        send("B", b"stats-job 2\r\n", stats_job(2, "default", "reserved", ttr=4, reserves=1),
             label="B: stats-job 2 past its TTR"),
        send("B", b"stats\r\n", stats(current_jobs_reserved=1, cmd_put=2, cmd_reserve=2,
                                      cmd_reserve_with_timeout=1, cmd_delete=1, cmd_stats=1,
                                      cmd_stats_job=2, total_jobs=2, current_connections=2,
                                      current_producers=1, current_workers=1,
                                      total_connections=3), label="B: stats past the TTR"),
        send("A", b"list-tube-used\r\n", b"USING default\r\n",
             label="A: any command re-arms A's timer"),
        sleep(0.2),
        send("B", b"stats-job 2\r\n", stats_job(2, "default", "ready", ttr=4, reserves=1,
                                                timeouts=1), label="B: stats-job 2 ready at last"),
    ),
)

TOUCH_EXTENDS = Scenario(
    "touch-extends-ttr",
    doc="touch restarts the TTR; only the reserving connection may touch.",
    steps=steps(
        send("A", b"put 0 0 2 1\r\na\r\nreserve\r\n", b"INSERTED 1\r\n", b"RESERVED 1 1\r\na\r\n",
             label="A: put ttr 2, reserve"),
        sleep(1.2),
        send("A", b"touch 1\r\n", b"TOUCHED\r\n", label="A: touch at 1.2s"),
        sleep(1.2),
        send("B", b"stats-job 1\r\ntouch 1\r\n", stats_job(1, "default", "reserved", ttr=2,
                                                            reserves=1), NF,
             label="B: at 2.4s still reserved; B cannot touch"),
        send("A", b"delete 1\r\n", b"DELETED\r\n", label="A: delete"),
    ),
)

DEADLINE_SOON_READY = Scenario(
    "deadline-soon-with-ready-job",
    doc="Inside the safety margin, reserve still returns a job if one is ready; DEADLINE_SOON "
        "only when it would have to wait.",
    steps=steps(
        send("A", b"put 0 0 1 1\r\na\r\nput 5 0 60 1\r\nb\r\n", b"INSERTED 1\r\n", b"INSERTED 2\r\n",
             label="A: put ttr 1 (pri 0) and ttr 60 (pri 5)"),
        send("A", b"reserve\r\nreserve\r\nreserve\r\n", b"RESERVED 1 1\r\na\r\n",
             b"RESERVED 2 1\r\nb\r\n", b"DEADLINE_SOON\r\n",
             label="A: reserve, reserve (ready job wins), reserve -> DEADLINE_SOON"),
        sleep(1.3, label="job 1's TTR passes"),
        # 1.12 may not have expired job 1 yet while A was idle (see ttr-expiry-idle-reserver);
        # any command from A makes it check, so send one before reserving.
        send("A", b"list-tube-used\r\n", b"USING default\r\n", label="A: list-tube-used"),
        send("A", b"reserve\r\nstats-job 1\r\n", b"RESERVED 1 1\r\na\r\n",
             stats_job(1, "default", "reserved", ttr=1, reserves=2, timeouts=1),
             label="A: reserve gets job 1 again"),
    ),
)

RESERVE_TIMEOUT_THEN_JOB = Scenario(
    "reserve-timeout-then-job",
    doc="A waiting reserve-with-timeout gets a job put by another connection; with no job it "
        "answers TIMED_OUT after the timeout.",
    steps=steps(
        send("A", b"watch w\r\nignore default\r\n", b"WATCHING 2\r\n", b"WATCHING 1\r\n",
             label="A: watch w only"),
        send_window("A", b"reserve-with-timeout 3\r\n", 0.3, label="A: reserve-with-timeout 3 waits"),
        send("B", b"stats-tube w\r\nuse w\r\nput 0 0 60 1\r\nw\r\n",
             stats_tube("w", watching=1, waiting=1), b"USING w\r\n", b"INSERTED 1\r\n",
             label="B: stats-tube w, put"),
        read("A", b"RESERVED 1 1\r\nw\r\n", timeout=1.0, label="A: gets job 1"),
        send_window("A", b"reserve-with-timeout 1\r\n", 0.5, label="A: reserve-with-timeout 1 waits"),
        read("A", b"TIMED_OUT\r\n", timeout=1.5, label="A: TIMED_OUT"),
        send("A", b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n", label="A: reserve-with-timeout 0"),
    ),
)

PAUSE_WAITING = Scenario(
    "pause-tube-waiting",
    doc="A reserver waiting on a paused tube gets the job only when the pause ends.",
    steps=steps(
        send("A", b"watch p\r\nignore default\r\n", b"WATCHING 2\r\n", b"WATCHING 1\r\n",
             label="A: watch p only"),
        send("B", b"use p\r\npause-tube p 2\r\n", b"USING p\r\n", b"PAUSED\r\n",
             label="B: use p, pause-tube p 2"),
        send_window("A", b"reserve\r\n", 0.2, label="A: reserve waits"),
        send("B", b"put 0 0 60 1\r\nq\r\n", b"INSERTED 1\r\n", label="B: put"),
        window("A", 0.6, label="A: nothing while paused"),
        send("B", b"stats-tube p\r\n", stats_tube("p", urgent=1, ready=1, total=1, using=1,
                                                   watching=1, waiting=1, pauses=1, pause=2,
                                                   pause_left=1),
             label="B: stats-tube p while paused"),
        read("A", b"RESERVED 1 1\r\nq\r\n", timeout=2.0, label="A: gets job 1 after the pause"),
        send("B", b"stats-tube p\r\n", stats_tube("p", reserved=1, total=1, using=1, watching=1,
                                                   pauses=1),
             label="B: stats-tube p after the pause"),
    ),
)

DELAY_EXPIRY = Scenario(
    "delay-expiry",
    doc="Released-with-delay and put-with-delay jobs become ready at their deadline; a waiting "
        "reserver gets a delayed job when it becomes ready.",
    steps=steps(
        send("A", b"put 0 0 60 1\r\na\r\nreserve\r\nrelease 1 3 1\r\n", b"INSERTED 1\r\n",
             b"RESERVED 1 1\r\na\r\n", b"RELEASED\r\n", label="A: put, reserve, release delay 1"),
        send("A", b"peek-delayed\r\nstats-job 1\r\n", b"FOUND 1 1\r\na\r\n",
             stats_job(1, "default", "delayed", pri=3, delay=1, time_left=0, reserves=1,
                       releases=1), label="A: delayed"),
        sleep(1.3),
        send("A", b"peek-delayed\r\npeek-ready\r\nstats-job 1\r\n", NF, b"FOUND 1 1\r\na\r\n",
             stats_job(1, "default", "ready", pri=3, delay=1, reserves=1, releases=1),
             label="A: ready after 1s"),
        send("B", b"watch d\r\nignore default\r\n", b"WATCHING 2\r\n", b"WATCHING 1\r\n",
             label="B: watch d only"),
        send("A", b"use d\r\nput 0 1 60 1\r\nd\r\n", b"USING d\r\n", b"INSERTED 2\r\n",
             label="A: put delay 1 into d"),
        send_window("B", b"reserve-with-timeout 3\r\n", 0.5, label="B: reserve-with-timeout 3 waits"),
        read("B", b"RESERVED 2 1\r\nd\r\n", timeout=1.5, label="B: gets the delayed job"),
    ),
)


def waiters_scenario(name: str, doc: str, waiters: str, receivers: str, rejoin: str = "") -> Scenario:
    """Reservers ``waiters`` (e.g. "ABC") wait on tube w in that order; producer P then puts
    one job at a time; after job i the connections are polled and ``receivers[i]`` is the one
    beanstalkd 1.12 hands job i+1 to. After job i, ``rejoin[i]`` (if given and not " ") sends
    reserve again. Step labels: "job N: X" for the poll of connection X after job N."""
    out: list[Step] = []
    for w in waiters:
        out.append(send(w, b"watch w\r\nignore default\r\n", b"WATCHING 2\r\n", b"WATCHING 1\r\n",
                        label=f"{w}: watch w only"))
    for w in waiters:
        out.append(send_window(w, b"reserve\r\n", 0.1, label=f"{w}: reserve (waits)"))
    out.append(send("P", b"use w\r\n", b"USING w\r\n", label="P: use w"))
    for i, r in enumerate(receivers, start=1):
        out.append(send("P", b"put 0 0 60 1\r\n%d\r\n" % (i % 10), b"INSERTED %d\r\n" % i,
                        label=f"P: put job {i}"))
        out.append(sleep(0.2))
        for w in waiters:
            got = (b"RESERVED %d 1\r\n%d\r\n" % (i, i % 10),) if w == r else ()
            out.append(window(w, 0.05, *got, label=f"job {i}: {w}"))
        if i <= len(rejoin) and rejoin[i - 1] != " ":
            out.append(send_window(rejoin[i - 1], b"reserve\r\n", 0.1,
                                   label=f"{rejoin[i - 1]}: reserve again after job {i}"))
    return Scenario(name, steps(out), doc=doc)


WAITERS_THREE = waiters_scenario(
    "waiters-three-fifo",
    "Three reservers waiting on one tube, three jobs one at a time: first come, first served "
    "(1.12 and jobgate agree here).",
    "ABC", "ABC")
WAITERS_FOUR = waiters_scenario(
    "waiters-four",
    "Four waiting reservers: 1.12 serves A, B, D, C (its waiting set swap-removes and rotates); "
    "jobgate serves the longest waiter first: A, B, C, D (D4).",
    "ABCD", "ABDC")
WAITERS_TWO_REJOIN = waiters_scenario(
    "waiters-two-rejoin",
    "Two waiters; A gets job 1 and waits again: 1.12 gives job 2 to A again, jobgate to B, "
    "who has waited longer (D4).",
    "AB", "AA", rejoin="A")
WAITERS_THREE_REJOIN = waiters_scenario(
    "waiters-three-rejoin",
    "Three waiters, each re-reserving after its job: 1.12 serves A, B, B; jobgate A, B, C (D4).",
    "ABC", "ABB", rejoin="AB")

SCENARIOS: tuple[Scenario, ...] = (
    TTR_EXPIRY_IDLE, TTR_STALE_TIMER, TOUCH_EXTENDS, DEADLINE_SOON_READY,
    RESERVE_TIMEOUT_THEN_JOB, PAUSE_WAITING, DELAY_EXPIRY, WAITERS_THREE, WAITERS_FOUR,
    WAITERS_TWO_REJOIN, WAITERS_THREE_REJOIN,
)
