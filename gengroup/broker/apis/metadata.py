"""Metadata (key 3): brokers, the controller and topics with their partitions.

Version notes: v0-v13 served. v0 lists every topic for an empty topic list
(v1+: ``null`` means all, empty means none). v4 adds
``allow_auto_topic_creation`` (before it, auto-creation follows only
``auto.create.topics.enable``). v8-v10 may ask for authorized operations
(topic and cluster). v10 adds topic ids, and topics may be named by id only
(unknown: UNKNOWN_TOPIC_ID). v13 adds a top-level error code. A topic created
by the request itself is answered LEADER_NOT_AVAILABLE, as Kafka does.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..log import LogError, Topic, topic_name_error
from ..state import OFFSETS_TOPIC
from ._base import INT32_MIN, NIL_UUID, NONE, ZERO, ApiSpec, Context, ec

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.METADATA

# Authorized-operation bit fields reported when a client asks for them
# (everything is allowed: there is no authorizer).
_TOPIC_OPS: Final = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
_CLUSTER_OPS: Final = sum(1 << op for op in (4, 5, 7, 8, 9, 10, 11, 12))


#: The first version whose topics may be requested by id alone (no name).
_NULLABLE_NAMES: Final = 12


def _topic_metadata(ctx: Context, mod: Any, topic: Topic, include_ops: bool) -> Any:
    online = ctx.state.online
    partitions = tuple(
        build(
            mod.MetadataResponsePartition,
            error_code=NONE if p.leader >= 0 else ErrorCode.leader_not_available,
            partition_index=p.index,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=tuple(p.replicas),
            isr_nodes=tuple(r for r in p.replicas if r in online),
            offline_replicas=tuple(r for r in p.replicas if r not in online),
        )
        for p in topic.partitions
    )
    ops = _TOPIC_OPS if include_ops else INT32_MIN
    return _topic(mod, NONE, topic.name, topic.topic_id, topic.internal, partitions, ops)


def _topic(
    mod: Any,
    code: int,
    name: str | None,
    topic_id: uuid.UUID | None,
    internal: bool,
    partitions: tuple[Any, ...] = (),
    ops: int = INT32_MIN,
) -> Any:
    """A topic's entry: its error and, for a topic that is served, its partitions."""
    return build(
        mod.MetadataResponseTopic,
        error_code=ec(code),
        name=name,
        topic_id=topic_id or NIL_UUID,
        is_internal=internal,
        partitions=partitions,
        topic_authorized_operations=ops,
    )


def _topic_error(
    mod: Any, code: int, name: str | None, topic_id: uuid.UUID | None = None, internal: bool = True
) -> Any:
    return _topic(mod, code, name, topic_id, internal and name == OFFSETS_TOPIC)


def _response(mod: Any, code: int, brokers: Any, cluster_id: Any, topics: Any, ops: int) -> Any:
    return build(
        mod.MetadataResponse,
        throttle_time=ZERO,
        brokers=brokers,
        cluster_id=cluster_id,
        controller_id=brokers[0].node_id if brokers else -1,
        topics=topics,
        cluster_authorized_operations=ops,
        error_code=ec(code),
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """Metadata failing with ``code``: no brokers, each requested topic and the top level."""
    mod = response_module(KEY, version)
    # Before v12 a response's topic name is not nullable: Kafka answers "" for
    # a topic requested without one.
    topics = tuple(
        _topic_error(
            mod,
            code,
            t.name if t.name is not None or version >= _NULLABLE_NAMES else "",
            getattr(t, "topic_id", None),
            internal=False,
        )
        for t in (request.topics or ())
    )
    return _response(mod, code, (), None, topics, INT32_MIN)


def _requested(ctx: Context, mod: Any, req: Any, v: int, include_ops: bool) -> list[Any]:
    state = ctx.state
    entries: list[Any] = []
    allow_auto = state.settings.auto_create_topics and (
        v < 4 or bool(req.allow_auto_topic_creation)
    )
    seen: set[object] = set()
    for entry in req.topics:
        name = entry.name
        topic_id = getattr(entry, "topic_id", None)
        if topic_id == NIL_UUID:
            topic_id = None
        key: object = name if name is not None else topic_id
        if key in seen:
            continue
        seen.add(key)
        if name is None:
            topic = state.topics.by_id.get(topic_id) if topic_id is not None else None
            if topic is None:
                code = ErrorCode.unknown_topic_id if topic_id else ErrorCode.invalid_request
                entries.append(_topic_error(mod, code, None, topic_id))
            else:
                entries.append(_topic_metadata(ctx, mod, topic, include_ops))
            continue
        topic = state.topics.get(name)
        if topic is not None:
            entries.append(_topic_metadata(ctx, mod, topic, include_ops))
        elif topic_name_error(name) is not None:
            entries.append(_topic_error(mod, ErrorCode.invalid_topic_exception, name))
        elif allow_auto:
            try:
                state.create_topic(name)
            except LogError as exc:
                entries.append(_topic_error(mod, exc.code, name))
            else:
                # Kafka answers the request that triggered the creation
                # with LEADER_NOT_AVAILABLE; the next one sees the topic.
                entries.append(_topic_error(mod, ErrorCode.leader_not_available, name))
        else:
            entries.append(_topic_error(mod, ErrorCode.unknown_topic_or_partition, name))
    return entries


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Answer a Metadata request (may auto-create the topics it names)."""
    mod = response_module(KEY, v)
    state = ctx.state
    include_ops = bool(getattr(req, "include_topic_authorized_operations", False))
    requested = req.topics
    if v < _NULLABLE_NAMES and any(
        t.name is None or getattr(t, "topic_id", None) not in (None, NIL_UUID)
        for t in requested or ()
    ):
        # Kafka: topic ids are not served before v12, nor topics without a
        # name (InvalidRequestException, answered as INVALID_REQUEST per topic).
        return error_response(v, req, ErrorCode.invalid_request)
    if requested is None or (v == 0 and not requested):
        entries = [_topic_metadata(ctx, mod, t, include_ops) for t in state.topics.by_name.values()]
    else:
        entries = _requested(ctx, mod, req, v, include_ops)
    brokers = tuple(
        build(
            mod.MetadataResponseBroker,
            node_id=b,
            host=state.addresses[b][0],
            port=state.addresses[b][1],
            rack=None,
        )
        for b in state.live_brokers()
    )
    cluster_ops = getattr(req, "include_cluster_authorized_operations", False)
    return _response(
        mod,
        NONE,
        brokers,
        state.cluster_id,
        tuple(entries),
        _CLUSTER_OPS if cluster_ops else INT32_MIN,
    )


SPEC: Final = ApiSpec(KEY, 0, 13, handle, error_response)
