"""OffsetCommit (key 8): store a group's offsets.

Version notes: v2-v9 served (v10 names topics by id only). v2-v4 carry a
retention time (ignored); v6 adds the committed leader epoch; v7 adds static
membership (``group_instance_id``). The answer has an error per partition;
partitions that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION before
the coordinator sees the request, as Kafka does.
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


def _response(version: int, req: Any, error: Any) -> Any:
    """The answer, from ``error(topic name, partition index) -> error code``."""
    mod = response_module(KEY, version)
    topics = per_partition(
        mod.OffsetCommitResponseTopic,
        req.topics,
        lambda t, p: build(
            mod.OffsetCommitResponsePartition,
            partition_index=p.partition_index,
            error_code=error(t.name, int(p.partition_index)),
        ),
    )
    return build(mod.OffsetCommitResponse, throttle_time=ZERO, topics=topics)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """OffsetCommit failing with ``code``: every requested partition carries it."""
    return _response(version, request, lambda name, index: ec(code))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Hand the offsets of existing partitions to the coordinator."""
    if code := ctx.not_coordinator(req.group_id):
        return error_response(v, req, code)
    known: list[OffsetCommitTopic] = []
    for t in req.topics:
        parts = tuple(
            OffsetCommitPartition(
                int(p.partition_index),
                int(p.committed_offset),
                int(getattr(p, "committed_leader_epoch", -1)),
                p.committed_metadata,
            )
            for p in t.partitions
            if ctx.state.topics.partition(t.name, int(p.partition_index)) is not None
        )
        if parts:
            known.append(OffsetCommitTopic(t.name, parts))
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
    return _response(
        v,
        req,
        lambda name, index: results.get((name, index), ErrorCode.unknown_topic_or_partition),
    )


SPEC: Final = ApiSpec(KEY, 2, 9, handle, error_response)
