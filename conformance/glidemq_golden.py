"""The glide-mq golden transcript (../shared/reference/glide-mq-golden.txt, copied to
tests/data/): its text format parsed into steps, and its reply notation into typed trees.

The file (Redis 7.0.15 + glide-mq's function library v93, 228 steps) is a sequence of

- ``# ...`` header lines;
- sections ``################ X title`` (X a letter: A..I are raw RESP, R is redis-py);
- steps ``## ID title`` (``ID`` = section letter + two digits, unique), then one or more
  ``C> `` command lines and as many ``S< `` reply lines (more than one = a pipeline: every
  command is written at once, then the replies are read in order), then optional comment lines
  ``   # ...``. ``   # entry ids increasing: yes`` / ``decreasing: yes`` ask the runner to check
  the order of the stream entry ids of the reply (``Step.order_check``).

Commands are in redis-cli quoting (``"..."`` with ``\\"`` ``\\\\`` ``\\n`` ``\\r`` ``\\t``
``\\xHH`` escapes, ``'...'`` literal), with placeholders: ``<T0+d>`` (the probe's start time
in ms plus d), ``<glidemq library source>`` (a whole argument: the library text). A SCAN
command line ending in ``   (looped)`` is followed by the cursor until 0 (``Step.looped``).

Replies (``parse_reply`` of glidemq_notation, after ``substitute`` filled the T0
placeholders) are typed:
``bulk "s"``, ``simple "s"``, ``error "s"``, ``int n``, ``double x``, ``null`` (RESP3 ``_``),
``nil-bulk`` (RESP2 ``$-1``), ``verbatim txt "s"``, ``array[n] [v, ...]``, ``set[n] [...]``,
``map{n} {k: v, ...}`` or ``map{k: v, ...}`` (no count), ``array{n} {k: v, ...}`` or
``array{k: v}`` (a RESP2 map: a flat array of n pairs), ``array[2n] [k: v, ...]`` (a flat
array of field/value pairs, HGETALL in RESP2: 2n elements), typed wildcards ``<bulk server>``
``<int id>`` ``<array modules>`` (any value of that type), ``bulk "<SID>"`` (any valid stream
id), and the looped SCAN form ``array[2] [bulk, array[..]] -> keys[n] ["k", ...]``. INFO
replies hold ``line | line | ...``: the section header and the lines that must be present.
Double placeholders ``<p*2^42+T0+d>`` (a priority-scheduled score) are numbers.

The R section's replies are Python reprs after a type label (``str '93'``, ``dict {...}``,
``list [...]``, ``raised ResponseError: text``; ``parse_python_reply``); its command lines
describe redis-py calls in words (conformance/glidemq_pyclient.py plays them).

Errors: ``GoldenFormatError`` (with the line number) for anything this grammar does not cover.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .glidemq_notation import (ESCAPES, GoldenFormatError, Node, parse_python_reply,
                               parse_reply, parse_scan)

__all__ = [
    "GOLDEN_PATHS", "GoldenFormatError", "Node", "Step", "Golden", "golden_path", "load",
    "parse_golden", "substitute", "split_args", "command_args", "parse_reply", "parse_scan",
    "parse_python_reply", "STANDIN_LIBRARY", "LIBRARY_PLACEHOLDER", "SID",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
GOLDEN_PATHS = (
    REPO_ROOT / "tests" / "data" / "glide-mq-golden.txt",
    REPO_ROOT.parent / "shared" / "reference" / "glide-mq-golden.txt",
    Path("/work/shared/reference/glide-mq-golden.txt"),
)
LIBRARY_PLACEHOLDER = "<glidemq library source>"
#: sent for ``<glidemq library source>`` without ``--library``: jobgate never runs the Lua text
STANDIN_LIBRARY = b"#!lua name=glidemq\n-- stand-in\n"
SID = b"<SID>"        # a bulk holding any valid stream id

_T0 = re.compile(r"<(?:(\d+)\*2\^42\+)?T0([+-]\d+)>")
_SECTION = re.compile(r"^################ ([A-Z]) (.*)$")
_STEP = re.compile(r"^## ([A-Z]\d\d) (.*)$")
_LOOPED = "   (looped)"
_ORDER = re.compile(r"^entry ids (increasing|decreasing): yes$")


@dataclass
class Step:
    """One golden step. ``commands``/``replies``: the raw ``C>``/``S<`` texts (placeholders
    not filled); ``proto``: the RESP version of its connection when the golden played it (2 or
    3, followed through HELLO steps); ``connection``: ``main`` (sections A..H, one connection),
    ``resp2`` (section I, a new connection) or ``redis-py``; ``order_check``: None,
    ``increasing`` or ``decreasing``; ``line``: 1-based line of the ``##`` header."""
    id: str
    title: str
    section: str
    section_title: str
    line: int
    commands: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    looped: bool = False
    order_check: str | None = None
    proto: int = 2
    connection: str = "main"

    @property
    def python(self) -> bool:
        """True for the redis-py section (R): replies are Python reprs."""
        return self.section == "R"


