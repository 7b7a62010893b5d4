"""The bunqueue golden-bytes conformance suite (conformance/bunqueue.py) against jobgate, one
pytest case per golden step, plus self-checks of the suite: its normaliser accepts the golden
replies verbatim and rejects mutated ones, its wire-type annotator agrees with the msgpack
package, and (when the real server is installed) the reference bunqueue passes every step.

jobgate runs twice: `Server(url, bunqueue=True)` for the main steps, and a second one started
with `--config FILE`, FILE holding `bunqueue:\\n  auth_tokens: [s3cret]`, for the AUTH steps.
"""
from __future__ import annotations

import inspect
import json
import struct

import msgpack
import pytest

from conformance import bunqueue
from conformance.bunqueue import (EXTRA_STEP_NAMES, STEP_NAMES, STEPS, Context, Runner, by_name,
                                  check_golden, compare_reply, format_result, load_golden)
from conformance.bunqueue_known_differences import (DIFFERENCES, JOBGATE_EXPECTS, OUT_OF_SCOPE,
                                                    check_steps_exist)
from conformance.bunqueue_wire import (MAP16_REQUIRED, UNDEFINED, RawBytes, annotate,
                                       canonical_type, encode_typed, frame, from_golden, pack,
                                       to_golden)

from .support import ADDR_HOST, Server

# tokens on: the beanstalk listener (tests/support.Server always has one) must be marked open
AUTH_YAML = "bunqueue:\n  auth_tokens: [s3cret]\nlisteners:\n  beanstalk: {open: true}\n"


# ---------------------------------------------------------------------------------------------
# every golden step against jobgate
# ---------------------------------------------------------------------------------------------
def _server_has_bunqueue() -> bool:
    return "bunqueue" in inspect.signature(Server.__init__).parameters


@pytest.fixture(scope="module")
def jobgate_results(tmp_path_factory) -> dict:
    """All steps played once, in order, against two fresh jobgates (SQLite files)."""
    if not _server_has_bunqueue():
        pytest.skip("tests/support.Server has no bunqueue=True yet")
    d = tmp_path_factory.mktemp("bunqueue-conformance")
    cfg = d / "auth.yaml"
    cfg.write_text(AUTH_YAML)
    main = Server(f"sqlite:///{d}/main.db", bunqueue=True)
    try:
        auth = Server(f"sqlite:///{d}/auth.db", bunqueue=True, extra=["--config", str(cfg)])
        try:
            results = Runner(ADDR_HOST, main.bunqueue_port, auth_port=auth.bunqueue_port).run()
        finally:
            auth.stop()
    finally:
        main.stop()
    return {r.name: r for r in results}


# Where jobgate still differs from the golden file (found by this suite; the lead's to-do list).
# strict: once a step passes, its XPASS fails the run and the entry must go.
JOBGATE_TODO: dict = {
}


def _step_params() -> list:
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=JOBGATE_TODO[n]))
            if n in JOBGATE_TODO else n for n in STEP_NAMES]


@pytest.mark.parametrize("name", _step_params())
def test_jobgate_step(name: str, jobgate_results: dict) -> None:
    r = jobgate_results[name]
    if r.status == "known":
        pytest.xfail(f"known difference: {r.reason}")
    assert r.status == "pass", "\n" + format_result(r, verbose=True)


# ---------------------------------------------------------------------------------------------
# the suite's normaliser against the golden file itself
# ---------------------------------------------------------------------------------------------
def test_golden_replies_are_accepted_verbatim() -> None:
    """Every golden reply, written with exactly the wire types the golden file records and as
    map16 maps, passes the comparison -- ids bound on first appearance, timestamps within the
    golden run's window, strict map16 on."""
    result = check_golden()
    assert len(result) == len(STEPS) == 124
    assert {k: v for k, v in result.items() if v} == {}
    # The same replies written as fixmaps pass by default (map16 is recorded, not required) ...
    fixmap = check_golden(encode=lambda v, t: encode_typed(v, t, map_header="fixmap"),
                          strict_map16=False)
    assert {k: v for k, v in fixmap.items() if v} == {}
    # ... and fail everywhere with the strict option.
    strict = check_golden(encode=lambda v, t: encode_typed(v, t, map_header="fixmap"))
    assert all(strict.values())


