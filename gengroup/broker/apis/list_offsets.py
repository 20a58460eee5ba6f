"""ListOffsets (key 2): the offset for a timestamp (or earliest/latest).

Version notes: v1-v10 served (v0's multi-offset answer is not). v2 adds the
isolation level (offsets are always committed: no transactions); v4 adds the
current leader epoch per partition (fenced or unknown epochs are refused) and
the leader epoch of the offset found in the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ._base import ZERO, ApiSpec, Context, ec, per_partition

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.LIST_OFFSETS


_Answer = tuple[int, int, int, int]
"""A partition's answer: error code, offset, timestamp and leader epoch (-1: none)."""


def _response(mod: Any, req: Any, answer: Callable[[Any, Any], _Answer]) -> Any:
    """The response, from ``answer(topic, partition)`` for each requested partition."""

    def partition(t: Any, p: Any) -> Any:
        code, offset, timestamp, epoch = answer(t, p)
        return build(
            mod.ListOffsetsPartitionResponse,
            partition_index=p.partition_index,
            error_code=ec(code),
            timestamp=timestamp,
            offset=offset,
            leader_epoch=epoch,
        )

    topics = per_partition(mod.ListOffsetsTopicResponse, req.topics, partition)
    return build(mod.ListOffsetsResponse, throttle_time=ZERO, topics=topics)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """ListOffsets failing with ``code``: every requested partition carries it."""
    return _response(response_module(KEY, version), request, lambda t, p: (code, -1, -1, -1))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Look up each partition's offset if this broker leads it."""
    state = ctx.state

    def answer(ltopic: Any, lpart: Any) -> _Answer:
        part = state.topics.partition(ltopic.name, int(lpart.partition_index))
        code = ctx.leader_error(part, int(getattr(lpart, "current_leader_epoch", -1)))
        offset, timestamp, epoch = -1, -1, -1
        if code == 0:
            assert part is not None
            offset, timestamp = part.log.offset_for(int(lpart.timestamp))
            if offset >= 0:
                epoch = part.log.epoch_at(offset, part.leader_epoch)
        return code, offset, timestamp, epoch

    return _response(response_module(KEY, v), req, answer)


SPEC: Final = ApiSpec(KEY, 1, 10, handle, error_response)
