"""jobgate's configuration: YAML file, defaults, validation, command-line overrides.

A file looks like this (every key optional; unknown keys are an error naming the key):

    listeners:
      beanstalk: {host: 127.0.0.1, port: 11300}    # or {unix: /run/jobgate.sock}
      # any TCP listener: tls: {cert: PATH, key: PATH, client_ca: PATH}, open: true
      # (gateway/access.py; docs/operations.md "TLS and access")
      workq: {host: 127.0.0.1, port: 9922}
      bunqueue: {host: 127.0.0.1, port: 6789}
      glidemq: {host: 127.0.0.1, port: 6380}        # glide-mq producers over RESP
      http: {host: 127.0.0.1, port: 6790}           # bunqueue's HTTP API (docs/http.md)
    database:
      url: sqlite:///jobgate.db                     # or postgresql+psycopg://user@host/db
      sqlite_synchronous: normal                    # normal | full
      writer_thread: auto                           # auto | on | off (see Config)
      mode: single                                  # single | shared (PostgreSQL, docs/scaling.md)
      poll_interval_ms: 1000                        # shared: claim poll when no NOTIFY came
      flow_sweep_ms: 5000                           # shared: leader's sweep of stalled flow parents (0: off)
      idle_in_transaction_ms: 10000                 # shared: PostgreSQL ends a node session idle in a transaction this long (0: not set by jobgate)
    durability: commit                              # commit | buffered | memory
    history:
      enabled: true
      retention_days: 30                            # 0 keeps job_events forever
      prune_interval_s: 3600                        # s between prunes; the first min(60, this) after start
    limits:
      max_connections: 10000                        # capped below the open-files limit
      max_buffered_bytes: 268435456                 # unfinished input held, all clients
      beanstalk: {max_job_size: 65535, line_max: 224, idle_timeout_s: 0, half_sent_timeout_s: 30}
      workq: {idle_timeout_s: 0, half_sent_timeout_s: 30}
      glidemq: {max_bulk_bytes: 67108864, idle_timeout_s: 0, half_sent_timeout_s: 30}
    log: {level: info, format: json}                # format: json | text
    access:                                         # who reaches which queues (gateway/access.py)
      principals: [{token: s1, queues: ["emails*"]}, {cert_cn: w1, queues: ["*"]}]
      anonymous: ["*"]                              # unidentified clients on open listeners
    bunqueue:
      auth_tokens: [secret1, secret2]               # clients must Auth with one; none: open
      rate_limit: 0                                 # commands/s per connection, 0: unlimited
      max_frame: 67108864                           # bytes; a larger frame closes the link
      idle_timeout_s: 0                             # 0: never (see docs/operations.md)
      half_sent_timeout_s: 60
      pre_auth_max_frame: 65536                     # bytes, before Auth (tokens set)
      auth_timeout_s: 10                            # s to Auth (tokens set), 0: no limit
    http:
      cors_origins: ["*"]                           # Access-Control-Allow-Origin; none: empty
    webhooks:                                       # delivery of job events (gateway/webhooks.py)
      allow: ["127.0.0.1/32", hooks.corp]           # receivers exempt from the SSRF rules
      timeout_ms: 10000                             # per request
      max_attempts: 3                               # per event, retries included
      retry_delay_ms: 1000                          # backoff: this times the attempt number
      queue_size: 1000                              # events waiting per webhook (then dropped)
      concurrency: 4                                # requests in flight per webhook

The listener names, default ports and the dialects' own sections (`limits.beanstalk`,
`bunqueue`) come from the dialect registry (gateway/registry.py): each registration lists its
options and where they live. Units: sizes in bytes, retention in days, the prune interval in
seconds, rate limit in commands per second, timeouts (`*_timeout_s`) in seconds, 0 = off.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import registry

DURABILITY = ("commit", "buffered", "memory")
_BASE_KEYS = ("listeners", "database", "durability", "history", "limits", "log", "access",
              "webhooks")
#: webhooks.<key> -> (Config attribute, lowest, highest) for the integer settings
_WEBHOOK_INTS = {"timeout_ms": ("webhook_timeout_ms", 1, 3_600_000),
                 "max_attempts": ("webhook_max_attempts", 1, 100),
                 "retry_delay_ms": ("webhook_retry_delay_ms", 0, 3_600_000),
                 "queue_size": ("webhook_queue_size", 1, 10_000_000),
                 "concurrency": ("webhook_concurrency", 1, 1000)}


class ConfigError(ValueError):
    """A bad configuration value; the message names the key (e.g. `limits.beanstalk.line_max`)."""


@dataclass
class Listener:
    """One listening address: TCP host/port, or a unix socket path (`unix`). `tls`: None or
    {cert, key, client_ca?} file paths; `open`: unidentified clients may use the queues of
    access.anonymous; `ssl_context`: built from `tls` at start (gateway/access.py prepare)."""

    dialect: str
    host: str = "127.0.0.1"
    port: int = 0
    unix: str | None = None
    tls: dict | None = None
    open: bool = False
    ssl_context: object = None

    def describe(self) -> str:
        """`unix:/path` or `host:port`."""
        return f"unix:{self.unix}" if self.unix else f"{self.host}:{self.port}"


def _default_listeners() -> list:
    return [Listener(n, "127.0.0.1", r.default_port) for n, r in registry.DIALECTS.items()
            if r.default_listener]


def _default_options() -> dict:
    return {n: {o.name: (list(o.default) if o.kind == "str_list" else o.default)
                for o in r.options} for n, r in registry.DIALECTS.items()}


@dataclass
class Config:
    """The validated configuration (see the module docstring for the file format).

    `options`: dialect name -> {option name: value} (its Registration's options).
    """

    listeners: list = field(default_factory=_default_listeners)
    database_url: str = "sqlite:///jobgate.db"
    sqlite_synchronous: str = "normal"
    #: where commits run: "on" a writer thread (the loop serves while a batch commits), "off"
    #: on the event loop, "auto" (default): on for PostgreSQL (the commit waits on the network),
    #: off for SQLite (a CPU-bound commit under the GIL: measured faster on the loop,
    #: docs/performance.md).
    writer_thread: str = "auto"
    #: "single": this server owns the database (the default); "shared": one of several nodes
    #: on one PostgreSQL (issue 19, docs/scaling.md), durability commit or buffered
    database_mode: str = "single"
    #: shared mode: ms between claim polls for waiting reservers when no NOTIFY woke them
    poll_interval_ms: int = 1000
    #: shared mode: ms between the leader's sweeps for flow parents whose children completed
    #: without telling them (a note lost with its node; core/shared_flows.py); 0: never
    flow_sweep_ms: int = 5000
    #: shared mode: ms after which PostgreSQL ends a node's session that stays inside a
    #: transaction without a statement (idle_in_transaction_session_timeout): a node frozen
    #: mid-transaction lets go of its row locks (docs/scaling.md); 0: jobgate sets nothing
    #: (the server's, role's or database's own setting applies; for poolers that refuse
    #: the libpq `options` startup parameter, docs/operations.md)
    idle_in_transaction_ms: int = 10_000
    durability: str = "commit"
    history_enabled: bool = True
    history_retention_days: int = 30
    history_prune_interval_s: int = 3600
    max_connections: int = 10000
    #: bytes of unfinished commands/frames held for all clients together (gateway/limits.py)
    max_buffered_bytes: int = 256 * 1024 * 1024
    log_level: str = "info"
    log_format: str = "json"
    options: dict = field(default_factory=_default_options)
    #: the validated `access` section (gateway/access.py parse_access), None when absent
    access: dict | None = None
    #: webhooks (docs/operations.md "Webhooks"): SSRF allow-list entries (networks such as
    #: 127.0.0.1/32, or host names), per-request timeout (ms), attempts per event, backoff
    #: step (ms; attempt n waits n times it), events queued per webhook before the oldest is
    #: dropped, requests in flight per webhook (the reference: 10 s, 3, 1 s, unbounded)
    webhook_allow: list = field(default_factory=list)
    webhook_timeout_ms: int = 10_000
    webhook_max_attempts: int = 3
    webhook_retry_delay_ms: int = 1000
    webhook_queue_size: int = 1000
    webhook_concurrency: int = 4

    def option(self, dialect: str, name: str):
        """The value of dialect `dialect`'s option `name`."""
        return self.options[dialect][name]


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


def _option(opt, v, key: str):
    """Validate one dialect option value (protocols.contract.Option)."""
    if opt.kind == "int":
        return _int(v, key, opt.lo, opt.hi)
    if opt.kind == "str_list":
        if not isinstance(v, list):
            raise ConfigError(f"config key '{key}': must be a list of strings")
        return [_str(t, key) for t in v]
    raise ConfigError(f"config key '{key}': unsupported option kind {opt.kind!r}")


def _dialect_options(c: Config, raw: dict, parent: tuple) -> None:
    """Validate the option sections of the dialects whose options_path is `parent` plus one
    key, found in `raw` (the mapping at `parent`)."""
    for name, reg in registry.DIALECTS.items():
        path = tuple(reg.options_path)
        if len(path) != len(parent) + 1 or path[:-1] != parent:
            continue
        where = ".".join(path)
        d = _keys(raw.get(path[-1]), tuple(o.name for o in reg.options), where)
        for opt in reg.options:
            if opt.name in d:
                c.options[name][opt.name] = _option(opt, d[opt.name], f"{where}.{opt.name}")


def parse_listener(dialect: str, d, where: str) -> Listener:
    """Validate one listener mapping {host, port, tls?, open?} or {unix, open?}."""
    d = _keys(d, ("host", "port", "unix", "tls", "open"), where)
    if "open" in d and not isinstance(d["open"], bool):
        raise ConfigError(f"config key '{where}.open': must be true or false")
    if "unix" in d:
        if "host" in d or "port" in d:
            raise ConfigError(f"config key '{where}': give either unix or host/port")
        if "tls" in d:
            raise ConfigError(f"config key '{where}.tls': TLS is for TCP listeners, not unix "
                              "sockets (a unix peer is identified by its user)")
        lst = Listener(dialect, unix=_str(d["unix"], f"{where}.unix"))
    else:
        lst = Listener(dialect, _str(d.get("host", "127.0.0.1"), f"{where}.host"),
                       _int(d.get("port", registry.get(dialect).default_port), f"{where}.port",
                            0, 65535))
        if "tls" in d:
            from .access import parse_tls
            lst.tls = parse_tls(d["tls"], f"{where}.tls")
    lst.open = d.get("open", False)
    return lst


def from_dict(raw) -> Config:
    """Build a Config from a parsed YAML document (None = all defaults). Raises ConfigError."""
    tops = tuple(dict.fromkeys(_BASE_KEYS + tuple(
        r.options_path[0] for r in registry.DIALECTS.values() if r.options_path)))
    raw = _keys(raw, tops, "")
    c = Config()
    if "listeners" in raw:
        ls = _keys(raw["listeners"], registry.names(), "listeners")
        c.listeners = [parse_listener(k, v, f"listeners.{k}") for k, v in ls.items()]
    db = _keys(raw.get("database"), ("url", "sqlite_synchronous", "writer_thread", "mode",
                                     "poll_interval_ms", "flow_sweep_ms",
                                     "idle_in_transaction_ms"), "database")
    if "mode" in db:
        c.database_mode = _choice(db["mode"], "database.mode", DATABASE_MODES)
    if "poll_interval_ms" in db:
        v = db["poll_interval_ms"]
        if not isinstance(v, int) or isinstance(v, bool) or not 10 <= v <= 60_000:
            raise ConfigError("config key 'database.poll_interval_ms': must be an integer "
                              "from 10 to 60000 (ms)")
        c.poll_interval_ms = v
    if "flow_sweep_ms" in db:
        v = db["flow_sweep_ms"]
        if not isinstance(v, int) or isinstance(v, bool) or not (v == 0 or 100 <= v <= 3_600_000):
            raise ConfigError("config key 'database.flow_sweep_ms': must be 0 (off) or an "
                              "integer from 100 to 3600000 (ms)")
        c.flow_sweep_ms = v
    if "idle_in_transaction_ms" in db:
        v = db["idle_in_transaction_ms"]
        if not isinstance(v, int) or isinstance(v, bool) or not (v == 0 or
                                                                 100 <= v <= 3_600_000):
            raise ConfigError("config key 'database.idle_in_transaction_ms': must be 0 (not "
                              "set) or an integer from 100 to 3600000 (ms)")
        c.idle_in_transaction_ms = v
    if "writer_thread" in db:
        v = db["writer_thread"]
        v = {True: "on", False: "off"}.get(v, v)   # YAML reads a bare on/off as a boolean
        c.writer_thread = _choice(v, "database.writer_thread", ("auto", "on", "off"))
    if "url" in db:
        c.database_url = check_database_scheme(_str(db["url"], "database.url"), "database.url")
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
    limit_sections = tuple(r.options_path[1] for r in registry.DIALECTS.values()
                           if len(r.options_path) == 2 and r.options_path[0] == "limits")
    lim = _keys(raw.get("limits"), ("max_connections", "max_buffered_bytes") + limit_sections,
                "limits")
    if "max_connections" in lim:
        c.max_connections = _int(lim["max_connections"], "limits.max_connections", 1, 10**7)
    if "max_buffered_bytes" in lim:
        c.max_buffered_bytes = _int(lim["max_buffered_bytes"], "limits.max_buffered_bytes",
                                    1024, 2**48)
    _dialect_options(c, lim, ("limits",))
    lg = _keys(raw.get("log"), ("level", "format"), "log")
    if "level" in lg:
        c.log_level = _choice(lg["level"], "log.level", ("debug", "info", "warning", "error"))
    if "format" in lg:
        c.log_format = _choice(lg["format"], "log.format", ("json", "text"))
    _dialect_options(c, raw, ())
    if "access" in raw:
        from .access import parse_access
        c.access = parse_access(raw["access"])
    wh = _keys(raw.get("webhooks"), ("allow",) + tuple(_WEBHOOK_INTS), "webhooks")
    if "allow" in wh:
        from core.api import AllowList
        if not isinstance(wh["allow"], list):
            raise ConfigError("config key 'webhooks.allow': must be a list of networks "
                              "(127.0.0.1/32) or host names")
        entries = [_str(e, "webhooks.allow") for e in wh["allow"]]
        try:
            AllowList(entries)
        except ValueError as e:
            raise ConfigError(f"config key 'webhooks.allow': {e}") from None
        c.webhook_allow = entries
    for k, (attr, lo, hi) in _WEBHOOK_INTS.items():
        if k in wh:
            setattr(c, attr, _int(wh[k], f"webhooks.{k}", lo, hi))
    return c


#: database.mode values: one server per database, or nodes sharing one PostgreSQL
DATABASE_MODES = ("single", "shared")


def check_shared(cfg) -> None:
    """Raise ConfigError unless shared mode (`database.mode: shared`) has what it needs: a
    PostgreSQL URL and durability commit or buffered."""
    if cfg.database_mode != "shared":
        return
    if not cfg.database_url.startswith("postgresql"):
        raise ConfigError("config key 'database.mode': shared needs a PostgreSQL database.url "
                          f"(postgresql+psycopg://...), not {hide_password(cfg.database_url)!r}")
    if cfg.durability == "memory":
        raise ConfigError("config key 'database.mode': shared needs durability commit or "
                          "buffered, not memory")


#: The database URL schemes jobgate stores jobs in (SQLAlchemy's; `postgresql` is psycopg 3).
DATABASE_SCHEMES = ("sqlite", "sqlite+pysqlite", "postgresql", "postgresql+psycopg")


def hide_password(url: str) -> str:
    """`scheme://user:secret@host/db` -> `scheme://user:***@host/db` (for messages)."""
    scheme, sep, rest = url.partition("://")
    auth, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in auth:
        return url
    return f"{scheme}{sep}{auth.split(':', 1)[0]}:***@{host}"


def check_database_scheme(url: str, key: str) -> str:
    """Return `url` when its scheme is one of DATABASE_SCHEMES; else raise ConfigError naming
    `key` (`database.url`, `--database`), the URL (password hidden) and what is supported.
    String checks only: nothing is imported (it runs before the sockets are bound)."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigError(f"{key} {hide_password(url)!r}: not a database URL; expected "
                          "sqlite:///PATH or postgresql+psycopg://USER@HOST/DB")
    if scheme.lower() not in DATABASE_SCHEMES:
        raise ConfigError(f"{key} {hide_password(url)}: unsupported database {scheme!r}; "
                          "jobgate stores jobs in SQLite (sqlite:///PATH) or PostgreSQL "
                          "(postgresql+psycopg://USER@HOST/DB)")
    return url


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
    if not sep or dialect not in registry.DIALECTS:
        raise ConfigError(f"--listen {value!r}: expected DIALECT=HOST:PORT with DIALECT one of "
                          f"{', '.join(registry.names())}")
    if addr.startswith("unix:"):
        return Listener(dialect, unix=addr[5:])
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--listen {value!r}: expected HOST:PORT")
    return Listener(dialect, host.strip("[]") or "0.0.0.0", int(port))
