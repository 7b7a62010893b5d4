"""A realistic mixed job history for the pipeline tests (issue 5): `drive_history(s)` works a
started server (tests/conftest.py `servers`, with workq=True and bunqueue=True) through all
three dialects with real clients, so that its `job_events` hold every kind of row the pipeline
has to read:

- successes: beanstalk put / reserve / delete, workq add / lease / complete (and a `run`),
  bunqueue PUSH / PUSHB (pipelined) / PULL / PULLB / ACK / ACKB;
- failures: workq `fail` with retries (-max-fails) and final failures, bunqueue FAIL with
  maxAttempts (retried, then dead-lettered), bunqueue Discard;
- TTR timeouts: beanstalk ttr=1 reservations, workq leases with an 800 ms TTR (one at
  -max-attempts=1: dead-lettered by the timer), a bunqueue PULLB with lockTtl 800 (one job at
  maxAttempts 1: dead-lettered at the lock expiry);
- delays: beanstalk put delay=1, workq schedule, bunqueue delay; beanstalk bury / kick / release,
  a delete of a job never reserved, abandons (a connection closed while it held a job);
- a cross-dialect job (bunqueue PUSH, greenstalk reserve + delete) and a shared queue that all
  three dialects use; jobs left ready, delayed, buried and reserved at the end.

Waits for timers poll the server (stats-tube, inspect job, GetState) instead of sleeping a fixed
time. Everything happens within a few seconds; the server is left running (the caller stops it
and reads job_events, tests/pipeline_oracle.py `read_events`).
"""
from __future__ import annotations

import datetime as dt
import time

import greenstalk

from .bunqueue_support import BQ, wait_until
from .workq_support import OK, WorkqRaw, add_cmd, complete_cmd, fail_cmd, new_uid, \
    parse_entries, run_cmd, schedule_cmd

IMAGES, MAIL, SHARED, ODD, REPORTS = "pl-images", "pl-mail", "pl-shared", "pl/odd", "pl-reports"
#: Every queue the history uses: beanstalk (images, odd), workq (mail), bunqueue (reports),
#: all three (shared).
QUEUES = (IMAGES, MAIL, SHARED, ODD, REPORTS)
CROSS_BODY = "pushed by bunqueue, deleted by beanstalk"


