"""Who may import whom (DESIGN.md), enforced on the source: an AST test of our own.

Why our own and not import-linter: besides the import graph it must catch what import-linter
cannot see, reaching past the port through an object (`port._engine.jobs`) and imports by string
(`importlib.import_module("core.engine")`), and check that the sans-IO packages never import a
socket or an event loop; a few dozen lines with `ast` do all of it without a new dependency.

The rules:
1. protocols/ and gateway/ import nothing of core but core.api and core.model (the port and
   its value types), and touch no private attribute (`x._name`) of any object but their own
   (`self`, `cls`): the engine behind the port stays out of reach.
2. core/ imports none of gateway, protocols, migrations, pipeline, conformance, tests or
   benchmarks.
3. core/ and protocols/ import no socket or event loop (socket, asyncio, anyio, selectors, ssl,
   uvloop): every parser and session is testable with bytes alone.
4. migrations/ and pipeline/ read storage only: of core they import core.schema alone.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PORT_MODULES = {"core.api", "core.model"}
IO_MODULES = {"socket", "asyncio", "anyio", "selectors", "ssl", "uvloop", "aiohttp"}
#: modules that serve their own connections through a framework (Registration.serve,
#: protocols/contract.py): the only ones in protocols/ that may use the event loop
SELF_SERVING = {"protocols/http/app.py", "protocols/http/ui/__init__.py",
                "protocols/http/ui/views.py", "protocols/http/ui/live.py",
                "protocols/http/ui/auth.py"}
NOT_FOR_CORE = {"gateway", "protocols", "migrations", "pipeline", "conformance", "tests",
                "benchmarks"}


def _files(package: str) -> list:
    return sorted((ROOT / package).rglob("*.py"))


def _module_of(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: pathlib.Path) -> list:
    """(line, absolute module name) of every import in `path`, relative ones resolved, and
    of importlib.import_module / __import__ calls with a constant name."""
    tree = ast.parse(path.read_text(), str(path))
    here = _module_of(path)
    pkg = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out += [(n.lineno, a.name) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = pkg.split(".")
                base = base[:len(base) - (n.level - 1)] if n.level > 1 else base
                mod = ".".join(base + ([n.module] if n.module else []))
            else:
                mod = n.module
            out.append((n.lineno, mod))
            # `from core import engine` names the module core.engine
            out += [(n.lineno, f"{mod}.{a.name}") for a in n.names
                    if mod in ("core", "gateway", "protocols")]
        elif isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("import_module", "__import__") and n.args and \
                    isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                out.append((n.lineno, n.args[0].value))
    return out


def _violations(packages, ok) -> list:
    bad = []
    for package in packages:
        for f in _files(package):
            for line, mod in imports(f):
                why = ok(mod)
                if why:
                    bad.append(f"{f.relative_to(ROOT)}:{line}: {mod} ({why})")
    return bad


def _core_only_through_port(mod: str):
    if mod == "core" or mod.startswith("core."):
        if mod not in PORT_MODULES and mod != "core":
            return "only core.api and core.model may be imported"
    return None


def test_protocols_and_gateway_import_core_only_through_the_port():
    assert _violations(("protocols", "gateway"), _core_only_through_port) == []


def test_protocols_and_gateway_never_touch_private_attributes_of_other_objects():
    bad = []
    for package in ("protocols", "gateway"):
        for f in _files(package):
            for n in ast.walk(ast.parse(f.read_text())):
                if isinstance(n, ast.Attribute) and n.attr.startswith("_") \
                        and not n.attr.startswith("__"):
                    v = n.value
                    if isinstance(v, ast.Name) and v.id in ("self", "cls"):
                        continue
                    bad.append(f"{f.relative_to(ROOT)}:{n.lineno}: {ast.unparse(n)}")
    assert bad == []


def test_core_imports_none_of_the_other_packages():
    def ok(mod: str):
        return "core must not depend on it" if mod.split(".")[0] in NOT_FOR_CORE else None
    assert _violations(("core",), ok) == []


def test_core_and_protocols_touch_no_socket_or_event_loop():
    def ok(mod: str):
        return "sans-IO: no sockets, no event loop" if mod.split(".")[0] in IO_MODULES else None
    assert [v for v in _violations(("core", "protocols"), ok)
            if v.split(":")[0] not in SELF_SERVING] == []


def test_migrations_and_pipeline_read_storage_only():
    def ok(mod: str):
        if (mod == "core" or mod.startswith("core.")) and mod not in ("core", "core.schema"):
            return "storage readers import core.schema only"
        return None
    assert _violations(("migrations", "pipeline"), ok) == []


# ------------------------------------------------------------------------ the checker itself
@pytest.mark.parametrize("source, module", [
    ("from core.engine import Engine\n", "core.engine"),
    ("import core.storage\n", "core.storage"),
    ("from core import engine\n", "core.engine"),
    ("import importlib\nimportlib.import_module('core.records')\n", "core.records"),
    ("from ..core import journal\n", None),   # not a real package path: resolved, not core
])
def test_the_checker_sees_every_way_in(tmp_path, monkeypatch, source, module):
    """The rules must be able to fail: each of these spellings is found (a planted file)."""
    pkg = tmp_path / "protocols" / "fake"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    f = pkg / "mod.py"
    f.write_text(source)
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    found = [m for _, m in imports(f)]
    if module is None:
        assert all(_core_only_through_port(m) is None for m in found)
    else:
        assert module in found
        assert _violations(("protocols",), _core_only_through_port) != []
