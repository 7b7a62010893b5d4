"""The glide-mq dialect over RESP (Valkey/Redis's protocol): glide-mq producers enqueue with
`FCALL glidemq_*` and read `glide:{Q}:…` keys, unchanged (glide-mq-wire-protocol.txt,
docs/glide-mq.md).

`REGISTRATION` is what the gateway's registry lists (protocols/contract.py). Modules: codec
(requests in), encode (replies out), session (one connection), commands (the table),
connection_cmds (HELLO, AUTH, CLIENT, INFO, ...), functions / functions_jobs / functions_flow
(FUNCTION and FCALL), keys* (the read-only key view), streams (XGROUP / XREADGROUP / XACK),
glide (the model over the canonical one), state (server-wide), policy (the job policy).
"""
from ..contract import Option, Registration, connection_options, lazy_call

__all__ = ["REGISTRATION"]


def _state(port, options: dict, context):
    """The server-wide state (light: the command modules load with the first connection,
    protocols/resp/session.py, so that a server start does not pay for them; issue 14)."""
    from .state import make_state
    return make_state(port, options, context)


REGISTRATION = Registration(
    name="glidemq",
    default_port=6380,          # a Redis usually holds 6379 (DESIGN.md "Networking")
    make_state=_state,
    session_factory=lazy_call(__name__, ".session", "connect"),
    refuse_reply=b"-ERR max number of clients reached\r\n",   # Redis's text
    options_path=("limits", "glidemq"),
    options=(
        Option("max_bulk_bytes", "int", 64 << 20, 1024, 512 << 20,
               "largest bulk string a request may carry, bytes (Redis proto-max-bulk-len; "
               "a larger declared length closes the connection)"),
    ) + connection_options(idle_timeout_s=0, half_sent_timeout_s=30),
    summary="glide-mq producers over RESP (FCALL glidemq_*, glide:{Q}:… key reads)",
)
