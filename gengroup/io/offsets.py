"""Offsets of partitions and of groups: ListOffsets, DeleteRecords and OffsetFetch.

Theory of operation:

:func:`list_offsets` looks offsets up by position or time, and
:func:`delete_records` moves partitions' log start offsets forward. Both
requests must go to each partition's leader, so the partitions are grouped by
their cached leader and one request per leader goes out concurrently
(:func:`_per_leader`). Partitions whose leader is unknown, and partitions
answered with stale leadership (NOT_LEADER_OR_FOLLOWER ...), make the attempt
fail with a :class:`~gengroup._errors.StaleMetadataError`: the retry helper
refreshes the metadata and tries again for the partitions still missing, until
the deadline. A topic the metadata does not know at all fails at once with
UNKNOWN_TOPIC_OR_PARTITION.

:func:`fetch_committed` reads a group's committed offsets with OffsetFetch
from the node given (the group's coordinator: finding and following it is
:mod:`gengroup.io.coordinator`'s job). :func:`offset_fetch_request` and
:func:`parse_offset_fetch` are its two halves for callers that send through a
:class:`~gengroup.io.coordinator.CoordinatorClient`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import anyio
from kio.schema.errors import ErrorCode

from .._errors import (
    BrokerError,
    KafkaConnectionError,
    ProtocolError,
    error_for_code,
    is_retriable,
)
from .._types import TopicPartition
from ..protocol.framing import build, wait_ms
from ..protocol.versions import ApiKey
from .cluster import Cluster
from .retry import retry, seconds_left

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "OffsetSpec",
    "delete_records",
    "fetch_committed",
    "list_offsets",
    "offset_fetch_request",
    "parse_offset_fetch",
    "timestamp_for",
]

#: ``"earliest"``, ``"latest"`` or a timestamp in milliseconds since the epoch.
OffsetSpec = Literal["earliest", "latest"] | int

#: ListOffsets' special timestamps.
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1

_UNKNOWN_TOPIC: Final = int(ErrorCode.unknown_topic_or_partition)
_LEADER_NOT_AVAILABLE: Final = int(ErrorCode.leader_not_available)
_INT64_MAX: Final = 2**63 - 1


def timestamp_for(spec: OffsetSpec) -> int:
    """ListOffsets' timestamp for an offset spec.

    Raises:
        ValueError: ``spec`` is not ``"earliest"``, ``"latest"`` or ms >= 0
            (that an int64 holds: a timestamp in µs or ns is far beyond).
    """
    if spec == "earliest":
        return EARLIEST_TIMESTAMP
    if spec == "latest":
        return LATEST_TIMESTAMP
    if isinstance(spec, int) and not isinstance(spec, bool) and 0 <= spec <= _INT64_MAX:
        return spec
    raise ValueError(
        f"offset spec must be 'earliest', 'latest' or ms from 0 to {_INT64_MAX}, not {spec!r}"
    )


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partition indexes per topic, both sorted."""
    out: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(tps):
        out[tp.topic].append(tp.partition)
    return dict(sorted(out.items()))


# ------------------------------------------------------------------ ListOffsets


async def list_offsets(
    cluster: Cluster,
    tps: Iterable[TopicPartition],
    spec: OffsetSpec,
    *,
    read_committed: bool = False,
    timeout: float,
    missing_partitions: bool = False,
) -> dict[TopicPartition, int]:
    """Look offsets up by position or time, asking each partition's leader.

    Args:
        cluster: an open cluster.
        tps: the partitions.
        spec: ``"earliest"`` (log start offset), ``"latest"`` (the high
            watermark, or the last stable offset under ``read_committed``),
            or a timestamp in ms: the first offset whose timestamp is at or
            after it, or -1 if no such record exists.
        read_committed: use READ_COMMITTED isolation (matters for ``"latest"``).
        timeout: seconds before giving up on stale leadership.
        missing_partitions: a partition that fresh metadata does not list
            (its topic has fewer) is UnknownTopicOrPartition at once, as an
            unknown topic is (an admin's question); by default it is waited
            for, as stale leadership (a consumer's partitions may be newer
            than the metadata of the broker it asked).

    Returns:
        The offset of each partition, in (topic, partition) order.

    Raises:
        ValueError: a bad ``spec``.
        UnknownTopicOrPartition: metadata does not know a topic (or, with
            ``missing_partitions``, a partition).
        BrokerError: another non-retriable error.
        TimeoutError: leadership stayed stale until the deadline.
    """
    ts = timestamp_for(spec)
    wanted = set(tps)
    result: dict[TopicPartition, int] = {}
    if wanted:

        async def on_leader(node: int, parts: list[TopicPartition]) -> None:
            await _list_offsets_on(cluster, node, parts, ts, read_committed, result)

        await _per_leader(
            cluster, "ListOffsets", wanted, result, on_leader, timeout, missing_partitions
        )
    return {tp: result[tp] for tp in sorted(wanted)}


