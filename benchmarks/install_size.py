"""Size of the environment README's serve command builds (`make serve-env`: .venv-serve),
against issue 18's goal (≤ 80 MB). Standard library only.

    python3 benchmarks/install_size.py [--venv DIR] [--top 15] [--json FILE]

Without --venv it builds a fresh one the Makefile's way into a temporary directory
(`make serve-env SERVE_VENV=...`, ~20 s, pip's configured index) and removes it afterwards;
with --venv it measures that directory as it is (e.g. `.venv-serve`, or `.venv` for the
development environment). Prints the total as `du -s` counts it (allocated blocks, MiB), the
largest entries of site-packages, what the byte-code caches take, and what stripping the debug
information from the native extensions would save (measured with `strip --strip-debug` on
copies, when binutils' strip is there; nothing in the environment is changed). Exit status 1
when the total is over the goal.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL_MIB = 80


def du(path: str) -> int:
    """Bytes allocated under `path` (files and symlinks themselves, as `du -s`)."""
    if not os.path.isdir(path):
        return os.lstat(path).st_blocks * 512
    total = 0
    for d, _, files in os.walk(path):
        total += os.lstat(d).st_blocks * 512
        for f in files:
            total += os.lstat(os.path.join(d, f)).st_blocks * 512
    return total


def stripped_saving(site: str) -> int | None:
    """Bytes `strip --strip-debug` would take off the native extensions under `site`
    (measured on copies), or None without strip."""
    strip = shutil.which("strip")
    if strip is None:
        return None
    saved = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "x.so")
        for so in glob.glob(os.path.join(site, "**", "*.so"), recursive=True):
            shutil.copyfile(so, copy)
            before = os.path.getsize(copy)
            subprocess.run([strip, "--strip-debug", copy], check=True)
            saved += before - os.path.getsize(copy)
    return saved


def measure(venv: str, top: int) -> dict:
    site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
    entries = sorted(((du(p), os.path.basename(p)) for p in glob.glob(os.path.join(site, "*"))),
                     reverse=True)
    pyc = sum(os.lstat(os.path.join(d, f)).st_blocks * 512
              for d, _, fs in os.walk(venv) for f in fs if f.endswith(".pyc"))
    return {"venv": venv, "total": du(venv), "site_packages": du(site), "pyc": pyc,
            "strip_debug_saves": stripped_saving(site),
            "largest": [{"name": n, "bytes": b} for b, n in entries[:top]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", help="measure this environment instead of building one")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    tmp = None
    venv = args.venv
    if venv is None:
        tmp = tempfile.mkdtemp(prefix="jobgate-serve-env-")
        venv = os.path.join(tmp, "venv")
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MAKELEVEL")}
        subprocess.run(["make", "-C", ROOT, "serve-env", f"SERVE_VENV={venv}"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
    try:
        m = measure(os.path.abspath(venv), args.top)
    finally:
        if tmp:
            shutil.rmtree(tmp)
    mib = 2**20
    print(f"{m['venv']}: {m['total'] / mib:.1f} MiB (goal ≤ {GOAL_MIB} MB); site-packages "
          f"{m['site_packages'] / mib:.1f} MiB, of which byte-code caches {m['pyc'] / mib:.1f}")
    if m["strip_debug_saves"] is not None:
        print(f"strip --strip-debug on the native extensions would save "
              f"{m['strip_debug_saves'] / mib:.1f} MiB")
    for e in m["largest"]:
        print(f"  {e['bytes'] / mib:7.1f} MiB  {e['name']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(m, f, indent=1)
    return 0 if m["total"] <= GOAL_MIB * 10**6 else 1


if __name__ == "__main__":
    sys.exit(main())
