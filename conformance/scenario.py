"""Scenario data model and runner.

A scenario is a name, the server flags it needs (e.g. ``("-z", "10")``) and a list of steps.
A step names a connection (``"A"``, ``"B"``, ... opened lazily on first use), an action (send
bytes, close, shutdown(SHUT_WR), sleep, signal the server) and a read mode:

- ``frames``: read exactly N reply frames within ``timeout`` seconds;
- ``window``: collect whatever arrives within ``timeout`` seconds ("expect no reply within T"
  when the expectation holds no frames);
- ``eof``: read until the server closes the connection, within ``timeout`` seconds;
- ``none``: do not read.

Each step carries the outcome recorded from beanstalkd 1.12 (``expect``). The runner records
the raw outcome of every step; comparing is done in ``normalize``.
"""

from __future__ import annotations

import signal as _signal
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from .framing import END_EOF, END_OK, END_RESET, END_SILENT, Outcome, WireConn

__all__ = [
    "Step",
    "Scenario",
    "StepRecord",
    "ScenarioRun",
    "run_scenario",
    "send",
    "send_only",
    "send_window",
    "send_eof",
    "read",
    "window",
    "eof",
    "close",
    "shutwr",
    "sleep",
    "signal",
]

DEFAULT_TIMEOUT = 3.0  # seconds to wait for expected frames before recording END_TIMEOUT


@dataclass(frozen=True)
class Step:
    """One step of a scenario.

    ``conn``: connection name ("A", "B", ...) or "" for server-level actions (sleep, signal).
    ``action``: "send" | "close" | "shutwr" | "sleep" | "signal" | "none".
    ``data``: bytes to send (action "send"), sent with one sendall.
    ``seconds``: sleep length in seconds (action "sleep").
    ``signum``: signal number for action "signal" (sent to the server process).
    ``read``: "frames" | "window" | "eof" | "none".
    ``count``: number of frames for read "frames".
    ``timeout``: seconds; deadline for "frames"/"eof", window length for "window".
    ``expect``: expected Outcome (recorded from beanstalkd 1.12), None when nothing is read.
    ``alternatives``: other outcomes beanstalkd 1.12 is known to show here (nondeterministic
    reference behaviour, explained in the scenario); any of them is accepted too.
    ``label``: unique name within the scenario; known differences refer to it.
    ``render``: optional function called when the step runs; its bytes are sent instead of
    ``data`` (for requests that depend on the time of the run, e.g. a workq schedule time).
    ``data`` then holds a readable template (used for the default label).
    """

    conn: str
    action: str
    label: str
    data: bytes = b""
    seconds: float = 0.0
    signum: int = 0
    read: str = "none"
    count: int = 0
    timeout: float = DEFAULT_TIMEOUT
    expect: Outcome | None = None
    alternatives: tuple[Outcome, ...] = ()
    render: Callable[[], bytes] | None = None

    def payload(self) -> bytes:
        """The bytes this step sends now: ``render()`` when set, else ``data``."""
        return self.render() if self.render is not None else self.data


@dataclass(frozen=True)
class Scenario:
    """A self-contained scenario that starts from a fresh server (job ids start at 1).

    ``flags``: extra server command-line flags, e.g. ("-z", "10").
    ``source``: "golden" (from beanstalk-golden-1.12.txt) or "extra" (beyond the transcript).
    ``needs_control``: True when a step signals the server process (cannot run against a bare
    host:port).
    ``doc``: one-line description.
    ``splitter``: the dialect's reply-frame splitter (contract of ``framing.split_frame``);
    None means beanstalk framing.
    ``masks``: frame functions applied to both sides before comparing, for values this
    scenario cannot pin down (e.g. a client count that depends on the harness); empty for most.
    """

    name: str
    steps: tuple[Step, ...]
    doc: str = ""
    flags: tuple[str, ...] = ()
    source: str = "extra"
    splitter: Callable | None = None
    masks: tuple[Callable[[bytes], bytes], ...] = ()

    @property
    def needs_control(self) -> bool:
        """True when a step signals the server process."""
        return any(s.action == "signal" for s in self.steps)

    def step(self, label: str) -> Step:
        """The step with this label (KeyError if none)."""
        for s in self.steps:
            if s.label == label:
                return s
        raise KeyError(f"{self.name}: no step {label!r}")

    def validate(self) -> None:
        """Raise ValueError if labels repeat or a step is malformed."""
        seen: set[str] = set()
        for s in self.steps:
            if s.label in seen:
                raise ValueError(f"{self.name}: duplicate step label {s.label!r}")
            seen.add(s.label)
            if s.read != "none" and s.expect is None:
                raise ValueError(f"{self.name}/{s.label}: read without expectation")
            if s.read in ("frames", "window", "eof") and not s.conn:
                raise ValueError(f"{self.name}/{s.label}: read needs a connection")
            for alt in s.alternatives:
                if s.read == "frames" and len(alt.frames) != s.count:
                    raise ValueError(f"{self.name}/{s.label}: alternative frame count")


