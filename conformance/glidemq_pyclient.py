"""The golden's R section: the seed's Python example played with redis-py itself
(``decode_responses=True``), once with ``protocol=2`` (R21..R29, queue ``pyseed2``) and once
with ``protocol=3`` (R31..R39, queue ``pyseed3``), the replies compared as Python values.

The golden's command lines for R describe the calls in words, so each step's call is written
here (``CALLS``, by the step id's last digit) next to the exact description it plays; a golden
whose description differs is reported as a failure instead of being played on a guess.
Arguments the description elides are the seed example's: the 17-argument addJob of step I05
and, for addFlow with 0 children, a parent named ``flow`` with data ``{}``, no delay,
priority or attempts, 0 children, no custom id and 0 extra dependencies (the reply does not
show them). ``<E01>`` is the parent id step E01 answered (its live reply when E01 ran, else
the golden's).

Normalisation: ``smembers`` (a Python set) is compared as a sorted list (the golden's ``list``);
``'<SID>'`` stands for any stream id; T0 placeholders are filled before the golden literal is
read. Values compare with their Python types (tuple is not list, int is not float or str).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from .glidemq_compare import is_stream_id

__all__ = ["CALLS", "describe", "play", "compare_py", "render_py", "e01_parent"]

_DATA = '{"to": "user@example.com", "subject": "Hello"}'
_SEED_TAIL = [0, 0, "", 0, "", 0, 0, 0, 0, 0, 0, 0, ""]   # I05's args 5..17


def _keys(q: str) -> list[str]:
    return [f"glide:{{{q}}}:{k}" for k in ("id", "stream", "scheduled", "events")]


def _version(r, ctx: dict) -> Any:
    return r.fcall("glidemq_version", 1, "{glidemq}:_")


def _add(r, ctx: dict) -> Any:
    out = r.fcall("glidemq_addJob", 4, *_keys(ctx["queue"]), "send-email", _DATA, "{}",
                  ctx["t0"], *_SEED_TAIL)
    ctx["id"] = out
    return out


def _hgetall(r, ctx: dict) -> Any:
    return r.hgetall(f"glide:{{{ctx['queue']}}}:job:{ctx.get('id', '1')}")


def _counts(r, ctx: dict) -> Any:
    q = ctx["queue"]
    return [r.xlen(f"glide:{{{q}}}:stream"), r.zcard(f"glide:{{{q}}}:completed"),
            r.zcard(f"glide:{{{q}}}:failed"), r.zcard(f"glide:{{{q}}}:scheduled")]


def _flow(r, ctx: dict) -> Any:
    return r.fcall("glidemq_addFlow", 4, *_keys(ctx["queue"]), "flow", "{}", "{}", ctx["t0"],
                   0, 0, 0, 0, "", 0)


def _zrange(r, ctx: dict) -> Any:
    return r.zrange("glide:{probe}:scheduled", 0, -1, withscores=True)


def _xrange(r, ctx: dict) -> Any:
    return r.xrange(f"glide:{{{ctx['queue']}}}:stream")


def _smembers(r, ctx: dict) -> Any:
    return sorted(r.smembers(f"glide:{{probe-flow}}:deps:{ctx['e01']}"))


def _nosuch(r, ctx: dict) -> Any:
    return r.fcall("glidemq_nosuch", 0)


#: last digit of the step id -> (the golden's command text, with {p} = 2 or 3; the call)
CALLS: dict[str, tuple[str, Callable]] = {
    "1": ("r.fcall('glidemq_version', 1, '{{glidemq}}:_')", _version),
    "2": ("r.fcall('glidemq_addJob', 4, glide:{{pyseed{p}}}:id .. :events, 'send-email', "
          "data, '{{}}', T0, ...17 args)", _add),
    "3": ("r.hgetall('glide:{{pyseed{p}}}:job:<id>')", _hgetall),
    "4": ("[r.xlen(stream), r.zcard(completed), r.zcard(failed), r.zcard(scheduled)]",
          _counts),
    "5": ("r.fcall('glidemq_addFlow', 4, ..., 0 children)", _flow),
    "6": ("r.zrange('glide:{{probe}}:scheduled', 0, -1, withscores=True)", _zrange),
    "7": ("r.xrange('glide:{{pyseed{p}}}:stream')", _xrange),
    "8": ("r.smembers('glide:{{probe-flow}}:deps:<E01>')", _smembers),
    "9": ("r.fcall('glidemq_nosuch', 0)", _nosuch),
}


def describe(step_id: str) -> str | None:
    """The command text this module plays for an R step (None: unknown step id)."""
    p, digit = step_id[1:2], step_id[2:]
    if p not in ("2", "3") or digit not in CALLS:
        return None
    return CALLS[digit][0].format(p=p)


def play(step_id: str, r, ctx: dict) -> tuple[str, Any]:
    """Run one R step's call on the redis-py client ``r``; ``ctx`` carries ``t0`` (ms),
    ``queue`` (pyseed2/3), ``e01`` and the id the addJob step returned. Returns
    ``(type label, value)`` like the golden, or ``("raised", "Type: message")``."""
    import redis
    try:
        value = CALLS[step_id[2:]][1](r, ctx)
    except redis.RedisError as exc:
        return "raised", f"{type(exc).__name__}: {exc}"
    return type(value).__name__, value


def compare_py(want: Any, got: Any, path: str = "") -> list[str]:
    """Differences between two Python values (types strict; dicts by key; the string
    ``'<SID>'`` in ``want`` matches any stream id string)."""
    where = path or "value"
    if isinstance(want, str) and want == "<SID>":
        ok = isinstance(got, str) and is_stream_id(got.encode())
        return [] if ok else [f"{where}: expected a stream id, got {got!r}"]
    if type(want) is not type(got):
        return [f"{where}: expected {type(want).__name__} {want!r}, "
                f"got {type(got).__name__} {got!r}"]
    if isinstance(want, dict):
        diffs = [f"{where}: missing key {k!r}" for k in want if k not in got]
        diffs += [f"{where}: unexpected key {k!r}" for k in got if k not in want]
        for k in want:
            if k in got:
                diffs += compare_py(want[k], got[k], f"{path}[{k!r}]")
        return diffs
    if isinstance(want, (list, tuple)):
        diffs = [] if len(want) == len(got) else [
            f"{where}: expected {len(want)} items, got {len(got)}"]
        for i, (a, b) in enumerate(zip(want, got)):
            diffs += compare_py(a, b, f"{path}[{i}]")
        return diffs
    return [] if want == got else [f"{where}: expected {want!r}, got {got!r}"]


def render_py(label: str, value: Any) -> str:
    """A result in the golden's R notation."""
    return f"raised {value}" if label == "raised" else f"{label} {value!r}"


def e01_parent(reply_text: bytes | None) -> str:
    """The parent id in E01's addFlow reply (JSON list text), "1" when unknown."""
    try:
        return str(json.loads(reply_text)[0]) if reply_text else "1"
    except (ValueError, IndexError, TypeError):
        return "1"
