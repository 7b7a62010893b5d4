"""The CI rule (issue 13): in CI no test may be skipped. A test skips only when an optional
service or tool is missing on a developer's machine (PostgreSQL, Bun and the bunqueue package,
beanstalkd, the golden transcripts); CI installs and starts all of them, so a skip there means
an install step is missing. With JOBGATE_CI=1 (set by .ci/run) every skip fails the run, and its
reason is printed. tests/conftest.py imports these hooks; test_ci_rule.py checks them.
"""
from __future__ import annotations

import os

import pytest


def _ci() -> bool:
    return os.environ.get("JOBGATE_CI") == "1"


def _skips(config) -> list:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    return list(tr.stats.get("skipped", [])) if tr is not None else []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _ci():
        return
    skips = _skips(config)
    if skips:
        terminalreporter.section("CI: skipped tests fail the run", red=True)
        for rep in skips:
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
            terminalreporter.write_line(f"SKIPPED {rep.nodeid}: {reason}")


def pytest_sessionfinish(session, exitstatus):
    if _ci() and _skips(session.config) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
