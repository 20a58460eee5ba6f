"""The low-level Fetch: build the request, read the response, skip what a consumer must not see.

Theory of operation:

:func:`build_fetch_request` makes a *full* (sessionless) Fetch for a set of
partition positions: ``session_id=0`` and ``session_epoch=-1`` ask the broker
not to create a fetch session, so every request names every partition and the
response answers for each of them. That costs a few bytes per partition and
removes a whole class of session-state bugs.

:func:`parse_fetch_response` is sans-IO. Per partition it turns the error code
into a typed exception (left on the result, not raised, so one bad partition
does not hide the others), decodes the record batches with
:mod:`gengroup.protocol.records`, and filters them the way the Java consumer
does:

* control batches (transaction markers) are never returned;
* under ``read_committed``, batches of aborted transactions are dropped. The
  response lists each aborted transaction as ``(producer_id, first_offset)``.
  Walking the batches in order, before looking at a batch every aborted
  transaction whose ``first_offset`` is at or below the batch's last offset
  is *opened* (its producer id becomes "aborted"); a transactional batch of an
  aborted producer id is skipped; the ABORT control marker of that producer
  *closes* it again, so later batches of the same producer (a new
  transaction) are kept. This is Kafka's ``CompletedFetch`` algorithm;
* records below the requested offset (a compressed batch is returned whole
  even when the position is in its middle) are trimmed, and batches left empty
  are dropped.

``next_offset`` always moves past everything that was looked at, skipped
batches included, so a consumer never refetches a control or aborted batch.
A last batch cut short by the broker's size limit is not decoded; if nothing
complete came, ``truncated`` tells the caller to fetch with a larger
``partition_max_bytes``.

:func:`fetch_once` sends one request to one broker; :func:`read_partition`
is a convenience for tests and tools that reads a range of offsets,
following leadership changes by refreshing metadata.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

import anyio

from .._errors import (
    GengroupError,
    KafkaConnectionError,
    ProtocolError,
    RetriableBrokerError,
    StaleMetadataError,
    error_for_code,
)
from .._types import TopicPartition
from ..protocol.framing import build, request_module
from ..protocol.records import ControlType, Record, RecordBatch, decode_batches_partial
from ..protocol.versions import ApiKey
from .cluster import Cluster, ms

__all__ = [
    "IsolationLevelArg",
    "PartitionFetch",
    "build_fetch_request",
    "fetch_once",
    "isolation_code",
    "parse_fetch_response",
    "read_partition",
]

#: ``"read_uncommitted"`` / ``"read_committed"``, or Kafka's codes 0 / 1.
IsolationLevelArg = Literal["read_uncommitted", "read_committed", 0, 1]

READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
_INT32_MAX: Final = (1 << 31) - 1


def isolation_code(level: IsolationLevelArg | int) -> int:
    """Kafka's isolation-level code (0 or 1) for a level name or code.

    Raises:
        ValueError: anything else.
    """
    if level in ("read_uncommitted", READ_UNCOMMITTED):
        return READ_UNCOMMITTED
    if level in ("read_committed", READ_COMMITTED):
        return READ_COMMITTED
    raise ValueError(f"isolation level must be 'read_committed' or 'read_uncommitted': {level!r}")


@dataclass(slots=True)
class PartitionFetch:
    """One partition's part of a Fetch response, filtered for a consumer.

    Attributes:
        error: the partition's error as a typed exception, or None.
        high_watermark: the partition's high watermark (-1 if unknown).
        last_stable_offset: the last stable offset (-1 if unknown).
        log_start_offset: the log start offset (-1 if unknown).
        batches: the data batches to hand out, in offset order (no control
            batches, no aborted batches under read_committed, no records
            below the requested offset, no empty batches).
        next_offset: the offset to fetch next: past the last complete batch
            received (skipped ones included), or the requested offset if
            nothing complete came (-1 if the requested offset is unknown).
        truncated: the data ended with an incomplete batch.
        size: bytes of record data the broker sent for the partition (what a
            consumer's buffer accounting charges for it).
    """

    error: GengroupError | None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    batches: list[RecordBatch] = field(default_factory=list)
    next_offset: int = -1
    truncated: bool = False
    size: int = 0

    @property
    def records(self) -> list[Record]:
        """Every record of :attr:`batches`, in offset order."""
        return [r for b in self.batches for r in b.records]


def build_fetch_request(
    version: int,
    positions: Mapping[TopicPartition, int],
    *,
    max_wait: float,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int,
    isolation_level: IsolationLevelArg | int,
    leader_epochs: Mapping[TopicPartition, int] | None = None,
) -> Any:
    """Build a full, sessionless Fetch request.

    Args:
        version: the Fetch version (one of gengroup's supported range).
        positions: the offset to fetch from, per partition.
        max_wait: seconds the broker may wait for ``min_bytes``.
        min_bytes: bytes to accumulate before answering.
        max_bytes: response size limit (the first batch is returned even if larger).
        partition_max_bytes: size limit per partition.
        isolation_level: ``"read_uncommitted"`` / ``"read_committed"`` (or 0 / 1).
        leader_epochs: the current leader epoch per partition, if the caller
            wants the broker to fence stale leaders (default: -1, no check).

    Returns:
        A kio ``FetchRequest`` of that version.
    """
    mod = request_module(ApiKey.FETCH, version)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    epochs = leader_epochs or {}
    for tp, offset in positions.items():
        by_topic[tp.topic].append(
            build(
                mod.FetchPartition,
                partition=tp.partition,
                current_leader_epoch=epochs.get(tp, -1),
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=min(partition_max_bytes, _INT32_MAX),
            )
        )
    return build(
        mod.FetchRequest,
        replica_id=-1,
        max_wait=ms(max_wait),
        min_bytes=min_bytes,
        max_bytes=min(max_bytes, _INT32_MAX),
        isolation_level=isolation_code(isolation_level),
        session_id=0,
        session_epoch=-1,
        topics=tuple(
            build(mod.FetchTopic, topic=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def _is_abort_marker(batch: RecordBatch) -> bool:
    return batch.is_control and batch.control_type is ControlType.ABORT


def _filter_batches(
    batches: list[RecordBatch],
    aborted: Any,
    read_committed: bool,
    start: int | None,
) -> list[RecordBatch]:
    """Drop control batches, aborted batches (read_committed) and records below ``start``."""
    pending: list[tuple[int, int]] = []
    if read_committed and aborted:
        pending = [(int(a.first_offset), int(a.producer_id)) for a in aborted]
        heapq.heapify(pending)
    aborted_pids: set[int] = set()
    out: list[RecordBatch] = []
    for batch in batches:
        if read_committed and batch.producer_id >= 0:
            last = batch.last_offset
            while pending and pending[0][0] <= last:
                aborted_pids.add(heapq.heappop(pending)[1])
            if _is_abort_marker(batch):
                aborted_pids.discard(batch.producer_id)
            elif batch.is_transactional and batch.producer_id in aborted_pids:
                continue
        if batch.is_control:
            continue
        if start is not None and batch.base_offset < start:
            kept = [r for r in batch.records if r.offset >= start]
            if len(kept) != len(batch.records):
                batch = replace(batch, records=kept)
        if batch.records:
            out.append(batch)
    return out


def parse_fetch_response(
    resp: Any,
    *,
    isolation_level: IsolationLevelArg | int,
    positions: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, PartitionFetch]:
    """Read a Fetch response into filtered, decoded per-partition results.

    Args:
        resp: a kio ``FetchResponse`` (v11 or v12).
        isolation_level: the level the request was made with.
        positions: the requested offsets; needed to trim records below them
            and to report ``next_offset`` for partitions that returned nothing.

    Returns:
        A :class:`PartitionFetch` per partition in the response. A partition
        whose records cannot be decoded gets a :class:`ProtocolError` (or
        :class:`CorruptRecordError`) as its ``error``.

    Raises:
        BrokerError: the response's top-level error code is set.
    """
    if getattr(resp, "error_code", 0):
        raise error_for_code(int(resp.error_code), "Fetch")
    read_committed = isolation_code(isolation_level) == READ_COMMITTED
    out: dict[TopicPartition, PartitionFetch] = {}
    for topic in resp.responses:
        for part in topic.partitions:
            tp = TopicPartition(topic.topic, int(part.partition_index))
            start = None if positions is None else positions.get(tp)
            result = PartitionFetch(
                error=None,
                high_watermark=int(part.high_watermark),
                last_stable_offset=int(part.last_stable_offset),
                log_start_offset=int(part.log_start_offset),
                next_offset=-1 if start is None else start,
            )
            out[tp] = result
            if part.error_code:
                result.error = error_for_code(int(part.error_code), f"Fetch {tp}")
                continue
            data = part.records
            if not data:
                continue
            result.size = len(data)
            try:
                batches, consumed = decode_batches_partial(data)
            except ProtocolError as exc:
                result.error = exc
                continue
            result.truncated = consumed < len(data)
            if not batches:
                continue
            nxt = batches[-1].next_offset
            result.next_offset = nxt if start is None else max(start, nxt)
            result.batches = _filter_batches(
                batches, part.aborted_transactions, read_committed, start
            )
    return out


async def fetch_once(
    cluster: Cluster,
    node_id: int,
    positions: Mapping[TopicPartition, int],
    *,
    max_wait: float = 0.5,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    isolation_level: IsolationLevelArg | int = "read_uncommitted",
) -> dict[TopicPartition, PartitionFetch]:
    """Send one Fetch to broker ``node_id`` and parse the answer.

    The response is awaited for ``max_wait`` plus the cluster's request timeout.

    Returns:
        See :func:`parse_fetch_response`.

    Raises:
        KafkaConnectionError: the connection failed (BrokenConnection,
            RequestTimedOut, ConnectionClosed).
        UnsupportedVersion: the broker shares no Fetch version with gengroup.
        ProtocolError: the response could not be decoded.
        BrokerError: the top-level error code is set.
    """
    if not positions:
        return {}
    version = await cluster.version(node_id, ApiKey.FETCH, channel="fetch")
    request = build_fetch_request(
        version,
        positions,
        max_wait=max_wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        partition_max_bytes=partition_max_bytes,
        isolation_level=isolation_level,
    )
    resp = await cluster.request(
        node_id, request, timeout=max_wait + cluster.request_timeout, channel="fetch"
    )
    return parse_fetch_response(resp, isolation_level=isolation_level, positions=positions)


async def read_partition(
    cluster: Cluster,
    tp: TopicPartition,
    start: int,
    end: int | None,
    *,
    isolation_level: IsolationLevelArg | int = "read_uncommitted",
    time_limit: float = 30.0,
    max_wait: float = 0.5,
) -> list[Record]:
    """Read the records of ``tp`` with offsets in ``[start, end)``.

    Waits (long-polling) for offsets not written yet. Leadership changes and
    broken connections refresh the metadata and retry.

    Args:
        cluster: an open cluster.
        tp: the partition.
        start: the first offset.
        end: the offset to stop before; None: the high watermark (or last
            stable offset under read_committed) seen in the first response.
        isolation_level: ``"read_uncommitted"`` or ``"read_committed"``.
        time_limit: seconds before giving up.
        max_wait: the long-poll wait of each Fetch.

    Returns:
        The records in offset order (offsets of control records, aborted
        records and compacted records are absent).

    Raises:
        OffsetOutOfRange: ``start`` is outside the log.
        BrokerError: another non-retriable partition error.
        ProtocolError: corrupt data.
        TimeoutError: ``end`` was not reached within ``time_limit`` (the
            message says how far the read got and the last error).
    """
    read_committed = isolation_code(isolation_level) == READ_COMMITTED
    records: list[Record] = []
    position = start
    attempt = 0
    last: Exception | None = None
    with anyio.move_on_after(time_limit):
        while end is None or position < end:
            leader = cluster.leader_for(tp)
            try:
                if leader < 0:
                    await cluster.refresh_metadata([tp.topic])
                    leader = cluster.leader_for(tp)
                    if leader < 0:
                        raise error_for_code(5, f"no leader for {tp}")  # LEADER_NOT_AVAILABLE
                result = await fetch_once(
                    cluster,
                    leader,
                    {tp: position},
                    max_wait=max_wait,
                    isolation_level=isolation_level,
                )
                pf = result.get(tp)
                if pf is None:
                    raise ProtocolError(f"broker {leader} did not answer for {tp}")
                if pf.error is not None:
                    raise pf.error
            except (StaleMetadataError, RetriableBrokerError, KafkaConnectionError) as exc:
                last = exc
                if not isinstance(exc, RetriableBrokerError):
                    try:
                        await cluster.refresh_metadata([tp.topic])
                    except KafkaConnectionError as again:
                        last = again
                await cluster.backoff(attempt)
                attempt += 1
                continue
            attempt = 0
            if end is None:
                end = pf.last_stable_offset if read_committed else pf.high_watermark
                if end < 0:
                    end = pf.high_watermark
            for batch in pf.batches:
                for record in batch.records:
                    if record.offset >= end:
                        break
                    records.append(record)
            position = max(position, pf.next_offset)
        return records
    raise TimeoutError(
        f"read_partition({tp}, {start}, {end}): reached offset {position} "
        f"within {time_limit} s (last error: {last})"
    )
