"""glide-mq's Lua function library for the Redis reference target, found at run time and never
stored in this repository (it is glide-mq's code, Apache-2.0, not ours to commit).

Two sources, in this order:
  --library FILE       the library text as `FUNCTION LOAD` takes it (starts `#!lua name=glidemq`)
  --glidemq-git DIR    a local git snapshot of github.com/avifenesh/glide-mq (a bare repository
                       or its .git directory): `git --git-dir DIR show HEAD:src/functions/index.ts`,
                       the `LIBRARY_SOURCE` template literal, its `${NAME}` placeholders replaced
                       by the file's constants of that name (`LIBRARY_VERSION` = "93" at v0.15.4)
The text only ever lives in this process's memory and goes to the server over its socket.
Standard library only.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from bench_common import BenchError

DEFAULT_GIT_DIR = "/work/.mirror/avifenesh+glide-mq/repo"
SOURCE_PATH = "src/functions/index.ts"
LIBRARY_HEADER = "#!lua name=glidemq"

_SOURCE_START = re.compile(r"export\s+const\s+LIBRARY_SOURCE\s*(?::\s*string\s*)?=\s*`")
# `const NAME = 'text'` / "text" / 123 (optionally exported, optionally typed)
_CONST = re.compile(r"""(?:export\s+)?const\s+([A-Za-z_$][\w$]*)\s*(?::\s*\w+\s*)?=\s*"""
                    r"""(?:'([^'\\\n]*)'|"([^"\\\n]*)"|(-?\d+(?:\.\d+)?))\s*;""")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v",
                   "0": "\0", "\\": "\\", "`": "`", "$": "$", "'": "'", '"': '"'}


@dataclass
class Library:
    """The library text (str, starts with LIBRARY_HEADER), the version its glidemq_version
    returns when known (e.g. "93"; None for a --library file) and where it came from."""
    text: str
    version: str | None
    origin: str


def _constants(ts: str) -> dict[str, str]:
    """Every `const NAME = <string or number literal>;` of the TypeScript file, as text."""
    out: dict[str, str] = {}
    for m in _CONST.finditer(ts):
        name, s1, s2, num = m.groups()
        out.setdefault(name, s1 if s1 is not None else s2 if s2 is not None else num)
    return out


def template_literal(ts: str, start: int, consts: dict[str, str]) -> str:
    """The value of the TypeScript template literal whose opening backtick is at ts[start - 1]:
    escapes decoded as JavaScript does, each `${NAME}` replaced by consts[NAME]. Raises
    BenchError on an unterminated literal, an expression other than a plain name, or a name
    the file does not define as a literal constant."""
    out: list[str] = []
    i, n = start, len(ts)
    while i < n:
        c = ts[i]
        if c == "`":
            return "".join(out)
        if c == "\\":
            e = ts[i + 1:i + 2]
            if e in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[e])
                i += 2
            elif e == "\n":                      # line continuation
                i += 2
            elif e == "x" and re.fullmatch(r"[0-9A-Fa-f]{2}", ts[i + 2:i + 4]):
                out.append(chr(int(ts[i + 2:i + 4], 16)))
                i += 4
            elif e == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", ts[i + 2:i + 6]):
                out.append(chr(int(ts[i + 2:i + 6], 16)))
                i += 6
            elif e == "u" and ts[i + 2:i + 3] == "{":
                j = ts.index("}", i)
                out.append(chr(int(ts[i + 3:j], 16)))
                i = j + 1
            else:                                # JS keeps the character itself
                out.append(e)
                i += 2
            continue
        if c == "$" and ts[i + 1:i + 2] == "{":
            j = ts.find("}", i)
            expr = ts[i + 2:j].strip() if j > 0 else ""
            if j < 0 or not re.fullmatch(r"[A-Za-z_$][\w$]*", expr):
                raise BenchError(f"LIBRARY_SOURCE: cannot evaluate ${{{ts[i + 2:i + 40]}...")
            if expr not in consts:
                raise BenchError(f"LIBRARY_SOURCE uses ${{{expr}}}, which {SOURCE_PATH} does not "
                                 "define as a string or number constant")
            out.append(consts[expr])
            i = j + 1
            continue
        out.append(c)
        i += 1
    raise BenchError("LIBRARY_SOURCE: unterminated template literal")


def library_from_typescript(ts: str, origin: str) -> Library:
    """The library out of the text of glide-mq's src/functions/index.ts."""
    m = _SOURCE_START.search(ts)
    if not m:
        raise BenchError(f"{origin}: no `export const LIBRARY_SOURCE = \\`...` in it")
    consts = _constants(ts)
    text = template_literal(ts, m.end(), consts)
    check_text(text, origin)
    return Library(text, consts.get("LIBRARY_VERSION"), origin)


def check_text(text: str, origin: str) -> None:
    if not text.startswith(LIBRARY_HEADER):
        raise BenchError(f"{origin}: the library does not start with {LIBRARY_HEADER!r} "
                         f"(starts {text[:40]!r})")


def library_from_git(git_dir: str) -> Library:
    """LIBRARY_SOURCE of HEAD:src/functions/index.ts in the git directory git_dir."""
    try:
        out = subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:{SOURCE_PATH}"],
                             capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"git show in {git_dir}: {e}") from e
    if out.returncode != 0:
        raise BenchError(f"git --git-dir {git_dir} show HEAD:{SOURCE_PATH}: "
                         f"{out.stderr.decode(errors='replace').strip()[:300]}")
    head = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, timeout=60).stdout.strip()
    return library_from_typescript(out.stdout.decode("utf-8"),
                                   f"{git_dir} HEAD {head}:{SOURCE_PATH}")


def library_from_file(path: str) -> Library:
    """A library file as FUNCTION LOAD takes it."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    check_text(text, path)
    m = re.search(r"glidemq_version.*?return\s+'(\d+)'", text, re.S)
    return Library(text, m.group(1) if m else None, path)


def find_library(library_file: str | None, git_dir: str | None) -> tuple[Library | None, str]:
    """(library, message): from --library when given, else from --glidemq-git (default
    DEFAULT_GIT_DIR when it exists). (None, why) when neither is available or usable."""
    if library_file:
        try:
            lib = library_from_file(library_file)
        except (OSError, UnicodeDecodeError, BenchError) as e:
            return None, f"--library {library_file}: {e}"
        return lib, f"glide-mq library from {library_file} (version {lib.version or '?'})"
    if git_dir is None:
        if not os.path.isdir(DEFAULT_GIT_DIR):
            return None, (f"no glide-mq library: no --library FILE, no --glidemq-git DIR, and "
                          f"{DEFAULT_GIT_DIR} does not exist")
        git_dir = DEFAULT_GIT_DIR
    try:
        lib = library_from_git(git_dir)
    except (OSError, UnicodeDecodeError, BenchError) as e:
        return None, f"no glide-mq library: {e}"
    return lib, (f"glide-mq library v{lib.version} from {lib.origin} "
                 f"({len(lib.text.encode()):,} bytes)")
