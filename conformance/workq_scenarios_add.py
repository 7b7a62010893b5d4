"""workq scenarios from the golden transcript, section "add / validation": job ids, argument
limits, flags and the command framing (desyncs, payload sizes, closed connections).

Every step labelled with a golden case title sends that case's exact bytes; the expected
replies are what the reference workq answered (../shared/reference/workq-golden.txt).
"""

from __future__ import annotations

from .workq_scenarios_common import CE, OK, U, entry, jobs, scenario, wq, wq_eof

__all__ = ["SCENARIOS"]

UPPER = b"ABCDEF01-2345-4678-9ABC-DEF012345678"
DOC_ID = b"6ba7b810-9dad-11d1-80b4-00c04fd430c4"   # the spec's example: a UUIDv1
A255 = b"a" * 255


def _add(id: bytes, rest: bytes) -> bytes:
    return b"add " + id + b" " + rest


IDS = scenario(
    "golden-add-ids",
    "add: duplicates, which id spellings are accepted (v4 only; upper case, braces, urn:, "
    "32 hex) and that inspect shows the canonical lower-case form.",
    wq("A", _add(U(1), b"ping 1000 60000 4 -priority=10 -max-attempts=3 -max-fails=1\r\n"
                       b"pong\r\n"), OK, label="add ok with flags"),
    wq("A", _add(U(1), b"ping 1000 60000 4\r\npong\r\n"), CE("Duplicate job"),
       label="add duplicate id"),
    wq("A", _add(DOC_ID, b"ping 1000 60000 4\r\npong\r\n"), CE("Invalid ID"),
       label="add with doc example id (UUIDv1 6ba7b810-9dad-11d1-...)"),
    wq("A", b"add not-a-uuid ping 1000 60000 4\r\npong\r\n", CE("Invalid ID"),
       label="add non-uuid id"),
    wq("A", _add(b"00000000-0000-0000-0000-000000000000", b"ping 1000 60000 4\r\npong\r\n"),
       CE("Invalid ID"), label="add nil uuid"),
    wq("A", _add(UPPER, b"ping 1000 60000 1\r\nx\r\n"), OK, label="add uppercase uuid v4"),
    wq("A", b"inspect job " + UPPER.lower() + b"\r\n", jobs(entry(UPPER.lower(), "ping")),
       label="inspect job lowercase form of uppercase id"),
    wq("A", _add(b"{" + U(3) + b"}", b"ping 1000 60000 1\r\nx\r\n"), OK,
       label="add braced uuid v4"),
    wq("A", _add(b"urn:uuid:" + U(4), b"ping 1000 60000 1\r\nx\r\n"), OK,
       label="add urn uuid v4"),
    wq("A", _add(U(5).replace(b"-", b""), b"ping 1000 60000 1\r\nx\r\n"), OK,
       label="add 32-hex uuid v4 no dashes (accepted by satori 1.2.0 build; "
             "pinned v1.0.0 may differ)"),
    wq("A", b"inspect job " + U(3) + b"\r\n", jobs(entry(U(3), "ping")),
       label="inspect job canonical form of braced id"),
)

LIMITS = scenario(
    "golden-add-limits",
    "add: name, TTR, TTL, max-attempts, max-fails and priority limits, each just inside and "
    "just outside its range.",
    wq("A", _add(U(6), b"bad!name 1000 60000 1\r\nx\r\n"), CE("Invalid Name"),
       label="add invalid name char"),
    wq("A", _add(U(6), A255 + b"a 1000 60000 1\r\nx\r\n"), CE("Invalid Name"),
       label="add name 256 chars"),
    wq("A", _add(U(7), A255 + b" 1000 60000 1\r\nx\r\n"), OK, label="add name 255 chars ok"),
    wq("A", _add(U(8), b"ping 0 60000 1\r\nx\r\n"), CE("Invalid TTR"), label="add ttr 0"),
    wq("A", _add(U(8), b"ping 86400001 60000 1\r\nx\r\n"), CE("Invalid TTR"),
       label="add ttr 86400001"),
    wq("A", _add(U(8), b"ping abc 60000 1\r\nx\r\n"), CE("Invalid TTR"), label="add ttr abc"),
    wq("A", _add(U(8), b"ping -1 60000 1\r\nx\r\n"), CE("Invalid TTR"), label="add ttr -1"),
    wq("A", _add(U(8), b"ping 1000 0 1\r\nx\r\n"), CE("Invalid TTL"), label="add ttl 0"),
    wq("A", _add(U(8), b"ping 1000 2592000001 1\r\nx\r\n"), CE("Invalid TTL"),
       label="add ttl 2592000001 (>30 days)"),
    wq("A", _add(U(9), b"ping 1000 2592000000 1\r\nx\r\n"), OK, label="add ttl 2592000000 ok"),
    wq("A", _add(U(8), b"ping 1000 60000 1 -max-attempts=256\r\nx\r\n"),
       CE("Invalid Max Attempts"), label="add max-attempts 256"),
    wq("A", _add(U(8), b"ping 1000 60000 1 -max-fails=256\r\nx\r\n"), CE("Invalid Max Fails"),
       label="add max-fails 256"),
    wq("A", _add(U(8), b"ping 1000 60000 1 -priority=2147483648\r\nx\r\n"),
       CE("Invalid Priority"), label="add priority 2147483648"),
    wq("A", _add(U(8), b"ping 1000 60000 1 -priority=abc\r\nx\r\n"), CE("Invalid Priority"),
       label="add priority abc"),
)

