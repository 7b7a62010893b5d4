"""Masking of volatile stats values and the step-by-step comparison of two runs.

Baseline masking (always applied, to both sides, not a "difference"): in ``stats`` bodies the
values of pid, uptime, rusage-utime, rusage-stime, hostname and id; in ``stats-job`` bodies age
and time-left; in ``stats-tube`` bodies pause-time-left. A masked YAML frame gets its
``OK <n>`` byte count recomputed, so the count is compared consistently.

Documented differences (``known_differences``) are applied on top, explicitly: a normalization
function per difference, or a per-step expectation that replaces the reference outcome.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from .framing import Outcome

__all__ = [
    "MASK",
    "yaml_kind",
    "map_yaml_values",
    "mask_volatile",
    "normalize_outcome",
    "StepVerdict",
    "Verdict",
    "compare",
    "describe_outcome",
    "byte_diff",
]

MASK = "*"

VOLATILE: dict[str, frozenset[str]] = {
    "stats": frozenset({"pid", "uptime", "rusage-utime", "rusage-stime", "hostname", "id"}),
    "stats-job": frozenset({"age", "time-left"}),
    "stats-tube": frozenset({"pause-time-left"}),
}

_OK_LINE = re.compile(rb"^OK (\d+)\r\n")


def _split_ok(frame: bytes) -> bytes | None:
    """The body of an ``OK <n>`` frame (without trailing CRLF), or None."""
    m = _OK_LINE.match(frame)
    if not m:
        return None
    body = frame[m.end():]
    if len(body) != int(m.group(1)) + 2 or not body.endswith(b"\r\n"):
        return None
    return body[:-2]


def yaml_kind(body: bytes) -> str | None:
    """Which YAML dictionary a body is: "stats", "stats-job", "stats-tube", or None."""
    if body.startswith(b"---\ncurrent-jobs-urgent:"):
        return "stats"
    if body.startswith(b"---\nid:"):
        return "stats-job"
    if body.startswith(b"---\nname:"):
        return "stats-tube"
    return None


def map_yaml_values(frame: bytes, fn: Callable[[str, str, bytes], bytes]) -> bytes:
    """Rewrite the values of a stats / stats-job / stats-tube frame.

    ``fn(kind, key, value) -> value`` is called for every ``key: value`` line (bytes value,
    str kind and key). Frames that are not such YAML dictionaries are returned unchanged. The
    ``OK <n>`` count is recomputed from the rewritten body.
    """
    body = _split_ok(frame)
    if body is None:
        return frame
    kind = yaml_kind(body)
    if kind is None:
        return frame
    lines = body.split(b"\n")
    out = []
    for line in lines:
        key, sep, value = line.partition(b": ")
        if sep and key and not key.startswith(b"-"):
            value = fn(kind, key.decode("latin-1"), value)
            line = key + sep + value
        out.append(line)
    new_body = b"\n".join(out)
    return b"OK %d\r\n" % len(new_body) + new_body + b"\r\n"


def mask_volatile(frame: bytes) -> bytes:
    """Baseline masking of one frame (see module docstring)."""

    def fn(kind: str, key: str, value: bytes) -> bytes:
        return MASK.encode() if key in VOLATILE[kind] else value

    return map_yaml_values(frame, fn)


def normalize_outcome(o: Outcome | None, fns: Sequence[Callable[[bytes], bytes]] = ()) -> Outcome | None:
    """Baseline-mask every frame of ``o`` and then apply each frame function in ``fns``."""
    if o is None:
        return None
    frames = []
    for f in o.frames:
        f = mask_volatile(f)
        for fn in fns:
            f = fn(f)
        frames.append(f)
    return Outcome(tuple(frames), o.end, o.tail)


@dataclass
class StepVerdict:
    """Comparison of one step.

    ``status``: "equal", "documented" (equal after documented differences ``ids``),
    "different", or "missing" (one side has no record for this step).
    ``expected``/``actual``: the outcomes compared (raw; for "different" steps the masked and
    normalized forms, so a diff shows only what really differs).
    ``note``: extra explanation (e.g. that an outcome recorded from the reference server was
    accepted instead of the one the reference run showed).
    """

    label: str
    status: str
    expected: Outcome | None
    actual: Outcome | None
    ids: tuple[str, ...] = ()
    note: str = ""


@dataclass
class Verdict:
    """Comparison of one scenario run against an expectation or a reference run.

    ``status``: "equal", "equal-after-documented", "DIFFERENT" or "ERROR".
    ``ids``: documented difference ids that were needed. ``steps``: per-step verdicts.
    ``error``: harness error text for status ERROR.
    """

    scenario: str
    status: str
    ids: tuple[str, ...] = ()
    steps: list[StepVerdict] = field(default_factory=list)
    error: str = ""

    @property
    def first_difference(self) -> StepVerdict | None:
        """The first step that is "different" or "missing", or None."""
        for s in self.steps:
            if s.status in ("different", "missing"):
                return s
        return None

    def label(self) -> str:
        """``equal`` / ``equal-after-documented(D1,D3)`` / ``DIFFERENT`` / ``ERROR``."""
        if self.status == "equal-after-documented":
            return f"equal-after-documented({','.join(self.ids)})"
        return self.status


def compare(
    scenario: str,
    order: Iterable[str],
    expected: Mapping[str, Outcome | None],
    actual: Mapping[str, Outcome | None],
    normalizers: Sequence[tuple[str, Callable[[bytes], bytes]]] = (),
    overrides: Mapping[str, tuple[str, Outcome]] | None = None,
    accept: Mapping[str, Sequence[Outcome]] | None = None,
    base: Sequence[Callable[[bytes], bytes]] = (),
    recorded_base: Sequence[Callable[[bytes], bytes]] = (),
) -> Verdict:
    """Compare two runs of one scenario step by step.

    ``order``: step labels in scenario order (other labels, e.g. leftover records, follow).
    ``expected``/``actual``: label -> outcome (None for steps that do not read).
    ``normalizers``: (difference id, frame function) pairs applied after baseline masking; a
    step that is equal only after them is "documented" with the smallest set of ids needed.
    ``overrides``: label -> (difference id, outcome the actual side must show instead of
    ``expected``); no other outcome is accepted at such a step. ``accept``: label -> more
    outcomes that are also accepted (outcomes recorded from the reference server, including
    its known nondeterministic alternatives); accepting one adds a note. ``base``: extra
    frame functions applied to both sides like the baseline masking, without being reported.
    ``recorded_base``: like ``base`` but only when the expected side is recorded data (an
    override or an accepted recording) rather than a live run on the same host, e.g. masking
    host-dependent values that a recording cannot know.
    """
    overrides = overrides or {}
    accept = accept or {}
    labels = list(order)
    for k in list(expected) + list(actual):
        if k not in labels:
            labels.append(k)
    verdict = Verdict(scenario, "equal")
    ids: set[str] = set()
    for label in labels:
        has_e, has_a = label in expected, label in actual
        exp = expected.get(label)
        act = actual.get(label)
        if label.startswith("leftover ") and not has_e:
            has_e, exp = True, None
        if not has_e or not has_a:
            verdict.steps.append(StepVerdict(label, "missing", exp, act))
            continue
        if label in overrides:
            did, o = overrides[label]
            forced: tuple[str, ...] = (did,)
            candidates: list[tuple[Outcome | None, str, bool]] = [(o, "", True)]
        else:
            forced = ()
            candidates = [(exp, "", False)] + [
                (o, "matches another outcome recorded from the reference server", True)
                for o in accept.get(label, ()) if o != exp]
        sv = _judge(label, candidates, act, forced, list(base), list(recorded_base), normalizers)
        ids.update(sv.ids)
        verdict.steps.append(sv)
    if any(s.status in ("different", "missing") for s in verdict.steps):
        verdict.status = "DIFFERENT"
    elif ids:
        verdict.status = "equal-after-documented"
    verdict.ids = tuple(sorted(ids))
    return verdict


def _judge(label, candidates, act, forced, base, recorded_base, normalizers) -> StepVerdict:
    """Verdict for one step: ``act`` against each candidate expected outcome in turn, exact
    (after baseline masking) or after the documented normalizations (reporting the smallest
    set of difference ids that makes them equal)."""
    exp0 = candidates[0][0]
    if act is None or any(c is None for c, _, _ in candidates):
        if act is None and exp0 is None:
            return StepVerdict(label, "equal", None, None)
        return StepVerdict(label, "different", exp0, act, forced)

    def eq(cand: Outcome, recorded: bool, fns: list) -> bool:
        b = base + (recorded_base if recorded else [])
        return normalize_outcome(cand, b + fns) == normalize_outcome(act, b + fns)

    all_fns = [fn for _, fn in normalizers]
    for cand, note, recorded in candidates:  # the first candidate (the live run) is preferred
        if eq(cand, recorded, []):
            return StepVerdict(label, "documented" if forced else "equal", cand, act, forced, note)
        if eq(cand, recorded, all_fns):
            needed = list(normalizers)
            # Drop every normalization that is not needed, broadest (last listed) first, so
            # e.g. a quoting difference is reported as D1 rather than hidden by D5's mask.
            for item in reversed(list(needed)):
                trial = [fn for d, fn in needed if (d, fn) != item]
                if eq(cand, recorded, trial):
                    needed.remove(item)
            used = tuple(sorted(set(forced) | {d for d, _ in needed}))
            return StepVerdict(label, "documented" if used else "equal", cand, act, used, note)
    # Show the masked/normalized forms: the diff then holds only what really differs.
    rb = base + (recorded_base if candidates[0][2] else [])
    return StepVerdict(label, "different", normalize_outcome(exp0, rb + all_fns),
                       normalize_outcome(act, rb + all_fns), forced)


def describe_outcome(o: Outcome | None) -> str:
    """Readable one-per-line rendering of an outcome: frames as Python bytes reprs, then the
    end marker (and tail, if any)."""
    if o is None:
        return "(nothing read)"
    lines = [repr(f) for f in o.frames] or ["(no frames)"]
    lines.append(f"[end: {o.end}]" + (f" tail={o.tail!r}" if o.tail else ""))
    return "\n".join(lines)


def byte_diff(expected: Outcome | None, actual: Outcome | None,
              expected_name: str = "expected", actual_name: str = "actual",
              limit: int = 40) -> str:
    """A readable unified diff of two outcomes, frame lines split at ``\\n`` so YAML bodies
    diff key by key; at most ``limit`` lines."""

    def lines(o: Outcome | None) -> list[str]:
        if o is None:
            return ["(nothing read)"]
        out: list[str] = []
        for f in o.frames:
            parts = f.split(b"\n")
            for i, p in enumerate(parts):
                if i < len(parts) - 1:
                    p += b"\n"
                if p:
                    out.append(repr(p))
        if not o.frames:
            out.append("(no frames)")
        out.append(f"[end: {o.end}]")
        if o.tail:
            out.append(f"tail {o.tail!r}")
        return out

    d = list(difflib.unified_diff(lines(expected), lines(actual), expected_name, actual_name,
                                  n=2, lineterm=""))
    if len(d) > limit:
        d = d[:limit] + [f"... ({len(d) - limit} more diff lines)"]
    return "\n".join(d)
