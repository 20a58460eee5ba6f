"""Finding offsets that hold no record to land, so the committed offset can pass them.

Theory of operation:

A consumer's fetch position moves past offsets that hold no record it reads
-- transaction markers, aborted transactions (under ``read_committed``),
records removed by retention -- without handing out a batch. A sink that
commits only when it lands a file would then never commit past them: a
partition whose last offsets are a commit marker, or whose records all
expired, keeps a lag forever (and ``--until-caught-up`` never ends).

:func:`empty_until` asks the partition's leader once, with a Fetch of its
own (not the consumer's fetch session) from the sink's landed offset: an
answer with no record whose ``next_offset`` moved on proves that the offsets
in between hold no record the group reads -- a log's offsets never gain
records later. An offset below the log start is answered with the log start
(ListOffsets earliest): nothing below it can be read any more.
"""

from __future__ import annotations

import logging

from .._errors import KafkaConnectionError, OffsetOutOfRange, is_retriable
from .._types import TopicPartition
from ..admin import Admin
from ..io.cluster import Cluster
from ..io.fetch import IsolationLevelArg, fetch_once

__all__ = ["empty_until"]

log = logging.getLogger("gengroup.lake")

#: The connection of the probe's Fetch: never queued behind the consumer's long polls.
_CHANNEL = "lake-gaps"


async def empty_until(
    cluster: Cluster,
    tp: TopicPartition,
    offset: int,
    *,
    isolation_level: IsolationLevelArg,
) -> int | None:
    """The offset up to which ``tp`` holds no readable record from ``offset`` on.

    Args:
        cluster: an open cluster.
        tp: the partition.
        offset: where to look from (the sink's landed offset).
        isolation_level: the group's.

    Returns:
        ``offset`` itself if a record is there (or nothing is written past
        it yet); an offset past ``offset`` if the offsets in between hold no
        record (markers, aborted or expired records); None if that could not
        be found out now (no known leader, a retriable failure: ask later).

    Raises:
        BrokerError: a non-retriable error for the partition.
    """
    leader = cluster.leader_for(tp)
    if leader < 0:
        return None
    try:
        answer = await fetch_once(
            cluster,
            leader,
            {tp: offset},
            max_wait=0.0,
            partition_max_bytes=64 * 1024,
            isolation_level=isolation_level,
            channel=_CHANNEL,
        )
    except KafkaConnectionError as exc:
        log.debug("%s: looking for offsets without records failed (%s)", tp, exc)
        return None
    pf = answer.get(tp)
    if pf is None:
        return None
    if isinstance(pf.error, OffsetOutOfRange):
        async with Admin(cluster) as admin:
            found = await admin.list_offsets([tp], "earliest")
        return max(offset, found[tp])
    if pf.error is not None:
        if is_retriable(pf.error):
            log.debug("%s: looking for offsets without records failed (%s)", tp, pf.error)
            return None
        raise pf.error
    if pf.batches or pf.raw:
        return offset
    return max(offset, pf.next_offset)
