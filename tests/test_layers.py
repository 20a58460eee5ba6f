"""Layering rules of the package, checked on the source.

* The sans-IO modules never import an event loop, sockets or a clock.
* No import cycle in ``gengroup/`` (imports under ``TYPE_CHECKING`` count too:
  a cycle there is still two modules that need each other).
* No module grows past the size budget: one concept per module.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "gengroup"


def _modules(*parts: str) -> list[pathlib.Path]:
    path = ROOT.joinpath(*parts)
    if path.is_dir():
        return sorted(path.rglob("*.py"))
    return [path.with_suffix(".py")] if path.with_suffix(".py").exists() else []


SANS_IO = [
    *_modules("protocol"),
    *_modules("membership"),
    *_modules("broker", "coordinator"),
    *_modules("broker", "log"),
    *_modules("broker", "faults"),
    *_modules("broker", "fetch_sessions"),
    *_modules("broker", "producer_state"),
    *_modules("_java"),
    *_modules("_errors"),
    *_modules("_error_table"),
    *_modules("partitioner"),
    *_modules("_types"),
    *_modules("_config"),
    *_modules("_producer_idempotence"),
    *_modules("_producer_failures"),
]
FORBIDDEN = {"trio", "anyio", "asyncio", "socket", "time", "selectors"}
ALL_MODULES = sorted(ROOT.rglob("*.py"))
MAX_LINES = 900


def test_sans_io_list_is_complete() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SANS_IO}
    assert {"protocol/fetch.py", "membership/member.py", "membership/requests.py"} <= names
    assert any(n.startswith("broker/coordinator") for n in names)


@pytest.mark.parametrize("path", SANS_IO, ids=lambda p: str(p.relative_to(ROOT)))
def test_sans_io_module_imports_no_io(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
        if isinstance(node, ast.Attribute) and node.attr in {"monotonic", "perf_counter"}:
            pytest.fail(f"{path.name} reads a clock ({node.attr})")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path, known: set[str]) -> set[str]:
    """The gengroup modules that ``path`` imports (``from . import x`` resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join([*base, node.module] if node.module else base)
            else:
                prefix = node.module or ""
            targets = [prefix, *(f"{prefix}.{a.name}" for a in node.names)]
        else:
            continue
        for target in targets:
            # The deepest known module the import names.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_import_cycles() -> None:
    known = {_module_name(p) for p in ALL_MODULES}
    graph = {_module_name(p): _imports(p, known) for p in ALL_MODULES}
    # A package's __init__ re-exporting its submodules is not a cycle of
    # concepts; a submodule importing its own package's __init__ is.
    for name, deps in graph.items():
        graph[name] = {d for d in deps if not name.startswith(d + ".") or d == "gengroup"} - {
            "gengroup"
        }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_size_budget(path: pathlib.Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{rel} has {lines} lines (budget {MAX_LINES})"
