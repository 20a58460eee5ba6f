"""ConsumerGroupDescribe (key 69): consumer groups (KIP-848), their epochs and members.

Version notes: v0-v1 served, both flexible; v1 adds each member's type
(always 1, a consumer protocol member). Served only with the consumer group
protocol enabled (``group_coordinator_rebalance_protocols``). Groups
coordinated elsewhere are answered NOT_COORDINATOR; an unknown or classic
group GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import ConsumerGroupDescribeInput, DescribedConsumerGroup
from ._base import INT32_MIN, ZERO, ApiSpec, Context, ec, from_output
from .consumer_group_heartbeat import served, topic_snapshot

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.CONSUMER_GROUP_DESCRIBE


def _group(mod: Any, g: DescribedConsumerGroup, member_extra: dict[str, Any]) -> Any:
    """The wire form of a group as the coordinator describes it (or an error)."""
    return from_output(
        mod.DescribedGroup,
        g,
        members=tuple(
            from_output(
                mod.Member,
                m,
                assignment=_assignment(mod, m.assignment),
                target_assignment=_assignment(mod, m.target_assignment),
                **member_extra,
            )
            for m in g.members
        ),
        authorized_operations=INT32_MIN,
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """ConsumerGroupDescribe failing with ``code``: every requested group carries it."""
    mod = response_module(KEY, version)
    return build(
        mod.ConsumerGroupDescribeResponse,
        throttle_time=ZERO,
        groups=tuple(
            _group(mod, DescribedConsumerGroup(g, ec(code), message), {}) for g in request.group_ids
        ),
    )


def _assignment(mod: Any, entries: Any) -> Any:
    return build(
        mod.Assignment,
        topic_partitions=tuple(
            build(mod.TopicPartitions, topic_id=tid, topic_name=name, partitions=parts)
            for tid, name, parts in entries
        ),
    )


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Describe the groups this broker coordinates; the others are NOT_COORDINATOR."""
    mod = response_module(KEY, v)
    if not served(ctx.state.settings):
        return error_response(v, req, ErrorCode.unsupported_version)
    mine = [g for g in req.group_ids if not ctx.not_coordinator(g)]
    described: dict[str, DescribedConsumerGroup] = {}
    if mine:
        out: Any = await ctx.group_call(
            ConsumerGroupDescribeInput(tuple(mine), topic_snapshot(ctx.state)), mine
        )
        if out is not None:
            described = {g.group_id: g for g in out.groups}
    member_extra = {"member_type": 1} if v >= 1 else {}
    groups = []
    for group_id in req.group_ids:
        g = described.get(group_id)
        if g is None:  # coordinated elsewhere, or moved away while parked
            g = DescribedConsumerGroup(group_id, ctx.coordinator_error(group_id))
        groups.append(_group(mod, g, member_extra))
    return build(mod.ConsumerGroupDescribeResponse, throttle_time=ZERO, groups=tuple(groups))


SPEC: Final = ApiSpec(
    KEY, 0, 1, handle, error_response, enabled=lambda state: served(state.settings)
)