@dataclass(frozen=True)
class StepRecord:
    """What the runner observed for one step: ``outcome`` is None for steps that do not read.
    ``elapsed`` is the step's wall time in seconds (informational only, never compared)."""

    label: str
    conn: str
    sent: bytes
    outcome: Outcome | None
    elapsed: float


@dataclass
class ScenarioRun:
    """The result of playing one scenario against one server.

    ``records``: one StepRecord per step, in order, then one ``leftover <conn>`` record per
    connection that still had unread bytes at the end (expected: none).
    ``error``: a harness-level error (server did not start, ...), or "".
    ``seconds``: wall time of the scenario run (excluding server start).
    ``server_note``: set when the server process died during the run (exit code, output).
    """

    scenario: str
    records: list[StepRecord] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    server_note: str = ""


def run_scenario(
    scenario: Scenario,
    host: str,
    port: int,
    send_signal: Callable[[int], None] | None = None,
) -> ScenarioRun:
    """Play ``scenario`` against ``host:port`` and record every step.

    ``send_signal(signum)`` delivers a signal to the server process; without it a scenario that
    needs server control records an error instead of running. The server must be fresh.
    """
    run = ScenarioRun(scenario.name)
    if scenario.needs_control and send_signal is None:
        run.error = "needs server control (signal); not available against a bare host:port"
        return run
    conns: dict[str, WireConn] = {}
    t_start = time.monotonic()
    try:
        for step in scenario.steps:
            run.records.append(_run_step(step, conns, host, port, send_signal,
                                         scenario.splitter))
        for name in sorted(conns):
            c = conns[name]
            if c.closed:
                continue
            rest = c.leftover()
            if rest:
                run.records.append(
                    StepRecord(f"leftover {name}", name, b"", Outcome((rest,), END_SILENT), 0.0)
                )
    except OSError as exc:  # connect failures and the like
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        for c in conns.values():
            c.close()
        run.seconds = time.monotonic() - t_start
    return run


def _run_step(
    step: Step,
    conns: dict[str, WireConn],
    host: str,
    port: int,
    send_signal: Callable[[int], None] | None,
    splitter: Callable | None = None,
) -> StepRecord:
    t0 = time.monotonic()
    conn = None
    if step.conn:
        conn = conns.get(step.conn)
        if conn is None:
            conn = conns[step.conn] = WireConn(host, port, splitter=splitter)
    failed: Outcome | None = None
    sent = step.data
    if step.action == "send":
        assert conn is not None
        sent = step.payload()
        try:
            conn.send(sent)
        except OSError:
            failed = Outcome((), END_RESET)
    elif step.action == "close":
        assert conn is not None
        conn.close()
    elif step.action == "shutwr":
        assert conn is not None
        try:
            conn.shutdown_write()
        except OSError:
            failed = Outcome((), END_RESET)
    elif step.action == "sleep":
        time.sleep(step.seconds)
    elif step.action == "signal":
        assert send_signal is not None
        send_signal(step.signum)
    elif step.action != "none":
        raise ValueError(f"unknown action {step.action!r}")

    outcome: Outcome | None = None
    if step.read != "none":
        assert conn is not None
        if failed is not None and step.read != "eof":
            outcome = failed
        elif step.read == "frames":
            outcome = conn.read_frames(step.count, step.timeout)
        elif step.read == "window":
            outcome = conn.read_window(step.timeout)
        elif step.read == "eof":
            outcome = conn.read_eof(step.timeout)
        else:
            raise ValueError(f"unknown read mode {step.read!r}")
    return StepRecord(step.label, step.conn, sent, outcome, time.monotonic() - t0)


# ----------------------------------------------------------------------------------------
# Step builders. ``replies`` are the expected frames as recorded from beanstalkd 1.12.
# ----------------------------------------------------------------------------------------


def _label(label: str, data: bytes) -> str:
    if label:
        return label
    text = data.decode("latin-1")
    return text if len(text) <= 60 else text[:57] + "..."


def send(conn: str, data: bytes, *replies: bytes, label: str = "",
         timeout: float = DEFAULT_TIMEOUT, alt: tuple[tuple[bytes, ...], ...] = ()) -> Step:
    """Send ``data`` on ``conn`` and read len(replies) frames within ``timeout`` seconds.
    ``alt``: other frame tuples (same count) the reference server may answer instead."""
    return Step(conn, "send", _label(label, data), data=data, read="frames",
                count=len(replies), timeout=timeout, expect=Outcome(tuple(replies), END_OK),
                alternatives=tuple(Outcome(tuple(a), END_OK) for a in alt))


