"""Kafka RecordBatch v2 (magic 2) codec, sans-IO.

Theory of operation:

A Fetch response carries, per partition, a ``records`` byte string that is a
concatenation of record batches. Each batch starts with a fixed 61-byte header
(``baseOffset`` .. ``recordsCount``, all big-endian) followed by the records,
either verbatim or compressed as one blob. :func:`decode_batches_partial` walks
the batches with a single precompiled :class:`struct.Struct` per header and
checks one CRC-32C per batch (over ``attributes`` .. end). A broker may cut the
*last* batch short when it hits the fetch size limit; a batch whose declared
length runs past the end of the data therefore ends decoding silently, and the
number of bytes consumed tells the caller that a partial batch was dropped. A
batch that fits but whose contents do not add up raises
:class:`~gengroup._errors.CorruptRecordError`.

The record loop is the hot path of every consumer. It has a compiled twin,
:mod:`gengroup.protocol._speedups` (C, built by ``pip install`` when a
compiler is present), used when it imports and ``GENGROUP_PURE_PYTHON`` is
unset; the Python loop here is the fallback and the reference. It works on one
``bytes`` object with an integer cursor (a ``bytearray`` or ``memoryview``
input is copied once, as is each decompressed blob): each zigzag varint is
decoded inline with fast paths for the one- and two-byte encodings (the sign
is undone by a table lookup) and a bounded helper for longer ones. Keys and
values are the only per-record copies. The cyclic GC is paused during a
decode call: every :class:`Record` the Python loop makes is GC-tracked, and
letting the collector traverse the growing young generation costs about a
quarter of the decoding time, while nothing here can create a reference cycle.
The compiled loop also untracks its (frozen, acyclic) records from the GC.
Bounds are enforced
by construction: every record must end exactly where its length prefix says,
the batch exactly after its last record, and a read past the end of the
buffer surfaces as an ``IndexError`` translated at the batch boundary.
Record, header and varint lengths are validated against the bytes that
remain, so hostile input can neither make the decoder loop for long nor
allocate much more than the input (``max_decompressed_size`` caps blobs).

Decoding has two steps, which :func:`decode_batches_partial` runs back to back
and a consumer may run at different times: :func:`scan_batches` checks what the
headers prove (length, magic, CRC-32C, codec, count) and keeps the bytes as
:class:`RawBatch` views; :func:`decode_raw` decodes their records when wanted,
and can still fail with the same typed errors (bad contents, a codec error).

Nothing here touches a socket or a clock. Foreign exceptions raised while
decoding become :class:`~gengroup._errors.ProtocolError` or ``CorruptRecordError``.
"""

from __future__ import annotations

import enum
import gc
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, TypeAlias

from crc32c import crc32c

from .._errors import CorruptRecordError, ProtocolError
from .compression import Compression, compress, decompress

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "Compression",
    "ControlType",
    "Header",
    "NewRecord",
    "Record",
    "RecordBatch",
    "RecordInput",
    "TimestampType",
    "RawBatch",
    "decode_batches",
    "decode_batches_partial",
    "decode_raw",
    "encode_batch",
    "encode_control_batch",
    "scan_batches",
    "with_base_offset",
]


