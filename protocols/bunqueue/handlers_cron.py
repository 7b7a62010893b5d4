"""Cron, CronGet, CronDelete, CronList (bunqueue-tcp-protocol.txt "Cron Commands"; reference
bunqueue 2.9.5 dist/infrastructure/server/handlers/cron.js, scheduler/cron/*.js,
domain/types/cron.js; goldens 'Cron add ...', 'CronList', 'CronGet', 'CronDelete ...').

The schedules belong to the canonical engine (core/cron.py through the port's cron_* calls);
this module turns a Cron command into a canonical job template and the reference's reply and
error texts. Choices are in docs/bunqueue.md, "Cron (issue 16)".
"""
from __future__ import annotations

from core.api import CronError, CronJob

from .bulk import too_large
from .codec import num
from .info import DEFAULT_LOCK_TTL_MS
from .jobview import DEFAULT_MAX_ATTEMPTS
from .options import data_error, encode_data
from .handlers_query import _when
from .registry import command, err, ok_empty

NOT_FOUND = "Cron job not found"
_NAME_ERR = "Job name must be a non-empty string of at most 256 characters"


def expression_error(e: CronError) -> str:
    """The reference's text for a CronError (assertValidCronInput / assertValidCronTiming)."""
    k = e.kind
    if k == "timing":
        return "Cron repeatEvery must be a positive safe integer number of milliseconds"
    if k == "missing":
        return "Cron job must have either schedule or repeatEvery"
    if k == "fields":
        inner = "Cron expression must have 5 fields, or 6 fields with leading seconds"
    elif k == "timezone":
        inner = f"Bun.cron: unknown time zone '{e.detail}'"
    elif k == "no_future":
        inner = "Cron expression has no future occurrences"
    elif k == "range":
        inner = "Invalid cron expression: value out of range for field"
    else:
        inner = "Invalid cron expression: unrecognized field syntax"
    return "Invalid cron expression: " + inner


def cron_data(v) -> dict:
    """The reference's cronData(): the reply object of one schedule (a core.api.CronView), key
    order and wire types as in the goldens (nextRun float64, absent values nil)."""
    info = v.info
    return {"name": v.name, "jobName": info.get("jobName", "default"), "queue": v.queue,
            "schedule": v.schedule,
            "repeatEvery": None if v.repeat_every_ms is None else num(v.repeat_every_ms),
            "nextRun": float(v.next_run_ms), "executions": num(v.executions),
            "maxLimit": None if v.max_limit is None else num(v.max_limit),
            "timezone": v.timezone, "priority": info.get("priority", 0)}


def _int_ms(v):
    """A JavaScript number that is an integer, as int (else the value unchanged)."""
    if v.__class__ is float and v.is_integer():
        return int(v)
    return v


def _template(name: str, job_name: str, data, priority, cmd: dict) -> CronJob:
    """The canonical job each run creates (reference fireCronJob: name, data, priority,
    uniqueKey (cmd's, else cron:<name> unless preventOverlap is false), jobOptions)."""
    payload, fmt = encode_data(data)
    opts = cmd.get("jobOptions") if cmd.get("jobOptions").__class__ is dict else {}
    ext = {}
    if job_name != "default":
        ext["name"] = job_name
    key = cmd.get("uniqueKey")
    if key is None and cmd.get("preventOverlap") is not False:
        key = f"cron:{name}"
    if key is not None:
        ext["uniqueKey"] = str(key)
    for k in ("removeOnComplete", "removeOnFail"):
        if opts.get(k):
            ext[k] = opts[k]
    b = opts.get("backoff")
    if b.__class__ in (int, float):
        ext["backoff"] = b
    ma = opts.get("maxAttempts")
    timeout = opts.get("timeout")
    delay = opts.get("delay")
    rank = -int(priority) if priority.__class__ in (int, float) else 0
    return CronJob(payload, fmt, rank,
                   int(timeout) if timeout.__class__ in (int, float) and timeout > 0
                   else DEFAULT_LOCK_TTL_MS,
                   int(ma) if ma.__class__ in (int, float) and ma >= 1 else DEFAULT_MAX_ATTEMPTS,
                   "bunqueue", ext or None,
                   int(delay) if delay.__class__ in (int, float) and delay > 0 else 0,
                   uuid7=True, event="push")


@command("Cron", mutating=True)
def cron(sess, cmd: dict):
    name = cmd.get("name")
    queue = cmd.get("queue")
    if name is None or name.__class__ not in (str, int, float):
        return err("Cron job name is required")   # the reference stores name: undefined
    if queue is None:
        return err("Internal server error")   # the reference's storage refuses a NULL queue
    name = str(name) if name.__class__ is not str else name
    queue = str(queue) if queue.__class__ is not str else queue
    if len(name) > 256:
        return err("Cron job name too long (max 256 characters)")   # the stored key's size
    if len(queue) > 256:
        return err("Queue name too long (max 256 characters)")
    data = cmd.get("data")
    job_name = cmd.get("jobName")
    if job_name is not None:
        if job_name.__class__ is not str or not 0 < len(job_name) <= 256:
            return err(_NAME_ERR)
    elif data.__class__ is dict and data.get("name").__class__ is str:
        job_name = data["name"]     # legacy envelope (normalizeLegacyJobPayload)
        if not 0 < len(job_name) <= 256:
            return err(_NAME_ERR)
        data = {k: v for k, v in data.items() if k != "name"}
    else:
        job_name = "default"
    msg = data_error(data)
    if msg:
        return err(msg)
    if too_large(encode_data(data)[0]):
        return err("Job data too large (max 10MB)")   # PUSH's limit: each run is a job
    priority = cmd.get("priority")
    if priority is None:
        priority = 0
    schedule = cmd.get("schedule")
    if schedule is not None and schedule.__class__ is not str:
        schedule = str(schedule)
    every = _int_ms(cmd.get("repeatEvery"))
    if every is not None and every.__class__ is not int:
        return err(expression_error(CronError("timing")))
    tz = cmd.get("timezone")
    limit = _int_ms(cmd.get("maxLimit"))
    try:
        view, _ = sess.port.cron_set(
            queue, name, _template(name, job_name, data, priority, cmd), schedule or None,
            every, None if tz is None else str(tz),
            limit if limit.__class__ is int else None, bool(cmd.get("immediately")),
            cmd.get("skipMissedOnRestart") is not False,
            {"jobName": job_name, "priority": priority})
    except CronError as e:
        return err(expression_error(e))
    return {"ok": True, "cron": cron_data(view)}


@command("CronGet")
def cron_get(sess, cmd: dict):
    """The schedule named `name` (in shared mode whichever node set it: docs/scaling.md)."""
    name = cmd.get("name")
    if name.__class__ is not str:
        return err(NOT_FOUND)
    return _when(sess, lambda cb: sess.port.cron_get_global(name, cb),
                 lambda v: err(NOT_FOUND) if v is None else {"ok": True, "cron": cron_data(v)})


@command("CronDelete", mutating=True)
def cron_delete(sess, cmd: dict):
    """Delete the schedule named `name` (in shared mode whichever node set it)."""
    name = cmd.get("name")
    if name.__class__ is not str:
        return err(NOT_FOUND)
    return _when(sess, lambda cb: sess.port.cron_delete_global(name, cb),
                 lambda found: ok_empty() if found else err(NOT_FOUND))


@command("CronList")
def cron_list(sess, cmd: dict):
    """Every schedule (in shared mode every node's, as the leader moved them)."""
    return _when(sess, sess.port.cron_list_global,
                 lambda views: {"ok": True, "crons": [cron_data(v) for v in views]})

