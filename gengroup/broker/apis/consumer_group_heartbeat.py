"""ConsumerGroupHeartbeat (key 68): the consumer group protocol (KIP-848).

Version notes: v0-v1 served, both flexible. v1 requires the member to make
its own member id (v0 lets the coordinator make one) and adds
``subscribed_topic_regex``. Served only when the broker setting
``group_coordinator_rebalance_protocols`` includes ``"consumer"`` (the
default, as in Kafka 4.x); otherwise the API is not advertised and a request
is answered UNSUPPORTED_VERSION. Topics travel by id: the handler gives the
coordinator a snapshot of the cluster's topics (id and partition count).
"""

from __future__ import annotations

import datetime
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import ConsumerGroupHeartbeatInput, ConsumerGroupHeartbeatOutput, TopicInfo
from ..state import BrokerSettings, ClusterState
from ._base import ZERO, ApiSpec, Context, ec, from_output, ms

__all__ = ["SPEC", "error_response", "handle", "served", "topic_snapshot"]

KEY: Final = ApiKey.CONSUMER_GROUP_HEARTBEAT


def served(settings: BrokerSettings) -> bool:
    """Whether the consumer group protocol is enabled on the broker."""
    return "consumer" in settings.group_coordinator_rebalance_protocols


def topic_snapshot(state: ClusterState) -> dict[str, TopicInfo]:
    """The cluster's topics as the consumer group coordinator sees them."""
    return {
        name: TopicInfo(topic.topic_id, len(topic.partitions))
        for name, topic in state.topics.by_name.items()
    }


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """ConsumerGroupHeartbeat failing with ``code``."""
    return _answer(version, ConsumerGroupHeartbeatOutput(ec(code), message, member_epoch=0))


def _answer(v: int, out: ConsumerGroupHeartbeatOutput) -> Any:
    mod = response_module(KEY, v)
    assignment = None
    if out.assignment is not None:
        assignment = build(
            mod.Assignment,
            topic_partitions=tuple(
                build(mod.TopicPartitions, topic_id=topic, partitions=tuple(sorted(parts)))
                for topic, parts in out.assignment.items()
            ),
        )
    return from_output(
        mod.ConsumerGroupHeartbeatResponse,
        out,
        throttle_time=ZERO,
        heartbeat_interval=datetime.timedelta(milliseconds=out.heartbeat_interval_ms),
        assignment=assignment,
    )


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Hand the heartbeat to the coordinator."""
    if not served(ctx.state.settings):
        return error_response(
            v, req, ErrorCode.unsupported_version, "The consumer group protocol is disabled."
        )
    if code := ctx.not_coordinator(req.group_id):
        return error_response(v, req, code)
    owned = (
        None
        if req.topic_partitions is None
        else tuple(
            (t.topic_id, tuple(int(p) for p in t.partitions))
            for t in req.topic_partitions
            if t.topic_id is not None
        )
    )
    names = req.subscribed_topic_names
    out: Any = await ctx.group_call(
        ConsumerGroupHeartbeatInput(
            group_id=req.group_id,
            member_id=req.member_id,
            member_epoch=int(req.member_epoch),
            instance_id=req.instance_id,
            rack_id=req.rack_id,
            rebalance_timeout_ms=ms(req.rebalance_timeout),
            subscribed_topic_names=None if names is None else tuple(names),
            subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
            server_assignor=req.server_assignor,
            owned=owned,
            topics=topic_snapshot(ctx.state),
            client_id=ctx.client_id or "",
            client_host=ctx.client_host,
            version=v,
        ),
        [req.group_id],
    )
    if out is None:
        return error_response(v, req, ErrorCode.not_coordinator)
    return _answer(v, out)


SPEC: Final = ApiSpec(
    KEY, 0, 1, handle, error_response, enabled=lambda state: served(state.settings)
)
