"""The beanstalk conformance suite: every scenario, and a CLI that checks a server against the
expectations recorded from beanstalkd 1.12.

Usage::

    # start a fresh server per scenario (the right way to check a whole server):
    python -m conformance.beanstalk --beanstalkd                 # /usr/bin/beanstalkd
    python -m conformance.beanstalk --jobgate                    # jobgate, documented diffs on
    python -m conformance.beanstalk --server-cmd 'mybeanstalk -l {host} -p {port} {flags}'

    # check a server someone else started (must be fresh; one scenario per fresh server):
    python -m conformance.beanstalk --host 127.0.0.1 --port 11300 --scenario golden-happy-path

    python -m conformance.beanstalk --list                        # scenarios and their flags

Exit status: 0 when every selected scenario matched, 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time

from . import (beanstalk_bodies, beanstalk_extra, beanstalk_golden, beanstalk_golden_parsing,
               beanstalk_timing, beanstalk_waiting)
from .harness import check_expectations, format_verdict, jobgate_env, run_fresh, run_many
from .known_differences import check_cases_exist
from .scenario import (Scenario, find_scenario, run_scenario, select_scenarios,
                       validate_suite)
from .servers import BEANSTALKD, beanstalkd_cmd, jobgate_cmd, parse_cmd_template

__all__ = ["SCENARIOS", "by_name", "select", "main"]

SCENARIOS: tuple[Scenario, ...] = (
    beanstalk_golden.SCENARIOS[:1]            # golden-happy-path first
    + beanstalk_golden_parsing.SCENARIOS
    + beanstalk_golden.SCENARIOS[1:]
    + beanstalk_extra.SCENARIOS
    + beanstalk_bodies.SCENARIOS
    + beanstalk_waiting.SCENARIOS
    + beanstalk_timing.SCENARIOS
)


validate_suite(SCENARIOS, check_cases_exist)


def by_name(name: str) -> Scenario:
    """The scenario called ``name`` (KeyError if none)."""
    return find_scenario(SCENARIOS, name)


def select(patterns: list[str] | None) -> list[Scenario]:
    """Scenarios whose name matches any of the glob ``patterns`` (all when None/empty)."""
    return select_scenarios(SCENARIOS, patterns)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m conformance.beanstalk", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--beanstalkd", nargs="?", const=BEANSTALKD, metavar="PATH",
                       help="start the reference beanstalkd for each scenario")
    where.add_argument("--jobgate", action="store_true",
                       help="start jobgate (python -m gateway.beanstalkd_cli) for each scenario; "
                            "implies --documented")
    where.add_argument("--server-cmd", metavar="TEMPLATE",
                       help="command to start a fresh server; {port}, {host} and {flags} "
                            "are substituted")
    p.add_argument("--host", help="check an already running (fresh) server at HOST")
    p.add_argument("--port", type=int, help="port of that server")
    p.add_argument("-s", "--scenario", action="append", metavar="GLOB",
                   help="run only scenarios matching GLOB (repeatable)")
    p.add_argument("--documented", action="store_true",
                   help="apply jobgate's documented differences (D1..D5) to the expectations")
    p.add_argument("-j", "--jobs", type=int, default=4, help="scenarios run in parallel (4)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every differing step")
    p.add_argument("--list", action="store_true", help="list scenarios and exit")
    args = p.parse_args(argv)

    chosen = select(args.scenario)
    if args.list:
        for s in chosen:
            flags = f" [flags: {' '.join(s.flags)}]" if s.flags else ""
            ctl = " [needs server control]" if s.needs_control else ""
            print(f"{s.name:<32} {s.source:<6} {len(s.steps):>3} steps{flags}{ctl}  {s.doc}")
        return 0
    if not chosen:
        print("no scenario matches", file=sys.stderr)
        return 2

    documented = args.documented or args.jobgate
    if args.host or args.port:
        if args.beanstalkd or args.jobgate or args.server_cmd:
            print("--host/--port cannot be combined with a server command", file=sys.stderr)
            return 2
        if not (args.host and args.port):
            print("--host and --port go together", file=sys.stderr)
            return 2
        if len(chosen) != 1:
            print("every scenario needs a fresh server (job ids start at 1, counters at 0): "
                  "pick one with --scenario NAME, or let the suite start a server per scenario "
                  "with --beanstalkd, --jobgate or --server-cmd", file=sys.stderr)
            return 2
        s = chosen[0]
        if s.flags:
            print(f"note: {s.name} expects the server to run with flags: {' '.join(s.flags)}")
        t0 = time.monotonic()
        try:  # the same one-connection readiness check the harness makes (total-connections)
            socket.create_connection((args.host, args.port), timeout=5.0).close()
        except OSError as exc:
            print(f"cannot connect to {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        time.sleep(0.1)
        run = run_scenario(s, args.host, args.port)
        v = check_expectations(s, run, documented)
        print(format_verdict(v, "expected", f"{args.host}:{args.port}",
                             time.monotonic() - t0, args.verbose))
        return 0 if v.status in ("equal", "equal-after-documented") else 1

    if args.jobgate:
        argv_for, name = jobgate_cmd, "jobgate"
    elif args.server_cmd:
        argv_for, name = parse_cmd_template(args.server_cmd), "server"
    else:
        binary = args.beanstalkd or BEANSTALKD
        argv_for, name = (lambda port, flags: beanstalkd_cmd(port, flags, binary)), "beanstalkd"

    t0 = time.monotonic()
    if args.jobgate:
        env = jobgate_env()
        runs = run_many(chosen, lambda s: run_fresh(s, argv_for, 30.0, None, env, True),
                        jobs=args.jobs)
    else:
        runs = run_many(chosen, lambda s: run_fresh(s, argv_for), jobs=args.jobs)
    bad = 0
    for s, run in zip(chosen, runs):
        v = check_expectations(s, run, documented)
        print(format_verdict(v, "expected", name, run.seconds, args.verbose))
        if v.status not in ("equal", "equal-after-documented"):
            bad += 1
    print(f"\n{len(chosen) - bad}/{len(chosen)} scenarios match the recorded expectations "
          f"({name}, {time.monotonic() - t0:.1f}s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
