"""The environment README's serve command builds (`make serve` -> `make serve-env`, Makefile):
jobgate installed as an operator would (`pip install .`, not editable) with its run-time
dependencies only. Built here from this checkout into a fresh temporary directory, the README
way (the Makefile's own target, SERVE_VENV pointed there; pip reads the same index as for
`make test`); ~20 s.

It holds no PySpark, no test tools or test clients, no pip; `jobgate --version` answers from
the installed metadata; `jobgate serve` run from it (outside the checkout, nothing on
PYTHONPATH) says READY=1 on `$NOTIFY_SOCKET`, answers beanstalk and RESP, stores its jobs in
SQLite (the migrations are in the distribution) and stops on SIGTERM to its PID. Its size is
recorded, not asserted (the goal, ≤ 80 MB, is measured by benchmarks/install_size.py and
written in docs/operations.md, "Install").
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import tomllib

import pytest

from .support import ROOT, Raw, free_port, stop_process

HOST = "127.0.0.1"

#: what the serve environment must not have: the pipeline extra, the test extra (tools and
#: the clients the tests drive), PostgreSQL's driver (the `postgres` extra), the installer
ABSENT = ("pyspark", "pyarrow", "matplotlib", "pytest", "hypothesis", "greenstalk", "pystalk",
          "redis", "glide", "psycopg", "pip", "setuptools")
#: what `jobgate serve` imports at run time (pyproject.toml's base dependencies)
PRESENT = ("anyio", "uvloop", "sqlalchemy", "alembic", "yaml", "msgpack", "httpx", "croniter",
           "hiredis", "prometheus_client", "core.api", "gateway.server", "protocols.resp",
           "migrations")


def _clean_env(**extra) -> dict:
    """This environment without what would point a child at the checkout or the test
    environment (PYTHONPATH, VIRTUAL_ENV) or at the outer make (MAKEFLAGS)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS",
                        "MAKELEVEL", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    env.update(extra)
    return env


def _pyproject_version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


def _du_bytes(path: str) -> int:
    """Disk usage of `path` as `du -s` counts it (allocated blocks), in bytes."""
    total = 0
    for d, _, files in os.walk(path):
        total += os.lstat(d).st_blocks * 512
        for f in files:
            st = os.lstat(os.path.join(d, f))
            total += st.st_blocks * 512
    return total


#: what the copy of the checkout that `make serve-env` builds from leaves out
_NOT_COPIED = shutil.ignore_patterns(".git", ".venv*", "__pycache__", "build", "*.egg-info",
                                     "node_modules", ".hypothesis", ".pytest_cache", ".build",
                                     "*.db", "*.db-*")


@pytest.fixture(scope="module")
def serve_env(tmp_path_factory):
    """(venv path, a work directory outside the checkout) after `make serve-env`, run in a
    copy of the checkout: in the checkout itself, pip's build walks a tree whose
    __pycache__ files other test workers write meanwhile (`make test` runs in parallel: a
    file gone between the walk and the copy failed the build in CI)."""
    if shutil.which("make") is None:
        pytest.skip("`make` is not installed (README's commands need it)")
    base = tmp_path_factory.mktemp("serve-env")
    venv = str(base / "venv")
    src = str(base / "src")
    shutil.copytree(ROOT, src, ignore=_NOT_COPIED, symlinks=True)
    r = subprocess.run(["make", "-C", src, "serve-env", f"SERVE_VENV={venv}"],
                       env=_clean_env(), capture_output=True, timeout=900)
    assert r.returncode == 0, (r.stdout.decode(errors="replace")[-3000:]
                               + r.stderr.decode(errors="replace")[-3000:])
    work = base / "work"
    work.mkdir()
    return venv, str(work)


def _py(venv: str, work: str, code: str) -> subprocess.CompletedProcess:
    # -I: isolated (no PYTHONPATH, no user site, not the current directory)
    return subprocess.run([os.path.join(venv, "bin", "python"), "-I", "-c", code], cwd=work,
                          env=_clean_env(), capture_output=True, timeout=60)


