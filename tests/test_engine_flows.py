"""Flows on the canonical engine, through the port, on a ManualClock (core/flows.py; the
cross-dialect rule: docs/mapping.md "Flows (issue 16)"): a parent waits for its children
whatever dialect reserves from its queue, is served when its last child completes, and a
child's final failure acts on the parent as its ``parentPolicy`` says.
"""
from __future__ import annotations

import pytest

from core.api import (BURIED, COMPLETED, DELAYED, READY, RESERVED, TIMED_OUT, WAITING,
                      Failure, ManualClock, Port)

DAY_MS = 86_400_000


@pytest.fixture
def port():
    p = Port.create(ManualClock(), durable=False)
    return p


def step(p, ms):
    p.clock.advance(ms)
    p.tick()


def flow(p, n=2, policy=None, qp="parents", qc="kids", max_fails=3):
    """A parent in `qp` waiting for `n` children in `qc` (children created first, as
    bunqueue's FlowProducer sends them). Returns (parent id, [child ids], [child uids])."""
    uids = [f"kid-{i}-{policy}" for i in range(n)]
    kids = []
    for u in uids:
        ext = {"parentId": "parent-" + str(policy)}
        if policy:
            ext["parentPolicy"] = policy
        kids.append(p.put(qc, u.encode(), 0, 0, 10_000, "bunqueue", u, max_fails=max_fails,
                          ext=ext))
    parent = p.put(qp, b"parent", 0, 0, 10_000, "bunqueue", "parent-" + str(policy),
                   ext={"deps": list(uids), "dependsOn": list(uids), "childrenIds": uids})
    return parent, kids, uids


def reserve_now(p, owner, queue):
    return p.reserve(owner, [queue], 0, None)


def test_parent_waits_for_every_child_in_every_dialect(port):
    parent, kids, _ = flow(port)
    v = port.job(parent)
    assert v.state == DELAYED and v.blocked
    assert v.left_ms > 50 * 365 * DAY_MS   # parked far in the future
    for dialect in ("beanstalk", "workq", "bunqueue"):
        o = port.new_owner(dialect)
        assert reserve_now(port, o, "parents") is TIMED_OUT
    step(port, 30 * DAY_MS)   # time alone never releases it
    o = port.new_owner("beanstalk")
    assert reserve_now(port, o, "parents") is TIMED_OUT
    w = port.new_owner("workq")
    r = port.reserve(w, ["kids"], 0, None)
    assert port.complete(r.id, b"r0", "workq")
    assert port.job(parent).blocked and port.job(parent).ext["deps"] == [port.job(kids[1]).uid]
    assert reserve_now(port, o, "parents") is TIMED_OUT
    r = port.reserve(w, ["kids"], 0, None)
    port.complete(r.id, b"r1", "workq")
    v = port.job(parent)
    assert v.state == READY and not v.blocked
    assert v.ext["dependsOn"] == v.ext["childrenIds"]   # the declared lists stay
    assert reserve_now(port, o, "parents").id == parent


def test_a_waiting_reserver_gets_the_parent_when_the_last_child_completes(port):
    parent, kids, _ = flow(port, n=1)
    got = []
    o = port.new_owner("beanstalk")
    assert port.reserve(o, ["parents"], None, got.append) is WAITING
    port.complete(kids[0], b"", "beanstalk")
    assert [r.id for r in got] == [parent]


def test_kick_kick_job_and_reserve_job_leave_a_waiting_parent_alone(port):
    parent, kids, _ = flow(port, n=1)
    plain = port.put("parents", b"d", 0, 5_000, 10_000, "beanstalk")
    assert port.kick("parents", 10, "beanstalk") == 1   # only the delayed job
    assert port.job(plain).state == READY
    assert port.job(parent).state == DELAYED
    assert port.kick_job(parent, "beanstalk") is False
    o = port.new_owner("beanstalk")
    assert port.reserve_job(o, parent) is None
    assert port.kick("parents", 10, "beanstalk") == 0
    port.complete(kids[0], b"", "bunqueue")
    assert port.job(parent).state == READY


