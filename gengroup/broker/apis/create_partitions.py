"""CreatePartitions (key 37): grow topics, optionally validating only.

Version notes: v0-v3 served (v2+ flexible). Explicit assignments name the
new partitions' replicas; a topic named twice is refused (INVALID_REQUEST),
and internal topics cannot grow (INVALID_TOPIC_EXCEPTION).
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..log import LogError
from ._base import ZERO, ApiSpec, Context, topic_result

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.CREATE_PARTITIONS


def _response(mod: Any, results: Any) -> Any:
    """The answer, from ``(name, error, message)`` triples."""
    entries = tuple(topic_result(mod.CreatePartitionsTopicResult, *r) for r in results)
    return build(mod.CreatePartitionsResponse, throttle_time=ZERO, results=entries)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """CreatePartitions failing with ``code``: every requested topic carries it."""
    mod = response_module(KEY, version)
    return _response(mod, ((t.name, code, message) for t in request.topics))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Grow each requested topic (or validate that it could grow)."""
    mod = response_module(KEY, v)
    state = ctx.state
    counts: dict[str, int] = {}
    for t in req.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    results: list[tuple[str, int, str | None]] = []
    changed = False
    for t in req.topics:
        code, message = 0, None
        if counts[t.name] > 1:
            code, message = ErrorCode.invalid_request, f"topic {t.name!r} appears more than once"
        else:
            topic = state.topics.get(t.name)
            if topic is not None and topic.internal:
                code = ErrorCode.invalid_topic_exception
                message = "cannot add partitions to an internal topic"
            else:
                try:
                    state.topics.add_partitions(
                        t.name,
                        int(t.count),
                        brokers=state.node_ids,
                        online=state.online,
                        assignments=(
                            None
                            if t.assignments is None
                            else [list(a.broker_ids) for a in t.assignments]
                        ),
                        validate_only=bool(req.validate_only),
                    )
                    changed = changed or not req.validate_only
                except LogError as exc:
                    code, message = exc.code, str(exc)
        results.append((t.name, code, message))
    if changed:
        state.notify()
    return _response(mod, results)


SPEC: Final = ApiSpec(KEY, 0, 3, handle, error_response)
