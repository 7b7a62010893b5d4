"""Play the glide-mq golden's steps against a host:port and compare (conformance/glidemq.py is
the CLI).

Connections, as the golden was recorded (glide-mq-NOTES.md "How the goldens were made"):
sections A..H share one connection, which starts in RESP2 and turns RESP3 at A01 ``HELLO 3``;
section I opens a second connection (RESP2, until its own HELLO steps); section R uses
redis-py clients (glidemq_pyclient). Each step records the protocol its connection had when the
golden played it (``Step.proto``); when a partial run (``only``) reaches a step on a
connection in another protocol, the runner first sends an unrecorded ``HELLO <proto>`` (noted
on the step). The steps build on each other and need a fresh server: with ``only`` the state
left by skipped steps is missing.

T0 is the runner's start in ms since the epoch; every ``<T0+d>`` is filled with it, in
commands and in expected replies alike.

Unrecorded setup (``SETUP``): H13 says "the id key holds a hash", but no step of the golden
creates ``glide:{probe-edge}:bad:id``; the probe did so outside the transcript. The runner
sends ``HSET glide:{probe-edge}:bad:id x 1`` before H13 (reply noted, not compared).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .glidemq_compare import check_order, compare, compare_scan, render, rules_for
from .glidemq_golden import (STANDIN_LIBRARY, Golden, GoldenFormatError, Node, Step,
                             command_args, load, parse_python_reply, parse_reply, parse_scan,
                             substitute)
from .glidemq_known_differences import JOBGATE_EXPECTS, KNOWN
from .glidemq_pyclient import compare_py, describe, e01_parent, play, render_py
from .glidemq_resp import Connection, ProtocolError

__all__ = ["SETUP", "StepResult", "Runner"]

SETUP: dict[str, list[list[bytes]]] = {
    "H13": [[b"HSET", b"glide:{probe-edge}:bad:id", b"x", b"1"]],
}


@dataclass
class StepResult:
    """One step's outcome. ``status``: PASS, FAIL or KNOWN; ``expected``: ``golden`` or
    ``jobgate`` (JOBGATE_EXPECTS); ``diffs``: the differences found; ``got``: the live replies
    in the golden's notation; ``notes``: unrecorded traffic (HELLO, setup) and the reason of a
    known difference."""
    id: str
    title: str
    status: str
    expected: str = "golden"
    diffs: list[str] = field(default_factory=list)
    got: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reason: str = ""


class Runner:
    """Plays golden steps against ``host:port``.

    ``library``: the bytes sent for ``<glidemq library source>`` (default the stand-in text);
    ``timeout``: seconds per reply; ``reference``: expect the golden everywhere (ignore
    ``known``/``expects``); ``known``/``expects``: the known differences and jobgate's
    replies (glidemq_known_differences); ``t0``: ms since the epoch (default now)."""

    def __init__(self, host: str, port: int, library: bytes = STANDIN_LIBRARY,
                 timeout: float = 10.0, reference: bool = False, golden: Golden | None = None,
                 known: dict[str, str] | None = None,
                 expects: dict[str, list[str]] | None = None, t0: int | None = None) -> None:
        self.host, self.port, self.library, self.timeout = host, port, library, timeout
        self.reference = reference
        self.golden = golden or load()
        self.known = KNOWN if known is None else known
        self.expects = JOBGATE_EXPECTS if expects is None else expects
        self.t0 = t0
        self.conns: dict[str, Connection] = {}
        self.redis: dict[int, Any] = {}
        self.live: dict[str, list[Node]] = {}
        self.pyctx: dict[int, dict] = {}

    # ---------------------------------------------------------------------------- running
    def run(self, steps: list[Step] | None = None) -> list[StepResult]:
        """Play ``steps`` (default all) in order; returns one result per step. Connections are
        closed at the end."""
        if self.t0 is None:
            self.t0 = int(time.time() * 1000)
        try:
            return [self.play(s) for s in (self.golden.steps if steps is None else steps)]
        finally:
            self.close()

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns.clear()
        for r in self.redis.values():
            try:
                r.close()
            except Exception:                   # noqa: BLE001 - closing is best effort
                pass
        self.redis.clear()

    def expected(self, step: Step) -> tuple[list[str], str]:
        """(reply texts, ``golden`` | ``jobgate``) this run expects at ``step``."""
        if not self.reference and step.id in self.expects:
            return self.expects[step.id], "jobgate"
        return step.replies, "golden"

    def play(self, step: Step) -> StepResult:
        """Play one step and judge it."""
        texts, source = self.expected(step)
        res = StepResult(step.id, step.title, "PASS", source)
        try:
            if step.python:
                self._python(step, texts, res)
            else:
                self._resp(step, texts, res, source == "golden")
        except GoldenFormatError as exc:
            res.diffs.append(f"expected reply does not parse: {exc}")
        if res.diffs:
            known = not self.reference and step.id in self.known
            res.status = "KNOWN" if known and source == "golden" else "FAIL"
        if not self.reference and step.id in self.known:
            res.reason = self.known[step.id]
        return res

    # ---------------------------------------------------------------------------- RESP steps
    def _conn(self, name: str) -> Connection:
        if name not in self.conns:
            self.conns[name] = Connection(self.host, self.port, self.timeout)
        return self.conns[name]

    def _resp(self, step: Step, texts: list[str], res: StepResult, golden: bool) -> None:
        t0 = self.t0 or 0
        argvs = [command_args(c, t0, self.library) for c in step.commands]
        if len(texts) != len(argvs):
            res.diffs.append(f"{len(argvs)} commands but {len(texts)} expected replies")
            return
        try:
            conn = self._conn(step.connection)
            if conn.proto != step.proto:
                hello = conn.call(b"HELLO", str(step.proto).encode())
                res.notes.append(f"unrecorded HELLO {step.proto} -> {render(hello, 80)}")
                if hello.kind != "error":
                    conn.proto = step.proto
            for cmd in SETUP.get(step.id, []):
                r = conn.call(*cmd)
                res.notes.append(f"unrecorded setup {b' '.join(cmd).decode()} -> "
                                 f"{render(r, 80)}")
            if step.looped:
                self._scan(conn, argvs[0], texts[0], res)
                return
            conn.send(*argvs)
            lives = [conn.reply() for _ in argvs]
        except (OSError, ProtocolError) as exc:
            res.diffs.append(f"no reply ({type(exc).__name__}: {exc}); connection dropped")
            dropped = self.conns.pop(step.connection, None)
            if dropped is not None:
                dropped.close()
            return
        self.live[step.id] = lives
        res.got = [render(x) for x in lives]
        for i, (argv, text, live) in enumerate(zip(argvs, texts, lives)):
            want = parse_reply(substitute(text, t0))
            d = compare(want, live, rules_for(argv))
            res.diffs += [f"reply {i + 1}: {x}" for x in d] if len(argvs) > 1 else d
            if argv[0].upper() == b"HELLO" and len(argv) > 1 and live.kind != "error":
                conn.proto = int(argv[1])
        if golden and step.order_check:
            res.diffs += check_order(lives[0], step.order_check)

    def _scan(self, conn: Connection, argv: list[bytes], text: str, res: StepResult) -> None:
        """Follow the SCAN cursor from the command's own until the server answers 0."""
        _, want = parse_scan(text)
        keys: list[bytes] = []
        cursor, rounds = argv[1], 0
        while True:
            r = conn.call(*([argv[0], cursor] + argv[2:]))
            v = r.value
            if (r.kind != "array" or len(v) != 2 or v[0].kind != "bulk" or v[1].kind != "array"
                    or any(x.kind != "bulk" for x in v[1].value)):
                res.diffs.append(f"SCAN: expected array[2] [bulk, array[..] of bulk], got "
                                 f"{render(r)}")
                return
            keys += [x.value for x in v[1].value]
            cursor, rounds = v[0].value, rounds + 1
            if cursor == b"0":
                break
            if rounds >= 100000:
                res.diffs.append("SCAN: cursor not back to 0 after 100000 calls")
                return
        res.got = [f"{rounds} SCAN calls -> keys[{len(set(keys))}]"]
        res.diffs += compare_scan(want, keys)

    # ---------------------------------------------------------------------------- R steps
    def _python(self, step: Step, texts: list[str], res: StepResult) -> None:
        desc = describe(step.id)
        if desc != step.commands[0]:
            res.diffs.append(f"the runner has no call for this R step (it plays {desc!r}, "
                             f"the golden says {step.commands[0]!r})")
            return
        proto = int(step.id[1])
        ctx = self.pyctx.setdefault(proto, {"t0": self.t0, "queue": f"pyseed{proto}"})
        e01 = self.live.get("E01")
        ctx["e01"] = e01_parent(e01[0].value if e01 and e01[0].kind == "bulk" else None)
        want_label, want = parse_python_reply(substitute(texts[0], self.t0 or 0))
        label, got = play(step.id, self._redis(proto), ctx)
        res.got = [render_py(label, got)]
        if want_label == "raised" or label == "raised":
            if (label, got) != (want_label, want):
                res.diffs.append(f"expected {render_py(want_label, want)}, "
                                 f"got {render_py(label, got)}")
            return
        res.diffs += compare_py(want, got)

    def _redis(self, proto: int):
        if proto not in self.redis:
            import redis
            self.redis[proto] = redis.Redis(host=self.host, port=self.port, protocol=proto,
                                            decode_responses=True,
                                            socket_timeout=self.timeout,
                                            socket_connect_timeout=self.timeout)
        return self.redis[proto]
