"""Sending Fetch requests: one request to one broker, and reading a range of offsets.

Theory of operation:

Building the request and reading the response are sans-IO, in
:mod:`gengroup.protocol.fetch` (its names are re-exported here). This module
sends: :func:`fetch_once` sends one request to one broker on the broker's
``"fetch"`` connection, or another one named by the caller (long polls never
delay other traffic), can leave the records undecoded for the consumer, and
with a :class:`~gengroup.protocol.fetch_session.FetchSession` sends an
incremental request of that session (the session sees every answer and every
failure, so it is never left expecting an answer that will not come);
:func:`fetch_partition` fetches one partition from its leader, and
:func:`read_partition` is a convenience for tests and tools that reads a range
of offsets, following leadership changes by refreshing metadata, with the
client's retry helper (:mod:`gengroup.io.retry`).

Topic ids. A broker that speaks Fetch v13+ is sent topic ids, not names:
the caller's (``topic_ids``: a consumer keeps the ids its positions belong
to) or, without them, the cluster's metadata cache's. A request whose topics
do not all have an id (no Metadata named one yet, or the broker's Metadata
does not send ids) goes as v12, by name, for that request only: a request
is not held back waiting for a Metadata answer, and a broker that speaks
v13 speaks v12 too. The answer's topic ids are mapped back to names through
the ids that request used (:func:`parse_fetch_response`). A fetch session
the broker created for requests by id refuses one by name and the other
way round (FETCH_SESSION_TOPIC_ID_ERROR): that answer is dropped as the
other session errors are, and the next request is full.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any, Final
from uuid import UUID

import anyio
from kio.schema.errors import ErrorCode

from .._errors import ProtocolError, error_for_code
from .._types import TopicPartition
from ..protocol.fetch import (
    READ_COMMITTED,
    IsolationLevelArg,
    PartitionFetch,
    build_fetch_request,
    isolation_code,
    parse_fetch_response,
)
from ..protocol.fetch_request import TOPIC_IDS_FROM, encode_fetch_request
from ..protocol.fetch_session import FetchPlan, FetchSession, PartitionParams
from ..protocol.records import Record
from ..protocol.versions import ApiKey
from .cluster import Cluster
from .retry import Backoff, retry

_LEADER_NOT_AVAILABLE: Final = int(ErrorCode.leader_not_available)
_SESSION_ERRORS: Final = frozenset(
    {
        int(ErrorCode.fetch_session_id_not_found),
        int(ErrorCode.invalid_fetch_session_epoch),
        int(ErrorCode.fetch_session_topic_id_error),
    }
)
#: The newest Fetch version that names topics by name.
_BY_NAME: Final = TOPIC_IDS_FROM - 1

__all__ = [
    "IsolationLevelArg",
    "PartitionFetch",
    "build_fetch_request",
    "cached_epochs",
    "fetch_once",
    "fetch_partition",
    "isolation_code",
    "parse_fetch_response",
    "read_partition",
]


async def fetch_once(
    cluster: Cluster,
    node_id: int,
    positions: Mapping[TopicPartition, int],
    *,
    max_wait: float = 0.5,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int | Mapping[TopicPartition, int] = 1024 * 1024,
    isolation_level: IsolationLevelArg | int = "read_uncommitted",
    decode: bool = True,
    channel: str = "fetch",
    session: FetchSession | None = None,
    topic_ids: Mapping[str, UUID] | None = None,
    leader_epochs: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, PartitionFetch]:
    """Send one Fetch to broker ``node_id`` and parse the answer.

    The response is awaited for ``max_wait`` plus the cluster's request timeout.
    ``partition_max_bytes`` is one limit for every partition or one per
    partition; ``decode=False`` leaves the records undecoded (checked, in each
    result's ``raw``; see :func:`parse_fetch_response`). ``channel`` names the
    broker connection (see :meth:`~gengroup.io.cluster.Cluster.connection`):
    requests that may be in flight together use different ones, so that a
    long poll does not hold up the other.

    With ``session``, the request is that fetch session's next one (full or
    incremental, see :mod:`gengroup.protocol.fetch_session`); the caller
    sends a session's requests one at a time. The answer then covers only
    the partitions with something new, and an answer the session rejects
    (the broker lost the session, an epoch out of order) is dropped whole:
    the result is empty and the session's next request is full.

    ``topic_ids`` are the ids the request names its topics by, if the broker
    speaks Fetch v13+ (default: the cluster's metadata cache's); a request
    with a topic of unknown id goes by name, as v12. ``leader_epochs``: the
    leader epoch to send per partition (KIP-320; default: none, -1), which a
    broker no longer leading at that epoch refuses (FENCED_LEADER_EPOCH) rather
    than answering as a follower (:func:`cached_epochs`).

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
    plan: FetchPlan | None = None
    #: The topic of each id the request named (empty: it named topics by name).
    names: dict[UUID, str] = {}
    if topic_ids is None:
        topic_ids = _cached_ids(cluster)
    if session is None:

        def make(mod: Any) -> object:
            version = _version(mod, topic_ids, positions, names)
            return encode_fetch_request(
                version,
                positions,
                max_wait=max_wait,
                min_bytes=min_bytes,
                max_bytes=max_bytes,
                partition_max_bytes=partition_max_bytes,
                isolation_level=isolation_level,
                leader_epochs=leader_epochs,
                topic_ids=topic_ids,
            )
    else:
        epochs = leader_epochs or {}
        plan = session.plan(
            {
                tp: PartitionParams(
                    offset,
                    partition_max_bytes
                    if isinstance(partition_max_bytes, int)
                    else partition_max_bytes[tp],
                    epochs.get(tp, -1),
                )
                for tp, offset in positions.items()
            },
            topic_ids,
        )
        make = partial(
            _session_request,
            plan=plan,
            max_wait=max_wait,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            topic_ids=topic_ids,
            names=names,
        )
    try:
        resp = await cluster.call(
            node_id, ApiKey.FETCH, make, timeout=max_wait + cluster.request_timeout, channel=channel
        )
    except BaseException:
        if session is not None:
            session.failed()
        raise
    if session is None or plan is None:
        return parse_fetch_response(
            resp, isolation_level=isolation_level, positions=positions, decode=decode, names=names
        )
    code = int(resp.error_code)
    try:
        rejected = session.answered(
            code,
            int(resp.session_id),
            (
                TopicPartition(_answered_topic(t, names), int(p.partition_index))
                for t in resp.responses
                for p in t.partitions
            ),
        )
    except BaseException:
        session.failed()
        raise
    if rejected is not None and (code == 0 or code in _SESSION_ERRORS):
        if plan.full:
            # A full request cannot be rejected for the session's sake: a
            # broker that does must not be asked again at once.
            raise ProtocolError(f"broker {node_id} rejected a full Fetch: {rejected}")
        return {}
    return parse_fetch_response(
        resp, isolation_level=isolation_level, positions=positions, decode=decode, names=names
    )


