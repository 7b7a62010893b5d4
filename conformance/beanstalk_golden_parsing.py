"""Scenarios from the golden transcript's 'errors / parsing', 'stray CR' and 'command line
length' sections (/work/shared/reference/beanstalk-golden-1.12.txt); see beanstalk_golden for
the conventions (fresh server per scenario, step labels = the transcript's case titles).
"""

from __future__ import annotations

from .beanstalk_replies import stats_job, yaml_list
from .beanstalk_golden import BF, NF, SETUP_ERRS, SETUP_ERRS_REPLIES, UC, case, put_line
from .scenario import Scenario, send, send_eof, send_window, steps

__all__ = ["SCENARIOS"]

A200 = b"a" * 200
A201 = b"a" * 201

COMMAND_WORDS = Scenario(
    "golden-command-words",
    doc="Transcript 'errors / parsing': command words, spacing, trailing garbage.",
    source="golden",
    steps=steps(
        send("A", SETUP_ERRS, *SETUP_ERRS_REPLIES, label="setup"),
        case("unknown command", b"foo\r\n", UC),
        case("empty line", b"\r\n", UC),
        case("uppercase command", b"PUT 0 0 60 1\r\nx\r\n", UC, UC),
        case("leading space", b" list-tubes\r\n", UC),
        case("command with trailing space (no-arg cmd)", b"list-tubes \r\n", BF),
        case("reserve with trailing garbage", b"reservex\r\n", BF),
        case("stats with trailing garbage", b"statsx\r\n", BF),
        case("peek-ready trailing space", b"peek-ready \r\n", BF),
        case("put without args (no space)", b"put\r\n", UC),
        case("put missing field", b"put 0 0 60\r\n", BF),
        case("put trailing space", b"put 0 0 60 1 \r\nx\r\n", BF, UC),
    ),
)

PUT_ARGUMENTS = Scenario(
    "golden-put-arguments",
    doc="Transcript 'errors / parsing': put argument ranges and formats; ttr 0 becomes 1.",
    source="golden",
    steps=steps(
        send("A", SETUP_ERRS, *SETUP_ERRS_REPLIES, label="setup"),
        case("put double spaces between args", b"put  0  0  60  1\r\nx\r\n", b"INSERTED 1\r\n"),
        case("put tab separator", b"put 0\t0 60 1\r\nx\r\n", BF, UC),
        case("put leading zeros", b"put 000001 00 0060 0001\r\nx\r\n", b"INSERTED 2\r\n"),
        case("put negative pri", b"put -1 0 60 1\r\nx\r\n", BF, UC),
        case("put plus sign pri", b"put +1 0 60 1\r\nx\r\n", BF, UC),
        case("put non-numeric pri", b"put abc 0 60 1\r\nx\r\n", BF, UC),
        case("put pri 2^32-1 (max ok)", b"put 4294967295 0 60 1\r\nx\r\n", b"INSERTED 3\r\n"),
        case("put pri 2^32 overflow", b"put 4294967296 0 60 1\r\nx\r\n", BF, UC),
        case("put pri 2^64 overflow", b"put 18446744073709551616 0 60 1\r\nx\r\n", BF, UC),
        case("put delay 2^32-1 ok", b"put 0 4294967295 60 1\r\nx\r\n", b"INSERTED 4\r\n"),
        case("put delay 2^32", b"put 0 4294967296 60 1\r\nx\r\n", BF, UC),
        case("put ttr 2^32-1 ok", b"put 0 0 4294967295 1\r\nx\r\n", b"INSERTED 5\r\n"),
        case("put negative bytes", b"put 0 0 60 -1\r\nx\r\n", BF, UC),
        case("put ttr 0 -> 1", b"put 0 0 0 1\r\nz\r\n", b"INSERTED 6\r\n"),
        case("stats-job of ttr-0 job shows ttr: 1", b"stats-job 6\r\n",
             stats_job(6, "errs", "ready", ttr=1)),
        case("peek-delayed on used tube", b"peek-delayed\r\n", b"FOUND 4 1\r\nx\r\n"),
        case("peek-buried on used tube (none)", b"peek-buried\r\n", NF),
    ),
)

BODY_FRAMING = Scenario(
    "golden-body-framing",
    doc="Transcript 'errors / parsing': body length mismatches, LF-only lines, NUL in a line.",
    source="golden",
    steps=steps(
        send("A", SETUP_ERRS, *SETUP_ERRS_REPLIES, label="setup"),
        case("body longer than declared", b"put 0 0 60 2\r\nabc\r\n", b"EXPECTED_CRLF\r\n",
             probe=UC),
        send_window("A", b"put 0 0 60 5\r\nab\r\n", 0.5,
                    label="body shorter than declared (then a command)"),
        case("...next command is swallowed as body", b"list-tube-used\r\n",
             b"EXPECTED_CRLF\r\n", UC),
        case("body without trailing CRLF (exact size)", b"put 0 0 60 1\r\nxyz",
             b"EXPECTED_CRLF\r\n"),
        send_window("A", b"list-tube-used\n", 0.5, label="LF-only line ending (waits for CRLF)"),
        case("...then CRLF command: combined line", b"list-tube-used\r\n", BF),
        case("NUL byte in command line", b"use fo\x00o\r\n", BF),
    ),
)

