"""CreateTopics (key 19): create topics, optionally validating only.

Version notes: v2-v7 served. ``num_partitions`` / ``replication_factor``
of -1 (v4+) take the broker defaults; explicit assignments exclude both
counts. A topic named twice is refused (INVALID_REQUEST). v5 answers the
topic's configs, partition count and replication factor; v7 adds the topic id.
Configs are checked as Kafka checks them (INVALID_CONFIG with its message:
a null value, an unknown name, an invalid value), before the counts.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..log import LogError, Topic
from ._base import NIL_UUID, NONE, ZERO, ApiSpec, Context, topic_result

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.CREATE_TOPICS


def _result(
    mod: Any, v: int, name: str, code: int, message: str | None, topic: Topic | None
) -> Any:
    return topic_result(
        mod.CreatableTopicResult,
        name,
        code,
        message,
        topic_id=topic.topic_id if topic is not None else NIL_UUID,
        topic_config_error_code=NONE,
        num_partitions=len(topic.partitions) if topic is not None else -1,
        replication_factor=topic.replication_factor if topic is not None else -1,
        configs=(
            tuple(
                build(
                    mod.CreatableTopicConfigs,
                    name=k,
                    value=val,
                    read_only=False,
                    config_source=1,
                    is_sensitive=False,
                )
                for k, val in topic.configs.items()
            )
            if topic is not None and v >= 5
            else None
        ),
    )


def _response(mod: Any, results: Any) -> Any:
    return build(mod.CreateTopicsResponse, throttle_time=ZERO, topics=tuple(results))


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """CreateTopics failing with ``code``: every requested topic carries it."""
    mod = response_module(KEY, version)
    return _response(
        mod, (_result(mod, version, t.name, code, message, None) for t in request.topics)
    )


def _create(ctx: Context, t: Any, validate_only: bool) -> tuple[int, str | None, Topic | None]:
    """Create one requested topic: ``(error, message, topic)``."""
    if t.assignments and (int(t.num_partitions) != -1 or int(t.replication_factor) != -1):
        message = "both num_partitions or replication_factor and assignments were set"
        return ErrorCode.invalid_request, message, None
    assignments = None
    if t.assignments:
        by_index = {int(a.partition_index): list(a.broker_ids) for a in t.assignments}
        if sorted(by_index) != list(range(len(by_index))):
            message = "partition indexes of the assignment must be 0..n-1"
            return ErrorCode.invalid_replica_assignment, message, None
        assignments = [by_index[i] for i in sorted(by_index)]
    try:
        topic = ctx.state.create_topic(
            t.name,
            int(t.num_partitions),
            int(t.replication_factor),
            configs={c.name: c.value for c in t.configs},
            assignments=assignments,
            validate_only=validate_only,
        )
    except LogError as exc:
        return exc.code, str(exc), None
    return 0, None, topic


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Create each requested topic (or validate that it could be created)."""
    mod = response_module(KEY, v)
    counts: dict[str, int] = {}
    for t in req.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    results: list[Any] = []
    code: int
    message: str | None
    done: set[str] = set()
    for t in req.topics:
        if t.name in done:
            continue
        done.add(t.name)
        if counts[t.name] > 1:
            code, message = ErrorCode.invalid_request, f"topic {t.name!r} appears more than once"
            topic = None
        else:
            code, message, topic = _create(ctx, t, bool(req.validate_only))
        results.append(_result(mod, v, t.name, code, message, topic))
    return _response(mod, results)


SPEC: Final = ApiSpec(KEY, 2, 7, handle, error_response)