def test_serve_env_has_the_server_and_nothing_else(serve_env, record_property):
    venv, work = serve_env
    probe = "import importlib.util as u\nfor n in %r: print(n, u.find_spec(n) is not None)\n"
    r = _py(venv, work, probe % (ABSENT + PRESENT,))
    assert r.returncode == 0, r.stderr
    found = dict(line.split() for line in r.stdout.decode().splitlines())
    assert [n for n in ABSENT if found[n] == "True"] == []
    assert [n for n in PRESENT if found[n] == "False"] == []
    # the code is the installed copy, not this checkout
    r = _py(venv, work, "import gateway, core; print(gateway.__file__); print(core.__file__)")
    assert r.returncode == 0, r.stderr
    for path in r.stdout.decode().split():
        assert path.startswith(os.path.join(venv, "lib")), path
    # the licence travels with the distribution (pyproject: license-files)
    r = _py(venv, work, "from importlib import metadata as m; d = m.distribution('jobgate'); "
                        "print(d.metadata['License-Expression']); "
                        "print(d.read_text('licenses/LICENSE').splitlines()[0])")
    assert r.stdout.decode().splitlines() == ["MIT", "MIT License"], r
    size = _du_bytes(venv)
    record_property("serve_env_mb", round(size / 2**20, 1))
    print(f"serve environment: {size / 2**20:.1f} MiB")


def test_serve_env_version_flags_from_metadata(serve_env):
    venv, work = serve_env
    want = _pyproject_version()
    r = subprocess.run([os.path.join(venv, "bin", "jobgate"), "--version"], cwd=work,
                       env=_clean_env(), capture_output=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, f"jobgate {want}\n".encode()), r.stderr
    r = subprocess.run([os.path.join(venv, "bin", "jobgate-beanstalkd"), "-v"], cwd=work,
                       env=_clean_env(), capture_output=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, f"beanstalkd 1.12 (jobgate {want})\n".encode())
    # the pipeline's commands say which extra they need, not a traceback
    r = subprocess.run([os.path.join(venv, "bin", "jobgate"), "analyze", "--out", "report"],
                       cwd=work, env=_clean_env(), capture_output=True, timeout=60)
    assert r.returncode == 2 and b"jobgate[pipeline]" in r.stderr, r.stderr


def test_serve_env_runs_the_server(serve_env):
    venv, work = serve_env
    bport, rport = free_port(), free_port()
    db = os.path.join(work, "jobgate.db")
    manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify = os.path.join(work, "notify")
    manager.bind(notify)
    manager.settimeout(30)
    proc = subprocess.Popen(
        [os.path.join(venv, "bin", "jobgate"), "serve", "--listen", f"beanstalk={HOST}:{bport}",
         "--listen", f"glidemq={HOST}:{rport}", "--database", f"sqlite:///{db}",
         "--log-level", "warning"],
        cwd=work, env=_clean_env(NOTIFY_SOCKET=notify), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        while b"READY=1" not in manager.recv(4096).split(b"\n"):
            pass
        r = Raw(bport)
        stats = r.cmd(b"stats\r\n")
        assert stats.startswith(b"OK ") and b'\nversion: "1.12"\n' in stats, stats
        assert r.cmd(b"put 0 0 60 7\r\ninstall\r\n") == b"INSERTED 1\r\n"
        assert r.cmd(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 7\r\ninstall\r\n"
        assert r.cmd(b"release 1 0 0\r\n") == b"RELEASED\r\n"
        r.close()
        with socket.create_connection((HOST, rport), timeout=10) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            assert s.recv(64) == b"+PONG\r\n"
    finally:
        out, err = stop_process(proc, 20, signal.SIGTERM)    # by its PID
        manager.close()
    assert proc.returncode == 0, err
    assert b"Traceback" not in err, err
    with sqlite3.connect(db) as c:    # migrated by the installed Alembic scripts
        assert c.execute("select count(*) from jobs").fetchone() == (1,)