def test_canonical_type_reproduces_every_recorded_types_field() -> None:
    """msgpackr's choice of wire type (used where the golden file has no types, the pipelined
    and split-frame steps, and for volatile statistics) gives every recorded `types` exactly."""
    recorded = [s for s in STEPS if s.types is not None]
    assert len(recorded) == 122
    for s in recorded:
        assert canonical_type(s.response) == s.types, s.name
    assert {s.name for s in STEPS if s.types is None} == {
        "Pipelined 6 in one write", "Frame split across 3 writes"}


def _step(g: dict, name: str) -> dict:
    return next(s for s in g["steps"] if s["name"] == name)


def _set(g: dict, name: str, path: list, value, typ=None) -> None:
    """Set response[path] = value (and types[path] = typ when given) in golden dict ``g``."""
    s = _step(g, name)
    for field, new in (("response", value), ("types", typ)):
        if field == "types" and (typ is None or s["types"] is None):
            continue
        node = s[field]
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = new


def _m_value(g):
    _set(g, "GetJobCounts", ["counts", "waiting"], 4)


def _m_int_width(g):
    _set(g, "GetJob (options)", ["job", "timeout"], 30000, "uint32")


def _m_int_as_float(g):
    _set(g, "Count", ["count"], 6.0, "float64")


def _m_ts_as_uint64(g):
    _set(g, "Ping", ["data", "time"], 1795315233054, "uint64")


def _m_ts_out_of_window(g):
    _set(g, "GetJob (waiting)", ["job", "createdAt"], 1.0e12, "float64")


def _m_undefined_as_nil(g):
    _set(g, "Obliterate (clean start)", ["id"], None, "nil")


def _m_nil_as_undefined(g):
    _set(g, "GetJob (waiting)", ["job", "startedAt"], {"$undefined": "x"}, "ext(0)")


def _m_bin_as_str(g):
    _set(g, "GetJob bin data", ["job", "data"], "\x00\x01\x02", "str")


def _m_str_as_bin(g):
    _set(g, "Hello", ["server"], {"$bin": b"bunqueue".hex()}, "bin")


def _m_missing_key(g):
    s = _step(g, "PUSH minimal")
    del s["response"]["reqId"], s["types"]["reqId"]


def _m_extra_key(g):
    _set(g, "Ping", ["extra"], 1, "posfixint")


def _m_id_rebound(g):
    _set(g, "GetState (waiting)", ["id"], "01a20120-7127-7763-86ae-53ac0eeef4f6")


def _m_id_not_uuid7(g):
    _set(g, "PUSH minimal", ["id"], "job-1")


def _m_error_text(g):
    _set(g, "ACK unknown id", ["error"], "Job not found")


def _m_reqid_type(g):
    _set(g, "reqId as int", ["reqId"], "7", "str")


def _m_pipelined(g):
    _step(g, "Pipelined 6 in one write")["response"][1]["data"]["pong"] = False


def _m_volatile_not_canonical(g):
    _set(g, "Stats", ["stats", "uptime"], 3700.0, "float64")


def _m_volatile_not_number(g):
    _set(g, "Metrics", ["metrics", "memoryUsageMb"], "35MB", "str")


def _m_list_queue_type(g):
    _set(g, "ListQueues", ["queues", 2], "123", "str")


def _m_array_length(g):
    s = _step(g, "PUSHB")
    s["response"]["ids"].pop()
    s["types"]["ids"].pop()


def _m_job_key_missing(g):
    s = _step(g, "PULL (no owner)")
    del s["response"]["job"]["lifo"], s["types"]["job"]["lifo"]