class TimestampType(enum.IntEnum):
    """The timestamp type of a batch (attribute bit 3)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(enum.IntEnum):
    """The type of a control record (the ``type`` field of its key).

    ``UNKNOWN``: any other type (KRaft's internal logs); consumers skip those batches.
    """

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1


DEFAULT_MAX_DECOMPRESSED_SIZE: Final = 64 * 1024 * 1024
"""Default cap, in bytes, on the decompressed records of one batch."""

Header: TypeAlias = tuple[str, bytes | None]

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE: Final = 61  # _HEADER.size
_LOG_PREFIX: Final = struct.Struct(">qi")  # baseOffset, batchLength
_LOG_OVERHEAD: Final = 12  # baseOffset + batchLength
_MIN_BATCH_LENGTH: Final = _HEADER_SIZE - _LOG_OVERHEAD
_CRC_START: Final = 21  # offset of `attributes` from the start of the batch
_TAIL_HEADER: Final = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_PREFIX: Final = struct.Struct(">qiibI")  # baseOffset .. crc
_CONTROL_KEY: Final = struct.Struct(">hh")
_CONTROL_VALUE: Final = struct.Struct(">hi")
_I64: Final = struct.Struct(">q")
# length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount
_MIN_RECORD_SIZE: Final = 7
_MAGIC: Final = 2
_MAX_CODEC: Final = max(Compression)

_ATTR_COMPRESSION: Final = 0x07
_ATTR_TIMESTAMP_TYPE: Final = 0x08
_ATTR_TRANSACTIONAL: Final = 0x10
_ATTR_CONTROL: Final = 0x20

_NO_HEADERS: Final[tuple[Header, ...]] = ()
# Zigzag decoding of every one- and two-byte varint payload (raw values below
# 2**14): one list lookup is measurably cheaper than the shift/xor/negate.
_ZIGZAG: Final[list[int]] = [(raw >> 1) ^ -(raw & 1) for raw in range(1 << 14)]

_INT16_MIN, _INT16_MAX = -(1 << 15), (1 << 15) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(slots=True, frozen=True)
class Record:
    """One decoded record (immutable: it is what the log holds).

    Attributes:
        offset: the record's absolute offset in its partition.
        timestamp: milliseconds since the epoch; for a log-append-time batch
            this is the batch's ``max_timestamp``, as Kafka specifies.
        key: the key, or ``None`` for a null key.
        value: the value, or ``None`` for a null value (a tombstone).
        headers: ``(key, value)`` pairs in wire order; values may be ``None``.
            Key bytes that are not UTF-8 read as U+FFFD, as in the Java consumer.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class _BatchHeader:
    """What the header of a batch tells, shared by :class:`RecordBatch` and :class:`RawBatch`."""

    __slots__ = ()
    base_offset: int
    attributes: int
    last_offset_delta: int

    @property
    def compression(self) -> Compression:
        """The codec the batch's records were compressed with."""
        return Compression(self.attributes & _ATTR_COMPRESSION)

    @property
    def timestamp_type(self) -> TimestampType:
        """Create time (0) or log-append time (1)."""
        if self.attributes & _ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        """Whether the batch was written inside a transaction."""
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        """Whether the batch holds a control record (a transaction marker)."""
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def last_offset(self) -> int:
        """The offset of the last record the batch was written with."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset to fetch after this batch."""
        return self.base_offset + self.last_offset_delta + 1


@dataclass(slots=True)
class RecordBatch(_BatchHeader):
    """One decoded record batch (magic 2).

    The fields mirror the wire header. Use :attr:`next_offset`, not the last
    record's offset, to advance a fetch position: compaction may have removed
    records at the end of a batch, and a batch may even be empty.
    """

    base_offset: int
    partition_leader_epoch: int
    magic: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]

    @property
    def control_type(self) -> ControlType | None:
        """The control record's type for a control batch, else ``None``.

        Returns:
            ``ControlType.ABORT`` or ``ControlType.COMMIT`` for transaction
            markers, ``ControlType.UNKNOWN`` for other control records, and
            ``None`` if the batch is not a control batch or has no records.
        """
        if not self.attributes & _ATTR_CONTROL or not self.records:
            return None
        key = self.records[0].key
        if key is None or len(key) < 4:
            return ControlType.UNKNOWN
        code = _CONTROL_KEY.unpack_from(key)[1]
        try:
            return ControlType(code)
        except ValueError:
            return ControlType.UNKNOWN


class NewRecord(NamedTuple):
    """A record to encode. Plain 4-tuples in the same order are accepted too.

    Attributes:
        key: the key, or ``None``.
        value: the value, or ``None``.
        headers: ``(key, value)`` pairs; keys are text, values may be ``None``.
        timestamp: milliseconds since the epoch.
    """

    key: bytes | None
    value: bytes | None
    headers: Sequence[Header]
    timestamp: int


RecordInput: TypeAlias = tuple[bytes | None, bytes | None, Sequence[Header], int]
"""``(key, value, headers, timestamp_ms)``; :class:`NewRecord` is one."""


