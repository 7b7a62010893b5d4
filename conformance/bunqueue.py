"""The bunqueue golden-bytes conformance suite: the 124 steps of the reference transcript
(../shared/reference/bunqueue-golden.json, bunqueue 2.9.5) replayed in order against any
host:port, every reply compared by value *and* MessagePack wire type.

Usage::

    python -m conformance.bunqueue --jobgate                     # two fresh jobgates
    python -m conformance.bunqueue --bunqueue /path/to/npm-dir   # two fresh real bunqueues
    python -m conformance.bunqueue --host H --port P [--auth-token T]
    python -m conformance.bunqueue --host H --port P --auth-port P2 [--auth-token T]
    python -m conformance.bunqueue --list
    ... --golden main|extra|all      (default all: the main file, then the extra one)

Golden files. ``main`` is the 124-step transcript above; ``extra`` is
tests/data/bunqueue-golden-extra.json (issue 16: flows, MoveToWait, PromoteJobs, ChangeDelay,
ClearLogs, stall config, TrimEvents, per-queue Metrics, Prometheus, cron, limits, webhooks,
the five bugs, nil reqId), recorded by ``python -m conformance.bunqueue_record``. With
``--jobgate`` / ``--bunqueue`` the extra steps run on their own fresh server after the main
ones; with ``--host/--port`` the server must be fresh for the one file chosen (``--golden``
main or extra). In the extra file the main file's known differences do not apply; its steps
listed in ``bunqueue_extra_pending.EXTRA_PENDING`` (features still on other branches) are
reported as ``known`` on a mismatch. A step's ``rules`` in the golden file compare a string
by a rule (``prometheus``: line sets, volatile series any non-negative number; see
``bunqueue_compare.prometheus_diffs``).

Servers. The steps share one server and must start from an empty one (Stats and Metrics count
everything). The nine ``AUTH:`` steps need a server that requires a token; they run on their
own connection: to ``--auth-host/--auth-port`` when given (a second server started with the
token), else, with ``--auth-token T`` alone, to the same server -- the suite then sends
``Auth T`` on its main connection first (not a golden step) and plays the AUTH steps on a new
connection. Without either the AUTH steps are reported as skipped. ``--auth-token`` (default
the golden's ``s3cret``) replaces the golden's right token in the requests. ``--jobgate``
starts ``gateway.cli serve --listen bunqueue=...`` twice (the second with a YAML config file
``bunqueue: {auth_tokens: [s3cret]}`` passed with ``--config``); ``--bunqueue NPM_DIR``
starts the real server from an ``npm install bun bunqueue`` directory twice (the second with
``--auth-tokens s3cret``), each with a SQLite file (``--data-path``: the golden file was
recorded that way -- with in-memory storage GetJob on a completed job answers progress 0 and
the in-memory key order instead of step 37's progress 100), and implies ``--reference``.

Expectations. By default jobgate's: the golden reply everywhere, except at the steps of
``bunqueue_known_differences``: out-of-scope steps (cron) are played and a mismatch there is
reported as ``known``, and a deliberate difference (Auth without a token, ListQueues) must
give jobgate's reply. ``--reference`` expects the golden everywhere.

Comparison (``compare_reply``), per reply:

- values equal, and the wire type of every scalar equal to the golden ``types`` (int sizes,
  float64, nil vs undefined, str vs bin); the two steps the golden file recorded without
  types (the pipelined and the split-frame steps) use the type msgpackr gives the golden
  value (``canonical_type``, which reproduces every recorded ``types`` field exactly);
- generated ids and lock tokens: a UUIDv7 string in a golden reply that is not in the step's
  request is a server-generated id; its first appearance binds it to the live string at the
  same place (a job id must be a UUIDv7 too, a token any non-empty string), and from then on
  the live id is expected there, inside error strings, and is substituted into every later
  request (``Context.ids``);
- timestamps: a golden float64 >= 1e12 (ms since the epoch) stands for "a time": the live
  value must be a float64 within [suite start - 5 min, now + 8 days] (DLQ expiry is +7 days);
- volatile statistics (uptime, pushPerSec, pullPerSec, avgLatencyMs, avgProcessingMs,
  memoryUsageMb, sqliteSizeMb, activeConnections, and DLQ attempt ``duration``): any
  non-negative number, written with the type msgpackr gives that number;
- key order: the golden Job object lists its keys in two different orders (GetJob on a
  completed job, step 37, puts priority after data and durable near the end; PULL's 47-key
  Job and GetJobByCustomId's 49-key Job differ in key *set* too), so a Job object (a map with
  id, queue, data and timeline) is compared as a set of keys; every other map's key order is
  stable in the golden file and must match it exactly;
- ``ListQueues.queues`` is compared as a multiset (the reference lists its shards' queues);
- the pipelined step sends its 6 frames in one write and compares the set of replies by
  reqId, plus the rule that the long-poll PULL (p1) is answered last;
- the frame-size step expects the error frame and then EOF.

Exit status: 0 when no step failed (known differences and skipped AUTH steps do not fail),
1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable

from .bunqueue_compare import (Context, check_golden, compare_reply, expected_for,
                               golden_replies, golden_window)
from .bunqueue_known_differences import DIFFERENCES
from .bunqueue_runner import Runner, StepResult
from .bunqueue_extra_pending import EXTRA_PENDING
from .bunqueue_steps import (EXTRA_GOLDEN_STEPS, EXTRA_STEP_NAMES, GOLDEN_PATHS, GOLDEN_TOKEN,
                             STEP_NAMES, STEPS, Step, by_name, golden_path, load_extra_golden,
                             load_golden, steps)
from .bunqueue_wire import MAP16_NOTE

__all__ = [
    "GOLDEN_PATHS", "golden_path", "load_golden", "Step", "steps", "STEPS", "STEP_NAMES",
    "Context", "compare_reply", "expected_for", "StepResult", "Runner", "check_golden",
    "jobgate_bunqueue_cmd", "run_jobgate", "run_reference_npm", "format_result", "main",
    "by_name", "golden_replies", "golden_window", "EXTRA_GOLDEN_STEPS", "EXTRA_STEP_NAMES",
    "EXTRA_PENDING", "load_extra_golden", "run_extra",
]


# --------------------------------------------------------------------------------------------
# servers
# --------------------------------------------------------------------------------------------
def jobgate_bunqueue_cmd(port: int, flags: tuple[str, ...] = ()) -> list[str]:
    """argv for jobgate serving only the bunqueue dialect on 127.0.0.1:``port``, jobs in a
    SQLite file ``jobgate.db`` in the working directory, durability commit."""
    return [sys.executable, "-m", "gateway.cli", "serve", "--listen",
            f"bunqueue=127.0.0.1:{port}", "--database", "sqlite:///jobgate.db",
            "--durability", "commit", "--log-level", "warning", *flags]


def jobgate_auth_config(directory: str, tokens: tuple[str, ...] = (GOLDEN_TOKEN,)) -> str:
    """Write ``bunqueue: {auth_tokens: [...]}`` as YAML into ``directory``; returns the path."""
    path = os.path.join(directory, "bunqueue-auth.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("bunqueue:\n  auth_tokens: [" + ", ".join(tokens) + "]\n")
    return path


def _two_servers(argv_for, auth_flags: tuple[str, ...], env: dict | None,
                 reference: bool, timeout: float, selected: list[Step] | None,
                 start_timeout: float) -> tuple[list[StepResult], list[str]]:
    from .servers import HOST, ServerProcess
    main = ServerProcess(argv_for, (), start_timeout=start_timeout, env=env, fresh_cwd=True)
    auth = ServerProcess(argv_for, auth_flags, start_timeout=start_timeout, env=env,
                         fresh_cwd=True)
    notes: list[str] = []
    with main, auth:
        results = Runner(HOST, main.port, auth_port=auth.port, reference=reference,
                         timeout=timeout).run(selected)
        for srv, what in ((main, "server"), (auth, "auth server")):
            if srv.proc is not None and srv.proc.poll() is not None:
                notes.append(f"{what} exited with {srv.proc.returncode}: "
                             f"{srv.output()[-1500:]!r}")
    return results, notes


def run_extra(argv_for, env: dict | None, reference: bool, timeout: float,
              selected: list[Step] | None, start_timeout: float
              ) -> tuple[list[StepResult], list[str]]:
    """The extra golden steps against one fresh server (``argv_for(port, ())``)."""
    from .servers import HOST, ServerProcess
    notes: list[str] = []
    srv = ServerProcess(argv_for, (), start_timeout=start_timeout, env=env, fresh_cwd=True)
    with srv:
        results = Runner(HOST, srv.port, reference=reference, timeout=timeout,
                         steps=EXTRA_GOLDEN_STEPS, golden="extra",
                         pending=EXTRA_PENDING).run(selected)
        if srv.proc is not None and srv.proc.poll() is not None:
            notes.append(f"extra-golden server exited with {srv.proc.returncode}: "
                         f"{srv.output()[-1500:]!r}")
    return results, notes


def _both(run_main, run_more, selected: list[Step] | None
          ) -> tuple[list[StepResult], list[str]]:
    """Main steps (when any is selected), then extra steps (likewise), each on fresh servers."""
    results: list[StepResult] = []
    notes: list[str] = []
    chosen = selected if selected is not None else [*STEPS, *EXTRA_GOLDEN_STEPS]
    main_sel = [s for s in chosen if s in STEPS]
    extra_sel = [s for s in chosen if s in EXTRA_GOLDEN_STEPS]
    if main_sel:
        r, n = run_main(main_sel)
        results += r
        notes += n
    if extra_sel:
        r, n = run_more(extra_sel)
        results += r
        notes += n
    return results, notes


def run_jobgate(reference: bool = False, timeout: float = 10.0,
                selected: list[Step] | None = None,
                start_timeout: float = 30.0) -> tuple[list[StepResult], list[str]]:
    """The suite against two fresh jobgates (bunqueue listener only, SQLite, durability
    commit): the second started with ``--config`` naming a YAML file with
    ``bunqueue: {auth_tokens: [s3cret]}`` for the AUTH steps. Returns (results, notes)."""
    from .harness import jobgate_env
    with tempfile.TemporaryDirectory(prefix="bunqueue-conf-") as tmp:
        cfg = jobgate_auth_config(tmp)
        return _both(
            lambda sel: _two_servers(jobgate_bunqueue_cmd, ("--config", cfg), jobgate_env(),
                                     reference, timeout, sel, start_timeout),
            lambda sel: run_extra(jobgate_bunqueue_cmd, jobgate_env(), reference, timeout,
                                  sel, start_timeout),
            selected)


def reference_cmd(npm_dir: str) -> Callable[[int, tuple[str, ...]], list[str]]:
    """argv builder for the real bunqueue server from an ``npm install bun bunqueue``
    directory: SQLite storage in ``bunqueue.db`` in the working directory (the golden file was
    recorded with a SQLite file: a completed job read back from it has progress 100 and the
    row's key order, step 37; in-memory storage answers progress 0), TCP on 127.0.0.1:port,
    HTTP on another free port."""
    from .servers import free_port
    npm_dir = os.path.abspath(npm_dir)        # the server runs in a fresh directory
    bun = os.path.join(npm_dir, "node_modules", ".bin", "bun")
    cli = os.path.join(npm_dir, "node_modules", "bunqueue", "dist", "cli", "index.js")

    def build(port: int, flags: tuple[str, ...] = ()) -> list[str]:
        return [bun, cli, "start", "--host", "127.0.0.1", "--tcp-port", str(port),
                "--http-port", str(free_port()), "--data-path", "bunqueue.db", *flags]
    return build


def run_reference_npm(npm_dir: str, timeout: float = 10.0,
                      selected: list[Step] | None = None,
                      start_timeout: float = 30.0) -> tuple[list[StepResult], list[str]]:
    """The suite (reference expectations) against two fresh real bunqueue servers, the
    second with ``--auth-tokens s3cret``, and the extra steps against a third."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTH_TOKENS", "DATA_PATH", "BUNQUEUE_DATA_PATH", "BQ_DATA_PATH",
                        "SQLITE_PATH", "TCP_PORT", "HTTP_PORT")}
    return _both(
        lambda sel: _two_servers(reference_cmd(npm_dir), ("--auth-tokens", GOLDEN_TOKEN), env,
                                 True, timeout, sel, start_timeout),
        lambda sel: run_extra(reference_cmd(npm_dir), env, True, timeout, sel, start_timeout),
        selected)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def format_result(r: StepResult, verbose: bool = False) -> str:
    where = "" if r.golden == "main" else "x"
    head = f"{r.status:<7} {where}{r.index:>3} {r.name}"
    if r.status == "known" or (r.status == "skipped" and r.reason):
        head += f"  [{r.reason}]"
    lines = [head]
    shown = r.diffs if verbose else r.diffs[:3]
    lines += [f"        {d}" for d in shown]
    if len(r.diffs) > len(shown):
        lines.append(f"        ... {len(r.diffs) - len(shown)} more (-v)")
    if verbose or r.status == "FAIL":
        lines += [f"        note: {n}" for n in r.notes]
    if verbose and r.status == "FAIL":
        lines.append(f"        sent: {_clip(r.sent)}")
        lines.append(f"        got:  {_clip(r.got)}")
    return "\n".join(lines)


