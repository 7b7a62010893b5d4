"""Beanstalk conformance over real sockets on 127.0.0.1.

(a) The scenario suite against the real beanstalkd 1.12: every scenario must match the replies
    recorded in it (validates the suite itself). Skipped when /usr/bin/beanstalkd is missing.
(b) The differential: every scenario against beanstalkd and against jobgate
    (``python -m gateway.beanstalkd_cli``), each on a fresh server; zero undocumented
    differences allowed. Skipped only while ``gateway.beanstalkd_cli`` cannot be imported.
(c) Self-checks of the suite data and of the comparison (documented differences refer to real
    steps; the golden transcript is fully covered; D1..D4 are recognised on real bytes).

Run: ``.venv/bin/python -m pytest tests/test_conformance_beanstalk.py -v``.
See docs/beanstalk-conformance.md.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests/ has no conftest; make the repo importable
    sys.path.insert(0, str(ROOT))

from conformance import known_differences as kd  # noqa: E402
from conformance.beanstalk import SCENARIOS, by_name  # noqa: E402
from conformance.differential import compare_runs, report, run_differential  # noqa: E402
from conformance.framing import Outcome  # noqa: E402
from conformance.normalize import map_yaml_values  # noqa: E402
from conformance.harness import check_expectations, format_verdict, run_fresh, run_many  # noqa: E402
from conformance.scenario import ScenarioRun, StepRecord  # noqa: E402
from conformance.servers import BEANSTALKD, beanstalkd_cmd, jobgate_cmd  # noqa: E402

GOLDEN = Path(__file__).parent / "data" / "beanstalk-golden-1.12.txt"   # copy of ../shared/reference
JOBS = int(os.environ.get("CONFORMANCE_JOBS", "4"))
NAMES = [s.name for s in SCENARIOS]

needs_beanstalkd = pytest.mark.skipif(
    not os.access(BEANSTALKD, os.X_OK),
    reason=f"{BEANSTALKD} is missing (Debian package 'beanstalkd' 1.12 is the reference)")


def _jobgate_import_error() -> str | None:
    try:
        importlib.import_module("gateway.beanstalkd_cli")
    except Exception as exc:  # ImportError, or the module failing while it loads
        return f"{type(exc).__name__}: {exc}"
    return None


# ---------------------------------------------------------------------------------------
# (a) the suite against the real beanstalkd
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference_runs() -> dict[str, ScenarioRun]:
    """Every scenario played once against a fresh beanstalkd (in parallel)."""
    if not os.access(BEANSTALKD, os.X_OK):
        pytest.skip(f"{BEANSTALKD} is missing")
    runs = run_many(list(SCENARIOS), lambda s: run_fresh(s, beanstalkd_cmd), jobs=JOBS)
    return {r.scenario: r for r in runs}


@needs_beanstalkd
@pytest.mark.parametrize("name", NAMES)
def test_beanstalkd_matches_recorded_expectations(name: str, reference_runs) -> None:
    scenario = by_name(name)
    run = reference_runs[name]
    verdict = check_expectations(scenario, run)
    assert verdict.status == "equal", "\n" + format_verdict(
        verdict, "expected", "beanstalkd", run.seconds, verbose=True)


# ---------------------------------------------------------------------------------------
# (b) the differential against jobgate
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def differential_results():
    """Every scenario against beanstalkd and jobgate (fresh servers each)."""
    if not os.access(BEANSTALKD, os.X_OK):
        pytest.skip(f"{BEANSTALKD} is missing")
    err = _jobgate_import_error()
    if err is not None:
        # Temporary: this skip must disappear once gateway.beanstalkd_cli exists.
        pytest.skip(f"jobgate server not importable ({err})")
    results = run_differential(list(SCENARIOS), beanstalkd_cmd, jobgate_cmd, jobs=JOBS)
    return {r.scenario.name: r for r in results}


@needs_beanstalkd
@pytest.mark.parametrize("name", NAMES)
def test_jobgate_has_no_undocumented_difference(name: str, differential_results) -> None:
    r = differential_results[name]
    if not r.ok:
        import io

        buf = io.StringIO()
        report([r], verbose=True, out=buf)
        pytest.fail("\n" + buf.getvalue(), pytrace=False)


# ---------------------------------------------------------------------------------------
# (c) self-checks
# ---------------------------------------------------------------------------------------


def test_scenarios_are_well_formed() -> None:
    assert len(set(NAMES)) == len(NAMES)
    for s in SCENARIOS:
        s.validate()
        assert s.steps, s.name
    assert kd.check_cases_exist(SCENARIOS) == []
    assert [d.id for d in kd.DIFFERENCES] == ["D1", "D2", "D3", "D4", "D5"]
    for d in kd.DIFFERENCES:
        assert d.reason and (d.normalize is not None) != bool(d.cases), d.id


def test_every_golden_case_is_a_step() -> None:
    labels = {st.label for s in SCENARIOS if s.source == "golden" for st in s.steps}
    titles = [line[4:].strip() for line in GOLDEN.read_text("latin-1").splitlines()
              if line.startswith("### ")]
    assert len(titles) == 188
    assert [t for t in titles if t not in labels] == []


def _as_jobgate(scenario_name: str, run: ScenarioRun) -> ScenarioRun:
    """What jobgate is specified to answer, derived from a real beanstalkd run: string values
    quoted (D1) and the per-step expectations of D2..D4 substituted."""
    overrides = kd.overrides_for(scenario_name)

    def quote(frame: bytes) -> bytes:
        def fn(kind, key, value):
            return b'"' + value + b'"' if key in kd.QUOTED_KEYS[kind] and not value.startswith(b'"') else value
        return map_yaml_values(frame, fn)

    out = ScenarioRun(run.scenario)
    for rec in run.records:
        o = rec.outcome
        if rec.label in overrides:
            o = overrides[rec.label][1]
        if o is not None:
            o = Outcome(tuple(quote(f) for f in o.frames), o.end, o.tail)
        out.records.append(StepRecord(rec.label, rec.conn, rec.sent, o, rec.elapsed))
    return out


@needs_beanstalkd
def test_differential_recognises_documented_differences(reference_runs) -> None:
    """The comparison accepts exactly the documented differences on real bytes: a run
    rewritten to jobgate's specified behaviour is equal-after-documented, and an unrelated
    change is DIFFERENT."""
    seen: set[str] = set()
    for s in SCENARIOS:
        ref = reference_runs[s.name]
        v = compare_runs(s, ref, _as_jobgate(s.name, ref))
        assert v.status in ("equal", "equal-after-documented"), format_verdict(v, verbose=True)
        seen.update(v.ids)
    assert {"D1", "D2", "D3", "D4"} <= seen

    s = by_name("golden-happy-path")
    ref = reference_runs[s.name]
    bad = _as_jobgate(s.name, ref)
    i = next(i for i, r in enumerate(bad.records) if r.label == "put")
    bad.records[i] = StepRecord("put", "A", b"", Outcome((b"INSERTED 2\r\n",), "ok"), 0.0)
    v = compare_runs(s, ref, bad)
    assert v.status == "DIFFERENT" and v.first_difference.label == "put"


def test_jobgate_command_line_shape() -> None:
    argv = jobgate_cmd(11300, ("-z", "10"))
    assert argv[:3] == [sys.executable, "-m", "gateway.beanstalkd_cli"]
    assert argv[3:] == ["-l", "127.0.0.1", "-p", "11300", "-z", "10"]
