"""Start-up failures an operator can act on (issue 15, item 4): one line on stderr naming the
setting, its value and the cause, and one exit status per class of failure.

    jobgate: listeners.beanstalk 127.0.0.1:11300: cannot listen: address already in use
    jobgate: database.url postgresql+psycopg://app:***@db:1/x: cannot connect: connection refused
    jobgate-beanstalkd: -b /var/lib/jobgate: directory does not exist

Exit statuses (the EXIT_* constants below; docs/operations.md, "Exit statuses and start-up
failures", is the operator's table, keep the two in step): 0 clean stop, 1 another server holds
the database, 2 configuration error, 3 cannot listen, 4 database unreachable or unusable,
5 bad option (`jobgate-beanstalkd`), 6 cannot become the -u user, 7 database path not usable.
"""
from __future__ import annotations

import os

#: clean stop (SIGTERM / SIGINT), or -v / -h / --version
EXIT_OK = 0
#: another jobgate server holds the database (core.api.StoreLocked); also Python's own status
#: for an unexpected error, which prints a traceback
EXIT_LOCKED = 1
#: configuration error (`jobgate`: a bad key or value, an unsupported database URL)
EXIT_CONFIG = 2
#: a listening address cannot be bound (in use, permission, unknown host)
EXIT_LISTEN = 3
#: the database cannot be reached or used (refused, unknown database or role, not a database
#: file, a schema newer than this jobgate)
EXIT_DATABASE = 4
#: `jobgate-beanstalkd`: a bad option (beanstalkd's usage status, kept for init scripts)
EXIT_USAGE = 5
#: `jobgate-beanstalkd -u USER`: no such user, or the server may not become it
EXIT_PRIVILEGES = 6
#: the SQLite database path: its directory is missing, or a file cannot be created or written
EXIT_DB_PATH = 7


class StartupError(Exception):
    """A start-up failure: `status` (one of the EXIT_* values), `value` (what the setting holds,
    a database URL with its password hidden, an address) and `cause` (lower-case, one line).
    The entry point names the setting: `line(prog, setting)`."""

    def __init__(self, status: int, value: str, cause: str, setting: str = "") -> None:
        super().__init__(f"{value}: {cause}")
        self.status = status
        self.value = value
        self.cause = cause
        self.setting = setting

    def line(self, prog: str, setting: str | None = None, value: str | None = None) -> str:
        """`prog: setting value: cause`; `setting` and `value` override the stored ones (the
        entry point knows whether a URL came from `database.url`, `--database` or `-b DIR`)."""
        setting = self.setting if setting is None else setting
        value = self.value if value is None else value
        return f"{prog}: {setting} {value}: {self.cause}" if setting else \
            f"{prog}: {value}: {self.cause}"


def report(prog: str, line: str, error: BaseException, debug: bool) -> None:
    """Print the one line of a start-up failure on stderr; at log level debug the traceback of
    `error` (and of its cause) comes first."""
    import sys
    if debug:
        import traceback
        traceback.print_exception(error, file=sys.stderr)
    print(line, file=sys.stderr)


def _lower(text: str) -> str:
    """`Connection refused` -> `connection refused`; `FATAL` / `SQL` stay as they are."""
    text = text.strip()
    if len(text) > 1 and text[0].isupper() and not text[1].isupper():
        return text[0].lower() + text[1:]
    return text


def os_cause(e: OSError) -> str:
    """The operator's reading of an OSError: `address already in use`, `permission denied`."""
    return _lower(e.strerror or str(e))


def bind_all(listeners, setting) -> list:
    """One listening socket per gateway.config.Listener (gateway.listen.bind_one, same order).
    `setting(listener)` names where the address was set (`listeners.beanstalk`, `--listen
    beanstalk`). Raises StartupError (EXIT_LISTEN: `cannot listen: address already in use`)
    after closing what it opened."""
    from .listen import bind_one
    out = []
    try:
        for lst in listeners:
            try:
                out.append(bind_one(lst.host, lst.port, lst.unix))
            except OSError as e:
                raise StartupError(EXIT_LISTEN, lst.describe(), f"cannot listen: {os_cause(e)}",
                                   setting(lst)) from e
    except BaseException:
        for s in out:
            s.close()
        raise
    return out


def become(user: str) -> None:
    """Drop root privileges to `user` and its groups (beanstalkd's -u: setgid, then setuid).
    Call it after binding and before any file is created. Raises StartupError
    (EXIT_PRIVILEGES) when there is no such user or the process may not become it."""
    import pwd
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise StartupError(EXIT_PRIVILEGES, user, "no such user", "-u") from None
    try:
        if os.getuid() == 0:
            os.initgroups(pw.pw_name, pw.pw_gid)
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    except OSError as e:
        raise StartupError(EXIT_PRIVILEGES, user, f"cannot become this user: {os_cause(e)}",
                           "-u") from None


def preload(durable: bool) -> None:
    """Load now, while still root, the code a server otherwise loads lazily (every module of
    core, protocols and gateway; anyio's event loop backend and worker threads; with `durable`
    SQLAlchemy's SQLite dialect, Alembic and every migration, by migrating an in-memory
    database: no file is created). After `become(user)` the installation may be unreadable to
    USER (a virtualenv under /root, a 0750 home directory); the server then never needs it."""
    import importlib
    import pkgutil

    import anyio
    import anyio.to_thread
    for name in ("core", "protocols", "gateway"):
        pkg = importlib.import_module(name)
        for info in pkgutil.walk_packages(pkg.__path__, name + "."):
            importlib.import_module(info.name)

    async def threads() -> None:
        await anyio.to_thread.run_sync(int)
    try:
        import uvloop  # noqa: F401 (gateway.server.run uses it when installed)
        options = {"use_uvloop": True}
    except ImportError:  # pragma: no cover - platform without uvloop
        options = {}
    anyio.run(threads, backend="asyncio", backend_options=options)
    if durable:
        import sqlalchemy as sa

        from migrations import upgrade
        engine = sa.create_engine("sqlite://")
        upgrade(engine)
        engine.dispose()