MUTATIONS = {
    "value": ("GetJobCounts", _m_value),
    "int width uint16->uint32": ("GetJob (options)", _m_int_width),
    "int as float64": ("Count", _m_int_as_float),
    "timestamp as uint64": ("Ping", _m_ts_as_uint64),
    "timestamp out of window": ("GetJob (waiting)", _m_ts_out_of_window),
    "undefined as nil": ("Obliterate (clean start)", _m_undefined_as_nil),
    "nil as undefined": ("GetJob (waiting)", _m_nil_as_undefined),
    "bin as str": ("GetJob bin data", _m_bin_as_str),
    "str as bin": ("Hello", _m_str_as_bin),
    "missing key": ("PUSH minimal", _m_missing_key),
    "extra key": ("Ping", _m_extra_key),
    "id not the one bound earlier": ("GetState (waiting)", _m_id_rebound),
    "generated id not a UUIDv7": ("PUSH minimal", _m_id_not_uuid7),
    "error text": ("ACK unknown id", _m_error_text),
    "reqId int echoed as str": ("reqId as int", _m_reqid_type),
    "pipelined reply value": ("Pipelined 6 in one write", _m_pipelined),
    "volatile stat in a non-msgpackr type": ("Stats", _m_volatile_not_canonical),
    "volatile stat not a number": ("Metrics", _m_volatile_not_number),
    "ListQueues item type": ("ListQueues", _m_list_queue_type),
    "array length": ("PUSHB", _m_array_length),
    "Job key missing": ("PULL (no owner)", _m_job_key_missing),
}


@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_mutated_golden_reply_fails(what: str) -> None:
    step, mutate = MUTATIONS[what]
    g = load_golden()
    mutate(g)
    result = check_golden(actual=g)
    assert result[step], f"mutation {what!r} of {step!r} was not noticed"
    # nothing but the mutated step (and, for an id, the steps that echo it) is affected
    assert all(not v for k, v in result.items()
               if k != step and what not in ("id not the one bound earlier",
                                             "generated id not a UUIDv7")), what


def test_key_order_rules() -> None:
    """A non-Job map's key order must match the golden; a Job object's keys compare as a set
    (the golden Job lists its keys in two orders: step 37 differs from step 6)."""
    g6, g37 = by_name("GetJob (waiting)"), by_name("GetJob (completed)")
    assert list(g6.response["job"]) != list(g37.response["job"])
    assert set(g6.response["job"]) == set(g37.response["job"])

    g = load_golden()
    s = _step(g, "GetState (waiting)")
    order = ["ok", "state", "id", "reqId"]
    s["response"] = {k: s["response"][k] for k in order}
    s["types"] = {k: s["types"][k] for k in order}
    assert any("key order" in d for d in check_golden(actual=g)["GetState (waiting)"])

    g = load_golden()
    s = _step(g, "GetJob (waiting)")
    keys = list(reversed(list(s["response"]["job"])))
    s["response"]["job"] = {k: s["response"]["job"][k] for k in keys}
    s["types"]["job"] = {k: s["types"]["job"][k] for k in keys}
    assert check_golden(actual=g)["GetJob (waiting)"] == []


def test_volatile_statistics_and_unordered_queues_are_tolerated() -> None:
    g = load_golden()
    _set(g, "Stats", ["stats", "uptime"], 99999, "uint32")
    _set(g, "Metrics", ["metrics", "avgLatencyMs"], 0, "posfixint")
    s = _step(g, "ListQueues")
    s["response"]["queues"].reverse()
    s["types"]["queues"].reverse()
    result = check_golden(actual=g)
    assert result["Stats"] == result["Metrics"] == result["ListQueues"] == []


