"""The known differences between jobgate and the reference bunqueue 2.9.5, as data.

``DIFFERENCES`` maps a golden step name (bunqueue-golden.json) to the reason jobgate does not
answer that step with the reference's reply. Two kinds:

- out of scope for jobgate issue 4 (cron): the step stays in
  the suite and is played, and a mismatch is reported as a known difference, not a failure
  (a match passes);
- deliberate: the reference has a plain bug and jobgate answers differently on purpose. The
  reply jobgate must give instead is in ``JOBGATE_EXPECTS`` (value and wire types, golden JSON
  form), and it is checked exactly like a golden reply.

``python -m conformance.bunqueue --reference`` ignores this module and expects the golden
replies everywhere (to check a real bunqueue server).
"""

from __future__ import annotations

__all__ = ["DIFFERENCES", "OUT_OF_SCOPE", "JOBGATE_EXPECTS", "check_steps_exist"]

_CRON = ("cron scheduling is out of scope for jobgate issue 4 (the Cron, CronList, CronGet "
         "and CronDelete commands)")

DIFFERENCES: dict[str, str] = {
    "Cron add (repeatEvery)": _CRON,
    "Cron add (schedule)": _CRON,
    "Cron bad schedule": _CRON,
    "CronList": _CRON,
    "CronGet": _CRON,
    "CronDelete": _CRON,
    "CronDelete 2": _CRON,
    "CronDelete missing": _CRON,
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
}

# Steps whose mismatch is tolerated (reported as "known"); the others in DIFFERENCES have a
# jobgate reply below that must match exactly.
OUT_OF_SCOPE: frozenset[str] = frozenset(
    name for name in DIFFERENCES if "out of scope" in DIFFERENCES[name])

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
}


def check_steps_exist(step_names: list[str]) -> list[str]:
    """Problems with this data against the golden steps (empty list = consistent): every named
    step exists, and every difference is either out of scope or has a jobgate reply."""
    names = set(step_names)
    problems = [f"no golden step named {n!r}" for n in DIFFERENCES if n not in names]
    for n in DIFFERENCES:
        if (n in OUT_OF_SCOPE) == (n in JOBGATE_EXPECTS):
            problems.append(f"{n!r} must be either out of scope or have a jobgate reply")
    problems += [f"{n!r} has a jobgate reply but is not a difference"
                 for n in JOBGATE_EXPECTS if n not in DIFFERENCES]
    return problems
