"""Many fetched batches as one Arrow table, for processing in bulk.

Each :class:`~gengroup.FetchedBatch` becomes columns through
:meth:`~gengroup.FetchedBatch.to_arrow` (compiled, without a Python object per
record, when the extension is built); this module only stacks those tables
and prefixes the two columns that tell the batches apart, ``topic`` and
``partition``. The rows keep the order of the batches given, and each batch's
records keep their offset order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..protocol.arrow import arrow_schema, require_pyarrow
from .fetched import FetchedBatch

__all__ = ["fetched_schema", "fetched_to_arrow"]


def fetched_schema() -> Any:
    """The schema of :func:`fetched_to_arrow`'s tables (``pyarrow.Schema``).

    ``topic`` (string) and ``partition`` (int32), then the columns of
    :func:`gengroup.protocol.arrow.arrow_schema`: ``offset``, ``timestamp``,
    ``key``, ``value``, ``headers``.

    Raises:
        MissingDependency: pyarrow is not installed.
    """
    pa = require_pyarrow()
    return pa.schema([("topic", pa.string()), ("partition", pa.int32()), *arrow_schema()])


def fetched_to_arrow(batches: Iterable[FetchedBatch]) -> Any:
    """The records of fetched batches, of any partitions, as one ``pyarrow.Table``.

    Example::

        async for batch in gen.fetch(tp):
            pending.append(batch)
            if sum(len(b) for b in pending) >= 100_000:
                table = fetched_to_arrow(pending)   # one table, one chunk per batch
                ...
                gen.mark(tp, pending[-1].next_offset)
                pending.clear()

    Args:
        batches: batches as ``gen.fetch(tp)`` hands them out.

    Returns:
        The table (schema: :func:`fetched_schema`); one chunk per batch.

    Raises:
        MissingDependency: pyarrow is not installed (the ``arrow`` extra).
        CorruptRecordError: as :meth:`FetchedBatch.to_arrow`.
        ProtocolError: as :meth:`FetchedBatch.to_arrow`.
    """
    pa = require_pyarrow()
    schema = fetched_schema()
    topic_type, partition_type = schema.field(0).type, schema.field(1).type
    tables = []
    for batch in batches:
        table = batch.to_arrow()
        n = table.num_rows
        table = table.add_column(
            0, schema.field(1), pa.repeat(pa.scalar(batch.partition, partition_type), n)
        )
        table = table.add_column(
            0, schema.field(0), pa.repeat(pa.scalar(batch.topic, topic_type), n)
        )
        tables.append(table)
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)
