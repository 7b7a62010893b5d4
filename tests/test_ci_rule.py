"""The CI rule (tests/ci_plugin.py) can fail a run: a planted suite with one skipped test
passes without JOBGATE_CI and fails with it, naming the skip's reason."""
from __future__ import annotations

import os
import subprocess
import sys

from .support import ROOT

PLANTED = '''
import pytest

def test_runs():
    assert True

def test_needs_a_service():
    pytest.skip("the frobnicator service is not running")
'''


def _run(tmp_path, ci: bool):
    (tmp_path / "test_planted.py").write_text(PLANTED)
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("JOBGATE_CI", None)
    if ci:
        env["JOBGATE_CI"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.ci_plugin",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           str(tmp_path / "test_planted.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_skip_is_fine_on_a_developer_machine(tmp_path):
    r = _run(tmp_path, ci=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed, 1 skipped" in r.stdout


def test_a_skip_fails_ci_and_says_why(tmp_path):
    r = _run(tmp_path, ci=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "CI: skipped tests fail the run" in r.stdout
    assert "the frobnicator service is not running" in r.stdout
