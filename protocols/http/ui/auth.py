"""The dashboard's login and request checks (docs/dashboard.md, "Auth").

Tokens are the HTTP listener's (HttpState.principal: the bunqueue tokens of the access model).
A browser signs in on /ui/login with a token; it is kept in the cookie COOKIE (HttpOnly,
SameSite=Strict, Path=/ui; Secure on TLS). A request may also carry `Authorization: Bearer`.
No tokens configured: the dashboard is open, as the rest of the HTTP API.

Cross-site requests: every POST must come from the dashboard's own origin (its `Origin`
header, else its `Referer`, equals the request's scheme://host); with the SameSite=Strict
cookie a forged cross-site form carries no token and fails the origin check too.
"""
from __future__ import annotations

from urllib.parse import urlsplit

COOKIE = "jobgate_ui"


class Auth:
    """`state`: the listener's HttpState."""

    def __init__(self, state) -> None:
        self.state = state

    @property
    def open(self) -> bool:
        """True when no token is needed."""
        return not self.state.requires_token()

    def principal(self, request):
        """(ok, principal) of `request`: its Authorization header, else its cookie."""
        header = request.headers.get("Authorization")
        if header is None and not self.open:
            token = request.cookies.get(COOKIE)
            header = None if token is None else "Bearer " + token
            if header is None:
                return False, None
        return self.state.principal(header)

    def check_token(self, token: str) -> bool:
        """True when `token` (str) names a principal."""
        return bool(token) and self.state.principal("Bearer " + token)[0]

    @staticmethod
    def same_origin(request) -> bool:
        """True when a POST's Origin (else Referer) is the request's own scheme://host."""
        own = f"{request.scheme}://{request.host}"
        origin = request.headers.get("Origin")
        if origin is None or origin == "null":
            ref = request.headers.get("Referer")
            if not ref:
                return False
            p = urlsplit(ref)
            origin = f"{p.scheme}://{p.netloc}"
        return origin == own

    @staticmethod
    def set_cookie(response, token: str, secure: bool) -> None:
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/ui",
                            secure=secure)

    @staticmethod
    def clear_cookie(response) -> None:
        response.del_cookie(COOKIE, path="/ui")
