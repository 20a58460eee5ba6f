"""Topic configs: the names Apache Kafka 4.x accepts and its checks of their values (sans-IO).

CreateTopics refuses a config Kafka would refuse, with INVALID_CONFIG and
Kafka's message: a null value, an unknown name (``Unknown topic config name:
retension.ms``), a value that does not parse as the config's type or falls
outside its range or choices (``Invalid value bogus for configuration
cleanup.policy: String must be one of: compact, delete``), and
``min.compaction.lag.ms`` above ``max.compaction.lag.ms``. Names, types,
bounds and choices are those of Kafka 4.3's topic-level log config; values are
parsed as Java's ``ConfigDef`` parses them (trimmed; Java integer, long,
double and boolean syntax), and a message shows the value as Kafka's does.
Values are checked in Kafka's definition order, so of two bad values the same
one is reported.

Every accepted config is stored; only some take effect in the embedded broker
(see docs/embedded-broker.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["TOPIC_CONFIG_NAMES", "topic_config_error"]

Kind = Literal["INT", "LONG", "DOUBLE", "BOOLEAN", "STRING", "LIST", "REPLICAS"]

_INT_RANGE: Final = (-(2**31), 2**31 - 1)
_LONG_RANGE: Final = (-(2**63), 2**63 - 1)
_INTEGER = re.compile(r"[+-]?\d+")
_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)", re.ASCII)
_REPLICA = re.compile(r"(?:\d+:\d+)?", re.ASCII)
_REPLICAS_HINT: Final = (
    "must be the literal '*' or a list of replicas in the following format: "
    "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


@dataclass(frozen=True)
class _Spec:
    """One config: its type, bounds (inclusive) and allowed values."""

    kind: Kind
    at_least: int | None = None
    at_most: int | None = None
    choices: tuple[str, ...] = ()
    or_equal: int | None = None
    """A value allowed outside the bounds (gzip's -1, the library default)."""


# Kafka 4.3's topic configs, in its definition order (LogConfig).
_SPECS: Final[dict[str, _Spec]] = {
    "segment.bytes": _Spec("INT", at_least=1024 * 1024),
    "segment.ms": _Spec("LONG", at_least=1),
    "segment.jitter.ms": _Spec("LONG", at_least=0),
    "segment.index.bytes": _Spec("INT", at_least=4),
    "flush.messages": _Spec("LONG", at_least=1),
    "flush.ms": _Spec("LONG", at_least=0),
    "retention.bytes": _Spec("LONG"),
    "retention.ms": _Spec("LONG", at_least=-1),
    "max.message.bytes": _Spec("INT", at_least=0),
    "index.interval.bytes": _Spec("INT", at_least=0),
    "delete.retention.ms": _Spec("LONG", at_least=0),
    "min.compaction.lag.ms": _Spec("LONG", at_least=0),
    "max.compaction.lag.ms": _Spec("LONG", at_least=1),
    "file.delete.delay.ms": _Spec("LONG", at_least=0),
    "min.cleanable.dirty.ratio": _Spec("DOUBLE", at_least=0, at_most=1),
    "cleanup.policy": _Spec("LIST", choices=("compact", "delete")),
    "unclean.leader.election.enable": _Spec("BOOLEAN"),
    "min.insync.replicas": _Spec("INT", at_least=1),
    "compression.type": _Spec(
        "STRING", choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
    ),
    "compression.gzip.level": _Spec("INT", at_least=1, at_most=9, or_equal=-1),
    "compression.lz4.level": _Spec("INT", at_least=1, at_most=17),
    "compression.zstd.level": _Spec("INT", at_least=-131072, at_most=22),
    "preallocate": _Spec("BOOLEAN"),
    "message.timestamp.type": _Spec("STRING", choices=("CreateTime", "LogAppendTime")),
    "message.timestamp.before.max.ms": _Spec("LONG", at_least=0),
    "message.timestamp.after.max.ms": _Spec("LONG", at_least=0),
    "leader.replication.throttled.replicas": _Spec("REPLICAS"),
    "follower.replication.throttled.replicas": _Spec("REPLICAS"),
    "remote.storage.enable": _Spec("BOOLEAN"),
    "local.retention.ms": _Spec("LONG", at_least=-2),
    "local.retention.bytes": _Spec("LONG", at_least=-2),
    "remote.log.copy.disable": _Spec("BOOLEAN"),
    "remote.log.delete.on.disable": _Spec("BOOLEAN"),
    "internal.segment.bytes": _Spec("INT"),  # Kafka's internal, for its own tests
}

TOPIC_CONFIG_NAMES: Final = frozenset(_SPECS)
"""Every topic config name Kafka 4.3 accepts."""


def _java_trim(text: str) -> str:
    """``String.trim()``: strip every character up to U+0020 from both ends."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def _invalid(name: str, value: str, why: str) -> str:
    """Kafka's ``ConfigException(name, value, message)`` text."""
    return f"Invalid value {value} for configuration {name}: {why}"


def _range_error(spec: _Spec, number: float) -> str | None:
    if spec.or_equal is not None and number == spec.or_equal:
        return None
    if spec.or_equal is not None and (
        (spec.at_least is not None and number < spec.at_least)
        or (spec.at_most is not None and number > spec.at_most)
    ):
        return (
            f"Value must be between {spec.at_least} and {spec.at_most} or equal to {spec.or_equal}"
        )
    if spec.at_least is not None and number < spec.at_least:
        return f"Value must be at least {spec.at_least}"
    if spec.at_most is not None and number > spec.at_most:
        return f"Value must be no more than {spec.at_most}"
    return None


def _number_error(name: str, value: str, spec: _Spec) -> str | None:
    trimmed = _java_trim(value)
    number: float
    if spec.kind == "DOUBLE":
        if _DOUBLE.fullmatch(trimmed) is None:
            return _invalid(name, value, "Not a number of type DOUBLE")
        number = float(trimmed.rstrip("fFdD"))
    else:
        lo, hi = _INT_RANGE if spec.kind == "INT" else _LONG_RANGE
        number = int(trimmed) if _INTEGER.fullmatch(trimmed) else hi + 1
        if not lo <= number <= hi:
            return _invalid(name, value, f"Not a number of type {spec.kind}")
    if number != number:  # NaN passes every bound in Java
        return None
    why = _range_error(spec, number)
    return None if why is None else _invalid(name, _java_number(number), why)


def _java_number(number: float) -> str:
    """How Java prints a parsed Integer, Long or Double (the value in a range error)."""
    if isinstance(number, int):
        return str(number)
    if number in (float("inf"), float("-inf")):
        return "Infinity" if number > 0 else "-Infinity"
    return repr(number)


def _list(value: str) -> list[str]:
    """ConfigDef's LIST parsing: trimmed, split on commas with the spaces around them."""
    trimmed = _java_trim(value)
    return [] if not trimmed else re.split(r"\s*,\s*", trimmed)


def _value_error(name: str, value: str, spec: _Spec) -> str | None:
    """Kafka's message if ``value`` is not a valid value of config ``name``."""
    if spec.kind in ("INT", "LONG", "DOUBLE"):
        return _number_error(name, value, spec)
    if spec.kind == "BOOLEAN":
        if _java_trim(value).lower() not in ("true", "false"):
            return _invalid(name, value, "Expected value to be either true or false")
        return None
    if spec.kind == "STRING":
        trimmed = _java_trim(value)
        if trimmed not in spec.choices:
            return _invalid(name, trimmed, f"String must be one of: {', '.join(spec.choices)}")
        return None
    items = _list(value)
    if spec.kind == "REPLICAS":
        if items == ["*"] or all(_REPLICA.fullmatch(_java_trim(i)) for i in items):
            return None
        return _invalid(name, f"[{', '.join(items)}]", f"{name} {_REPLICAS_HINT}")
    for item in items:
        if not item:
            return f"Configuration '{name}' values must not be empty."
        if item not in spec.choices:
            return _invalid(name, item, f"String must be one of: {', '.join(spec.choices)}")
    return None


def topic_config_error(configs: Mapping[str, str | None]) -> str | None:
    """Why Kafka would refuse these topic configs (its INVALID_CONFIG message), or ``None``.

    The checks run in Kafka's order: null values, unknown names, each value
    (in Kafka's definition order), then the compaction lag bounds.
    """
    nulls = [name for name, value in configs.items() if value is None]
    if nulls:
        return f"Null value not supported for topic configs: {','.join(nulls)}"
    for name in configs:
        if name not in _SPECS:
            return f"Unknown topic config name: {name}"
    for name, spec in _SPECS.items():
        value = configs.get(name)
        if value is not None:
            why = _value_error(name, value, spec)
            if why is not None:
                return why
    low = int(_java_trim(configs.get("min.compaction.lag.ms") or "0"))
    high = int(_java_trim(configs.get("max.compaction.lag.ms") or str(_LONG_RANGE[1])))
    if low > high:
        return (
            f"conflict topic config setting min.compaction.lag.ms ({low}) > "
            f"max.compaction.lag.ms ({high})"
        )
    return None
