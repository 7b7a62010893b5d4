"""The `http` listener: bunqueue 2.9.5's HTTP API (bunqueue-protocol-architecture.txt "HTTP
Endpoints"; golden: tests/data/bunqueue-http-golden.json; docs/http.md).

Framework: aiohttp.web, run on the server's own event loop (aiohttp.web.AppRunner +
SockSite on the listening socket the gateway bound). Why aiohttp and not Starlette on
uvicorn: one package that is both the HTTP server and the routing layer, with a documented
API for serving an already-bound socket inside a running loop (SockSite) and WebSockets in
the same package (for `/ws`); uvicorn's Server is meant to own the loop and its signals.

Contract (protocols/contract.py): HTTP parsing is the framework's, so this listener does not
take the push-style Session path (feeding bytes to aiohttp's low-level protocol objects would
couple us to its internals). Its Registration sets `serve`: the gateway binds the socket as
for every listener (early bind, TLS context, `--listen http=...`) and hands it over with
ServeHooks (`wait_durable`: replies to mutations wait for the commit, as a durable send).

Engine access: the port only. Each request runs the bunqueue command the reference's route
runs (PUSH, PULL, GetJob, ACK, FAIL) through protocols/bunqueue's Session (one per
principal), so the job JSON, option parsing and errors are the bunqueue listener's.
"""
from ..contract import Option, Registration, lazy_call

__all__ = ["REGISTRATION"]


def _state(port, options: dict, context):
    from .state import HttpState
    return HttpState(port, context, options["cors_origins"])


REGISTRATION = Registration(
    name="http",
    default_port=6790,
    make_state=_state,
    session_factory=None,   # serves its own connections (aiohttp): `serve`
    serve=lazy_call(__name__, ".app", "serve"),
    options_path=("http",),
    options=(
        # the reference's cors.origins / CORS_ALLOW_ORIGIN (default none: an empty header)
        Option("cors_origins", "str_list", (),
               help="Access-Control-Allow-Origin values (e.g. ['*']); none: an empty header"),
    ),
    summary="bunqueue 2.9.5 HTTP API (/health, /ready, /stats, /queues/:q/jobs, /jobs/:id)",
)
