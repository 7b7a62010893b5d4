"""Record the extra bunqueue golden file against the REAL bunqueue 2.9.5 server.

    python -m conformance.bunqueue_record --out tests/data/bunqueue-golden-extra.json
        [--npm-dir tests/bunqueue_client] [--port P]  [--print]

Starts the reference server from an ``npm install bun bunqueue`` directory (default
tests/bunqueue_client, as tests/bunqueue_real.py installs it) with a SQLite file
(``--data-path bunqueue.db`` in a fresh temporary working directory, as the first golden file
was recorded), plays ``conformance.bunqueue_extra_steps.EXTRA_STEPS`` in order on one
connection, and writes the same JSON schema as ../shared/reference/bunqueue-golden.json:
``{"server", "notes", "steps": [{name, request, response, types, note[, rules][, pause_ms]}]}``
where ``types`` mirrors the reply with the MessagePack wire type of every scalar
(conformance/bunqueue_wire.annotate) and values use the golden JSON markers
(``{"$undefined": ...}``, ``{"$bin": hex}``). ``--port P`` records against a server already
running on 127.0.0.1:P instead (it must be fresh). Exit status 0, or 1 when the server could
not be started or a reply did not come.

Each request's ``Ref`` markers are resolved from the recorded replies of earlier steps; the
reqId is ``x<n>`` unless the step sets its own. Replies are matched by reqId (a frame with
another reqId is an error: one step is in flight at a time).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from .bunqueue_client import Client
from .bunqueue_extra_steps import EXTRA_STEPS, ExtraStep, Ref
from .bunqueue_wire import annotate, from_golden, to_golden

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_NPM_DIR = REPO_ROOT / "tests" / "bunqueue_client"
DEFAULT_OUT = REPO_ROOT / "tests" / "data" / "bunqueue-golden-extra.json"
SERVER = "bunqueue 2.9.5 on bun 1.4.5"

NOTES = {
    "how": "python -m conformance.bunqueue_record --out tests/data/bunqueue-golden-extra.json "
           "(real server, --data-path SQLite file, one connection, steps of "
           "conformance/bunqueue_extra_steps.py in order)",
    "ids": "UUIDv7 strings in a reply that are not in its request are server-generated (job "
           "ids, lock tokens, webhook ids): the replay binds them on first appearance and "
           "substitutes them into later requests; the flow job ids are chosen by the client",
    "types_field": "per step, 'types' mirrors the response with the msgpack wire type of "
                   "every scalar",
    "pause_ms": "optional per step: the recorder (and the replay) waited this many ms before "
                "sending it",
    "rules": "optional per step: {json path: rule name}, extra comparison rules "
             "(conformance/bunqueue_compare.py TEXT_RULES)",
}


def _get(value: Any, path: tuple) -> Any:
    for k in path:
        value = value[k]
    return value


def resolve(obj: Any, replies: dict[str, Any]) -> Any:
    """``obj`` with every ``Ref`` replaced by the value it names in ``replies`` (step name ->
    recorded reply, Python form). Raises KeyError for a step not yet recorded or a bad path."""
    if isinstance(obj, Ref):
        if obj.step not in replies:
            raise KeyError(f"Ref to {obj.step!r}, which is not an earlier step")
        return _get(replies[obj.step], obj.path)
    if isinstance(obj, dict):
        return {k: resolve(v, replies) for k, v in obj.items()}
    if isinstance(obj, list):
        return [resolve(v, replies) for v in obj]
    return obj


def request_for(index: int, step: ExtraStep, replies: dict[str, Any]) -> Any:
    """The Python request of step number ``index`` (0-based): Refs resolved, golden markers
    decoded, reqId ``x<index+1>`` added unless the step sets one."""
    req = from_golden(resolve(step.request, replies))
    if isinstance(req, dict) and "reqId" not in req:
        req = dict(req, reqId=f"x{index + 1}")
    return req


def record(host: str, port: int, steps: list[ExtraStep] = EXTRA_STEPS,
           timeout: float = 15.0) -> list[dict]:
    """Play ``steps`` against ``host:port`` and return the golden step dicts."""
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError("extra step names are not unique")
    replies: dict[str, Any] = {}
    out: list[dict] = []
    with Client(host, port, timeout) as conn:
        for i, step in enumerate(steps):
            req = request_for(i, step, replies)
            if step.pause_ms:
                time.sleep(step.pause_ms / 1000)
            conn.send(req)
            ann = annotate(conn.recv_frame())
            want = req.get("reqId") if isinstance(req, dict) else None
            got = ann.value.get("reqId") if isinstance(ann.value, dict) else None
            if want is not None and got != want:
                raise RuntimeError(f"step {step.name!r}: reply reqId {got!r}, sent {want!r}")
            replies[step.name] = ann.value
            entry = {"name": step.name, "request": to_golden(req),
                     "response": to_golden(ann.value), "types": ann.types, "note": step.note}
            if step.rules:
                entry["rules"] = dict(step.rules)
            if step.pause_ms:
                entry["pause_ms"] = step.pause_ms
            out.append(entry)
    return out


def record_reference(npm_dir: str | os.PathLike = DEFAULT_NPM_DIR,
                     steps: list[ExtraStep] = EXTRA_STEPS) -> list[dict]:
    """Start a fresh real bunqueue (SQLite file) from ``npm_dir``, record, stop it."""
    from .bunqueue import reference_cmd
    from .servers import HOST, ServerProcess
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTH_TOKENS", "DATA_PATH", "BUNQUEUE_DATA_PATH", "BQ_DATA_PATH",
                        "SQLITE_PATH", "TCP_PORT", "HTTP_PORT")}
    with ServerProcess(reference_cmd(os.fspath(npm_dir)), (), start_timeout=30.0, env=env,
                       fresh_cwd=True) as srv:
        return record(HOST, srv.port, steps)


def golden_document(steps: list[dict]) -> dict:
    return {"server": SERVER, "notes": NOTES, "steps": steps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.bunqueue_record",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(DEFAULT_OUT), help="golden file to write")
    p.add_argument("--npm-dir", default=str(DEFAULT_NPM_DIR),
                   help="directory with node_modules/bunqueue and node_modules/.bin/bun")
    p.add_argument("--port", type=int, help="record against a fresh server on 127.0.0.1:PORT")
    p.add_argument("--print", action="store_true", help="also print every step")
    args = p.parse_args(argv)
    try:
        if args.port:
            steps = record("127.0.0.1", args.port)
        else:
            steps = record_reference(args.npm_dir)
    except (OSError, RuntimeError, EOFError, socket.timeout) as exc:
        print(f"recording failed: {exc}", file=sys.stderr)
        return 1
    doc = golden_document(steps)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    if args.print:
        for s in steps:
            print(f"{s['name']}\n  > {json.dumps(s['request'])[:300]}\n"
                  f"  < {json.dumps(s['response'])[:600]}")
    print(f"{len(steps)} steps written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
