"""The bunqueue golden transcript as steps: loading bunqueue-golden.json (tests/data first, then
../shared/reference) and turning each recorded step into a `Step` (split from
conformance/bunqueue.py; the suite's rules are in its docstring). The extra golden file of
issue 16 (tests/data/bunqueue-golden-extra.json, recorded by conformance/bunqueue_record.py)
loads the same way into ``EXTRA_GOLDEN_STEPS`` (empty when the file is absent)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .bunqueue_known_differences import check_steps_exist
from .bunqueue_wire import RawBytes, from_golden

REPO_ROOT = Path(__file__).resolve().parent.parent
GOLDEN_PATHS = (
    REPO_ROOT / "tests" / "data" / "bunqueue-golden.json",
    REPO_ROOT.parent / "shared" / "reference" / "bunqueue-golden.json",
    Path("/work/shared/reference/bunqueue-golden.json"),
)

EXTRA_GOLDEN_PATH = REPO_ROOT / "tests" / "data" / "bunqueue-golden-extra.json"

AUTH_PREFIX = "AUTH: "
GOLDEN_TOKEN = "s3cret"          # the right token in the golden AUTH steps
PIPELINED_LAST = "p1"            # the long-poll PULL of the pipelined step
_PLACEHOLDER = re.compile(r"<string of (\d+) chars: (.)\2*\.\.\.>", re.S)



def golden_path() -> Path:
    """The first golden file that exists among ``GOLDEN_PATHS`` (the repo's tests/data copy
    first). Raises FileNotFoundError."""
    for p in GOLDEN_PATHS:
        if p.is_file():
            return p
    raise FileNotFoundError("bunqueue-golden.json not found in " +
                            ", ".join(str(p) for p in GOLDEN_PATHS))


def load_golden(path: str | Path | None = None) -> dict:
    with open(path or golden_path(), encoding="utf-8") as f:
        return json.load(f)


# --------------------------------------------------------------------------------------------
# steps
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One golden step. ``kind``: frame | raw | split | pipelined | oversize | auth.
    ``request``/``response`` are Python values (``from_golden``); for ``pipelined`` both are
    lists, for ``oversize`` ``response`` is the error frame (then EOF is expected).
    ``types`` is the golden ``types`` field (None where the golden file has none).
    ``rules``: extra comparison rules of the step, {json path: rule name}
    (``bunqueue_compare.TEXT_RULES``); ``golden``: the step's dict in its golden file."""

    index: int
    name: str
    kind: str
    request: Any
    response: Any
    types: Any
    note: str
    golden: dict = field(repr=False, compare=False, default_factory=dict)

    @property
    def rules(self) -> dict:
        return dict(self.golden.get("rules") or {})

    @property
    def pause_ms(self) -> int:
        """ms to wait before sending the step (extra golden file; 0 elsewhere)."""
        return int(self.golden.get("pause_ms") or 0)

    @property
    def auth(self) -> bool:
        return self.kind == "auth"


def _expand(obj: Any) -> Any:
    """Expand the golden file's ``<string of N chars: xxx...>`` placeholders."""
    if isinstance(obj, str):
        m = _PLACEHOLDER.fullmatch(obj)
        return m.group(2) * int(m.group(1)) if m else obj
    if isinstance(obj, dict):
        return {k: _expand(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_expand(v) for v in obj]
    return obj


def _kind(name: str, request: Any, response: Any) -> str:
    if name.startswith(AUTH_PREFIX):
        return "auth"
    if isinstance(request, list):
        return "pipelined"
    if isinstance(request, RawBytes):
        return "oversize" if isinstance(response, list) else "raw"
    if "split" in name.lower():
        return "split"
    return "frame"


def steps(golden: dict | None = None) -> tuple[Step, ...]:
    """The golden steps, in order."""
    g = golden or load_golden()
    out = []
    for i, s in enumerate(g["steps"]):
        req = _expand(from_golden(s["request"]))
        resp = from_golden(s["response"])
        kind = _kind(s["name"], req, resp)
        if kind == "oversize":
            resp = resp[0]
        out.append(Step(i, s["name"], kind, req, resp, s.get("types"), s.get("note") or "", s))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ValueError("golden step names are not unique")
    return tuple(out)


STEPS: tuple[Step, ...] = steps()
STEP_NAMES: list[str] = [s.name for s in STEPS]


def load_extra_golden(path: str | Path | None = None) -> dict:
    """The extra golden file (default ``EXTRA_GOLDEN_PATH``); raises FileNotFoundError."""
    return load_golden(path or EXTRA_GOLDEN_PATH)


EXTRA_GOLDEN_STEPS: tuple[Step, ...] = (
    steps(load_extra_golden()) if EXTRA_GOLDEN_PATH.is_file() else ())
EXTRA_STEP_NAMES: list[str] = [s.name for s in EXTRA_GOLDEN_STEPS]
if set(EXTRA_STEP_NAMES) & set(STEP_NAMES):
    raise RuntimeError("extra golden steps reuse names of the main golden file: "
                       + ", ".join(sorted(set(EXTRA_STEP_NAMES) & set(STEP_NAMES))))
_PROBLEMS = check_steps_exist(STEP_NAMES + EXTRA_STEP_NAMES)
if _PROBLEMS:
    raise RuntimeError("bunqueue_known_differences: " + "; ".join(_PROBLEMS))


def by_name(name: str) -> Step:
    """A step of the main golden file, or else of the extra one, by name (KeyError)."""
    for s in (*STEPS, *EXTRA_GOLDEN_STEPS):
        if s.name == name:
            return s
    raise KeyError(name)
