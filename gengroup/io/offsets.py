"""Offsets of partitions and of groups: ListOffsets and OffsetFetch.

Theory of operation:

:func:`list_offsets` looks offsets up by position or time. ListOffsets must go
to each partition's leader, so the partitions are grouped by their cached
leader and one request per leader goes out concurrently. Partitions whose
leader is unknown, and partitions answered with stale leadership
(NOT_LEADER_OR_FOLLOWER ...), make the attempt fail with a
:class:`~gengroup._errors.StaleMetadataError`: the retry helper refreshes the
metadata and tries again for the partitions still missing, until the deadline.
A topic the metadata does not know at all fails at once with
UNKNOWN_TOPIC_OR_PARTITION.

:func:`fetch_committed` reads a group's committed offsets with OffsetFetch
from the node given (the group's coordinator: finding and following it is
:mod:`gengroup.io.coordinator`'s job). :func:`offset_fetch_request` and
:func:`parse_offset_fetch` are its two halves for callers that send through a
:class:`~gengroup.io.coordinator.CoordinatorClient`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal

import anyio
from kio.schema.errors import ErrorCode

from .._errors import BrokerError, KafkaConnectionError, error_for_code, is_retriable
from .._types import TopicPartition
from ..protocol.framing import build
from ..protocol.versions import ApiKey
from .cluster import Cluster
from .retry import retry

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "OffsetSpec",
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


def timestamp_for(spec: OffsetSpec) -> int:
    """ListOffsets' timestamp for an offset spec.

    Raises:
        ValueError: ``spec`` is not ``"earliest"``, ``"latest"`` or ms >= 0.
    """
    if spec == "earliest":
        return EARLIEST_TIMESTAMP
    if spec == "latest":
        return LATEST_TIMESTAMP
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return spec
    raise ValueError(f"offset spec must be 'earliest', 'latest' or ms >= 0, not {spec!r}")


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
        The offset of each partition.

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
    if not wanted:
        return result
    topics = sorted({tp.topic for tp in wanted})

    async def refresh() -> None:
        md = await cluster.refresh_metadata(topics)
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

    if any(cluster.leader_for(tp) < 0 for tp in wanted):
        await refresh()

    async def attempt() -> None:
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        stale: BrokerError | None = None
        for tp in wanted - result.keys():
            leader = cluster.leader_for(tp)
            if leader < 0:
                stale = error_for_code(_LEADER_NOT_AVAILABLE, f"no leader known for {tp}")
            else:
                by_leader[leader].append(tp)
        errors: list[Exception] = []

        async def one(node: int, parts: list[TopicPartition]) -> None:
            try:
                await _list_offsets_on(cluster, node, parts, ts, read_committed, result)
            except (BrokerError, KafkaConnectionError) as exc:
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
        "ListOffsets",
        attempt,
        timeout=timeout,
        backoff=cluster.retry_backoff,
        refresh_metadata=refresh,
    )
    return {tp: result[tp] for tp in wanted}


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