async def _per_leader(
    cluster: Cluster,
    what: str,
    wanted: set[TopicPartition],
    done: Mapping[TopicPartition, object],
    on_leader: Callable[[int, list[TopicPartition]], Awaitable[None]],
    timeout: float,
    missing_partitions: bool,
) -> None:
    """Send a leader-routed request until every partition of ``wanted`` is in ``done``.

    Each attempt groups the partitions not yet done by their cached leader and
    runs ``on_leader(node, partitions)`` for every leader concurrently (it
    puts its answers in ``done`` and raises the first error of its
    partitions). A non-retriable error is raised at once; stale leadership
    (an unknown leader, NOT_LEADER_OR_FOLLOWER ...) refreshes the metadata
    and the partitions still missing are sent again, with backoff, until
    ``timeout``. A topic the metadata does not know (and, with
    ``missing_partitions``, a partition it does not list) is
    UnknownTopicOrPartition at once. Connection failures, the first metadata
    refresh's too, are retried until ``timeout``.
    """
    topics = sorted({tp.topic for tp in wanted})
    # Without a leader cached, the first attempt starts with a refresh: inside
    # the retry loop, so that a cluster not reachable yet is waited for.
    cold = any(cluster.leader_for(tp) < 0 for tp in wanted)

    async def refresh() -> None:
        nonlocal cold
        md = await cluster.refresh_metadata(topics)
        cold = False
        for name in topics:
            info = md.get(name)
            if info is not None and info.error_code == _UNKNOWN_TOPIC:
                raise error_for_code(_UNKNOWN_TOPIC, f"topic {name!r}")
        if missing_partitions:
            for tp in sorted(wanted):
                info = md.get(tp.topic)
                if info is not None and not info.error_code and tp.partition not in info.partitions:
                    raise error_for_code(
                        _UNKNOWN_TOPIC,
                        f"{tp}: topic {tp.topic!r} has {len(info.partitions)} partitions",
                    )

    async def attempt() -> None:
        if cold:
            await refresh()
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        stale: BrokerError | None = None
        for tp in sorted(wanted - done.keys()):
            leader = cluster.leader_for(tp)
            if leader < 0:
                stale = error_for_code(_LEADER_NOT_AVAILABLE, f"no leader known for {tp}")
            else:
                by_leader[leader].append(tp)
        errors: list[Exception] = []

        async def one(node: int, parts: list[TopicPartition]) -> None:
            try:
                await on_leader(node, parts)
            except (BrokerError, KafkaConnectionError, ProtocolError) as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for node, parts in by_leader.items():
                tg.start_soon(one, node, parts)
        errors.sort(key=is_retriable)  # a non-retriable error first
        if errors:
            raise errors[0]
        if stale is not None:
            raise stale

    await retry(
        what,
        attempt,
        timeout=timeout,
        backoff=cluster.retry_backoff,
        refresh_metadata=refresh,
        waiting_on=cluster.waiting_on,
    )


async def _list_offsets_on(
    cluster: Cluster,
    node: int,
    parts: Sequence[TopicPartition],
    ts: int,
    read_committed: bool,
    out: dict[TopicPartition, int],
) -> None:
    """ListOffsets on one leader: its answers go to ``out``, then its first error is raised."""

    def make(mod: Any) -> Any:
        return build(
            mod.ListOffsetsRequest,
            replica_id=-1,
            isolation_level=1 if read_committed else 0,
            topics=tuple(
                build(
                    mod.ListOffsetsTopic,
                    name=topic,
                    partitions=tuple(
                        build(mod.ListOffsetsPartition, partition_index=p, timestamp=ts) for p in ps
                    ),
                )
                for topic, ps in _by_topic(parts).items()
            ),
        )

    resp: Any = await cluster.call(node, ApiKey.LIST_OFFSETS, make)
    first: BrokerError | None = None
    for t in resp.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            if p.error_code:
                err = error_for_code(int(p.error_code), f"ListOffsets {tp} on broker {node}")
                if not is_retriable(err):
                    raise err
                first = first or err
                continue
            out[tp] = int(p.offset)
    if first is not None:
        raise first


# ------------------------------------------------------------------ DeleteRecords


