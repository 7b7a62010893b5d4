"""Comparison of live bunqueue replies with golden ones: values, MessagePack wire types, bound
ids and tokens, timestamp windows, volatile statistics, Job key sets (split from
conformance/bunqueue.py; the rules are listed in its docstring), and the golden file checked
against itself (`check_golden`)."""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .bunqueue_known_differences import JOBGATE_EXPECTS
from .bunqueue_steps import STEPS, Step, load_golden, steps
from .bunqueue_wire import (MAP16_REQUIRED, UNDEFINED, Annotated, Ext, RawBytes, annotate,
                            canonical_type, from_golden, to_golden)

UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
TS_MIN = 1e12                    # a golden float64 at least this big is a ms timestamp
TS_BEFORE_MS = 5 * 60 * 1000     # live timestamps: from suite start minus this ...
TS_AFTER_MS = 8 * 86400 * 1000   # ... to now plus this
VOLATILE_KEYS = frozenset({"uptime", "pushPerSec", "pullPerSec", "avgLatencyMs",
                           "avgProcessingMs", "memoryUsageMb", "sqliteSizeMb",
                           "activeConnections", "duration"})
TOKEN_KEYS = frozenset({"token", "tokens"})
JOB_KEYS = frozenset({"id", "queue", "data", "timeline"})
# Keys a Job object may or may not carry: bunqueue 2.9.5's GetJobs tags the in-memory job
# object it collects with ``_state`` (application/operations/query/collect.js) and the tag
# leaks into later replies for that object or not, depending on which copy is read (two runs
# of the extra golden differ there). Neither its presence nor its value is compared.
OPTIONAL_JOB_KEYS = frozenset({"_state"})
UNORDERED = {"ListQueues": frozenset({"$.queues"})}


# --------------------------------------------------------------------------------------------
# text rules: a golden string compared by a rule instead of by equality (a step's ``rules``)
# --------------------------------------------------------------------------------------------
# Prometheus series whose value changes from run to run (time, memory, CPU, file size,
# latency histograms): only "a non-negative number" is required of them.
PROM_VOLATILE = re.compile(
    r"^(?:bunqueue_uptime_seconds|bunqueue_process_\w+|process_\w+|"
    r"bunqueue_sqlite_database_size_bytes|bunqueue_\w+_duration_seconds(?:_bucket|_sum|_count)?)"
    r"(?:\{|$)")
_PROM_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*(?:\{[^}]*\})?) (\S+)$")


def _prom_lines(text: str) -> tuple[set[str], dict[str, str], list[str]]:
    """(comment lines, {series: value}, unparsable lines) of a Prometheus exposition text."""
    comments: set[str] = set()
    samples: dict[str, str] = {}
    bad: list[str] = []
    for line in text.split("\n"):
        if not line:
            continue
        if line.startswith("#"):
            comments.add(line)
            continue
        m = _PROM_SAMPLE.match(line)
        if m:
            samples[m.group(1)] = m.group(2)
        else:
            bad.append(line)
    return comments, samples, bad


def prometheus_diffs(golden: str, live: Any) -> list[str]:
    """The "prometheus" rule: the live text has exactly the golden's ``# HELP``/``# TYPE``
    lines and sample series (name with labels), in any order, blank lines ignored; each
    sample's value equals the golden's, except for ``PROM_VOLATILE`` series (uptime, process
    memory/CPU/start time, SQLite file size, latency histograms), where any non-negative
    number is accepted."""
    if not isinstance(live, str):
        return [f"expected Prometheus text, got {_show(live)}"]
    gc, gs, _ = _prom_lines(golden)
    lc, ls, bad = _prom_lines(live)
    out = [f"unparsable line {b!r}" for b in bad[:5]]
    out += [f"missing line {x!r}" for x in sorted(gc - lc)]
    out += [f"unexpected line {x!r}" for x in sorted(lc - gc)]
    out += [f"missing series {x}" for x in sorted(set(gs) - set(ls))]
    out += [f"unexpected series {x} {ls[x]}" for x in sorted(set(ls) - set(gs))]
    for series in sorted(set(gs) & set(ls)):
        want, got = gs[series], ls[series]
        if PROM_VOLATILE.match(series):
            try:
                ok = float(got) >= 0
            except ValueError:
                ok = False
            if not ok:
                out.append(f"{series}: {got!r} is not a non-negative number")
        elif got != want:
            out.append(f"{series} {got}, golden {want}")
    return out


