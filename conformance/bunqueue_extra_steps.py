"""The extra bunqueue golden steps (jobgate issue 16): the requests that
``python -m conformance.bunqueue_record`` plays against the REAL bunqueue 2.9.5 server to write
tests/data/bunqueue-golden-extra.json, the reference for the commands the first golden file
(../shared/reference/bunqueue-golden.json) did not cover: flows (PUSHF, GetChildrenValues,
UpdateParent, a parent in ``waiting-children``), MoveToWait, PromoteJobs, ChangeDelay,
ClearLogs, SetStallConfig/GetStallConfig, TrimEvents, per-queue Metrics, Prometheus, Cron,
RateLimit, SetConcurrency, GetQueueLimits, webhooks, five reference behaviours jobgate got
wrong (GetJobs with a list of states, a job's own ``timeout``, Obliterate of a paused queue,
``stackTraceLimit``, ``name`` inside ``data``) and a nil ``reqId`` (B11).

The steps are defined in conformance/bunqueue_extra_jobs.py (jobs, flows, the bugs, the rest of
the command table) and conformance/bunqueue_extra_admin.py (cron, limits, webhooks), with the
building blocks in conformance/bunqueue_extra_defs.py; ``EXTRA_STEPS`` here is their recording
order. A step is ``X(name, request, note, rules, pause_ms)``:

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
fixed UUIDv7 strings (conformance/bunqueue_extra_defs.py); they appear in the request, so the
comparison expects them echoed.

Everything the steps do stays on this machine: the one webhook with a public URL
(https://example.com/hook) filters on a queue no step pushes to and is removed three steps
later, and the blocked URLs are refused by validation (no delivery is attempted; the reference
does no DNS look-up when it validates, shared/webhookValidation.js).
"""
from __future__ import annotations

from .bunqueue_extra_admin import ADMIN_STEPS
from .bunqueue_extra_defs import UNDEF, ExtraStep, Ref, X
from .bunqueue_extra_jobs import JOB_STEPS, LATE_STEPS

__all__ = ["Ref", "ExtraStep", "X", "EXTRA_STEPS", "UNDEF"]

# The order is the recording's: later steps (Prometheus, Metrics, RetryCompleted) count what
# earlier ones did.
EXTRA_STEPS: list[ExtraStep] = [*JOB_STEPS, *ADMIN_STEPS, *LATE_STEPS]
