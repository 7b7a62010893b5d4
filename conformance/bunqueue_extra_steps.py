"""The extra bunqueue golden steps (jobgate issue 16): the requests that
``python -m conformance.bunqueue_record`` plays against the REAL bunqueue 2.9.5 server to write
tests/data/bunqueue-golden-extra.json, the reference for the commands the first golden file
(../shared/reference/bunqueue-golden.json) did not cover: flows (PUSHF, GetChildrenValues,
UpdateParent, a parent in ``waiting-children``), MoveToWait, PromoteJobs, ChangeDelay,
ClearLogs, SetStallConfig/GetStallConfig, TrimEvents, per-queue Metrics, Prometheus, Cron,
RateLimit, SetConcurrency, GetQueueLimits, webhooks, five reference behaviours jobgate got
wrong (GetJobs with a list of states, a job's own ``timeout``, Obliterate of a paused queue,
``stackTraceLimit``, ``name`` inside ``data``) and a nil ``reqId`` (B11).

A step is ``X(name, request, note, rules)``:

- ``request``: the frame to send, a dict in the golden JSON form (``{"$undefined": ...}``,
  ``{"$bin": hex}``); a ``Ref(step, *path)`` anywhere in it is replaced at recording time by
  the value at ``path`` in that earlier step's recorded reply (a server-generated UUIDv7 job id,
  lock token or webhook id). The recorded request holds the literal value, and the replay
  binds it exactly like the first golden file's ids: its first appearance in a reply binds the
  live id, later requests get the live id (conformance/bunqueue_compare.Context).
- ``reqId``: ``x<n>`` (n = 1-based step number) unless the request names its own; the nil-reqId
  step sends ``reqId: nil``.
- ``pause_ms``: wait this long (real time, ms) before sending the step (the recorder and the
  replay both do): for the one step that needs a job's own ``timeout`` to run out.
- ``rules``: comparison rules for single paths of the reply beyond the suite's own (see
  conformance/bunqueue_compare.py ``TEXT_RULES``): ``"prometheus"`` for the Prometheus text.
  They are written into the golden file with the step.

Ids chosen by the client (PUSHF plans its job ids on the client, ``client/flowPlan.js``) are
fixed UUIDv7 strings below; they appear in the request, so the comparison expects them echoed.

Everything the steps do stays on this machine: the one webhook with a public URL
(https://example.com/hook) filters on a queue no step pushes to and is removed three steps
later, and the blocked URLs are refused by validation (no delivery is attempted; the reference
does no DNS look-up when it validates, shared/webhookValidation.js).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Ref", "ExtraStep", "X", "EXTRA_STEPS", "UNDEF"]

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


def _flow_job(jid: str, queue: str, name: str, data: dict, *, parent: tuple | None = None,
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


_FLOW = [   # post-order, as planFlows pushes them: children before their parent
    _flow_job(F_CHILD1, "gx-flow-c", "child1", {"c": 1}, parent=(F_PARENT, "gx-flow")),
    _flow_job(F_GRAND, "gx-flow-c", "grand", {"g": 1}, parent=(F_CHILD2, "gx-flow-c")),
    _flow_job(F_CHILD2, "gx-flow-c", "child2", {"c": 2}, parent=(F_PARENT, "gx-flow"),
              children=[F_GRAND]),
    _flow_job(F_PARENT, "gx-flow", "parent", {"p": 1}, children=[F_CHILD1, F_CHILD2]),
]

_FLOW2 = [
    _flow_job(F2_CHILD, "gx-flow2", "only-child", {"k": 1}, parent=(F2_PARENT, "gx-flow2")),
    _flow_job(F2_PARENT, "gx-flow2", "parent2", {"q": 1}, children=[F2_CHILD]),
]

_BLOCKED_URLS = [
    ("http://localhost:8080/hook", "localhost"),
    ("http://127.0.0.1/hook", "127.0.0.1"),
    ("http://10.1.2.3/hook", "10.x"),
    ("http://192.168.1.5/hook", "192.168.x"),
    ("http://172.16.0.1/hook", "172.16.x"),
    ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
    ("http://[::1]/hook", "[::1]"),
    ("http://metadata.google.internal/hook", "metadata.google.internal"),
    ("ftp://example.com/hook", "ftp scheme"),
    ("not a url", "not a URL"),
]

EXTRA_STEPS: list[ExtraStep] = [
    X("x Hello", {"cmd": "Hello", "protocolVersion": 3,
                  "capabilities": ["pipelining", "separate-job-name"]}),

    # ---------------------------------------------------------------- flows
    X("PUSHF flow (parent, 2 children, nested grandchild)", {"cmd": "PUSHF", "jobs": _FLOW},
      "the planned jobs as the TS FlowProducer sends them (client/flowPlan.js); reply data.jobs "
      "holds the committed Job snapshots"),
    X("GetState parent (waiting for children)", {"cmd": "GetState", "id": F_PARENT}),
    X("GetJob parent (waiting for children)", {"cmd": "GetJob", "id": F_PARENT}),
    X("GetState child2 (waiting for grandchild)", {"cmd": "GetState", "id": F_CHILD2}),
    X("GetJobCounts flow parent queue", {"cmd": "GetJobCounts", "queue": "gx-flow"}),
    X("GetJobCounts flow child queue", {"cmd": "GetJobCounts", "queue": "gx-flow-c"}),
    X("GetChildrenValues (none done)", {"cmd": "GetChildrenValues", "id": F_PARENT}),
    X("GetChildrenValues unknown id", {"cmd": "GetChildrenValues", "id": MISSING}),
    X("PULL flow child #1", {"cmd": "PULL", "queue": "gx-flow-c"}),
    X("ACK flow child #1", {"cmd": "ACK", "id": Ref("PULL flow child #1", "job", "id"),
                            "result": {"r": 1}}),
    X("PULL flow child #2", {"cmd": "PULL", "queue": "gx-flow-c"}),
    X("ACK flow child #2", {"cmd": "ACK", "id": Ref("PULL flow child #2", "job", "id"),
                            "result": {"r": 2}}),
    X("GetState child2 after grandchild", {"cmd": "GetState", "id": F_CHILD2}),
    X("GetChildrenValues (one done)", {"cmd": "GetChildrenValues", "id": F_PARENT}),
    X("PULL flow child #3", {"cmd": "PULL", "queue": "gx-flow-c"}),
    X("ACK flow child #3", {"cmd": "ACK", "id": Ref("PULL flow child #3", "job", "id"),
                            "result": {"r": 3}}),
    X("GetState parent (children done)", {"cmd": "GetState", "id": F_PARENT}),
    X("GetChildrenValues (all done)", {"cmd": "GetChildrenValues", "id": F_PARENT}),
    X("GetJob parent (children done)", {"cmd": "GetJob", "id": F_PARENT}),
    X("PULL flow parent", {"cmd": "PULL", "queue": "gx-flow"}),
    X("ACK flow parent", {"cmd": "ACK", "id": F_PARENT, "result": "parent-done"}),
    X("PUSHF same ids again", {"cmd": "PUSHF", "jobs": _FLOW}),
    X("PUSHF duplicate id in batch", {"cmd": "PUSHF", "jobs": [
        _flow_job(F2_CHILD, "gx-flow2", "a", {}), _flow_job(F2_CHILD, "gx-flow2", "b", {})]}),
    X("PUSHF bad queue", {"cmd": "PUSHF", "jobs": [
        _flow_job(F2_CHILD, "bad queue!", "a", {})]}),
    X("PUSHF data not an object", {"cmd": "PUSHF", "jobs": [
        {"id": F2_CHILD, "queue": "gx-flow2", "input": {"name": "a", "data": 5}}]}),
    X("PUSHF missing jobs", {"cmd": "PUSHF"}),
    X("PUSHF empty jobs", {"cmd": "PUSHF", "jobs": []}),
    X("PUSHF flow 2 (one child)", {"cmd": "PUSHF", "jobs": _FLOW2}),
    X("PUSH for UpdateParent", {"cmd": "PUSH", "queue": "gx-flow2", "data": {"u": 1}}),
    X("UpdateParent", {"cmd": "UpdateParent", "childId": Ref("PUSH for UpdateParent", "id"),
                       "parentId": F2_PARENT}),
    X("GetJob parent after UpdateParent", {"cmd": "GetJob", "id": F2_PARENT}),
    X("GetJob child after UpdateParent", {"cmd": "GetJob",
                                          "id": Ref("PUSH for UpdateParent", "id")}),
    X("UpdateParent unknown child", {"cmd": "UpdateParent", "childId": MISSING,
                                     "parentId": F2_PARENT}),
    X("UpdateParent unknown parent", {"cmd": "UpdateParent",
                                      "childId": Ref("PUSH for UpdateParent", "id"),
                                      "parentId": MISSING}),

    # ---------------------------------------------------------------- MoveToWait / Promote / delay
    X("PUSH delayed for MoveToWait", {"cmd": "PUSH", "queue": "gx-move", "data": {"m": 1},
                                      "delay": 600000}),
    X("MoveToWait delayed", {"cmd": "MoveToWait",
                             "id": Ref("PUSH delayed for MoveToWait", "id")}),
    X("GetState after MoveToWait delayed", {"cmd": "GetState",
                                            "id": Ref("PUSH delayed for MoveToWait", "id")}),
    X("MoveToWait waiting", {"cmd": "MoveToWait", "id": Ref("PUSH delayed for MoveToWait", "id")}),
    X("PULL for MoveToWait", {"cmd": "PULL", "queue": "gx-move", "owner": "w-move",
                              "lockTtl": 60000}),
    X("MoveToWait active wrong token", {"cmd": "MoveToWait",
                                        "id": Ref("PUSH delayed for MoveToWait", "id"),
                                        "token": "bad-token"}),
    X("MoveToWait active", {"cmd": "MoveToWait", "id": Ref("PUSH delayed for MoveToWait", "id"),
                            "token": Ref("PULL for MoveToWait", "token")}),
    X("GetJob after MoveToWait active", {"cmd": "GetJob",
                                         "id": Ref("PUSH delayed for MoveToWait", "id")}),
    X("PUSH for MoveToWait failed", {"cmd": "PUSH", "queue": "gx-move-f", "data": 1,
                                     "maxAttempts": 1}),
    X("PULL for MoveToWait failed", {"cmd": "PULL", "queue": "gx-move-f"}),
    X("FAIL for MoveToWait failed", {"cmd": "FAIL", "id": Ref("PUSH for MoveToWait failed", "id"),
                                     "error": "x"}),
    X("GetState failed before MoveToWait", {"cmd": "GetState",
                                            "id": Ref("PUSH for MoveToWait failed", "id")}),
    X("MoveToWait failed", {"cmd": "MoveToWait", "id": Ref("PUSH for MoveToWait failed", "id")}),
    X("GetState after MoveToWait failed", {"cmd": "GetState",
                                           "id": Ref("PUSH for MoveToWait failed", "id")}),
    X("MoveToWait completed", {"cmd": "MoveToWait", "id": F_PARENT}),
    X("MoveToWait unknown", {"cmd": "MoveToWait", "id": MISSING}),
    X("PUSH delayed #1 for PromoteJobs", {"cmd": "PUSH", "queue": "gx-promote", "data": 1,
                                          "delay": 600000}),
    X("PUSH delayed #2 for PromoteJobs", {"cmd": "PUSH", "queue": "gx-promote", "data": 2,
                                          "delay": 600000}),
    X("PUSH delayed #3 for PromoteJobs", {"cmd": "PUSH", "queue": "gx-promote", "data": 3,
                                          "delay": 600000}),
    X("PromoteJobs count 2", {"cmd": "PromoteJobs", "queue": "gx-promote", "count": 2}),
    X("GetJobCounts after PromoteJobs 2", {"cmd": "GetJobCounts", "queue": "gx-promote"}),
    X("PromoteJobs rest", {"cmd": "PromoteJobs", "queue": "gx-promote"}),
    X("PromoteJobs none left", {"cmd": "PromoteJobs", "queue": "gx-promote", "count": 5}),
    X("PromoteJobs unknown queue", {"cmd": "PromoteJobs", "queue": "gx-nothing-here"}),
    X("PUSH delayed for ChangeDelay", {"cmd": "PUSH", "queue": "gx-delay", "data": 1,
                                       "delay": 600000}),
    X("ChangeDelay", {"cmd": "ChangeDelay", "id": Ref("PUSH delayed for ChangeDelay", "id"),
                      "delay": 120000}),
    X("GetJob after ChangeDelay", {"cmd": "GetJob",
                                   "id": Ref("PUSH delayed for ChangeDelay", "id")}),
    X("ChangeDelay 0", {"cmd": "ChangeDelay", "id": Ref("PUSH delayed for ChangeDelay", "id"),
                        "delay": 0}),
    X("GetState after ChangeDelay 0", {"cmd": "GetState",
                                       "id": Ref("PUSH delayed for ChangeDelay", "id")}),
    X("ChangeDelay unknown", {"cmd": "ChangeDelay", "id": MISSING, "delay": 1000}),
    X("ChangeDelay completed job", {"cmd": "ChangeDelay", "id": F_PARENT, "delay": 1000}),

    # ---------------------------------------------------------------- logs
    X("PUSH for logs", {"cmd": "PUSH", "queue": "gx-logs", "data": 1}),
    X("AddLog #1", {"cmd": "AddLog", "id": Ref("PUSH for logs", "id"), "message": "one"}),
    X("AddLog #2 warn", {"cmd": "AddLog", "id": Ref("PUSH for logs", "id"), "message": "two",
                         "level": "warn"}),
    X("AddLog #3", {"cmd": "AddLog", "id": Ref("PUSH for logs", "id"), "message": "three"}),
    X("GetLogs (3)", {"cmd": "GetLogs", "id": Ref("PUSH for logs", "id")}),
    X("ClearLogs keepLogs 1", {"cmd": "ClearLogs", "id": Ref("PUSH for logs", "id"),
                               "keepLogs": 1}),
    X("GetLogs after ClearLogs keepLogs 1", {"cmd": "GetLogs", "id": Ref("PUSH for logs", "id")}),
    X("ClearLogs", {"cmd": "ClearLogs", "id": Ref("PUSH for logs", "id")}),
    X("GetLogs after ClearLogs", {"cmd": "GetLogs", "id": Ref("PUSH for logs", "id")}),
    X("ClearLogs unknown id", {"cmd": "ClearLogs", "id": MISSING}),

    # ---------------------------------------------------------------- stall config, events
    X("GetStallConfig default", {"cmd": "GetStallConfig", "queue": "gx-stall"}),
    X("SetStallConfig", {"cmd": "SetStallConfig", "queue": "gx-stall",
                         "config": {"stallInterval": 5000, "maxStalls": 2,
                                    "gracePeriod": 1000}}),
    X("GetStallConfig after Set", {"cmd": "GetStallConfig", "queue": "gx-stall"}),
    X("SetStallConfig partial", {"cmd": "SetStallConfig", "queue": "gx-stall",
                                 "config": {"maxStalls": 7}}),
    X("GetStallConfig after partial", {"cmd": "GetStallConfig", "queue": "gx-stall"}),
    X("SetStallConfig bad number", {"cmd": "SetStallConfig", "queue": "gx-stall",
                                    "config": {"maxStalls": "x"}}),
    X("TrimEvents", {"cmd": "TrimEvents", "queue": "gx-logs", "maxLength": 0}),
    X("TrimEvents keep 10", {"cmd": "TrimEvents", "queue": "gx-flow-c", "maxLength": 10}),
    X("TrimEvents bad queue", {"cmd": "TrimEvents", "queue": "bad queue!", "maxLength": 1}),
    X("TrimEvents no queue", {"cmd": "TrimEvents", "maxLength": 1}),

    # ---------------------------------------------------------------- metrics
    X("Metrics queue without type", {"cmd": "Metrics", "queue": "gx-flow-c"}),
    X("Metrics queue completed", {"cmd": "Metrics", "queue": "gx-flow-c", "type": "completed"}),
    X("Metrics queue failed", {"cmd": "Metrics", "queue": "gx-flow-c", "type": "failed"}),
    X("Metrics type without queue", {"cmd": "Metrics", "type": "completed"}),
    X("Metrics bad queue name", {"cmd": "Metrics", "queue": "bad queue!", "type": "completed"}),
    X("Prometheus", {"cmd": "Prometheus"}, "the text is compared line by line with the "
      "'prometheus' rule (conformance/bunqueue_compare.py)",
      rules={"$.data.metrics": "prometheus"}),

    # ---------------------------------------------------------------- cron
    X("Cron with timezone and maxLimit", {"cmd": "Cron", "name": "gx-cron-tz", "queue": "gx-cron",
                                          "data": {"c": 1}, "schedule": "30 9 * * *",
                                          "timezone": "America/New_York", "maxLimit": 5,
                                          "priority": 3}),
    X("CronGet tz", {"cmd": "CronGet", "name": "gx-cron-tz"}),
    X("Cron same name (update)", {"cmd": "Cron", "name": "gx-cron-tz", "queue": "gx-cron",
                                  "data": {"c": 2}, "schedule": "0 10 * * *",
                                  "timezone": "Europe/Rome"}),
    X("Cron six fields", {"cmd": "Cron", "name": "gx-cron-6", "queue": "gx-cron",
                          "data": {"c": 6}, "schedule": "0 0 12 * * *"}),
    X("Cron repeatEvery", {"cmd": "Cron", "name": "gx-cron-every", "queue": "gx-cron",
                           "data": {"c": 3}, "repeatEvery": 7200000, "maxLimit": 2}),
    X("Cron jobName", {"cmd": "Cron", "name": "gx-cron-named", "queue": "gx-cron",
                       "jobName": "nightly", "data": {"c": 4}, "schedule": "0 3 * * *"}),
    X("CronList (4)", {"cmd": "CronList"}),
    X("Cron bad timezone", {"cmd": "Cron", "name": "gx-cron-badtz", "queue": "gx-cron",
                            "data": 1, "schedule": "0 * * * *", "timezone": "Mars/Olympus"}),
    X("Cron bad schedule (minute 61)", {"cmd": "Cron", "name": "gx-cron-bad", "queue": "gx-cron",
                            "data": 1, "schedule": "61 * * * *"}),
    X("Cron no schedule nor repeatEvery", {"cmd": "Cron", "name": "gx-cron-none",
                                           "queue": "gx-cron", "data": 1}),
    X("Cron missing name", {"cmd": "Cron", "queue": "gx-cron", "data": 1,
                            "schedule": "7 4 * * *"},
      "reference quirk: stored with name undefined (it stays in CronList)"),
    X("Cron missing queue", {"cmd": "Cron", "name": "gx-cron-noq", "data": 1,
                             "schedule": "7 4 * * *"},
      "reference quirk: answers 'Internal server error' yet stores the schedule (queue "
      "undefined in CronList)"),
    X("Cron bad queue", {"cmd": "Cron", "name": "gx-cron-badq", "queue": "bad queue!",
                         "data": 1, "schedule": "7 4 * * *"},
      "reference quirk: the queue name is not validated"),
    X("Cron repeatEvery 0", {"cmd": "Cron", "name": "gx-cron-zero", "queue": "gx-cron",
                             "data": 1, "repeatEvery": 0}),
    X("CronGet unknown name", {"cmd": "CronGet", "name": "gx-cron-nope"}),
    X("CronDelete tz", {"cmd": "CronDelete", "name": "gx-cron-tz"}),
    X("CronDelete tz again (missing)", {"cmd": "CronDelete", "name": "gx-cron-tz"}),
    X("CronDelete 6", {"cmd": "CronDelete", "name": "gx-cron-6"}),
    X("CronDelete every", {"cmd": "CronDelete", "name": "gx-cron-every"}),
    X("CronDelete named", {"cmd": "CronDelete", "name": "gx-cron-named"}),
    X("CronList empty", {"cmd": "CronList"}),

    # ---------------------------------------------------------------- rate / concurrency limits
    X("GetQueueLimits none", {"cmd": "GetQueueLimits", "queue": "gx-limits"}),
    X("RateLimit", {"cmd": "RateLimit", "queue": "gx-limits", "limit": 10}),
    X("RateLimit with duration", {"cmd": "RateLimit", "queue": "gx-limits", "limit": 5,
                                  "duration": 2000}),
    X("RateLimit bad limit", {"cmd": "RateLimit", "queue": "gx-limits", "limit": "ten"}),
    X("RateLimit missing limit", {"cmd": "RateLimit", "queue": "gx-limits"}),
    X("SetConcurrency", {"cmd": "SetConcurrency", "queue": "gx-limits", "limit": 2}),
    X("SetConcurrency bad limit", {"cmd": "SetConcurrency", "queue": "gx-limits",
                                   "limit": "two"}),
    X("GetQueueLimits set", {"cmd": "GetQueueLimits", "queue": "gx-limits"}),
    X("RateLimitClear", {"cmd": "RateLimitClear", "queue": "gx-limits"}),
    X("ClearConcurrency", {"cmd": "ClearConcurrency", "queue": "gx-limits"}),
    X("GetQueueLimits cleared", {"cmd": "GetQueueLimits", "queue": "gx-limits"}),
    X("RateLimitClear unknown queue", {"cmd": "RateLimitClear", "queue": "gx-nothing-here"}),
    X("ClearConcurrency unknown queue", {"cmd": "ClearConcurrency", "queue": "gx-nothing-here"}),

    # ---------------------------------------------------------------- webhooks
    X("ListWebhooks empty", {"cmd": "ListWebhooks"}),
    X("AddWebhook", {"cmd": "AddWebhook", "url": "https://example.com/hook",
                     "events": ["job.completed", "job.failed"], "queue": "gx-hook-silent",
                     "secret": "whsec"},
      "filters on a queue no step pushes to: nothing is ever delivered"),
    X("ListWebhooks one", {"cmd": "ListWebhooks"}),
    X("SetWebhookEnabled false", {"cmd": "SetWebhookEnabled",
                                  "id": Ref("AddWebhook", "data", "webhookId"),
                                  "enabled": False}),
    X("ListWebhooks disabled", {"cmd": "ListWebhooks"}),
    X("RemoveWebhook", {"cmd": "RemoveWebhook", "webhookId": Ref("AddWebhook", "data",
                                                                 "webhookId")}),
    X("RemoveWebhook missing", {"cmd": "RemoveWebhook",
                                "webhookId": Ref("AddWebhook", "data", "webhookId")}),
    X("SetWebhookEnabled missing", {"cmd": "SetWebhookEnabled", "id": MISSING,
                                    "enabled": True}),
    X("AddWebhook missing url", {"cmd": "AddWebhook", "events": ["job.completed"]}),
    X("AddWebhook bad event", {"cmd": "AddWebhook", "url": "https://example.com/hook",
                               "events": ["job.exploded"], "queue": "gx-hook-silent"}),
    X("AddWebhook missing events", {"cmd": "AddWebhook", "url": "https://example.com/hook",
                                    "queue": "gx-hook-silent"}),
    *[X(f"AddWebhook blocked {what}", {"cmd": "AddWebhook", "url": url,
                                       "events": ["job.completed"],
                                       "queue": "gx-hook-silent"})
      for url, what in _BLOCKED_URLS],
    X("ListWebhooks after refusals", {"cmd": "ListWebhooks"}),

    # ---------------------------------------------------------------- the five bugs
    X("PUSH waiting for GetJobs states", {"cmd": "PUSH", "queue": "gx-states", "data": {"s": 1}}),
    X("PUSH delayed for GetJobs states", {"cmd": "PUSH", "queue": "gx-states", "data": {"s": 2},
                                          "delay": 600000}),
    X("PUSH for GetJobs states (active)", {"cmd": "PUSH", "queue": "gx-states",
                                           "data": {"s": 3}}),
    X("PULL for GetJobs states", {"cmd": "PULL", "queue": "gx-states"}),
    X("GetJobs state list", {"cmd": "GetJobs", "queue": "gx-states",
                             "state": ["waiting", "delayed"], "offset": 0, "limit": 10},
      "the shape the TS client's getJobs(['waiting','delayed']) sends "
      "(client/queue/operations/queryTcpPages.js)"),
    X("GetJobs state list one", {"cmd": "GetJobs", "queue": "gx-states", "state": ["active"]}),
    X("GetJobs no state", {"cmd": "GetJobs", "queue": "gx-states"}),
    X("PUSH with own timeout", {"cmd": "PUSH", "queue": "gx-timeout", "data": 1,
                                "timeout": 5000}),
    X("PULL with lockTtl (timeout job)", {"cmd": "PULL", "queue": "gx-timeout", "owner": "w-t",
                                          "lockTtl": 60000}),
    X("GetJob keeps own timeout", {"cmd": "GetJob", "id": Ref("PUSH with own timeout", "id")}),
    X("ACK timeout job", {"cmd": "ACK", "id": Ref("PUSH with own timeout", "id"),
                          "token": Ref("PULL with lockTtl (timeout job)", "token")}),
    X("PUSH with own timeout 300", {"cmd": "PUSH", "queue": "gx-timeout2", "data": 1,
                                    "timeout": 300, "backoff": 0, "maxAttempts": 2}),
    X("PULL with lockTtl 60000 (timeout 300 job)", {"cmd": "PULL", "queue": "gx-timeout2",
                                                    "owner": "w-t2", "lockTtl": 60000}),
    X("GetJob after own timeout ran out", {"cmd": "GetJob",
                                           "id": Ref("PUSH with own timeout 300", "id")},
      "sent 1000 ms after the PULL: the job's own timeout (300 ms), not the 60 s lock, ends "
      "the attempt (application/background/timeouts.js: fail 'Job timeout exceeded')",
      pause_ms=1000),
    X("ACK after own timeout", {"cmd": "ACK", "id": Ref("PUSH with own timeout 300", "id"),
                                "token": Ref("PULL with lockTtl 60000 (timeout 300 job)",
                                             "token")}),
    X("GetState after ACK after own timeout", {"cmd": "GetState",
                                               "id": Ref("PUSH with own timeout 300", "id")}),
    X("PUSH for obliterate-paused", {"cmd": "PUSH", "queue": "gx-obl", "data": 1}),
    X("Pause before Obliterate", {"cmd": "Pause", "queue": "gx-obl"}),
    X("IsPaused before Obliterate", {"cmd": "IsPaused", "queue": "gx-obl"}),
    X("Obliterate paused queue", {"cmd": "Obliterate", "queue": "gx-obl"}),
    X("IsPaused after Obliterate", {"cmd": "IsPaused", "queue": "gx-obl"}),
    X("GetJobCounts after Obliterate", {"cmd": "GetJobCounts", "queue": "gx-obl"}),
    X("PUSH with stackTraceLimit", {"cmd": "PUSH", "queue": "gx-stack", "data": 1,
                                    "stackTraceLimit": 2, "maxAttempts": 3, "backoff": 0}),
    X("PULL stackTraceLimit job", {"cmd": "PULL", "queue": "gx-stack"}),
    X("FAIL with long stack", {"cmd": "FAIL", "id": Ref("PUSH with stackTraceLimit", "id"),
                               "error": "boom", "stack": ["at a", "at b", "at c", "at d"]}),
    X("GetJob stacktrace limited", {"cmd": "GetJob", "id": Ref("PUSH with stackTraceLimit",
                                                               "id")}),
    X("PUSH default stackTraceLimit", {"cmd": "PUSH", "queue": "gx-stack2", "data": 2,
                                       "backoff": 0}),
    X("PULL default stack job", {"cmd": "PULL", "queue": "gx-stack2"}),
    X("FAIL with 12-line stack", {"cmd": "FAIL", "id": Ref("PUSH default stackTraceLimit", "id"),
                                  "error": "boom", "stack": [f"at f{i}" for i in range(12)]}),
    X("GetJob stacktrace default limit", {"cmd": "GetJob",
                                          "id": Ref("PUSH default stackTraceLimit", "id")}),
    X("PUSH name inside data", {"cmd": "PUSH", "queue": "gx-name",
                                "data": {"name": "from-data", "v": 1}}),
    X("GetJob name from data", {"cmd": "GetJob", "id": Ref("PUSH name inside data", "id")}),
    X("PUSH name inside data and name", {"cmd": "PUSH", "queue": "gx-name", "name": "outer",
                                         "data": {"name": "inner", "v": 2}}),
    X("GetJob name given twice", {"cmd": "GetJob",
                                  "id": Ref("PUSH name inside data and name", "id")}),
    X("PULL name from data", {"cmd": "PULL", "queue": "gx-name"}),

    # ---------------------------------------------------------------- B11
    X("Ping with nil reqId", {"cmd": "Ping", "reqId": None},
      "B11: the TS client never sends a nil reqId (client/tcp/runtime/commands.js sets "
      "reqId = String(counter) on every command); the reference echoes nil as nil"),
    X("x Ping at end", {"cmd": "Ping"}),
]
