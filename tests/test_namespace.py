"""The package namespace holds what the documents say is importable from ``gengroup``.

``ProducerRecord`` -- which ``send_many`` takes, and which the module defining
it said the package re-exports -- was missing, and so were the types that
``Admin`` takes and returns (``NewTopic``, ``GroupDescription`` ...).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import re
import typing

import pytest

import gengroup

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
SCRIPTS = sorted((ROOT / "examples").rglob("*.py"))


def resolves(dotted: str) -> bool:
    """Whether ``gengroup.<dotted>`` is an attribute of the package or one of its modules."""
    head, *rest = dotted.split(".")
    if hasattr(gengroup, head):
        obj: object = getattr(gengroup, head)
    else:
        try:
            obj = importlib.import_module(f"gengroup.{head}")
        except ImportError:
            return False
    for part in rest:
        if not hasattr(obj, part):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")  # type: ignore[attr-defined]
            except (ImportError, AttributeError):
                return False
        else:
            obj = getattr(obj, part)
    return True


def imported_from_gengroup(source: str) -> set[str]:
    """The names of every ``from gengroup import ...`` in Python source (or a page's code)."""
    found: set[str] = set()
    for block in re.findall(r"^from gengroup import \(?[^)\n]*(?:\([^)]*\))?", source, re.M):
        tree = ast.parse(block if "(" not in block or ")" in block else block + ")")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "gengroup":
                found.update(alias.name for alias in node.names)
    return found


def test_all_is_the_namespace() -> None:
    """Every name of ``__all__`` is there, and every public name there is in ``__all__``."""
    public = {
        name
        for name, value in vars(gengroup).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert sorted(public) == sorted(gengroup.__all__)
    assert len(set(gengroup.__all__)) == len(gengroup.__all__)


@pytest.mark.parametrize("path", PAGES + SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_what_a_page_or_example_imports_from_gengroup_is_exported(path: pathlib.Path) -> None:
    text = path.read_text()
    missing = sorted(n for n in imported_from_gengroup(text) if n not in gengroup.__all__)
    assert missing == []
    # mkdocs cross references: [text][gengroup.X] and `gengroup.X(...)` in code.
    for dotted in re.findall(r"\]\[gengroup\.([\w.]+)\]", text):
        assert resolves(dotted), f"[...][gengroup.{dotted}]"


def test_what_a_module_says_the_package_re_exports_is_exported() -> None:
    claims: dict[str, list[str]] = {}
    for path in (ROOT / "gengroup").rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        for sentence in re.split(r"(?<=\.)\s", " ".join(doc.split())):
            if "re-exported by" in sentence and "the package" in sentence:
                names = re.findall(r":class:`~?(?:[\w.]*\.)?(\w+)`", sentence)
                claims[str(path.relative_to(ROOT))] = names
    assert claims["gengroup/_producer_records.py"] == ["ProducerRecord", "RecordMetadata"]
    missing = {
        where: [n for n in names if n not in gengroup.__all__] for where, names in claims.items()
    }
    assert all(not names for names in missing.values()), missing


@pytest.mark.parametrize("client", [gengroup.Admin, gengroup.Producer])
def test_what_a_client_takes_and_returns_is_exported(client: type) -> None:
    """A user can import each gengroup class a client's public methods take or return."""
    used: set[str] = set()
    for name, member in vars(client).items():
        if name.startswith("_") and name != "__init__":
            continue
        function = getattr(member, "fget", member)
        if not callable(function):
            continue
        hints = typing.get_type_hints(function)
        used.update(
            re.findall(r"gengroup\.(?:[a-z_]+\.)+([A-Z]\w+)", " ".join(map(str, hints.values())))
        )
    # Admin.coordinator hands out the plumbing the group operations use.
    plumbing = {"CoordinatorClient"}
    assert sorted(used - plumbing - set(gengroup.__all__)) == []