def test_ids_bind_on_first_appearance_and_rewrite_requests() -> None:
    ctx = Context()
    push = by_name("PUSH minimal")
    live = "01990000-0000-7000-8000-00000000abcd"
    reply = annotate(encode_typed({"ok": True, "id": live, "reqId": "r5"}, push.types))
    assert compare_reply(push.response, push.types, reply, ctx, push.request) == []
    golden_id = push.response["id"]
    assert ctx.ids == {golden_id: live}
    assert ctx.rewrite({"id": golden_id, "x": [f"at {golden_id}!"]}) == {
        "id": live, "x": [f"at {live}!"]}
    # an id the client chose (in the request) is echoed, not bound
    unknown = by_name("ACK unknown id")
    assert ctx.rewrite(unknown.request) == unknown.request
    # a second golden id may not be bound to a live id already taken
    other = annotate(encode_typed({"ok": True, "id": live, "reqId": "r12"}, push.types))
    delayed = by_name("PUSH delayed")
    assert compare_reply(delayed.response, delayed.types, other, ctx, delayed.request)


# ---------------------------------------------------------------------------------------------
# the wire module
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,typ", [
    (0, "posfixint"), (127, "posfixint"), (128, "uint8"), (255, "uint8"), (256, "uint16"),
    (65536, "uint32"), (2 ** 32, "uint64"), (-1, "negfixint"), (-32, "negfixint"),
    (-33, "int8"), (-129, "int16"), (-32769, "int32"), (-2 ** 31 - 1, "int64"),
    (1.5, "float64"), (None, "nil"), (True, "true"), (False, "false"), ("", "str"),
    ("x" * 40, "str"), ("y" * 300, "str"), ("z" * 70000, "str"), (b"", "bin"),
    (b"\x00" * 300, "bin"),
])
def test_annotate_scalar_types(value, typ) -> None:
    raw = msgpack.packb(value, use_bin_type=True)
    ann = annotate(raw)
    assert ann.types == typ and ann.value == value and type(ann.value) is type(value)


def test_annotate_structures_ext_and_map_headers() -> None:
    value = {"a": [1, {"b": None}], "c": {}, "d": [], 5: "int key"}
    ann = annotate(msgpack.packb(value, use_bin_type=True, strict_types=False))
    assert ann.value == msgpack.unpackb(msgpack.packb(value), strict_map_key=False)
    assert ann.types == {"a": ["posfixint", {"b": "nil"}], "c": {}, "d": [], 5: "str"}
    assert ann.map_headers == ["fixmap"] * 3 and not ann.all_map16
    m16 = annotate(bytes.fromhex("de0001a16bd40000"))        # msgpackr: {k: undefined}
    assert m16.value == {"k": UNDEFINED} and m16.types == {"k": "ext(0)"} and m16.all_map16
    assert annotate(bytes.fromhex("d60100000001")).types == "ext(1)"
    assert annotate(msgpack.packb(1.5, use_single_float=True)).types == "float32"
    for bad in ("c1", "82a3636d64", "0102", "a3ff"):
        with pytest.raises(ValueError):
            annotate(bytes.fromhex(bad))
    assert MAP16_REQUIRED is False


def test_encode_typed_round_trips_every_golden_reply() -> None:
    for s in STEPS:
        replies = s.response if s.kind == "pipelined" else [s.response]
        for r in replies:
            t = s.types if s.kind != "pipelined" else None
            ann = annotate(encode_typed(r, t))
            assert ann.types == (t or canonical_type(r)) and ann.all_map16, s.name
            assert json.dumps(to_golden(ann.value)) == json.dumps(
                to_golden(r)), s.name


