"""Replaying the bunqueue golden steps against a server (split from conformance/bunqueue.py,
whose docstring states the suite's rules): `Runner` plays every step on real connections and
returns a `StepResult` per step."""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Any

from .bunqueue_client import Client
from .bunqueue_compare import (Context, _same, _show, _strings, compare_reply, expected_for)
from .bunqueue_known_differences import DIFFERENCES, OUT_OF_SCOPE
from .bunqueue_steps import GOLDEN_TOKEN, PIPELINED_LAST, STEPS, Step
from .bunqueue_wire import (MAP16_REQUIRED, UNDEFINED, Annotated, WireError,
                            annotate, to_golden)

@dataclass
class StepResult:
    """What one step did. ``status``: pass | FAIL | known (out-of-scope mismatch) | skipped."""

    name: str
    index: int
    status: str
    golden: str = "main"
    diffs: list[str] = field(default_factory=list)
    sent: Any = None
    got: Any = None
    got_types: Any = None
    map_headers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "known", "skipped")


class _Closed(Exception):
    pass


class Runner:
    """Plays the golden steps in order against ``host:port`` (see the module doc for the AUTH
    steps). ``timeout``: seconds to wait for one reply. ``reference``: expect the golden reply
    at the known differences too. ``steps``: the golden file's steps (default the main file's
    ``STEPS``; the extra file's are ``EXTRA_GOLDEN_STEPS``, ``golden`` then names it in the
    results); ``pending``: {step name: reason} of steps whose mismatch is reported as
    ``known`` rather than ``FAIL`` unless ``reference`` (the extra file's ``EXTRA_PENDING``).
    The known differences (bunqueue_known_differences) apply to both files."""

    def __init__(self, host: str, port: int, *, auth_host: str | None = None,
                 auth_port: int | None = None, auth_token: str | None = None,
                 reference: bool = False, timeout: float = 10.0,
                 strict_map16: bool = MAP16_REQUIRED,
                 steps: tuple[Step, ...] | None = None, golden: str = "main",
                 pending: dict[str, str] | None = None) -> None:
        self.steps = STEPS if steps is None else steps
        self.golden = golden
        self.differences = DIFFERENCES   # step names are unique across the two golden files
        self.tolerated = {n: DIFFERENCES[n] for n in OUT_OF_SCOPE}
        self.tolerated.update(pending or {})
        self.host, self.port = host, port
        self.auth_addr = (auth_host or host, auth_port) if auth_port else None
        self.same_server_token = auth_token if (auth_token and not auth_port) else None
        self.token = auth_token or GOLDEN_TOKEN
        self.reference = reference
        self.timeout = timeout
        self.ctx = Context(strict_map16=strict_map16)
        self.main: Client | None = None
        self.authc: Client | None = None

    # connections -----------------------------------------------------------------------------
    def _main(self, notes: list[str]) -> Client:
        if self.main is None:
            self.main = Client(self.host, self.port, self.timeout)
            if self.same_server_token:
                self.main.send({"cmd": "Auth", "token": self.same_server_token,
                                "reqId": "conformance-auth"})
                r = self.main.recv()
                if not (isinstance(r.value, dict) and r.value.get("ok") is True):
                    notes.append(f"Auth on the main connection failed: {_show(r.value)}")
        return self.main

    def _auth(self) -> Client | None:
        if self.authc is None:
            if self.auth_addr:
                self.authc = Client(self.auth_addr[0], self.auth_addr[1], self.timeout)
            elif self.same_server_token:
                self.authc = Client(self.host, self.port, self.timeout)
        return self.authc

    def close(self) -> None:
        for c in (self.main, self.authc):
            if c is not None:
                c.close()
        self.main = self.authc = None

    # replies ---------------------------------------------------------------------------------
    @staticmethod
    def _reqid(req: Any) -> Any:
        if isinstance(req, dict) and "reqId" in req:
            return req["reqId"]
        return None

    def _reply(self, conn: Client, req_id: Any, notes: list[str]) -> Annotated:
        """The reply to the request with ``req_id`` (a frame with another reqId -- a late
        reply to an earlier step -- is noted and skipped). Raises _Closed on EOF."""
        while True:
            try:
                body = conn.recv_frame()
            except EOFError as exc:
                raise _Closed(str(exc)) from None
            try:
                ann = annotate(body)
            except WireError as exc:
                notes.append(f"undecodable frame {body[:60].hex()}: {exc}")
                raise
            rid = ann.value.get("reqId", UNDEFINED) if isinstance(ann.value, dict) else None
            if req_id is not None and rid is not UNDEFINED and not _same(rid, req_id):
                notes.append(f"skipped a stray reply {_show(ann.value)}")
                continue
            return ann

    # steps -----------------------------------------------------------------------------------
    def run(self, selected: list[Step] | None = None) -> list[StepResult]:
        """Play ``selected`` steps (default all, always in golden order); returns results."""
        chosen = {s.name for s in (selected or self.steps)}
        out = []
        try:
            for s in self.steps:
                if s.name in chosen:
                    out.append(self.run_step(s))
        finally:
            self.close()
        return out

    def run_step(self, step: Step) -> StepResult:
        t0 = time.monotonic()
        res = StepResult(step.name, step.index, "pass", self.golden)
        if step.name in self.tolerated and not self.reference:
            res.reason = self.tolerated[step.name]
        elif step.name in self.differences and not self.reference:
            res.reason = self.differences[step.name]
        elif step.name in self.tolerated:      # out of scope, --reference
            res.reason = self.tolerated[step.name]
        if step.auth and self._auth() is None:
            res.status = "skipped"
            res.reason = "no server with an auth token (--auth-port or --auth-token)"
            return res
        try:
            if step.kind == "pipelined":
                self._pipelined(step, res)
            else:
                self._single(step, res)
        except (_Closed, OSError, WireError) as exc:
            what = ("timed out" if isinstance(exc, socket.timeout)
                    else str(exc) or type(exc).__name__)
            res.diffs.append(f"no reply: {what}")
            self._drop(step)
        res.seconds = time.monotonic() - t0
        if res.diffs:
            res.status = ("known" if (not self.reference and step.name in self.tolerated)
                          else "FAIL")
        return res

    def _drop(self, step: Step) -> None:
        if step.auth:
            if self.authc is not None:
                self.authc.close()
            self.authc = None
        else:
            if self.main is not None:
                self.main.close()
            self.main = None

    def _prepare(self, step: Step, req: Any) -> Any:
        out = self.ctx.rewrite(req)
        if step.auth and isinstance(out, dict) and out.get("token") == GOLDEN_TOKEN:
            out = dict(out, token=self.token)
        return out

    def _single(self, step: Step, res: StepResult) -> None:
        conn = self._auth() if step.auth else self._main(res.notes)
        assert conn is not None
        req = self._prepare(step, step.request)
        res.sent = to_golden(req) if not _big(req) else "<request over 1 MB>"
        if step.pause_ms:
            time.sleep(step.pause_ms / 1000)
        if step.kind == "split":
            conn.send_split(req)
        else:
            conn.send(req)
        ann = self._reply(conn, None if step.kind in ("raw", "oversize")
                          else self._reqid(req), res.notes)
        self._record(res, ann)
        want, want_types = expected_for(step, self.reference)
        res.diffs += compare_reply(want, want_types, ann, self.ctx, step.request, step.name,
                                   step.rules)
        if step.kind == "oversize":
            try:
                extra = conn.wait_eof(min(self.timeout, 5.0))
            except socket.timeout:
                res.diffs.append("connection still open after the error frame (expected EOF)")
            else:
                if extra:
                    res.diffs.append(f"bytes after the error frame: {extra[:60].hex()}")
            self._drop(step)

    def _pipelined(self, step: Step, res: StepResult) -> None:
        conn = self._main(res.notes)
        reqs = [self._prepare(step, r) for r in step.request]
        res.sent = to_golden(reqs)
        conn.send_many(reqs)
        want = {r["reqId"]: r for r in step.response}
        got: list[Annotated] = []
        order: list[Any] = []
        while len(got) < len(reqs):
            try:
                ann = conn.recv()
            except EOFError as exc:
                raise _Closed(str(exc)) from None
            got.append(ann)
            order.append(ann.value.get("reqId") if isinstance(ann.value, dict) else None)
        res.got = [to_golden(a.value) for a in got]
        res.got_types = [a.types for a in got]
        res.map_headers = [h for a in got for h in a.map_headers]
        if sorted(map(str, order)) != sorted(map(str, want)):
            res.diffs.append(f"reqIds {order}, golden {list(want)}")
        if order and order[-1] != PIPELINED_LAST:
            res.diffs.append(f"reply order {order}: the long-poll PULL ({PIPELINED_LAST}) "
                             f"must come last")
        for ann, rid in zip(got, order):
            if rid in want:
                d = compare_reply(want[rid], None, ann, self.ctx, step.request, step.name)
                res.diffs += [f"[{rid}] {x}" for x in d]

    def _record(self, res: StepResult, ann: Annotated) -> None:
        res.got = to_golden(ann.value)
        res.got_types = ann.types
        res.map_headers = list(ann.map_headers)


def _big(obj: Any) -> bool:
    return any(isinstance(s, str) and len(s) > 1 << 20 for s in _strings(obj, set()))
