"""`jobgate` command line: `jobgate serve`, `jobgate migrate`, `jobgate --version`, and the
pipeline's `jobgate export events`, `jobgate analyze`, `jobgate enqueue` (pipeline/cli.py).

    jobgate serve [--config FILE] [--listen DIALECT=HOST:PORT ...] [--database URL]
                  [--durability commit|buffered|memory] [--log-level LEVEL]
    jobgate migrate [--config FILE] [--database URL]

`--listen` is repeatable; when given, only those listeners run (each keeps the `tls` and
`open` settings its dialect has in the config file); the dialect names and their default ports
come from the registry (gateway/registry.py). A start-up failure is one line on
stderr naming the setting, its value and the cause, with its own exit status (gateway/startup.py,
docs/operations.md "Exit statuses and start-up failures"): 0 after a clean stop, 1 another server
holds the database, 2 a configuration error (the message names the key), 3 cannot listen,
4 the database cannot be reached or used, 7 the SQLite path is not usable.
"""
from __future__ import annotations

import argparse
import sys

from . import registry
from .config import (DATABASE_MODES, DURABILITY, ConfigError, check_database_scheme,
                     check_database_url, check_shared, hide_password, load, parse_listen_flag)
from .startup import EXIT_CONFIG, EXIT_LOCKED, EXIT_OK, StartupError, bind_all, report
from .version import version


def build_config(args, check_db: bool = True):
    """Config from --config plus command-line overrides. Raises ConfigError. `check_db=False`
    leaves the database URL's check (it imports SQLAlchemy) to the caller."""
    cfg = load(getattr(args, "config", None))
    if getattr(args, "listen", None):
        from .access import keep_security
        configured = {lst.dialect: lst for lst in cfg.listeners}
        cfg.listeners = [keep_security(f, configured.get(f.dialect))
                         for f in map(parse_listen_flag, args.listen)]
    if getattr(args, "database", None):
        cfg.database_url = check_database_scheme(args.database, "--database")
    if getattr(args, "database_mode", None):
        cfg.database_mode = args.database_mode
    if getattr(args, "durability", None):
        cfg.durability = args.durability
    if getattr(args, "log_level", None):
        cfg.log_level = args.log_level
    if args.cmd == "serve":
        from .access import prepare   # TLS files and the access rule (exit 2 when refused)
        prepare(cfg)
    check_shared(cfg)
    if check_db and (cfg.durability != "memory" or args.cmd == "migrate"):
        check_database_url(cfg.database_url)
    return cfg


class _Version(argparse.Action):
    """`--version`: prints `jobgate X.Y.Z` (gateway/version.py; read only when asked, so that
    `serve` binds without reading pyproject.toml or the package metadata) and exits 0."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"jobgate {version()}")
        parser.exit(0)


def main(argv=None) -> int:
    """Entry point of the `jobgate` console script."""
    p = argparse.ArgumentParser(prog="jobgate", description="jobgate job-queue server")
    p.add_argument("--version", action=_Version, nargs=0, help="print `jobgate VERSION`")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the server")
    s.add_argument("--config", help="YAML config file")
    dialects = ", ".join(f"{n} ({r.default_port}: {r.summary})"
                         for n, r in registry.DIALECTS.items())
    s.add_argument("--listen", action="append", metavar="DIALECT=HOST:PORT",
                   help="listen address, or DIALECT=unix:/path (repeatable); replaces the "
                        f"configured listeners. DIALECT: {dialects}")
    s.add_argument("--database", metavar="URL", help="SQLAlchemy database URL")
    s.add_argument("--database-mode", choices=DATABASE_MODES,
                   help="single (default): this server owns the database; shared: one of "
                        "several nodes on one PostgreSQL (docs/scaling.md)")
    s.add_argument("--durability", choices=DURABILITY)
    s.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    m = sub.add_parser("migrate", help="create or upgrade the database schema")
    m.add_argument("--config", help="YAML config file")
    m.add_argument("--database", metavar="URL", help="SQLAlchemy database URL")
    from pipeline import cli as pipeline_cli   # export, analyze, enqueue (the extra loads lazily)
    pipeline_cli.add_parsers(sub)
    args = p.parse_args(argv)
    if args.cmd in ("export", "analyze", "enqueue"):
        return pipeline_cli.run(args)
    try:
        cfg = build_config(args, check_db=False)
    except ConfigError as e:
        print(f"jobgate: {e}", file=sys.stderr)
        return EXIT_CONFIG
    debug = cfg.log_level == "debug"
    socks = None
    if args.cmd == "serve":    # listen first: clients may connect while the server starts
        from .listen import catch_stop_signals
        catch_stop_signals()
        where = "--listen " if args.listen else "listeners."
        try:
            socks = bind_all(cfg.listeners, lambda lst: where + lst.dialect)
        except StartupError as e:
            report("jobgate", e.line("jobgate"), e, debug)
            return e.status
    try:
        if cfg.durability != "memory" or args.cmd == "migrate":
            check_database_url(cfg.database_url)
    except ConfigError as e:
        print(f"jobgate: {e}", file=sys.stderr)
        return EXIT_CONFIG
    from .logs import setup
    setup(cfg.log_level, cfg.log_format)
    db_setting = "--database" if args.database else "database.url"
    from core.api import StoreLocked
    try:
        if args.cmd == "migrate":
            from .startup import open_database
            open_database(cfg.database_url, cfg.sqlite_synchronous, lock=False).close()
            print(f"jobgate: schema of {hide_password(cfg.database_url)} is up to date")
            return EXIT_OK
        from .server import run
        run(cfg, sockets=socks)
    except StartupError as e:
        report("jobgate", e.line("jobgate", db_setting), e, debug)
        return e.status
    except StoreLocked as e:
        report("jobgate", f"jobgate: {db_setting} {hide_password(cfg.database_url)}: {e}", e,
               debug)
        return EXIT_LOCKED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
