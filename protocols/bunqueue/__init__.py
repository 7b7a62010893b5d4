"""The bunqueue dialect: length-prefixed MessagePack frames (bunqueue-tcp-protocol.txt).

Sans-IO: codec.FrameReader cuts frames, session.Session runs commands through the engine port
and returns framed replies, connection.Connection runs a Session over the connection contract
(protocols/contract.py). `REGISTRATION` is what the gateway's registry lists.
"""
from ..contract import Option, Registration, connection_options, lazy_call, lazy_exports

#: the largest frame accepted by default (protocols/bunqueue/codec.py MAX_FRAME, kept equal
#: by tests/test_registry.py; not imported from there so that the registry stays light)
MAX_FRAME = 64 * 1024 * 1024

__all__ = ["BunqueueInfo", "Connection", "FrameReader", "MAX_FRAME", "Session", "connect",
           "REGISTRATION"]


_EXPORTS = {"FrameReader": ".codec", "Connection": ".connection", "connect": ".connection",
            "BunqueueInfo": ".info", "Session": ".session"}



def _state(port, options: dict, context):
    from .info import BunqueueInfo
    info = BunqueueInfo(port, options["auth_tokens"], options["rate_limit"],
                        context.database_path, options["max_frame"],
                        options["pre_auth_max_frame"], options["auth_timeout_s"],
                        getattr(context, "access", None))
    # shared mode: the counters that Metrics and Stats add up over the nodes (with the HTTP
    # API's: protocols/http/state.py; core/shared_figures.py)
    port.share_figures("bunqueue", info.figures)
    return info


REGISTRATION = Registration(
    name="bunqueue",
    default_port=6789,
    make_state=_state,
    session_factory=lazy_call(__name__, ".connection", "connect"),
    refuse_reply=None,   # the reference has none: the connection is closed
    options_path=("bunqueue",),
    options=(
        Option("auth_tokens", "str_list", (), help="clients must Auth with one; none: open"),
        Option("rate_limit", "int", 0, 0, 10**9, "commands per second per connection, 0: off"),
        Option("max_frame", "int", MAX_FRAME, 1024, 2**32 - 1,
               "largest frame in bytes; a larger one closes the connection"),
        Option("pre_auth_max_frame", "int", 64 * 1024, 16, 2**32 - 1,
               "largest frame in bytes before Auth (auth_tokens set); a larger one closes"),
        Option("auth_timeout_s", "int", 10, 0, 86400,
               "seconds a connection may take to Auth (auth_tokens set), 0: no limit"),
    # the reference closes a connection only when it holds a partial frame (its stall timer,
    # TCP_IDLE_TIMEOUT_MS, default 60 s); an idle connection without one stays open
    ) + connection_options(idle_timeout_s=0, half_sent_timeout_s=60),
    summary="bunqueue 2.9.5 TCP protocol (length-prefixed MessagePack, pipelining)",
)


__getattr__ = lazy_exports(__name__, _EXPORTS)
