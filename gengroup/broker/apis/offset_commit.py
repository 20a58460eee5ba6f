"""OffsetCommit (key 8): store a group's offsets.

Version notes: v2-v10 served. v2-v4 carry a retention time (ignored); v6
adds the committed leader epoch; v7 adds static membership
(``group_instance_id``); v10 names topics by id only, in the request and the
answer. The answer has an error per partition; partitions that do not exist
are answered UNKNOWN_TOPIC_OR_PARTITION, and from v10 a topic id the broker
does not know (a deleted topic's, or the nil id) UNKNOWN_TOPIC_ID, before the
coordinator sees the request, as Kafka 4.3 does.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import OffsetCommitInput, OffsetCommitPartition, OffsetCommitTopic
from ._base import ZERO, ApiSpec, Context, ec, per_partition

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.OFFSET_COMMIT


#: The first version naming topics by id.
BY_ID: Final = 10


def _response(version: int, req: Any, error: Any) -> Any:
    """The answer, from ``error(topic, partition index) -> error code``; ``topic``
    is the request's topic name, or its id from v10."""
    mod = response_module(KEY, version)
    key = "topic_id" if version >= BY_ID else "name"
    topics = per_partition(
        mod.OffsetCommitResponseTopic,
        req.topics,
        lambda t, p: build(
            mod.OffsetCommitResponsePartition,
            partition_index=p.partition_index,
            error_code=error(getattr(t, key), int(p.partition_index)),
        ),
        name=key,
    )
    return build(mod.OffsetCommitResponse, throttle_time=ZERO, topics=topics)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """OffsetCommit failing with ``code``: every requested partition carries it."""
    return _response(version, request, lambda topic, index: ec(code))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Hand the offsets of existing partitions to the coordinator."""
    if code := ctx.not_coordinator(req.group_id):
        return error_response(v, req, code)
    known: list[OffsetCommitTopic] = []
    names: dict[Any, str] = {}  # the request's topic (its name, or its id from v10) -> name
    for t in req.topics:
        if v >= BY_ID:
            topic = ctx.state.topics.by_id.get(t.topic_id) if t.topic_id else None
            if topic is None:
                continue  # answered UNKNOWN_TOPIC_ID
            names[t.topic_id] = topic.name
        else:
            names[t.name] = t.name
        parts = tuple(
            OffsetCommitPartition(
                int(p.partition_index),
                int(p.committed_offset),
                int(getattr(p, "committed_leader_epoch", -1)),
                p.committed_metadata,
            )
            for p in t.partitions
            if ctx.state.topics.partition(names[_key(t, v)], int(p.partition_index)) is not None
        )
        if parts:
            known.append(OffsetCommitTopic(names[_key(t, v)], parts))
    results: dict[tuple[str, int], ErrorCode] = {}
    if known:
        out: Any = await ctx.group_call(
            OffsetCommitInput(
                group_id=req.group_id,
                topics=tuple(known),
                generation_id=int(req.generation_id_or_member_epoch),
                member_id=req.member_id,
                group_instance_id=getattr(req, "group_instance_id", None),
                version=v,
            ),
            [req.group_id],
        )
        if out is None:
            return error_response(v, req, ErrorCode.not_coordinator)
        for ot in out.topics:
            for op in ot.partitions:
                results[(ot.name, op.partition_index)] = op.error_code

    def error(topic: Any, index: int) -> ErrorCode:
        name = names.get(topic)
        if name is None:
            return ErrorCode.unknown_topic_id
        return results.get((name, index), ErrorCode.unknown_topic_or_partition)

    return _response(v, req, error)


def _key(topic: Any, version: int) -> Any:
    """How a request's topic is named: its id from v10, its name before."""
    return topic.topic_id if version >= BY_ID else topic.name


SPEC: Final = ApiSpec(KEY, 2, 10, handle, error_response)