TEXT_RULES: dict[str, Callable[[str, Any], list[str]]] = {
    "prometheus": prometheus_diffs,
}


# --------------------------------------------------------------------------------------------
# comparison
# --------------------------------------------------------------------------------------------
@dataclass
class Context:
    """State shared by the steps of one run: the golden-id -> live-id table and the window a
    live timestamp must fall in (``ts_window()`` -> (lo, hi) ms)."""

    ids: dict[str, str] = field(default_factory=dict)
    ts_window: Callable[[], tuple[float, float]] | None = None
    started_ms: float = field(default_factory=lambda: time.time() * 1000)
    strict_map16: bool = MAP16_REQUIRED

    def window(self) -> tuple[float, float]:
        if self.ts_window is not None:
            return self.ts_window()
        return self.started_ms - TS_BEFORE_MS, time.time() * 1000 + TS_AFTER_MS

    def live(self, golden_id: str) -> str:
        return self.ids.get(golden_id, golden_id)

    def rewrite(self, obj: Any) -> Any:
        """``obj`` (a golden request) with every bound golden id replaced by its live id,
        whole strings and inside strings."""
        if isinstance(obj, RawBytes):
            return obj
        if isinstance(obj, str):
            return self.substitute(obj)
        if isinstance(obj, dict):
            return {k: self.rewrite(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.rewrite(v) for v in obj]
        return obj

    def substitute(self, text: str) -> str:
        if not self.ids:
            return text
        return UUID7.sub(lambda m: self.ids.get(m.group(0), m.group(0)), text)


def golden_window(golden: dict | None = None) -> Callable[[], tuple[float, float]]:
    """The timestamp window of the golden run itself (around its first Ping's time)."""
    g = golden or load_golden()
    ping = next(s for s in g["steps"]
                if isinstance(s["request"], dict) and s["request"].get("cmd") == "Ping")
    t = float(ping["response"]["data"]["time"])
    return lambda: (t - TS_BEFORE_MS, t + TS_AFTER_MS)


def _strings(obj: Any, out: set) -> set:
    if isinstance(obj, str):
        out.add(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _strings(k, out)
            _strings(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _strings(v, out)
    return out


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _show(v: Any) -> str:
    text = json.dumps(to_golden(v), default=repr) if not isinstance(v, Ext) else repr(v)
    return text if len(text) <= 120 else text[:117] + "..."


def _same(g: Any, a: Any) -> bool:
    """Value equality as JavaScript sees it: numbers by value (types are compared apart),
    booleans, nil and undefined by identity."""
    if g is None or a is None or g is UNDEFINED or a is UNDEFINED:
        return g is a
    if isinstance(g, bool) or isinstance(a, bool):
        return g is a
    if _is_num(g) and _is_num(a):
        return g == a or (isinstance(g, float) and isinstance(a, float)
                          and math.isnan(g) and math.isnan(a))
    if isinstance(g, (bytes, bytearray)) or isinstance(a, (bytes, bytearray)):
        return isinstance(g, (bytes, bytearray)) and isinstance(a, (bytes, bytearray)) \
            and bytes(g) == bytes(a)
    return type(g) is type(a) and g == a


class _Cmp:
    def __init__(self, ctx: Context, request: Any, unordered: frozenset,
                 rules: dict | None = None) -> None:
        self.ctx = ctx
        self.req_strings = _strings(request, set())
        self.unordered = unordered
        self.rules = rules or {}
        self.diffs: list[str] = []

    def diff(self, path: str, msg: str) -> None:
        self.diffs.append(f"{path}: {msg}")

    def walk(self, g: Any, gt: Any, a: Any, at: Any, path: str, key: Any) -> None:
        if isinstance(g, dict):
            self.map(g, gt, a, at, path)
        elif isinstance(g, list):
            self.array(g, gt, a, at, path, key)
        else:
            self.scalar(g, gt, a, at, path, key)

    def map(self, g: dict, gt: Any, a: Any, at: Any, path: str) -> None:
        if not isinstance(a, dict):
            self.diff(path, f"expected a map, got {_show(a)} ({at})")
            return
        is_job = JOB_KEYS <= set(g)
        if is_job and (OPTIONAL_JOB_KEYS & (set(g) | set(a))):
            g = {k: v for k, v in g.items() if k not in OPTIONAL_JOB_KEYS}
            a = {k: v for k, v in a.items() if k not in OPTIONAL_JOB_KEYS}
        missing = [k for k in g if k not in a]
        extra = [k for k in a if k not in g]
        if missing:
            self.diff(path, f"missing keys {missing}")
        if extra:
            self.diff(path, f"unexpected keys {extra} = {[_show(a[k]) for k in extra]}")
        if not missing and not extra and not is_job and list(g) != list(a):
            self.diff(path, f"key order {list(a)}, golden {list(g)}")
        gtd = gt if isinstance(gt, dict) else {}
        for k in g:
            if k in a:
                self.walk(g[k], gtd.get(k, canonical_type(g[k])), a[k],
                          at.get(k) if isinstance(at, dict) else None, f"{path}.{k}", k)

    def array(self, g: list, gt: Any, a: Any, at: Any, path: str, key: Any) -> None:
        if not isinstance(a, list):
            self.diff(path, f"expected an array, got {_show(a)} ({at})")
            return
        gtl = gt if isinstance(gt, list) and len(gt) == len(g) else canonical_type(g)
        atl = at if isinstance(at, list) else [None] * len(a)
        if path in self.unordered:
            gp = sorted(zip(g, gtl), key=lambda p: json.dumps(to_golden(p[0]), default=repr))
            ap = sorted(zip(a, atl), key=lambda p: json.dumps(to_golden(p[0]), default=repr))
            if [(_show(v), t) for v, t in gp] != [(_show(v), t) for v, t in ap]:
                self.diff(path, f"as a set: {[_show(v) for v, _ in ap]} "
                                f"({[t for _, t in ap]}), golden {[_show(v) for v, _ in gp]} "
                                f"({[t for _, t in gp]})")
            return
        if len(a) != len(g):
            self.diff(path, f"{len(a)} items, golden {len(g)}: {_show(a)}")
        for i in range(min(len(a), len(g))):
            self.walk(g[i], gtl[i], a[i], atl[i], f"{path}[{i}]", key)

    def scalar(self, g: Any, gt: Any, a: Any, at: Any, path: str, key: Any) -> None:
        if gt is None:
            gt = canonical_type(g)
        if path in self.rules:
            rule = TEXT_RULES[self.rules[path]]
            self.diffs += [f"{path}: {d}" for d in rule(g, a)]
            if isinstance(a, str) and at != gt:
                self.diff(path, f"type {at}, golden {gt}")
            return
        if key in VOLATILE_KEYS and _is_num(g):
            if not _is_num(a) or a < 0:
                self.diff(path, f"expected a number (volatile statistic), got {_show(a)} ({at})")
            elif at != canonical_type(a):
                self.diff(path, f"type {at} for {a!r}, msgpackr writes {canonical_type(a)}")
            return
        if _is_num(g) and gt == "float64" and g >= TS_MIN:
            lo, hi = self.ctx.window()
            if not _is_num(a):
                self.diff(path, f"expected a timestamp, got {_show(a)} ({at})")
            elif not lo <= a <= hi:
                self.diff(path, f"timestamp {a!r} outside [{lo:.0f}, {hi:.0f}]")
            elif at != "float64":
                self.diff(path, f"timestamp type {at}, golden float64")
            return
        if isinstance(g, str) and UUID7.fullmatch(g):
            self.generated_id(g, gt, a, at, path, key)
            return
        if isinstance(g, str):
            g = self.ctx.substitute(g)
        if not _same(g, a):
            self.diff(path, f"{_show(a)} ({at}), golden {_show(g)} ({gt})")
        elif at != gt:
            self.diff(path, f"type {at}, golden {gt} (value {_show(a)})")

    def generated_id(self, g: str, gt: Any, a: Any, at: Any, path: str, key: Any) -> None:
        ids = self.ctx.ids
        if g in ids:
            want = ids[g]
        elif g in self.req_strings:
            want = g                              # chosen by the client: echoed
        else:
            token = key in TOKEN_KEYS
            what = "lock token" if token else "generated id (UUIDv7)"
            if not isinstance(a, str) or not a:
                self.diff(path, f"expected a {what}, got {_show(a)} ({at})")
                return
            if a in ids.values():
                self.diff(path, f"{a!r} was already returned for another golden id")
                return
            ids[g] = a
            if not token and not UUID7.fullmatch(a):
                self.diff(path, f"{a!r} is not a UUIDv7")
            if at != gt:
                self.diff(path, f"type {at}, golden {gt}")
            return
        if a != want:
            self.diff(path, f"{_show(a)}, expected {want!r} (golden {g})")
        elif at != gt:
            self.diff(path, f"type {at}, golden {gt}")


def compare_reply(expected: Any, expected_types: Any, actual: Annotated, ctx: Context,
                  request: Any = None, step_name: str = "",
                  rules: dict | None = None) -> list[str]:
    """Differences between one live reply and its golden reply (empty list = conforming).
    ``expected``: Python value (``from_golden`` form); ``expected_types``: the golden types
    (None: msgpackr's types of ``expected``); ``request``: the step's golden request (ids in
    it are the client's, not generated); ``rules``: {json path: ``TEXT_RULES`` name} for
    strings compared by a rule. Binds new generated ids in ``ctx.ids``."""
    c = _Cmp(ctx, request, UNORDERED.get(step_name, frozenset()), rules)
    c.walk(expected, expected_types, actual.value, actual.types, "$", None)
    if ctx.strict_map16 and not actual.all_map16:
        c.diff("$", f"map headers {sorted(set(actual.map_headers))}, msgpackr writes map16")
    return c.diffs


def expected_for(step: Step, reference: bool) -> tuple[Any, Any]:
    """(value, types) a server must answer at ``step``: the golden reply, or jobgate's reply
    at a deliberate difference (unless ``reference``)."""
    if not reference and step.name in JOBGATE_EXPECTS:
        value, types = JOBGATE_EXPECTS[step.name]
        return from_golden(value), types
    return step.response, step.types


# --------------------------------------------------------------------------------------------
# the golden file checked against itself
# --------------------------------------------------------------------------------------------
def golden_replies(step: Step) -> list[tuple[Any, Any, Any]]:
    """[(reply value, its types, reqId or None)] of a golden step, as the reference sent them."""
    if step.kind == "pipelined":
        return [(r, None, r["reqId"]) for r in step.response]
    return [(step.response, step.types, None)]


def check_golden(actual: dict | None = None, *, encode: Callable[[Any, Any], bytes] | None = None,
                 golden: dict | None = None, strict_map16: bool = True) -> dict[str, list[str]]:
    """Run golden replies through the suite's own decoder and comparison as if a server had
    just sent them, in step order with one Context (the golden run's timestamp window).

    The replies are those of ``actual`` (a golden-format dict, default the golden file itself;
    a test passes a mutated copy), encoded with their recorded wire types and map16 maps (or
    with ``encode(value, types)``); the expectations are ``golden``'s (default the golden
    file). Returns the differences per step name: all empty means the normaliser accepts the
    replies."""
    from .bunqueue_wire import encode_typed
    enc = encode or (lambda v, t: encode_typed(v, t))
    want_steps = steps(golden) if golden else STEPS
    got_steps = steps(actual) if actual else want_steps
    ctx = Context(ts_window=golden_window(golden), strict_map16=strict_map16)
    out: dict[str, list[str]] = {}
    for want, got in zip(want_steps, got_steps):
        diffs: list[str] = []
        got_replies = {rid: (v, t) for v, t, rid in golden_replies(got)}
        for value, types, rid in golden_replies(want):
            gv, gt = got_replies.get(rid, (None, None))
            try:
                ann = annotate(enc(gv, gt))
            except (ValueError, TypeError) as exc:
                diffs.append(f"cannot encode the reply: {exc}")
                continue
            d = compare_reply(value, types, ann, ctx, want.request, want.name, want.rules)
            diffs += [f"[{rid}] {x}" for x in d] if rid is not None else d
        out[want.name] = diffs
    return out
