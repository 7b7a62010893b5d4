"""The real bunqueue TypeScript client (npm `bunqueue` 2.9.5 on Bun, tests/bunqueue_client/) against
jobgate's bunqueue listener, and against the reference bunqueue server for comparison.

- workflow.ts drives Queue and Worker (TCP mode) through add, addBulk, getJob, getJobCounts, a
  concurrency-5 worker, a retry that succeeds, a job that ends in the DLQ, progress and heartbeats,
  and prints what it saw as one JSON object; `check_workflow` asserts it. The same check runs
  against the reference server (`test_workflow_reference`), so the expectations are the
  reference's observable behaviour, not guesses.
- push_many.ts pushes 10,000 jobs with pipelined `Queue.add` calls; the server is killed with
  SIGKILL the moment the last add is acknowledged (by the script itself) or as soon as the script
  reports it (by pytest), restarted on the same SQLite file, and every acknowledged id must be
  there (DESIGN.md, "Storage and durability").

Needs `npm install` in tests/bunqueue_client (bun + bunqueue); skipped with the reason otherwise.
"""
from __future__ import annotations

import os
import re
import select
import socket
import struct
import subprocess

import msgpack
import pytest

from .bunqueue_real import BUN, CLIENT_DIR, BunqueueServer, bun_env, bun_missing_reason, run_script
from .support import Raw, Server

pytestmark = pytest.mark.skipif(bun_missing_reason() is not None,
                                reason=bun_missing_reason() or "")

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
MISSING_ID = "00000000-0000-7000-8000-000000000000"
N_DURABLE = 10_000


# ------------------------------------------------------------------------------ helpers

def jobgate(url: str | None, **kw) -> Server:
    """`Server(url, bunqueue=True)`; skips while tests/support.py cannot start a bunqueue listener."""
    try:
        return Server(url, bunqueue=True, **kw)
    except TypeError as e:  # the lead adds `bunqueue=True` to tests/support.Server
        pytest.skip(f"tests/support.py Server has no bunqueue listener yet ({e})")


def run_workflow(port: int, *extra: str, timeout: float = 90.0) -> dict:
    """Run workflow.ts against 127.0.0.1:port; returns its JSON (fails the test on exit != 0)."""
    return run_script("workflow.ts", port, *extra, timeout=timeout)


def _ext(code: int, data: bytes):
    return None if code == 0 else msgpack.ExtType(code, data)  # ext 0 = JavaScript undefined