def test_bury_kick_and_timeout_of_a_child_are_not_final(port):
    parent, kids, _ = flow(port, n=1, policy="fail")
    o = port.new_owner("beanstalk")
    r = reserve_now(port, o, "kids")
    assert port.bury(o, r.id, 0)
    assert port.job(parent).state == DELAYED   # buried is not failed for good
    assert port.kick("kids", 1, "beanstalk") == 1
    r = port.reserve(o, ["kids"], 0, None)
    step(port, 10_001)   # TTR expiry: ready again
    assert port.job(r.id).state == READY and port.job(parent).blocked
    r = reserve_now(port, o, "kids")
    port.complete(r.id, b"ok", "beanstalk")
    assert port.job(parent).state == READY


@pytest.mark.parametrize("policy", ["fail", "remove", "ignore", "continue", None])
def test_a_child_failing_for_good_acts_as_its_policy(port, policy):
    parent, kids, uids = flow(port, n=2, policy=policy, max_fails=1)
    o = port.new_owner("bunqueue")
    r = reserve_now(port, o, "kids")
    assert port.fail(r.id, b"boom", "bunqueue", failure=Failure("boom")) == "dead"
    bad = port.job(r.id).uid
    other = [u for u in uids if u != bad][0]
    v = port.job(parent)
    key = f"kids:{bad}"
    if policy == "fail":
        assert v.state == BURIED and v.result == f"Child job {bad} failed: boom".encode()
        assert v.ext["dlqReason"] == "unknown" and "deps" not in v.ext
        assert not v.blocked
        # the other child completing later changes nothing
        r2 = reserve_now(port, o, "kids")
        port.complete(r2.id, b"", "bunqueue")
        assert port.job(parent).state == BURIED
        return
    if policy == "continue":
        assert v.state == READY and v.ext["failedChildren"] == {key: "boom"}
        assert "deps" not in v.ext
        return
    if policy is None:
        assert v.state == DELAYED and v.ext["deps"] == uids   # keeps waiting for good
        r2 = reserve_now(port, o, "kids")
        port.complete(r2.id, b"", "bunqueue")
        assert port.job(parent).ext["deps"] == [bad]
        assert port.job(parent).state == DELAYED
        return
    # remove / ignore: no longer waited for; ready once the other child completes
    assert v.state == DELAYED and v.ext["deps"] == [other]
    assert v.ext["dependsOn"] == [other]
    assert ("ignoredFailures" in v.ext) == (policy == "ignore")
    if policy == "ignore":
        assert v.ext["ignoredFailures"] == {key: "boom"}
    r2 = reserve_now(port, o, "kids")
    port.complete(r2.id, b"", "bunqueue")
    assert port.job(parent).state == READY


@pytest.mark.parametrize("policy", ["continue", "ignore", "remove"])
def test_a_child_failure_applied_again_changes_nothing(port, policy):
    """A failure note that arrives twice (shared mode: the leader's sweep resends one it
    found while the first was on its way, core/shared_flows.py) changes nothing the second
    time: with `continue` it dropped every dependency the parent had meanwhile (here one
    added after the first failure)."""
    parent, kids, uids = flow(port, n=2, policy=policy, max_fails=1)
    o = port.new_owner("bunqueue")
    r = reserve_now(port, o, "kids")
    assert port.fail(r.id, b"boom", "bunqueue", failure=Failure("boom")) == "dead"
    bad = port.job(r.id).uid
    late = port.put("kids", b"late", 0, 0, 10_000, "bunqueue", "late-" + policy)
    assert port.add_dependencies(parent, ["late-" + policy], "bunqueue")
    before = port.job(parent)
    e = port._engine
    e.child_failure(e.jobs[parent], bad, f"kids:{bad}", policy, "again")
    v = port.job(parent)
    assert (v.state, v.ext.get("deps")) == (before.state, before.ext.get("deps"))
    assert "late-" + policy in v.ext["deps"] and v.state == DELAYED
    assert v.ext.get("failedChildren") == before.ext.get("failedChildren")
    assert v.ext.get("ignoredFailures") == before.ext.get("ignoredFailures")
    assert port.job(late).state == READY


