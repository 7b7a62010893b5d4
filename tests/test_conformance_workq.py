"""workq conformance over real sockets on 127.0.0.1, and the small workq client.

(a) Every scenario of ``conformance.workq`` against a fresh jobgate (workq listener, SQLite,
    durability commit): each must match, with exactly its documented differences (W1..W8).
(b) Self-checks of the suite: every case of the golden transcript is a step that sends the
    case's bytes and expects the reference's reply; the W cases refer to real steps and differ
    from the reference there; the comparison notices a changed byte and masks only what it
    should; the CLI's modes and usage errors.
(c) ``conformance.workq_client``: the reply framing on bytes alone (CRLF inside results and
    payloads), then the client against a real jobgate.

Run: ``.venv/bin/python -m pytest tests/test_conformance_workq.py -v``.
See docs/workq-conformance.md.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conformance import workq
from conformance.framing import Outcome
from conformance.harness import jobgate_env, run_many
from conformance.scenario import ScenarioRun
from conformance.servers import HOST, ServerProcess, jobgate_workq_cmd
from conformance.workq_client import (Client, ClientError, Job, NotFound, Result, TimedOut,
                                      parse_inspect, split_reply)
from conformance.workq_known_differences import DIFFERENCES, check_cases_exist
from conformance.workq_scenarios_common import mask_times

GOLDEN = Path(__file__).parent / "data" / "workq-golden.txt"   # copy of ../shared/reference
JOBS = int(os.environ.get("CONFORMANCE_JOBS", "4"))
NAMES = [s.name for s in workq.SCENARIOS]


# ---------------------------------------------------------------------------------------
# (a) every scenario against jobgate
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jobgate_runs() -> dict[str, ScenarioRun]:
    """Every scenario played once against its own fresh jobgate (in parallel)."""
    runs = run_many(list(workq.SCENARIOS), workq.run_jobgate, jobs=JOBS)
    return {r.scenario: r for r in runs}


@pytest.mark.parametrize("name", NAMES)
def test_jobgate_matches(name: str, jobgate_runs) -> None:
    s = workq.by_name(name)
    run = jobgate_runs[name]
    v = workq.check(s, run)
    assert v.status in ("equal", "equal-after-documented"), "\n" + workq._verdict_text(
        v, run, "jobgate", verbose=True)
    # Exactly the scenario's documented differences were needed, no more, no fewer.
    assert sorted(v.ids) == workq.differences_in(s)


# ---------------------------------------------------------------------------------------
# (b) self-checks
# ---------------------------------------------------------------------------------------
def test_scenarios_are_well_formed() -> None:
    assert len(set(NAMES)) == len(NAMES) == 24
    for s in workq.SCENARIOS:
        s.validate()
        assert s.steps and s.doc and s.source in ("golden", "extra"), s.name
    assert check_cases_exist(workq.SCENARIOS) == []
    assert [d.id for d in DIFFERENCES] == [f"W{i}" for i in range(1, 9)]
    for d in DIFFERENCES:
        assert d.reason and d.cases and d.normalize is None, d.id


def _golden_cases() -> list[tuple[str, bytes | None, list[tuple[bytes, bool]]]]:
    """(title, request bytes or None, [(reply bytes, closed by server)]) per golden case."""
    cases: list = []
    for line in GOLDEN.read_text("latin-1").splitlines():
        if line.startswith("## "):
            cases.append((line[3:].strip(), None, []))
        elif line.startswith("C> "):
            cases[-1] = (cases[-1][0], eval(line[3:], {"__builtins__": {}}), cases[-1][2])
        elif line.startswith(("S< ", "S(")):
            text = line.split("< ", 1)[1]
            closed = "[connection closed by server]" in text
            text = text.replace("[connection closed by server]", "").strip()
            cases[-1][2].append((eval(text, {"__builtins__": {}}), closed))
    return cases


_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def _expected_bytes(s, label: str) -> bytes:
    frames = [f for st in s.steps if st.label in (label, label + " [reply]")
              for f in st.expect.frames]
    return b"".join(mask_times(f) for f in frames)


def test_every_golden_case_is_a_step_with_its_bytes() -> None:
    """Each golden case is a step labelled with its title, sending the case's bytes (a
    schedule time rendered at run time stands in for the transcript's) and expecting the
    reference's reply (timestamps masked), with the connection closed where it was."""
    cases = _golden_cases()
    assert len(cases) == 160
    by_label = {}
    for s in workq.SCENARIOS:
        if s.source == "golden":
            for st in s.steps:
                by_label.setdefault(st.label, []).append((s, st))
    for title, request, replies in cases:
        labels = [title] if len(replies) == 1 else [title, title + " (c3)"]
        assert request is not None or len(replies) == 2, title
        for label, (reply, closed) in zip(labels, replies):
            assert label in by_label, f"golden case {label!r} is not a step"
            want = b"".join(mask_times(f) for f in workq_frames(reply))
            # A title used twice in the transcript ("lease") is a step in two scenarios.
            assert any(_is_case(s, st, request, want, closed) for s, st in by_label[label]), label


