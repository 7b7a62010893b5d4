"""Shared pytest fixtures: database URLs (SQLite file, PostgreSQL when configured), servers and
what several test files use: the ManualClock engine, a migrated Store, raw connections, processes,
client libraries."""
from __future__ import annotations

import importlib
import os
import subprocess
import tempfile

import greenstalk
import pytest

from core.clock import ManualClock
from core.engine import Engine
from core.journal import Journal
from core.storage import Store
from migrations import upgrade

from .ci_plugin import pytest_sessionfinish, pytest_terminal_summary  # noqa: F401 (hooks)
from .server_support import Proc
from .shared_support import nodes  # noqa: F401 (fixture: shared-mode nodes, issue 19)
from .support import ADDR_HOST, Raw, Server, make_pg_database, pg_admin_url

# hypothesis early: imported late (by its plugin, at the terminal summary) it trips a CPython
# 3.11 ast bug under pytest's assertion rewriting
importlib.import_module("hypothesis")

PG_SKIP = ("PostgreSQL tests need JOBGATE_TEST_PG_URL "
           "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test); .ci/run sets it")


def pytest_collection_modifyitems(config, items):
    """Groups for the parallel run (`make test`: pytest-xdist, `--dist loadgroup`): a test
    module's tests run on one worker, so that its module-scoped servers start once; every test
    that uses the session's SparkSession (`spark`) runs on one worker, so that one JVM starts.
    Without xdist the marker means nothing."""
    for item in items:
        group = "spark" if "spark" in getattr(item, "fixturenames", ()) else \
            item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def sqlite_url(tmp_path):
    """A SQLite database file URL in a fresh temporary directory."""
    return f"sqlite:///{tmp_path}/jobgate.db"


def _fresh_pg():
    """Yield a fresh PostgreSQL database URL, dropped afterwards; skip without the env var."""
    admin = pg_admin_url()
    if not admin:
        pytest.skip(PG_SKIP)
    url, drop = make_pg_database(admin)
    yield url
    drop()


