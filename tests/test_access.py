"""One access model across dialects (issue 15, item 3; docs/operations.md "TLS and access"):
the principal x queue x dialect matrix on a real `jobgate serve` with real clients, the
anonymous cross-dialect read that used to leak a token-protected job, the start-up refusal of
tokens next to unidentifiable listeners, unix-socket peers, and the contract that every engine
port operation is classified by the scoped port (so none bypasses the check).
"""
from __future__ import annotations

import greenstalk
import pytest

from core.access_port import (JOB_ID, LISTING, OWNER_JOB, OWNER_QUEUE, PASS, QUEUE_ARG,
                              QUEUE_LIST, UID)
from core.api import Access, AccessDenied, Port, Principal
from gateway.config import ConfigError, from_dict

from .bunqueue_support import BQ
from .support import Raw
from .tls_support import (OPENSSL, ConfServer, client_context, make_pki, serve_refused,
                          tls_yaml, wrap)
from .workq_support import WorkqRaw, add_cmd, complete_cmd, new_uid

DENIED_WQ = b"-CLIENT-ERROR Access denied\r\n"
MISSING = "01900000-0000-7000-8000-000000000000"   # a UUIDv7 no job has


def derived_uid(id: int) -> str:
    """The uid workq and bunqueue use for a job without one (docs/mapping.md, "Jobs")."""
    return f"6a6f6267-6174-4000-8000-{id:012x}"


# ------------------------------------------------------------------------------ contract
def test_every_port_operation_is_classified_once():
    groups = [QUEUE_ARG, QUEUE_LIST, OWNER_QUEUE, tuple(JOB_ID), tuple(OWNER_JOB), UID,
              LISTING, PASS]
    names = [n for g in groups for n in g]
    public = {n for n in dir(Port) if not n.startswith("_")} | {"clock", "persistence"}
    assert len(names) == len(set(names)), "an operation is in two groups"
    assert public == set(names)


def test_principal_patterns():
    p = Principal("t", "token", ["emails*", "reports"])
    assert p.allows("emails") and p.allows("emails-eu") and p.allows("reports")
    assert not p.allows("report") and not p.allows("Emails") and not p.allows("reports2")
    assert Port.create(durable=False).scoped(Principal("a", "anonymous", ["*"])).__class__ \
        is Port
    acc = Access([("s1", p)], anonymous=[])
    assert acc.for_token("s1") is p and acc.for_token("s2") is None
    assert acc.for_token(None) is None
    assert acc.connection(None, True).patterns == () and acc.connection(None, False).kind == \
        "nobody"


# ------------------------------------------------------------------------------ start-up rule
def test_tokens_with_an_unidentifiable_tcp_listener_are_refused_at_start(tmp_path):
    code, err = serve_refused(tmp_path, "listeners:\n  beanstalk: {port: 0}\n"
                                        "  bunqueue: {port: 0}\nbunqueue:\n  auth_tokens: [s]\n")
    assert code == 2, err
    assert "'listeners.beanstalk.open'" in err and "bunqueue tokens are set" in err
    assert "client_ca" in err and "open: true" in err and "Traceback" not in err
    code, err = serve_refused(tmp_path, "listeners:\n  workq: {port: 0}\naccess:\n  principals:"
                                        "\n    - {token: s, queues: [a]}\n")
    assert code == 2 and "'listeners.workq.open'" in err, err


@pytest.mark.parametrize("access, key", [
    ("{principals: [{queues: [a]}]}", "access.principals[0]"),
    ("{principals: [{token: s, cert_cn: c, queues: [a]}]}", "access.principals[0]"),
    ("{principals: [{token: s}]}", "access.principals[0].queues"),
    ("{principals: [{token: s, queues: a}]}", "access.principals[0].queues"),
    ("{principals: [{token: s, queues: [a]}, {token: s, queues: [b]}]}",
     "access.principals[1].token"),
    ("{anonymous: '*'}", "access.anonymous"),
    ("{users: []}", "access.users"),
])
def test_bad_access_sections_name_the_key(access, key):
    with pytest.raises(ConfigError) as e:
        from_dict({"access": __import__("yaml").safe_load(access)})
    assert f"'{key}'" in str(e.value)


def test_defaults_change_nothing():
    from gateway.access import build_access
    assert build_access(from_dict(None)) is None      # no access control, raw port for all


# ------------------------------------------------------------------------------ the matrix
@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if OPENSSL is None:
        pytest.skip("the openssl command is not installed")
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("worker-1", "stranger"))


@pytest.fixture(scope="module")
def server(pki, tmp_path_factory):
    """beanstalk open to anonymous clients (public* only), workq with client certificates,
    bunqueue with tokens."""
    s = ConfServer(tmp_path_factory.mktemp("access"), f"""listeners:
  beanstalk: {{port: {{beanstalk}}, open: true}}
  workq: {{port: {{workq}}, tls: {tls_yaml(pki, client_ca=True)}}}
  bunqueue: {{port: {{bunqueue}}}}
access:
  principals:
    - {{token: mail-token, queues: ["emails*"], name: mailer}}
    - {{token: report-token, queues: [reports]}}
    - {{cert_cn: worker-1, queues: ["emails*", "public*"]}}
  anonymous: ["public*"]
""")
    yield s
    s.stop()


