"""DeleteTopics (key 20): delete topics by name (or by id from v6).

Version notes: v1-v6 served. v5 adds an error message per topic; v6 names
topics as ``topics`` entries with a name or an id (not both:
INVALID_REQUEST; an unknown id: UNKNOWN_TOPIC_ID) instead of
``topic_names``.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..log import LogError
from ._base import NIL_UUID, ZERO, ApiSpec, Context, topic_result

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.DELETE_TOPICS


def _wanted(version: int, request: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    if version >= 6:
        return [(t.name, t.topic_id) for t in request.topics]
    return [(name, None) for name in request.topic_names]


def _response(mod: Any, results: Any) -> Any:
    """The answer, from ``(name, topic id, error, message)`` tuples."""
    entries = tuple(
        topic_result(mod.DeletableTopicResult, name, code, message, topic_id=topic_id or NIL_UUID)
        for name, topic_id, code, message in results
    )
    return build(mod.DeleteTopicsResponse, throttle_time=ZERO, responses=entries)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """DeleteTopics failing with ``code``: every requested topic carries it."""
    mod = response_module(KEY, version)
    return _response(mod, ((n, i, code, message) for n, i in _wanted(version, request)))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Delete each requested topic."""
    mod = response_module(KEY, v)
    state = ctx.state
    results: list[tuple[str | None, uuid.UUID | None, int, str | None]] = []
    deleted = False
    for name, topic_id in _wanted(v, req):
        code, message = 0, None
        if topic_id == NIL_UUID:
            topic_id = None
        resolved = name
        if name is not None and topic_id is not None:
            code, message = ErrorCode.invalid_request, "give a topic name or an id, not both"
        elif name is None:
            topic = state.topics.by_id.get(topic_id) if topic_id is not None else None
            if topic is None:
                code = ErrorCode.unknown_topic_id if topic_id else ErrorCode.invalid_request
            else:
                resolved = topic.name
        if not code and resolved is not None:
            try:
                topic = state.delete_topic(resolved)
                topic_id = topic.topic_id
                deleted = True
            except LogError as exc:
                code, message = exc.code, str(exc)
        results.append((resolved, topic_id, code, message))
    if deleted:
        state.notify()
    return _response(mod, results)


SPEC: Final = ApiSpec(KEY, 1, 6, handle, error_response)
