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
from ..coordinator import ConsumerGroupDescribeInput
from ._base import INT32_MIN, ZERO, ApiSpec, Context, ec
from .consumer_group_heartbeat import served, topic_snapshot

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.CONSUMER_GROUP_DESCRIBE


def _error_group(mod: Any, group_id: str, code: int, message: str | None = None) -> Any:
    return build(
        mod.DescribedGroup,
        error_code=ec(code),
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
        members=(),
        authorized_operations=INT32_MIN,
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """ConsumerGroupDescribe failing with ``code``: every requested group carries it."""
    mod = response_module(KEY, version)
    return build(
        mod.ConsumerGroupDescribeResponse,
        throttle_time=ZERO,
        groups=tuple(_error_group(mod, g, code, message) for g in request.group_ids),
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
    described: dict[str, Any] = {}
    if mine:
        out: Any = await ctx.group_call(
            ConsumerGroupDescribeInput(tuple(mine), topic_snapshot(ctx.state)), mine
        )
        if out is not None:
            described = {g.group_id: g for g in out.groups}
    groups = []
    for group_id in req.group_ids:
        g = described.get(group_id)
        if g is None:
            groups.append(_error_group(mod, group_id, ctx.coordinator_error(group_id)))
            continue
        if g.error_code != ErrorCode.none:
            groups.append(_error_group(mod, group_id, g.error_code, g.error_message))
            continue
        extra = {"member_type": 1} if v >= 1 else {}
        groups.append(
            build(
                mod.DescribedGroup,
                error_code=ec(ErrorCode.none),
                error_message=None,
                group_id=group_id,
                group_state=g.group_state,
                group_epoch=g.group_epoch,
                assignment_epoch=g.assignment_epoch,
                assignor_name=g.assignor_name,
                members=tuple(
                    build(
                        mod.Member,
                        member_id=m.member_id,
                        instance_id=m.instance_id,
                        rack_id=m.rack_id,
                        member_epoch=m.member_epoch,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=m.subscribed_topic_names,
                        subscribed_topic_regex=m.subscribed_topic_regex,
                        assignment=_assignment(mod, m.assignment),
                        target_assignment=_assignment(mod, m.target_assignment),
                        **extra,
                    )
                    for m in g.members
                ),
                authorized_operations=INT32_MIN,
            )
        )
    return build(mod.ConsumerGroupDescribeResponse, throttle_time=ZERO, groups=tuple(groups))


SPEC: Final = ApiSpec(
    KEY, 0, 1, handle, error_response, enabled=lambda state: served(state.settings)
)