def cached_epochs(
    cluster: Cluster, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The leader epoch the cluster's metadata cache holds for each of ``partitions``
    (those it knows)."""
    out: dict[TopicPartition, int] = {}
    topics = cluster.topics
    for tp in partitions:
        topic = topics.get(tp.topic)
        part = None if topic is None else topic.partitions.get(tp.partition)
        if part is not None and part.leader_epoch >= 0:
            out[tp] = part.leader_epoch
    return out


def _cached_ids(cluster: Cluster) -> dict[str, UUID]:
    """The topic ids the cluster's metadata cache holds, by topic name."""
    return {name: t.topic_id for name, t in cluster.topics.items() if t.topic_id is not None}


def _version(
    mod: Any,
    topic_ids: Mapping[str, UUID],
    partitions: Iterable[TopicPartition],
    names: dict[UUID, str],
) -> int:
    """The version to send: the negotiated one (``mod``'s), or v12 if it names
    topics by id and a topic of ``partitions`` (those the request fetches or
    forgets, named in it or kept by its session) has none; ``names`` gets the
    ids of their topics, by which the answer names them."""
    version = int(mod.FetchRequest.__version__)
    if version < TOPIC_IDS_FROM:
        return version
    last = None
    for tp in partitions:
        topic = tp.topic
        if topic == last:  # a topic's partitions mostly come together: one look-up
            continue
        last = topic
        topic_id = topic_ids.get(topic)
        if topic_id is None:
            names.clear()
            return _BY_NAME
        names[topic_id] = topic
    return version


def _answered_topic(topic: Any, names: Mapping[UUID, str]) -> str:
    """A response topic's name (v13+: its id's, as the request named it; an id
    the request did not name: "topic id <id>", which the session finds stray)."""
    name = getattr(topic, "topic", None)
    if name is not None:
        return str(name)
    return names.get(topic.topic_id, f"topic id {topic.topic_id}")


def _session_request(
    mod: Any,
    *,
    plan: FetchPlan,
    max_wait: float,
    min_bytes: int,
    max_bytes: int,
    isolation_level: IsolationLevelArg | int,
    topic_ids: Mapping[str, UUID],
    names: dict[UUID, str],
) -> object:
    """The Fetch request of a session's ``plan``, in the version of ``mod`` (v12
    if a topic has no id in ``topic_ids``; ``names`` gets the ids named)."""
    send = plan.send
    version = _version(mod, topic_ids, plan.desired, names)
    if version >= TOPIC_IDS_FROM:  # forgotten topics go by the ids the session added them under
        version = _version(mod, plan.forgotten_ids, plan.forgotten, names)
    return encode_fetch_request(
        version,
        {tp: p.offset for tp, p in send.items()},
        max_wait=max_wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        partition_max_bytes={tp: p.max_bytes for tp, p in send.items()},
        isolation_level=isolation_level,
        leader_epochs={tp: p.leader_epoch for tp, p in send.items()},
        session_id=plan.session_id,
        session_epoch=plan.epoch,
        forgotten=plan.forgotten,
        topic_ids=topic_ids,
        forgotten_ids=plan.forgotten_ids,
    )


async def fetch_partition(
    cluster: Cluster,
    tp: TopicPartition,
    position: int,
    *,
    max_wait: float = 0.5,
    isolation_level: IsolationLevelArg | int = "read_uncommitted",
) -> PartitionFetch:
    """Fetch ``tp`` from ``position`` once, from its leader.

    A partition the metadata names no leader for refreshes the metadata once.

    Raises:
        BrokerError: LEADER_NOT_AVAILABLE (no leader, even after the refresh),
            or the partition's error in the answer.
        ProtocolError: the leader did not answer for ``tp``.
        KafkaConnectionError: the leader could not be reached.
    """
    leader = cluster.leader_for(tp)
    if leader < 0:
        await cluster.refresh_metadata([tp.topic])
        leader = cluster.leader_for(tp)
        if leader < 0:
            raise error_for_code(_LEADER_NOT_AVAILABLE, f"no leader for {tp}")
    result = await fetch_once(
        cluster, leader, {tp: position}, max_wait=max_wait, isolation_level=isolation_level
    )
    pf = result.get(tp)
    if pf is None:
        raise ProtocolError(f"broker {leader} did not answer for {tp}")
    if pf.error is not None:
        raise pf.error
    return pf


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
    backoff = Backoff(cluster.retry_backoff)
    deadline = anyio.current_time() + time_limit

    async def refresh() -> None:
        await cluster.refresh_metadata([tp.topic])

    async def step() -> PartitionFetch:
        return await fetch_partition(
            cluster, tp, position, max_wait=max_wait, isolation_level=isolation_level
        )

    def timed_out(last: BaseException | None) -> TimeoutError:
        return TimeoutError(
            f"read_partition({tp}, {start}, {end}): reached offset {position} "
            f"within {time_limit} s (last error: {last})"
        )

    while end is None or position < end:
        pf = await retry(
            f"read_partition({tp})",
            step,
            timeout=deadline - anyio.current_time(),
            backoff=backoff,
            refresh_metadata=refresh,
            on_timeout=timed_out,
        )
        backoff.reset()
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
