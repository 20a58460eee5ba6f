"""ListOffsets (key 2): the offset for a timestamp (or earliest/latest).

Version notes: v1-v10 served (v0's multi-offset answer is not). v2 adds the
isolation level (offsets are always committed: no transactions); v4 adds the
current leader epoch per partition (fenced or unknown epochs are refused) and
the leader epoch of the offset found in the answer.
"""

from __future__ import annotations

from typing import Any, Final

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ._base import ZERO, ApiSpec, Context, ec, per_partition

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.LIST_OFFSETS


def _partition(mod: Any, index: int, code: int, found: tuple[int, int, int]) -> Any:
    offset, timestamp, epoch = found
    return build(
        mod.ListOffsetsPartitionResponse,
        partition_index=index,
        error_code=ec(code),
        timestamp=timestamp,
        offset=offset,
        leader_epoch=epoch,
    )


def _response(mod: Any, req: Any, answer: Any) -> Any:
    topics = per_partition(mod.ListOffsetsTopicResponse, req.topics, answer)
    return build(mod.ListOffsetsResponse, throttle_time=ZERO, topics=topics)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """ListOffsets failing with ``code``: every requested partition carries it."""
    mod = response_module(KEY, version)
    return _response(mod, request, lambda t, p: _partition(mod, p.partition_index, code, (-1,) * 3))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Look up each partition's offset if this broker leads it."""
    mod = response_module(KEY, v)
    state = ctx.state

    def answer(ltopic: Any, lpart: Any) -> Any:
        index = int(lpart.partition_index)
        part = state.topics.partition(ltopic.name, index)
        code = ctx.leader_error(part, int(getattr(lpart, "current_leader_epoch", -1)))
        offset, timestamp, epoch = -1, -1, -1
        if code == 0:
            assert part is not None
            offset, timestamp = part.log.offset_for(int(lpart.timestamp))
            if offset >= 0:
                epoch = part.log.epoch_at(offset, part.leader_epoch)
        return _partition(mod, index, code, (offset, timestamp, epoch))

    return _response(mod, req, answer)


SPEC: Final = ApiSpec(KEY, 1, 10, handle, error_response)
