"""jobgate's configuration: YAML file, defaults, validation, command-line overrides.

A file looks like this (every key optional; unknown keys are an error naming the key):

    listeners:
      beanstalk: {host: 127.0.0.1, port: 11300}    # or {unix: /run/jobgate.sock}
      workq: {host: 127.0.0.1, port: 9922}
      bunqueue: {host: 127.0.0.1, port: 6789}
    database:
      url: sqlite:///jobgate.db                     # or postgresql+psycopg://user@host/db
      sqlite_synchronous: normal                    # normal | full
    durability: commit                              # commit | buffered | memory
    history:
      enabled: true
      retention_days: 30                            # 0 keeps job_events forever
      prune_interval_s: 3600                        # s between prunes; the first min(60, this) after start
    limits:
      max_connections: 10000
      beanstalk: {max_job_size: 65535, line_max: 224}
    log: {level: info, format: json}                # format: json | text
    bunqueue:
      auth_tokens: [secret1, secret2]               # clients must Auth with one; none: open
      rate_limit: 0                                 # commands/s per connection, 0: unlimited
      max_frame: 67108864                           # bytes; a larger frame closes the link

Units: sizes in bytes, retention in days, the prune interval in seconds, rate limit in commands
per second.
"""
from __future__ import annotations

from dataclasses import dataclass, field

DIALECTS = ("beanstalk", "workq", "bunqueue")
DEFAULT_PORTS = {"beanstalk": 11300, "workq": 9922, "bunqueue": 6789}
DURABILITY = ("commit", "buffered", "memory")


class ConfigError(ValueError):
    """A bad configuration value; the message names the key (e.g. `limits.beanstalk.line_max`)."""


@dataclass
class Listener:
    """One listening address: TCP host/port, or a unix socket path (`unix`)."""

    dialect: str
    host: str = "127.0.0.1"
    port: int = 0
    unix: str | None = None

    def describe(self) -> str:
        """`unix:/path` or `host:port`."""
        return f"unix:{self.unix}" if self.unix else f"{self.host}:{self.port}"


@dataclass
class Config:
    """The validated configuration (see the module docstring for the file format)."""

    listeners: list = field(default_factory=lambda: [Listener("beanstalk", "127.0.0.1", 11300),
                                                     Listener("workq", "127.0.0.1", 9922),
                                                     Listener("bunqueue", "127.0.0.1", 6789)])
    database_url: str = "sqlite:///jobgate.db"
    sqlite_synchronous: str = "normal"
    durability: str = "commit"
    history_enabled: bool = True
    history_retention_days: int = 30
    history_prune_interval_s: int = 3600
    max_connections: int = 10000
    beanstalk_max_job_size: int = 65535
    beanstalk_line_max: int = 224
    log_level: str = "info"
    log_format: str = "json"
    bunqueue_auth_tokens: list = field(default_factory=list)
    bunqueue_rate_limit: int = 0
    bunqueue_max_frame: int = 64 * 1024 * 1024


def _keys(d, allowed: tuple, where: str) -> dict:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise ConfigError(f"{where or 'config'}: must be a mapping")
    for k in d:
        if k not in allowed:
            raise ConfigError(f"unknown config key '{where + '.' if where else ''}{k}'")
    return d


