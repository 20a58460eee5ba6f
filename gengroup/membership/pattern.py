"""Subscribing by pattern: which topics a pattern matches, and its RE2J form.

Theory of operation:

Under the classic protocol the member matches (client-side, as the Java
client does): :func:`matching_topics` takes the cluster's topic names with
their ``is_internal`` flags and keeps those the pattern matches in full
(``re.fullmatch``, Java's ``Matcher.matches``). Internal topics
(``__consumer_offsets``, ``__transaction_state``, ...) are never matched, as
with the Java client's default ``exclude.internal.topics=true``. The member
joins with the matched names as its subscription and re-checks them every
``partition_watch_interval``.

Under the consumer protocol (KIP-848) the broker matches: the member sends the
pattern in ConsumerGroupHeartbeat's ``subscribed_topic_regex``, and the broker
compiles it with RE2J. :func:`re2j_regex` checks, at construction, that the
pattern uses nothing RE2J lacks (lookaround, backreferences, atomic groups,
possessive quantifiers, conditionals, verbose mode, ``\\Z``), by walking the
parse tree Python itself makes of it, then scans the text for what the tree
does not show (the inline flags ``(?a)`` and ``(?u)``; ``{,n}``, which RE2J
reads literally), and turns the compiled pattern's flags into RE2J's inline
ones.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from .._errors import ConfigError

__all__ = ["describe_change", "matching_topics", "re2j_regex"]

# Python's own regular-expression parser (``sre_parse`` is deprecated since 3.11).
_parser: Any = importlib.import_module("re._parser")

#: Parse-tree operations RE2J has no equivalent of, and what to call them.
_UNSUPPORTED_OPS = {
    "ASSERT": "a lookahead or lookbehind assertion ((?=...), (?<=...))",
    "ASSERT_NOT": "a negative lookahead or lookbehind assertion ((?!...), (?<!...))",
    "GROUPREF": "a backreference (\\1, (?P=name))",
    "GROUPREF_IGNORE": "a backreference (\\1, (?P=name))",
    "GROUPREF_LOC_IGNORE": "a backreference (\\1, (?P=name))",
    "GROUPREF_UNI_IGNORE": "a backreference (\\1, (?P=name))",
    "GROUPREF_EXISTS": "a conditional group ((?(1)yes|no))",
    "ATOMIC_GROUP": "an atomic group ((?>...))",
    "POSSESSIVE_REPEAT": "a possessive quantifier (*+, ++, ?+, {m,n}+)",
}

#: Python flags RE2J has no equivalent of (its classes are ASCII already, so
#: re.ASCII given to re.compile() changes nothing a topic name can show).
_UNSUPPORTED_FLAGS = {re.VERBOSE: "verbose mode (re.VERBOSE, (?x))"}

#: Inline flags RE2J does not know (it has i, m, s and U).
_UNSUPPORTED_INLINE = {
    "a": "the inline flag (?a) (pass re.ASCII to re.compile instead)",
    "u": "the inline flag (?u) (Python's default anyway: leave it out)",
    "L": "the inline flag (?L)",
    "x": "verbose mode (re.VERBOSE, (?x))",
}

#: Python flags RE2J spells the same way inline.
_INLINE_FLAGS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"))


def matching_topics(pattern: re.Pattern[str], topics: Iterable[tuple[str, bool]]) -> set[str]:
    """The topics ``pattern`` matches in full, internal topics left out.

    Args:
        pattern: the subscription's pattern.
        topics: (name, is_internal) of every topic in the cluster.
    """
    return {name for name, internal in topics if not internal and pattern.fullmatch(name)}


def describe_change(before: Iterable[str], after: Iterable[str]) -> str:
    """A short account of a changed set of matched topics ("+new -gone")."""
    old, new = set(before), set(after)
    parts = [f"+{t}" for t in sorted(new - old)] + [f"-{t}" for t in sorted(old - new)]
    return " ".join(parts) or "unchanged"


@lru_cache(maxsize=64)
def re2j_regex(pattern: re.Pattern[str]) -> str:
    """The regular expression the broker (RE2J) gets for ``pattern``.

    Raises:
        ConfigError: the pattern is not a ``str`` pattern, or uses a
            construct RE2J lacks (the message names it).
    """
    if not isinstance(pattern.pattern, str):
        raise ConfigError(f"topic_pattern must be a str pattern, got {pattern.pattern!r}")
    source = pattern.pattern
    try:
        parsed = _parser.parse(source, pattern.flags)
    except re.error as exc:  # compiled already, so only if the parser changed
        raise ConfigError(f"topic_pattern {source!r} cannot be parsed: {exc}") from None
    found = _unsupported(parsed, int(parsed.state.flags)) or _unsupported_text(source)
    if found is not None:
        raise ConfigError(
            f"topic_pattern {source!r} uses {found}, which the broker's regular-expression "
            "engine (RE2J, used under group_protocol='consumer') does not support; rewrite "
            "the pattern without it, or use group_protocol='classic' (the member matches "
            "with Python's re there)"
        )
    # Flags given to re.compile() become inline ones; those written inline already stay.
    inline = int(_parser.parse(source, 0).state.flags)
    given = pattern.flags & ~inline
    prefix = "".join(letter for flag, letter in _INLINE_FLAGS if given & flag)
    return f"(?{prefix}){source}" if prefix else source


def _unsupported(node: Any, flags: int) -> str | None:
    """The first construct of the parse tree ``node`` that RE2J lacks, named; or None."""
    for flag, said in _UNSUPPORTED_FLAGS.items():
        if flags & flag:
            return said
    items = node.data if hasattr(node, "data") else node
    for op, av in items:
        name = str(op)
        if name in _UNSUPPORTED_OPS:
            return _UNSUPPORTED_OPS[name]
        if name == "AT" and str(av) == "AT_END_STRING":
            return "\\Z (RE2J spells the end of the text \\z; $ works in both)"
        if name == "SUBPATTERN":
            _, add_flags, _, sub = av
            found = _unsupported(sub, add_flags)
        else:
            found = _nested(av)
        if found is not None:
            return found
    return None


def _unsupported_text(source: str) -> str | None:
    """What the parse tree does not show: inline flags and ``{,n}``, outside classes."""
    i, n = 0, len(source)
    in_class = False
    while i < n:
        c = source[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            i += 1
            if source.startswith("^", i):
                i += 1
            if source.startswith("]", i):  # a "]" first in a class is a literal
                i += 1
            in_class = True
            continue
        elif source.startswith("(?", i):
            m = re.match(r"\(\?([a-zA-Z]+)(?:-[a-zA-Z]+)?[:)]", source[i:])
            letters = m.group(1) if m is not None else ""
            for letter in letters:
                if letter in _UNSUPPORTED_INLINE:
                    return _UNSUPPORTED_INLINE[letter]
        elif c == "{" and re.match(r"\{,\d+\}", source[i:]):
            return "a quantifier without a minimum ({,n}: RE2J reads it literally; write {0,n})"
        i += 1
    return None


def _nested(av: Any) -> str | None:
    """The first unsupported construct in an operation's arguments (sub-patterns in them)."""
    if hasattr(av, "data"):
        return _unsupported(av, 0)
    if isinstance(av, list | tuple):
        for item in av:
            found = _nested(item)
            if found is not None:
                return found
    return None
