"""The documentation names real things: every test a page cites exists."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: ``tests/PATH.py::test_name`` as the pages cite a test.
_CITED = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")
#: A bare ``test_name`` after a cited one, on the same page (``and `test_other```).
_BARE = re.compile(r"`(test_\w+)`")


def _tests_in(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def _citations(page: pathlib.Path) -> list[tuple[str, str]]:
    """(file, test) of each test the page cites; a bare name belongs to the file cited before."""
    found: list[tuple[str, str]] = []
    current: str | None = None
    for line in page.read_text().splitlines():
        spans = sorted(
            [(m.start(), m.group(1), m.group(2)) for m in _CITED.finditer(line)]
            + [(m.start(), None, m.group(1)) for m in _BARE.finditer(line)]
        )
        for _, file, name in spans:
            current = file or current
            assert current is not None, f"{page.name}: {name} cited before any test file"
            found.append((current, name))
    return found


PAGES = sorted(p for p in DOCS.glob("*.md") if _CITED.search(p.read_text()))


def test_some_page_cites_tests() -> None:
    assert any(p.name == "guarantees.md" for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_cited_test_exists(page: pathlib.Path) -> None:
    citations = _citations(page)
    assert citations
    missing = [
        f"{file}::{name}"
        for file, name in citations
        if not (ROOT / file).is_file() or name not in _tests_in(ROOT / file)
    ]
    assert not missing, f"{page.name} cites tests that do not exist: {missing}"


@pytest.mark.parametrize("config", ["GroupConfig", "ProducerConfig", "AdminConfig", "Security"])
def test_the_configuration_page_lists_every_setting(config: str) -> None:
    """Each config's own settings in its table; the security settings every client
    inherits from ``Security`` once, in theirs."""
    import dataclasses

    import gengroup

    page = (DOCS / "configuration.md").read_text()
    section = page.split(f"## `{config}`", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)` \|", section, re.M))
    fields = {f.name for f in dataclasses.fields(getattr(gengroup, config))}
    if config != "Security":
        fields -= {f.name for f in dataclasses.fields(gengroup.Security)}
    assert listed == fields


def test_the_guide_names_every_exported_metric() -> None:
    from gengroup.consumer.metrics import _COUNTERS

    page = " ".join((DOCS / "guide.md").read_text().split())
    exported = [f"gengroup_{name}_total" for name, _ in _COUNTERS]
    missing = [name for name in [*exported, "gengroup_last_rebalance_seconds"] if name not in page]
    assert not missing, f"guide.md does not name the metrics {missing}"


def test_the_failures_page_names_every_exported_exception() -> None:
    """Every exception class ``gengroup`` exports is named, in backquotes, on
    docs/failures.md, and every gengroup exception class the page names is exported."""
    import gengroup
    from gengroup import _errors

    page = (DOCS / "failures.md").read_text()
    named = set(re.findall(r"`(\w+)`", page))
    exported = {
        name
        for name in gengroup.__all__
        if isinstance(getattr(gengroup, name), type)
        and issubclass(getattr(gengroup, name), BaseException)
    }
    assert sorted(exported - named) == []
    documented = {
        name
        for name, value in vars(_errors).items()
        if name in named and isinstance(value, type) and issubclass(value, BaseException)
    }
    assert sorted(documented - set(gengroup.__all__)) == []