@dataclass
class Golden:
    """The parsed file: header lines, sections {letter: title}, steps in order."""
    header: list[str]
    sections: dict[str, str]
    steps: list[Step]

    def by_id(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)


# Connections the golden's sections were played on (glide-mq-NOTES.md "How the goldens were
# made"; the I section's title: "RESP2 session ... (no HELLO)" opens its own connection).
_NEW_CONNECTION = {"I": "resp2", "R": "redis-py"}


def golden_path() -> Path:
    """The first of ``GOLDEN_PATHS`` that exists (the repository's copy first).
    Raises FileNotFoundError."""
    for p in GOLDEN_PATHS:
        if p.is_file():
            return p
    raise FileNotFoundError("glide-mq-golden.txt not found in "
                            + ", ".join(str(p) for p in GOLDEN_PATHS))


def load(path: str | Path | None = None) -> Golden:
    """Parse the golden file at ``path`` (default ``golden_path()``)."""
    return parse_golden(Path(path or golden_path()).read_text(encoding="utf-8"))


def parse_golden(text: str) -> Golden:
    """Parse the whole golden text; every reply line is parsed once (with T0 = 0) so that a
    form the grammar does not know fails here. Raises GoldenFormatError."""
    header: list[str] = []
    sections: dict[str, str] = {}
    steps: list[Step] = []
    section = title = ""
    cur: Step | None = None
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _SECTION.match(line)
        if m:
            section, title = m.groups()
            if section in sections:
                raise GoldenFormatError(f"line {no}: section {section} twice")
            sections[section] = title
            cur = None
            continue
        m = _STEP.match(line)
        if m:
            if not section or m.group(1)[0] != section:
                raise GoldenFormatError(f"line {no}: step {m.group(1)} outside its section")
            cur = Step(m.group(1), m.group(2), section, title, no)
            steps.append(cur)
            continue
        if cur is None:
            if line.startswith("# ") and not sections:
                header.append(line[2:])
                continue
            raise GoldenFormatError(f"line {no}: text outside a step: {line[:60]!r}")
        if line.startswith("C> "):
            if cur.replies:
                raise GoldenFormatError(f"line {no}: command after a reply in {cur.id}")
            cmd = line[3:]
            if cmd.endswith(_LOOPED):
                cmd, cur.looped = cmd[:-len(_LOOPED)], True
            cur.commands.append(cmd)
        elif line.startswith("S< "):
            cur.replies.append(line[3:])
        elif line.startswith("   # "):
            comment = line[5:]
            cur.comments.append(comment)
            m = _ORDER.match(comment)
            if m:
                cur.order_check = m.group(1)
        else:
            raise GoldenFormatError(f"line {no}: unknown line in {cur.id}: {line[:60]!r}")
    _finish(steps)
    return Golden(header, sections, steps)