_DESYNC = CE("Unknown command")   # the unread payload line, parsed as a command

FLAGS = scenario(
    "golden-add-flags",
    "add: flag syntax (empty value, repeated flag, unknown flag, too many flags, a second '=') "
    "and the desync when the line is refused before its payload is read.",
    wq("A", _add(U(8), b"ping 1000 60000 1 -priority=\r\nx\r\n"),
       CE("Invalid command flags") + _DESYNC, label="add empty flag value"),
    wq("A", _add(U(8), b"ping 1000 60000 1 -priority=1 -priority=2\r\nx\r\n"),
       CE("Invalid command flags") + _DESYNC, label="add duplicate flag"),
    wq("A", _add(U(10), b"ping 1000 60000 1 -foo=1\r\nx\r\n"), OK,
       label="add unknown flag (silently ignored)"),
    wq("A", _add(U(8), b"ping 1000 60000 1 -foo=1 -priority=1 -max-attempts=1 -max-fails=1"
                       b"\r\nx\r\n"), CE("Invalid command args"), label="add 4 flags"),
    wq("A", _add(U(11), b"prio 1000 60000 1 -priority=7=9\r\nx\r\n"), OK,
       label="add flag with two '=' (-priority=7=9 -> value 7)"),
    wq("A", b"inspect job " + U(11) + b"\r\n", jobs(entry(U(11), "prio", priority=7)),
       label="inspect job for -priority=7=9"),
)

FRAMING = scenario(
    "golden-add-framing",
    "add: argument counts and payload sizes (bad, too big, exactly 1 MiB, shorter than "
    "declared: the server closes), CRLF inside a payload, spacing, unknown commands.",
    wq("A", _add(U(8), b"ping 1000 1\r\nx\r\n"), CE("Invalid command args") + _DESYNC,
       label="add too few args (payload line then parsed as a command -> desync)"),
    wq("A", _add(U(8), b"ping 1000 60000 x\r\nx\r\n"), CE("Invalid payload size") + _DESYNC,
       label="add payload-size not int"),
    wq("A", _add(U(8), b"ping 1000 60000 -1\r\nx\r\n"), CE("Invalid payload size") + _DESYNC,
       label="add payload-size -1"),
    # 'abc' is the payload, 'd\r' is not CRLF (error), then the bare '\n' closes the connection.
    wq_eof("B", _add(U(8), b"ping 1000 60000 3\r\nabcd\r\n"), CE("Invalid payload size"),
           label="add payload shorter than size (size 3, 4 bytes sent)"),
    wq("A", _add(U(8), b"ping 1000 60000 1048577\r\n"), CE("Invalid payload size"),
       label="add payload size 1048577 (payload not consumed)"),
    wq("A", _add(U(12), b"big 1000 60000 1048576\r\n") + b"z" * 1048576 + b"\r\n", OK,
       label="add payload exactly 1 MiB ok", timeout=10.0),
    wq("A", _add(U(13), b"crlf 1000 60000 6\r\na\r\nb\r\n\r\n"), OK,
       label="payload with embedded CRLF ok"),
    wq("A", b"add  " + U(14) + b"   spaces  1000  60000  1\r\nx\r\n", OK,
       label="multiple spaces between args ok"),
    wq("A", b" " + _add(U(8), b"ping 1000 60000 1\r\nx\r\n"), CE("Unknown command") + _DESYNC,
       label="leading space -> unknown command"),
    wq("A", b"ADD " + U(8) + b" ping 1000 60000 1\r\nx\r\n", CE("Unknown command") + _DESYNC,
       label="uppercase ADD -> unknown command"),
    wq("A", b"\r\n", CE("Unknown command"), label="empty line"),
    wq("A", b"foo bar\r\n", CE("Unknown command"), label="unknown command"),
)

SCENARIOS = (IDS, LIMITS, FLAGS, FRAMING)
