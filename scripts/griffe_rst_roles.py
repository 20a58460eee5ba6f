"""A griffe extension for the documentation site: the docstrings' roles as Markdown.

The docstrings cross-reference in reStructuredText (``:class:`~gengroup.Generation```,
``:meth:`text <target>```), which the API reference would show as written.
This extension, named in ``mkdocs.yml``, turns each role into inline code,
linked to the API reference where the target is a public name documented
there (``gengroup.X`` or ``gengroup.lake.X``), and a paragraph's closing
``::`` (a literal block follows) into ``:``.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj):`([^`]+)`")
_LITERAL_BLOCK = re.compile(r"(\S)::(\n[ \t]*\n)")
#: The modules whose public names have a section on a reference page.
_DOCUMENTED = ("gengroup", "gengroup.lake")


def _public(module: str) -> set[str]:
    try:
        names = importlib.import_module(module).__all__
    except ImportError:  # an optional extra is missing: nothing to link to
        return set()
    return {f"{module}.{name}" for name in names}


class RstRoles(griffe.Extension):
    """Rewrites every docstring's roles when its object is loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.linkable: set[str] = set().union(*(_public(m) for m in _DOCUMENTED))

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = self.markdown(obj.docstring.value)

    def markdown(self, text: str) -> str:
        """``text`` with its roles as code (or links) and its ``::`` as ``:``."""
        return _LITERAL_BLOCK.sub(r"\1:\2", _ROLE.sub(self._role, text))

    def _role(self, match: re.Match[str]) -> str:
        content = " ".join(match.group(1).split())
        shown, _, target = content.partition(" <")
        if target:
            target = target.rstrip(">")
        else:
            target = content.lstrip("~")
            shown = target.rsplit(".", 1)[-1] if content.startswith("~") else target
        if target in self.linkable:
            return f"[`{shown}`][{target}]"
        return f"`{shown}`"