@dataclass(slots=True)
class RawBatch(_BatchHeader):
    """A batch checked by :func:`scan_batches` whose records are still bytes.

    The header fields mean what :class:`RecordBatch`'s do.

    Attributes:
        buf: the bytes the batch lies in (shared by the batches of one scan).
        start: where the batch starts in ``buf``.
        end: where it ends.
    """

    buf: bytes
    start: int
    end: int
    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int

    def decode(self, max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> RecordBatch:
        """The batch with its records decoded (errors as :func:`decode_raw`'s)."""
        return _decoded(self, decode_raw((self,), max_decompressed_size=max_decompressed_size))


def _decoded(raw: RawBatch, records: list[Record]) -> RecordBatch:
    r = raw
    return RecordBatch(
        *(r.base_offset, r.partition_leader_epoch, _MAGIC, r.attributes, r.last_offset_delta),
        *(r.base_timestamp, r.max_timestamp, r.producer_id, r.producer_epoch, r.base_sequence),
        records,
    )


# --------------------------------------------------------------------------- decoding


def decode_batches(
    data: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[RecordBatch]:
    """Decode the concatenated record batches of a Fetch response.

    A truncated last batch (the broker stops at the fetch size limit) is
    dropped silently; use :func:`decode_batches_partial` to learn whether that
    happened.

    Args:
        data: the partition's ``records`` bytes.
        verify_crc: check each batch's CRC-32C.
        max_decompressed_size: cap, in bytes, on the decompressed records of
            one compressed batch; larger batches raise :class:`ProtocolError`.

    Returns:
        The complete batches, in order.

    Raises:
        CorruptRecordError: a complete batch failed its CRC or is inconsistent.
        ProtocolError: unsupported magic or codec, or hostile sizes.
    """
    return decode_batches_partial(
        data, verify_crc=verify_crc, max_decompressed_size=max_decompressed_size
    )[0]


def decode_batches_partial(
    data: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[list[RecordBatch], int]:
    """Decode complete record batches and report how many bytes they used.

    Args:
        data: concatenated record batches, possibly ending in a partial batch.
        verify_crc: check each batch's CRC-32C.
        max_decompressed_size: cap, in bytes, on the decompressed records of
            one compressed batch; larger batches raise :class:`ProtocolError`.

    Returns:
        ``(batches, consumed)``: the complete batches and the number of bytes
        they occupy. ``consumed < len(data)`` means the data ended with an
        incomplete batch, which was not decoded; if ``batches`` is empty as
        well, the first batch is larger than the data (a consumer must fetch
        with a bigger size limit to make progress).

    Raises:
        CorruptRecordError: a complete batch failed its CRC or is inconsistent.
        ProtocolError: unsupported magic or codec, or hostile sizes.
    """
    buf = data if type(data) is bytes else bytes(data)
    with _gc_paused():
        raws, consumed = scan_batches(buf, verify_crc=verify_crc)
        batches = [_decoded(raw, _records_of(raw, max_decompressed_size)) for raw in raws]
    return batches, consumed


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC (see the theory of operation), respecting a caller's gc.disable()."""
    if not gc.isenabled():  # the caller's gc.disable() stands
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def scan_batches(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> tuple[list[RawBatch], int]:
    """Check the headers of concatenated record batches without decoding their records.

    Per batch: the declared length, the magic, the CRC-32C (over the records
    too), the codec and the record count.

    Args:
        data: concatenated record batches, possibly ending in a partial batch.
        verify_crc: check each batch's CRC-32C.

    Returns:
        ``(batches, consumed)`` as :func:`decode_batches_partial`, undecoded.

    Raises:
        CorruptRecordError: a batch fails its CRC, length or count check.
        ProtocolError: unsupported magic or codec.
    """
    buf = data if type(data) is bytes else bytes(data)
    view = memoryview(buf)
    size = len(buf)
    unpack_prefix = _LOG_PREFIX.unpack_from
    unpack_header = _HEADER.unpack_from
    batches: list[RawBatch] = []
    pos = 0
    while size - pos >= _LOG_OVERHEAD:
        base_offset, batch_length = unpack_prefix(buf, pos)
        if batch_length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at byte {pos} declares length {batch_length} "
                f"(minimum is {_MIN_BATCH_LENGTH})"
            )
        end = pos + _LOG_OVERHEAD + batch_length
        if end > size:
            break  # a partial last batch: the broker stopped at its size limit
        header = unpack_header(buf, pos)
        magic, crc, count = header[3], header[4], header[12]
        if magic != _MAGIC:
            raise ProtocolError(
                f"record batch at offset {base_offset} has magic {magic}; only magic 2 is supported"
            )
        if verify_crc and crc32c(view[pos + _CRC_START : end]) != crc:
            raise CorruptRecordError(f"record batch at offset {base_offset} failed its CRC check")
        if count < 0:
            raise CorruptRecordError(
                f"record batch at offset {base_offset} declares {count} records"
            )
        codec = header[5] & _ATTR_COMPRESSION
        if codec > _MAX_CODEC:
            raise ProtocolError(
                f"record batch at offset {base_offset}: unsupported compression codec {codec}"
            )
        # baseOffset, partitionLeaderEpoch, then attributes .. recordsCount
        batches.append(RawBatch(buf, pos, end, base_offset, header[2], *header[5:]))
        pos = end
    return batches, pos


def decode_raw(
    batches: Iterable[RawBatch],
    *,
    min_offset: int | None = None,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """The records of scanned batches, in order, in one list.

    Args:
        batches: batches from :func:`scan_batches`.
        min_offset: drop the records below it (a position inside a batch).
        max_decompressed_size: cap, in bytes, on one batch's decompressed records.

    Raises:
        CorruptRecordError: inconsistent records, or they cannot be decompressed.
        ProtocolError: hostile sizes (``max_decompressed_size`` exceeded).
    """
    out: list[Record] = []
    with _gc_paused():
        for raw in batches:
            records = _records_of(raw, max_decompressed_size)
            if min_offset is not None and raw.base_offset < min_offset:
                records = [r for r in records if r.offset >= min_offset]
            if out:
                out += records
            else:
                out = records
    return out


@contextmanager
def batch_errors(base_offset: int) -> Iterator[None]:
    """Name the batch in a decoding error; foreign ones become CorruptRecordError."""
    try:
        yield
    except ProtocolError as exc:
        raise type(exc)(f"record batch at offset {base_offset}: {exc}") from exc
    except (IndexError, ValueError, OverflowError) as exc:
        raise CorruptRecordError(f"batch at offset {base_offset} is inconsistent: {exc!r}") from exc


def _records_of(raw: RawBatch, max_decompressed_size: int) -> list[Record]:
    """Decode the records of one scanned batch (the GC is paused by the caller)."""
    buf, pos, end, base_offset = raw.buf, raw.start, raw.end, raw.base_offset
    attributes, count, stamp = raw.attributes, raw.count, raw.base_timestamp
    codec = attributes & _ATTR_COMPRESSION
    with batch_errors(base_offset):
        if count == 0 and end == pos + _HEADER_SIZE:
            records = []  # an empty batch (e.g. kept by compaction), any codec
        else:  # the bytes an error names count from the batch's (or its records') start
            blob: Any = memoryview(buf)[pos:end]
            first = _HEADER_SIZE
            if codec:
                blob, first = decompress(codec, blob[first:], max_decompressed_size), 0
            if _decode_records is _decode_records_py:  # it slices values: they must be bytes
                blob = bytes(blob)  # (the compiled loop reads any buffer)
            records = _decode_records(blob, first, len(blob), count, base_offset, stamp)
    if attributes & _ATTR_TIMESTAMP_TYPE:
        max_timestamp = raw.max_timestamp
        for record in records:
            object.__setattr__(record, "timestamp", max_timestamp)  # frozen, being built
    if attributes & _ATTR_CONTROL:
        for record in records:
            key = record.key
            if key is None or len(key) < 4:
                raise CorruptRecordError(
                    f"control batch at offset {base_offset} has a record "
                    "without a valid control key"
                )
    return records


def _varint_slow(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Read an unsigned LEB128 varint of at most ``max_bytes`` bytes.

    Returns the raw (not yet zigzag-decoded) value and the new position.
    ``max_bytes`` is 5 for a varint (32 bits) and 10 for a varlong (64 bits).
    """
    result = 0
    shift = 0
    for i in range(pos, pos + max_bytes):
        b = buf[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >> (32 if max_bytes == 5 else 64):
                raise CorruptRecordError(f"varint at byte {pos} overflows")
            return result, i + 1
        shift += 7
    raise CorruptRecordError(f"varint at byte {pos} is longer than {max_bytes} bytes")


def _decode_records_py(
    buf: bytes, pos: int, end: int, count: int, base_offset: int, base_timestamp: int
) -> list[Record]:
    """Decode ``count`` records from ``buf[pos:end]``, which they must fill exactly."""
    if count > (end - pos) // _MIN_RECORD_SIZE:
        raise CorruptRecordError(f"{count} records cannot fit in {end - pos} bytes")
    # Filled by index: cheaper than append, and count is bounded above.
    records: list[Record] = [None] * count  # type: ignore[list-item]
    new_record = Record
    slow = _varint_slow
    zigzag = _ZIGZAG
    no_headers = _NO_HEADERS
    # Each varint below is read raw (unsigned); zigzag decoding is applied only
    # where the sign matters. Lengths are odd exactly when negative, and raw 1
    # is -1 (null). The varint blocks repeat on purpose (the key's and the
    # value's are the same code): a helper call per field would cost more
    # than any other step of the loop.
    for i in range(count):
        # length: varint
        b = buf[pos]
        if b < 0x80:
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                b = (b & 0x7F) | (c << 7)
                pos += 2
            else:
                b, pos = slow(buf, pos, 5)
        if b & 1:
            raise CorruptRecordError(f"negative record length at byte {pos}")
        record_end = pos + (b >> 1)
        # attributes: int8 (unused in v2), timestampDelta: varlong
        b = buf[pos + 1]
        if b < 0x80:
            timestamp = base_timestamp + zigzag[b]
            pos += 2
        else:
            c = buf[pos + 2]
            if c < 0x80:
                timestamp = base_timestamp + zigzag[(b & 0x7F) | (c << 7)]
                pos += 3
            else:
                b, pos = slow(buf, pos + 1, 10)
                timestamp = base_timestamp + ((b >> 1) ^ -(b & 1))
        # offsetDelta: varint
        b = buf[pos]
        if b < 0x80:
            offset = base_offset + zigzag[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                offset = base_offset + zigzag[(b & 0x7F) | (c << 7)]
                pos += 2
            else:
                b, pos = slow(buf, pos, 5)
                offset = base_offset + ((b >> 1) ^ -(b & 1))
        # keyLength: varint, key
        b = buf[pos]
        if b < 0x80:
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                b = (b & 0x7F) | (c << 7)
                pos += 2
            else:
                b, pos = slow(buf, pos, 5)
        if b & 1:
            if b != 1:
                raise CorruptRecordError(f"negative key length at byte {pos}")
            key = None
        else:
            b = pos + (b >> 1)
            key = buf[pos:b]
            pos = b
        # valueLength: varint, value
        b = buf[pos]
        if b < 0x80:
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                b = (b & 0x7F) | (c << 7)
                pos += 2
            else:
                b, pos = slow(buf, pos, 5)
        if b & 1:
            if b != 1:
                raise CorruptRecordError(f"negative value length at byte {pos}")
            value = None
        else:
            b = pos + (b >> 1)
            value = buf[pos:b]
            pos = b
        # headerCount: varint, headers
        if buf[pos] == 0:
            pos += 1
            headers = no_headers
        else:
            headers, pos = _decode_headers(buf, pos, record_end)
        if pos != record_end:
            raise CorruptRecordError(
                f"record at offset {offset} ends at byte {pos}, its length says {record_end}"
            )
        records[i] = new_record(offset, timestamp, key, value, headers)
    if pos != end:
        raise CorruptRecordError(f"records end at byte {pos}, the batch ends at byte {end}")
    return records


def _decode_headers(buf: bytes, pos: int, record_end: int) -> tuple[tuple[Header, ...], int]:
    """Decode a record's header count and headers, which must fit before ``record_end``."""
    raw, pos = _varint_slow(buf, pos, 5)
    if raw & 1:
        raise CorruptRecordError(f"negative header count at byte {pos}")
    count = raw >> 1
    if count > (record_end - pos) // 2:
        raise CorruptRecordError(f"{count} headers cannot fit in {record_end - pos} bytes")
    headers: list[Header] = []
    for _ in range(count):
        raw, pos = _varint_slow(buf, pos, 5)
        if raw & 1:
            raise CorruptRecordError(f"null or negative header key length at byte {pos}")
        stop = pos + (raw >> 1)
        if stop > record_end:
            raise CorruptRecordError(f"header key at byte {pos} overruns its record")
        name = buf[pos:stop].decode("utf-8", "replace")  # as Java: Kafka does not check names
        pos = stop
        raw, pos = _varint_slow(buf, pos, 5)
        value: bytes | None
        if raw & 1:
            if raw != 1:
                raise CorruptRecordError(f"negative header value length at byte {pos}")
            value = None
        else:
            stop = pos + (raw >> 1)
            if stop > record_end:
                raise CorruptRecordError(f"header value at byte {pos} overruns its record")
            value = buf[pos:stop]
            pos = stop
        headers.append((name, value))
    return tuple(headers), pos


_decode_records: Callable[[Any, int, int, int, int, int], list[Record]] = _decode_records_py
if not os.environ.get("GENGROUP_PURE_PYTHON"):
    with suppress(ImportError):  # not built (no compiler): the loop above
        from ._speedups import configure, decode_records as _decode_records

        configure(Record, CorruptRecordError)


# --------------------------------------------------------------------------- encoding


def _put_varint(out: bytearray, value: int) -> None:
    """Append ``value`` (a signed 64-bit integer) as a zigzag varint."""
    z = (value << 1) ^ (value >> 63)
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _put_bytes(out: bytearray, data: bytes | None, what: str) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
        return
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{what} must be bytes or None, not {type(data).__name__}")
    _put_varint(out, len(data))
    out += data


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is outside [{low}, {high}]")


def encode_batch(
    records: Iterable[RecordInput],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = TimestampType.CREATE_TIME,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode records as one RecordBatch v2 with a correct CRC-32C.

    Records get consecutive offsets starting at ``base_offset``. The first
    record's timestamp is the batch's base timestamp.

    Args:
        records: ``(key, value, headers, timestamp_ms)`` tuples or
            :class:`NewRecord` instances.
        base_offset: offset of the first record (not covered by the CRC; a
            broker assigns it on append, see :func:`with_base_offset`).
        compression: codec for the records blob; snappy is written raw.
        producer_id: idempotent/transactional producer id, -1 if none.
        producer_epoch: producer epoch, -1 if none.
        base_sequence: sequence number of the first record, -1 if none.
        transactional: set the transactional attribute bit.
        control: set the control attribute bit (see :func:`encode_control_batch`).
        partition_leader_epoch: leader epoch stamped by the broker, -1 if none.
        timestamp_type: 0 (create time) or 1 (log-append time).
        max_timestamp: the batch's max timestamp; defaults to the largest
            record timestamp. A broker using log-append time sets it to the
            append time, which readers then report for every record.
        last_offset_delta: defaults to ``len(records) - 1``; may be larger to
            model a batch whose tail was removed by compaction, and must be
            given for an empty batch.

    Returns:
        The encoded batch.

    Raises:
        ValueError: a field is out of range or the batch is empty without a
            ``last_offset_delta``.
        TypeError: a key, value or header has the wrong type.
    """
    items = list(records)
    codec = Compression(compression)
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type!r}")
    if items:
        base_timestamp = items[0][3]
        largest = max(item[3] for item in items)
    else:
        base_timestamp = largest = -1
    if last_offset_delta is None:
        if not items:
            raise ValueError("an empty batch needs an explicit last_offset_delta")
        last_offset_delta = len(items) - 1
    elif last_offset_delta < len(items) - 1:
        raise ValueError(f"last_offset_delta={last_offset_delta} is less than len(records) - 1")
    if max_timestamp is None:
        max_timestamp = largest
    _check_range("base_offset", base_offset, _INT64_MIN, _INT64_MAX)
    _check_range("last_offset_delta", last_offset_delta, _INT32_MIN, _INT32_MAX)
    _check_range("max_timestamp", max_timestamp, _INT64_MIN, _INT64_MAX)
    _check_range("producer_id", producer_id, _INT64_MIN, _INT64_MAX)
    _check_range("producer_epoch", producer_epoch, _INT16_MIN, _INT16_MAX)
    _check_range("base_sequence", base_sequence, _INT32_MIN, _INT32_MAX)
    _check_range("partition_leader_epoch", partition_leader_epoch, _INT32_MIN, _INT32_MAX)
    _check_range("len(records)", len(items), 0, _INT32_MAX)

    body = bytearray()
    record = bytearray()
    for delta, (key, value, headers, timestamp) in enumerate(items):
        _check_range("timestamp", timestamp, _INT64_MIN, _INT64_MAX)
        _check_range("timestamp delta", timestamp - base_timestamp, _INT64_MIN, _INT64_MAX)
        record.clear()
        record.append(0)  # record attributes: unused
        _put_varint(record, timestamp - base_timestamp)
        _put_varint(record, delta)
        _put_bytes(record, key, "key")
        _put_bytes(record, value, "value")
        _put_varint(record, len(headers))
        for name, header_value in headers:
            if not isinstance(name, str):
                raise TypeError(f"header key must be str, not {type(name).__name__}")
            encoded = name.encode("utf-8")
            _put_varint(record, len(encoded))
            record += encoded
            _put_bytes(record, header_value, "header value")
        _put_varint(body, len(record))
        body += record

    payload = bytes(body) if codec == Compression.NONE else compress(codec, bytes(body))
    attributes = (
        codec
        | (_ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
        | (_ATTR_TRANSACTIONAL if transactional else 0)
        | (_ATTR_CONTROL if control else 0)
    )
    tail = (
        _TAIL_HEADER.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(items),
        )
        + payload
    )
    batch_length = len(tail) + (_CRC_START - _LOG_OVERHEAD)
    _check_range("batch length", batch_length, 0, _INT32_MAX)
    prefix = _PREFIX.pack(base_offset, batch_length, partition_leader_epoch, _MAGIC, crc32c(tail))
    return prefix + tail


def encode_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode a transaction marker: a control batch holding one control record.

    Args:
        control_type: ``ControlType.COMMIT`` or ``ControlType.ABORT``.
        producer_id: the transactional producer's id.
        producer_epoch: the transactional producer's epoch.
        timestamp: the marker's timestamp in milliseconds.
        base_offset: the marker's offset.
        coordinator_epoch: the transaction coordinator's epoch (record value).
        partition_leader_epoch: leader epoch stamped by the broker, -1 if none.

    Returns:
        The encoded control batch.

    Raises:
        ValueError: ``control_type`` is not COMMIT or ABORT, or a field is out
            of range.
    """
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise ValueError(f"control_type must be ABORT or COMMIT, not {control_type!r}")
    _check_range("coordinator_epoch", coordinator_epoch, _INT32_MIN, _INT32_MAX)
    key = _CONTROL_KEY.pack(0, control_type)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch(
        [(key, value, (), timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def with_base_offset(batch: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """Return a copy of an encoded batch with its base offset replaced.

    The base offset is outside the CRC, so this is what a broker does when it
    appends a produced batch to a log.

    Args:
        batch: one encoded batch (only its first 8 bytes are changed).
        base_offset: the new base offset.

    Returns:
        The patched batch.

    Raises:
        ValueError: ``batch`` is too short to be a batch, or the offset is out
            of range.
    """
    if len(batch) < _HEADER_SIZE:
        raise ValueError("not a record batch: shorter than the batch header")
    _check_range("base_offset", base_offset, _INT64_MIN, _INT64_MAX)
    return _I64.pack(base_offset) + bytes(memoryview(batch)[8:])