def _int(v, key: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ConfigError(f"config key '{key}': must be an integer from {lo} to {hi}, not {v!r}")
    return v


def _choice(v, key: str, options: tuple) -> str:
    if not isinstance(v, str) or v.lower() not in options:
        raise ConfigError(f"config key '{key}': must be one of {', '.join(options)}, not {v!r}")
    return v.lower()


def _str(v, key: str) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(f"config key '{key}': must be a non-empty string, not {v!r}")
    return v


def parse_listener(dialect: str, d, where: str) -> Listener:
    """Validate one listener mapping {host, port} or {unix}."""
    d = _keys(d, ("host", "port", "unix"), where)
    if "unix" in d:
        if "host" in d or "port" in d:
            raise ConfigError(f"config key '{where}': give either unix or host/port")
        return Listener(dialect, unix=_str(d["unix"], f"{where}.unix"))
    return Listener(dialect, _str(d.get("host", "127.0.0.1"), f"{where}.host"),
                    _int(d.get("port", DEFAULT_PORTS[dialect]), f"{where}.port", 0, 65535))


def from_dict(raw) -> Config:
    """Build a Config from a parsed YAML document (None = all defaults). Raises ConfigError."""
    raw = _keys(raw, ("listeners", "database", "durability", "history", "limits", "log",
                      "bunqueue"), "")
    c = Config()
    if "listeners" in raw:
        ls = _keys(raw["listeners"], DIALECTS, "listeners")
        c.listeners = [parse_listener(k, v, f"listeners.{k}") for k, v in ls.items()]
    db = _keys(raw.get("database"), ("url", "sqlite_synchronous"), "database")
    if "url" in db:
        c.database_url = _str(db["url"], "database.url")
    if "sqlite_synchronous" in db:
        c.sqlite_synchronous = _choice(db["sqlite_synchronous"], "database.sqlite_synchronous",
                                       ("normal", "full"))
    if "durability" in raw:
        c.durability = _choice(raw["durability"], "durability", DURABILITY)
    h = _keys(raw.get("history"), ("enabled", "retention_days", "prune_interval_s"), "history")
    if "enabled" in h:
        if not isinstance(h["enabled"], bool):
            raise ConfigError("config key 'history.enabled': must be true or false")
        c.history_enabled = h["enabled"]
    if "retention_days" in h:
        c.history_retention_days = _int(h["retention_days"], "history.retention_days", 0, 36500)
    if "prune_interval_s" in h:
        c.history_prune_interval_s = _int(h["prune_interval_s"], "history.prune_interval_s", 1,
                                          7 * 86400)
    lim = _keys(raw.get("limits"), ("max_connections", "beanstalk"), "limits")
    if "max_connections" in lim:
        c.max_connections = _int(lim["max_connections"], "limits.max_connections", 1, 10**7)
    bl = _keys(lim.get("beanstalk"), ("max_job_size", "line_max"), "limits.beanstalk")
    if "max_job_size" in bl:
        c.beanstalk_max_job_size = _int(bl["max_job_size"], "limits.beanstalk.max_job_size",
                                        0, 2**32 - 1)
    if "line_max" in bl:
        c.beanstalk_line_max = _int(bl["line_max"], "limits.beanstalk.line_max", 16, 65536)
    lg = _keys(raw.get("log"), ("level", "format"), "log")
    if "level" in lg:
        c.log_level = _choice(lg["level"], "log.level", ("debug", "info", "warning", "error"))
    if "format" in lg:
        c.log_format = _choice(lg["format"], "log.format", ("json", "text"))
    bq = _keys(raw.get("bunqueue"), ("auth_tokens", "rate_limit", "max_frame"), "bunqueue")
    if "auth_tokens" in bq:
        toks = bq["auth_tokens"]
        if not isinstance(toks, list):
            raise ConfigError("config key 'bunqueue.auth_tokens': must be a list of strings")
        c.bunqueue_auth_tokens = [_str(t, "bunqueue.auth_tokens") for t in toks]
    if "rate_limit" in bq:
        c.bunqueue_rate_limit = _int(bq["rate_limit"], "bunqueue.rate_limit", 0, 10**9)
    if "max_frame" in bq:
        c.bunqueue_max_frame = _int(bq["max_frame"], "bunqueue.max_frame", 1024, 2**32 - 1)
    return c


def check_database_url(url: str) -> None:
    """Raise ConfigError naming `database.url` unless `url` is a SQLAlchemy URL whose dialect
    and driver are installed (checked without connecting)."""
    import sqlalchemy as sa
    import sqlalchemy.exc
    try:
        sa.make_url(url).get_dialect()
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError) as e:
        raise ConfigError(f"config key 'database.url': unusable database URL {url!r}: {e}") from None
    except ImportError as e:
        raise ConfigError(f"config key 'database.url': the driver for {url!r} is not "
                          f"installed ({e})") from None


def load(path: str | None) -> Config:
    """Read and validate the YAML file at `path` (None: defaults). Raises ConfigError."""
    if path is None:
        return Config()
    import yaml
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    return from_dict(raw)


def parse_listen_flag(value: str) -> Listener:
    """`--listen DIALECT=HOST:PORT` or `DIALECT=unix:/path`. Raises ConfigError."""
    dialect, sep, addr = value.partition("=")
    if not sep or dialect not in DIALECTS:
        raise ConfigError(f"--listen {value!r}: expected DIALECT=HOST:PORT with DIALECT one of "
                          f"{', '.join(DIALECTS)}")
    if addr.startswith("unix:"):
        return Listener(dialect, unix=addr[5:])
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--listen {value!r}: expected HOST:PORT")
    return Listener(dialect, host.strip("[]") or "0.0.0.0", int(port))