def _clip(v: Any, n: int = 600) -> str:
    t = json.dumps(v, default=repr)
    return t if len(t) <= n else t[:n] + "..."


def select(patterns: list[str] | None, golden: str = "all") -> list[Step]:
    """Steps of the chosen golden file(s) (main | extra | all) whose name matches a glob."""
    pool = {"main": list(STEPS), "extra": list(EXTRA_GOLDEN_STEPS),
            "all": [*STEPS, *EXTRA_GOLDEN_STEPS]}[golden]
    if not patterns:
        return pool
    return [s for s in pool if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.bunqueue", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--jobgate", action="store_true",
                       help="start two fresh jobgates (the second with auth token s3cret)")
    where.add_argument("--bunqueue", metavar="NPM_DIR",
                       help="start two fresh real bunqueue servers from NPM_DIR "
                            "(npm install bun bunqueue); implies --reference")
    p.add_argument("--host", help="check a running, fresh server at HOST")
    p.add_argument("--port", type=int, help="its bunqueue TCP port")
    p.add_argument("--auth-token", metavar="T",
                   help="the right auth token; without --auth-port the server at --port "
                        "requires it (the main connection authenticates first)")
    p.add_argument("--auth-host", help="host of a second server with an auth token")
    p.add_argument("--auth-port", type=int, help="port of that server (AUTH steps go there)")
    p.add_argument("--reference", action="store_true",
                   help="expect the golden replies at the known differences too")
    p.add_argument("--strict-map16", action="store_true",
                   help="also require every map to be written as map16, as msgpackr does ("
                        + MAP16_NOTE.replace("%", "%%") + ")")
    p.add_argument("-s", "--step", action="append", metavar="GLOB",
                   help="play only steps matching GLOB (repeatable; state builds on earlier "
                        "steps, so a partial run can differ)")
    p.add_argument("--golden", choices=("main", "extra", "all"), default="all",
                   help="golden file(s) to play: main (124 steps), extra (issue 16, "
                        "tests/data/bunqueue-golden-extra.json) or all (default; with "
                        "--host/--port give main or extra)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per reply (10)")
    p.add_argument("--json", metavar="FILE", help="write every step's result as JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--list", action="store_true", help="list the steps and exit")
    args = p.parse_args(argv)

    chosen = select(args.step, args.golden)
    if args.list:
        for s in chosen:
            extra = s in EXTRA_GOLDEN_STEPS
            k = (" [pending]" if extra and s.name in EXTRA_PENDING else
                 " [known difference]" if not extra and s.name in DIFFERENCES else "")
            print(f"{'x' if extra else ''}{s.index:>3} {s.kind:<9} {s.name}{k}")
        return 0
    if not chosen:
        print("no step matches", file=sys.stderr)
        return 2
    notes: list[str] = []
    t0 = time.monotonic()
    if args.host or args.port:
        if args.jobgate or args.bunqueue:
            print("--host/--port cannot be combined with --jobgate/--bunqueue", file=sys.stderr)
            return 2
        if not (args.host and args.port):
            print("--host and --port go together", file=sys.stderr)
            return 2
        if args.golden == "all":
            print("with --host/--port choose one golden file: --golden main or --golden extra "
                  "(each needs a fresh server)", file=sys.stderr)
            return 2
        extra = args.golden == "extra"
        runner = Runner(args.host, args.port, auth_host=args.auth_host,
                        auth_port=args.auth_port, auth_token=args.auth_token,
                        reference=args.reference, timeout=args.timeout,
                        strict_map16=args.strict_map16,
                        steps=EXTRA_GOLDEN_STEPS if extra else None,
                        golden="extra" if extra else "main",
                        pending=EXTRA_PENDING if extra else None)
        try:
            results = runner.run(chosen)
        except OSError as exc:
            print(f"cannot talk to {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        name = f"{args.host}:{args.port}"
    elif args.jobgate:
        results, notes = run_jobgate(args.reference, args.timeout, chosen)
        name = "jobgate"
    elif args.bunqueue:
        results, notes = run_reference_npm(args.bunqueue, args.timeout, chosen)
        args.reference = True
        name = "bunqueue"
    else:
        print("say which server to check: --jobgate, --bunqueue NPM_DIR, or --host and --port",
              file=sys.stderr)
        return 2
    for r in results:
        if args.verbose or r.status != "pass":
            print(format_result(r, args.verbose))
    for n in notes:
        print(f"note: {n}")
    counts = {k: sum(r.status == k for r in results) for k in ("pass", "FAIL", "known",
                                                               "skipped")}
    mode = "golden (reference)" if args.reference else "jobgate"
    nmaps = sum(len(r.map_headers) for r in results)
    non16 = sum(h != "map16" for r in results for h in r.map_headers)
    print(f"\n{name}: {counts['pass']} pass, {counts['FAIL']} FAIL, {counts['known']} known, "
          f"{counts['skipped']} skipped of {len(results)} steps against the {mode} "
          f"expectations ({time.monotonic() - t0:.1f}s); maps: {nmaps - non16}/{nmaps} map16"
          f"{'' if args.strict_map16 else ' (not required, see --strict-map16)'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([r.__dict__ for r in results], f, indent=1, default=repr)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