def _is_case(s, st, request: bytes | None, want: bytes, closed: bool) -> bool:
    """Whether step ``st`` of ``s`` sends ``request`` and expects ``want`` (masked)."""
    if request is not None:
        sent = st.payload()
        if st.render is not None:
            sent, request = _TIME.sub(b"T", sent), _TIME.sub(b"T", request)
        if sent != request:
            return False
    return _expected_bytes(s, st.label) == want and (st.expect.end == "eof") == closed


def workq_frames(reply: bytes) -> list[bytes]:
    """``reply`` cut into frames (what the runner would read)."""
    out = []
    while reply:
        f, used, _ = split_reply(reply)
        assert f is not None, reply
        out.append(f)
        reply = reply[used:]
    return out


def test_w_cases_differ_from_the_reference() -> None:
    """At every W step jobgate's expectation differs from the reference's, and the
    jobgate-mode scenario reads exactly as many frames as jobgate's reply has."""
    for d in DIFFERENCES:
        for c in d.cases:
            s = workq.by_name(c.scenario)
            st = s.step(c.step)
            if st.alternatives:   # a nondeterministic reference step (W8): jobgate pins it
                assert c.jobgate in (st.expect, *st.alternatives), (d.id, c.step)
            else:
                assert st.expect != c.jobgate, (d.id, c.step)
            jst = workq.for_mode(s).step(c.step)
            if st.read == "frames":
                assert jst.count == len(c.jobgate.frames), (d.id, c.step)
            assert workq.for_mode(s, reference=True) is s


def _with(run: ScenarioRun, label: str, outcome: Outcome) -> ScenarioRun:
    out = ScenarioRun(run.scenario)
    out.records = [replace(r, outcome=outcome) if r.label == label else r for r in run.records]
    return out


def test_check_notices_differences_and_masks_only_timestamps(jobgate_runs) -> None:
    s = workq.by_name("golden-add-ids")
    run = jobgate_runs[s.name]
    assert workq.check(s, run).status == "equal"
    label = "inspect job canonical form of braced id"
    got = next(r.outcome for r in run.records if r.label == label)
    moved = Outcome((_TIME.sub(b"1999-01-01T00:00:00Z", got.frames[0]),), got.end)
    assert moved != got and workq.check(s, _with(run, label, moved)).status == "equal"
    changed = Outcome((got.frames[0].replace(b"ttl 60000", b"ttl 60001"),), got.end)
    v = workq.check(s, _with(run, label, changed))
    assert v.status == "DIFFERENT" and v.first_difference.label == label

    # A W step: jobgate's bytes are required by default, the reference's with --reference.
    s = workq.by_name("golden-lease")
    run = jobgate_runs[s.name]
    label = "add job then lease with timeout 0 (job available)"
    ref = _with(run, label, s.step(label).expect)
    assert workq.check(s, run).status == "equal-after-documented"
    assert workq.check(s, ref).status == "DIFFERENT"
    assert workq.check(s, ref, reference=True).status == "equal"
    assert workq.check(s, run, reference=True).status == "DIFFERENT"


def test_cli_usage_and_list(capsys) -> None:
    assert workq.main(["--list"]) == 0
    assert "golden-add-ids" in capsys.readouterr().out
    assert workq.main([]) == 2
    assert workq.main(["--host", HOST]) == 2
    assert workq.main(["--host", HOST, "--port", "9"]) == 2      # more than one scenario
    assert workq.main(["--jobgate", "-s", "no-such-*"]) == 2


@pytest.fixture
def fresh_jobgate():
    """A fresh jobgate with a workq listener, for one test."""
    with ServerProcess(jobgate_workq_cmd, env=jobgate_env(), fresh_cwd=True) as srv:
        yield srv


def test_cli_against_host_port(fresh_jobgate, capsys) -> None:
    port = str(fresh_jobgate.port)
    assert workq.main(["--host", HOST, "--port", port, "-s", "golden-lease"]) == 0
    assert "equal-after-documented(W4)" in capsys.readouterr().out