ID_ARGUMENTS = Scenario(
    "golden-id-arguments",
    doc="Transcript 'errors / parsing': id and count arguments of delete/release/bury/touch/"
        "peek/stats-job/kick/reserve-job/reserve-with-timeout (1.12 and jobgate agree).",
    source="golden",
    steps=steps(
        send("A", SETUP_ERRS, *SETUP_ERRS_REPLIES, label="setup"),
        case("delete non-numeric", b"delete abc\r\n", BF),
        case("delete negative", b"delete -1\r\n", BF),
        case("delete trailing space", b"delete 1 \r\n", BF),
        case("delete extra arg", b"delete 1 2\r\n", BF),
        case("delete no space", b"delete\r\n", UC),
        case("delete 2^64-1", b"delete 18446744073709551615\r\n", NF),
        case("delete 2^64", b"delete 18446744073709551616\r\n", BF),
        case("delete 0", b"delete 0\r\n", NF),
        case("release missing delay", b"release 1 0\r\n", BF),
        case("bury missing pri", b"bury 1\r\n", BF),
        case("touch non-numeric", b"touch x\r\n", BF),
        case("peek non-numeric", b"peek x\r\n", BF),
        case("peek no arg", b"peek\r\n", UC),
        case("stats-job no arg", b"stats-job\r\n", BF),
        case("kick non-numeric", b"kick abc\r\n", BF),
        case("kick no arg", b"kick\r\n", UC),
        case("reserve-with-timeout huge", b"reserve-with-timeout 99999999999999999999\r\n", BF),
        case("reserve-with-timeout no arg", b"reserve-with-timeout\r\n", BF),
        case("reserve-job non-numeric", b"reserve-job x\r\n", BF),
        case("reserve-job missing", b"reserve-job 999\r\n", NF),
    ),
)

LOOSE_INTEGERS = Scenario(
    "golden-loose-integers",
    doc="Transcript cases where 1.12 parses integers loosely (strtoul/strtol); jobgate answers "
        "BAD_FORMAT (documented difference D2). Ends with reserve-with-timeout -1, which "
        "blocks on 1.12.",
    source="golden",
    steps=steps(
        send("A", SETUP_ERRS, *SETUP_ERRS_REPLIES, label="setup"),
        send("A", b"put 0 4294967295 60 1\r\nx\r\n", b"INSERTED 1\r\n",
             label="put a delayed job so kick has something to kick"),
        case("kick negative (strtoul wraps)", b"kick -1\r\n", b"KICKED 1\r\n"),
        case("kick with trailing junk", b"kick 5abc\r\n", b"KICKED 0\r\n"),
        case("kick 2^32 (truncated to uint)", b"kick 4294967296\r\n", b"KICKED 0\r\n"),
        case("reserve-with-timeout non-numeric", b"reserve-with-timeout abc\r\n", b"TIMED_OUT\r\n"),
        case("reserve-with-timeout trailing junk", b"reserve-with-timeout 0abc\r\n",
             b"TIMED_OUT\r\n"),
        case("reserve-with-timeout 2^32", b"reserve-with-timeout 4294967296\r\n", b"TIMED_OUT\r\n"),
        send_window("A", b"reserve-with-timeout -1\r\n", 1.0,
                    label="reserve-with-timeout negative (blocks like reserve)"),
    ),
)