@pytest.fixture
def pg_url():
    """A fresh, empty PostgreSQL database (dropped afterwards); skips without JOBGATE_TEST_PG_URL."""
    yield from _fresh_pg()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """Each storage backend in turn: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/jobgate.db"
        return
    yield from _fresh_pg()


@pytest.fixture
def server(sqlite_url):
    """A running jobgate server (SQLite, durability commit) on a free port."""
    s = Server(sqlite_url)
    yield s
    s.stop()


@pytest.fixture
def clocked(sqlite_url):
    """A jobgate server in this process on a manual clock (tests/inproc.py): every dialect on
    a free port (`clocked.ports[name]`), SQLite, durability commit; `clocked.advance(ms)`."""
    from .inproc import InProcServer
    s = InProcServer(sqlite_url)
    yield s
    s.stop()


@pytest.fixture
def mem_server():
    """A running jobgate server with durability memory."""
    s = Server(None, durability="memory")
    yield s
    s.stop()


# ------------------------------------------------------------ engine (test_engine_*.py)
@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def journal(clock):
    return Journal(clock)


@pytest.fixture
def eng(clock, journal):
    return Engine(clock, journal)


# ----------------------------------------------------------- storage (test_storage*.py)
@pytest.fixture
def store(db_url):
    s = Store(db_url)
    upgrade(s.engine)
    yield s
    s.close()


# ------------------------------------------------------------ server (test_server_*.py)
@pytest.fixture
def procs():
    """Start processes with `procs(argv, env=None)` (`env`: variables added to the
    environment); every one is stopped at teardown."""
    started: list[Proc] = []

    def start(argv: list[str], env: dict | None = None) -> Proc:
        p = Proc(argv, env)
        started.append(p)
        return p
    yield start
    for p in started:
        if p.proc.poll() is None:
            p.kill()
        else:
            try:
                p.proc.communicate(timeout=5)
            except (subprocess.TimeoutExpired, ValueError):
                pass


@pytest.fixture
def raws(server):
    """Open Raw connections to the `server` fixture with `raws()`; all closed at teardown."""
    opened: list[Raw] = []

    def connect() -> Raw:
        r = Raw(server.port)
        opened.append(r)
        return r
    yield connect
    for r in opened:
        try:
            r.close()
        except OSError:
            pass


@pytest.fixture(scope="module")
def wq_server(tmp_path_factory):
    """One jobgate server (SQLite, durability commit) with beanstalk and workq listeners, shared
    by the tests of one module (they use distinct queue names and ids)."""
    s = Server(f"sqlite:///{tmp_path_factory.mktemp('wq')}/jobgate.db", workq=True)
    yield s
    s.stop()


@pytest.fixture
def wq_conns(wq_server):
    """`wq_conns()` opens a workq connection (tests.workq_support.WorkqRaw) to `wq_server`;
    every one is closed at teardown."""
    from .workq_support import Connections
    conns = Connections(wq_server.workq_port)
    yield conns.open
    conns.close_all()


@pytest.fixture
def short_tmp():
    """A short temporary directory for unix socket paths (sun_path is ~107 bytes)."""
    d = tempfile.mkdtemp(prefix="jg", dir="/tmp")
    yield d
    for name in os.listdir(d):
        try:
            os.unlink(os.path.join(d, name))
        except OSError:
            pass
    os.rmdir(d)


# --------------------------------------------------------- clients (test_clients_*.py)
@pytest.fixture
def gs(server):
    """A greenstalk client (str bodies, utf-8) on the test server."""
    c = greenstalk.Client((ADDR_HOST, server.port))
    yield c
    c.close()


@pytest.fixture(scope="module")
def bq_server(tmp_path_factory):
    """One jobgate server (SQLite, durability commit) with beanstalk, workq and bunqueue
    listeners, shared by the tests of one module (they use distinct queue names). With
    JOBGATE_BQ_REFERENCE=1 it is the real bunqueue server instead (tests.bunqueue_support)."""
    from .bunqueue_support import bq_server_start
    s = bq_server_start(tmp_path_factory.mktemp("bq"), workq=True)
    yield s
    s.stop()


@pytest.fixture
def gsq(bq_server):
    """`gsq(tube)` opens a greenstalk client (bytes bodies) to `bq_server`, using and watching
    `tube`; all closed at teardown."""
    import greenstalk
    opened = []

    def open_(tube: str):
        c = greenstalk.Client(("127.0.0.1", bq_server.port), encoding=None, use=tube,
                              watch=tube)
        opened.append(c)
        return c
    yield open_
    for c in opened:
        c.close()


@pytest.fixture
def wq(bq_server):
    """`wq()` opens a raw workq connection (tests.workq_support.WorkqRaw) to `bq_server`; all
    closed at teardown."""
    from .workq_support import WorkqRaw
    opened = []

    def open_():
        c = WorkqRaw(bq_server.workq_port)
        opened.append(c)
        return c
    yield open_
    for c in opened:
        c.sock.close()


@pytest.fixture
def bq(bq_server):
    """`bq()` opens a bunqueue connection (tests.bunqueue_support.BQ) to `bq_server`; every one
    is closed at teardown."""
    from .bunqueue_support import Connections
    conns = Connections(bq_server.bunqueue_port)
    yield conns.open
    conns.close_all()


@pytest.fixture
def servers():
    """Start servers with `servers(url, ...)`; every one is stopped (or reaped) at teardown."""
    started: list[Server] = []

    def start(*args, **kw) -> Server:
        s = Server(*args, **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        if s.proc.poll() is None:
            s.kill()
        else:
            s.proc.communicate()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the pipeline tests: 2 cores, and up to 4 attempts per task
    (`local[2,4]`), so a test can make a task fail once and watch Spark retry it."""
    from pipeline.spark import session
    s = session("local[2,4]", shuffle_partitions=4)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module (tests/dashboard_support.launch_browser: Debian's
    chromium driven by Playwright), closed after it; the dashboard tests use it."""
    from .dashboard_support import launch_browser
    pw, b = launch_browser()
    yield b
    b.close()
    pw.stop()


@pytest.fixture
def page(browser):
    """A fresh page of `browser` (1100 x 800, 10 s default timeout), its context closed
    after the test (the dashboard tests)."""
    ctx = browser.new_context(viewport={"width": 1100, "height": 800})
    ctx.set_default_timeout(10_000)
    p = ctx.new_page()
    yield p
    ctx.close()