def test_cli_reference_mode_fails_on_jobgate(fresh_jobgate, capsys) -> None:
    port = str(fresh_jobgate.port)
    assert workq.main(["--host", HOST, "--port", port, "-s", "extra-derived-uid",
                       "--reference"]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


def test_cli_jobgate_mode() -> None:
    assert workq.main(["--jobgate", "-s", "golden-add-flags", "-s", "golden-connection"]) == 0


# ---------------------------------------------------------------------------------------
# (c) the client
# ---------------------------------------------------------------------------------------
ID1 = "11111111-1111-4111-8111-0000000000c1"
ID2 = "11111111-1111-4111-8111-0000000000c2"


def test_split_reply_cuts_sized_bodies_not_lines() -> None:
    res = b"+OK 1\r\n" + ID1.encode() + b" 1 8\r\na\r\n+OK\r\n\r\n"
    lease = b"+OK 1\r\n" + ID2.encode() + b" q 1000 4\r\n\r\n\r\n\r\n"
    insp = b"+OK 2\r\nq1 2\r\nready-len 1\r\nscheduled-len 0\r\nq2 1\r\nready-len 0\r\n"
    stream = res + lease + insp + b"+OK 0\r\n-CLIENT-ERROR Invalid ID\r\n+OK\r\n"
    assert workq_frames(stream) == [res, lease, insp, b"+OK 0\r\n",
                                    b"-CLIENT-ERROR Invalid ID\r\n", b"+OK\r\n"]
    for i in range(len(res)):       # never a frame before the whole result has arrived
        assert split_reply(res[:i]) == (None, 0, False)
    bad = b"+OK 1\r\n" + ID1.encode() + b" 1 2\r\nabcd+OK\r\n"
    assert split_reply(bad) == (bad[:-5], len(bad) - 5, True)   # body not followed by CRLF
    assert parse_inspect(insp) == [("q1", {"ready-len": "1", "scheduled-len": "0"}),
                                   ("q2", {"ready-len": "0"})]


@pytest.fixture(scope="module")
def server():
    """One jobgate (workq only) shared by the client tests; each test uses its own ids."""
    with ServerProcess(jobgate_workq_cmd, env=jobgate_env(), fresh_cwd=True) as srv:
        yield srv


def test_client_result_with_crlf(server) -> None:
    body = b"a\r\n+OK\r\n-TIMEOUT\r\n"
    with Client(HOST, server.port) as c:
        c.add(ID1, "crlfq", 1000, 60000, b"p\r\n\r\n")
        job = c.lease("crlfq", 1000)
        assert job == Job(ID1, "crlfq", 1000, b"p\r\n\r\n")
        c.complete(ID1, body)
        assert c.result(ID1) == Result(ID1, True, body)
        raw = c.raw(b"result " + ID1.encode() + b" 0\r\n")
        assert raw == b"+OK 1\r\n%s 1 %d\r\n%s\r\n" % (ID1.encode(), len(body), body)
        assert c.raw(b"inspect queue crlfq\r\n") == (
            b"+OK 1\r\ncrlfq 2\r\nready-len 0\r\nscheduled-len 0\r\n")


def test_client_errors_and_waits(server) -> None:
    with Client(HOST, server.port) as c:
        c.add(ID2, "errq", 1000, 60000, b"x", priority=3, max_attempts=2, max_fails=2)
        with pytest.raises(ClientError) as e:
            c.add(ID2, "errq", 1000, 60000, b"x")
        assert str(e.value) == "Duplicate job" and e.value.line == b"-CLIENT-ERROR Duplicate job"
        with pytest.raises(ClientError, match="^Invalid TTR$"):
            c.add("11111111-1111-4111-8111-0000000000c3", "errq", 0, 60000, b"x")
        with pytest.raises(NotFound):
            c.result("11111111-1111-4111-8111-0000000000ff")
        t0 = time.monotonic()
        with pytest.raises(TimedOut):
            c.lease(["empty-a", "empty-b"], 150)
        assert time.monotonic() - t0 >= 0.12
        # W1 through the client: the first fail requeues (max-fails 2), the second is final.
        assert c.lease("errq", 0).id == ID2
        c.fail(ID2, b"bad 1")
        _, keys = c.inspect_job(ID2)
        assert (keys["state"], keys["fails"], keys["priority"]) == ("3", "1", "3")
        assert c.lease("errq", 0).payload == b"x"
        c.fail(ID2, b"bad 2")
        assert c.result(ID2) == Result(ID2, False, b"bad 2")
        c.delete(ID2)
        with pytest.raises(NotFound):
            c.delete(ID2)


def test_client_run_with_worker_and_inspect(server) -> None:
    rid = "11111111-1111-4111-8111-0000000000d1"
    got: list = []
    with Client(HOST, server.port) as c, Client(HOST, server.port) as w:
        t = threading.Thread(target=lambda: got.append(c.run(rid, "runcq", 1000, 2000, b"in")))
        t.start()
        job = w.lease("runcq", 2000)
        w.complete(job.id, b"out\r\n")
        t.join(5)
        assert got == [Result(rid, True, b"out\r\n")]
        when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
        sid = "11111111-1111-4111-8111-0000000000d2"
        w.schedule(sid, "schedq", 1000, 60000, when, b"s\r\n")
        [(jid, keys)] = w.inspect_scheduled_jobs("schedq")
        assert jid == sid and keys["payload-size"] == "3" and "payload" not in keys
        assert keys["time"] == when.strftime("%Y-%m-%dT%H:%M:%SZ") and len(keys) == 12
        assert w.inspect_queue("schedq") == ("schedq", {"ready-len": "0",
                                                         "scheduled-len": "1"})
        assert ("schedq", {"ready-len": "0", "scheduled-len": "1"}) in w.inspect_queues(0, 100)
        name, keys = w.inspect_server()
        assert name == "server" and set(keys) == {"active-clients", "evicted-jobs", "started"}
        assert int(keys["active-clients"]) >= 2 and keys["evicted-jobs"] == "0"
