"""The shared-mode node tests' fixture and helpers (tests/test_shared_*.py): `nodes(n)`,
real `jobgate serve --database-mode shared` processes on one fresh PostgreSQL database;
`bean`, a greenstalk client of a node; `rows`, a query on the test's database; `leader_app`,
`cron_state` and `terminate` for the fault tests. tests/conftest.py makes `nodes` every
test's fixture. Needs JOBGATE_TEST_PG_URL (the `pg_url`
fixture skips with a clear reason without it; .ci/run sets it)."""
from __future__ import annotations

import greenstalk
import pytest

from .support import Server, free_port

#: the leader's advisory lock key (core/shared_store.py LEADER_KEY)
_LEADER = int.from_bytes(b"jglead", "big")


@pytest.fixture
def nodes(pg_url, tmp_path):
    """`nodes(n, poll_ms=60000, flow_sweep_ms=None, http=False)`: n shared-mode nodes on one
    fresh database (beanstalk, workq and bunqueue listeners each; with `http`, the http
    listener too, its port in `http_port`; with `glide`, a glidemq listener, its port in
    `glide_port`); `flow_sweep_ms`: the leader's flow sweep, `idle_in_transaction_ms`: how
    long PostgreSQL lets a node's session idle inside a transaction (None: the defaults);
    all stopped afterwards."""
    started: list[Server] = []

    def make(n: int, poll_ms: int = 60_000, flow_sweep_ms: int | None = None,
             http: bool = False, glide: bool = False,
             idle_in_transaction_ms: int | None = None) -> list[Server]:
        cfg = tmp_path / f"shared-{poll_ms}-{flow_sweep_ms}-{idle_in_transaction_ms}.yaml"
        sweep = "" if flow_sweep_ms is None else f"  flow_sweep_ms: {flow_sweep_ms}\n"
        if idle_in_transaction_ms is not None:
            sweep += f"  idle_in_transaction_ms: {idle_in_transaction_ms}\n"
        cfg.write_text(f"database:\n  mode: shared\n  poll_interval_ms: {poll_ms}\n{sweep}")
        out = []
        for _ in range(n):
            extra = ["--config", str(cfg)]
            port = free_port() if http else None
            if port:
                extra += ["--listen", f"http=127.0.0.1:{port}"]
            gport = free_port() if glide else None
            if gport:
                extra += ["--listen", f"glidemq=127.0.0.1:{gport}"]
            s = Server(pg_url, workq=True, bunqueue=True, extra=extra)
            s.http_port = port
            s.glide_port = gport
            started.append(s)
            out.append(s)
        return out
    make.url = pg_url
    yield make
    for s in started:
        if s.proc.poll() is None:
            s.stop()


def bean(node: Server, tube: str) -> greenstalk.Client:
    """A greenstalk client of `node` using and watching only `tube`."""
    return greenstalk.Client(("127.0.0.1", node.port), encoding=None, use=tube, watch=tube)


def rows(url: str, sql: str, params: tuple = (), commit: bool = False) -> list:
    """The rows of query `sql` (with `params`) on database `url`; `commit` ends it with a
    commit (a statement with effects)."""
    import sqlalchemy as sa
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as c:
            out = c.exec_driver_sql(sql, params).all()
            if commit:
                c.commit()
            return out
    finally:
        eng.dispose()


def leader_app(url: str):
    """The application_name (`jobgate <pid> <hex>`) of the session holding the shared-mode
    leader lock in the database of `url`, or None."""
    r = rows(url, "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a "
                  "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND "
                  "l.classid = %s AND l.objid = %s AND l.database = "
                  "(SELECT oid FROM pg_database WHERE datname = current_database())",
             (_LEADER >> 32, _LEADER & 0xFFFFFFFF))
    return r[0][0] if r else None


def cron_state(url: str, queue: str) -> tuple:
    """(jobs of `queue` in the database, executions of its schedule)."""
    jobs = rows(url, "SELECT count(*) FROM jobs WHERE queue = %s", (queue,))[0][0]
    ex = rows(url, "SELECT executions FROM cron_schedules WHERE queue = %s", (queue,))
    return jobs, ex[0][0] if ex else None


def terminate(url: str, pid: int) -> int:
    """Terminate every PostgreSQL session of jobgate process `pid`; returns how many."""
    return rows(url, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                     "WHERE application_name LIKE %s", (f"jobgate {pid} %",), commit=True)[0][0]


__all__ = ["nodes", "bean", "rows", "leader_app", "cron_state", "terminate"]


def metric(node: Server, name: str) -> float:
    """The value of counter or gauge `name` (no labels) in `node`'s GET /metrics (a node made
    with `nodes(..., http=True)`)."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/metrics",
                                  timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


#: principals of restricted_nodes: token `t` may use queue `mine` only, `all` every queue
RESTRICTED = ("access:\n  principals:\n    - {token: t, queues: [mine]}\n"
              "    - {token: all, queues: ['*']}\n")


def restricted_nodes(pg_url: str, tmp_path, n: int = 2, database: str = "") -> list:
    """`n` node processes in shared mode on `pg_url` whose bunqueue listeners know the
    principals of RESTRICTED (the caller stops them); `database`: more lines of the
    config's `database` section (indented two spaces)."""
    from .support import Server
    cfg = tmp_path / "restricted.yaml"
    cfg.write_text("database:\n  mode: shared\n  poll_interval_ms: 60000\n" + database
                   + "listeners:\n  beanstalk: {open: true}\n" + RESTRICTED)
    return [Server(pg_url, bunqueue=True, extra=["--config", str(cfg)]) for _ in range(n)]

