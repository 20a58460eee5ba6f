"""What a worker gets: one partition's fetched records, decoded when first read.

Theory of operation:

The prefetcher (:mod:`gengroup.consumer.prefetch`) checks the batch headers of
a Fetch answer (lengths, magic, CRC-32C, codec, count) and hands each
partition's part of it to the worker as a :class:`FetchedBatch` that keeps the
record batches raw. The records are decoded in the worker's task, when it
first reads ``batch.records`` (or iterates the batch, or asks its length), or
straight into Arrow columns by :meth:`FetchedBatch.to_arrow`. Deserializers
run only when :meth:`FetchedBatch.decoded` asks for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import DeserializationError
from .._types import TopicPartition
from ..protocol.records import Header, RawBatch, Record, decode_raw

__all__ = ["DecodedRecord", "Deserializers", "FetchedBatch"]


class FetchedBatch:
    """The records of one partition from one fetch, handed to a worker whole.

    The records are decoded when first read (``records``, iteration, ``len``),
    in the reading task, and kept. A batch whose header was damaged never
    gets here (the worker's ``async for`` raises instead); one whose records
    do not add up under a correct CRC raises from that first read (and from
    each later one).

    Attributes:
        topic: the topic.
        partition: the partition.
        next_offset: the offset to mark once the batch is processed.
        high_watermark: the partition's high watermark when fetched (lag =
            ``high_watermark - next_offset``).
        size: the bytes the batch was fetched as (what it counted against
            the partition's buffer).
    """

    __slots__ = (
        "_raw",
        "_records",
        "deserializers",
        "high_watermark",
        "next_offset",
        "partition",
        "size",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        records: list[Record],
        next_offset: int,
        high_watermark: int,
        size: int = 0,
        deserializers: Deserializers = (None, None),
        raw: Sequence[RawBatch] = (),
    ) -> None:
        """A batch of ``records`` followed by the still undecoded ``raw`` batches."""
        self.topic = topic
        self.partition = partition
        self._records = records
        self._raw = raw
        self.next_offset = next_offset
        self.high_watermark = high_watermark
        self.size = size
        self.deserializers = deserializers

    def __repr__(self) -> str:
        return (
            f"FetchedBatch(topic={self.topic!r}, partition={self.partition}, "
            f"next_offset={self.next_offset}, high_watermark={self.high_watermark}, "
            f"size={self.size})"
        )

    @property
    def records(self) -> list[Record]:
        """The records, in offset order (never empty), decoded on first access.

        Raises:
            CorruptRecordError: the records are inconsistent or cannot be
                decompressed (names the batch's offset).
            ProtocolError: they decompress to more than the decoder allows.
        """
        if self._raw:
            decoded = decode_raw(self._raw)
            self._records = self._records + decoded if self._records else decoded
            self._raw = ()  # the fetched bytes can go
        return self._records

    def to_arrow(self) -> Any:
        """The records as a ``pyarrow.Table``, decoded straight into columns.

        One row per record of :attr:`records`, in the same order, with the
        fixed schema of :func:`gengroup.protocol.arrow.arrow_schema`
        (``offset``, ``timestamp``, ``key``, ``value``, ``headers``). Batches
        not yet decoded go to the columns without a :class:`Record` per
        record (compiled when the extension is built); :attr:`records` stays
        available and decodes on its own. Each call builds a new table.
        Deserializers are not applied.

        Raises:
            MissingDependency: pyarrow is not installed (the ``arrow`` extra).
            CorruptRecordError: as :attr:`records`, and for an offset or
                timestamp beyond int64.
            ProtocolError: as :attr:`records`.
        """
        from ..protocol.arrow import batches_to_arrow, records_to_arrow, require_pyarrow

        if not self._raw:
            return records_to_arrow(self._records)
        table = batches_to_arrow(self._raw)
        if self._records:  # a first batch already trimmed to the position
            table = require_pyarrow().concat_tables([records_to_arrow(self._records), table])
        return table

    @property
    def tp(self) -> TopicPartition:
        """The batch's topic and partition."""
        return TopicPartition(self.topic, self.partition)

    def __iter__(self) -> Iterator[Record]:
        """The records, in offset order: ``for record in batch``."""
        return iter(self.records)

    def __len__(self) -> int:
        """How many records the batch holds."""
        return len(self.records)

    def decoded(self) -> list[DecodedRecord]:
        """The records with key and value passed through the group's deserializers.

        Deserialization happens here, when asked for, on the worker's side
        (``key_deserializer`` / ``value_deserializer`` settings; without one,
        the bytes pass through).

        Raises:
            DeserializationError: a deserializer raised; it names the topic,
                partition, offset and whether key or value, with the
                deserializer's exception as its cause.
            CorruptRecordError: as :attr:`records`.
        """
        key_of, value_of = self.deserializers
        out: list[DecodedRecord] = []
        for r in self.records:
            key = _apply(key_of, r.key, self, r.offset, "key")
            value = _apply(value_of, r.value, self, r.offset, "value")
            out.append(DecodedRecord(r.offset, r.timestamp, key, value, r.headers))
        return out


#: The ``(key_deserializer, value_deserializer)`` of a group.
Deserializers = tuple[Callable[[bytes | None], Any] | None, Callable[[bytes | None], Any] | None]


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """A record whose key and value went through the deserializers (``FetchedBatch.decoded()``)."""

    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[Header, ...]


def _apply(
    fn: Callable[[bytes | None], Any] | None,
    data: bytes | None,
    batch: FetchedBatch,
    offset: int,
    what: str,
) -> Any:
    if fn is None:
        return data
    try:
        return fn(data)
    except Exception as exc:
        raise DeserializationError(
            f"{what} of {batch.topic}[{batch.partition}] offset {offset}: "
            f"{getattr(fn, '__qualname__', fn)!r} raised {exc!r}"
        ) from exc
