"""Extra golden steps (tests/data/bunqueue-golden-extra.json, issue 16) that jobgate does not
pass yet on the branch that recorded them, because the feature is being built on another
branch at the same time. TEMPORARY: the lead empties ``EXTRA_PENDING`` when the branches
merge (a pending step that passes is an XPASS, which fails
tests/test_conformance_bunqueue_extra.py).

``EXTRA_PENDING`` maps a step name to ``lands with branch i16-<area>`` (or ``no branch yet:
<what>`` for a difference in a command no i16 branch was asked to change): the 151 steps
jobgate failed when this list was made (``python -m conformance.bunqueue --jobgate --golden
extra``). Some fail only because an earlier step of another area did (the Prometheus text and
per-queue Metrics count every queue's jobs, so they pass only when flows, cron and the rest
do too). The runner
(conformance/bunqueue_runner.Runner, ``pending=``) reports a mismatch at such a step as
``known``, not ``FAIL``, unless it checks a reference server (``--reference``).
"""
from __future__ import annotations

__all__ = ["EXTRA_PENDING", "check_pending"]

# What each area brings (the reasons stay short: pytest prints them per xfail):
# flows     PUSHF, parents waiting for children, GetChildrenValues, UpdateParent (landed:
#           none pending);
# misc      MoveToWait, PromoteJobs, ChangeDelay, ClearLogs (and GetLogs' key order: timestamp,
#           level, message), TrimEvents, per-queue Metrics, the Prometheus text,
#           the five bugs (GetJobs with a state list, and the state / returnvalue /
#           failedReason keys of GetJobs without a state; a job's own timeout; Obliterate of a
#           paused queue; stackTraceLimit; name inside data), the nil reqId echo (B11);
# cron      Cron, CronGet, CronList, CronDelete (landed: two deliberate differences left);
# limits    RateLimit, RateLimitClear, SetConcurrency, ClearConcurrency, GetQueueLimits, stall
#           config (landed: none pending);
# webhooks  AddWebhook, ListWebhooks, SetWebhookEnabled, RemoveWebhook, the SSRF refusals.
_MISC = "lands with branch i16-misc"
_CRON = ("lands with branch i16-cron as a deliberate difference (a reference bug: see "
         "docs/bunqueue.md, Cron)")
_LIMITS = "lands with branch i16-limits"
_WEBHOOKS = "lands with branch i16-webhooks"

# i16-flows landed them: tests/test_bunqueue_flows.py, tests/test_bunqueue_flow_links.py


# i16-cron landed the others (tests/test_cron.py, tests/test_bunqueue_cron.py). These two stay
# on purpose: the reference keeps a schedule named undefined ('Cron missing name') and, after
# answering 'Internal server error', one with queue undefined (listed by 'CronList empty');
# jobgate refuses the first and keeps nothing for the second (docs/bunqueue.md, "Cron (issue
# 16)"). They need a deliberate-difference entry (jobgate's reply checked) instead of this list.
_CRON_STEPS = (
    'Cron missing name',
    'CronList empty',
)

# i16-limits landed them (and the stall config steps, listed under misc before):
# tests/test_bunqueue_limits.py
_LIMITS_STEPS: tuple = ()

# i16-webhooks landed them: tests/test_webhooks.py, tests/test_webhook_urls.py
_WEBHOOKS_STEPS: tuple = ()

# Differences the extra golden found in commands jobgate already had, which no i16 branch was
# asked to change (the lead assigns them; reasons start with "no branch yet").
_UNOWNED = "no branch yet: "
_UNOWNED_STEPS: dict[str, str] = {
}

EXTRA_PENDING: dict[str, str] = {
    **dict.fromkeys(_CRON_STEPS, _CRON),
    **dict.fromkeys(_LIMITS_STEPS, _LIMITS),
    **dict.fromkeys(_WEBHOOKS_STEPS, _WEBHOOKS),
    **_UNOWNED_STEPS,
}


def check_pending(step_names: list[str]) -> list[str]:
    """Problems with ``EXTRA_PENDING`` against the extra golden step names (empty = fine)."""
    names = set(step_names)
    out = [f"no extra golden step named {n!r}" for n in EXTRA_PENDING if n not in names]
    out += [f"{n!r}: reason must start with 'lands with branch i16-' or {_UNOWNED!r}"
            for n, r in EXTRA_PENDING.items()
            if not r.startswith(("lands with branch i16-", _UNOWNED))]
    return out
