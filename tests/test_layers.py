"""The sans-IO layers never import an event loop, sockets or a clock."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "gengroup"
SANS_IO = [
    *sorted((ROOT / "protocol").glob("*.py")),
    *sorted((ROOT / "group").glob("*.py")),
    ROOT / "broker" / "coordinator.py",
]
FORBIDDEN = {"trio", "anyio", "asyncio", "socket", "time", "selectors"}


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
