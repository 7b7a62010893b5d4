"""The access model: who may reach which queues, the same for every dialect (issue 15, item 3;
docs/operations.md "TLS and access").

A `Principal` is who is on a connection: a bunqueue token, a client certificate's subject CN
(mTLS), a unix-socket peer (SO_PEERCRED user), anonymous on a listener marked `open`, or
"nobody" (not identified on a listener that is not open). It is allowed a set of queue-name
patterns (fnmatch, case-sensitive: `emails*`, `reports`, `*`).

`Access` maps identities to principals (built by the gateway from the config). The rule is
enforced in one place: a connection's dialect session talks to `Port.scoped(principal)`
(core/access_port.py), a view of the engine port that refuses disallowed queue names with
`AccessDenied` (each dialect answers it with its own error) and treats jobs of disallowed queues
as absent (the dialect's not-found answer). Pure values: no I/O, no sockets.
"""
from __future__ import annotations

import hmac
from fnmatch import fnmatchcase

__all__ = ["Principal", "Access", "AccessDenied", "NOBODY", "KINDS"]

#: principal kinds: how the connection was identified
KINDS = ("token", "cert", "unix", "anonymous", "nobody")

#: queue-name decisions a principal caches before starting over (memory bound)
_CACHE_MAX = 4096


class AccessDenied(LookupError):
    """A command named queue `queue`, which its connection's principal may not use. Raised by a
    scoped port (core/access_port.py); each dialect turns it into its own error reply
    (docs/operations.md, "TLS and access")."""

    def __init__(self, queue: str) -> None:
        super().__init__(queue)
        self.queue = queue


class Principal:
    """Who is on a connection. `name`: for logs (`token:mailer`, `cert:worker-1`, `unix:deploy`,
    `anonymous`, `nobody`); `kind`: one of KINDS; `patterns`: queue-name patterns (fnmatch,
    case-sensitive) it may use. `unrestricted`: a pattern is `*` (every queue)."""

    __slots__ = ("name", "kind", "patterns", "unrestricted", "_cache")

    def __init__(self, name: str, kind: str, patterns=()) -> None:
        if kind not in KINDS:
            raise ValueError(f"principal kind must be one of {KINDS}, not {kind!r}")
        self.name = name
        self.kind = kind
        self.patterns = tuple(patterns)
        self.unrestricted = "*" in self.patterns
        self._cache: dict = {}

    def allows(self, queue: str) -> bool:
        """True when this principal may use queue `queue` (a str)."""
        c = self._cache
        r = c.get(queue)
        if r is None:
            r = self.unrestricted or any(fnmatchcase(queue, p) for p in self.patterns)
            if len(c) >= _CACHE_MAX:
                c.clear()
            c[queue] = r
        return r

    def __repr__(self) -> str:
        return f"Principal({self.name!r}, {self.kind!r}, {list(self.patterns)!r})"


#: not identified, on a listener that is not open: no queue at all
NOBODY = Principal("nobody", "nobody", ())


class Access:
    """The configured principals (docs/operations.md, "TLS and access").

    `tokens`: [(token str, Principal)]; `certs`: {subject CN: Principal}; `unix`: {user name or
    uid as str: Principal}; `anonymous`: the Principal of unidentified clients on open listeners.
    """

    def __init__(self, tokens=(), certs=None, unix=None, anonymous=("*",)) -> None:
        self.tokens = [(t.encode("utf-8"), p) for t, p in tokens]
        self.certs = dict(certs or {})
        self.unix = dict(unix or {})
        self.anonymous = Principal("anonymous", "anonymous", anonymous)

    @property
    def has_tokens(self) -> bool:
        """True when some principal is a token (bunqueue clients can Auth)."""
        return bool(self.tokens)

    def for_token(self, token) -> Principal | None:
        """The principal of bunqueue token `token` (constant-time compare), or None."""
        if token.__class__ is not str:
            return None
        t = token.encode("utf-8")
        found = None
        for good, p in self.tokens:   # compare with every token: no early exit to time
            if hmac.compare_digest(t, good) and found is None:
                found = p
        return found

    def for_cert(self, cn: str | None) -> Principal | None:
        """The principal of a client certificate whose subject CN is `cn`, or None."""
        return None if cn is None else self.certs.get(cn)

    def for_unix(self, user: str | None, uid: int | None) -> Principal | None:
        """The principal of a unix-socket peer (`user` name, `uid`), or None."""
        p = self.unix.get(user) if user is not None else None
        if p is None and uid is not None:
            p = self.unix.get(str(uid))
        return p

    def connection(self, identity: Principal | None, open_listener: bool) -> Principal:
        """The principal bound when a connection is made: its identity's, else anonymous on an
        open listener, else NOBODY."""
        if identity is not None:
            return identity
        return self.anonymous if open_listener else NOBODY
