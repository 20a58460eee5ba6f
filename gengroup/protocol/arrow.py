"""Record batches decoded straight into Apache Arrow columns, sans-IO.

Theory of operation:

:func:`batches_to_arrow` turns batches kept by
:func:`~gengroup.protocol.records.scan_batches` into one ``pyarrow.Table`` of
the fixed schema :func:`arrow_schema` returns. It yields exactly the records
:func:`~gengroup.protocol.records.decode_raw` yields for the same arguments
(same order, same trimming below ``min_offset``, same log-append timestamps,
same typed errors), one row per record.

Two implementations give identical tables. The compiled one
(``arrow_columns`` in :mod:`gengroup.protocol._speedups`) walks the
decompressed batch bodies once and writes the column buffers directly --
int64 offsets and timestamps, int32 offsets plus one data buffer plus a
validity bitmap per variable-size column -- and Python wraps those bytes
objects zero-copy with ``pyarrow.Array.from_buffers``. No Python object is
made per record. The pure-Python one decodes :class:`Record` objects with the
record loop and builds the columns with ``pyarrow.array``; it is used when the
extension is not built or ``GENGROUP_PURE_PYTHON`` is set, and is the
reference the compiled one is tested against.

One rule is the columns' own: an offset or timestamp outside int64 (which
the record loop keeps as a Python int) cannot be stored and raises
:class:`~gengroup._errors.CorruptRecordError` in both implementations.

The batches of one call become one Arrow chunk per 8 MiB or so of record
bodies: the bodies of a chunk are decompressed just before its columns are
filled, and int32 offsets address at most 2 GiB per column. A consumer's
fetched batch is one chunk (two if the fetch trimmed its first batch).

pyarrow is an optional dependency (the ``arrow`` or ``lake`` extra); without
it every function here raises :class:`~gengroup._errors.MissingDependency`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from operator import attrgetter
from typing import Any, Final

from .._errors import CorruptRecordError, MissingDependency, ProtocolError
from .compression import decompress
from .records import (
    _ATTR_COMPRESSION,
    _ATTR_TIMESTAMP_TYPE as _ATTR_LOG_APPEND_TIME,
    _HEADER_SIZE,
    _INT64_MAX,
    _INT64_MIN,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    RawBatch,
    Record,
    batch_errors,
    decode_raw,
)

__all__ = ["arrow_schema", "batches_to_arrow", "records_to_arrow", "require_pyarrow"]

_offset_of: Final = attrgetter("offset")
_timestamp_of: Final = attrgetter("timestamp")
# Batch bodies (decompressed, for the compiled path) per Arrow chunk: small
# enough for the decompressed bodies and the columns being filled to stay in
# the CPU caches' reach, large enough that wrapping a chunk costs nothing.
_CHUNK_BYTES: Final = 8 << 20

Segment = tuple[bytes | bytearray | memoryview, int, int, int, int, int, int, int, int]

_pyarrow: Any = None  # imported on first use: importing gengroup must stay cheap
_arrow_columns: Callable[[Sequence[Segment]], tuple[Any, ...]] | None = None
if not os.environ.get("GENGROUP_PURE_PYTHON"):
    with suppress(ImportError):  # not built (no compiler): the pure-Python path
        # (configured with the error type by records, imported above)
        from ._speedups import arrow_columns as _arrow_columns


def require_pyarrow() -> Any:
    """The ``pyarrow`` module.

    Raises:
        MissingDependency: pyarrow is not installed; the message names the
            extra that installs it.
    """
    global _pyarrow
    if _pyarrow is None:
        try:
            import pyarrow
        except ImportError as exc:
            raise MissingDependency(
                "Arrow output needs pyarrow: pip install 'gengroup[arrow]' (or 'gengroup[lake]')"
            ) from exc
        _pyarrow = pyarrow
    return _pyarrow


def arrow_schema() -> Any:
    """The schema of every table this module returns (``pyarrow.Schema``).

    ============  ==============================================  ==========================
    column        type                                            meaning
    ============  ==============================================  ==========================
    offset        int64                                           ``Record.offset``
    timestamp     timestamp[ms, tz=UTC]                           ``Record.timestamp``
    key           binary (null for a null key)                    ``Record.key``
    value         binary (null for a null value)                  ``Record.value``
    headers       list<struct<key: string, value: binary>>        ``Record.headers``
    ============  ==============================================  ==========================

    ``offset``, ``timestamp`` and ``headers`` are never null (a record
    without headers has an empty list); a header's ``value`` may be null.
    These are the record columns of the lake's Parquet schema.

    Raises:
        MissingDependency: pyarrow is not installed.
    """
    return _schema(require_pyarrow())


def _schema(pa: Any) -> Any:
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema(
        [
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("ms", tz="UTC")),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", pa.list_(header)),
        ]
    )


def batches_to_arrow(
    batches: Iterable[RawBatch],
    *,
    min_offset: int | None = None,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Any:
    """The records of scanned batches as one ``pyarrow.Table`` (schema: :func:`arrow_schema`).

    The rows are the records :func:`~gengroup.protocol.records.decode_raw`
    returns for the same arguments, in the same order.

    Args:
        batches: batches from :func:`~gengroup.protocol.records.scan_batches`
            (a consumer's :class:`~gengroup.FetchedBatch` keeps them with
            control and aborted batches already removed).
        min_offset: drop the records below it (a position inside a batch).
        max_decompressed_size: cap, in bytes, on one batch's decompressed records.

    Returns:
        The table; empty (with the schema) when there are no records.

    Raises:
        CorruptRecordError: inconsistent records, they cannot be
            decompressed, or an offset or timestamp does not fit in int64.
        ProtocolError: hostile sizes (``max_decompressed_size`` exceeded).
        MissingDependency: pyarrow is not installed.
        ValueError: ``min_offset`` is outside int64.
    """
    pa = require_pyarrow()
    schema = _schema(pa)
    if min_offset is not None and not _INT64_MIN <= min_offset <= _INT64_MAX:
        raise ValueError(f"min_offset={min_offset} is outside int64")
    if _arrow_columns is None:
        chunks = _chunks_py(pa, schema, batches, min_offset, max_decompressed_size)
    else:
        chunks = _chunks_c(pa, schema, batches, min_offset, max_decompressed_size)
    return pa.Table.from_batches(chunks, schema=schema)


def records_to_arrow(records: Sequence[Record]) -> Any:
    """Decoded records as a ``pyarrow.Table`` (schema: :func:`arrow_schema`).

    Args:
        records: records as :func:`~gengroup.protocol.records.decode_raw`
            returns them.

    Returns:
        The table, one row per record, in order.

    Raises:
        CorruptRecordError: an offset or timestamp does not fit in int64.
        MissingDependency: pyarrow is not installed.
    """
    pa = require_pyarrow()
    schema = _schema(pa)
    return pa.Table.from_batches([_record_batch_py(pa, schema, records)], schema=schema)


def _chunks_py(
    pa: Any,
    schema: Any,
    batches: Iterable[RawBatch],
    min_offset: int | None,
    max_decompressed_size: int,
) -> list[Any]:
    """The pure-Python chunks: Records from the record loop, columns from them."""
    chunks = []
    records: list[Record] = []
    size = 0
    for raw in batches:
        decoded = decode_raw((raw,), max_decompressed_size=max_decompressed_size)
        # Checked batch by batch, trimmed records too, as the compiled filler does.
        if decoded and not _fits_int64(raw, decoded):
            _check_int64(decoded, raw.base_offset)
        if min_offset is not None and raw.base_offset < min_offset:
            decoded = [r for r in decoded if r.offset >= min_offset]
        records += decoded
        size += raw.end - raw.start
        if size >= _CHUNK_BYTES:
            chunks.append(_record_batch_py(pa, schema, records))
            records, size = [], 0
    if records or not chunks:
        chunks.append(_record_batch_py(pa, schema, records))
    return chunks


def _fits_int64(raw: RawBatch, decoded: list[Record]) -> bool:
    """Whether every offset and timestamp of a batch is an int64 (cheap where it must be)."""
    # An offset is the base plus an int32 delta.
    if not _INT64_MIN + (1 << 31) <= raw.base_offset < _INT64_MAX - (1 << 31):
        offsets: list[int] = list(map(_offset_of, decoded))
        if min(offsets) < _INT64_MIN or max(offsets) > _INT64_MAX:
            return False
    if raw.attributes & _ATTR_LOG_APPEND_TIME:
        return True  # every timestamp is the batch's max_timestamp
    timestamps: list[int] = list(map(_timestamp_of, decoded))
    return min(timestamps) >= _INT64_MIN and max(timestamps) <= _INT64_MAX


def _check_int64(records: Sequence[Record], base_offset: int | None = None) -> None:
    where = "" if base_offset is None else f"record batch at offset {base_offset}: "
    for record in records:
        if not _INT64_MIN <= record.offset <= _INT64_MAX:
            raise CorruptRecordError(f"{where}record offset {record.offset} is outside int64")
        if not _INT64_MIN <= record.timestamp <= _INT64_MAX:
            raise CorruptRecordError(
                f"{where}record timestamp {record.timestamp} at offset {record.offset} "
                "is outside int64"
            )


def _record_batch_py(pa: Any, schema: Any, records: Sequence[Record]) -> Any:
    offsets = [r.offset for r in records]
    timestamps = [r.timestamp for r in records]
    for column in (offsets, timestamps):
        if column and (min(column) < _INT64_MIN or max(column) > _INT64_MAX):
            _check_int64(records)  # raises, naming the record
    return pa.RecordBatch.from_arrays(
        [
            pa.array(offsets, schema.field(0).type),
            pa.array(timestamps, schema.field(1).type),
            pa.array([r.key for r in records], schema.field(2).type),
            pa.array([r.value for r in records], schema.field(3).type),
            pa.array([r.headers for r in records], schema.field(4).type),
        ],
        schema=schema,
    )


def _segment(raw: RawBatch, min_offset: int | None, max_decompressed_size: int) -> Segment | None:
    """What ``arrow_columns`` needs of one batch (decompressed), or None if it is empty.

    Mirrors ``records._records_of``: the same empty-batch rule and the same
    translation of codec errors.
    """
    pos, end, base_offset, count = raw.start, raw.end, raw.base_offset, raw.count
    codec = raw.attributes & _ATTR_COMPRESSION
    if count == 0 and end == pos + _HEADER_SIZE:
        return None
    # The batch alone: the bytes an error names count from its (or its records') start.
    buf: Any = memoryview(raw.buf)[pos:end]
    pos, end = _HEADER_SIZE, end - pos
    if codec:
        with batch_errors(base_offset):
            buf = decompress(codec, buf[pos:], max_decompressed_size)
        pos, end = 0, len(buf)
    trim = min_offset if min_offset is not None and base_offset < min_offset else _INT64_MIN
    return (
        buf,
        pos,
        end,
        count,
        base_offset,
        raw.base_timestamp,
        raw.attributes,
        raw.max_timestamp,
        trim,
    )


def _chunks_c(
    pa: Any,
    schema: Any,
    batches: Iterable[RawBatch],
    min_offset: int | None,
    max_decompressed_size: int,
) -> list[Any]:
    """The compiled chunks: one ``arrow_columns`` call per ``_CHUNK_BYTES`` of bodies."""
    assert _arrow_columns is not None
    chunks = []
    segments: list[Segment] = []
    size = 0
    for raw in batches:
        try:
            segment = _segment(raw, min_offset, max_decompressed_size)
        except ProtocolError:
            # Report what the record loop would: a bad record in an earlier
            # batch is found before this batch's codec error.
            _arrow_columns(segments)
            raise
        if segment is None:
            continue
        segments.append(segment)
        size += segment[2] - segment[1]
        if size >= _CHUNK_BYTES:
            chunks.append(_wrap(pa, schema, _arrow_columns(segments)))
            segments, size = [], 0
    if segments or not chunks:
        chunks.append(_wrap(pa, schema, _arrow_columns(segments)))
    return chunks


def _wrap(pa: Any, schema: Any, columns: tuple[Any, ...]) -> Any:
    """A ``pyarrow.RecordBatch`` over the buffers ``arrow_columns`` returned (no copy)."""
    (
        rows,
        offsets,
        timestamps,
        key_valid,
        key_nulls,
        key_offsets,
        key_data,
        value_valid,
        value_nulls,
        value_offsets,
        value_data,
        header_offsets,
        headers,
        name_valid,
        name_nulls,
        name_offsets,
        name_data,
        hv_valid,
        hv_nulls,
        hv_offsets,
        hv_data,
    ) = columns
    buffer = pa.py_buffer
    from_buffers = pa.Array.from_buffers
    header_type = schema.field(4).type
    struct_type = header_type.value_type

    def binary(kind: Any, n: int, valid: Any, nulls: int, offs: bytes, data: bytes) -> Any:
        bitmap = None if valid is None else buffer(valid)
        return from_buffers(kind, n, [bitmap, buffer(offs), buffer(data)], null_count=nulls)

    del name_valid, name_nulls  # header keys are never null
    names = binary(pa.string(), headers, None, 0, name_offsets, name_data)
    values = binary(pa.binary(), headers, hv_valid, hv_nulls, hv_offsets, hv_data)
    pairs = from_buffers(struct_type, headers, [None], null_count=0, children=[names, values])
    return pa.RecordBatch.from_arrays(
        [
            from_buffers(schema.field(0).type, rows, [None, buffer(offsets)], null_count=0),
            from_buffers(schema.field(1).type, rows, [None, buffer(timestamps)], null_count=0),
            binary(pa.binary(), rows, key_valid, key_nulls, key_offsets, key_data),
            binary(pa.binary(), rows, value_valid, value_nulls, value_offsets, value_data),
            from_buffers(
                header_type, rows, [None, buffer(header_offsets)], null_count=0, children=[pairs]
            ),
        ],
        schema=schema,
    )
