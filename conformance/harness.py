"""Glue shared by the suite CLI, the differential and the pytest wrapper: run a scenario on a
fresh server process, run many in parallel, check a run against the recorded expectations,
and print verdicts."""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path
from typing import Callable, Sequence

from .known_differences import host_dependent_mask, normalizers, overrides_for
from .normalize import Verdict, byte_diff, compare
from .scenario import Scenario, ScenarioRun, run_scenario
from .servers import HOST, ServerError, ServerProcess

__all__ = [
    "REPO_ROOT",
    "jobgate_env",
    "run_fresh",
    "run_many",
    "outcomes",
    "expectations",
    "check_expectations",
    "format_verdict",
]

ArgvFor = Callable[[int, tuple[str, ...]], list[str]]

REPO_ROOT = Path(__file__).resolve().parent.parent


def jobgate_env() -> dict:
    """Environment for a jobgate child process: this environment with the repository root
    prepended to PYTHONPATH (the child runs in an empty temporary directory)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_fresh(scenario: Scenario, argv_for: ArgvFor, start_timeout: float = 20.0,
              cwd: str | None = None, env: dict | None = None,
              fresh_cwd: bool = False, probe: bytes | None = b"quit\r\n") -> ScenarioRun:
    """Start a fresh server (``argv_for(port, scenario.flags)``) on a free 127.0.0.1 port,
    play ``scenario`` against it, then SIGKILL and wait for the server. ``start_timeout`` in
    seconds; ``fresh_cwd`` runs the server in a new empty temporary directory; ``probe``: the
    readiness probe's bytes (ServerProcess; beanstalk `quit`, counted nowhere; workq answers it
    with an error, which is as good). Never raises
    for a server that fails to start: the run's ``error`` says why (with its output)."""
    srv = ServerProcess(argv_for, scenario.flags, start_timeout=start_timeout, cwd=cwd, env=env,
                        fresh_cwd=fresh_cwd, probe=probe)
    try:
        srv.start()
    except ServerError as exc:
        return ScenarioRun(scenario.name, error=f"server did not start: {exc}")
    try:
        run = run_scenario(scenario, HOST, srv.port, srv.send_signal)
        if srv.proc is not None and srv.proc.poll() is not None:
            run.server_note = (f"server exited with {srv.proc.returncode} during the scenario; "
                               f"output: {srv.output()[-1500:]!r}")
        return run
    finally:
        srv.stop()


def run_many(scenarios: Sequence[Scenario], fn: Callable[[Scenario], object],
             jobs: int = 4) -> list:
    """``[fn(s) for s in scenarios]`` computed on up to ``jobs`` threads, results in input
    order. Scenarios are independent (own server, own port), so parallel runs are safe."""
    if jobs <= 1:
        return [fn(s) for s in scenarios]
    # Start the longest scenarios first so the pool drains evenly.
    order = sorted(range(len(scenarios)), key=lambda i: -_estimated_seconds(scenarios[i]))
    results: list = [None] * len(scenarios)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(fn, scenarios[i]): i for i in order}
        for fut in concurrent.futures.as_completed(futures):
            results[futures[fut]] = fut.result()
    return results


def _estimated_seconds(s: Scenario) -> float:
    total = 0.0
    for st in s.steps:
        if st.action == "sleep":
            total += st.seconds
        if st.read == "window":
            total += st.timeout
    return total


def outcomes(run: ScenarioRun) -> dict:
    """label -> Outcome (or None) for every record of a run."""
    return {r.label: r.outcome for r in run.records}


def expectations(scenario: Scenario) -> dict:
    """label -> expected Outcome (or None) as recorded in the scenario."""
    return {s.label: s.expect for s in scenario.steps}


def check_expectations(scenario: Scenario, run: ScenarioRun, documented: bool = False) -> Verdict:
    """Compare a run with the scenario's recorded (beanstalkd 1.12) expectations.

    Host-dependent stats values (os, platform) are masked silently. With ``documented`` the
    documented differences of jobgate (D1..D5) are applied too, so jobgate can be checked
    against the same expectations.
    """
    if run.error:
        return Verdict(scenario.name, "ERROR", error=run.error)
    return compare(
        scenario.name,
        [s.label for s in scenario.steps],
        expectations(scenario),
        outcomes(run),
        normalizers=normalizers() if documented else (),
        overrides=overrides_for(scenario.name) if documented else None,
        accept={s.label: s.alternatives for s in scenario.steps if s.alternatives},
        base=[host_dependent_mask, *scenario.masks],
    )


def format_verdict(v: Verdict, expected_name: str = "expected", actual_name: str = "actual",
                   seconds: float | None = None, verbose: bool = False) -> str:
    """Human-readable verdict: one status line, then for a DIFFERENT scenario the first
    differing step with a byte diff (all differing steps with ``verbose``)."""
    t = f" ({seconds:.1f}s)" if seconds is not None else ""
    lines = [f"{v.label():<40} {v.scenario}{t}"]
    if v.status == "ERROR":
        lines.append(f"    error: {v.error}")
    bad = [s for s in v.steps if s.status in ("different", "missing")]
    for s in (bad if verbose else bad[:1]):
        extra = f" (documented expectation {','.join(s.ids)})" if s.ids else ""
        lines.append(f"    first difference at step {s.label!r}{extra}:" if s is bad[0]
                     else f"    difference at step {s.label!r}{extra}:")
        diff = byte_diff(s.expected, s.actual, expected_name, actual_name)
        lines.extend("      " + d for d in diff.splitlines())
    if verbose:
        for s in v.steps:
            if s.status == "documented":
                lines.append(f"    documented {','.join(s.ids)} at step {s.label!r}")
            if s.note:
                lines.append(f"    note at step {s.label!r}: {s.note}")
    return "\n".join(lines)

