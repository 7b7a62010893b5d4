"""Building blocks of the extra bunqueue golden steps (conformance/bunqueue_extra_steps.py
explains them): ``Ref``, ``ExtraStep``, ``X``, the client-planned flow job ids and the PUSHF
batch builder."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Ref", "ExtraStep", "X", "UNDEF", "MISSING", "F_PARENT", "F_CHILD1", "F_CHILD2",
           "F_GRAND", "F2_PARENT", "F2_CHILD", "flow_job", "FLOW", "FLOW2"]

UNDEF = {"$undefined": "fixext1 type0 (d4 00 00)"}


@dataclass(frozen=True)
class Ref:
    """The value at ``path`` (keys and list indexes) in the recorded reply of step ``step``."""

    step: str
    path: tuple

    def __init__(self, step: str, *path: Any) -> None:
        object.__setattr__(self, "step", step)
        object.__setattr__(self, "path", tuple(path))


@dataclass(frozen=True)
class ExtraStep:
    name: str
    request: Any
    note: str = ""
    rules: dict = field(default_factory=dict)
    pause_ms: int = 0


def X(name: str, request: Any, note: str = "", rules: dict | None = None,
      pause_ms: int = 0) -> ExtraStep:
    return ExtraStep(name, request, note, dict(rules or {}), pause_ms)


# Client-planned flow job ids (UUIDv7 form, as client/flowPlan.js generates them).
F_PARENT = "01a30000-0000-7000-8000-00000000f000"
F_CHILD1 = "01a30000-0000-7000-8000-00000000f001"
F_CHILD2 = "01a30000-0000-7000-8000-00000000f002"
F_GRAND = "01a30000-0000-7000-8000-00000000f003"
F2_PARENT = "01a30000-0000-7000-8000-00000000f100"
F2_CHILD = "01a30000-0000-7000-8000-00000000f101"
MISSING = "01a30000-0000-7000-8000-0000000dead0"


def flow_job(jid: str, queue: str, name: str, data: dict, *, parent: tuple | None = None,
              children: list | None = None) -> dict:
    """One planned job of a PUSHF batch, shaped as client/flowPlan.js planFlows writes it
    (internal __parentId/__parentQueue/__childrenIds keys in data; parentId, dependsOn and
    childrenIds in input; removeOnComplete/removeOnFail false)."""
    d = dict(data)
    inp: dict = {"name": name}
    if parent:
        d["__parentId"], d["__parentQueue"] = parent
        inp["parentId"] = parent[0]
    if children:
        d["__childrenIds"] = list(children)
        inp["dependsOn"] = list(children)
        inp["childrenIds"] = list(children)
    inp["data"] = d
    inp["removeOnComplete"] = False
    inp["removeOnFail"] = False
    return {"id": jid, "queue": queue, "input": inp}


FLOW = [   # post-order, as planFlows pushes them: children before their parent
    flow_job(F_CHILD1, "gx-flow-c", "child1", {"c": 1}, parent=(F_PARENT, "gx-flow")),
    flow_job(F_GRAND, "gx-flow-c", "grand", {"g": 1}, parent=(F_CHILD2, "gx-flow-c")),
    flow_job(F_CHILD2, "gx-flow-c", "child2", {"c": 2}, parent=(F_PARENT, "gx-flow"),
              children=[F_GRAND]),
    flow_job(F_PARENT, "gx-flow", "parent", {"p": 1}, children=[F_CHILD1, F_CHILD2]),
]

FLOW2 = [
    flow_job(F2_CHILD, "gx-flow2", "only-child", {"k": 1}, parent=(F2_PARENT, "gx-flow2")),
    flow_job(F2_PARENT, "gx-flow2", "parent2", {"q": 1}, children=[F2_CHILD]),
]
