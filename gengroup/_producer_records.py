"""The producer's record values, and the checks a record passes before it is queued.

:class:`ProducerRecord` and :class:`RecordMetadata` are re-exported by
:mod:`gengroup.producer` and the package.

A record that could not be encoded must fail its own call, not the batch it
would share with other callers' records: every field is checked here, at the
call, against what the record batch encoder (``protocol/records.py``) and the
Kafka protocol accept. Each check raises a :class:`TypeError` or
:class:`ValueError` naming the argument. The Produce request carrying the
encoded batches is built here too (:func:`produce_request`).
"""

from __future__ import annotations

import math
import operator
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from ._errors import BrokerError, error_for_code
from ._producer_config import ProducerConfig
from ._types import TopicPartition
from .protocol.framing import build, ms
from .protocol.records import Header

__all__ = [
    "Checked",
    "ProducerRecord",
    "RecordMetadata",
    "check_partition",
    "check_record",
    "check_records",
    "check_topic",
    "estimate",
    "produce_error",
    "produce_request",
]

_RECORD_OVERHEAD: Final = 26  # upper bound of a record's varint framing
_INT64_MAX: Final = (1 << 63) - 1
_INT32_MAX: Final = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record was written.

    Attributes:
        topic: the topic.
        partition: the partition.
        offset: the record's offset, or -1 when ``acks=0`` (the broker says nothing).
        timestamp: the record's timestamp in ms: the broker's append time for
            topics with ``message.timestamp.type=LogAppendTime``, else the
            create time that was sent.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record for :meth:`Producer.send_many`.

    Attributes:
        value: the value (None for a tombstone).
        key: the key (None: no key).
        headers: ``(name, value)`` pairs; values may be None.
        partition: an explicit partition, or None to let the partitioner choose.
        timestamp_ms: the create time in ms (None: now).
    """

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    partition: int | None = None
    timestamp_ms: int | None = None


class Checked(NamedTuple):
    """A record's fields, checked and converted (``bytes`` values, a tuple of headers)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    partition: int | None
    timestamp_ms: int | None
    size: int


def estimate(key: bytes | None, value: bytes | None, headers: Iterable[Header]) -> int:
    """An upper bound of the record's encoded size, for batching and the buffer."""
    size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, hv in headers:
        size += 10 + len(name) * 4 + (len(hv) if hv else 0)
    return size


def _as_bytes(what: str, value: object) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"{what} must be bytes or None, not {type(value).__name__}")
    return bytes(value)


def _utf8(what: str, text: str) -> None:
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} {text!r} cannot be encoded as UTF-8: {exc.reason}") from None


def _integer(what: str, value: object) -> int:
    """``value`` as an int: an int or an integer type (``operator.index``), never a bool."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}") from None


def check_topic(topic: object) -> str:
    """``topic``, if it is a str that encodes to UTF-8."""
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    _utf8("topic", topic)
    return topic


def check_partition(partition: object) -> int | None:
    """An explicit partition: None or an int (not a bool); its range is the topic's."""
    return None if partition is None else _integer("partition", partition)


def _check_headers(headers: object) -> tuple[Header, ...]:
    if isinstance(headers, str | bytes | bytearray | memoryview | Mapping) or not isinstance(
        headers, Iterable
    ):
        raise TypeError(
            f"headers must be an iterable of (str, bytes | None) pairs, "
            f"not {type(headers).__name__}"
        )
    out: list[Header] = []
    for header in headers:
        if (
            isinstance(header, str | bytes)
            or not isinstance(header, tuple | list)
            or len(header) != 2
            or not isinstance(header[0], str)
        ):
            raise TypeError(f"headers must be (str, bytes | None) pairs, not {header!r}")
        _utf8("header name", header[0])
        out.append((header[0], _as_bytes("header value", header[1])))
    return tuple(out)


def _check_timestamp(timestamp_ms: object) -> int | None:
    if timestamp_ms is None:
        return None
    if isinstance(timestamp_ms, float) and math.isfinite(timestamp_ms):
        timestamp_ms = int(timestamp_ms)  # time.time() * 1000: whole milliseconds
    stamp = _integer("timestamp_ms", timestamp_ms)
    if not 0 <= stamp <= _INT64_MAX:
        # As the Java producer: "Timestamp should always be non-negative or null".
        raise ValueError(
            f"timestamp_ms must be None (now) or 0 <= timestamp_ms < 2**63, not {stamp}"
        )
    return stamp


def check_record(
    key: object, value: object, headers: object, partition: object, timestamp_ms: object
) -> Checked:
    """Check every field of a record; raise what is wrong with the first bad one.

    Raises:
        TypeError: a field of the wrong type (a str value, a bool partition ...).
        ValueError: a timestamp outside int64 or negative, a header name that
            cannot be encoded as UTF-8.
    """
    # The common record (bytes or None, no headers, no partition, no
    # timestamp) takes type identity checks only: this runs once per record.
    key_b = key if key is None or type(key) is bytes else _as_bytes("key", key)
    value_b = value if value is None or type(value) is bytes else _as_bytes("value", value)
    part = partition if partition is None or type(partition) is int else check_partition(partition)
    stamp = None if timestamp_ms is None else _check_timestamp(timestamp_ms)
    if type(headers) is tuple and not headers:
        size = _RECORD_OVERHEAD + (len(key_b) if key_b else 0) + (len(value_b) if value_b else 0)
        return Checked(key_b, value_b, (), part, stamp, size)
    checked_headers = _check_headers(headers)
    return Checked(
        key_b, value_b, checked_headers, part, stamp, estimate(key_b, value_b, checked_headers)
    )


def check_records(records: Iterable[ProducerRecord | bytes | None]) -> list[Checked]:
    """Check every record of ``send_many`` (a bare value is a record without a key).

    Raises:
        TypeError, ValueError: a bad record, its index in the message.
    """
    checked: list[Checked] = []
    for index, item in enumerate(records):
        r = item if isinstance(item, ProducerRecord) else ProducerRecord(item)
        try:
            checked.append(check_record(r.key, r.value, r.headers, r.partition, r.timestamp_ms))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"records[{index}]: {exc}") from None
    return checked


def produce_request(mod: Any, batches: Mapping[TopicPartition, bytes], cfg: ProducerConfig) -> Any:
    """The Produce request of ``mod`` (a negotiated version's kio module)
    carrying each partition's encoded record batch."""
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for tp, data in batches.items():
        by_topic[tp.topic].append(build(mod.PartitionProduceData, index=tp.partition, records=data))
    return build(
        mod.ProduceRequest,
        transactional_id=None,
        acks=cfg.acks,
        timeout=ms(min(cfg.request_timeout, _INT32_MAX / 1000)),
        topic_data=tuple(
            build(mod.TopicProduceData, name=topic, partition_data=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


def produce_error(part: Any, context: str) -> BrokerError:
    """The typed error of a Produce answer's partition (``part``), with the
    broker's message or else its records' errors, after ``context``."""
    detail = part.error_message or "; ".join(
        f"record {e.batch_index}: {e.batch_index_error_message}" for e in part.record_errors
    )
    return error_for_code(int(part.error_code), f"{context}: {detail}")