def test_requests_are_encoded_as_the_golden_intends() -> None:
    bin_push = by_name("PUSH data=bytes (bin)").request
    assert bin_push["data"] == b"\x00\x01\x02" and b"\xc4\x03\x00\x01\x02" in pack(bin_push)
    assert pack({"x": UNDEFINED}) == b"\x81\xa1x\xd4\x00\x00"
    big = pack(by_name("PUSH data with uint64 int").request)
    assert b"\xcf" + (2 ** 40).to_bytes(8, "big") in big         # msgpackr reads a BigInt
    assert b"\xcf" + (2 ** 33).to_bytes(8, "big") in pack(by_name("PUSH delay as uint64").request)
    assert b"\xcb" + struct.pack(">d", 10.5) in pack(by_name("PUSH delay as float").request)
    assert b"\xcd\x75\x30" in pack({"timeout": 30000})          # ints stay ints
    raw = by_name("Malformed frame (0xc1 never-used byte)").request
    assert isinstance(raw, RawBytes) and frame(raw) == bytes.fromhex("00000001c1")
    assert len(by_name("PUSH data > 10MB").request["data"]) == 10485770
    f = frame({"cmd": "Ping"})
    assert struct.unpack(">I", f[:4])[0] == len(f) - 4
    assert from_golden({"$undefined": "whatever"}) is UNDEFINED


# ---------------------------------------------------------------------------------------------
# the suite's data and CLI
# ---------------------------------------------------------------------------------------------
def test_steps_and_known_differences_are_consistent() -> None:
    assert set(JOBGATE_TODO) <= set(STEP_NAMES) and not set(JOBGATE_TODO) & set(DIFFERENCES)
    assert len(STEP_NAMES) == len(set(STEP_NAMES)) == 124
    assert check_steps_exist(STEP_NAMES + EXTRA_STEP_NAMES) == []
    kinds = {s.name: s.kind for s in STEPS}
    assert sum(k == "auth" for k in kinds.values()) == 9
    assert kinds["Pipelined 6 in one write"] == "pipelined"
    assert kinds["Frame header > 64MiB"] == "oversize"
    assert kinds["Frame split across 3 writes"] == "split"
    assert sum(k == "raw" for k in kinds.values()) == 6
    assert OUT_OF_SCOPE == frozenset()   # issue 16: cron was the last
    assert set(JOBGATE_EXPECTS) == {"AUTH: Auth missing token", "ListQueues",
                                    "Cron missing name", "CronList empty"} == set(DIFFERENCES)
    # jobgate's reply there is the wrong-token reply with this step's reqId
    wrong = by_name("AUTH: Auth wrong token")
    value, types = JOBGATE_EXPECTS["AUTH: Auth missing token"]
    assert value == dict(wrong.response, reqId="r109") and types == wrong.types
    assert by_name("AUTH: Auth missing token").response["error"].startswith("undefined is not")


def test_cli_usage_and_list(capsys) -> None:
    assert bunqueue.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "Pipelined 6 in one write" in out and "[known difference]" in out
    assert bunqueue.main([]) == 2
    assert bunqueue.main(["--host", ADDR_HOST]) == 2
    assert bunqueue.main(["--jobgate", "-s", "no such step*"]) == 2


def test_cli_jobgate_mode(capsys) -> None:
    if not _server_has_bunqueue():
        pytest.skip("tests/support.Server has no bunqueue=True yet")
    assert bunqueue.main(["--jobgate", "-s", "Hello*", "-s", "Ping", "-s", "AUTH: Ping*"]) == 0
    assert "4 pass, 0 FAIL" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# the suite against the real bunqueue (when tests/bunqueue_client is installed)
# ---------------------------------------------------------------------------------------------
def test_reference_bunqueue_passes_every_step(tmp_path) -> None:
    """The real bunqueue 2.9.5 (SQLite file, as the golden file was recorded) passes all 124
    steps with the reference expectations, and writes every map as map16."""
    real = pytest.importorskip("tests.bunqueue_real")
    reason = real.bun_missing_reason()
    if reason:
        pytest.skip(reason)
    with real.BunqueueServer(data_path=tmp_path / "main.db") as main, \
            real.BunqueueServer(data_path=tmp_path / "auth.db", token="s3cret") as auth:
        results = Runner(ADDR_HOST, main.port, auth_port=auth.port, reference=True).run()
    bad = [format_result(r, verbose=True) for r in results if r.status != "pass"]
    assert not bad, "\n".join(bad)
    assert all(h == "map16" for r in results for h in r.map_headers)
