"""Differential conformance: every beanstalk scenario against the real beanstalkd and against
jobgate, each on a fresh server process, replies compared byte for byte.

Only volatile stats values are masked (pid, uptime, rusage-*, hostname, id; age, time-left;
pause-time-left). Everything else must be equal, except the documented differences in
``known_differences`` (D1..D5), applied as explicit normalizations or per-step expectations.

Usage::

    python -m conformance.differential                      # beanstalkd vs jobgate
    python -m conformance.differential -s 'golden-*' -v     # some scenarios, every diff
    python -m conformance.differential --jobgate-cmd 'python -m gateway.beanstalkd_cli -l {host} -p {port} {flags}'
    python -m conformance.differential --only-reference     # beanstalkd vs recorded expectations

Per scenario it prints ``equal``, ``equal-after-documented(Dn,..)`` or ``DIFFERENT`` (with a
byte diff of the first differing step). Exit status 1 if any scenario is DIFFERENT or could
not run, else 0.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from dataclasses import dataclass

from .beanstalk import select
from .harness import (REPO_ROOT, check_expectations, format_verdict, jobgate_env, outcomes,
                      run_fresh, run_many)
from .known_differences import DIFFERENCES, mask_host_dependent, normalizers, overrides_for
from .normalize import Verdict, compare
from .scenario import Scenario, ScenarioRun
from .servers import BEANSTALKD, beanstalkd_cmd, jobgate_cmd, parse_cmd_template

__all__ = ["Result", "compare_runs", "run_differential", "report", "main", "REPO_ROOT"]

@dataclass
class Result:
    """One scenario of the differential.

    ``verdict``: candidate (jobgate) vs reference run. ``reference_check``: the reference run
    vs the scenario's recorded expectations (a warning when it is not equal: the reference
    behaved unlike its recording). ``reference``/``candidate``: the raw runs.
    """

    scenario: Scenario
    verdict: Verdict
    reference_check: Verdict
    reference: ScenarioRun
    candidate: ScenarioRun

    @property
    def ok(self) -> bool:
        """True when jobgate showed no undocumented difference in this scenario."""
        return self.verdict.status in ("equal", "equal-after-documented")


def compare_runs(scenario: Scenario, reference: ScenarioRun, candidate: ScenarioRun) -> Verdict:
    """Compare a candidate run with a reference run of the same scenario.

    At each step the candidate must equal the reference run (after masking), or an outcome
    recorded in the scenario for the reference server (its expectation and known
    alternatives), or, where a documented difference gives a per-step expectation, exactly
    that expectation. D1/D5 normalizations apply everywhere.
    """
    if reference.error or candidate.error:
        err = "; ".join(x for x in (
            f"reference: {reference.error}" if reference.error else "",
            f"candidate: {candidate.error}" if candidate.error else "") if x)
        return Verdict(scenario.name, "ERROR", error=err)
    accept = {s.label: (s.expect,) + s.alternatives for s in scenario.steps
              if s.expect is not None}
    return compare(
        scenario.name,
        [s.label for s in scenario.steps],
        outcomes(reference),
        outcomes(candidate),
        normalizers=normalizers(),
        overrides=overrides_for(scenario.name),
        accept=accept,
        recorded_base=[mask_host_dependent],
    )


def run_differential(scenarios: list[Scenario], reference_cmd, candidate_cmd, jobs: int = 4,
                     start_timeout: float = 30.0) -> list[Result]:
    """Run each scenario on a fresh reference server and a fresh candidate server (the two
    concurrently), up to ``jobs`` scenarios at a time; results in scenario order.
    ``reference_cmd``/``candidate_cmd``: ``(port, flags) -> argv``. The candidate runs in an
    empty temporary directory with the repository on PYTHONPATH."""
    env = jobgate_env()

    def one(s: Scenario) -> Result:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            fr = pool.submit(run_fresh, s, reference_cmd, start_timeout)
            fc = pool.submit(run_fresh, s, candidate_cmd, start_timeout, None, env, True)
            ref, cand = fr.result(), fc.result()
        return Result(s, compare_runs(s, ref, cand), check_expectations(s, ref), ref, cand)

    return run_many(scenarios, one, jobs=jobs)


def report(results: list[Result], verbose: bool = False, out=sys.stdout) -> int:
    """Print one line per scenario (plus diffs) and a summary; returns the number of
    scenarios that are DIFFERENT or could not run."""
    bad = 0
    used: set[str] = set()
    for r in results:
        print(format_verdict(r.verdict, "beanstalkd", "jobgate", r.candidate.seconds, verbose),
              file=out)
        if r.candidate.server_note:
            print(f"    jobgate: {r.candidate.server_note}", file=out)
        if r.reference_check.status not in ("equal", "equal-after-documented"):
            first = r.reference_check.first_difference
            where = f" at step {first.label!r}" if first else ""
            print(f"    warning: the beanstalkd run deviated from the recorded expectation{where}"
                  f" ({r.reference_check.error or 'see --only-reference -v'})", file=out)
        if not r.ok:
            bad += 1
        used.update(r.verdict.ids)
    n = len(results)
    print(f"\n{n - bad}/{n} scenarios equal or equal after documented differences; "
          f"{bad} DIFFERENT/ERROR", file=out)
    for d in DIFFERENCES:
        if d.id in used:
            print(f"  {d.id}: {d.title}", file=out)
    return bad


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m conformance.differential", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--beanstalkd", default=BEANSTALKD, metavar="PATH",
                   help=f"reference server binary ({BEANSTALKD})")
    p.add_argument("--jobgate-cmd", metavar="TEMPLATE",
                   help="command that starts jobgate; {port}, {host} and {flags} are "
                        "substituted (default: python -m gateway.beanstalkd_cli -l HOST -p PORT "
                        "FLAGS)")
    p.add_argument("-s", "--scenario", action="append", metavar="GLOB",
                   help="run only scenarios matching GLOB (repeatable)")
    p.add_argument("-j", "--jobs", type=int, default=4, help="scenarios run in parallel (4)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every differing step")
    p.add_argument("--only-reference", action="store_true",
                   help="run the suite against beanstalkd alone and check it against the "
                        "expectations recorded in the scenarios")
    args = p.parse_args(argv)

    chosen = select(args.scenario)
    if not chosen:
        print("no scenario matches", file=sys.stderr)
        return 2

    def ref_cmd(port: int, flags: tuple[str, ...]) -> list[str]:
        return beanstalkd_cmd(port, flags, args.beanstalkd)

    t0 = time.monotonic()
    if args.only_reference:
        runs = run_many(chosen, lambda s: run_fresh(s, ref_cmd), jobs=args.jobs)
        bad = 0
        for s, run in zip(chosen, runs):
            v = check_expectations(s, run)
            print(format_verdict(v, "expected", "beanstalkd", run.seconds, args.verbose))
            bad += v.status not in ("equal", "equal-after-documented")
        print(f"\n{len(chosen) - bad}/{len(chosen)} scenarios: beanstalkd matches the recorded "
              f"expectations ({time.monotonic() - t0:.1f}s)")
        return 1 if bad else 0

    cand_cmd = parse_cmd_template(args.jobgate_cmd) if args.jobgate_cmd else jobgate_cmd
    results = run_differential(chosen, ref_cmd, cand_cmd, jobs=args.jobs)
    bad = report(results, args.verbose)
    print(f"({time.monotonic() - t0:.1f}s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