async def delete_records(
    cluster: Cluster,
    before: Mapping[TopicPartition, int],
    *,
    timeout: float,
) -> dict[TopicPartition, int]:
    """Delete the records below an offset of each partition (DeleteRecords), on its leader.

    The partitions are grouped by leader, one request per leader, sent
    concurrently (as the Java client's ``Admin.deleteRecords``); stale
    leadership refreshes the metadata and the partitions not done yet are
    sent again, with backoff, until ``timeout``. Deleting is idempotent: a
    partition's log start offset never moves back, so a partition sent twice
    (or an offset below its log start) leaves it where it is.

    Args:
        cluster: an open cluster.
        before: per partition, the offset that becomes its log start offset
            (records below it are deleted); -1 deletes up to the high watermark.
        timeout: seconds for the whole operation (also how long each leader
            may wait for its followers to delete the records too).

    Returns:
        Each partition's low watermark after the deletion: its log start
        offset (at least the offset asked for; higher if it already was).

    Raises:
        TypeError: an offset that is not an int.
        ValueError: an offset beyond an int64, or a partition index beyond an int32.
        UnknownTopicOrPartition: metadata does not know a topic or partition.
        OffsetOutOfRange: an offset above the partition's high watermark, or
            below -1.
        BrokerError: another non-retriable error of a partition (e.g.
            POLICY_VIOLATION for a topic whose ``cleanup.policy`` lacks
            ``delete``, INVALID_TOPIC_EXCEPTION for an internal topic),
            naming it; the partitions answered before it are deleted.
        TimeoutError: leadership stayed stale (or the followers did not
            follow) until the deadline.
    """
    wanted: dict[TopicPartition, int] = {}
    for tp, offset in before.items():
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"{tp}: the offset to delete before must be an int, got {offset!r}")
        if not -(2**63) <= offset <= _INT64_MAX:
            raise ValueError(f"{tp}: the offset to delete before must be an int64, got {offset}")
        if not 0 <= tp.partition < 2**31:
            raise ValueError(f"{tp}: a partition index is from 0 to {2**31 - 1}")
        wanted[tp] = offset
    result: dict[TopicPartition, int] = {}
    if not wanted:
        return result
    left = seconds_left(timeout)

    async def on_leader(node: int, parts: list[TopicPartition]) -> None:
        wait = max(left(), 0.001)

        def make(mod: Any) -> Any:
            return build(
                mod.DeleteRecordsRequest,
                topics=tuple(
                    build(
                        mod.DeleteRecordsTopic,
                        name=topic,
                        partitions=tuple(
                            build(
                                mod.DeleteRecordsPartition,
                                partition_index=p,
                                offset=wanted[TopicPartition(topic, p)],
                            )
                            for p in ps
                        ),
                    )
                    for topic, ps in _by_topic(parts).items()
                ),
                timeout=wait_ms(wait),
            )

        resp: Any = await cluster.call(
            node, ApiKey.DELETE_RECORDS, make, timeout=wait + cluster.request_timeout
        )
        _partition_results(
            resp.topics, "low_watermark", f"DeleteRecords on broker {node}", set(parts), result
        )

    await _per_leader(cluster, "DeleteRecords", set(wanted), result, on_leader, timeout, True)
    return {tp: result[tp] for tp in sorted(wanted)}


def _partition_results(
    topics: Iterable[Any],
    field: str,
    what: str,
    asked: set[TopicPartition],
    out: dict[TopicPartition, int],
) -> None:
    """A leader's per-partition answers: each value of ``field`` goes to ``out``, then the
    first error is raised (a non-retriable one at once); a partition asked about and not
    answered is a ProtocolError."""
    first: BrokerError | None = None
    answered: set[TopicPartition] = set()
    for t in topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            answered.add(tp)
            if p.error_code:
                err = error_for_code(int(p.error_code), f"{what}: {tp}")
                if not is_retriable(err):
                    raise err
                first = first or err
                continue
            out[tp] = int(getattr(p, field))
    if first is not None:
        raise first
    if asked - answered:
        raise ProtocolError(f"{what}: no answer for {sorted(asked - answered)}")


# ------------------------------------------------------------------ OffsetFetch


def offset_fetch_request(
    mod: Any,
    group_id: str,
    partitions: Iterable[TopicPartition] | None,
    *,
    require_stable: bool,
) -> Any:
    """An OffsetFetch request of ``mod``'s version for ``partitions`` (None: all of them)."""
    topics = (
        None
        if partitions is None
        else tuple(
            build(mod.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
            for t, ps in _by_topic(set(partitions)).items()
        )
    )
    return build(
        mod.OffsetFetchRequest, group_id=group_id, topics=topics, require_stable=require_stable
    )


def parse_offset_fetch(resp: Any, group_id: str) -> dict[TopicPartition, tuple[int, str]]:
    """The committed offset (-1: none) and metadata of every partition of an OffsetFetch response.

    Raises:
        BrokerError: a group-level or partition-level error (typed).
    """
    if getattr(resp, "error_code", 0):
        raise error_for_code(int(resp.error_code), f"OffsetFetch {group_id!r}")
    out: dict[TopicPartition, tuple[int, str]] = {}
    for t in resp.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            if p.error_code:
                raise error_for_code(int(p.error_code), f"OffsetFetch {group_id!r} {tp}")
            out[tp] = (int(p.committed_offset), p.metadata or "")
    return out


async def fetch_committed(
    cluster: Cluster,
    node: int,
    group_id: str,
    partitions: Iterable[TopicPartition] | None,
    *,
    require_stable: bool = True,
) -> dict[TopicPartition, tuple[int, str]]:
    """OffsetFetch from ``node`` (the group's coordinator): committed offsets (-1 if none)
    with the metadata committed with them.

    Args:
        cluster: an open cluster.
        node: the group's coordinator.
        group_id: the group.
        partitions: the partitions (None: every partition the group committed for).
        require_stable: wait for pending transactional commits (KIP-447).

    Raises:
        BrokerError: a group-level or partition-level error (typed).
    """
    resp = await cluster.call(
        node,
        ApiKey.OFFSET_FETCH,
        lambda mod: offset_fetch_request(mod, group_id, partitions, require_stable=require_stable),
    )
    return parse_offset_fetch(resp, group_id)