def _why_not_writable(path: str) -> str:
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    return "permission denied"


def check_sqlite_path(value: str, path: str) -> None:
    """Before SQLite opens `path` (absolute): its directory must exist (it is never created)
    and be writable (the database, `-wal` and `-shm` files live there), and existing files
    must be readable and writable, by the user the server runs as. Raises StartupError
    (EXIT_DB_PATH, `value` being the setting's value)."""
    d = os.path.dirname(path)
    try:
        os.stat(d)
    except FileNotFoundError:
        raise StartupError(EXIT_DB_PATH, value, f"directory {d} does not exist") from None
    except OSError as e:
        raise StartupError(EXIT_DB_PATH, value, f"cannot reach directory {d}: "
                           f"{os_cause(e)}") from None
    if not os.path.isdir(d):
        raise StartupError(EXIT_DB_PATH, value, f"{d} is not a directory")
    if os.path.isdir(path):
        raise StartupError(EXIT_DB_PATH, value, f"{path} is a directory")
    for f in (path, path + "-wal", path + "-shm"):
        if os.path.exists(f) and not os.access(f, os.R_OK | os.W_OK):
            raise StartupError(EXIT_DB_PATH, value,
                               f"cannot write {f}: {_why_not_writable(f)}")
    if not os.access(d, os.W_OK | os.X_OK):
        what = "create" if not os.path.exists(path) else "write"
        name = os.path.basename(path) if what == "create" else os.path.basename(path) + "-wal"
        raise StartupError(EXIT_DB_PATH, value,
                           f"cannot {what} {name} in {d}: {_why_not_writable(d)}")


def _driver_text(e: BaseException) -> str:
    """The first line of a driver's message without libpq's prefixes:
    `connection failed: connection to server at "h", port 1 failed: Connection refused`
    -> `connection refused`; `FATAL:  database "x" does not exist` -> `database "x" ...`."""
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    text = text[0] if text else type(e).__name__
    if "failed: " in text:
        text = text.rsplit("failed: ", 1)[1]
    for prefix in ("FATAL:", "ERROR:"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return _lower(text)


def database_error(value: str, e: BaseException, connecting: bool) -> StartupError:
    """Classify an error raised while opening, locking or migrating the database: SQLite's
    `unable to open database file` / `readonly database` and OSErrors -> EXIT_DB_PATH; the
    rest -> EXIT_DATABASE (`cannot connect: ...` before a connection stood, `cannot use the
    database: ...` after)."""
    if isinstance(e, OSError):
        name = f" {e.filename}" if e.filename else ""
        return StartupError(EXIT_DB_PATH, value, f"cannot open{name}: {os_cause(e)}")
    text = _driver_text(e)
    if text in ("unable to open database file", "attempt to write a readonly database"):
        return StartupError(EXIT_DB_PATH, value, text)
    if type(e).__module__.startswith("alembic"):
        return StartupError(EXIT_DATABASE, value, f"cannot migrate the schema: {text}")
    import sqlalchemy as sa
    if connecting and isinstance(e, sa.exc.OperationalError):
        return StartupError(EXIT_DATABASE, value, f"cannot connect: {text}")
    return StartupError(EXIT_DATABASE, value, f"cannot use the database: {text}")


def open_database(url: str, sqlite_synchronous: str = "normal", lock: bool = True,
                  mode: str = "single", idle_in_transaction_ms: int = 10_000):
    """The server's store for `url`: checked (SQLite: check_sqlite_path), opened, locked
    (`lock`: one server per database) and migrated when its schema is not current. Returns the
    core.api StorePort. `mode` "shared": a node's store (core.api.open_shared_store), migrated
    one node at a time and joined instead of locked, its sessions ended by PostgreSQL when
    idle inside a transaction for `idle_in_transaction_ms` (0: not set). Raises StartupError
    (EXIT_DB_PATH, EXIT_DATABASE) or core.api.StoreLocked; the original error is the
    StartupError's __cause__ (printed at log level debug)."""
    import sqlalchemy as sa

    from core.api import StoreLocked, open_shared_store, open_store
    from migrations import upgrade_if_needed
    u = sa.make_url(url)
    value = u.render_as_string(hide_password=True)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        check_sqlite_path(value, os.path.abspath(u.database))
    shared = mode == "shared"
    store = (open_shared_store(url, idle_in_transaction_ms) if shared
             else open_store(url, sqlite_synchronous))
    connecting = True
    try:
        if lock and not shared:
            store.lock()
        with store.engine.connect():
            connecting = False
        if shared:
            with store.serialized():
                upgrade_if_needed(store.engine)
                store.ensure_indexes()
            store.join()
        else:
            upgrade_if_needed(store.engine)
    except StoreLocked:
        store.close()
        raise
    except Exception as e:
        store.close()
        if isinstance(e, (OSError, sa.exc.SQLAlchemyError)) or \
                type(e).__module__.startswith("alembic"):
            raise database_error(value, e, connecting) from e
        raise
    return store