TUBE_NAMES = Scenario(
    "golden-tube-names",
    doc="Transcript 'errors / parsing': pause-tube arguments, tube-name rules, tube GC, quitx.",
    source="golden",
    steps=steps(
        send("B", b"use foo\r\n", b"USING foo\r\n", label="B: use foo (keeps tube foo alive)"),
        send("A", SETUP_ERRS, *SETUP_ERRS_REPLIES, label="setup"),
        case("pause-tube missing delay", b"pause-tube foo\r\n", BF),
        case("pause-tube no space before name", b"pause-tubefoo 1\r\n", b"PAUSED\r\n"),
        case("pause-tube delay 2^32", b"pause-tube foo 4294967296\r\n", BF),
        case("pause-tube trailing junk", b"pause-tube foo 1x\r\n", BF),
        case("pause-tube name starting with -", b"pause-tube -foo 1\r\n", BF),
        case("use 200-byte name", b"use " + A200 + b"\r\n", b"USING " + A200 + b"\r\n",
             probe=b"USING " + A200 + b"\r\n"),
        case("use 201-byte name", b"use " + A201 + b"\r\n", BF, probe=b"USING " + A200 + b"\r\n"),
        case("watch 201-byte name", b"watch " + A201 + b"\r\n", BF,
             probe=b"USING " + A200 + b"\r\n"),
        case("ignore 201-byte name", b"ignore " + A201 + b"\r\n", BF,
             probe=b"USING " + A200 + b"\r\n"),
        case("stats-tube 201-byte name", b"stats-tube " + A201 + b"\r\n", BF,
             probe=b"USING " + A200 + b"\r\n"),
        case("use name starting with -", b"use -foo\r\n", BF, probe=b"USING " + A200 + b"\r\n"),
        case("use name with - inside", b"use foo-\r\n", b"USING foo-\r\n", probe=b"USING foo-\r\n"),
        case("use all allowed punctuation", b"use a+/;.$_()-\r\n", b"USING a+/;.$_()-\r\n",
             probe=b"USING a+/;.$_()-\r\n"),
        case("use name with space", b"use foo bar\r\n", BF, probe=b"USING a+/;.$_()-\r\n"),
        case("use name with !", b"use foo!\r\n", BF, probe=b"USING a+/;.$_()-\r\n"),
        case("use name with UTF-8", b"use caf\xc3\xa9\r\n", BF, probe=b"USING a+/;.$_()-\r\n"),
        case("use empty name", b"use \r\n", BF, probe=b"USING a+/;.$_()-\r\n"),
        case("use two spaces before name", b"use  foo\r\n", BF, probe=b"USING a+/;.$_()-\r\n"),
        case("watch name with *", b"watch a*\r\n", BF, probe=b"USING a+/;.$_()-\r\n"),
        case("stats-tube name starting with -", b"stats-tube -x\r\n", BF,
             probe=b"USING a+/;.$_()-\r\n"),
        # Tubes now: default (B watches it), errs/empty (A watches empty, 'errs' was GC'd when A
        # moved away), foo (B uses it). beanstalkd removes a tube by moving the last tube into
        # its slot, so list order after GC is not creation order.
        case("tube GC: use tmp1, use default, list-tubes (tmp1 gone)",
             b"use tmp1\r\nuse default\r\nlist-tubes\r\n", b"USING tmp1\r\n", b"USING default\r\n",
             yaml_list("default", "foo", "empty"), probe=b"USING default\r\n"),
        send_eof("A", b"quitx\r\n", label="quit with trailing junk (prefix match)"),
    ),
)

STRAY_CR = Scenario(
    "golden-stray-cr",
    doc="Transcript 'stray CR': only the first CR of the buffer is checked for a following LF.",
    source="golden",
    steps=steps(
        send_window("A", b"use fo\ro\r\n", 0.5, label="CR not followed by LF: server keeps buffering"),
        send_window("A", b"list-tube-used\r\n", 0.5, label="...following commands are swallowed too"),
        send("A", b"z" * 200 + b"\r\nlist-tube-used\r\n", BF, b"USING default\r\n",
             label="...until 224 bytes are buffered; then discard-to-EOL + BAD_FORMAT"),
        send("A", b"list-tube-used\r\n", b"USING default\r\n", label="connection still usable"),
    ),
)


def _put_len_case(n: int, *replies: bytes):
    return case(f"put line of {n} bytes + CRLF, body 'x', then list-tube-used",
                put_line(n) + b"\r\nx\r\nlist-tube-used\r\n", *replies,
                probe=b"USING default\r\n")


LINE_LENGTH = Scenario(
    "golden-line-length",
    doc="Transcript 'command line length': LINE_BUF_SIZE is 224 bytes including CRLF.",
    source="golden",
    steps=steps(
        _put_len_case(221, b"INSERTED 1\r\n", b"USING default\r\n"),
        _put_len_case(222, b"INSERTED 2\r\n", b"USING default\r\n"),
        _put_len_case(223, BF, b"USING default\r\n"),
        _put_len_case(224, BF, UC, b"USING default\r\n"),
        _put_len_case(225, BF, UC, b"USING default\r\n"),
        _put_len_case(300, BF, UC, b"USING default\r\n"),
        _put_len_case(5000, BF, UC, b"USING default\r\n"),
        case("unknown command of 222 bytes + CRLF, then list-tube-used",
             b"z" * 222 + b"\r\nlist-tube-used\r\n", UC, b"USING default\r\n",
             probe=b"USING default\r\n"),
        send_window("A", b"z" * 223 + b"\r\nlist-tube-used\r\n", 0.7, BF,
                    label="unknown command of 223 bytes + CRLF, then list-tube-used"),
        send("A", b"list-tube-used\r\n", b"USING default\r\n",
             label="unknown command of 223 bytes + CRLF, then list-tube-used / probe"),
        case("unknown command of 1000 bytes + CRLF, then list-tube-used",
             b"z" * 1000 + b"\r\nlist-tube-used\r\n", BF, b"USING default\r\n",
             probe=b"USING default\r\n"),
    ),
)

SCENARIOS: tuple[Scenario, ...] = (
    COMMAND_WORDS, PUT_ARGUMENTS, BODY_FRAMING, ID_ARGUMENTS, LOOSE_INTEGERS, TUBE_NAMES,
    STRAY_CR, LINE_LENGTH,
)
