"""TLS and the access model on the gateway side (issue 15, item 3; docs/operations.md, "TLS and
access"): the `tls` / `open` keys of a listener and the `access` section of the config, the
start-up checks (exit status 2, the message names the key), the listeners' ssl contexts, and
the principal a connection gets when it is made.

    listeners:
      beanstalk: {host: 0.0.0.0, port: 11300,
                  tls: {cert: server.pem, key: server.key, client_ca: clients-ca.pem}}
      workq: {host: 127.0.0.1, port: 9922, open: true}
    access:
      principals:
        - {token: secret1, queues: ["emails*", "reports"], name: mailer}
        - {cert_cn: worker-1, queues: ["emails*"]}
        - {unix_user: deploy, queues: ["*"]}
      anonymous: ["*"]

The rule itself (which queues a principal reaches) lives in core (core/access.py,
core/access_port.py); this module only builds it from the config and identifies peers.
"""
from __future__ import annotations

import socket
import struct

from .config import ConfigError

TLS_KEYS = ("cert", "key", "client_ca")
_IDENTITIES = ("token", "cert_cn", "unix_user")


# ------------------------------------------------------------------------------ parsing
def parse_tls(d, where: str) -> dict:
    """Validate a listener's `tls` mapping {cert, key, client_ca (optional)}: paths as
    non-empty strings (read at start by prepare()). Raises ConfigError naming the key."""
    if not isinstance(d, dict):
        raise ConfigError(f"config key '{where}': must be a mapping with cert and key")
    for k in d:
        if k not in TLS_KEYS:
            raise ConfigError(f"unknown config key '{where}.{k}'")
    for k in ("cert", "key"):
        if k not in d:
            raise ConfigError(f"config key '{where}.{k}': required when TLS is on")
    for k, v in d.items():
        if not isinstance(v, str) or not v:
            raise ConfigError(f"config key '{where}.{k}': must be a file path, not {v!r}")
    return dict(d)


def _patterns(v, key: str) -> tuple:
    if not isinstance(v, list) or not all(isinstance(p, str) and p for p in v):
        raise ConfigError(f"config key '{key}': must be a list of queue-name patterns "
                          f"(strings such as \"emails*\"), not {v!r}")
    return tuple(v)


def parse_access(d) -> dict:
    """Validate the `access` section: {principals: [{token | cert_cn | unix_user, queues,
    name?}], anonymous: [patterns]}. Returns {"principals": [(kind, key, name, patterns)],
    "anonymous": patterns}. Raises ConfigError naming the key."""
    if d is None:
        d = {}
    if not isinstance(d, dict):
        raise ConfigError("config key 'access': must be a mapping")
    for k in d:
        if k not in ("principals", "anonymous"):
            raise ConfigError(f"unknown config key 'access.{k}'")
    out = []
    seen = set()
    ps = d.get("principals", [])
    if not isinstance(ps, list):
        raise ConfigError("config key 'access.principals': must be a list")
    for i, p in enumerate(ps):
        where = f"access.principals[{i}]"
        if not isinstance(p, dict):
            raise ConfigError(f"config key '{where}': must be a mapping")
        for k in p:
            if k not in _IDENTITIES + ("queues", "name"):
                raise ConfigError(f"unknown config key '{where}.{k}'")
        ids = [k for k in _IDENTITIES if k in p]
        if len(ids) != 1:
            raise ConfigError(f"config key '{where}': give exactly one of "
                              f"{', '.join(_IDENTITIES)}")
        kind = ids[0]
        v = p[kind]
        if kind == "unix_user" and isinstance(v, int) and not isinstance(v, bool):
            v = str(v)   # a uid
        if not isinstance(v, str) or not v:
            raise ConfigError(f"config key '{where}.{kind}': must be a non-empty string")
        if (kind, v) in seen:
            raise ConfigError(f"config key '{where}.{kind}': {kind} given twice")
        seen.add((kind, v))
        if "queues" not in p:
            raise ConfigError(f"config key '{where}.queues': required (queue-name patterns)")
        name = p.get("name")
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigError(f"config key '{where}.name': must be a non-empty string")
        out.append((kind, v, name, _patterns(p["queues"], f"{where}.queues")))
    anon = _patterns(d["anonymous"], "access.anonymous") if "anonymous" in d else ("*",)
    return {"principals": out, "anonymous": anon}


# ------------------------------------------------------------------------------ start-up
def legacy_tokens(cfg) -> list:
    """bunqueue.auth_tokens (each allowed every queue)."""
    return list(cfg.options.get("bunqueue", {}).get("auth_tokens") or ())


