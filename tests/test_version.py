"""`jobgate --version` and `jobgate-beanstalkd -v` from a source tree (gateway/version.py); the
installed distribution's answer is checked in tests/test_install.py."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

from gateway.version import source_tree_version, version

from .support import ROOT


def _pyproject_version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=30)


def test_version_flags_print_the_pyproject_version():
    want = _pyproject_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", want), want
    r = _run("gateway.cli", "--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"jobgate {want}\n".encode(), b"")
    # beanstalkd -v prints `beanstalkd 1.12`; jobgate-beanstalkd says which jobgate it is
    r = _run("gateway.beanstalkd_cli", "-v")
    assert (r.returncode, r.stdout) == (0, f"beanstalkd 1.12 (jobgate {want})\n".encode())
    assert version() == want


def test_source_tree_version_only_from_jobgates_own_pyproject(tmp_path):
    assert source_tree_version(ROOT) == _pyproject_version()
    assert source_tree_version(str(tmp_path)) is None            # no pyproject.toml
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "9.9.9"\n')
    assert source_tree_version(str(tmp_path)) is None            # another project's
    (tmp_path / "pyproject.toml").write_text('[project\nname = "jobgate"\n')
    assert source_tree_version(str(tmp_path)) is None            # not TOML
    (tmp_path / "pyproject.toml").write_bytes(b"\xff\xfe[project]")
    assert source_tree_version(str(tmp_path)) is None            # not UTF-8
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "jobgate"\nversion = 3\n')
    assert source_tree_version(str(tmp_path)) is None            # not a string
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "jobgate"\nversion = "2.0.1"\n')
    assert source_tree_version(str(tmp_path)) == "2.0.1"

