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
from functools import partial
from typing import Any, TypeVar

from .._errors import DecompressionLimitExceeded, DeserializationError, ProtocolError
from .._types import TopicPartition
from ..protocol.records import DEFAULT_MAX_DECOMPRESSED_SIZE, Header, RawBatch, Record, decode_raw

__all__ = ["Damage", "DecodedRecord", "Deserializers", "FetchedBatch"]

_T = TypeVar("_T")


class Damage:
    """Where one partition's fetched records turned out damaged, shared by its batches.

    Records are decoded by the worker, after the batch was handed out, so the
    damage a batch finds is told here: the batches of the partition handed
    out past it end there too (they hold nothing the worker may have), and
    whoever created it (the prefetcher) is told once, to stop the partition
    at the damaged offset.

    Attributes:
        offset: the damaged record batch's offset (-1: none found).
        error: the damage (None: none found).
    """

    __slots__ = ("_tell", "error", "offset")

    def __init__(self, tell: Callable[[Damage], None] | None = None) -> None:
        """``tell``: called with this object when damage is found (and found lower)."""
        self._tell = tell
        self.offset = -1
        self.error: ProtocolError | None = None

    def found(self, offset: int, error: ProtocolError) -> None:
        """The records of the partition at ``offset`` cannot be decoded: ``error``."""
        if self.error is None or offset < self.offset:
            self.offset, self.error = offset, error
            if self._tell is not None:
                self._tell(self)


class FetchedBatch:
    """The records of one partition from one fetch, handed to a worker whole.

    The records are decoded when first read (``records``, iteration,
    ``len``, :meth:`to_arrow`), in the reading task, and kept. A batch whose
    header was damaged never gets here (the worker's ``async for`` raises
    instead). One of its record batches whose records do not add up under a
    correct CRC ends it, as the Java consumer does: the records of the
    record batches before it are the batch's records, ``next_offset`` becomes
    the damaged record batch's offset, and the worker's next step of
    ``gen.fetch(tp)`` raises the damage (and every step after, until
    ``gen.seek``); with no record before it, the first read raises it (and
    every later one). Nothing past the damage is handed out.

    Attributes:
        topic: the topic.
        partition: the partition.
        next_offset: the offset to mark once the batch is processed; final
            once its records were read (damage found then lowers it).
        high_watermark: the partition's high watermark when fetched (lag =
            ``high_watermark - next_offset``).
        size: the bytes the batch was fetched as (what it counted against
            the partition's buffer).
    """

    __slots__ = (
        "_damage",
        "_error",
        "_limit",
        "_raw",
        "_read",
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
        damage: Damage | None = None,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> None:
        """A batch of ``records`` followed by the still undecoded ``raw`` batches.

        ``damage``: the partition's, shared by the batches fetched for it.
        ``max_decompressed``: the most bytes one record batch may decompress
        to (the group's ``max_decompressed_bytes``).
        """
        self.topic = topic
        self.partition = partition
        self._records = records
        self._raw = raw
        self.next_offset = next_offset
        self.high_watermark = high_watermark
        self.size = size
        self.deserializers = deserializers
        self._damage = Damage() if damage is None else damage
        self._limit = max_decompressed
        #: The damage that ended the batch (None: none found).
        self._error: ProtocolError | None = None
        self._read = False

    def __repr__(self) -> str:
        return (
            f"FetchedBatch(topic={self.topic!r}, partition={self.partition}, "
            f"next_offset={self.next_offset}, high_watermark={self.high_watermark}, "
            f"size={self.size})"
        )

    @property
    def records(self) -> list[Record]:
        """The records, in offset order (never empty), decoded on first access.

        Records of a record batch that cannot be decoded, and of those after
        it, are not among them (see the class).

        Raises:
            CorruptRecordError: no record comes before the damage: the records
                are inconsistent or cannot be decompressed (names the
                partition and the record batch's offset).
            DecompressionLimitExceeded: a record batch decompresses to more
                than the group's ``max_decompressed_bytes`` (a
                ``CorruptRecordError``, handed out as damage is).
        """
        decoded = self._decode(partial(decode_raw, max_decompressed_size=self._limit))
        if decoded is not None:
            self._records = self._records + decoded if self._records else decoded
        self._raw = ()  # the fetched bytes can go
        if self._error is not None and not self._records:
            raise self._error
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
                timestamp beyond int64 (which ends the batch as damage does).
            DecompressionLimitExceeded: as :attr:`records`.
        """
        from ..protocol.arrow import batches_to_arrow, records_to_arrow, require_pyarrow

        table = self._decode(partial(batches_to_arrow, max_decompressed_size=self._limit))
        if self._error is not None and not self._records and not self._raw:
            raise self._error
        if table is None:
            return records_to_arrow(self._records)
        if self._records:  # a first batch already trimmed to the position
            table = require_pyarrow().concat_tables([records_to_arrow(self._records), table])
        return table

    @property
    def tp(self) -> TopicPartition:
        """The batch's topic and partition."""
        return TopicPartition(self.topic, self.partition)

    def _decode(self, decode: Callable[[Sequence[RawBatch]], _T]) -> _T | None:
        """``decode`` of the undecoded batches before the damage (None: none is).

        Damage found here ends the batch there and is told to the partition;
        at the first read, damage the partition's other batches found at or
        before this one's first offset ends it at once.
        """
        damage, first_read, self._read = self._damage, not self._read, True
        if first_read and damage.error is not None and self._starts_past(damage.offset):
            self._end(0, damage.offset, damage.error)  # handed out past the damage
        if not self._raw:
            return None
        try:
            return decode(self._raw)
        except ProtocolError:
            if self._error is not None:
                raise  # (the batches before the damage decoded before)
            # Batch by batch (only now: decoding them at once is faster) to find the damage.
            for i, raw in enumerate(self._raw):
                try:
                    decode((raw,))
                except ProtocolError as exc:
                    error = type(exc)(f"Fetch {self.tp}: {exc}{_hint(exc)}")
                    error.__cause__ = exc
                    self._end(i, raw.base_offset, error)
                    damage.found(raw.base_offset, error)
                    return decode(self._raw) if self._raw else None
            raise  # (at once they failed, one by one none does: not damage of one)

    def _starts_past(self, offset: int) -> bool:
        """Whether the batch starts at or past ``offset``."""
        if self._records:
            return self._records[0].offset >= offset
        return bool(self._raw) and self._raw[0].base_offset >= offset

    def _end(self, kept: int, offset: int, error: ProtocolError) -> None:
        """End the batch before ``offset``, keeping ``kept`` undecoded batches."""
        self._raw = self._raw[:kept]
        self._error = error
        self.next_offset = min(self.next_offset, offset)

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


def _hint(exc: ProtocolError) -> str:
    """What to do about ``exc``, if the group's settings decide it."""
    if isinstance(exc, DecompressionLimitExceeded):
        return " (the group's max_decompressed_bytes: raise it to read these records)"
    return ""


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