def build_access(cfg):
    """The core.api.Access of `cfg`, or None when access control is off (no `access` section
    and no bunqueue.auth_tokens: the defaults, everything open as before)."""
    from core.api import Access, Principal
    acc = cfg.access
    tokens = legacy_tokens(cfg)
    if acc is None and not tokens:
        return None
    acc = acc or {"principals": [], "anonymous": ("*",)}
    toks = [(t, Principal(f"token:bunqueue.auth_tokens[{i}]", "token", ("*",)))
            for i, t in enumerate(tokens)]
    certs, unix = {}, {}
    kinds = {"token": "token", "cert_cn": "cert", "unix_user": "unix"}
    for i, (kind, key, name, pats) in enumerate(acc["principals"]):
        label = name or (f"access.principals[{i}]" if kind == "token" else key)
        p = Principal(f"{kinds[kind]}:{label}", kinds[kind], pats)
        if kind == "token":
            toks.append((key, p))
        elif kind == "cert_cn":
            certs[key] = p
        else:
            unix[key] = p
    return Access(toks, certs, unix, acc["anonymous"])


def check_listeners(cfg) -> None:
    """Refuse a config where access control is on but a TCP listener cannot tell who connects:
    no client certificates (tls.client_ca), not `open: true`, and not bunqueue with tokens to
    Auth with. Raises ConfigError naming `listeners.<dialect>.open`."""
    access = build_access(cfg)
    if access is None:
        return
    why = "bunqueue tokens are set" if access.has_tokens else "an access section is set"
    for lst in cfg.listeners:
        if lst.unix or lst.open or (lst.tls and lst.tls.get("client_ca")):
            continue
        if lst.dialect in ("bunqueue", "glidemq", "http") and access.has_tokens:
            continue   # their clients authenticate (bunqueue Auth; RESP AUTH; HTTP Bearer)
        raise ConfigError(
            f"config key 'listeners.{lst.dialect}.open': access control is on ({why}), but "
            f"{lst.dialect} listens on {lst.describe()} over TCP without client certificates, "
            f"where {lst.dialect} clients cannot prove who they are, so anyone who connects "
            f"could read the protected queues. Require client certificates "
            f"(listeners.{lst.dialect}.tls.client_ca), listen on a unix socket, or set "
            f"listeners.{lst.dialect}.open: true to let unidentified clients use the queues "
            f"in access.anonymous (default: every queue)")


def _load(ctx_fn, key: str, path: str) -> None:
    import ssl
    try:
        ctx_fn(path)
    except FileNotFoundError:
        raise ConfigError(f"config key '{key}': no such file {path!r}") from None
    except PermissionError:
        raise ConfigError(f"config key '{key}': cannot read {path!r} (permission denied)") \
            from None
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ConfigError(f"config key '{key}': {path!r} does not load: {e}") from None


def ssl_context(tls: dict, where: str):
    """A server ssl.SSLContext for a listener's validated `tls` mapping (TLS 1.2 or newer;
    with client_ca, client certificates are required and verified against it). Raises
    ConfigError naming the key whose file is missing or does not load."""
    import ssl
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)   # parses the certificate on its own
    _load(lambda p: probe.load_verify_locations(cafile=p), f"{where}.cert", tls["cert"])
    _load(lambda p: open(p, "rb").close(), f"{where}.key", tls["key"])
    _load(lambda p: ctx.load_cert_chain(tls["cert"], p), f"{where}.key", tls["key"])
    if tls.get("client_ca"):
        _load(lambda p: ctx.load_verify_locations(cafile=p), f"{where}.client_ca",
              tls["client_ca"])
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def prepare(cfg) -> None:
    """Start-up checks of TLS and access for `cfg` (after command-line overrides): the access
    rule (check_listeners) and every listener's ssl context (built once, kept on the
    listener as `ssl_context`). Raises ConfigError naming the key."""
    for lst in cfg.listeners:
        if lst.tls and lst.ssl_context is None:
            lst.ssl_context = ssl_context(lst.tls, f"listeners.{lst.dialect}.tls")
    check_listeners(cfg)


def keep_security(flag_listener, configured) -> object:
    """A `--listen` listener takes the `tls` and `open` settings of the configured listener of
    its dialect (`configured`, or None): the flag replaces the address only."""
    if configured is not None:
        flag_listener.tls = configured.tls
        flag_listener.open = configured.open
    return flag_listener


# ------------------------------------------------------------------------------ connections
def peer_identity(access, transport, unix: bool):
    """The principal of the peer on `transport` from what the connection proves: the subject
    CN of a verified client certificate (mTLS), or the SO_PEERCRED user of a unix-socket peer.
    None when it proves nothing or matches no configured principal."""
    if unix:
        sock = transport.get_extra_info("socket")
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except (OSError, AttributeError):  # pragma: no cover - not Linux
            return None
        uid = struct.unpack("3i", raw)[1]
        try:
            import pwd
            user = pwd.getpwuid(uid).pw_name
        except (KeyError, ImportError):
            user = None
        return access.for_unix(user, uid)
    cert = transport.get_extra_info("peercert")
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for k, v in rdn:
            if k == "commonName":
                return access.for_cert(v)
    return None


def connection_principal(access, listener, transport):
    """The core.api.Principal bound when a connection is made on `listener`
    (gateway.config.Listener), for `access` (core.api.Access): None when access control is off;
    else the peer's identity (peer_identity), or anonymous on an `open` listener, or NOBODY
    (no queue; a bunqueue client may still Auth)."""
    if access is None:
        return None
    return access.connection(peer_identity(access, transport, bool(listener.unix)),
                             listener.open)