def _bq(server, token=None) -> BQ:
    b = BQ(server.ports["bunqueue"])
    if token is not None:
        assert b.call("Auth", token=token)["ok"] is True
    return b


def test_anonymous_cross_dialect_read_of_a_protected_job_now_fails(server, pki):
    """The issue's leak: a job pushed with a bunqueue token was read by an anonymous beanstalk
    watch + reserve (or a workq lease). Now the job is invisible to them, and still there."""
    mailer = _bq(server, "mail-token")
    pushed = mailer.call("PUSH", queue="emails", data={"secret": 1})
    assert pushed["ok"] is True
    anon = Raw(server.ports["beanstalk"])
    assert anon.cmd(b"watch emails\r\n") == b"NOT_FOUND\r\n"
    assert anon.cmd(b"use emails\r\n") == b"NOT_FOUND\r\n"
    assert anon.cmd(b"list-tubes-watched\r\n").endswith(b"- default\n\r\n")
    assert anon.cmd(b"peek-ready\r\n") == b"NOT_FOUND\r\n"   # on default: not allowed either
    assert anon.cmd(b"stats-tube emails\r\n") == b"NOT_FOUND\r\n"
    assert anon.cmd(b"pause-tube emails 1\r\n") == b"NOT_FOUND\r\n"
    for id in range(1, 40):   # every job id: none outside public* is visible
        for c in (b"peek %d\r\n", b"stats-job %d\r\n", b"delete %d\r\n", b"kick-job %d\r\n",
                  b"reserve-job %d\r\n"):
            assert anon.cmd(c % id) == b"NOT_FOUND\r\n"
    assert b"emails" not in anon.cmd(b"list-tubes\r\n")
    # a certificate with no principal (trusted CA, CN "stranger") on workq: nothing either
    stranger = wrap(WorkqRaw(server.ports["workq"]), client_context(pki, "stranger"))
    assert stranger.cmd(b"lease emails 10\r\n") == DENIED_WQ
    assert stranger.cmd(add_cmd(new_uid(), "public-x")) == DENIED_WQ
    assert stranger.cmd(b"inspect job %s\r\n" % pushed["id"].encode()) == b"-NOT-FOUND\r\n"
    assert stranger.cmd(b"inspect queues 0 10\r\n") == b"+OK 0\r\n"
    # the job is untouched: the token's principal still gets it
    got = mailer.call("PULL", queue="emails", timeout=0)
    assert got["job"]["id"] == pushed["id"] and got["job"]["data"] == {"secret": 1}
    assert mailer.call("ACK", id=pushed["id"])["ok"] is True


def test_certificate_principal_on_workq_reaches_its_queues_only(server, pki):
    w = wrap(WorkqRaw(server.ports["workq"]), client_context(pki, "worker-1"))
    reporter = _bq(server, "report-token")
    report = reporter.call("PUSH", queue="reports", data="r")
    assert report["ok"] is True
    # a job pushed through bunqueue into an allowed queue is leased through workq
    mailer = _bq(server, "mail-token")
    mail = mailer.call("PUSH", queue="emails-eu", data="m")
    leased = w.cmd(b"lease emails-eu 1000\r\n")
    assert leased.startswith(b"+OK 1\r\n%s emails-eu " % mail["id"].encode())
    assert w.cmd(complete_cmd(mail["id"], b"ok")) == b"+OK\r\n"
    # the reports queue and its job do not exist for worker-1
    assert w.cmd(b"lease reports 10\r\n") == DENIED_WQ
    assert w.cmd(add_cmd(new_uid(), "reports")) == DENIED_WQ
    assert w.cmd(b"inspect queue reports\r\n") == DENIED_WQ
    assert w.cmd(b"inspect jobs reports 0 10\r\n") == DENIED_WQ
    # its job answers exactly as a job that does not exist (a UUIDv7 no job has)
    for cmd in (b"inspect job %s\r\n", b"complete %s 0\r\n\r\n", b"fail %s 0\r\n\r\n",
                b"delete %s\r\n", b"result %s 10\r\n"):
        assert w.cmd(cmd % report["id"].encode()) == w.cmd(cmd % MISSING.encode()), cmd
    # by canonical id (derived uids): only jobs of emails* / public* are found
    for id in range(1, 60):
        r = w.cmd(b"inspect job %s\r\n" % derived_uid(id).encode())
        assert r == b"-NOT-FOUND\r\n" or b"\r\nname emails" in r or b"\r\nname public" in r, r
    assert b"reports" not in w.cmd(b"inspect queues 0 100\r\n")
    # and the job is still there for its own principal
    assert reporter.call("GetJob", id=report["id"])["job"]["data"] == "r"


