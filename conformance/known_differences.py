"""The documented, intended differences between jobgate and beanstalkd 1.12, as data.

Each difference has an id, a reason, and is applied in exactly one of two explicit ways:

- ``normalize``: a frame function applied to both sides before comparing (D1 quoting, D5
  host-dependent values). A step that is equal only after it is reported as documented.
- ``cases``: per-step expectations: at (scenario, step label) jobgate must show exactly the
  given outcome instead of beanstalkd's (D2, D3, D4).

Nothing is ignored wholesale: any other difference is reported as DIFFERENT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .beanstalk_replies import stats, stats_job
from .framing import END_OK, END_SILENT, Outcome
from .normalize import MASK, map_yaml_values

__all__ = [
    "Case",
    "Difference",
    "DIFFERENCES",
    "unquote_strings",
    "mask_host_dependent",
    "host_dependent_mask",
    "normalizers",
    "overrides_for",
    "check_cases_exist",
]

# --------------------------------------------------------------------------------------
# D1: quoting of string values in stats YAML.
# --------------------------------------------------------------------------------------
QUOTED_KEYS: dict[str, frozenset[str]] = {
    "stats": frozenset({"version", "hostname", "os", "platform"}),
    "stats-job": frozenset({"tube"}),
    "stats-tube": frozenset({"name"}),
}


def _unquote(value: bytes) -> bytes:
    if len(value) >= 2 and value[:1] == b'"' and value[-1:] == b'"':
        inner = value[1:-1]
        return inner.replace(b'\\"', b'"').replace(b"\\\\", b"\\")
    return value


def unquote_strings(frame: bytes) -> bytes:
    """D1: unquote exactly the string-valued keys 1.12 leaves bare (tube, name, version,
    hostname, os, platform) in stats / stats-job / stats-tube frames."""

    def fn(kind: str, key: str, value: bytes) -> bytes:
        return _unquote(value) if key in QUOTED_KEYS[kind] else value

    return map_yaml_values(frame, fn)


# --------------------------------------------------------------------------------------
# D5: host-dependent values.
# --------------------------------------------------------------------------------------
HOST_KEYS = frozenset({"os", "platform"})


def mask_host_dependent(frame: bytes) -> bytes:
    """D5: mask the values of ``os`` and ``platform`` in stats frames."""

    def fn(kind: str, key: str, value: bytes) -> bytes:
        return MASK.encode() if kind == "stats" and key in HOST_KEYS else value

    return map_yaml_values(frame, fn)


host_dependent_mask = mask_host_dependent


@dataclass(frozen=True)
class Case:
    """A per-step expectation: in ``scenario`` at step ``step`` jobgate answers ``jobgate``."""

    scenario: str
    step: str
    jobgate: Outcome


@dataclass(frozen=True)
class Difference:
    """One documented difference: ``id`` (D1..), ``title``, ``reason``, and either a frame
    ``normalize`` function or per-step ``cases``."""

    id: str
    title: str
    reason: str
    normalize: Callable[[bytes], bytes] | None = None
    cases: tuple[Case, ...] = ()


def _bf(scenario: str, step: str, window: bool = False) -> Case:
    end = END_SILENT if window else END_OK
    return Case(scenario, step, Outcome((b"BAD_FORMAT\r\n",), end))


def _one(frame: bytes) -> Outcome:
    return Outcome((frame,), END_OK)


def _waiters_cases(scenario: str, waiters: str, ref: str, fifo: str) -> tuple[Case, ...]:
    """D4 cases for a waiters scenario: where 1.12's receiver (``ref``) differs from strict
    longest-waiter order (``fifo``), jobgate's poll outcomes for that job."""
    out = []
    for i, (r, f) in enumerate(zip(ref, fifo), start=1):
        if r == f:
            continue
        for w in (r, f):
            got = (b"RESERVED %d 1\r\n%d\r\n" % (i, i % 10),) if w == f else ()
            out.append(Case(scenario, f"job {i}: {w}", Outcome(got, END_SILENT)))
    return tuple(out)


DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        "D1",
        "String values in stats YAML are quoted",
        "jobgate quotes string values as beanstalkd HEAD does (tube: \"foo\" in stats-job, "
        "name: \"foo\" in stats-tube, version/hostname/os/platform in stats). 1.12 leaves "
        "them bare, and an unquoted os value like '#1 SMP ...' is read as a YAML comment; "
        "Node's jackd client needs the quotes.",
        normalize=unquote_strings,
    ),
    Difference(
        "D2",
        "Strict integers for reserve-with-timeout and kick",
        "1.12 parses these with strtol/strtoul: signs, trailing junk and empty arguments pass, "
        "-1 wraps (kick -1 kicks 2^32-1 jobs; reserve-with-timeout -1 blocks forever) and "
        "values >= 2^32 are truncated. jobgate applies the same strict decimal rule as every "
        "other integer argument and answers BAD_FORMAT. (HEAD answers BAD_FORMAT for abc, -1 "
        "and 2^32 but still TIMED_OUT for 0abc.)",
        cases=(
            _bf("golden-loose-integers", "kick negative (strtoul wraps)"),
            _bf("golden-loose-integers", "kick with trailing junk"),
            _bf("golden-loose-integers", "kick 2^32 (truncated to uint)"),
            _bf("golden-loose-integers", "reserve-with-timeout non-numeric"),
            _bf("golden-loose-integers", "reserve-with-timeout trailing junk"),
            _bf("golden-loose-integers", "reserve-with-timeout 2^32"),
            _bf("golden-loose-integers", "reserve-with-timeout negative (blocks like reserve)",
                window=True),
            _bf("loose-integers-extra", "reserve-with-timeout 0 with trailing space"),
            _bf("loose-integers-extra", "reserve-with-timeout +0"),
            _bf("loose-integers-extra", "reserve-with-timeout with empty argument"),
            _bf("loose-integers-extra", "kick 1 with trailing space"),
            _bf("loose-integers-extra", "kick +1"),
            _bf("loose-integers-extra", "kick with a second argument"),
            _bf("loose-integers-extra", "kick 0x10 (1.12 reads the 0)"),
            _bf("loose-integers-extra", "kick 2^64-1 (1.12 truncates to 2^32-1)"),
            _bf("loose-integers-extra", "reserve-with-timeout with only spaces"),
            _bf("loose-integers-extra", "reserve-with-timeout 0x10 (1.12 reads the 0)"),
        ),
    ),
    Difference(
        "D3",
        "A reserved job's TTR always expires",
        "1.12 can keep a job reserved past its TTR while the reserving connection is idle "
        "(upstream #380, #262). Two causes, both ending with the connection dropped from the "
        "timer heap until it sends a command: (a) the expiry check runs in the deadline's "
        "exact microsecond (deadline >= now is 'not yet'), which its busy-wait before a "
        "deadline makes likely (most runs); (b) after DEADLINE_SOON ends a "
        "reserve-with-timeout the connection keeps its pending timeout and ticks before the "
        "job's deadline (every run). jobgate releases the job at its TTR.",
        cases=(
            Case("ttr-expiry-idle-reserver", "B: stats-job 1 past its TTR",
                 _one(stats_job(1, "default", "ready", ttr=1, reserves=1, timeouts=1))),
            Case("ttr-expiry-idle-reserver", "B: stats past the TTR",
                 _one(stats(current_jobs_urgent=1, current_jobs_ready=1, cmd_put=1,
                            cmd_reserve=1, cmd_stats=1, cmd_stats_job=2, cmd_list_tube_used=4,
                            job_timeouts=1, total_jobs=1, current_connections=2,
                            current_producers=1, current_workers=1, total_connections=3))),
            Case("ttr-stale-timer", "B: stats-job 2 past its TTR",
                 _one(stats_job(2, "default", "ready", ttr=4, reserves=1, timeouts=1))),
            Case("ttr-stale-timer", "B: stats past the TTR",
                 _one(stats(current_jobs_urgent=1, current_jobs_ready=1, cmd_put=2,
                            cmd_reserve=2, cmd_reserve_with_timeout=1, cmd_delete=1,
                            cmd_stats=1, cmd_stats_job=2, job_timeouts=1, total_jobs=2,
                            current_connections=2, current_producers=1, current_workers=1,
                            total_connections=3))),
        ),
    ),
    Difference(
        "D4",
        "Waiting reservers are served longest-waiter first",
        "1.12 keeps a tube's waiting connections in a set that swap-removes the taken entry "
        "and rotates a cursor, so with 4 waiters (or fewer, when a served reserver waits "
        "again) a newer waiter can be served before an older one. jobgate serves strictly in "
        "FIFO order of waiting.",
        cases=(
            _waiters_cases("waiters-four", "ABCD", "ABDC", "ABCD")
            + _waiters_cases("waiters-two-rejoin", "AB", "AA", "AB")
            + _waiters_cases("waiters-three-rejoin", "ABC", "ABB", "ABC")
        ),
    ),
    Difference(
        "D5",
        "os and platform are host-dependent",
        "Both come from the host (uname); jobgate may compute them differently from beanstalkd "
        "on the same host. Their values are masked.",
        normalize=mask_host_dependent,
    ),
)


def normalizers() -> list[tuple[str, Callable[[bytes], bytes]]]:
    """(id, frame function) of every difference applied as a normalization, in id order."""
    return [(d.id, d.normalize) for d in DIFFERENCES if d.normalize is not None]


def overrides_for(scenario: str, differences=None) -> dict[str, tuple[str, Outcome]]:
    """Per-step expectations for ``scenario``: step label -> (difference id, jobgate outcome).
    ``differences``: the Difference list to read (default: the beanstalk D1..D5)."""
    out: dict[str, tuple[str, Outcome]] = {}
    for d in (DIFFERENCES if differences is None else differences):
        for c in d.cases:
            if c.scenario == scenario:
                out[c.step] = (d.id, c.jobgate)
    return out


def check_cases_exist(scenarios, differences=None) -> list[str]:
    """Problems with the case list: cases naming a scenario or step that does not exist.
    ``scenarios``: iterable of Scenario; ``differences``: the Difference list to check
    (default: the beanstalk D1..D5). Returns human-readable problems (empty if fine)."""
    by_name = {s.name: s for s in scenarios}
    problems = []
    for d in (DIFFERENCES if differences is None else differences):
        for c in d.cases:
            s = by_name.get(c.scenario)
            if s is None:
                problems.append(f"{d.id}: unknown scenario {c.scenario!r}")
                continue
            try:
                st = s.step(c.step)
            except KeyError:
                problems.append(f"{d.id}: {c.scenario}: unknown step {c.step!r}")
                continue
            if st.read == "none":
                problems.append(f"{d.id}: {c.scenario}/{c.step}: step reads nothing")
    return problems
