"""The workq conformance suite: every case of the reference transcript
(../shared/reference/workq-golden.txt) grouped into independent scenarios, plus a few extras,
and a CLI that checks one server against them byte for byte.

Usage::

    python -m conformance.workq --jobgate                       # fresh jobgate per scenario
    python -m conformance.workq --jobgate --scenario 'golden-ttr*' -v
    python -m conformance.workq --server-cmd 'workq-server -listen {host}:{port}' --reference
    python -m conformance.workq --host 127.0.0.1 --port 9922 --scenario golden-add-ids
    python -m conformance.workq --list

By default the expectations are jobgate's: the reference's bytes, except at the steps of the
deliberate differences W1..W8 (``workq_known_differences``), where jobgate's bytes are
expected. ``--reference`` expects the reference workq's bytes everywhere, to check a real
workq server. Only timestamps (created / started / time) are masked, and active-clients in the
one scenario where it depends on the harness.

Every scenario needs a fresh server (it reuses the transcript's ids and queue names), so
``--host/--port`` checks exactly one scenario. Exit status: 0 when every selected scenario
matched, 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from dataclasses import replace

from . import (workq_scenarios_add, workq_scenarios_extra, workq_scenarios_inspect,
               workq_scenarios_lease, workq_scenarios_timing)
from .harness import format_verdict, jobgate_env, outcomes, run_fresh, run_many
from .normalize import Verdict, compare
from .scenario import (Scenario, ScenarioRun, find_scenario, run_scenario, select_scenarios,
                       validate_suite)
from .servers import jobgate_workq_cmd, parse_cmd_template
from .workq_known_differences import DIFFERENCES, check_cases_exist, overrides_for
from .workq_scenarios_common import mask_times

__all__ = ["SCENARIOS", "by_name", "select", "for_mode", "check", "run_jobgate", "main"]

SCENARIOS: tuple[Scenario, ...] = (
    workq_scenarios_add.SCENARIOS
    + workq_scenarios_lease.SCENARIOS
    + workq_scenarios_timing.SCENARIOS
    + workq_scenarios_inspect.SCENARIOS
    + workq_scenarios_extra.SCENARIOS
)


validate_suite(SCENARIOS, check_cases_exist)


def by_name(name: str) -> Scenario:
    """The scenario called ``name`` (KeyError if none)."""
    return find_scenario(SCENARIOS, name)


def select(patterns: list[str] | None) -> list[Scenario]:
    """Scenarios whose name matches any of the glob ``patterns`` (all when None/empty)."""
    return select_scenarios(SCENARIOS, patterns)


def differences_in(scenario: Scenario) -> list[str]:
    """Ids of the deliberate differences that have a step in ``scenario``."""
    return [d.id for d in DIFFERENCES if any(c.scenario == scenario.name for c in d.cases)]


def for_mode(scenario: Scenario, reference: bool = False) -> Scenario:
    """The scenario as it must be played: with ``reference`` unchanged; for jobgate, every
    step of a deliberate difference reads as many frames as jobgate's expected reply has
    (e.g. one ``inspect server`` frame where the reference's broken count makes two)."""
    if reference:
        return scenario
    ov = overrides_for(scenario.name)
    if not ov:
        return scenario
    new = tuple(replace(st, count=len(ov[st.label][1].frames))
                if st.label in ov and st.read == "frames" else st for st in scenario.steps)
    return replace(scenario, steps=new)


def check(scenario: Scenario, run: ScenarioRun, reference: bool = False) -> Verdict:
    """Compare a run with the expectations: the reference's bytes, or (default) jobgate's,
    which differ only at the steps of W1..W8. Timestamps and the scenario's own masks are
    masked on both sides."""
    if run.error:
        return Verdict(scenario.name, "ERROR", error=run.error)
    return compare(
        scenario.name,
        [s.label for s in scenario.steps],
        {s.label: s.expect for s in scenario.steps},
        outcomes(run),
        overrides=None if reference else overrides_for(scenario.name),
        accept={s.label: s.alternatives for s in scenario.steps if s.alternatives},
        base=[mask_times, *scenario.masks],
    )


def run_jobgate(scenario: Scenario, reference: bool = False,
                start_timeout: float = 30.0) -> ScenarioRun:
    """Play ``scenario`` (as ``for_mode`` prepares it) against a fresh jobgate: workq
    listener only, a new SQLite file in a new temporary directory, durability commit.
    ``start_timeout`` in seconds."""
    return run_fresh(for_mode(scenario, reference), jobgate_workq_cmd, start_timeout, None,
                     jobgate_env(), True)


def _verdict_text(v: Verdict, run: ScenarioRun, name: str, verbose: bool) -> str:
    text = format_verdict(v, "expected", name, run.seconds, verbose)
    if run.server_note:
        text += f"\n    {run.server_note}"
    return text


def _ok(v: Verdict) -> bool:
    return v.status in ("equal", "equal-after-documented")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m conformance.workq", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--jobgate", action="store_true",
                       help="start a fresh jobgate (workq listener, SQLite) for each scenario")
    where.add_argument("--server-cmd", metavar="TEMPLATE",
                       help="command that starts a fresh server; {host} and {port} are "
                            "substituted (e.g. 'workq-server -listen {host}:{port}')")
    p.add_argument("--host", help="check an already running, fresh server at HOST")
    p.add_argument("--port", type=int, help="port of that server")
    p.add_argument("-s", "--scenario", action="append", metavar="GLOB",
                   help="run only scenarios matching GLOB (repeatable)")
    p.add_argument("--reference", action="store_true",
                   help="expect the reference workq's bytes at the W1..W8 steps too "
                        "(to check a real workq server)")
    p.add_argument("-j", "--jobs", type=int, default=4, help="scenarios run in parallel (4)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every differing step")
    p.add_argument("--list", action="store_true", help="list scenarios and exit")
    args = p.parse_args(argv)

    chosen = select(args.scenario)
    if args.list:
        for s in chosen:
            ws = differences_in(s)
            w = f" [{','.join(ws)}]" if ws else ""
            print(f"{s.name:<30} {s.source:<6} {len(s.steps):>3} steps{w}  {s.doc}")
        return 0
    if not chosen:
        print("no scenario matches", file=sys.stderr)
        return 2
    mode = "reference workq" if args.reference else "jobgate"

    if args.host or args.port:
        if args.jobgate or args.server_cmd:
            print("--host/--port cannot be combined with a server command", file=sys.stderr)
            return 2
        if not (args.host and args.port):
            print("--host and --port go together", file=sys.stderr)
            return 2
        if len(chosen) != 1:
            print("every scenario needs a fresh server (it reuses the transcript's ids and "
                  "queue names): pick one with --scenario NAME, or let the suite start a "
                  "server per scenario with --jobgate or --server-cmd", file=sys.stderr)
            return 2
        s = chosen[0]
        t0 = time.monotonic()
        try:  # the same one-connection readiness check the harness makes
            socket.create_connection((args.host, args.port), timeout=5.0).close()
        except OSError as exc:
            print(f"cannot connect to {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        time.sleep(0.1)
        run = run_scenario(for_mode(s, args.reference), args.host, args.port)
        run.seconds = time.monotonic() - t0
        v = check(s, run, args.reference)
        print(_verdict_text(v, run, f"{args.host}:{args.port}", args.verbose))
        return 0 if _ok(v) else 1

    if not (args.jobgate or args.server_cmd):
        print("say which server to check: --jobgate, --server-cmd TEMPLATE, or --host and "
              "--port (see --help)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    if args.jobgate:
        name = "jobgate"
        runs = run_many(chosen, lambda s: run_jobgate(s, args.reference), jobs=args.jobs)
    else:
        name = "server"
        argv_for = parse_cmd_template(args.server_cmd)
        runs = run_many(chosen, lambda s: run_fresh(for_mode(s, args.reference), argv_for,
                                                    fresh_cwd=True), jobs=args.jobs)
    bad = 0
    for s, run in zip(chosen, runs):
        v = check(s, run, args.reference)
        print(_verdict_text(v, run, name, args.verbose))
        bad += not _ok(v)
    print(f"\n{len(chosen) - bad}/{len(chosen)} scenarios match the {mode} expectations "
          f"({name}, {time.monotonic() - t0:.1f}s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