def body(i: int, size: int) -> str:
    """A deterministic ASCII payload of exactly `size` (>= 1) bytes for job number `i`."""
    return (f"{i}:" + "abcdefghij" * (size // 10 + 1))[:size]


# ----------------------------------------------------------------------------- beanstalk
class _Beanstalk:
    """greenstalk clients; `work` reserves and acts on jobs by plan."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conns: list[greenstalk.Client] = []
        self.puts = 0

    def client(self, tube: str) -> greenstalk.Client:
        c = greenstalk.Client(("127.0.0.1", self.port), use=tube, watch=tube)
        self.conns.append(c)
        return c

    def put(self, c, i: int, size: int, **kw) -> int:
        self.puts += 1
        return c.put(body(i, size), **kw)

    def work(self, c, n: int, plan: dict) -> int:
        """Reserve up to `n` ready jobs of `c`'s watched tube, one at a time; each is deleted,
        or gets the next action of `plan[job id]` ("release", "bury", "delete")."""
        done = 0
        for _ in range(n):
            try:
                job = c.reserve(timeout=0)
            except greenstalk.TimedOutError:
                break
            act = plan[job.id].pop(0) if plan.get(job.id) else "delete"
            if act == "release":
                c.release(job, priority=5)
            elif act == "bury":
                c.bury(job, priority=5)
            else:
                c.delete(job)
            done += 1
        return done

    def close(self) -> None:
        for c in self.conns:
            c.close()


# --------------------------------------------------------------------------------- workq
def _utc(epoch_ms: int) -> str:
    """A workq schedule time (UTC, millisecond fraction) for `epoch_ms`."""
    t = dt.datetime.fromtimestamp(epoch_ms / 1000, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


class _Workq:
    """A raw workq connection; `work` leases and acts on jobs by plan."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.w = WorkqRaw(port)
        self.adds = 0

    def add(self, name: str, i: int, size: int, ttr: int = 60_000, **flags) -> str:
        u = new_uid()
        r = self.w.cmd(add_cmd(u, name, body(i, size).encode(), ttr=ttr, ttl=600_000, **flags))
        assert r == OK, r
        self.adds += 1
        return u

    def schedule(self, name: str, i: int, at_ms: int, **flags) -> str:
        u = new_uid()
        r = self.w.cmd(schedule_cmd(u, name, _utc(at_ms), body(i, 40).encode(), ttr=60_000,
                                    ttl=600_000, **flags))
        assert r == OK, r
        self.adds += 1
        return u

    def lease(self, name: str, wait_ms: int = 0) -> str | None:
        """`lease name wait_ms` -> the leased job's uid, or None (-TIMEOUT)."""
        r = self.w.cmd(b"lease %s %d\r\n" % (name.encode(), wait_ms))
        if r == b"-TIMEOUT\r\n":
            return None
        assert r.startswith(b"+OK 1\r\n"), r
        return r.split(b"\r\n")[1].split(b" ")[0].decode()

    def work(self, name: str, n: int, plan: dict) -> int:
        """Lease up to `n` jobs of `name`; each is completed, or gets the next action of
        `plan[uid]` ("fail": a failure with an error text; "keep": stays leased)."""
        done = 0
        for _ in range(n):
            u = self.lease(name)
            if u is None:
                break
            act = plan[u].pop(0) if plan.get(u) else "complete"
            if act == "fail":
                assert self.w.cmd(fail_cmd(u, b"smtp 451: try again later")) == OK
            elif act == "complete":
                assert self.w.cmd(complete_cmd(u, b"sent")) == OK
            done += 1
        return done

    def state(self, u: str) -> str:
        """workq state digit of `u` (0 new, 1 completed, 2 failed, 3 pending, 4 leased)."""
        return self.w.inspect_job(u)["state"]

    def scheduled_len(self, name: str) -> int:
        """`inspect queue name` scheduled-len: its jobs whose time has not come."""
        (_, keys), = parse_entries(self.w.cmd(b"inspect queue %s\r\n" % name.encode()))
        return int(keys["scheduled-len"])


# ------------------------------------------------------------------------------ bunqueue
class _Bunqueue:
    """A bunqueue connection; `work` pulls (PULL or PULLB) and acts on jobs by plan."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.c = BQ(port)
        self.pushes = 0

    def push(self, queue: str, data, **opts) -> str:
        self.pushes += 1
        return self.c.push(queue, data, **opts)

    def pushb_pipelined(self, queue: str, batches: list[list[dict]]) -> list[str]:
        """Send every PUSHB frame in one write, then read the replies; the job ids in order."""
        rids = [f"pb{i}-{time.monotonic_ns()}" for i in range(len(batches))]
        self.c.send(*({"cmd": "PUSHB", "queue": queue, "jobs": b, "reqId": r}
                      for b, r in zip(batches, rids)))
        ids = []
        for r in rids:
            rep = self.c.recv_reply(r)
            assert rep["ok"] is True, rep
            ids += rep["ids"]
        self.pushes += len(ids)
        return ids

    def _act(self, job_id: str, token, plan: dict) -> str:
        act = plan[job_id].pop(0) if plan.get(job_id) else "ack"
        if act == "fail":
            self.c.ok("FAIL", id=job_id, token=token, error="renderer crashed")
        elif act == "discard":
            self.c.ok("Discard", id=job_id)
        return act

    def work(self, queue: str, n: int, plan: dict, batch: int = 0) -> int:
        """Pull up to `n` jobs of `queue` (PULLB of `batch` with an owner, else PULL without);
        each is acknowledged (ACKB / ACK), or gets the next action of `plan[id]` ("fail",
        "discard")."""
        done = 0
        while done < n:
            if batch:
                r = self.c.ok("PULLB", queue=queue, count=min(batch, n - done),
                              owner="pl-batch", lockTtl=30_000)
                got = list(zip((j["id"] for j in r["jobs"]), r["tokens"]))
            else:
                j = self.c.pull(queue)["job"]
                got = [(j["id"], None)] if j else []
            if not got:
                break
            acks = [(i, t) for i, t in got if self._act(i, t, plan) == "ack"]
            if batch and acks:
                self.c.ok("ACKB", ids=[i for i, _ in acks], tokens=[t for _, t in acks])
            elif acks:
                self.c.ok("ACK", id=acks[0][0], result={"pages": done})
            done += len(got)
        return done


# ------------------------------------------------------------------------------- history
def drive_history(s) -> dict:
    """Drive the mixed history through server `s` (ports s.port, s.workq_port,
    s.bunqueue_port) and leave it running. Takes a few seconds of wall time (the longest
    timer is the 1 s beanstalk TTR / delay, and a 1.5 s workq schedule).

    Returns {"queues": QUEUES, "jobs": {dialect: jobs created}, "cross_uid": the bunqueue id of
    the cross-dialect job, "left": {what was left unfinished: counts}, "seconds": wall s}."""
    t0 = time.monotonic()
    bs, wq, bq = _Beanstalk(s.port), _Workq(s.workq_port), _Bunqueue(s.bunqueue_port)
    now_ms = int(time.time() * 1000)

    # 1. cross-dialect: pushed by bunqueue, reserved and deleted by greenstalk (shared is empty)
    cross = bq.push(SHARED, CROSS_BODY, priority=5)
    shared_b = bs.client(SHARED)
    job = shared_b.reserve(timeout=5)
    assert job.body == CROSS_BODY, job.body
    shared_b.delete(job)
    # a workq run: added on one connection, leased and completed on another, then deleted
    runner, ru = WorkqRaw(s.workq_port), new_uid()
    runner.send(run_cmd(ru, SHARED, b"thumbnail please", ttr=10_000, wait=5_000))
    assert wq.lease(SHARED, 5_000) == ru
    assert wq.w.cmd(complete_cmd(ru, b"thumb.png")) == OK
    assert runner.reply().startswith(b"+OK 1\r\n")
    runner.close()
    wq.adds += 1

    # 2. timers, started first so that they run out while the volume is worked
    odd = bs.client(ODD)
    ttr_ids = [bs.put(odd, i, 30 + i, priority=0, ttr=1) for i in range(3)]
    holders = [bs.client(ODD) for _ in ttr_ids]   # one reservation per connection (ttr=1 is
    got = [h.reserve(timeout=5).id for h in holders]   # all safety margin: DEADLINE_SOON
    assert sorted(got) == ttr_ids                        # otherwise)
    delay_ids = [bs.put(odd, i, 100 + i, priority=10, delay=1) for i in range(3)]
    bs.put(odd, 99, 64, priority=10, delay=3600)                    # left delayed
    wq_ttr = [wq.add(MAIL, i, 50, ttr=800, priority=100) for i in range(2)]
    wq_ttr.append(wq.add(MAIL, 2, 50, ttr=800, priority=100, max_attempts=1))
    assert sorted(wq.lease(MAIL) for _ in wq_ttr) == sorted(wq_ttr)    # leases that run out
    for i in range(2):
        wq.schedule(MAIL, i, now_ms + 1500, priority=90)
    wq.schedule(MAIL, 9, now_ms + 86_400_000)                       # left scheduled
    bq_stall = [bq.push(REPORTS, body(i, 20), priority=100, backoff=0) for i in range(2)]
    bq_stall.append(bq.push(REPORTS, body(2, 20), priority=100, maxAttempts=1))
    r = bq.c.ok("PULLB", queue=REPORTS, count=3, owner="pl-stall", lockTtl=800)
    assert sorted(j["id"] for j in r["jobs"]) == sorted(bq_stall)    # locks that run out
    bq_delay = [bq.push(REPORTS, body(i, 70), priority=90, delay=800) for i in range(2)]
    bq.push(REPORTS, body(9, 70), delay=3_600_000)                  # left delayed
    bq.c.ok("Discard", id=bq.push(REPORTS, "never wanted", priority=-5))   # waiting -> dlq

    # 3. beanstalk volume: images (release, bury, kick, abandon, delete unreserved), shared
    images = bs.client(IMAGES)
    for i in range(80):
        bs.put(images, i, (i * 131) % 3000 + 1, priority=(i * 97) % 2000)
    planned = [bs.put(images, 1000 + i, 10 + i, priority=1) for i in range(5)]
    plan = dict(zip(planned, (["release", "delete"], ["release", "delete"], ["bury"], ["bury"],
                              ["bury"])))
    unwanted = bs.put(images, 999, 12, priority=4000)               # never reserved
    images.delete(unwanted)
    bs.work(images, 60, plan)
    assert images.kick(2) == 2                                      # one stays buried
    bs.work(images, 6, {})
    quitter = bs.client(IMAGES)
    quitter.reserve(timeout=5)
    quitter.close()                                                 # abandon: ready again
    bs.conns.remove(quitter)
    for i in range(12):
        bs.put(shared_b, 200 + i, (i * 71) % 500 + 1, priority=100 + i)
    bs.work(shared_b, 12, {})                                       # beanstalk jobs go first

    # 4. workq volume: mail with retries, final failures and a delete; shared
    plan = {}
    for i in range(5):
        plan[wq.add(MAIL, 300 + i, 200, priority=50, max_fails=3)] = ["fail", "complete"]
    for i in range(3):
        plan[wq.add(MAIL, 310 + i, 200, priority=50, max_fails=2)] = ["fail", "fail"]
    for i in range(60):
        wq.add(MAIL, 400 + i, (i * 211) % 4000 + 1, priority=i % 10)
    gone = wq.add(MAIL, 499, 10, priority=-50)
    assert wq.w.cmd(b"delete %s\r\n" % gone.encode()) == OK         # pending -> deleted
    wq.work(MAIL, 45, plan)
    for i in range(10):
        wq.add(SHARED, 500 + i, 100 + 10 * i, priority=i)
    wq.work(SHARED, 6, {})

    # 5. bunqueue volume: pipelined PUSHB, PULLB + ACKB, PULL + ACK, FAIL retries, Discard
    batches = [[{"data": body(i, (i * 53) % 1500 + 1), "priority": i % 20}
                for i in range(k * 50, k * 50 + 50)] for k in range(3)]
    batches.append([{"data": {"n": i, "blob": "z" * (i * 7)}} for i in range(50)])
    bq.pushb_pipelined(REPORTS, batches)
    plan = {}
    for i in range(4):
        plan[bq.push(REPORTS, body(i, 300), priority=60, maxAttempts=3, backoff=0)] = \
            ["fail", "ack"]
    for i in range(3):
        plan[bq.push(REPORTS, body(i, 300), priority=60, maxAttempts=2, backoff=0)] = \
            ["fail", "fail"]
    plan[bq.push(REPORTS, body(7, 300), priority=60)] = ["discard"]  # active -> dlq
    bq.work(REPORTS, 20, plan)
    bq.work(REPORTS, 100, plan, batch=25)
    quitter = BQ(s.bunqueue_port)
    quitter.pull(REPORTS)
    quitter.close()                                                 # abandon: waiting again
    for i in range(10):
        bq.push(SHARED, body(600 + i, 40 * (i + 1)), priority=i)
    bq.work(SHARED, 5, {})

    # 6. the timers have run out (poll the server), then work what they released
    def settled() -> bool:
        st = odd.stats_tube(ODD)
        return (int(st["current-jobs-reserved"]) == 0 and int(st["current-jobs-delayed"]) == 1
                and all(wq.state(u) != "4" for u in wq_ttr)
                and wq.scheduled_len(MAIL) == 1
                and all(bq.c.state(i) != "active" for i in bq_stall)
                and all(bq.c.state(i) != "delayed" for i in bq_delay))
    assert wait_until(settled, timeout=10, step=0.05), "timers did not run out within 10 s"
    assert wq.state(wq_ttr[2]) == "2" and bq.c.state(bq_stall[2]) == "failed"
    bs.work(odd, 6, {delay_ids[0]: ["bury"]})
    assert odd.kick(1) == 1
    bs.work(odd, 1, {})
    wq.work(MAIL, 4, {})          # timed-out and scheduled jobs first (highest priorities),
    bq.work(REPORTS, 4, {})       # unless the volume loops above already took them

    # 7. left reserved at the end: workq leases with a long TTR (a workq lease outlives its
    # connection; a beanstalk reservation or a bunqueue pull would be abandoned at the close)
    keep = [wq.add(MAIL, 700 + i, 64, ttr=600_000, priority=1000) for i in range(2)]
    for _ in keep:
        assert wq.lease(MAIL) in keep
    bs.put(shared_b, 800, 64, priority=0, ttr=3600)                 # leased through workq
    assert wq.lease(SHARED) is not None
    held = bq.push(SHARED, body(801, 64), priority=1000, timeout=600_000)
    assert wq.lease(SHARED) == held
    bs.close()
    wq.w.close()
    bq.c.close()
    return {"queues": QUEUES,
            "jobs": {"beanstalk": bs.puts, "workq": wq.adds, "bunqueue": bq.pushes},
            "cross_uid": cross,
            "left": {"leased_by_workq": {"workq": 2, "beanstalk": 1, "bunqueue": 1},
                     "beanstalk_buried": 1,
                     "delayed": {"beanstalk": 1, "workq": 1, "bunqueue": 1}},
            "seconds": time.monotonic() - t0}
