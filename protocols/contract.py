"""The connection contract between the gateway and every dialect (DESIGN.md, "Networking").

A dialect is one package under protocols/ exporting one `Registration`. For each accepted
connection the gateway calls `registration.session_factory(state, transport)`: the session is
push-style and sans-IO. The gateway feeds it bytes (`data_received`), tells it when the peer
stopped sending (`eof_received`) or is gone (`connection_lost`); the session hands reply bytes
to `transport.send()` at once or later (a waiter firing), and never reads a socket or sleeps.

`Transport` is what the session may ask of the gateway:

- `send(data, durable=False)`: queue `data` for the peer, in order. `durable=True`: not before
  every mutation made so far is committed (durability `commit`; DESIGN.md "Storage and
  durability"); data sent after it waits behind it.
- `close()`: close once everything sent so far has been written.
- `pause_reading()` / `resume_reading()`: stop / restart feeding `data_received` (backpressure
  of a session that holds input it cannot run yet). Calls nest: reading resumes after as many
  resumes as pauses.
- `defer(fn)`: call `fn()` soon, outside the current engine call. A waiter's callback runs
  inside another connection's command; a session that must run more commands when its wait
  ends defers that work (the engine is not re-entrant).
- `principal` (attribute, optional): the core.api.Principal bound when the connection was made
  (client certificate, unix-socket peer, anonymous on an open listener), or None when no
  access control is configured. The session reaches the engine through
  `port.scoped(principal)` and answers core.api.AccessDenied with its dialect's error
  (docs/operations.md, "TLS and access"). A transport without it means None.

Optional session methods the gateway calls when present: `pause_writing()` /
`resume_writing()` when the peer does not read its replies fast enough (a session with
unsolicited output, such as bunqueue's events, holds it meanwhile); `partial_input() -> int`:
bytes of an unfinished command or frame its parser holds (0 when none; for the half-sent
timeout and the server-wide buffer budget, gateway/limits.py); `handshake_pending() -> bool`:
True while the connection must still authenticate (closed after the dialect's option
`auth_timeout_s`, when it has one).

A dialect whose protocol is served by a framework that owns its connections (HTTP: the `http`
listener, protocols/http) sets `Registration.serve` instead of `session_factory`: the gateway
binds its socket as for any listener and calls `await serve(state, sock, hooks)` once;
`hooks` is a ServeHooks. It returns an object whose `async aclose()` stops serving.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Protocol


class Transport(Protocol):
    """The gateway side of one connection (see the module docstring)."""

    def send(self, data: bytes, durable: bool = False) -> None: ...

    def close(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def defer(self, fn: Callable[[], None]) -> None: ...


class Session(Protocol):
    """The dialect side of one connection (see the module docstring)."""

    def data_received(self, data: bytes) -> None: ...

    def eof_received(self) -> None: ...

    def connection_lost(self) -> None: ...


class Context(NamedTuple):
    """Facts about the running server a dialect may report: `version` (what beanstalk's stats
    calls the server version, "1.12") and `database_path` (the SQLite file, or None); and
    `access`: the core.api.Access of the server (None: no access control configured)."""

    version: str = "1.12"
    database_path: str | None = None
    access: object = None


class ServeHooks(NamedTuple):
    """What the gateway gives a self-serving listener (`Registration.serve`).

    `wait_durable()`: a coroutine function; awaited after a mutation, it returns once every
    mutation made so far is committed (durability `commit`; at once otherwise), as
    `Transport.send(durable=True)` holds a reply. `ssl_context`: the listener's
    ssl.SSLContext (TLS configured) or None. `address`: "host:port" or "unix:/path".
    `metrics`: None, or a coroutine function, `await metrics() -> (body bytes, content type
    str)`: the server's Prometheus exposition (gateway/metrics_export.py), served at `GET
    /metrics`."""

    wait_durable: Callable
    ssl_context: object = None
    address: str = ""
    metrics: Callable | None = None


@dataclass(frozen=True)
class Option:
    """One configuration key of a dialect: `name`, `kind` ("int" or "str_list"), `default`,
    and for ints the allowed range [`lo`, `hi`]; `help` says what it is (with its unit)."""

    name: str
    kind: str
    default: object
    lo: int = 0
    hi: int = 0
    help: str = ""


@dataclass(frozen=True)
class Registration:
    """What a dialect package exports (its `REGISTRATION`).

    `name`: the listener name in config and `--listen`; `default_port`; `make_state(port,
    options, context)`: the dialect's server-wide state, once per server (`port` is the
    core.api.Port, `options` a dict of its Option values, `context` a Context);
    `session_factory(state, transport)`: one Session per connection; `refuse_reply`: bytes sent
    to a connection refused at `limits.max_connections` before it is closed (None: closed
    silently); `options_path`: where its options live in the YAML config (e.g.
    ("limits", "beanstalk")); `options`: its Option list; `summary`: one line for --help;
    `serve`: None, or for a listener that serves its own connections (HTTP) `async
    serve(state, sock, hooks: ServeHooks) -> server with async aclose()` (its
    `session_factory` is then None); `default_listener`: False keeps it out of the listeners
    started when the config names none (it runs only when configured or given to --listen).

    A dialect's state may have `operations() -> {command name: count}`: the commands its
    connections ran since start (plain counters kept by its sessions; read when /metrics is
    scraped: jobgate_operations_total, docs/metrics.md).
    """

    name: str
    default_port: int
    make_state: Callable
    session_factory: Callable
    refuse_reply: bytes | None = None
    options_path: tuple = ()
    options: tuple = field(default_factory=tuple)
    summary: str = ""
    serve: Callable | None = None
    default_listener: bool = True


def connection_options(idle_timeout_s: int = 0, half_sent_timeout_s: int = 30) -> tuple:
    """The connection timeouts every dialect lists among its options (gateway/limits.py),
    with its defaults: `idle_timeout_s` (close a connection that sent nothing for that many
    s; 0: never) and `half_sent_timeout_s` (close a connection that has held the same
    unfinished command or frame that many s; 0: never)."""
    return (
        Option("idle_timeout_s", "int", idle_timeout_s, 0, 365 * 86400,
               "close a connection that sent nothing for this many s; 0: never"),
        Option("half_sent_timeout_s", "int", half_sent_timeout_s, 0, 86400,
               "close a connection holding one unfinished command this many s; 0: never"),
    )


def lazy_exports(package: str, exports: dict) -> Callable:
    """A module `__getattr__` for a dialect package whose names are imported on first use
    (`exports`: name -> submodule such as ".session"), so that importing the package, and so
    the registry and the command line before it binds, loads only its REGISTRATION (issue 14:
    start-up). Raises AttributeError for other names."""
    def __getattr__(name: str):
        mod = exports.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib
        return getattr(importlib.import_module(mod, package), name)
    return __getattr__


def lazy_call(package: str, module: str, name: str) -> Callable:
    """A function that imports `module` of `package` on its first call and then calls its
    `name` with the same arguments: a Registration's session factory that does not load the
    session at import time."""
    target = None

    def call(*args):
        nonlocal target
        if target is None:
            import importlib
            target = getattr(importlib.import_module(module, package), name)
        return target(*args)
    return call
