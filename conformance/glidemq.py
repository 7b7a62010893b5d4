"""The glide-mq over RESP conformance suite: the 228 steps of the golden transcript
(tests/data/glide-mq-golden.txt = ../shared/reference/glide-mq-golden.txt; Redis 7.0.15 with
glide-mq's function library v93) replayed in order against any host:port, every reply compared
by value *and* RESP type.

Usage::

    python -m conformance.glidemq [--host H] [--port P]      # a running, fresh server (6380)
    python -m conformance.glidemq --jobgate                  # a fresh jobgate (glidemq listener)
    python -m conformance.glidemq --redis --library FILE     # a scratch redis-server
    ... [--library FILE] [--only IDS] [--reference] [-v] [--json FILE] [--list]

``--library FILE``: the text sent for ``<glidemq library source>`` (FUNCTION LOAD in B05..B07).
Redis needs glide-mq's real library: the ``LIBRARY_SOURCE`` template of
``src/functions/index.ts`` (glide-mq 0.15.4) with ``${LIBRARY_VERSION}`` filled as ``93``.
Never commit that text. Without the option the stand-in ``#!lua name=glidemq\\n-- stand-in\\n``
is sent (jobgate never runs the Lua).

``--only IDS``: comma-separated step ids, ranges ``C01-C05`` or section letters ``H``. The steps
build on each other; a partial run on a fresh server can differ where skipped steps would have
written state.

Expectations: the golden, normalised as it was recorded (glidemq_compare: T0 arithmetic, stream
ids and their order, hash-field and set order, SCAN loops, HELLO and INFO wildcards), except at
the steps of glidemq_known_differences (reported KNOWN on a mismatch; checked exactly against
JOBGATE_EXPECTS where the lead wrote jobgate's reply). ``--reference`` expects the golden
everywhere (to check a real Redis). ``--redis`` implies ``--reference``.

Output: one line per step, PASS / FAIL / KNOWN, the differences under a FAIL (and under KNOWN
with -v), then ``N pass, N fail, N known``. Exit status 0 without failures, 1 with, 2 on usage
errors.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time

from .glidemq_golden import STANDIN_LIBRARY, Golden, Step, load
from .glidemq_known_differences import JOBGATE_EXPECTS, KNOWN
from .glidemq_runner import SETUP, Runner, StepResult

__all__ = ["select", "format_result", "summary", "jobgate_glidemq_cmd", "redis_cmd",
           "run_server", "main", "Runner", "StepResult", "SETUP"]

DEFAULT_PORT = 6380
PING = b"*1\r\n$4\r\nPING\r\n"
_RANGE = re.compile(r"^([A-Z]\d\d)-([A-Z]\d\d)$")


def select(golden: Golden, spec: str | None) -> list[Step]:
    """The steps named by ``spec`` (``A01,C01-C05,H``; None = all), in golden order.
    Raises ValueError for an id, range or section the golden does not have."""
    if not spec:
        return list(golden.steps)
    ids = [s.id for s in golden.steps]
    chosen: set[str] = set()
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        m = _RANGE.match(part)
        if m:
            a, b = m.groups()
            if a not in ids or b not in ids or ids.index(a) > ids.index(b):
                raise ValueError(f"bad range {part!r}")
            chosen.update(ids[ids.index(a):ids.index(b) + 1])
        elif part in golden.sections:
            chosen.update(s.id for s in golden.steps if s.section == part)
        elif part in ids:
            chosen.add(part)
        else:
            raise ValueError(f"no step or section {part!r}")
    return [s for s in golden.steps if s.id in chosen]


def format_result(r: StepResult, verbose: bool = False, limit: int = 8) -> str:
    """One line (``STATUS ID title``), then for FAIL (and KNOWN when verbose) the diffs and
    what came back; notes when verbose."""
    head = f"{r.status:<5} {r.id} {r.title}"
    if r.expected == "jobgate":
        head += "  [jobgate's reply]"
    if r.status == "KNOWN":
        head += f"  [{r.reason[:100]}{'...' if len(r.reason) > 100 else ''}]"
    lines = [head]
    if r.status == "FAIL" or (verbose and r.diffs):
        shown = r.diffs if verbose else r.diffs[:limit]
        lines += [f"        {d}" for d in shown]
        if len(r.diffs) > len(shown):
            lines.append(f"        ... {len(r.diffs) - len(shown)} more (-v)")
        lines += [f"        got: {g}" for g in r.got]
    if verbose or r.status == "FAIL":
        lines += [f"        note: {n}" for n in r.notes]
    return "\n".join(lines)


def summary(results: list[StepResult]) -> dict[str, int]:
    """Counts by status: {"pass": n, "fail": n, "known": n}."""
    return {k.lower(): sum(r.status == k for r in results) for k in ("PASS", "FAIL", "KNOWN")}


# ------------------------------------------------------------------------------------------
# servers this CLI can start
# ------------------------------------------------------------------------------------------
def jobgate_glidemq_cmd(port: int, flags: tuple[str, ...] = ()) -> list[str]:
    """argv for jobgate serving only the glidemq dialect on 127.0.0.1:``port``, jobs in a
    SQLite file ``jobgate.db`` in the working directory, durability commit."""
    return [sys.executable, "-m", "gateway.cli", "serve", "--listen",
            f"glidemq=127.0.0.1:{port}", "--database", "sqlite:///jobgate.db",
            "--durability", "commit", "--log-level", "warning", *flags]


def redis_cmd(port: int, flags: tuple[str, ...] = ()) -> list[str]:
    """argv for a scratch redis-server on 127.0.0.1:``port`` (no persistence)."""
    return [shutil.which("redis-server") or "/usr/bin/redis-server", "--port", str(port),
            "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *flags]


def run_server(argv_for, env: dict | None, play) -> tuple[list[StepResult], list[str]]:
    """Start a fresh server (``argv_for(port, ())``, in an empty directory), call
    ``play(port)`` (-> results), stop the server (by PID). Returns (results, notes).
    Raises ServerError when the server does not come up."""
    from .servers import ServerProcess
    notes: list[str] = []
    with ServerProcess(argv_for, (), start_timeout=30.0, env=env, fresh_cwd=True,
                       probe=PING) as srv:
        results = play(srv.port)
        if srv.proc is not None and srv.proc.poll() is not None:
            notes.append(f"server exited with {srv.proc.returncode}: {srv.output()[-1500:]!r}")
    return results, notes


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.glidemq", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--jobgate", action="store_true",
                       help="start a fresh jobgate with a glidemq listener and check it")
    where.add_argument("--redis", action="store_true",
                       help="start a scratch redis-server and check it (needs --library; "
                            "implies --reference)")
    p.add_argument("--host", default="127.0.0.1", help="server to check (127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"its port ({DEFAULT_PORT})")
    p.add_argument("--library", metavar="FILE",
                   help="the library text to FUNCTION LOAD (default: a stand-in)")
    p.add_argument("--only", metavar="IDS", help="e.g. A01,C01-C05,H (state builds on "
                                                 "earlier steps)")
    p.add_argument("--reference", action="store_true",
                   help="expect the golden at the known differences too")
    p.add_argument("--golden", metavar="FILE", help="another golden file (default: "
                                                    "tests/data/glide-mq-golden.txt)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per reply (10)")
    p.add_argument("--json", metavar="FILE", help="write every step's result as JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--list", action="store_true", help="list the steps and exit")
    args = p.parse_args(argv)

    golden = load(args.golden)
    try:
        chosen = select(golden, args.only)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.list:
        for s in chosen:
            mark = (" [known; jobgate's reply given]" if s.id in JOBGATE_EXPECTS else
                    " [known]" if s.id in KNOWN else "")
            print(f"{s.id} {s.connection:<8} RESP{s.proto} {s.title}{mark}")
        return 0
    library = STANDIN_LIBRARY
    if args.library:
        with open(args.library, "rb") as f:
            library = f.read()
    elif args.redis:
        print("--redis needs --library FILE (Redis runs the real Lua)", file=sys.stderr)
        return 2
    reference = args.reference or args.redis

    def make_runner(port: int) -> Runner:
        return Runner(args.host if not (args.jobgate or args.redis) else "127.0.0.1", port,
                      library=library, timeout=args.timeout, reference=reference,
                      golden=golden)

    t = time.monotonic()
    notes: list[str] = []
    if args.jobgate or args.redis:
        from .harness import jobgate_env
        from .servers import ServerError
        try:
            results, notes = run_server(jobgate_glidemq_cmd if args.jobgate else redis_cmd,
                                        jobgate_env() if args.jobgate else None,
                                        lambda port: make_runner(port).run(chosen))
        except ServerError as exc:
            print(f"server did not start: {exc}", file=sys.stderr)
            return 1
        name = "jobgate" if args.jobgate else "redis-server"
    else:
        try:
            results = make_runner(args.port).run(chosen)
        except OSError as exc:
            print(f"cannot talk to {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        name = f"{args.host}:{args.port}"
    for r in results:
        print(format_result(r, args.verbose))
    for n in notes:
        print(f"note: {n}")
    c = summary(results)
    print(f"\n{name}: {c['pass']} pass, {c['fail']} fail, {c['known']} known of {len(results)} "
          f"steps against the {'golden (reference)' if reference else 'jobgate'} "
          f"expectations ({time.monotonic() - t:.1f}s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([r.__dict__ for r in results], f, indent=1)
    return 1 if c["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