def send_only(conn: str, data: bytes, label: str = "") -> Step:
    """Send ``data`` on ``conn`` without reading (to split a command across writes)."""
    return Step(conn, "send", _label(label, data), data=data)


def send_window(conn: str, data: bytes, seconds: float, *replies: bytes, label: str = "") -> Step:
    """Send ``data`` and collect what arrives within ``seconds``; expect exactly ``replies``
    (none means: expect no reply within that window)."""
    return Step(conn, "send", _label(label, data), data=data, read="window",
                timeout=seconds, expect=Outcome(tuple(replies), END_SILENT))


def send_eof(conn: str, data: bytes, *replies: bytes, label: str = "",
             timeout: float = DEFAULT_TIMEOUT) -> Step:
    """Send ``data``; expect ``replies`` and then the server closing the connection."""
    return Step(conn, "send", _label(label, data), data=data, read="eof",
                timeout=timeout, expect=Outcome(tuple(replies), END_EOF))


def read(conn: str, *replies: bytes, label: str, timeout: float = DEFAULT_TIMEOUT) -> Step:
    """Read len(replies) frames without sending, within ``timeout`` seconds."""
    return Step(conn, "none", label, read="frames", count=len(replies), timeout=timeout,
                expect=Outcome(tuple(replies), END_OK))


def window(conn: str, seconds: float, *replies: bytes, label: str) -> Step:
    """Collect what arrives within ``seconds`` without sending; expect exactly ``replies``."""
    return Step(conn, "none", label, read="window", timeout=seconds,
                expect=Outcome(tuple(replies), END_SILENT))


def eof(conn: str, *replies: bytes, label: str, timeout: float = DEFAULT_TIMEOUT) -> Step:
    """Expect ``replies`` and then the server closing ``conn``, within ``timeout`` seconds."""
    return Step(conn, "none", label, read="eof", timeout=timeout,
                expect=Outcome(tuple(replies), END_EOF))


def close(conn: str, label: str = "") -> Step:
    """Close ``conn`` (client side, full close)."""
    return Step(conn, "close", label or f"close {conn}")


def shutwr(conn: str, label: str = "") -> Step:
    """shutdown(SHUT_WR) on ``conn``: the server sees EOF, the client can still read."""
    return Step(conn, "shutwr", label or f"shutwr {conn}")


def sleep(seconds: float, label: str = "") -> Step:
    """Sleep ``seconds`` on the client side."""
    return Step("", "sleep", label or f"sleep {seconds:g}s", seconds=seconds)


def signal(signum: int = _signal.SIGUSR1, label: str = "") -> Step:
    """Send ``signum`` to the server process (needs server control)."""
    return Step("", "signal", label or f"signal {signum}", signum=signum)


def steps(*items: Step | Iterable[Step]) -> tuple[Step, ...]:
    """Flatten steps and iterables of steps into one tuple; repeated labels of non-reading
    steps get a " #n" suffix."""
    flat: list[Step] = []
    for it in items:
        if isinstance(it, Step):
            flat.append(it)
        else:
            flat.extend(it)
    # Steps that read nothing (sleep, close, ...) often share a default label; number repeats.
    out: list[Step] = []
    seen: dict[str, int] = {}
    for st in flat:
        n = seen.get(st.label, 0) + 1
        seen[st.label] = n
        if n > 1 and st.read == "none":
            st = replace(st, label=f"{st.label} #{n}")
        out.append(st)
    return tuple(out)


def validate_suite(scenarios, check_cases) -> None:
    """Check a suite at import: unique names, each scenario valid, and `check_cases(scenarios)`
    (a list of problem strings, e.g. known differences naming missing steps) empty.
    Raises ValueError."""
    names: set[str] = set()
    for s in scenarios:
        if s.name in names:
            raise ValueError(f"duplicate scenario name {s.name!r}")
        names.add(s.name)
        s.validate()
    problems = check_cases(scenarios)
    if problems:
        raise ValueError("; ".join(problems))


def find_scenario(scenarios, name: str) -> Scenario:
    """The scenario called ``name`` in ``scenarios`` (KeyError if none)."""
    for s in scenarios:
        if s.name == name:
            return s
    raise KeyError(name)


def select_scenarios(scenarios, patterns: list[str] | None) -> list[Scenario]:
    """Scenarios whose name matches any of the glob ``patterns`` (all when None/empty)."""
    import fnmatch
    if not patterns:
        return list(scenarios)
    return [s for s in scenarios if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]