def _finish(steps: list[Step]) -> None:
    """Check every step, and follow each connection's protocol through HELLO steps."""
    seen: set[str] = set()
    proto: dict[str, int] = {}
    for s in steps:
        where = f"step {s.id} (line {s.line})"
        if s.id in seen:
            raise GoldenFormatError(f"{where}: duplicate id")
        seen.add(s.id)
        if not s.commands or not s.replies:
            raise GoldenFormatError(f"{where}: needs C> and S< lines")
        if len(s.commands) != len(s.replies):
            raise GoldenFormatError(f"{where}: {len(s.commands)} commands, "
                                    f"{len(s.replies)} replies")
        s.connection = _NEW_CONNECTION.get(s.section, "main")
        if s.python:
            for r in s.replies:
                parse_python_reply(substitute(r, 0))
            continue
        if s.looped:
            if len(s.commands) != 1 or split_args(s.commands[0])[0].upper() != b"SCAN":
                raise GoldenFormatError(f"{where}: only a single SCAN can be looped")
            parse_scan(s.replies[0])
        else:
            for r in s.replies:
                parse_reply(substitute(r, 0))
        s.proto = proto.setdefault(s.connection, 2)
        args = split_args(s.commands[0])
        if (len(s.commands) == 1 and args[0].upper() == b"HELLO" and len(args) > 1
                and not s.replies[0].startswith("error ")):
            proto[s.connection] = int(args[1])


# ------------------------------------------------------------------------------------------
# placeholders and commands
# ------------------------------------------------------------------------------------------
def substitute(text: str, t0: int) -> str:
    """Fill ``<T0+d>`` / ``<T0-d>`` / ``<p*2^42+T0+d>`` with their integer values (``t0`` in
    ms since the epoch), wherever they stand (inside strings or as numbers)."""
    def value(m: re.Match) -> str:
        p = int(m.group(1) or 0)
        return str(p * (1 << 42) + t0 + int(m.group(2)))
    return _T0.sub(value, text)


def split_args(line: str) -> list[bytes]:
    """Split a command line the way redis-cli does: blanks separate words, ``"..."`` takes
    escapes (``\\xHH`` is that byte), ``'...'`` is literal (``\\'`` only); other text is
    UTF-8. Returns the words as bytes. Raises GoldenFormatError on an unbalanced quote or a
    closing quote followed by more text."""
    out: list[bytes] = []
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        word = bytearray()
        quote = ""
        started = False
        while i < n:
            c = line[i]
            if quote == '"':
                if c == "\\" and i + 1 < n:
                    e = line[i + 1]
                    if e == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", line[i + 2:i + 4]):
                        word.append(int(line[i + 2:i + 4], 16))
                        i += 4
                        continue
                    word += ESCAPES.get(e, e).encode("utf-8")
                    i += 2
                    continue
                if c == '"':
                    quote = ""
                    i += 1
                    if i < n and line[i] not in " \t":
                        raise GoldenFormatError(f"closing quote not followed by a blank: {line!r}")
                    break
                word += c.encode("utf-8")
            elif quote == "'":
                if c == "\\" and line[i + 1:i + 2] == "'":
                    word += b"'"
                    i += 2
                    continue
                if c == "'":
                    quote = ""
                    i += 1
                    break
                word += c.encode("utf-8")
            elif c in " \t":
                break
            elif c in "\"'" and not started:
                quote = c
            else:
                word += c.encode("utf-8")
            started = True
            i += 1
        if quote:
            raise GoldenFormatError(f"unbalanced quote in {line!r}")
        out.append(bytes(word))
    return out


def command_args(line: str, t0: int, library: bytes = STANDIN_LIBRARY) -> list[bytes]:
    """The argv (bytes) of one ``C>`` line: T0 placeholders filled, the argument
    ``<glidemq library source>`` replaced by ``library``."""
    token = "\x00library\x00"          # no blank: one word for split_args
    words = split_args(substitute(line, t0).replace(LIBRARY_PLACEHOLDER, token))
    return [library if w == token.encode() else w for w in words]
