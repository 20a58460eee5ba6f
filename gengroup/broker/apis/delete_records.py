"""DeleteRecords (key 21): move partitions' log start offsets forward.

Version notes: v0-v2 served (the same fields; v2 is flexible). Each partition
is answered as Kafka's ``KafkaApis.handleDeleteRecordsRequest`` and
``ReplicaManager.deleteRecordsOnLocalLog`` answer it, checked in their order:
a partition the cluster does not have is UNKNOWN_TOPIC_OR_PARTITION; an
internal topic (``__consumer_offsets``) INVALID_TOPIC_EXCEPTION; a partition
this broker does not lead NOT_LEADER_OR_FOLLOWER; a topic whose
``cleanup.policy`` lacks ``delete`` POLICY_VIOLATION; an offset of -1 means
the high watermark, and an offset above the high watermark or below -1 is
OFFSET_OUT_OF_RANGE. Otherwise the log start moves up to the offset (never
back) and the answer's low watermark is the log start offset after it; an
error's low watermark is -1. A partition named more than once is answered
once, with its last offset, as Kafka reads the request into a map. Every
replica shares the one log, so the request's ``timeout`` (Kafka's wait for
followers to delete too) is never needed.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..log import LogError
from ._base import ZERO, ApiSpec, Context, ec, per_partition

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.DELETE_RECORDS

_Answer = tuple[int, int]
"""A partition's answer: error code and low watermark (-1 with an error)."""


def _collapsed(req: Any) -> list[Any]:
    """The request's topics with each partition once, at its last offset (Kafka
    reads them into a map), in the order they first appear."""
    offsets: dict[str, dict[int, int]] = {}
    for t in req.topics:
        for p in t.partitions:
            offsets.setdefault(t.name, {})[int(p.partition_index)] = int(p.offset)
    return [
        SimpleNamespace(
            name=name,
            partitions=[SimpleNamespace(partition_index=i, offset=o) for i, o in parts.items()],
        )
        for name, parts in offsets.items()
    ]


def _response(mod: Any, req: Any, answer: Callable[[Any, Any], _Answer]) -> Any:
    """The response, from ``answer(topic, partition)`` for each requested partition
    (each once: see :func:`_collapsed`)."""

    def partition(t: Any, p: Any) -> Any:
        code, low = answer(t, p)
        return build(
            mod.DeleteRecordsPartitionResult,
            partition_index=p.partition_index,
            low_watermark=low,
            error_code=ec(code),
        )

    topics = per_partition(mod.DeleteRecordsTopicResult, _collapsed(req), partition)
    return build(mod.DeleteRecordsResponse, throttle_time=ZERO, topics=topics)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """DeleteRecords failing with ``code``: every requested partition carries it."""
    return _response(response_module(KEY, version), request, lambda t, p: (code, -1))


def _deletes(configs: dict[str, str]) -> bool:
    """Whether a topic's ``cleanup.policy`` (default ``delete``) includes ``delete``."""
    policy = configs.get("cleanup.policy", "delete")
    return "delete" in (word.strip() for word in policy.split(","))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Delete each partition's records below its offset, if this broker leads it."""
    state = ctx.state
    moved = False

    def answer(dtopic: Any, dpart: Any) -> _Answer:
        nonlocal moved
        topic = state.topics.get(dtopic.name)
        part = state.topics.partition(dtopic.name, int(dpart.partition_index))
        if topic is None or part is None:
            return ErrorCode.unknown_topic_or_partition, -1
        if topic.internal:
            return ErrorCode.invalid_topic_exception, -1
        if code := ctx.leader_error(part):
            return code, -1
        if not _deletes(topic.configs):
            return ErrorCode.policy_violation, -1
        try:
            before = part.log.log_start_offset
            low = part.log.delete_records(int(dpart.offset))
        except LogError as exc:
            return exc.code, -1
        moved = moved or low != before
        return 0, low

    response = _response(response_module(KEY, v), req, answer)
    if moved:
        state.notify()  # a long-poll Fetch below the new log start is now out of range
    return response


SPEC: Final = ApiSpec(KEY, 0, 2, handle, error_response)