class BqRaw:
    """A raw bunqueue connection: 4-byte big-endian length + MessagePack, replies matched by reqId."""

    def __init__(self, port: int, token: str | None = None, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.seq = 0
        if token is not None:
            r = self.call({"cmd": "Auth", "token": token})
            assert r["ok"] is True, r

    def _frame(self) -> dict:
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return msgpack.unpackb(body, raw=False, ext_hook=_ext, strict_map_key=False)
            d = self.sock.recv(1 << 20)
            if not d:
                raise EOFError("connection closed")
            self.buf += d

    def many(self, cmds: list[dict], window: int = 500) -> list[dict]:
        """Send `cmds` pipelined (`window` per write) and return their replies in request order."""
        out: list[dict] = []
        for lo in range(0, len(cmds), window):
            chunk = cmds[lo:lo + window]
            ids = []
            data = b""
            for c in chunk:
                self.seq += 1
                ids.append(f"t{self.seq}")
                body = msgpack.packb({**c, "reqId": ids[-1]}, use_bin_type=True)
                data += struct.pack(">I", len(body)) + body
            self.sock.sendall(data)
            got: dict = {}
            while len(got) < len(chunk):
                f = self._frame()
                if f.get("reqId") in ids:  # unsolicited event frames have no reqId
                    got[f["reqId"]] = f
            out.extend(got[i] for i in ids)
        return out

    def call(self, cmd: dict) -> dict:
        return self.many([cmd])[0]

    def close(self) -> None:
        self.sock.close()


def check_core(out: dict) -> None:
    """What workflow.ts observed, as the reference bunqueue 2.9.5 server produces it: everything
    but the parts checked separately below."""
    n = out["jobs"]
    ids = out["ids"]
    assert out["ok"] is True
    # ids: server-assigned UUIDv7 strings, all distinct
    every = [ids["single"], *ids["bulk"], ids["flaky"], ids["doomed"], ids["slow"]]
    assert len(ids["bulk"]) == n and out["allIdsDistinct"] is True
    assert all(UUID7.match(i) for i in every), every
    assert out["addReturned"] == {"name": "single", "data": {"i": 0}, "bulkNames": ["bulk"]}

    # ---- before any worker
    w = out["getJobWaiting"]
    assert (w["id"], w["name"], w["data"], w["attemptsMade"], w["progress"], w["returnvalue"],
            w["failedReason"], w["priority"], w["processedOn"], w["finishedOn"]) == (
        ids["single"], "single", {"i": 0}, 0, 0, None, None, 0, None, None)
    assert w["opts"] == {"attempts": 3, "backoff": 1000}  # server defaults: maxAttempts 3, backoff 1000
    assert out["stateWaiting"] == "waiting"
    b = out["getJobBulkLast"]
    assert (b["id"], b["name"], b["data"]) == (ids["bulk"][-1], "bulk", {"i": n})
    assert out["getJobFlaky"]["opts"] == {"attempts": 3, "backoff": 50}
    assert out["getJobMissing"] is None and out["stateMissing"] == "unknown"
    zero = {"waiting": 0, "prioritized": 0, "active": 0, "completed": 0, "failed": 0, "delayed": 0,
            "paused": 0, "waiting-children": 0}
    assert out["countsBefore"] == {**zero, "waiting": n + 4}

    # ---- the worker (concurrency 5)
    done = {**zero, "completed": n + 3, "failed": 1}
    assert out["countsAfter"] == done
    assert out["maxActive"] == 5
    assert out["calls"] == {"single": [0], "bulk": [0] * n, "flaky": [0, 1], "doomed": [0, 1],
                            "slow": [0]}  # attemptsMade seen by each processor call
    assert out["completedEvents"] == n + 3
    assert out["completedResults"] == {
        "single": {"doubled": 0}, "bulkFirst": {"doubled": 2}, "bulkLast": {"doubled": 2 * n},
        "flaky": {"recovered": True, "attemptsMade": 1}, "slow": {"slept": 700}}
    assert out["failedEvents"] == [
        {"id": ids["doomed"], "name": "doomed", "attemptsMade": 0, "message": "doomed attempt 0"},
        {"id": ids["doomed"], "name": "doomed", "attemptsMade": 1, "message": "doomed attempt 1"},
        {"id": ids["flaky"], "name": "flaky", "attemptsMade": 0, "message": "flaky first try"}]
    assert out["workerErrors"] == []

    # ---- progress and heartbeats of the slow job
    assert out["progressEvents"] == [10, 60, 100]
    d = out["slowDuringRun"]  # read by another connection while the job ran
    assert (d["id"], d["progress"], d["returnvalue"], d["finishedOn"]) == (ids["slow"], 60, None, None)
    assert d["processedOn"] is not None
    assert out["slowStateDuringRun"] == "active"
    assert out["slowHeartbeats"] >= 2  # JobHeartbeat(B) frames naming the slow job while it ran
    assert [r["ok"] for r in out["slowRaw"]] == [True, True]
    assert [r["state"] for r in out["slowRaw"]] == ["active", "active"]
    assert [r["progress"] for r in out["slowRaw"]] == [10, 10]
    # nothing but the worker's heartbeats touched the job between the two reads
    assert out["slowHeartbeatMoved"] is True, out["slowRaw"]

    # ---- after completion: getJob shows returnvalue, attempts, reasons
    s = out["single"]
    # (no check of a completed job's progress when it never reported any: the reference shows 0
    # in memory and 100 with --data-path)
    assert (s["returnvalue"], s["attemptsMade"], s["failedReason"]) == ({"doubled": 0}, 0, None)
    assert s["processedOn"] is not None and s["finishedOn"] >= s["processedOn"]
    assert out["singleState"] == "completed"
    assert out["bulkStates"] == ["completed"]
    assert out["bulkReturnvalues"] == [{"doubled": 2 * k} for k in range(1, n + 1)]
    f = out["flaky"]
    # the reference keeps the last failure's message on a job that later succeeded
    assert (f["returnvalue"], f["attemptsMade"], f["failedReason"]) == (
        {"recovered": True, "attemptsMade": 1}, 1, "flaky first try")
    assert out["flakyState"] == "completed"
    dm = out["doomed"]
    assert (dm["returnvalue"], dm["attemptsMade"], dm["failedReason"]) == (None, 2, "doomed attempt 1")
    assert out["doomedState"] == "failed"
    sl = out["slow"]
    assert (sl["returnvalue"], sl["progress"], sl["attemptsMade"]) == ({"slept": 700}, 100, 0)
    assert out["slowState"] == "completed"

    # ---- the DLQ as jobs and as the failed list
    assert out["dlqJobs"] == [ids["doomed"]]  # Queue.getDlqJobsAsync: the Dlq reply's `jobs`
    assert out["failedList"] == [ids["doomed"]]  # Queue.getFailedAsync: GetJobs state failed
    assert out["countsFinal"] == done

    # ---- every reply was ok, except the deliberate lookups of a missing id and heartbeats that
    # raced with the job's ACK
    tr = out["trace"]
    assert tr["rejected"] == []
    unexpected = [e for e in tr["errorReplies"]
                  if e["cmd"] != "GetDlqStats"  # check_dlq_stats
                  and not (e["cmd"] == "GetJob" and e["id"] == MISSING_ID and e["error"] == "Job not found")
                  # a heartbeat timer that fires as the job is acknowledged (also the slow job's:
                  # its heartbeats' effect is checked above through lastHeartbeat)
                  and not (e["cmd"] in ("JobHeartbeat", "JobHeartbeatB") and (
                      e["id"] != ids["slow"]
                      or e["error"] == "Job not found or not active (or invalid token)"))]
    assert unexpected == []


def check_dlq_entries(out: dict) -> None:
    """Queue.getDlqAsync() reads the Dlq reply's `entries` (job, reason, error, attempts, ...),
    which the spec does not list; without them it returns []."""
    ids = out["ids"]
    assert out["dlq"] == [{
        "id": ids["doomed"], "name": "doomed", "reason": "max_attempts_exceeded",
        "error": "doomed attempt 1",
        "attempts": [
            {"attempt": 1, "reason": "explicit_fail", "error": "doomed attempt 0"},
            {"attempt": 2, "reason": "max_attempts_exceeded", "error": "doomed attempt 1"}]}]


def check_dlq_stats(out: dict) -> None:
    """Queue.getDlqStatsAsync() sends GetDlqStats (not in the spec) and reads `data.stats`."""
    assert out["trace"]["commands"]["GetDlqStats"]["errors"] == 0
    st = out["dlqStats"]
    assert (st["total"], st["byReason"]["max_attempts_exceeded"], st["byQueue"]) == (
        1, 1, {out["queue"]: 1})


def check_count(out: dict) -> None:
    """Queue.countAsync() (Count): the reference answers the queue's pending size (waiting +
    prioritized + delayed; 0 once every job finished), not "all states" as the spec's text says."""
    assert out["countBefore"] == out["jobs"] + 4
    assert out["countFinal"] == 0


CHECKS = {"core": check_core, "dlq_entries": check_dlq_entries, "dlq_stats": check_dlq_stats,
          "count": check_count}


def check_workflow(out: dict, *names: str) -> None:
    """Run the named checks (all by default) on workflow.ts's output."""
    for name in names or CHECKS:
        CHECKS[name](out)


def push_kill_restart(start, mode: str, tmp_path, killer: str = "script"
                      ) -> tuple[list[str], str, object]:
    """Start a server with `start()`, push N_DURABLE jobs with push_many.ts, SIGKILL the server
    by PID right after the last acknowledgement, start a second one with `start()`. Returns
    (acked ids in push order, queue name, second server).

    killer "script": push_many.ts kills it the moment the last add resolves (--kill-pid), which
    leaves the server no time to flush anything it acknowledged early; "pytest": this function
    kills it when it reads the script's "ACKED" line (a few ms later)."""
    s = start()
    queue = f"jgdur-{mode}-{killer}-{os.getpid()}"
    ids_file = tmp_path / f"ids-{mode}.txt"
    kill = ["--kill-pid", str(s.proc.pid)] if killer == "script" else []
    p = subprocess.Popen([BUN, os.path.join(CLIENT_DIR, "push_many.ts"), "--host", "127.0.0.1",
                          "--port", str(s.bunqueue_port), "--n", str(N_DURABLE), "--mode", mode,
                          "--queue", queue, "--out", str(ids_file), *kill],
                         cwd=CLIENT_DIR, env=bun_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([p.stdout], [], [], 180)  # the adds, however slow
        line = p.stdout.readline() if ready else "(no output after 180 s)"
        acked_line_seen = line.strip() == f"ACKED {N_DURABLE}"
        if acked_line_seen:
            s.kill()  # SIGKILL by PID (or only reap, when the script killed it)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert acked_line_seen, f"push_many.ts: {line!r} rc={p.returncode} stderr={err[-2000:]}"
    assert p.returncode == 0, err
    rows = [ln.split() for ln in ids_file.read_text().splitlines()]
    assert [int(i) for i, _ in rows] == list(range(N_DURABLE))
    ids = [j for _, j in rows]
    assert len(set(ids)) == N_DURABLE
    return ids, queue, start()


# ------------------------------------------------------------------------------ tests

@pytest.fixture(scope="module")
def jg(tmp_path_factory):
    """One jobgate server (SQLite, durability commit) with beanstalk and bunqueue listeners."""
    s = jobgate(f"sqlite:///{tmp_path_factory.mktemp('bqc')}/jobgate.db")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def jg_out(jg):
    """workflow.ts's output against jobgate (run once, checked by several tests)."""
    return run_workflow(jg.bunqueue_port)


@pytest.fixture(scope="module")
def reference():
    """The reference bunqueue 2.9.5 server, in memory."""
    s = BunqueueServer()
    yield s
    s.stop()


def test_workflow_reference(reference):
    """Every expectation holds on the real server (keeps workflow.ts and the checks honest)."""
    check_workflow(run_workflow(reference.port))


def test_workflow_jobgate(jg_out):
    check_workflow(jg_out, "core")


def test_workflow_jobgate_dlq_entries(jg_out):
    check_workflow(jg_out, "dlq_entries")


def test_workflow_jobgate_dlq_stats(jg_out):
    check_workflow(jg_out, "dlq_stats")


def test_workflow_jobgate_count(jg_out):
    check_workflow(jg_out, "count")


def test_workflow_jobgate_many_jobs(jg):
    """More jobs than the worker's pull batch and pool, on the same server."""
    check_workflow(run_workflow(jg.bunqueue_port, "--jobs", "120"), "core")


@pytest.mark.parametrize("killer", ["script", "pytest"])
@pytest.mark.parametrize("mode", ["batch", "single"])
def test_pushed_jobs_survive_kill9(mode, killer, tmp_path):
    """`batch`: concurrent Queue.add calls coalesced by the client into PUSHB frames (its default);
    `single`: autoBatch off, one pipelined PUSH frame per add. See push_kill_restart for killer."""
    url = f"sqlite:///{tmp_path}/jobgate.db"
    started: list[Server] = []

    def start() -> Server:
        s = jobgate(url, durability="commit")
        started.append(s)
        return s
    try:
        ids, queue, s2 = push_kill_restart(start, mode, tmp_path, killer)
        assert started[0].proc.returncode == -9
        got = []
        for lo in range(0, N_DURABLE, 2500):  # stays under the reference's 10,000 commands per
            c = BqRaw(s2.bunqueue_port)       # connection and minute, should jobgate copy it
            try:
                got += c.many([{"cmd": "GetJob", "id": i} for i in ids[lo:lo + 2500]])
            finally:
                c.close()
        missing = [i for i, r in zip(ids, got) if not (r.get("ok") and r.get("job"))]
        assert missing == [], f"{len(missing)} acknowledged jobs lost, e.g. {missing[:5]}"
        for k, (i, r) in enumerate(zip(ids, got)):
            j = r["job"]
            assert (j["id"], j["queue"], j["data"], j["name"]) == (i, queue, {"i": k}, "pm")
        c = BqRaw(s2.bunqueue_port)
        try:
            assert c.call({"cmd": "GetJobCounts", "queue": queue})["counts"]["waiting"] == N_DURABLE
            assert c.call({"cmd": "Count", "queue": queue})["count"] == N_DURABLE
        finally:
            c.close()
        # the same queue seen as a beanstalk tube (DESIGN.md: queue = tube)
        r = Raw(s2.port)
        try:
            frame = r.cmd(b"stats-tube %s\r\n" % queue.encode())
        finally:
            r.close()
        assert frame.startswith(b"OK "), frame
        assert b"\ncurrent-jobs-ready: %d\n" % N_DURABLE in frame, frame
    finally:
        for s in started:
            if s.proc.poll() is None:
                s.kill()
            else:
                s.proc.communicate()