def test_token_principals_on_bunqueue(server):
    assert BQ(server.ports["bunqueue"]).call("PUSH", queue="emails", data=1) == \
        {"ok": False, "error": "Not authenticated"}
    assert BQ(server.ports["bunqueue"]).call("Auth", token="wrong")["ok"] is False
    reporter = _bq(server, "report-token")
    report = reporter.call("PUSH", queue="reports", data="r2")
    mailer = _bq(server, "mail-token")
    assert mailer.call("PUSH", queue="reports", data=1) == \
        {"ok": False, "error": "Access denied: queue reports"}
    # a batch push to it too, and the connection stays (its slices once closed it)
    assert mailer.call("PUSHB", queue="reports", jobs=[{"data": 1}]) == \
        {"ok": False, "error": "Access denied: queue reports"}
    assert mailer.call("PULL", queue="reports", timeout=0)["ok"] is False
    assert mailer.call("GetJobCounts", queue="reports")["ok"] is False
    got = mailer.call("GetJob", id=report["id"])
    assert got.get("job") is None, got
    assert mailer.call("ACK", id=report["id"])["ok"] is False
    mailer.call("Cancel", id=report["id"])   # whatever it answers, the job stays
    assert reporter.call("GetJob", id=report["id"])["job"] is not None
    assert mailer.call("PUSH", queue="emails-listed", data=1)["ok"] is True
    names = mailer.call("ListQueues")["queues"]
    assert "emails-listed" in names and "reports" not in names
    assert "reports" in reporter.call("ListQueues")["queues"]
    # a beanstalk job in public-x (anonymous) is invisible to the mailer by its derived uid
    anon = Raw(server.ports["beanstalk"])
    assert anon.cmd(b"use public-x\r\n") == b"USING public-x\r\n"
    bid = int(anon.cmd(b"put 0 0 10 3\r\nabc\r\n").split()[1])
    assert mailer.call("GetJob", id=derived_uid(bid)).get("job") is None
    assert reporter.call("GetJob", id=report["id"])["job"]["data"] == "r2"


def test_anonymous_beanstalk_reaches_public_queues_with_greenstalk(server):
    with greenstalk.Client(("127.0.0.1", server.ports["beanstalk"]), use="public-g",
                           watch="public-g") as c:
        jid = c.put("hello")
        job = c.reserve(timeout=5)
        assert (job.id, job.body) == (jid, "hello")
        c.delete(job)
        assert set(c.tubes()) <= {"default", "public-g", "public-x"}
        with pytest.raises(greenstalk.NotFoundError):
            c.watch("emails")


# ------------------------------------------------------------------------------ unix peers
def test_unix_socket_peer_is_its_user(tmp_path):
    import getpass
    user = getpass.getuser()
    sock = str(tmp_path / "b.sock")
    s = ConfServer(tmp_path, f"""listeners:
  beanstalk: {{unix: {sock}}}
  bunqueue: {{port: {{bunqueue}}}}
access:
  principals:
    - {{unix_user: {user}, queues: ["emails*"]}}
    - {{token: t, queues: [reports]}}
""", wait_unix=[sock])
    try:
        reporter = _bq(s, "t")
        report = reporter.call("PUSH", queue="reports", data="r")
        with greenstalk.Client(sock, use="emails", watch="emails") as c:
            jid = c.put("by unix peer")
            assert c.reserve(timeout=5).id == jid
            with pytest.raises(greenstalk.NotFoundError):
                c.use("reports")
            assert "reports" not in c.tubes()
        # the unix peer's job is invisible to the token principal (derived uid)
        assert reporter.call("GetJob", id=derived_uid(jid)).get("job") is None
        assert reporter.call("GetJob", id=report["id"])["job"]["data"] == "r"
    finally:
        s.stop()



def test_scoped_observe_and_failed_counts_show_allowed_queues_only():
    # the metrics' feed sink and failed counts through a principal's port: the events and
    # failures of another principal's queue stay out
    port = Port.create(durable=False)
    seen = []
    port.scoped(Principal("t", "token", ["emails"])).observe(
        lambda id, queue, dialect, events, *rest: seen.append((queue, events)))
    ids = {q: port.put(q, b"x", 0, 0, 60_000, "workq", max_fails=1)
           for q in ("emails", "secret")}
    owner = port.new_owner("workq", margin=False, durable=True)
    for q, id in ids.items():
        assert port.reserve_job(owner, id) is not None
        assert port.fail(id, b"boom", "workq") == "dead"
    assert [q for q, _ in seen] == ["emails"] * 3
    assert port.failed_counts() == {"emails": 1, "secret": 1}
    scoped = port.scoped(Principal("t", "token", ["emails"]))
    assert scoped.failed_counts() == {"emails": 1}
    assert scoped.failed_count("emails") == 1
    with pytest.raises(AccessDenied):
        scoped.failed_count("secret")
