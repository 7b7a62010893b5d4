"""The known differences between jobgate and the reference bunqueue 2.9.5, as data.

``DIFFERENCES`` maps a golden step name (bunqueue-golden.json, or the extra golden
tests/data/bunqueue-golden-extra.json: step names are unique across the two files) to the reason jobgate does not
answer that step with the reference's reply. Two kinds:

- out of scope: a step played whose mismatch is reported as a known difference, not a failure
  (a match passes). None is left since issue 16 (cron was the last); the mechanism stays for
  a future reference release;
- deliberate: the reference has a plain bug and jobgate answers differently on purpose. The
  reply jobgate must give instead is in ``JOBGATE_EXPECTS`` (value and wire types, golden JSON
  form), and it is checked exactly like a golden reply.

``python -m conformance.bunqueue --reference`` ignores this module and expects the golden
replies everywhere (to check a real bunqueue server).
"""

from __future__ import annotations

__all__ = ["DIFFERENCES", "OUT_OF_SCOPE", "JOBGATE_EXPECTS", "check_steps_exist"]

DIFFERENCES: dict[str, str] = {
    "AUTH: Auth missing token": (
        "reference bug: bunqueue 2.9.5 answers an Auth without a token with its own "
        "TypeError text \"undefined is not an object (evaluating 'a.length')\"; a missing "
        "token is simply not a valid token, so jobgate answers 'Invalid token' (the spec's "
        "Auth failure reply), reqId echoed, string types as in 'AUTH: Auth wrong token'"),
    "ListQueues": (
        "deliberate (docs/bunqueue.md B4): a queue pushed with a number as its name (step "
        "'PUSH queue not a string') is named by its decimal string, because canonical queue "
        "names are strings shared with beanstalk tubes and workq names; ListQueues lists it "
        "as '123'"),
    # the extra golden (tests/data/bunqueue-golden-extra.json, issue 16)
    "Cron missing name": (
        "reference bug: bunqueue 2.9.5 stores a Cron without a name as a schedule named "
        "undefined, which no CronGet or CronDelete can reach again; jobgate refuses it with "
        "'Cron job name is required' (docs/bunqueue.md, Cron)"),
    "CronList empty": (
        "follows from the two Cron reference bugs: the reference lists the schedule named "
        "undefined and the one it answered 'Internal server error' for (no queue) yet stored; "
        "jobgate stored neither, so its CronList holds only gx-cron-badq (docs/bunqueue.md, "
        "Cron)"),
}

# Steps whose mismatch is tolerated (reported as "known"); the others in DIFFERENCES have a
# jobgate reply below that must match exactly.
OUT_OF_SCOPE: frozenset[str] = frozenset(
    name for name in DIFFERENCES if "out of scope" in DIFFERENCES[name])

_CRON_BADQ = {"name": "gx-cron-badq", "jobName": "default", "queue": "bad queue!",
              "schedule": "7 4 * * *", "repeatEvery": None, "nextRun": 1795666020000.0,
              "executions": 0, "maxLimit": None, "timezone": None, "priority": 0}
_CRON_TYPES = {"name": "str", "jobName": "str", "queue": "str", "schedule": "str",
               "repeatEvery": "nil", "nextRun": "float64", "executions": "posfixint",
               "maxLimit": "nil", "timezone": "nil", "priority": "posfixint"}

JOBGATE_EXPECTS: dict[str, tuple[dict, dict]] = {
    "ListQueues": (
        {"ok": True, "queues": ["golden", "golden-other", "123", "golden-dlq", "golden-p"],
         "reqId": "r96"},
        {"ok": "true", "queues": ["str", "str", "str", "str", "str"], "reqId": "str"},
    ),
    "AUTH: Auth missing token": (
        {"ok": False, "error": "Invalid token", "reqId": "r109"},
        {"ok": "false", "error": "str", "reqId": "str"},
    ),
    "Cron missing name": (
        {"ok": False, "error": "Cron job name is required", "reqId": "x103"},
        {"ok": "false", "error": "str", "reqId": "str"},
    ),
    "CronList empty": (
        {"ok": True, "crons": [_CRON_BADQ], "reqId": "x113"},
        {"ok": "true", "crons": [_CRON_TYPES], "reqId": "str"},
    ),
}


def check_steps_exist(step_names: list[str]) -> list[str]:
    """Problems with this data against the golden steps of both files (empty list =
    consistent): every named step exists, and every difference is either out of scope or has
    a jobgate reply."""
    names = set(step_names)
    problems = [f"no golden step named {n!r}" for n in DIFFERENCES if n not in names]
    for n in DIFFERENCES:
        if (n in OUT_OF_SCOPE) == (n in JOBGATE_EXPECTS):
            problems.append(f"{n!r} must be either out of scope or have a jobgate reply")
    problems += [f"{n!r} has a jobgate reply but is not a difference"
                 for n in JOBGATE_EXPECTS if n not in DIFFERENCES]
    return problems
