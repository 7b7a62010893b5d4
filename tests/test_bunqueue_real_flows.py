"""The real bunqueue TypeScript client's FlowProducer (npm `bunqueue` 2.9.5 on Bun,
tests/bunqueue_client/flows.ts) driving flows against jobgate, and the same script against
the reference bunqueue server as a check on the test (docs/bunqueue.md "Flows (issue 16)").

flows.ts adds a nested tree, a flow whose failing child has ignoreDependencyOnFailure and one
whose failing child has failParentOnFailure, records the states before any worker runs, then
runs a Worker on the children's queue and one on the parents' queue; every parent reads its
children's values in its processor. `check_flows` asserts what it saw.

Needs `npm install` in tests/bunqueue_client (bun + bunqueue); skipped with the reason otherwise.
"""
from __future__ import annotations


import pytest

from .bunqueue_real import BunqueueServer, bun_missing_reason, run_script
from .support import Server

pytestmark = pytest.mark.skipif(bun_missing_reason() is not None,
                                reason=bun_missing_reason() or "")


def run_flows(port: int, timeout: float = 90.0) -> dict:
    """Run flows.ts against 127.0.0.1:port; returns its JSON (fails the test on exit != 0)."""
    return run_script("flows.ts", port, timeout=timeout)


def check_flows(out: dict) -> None:
    assert out["ok"] is True
    ids, C = out["ids"], out["children"]
    assert out["statesBefore"] == {"report": "waiting-children", "a": "waiting",
                                   "b": "waiting-children", "b1": "waiting"}
    assert out["reportBefore"] == {"id": ids["report"], "name": "report",
                                   "data": {"kind": "tree",
                                            "__childrenIds": [ids["a"], ids["b"]]}}
    assert out["countsBefore"]["waiting-children"] == 1
    assert sum(out["countsBefore"].values()) == 1
    order = out["order"]
    assert sorted(order) == sorted(["a:1", "b1:3", "b:2", "ok:10", "bad:11", "report:tree",
                                    "bad:20", "parent:ignored"])
    pos = order.index
    assert pos("b1:3") < pos("b:2") < pos("report:tree") and pos("a:1") < pos("report:tree")
    assert pos("ok:10") < pos("parent:ignored") and pos("bad:11") < pos("parent:ignored")
    assert "parent:doomed" not in order
    seen = out["parentSeen"]
    assert seen[ids["report"]] == {
        "kind": "tree", "ignored": {},
        "values": {f"{C}:{ids['a']}": {"n": 1, "sq": 1}, f"{C}:{ids['b']}": {"n": 2, "sq": 4}}}
    ig = out["ignoredIds"]
    assert seen[ig["parent"]] == {
        "kind": "ignored", "values": {f"{C}:{ig['ok']}": {"n": 10, "sq": 100}},
        "ignored": {f"{C}:{ig['bad']}": "bad child 11"}}
    assert out["reportResult"] == {"sum": 3}
    lo = out["legacyOrder"]
    assert sorted(lo) == ["merge", "p1", "p2", "s1", "s2", "s3"]
    assert lo.index("s1") < lo.index("s2") < lo.index("s3")
    assert lo.index("p1") < lo.index("merge") and lo.index("p2") < lo.index("merge")
    assert len(out["chainIds"]) == 3 and len(out["thenIds"]["parallelIds"]) == 2
    assert out["treeFlow"] == {"id": ids["report"], "children": [
        {"id": ids["a"], "children": []}, {"id": ids["b"], "children": [ids["b1"]]}]}


def test_flow_producer_against_jobgate(sqlite_url):
    s = Server(sqlite_url, bunqueue=True)
    try:
        check_flows(run_flows(s.bunqueue_port))
    finally:
        s.stop()


def test_flow_producer_against_the_reference():
    """The same script and checks against bunqueue 2.9.5: the expectations are its behaviour."""
    with BunqueueServer() as bq:
        check_flows(run_flows(bq.port))