def test_a_child_failing_while_its_parent_is_reserved_leaves_the_parent(port):
    c = port.put("kids", b"c", 0, 0, 10_000, "bunqueue", "solo-kid", max_fails=1,
                 ext={"parentId": "solo-parent", "parentPolicy": "fail"})
    p = port.put("parents", b"p", 0, 0, 10_000, "bunqueue", "solo-parent")
    o = port.new_owner("bunqueue")
    assert reserve_now(port, o, "parents").id == p
    port.dead_letter(c, b"x", "bunqueue")
    assert port.job(p).state == RESERVED   # the reference fails only a parent in a queue


def test_add_and_drop_dependencies(port):
    a = port.put("q", b"a", 0, 0, 10_000, "bunqueue", "dep-a")
    b = port.put("q2", b"b", 0, 0, 10_000, "bunqueue", "dep-b")
    assert port.add_dependencies(b, ["dep-a"], "bunqueue", {"childrenIds": ["dep-a"]})
    v = port.job(b)
    assert v.state == DELAYED and v.blocked and v.ext["childrenIds"] == ["dep-a"]
    assert port.drop_dependencies(b, ["dep-a"], "bunqueue") == ["dep-a"]
    assert port.job(b).state == READY
    # a reserved job waits too (bunqueue MoveToWaitingChildren), and a completed
    # dependency is not waited for
    o = port.new_owner("bunqueue")
    assert reserve_now(port, o, "q2").id == b
    assert port.add_dependencies(b, ["dep-a"], "bunqueue")
    assert port.job(b).state == DELAYED
    port.complete(a, b"", "bunqueue")
    assert port.job(b).state == READY
    assert port.add_dependencies(b, ["dep-a"], "bunqueue")   # met: nothing to wait for
    assert port.job(b).state == READY
    port.complete(b, b"", "bunqueue")
    assert port.add_dependencies(b, ["x"], "bunqueue") is False
    assert port.job(b).state == COMPLETED
    assert port.drop_dependencies(999, None, "bunqueue") is None


def test_a_beanstalk_delete_of_a_reserved_child_is_done_other_deletes_are_not(port):
    parent, kids, _ = flow(port, n=2)
    o = port.new_owner("beanstalk")
    r = reserve_now(port, o, "kids")
    other = [k for k in kids if k != r.id][0]
    assert port.delete(o, r.id)                  # reserve + delete: beanstalk's success
    assert port.job(parent).ext["deps"] == [port.job(other).uid]
    port.remove(other, "bunqueue", "cancel")     # a cancelled child is not done
    assert port.job(parent).state == DELAYED and port.job(parent).blocked


def test_a_parent_with_its_own_delay_waits_for_the_rest_of_it(port):
    uid = "delayed-kid"
    port.put("kids", b"k", 0, 0, 10_000, "bunqueue", uid, ext={"parentId": "delayed-parent"})
    p = port.put("parents", b"p", 0, 60_000, 10_000, "bunqueue", "delayed-parent",
                 ext={"deps": [uid], "dependsOn": [uid], "childrenIds": [uid]})
    assert port.job(p).blocked
    step(port, 20_000)
    o = port.new_owner("bunqueue")
    port.complete(reserve_now(port, o, "kids").id, b"", "bunqueue")
    v = port.job(p)
    assert v.state == DELAYED and not v.blocked and v.left_ms == 40_000
    assert [t["state"] for t in v.ext["timeline"]] == ["delayed"]
    step(port, 40_000)
    assert reserve_now(port, o, "parents").id == p


def test_a_deleted_completed_child_keeps_its_value_for_the_waiting_parent(port):
    parent, kids, uids = flow(port, n=2)
    port.complete(kids[0], b"\x91\x01", "bunqueue", {"resultFmt": 1})
    assert port.remove(kids[0], "bunqueue", "remove")   # removeOnComplete
    v = port.job(parent)
    assert v.ext["keptValues"] == {uids[0]: [b"\x91\x01", 1]}
    port.complete(kids[1], b"x", "workq")
    port.complete(parent, b"", "bunqueue")
    assert port.remove(kids[1], "bunqueue", "remove")   # the parent finished: not kept
    assert set(port.job(parent).ext["keptValues"]) == {uids[0]}
