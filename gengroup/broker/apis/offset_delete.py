"""OffsetDelete (key 47): delete a group's committed offsets of some partitions.

Version notes: v0 served (the only version). A group that does not exist is
answered GROUP_ID_NOT_FOUND at the top level; a non-empty consumer group keeps
the offsets of topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC per
partition) and loses the others', as Kafka does.
"""

from __future__ import annotations

from typing import Any, Final

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import OffsetDeleteInput
from ._base import ZERO, ApiSpec, Context, ec

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.OFFSET_DELETE


def _response(version: int, code: int, topics: Any) -> Any:
    mod = response_module(KEY, version)
    return build(
        mod.OffsetDeleteResponse,
        error_code=ec(code),
        throttle_time=ZERO,
        topics=tuple(
            build(
                mod.OffsetDeleteResponseTopic,
                name=name,
                partitions=tuple(
                    build(mod.OffsetDeleteResponsePartition, partition_index=p, error_code=ec(c))
                    for p, c in parts
                ),
            )
            for name, parts in topics
        ),
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """OffsetDelete failing with ``code`` at the top level."""
    return _response(version, code, ())


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Delete the offsets, if this broker coordinates the group."""
    refused = ctx.not_coordinator(req.group_id)
    if refused:
        return error_response(v, req, refused)
    topics = tuple(
        (t.name, tuple(int(p.partition_index) for p in t.partitions)) for t in req.topics
    )
    out: Any = await ctx.group_call(OffsetDeleteInput(req.group_id, topics), [req.group_id])
    if out is None:
        return error_response(v, req, ctx.coordinator_error(req.group_id))
    return _response(v, out.error_code, out.topics)


SPEC: Final = ApiSpec(KEY, 0, 0, handle, error_response)
