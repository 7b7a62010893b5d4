"""`jobgate` command line: `jobgate serve`, `jobgate migrate`, `jobgate --version`, and the
pipeline's `jobgate export events`, `jobgate analyze`, `jobgate enqueue` (pipeline/cli.py).

    jobgate serve [--config FILE] [--listen DIALECT=HOST:PORT ...] [--database URL]
                  [--durability commit|buffered|memory] [--log-level LEVEL]
    jobgate migrate [--config FILE] [--database URL]

`--listen` is repeatable; when given, only those listeners run (each keeps the `tls` and
`open` settings its dialect has in the config file); the dialect names and their default ports
come from the registry (gateway/registry.py). Exit status: 0 after a clean stop,
2 for a configuration error (the message names the key), 1 for a runtime failure (another server
holds the database, ...).
"""
from __future__ import annotations

import argparse
import sys

from . import registry
from .config import DURABILITY, ConfigError, check_database_url, load, parse_listen_flag

VERSION = "0.1.0"


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
        cfg.database_url = args.database
    if getattr(args, "durability", None):
        cfg.durability = args.durability
    if getattr(args, "log_level", None):
        cfg.log_level = args.log_level
    if args.cmd == "serve":
        from .access import prepare   # TLS files and the access rule (exit 2 when refused)
        prepare(cfg)
    if check_db and (cfg.durability != "memory" or args.cmd == "migrate"):
        check_database_url(cfg.database_url)
    return cfg


def main(argv=None) -> int:
    """Entry point of the `jobgate` console script."""
    p = argparse.ArgumentParser(prog="jobgate", description="jobgate job-queue server")
    p.add_argument("--version", action="version", version=f"jobgate {VERSION}")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the server")
    s.add_argument("--config", help="YAML config file")
    dialects = ", ".join(f"{n} ({r.default_port}: {r.summary})"
                         for n, r in registry.DIALECTS.items())
    s.add_argument("--listen", action="append", metavar="DIALECT=HOST:PORT",
                   help="listen address, or DIALECT=unix:/path (repeatable); replaces the "
                        f"configured listeners. DIALECT: {dialects}")
    s.add_argument("--database", metavar="URL", help="SQLAlchemy database URL")
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
        return 2
    socks = None
    if args.cmd == "serve":    # listen first: clients may connect while the server starts
        from .listen import bind, catch_stop_signals
        catch_stop_signals()
        try:
            socks = bind(cfg.listeners)
        except OSError as e:
            print(f"jobgate: cannot listen: {e}", file=sys.stderr)
            return 1
    try:
        if cfg.durability != "memory" or args.cmd == "migrate":
            check_database_url(cfg.database_url)
    except ConfigError as e:
        print(f"jobgate: {e}", file=sys.stderr)
        return 2
    from .logs import setup
    setup(cfg.log_level, cfg.log_format)
    if args.cmd == "migrate":
        from core.api import open_store
        from migrations import upgrade
        st = open_store(cfg.database_url, cfg.sqlite_synchronous)
        upgrade(st.engine)
        st.close()
        print(f"jobgate: schema of {cfg.database_url} is up to date")
        return 0
    from core.api import StoreLocked
    from .server import run
    try:
        run(cfg, sockets=socks)
    except StoreLocked as e:
        print(f"jobgate: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
